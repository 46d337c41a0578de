//! Opens one GGUF file (v2 or v3): parses and validates the header with positioned reads, then
//! maps only the resident region (header + every tensor except the engram tables) with memmap2.
//! Engram tables and anything past the mapped region are read with `read_exact_at`.

use super::cursor::{
    read_array, read_string, read_u32, read_u64, read_value, read_value_type, FileCursor,
    SliceCursor, Source,
};
use super::error::{GgufError, Result};
use super::ggml_type::GgmlType;
use super::names::is_engram_table;
use super::quant;
use super::value::{MetaArray, MetaEntry, MetaValue, ValueType};
use memmap2::{Mmap, MmapOptions};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The four magic bytes at offset 0.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment used when `general.alignment` is absent (ggml `GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`: tensors have at most four dimensions.
pub const MAX_DIMS: usize = 4;
/// ggml's `GGML_MAX_NAME`: tensor names must be shorter than this many bytes.
pub const MAX_TENSOR_NAME_BYTES: usize = 64;
/// The fewest bytes a metadata pair can take: key length (8) + empty key + type (4) + a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// The fewest bytes a tensor info can take: name length (8) + empty name + n_dims (4) + type (4) + offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// One tensor's info, validated against the file.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.3.attn_q_a.weight`.
    pub name: String,
    /// Dimensions in ggml `ne` order (ne0 = contiguous row length), 0..=4 of them.
    pub dims: Vec<u64>,
    /// Stored type (unknown ids are kept).
    pub ggml_type: GgmlType,
    /// Offset relative to the data section, as written in the file.
    pub relative_offset: u64,
    /// Absolute offset of the first data byte in the file.
    pub offset: u64,
    /// Product of the dimensions.
    pub n_elements: u64,
    /// Data bytes, or `None` when the type's block size is unknown.
    pub n_bytes: Option<u64>,
    /// Absolute offset of this tensor's info record in the header.
    pub info_offset: u64,
}

impl TensorInfo {
    /// Values per row (ne0; 1 for a 0-dimensional tensor).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows (ne1·ne2·ne3).
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }

    /// Bytes of one row, when the type's size is known.
    pub fn row_bytes(&self) -> Option<u64> {
        self.ggml_type.row_bytes(self.row_len())
    }

    /// Absolute byte range of the data, when the size is known.
    pub fn byte_range(&self) -> Option<Range<u64>> {
        self.n_bytes.map(|n| self.offset..self.offset + n)
    }
}

/// An open GGUF file. Metadata keeps file order; arrays stay lazy.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    file: File,
    file_len: u64,
    map: Option<Mmap>,
    version: u32,
    alignment: u64,
    header_len: u64,
    data_offset: u64,
    metadata: Vec<MetaEntry>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl GgufFile {
    /// Opens and validates `path`: header, metadata, alignment, every tensor info (rank, dims,
    /// sizes, alignment, bounds, overlaps, unique names). Reads only the header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|source| GgufError::Io {
            path: path.clone(),
            action: "open",
            source,
        })?;
        let file_len = file
            .metadata()
            .map_err(|source| GgufError::Io {
                path: path.clone(),
                action: "stat",
                source,
            })?
            .len();
        let header = parse_header(&file, &path, file_len)?;
        let map_len = resident_len(&header, file_len);
        let map = if map_len == 0 {
            None
        } else {
            let len = usize::try_from(map_len).map_err(|_| GgufError::Truncated {
                path: path.clone(),
                offset: 0,
                field: "resident region (larger than the address space)".into(),
                needed: map_len,
                available: file_len,
            })?;
            // SAFETY: the map is read-only and private to this struct. Like every mmap-based
            // reader, we rely on nobody truncating or rewriting the file while it is open; all
            // offsets into the map are bounds-checked against its length before use.
            let map = unsafe { MmapOptions::new().len(len).map(&file) };
            Some(map.map_err(|source| GgufError::Io {
                path: path.clone(),
                action: "map the header and resident tensors",
                source,
            })?)
        };
        let key_index = header
            .metadata
            .iter()
            .enumerate()
            .map(|(i, e)| (e.key.clone(), i))
            .collect();
        let tensor_index = header
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            path,
            file,
            file_len,
            map,
            version: header.version,
            alignment: header.alignment,
            header_len: header.header_len,
            data_offset: header.data_offset,
            metadata: header.metadata,
            key_index,
            tensors: header.tensors,
            tensor_index,
        })
    }

    /// The path this file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// File size in bytes.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }
    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }
    /// `general.alignment`, or 32 when absent.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }
    /// Bytes of header (magic through the last tensor info), before padding.
    pub fn header_len(&self) -> u64 {
        self.header_len
    }
    /// Absolute offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }
    /// Bytes of the file that are memory-mapped (header + resident tensors).
    pub fn mapped_len(&self) -> u64 {
        self.map.as_ref().map_or(0, |m| m.len() as u64)
    }
    /// Metadata in file order.
    pub fn metadata(&self) -> &[MetaEntry] {
        &self.metadata
    }
    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.key_index.get(key).map(|&i| &self.metadata[i].value)
    }

    /// The tensor called `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The tensor called `name`, or a `NoSuchTensor` error.
    pub fn require_tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor(name).ok_or_else(|| GgufError::NoSuchTensor {
            path: self.path.clone(),
            name: name.to_string(),
        })
    }

    /// `key` as a non-negative integer (any integer value type). `Ok(None)` when absent.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_i128().and_then(|x| u64::try_from(x).ok()) {
                Some(x) => Ok(Some(x)),
                None => Err(self.type_error(key, "a non-negative integer", v)),
            },
        }
    }

    /// `key` as f64 (any float or integer value type). `Ok(None)` when absent.
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.type_error(key, "a number", v)),
        }
    }

    /// `key` as a string. `Ok(None)` when absent.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.type_error(key, "a string", v)),
        }
    }

    /// `key` as a bool. `Ok(None)` when absent.
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.type_error(key, "a bool", v)),
        }
    }

    /// `key` as an array header. `Ok(None)` when absent.
    pub fn get_array(&self, key: &str) -> Result<Option<MetaArray>> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Array(a)) => Ok(Some(*a)),
            Some(v) => Err(self.type_error(key, "an array", v)),
        }
    }

    fn type_error(&self, key: &str, expected: &str, found: &MetaValue) -> GgufError {
        GgufError::MetaType {
            path: self.path.clone(),
            key: key.to_string(),
            expected: expected.to_string(),
            found: found.type_description(),
        }
    }

    /// Decodes the first `limit` elements of an array (all of them when `limit` is `None`).
    /// Nested arrays come back as lazy [`MetaArray`]s.
    pub fn array_values(&self, arr: &MetaArray, limit: Option<u64>) -> Result<Vec<MetaValue>> {
        let n = limit.map_or(arr.count, |l| l.min(arr.count));
        let bytes = self.map.as_deref().unwrap_or(&[]);
        let mut cur = SliceCursor::new(bytes, &self.path, arr.data_offset);
        let mut out = Vec::with_capacity(n.min(arr.count) as usize);
        for i in 0..n {
            let field = || format!("array element {i} at offset {}", arr.data_offset);
            out.push(read_value(&mut cur, arr.elem_type, 1, &field)?);
        }
        Ok(out)
    }

    /// Decodes an integer array (any integer element type) as u64; negative elements are errors.
    /// Elements are decoded straight into the result (no wider intermediate), so memory is at
    /// most 8 bytes per element whatever the element type.
    pub fn array_u64(&self, key: &str, arr: &MetaArray) -> Result<Vec<u64>> {
        let mut out = Vec::with_capacity(arr.count as usize);
        for (i, v) in self.int_elements(key, arr)?.enumerate() {
            out.push(u64::try_from(v).map_err(|_| GgufError::BadMeta {
                path: self.path.clone(),
                key: key.to_string(),
                problem: format!("element {i} is {v}; expected a non-negative integer"),
            })?);
        }
        Ok(out)
    }

    /// Decodes an integer array (any integer element type) as i128, which holds every value.
    pub fn array_ints(&self, key: &str, arr: &MetaArray) -> Result<Vec<i128>> {
        Ok(self.int_elements(key, arr)?.collect())
    }

    /// The elements of an integer array, decoded lazily from the map.
    fn int_elements<'s>(
        &'s self,
        key: &str,
        arr: &MetaArray,
    ) -> Result<impl Iterator<Item = i128> + 's> {
        if !arr.elem_type.is_integer() {
            return Err(GgufError::MetaType {
                path: self.path.clone(),
                key: key.to_string(),
                expected: "an array of integers".into(),
                found: format!("array<{}>", arr.elem_type),
            });
        }
        let elem_type = arr.elem_type;
        let size = elem_type.fixed_size().unwrap_or(1) as usize;
        let bytes = self.mapped_slice(arr.data_offset, arr.byte_len, key)?;
        Ok(bytes.chunks_exact(size).map(move |chunk| match elem_type {
            ValueType::U8 => chunk[0].into(),
            ValueType::I8 => (chunk[0] as i8).into(),
            ValueType::U16 => u16::from_le_bytes([chunk[0], chunk[1]]).into(),
            ValueType::I16 => i16::from_le_bytes([chunk[0], chunk[1]]).into(),
            ValueType::U32 => u32::from_le_bytes(le4(chunk)).into(),
            ValueType::I32 => i32::from_le_bytes(le4(chunk)).into(),
            ValueType::U64 => u64::from_le_bytes(le8(chunk)).into(),
            _ => i64::from_le_bytes(le8(chunk)).into(),
        }))
    }

    /// Decodes a float array (f32 or f64 elements; integers are accepted too) as f64.
    pub fn array_f64(&self, key: &str, arr: &MetaArray) -> Result<Vec<f64>> {
        match arr.elem_type {
            ValueType::F32 | ValueType::F64 => {
                let size = arr.elem_type.fixed_size().unwrap_or(4) as usize;
                let bytes = self.mapped_slice(arr.data_offset, arr.byte_len, key)?;
                Ok(bytes
                    .chunks_exact(size)
                    .map(|c| {
                        if size == 4 {
                            f32::from_le_bytes(le4(c)).into()
                        } else {
                            f64::from_le_bytes(le8(c))
                        }
                    })
                    .collect())
            }
            t if t.is_integer() => Ok(self.int_elements(key, arr)?.map(|v| v as f64).collect()),
            other => Err(GgufError::MetaType {
                path: self.path.clone(),
                key: key.to_string(),
                expected: "an array of numbers".into(),
                found: format!("array<{other}>"),
            }),
        }
    }

    /// Decodes a string array.
    pub fn array_strings(&self, key: &str, arr: &MetaArray) -> Result<Vec<String>> {
        if arr.elem_type != ValueType::String {
            return Err(GgufError::MetaType {
                path: self.path.clone(),
                key: key.to_string(),
                expected: "an array of strings".into(),
                found: format!("array<{}>", arr.elem_type),
            });
        }
        // Decoded one by one into the result: each element costs its text plus a `String`
        // header, against at least 8 bytes (its length prefix) in the file.
        let bytes = self.map.as_deref().unwrap_or(&[]);
        let mut cur = SliceCursor::new(bytes, &self.path, arr.data_offset);
        let mut out = Vec::with_capacity(arr.count as usize);
        for i in 0..arr.count {
            let field = || format!("{key}: string element {i} at offset {}", arr.data_offset);
            out.push(read_string(&mut cur, &field)?);
        }
        Ok(out)
    }

    fn mapped_slice(&self, offset: u64, len: u64, what: &str) -> Result<&[u8]> {
        let bytes = self.map.as_deref().unwrap_or(&[]);
        let end = offset.checked_add(len);
        match end {
            Some(end) if end <= bytes.len() as u64 => Ok(&bytes[offset as usize..end as usize]),
            _ => Err(GgufError::Truncated {
                path: self.path.clone(),
                offset,
                field: what.to_string(),
                needed: len,
                available: (bytes.len() as u64).saturating_sub(offset),
            }),
        }
    }

    /// Whether `t`'s data lies entirely inside the memory-mapped region.
    pub fn is_mapped(&self, t: &TensorInfo) -> bool {
        t.byte_range().is_some_and(|r| r.end <= self.mapped_len())
    }

    /// Reads `len` bytes at absolute `offset` with `read_exact_at`, never through the map (the
    /// path for engram rows, which must not be paged into the mapped region).
    pub fn pread(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        match self.read_unmapped(offset, len)? {
            Cow::Owned(v) => Ok(v),
            Cow::Borrowed(b) => Ok(b.to_vec()),
        }
    }

    fn read_unmapped(&self, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
        offset
            .checked_add(len)
            .filter(|&e| e <= self.file_len)
            .ok_or_else(|| GgufError::Truncated {
                path: self.path.clone(),
                offset,
                field: "data read".into(),
                needed: len,
                available: self.file_len.saturating_sub(offset),
            })?;
        let len_usize = usize::try_from(len).map_err(|_| GgufError::Truncated {
            path: self.path.clone(),
            offset,
            field: "data read (larger than the address space)".into(),
            needed: len,
            available: self.file_len - offset,
        })?;
        let mut buf = vec![0u8; len_usize];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|source| GgufError::Io {
                path: self.path.clone(),
                action: "read tensor data",
                source,
            })?;
        Ok(Cow::Owned(buf))
    }

    /// Reads `len` bytes at absolute `offset`: borrowed from the map when resident, otherwise
    /// read with `read_exact_at` into a buffer of exactly `len` bytes.
    pub fn read_bytes(&self, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
        if let (Some(end), Some(map)) = (offset.checked_add(len), &self.map) {
            if end <= map.len() as u64 {
                return Ok(Cow::Borrowed(&map[offset as usize..end as usize]));
            }
        }
        self.read_unmapped(offset, len)
    }

    /// The raw data bytes of tensor `name`.
    pub fn tensor_bytes(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        let t = self.require_tensor(name)?;
        let n = self.known_size(t)?;
        self.read_bytes(t.offset, n)
    }

    fn known_size(&self, t: &TensorInfo) -> Result<u64> {
        t.n_bytes.ok_or_else(|| GgufError::NotDequantizable {
            path: self.path.clone(),
            tensor: t.name.clone(),
            ggml_type: t.ggml_type.name(),
        })
    }

    /// Dequantizes the whole tensor `name` to f32 (row-major in ggml order: ne0 fastest).
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let t = self.require_tensor(name)?;
        self.rows_f32(t, 0..t.n_rows())
    }

    /// Dequantizes rows `rows` (a row is ne0 values; rows count over ne1·ne2·ne3).
    pub fn tensor_rows_f32(&self, name: &str, rows: Range<u64>) -> Result<Vec<f32>> {
        let t = self.require_tensor(name)?;
        self.rows_f32(t, rows)
    }

    /// Dequantizes expert `expert` of a merged 3-D expert tensor `[ne0, ne1, n_experts]`:
    /// the contiguous slab of ne1 rows that belongs to that expert.
    pub fn expert_f32(&self, name: &str, expert: u64) -> Result<Vec<f32>> {
        let t = self.require_tensor(name)?;
        let rows = expert_rows(&self.path, t, expert)?;
        self.rows_f32(t, rows)
    }

    fn rows_f32(&self, t: &TensorInfo, rows: Range<u64>) -> Result<Vec<f32>> {
        let bad = |problem: String| GgufError::BadRequest {
            path: self.path.clone(),
            tensor: t.name.clone(),
            problem,
        };
        if rows.start > rows.end || rows.end > t.n_rows() {
            return Err(bad(format!(
                "rows {}..{} are outside 0..{}",
                rows.start,
                rows.end,
                t.n_rows()
            )));
        }
        if !t.ggml_type.is_dequantizable() {
            return Err(GgufError::NotDequantizable {
                path: self.path.clone(),
                tensor: t.name.clone(),
                ggml_type: t.ggml_type.name(),
            });
        }
        let row_bytes = t
            .row_bytes()
            .ok_or_else(|| bad("row size unknown".into()))?;
        let n_rows = rows.end - rows.start;
        let n_values = n_rows
            .checked_mul(t.row_len())
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| bad("too many values for this machine".into()))?;
        // Both products are bounded by the tensor's size, which was checked against the file.
        let start = t.offset + rows.start * row_bytes;
        let bytes = self.read_bytes(start, n_rows * row_bytes)?;
        let mut out = vec![0f32; n_values];
        quant::dequantize(t.ggml_type, &bytes, &mut out).map_err(|e| bad(e.to_string()))?;
        Ok(out)
    }
}

/// The row range of expert `expert` in a merged 3-D expert tensor.
pub(crate) fn expert_rows(path: &Path, t: &TensorInfo, expert: u64) -> Result<Range<u64>> {
    let bad = |problem: String| GgufError::BadRequest {
        path: path.to_path_buf(),
        tensor: t.name.clone(),
        problem,
    };
    if t.dims.len() != 3 {
        return Err(bad(format!(
            "expert slabs need a 3-D tensor [ne0, ne1, n_experts]; this one has dims {:?}",
            t.dims
        )));
    }
    let n_experts = t.dims[2];
    if expert >= n_experts {
        return Err(bad(format!(
            "expert {expert} is out of range: the tensor holds {n_experts} experts"
        )));
    }
    let rows_per_expert = t.dims[1];
    Ok(expert * rows_per_expert..(expert + 1) * rows_per_expert)
}

fn le4(c: &[u8]) -> [u8; 4] {
    [c[0], c[1], c[2], c[3]]
}

fn le8(c: &[u8]) -> [u8; 8] {
    [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]
}

/// What the header parse produces.
struct Header {
    version: u32,
    alignment: u64,
    header_len: u64,
    data_offset: u64,
    metadata: Vec<MetaEntry>,
    tensors: Vec<TensorInfo>,
}

/// Bytes to map: the header plus every tensor that is not an engram table.
fn resident_len(h: &Header, file_len: u64) -> u64 {
    let tensors_end = h
        .tensors
        .iter()
        .filter(|t| !is_engram_table(&t.name))
        .filter_map(|t| t.byte_range().map(|r| r.end))
        .max()
        .unwrap_or(0);
    tensors_end.max(h.header_len).min(file_len)
}

fn parse_header(file: &File, path: &Path, file_len: u64) -> Result<Header> {
    let mut cur = FileCursor::new(file, path, file_len);
    let src: &mut dyn Source = &mut cur;

    let magic: [u8; 4] = if file_len < 4 {
        let n = file_len as usize;
        let found = src.take(file_len, &|| "magic".into())?.to_vec();
        if found.as_slice() != &GGUF_MAGIC[..n] {
            return Err(GgufError::BadMagic {
                path: path.to_path_buf(),
                found,
            });
        }
        return Err(src.truncated(4, &|| "magic".into()));
    } else {
        read_array(src, &|| "magic".into())?
    };
    if magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic {
            path: path.to_path_buf(),
            found: magic.to_vec(),
        });
    }
    let version = read_u32(src, &|| "version".into())?;
    if version != 2 && version != 3 {
        let hint = if version == 1 {
            " (GGUF v1 used 32-bit counts and is not supported)"
        } else if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            " (this looks like a big-endian GGUF, which is not supported)"
        } else {
            ""
        };
        return Err(GgufError::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
            hint,
        });
    }
    let tensor_count_offset = src.pos();
    let tensor_count = read_u64(src, &|| "tensor count".into())?;
    let kv_count_offset = src.pos();
    let kv_count = read_u64(src, &|| "metadata key/value count".into())?;
    let remaining = src.remaining();
    let max_tensors = remaining / MIN_TENSOR_INFO_BYTES;
    if tensor_count > max_tensors {
        return Err(GgufError::CountTooLarge {
            path: path.to_path_buf(),
            offset: tensor_count_offset,
            field: "tensor count".into(),
            count: tensor_count,
            remaining,
            max_count: max_tensors,
        });
    }
    let after_tensors = remaining - tensor_count * MIN_TENSOR_INFO_BYTES;
    let max_kv = after_tensors / MIN_KV_BYTES;
    if kv_count > max_kv {
        return Err(GgufError::CountTooLarge {
            path: path.to_path_buf(),
            offset: kv_count_offset,
            field: "metadata key/value count".into(),
            count: kv_count,
            remaining: after_tensors,
            max_count: max_kv,
        });
    }

    // Metadata, in file order.
    let mut metadata = Vec::with_capacity(kv_count as usize);
    let mut seen_keys: HashMap<String, u64> = HashMap::with_capacity(kv_count as usize);
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..kv_count {
        let offset = src.pos();
        let key = read_string(src, &|| format!("metadata key #{i}"))?;
        let field = || format!("metadata value {key:?}");
        let vtype = read_value_type(src, &field)?;
        let value = read_value(src, vtype, 0, &field)?;
        if seen_keys.insert(key.clone(), offset).is_some() {
            return Err(GgufError::DuplicateKey {
                path: path.to_path_buf(),
                offset,
                key,
            });
        }
        if key == "general.alignment" {
            alignment = match value {
                MetaValue::U32(a) if a > 0 && a.is_power_of_two() => a.into(),
                MetaValue::U32(a) => {
                    return Err(GgufError::BadAlignment {
                        path: path.to_path_buf(),
                        offset,
                        found: a.to_string(),
                    })
                }
                ref other => {
                    return Err(GgufError::BadAlignment {
                        path: path.to_path_buf(),
                        offset,
                        found: format!("a value of type {}", other.type_description()),
                    })
                }
            };
        }
        metadata.push(MetaEntry { key, value, offset });
    }

    // Tensor infos.
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(tensor_count as usize);
    let mut seen_names: HashMap<String, usize> = HashMap::with_capacity(tensor_count as usize);
    for i in 0..tensor_count {
        let info_offset = src.pos();
        let name = read_string(src, &|| format!("tensor #{i} name"))?;
        let bad = |problem: String| GgufError::BadTensorInfo {
            path: path.to_path_buf(),
            offset: info_offset,
            tensor: name.clone(),
            problem,
        };
        if name.len() >= MAX_TENSOR_NAME_BYTES {
            return Err(bad(format!(
                "name is {} bytes long; ggml allows at most {}",
                name.len(),
                MAX_TENSOR_NAME_BYTES - 1
            )));
        }
        let n_dims = read_u32(src, &|| format!("tensor {name:?} n_dims"))?;
        if n_dims as usize > MAX_DIMS {
            return Err(bad(format!(
                "{n_dims} dimensions; ggml allows at most {MAX_DIMS}"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            let ne = read_u64(src, &|| format!("tensor {name:?} dim {d}"))?;
            if ne > i64::MAX as u64 {
                return Err(bad(format!(
                    "dim {d} is {ne}; ggml dims are signed 64-bit (at most {})",
                    i64::MAX
                )));
            }
            dims.push(ne);
        }
        let type_id = read_u32(src, &|| format!("tensor {name:?} type"))?;
        let ggml_type = GgmlType::from_id(type_id);
        let relative_offset = read_u64(src, &|| format!("tensor {name:?} offset"))?;

        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad(format!("dims {dims:?}: element count overflows 63 bits")))?;
        let n_bytes = match ggml_type.block_layout() {
            None => None,
            Some((block_values, block_bytes)) => {
                let ne0 = dims.first().copied().unwrap_or(1);
                if ne0 % block_values as u64 != 0 {
                    return Err(bad(format!(
                        "row length ne0 = {ne0} is not a multiple of the {ggml_type} block size {block_values}"
                    )));
                }
                let n = (n_elements / block_values as u64)
                    .checked_mul(block_bytes as u64)
                    .ok_or_else(|| bad(format!("dims {dims:?}: byte size overflows")))?;
                Some(n)
            }
        };
        if seen_names.insert(name.clone(), tensors.len()).is_some() {
            return Err(GgufError::DuplicateTensor {
                path: path.to_path_buf(),
                name,
                context: format!("; second info at offset {info_offset}"),
            });
        }
        tensors.push(TensorInfo {
            name,
            dims,
            ggml_type,
            relative_offset,
            offset: 0,
            n_elements,
            n_bytes,
            info_offset,
        });
    }
    let header_len = src.pos();
    let data_offset = align_up(header_len, alignment).ok_or_else(|| GgufError::Truncated {
        path: path.to_path_buf(),
        offset: header_len,
        field: "data section start (alignment overflows)".into(),
        needed: alignment,
        available: 0,
    })?;

    // Place every tensor and check it against the file.
    for t in &mut tensors {
        if t.relative_offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                path: path.to_path_buf(),
                tensor: t.name.clone(),
                relative_offset: t.relative_offset,
                alignment,
            });
        }
        let start = data_offset.checked_add(t.relative_offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes.unwrap_or(0)));
        match (start, end) {
            (Some(start), Some(end)) if end <= file_len => t.offset = start,
            _ => {
                return Err(GgufError::TensorPastEnd {
                    path: path.to_path_buf(),
                    tensor: t.name.clone(),
                    start: start.unwrap_or(u64::MAX),
                    end: end.unwrap_or(u64::MAX),
                    file_len,
                })
            }
        }
    }
    check_overlaps(path, &tensors)?;

    Ok(Header {
        version,
        alignment,
        header_len,
        data_offset,
        metadata,
        tensors,
    })
}

/// Rounds `x` up to a multiple of the power of two `alignment`.
pub(crate) fn align_up(x: u64, alignment: u64) -> Option<u64> {
    x.checked_add(alignment - 1).map(|v| v & !(alignment - 1))
}

/// No two tensors may share a byte. Tensors of unknown size count as empty extents, which
/// still catches one starting inside another.
fn check_overlaps(path: &Path, tensors: &[TensorInfo]) -> Result<()> {
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    // Larger extents first at equal starts, so an empty or unknown-size tensor that starts
    // where a non-empty one starts is caught.
    order.sort_by_key(|t| (t.offset, std::cmp::Reverse(t.n_bytes.unwrap_or(0))));
    let mut widest: Option<&TensorInfo> = None;
    for t in order {
        if let Some(w) = widest {
            let w_end = w.offset + w.n_bytes.unwrap_or(0);
            if t.offset < w_end {
                return Err(GgufError::TensorOverlap {
                    path: path.to_path_buf(),
                    tensor: t.name.clone(),
                    start: t.offset,
                    end: t.offset + t.n_bytes.unwrap_or(0),
                    other: w.name.clone(),
                    other_start: w.offset,
                    other_end: w_end,
                });
            }
        }
        let t_end = t.offset + t.n_bytes.unwrap_or(0);
        if widest.is_none_or(|w| t_end > w.offset + w.n_bytes.unwrap_or(0)) {
            widest = Some(t);
        }
    }
    Ok(())
}
