//! A 2-D parameter as its file stores it (GGML blocks, f16, bf16, ...), for kernels that multiply
//! block by block instead of first materialising an f32 copy. Decoding a chunk gives exactly the
//! values [`super::WeightSource::tensor`] would return for it (the same decoder, then the same
//! bf16 rounding), so a GEMM over a stored matrix has the bits of one over its f32 copy.

use super::weights::WeightError;
use crate::gguf::quant::{block_decoder, block_decoder_bf16, BlockDecoder};
use crate::gguf::GgmlType;
use std::borrow::Cow;

/// `rows × cols` values in one GGML type, row-major (each row a whole number of blocks).
pub struct StoredMatrix<'a> {
    ggml_type: GgmlType,
    rows: usize,
    cols: usize,
    block_values: usize,
    block_bytes: usize,
    row_bytes: usize,
    decoder: BlockDecoder,
    bytes: Cow<'a, [u8]>,
    round_bf16: bool,
}

impl std::fmt::Debug for StoredMatrix<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredMatrix")
            .field("ggml_type", &self.ggml_type)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("bytes", &self.bytes.len())
            .field("round_bf16", &self.round_bf16)
            .finish()
    }
}

impl<'a> StoredMatrix<'a> {
    /// Wraps `bytes` as parameter `name`: checks that the type has a decoder, that `cols` is a
    /// whole number of its blocks and that `bytes` is exactly `rows` such rows long. With
    /// `round_bf16` every decoded value is rounded to bf16 (the reference stores it in bf16).
    pub fn new(
        name: &str,
        ggml_type: GgmlType,
        rows: usize,
        cols: usize,
        bytes: Cow<'a, [u8]>,
        round_bf16: bool,
    ) -> Result<StoredMatrix<'a>, WeightError> {
        let invalid = |msg: String| WeightError::Invalid {
            name: name.to_string(),
            msg,
        };
        let no_decoder = || invalid(format!("no block decoder for {}", ggml_type.name()));
        let (block_values, block_bytes, plain) = block_decoder(ggml_type).ok_or_else(no_decoder)?;
        // Rounding parameters decode through the fused decoder (the same bits as decoding, then
        // `num::bf16_round` on every value).
        let decoder = if round_bf16 {
            block_decoder_bf16(ggml_type).ok_or_else(no_decoder)?
        } else {
            plain
        };
        if cols == 0 || cols % block_values != 0 {
            return Err(invalid(format!(
                "{cols} columns is not a positive multiple of the {} block size {block_values}",
                ggml_type.name()
            )));
        }
        let row_bytes = (cols / block_values)
            .checked_mul(block_bytes)
            .ok_or_else(|| invalid(format!("a row of {cols} values overflows")))?;
        let expected = rows
            .checked_mul(row_bytes)
            .ok_or_else(|| invalid(format!("{rows} rows of {row_bytes} bytes overflow")))?;
        if bytes.len() != expected {
            return Err(invalid(format!(
                "{} bytes of {}; expected {expected} ({rows} rows of {row_bytes} bytes)",
                bytes.len(),
                ggml_type.name()
            )));
        }
        Ok(StoredMatrix {
            ggml_type,
            rows,
            cols,
            block_values,
            block_bytes,
            row_bytes,
            decoder,
            bytes,
            round_bf16,
        })
    }

    pub fn ggml_type(&self) -> GgmlType {
        self.ggml_type
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Values per block: chunk starts and lengths passed to [`StoredMatrix::decode`] are
    /// multiples of it.
    pub fn block_values(&self) -> usize {
        self.block_values
    }

    /// Whether decoded values are rounded to bf16.
    pub fn rounds_to_bf16(&self) -> bool {
        self.round_bf16
    }

    /// The bytes of rows `rows` (consecutive, `2 × cols` each) when the matrix is BF16
    /// (little-endian bit patterns), for kernels that widen them in registers: bf16 to f32 is a
    /// 16-bit shift, and rounding a bf16 value to bf16 only quiets a NaN, which widening to f64
    /// does anyway, so the f64 values equal those of [`StoredMatrix::decode`]. `None` for any
    /// other type or rows outside the matrix.
    pub fn bf16_rows(&self, rows: std::ops::Range<usize>) -> Option<&[u8]> {
        (self.ggml_type == GgmlType::Bf16 && rows.start <= rows.end && rows.end <= self.rows)
            .then(|| &self.bytes[rows.start * self.row_bytes..rows.end * self.row_bytes])
    }

    /// The stored bytes of rows `rows` (consecutive, whole rows of blocks), without the
    /// prefetch [`StoredMatrix::blocks`] issues: for kernels that walk a panel of rows chunk
    /// by chunk and prefetch on their own schedule. `None` for rows outside the matrix.
    pub fn rows_bytes(&self, rows: std::ops::Range<usize>) -> Option<&[u8]> {
        (rows.start <= rows.end && rows.end <= self.rows)
            .then(|| &self.bytes[rows.start * self.row_bytes..rows.end * self.row_bytes])
    }

    /// The stored bytes (what a GEMM over this matrix reads).
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// Decodes values `col0..col0 + out.len()` of row `row` into `out`. `col0` and `out.len()`
    /// must be multiples of [`StoredMatrix::block_values`] inside the row (callers are kernels
    /// that chunk rows by a multiple of every block size).
    pub fn decode(&self, row: usize, col0: usize, out: &mut [f32]) {
        let bytes = self.blocks(row, col0, out.len());
        (self.decoder)(bytes, out);
    }

    /// The stored bytes of values `col0..col0 + len` of row `row` (whole blocks), for kernels
    /// that read the blocks themselves, and a prefetch of the row's next chunk (GEMMs read a
    /// dozen rows a chunk at a time). `col0` and `len` must be multiples of
    /// [`StoredMatrix::block_values`] inside the row.
    pub fn blocks(&self, row: usize, col0: usize, len: usize) -> &[u8] {
        assert!(
            row < self.rows
                && col0 % self.block_values == 0
                && len % self.block_values == 0
                && col0 + len <= self.cols,
            "blocks of row {row} columns {col0}..{} outside a {}x{} {} matrix",
            col0 + len,
            self.rows,
            self.cols,
            self.ggml_type.name()
        );
        let start = row * self.row_bytes + col0 / self.block_values * self.block_bytes;
        let len = len / self.block_values * self.block_bytes;
        let row_end = (row + 1) * self.row_bytes;
        let next = (start + len).min(row_end)..(start + 2 * len).min(row_end);
        crate::gguf::quant::rows::prefetch(&self.bytes[next]);
        &self.bytes[start..start + len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::num::bf16_round;

    #[test]
    fn sizes_are_checked_and_chunks_decode_like_the_whole_row() {
        // Q8_0: 34 bytes per 32 values; 2 rows of 64.
        let mut bytes = vec![0u8; 2 * 2 * 34];
        for (b, block) in bytes.chunks_mut(34).enumerate() {
            block[..2]
                .copy_from_slice(&half::f16::from_f32(0.5 + b as f32).to_bits().to_le_bytes());
            for (j, q) in block[2..].iter_mut().enumerate() {
                *q = (j as i8 - 16 + b as i8) as u8;
            }
        }
        let m = StoredMatrix::new("w", GgmlType::Q8_0, 2, 64, Cow::Borrowed(&bytes), false)
            .expect("valid");
        let mut whole = vec![0f32; 2 * 64];
        crate::gguf::quant::dequantize(GgmlType::Q8_0, &bytes, &mut whole).expect("dequantize");
        let mut chunk = vec![0f32; 32];
        m.decode(1, 32, &mut chunk);
        assert_eq!(chunk, whole[64 + 32..]);
        assert!(StoredMatrix::new(
            "w",
            GgmlType::Q8_0,
            2,
            64,
            Cow::Borrowed(&bytes[1..]),
            false
        )
        .is_err());
        assert!(
            StoredMatrix::new("w", GgmlType::Q8_0, 2, 48, Cow::Borrowed(&bytes), false).is_err()
        );
        assert!(
            StoredMatrix::new("w", GgmlType::Iq4Xs, 1, 256, Cow::Borrowed(&bytes), false).is_err()
        );
        assert!(StoredMatrix::new(
            "w",
            GgmlType::Q8_0,
            usize::MAX,
            64,
            Cow::Borrowed(&bytes),
            false
        )
        .is_err());
    }

    #[test]
    fn bf16_rounding_matches_the_tensor_path() {
        // F32 storage of a value that is not bf16-representable.
        let v = 1.0f32 + 2f32.powi(-10);
        let bytes: Vec<u8> = v.to_le_bytes().repeat(4);
        let m =
            StoredMatrix::new("w", GgmlType::F32, 1, 4, Cow::Owned(bytes), true).expect("valid");
        let mut out = [0f32; 4];
        m.decode(0, 0, &mut out);
        assert_eq!(out, [bf16_round(v); 4]);
    }
}
