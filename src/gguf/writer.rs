//! A GGUF v3 writer for small files (tests, tiny deepseek41 fixtures): metadata in the order
//! added, tensors in the order added at sequential offsets padded to the alignment, and the file
//! end padded too (as ds4 and gguf-py do). Everything is checked before a byte is written, so the
//! writer cannot produce a file the reader would refuse.

use super::error::{GgufError, Result};
use super::ggml_type::GgmlType;
use super::reader::{align_up, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS, MAX_TENSOR_NAME_BYTES};
use super::value::ValueType;
use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A metadata value to write. Arrays carry their element type so that, for example, a list of
/// small multipliers can still be written as `array<uint64>`.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    /// Element type and elements (each must be of that type).
    Array(ValueType, Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValue {
    /// The stored type id.
    pub fn value_type(&self) -> ValueType {
        match self {
            GgufValue::U8(_) => ValueType::U8,
            GgufValue::I8(_) => ValueType::I8,
            GgufValue::U16(_) => ValueType::U16,
            GgufValue::I16(_) => ValueType::I16,
            GgufValue::U32(_) => ValueType::U32,
            GgufValue::I32(_) => ValueType::I32,
            GgufValue::F32(_) => ValueType::F32,
            GgufValue::Bool(_) => ValueType::Bool,
            GgufValue::String(_) => ValueType::String,
            GgufValue::Array(..) => ValueType::Array,
            GgufValue::U64(_) => ValueType::U64,
            GgufValue::I64(_) => ValueType::I64,
            GgufValue::F64(_) => ValueType::F64,
        }
    }

    /// A string value.
    pub fn string(s: impl Into<String>) -> Self {
        GgufValue::String(s.into())
    }

    /// `array<uint32>`.
    pub fn u32s(xs: &[u32]) -> Self {
        GgufValue::Array(
            ValueType::U32,
            xs.iter().map(|&x| GgufValue::U32(x)).collect(),
        )
    }

    /// `array<uint64>`.
    pub fn u64s(xs: &[u64]) -> Self {
        GgufValue::Array(
            ValueType::U64,
            xs.iter().map(|&x| GgufValue::U64(x)).collect(),
        )
    }

    /// `array<int32>`.
    pub fn i32s(xs: &[i32]) -> Self {
        GgufValue::Array(
            ValueType::I32,
            xs.iter().map(|&x| GgufValue::I32(x)).collect(),
        )
    }

    /// `array<float32>`.
    pub fn f32s(xs: &[f32]) -> Self {
        GgufValue::Array(
            ValueType::F32,
            xs.iter().map(|&x| GgufValue::F32(x)).collect(),
        )
    }

    /// `array<string>`.
    pub fn strings<S: AsRef<str>>(xs: &[S]) -> Self {
        GgufValue::Array(
            ValueType::String,
            xs.iter()
                .map(|x| GgufValue::String(x.as_ref().to_string()))
                .collect(),
        )
    }

    fn check(&self, key: &str) -> std::result::Result<(), String> {
        if let GgufValue::Array(elem, items) = self {
            if let Some(bad) = items.iter().find(|v| v.value_type() != *elem) {
                return Err(format!(
                    "{key}: array<{elem}> holds a {} element",
                    bad.value_type()
                ));
            }
            for item in items {
                item.check(key)?;
            }
        }
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            GgufValue::U8(v) => out.push(*v),
            GgufValue::I8(v) => out.push(*v as u8),
            GgufValue::U16(v) => out.extend(v.to_le_bytes()),
            GgufValue::I16(v) => out.extend(v.to_le_bytes()),
            GgufValue::U32(v) => out.extend(v.to_le_bytes()),
            GgufValue::I32(v) => out.extend(v.to_le_bytes()),
            GgufValue::F32(v) => out.extend(v.to_le_bytes()),
            GgufValue::Bool(v) => out.push(u8::from(*v)),
            GgufValue::String(s) => encode_string(s, out),
            GgufValue::Array(elem, items) => {
                out.extend(elem.id().to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for item in items {
                    item.encode(out);
                }
            }
            GgufValue::U64(v) => out.extend(v.to_le_bytes()),
            GgufValue::I64(v) => out.extend(v.to_le_bytes()),
            GgufValue::F64(v) => out.extend(v.to_le_bytes()),
        }
    }
}

fn encode_string(s: &str, out: &mut Vec<u8>) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ggml_type: GgmlType,
    n_bytes: u64,
    /// `None`: all-zero data, left as a hole in a sparse file.
    data: Option<Vec<u8>>,
}

/// Collects metadata and tensors, then writes one GGUF v3 file.
pub struct GgufWriter {
    alignment: u64,
    metadata: Vec<(String, GgufValue)>,
    keys: HashSet<String>,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty writer with the default alignment (32, no `general.alignment` key).
    pub fn new() -> Self {
        GgufWriter {
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            keys: HashSet::new(),
            tensors: Vec::new(),
            names: HashSet::new(),
        }
    }

    fn invalid(problem: String) -> GgufError {
        GgufError::BadRequest {
            path: PathBuf::from("<writer>"),
            tensor: String::new(),
            problem,
        }
    }

    /// Adds `general.alignment` (u32) at this point of the metadata order and places data with it.
    pub fn set_alignment(&mut self, alignment: u32) -> Result<()> {
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(Self::invalid(format!(
                "alignment {alignment} is not a power of two greater than 0"
            )));
        }
        self.add("general.alignment", GgufValue::U32(alignment))?;
        self.alignment = alignment.into();
        Ok(())
    }

    /// Appends a key/value pair; keys must be unique and arrays homogeneous.
    pub fn add(&mut self, key: &str, value: GgufValue) -> Result<()> {
        if key == "general.alignment"
            && !matches!(value, GgufValue::U32(a) if a > 0 && a.is_power_of_two())
        {
            return Err(Self::invalid(
                "general.alignment must be a u32 power of two; use set_alignment".into(),
            ));
        }
        value.check(key).map_err(Self::invalid)?;
        if !self.keys.insert(key.to_string()) {
            return Err(Self::invalid(format!("duplicate metadata key {key:?}")));
        }
        self.metadata.push((key.to_string(), value));
        Ok(())
    }

    /// Appends a tensor: `dims` in ggml `ne` order, `data` exactly the type's byte size.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ggml_type: GgmlType,
        data: Vec<u8>,
    ) -> Result<()> {
        self.push_tensor(name, dims, ggml_type, Some(data))
    }

    /// Appends an all-zero tensor that is never materialised: the writer leaves a hole, so a
    /// real-size layout costs only its header on a filesystem with sparse files.
    pub fn add_zero_tensor(&mut self, name: &str, dims: &[u64], ggml_type: GgmlType) -> Result<()> {
        self.push_tensor(name, dims, ggml_type, None)
    }

    fn push_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ggml_type: GgmlType,
        data: Option<Vec<u8>>,
    ) -> Result<()> {
        let bad = |problem: String| GgufError::BadRequest {
            path: PathBuf::from("<writer>"),
            tensor: name.to_string(),
            problem,
        };
        if name.len() >= MAX_TENSOR_NAME_BYTES {
            return Err(bad(format!(
                "name is {} bytes; ggml allows at most {}",
                name.len(),
                MAX_TENSOR_NAME_BYTES - 1
            )));
        }
        if dims.len() > MAX_DIMS {
            return Err(bad(format!("{} dims; at most {MAX_DIMS}", dims.len())));
        }
        let n_elements = dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad("element count overflows".into()))?;
        let (block_values, block_bytes) = ggml_type
            .block_layout()
            .ok_or_else(|| bad(format!("type {ggml_type} has no known size")))?;
        let ne0 = dims.first().copied().unwrap_or(1);
        if ne0 % block_values as u64 != 0 {
            return Err(bad(format!(
                "ne0 = {ne0} is not a multiple of the {ggml_type} block size {block_values}"
            )));
        }
        let n_bytes = (n_elements / block_values as u64)
            .checked_mul(block_bytes as u64)
            .ok_or_else(|| bad("byte size overflows".into()))?;
        if let Some(d) = &data {
            if d.len() as u64 != n_bytes {
                return Err(bad(format!(
                    "{} data bytes; {ggml_type} {dims:?} needs {n_bytes}",
                    d.len()
                )));
            }
        }
        if !self.names.insert(name.to_string()) {
            return Err(bad("duplicate tensor name".into()));
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            ggml_type,
            n_bytes,
            data,
        });
        Ok(())
    }

    /// Header bytes (magic through tensor infos, padded to the alignment), the relative offset
    /// of every tensor, and the padded end of the file.
    fn layout(&self) -> Result<(Vec<u8>, Vec<u64>, u64)> {
        let a = self.alignment;
        let overflow = || Self::invalid("file layout overflows 64 bits".into());
        let mut out = GGUF_MAGIC.to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            encode_string(key, &mut out);
            out.extend(value.value_type().id().to_le_bytes());
            value.encode(&mut out);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            encode_string(&t.name, &mut out);
            out.extend((t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.ggml_type.id().to_le_bytes());
            out.extend(offset.to_le_bytes());
            offsets.push(offset);
            offset = offset
                .checked_add(t.n_bytes)
                .and_then(|e| align_up(e, a))
                .ok_or_else(overflow)?;
        }
        let data_start = align_up(out.len() as u64, a).ok_or_else(overflow)?;
        out.resize(data_start as usize, 0);
        let end = data_start.checked_add(offset).ok_or_else(overflow)?;
        Ok((out, offsets, end))
    }

    /// Absolute offset of the data section the written file will have.
    pub fn data_offset(&self) -> Result<u64> {
        Ok(self.layout()?.0.len() as u64)
    }

    /// Writes the file atomically (`<path>.tmp`, fsync, rename). Tensors added with
    /// [`add_zero_tensor`](Self::add_zero_tensor) and all padding are left as holes.
    pub fn write(&self, path: &Path) -> Result<()> {
        let tmp = PathBuf::from(format!("{}.tmp", path.display()));
        let io = |action: &'static str| {
            let p = tmp.clone();
            move |source| GgufError::Io {
                path: p,
                action,
                source,
            }
        };
        let result = (|| {
            let (header, offsets, end) = self.layout()?;
            let data_start = header.len() as u64;
            let mut f = std::fs::File::create(&tmp).map_err(io("create"))?;
            f.write_all(&header).map_err(io("write"))?;
            for (t, off) in self.tensors.iter().zip(offsets) {
                if let Some(data) = &t.data {
                    f.write_all_at(data, data_start + off)
                        .map_err(io("write"))?;
                }
            }
            // Extends the file to its padded end; zero tensors and padding stay holes.
            f.set_len(end).map_err(io("extend"))?;
            f.sync_all().map_err(io("sync"))?;
            std::fs::rename(&tmp, path).map_err(io("rename"))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}
