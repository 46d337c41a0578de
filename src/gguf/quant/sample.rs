//! Random but valid blocks of every decodable type (finite scales of moderate size, every code
//! pattern), generated fast and in parallel: inputs for the decoder and GEMM benches and the
//! kernels' bit-identity tests. Deterministic for a given seed.

use super::block_decoder;
use crate::gguf::GgmlType;
use crate::num::splitmix64;
use rayon::prelude::*;

/// Bytes generated per rayon task.
const SAMPLE_CHUNK: usize = 1 << 16;

/// A finite f16 scale between 2^-10 and 2^-4 (either sign), from random bits.
fn f16_scale(r: u64) -> [u8; 2] {
    let sign = ((r >> 20) & 1) as u16;
    let exp = 5 + (r % 7) as u16; // biased exponent 5..=11: 2^-10 .. 2^-4
    let man = ((r >> 8) & 0x3ff) as u16;
    ((sign << 15) | (exp << 10) | man).to_le_bytes()
}

/// Offsets of the f16 scales inside one block of `ty` (none for element-wise types and MXFP4).
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Iq2Xxs => &[0],
        GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        GgmlType::Q6K => &[208],
        _ => &[],
    }
}

/// `n_blocks` random valid blocks of `ty` (`None` for a type without a decoder).
pub fn random_blocks(ty: GgmlType, n_blocks: usize, seed: u64) -> Option<Vec<u8>> {
    let (_, block_bytes, _) = block_decoder(ty)?;
    let len = n_blocks.checked_mul(block_bytes)?;
    let mut out = vec![0u8; len];
    out.par_chunks_mut(SAMPLE_CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let base = (c * SAMPLE_CHUNK) as u64;
            for (i, b) in chunk.iter_mut().enumerate() {
                *b = (splitmix64(seed ^ (base + i as u64).wrapping_mul(0x9e37_79b9)) >> 32) as u8;
            }
        });
    match ty {
        GgmlType::F32 => out.par_chunks_mut(4).enumerate().for_each(|(i, v)| {
            let r = splitmix64(seed ^ i as u64);
            let x = ((r >> 40) as f32 / 8_388_608.0 - 1.0) * 4.0;
            v.copy_from_slice(&x.to_le_bytes());
        }),
        GgmlType::F16 => out
            .par_chunks_mut(2)
            .enumerate()
            .for_each(|(i, v)| v.copy_from_slice(&f16_scale(splitmix64(seed ^ i as u64)))),
        // bf16: clear the top exponent bit, so no value is infinite or NaN.
        GgmlType::Bf16 => out.par_chunks_mut(2).for_each(|v| v[1] &= 0xbf),
        GgmlType::Mxfp4 => out
            .par_chunks_mut(block_bytes)
            .for_each(|b| b[0] = 118 + b[0] % 16),
        _ => {
            let offsets = scale_offsets(ty);
            out.par_chunks_mut(block_bytes)
                .enumerate()
                .for_each(|(i, b)| {
                    for (j, &o) in offsets.iter().enumerate() {
                        let r = splitmix64(seed ^ ((i as u64) << 2 | j as u64));
                        b[o..o + 2].copy_from_slice(&f16_scale(r));
                    }
                });
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_decode_to_finite_values_and_depend_on_the_seed() {
        use GgmlType::*;
        for ty in [
            F32, F16, Bf16, I8, Q8_0, Q4_0, Q2K, Q3K, Q4K, Q5K, Q6K, Iq2Xxs, Mxfp4,
        ] {
            let (bv, _, decode) = block_decoder(ty).expect("decoder");
            let n = 256 / bv.min(256) * 4;
            let a = random_blocks(ty, n, 1).expect("blocks");
            let mut out = vec![0f32; n * bv];
            decode(&a, &mut out);
            assert!(out.iter().all(|v| v.is_finite()), "{}", ty.name());
            assert!(out.iter().any(|&v| v != 0.0), "{}", ty.name());
            assert_ne!(a, random_blocks(ty, n, 2).expect("blocks"), "{}", ty.name());
        }
        assert!(random_blocks(GgmlType::Iq4Xs, 1, 0).is_none());
    }
}
