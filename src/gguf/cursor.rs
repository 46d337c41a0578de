//! Bounds-checked byte cursors used by the header parser. `FileCursor` reads the header with
//! positioned reads through a small window (so opening a 340 GB file touches only its header);
//! `SliceCursor` decodes lazy arrays later from the mapped header bytes. Both refuse to read or
//! skip past the end of the file and report the field that needed the bytes.

use super::error::{GgufError, Result};
use super::value::{MetaArray, MetaValue, ValueType};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Arrays may nest (the format allows it), but not deeper than this: real files use none, and a
/// bound keeps recursion finite on hostile input.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Bytes fetched per positioned read while walking the header.
const WINDOW_BYTES: u64 = 1 << 20;

/// A source of header bytes with a position and a known end.
pub(crate) trait Source {
    /// The file these bytes belong to (for errors).
    fn path(&self) -> &Path;
    /// Absolute offset of the next byte.
    fn pos(&self) -> u64;
    /// Bytes left before the end of the file.
    fn remaining(&self) -> u64;
    /// Returns the next `n` bytes and advances; an error names `field` if the file is shorter.
    fn take(&mut self, n: u64, field: &dyn Fn() -> String) -> Result<&[u8]>;
    /// Advances by `n` bytes without reading them.
    fn skip(&mut self, n: u64, field: &dyn Fn() -> String) -> Result<()>;

    /// The error for "need `n` bytes here but the file ends".
    fn truncated(&self, n: u64, field: &dyn Fn() -> String) -> GgufError {
        GgufError::Truncated {
            path: self.path().to_path_buf(),
            offset: self.pos(),
            field: field(),
            needed: n,
            available: self.remaining(),
        }
    }
}

/// Reads the header of an open file with `read_exact_at`, one window at a time.
pub(crate) struct FileCursor<'a> {
    file: &'a File,
    path: &'a Path,
    file_len: u64,
    pos: u64,
    window: Vec<u8>,
    window_start: u64,
}

impl<'a> FileCursor<'a> {
    pub(crate) fn new(file: &'a File, path: &'a Path, file_len: u64) -> Self {
        FileCursor {
            file,
            path,
            file_len,
            pos: 0,
            window: Vec::new(),
            window_start: 0,
        }
    }
}

impl Source for FileCursor<'_> {
    fn path(&self) -> &Path {
        self.path
    }
    fn pos(&self) -> u64 {
        self.pos
    }
    fn remaining(&self) -> u64 {
        self.file_len.saturating_sub(self.pos)
    }
    fn take(&mut self, n: u64, field: &dyn Fn() -> String) -> Result<&[u8]> {
        if n > self.remaining() {
            return Err(self.truncated(n, field));
        }
        let window_end = self.window_start + self.window.len() as u64;
        if self.pos < self.window_start || self.pos + n > window_end {
            // Refill: a window from pos, or exactly n bytes when n is larger than a window.
            // n <= remaining, so this never allocates more than the file holds.
            let len = n.max(WINDOW_BYTES.min(self.remaining()));
            let len_usize = usize::try_from(len).map_err(|_| self.truncated(n, field))?;
            self.window.clear();
            self.window.resize(len_usize, 0);
            self.file
                .read_exact_at(&mut self.window, self.pos)
                .map_err(|source| GgufError::Io {
                    path: self.path.to_path_buf(),
                    action: "read the header",
                    source,
                })?;
            self.window_start = self.pos;
        }
        let start = (self.pos - self.window_start) as usize;
        self.pos += n;
        Ok(&self.window[start..start + n as usize])
    }
    fn skip(&mut self, n: u64, field: &dyn Fn() -> String) -> Result<()> {
        if n > self.remaining() {
            return Err(self.truncated(n, field));
        }
        self.pos += n;
        Ok(())
    }
}

/// Walks bytes already in memory (the mapped header); offsets stay absolute file offsets.
pub(crate) struct SliceCursor<'a> {
    bytes: &'a [u8],
    path: &'a Path,
    pos: u64,
}

impl<'a> SliceCursor<'a> {
    /// `bytes` must start at file offset 0; `pos` is where to begin.
    pub(crate) fn new(bytes: &'a [u8], path: &'a Path, pos: u64) -> Self {
        SliceCursor { bytes, path, pos }
    }
}

impl Source for SliceCursor<'_> {
    fn path(&self) -> &Path {
        self.path
    }
    fn pos(&self) -> u64 {
        self.pos
    }
    fn remaining(&self) -> u64 {
        (self.bytes.len() as u64).saturating_sub(self.pos)
    }
    fn take(&mut self, n: u64, field: &dyn Fn() -> String) -> Result<&[u8]> {
        if n > self.remaining() {
            return Err(self.truncated(n, field));
        }
        let start = self.pos as usize;
        self.pos += n;
        Ok(&self.bytes[start..start + n as usize])
    }
    fn skip(&mut self, n: u64, field: &dyn Fn() -> String) -> Result<()> {
        if n > self.remaining() {
            return Err(self.truncated(n, field));
        }
        self.pos += n;
        Ok(())
    }
}

/// Reads `N` bytes as a fixed array.
pub(crate) fn read_array<const N: usize>(
    src: &mut dyn Source,
    field: &dyn Fn() -> String,
) -> Result<[u8; N]> {
    let bytes = src.take(N as u64, field)?;
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    Ok(out)
}

pub(crate) fn read_u32(src: &mut dyn Source, field: &dyn Fn() -> String) -> Result<u32> {
    Ok(u32::from_le_bytes(read_array(src, field)?))
}

pub(crate) fn read_u64(src: &mut dyn Source, field: &dyn Fn() -> String) -> Result<u64> {
    Ok(u64::from_le_bytes(read_array(src, field)?))
}

/// Reads a GGUF string (u64 length + bytes) as UTF-8.
pub(crate) fn read_string(src: &mut dyn Source, field: &dyn Fn() -> String) -> Result<String> {
    let len = read_u64(src, &|| format!("{} (string length)", field()))?;
    let start = src.pos();
    let bytes = src.take(len, field)?;
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_owned()),
        Err(_) => Err(GgufError::InvalidUtf8 {
            path: src.path().to_path_buf(),
            offset: start,
            field: field(),
        }),
    }
}

/// Skips a GGUF string without decoding it.
fn skip_string(src: &mut dyn Source, field: &dyn Fn() -> String) -> Result<()> {
    let len = read_u64(src, &|| format!("{} (string length)", field()))?;
    src.skip(len, field)
}

/// Reads a value type id and checks it is one of the 13 known types.
pub(crate) fn read_value_type(
    src: &mut dyn Source,
    field: &dyn Fn() -> String,
) -> Result<ValueType> {
    let offset = src.pos();
    let id = read_u32(src, field)?;
    ValueType::from_id(id).ok_or_else(|| GgufError::UnknownValueType {
        path: src.path().to_path_buf(),
        offset,
        field: field(),
        type_id: id,
    })
}

/// Reads one value of type `vtype`. Arrays are not decoded: their header is read, their
/// elements are walked (to find where they end and to check every length) and skipped.
pub(crate) fn read_value(
    src: &mut dyn Source,
    vtype: ValueType,
    depth: usize,
    field: &dyn Fn() -> String,
) -> Result<MetaValue> {
    Ok(match vtype {
        ValueType::U8 => MetaValue::U8(read_array::<1>(src, field)?[0]),
        ValueType::I8 => MetaValue::I8(i8::from_le_bytes(read_array(src, field)?)),
        ValueType::U16 => MetaValue::U16(u16::from_le_bytes(read_array(src, field)?)),
        ValueType::I16 => MetaValue::I16(i16::from_le_bytes(read_array(src, field)?)),
        ValueType::U32 => MetaValue::U32(u32::from_le_bytes(read_array(src, field)?)),
        ValueType::I32 => MetaValue::I32(i32::from_le_bytes(read_array(src, field)?)),
        ValueType::F32 => MetaValue::F32(f32::from_le_bytes(read_array(src, field)?)),
        ValueType::Bool => {
            let offset = src.pos();
            match read_array::<1>(src, field)?[0] {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                other => {
                    return Err(GgufError::UnknownValueType {
                        path: src.path().to_path_buf(),
                        offset,
                        field: format!("{} (bool byte must be 0 or 1, found {other})", field()),
                        type_id: ValueType::Bool.id(),
                    })
                }
            }
        }
        ValueType::String => MetaValue::String(read_string(src, field)?),
        ValueType::U64 => MetaValue::U64(u64::from_le_bytes(read_array(src, field)?)),
        ValueType::I64 => MetaValue::I64(i64::from_le_bytes(read_array(src, field)?)),
        ValueType::F64 => MetaValue::F64(f64::from_le_bytes(read_array(src, field)?)),
        ValueType::Array => MetaValue::Array(read_array_lazy(src, depth, field)?),
    })
}

/// Reads an array header (element type, count), bounds the count by the bytes left, then walks
/// past the elements. Returns where the elements are.
pub(crate) fn read_array_lazy(
    src: &mut dyn Source,
    depth: usize,
    field: &dyn Fn() -> String,
) -> Result<MetaArray> {
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::ArrayTooDeep {
            path: src.path().to_path_buf(),
            offset: src.pos(),
            field: field(),
            max_depth: MAX_ARRAY_DEPTH,
        });
    }
    let elem_type = read_value_type(src, &|| format!("{} (array element type)", field()))?;
    let count_offset = src.pos();
    let count = read_u64(src, &|| format!("{} (array length)", field()))?;
    let remaining = src.remaining();
    let max_count = remaining / elem_type.min_size();
    if count > max_count {
        return Err(GgufError::CountTooLarge {
            path: src.path().to_path_buf(),
            offset: count_offset,
            field: format!("{} (array<{}> length)", field(), elem_type),
            count,
            remaining,
            max_count,
        });
    }
    let data_offset = src.pos();
    match elem_type.fixed_size() {
        // count * size <= remaining by the bound above, so no overflow.
        Some(size) => src.skip(count * size, field)?,
        None if elem_type == ValueType::String => {
            for i in 0..count {
                skip_string(src, &|| format!("{} element {i}", field()))?;
            }
        }
        None => {
            for i in 0..count {
                let elem_field = || format!("{} element {i}", field());
                read_array_lazy(src, depth + 1, &elem_field)?;
            }
        }
    }
    Ok(MetaArray {
        elem_type,
        count,
        data_offset,
        byte_len: src.pos() - data_offset,
    })
}
