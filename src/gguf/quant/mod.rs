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
    half::f16::from_bits(u16::from_le_bytes([bytes[offset], bytes[offset + 1]])).to_f32()
}

/// Reads the little-endian u32 at `offset`.
pub(crate) fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes([
        bytes[offset],
        bytes[offset + 1],
        bytes[offset + 2],
        bytes[offset + 3],
    ])
}

/// Dequantizes `out.len()` values of type `ty` from `bytes`. `out.len()` must be a whole number
/// of blocks and `bytes` exactly that many blocks long; otherwise (or for a type without a
/// decoder) an error says what was expected.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
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
    let block_fn: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => {
            float::dequantize_f32(bytes, out);
            return Ok(());
        }
        GgmlType::F16 => {
            float::dequantize_f16(bytes, out);
            return Ok(());
        }
        GgmlType::Bf16 => {
            float::dequantize_bf16(bytes, out);
            return Ok(());
        }
        GgmlType::I8 => {
            float::dequantize_i8(bytes, out);
            return Ok(());
        }
        GgmlType::Q8_0 => legacy::dequantize_q8_0_block,
        GgmlType::Q4_0 => legacy::dequantize_q4_0_block,
        GgmlType::Q2K => kquants::dequantize_q2_k_block,
        GgmlType::Q3K => kquants::dequantize_q3_k_block,
        GgmlType::Q4K => kquants::dequantize_q4_k_block,
        GgmlType::Q5K => kquants::dequantize_q5_k_block,
        GgmlType::Q6K => kquants::dequantize_q6_k_block,
        GgmlType::Iq2Xxs => iq2xxs::dequantize_block,
        GgmlType::Mxfp4 => mxfp4::dequantize_block,
        _ => return Err(err("no decoder for this type".into())),
    };
    for (src, dst) in bytes
        .chunks_exact(block_bytes)
        .zip(out.chunks_exact_mut(block_values))
    {
        block_fn(src, dst);
    }
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
