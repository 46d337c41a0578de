//! Scalar conversions: bf16 / f16 rounding, e4m3fn, e2m1, e8m0 (spec §6, §13.4, §13.5, §21).
//! SIGNATURES FIXED; bodies to be implemented.

/// f32 -> nearest bf16 (RNE on the bits), returned as the f32 it represents. NaN passes through.
pub fn bf16_round(x: f32) -> f32 { todo!() }
/// The upper 16 bits of `bf16_round(x)`.
pub fn bf16_bits(x: f32) -> u16 { todo!() }
/// f32 -> nearest f16 (RNE) as f32.
pub fn f16_round(x: f32) -> f32 { todo!() }
/// Distance in bf16 ulps between two values (after rounding each to bf16), on the ordered bit line.
pub fn bf16_ulp_distance(a: f32, b: f32) -> u64 { todo!() }
/// 2^ceil(log2(x)) for finite x > 0 computed on the f32 bits (exponent - 127, +1 iff mantissa != 0).
pub fn pow2_ceil(x: f32) -> f32 { todo!() }
/// f32 -> e4m3fn code, RNE, no clamping (callers clamp to ±448); NaN -> 0x7F (sign kept: 0xFF).
pub fn e4m3_encode(x: f32) -> u8 { todo!() }
/// e4m3fn code -> f32 (0x7F/0xFF -> NaN).
pub fn e4m3_decode(code: u8) -> f32 { todo!() }
/// |v| rounded to the e2m1 grid {0,.5,1,1.5,2,3,4,6}, ties to the even code, sign kept; input
/// is assumed already clamped to ±6. Returns the 4-bit code (sign bit 3).
pub fn e2m1_encode(v: f32) -> u8 { todo!() }
/// e2m1 4-bit code -> f32.
pub fn e2m1_decode(code: u8) -> f32 { todo!() }
/// torch's f32 -> float8_e8m0fnu cast (spec §13.5): the biased exponent byte (255 = NaN).
pub fn e8m0_encode(x: f32) -> u8 { todo!() }
/// e8m0 byte -> 2^(code-127) as f32 (255 -> NaN; 0 -> 2^-127 as f32 subnormal).
pub fn e8m0_decode(code: u8) -> f32 { todo!() }
