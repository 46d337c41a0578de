//! Number formats and deterministic streams used by the V4.1 reference: bf16/f16 rounding,
//! e4m3fn, e2m1, e8m0, the fp8/fp4 quantise-dequantise round trips, the filler streams and the
//! torch-CPU top-k tie emulation. Pure functions, no I/O (spec §4, §6, §13, §19.3, §21).

pub mod filler;
pub mod float;
pub mod quant;
pub mod topk;

pub use filler::{fixed_int, fixed_raw, fixed_value, fnv1a64, lcg_probe, splitmix64, GOLD};
pub use float::{
    bf16_bits, bf16_round, bf16_to_f32, bf16_ulp_distance, e2m1_decode, e2m1_encode, e4m3_decode,
    e4m3_encode, e8m0_decode, e8m0_encode, f16_round, pow2_ceil,
};
pub use quant::{
    act_quant_fp8_block32, fp4_e4m3_block16_round_trip, fp4_e4m3_block_scale,
    fp4_e8m0_block32_round_trip, fp4_e8m0_block_scale, fp8_block_scale, FP4_E2M1_MAX,
    FP4_E4M3_BLOCK, FP4_E8M0_BLOCK, FP8_BLOCK, FP8_E4M3_MAX,
};
pub use topk::{torch_cpu_topk_order, torch_cpu_topk_set, uses_partial_sort};
