//! Scalar conversions: bf16 / f16 rounding, e4m3fn, e2m1, e8m0 (spec §6, §13.4, §13.5, §21).
//!
//! Every function is pure bit arithmetic on `f32` so the CPU oracle and the WGSL kernels can share
//! one definition. Out-of-range and special inputs follow torch CPU where torch defines them; each
//! function's doc says what happens to 0, subnormals, infinities and NaN.

/// bf16 quiet-NaN bit (the top mantissa bit of the 16-bit pattern).
const BF16_QUIET_BIT: u16 = 0x0040;
/// f32 exponent field mask after shifting right by 23.
const F32_EXP_FIELD: u32 = 0xFF;
/// f32 mantissa mask.
const F32_MANT_MASK: u32 = 0x007F_FFFF;
/// f32 exponent bias.
const F32_EXP_BIAS: i32 = 127;
/// e4m3fn exponent bias.
const E4M3_EXP_BIAS: i32 = 7;
/// e4m3fn NaN code (magnitude bits all ones); the sign bit may be set too.
const E4M3_NAN_CODE: u8 = 0x7F;
/// Smallest normal e4m3fn magnitude, 2^-6.
const E4M3_MIN_NORMAL: f32 = 0.015_625;
/// 2^9: one e4m3fn subnormal step is 2^-9, so `|x| * 2^9` counts subnormal steps.
const E4M3_SUBNORMAL_STEPS_PER_UNIT: f32 = 512.0;
/// The e2m1 magnitudes in code order (code = index, sign in bit 3).
const E2M1_GRID: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
/// e2m1 sign bit inside the 4-bit code.
const E2M1_SIGN_BIT: u8 = 0x8;
/// e8m0 NaN byte.
const E8M0_NAN_CODE: u8 = 0xFF;
/// The f32 mantissa pattern of an exact halfway point between two powers of two (1.5 * 2^e).
const E8M0_HALFWAY_MANT: u32 = 0x0040_0000;

/// 2^e as f32 for an exponent in the normal range [-126, 127].
fn pow2_normal(e: i32) -> f32 {
    debug_assert!((-126..=127).contains(&e));
    f32::from_bits(((e + F32_EXP_BIAS) as u32) << 23)
}

/// f32 -> nearest bf16 (RNE on the bits), returned as the f32 it represents. NaN passes through.
///
/// A NaN stays NaN: its sign and top payload bits are kept and the quiet bit is set, so a NaN
/// whose payload sits only in the low 16 bits cannot turn into an infinity. Overflow rounds to
/// ±inf as RNE does (f32::MAX -> inf).
pub fn bf16_round(x: f32) -> f32 {
    f32::from_bits(u32::from(bf16_bits(x)) << 16)
}

/// The upper 16 bits of `bf16_round(x)`.
pub fn bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | BF16_QUIET_BIT;
    }
    // Adding 0x7FFF plus the lowest kept bit rounds to nearest with ties to even; a carry out of
    // the mantissa correctly bumps the exponent (up to inf). Non-NaN patterns cannot overflow u32.
    let rounded = bits + 0x7FFF + ((bits >> 16) & 1);
    (rounded >> 16) as u16
}

/// A bf16 bit pattern -> the f32 it represents (exact).
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// f32 -> nearest f16 (RNE) as f32.
///
/// Uses the `half` crate's RNE conversion: overflow goes to ±inf, tiny values to f16 subnormals
/// or ±0, NaN stays NaN.
pub fn f16_round(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// Position of a bf16 pattern on the monotone line: sign-magnitude mapped so that larger values
/// get larger keys, with +0 and -0 on the same point.
fn bf16_ordered_key(bits: u16) -> i32 {
    let magnitude = i32::from(bits & 0x7FFF);
    if bits & 0x8000 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// Distance in bf16 ulps between two values (after rounding each to bf16), on the ordered bit line.
///
/// +0 and -0 are 0 apart; the largest finite bf16 is 1 ulp from inf. Two NaNs are 0 apart, a NaN
/// and a non-NaN are `u64::MAX` apart (so any tolerance check fails).
pub fn bf16_ulp_distance(a: f32, b: f32) -> u64 {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => 0,
        (true, false) | (false, true) => u64::MAX,
        (false, false) => {
            let ka = bf16_ordered_key(bf16_bits(a));
            let kb = bf16_ordered_key(bf16_bits(b));
            u64::from(ka.abs_diff(kb))
        }
    }
}

/// 2^ceil(log2(x)) for finite x > 0 computed on the f32 bits (exponent - 127, +1 iff mantissa != 0).
///
/// This is the shim's `fast_log2_ceil`/`fast_pow2` pair, so the edge cases are the bit formula's:
/// the sign is ignored (|x| is used); ±0 gives +0 (the formula yields the all-zero pattern);
/// a subnormal gives 2^-126 (biased exponent 0 reads as -127, +1 for the non-zero mantissa, an
/// upper bound rather than the tight power); x > 2^127 and ±inf give +inf. NaN gives NaN (the
/// shim's integer wrap-around would give -0 there; no caller feeds NaN on purpose).
pub fn pow2_ceil(x: f32) -> f32 {
    if x.is_nan() {
        return f32::NAN;
    }
    let bits = x.to_bits();
    let exp_field = ((bits >> 23) & F32_EXP_FIELD) as i32;
    let mant = bits & F32_MANT_MASK;
    if exp_field == 0 && mant == 0 {
        return 0.0;
    }
    let e = exp_field - F32_EXP_BIAS + i32::from(mant != 0);
    if e > 127 {
        f32::INFINITY
    } else {
        pow2_normal(e.max(-126))
    }
}

/// f32 -> e4m3fn code, RNE, no clamping (callers clamp to ±448); NaN -> 0x7F (sign kept: 0xFF).
///
/// Out of range behaves as torch's cast: a magnitude that rounds above 448 (anything over the
/// 464 midpoint, and ±inf) becomes the NaN code with the input's sign. It does not saturate.
/// Subnormals are `m/8 * 2^-6`; ±0 keeps its sign (0x00 / 0x80).
pub fn e4m3_encode(x: f32) -> u8 {
    let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0x00 };
    let a = x.abs();
    if !a.is_finite() {
        return sign | E4M3_NAN_CODE;
    }
    if a < E4M3_MIN_NORMAL {
        // Subnormal range: scaling by 2^9 is exact, the rounded count of 2^-9 steps is the code
        // (8 steps = 2^-6 = the smallest normal, code 0x08, which is also right).
        let steps = (a * E4M3_SUBNORMAL_STEPS_PER_UNIT).round_ties_even();
        return sign | steps as u8;
    }
    let mut e = ((a.to_bits() >> 23) & F32_EXP_FIELD) as i32 - F32_EXP_BIAS;
    if e > 8 {
        return sign | E4M3_NAN_CODE;
    }
    // a / 2^(e-3) lies in [8, 16) and is exact (a power-of-two scaling in the normal range).
    let mut q = (a * pow2_normal(3 - e)).round_ties_even() as i32;
    if q == 16 {
        e += 1;
        q = 8;
    }
    let code = ((e + E4M3_EXP_BIAS) << 3) | (q - 8);
    if code >= i32::from(E4M3_NAN_CODE) {
        sign | E4M3_NAN_CODE
    } else {
        sign | code as u8
    }
}

/// e4m3fn code -> f32 (0x7F/0xFF -> NaN).
pub fn e4m3_decode(code: u8) -> f32 {
    let magnitude_code = code & 0x7F;
    if magnitude_code == E4M3_NAN_CODE {
        return f32::NAN;
    }
    let e = i32::from(magnitude_code >> 3);
    let m = f32::from(magnitude_code & 0x7);
    let magnitude = if e == 0 {
        m / 8.0 * E4M3_MIN_NORMAL
    } else {
        (1.0 + m / 8.0) * pow2_normal(e - E4M3_EXP_BIAS)
    };
    if code & 0x80 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// |v| rounded to the e2m1 grid {0,.5,1,1.5,2,3,4,6}, ties to the even code, sign kept; input
/// is assumed already clamped to ±6. Returns the 4-bit code (sign bit 3).
///
/// As the shim does: magnitudes above 6 (and ±inf) saturate to 6 (code 7), NaN gives 6 with the
/// NaN's sign bit, and the sign is kept for zero results (-0.2 -> code 0x8, i.e. -0).
pub fn e2m1_encode(v: f32) -> u8 {
    let sign = if v.is_sign_negative() {
        E2M1_SIGN_BIT
    } else {
        0
    };
    let a = v.abs();
    // Index of the largest grid value <= a (NaN and a >= 6 land on the last entry).
    let lo = if a.is_nan() {
        E2M1_GRID.len() - 1
    } else {
        E2M1_GRID.iter().rposition(|&g| g <= a).unwrap_or(0)
    };
    let hi = (lo + 1).min(E2M1_GRID.len() - 1);
    // Both differences are exact in f32 (Sterbenz, or a difference from 0), so comparing them
    // is comparing the true distances.
    let d_lo = a - E2M1_GRID[lo];
    let d_hi = E2M1_GRID[hi] - a;
    let pick_hi = d_hi < d_lo || (d_hi == d_lo && hi % 2 == 0 && lo % 2 == 1);
    sign | if pick_hi { hi as u8 } else { lo as u8 }
}

/// e2m1 4-bit code -> f32.
///
/// Bits above bit 3 are ignored. Code 0x8 decodes to -0.0.
pub fn e2m1_decode(code: u8) -> f32 {
    let magnitude = E2M1_GRID[usize::from(code & 0x7)];
    if code & E2M1_SIGN_BIT != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// torch's f32 -> float8_e8m0fnu cast (spec §13.5): the biased exponent byte (255 = NaN).
///
/// Keep the f32 exponent field and round it up iff the mantissa is above the halfway pattern
/// 0x400000, or exactly halfway and the input is normal (torch treats the implicit leading 1 as
/// the kept LSB, so a normal halfway value such as 1.5 or 3.0 always rounds up). Consequences:
/// the sign is ignored; ±0 and subnormals up to 2^-127 give 0 (2^-127), larger subnormals give
/// 1; ±inf and NaN give 255 (NaN); values that round past 2^127 (above 1.5 * 2^127) give 255 too.
pub fn e8m0_encode(x: f32) -> u8 {
    let bits = x.to_bits();
    let exp_field = (bits >> 23) & F32_EXP_FIELD;
    if exp_field == F32_EXP_FIELD {
        return E8M0_NAN_CODE;
    }
    let mant = bits & F32_MANT_MASK;
    let is_normal = exp_field > 0;
    let round_up = mant > E8M0_HALFWAY_MANT || (mant == E8M0_HALFWAY_MANT && is_normal);
    // exp_field <= 254 here, so +1 fits in a byte (255 is the NaN code).
    (exp_field + u32::from(round_up)) as u8
}

/// e8m0 byte -> 2^(code-127) as f32 (255 -> NaN; 0 -> 2^-127 as f32 subnormal).
pub fn e8m0_decode(code: u8) -> f32 {
    match code {
        E8M0_NAN_CODE => f32::NAN,
        0 => f32::from_bits(E8M0_HALFWAY_MANT),
        _ => f32::from_bits(u32::from(code) << 23),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_round_ties_to_even() {
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: the even pattern (1.0) wins.
        assert_eq!(bf16_round(f32::from_bits(0x3F80_8000)), 1.0);
        // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
        assert_eq!(
            bf16_round(f32::from_bits(0x3F81_8000)).to_bits(),
            0x3F82_0000
        );
        assert_eq!(
            bf16_round(f32::from_bits(0x3F80_8001)).to_bits(),
            0x3F81_0000
        );
        assert_eq!(
            bf16_round(f32::from_bits(0x3F80_7FFF)).to_bits(),
            0x3F80_0000
        );
        assert_eq!(bf16_round(-1.0), -1.0);
    }

    #[test]
    fn bf16_round_special_values() {
        assert!(bf16_round(f32::NAN).is_nan());
        // A NaN with payload only in the low half must stay NaN, not become inf.
        let low_payload_nan = f32::from_bits(0x7F80_0001);
        assert!(low_payload_nan.is_nan());
        assert!(bf16_round(low_payload_nan).is_nan());
        assert_eq!(bf16_bits(low_payload_nan), 0x7FC0);
        assert_eq!(bf16_bits(f32::from_bits(0xFF80_0001)), 0xFFC0);
        assert_eq!(bf16_round(f32::INFINITY), f32::INFINITY);
        assert_eq!(bf16_round(f32::NEG_INFINITY), f32::NEG_INFINITY);
        assert_eq!(bf16_round(f32::MAX), f32::INFINITY);
        // The largest finite bf16 is 0x7F7F; just below the halfway point to inf stays there.
        let bf16_max = bf16_to_f32(0x7F7F);
        assert_eq!(bf16_round(bf16_max), bf16_max);
        assert_eq!(bf16_round(f32::from_bits(0x7F7F_7FFF)), bf16_max);
        assert_eq!(bf16_round(f32::from_bits(0x7F7F_8000)), f32::INFINITY);
        assert_eq!(bf16_bits(-0.0), 0x8000);
    }

    #[test]
    fn ulp_distance_on_ordered_line() {
        assert_eq!(bf16_ulp_distance(1.0, 1.0), 0);
        assert_eq!(bf16_ulp_distance(0.0, -0.0), 0);
        assert_eq!(bf16_ulp_distance(1.0, bf16_to_f32(0x3F81)), 1);
        // Across zero: the smallest positive and negative subnormals are 2 apart.
        assert_eq!(
            bf16_ulp_distance(bf16_to_f32(0x0001), bf16_to_f32(0x8001)),
            2
        );
        assert_eq!(bf16_ulp_distance(bf16_to_f32(0x7F7F), f32::INFINITY), 1);
        assert_eq!(bf16_ulp_distance(f32::NAN, f32::NAN), 0);
        assert_eq!(bf16_ulp_distance(f32::NAN, 1.0), u64::MAX);
    }

    #[test]
    fn pow2_ceil_spot_values() {
        assert_eq!(pow2_ceil(1.0), 1.0);
        assert_eq!(pow2_ceil(1.0001), 2.0);
        assert_eq!(pow2_ceil(0.75), 1.0);
        assert_eq!(pow2_ceil(0.5), 0.5);
        assert_eq!(pow2_ceil(-3.0), 4.0);
        assert_eq!(pow2_ceil(0.0), 0.0);
        assert_eq!(pow2_ceil(f32::from_bits(1)), f32::MIN_POSITIVE);
        assert_eq!(pow2_ceil(f32::MIN_POSITIVE), f32::MIN_POSITIVE);
        assert_eq!(pow2_ceil(f32::MAX), f32::INFINITY);
        assert_eq!(pow2_ceil(f32::INFINITY), f32::INFINITY);
        assert!(pow2_ceil(f32::NAN).is_nan());
    }

    #[test]
    fn e4m3_spot_values() {
        assert_eq!(e4m3_encode(1.0), 0x38);
        assert_eq!(e4m3_encode(1.0625), 0x38);
        assert_eq!(e4m3_encode(1.1875), 0x3A);
        assert_eq!(e4m3_encode(448.0), 0x7E);
        assert_eq!(e4m3_encode(-448.0), 0xFE);
        assert_eq!(e4m3_encode(464.0), 0x7E);
        assert_eq!(e4m3_encode(464.5), 0x7F);
        assert_eq!(e4m3_encode(f32::INFINITY), 0x7F);
        assert_eq!(e4m3_encode(f32::NEG_INFINITY), 0xFF);
        assert_eq!(e4m3_encode(f32::NAN), 0x7F);
        assert_eq!(e4m3_encode(2.0f32.powi(-9)), 0x01);
        assert_eq!(e4m3_encode(2.0f32.powi(-10)), 0x00);
        assert_eq!(e4m3_encode(3.0 * 2.0f32.powi(-10)), 0x02);
        assert_eq!(e4m3_encode(-0.0), 0x80);
        assert_eq!(e4m3_decode(0x01), 2.0f32.powi(-9));
        assert_eq!(e4m3_decode(0x08), 2.0f32.powi(-6));
        assert!(e4m3_decode(0xFF).is_nan());
    }

    #[test]
    fn e2m1_ties_go_to_even_code() {
        let cases: [(f32, f32); 10] = [
            (0.25, 0.0),
            (0.75, 1.0),
            (1.25, 1.0),
            (1.75, 2.0),
            (2.5, 2.0),
            (3.5, 4.0),
            (5.0, 4.0),
            (-1.2, -1.0),
            (7.0, 6.0),
            (5.01, 6.0),
        ];
        for (input, want) in cases {
            assert_eq!(e2m1_decode(e2m1_encode(input)), want, "input {input}");
        }
        assert_eq!(e2m1_encode(-0.2), 0x8);
    }

    #[test]
    fn e8m0_rounding_rule() {
        assert_eq!(e8m0_encode(1.0), 127);
        assert_eq!(e8m0_encode(1.4999999), 127);
        assert_eq!(e8m0_encode(1.5), 128);
        // Normal halfway values round up whatever the exponent's parity.
        assert_eq!(e8m0_encode(3.0), 129);
        assert_eq!(e8m0_encode(-1.0), 127);
        assert_eq!(e8m0_encode(0.0), 0);
        assert_eq!(e8m0_encode(f32::from_bits(0x0040_0000)), 0);
        assert_eq!(e8m0_encode(f32::from_bits(0x0040_0001)), 1);
        assert_eq!(e8m0_encode(f32::INFINITY), 255);
        assert_eq!(e8m0_encode(f32::NAN), 255);
        assert_eq!(e8m0_encode(f32::MAX), 255);
        assert_eq!(e8m0_decode(127), 1.0);
        assert_eq!(e8m0_decode(0), 2.0f32.powi(-127));
        assert!(e8m0_decode(255).is_nan());
    }
}
