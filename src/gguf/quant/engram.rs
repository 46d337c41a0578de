//! Engram row encodings (spec §2). Rows of the real files hold 256 values; the encoding string in
//! `deepseek41.engram.encoding` (or, in the llama.cpp dialect, the tensor's own GGML type) says
//! how a row is stored. Tiny test files use the e4m3 scheme generalised to their head dim:
//! `e4m3_e8m0_32_row{B}` with `B = hd + hd/32` (hd FP8 codes, then one E8M0 scale per 32).

use super::float::round_to_bf16;
use super::kquants::dequantize_q4_k_block;
use super::GgmlType;
use crate::gguf::error::{GgufError, Result};

/// Values in one engram row (the engram head dimension).
pub const ENGRAM_ROW_VALUES: usize = 256;

/// The Lloyd-Max codebook of `lloyd4_e5m3_32_r136` (hard-coded by the encoding's name).
const LLOYD4_CODEBOOK: [f32; 8] = [0.0, 0.095, 0.1901, 0.2944, 0.4126, 0.5586, 0.7484, 1.0];

/// How engram rows are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngramEncoding {
    /// antirez files: 256 FP8 E4M3 codes + 8 E8M0 scales (one per 32 values), 264 bytes.
    E4m3E8m0Row264,
    /// The same scheme for another head dim (tiny files): `values` E4M3 codes, then
    /// `values / 32` E8M0 scales; named `e4m3_e8m0_32_row{values + values/32}`.
    E4m3E8m0Row { values: u32 },
    /// ishikawa fork: one standard Q4_K block per row, 144 bytes.
    Q4KRow144,
    /// lloyd4 fork: 256 signed 3-bit codebook indices in nibbles + 8 E5M3 scales, 136 bytes.
    Lloyd4E5m3Row136,
    /// llama.cpp dialect: the table is an ordinary GGML tensor of this type ("follow the rung").
    Ggml(GgmlType),
}

impl serde::Serialize for EngramEncoding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl EngramEncoding {
    /// Parses the `deepseek41.engram.encoding` string.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "e4m3_e8m0_32_row264" => Some(Self::E4m3E8m0Row264),
            "q4_k_row144" => Some(Self::Q4KRow144),
            "lloyd4_e5m3_32_r136" => Some(Self::Lloyd4E5m3Row136),
            other => {
                // e4m3_e8m0_32_row{B}: B = hd + hd/32 = 33·hd/32, hd a positive multiple of 32.
                let digits = other.strip_prefix("e4m3_e8m0_32_row")?;
                if digits.is_empty()
                    || digits.len() > 9
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return None;
                }
                let bytes: u32 = digits.parse().ok()?;
                if bytes % 33 != 0 {
                    return None;
                }
                Self::e4m3_with_values(bytes / 33 * 32)
            }
        }
    }

    /// The e4m3/e8m0 encoding for rows of `values` values: the ds4 variant for 256, the
    /// generalised one for any other positive multiple of 32 whose row size fits a u32, and
    /// `None` otherwise (one E8M0 scale covers exactly 32 codes, so no other width is a row).
    pub fn e4m3_with_values(values: u32) -> Option<Self> {
        let fits = values > 0 && values % 32 == 0 && values.checked_add(values / 32).is_some();
        match values {
            _ if !fits => None,
            v if v == ENGRAM_ROW_VALUES as u32 => Some(Self::E4m3E8m0Row264),
            v => Some(Self::E4m3E8m0Row { values: v }),
        }
    }

    /// Whether the encoding describes a decodable row: the generalised e4m3 rows need a
    /// positive multiple of 32 values (the variant's field is public, so a value built by hand
    /// is checked here rather than trusted).
    pub fn is_well_formed(&self) -> bool {
        match self {
            Self::E4m3E8m0Row { values } => Self::e4m3_with_values(*values).is_some(),
            _ => true,
        }
    }

    /// Values per row the encoding itself fixes (`None` for GGML-typed tables, whose width is
    /// the engram head dim).
    pub fn fixed_row_values(&self) -> Option<u64> {
        match self {
            Self::E4m3E8m0Row264 | Self::Q4KRow144 | Self::Lloyd4E5m3Row136 => {
                Some(ENGRAM_ROW_VALUES as u64)
            }
            Self::E4m3E8m0Row { values } => Some(u64::from(*values)),
            Self::Ggml(_) => None,
        }
    }

    /// Values per row for a table of engram head dim `head_dim`.
    pub fn row_values(&self, head_dim: u64) -> u64 {
        self.fixed_row_values().unwrap_or(head_dim)
    }

    /// Bytes of one stored row when rows hold `head_dim` values.
    pub fn row_bytes_for(&self, head_dim: u64) -> Option<u64> {
        match self {
            Self::E4m3E8m0Row { .. } => self.bytes_per_row(),
            Self::Ggml(t) => t.row_bytes(head_dim),
            _ => self.bytes_per_row(),
        }
    }

    /// GGML type and ne0 of the table tensor when rows hold `head_dim` values.
    pub fn tensor_layout_for(&self, head_dim: u64) -> (GgmlType, u64) {
        match self {
            Self::E4m3E8m0Row { values } => {
                let v = u64::from(*values);
                (GgmlType::I8, v + v / 32)
            }
            Self::Ggml(t) => (*t, head_dim),
            _ => self.tensor_layout(),
        }
    }

    /// The encoding string (`ggml:<TYPE>` for the llama.cpp dialect).
    pub fn name(&self) -> String {
        match self {
            Self::E4m3E8m0Row264 => "e4m3_e8m0_32_row264".into(),
            Self::E4m3E8m0Row { values } => {
                let v = u64::from(*values);
                format!("e4m3_e8m0_32_row{}", v + v / 32)
            }
            Self::Q4KRow144 => "q4_k_row144".into(),
            Self::Lloyd4E5m3Row136 => "lloyd4_e5m3_32_r136".into(),
            Self::Ggml(t) => format!("ggml:{t}"),
        }
    }

    /// Bytes of one stored 256-value row, or `None` for a GGML type without a known size.
    pub fn bytes_per_row(&self) -> Option<u64> {
        match self {
            Self::E4m3E8m0Row264 => Some(264),
            Self::E4m3E8m0Row { values } if self.is_well_formed() => {
                let v = u64::from(*values);
                Some(v + v / 32)
            }
            Self::E4m3E8m0Row { .. } => None,
            Self::Q4KRow144 => Some(144),
            Self::Lloyd4E5m3Row136 => Some(136),
            Self::Ggml(t) => t.row_bytes(ENGRAM_ROW_VALUES as u64),
        }
    }

    /// GGML type and ne0 the table tensor must have in the file (256-value rows).
    pub fn tensor_layout(&self) -> (GgmlType, u64) {
        match self {
            Self::E4m3E8m0Row264 => (GgmlType::I8, 264),
            Self::E4m3E8m0Row { values } => {
                let v = u64::from(*values);
                (GgmlType::I8, v + v / 32)
            }
            Self::Q4KRow144 => (GgmlType::Q4K, ENGRAM_ROW_VALUES as u64),
            Self::Lloyd4E5m3Row136 => (GgmlType::I8, 136),
            Self::Ggml(t) => (*t, ENGRAM_ROW_VALUES as u64),
        }
    }
}

/// Decodes FP8 E4M3 (bias 7, no infinities, 0x7f/0xff are NaN) exactly to f32.
pub fn e4m3_to_f32(code: u8) -> f32 {
    crate::num::e4m3_decode(code)
}

/// `2^(s − 127)` for an E8M0 scale byte below 255 (exact; s = 0 is the subnormal 2^-127).
pub fn e8m0_to_f32(s: u8) -> f32 {
    crate::num::e8m0_decode(s)
}

/// The E5M3 scale byte of `lloyd4_e5m3_32_r136`: `(8 + M)/16 · 2^(E − 16)`.
fn e5m3_scale(b: u8) -> f32 {
    let e = i32::from(b >> 3);
    let m = f32::from(b & 7);
    (8.0 + m) / 16.0 * 2f32.powi(e - 16)
}

fn quant_error(encoding: &EngramEncoding, problem: String) -> GgufError {
    GgufError::Quant {
        ggml_type: encoding.name(),
        problem,
    }
}

/// Decodes whole rows: `bytes` holds `out.len() / 256` rows of `encoding`. The e4m3 and lloyd4
/// results are rounded to bf16 (as ds4 does, to match the bf16 reference); Q4_K and GGML-typed
/// rows are the plain dequantization.
pub fn dequantize_engram_rows(
    encoding: &EngramEncoding,
    bytes: &[u8],
    out: &mut [f32],
) -> Result<()> {
    let values = encoding.row_values(ENGRAM_ROW_VALUES as u64) as usize;
    dequantize_engram_rows_with(encoding, values, bytes, out)
}

/// [`dequantize_engram_rows`] for rows of `row_values` values (the engram head dim): `bytes`
/// holds `out.len() / row_values` rows. Encodings with a fixed width refuse any other width.
pub fn dequantize_engram_rows_with(
    encoding: &EngramEncoding,
    row_values: usize,
    bytes: &[u8],
    out: &mut [f32],
) -> Result<()> {
    if row_values == 0
        || !encoding.is_well_formed()
        || encoding
            .fixed_row_values()
            .is_some_and(|v| v != row_values as u64)
    {
        return Err(quant_error(
            encoding,
            format!("rows of {row_values} values do not fit this encoding"),
        ));
    }
    let row_bytes = encoding
        .row_bytes_for(row_values as u64)
        .ok_or_else(|| quant_error(encoding, "row size unknown".into()))?
        as usize;
    if out.len() % row_values != 0 || bytes.len() != out.len() / row_values * row_bytes {
        return Err(quant_error(
            encoding,
            format!(
                "{} bytes for {} values; expected {} bytes per {}-value row",
                bytes.len(),
                out.len(),
                row_bytes,
                row_values
            ),
        ));
    }
    for (row, (src, dst)) in bytes
        .chunks_exact(row_bytes)
        .zip(out.chunks_exact_mut(row_values))
        .enumerate()
    {
        match encoding {
            EngramEncoding::E4m3E8m0Row264 | EngramEncoding::E4m3E8m0Row { .. } => {
                for (j, o) in dst.iter_mut().enumerate() {
                    let code = src[j];
                    let scale = src[row_values + j / 32];
                    if code & 0x7f == 0x7f {
                        return Err(quant_error(
                            encoding,
                            format!("row {row} value {j}: E4M3 code {code:#04x} is NaN"),
                        ));
                    }
                    if scale == 255 {
                        return Err(quant_error(
                            encoding,
                            format!("row {row} scale {}: E8M0 byte 255 is NaN", j / 32),
                        ));
                    }
                    *o = round_to_bf16(e4m3_to_f32(code) * e8m0_to_f32(scale));
                }
            }
            EngramEncoding::Lloyd4E5m3Row136 => {
                for (j, o) in dst.iter_mut().enumerate() {
                    let nibble = (src[j / 2] >> (4 * (j % 2))) & 0x0f;
                    let magnitude =
                        LLOYD4_CODEBOOK[usize::from(nibble & 7)] * e5m3_scale(src[128 + j / 32]);
                    *o = round_to_bf16(if nibble & 8 != 0 {
                        -magnitude
                    } else {
                        magnitude
                    });
                }
            }
            EngramEncoding::Q4KRow144 => dequantize_q4_k_block(src, dst),
            EngramEncoding::Ggml(t) => super::dequantize(*t, src, dst)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_decode_matches_the_format() {
        assert_eq!(e4m3_to_f32(0x38), 1.0); // exp 7, mant 0
        assert_eq!(e4m3_to_f32(0x7e), 448.0); // largest finite
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9)); // smallest subnormal
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6)); // smallest normal
        assert_eq!(e4m3_to_f32(0xb4), -0.75); // sign, exp 6, mant 4: 1.5 * 2^-1
        assert!(e4m3_to_f32(0x80).is_sign_negative());
        assert!(e4m3_to_f32(0xff).is_nan());
    }

    #[test]
    fn row264_hand_row() {
        let mut row = [0u8; 264];
        row[0] = 0x38; // 1.0
        row[1] = 0xc0; // -2.0
        row[32] = 0x3c; // 1.5
        row[256] = 127; // scale 1 for values 0..32
        row[257] = 130; // scale 8 for values 32..64
        row[263] = 0; // scale 2^-127 for values 224..256
        row[224] = 0x7e; // 448 * 2^-127
        let mut out = [0f32; 256];
        dequantize_engram_rows(&EngramEncoding::E4m3E8m0Row264, &row, &mut out).unwrap();
        assert_eq!(out[0], 1.0);
        assert_eq!(out[1], -2.0);
        assert_eq!(out[32], 12.0);
        assert_eq!(out[224], 448.0 * 2f32.powi(-127));
        row[5] = 0x7f;
        let err = dequantize_engram_rows(&EngramEncoding::E4m3E8m0Row264, &row, &mut out);
        assert!(err.unwrap_err().to_string().contains("NaN"));
        row[5] = 0;
        row[258] = 255;
        assert!(dequantize_engram_rows(&EngramEncoding::E4m3E8m0Row264, &row, &mut out).is_err());
    }

    #[test]
    fn lloyd4_hand_row() {
        let mut row = [0u8; 136];
        row[0] = 0x9f; // value 0: nibble 0xf -> -1.0; value 1: nibble 9 -> -0.095
        row[1] = 0x08; // value 2: nibble 8 -> -0.0
        row[128] = 16 << 3; // E = 16, M = 0 -> scale 0.5
        let mut out = [0f32; 256];
        dequantize_engram_rows(&EngramEncoding::Lloyd4E5m3Row136, &row, &mut out).unwrap();
        assert_eq!(out[0], -0.5);
        assert_eq!(out[1], round_to_bf16(-0.095f32 * 0.5));
        assert!(out[2] == 0.0 && out[2].is_sign_negative());
        // scale byte 0 -> 0.5 * 2^-16; the second group uses it.
        assert_eq!(e5m3_scale(0), 2f32.powi(-17));
        assert_eq!(e5m3_scale(0xff), 15.0 / 16.0 * 2f32.powi(15));
    }

    #[test]
    fn generalised_e4m3_rows() {
        let enc = EngramEncoding::from_name("e4m3_e8m0_32_row33").unwrap();
        assert_eq!(enc, EngramEncoding::E4m3E8m0Row { values: 32 });
        assert_eq!(enc.name(), "e4m3_e8m0_32_row33");
        assert_eq!(
            EngramEncoding::from_name("e4m3_e8m0_32_row264"),
            Some(EngramEncoding::E4m3E8m0Row264)
        );
        for bad in [
            "e4m3_e8m0_32_row",
            "e4m3_e8m0_32_row32",
            "e4m3_e8m0_32_row0",
            "e4m3_e8m0_32_row+33",
        ] {
            assert_eq!(EngramEncoding::from_name(bad), None, "{bad}");
        }
        assert_eq!(enc.tensor_layout_for(32), (GgmlType::I8, 33));
        let mut rows = [0u8; 66];
        rows[0] = 0x38; // 1.0
        rows[32] = 128; // scale 2
        rows[33 + 1] = 0xc0; // -2.0
        rows[33 + 32] = 126; // scale 0.5
        let mut out = [0f32; 64];
        dequantize_engram_rows_with(&enc, 32, &rows, &mut out).unwrap();
        assert_eq!((out[0], out[32 + 1]), (2.0, -1.0));
        assert!(dequantize_engram_rows_with(&enc, 64, &rows, &mut [0f32; 64]).is_err());
        assert!(dequantize_engram_rows_with(&enc, 32, &rows[..65], &mut out).is_err());
        let ggml = EngramEncoding::Ggml(GgmlType::F32);
        assert_eq!(ggml.row_bytes_for(32), Some(128));
        let mut one = [0f32; 32];
        dequantize_engram_rows_with(&ggml, 32, &[0u8; 128], &mut one).unwrap();
    }

    #[test]
    fn lengths_are_checked() {
        let mut out = [0f32; 256];
        let short = [0u8; 100];
        assert!(dequantize_engram_rows(&EngramEncoding::Q4KRow144, &short, &mut out).is_err());
    }
}
