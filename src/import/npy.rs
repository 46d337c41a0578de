//! `.npy` reader (format versions 1.0, 2.0 and 3.0): the header length is capped before the
//! header is read, the header is parsed as the small Python literal it is (never evaluated),
//! object (pickle) and structured dtypes are refused, byte order and `fortran_order` are
//! honoured, and the declared shape must fit the bytes that follow exactly.

use super::error::ImportError;
use super::tensor::{checked_count, map_file, Bytes, DType, DumpTensor, Endian};
use std::path::Path;

/// NumPy's own default `max_header_size`: headers longer than this are refused before a byte of
/// them is read (a hostile file can claim up to 4 GiB in versions 2 and 3).
pub const MAX_HEADER_BYTES: usize = 10_000;

/// Magic, version and the length field of the largest version.
pub const PREAMBLE_BYTES: usize = 12;

/// A parsed `.npy` header.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyHeader {
    pub dtype: DType,
    pub endian: Endian,
    pub fortran_order: bool,
    pub shape: Vec<usize>,
    /// Bytes before the data (magic + version + length field + header).
    pub data_offset: usize,
    /// Bytes of data the shape and dtype call for (checked arithmetic).
    pub data_len: usize,
}

impl NpyHeader {
    /// The tensor this header describes, named `name`, with its bytes at `bytes`.
    pub(crate) fn tensor(self, name: String, path: &Path, bytes: Bytes) -> DumpTensor {
        DumpTensor {
            name,
            dtype: self.dtype,
            endian: self.endian,
            shape: Some(self.shape),
            fortran_order: self.fortran_order,
            pos: None,
            file: path.to_path_buf(),
            bytes,
        }
    }
}

/// The header length field's size and the total preamble for a version, from the first bytes.
fn preamble(path: &Path, what: &str, head: &[u8]) -> Result<(usize, usize), ImportError> {
    if head.len() < 10 || &head[..6] != b"\x93NUMPY" {
        return Err(ImportError::format(
            path,
            format!("{what}: magic"),
            "not a .npy file (expected \\x93NUMPY)",
        ));
    }
    let (len_bytes, len) = match (head[6], head[7]) {
        (1, 0) => (2, u16::from_le_bytes([head[8], head[9]]) as usize),
        (2, 0) | (3, 0) => {
            if head.len() < PREAMBLE_BYTES {
                return Err(ImportError::format(
                    path,
                    format!("{what}: header length"),
                    "truncated",
                ));
            }
            let v = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
            (4, v as usize)
        }
        (major, minor) => {
            return Err(ImportError::format(
                path,
                format!("{what}: version"),
                format!("{major}.{minor}, expected 1.0, 2.0 or 3.0"),
            ))
        }
    };
    if len > MAX_HEADER_BYTES {
        return Err(ImportError::format(
            path,
            format!("{what}: header length"),
            format!("{len} bytes claimed, more than the {MAX_HEADER_BYTES}-byte limit"),
        ));
    }
    Ok((len, 8 + len_bytes))
}

/// Bytes the full header occupies (preamble + header text), from the first bytes of the file.
pub(crate) fn header_extent(path: &Path, what: &str, head: &[u8]) -> Result<usize, ImportError> {
    let (len, pre) = preamble(path, what, head)?;
    Ok(pre + len)
}

/// Parse a whole header (`bytes` holds at least [`header_extent`] bytes) and check the
/// declared data size against `available` data bytes.
pub(crate) fn parse_header(
    path: &Path,
    what: &str,
    bytes: &[u8],
    available: u64,
) -> Result<NpyHeader, ImportError> {
    let (len, pre) = preamble(path, what, bytes)?;
    let end = pre + len;
    let text = bytes.get(pre..end).ok_or_else(|| {
        ImportError::format(path, format!("{what}: header"), "truncated before its end")
    })?;
    let text = if bytes[6] == 3 {
        std::str::from_utf8(text)
            .map_err(|e| {
                ImportError::format(path, format!("{what}: header"), format!("not UTF-8: {e}"))
            })?
            .to_string()
    } else {
        // latin-1: every byte is one code point.
        text.iter().map(|&b| b as char).collect()
    };
    let dict = literal::parse_dict(&text)
        .map_err(|msg| ImportError::format(path, format!("{what}: header"), msg))?;
    let field = |key: &str| {
        dict.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .ok_or_else(|| {
                ImportError::format(path, format!("{what}: header"), format!("no `{key}` key"))
            })
    };
    if dict.len() != 3 {
        return Err(ImportError::format(
            path,
            format!("{what}: header"),
            "expected exactly the keys descr, fortran_order and shape",
        ));
    }
    let descr = match field("descr")? {
        literal::Value::Str(s) => s.clone(),
        _ => {
            return Err(ImportError::format(
                path,
                format!("{what}: descr"),
                "structured dtypes are not supported (expected a string such as '<f4')",
            ))
        }
    };
    let (dtype, endian) = parse_descr(&descr)
        .map_err(|msg| ImportError::format(path, format!("{what}: descr '{descr}'"), msg))?;
    let fortran_order = match field("fortran_order")? {
        literal::Value::Bool(b) => *b,
        _ => {
            return Err(ImportError::format(
                path,
                format!("{what}: fortran_order"),
                "expected True or False",
            ))
        }
    };
    let shape = match field("shape")? {
        literal::Value::Tuple(t) => t.clone(),
        _ => {
            return Err(ImportError::format(
                path,
                format!("{what}: shape"),
                "expected a tuple of integers",
            ))
        }
    };
    let data_len = checked_count(&shape)
        .and_then(|n| n.checked_mul(dtype.size_bytes()))
        .ok_or_else(|| {
            ImportError::format(
                path,
                format!("{what}: shape"),
                format!("{shape:?} overflows the element count"),
            )
        })?;
    if data_len as u64 != available {
        return Err(ImportError::format(
            path,
            format!("{what}: shape"),
            format!(
                "{shape:?} of {} needs {data_len} data bytes but {available} follow the header",
                dtype.name()
            ),
        ));
    }
    Ok(NpyHeader {
        dtype,
        endian,
        fortran_order,
        shape,
        data_offset: end,
        data_len,
    })
}

/// A descr string (`<f4`, `>i8`, `|b1`, `<V2`, ...) as dtype and byte order.
fn parse_descr(descr: &str) -> Result<(DType, Endian), String> {
    let mut chars = descr.chars();
    let order = chars.next().ok_or("empty")?;
    let endian = match order {
        '<' | '|' | '=' => Endian::Little,
        '>' => Endian::Big,
        _ => return Err("expected a byte-order character (<, >, | or =)".into()),
    };
    let rest: String = chars.collect();
    let dtype = match rest.as_str() {
        "f2" => DType::F16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" => DType::Bool,
        // Raw bytes: NumPy has no bf16 or fp8, so such data arrive as void and need a dtype
        // override (a map rule or a manifest) to mean anything.
        "V1" => DType::U8,
        "V2" => DType::U16,
        r if r.starts_with('O') => {
            return Err("object (pickle) arrays are refused: they run code on load".into())
        }
        _ => return Err("unsupported (expected f2, f4, f8, i1..i8, u1..u8, b1, V1 or V2)".into()),
    };
    Ok((dtype, endian))
}

/// Read a `.npy` file's one tensor, named after the file stem.
pub fn read(path: &Path) -> Result<Vec<DumpTensor>, ImportError> {
    let map = map_file(path)?;
    let map_len = map.len();
    if map_len < 10 {
        return Err(ImportError::format(
            path,
            "magic",
            "truncated (fewer than 10 bytes)",
        ));
    }
    let extent = header_extent(path, "npy", &map[..map_len.min(PREAMBLE_BYTES)])?;
    if extent > map_len {
        return Err(ImportError::format(
            path,
            "npy: header",
            format!("claims {extent} bytes but the file has {map_len}"),
        ));
    }
    let h = parse_header(path, "npy", &map[..extent], (map_len - extent) as u64)?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bytes = Bytes::Mapped {
        map: map.clone(),
        offset: h.data_offset,
        len: h.data_len,
    };
    Ok(vec![h.tensor(name, path, bytes)])
}

/// The tiny subset of Python literal syntax a `.npy` header uses: a dict of string keys whose
/// values are strings, `True`/`False` or tuples of non-negative integers.
mod literal {
    #[derive(Debug, Clone, PartialEq)]
    pub enum Value {
        Str(String),
        Bool(bool),
        Tuple(Vec<usize>),
        /// Anything else that parses (a list: structured dtypes).
        Other,
    }

    struct P<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl P<'_> {
        fn ws(&mut self) {
            while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            }
        }
        fn peek(&mut self) -> Option<u8> {
            self.ws();
            self.s.get(self.i).copied()
        }
        fn eat(&mut self, c: u8) -> Result<(), String> {
            if self.peek() == Some(c) {
                self.i += 1;
                Ok(())
            } else {
                Err(format!("expected `{}` at byte {}", c as char, self.i))
            }
        }
        fn string(&mut self) -> Result<String, String> {
            let q = self.peek().ok_or("unexpected end")?;
            if q != b'\'' && q != b'"' {
                return Err(format!("expected a quoted string at byte {}", self.i));
            }
            self.i += 1;
            let start = self.i;
            while self.i < self.s.len() && self.s[self.i] != q {
                if self.s[self.i] == b'\\' {
                    return Err("escapes are not supported in header strings".into());
                }
                self.i += 1;
            }
            if self.i >= self.s.len() {
                return Err("unterminated string".into());
            }
            let out = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
            self.i += 1;
            Ok(out)
        }
        fn int(&mut self) -> Result<usize, String> {
            self.ws();
            let start = self.i;
            while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                self.i += 1;
            }
            if start == self.i {
                return Err(format!("expected a non-negative integer at byte {start}"));
            }
            // Python may append `L` on old files.
            let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
            if self.s.get(self.i) == Some(&b'L') {
                self.i += 1;
            }
            digits
                .parse::<usize>()
                .map_err(|_| format!("dimension {digits} does not fit in 64 bits"))
        }
        fn value(&mut self, depth: usize) -> Result<Value, String> {
            if depth > 4 {
                return Err("nesting too deep".into());
            }
            match self.peek().ok_or("unexpected end")? {
                b'\'' | b'"' => Ok(Value::Str(self.string()?)),
                b'(' => {
                    self.i += 1;
                    let mut dims = Vec::new();
                    let mut other = false;
                    loop {
                        if self.peek() == Some(b')') {
                            self.i += 1;
                            break;
                        }
                        if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                            dims.push(self.int()?);
                        } else {
                            // A tuple of something else (a structured dtype's field).
                            self.value(depth + 1)?;
                            other = true;
                        }
                        match self.peek() {
                            Some(b',') => self.i += 1,
                            Some(b')') => {}
                            _ => return Err(format!("expected `,` or `)` at byte {}", self.i)),
                        }
                        if dims.len() > 32 {
                            return Err("more than 32 dimensions".into());
                        }
                    }
                    Ok(if other {
                        Value::Other
                    } else {
                        Value::Tuple(dims)
                    })
                }
                b'[' => {
                    self.i += 1;
                    loop {
                        if self.peek() == Some(b']') {
                            self.i += 1;
                            return Ok(Value::Other);
                        }
                        self.value(depth + 1)?;
                        match self.peek() {
                            Some(b',') => self.i += 1,
                            Some(b']') => {}
                            _ => return Err(format!("expected `,` or `]` at byte {}", self.i)),
                        }
                    }
                }
                _ => {
                    let rest = &self.s[self.i..];
                    if rest.starts_with(b"True") {
                        self.i += 4;
                        Ok(Value::Bool(true))
                    } else if rest.starts_with(b"False") {
                        self.i += 5;
                        Ok(Value::Bool(false))
                    } else {
                        Err(format!("unexpected token at byte {}", self.i))
                    }
                }
            }
        }
    }

    /// Parse `{key: value, ...}` followed only by whitespace.
    pub fn parse_dict(text: &str) -> Result<Vec<(String, Value)>, String> {
        let mut p = P {
            s: text.as_bytes(),
            i: 0,
        };
        p.eat(b'{')?;
        let mut out: Vec<(String, Value)> = Vec::new();
        loop {
            if p.peek() == Some(b'}') {
                p.i += 1;
                break;
            }
            let k = p.string()?;
            p.eat(b':')?;
            let v = p.value(0)?;
            if out.iter().any(|(e, _)| *e == k) {
                return Err(format!("key `{k}` appears twice"));
            }
            out.push((k, v));
            match p.peek() {
                Some(b',') => p.i += 1,
                Some(b'}') => {}
                _ => return Err(format!("expected `,` or `}}` at byte {}", p.i)),
            }
        }
        p.ws();
        if p.i != p.s.len() {
            return Err(format!("trailing bytes after the dict at byte {}", p.i));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_literal_parses_and_refuses_what_numpy_would_not_write() {
        let d =
            literal::parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }  \n")
                .unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(d[2].1, literal::Value::Tuple(vec![3, 4]));
        assert_eq!(
            literal::parse_dict("{'shape': (7,)}").unwrap()[0].1,
            literal::Value::Tuple(vec![7])
        );
        assert!(literal::parse_dict("{'shape': (99999999999999999999999,)}").is_err());
        assert!(literal::parse_dict("{'a': 1} x").is_err());
        assert!(literal::parse_dict("{'a': __import__('os')}").is_err());
    }

    #[test]
    fn descr_kinds_and_byte_order() {
        assert_eq!(parse_descr("<f4"), Ok((DType::F32, Endian::Little)));
        assert_eq!(parse_descr(">i8"), Ok((DType::I64, Endian::Big)));
        assert_eq!(parse_descr("|b1"), Ok((DType::Bool, Endian::Little)));
        assert!(parse_descr("|O").unwrap_err().contains("pickle"));
        assert!(parse_descr("<c8").is_err());
    }
}
