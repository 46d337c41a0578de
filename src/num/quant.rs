//! In-place quantise-dequantise round trips with the shim semantics (spec §13.1-§13.3).
//! Slices whose length is not a multiple of the block size are handled block by block with a
//! ragged last block.
//!
//! All arithmetic is f32 as in the shim: one f32 division `amax / max` for the scale, one f32
//! division `x / s` per element, one f32 product `q * s`, then one bf16 rounding. A NaN anywhere
//! in a block makes the block's amax NaN (torch's `amax` propagates NaN), so the whole block
//! comes back NaN.

use super::float::{bf16_round, e2m1_decode, e2m1_encode, e4m3_decode, e4m3_encode, pow2_ceil};

/// Largest finite e4m3fn magnitude; the fp8 quantiser clamps `x / s` to ±this.
pub const FP8_E4M3_MAX: f32 = 448.0;
/// Largest e2m1 magnitude; the fp4 quantisers clamp `x / s` to ±this.
pub const FP4_E2M1_MAX: f32 = 6.0;
/// Elements per scale of the fp8 window-KV quantiser.
pub const FP8_BLOCK: usize = 32;
/// Elements per scale of the fp4 index quantiser (e8m0 scales).
pub const FP4_E8M0_BLOCK: usize = 32;
/// Elements per scale of the fp4 compressed-latent quantiser (e4m3 scales).
pub const FP4_E4M3_BLOCK: usize = 16;
/// Floor of the fp8 block amax, so an all-zero block gets a finite scale.
const FP8_AMAX_FLOOR: f32 = 1e-4;
/// Floor of the fp4/e8m0 block amax: 6 * 2^-126, so amax / 6 is at least the smallest normal.
const FP4_E8M0_AMAX_FLOOR: f32 = 6.0 * f32::MIN_POSITIVE;
/// Floor of the fp4/e4m3 block amax: 6 * 2^-9, so amax / 6 is at least the smallest e4m3 step.
const FP4_E4M3_AMAX_FLOOR: f32 = 6.0 / 512.0;

/// max |x| over a block, NaN if any element is NaN (torch `amax` semantics).
fn block_amax(block: &[f32]) -> f32 {
    block.iter().fold(0.0f32, |acc, &v| {
        if acc.is_nan() || v.is_nan() {
            f32::NAN
        } else {
            acc.max(v.abs())
        }
    })
}

/// torch `clamp_min`: NaN stays NaN.
fn clamp_min_nan_keeping(x: f32, floor: f32) -> f32 {
    if x.is_nan() {
        x
    } else {
        x.max(floor)
    }
}

/// The fp8 block scale for a block whose max |x| is `amax`: `pow2_ceil(max(amax, 1e-4) / 448)`.
pub fn fp8_block_scale(amax: f32) -> f32 {
    pow2_ceil(clamp_min_nan_keeping(amax, FP8_AMAX_FLOOR) / FP8_E4M3_MAX)
}

/// The fp4 e8m0 block scale: `pow2_ceil(max(amax, 6*2^-126) / 6)`.
pub fn fp4_e8m0_block_scale(amax: f32) -> f32 {
    pow2_ceil(clamp_min_nan_keeping(amax, FP4_E8M0_AMAX_FLOOR) / FP4_E2M1_MAX)
}

/// The fp4 e4m3 block scale: `e4m3(max(amax, 6*2^-9) / 6)` as f32.
///
/// As torch's cast, an `amax / 6` that rounds above 448 (amax beyond ~2784) gives a NaN scale.
pub fn fp4_e4m3_block_scale(amax: f32) -> f32 {
    e4m3_decode(e4m3_encode(
        clamp_min_nan_keeping(amax, FP4_E4M3_AMAX_FLOOR) / FP4_E2M1_MAX,
    ))
}

/// e2m1 quantise-dequantise of every element of `block` with scale `s`, result bf16.
fn e2m1_round_trip_block(block: &mut [f32], s: f32) {
    for v in block.iter_mut() {
        let q = e2m1_decode(e2m1_encode((*v / s).clamp(-FP4_E2M1_MAX, FP4_E2M1_MAX)));
        *v = bf16_round(q * s);
    }
}

/// fp8 e4m3 `act_quant` with ue8m0 (pow2-ceil) scales per block of 32; result bf16-rounded.
pub fn act_quant_fp8_block32(x: &mut [f32]) {
    for block in x.chunks_mut(FP8_BLOCK) {
        let s = fp8_block_scale(block_amax(block));
        for v in block.iter_mut() {
            let q = e4m3_decode(e4m3_encode((*v / s).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)));
            *v = bf16_round(q * s);
        }
    }
}

/// fp4 e2m1 with e8m0 (pow2-ceil) scales per block of 32 (index q / index k); result bf16.
pub fn fp4_e8m0_block32_round_trip(x: &mut [f32]) {
    for block in x.chunks_mut(FP4_E8M0_BLOCK) {
        let s = fp4_e8m0_block_scale(block_amax(block));
        e2m1_round_trip_block(block, s);
    }
}

/// fp4 e2m1 with e4m3 scales per block of 16 (compressed KV latent); result bf16.
pub fn fp4_e4m3_block16_round_trip(x: &mut [f32]) {
    for block in x.chunks_mut(FP4_E4M3_BLOCK) {
        let s = fp4_e4m3_block_scale(block_amax(block));
        e2m1_round_trip_block(block, s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_scale_is_pow2_ceiling_of_amax_over_448() {
        assert_eq!(fp8_block_scale(448.0), 1.0);
        assert_eq!(fp8_block_scale(449.0), 2.0);
        assert_eq!(fp8_block_scale(0.0), pow2_ceil(1e-4 / 448.0));
        assert!(fp8_block_scale(f32::NAN).is_nan());
    }

    #[test]
    fn fp8_block_round_trip_values() {
        // amax 3 -> s = 2^ceil(log2(3/448)) = 2^-7; 3 / 2^-7 = 384 is exact in e4m3.
        let mut x = [3.0f32, 1.0, -0.01, 0.0];
        act_quant_fp8_block32(&mut x);
        assert_eq!(x[0], 3.0);
        assert_eq!(x[1], 1.0);
        // -0.01 / 2^-7 = -1.28 -> e4m3 -1.25 -> -1.25 * 2^-7.
        assert_eq!(x[2], -1.25 / 128.0);
        assert_eq!(x[3], 0.0);
    }

    #[test]
    fn fp4_e8m0_round_trip_values() {
        // amax 6 -> s = 1, values go straight to the e2m1 grid.
        let mut x = [6.0f32, 0.25, 0.75, 2.5, -5.0, 1.74];
        fp4_e8m0_block32_round_trip(&mut x);
        assert_eq!(x, [6.0, 0.0, 1.0, 2.0, -4.0, 1.5]);
    }

    #[test]
    fn fp4_e4m3_scale_is_rounded_through_e4m3() {
        // amax 1.3 -> 1.3/6 = 0.21666.. -> e4m3 0.21875 (1.75 * 2^-3).
        assert_eq!(fp4_e4m3_block_scale(1.3), 0.218_75);
        assert_eq!(fp4_e4m3_block_scale(0.0), 2.0f32.powi(-9));
    }

    #[test]
    fn ragged_last_block_uses_its_own_scale() {
        let mut x = vec![100.0f32; 33];
        x[32] = 1.0;
        act_quant_fp8_block32(&mut x);
        // The lone last element forms its own block with amax 1, so it comes back exact.
        assert_eq!(x[32], 1.0);
        assert_eq!(x[0], 96.0);
    }
}
