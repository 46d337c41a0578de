//! One tensor of an imported dump: its name, element type, shape and where its bytes are. Bytes
//! are read (bounded by what the header already checked against the file) only when the
//! tensor's values are asked for.

use super::error::ImportError;
use crate::num::float::{bf16_to_f32, e4m3_decode};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The element types the readers understand (the safetensors names; `.npy` descrs map onto
/// them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    Bool,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F16,
    BF16,
    F32,
    F64,
    F8E4M3,
}

/// Every dtype name [`DType::parse`] accepts, for error messages.
pub const DTYPE_NAMES: &str =
    "BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64, F8_E4M3";

impl DType {
    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 | DType::F8E4M3 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// The safetensors spelling (`BF16`, `F8_E4M3`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "BOOL",
            DType::U8 => "U8",
            DType::I8 => "I8",
            DType::U16 => "U16",
            DType::I16 => "I16",
            DType::U32 => "U32",
            DType::I32 => "I32",
            DType::U64 => "U64",
            DType::I64 => "I64",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::F32 => "F32",
            DType::F64 => "F64",
            DType::F8E4M3 => "F8_E4M3",
        }
    }

    /// A dtype by its safetensors name, case-insensitive; `None` for anything else.
    pub fn parse(name: &str) -> Option<DType> {
        let all = [
            DType::Bool,
            DType::U8,
            DType::I8,
            DType::U16,
            DType::I16,
            DType::U32,
            DType::I32,
            DType::U64,
            DType::I64,
            DType::F16,
            DType::BF16,
            DType::F32,
            DType::F64,
            DType::F8E4M3,
        ];
        all.into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(name))
    }

    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 | DType::F8E4M3
        )
    }
}

/// Byte order of the stored elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endian {
    Little,
    Big,
}

/// Where a tensor's bytes are.
#[derive(Clone)]
pub(crate) enum Bytes {
    /// A range of a memory-mapped file, already checked to lie inside the map.
    Mapped {
        map: Arc<memmap2::Mmap>,
        offset: usize,
        len: usize,
    },
    /// A member of a zip archive (`.npz`): `skip` header bytes, then `len` data bytes.
    ZipMember {
        archive: PathBuf,
        index: usize,
        skip: u64,
        len: usize,
    },
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bytes::Mapped { offset, len, .. } => write!(f, "mapped[{offset}..+{len}]"),
            Bytes::ZipMember {
                index, skip, len, ..
            } => write!(f, "zip member {index} [{skip}..+{len}]"),
        }
    }
}

/// One tensor of a dump, as its file describes it.
#[derive(Debug, Clone)]
pub struct DumpTensor {
    /// The name the file gives it (for per-position files: `{name}-{il}`).
    pub name: String,
    pub dtype: DType,
    pub endian: Endian,
    /// The stored dims as the file lists them, or `None` for headerless files (a flat run of
    /// elements whose shape comes from the capture it is mapped to).
    pub shape: Option<Vec<usize>>,
    /// `.npy` `fortran_order`: the data are column-major for `shape`.
    pub fortran_order: bool,
    /// The token position a per-position file was written at (`_pos{pos}`).
    pub pos: Option<usize>,
    /// The file holding it.
    pub file: PathBuf,
    pub(crate) bytes: Bytes,
}

/// Decoded values: floats as f32 (exact where the source is bf16, f16, e4m3 or f32; f64 rounds
/// to nearest), integers and bools as i64 — the representation captures use.
pub use crate::model::CaptureValues as TensorValues;

/// Map a whole file read-only (an empty file maps as an empty anonymous region).
pub(crate) fn map_file(path: &Path) -> Result<Arc<memmap2::Mmap>, ImportError> {
    let file = std::fs::File::open(path).map_err(|e| ImportError::io(path, "open", e))?;
    let len = file
        .metadata()
        .map_err(|e| ImportError::io(path, "stat", e))?
        .len();
    let len = usize::try_from(len)
        .map_err(|_| ImportError::format(path, "file", "larger than the address space"))?;
    if len == 0 {
        // A zero-length file map is refused on some platforms; an empty anonymous one stands in.
        let anon = memmap2::MmapOptions::new()
            .len(1)
            .map_anon()
            .map_err(|e| ImportError::io(path, "map", e))?
            .make_read_only()
            .map_err(|e| ImportError::io(path, "map", e))?;
        return Ok(Arc::new(anon));
    }
    // SAFETY: a read-only private map; every range into it is checked against its length
    // before use (`Bytes::Mapped` ranges are checked again on read). Like every mmap-based
    // reader, we rely on nobody truncating or rewriting the file while the dump is open.
    let map = unsafe { memmap2::MmapOptions::new().len(len).map(&file) }
        .map_err(|e| ImportError::io(path, "map", e))?;
    Ok(Arc::new(map))
}

/// The product of `dims`, or `None` when it overflows `usize`.
pub fn checked_count(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

impl DumpTensor {
    /// Number of stored elements (the byte length over the element size).
    pub fn element_count(&self) -> usize {
        self.byte_len() / self.dtype.size_bytes()
    }

    pub(crate) fn byte_len(&self) -> usize {
        match &self.bytes {
            Bytes::Mapped { len, .. } | Bytes::ZipMember { len, .. } => *len,
        }
    }

    /// The stored bytes (copied out of the map, so nothing is ever read misaligned in place).
    pub(crate) fn read_bytes(&self) -> Result<Vec<u8>, ImportError> {
        match &self.bytes {
            Bytes::Mapped { map, offset, len } => {
                let end = offset.checked_add(*len).filter(|&e| e <= map.len());
                match end {
                    Some(end) => Ok(map[*offset..end].to_vec()),
                    None => Err(ImportError::format(
                        &self.file,
                        format!("tensor `{}`", self.name),
                        "data range lies outside the file",
                    )),
                }
            }
            Bytes::ZipMember {
                archive,
                index,
                skip,
                len,
            } => super::npz::read_member_data(archive, *index, *skip, *len),
        }
    }

    /// The values, decoded as `dtype` says (or as `reinterpret`, which must have the same
    /// element size: e.g. `.npy` `<u2` holding bf16 bits), in C (row-major) order.
    pub fn values(&self, reinterpret: Option<DType>) -> Result<TensorValues, ImportError> {
        let dtype = match reinterpret {
            Some(d) if d.size_bytes() != self.dtype.size_bytes() => {
                return Err(ImportError::format(
                    &self.file,
                    format!("tensor `{}`: dtype override", self.name),
                    format!(
                        "{} has {}-byte elements but the file stores {} ({} bytes)",
                        d.name(),
                        d.size_bytes(),
                        self.dtype.name(),
                        self.dtype.size_bytes()
                    ),
                ))
            }
            Some(d) => d,
            None => self.dtype,
        };
        let bytes = self.read_bytes()?;
        let values = decode(&self.file, &self.name, &bytes, dtype, self.endian)?;
        match (&self.shape, self.fortran_order) {
            (Some(shape), true) => Ok(fortran_to_c(values, shape)),
            _ => Ok(values),
        }
    }
}

fn word<const N: usize>(chunk: &[u8], endian: Endian) -> [u8; N] {
    let mut b = [0u8; N];
    b.copy_from_slice(&chunk[..N]);
    if endian == Endian::Big {
        b.reverse();
    }
    b
}

/// Decode `bytes` of `dtype` into f32 (floats) or i64 (integers and bools).
pub(crate) fn decode(
    path: &Path,
    tensor: &str,
    bytes: &[u8],
    dtype: DType,
    endian: Endian,
) -> Result<TensorValues, ImportError> {
    let size = dtype.size_bytes();
    if bytes.len() % size != 0 {
        return Err(ImportError::format(
            path,
            format!("tensor `{tensor}`"),
            format!(
                "{} bytes are not a whole number of {}-byte {} elements",
                bytes.len(),
                size,
                dtype.name()
            ),
        ));
    }
    let chunks = bytes.chunks_exact(size);
    Ok(match dtype {
        DType::F32 => TensorValues::F32(
            chunks
                .map(|c| f32::from_le_bytes(word::<4>(c, endian)))
                .collect(),
        ),
        DType::F64 => TensorValues::F32(
            chunks
                .map(|c| f64::from_le_bytes(word::<8>(c, endian)) as f32)
                .collect(),
        ),
        DType::BF16 => TensorValues::F32(
            chunks
                .map(|c| bf16_to_f32(u16::from_le_bytes(word::<2>(c, endian))))
                .collect(),
        ),
        DType::F16 => TensorValues::F32(
            chunks
                .map(|c| half::f16::from_bits(u16::from_le_bytes(word::<2>(c, endian))).to_f32())
                .collect(),
        ),
        DType::F8E4M3 => TensorValues::F32(chunks.map(|c| e4m3_decode(c[0])).collect()),
        DType::Bool => {
            let mut out = Vec::with_capacity(bytes.len());
            for (i, &b) in bytes.iter().enumerate() {
                if b > 1 {
                    return Err(ImportError::format(
                        path,
                        format!("tensor `{tensor}`"),
                        format!("BOOL element {i} is {b}, expected 0 or 1"),
                    ));
                }
                out.push(i64::from(b));
            }
            TensorValues::I64(out)
        }
        DType::U8 => TensorValues::I64(bytes.iter().map(|&b| i64::from(b)).collect()),
        DType::I8 => TensorValues::I64(bytes.iter().map(|&b| i64::from(b as i8)).collect()),
        DType::U16 => TensorValues::I64(
            chunks
                .map(|c| i64::from(u16::from_le_bytes(word::<2>(c, endian))))
                .collect(),
        ),
        DType::I16 => TensorValues::I64(
            chunks
                .map(|c| i64::from(i16::from_le_bytes(word::<2>(c, endian))))
                .collect(),
        ),
        DType::U32 => TensorValues::I64(
            chunks
                .map(|c| i64::from(u32::from_le_bytes(word::<4>(c, endian))))
                .collect(),
        ),
        DType::I32 => TensorValues::I64(
            chunks
                .map(|c| i64::from(i32::from_le_bytes(word::<4>(c, endian))))
                .collect(),
        ),
        DType::I64 => TensorValues::I64(
            chunks
                .map(|c| i64::from_le_bytes(word::<8>(c, endian)))
                .collect(),
        ),
        DType::U64 => {
            let mut out = Vec::with_capacity(bytes.len() / 8);
            for (i, c) in chunks.enumerate() {
                let v = u64::from_le_bytes(word::<8>(c, endian));
                let v = i64::try_from(v).map_err(|_| {
                    ImportError::format(
                        path,
                        format!("tensor `{tensor}`"),
                        format!("U64 element {i} is {v}, beyond the i64 range"),
                    )
                })?;
                out.push(v);
            }
            TensorValues::I64(out)
        }
    })
}

/// Column-major data of `shape` rearranged into row-major order.
fn fortran_to_c(values: TensorValues, shape: &[usize]) -> TensorValues {
    fn permute<T: Copy>(src: &[T], shape: &[usize]) -> Vec<T> {
        let n = src.len();
        let rank = shape.len();
        if rank < 2 || n == 0 {
            return src.to_vec();
        }
        // Fortran strides: axis 0 is contiguous.
        let mut f_strides = vec![1usize; rank];
        for a in 1..rank {
            f_strides[a] = f_strides[a - 1] * shape[a - 1];
        }
        let mut out = Vec::with_capacity(n);
        let mut idx = vec![0usize; rank];
        for _ in 0..n {
            let off: usize = idx.iter().zip(&f_strides).map(|(i, s)| i * s).sum();
            out.push(src[off]);
            // Advance the row-major multi-index (last axis fastest).
            for a in (0..rank).rev() {
                idx[a] += 1;
                if idx[a] < shape[a] {
                    break;
                }
                idx[a] = 0;
            }
        }
        out
    }
    match values {
        TensorValues::F32(v) => TensorValues::F32(permute(&v, shape)),
        TensorValues::I64(v) => TensorValues::I64(permute(&v, shape)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fortran_order_becomes_row_major() {
        // A 2x3 matrix [[0,1,2],[3,4,5]] stored column-major is 0,3,1,4,2,5.
        let f = TensorValues::I64(vec![0, 3, 1, 4, 2, 5]);
        assert_eq!(
            fortran_to_c(f, &[2, 3]),
            TensorValues::I64(vec![0, 1, 2, 3, 4, 5])
        );
    }

    #[test]
    fn big_endian_and_narrow_floats_decode() {
        let p = Path::new("t");
        let be = 1.5f32.to_be_bytes();
        assert_eq!(
            decode(p, "x", &be, DType::F32, Endian::Big).unwrap(),
            TensorValues::F32(vec![1.5])
        );
        let bf = 0x3fc0u16.to_le_bytes(); // 1.5 in bf16
        assert_eq!(
            decode(p, "x", &bf, DType::BF16, Endian::Little).unwrap(),
            TensorValues::F32(vec![1.5])
        );
        assert!(decode(p, "x", &[2], DType::Bool, Endian::Little).is_err());
        assert!(decode(p, "x", &[0, 0, 0], DType::I32, Endian::Little).is_err());
    }
}
