//! Dequantization of GGML block formats and engram row encodings to f32, one file per block
//! family. All functions are pure and follow ggml's reference arithmetic order (unfused), so
//! they agree bit for bit with gguf-py's `gguf.quants.dequantize`.

pub mod encode;
pub mod engram;
pub mod float;
pub mod iq2xxs;
pub mod kquants;
pub mod legacy;
pub mod mxfp4;
pub mod rows;
pub mod sample;

use super::error::{GgufError, Result};
use super::ggml_type::GgmlType;

pub use engram::{
    dequantize_engram_rows, dequantize_engram_rows_with, e4m3_to_f32, e8m0_to_f32, EngramEncoding,
    ENGRAM_ROW_VALUES,
};
pub use float::{bf16_to_f32, round_to_bf16};

/// Reads the little-endian IEEE half at `offset` as f32. Callers pass slices whose length was
/// checked against the block size.
pub(crate) fn f16_at(bytes: &[u8], offset: usize) -> f32 {
    half::f16::from_bits(u16_at(bytes, offset)).to_f32()
}

/// Reads the little-endian u16 at `offset`: one range check and one 16-bit load, as
/// [`u32_at`] (two indexed byte reads compiled to two loads and a merge in the direct GEMM
/// kernels' scale reads).
pub(crate) fn u16_at(bytes: &[u8], offset: usize) -> u16 {
    let word: [u8; 2] = bytes[offset..offset + 2]
        .try_into()
        .expect("a range of two bytes");
    u16::from_le_bytes(word)
}

/// Reads the little-endian u32 at `offset`: one range check and one 32-bit load (four indexed
/// byte reads were vectorized by LLVM into byte gathers in a loop over blocks, 3.5% of Q2_K's
/// m = 1 GEMM time in `x86_direct::panel_finite`).
pub(crate) fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    let word: [u8; 4] = bytes[offset..offset + 4]
        .try_into()
        .expect("a range of four bytes");
    u32::from_le_bytes(word)
}

/// Decodes a whole number of blocks of one type: `bytes` holds `n` blocks and `out` receives
/// their `n × block_values` values (callers check the lengths; extra bytes or values are left
/// alone).
pub type BlockDecoder = fn(&[u8], &mut [f32]);

/// Decodes consecutive blocks with a per-block function.
macro_rules! block_rows {
    ($name:ident, $block_fn:path, $values:expr, $bytes:expr) => {
        fn $name(bytes: &[u8], out: &mut [f32]) {
            for (src, dst) in bytes
                .chunks_exact($bytes)
                .zip(out.chunks_exact_mut($values))
            {
                $block_fn(src, dst);
            }
        }
    };
}

block_rows!(
    q8_0_rows,
    legacy::dequantize_q8_0_block,
    32,
    legacy::Q8_0_BLOCK_BYTES
);
block_rows!(
    q4_0_rows,
    legacy::dequantize_q4_0_block,
    32,
    legacy::Q4_0_BLOCK_BYTES
);
block_rows!(
    q2_k_rows,
    kquants::dequantize_q2_k_block,
    256,
    kquants::Q2_K_BLOCK_BYTES
);
block_rows!(
    q3_k_rows,
    kquants::dequantize_q3_k_block,
    256,
    kquants::Q3_K_BLOCK_BYTES
);
block_rows!(
    q4_k_rows,
    kquants::dequantize_q4_k_block,
    256,
    kquants::Q4_K_BLOCK_BYTES
);
block_rows!(
    q5_k_rows,
    kquants::dequantize_q5_k_block,
    256,
    kquants::Q5_K_BLOCK_BYTES
);
block_rows!(
    q6_k_rows,
    kquants::dequantize_q6_k_block,
    256,
    kquants::Q6_K_BLOCK_BYTES
);
block_rows!(
    iq2_xxs_rows,
    iq2xxs::dequantize_block,
    256,
    iq2xxs::BLOCK_BYTES
);
block_rows!(mxfp4_rows, mxfp4::dequantize_block, 32, mxfp4::BLOCK_BYTES);

/// `(values per block, bytes per block, decoder)` of a type golden-lens can decode: the fast
/// row decoders of [`rows`] (vectorized, chosen by the CPU), bit-identical to the reference.
pub fn block_decoder(ty: GgmlType) -> Option<(usize, usize, BlockDecoder)> {
    let decode: BlockDecoder = match ty {
        GgmlType::F32 => rows::f32_rows,
        GgmlType::F16 => rows::f16,
        GgmlType::Bf16 => rows::bf16,
        GgmlType::I8 => rows::i8_rows,
        GgmlType::Q8_0 => rows::q8_0,
        GgmlType::Q4_0 => rows::q4_0,
        GgmlType::Q2K => rows::q2_k,
        GgmlType::Q3K => rows::q3_k,
        GgmlType::Q4K => rows::q4_k,
        GgmlType::Q5K => rows::q5_k,
        GgmlType::Q6K => rows::q6_k,
        GgmlType::Iq2Xxs => rows::iq2_xxs,
        GgmlType::Mxfp4 => rows::mxfp4,
        _ => return None,
    };
    let (values, bytes) = ty.block_layout()?;
    Some((values, bytes, decode))
}

/// The decoder of `ty` whose values come out rounded to bf16 (nearest even, as
/// `num::bf16_round`): `block_decoder` and a rounding pass fused, for parameters the reference
/// holds in bf16.
pub fn block_decoder_bf16(ty: GgmlType) -> Option<BlockDecoder> {
    let decode: BlockDecoder = match ty {
        GgmlType::F32 => rows::f32_rows_bf16,
        GgmlType::F16 => rows::f16_bf16,
        GgmlType::Bf16 => rows::bf16_bf16,
        GgmlType::I8 => rows::i8_rows_bf16,
        GgmlType::Q8_0 => rows::q8_0_bf16,
        GgmlType::Q4_0 => rows::q4_0_bf16,
        GgmlType::Q2K => rows::q2_k_bf16,
        GgmlType::Q3K => rows::q3_k_bf16,
        GgmlType::Q4K => rows::q4_k_bf16,
        GgmlType::Q5K => rows::q5_k_bf16,
        GgmlType::Q6K => rows::q6_k_bf16,
        GgmlType::Iq2Xxs => rows::iq2_xxs_bf16,
        GgmlType::Mxfp4 => rows::mxfp4_bf16,
        _ => return None,
    };
    Some(decode)
}

/// The reference decoders: one block at a time, written as ggml's reference loops (what
/// gguf-py was checked against). Benches and tests compare the fast decoders with them.
pub fn reference_block_decoder(ty: GgmlType) -> Option<(usize, usize, BlockDecoder)> {
    let decode: BlockDecoder = match ty {
        GgmlType::F32 => float::dequantize_f32,
        GgmlType::F16 => float::dequantize_f16,
        GgmlType::Bf16 => float::dequantize_bf16,
        GgmlType::I8 => float::dequantize_i8,
        GgmlType::Q8_0 => q8_0_rows,
        GgmlType::Q4_0 => q4_0_rows,
        GgmlType::Q2K => q2_k_rows,
        GgmlType::Q3K => q3_k_rows,
        GgmlType::Q4K => q4_k_rows,
        GgmlType::Q5K => q5_k_rows,
        GgmlType::Q6K => q6_k_rows,
        GgmlType::Iq2Xxs => iq2_xxs_rows,
        GgmlType::Mxfp4 => mxfp4_rows,
        _ => return None,
    };
    let (values, bytes) = ty.block_layout()?;
    Some((values, bytes, decode))
}

/// Dequantizes `out.len()` values of type `ty` from `bytes`. `out.len()` must be a whole number
/// of blocks and `bytes` exactly that many blocks long; otherwise (or for a type without a
/// decoder) an error says what was expected.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    dequantize_with(ty, bytes, out, block_decoder)
}

/// [`dequantize`] with the reference decoders.
pub fn dequantize_reference(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    dequantize_with(ty, bytes, out, reference_block_decoder)
}

fn dequantize_with(
    ty: GgmlType,
    bytes: &[u8],
    out: &mut [f32],
    decoder: fn(GgmlType) -> Option<(usize, usize, BlockDecoder)>,
) -> Result<()> {
    let err = |problem: String| GgufError::Quant {
        ggml_type: ty.name(),
        problem,
    };
    let (block_values, block_bytes) = ty
        .block_layout()
        .ok_or_else(|| err("unknown block size".into()))?;
    if !ty.is_dequantizable() {
        return Err(err("no decoder for this type".into()));
    }
    if out.len() % block_values != 0 {
        return Err(err(format!(
            "{} values is not a multiple of the block size {block_values}",
            out.len()
        )));
    }
    let n_blocks = out.len() / block_values;
    let expected = n_blocks
        .checked_mul(block_bytes)
        .ok_or_else(|| err("size overflows".into()))?;
    if bytes.len() != expected {
        return Err(err(format!(
            "{} bytes for {} values; expected {expected} ({n_blocks} blocks of {block_bytes} bytes)",
            bytes.len(),
            out.len()
        )));
    }
    let (_, _, decode) = decoder(ty).ok_or_else(|| err("no decoder for this type".into()))?;
    decode(bytes, out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_checked_not_trusted() {
        let mut out = [0f32; 32];
        let e = dequantize(GgmlType::Q8_0, &[0u8; 33], &mut out).unwrap_err();
        assert!(e.to_string().contains("expected 34"), "{e}");
        let mut odd = [0f32; 31];
        assert!(dequantize(GgmlType::Q8_0, &[0u8; 34], &mut odd).is_err());
        assert!(dequantize(GgmlType::Iq4Xs, &[0u8; 136], &mut [0f32; 256]).is_err());
        assert!(dequantize(GgmlType::Unknown(77), &[], &mut []).is_err());
        dequantize(GgmlType::Q8_0, &[0u8; 34], &mut out).unwrap();
    }
}
