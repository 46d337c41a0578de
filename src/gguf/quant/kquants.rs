//! The k-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K: 256-value super-blocks with per-group scales
//! (spec §3.2). Each function follows ggml's reference arithmetic order, unfused, so results are
//! bit-identical to gguf-py's `dequantize`.

use super::f16_at;

/// Bytes per Q2_K block.
pub const Q2_K_BLOCK_BYTES: usize = 84;
/// Bytes per Q3_K block.
pub const Q3_K_BLOCK_BYTES: usize = 110;
/// Bytes per Q4_K block.
pub const Q4_K_BLOCK_BYTES: usize = 144;
/// Bytes per Q5_K block.
pub const Q5_K_BLOCK_BYTES: usize = 176;
/// Bytes per Q6_K block.
pub const Q6_K_BLOCK_BYTES: usize = 210;

/// Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin. Value
/// `y = h·128 + s·32 + l` (half h, shift step s, l < 32) takes bits `2s..2s+1` of `qs[32h + l]`
/// and belongs to group `y / 16`.
pub fn dequantize_q2_k_block(block: &[u8], out: &mut [f32]) {
    let scales = &block[0..16];
    let qs = &block[16..80];
    let d = f16_at(block, 80);
    let dmin = f16_at(block, 82);
    for (y, o) in out.iter_mut().enumerate().take(256) {
        let (h, s, l) = (y / 128, (y / 32) % 4, y % 32);
        let q = (qs[32 * h + l] >> (2 * s)) & 3;
        let sc = scales[y / 16];
        let dl = d * f32::from(sc & 0x0f);
        let ml = dmin * f32::from(sc >> 4);
        *o = dl * f32::from(q) - ml;
    }
}

/// The sixteen 6-bit Q3_K scales (already offset by −32).
pub(crate) fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = if i < 8 { s[i] & 0x0f } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

/// Q3_K: hmask[32], qs[64], scales[12], d. Same walk as Q2_K for the two low bits; the high bit
/// of value `y` is bit `4h + s` of `hmask[l]`, and a clear bit subtracts 4.
pub fn dequantize_q3_k_block(block: &[u8], out: &mut [f32]) {
    let hmask = &block[0..32];
    let qs = &block[32..96];
    let scales = q3_k_scales(&block[96..108]);
    let d = f16_at(block, 108);
    for (y, o) in out.iter_mut().enumerate().take(256) {
        let (h, s, l) = (y / 128, (y / 32) % 4, y % 32);
        let low = ((qs[32 * h + l] >> (2 * s)) & 3) as i8;
        let high_set = (hmask[l] >> (4 * h + s)) & 1 == 1;
        let q = if high_set { low } else { low - 4 };
        let dl = d * f32::from(scales[y / 16]);
        *o = dl * f32::from(q);
    }
}

/// Q4_K/Q5_K 6-bit scale and min of group `j` (ggml `get_scale_min_k4`).
pub fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Q4_K: d, dmin, scales[12], qs[128]. Chunk c (64 values) reads `qs[32c..32c+32]`: low nibbles
/// are group 2c, high nibbles group 2c+1; `y = d·sc·q − dmin·m`.
pub fn dequantize_q4_k_block(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let dmin = f16_at(block, 2);
    let scales = &block[4..16];
    let qs = &block[16..144];
    for g in 0..8 {
        let (sc, m) = scale_min_k4(g, scales);
        let d1 = d * f32::from(sc);
        let m1 = dmin * f32::from(m);
        let (c, shift) = (g / 2, 4 * (g % 2));
        for l in 0..32 {
            let q = (qs[32 * c + l] >> shift) & 0x0f;
            out[32 * g + l] = d1 * f32::from(q) - m1;
        }
    }
}

/// Q5_K: as Q4_K plus `qh[32]` before `qs`; bit g of `qh[l]` adds 16 to value l of group g.
pub fn dequantize_q5_k_block(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let dmin = f16_at(block, 2);
    let scales = &block[4..16];
    let qh = &block[16..48];
    let qs = &block[48..176];
    for g in 0..8 {
        let (sc, m) = scale_min_k4(g, scales);
        let d1 = d * f32::from(sc);
        let m1 = dmin * f32::from(m);
        let (c, shift) = (g / 2, 4 * (g % 2));
        for l in 0..32 {
            let q = ((qs[32 * c + l] >> shift) & 0x0f) | (((qh[l] >> g) & 1) << 4);
            out[32 * g + l] = d1 * f32::from(q) - m1;
        }
    }
}

/// Q6_K: ql[128], qh[64], scales i8[16], d. In half h, value r (0..128) takes the nibble
/// `r / 64` of `ql[64h + r % 64]` and bits `2(r / 32)..` of `qh[32h + r % 32]`, minus 32;
/// `y = d·sc·q` with the scale of group `y / 16`.
pub fn dequantize_q6_k_block(block: &[u8], out: &mut [f32]) {
    let ql = &block[0..128];
    let qh = &block[128..192];
    let scales = &block[192..208];
    let d = f16_at(block, 208);
    for (y, o) in out.iter_mut().enumerate().take(256) {
        let (h, r) = (y / 128, y % 128);
        let low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
        let high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        let q = (low | (high << 4)) as i8 - 32;
        let sc = scales[y / 16] as i8;
        *o = d * f32::from(sc) * f32::from(q);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_bytes(x: f32) -> [u8; 2] {
        half::f16::from_f32(x).to_bits().to_le_bytes()
    }

    #[test]
    fn q2_k_hand_block() {
        let mut b = [0u8; Q2_K_BLOCK_BYTES];
        b[0] = 0x12; // group 0: scale 2, min 1
        b[2] = 0x03; // group 2 (values 32..48): scale 3, min 0
        b[16] = 0b0000_0111; // qs[0]: shift 0 -> 3, shift 2 -> 1
        b[80..82].copy_from_slice(&f16_bytes(0.5));
        b[82..84].copy_from_slice(&f16_bytes(0.25));
        let mut out = [0f32; 256];
        dequantize_q2_k_block(&b, &mut out);
        assert_eq!(out[0], 0.5 * 2.0 * 3.0 - 0.25); // 2.75
        assert_eq!(out[1], -0.25); // q = 0
        assert_eq!(out[32], 0.5 * 3.0 * 1.0); // value 32 = shift step 1 of qs[0]
        assert_eq!(out[255], 0.0);
    }

    #[test]
    fn q3_k_hand_block() {
        let mut b = [0u8; Q3_K_BLOCK_BYTES];
        b[0] = 0b0000_0001; // hmask[0] bit 0 set: value 0 has no -4
        b[32] = 0b0000_0010; // qs[0]: value 0 low bits 2, value 32 low bits 0
                             // scale 0: low nibble 1, high bits 2 (s[8] bits 0..1) -> 33 -> +1
        b[96] = 0x01;
        b[104] = 0x02;
        b[108..110].copy_from_slice(&f16_bytes(2.0));
        let mut out = [0f32; 256];
        dequantize_q3_k_block(&b, &mut out);
        assert_eq!(out[0], 2.0 * 1.0 * 2.0);
        assert_eq!(out[1], 2.0 * 1.0 * -4.0); // low 0, high bit clear
                                              // group 2 scale: low nibble 0, high 0 -> -32; value 32: low 0, hmask bit 1 clear -> -4
        assert_eq!(out[32], 2.0 * -32.0 * -4.0);
    }

    #[test]
    fn q4_k_scale_min_unpacking() {
        let mut s = [0u8; 12];
        s[0] = 0b1100_0101; // sc0 = 5, top bits 3 -> sc4 high
        s[4] = 0b0100_0110; // m0 = 6, top bits 1 -> m4 high
        s[8] = 0x9a; // sc4 low 0xa, m4 low 0x9
        assert_eq!(scale_min_k4(0, &s), (5, 6));
        assert_eq!(scale_min_k4(4, &s), (0x0a | (3 << 4), 0x09 | (1 << 4)));
    }

    #[test]
    fn q4_k_and_q5_k_hand_blocks() {
        let mut b = [0u8; Q4_K_BLOCK_BYTES];
        b[0..2].copy_from_slice(&f16_bytes(0.5));
        b[2..4].copy_from_slice(&f16_bytes(1.0));
        b[4] = 4; // group 0 scale 4
        b[5] = 2; // group 1 scale 2
        b[8] = 1; // group 0 min 1
        b[16] = 0x3f; // value 0 (group 0) nibble 15, value 32 (group 1) nibble 3
        let mut out = [0f32; 256];
        dequantize_q4_k_block(&b, &mut out);
        assert_eq!(out[0], 0.5 * 4.0 * 15.0 - 1.0);
        assert_eq!(out[32], 0.5 * 2.0 * 3.0);
        assert_eq!(out[1], -1.0);

        let mut b5 = [0u8; Q5_K_BLOCK_BYTES];
        b5[..16].copy_from_slice(&b[..16]);
        b5[16] = 0b0000_0011; // qh[0]: +16 for value 0 of groups 0 and 1
        b5[48] = 0x3f;
        dequantize_q5_k_block(&b5, &mut out);
        assert_eq!(out[0], 0.5 * 4.0 * 31.0 - 1.0);
        assert_eq!(out[32], 0.5 * 2.0 * 19.0);
        assert_eq!(out[1], -1.0);
    }

    #[test]
    fn q6_k_hand_block() {
        let mut b = [0u8; Q6_K_BLOCK_BYTES];
        b[0] = 0x21; // value 0 low nibble 1, value 64 low nibble 2
        b[128] = 0b1110_0110; // value 0 high 2, value 32 high 1, value 64 high 2, value 96 high 3
        b[192] = 3; // group 0 scale 3
        b[194] = (-1i8) as u8; // group 2 (values 32..48) scale -1
        b[196] = 2; // group 4 (values 64..80) scale 2
        b[198] = 1; // group 6 (values 96..112)
        b[208..210].copy_from_slice(&f16_bytes(0.5));
        let mut out = [0f32; 256];
        dequantize_q6_k_block(&b, &mut out);
        assert_eq!(out[0], 0.5 * 3.0 * ((1 | (2 << 4)) - 32) as f32); // 1.5
        assert_eq!(out[32], -0.5 * ((1 << 4) - 32) as f32); // 8
        assert_eq!(out[64], 0.5 * 2.0 * ((2 | (2 << 4)) - 32) as f32); // 2
        assert_eq!(out[96], 0.5 * 1.0 * ((3 << 4) - 32) as f32); // 8
        assert_eq!(out[1], 0.5 * 3.0 * -32.0);
    }
}
