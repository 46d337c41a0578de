//! Element-wise types: F32, F16 (IEEE half), BF16 (upper half of an f32) and I8 (plain int8).
//! Conversions are exact; no rounding happens here.

use super::f16_at;

/// Copies little-endian f32 values.
pub fn dequantize_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

/// Widens IEEE half values.
pub fn dequantize_f16(bytes: &[u8], out: &mut [f32]) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = f16_at(bytes, 2 * i);
    }
}

/// Widens bf16 values (the stored 16 bits become the top half of the f32).
pub fn dequantize_bf16(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = bf16_to_f32(u16::from_le_bytes([c[0], c[1]]));
    }
}

/// Converts plain signed bytes.
pub fn dequantize_i8(bytes: &[u8], out: &mut [f32]) {
    for (o, &b) in out.iter_mut().zip(bytes) {
        *o = f32::from(b as i8);
    }
}

/// bf16 bits to f32: the bits are the upper half of the f32.
pub fn bf16_to_f32(bits: u16) -> f32 {
    crate::num::bf16_to_f32(bits)
}

/// Rounds an f32 to the nearest bf16 (ties to even) and returns it as f32 (`num::bf16_round`).
pub fn round_to_bf16(x: f32) -> f32 {
    crate::num::bf16_round(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_types_decode_exactly() {
        let mut out = [0f32; 2];
        dequantize_f32(&[0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0], &mut out);
        assert_eq!(out, [1.0, -2.0]);
        // f16 0x3c00 = 1.0, 0x0001 = 2^-24 (smallest subnormal).
        dequantize_f16(&[0x00, 0x3c, 0x01, 0x00], &mut out);
        assert_eq!(out, [1.0, 2f32.powi(-24)]);
        // bf16 0x3f80 = 1.0, 0xc040 = -3.0.
        dequantize_bf16(&[0x80, 0x3f, 0x40, 0xc0], &mut out);
        assert_eq!(out, [1.0, -3.0]);
        dequantize_i8(&[0x7f, 0x80], &mut out);
        assert_eq!(out, [127.0, -128.0]);
    }

    #[test]
    fn bf16_rounding_is_nearest_even() {
        // 1 + 2^-8 is exactly half-way between bf16 1.0 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(round_to_bf16(1.0 + 2f32.powi(-8)), 1.0);
        // 1 + 3·2^-8 is half-way between 1 + 2^-7 (odd) and 1 + 2^-6: ties to 1 + 2^-6.
        assert_eq!(
            round_to_bf16(1.0 + 3.0 * 2f32.powi(-8)),
            1.0 + 2f32.powi(-6)
        );
        assert_eq!(round_to_bf16(1.0 + 2f32.powi(-9)), 1.0);
        assert!(round_to_bf16(f32::NAN).is_nan());
        assert_eq!(round_to_bf16(f32::INFINITY), f32::INFINITY);
    }
}
