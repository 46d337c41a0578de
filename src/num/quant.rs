//! In-place quantise-dequantise round trips with the shim semantics (spec §13.1-§13.3).
//! SIGNATURES FIXED; bodies to be implemented. Slices whose length is not a multiple of the
//! block size are handled block by block with a ragged last block.

/// fp8 e4m3 `act_quant` with ue8m0 (pow2-ceil) scales per block of 32; result bf16-rounded.
pub fn act_quant_fp8_block32(x: &mut [f32]) { todo!() }
/// fp4 e2m1 with e8m0 (pow2-ceil) scales per block of 32 (index q / index k); result bf16.
pub fn fp4_e8m0_block32_round_trip(x: &mut [f32]) { todo!() }
/// fp4 e2m1 with e4m3 scales per block of 16 (compressed KV latent); result bf16.
pub fn fp4_e4m3_block16_round_trip(x: &mut [f32]) { todo!() }
