//! The 32-value legacy blocks: Q8_0 (f16 scale + 32 int8) and Q4_0 (f16 scale + 16 bytes of
//! nibbles with an implicit offset of 8), spec §3.2.

use super::f16_at;

/// Bytes per Q8_0 block.
pub const Q8_0_BLOCK_BYTES: usize = 34;
/// Bytes per Q4_0 block.
pub const Q4_0_BLOCK_BYTES: usize = 18;

/// Decodes one Q8_0 block into 32 values: `y = q·d`.
pub fn dequantize_q8_0_block(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (o, &q) in out.iter_mut().zip(&block[2..34]) {
        *o = f32::from(q as i8) * d;
    }
}

/// Decodes one Q4_0 block into 32 values: low nibbles give values 0..16, high nibbles 16..32,
/// each `d·(nibble − 8)`.
pub fn dequantize_q4_0_block(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (j, &q) in block[2..18].iter().enumerate() {
        out[j] = d * f32::from((q & 0x0f) as i8 - 8);
        out[j + 16] = d * f32::from((q >> 4) as i8 - 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_bytes(x: f32) -> [u8; 2] {
        half::f16::from_f32(x).to_bits().to_le_bytes()
    }

    #[test]
    fn q8_0_hand_block() {
        let mut block = [0u8; Q8_0_BLOCK_BYTES];
        block[0..2].copy_from_slice(&f16_bytes(0.5));
        block[2] = 3;
        block[3] = (-4i8) as u8;
        block[33] = 127;
        let mut out = [0f32; 32];
        dequantize_q8_0_block(&block, &mut out);
        assert_eq!(out[0], 1.5);
        assert_eq!(out[1], -2.0);
        assert_eq!(out[2], 0.0);
        assert_eq!(out[31], 63.5);
    }

    #[test]
    fn q4_0_hand_block() {
        let mut block = [0u8; Q4_0_BLOCK_BYTES];
        block[0..2].copy_from_slice(&f16_bytes(2.0));
        block[2] = 0xf0; // low nibble 0 -> -8, high nibble 15 -> 7
        block[3] = 0x98; // low 8 -> 0, high 9 -> 1
        let mut out = [0f32; 32];
        dequantize_q4_0_block(&block, &mut out);
        assert_eq!(out[0], -16.0);
        assert_eq!(out[16], 14.0);
        assert_eq!(out[1], 0.0);
        assert_eq!(out[17], 2.0);
        assert_eq!(out[2], -16.0); // zero byte: both nibbles 0 -> -8
    }
}
