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

mod data;
mod header;

pub(crate) use data::expert_rows;
pub(crate) use header::align_up;
use header::{parse_header, resident_len};

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
}

fn le4(c: &[u8]) -> [u8; 4] {
    [c[0], c[1], c[2], c[3]]
}

fn le8(c: &[u8]) -> [u8; 8] {
    [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]
}
