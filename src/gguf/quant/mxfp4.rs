//! MXFP4 (ggml type 39): 32 E2M1 values sharing one E8M0 exponent, 17 bytes per block. ggml
//! stores the E2M1 values doubled and halves the scale, so `y = 2^(e−128) · kvalue` (spec §3.2).

/// Bytes per MXFP4 block.
pub const BLOCK_BYTES: usize = 17;

/// E2M1 code to twice its value: codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 (doubled), 8..15 negative.
pub(crate) const KVALUES_DOUBLED: [i8; 16] =
    [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// `2^(e − 128)` as f32, exact for every byte (e = 0 and 1 give subnormals, 255 gives 2^127).
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// Decodes one block into 32 values: low nibbles are values 0..16, high nibbles 16..32.
pub fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = e8m0_to_f32_half(block[0]);
    for (j, &q) in block[1..17].iter().enumerate() {
        out[j] = d * f32::from(KVALUES_DOUBLED[(q & 0x0f) as usize]);
        out[j + 16] = d * f32::from(KVALUES_DOUBLED[(q >> 4) as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_half_covers_the_subnormal_ends() {
        assert_eq!(e8m0_to_f32_half(128), 1.0);
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_to_f32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32_half(255), 2f32.powi(127));
    }

    #[test]
    fn hand_block() {
        let mut block = [0u8; BLOCK_BYTES];
        block[0] = 129; // d = 2
        block[1] = 0xf7; // low 7 -> 12, high 15 -> -12
        block[2] = 0x91; // low 1 -> 1, high 9 -> -1
        let mut out = [0f32; 32];
        dequantize_block(&block, &mut out);
        assert_eq!(out[0], 24.0);
        assert_eq!(out[16], -24.0);
        assert_eq!(out[1], 2.0);
        assert_eq!(out[17], -2.0);
        assert_eq!(out[2], 0.0);
    }
}
