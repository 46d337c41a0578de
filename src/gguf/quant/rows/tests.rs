//! Every row decoder variant (each SIMD level, plain and bf16-rounded) against the per-block
//! reference decoder on random blocks of every type, NaN and infinite scales included.

use super::super::{block_decoder, block_decoder_bf16, dequantize_reference};
use super::{cap_simd_level, detected_simd_level, SimdLevel};
use crate::gguf::GgmlType;

/// A deterministic byte stream.
fn bytes(len: usize, salt: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (crate::num::splitmix64(i ^ salt.wrapping_mul(0x9e37)) >> 24) as u8)
        .collect()
}

#[test]
fn slice_rounding_is_bf16_round_on_every_class_of_value() {
    let v: Vec<f32> = (0..1u32 << 16)
        .map(|i| f32::from_bits(i.wrapping_mul(0x9e37_79b9) ^ (i << 7)))
        .chain([
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::MIN,
            f32::MAX,
            0.0,
            -0.0,
        ])
        .chain([f32::from_bits(0x7f80_0001), f32::from_bits(0xffff_ffff)])
        .collect();
    let want: Vec<u32> = v
        .iter()
        .map(|&x| crate::num::bf16_round(x).to_bits())
        .collect();
    for level in [SimdLevel::Baseline, SimdLevel::Avx2] {
        if level > detected_simd_level() {
            continue;
        }
        cap_simd_level(Some(level));
        let mut got = v.clone();
        super::round_to_bf16_in_place(&mut got);
        cap_simd_level(None);
        let got: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
        assert_eq!(got, want, "{}", level.name());
    }
}

#[test]
fn fast_rows_equal_the_reference_block_decoders_bit_for_bit() {
    use GgmlType::*;
    for ty in [
        F32, F16, Bf16, I8, Q8_0, Q4_0, Q2K, Q3K, Q4K, Q5K, Q6K, Iq2Xxs, Mxfp4,
    ] {
        let (bv, bb, fast) = block_decoder(ty).expect("decoder");
        // Random bytes: scales take every f16 pattern, NaN and infinity included. An odd
        // block count exercises the f16 tail.
        let n_blocks = 4096 / bv.max(1) * 3 + 1;
        let src = bytes(n_blocks * bb, ty.id() as u64);
        let mut want = vec![0f32; n_blocks * bv];
        dequantize_reference(ty, &src, &mut want).expect("reference");
        let want_rounded: Vec<f32> = want.iter().map(|&v| crate::num::bf16_round(v)).collect();
        let rounded = block_decoder_bf16(ty).expect("rounding decoder");
        for (level, decode, want) in [SimdLevel::Baseline, SimdLevel::Avx2, SimdLevel::Avx512]
            .into_iter()
            .flat_map(|l| [(l, fast, &want), (l, rounded, &want_rounded)])
        {
            if level > detected_simd_level() {
                continue;
            }
            cap_simd_level(Some(level));
            let mut got = vec![1f32; n_blocks * bv];
            decode(&src, &mut got);
            cap_simd_level(None);
            let differ = want
                .iter()
                .zip(&got)
                .position(|(a, b)| a.to_bits() != b.to_bits());
            assert_eq!(
                differ,
                None,
                "{} at {}: first differing value",
                ty.name(),
                level.name()
            );
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn streaming_f16_rows_equal_the_reference_at_every_alignment() {
    // The streaming decoder runs on outputs of F16_STREAM_MIN_BYTES and more; here it is called
    // directly on short rows that start at every f32 offset of a 64-byte line, with tails of
    // every length, so the aligned head, the streamed body and the tail all run.
    assert_eq!(
        detected_simd_level(),
        SimdLevel::Avx512,
        "this machine's kind has AVX-512; the streaming F16 decoder needs it"
    );
    let values = 16 * 40 + 15;
    let src = bytes(2 * values, 0x16);
    let mut want = vec![0f32; values];
    dequantize_reference(GgmlType::F16, &src, &mut want).expect("reference");
    for offset in 0..16 {
        for len in [0, 1, 15, 16, 17, 33, values - offset] {
            let mut buf = vec![1f32; offset + len];
            // SAFETY: the level check above says the CPU has AVX-512 F, AVX2 and F16C.
            unsafe { super::x86::f16_avx512_streaming(&src[..2 * len], &mut buf[offset..]) };
            let differ = want[..len]
                .iter()
                .zip(&buf[offset..])
                .position(|(a, b)| a.to_bits() != b.to_bits());
            assert_eq!(differ, None, "offset {offset}, {len} values");
        }
    }
}
