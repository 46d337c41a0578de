//! safetensors reader: the `safetensors` crate validates offsets, contiguity, sizes and counts
//! over a memory map; our own pass before it caps the header length before anything is read,
//! refuses leading whitespace and duplicate names (which the crate silently collapses), and
//! reports an unknown dtype by tensor and name (where the crate fails the whole file). Data are
//! copied out of the map when read, never cast in place, so misaligned views are harmless.

use super::error::ImportError;
use super::tensor::{map_file, Bytes, DType, DumpTensor, Endian, DTYPE_NAMES};
use serde::de::{Deserializer, MapAccess, Visitor};
use std::path::Path;

/// The largest header accepted (the crate's own bound: 100 MB).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The top-level JSON object's entries in file order, duplicates kept.
struct Entries(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object of tensor entries")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, serde_json::Value>()? {
                    out.push((k, v));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Read the tensor index of a safetensors file (data stay in the map until asked for).
pub fn read(path: &Path) -> Result<Vec<DumpTensor>, ImportError> {
    let map = map_file(path)?;
    let file_len = map.len() as u64;
    if file_len < 8 {
        return Err(ImportError::format(
            path,
            "header length",
            format!("the file has {file_len} bytes, fewer than the 8-byte header length"),
        ));
    }
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&map[..8]);
    let n = u64::from_le_bytes(len_bytes);
    if n > MAX_HEADER_BYTES {
        return Err(ImportError::format(
            path,
            "header length",
            format!("{n} bytes claimed, more than the {MAX_HEADER_BYTES}-byte limit"),
        ));
    }
    let header_end = 8u64
        .checked_add(n)
        .filter(|&e| e <= file_len)
        .ok_or_else(|| {
            ImportError::format(
                path,
                "header length",
                format!("{n} bytes claimed but only {} follow", file_len - 8),
            )
        })? as usize;
    let header = &map[8..header_end];
    if header.first() != Some(&b'{') {
        return Err(ImportError::format(
            path,
            "header",
            "the JSON header must start with `{` (no leading whitespace)",
        ));
    }
    let text = std::str::from_utf8(header)
        .map_err(|e| ImportError::format(path, "header", format!("not UTF-8: {e}")))?;
    let entries: Entries = serde_json::from_str(text)
        .map_err(|e| ImportError::format(path, "header", format!("not a JSON object: {e}")))?;
    let mut seen = std::collections::HashSet::new();
    let mut dtypes = std::collections::HashMap::new();
    for (name, entry) in &entries.0 {
        if !seen.insert(name.as_str()) {
            return Err(ImportError::Duplicate {
                path: path.to_path_buf(),
                tensor: name.clone(),
            });
        }
        if name == "__metadata__" {
            continue;
        }
        let dtype = entry.get("dtype").and_then(|d| d.as_str()).ok_or_else(|| {
            ImportError::format(
                path,
                format!("tensor `{name}`: dtype"),
                "missing or not a string",
            )
        })?;
        let parsed = DType::parse(dtype).ok_or_else(|| ImportError::UnsupportedDtype {
            path: path.to_path_buf(),
            tensor: name.clone(),
            dtype: dtype.to_string(),
            expected: DTYPE_NAMES,
        })?;
        dtypes.insert(name.clone(), parsed);
    }
    let st = safetensors::SafeTensors::deserialize(&map[..])
        .map_err(|e| ImportError::format(path, "layout", e.to_string()))?;
    let base = map.as_ptr() as usize;
    let mut out = Vec::with_capacity(dtypes.len());
    // File order (the header's), not the crate's.
    for (name, _) in &entries.0 {
        let Some(&dtype) = dtypes.get(name) else {
            continue;
        };
        let view = st
            .tensor(name)
            .map_err(|e| ImportError::format(path, format!("tensor `{name}`"), e.to_string()))?;
        let data = view.data();
        let offset = (data.as_ptr() as usize).wrapping_sub(base);
        let len = data.len();
        if data.is_empty() {
            // An empty tensor's view may point anywhere; it has no bytes to read.
        } else if offset.checked_add(len).is_none_or(|e| e > map.len()) {
            return Err(ImportError::format(
                path,
                format!("tensor `{name}`: data_offsets"),
                "outside the file",
            ));
        }
        out.push(DumpTensor {
            name: name.clone(),
            dtype,
            endian: Endian::Little,
            shape: Some(view.shape().to_vec()),
            fortran_order: false,
            pos: None,
            file: path.to_path_buf(),
            bytes: Bytes::Mapped {
                map: map.clone(),
                offset: if data.is_empty() { 0 } else { offset },
                len,
            },
        });
    }
    Ok(out)
}

/// Write tensors as one safetensors file (row-major, little-endian): floats as F32, integers
/// as I64. The header is written by hand so tensor order is the caller's.
pub fn write(
    path: &Path,
    tensors: &[(String, Vec<usize>, super::tensor::TensorValues)],
    metadata: &[(String, String)],
) -> Result<(), ImportError> {
    use super::tensor::TensorValues;
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> = metadata
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        header.insert("__metadata__".into(), serde_json::Value::Object(m));
    }
    let mut offset = 0usize;
    for (name, shape, values) in tensors {
        let (dtype, size) = match values {
            TensorValues::F32(_) => ("F32", 4),
            TensorValues::I64(_) => ("I64", 8),
        };
        if super::tensor::checked_count(shape) != Some(values.len()) {
            return Err(ImportError::format(
                path,
                format!("tensor `{name}`"),
                format!("shape {shape:?} does not hold {} values", values.len()),
            ));
        }
        let end = offset + values.len() * size;
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut text = serde_json::to_vec(&serde_json::Value::Object(header))
        .map_err(|e| ImportError::format(path, "header", e.to_string()))?;
    // Pad with spaces so the buffer starts 8-byte aligned (the format allows trailing spaces).
    while (8 + text.len()) % 8 != 0 {
        text.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + text.len() + offset);
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(&text);
    for (_, _, values) in tensors {
        match values {
            TensorValues::F32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            TensorValues::I64(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        }
    }
    let tmp = path.with_extension("safetensors.tmp");
    std::fs::write(&tmp, &out).map_err(|e| ImportError::io(&tmp, "write", e))?;
    std::fs::rename(&tmp, path).map_err(|e| ImportError::io(path, "rename into place", e))
}
