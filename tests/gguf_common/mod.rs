//! A small byte builder for GGUF test files: well-formed by default, with knobs to break any
//! field. Shared by the `gguf_*` integration tests (`mod gguf_common;`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A metadata value as it is encoded (type id + payload).
#[derive(Clone, Debug)]
pub enum V {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    /// Element type id and elements (each encoded without its own type id).
    Arr(u32, Vec<V>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl V {
    pub fn type_id(&self) -> u32 {
        match self {
            V::U8(_) => 0,
            V::I8(_) => 1,
            V::U16(_) => 2,
            V::I16(_) => 3,
            V::U32(_) => 4,
            V::I32(_) => 5,
            V::F32(_) => 6,
            V::Bool(_) => 7,
            V::Str(_) => 8,
            V::Arr(..) => 9,
            V::U64(_) => 10,
            V::I64(_) => 11,
            V::F64(_) => 12,
        }
    }

    /// The payload without the type id.
    pub fn payload(&self) -> Vec<u8> {
        match self {
            V::U8(v) => vec![*v],
            V::I8(v) => vec![*v as u8],
            V::U16(v) => v.to_le_bytes().to_vec(),
            V::I16(v) => v.to_le_bytes().to_vec(),
            V::U32(v) => v.to_le_bytes().to_vec(),
            V::I32(v) => v.to_le_bytes().to_vec(),
            V::F32(v) => v.to_le_bytes().to_vec(),
            V::Bool(v) => vec![*v as u8],
            V::Str(s) => gguf_string(s),
            V::Arr(t, items) => {
                let mut b = t.to_le_bytes().to_vec();
                b.extend((items.len() as u64).to_le_bytes());
                for it in items {
                    b.extend(it.payload());
                }
                b
            }
            V::U64(v) => v.to_le_bytes().to_vec(),
            V::I64(v) => v.to_le_bytes().to_vec(),
            V::F64(v) => v.to_le_bytes().to_vec(),
        }
    }
}

pub fn s(x: &str) -> V {
    V::Str(x.to_string())
}

pub fn arr_u32(xs: &[u32]) -> V {
    V::Arr(4, xs.iter().map(|&x| V::U32(x)).collect())
}

pub fn arr_u64(xs: &[u64]) -> V {
    V::Arr(10, xs.iter().map(|&x| V::U64(x)).collect())
}

pub fn arr_i32(xs: &[i32]) -> V {
    V::Arr(5, xs.iter().map(|&x| V::I32(x)).collect())
}

pub fn arr_str(xs: &[&str]) -> V {
    V::Arr(8, xs.iter().map(|x| s(x)).collect())
}

pub fn gguf_string(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend(s.as_bytes());
    b
}

/// One encoded key/value pair.
pub fn kv(key: &str, v: V) -> Vec<u8> {
    let mut b = gguf_string(key);
    b.extend(v.type_id().to_le_bytes());
    b.extend(v.payload());
    b
}

/// A tensor to place in the data section.
#[derive(Clone, Debug)]
pub struct T {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub data: Vec<u8>,
    /// Overrides the computed relative offset.
    pub offset: Option<u64>,
}

pub fn tensor(name: &str, dims: &[u64], type_id: u32, data: Vec<u8>) -> T {
    T {
        name: name.to_string(),
        dims: dims.to_vec(),
        type_id,
        data,
        offset: None,
    }
}

/// f32 values as tensor bytes.
pub fn f32_bytes(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Builds a GGUF file image.
#[derive(Clone, Debug)]
pub struct Builder {
    pub magic: [u8; 4],
    pub version: u32,
    pub kvs: Vec<Vec<u8>>,
    pub tensors: Vec<T>,
    /// Alignment used for placing data (set `general.alignment` yourself to match).
    pub alignment: u64,
    pub tensor_count: Option<u64>,
    pub kv_count: Option<u64>,
    /// Cut the image to this many bytes.
    pub truncate_to: Option<usize>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            magic: *b"GGUF",
            version: 3,
            kvs: Vec::new(),
            tensors: Vec::new(),
            alignment: 32,
            tensor_count: None,
            kv_count: None,
            truncate_to: None,
        }
    }
}

fn align(x: u64, a: u64) -> u64 {
    x.div_ceil(a).saturating_mul(a)
}

impl Builder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn kv(mut self, key: &str, v: V) -> Self {
        self.kvs.push(kv(key, v));
        self
    }

    pub fn raw_kv(mut self, bytes: Vec<u8>) -> Self {
        self.kvs.push(bytes);
        self
    }

    pub fn tensor(mut self, t: T) -> Self {
        self.tensors.push(t);
        self
    }

    /// Sets `general.alignment` (as u32) and places data with it.
    pub fn alignment(mut self, a: u32) -> Self {
        self.alignment = a.max(1) as u64;
        self.kv("general.alignment", V::U32(a))
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut b = self.magic.to_vec();
        b.extend(self.version.to_le_bytes());
        b.extend(
            self.tensor_count
                .unwrap_or(self.tensors.len() as u64)
                .to_le_bytes(),
        );
        b.extend(self.kv_count.unwrap_or(self.kvs.len() as u64).to_le_bytes());
        for k in &self.kvs {
            b.extend(k);
        }
        let mut offsets = Vec::new();
        let mut next = 0u64;
        for t in &self.tensors {
            let off = t.offset.unwrap_or(next);
            offsets.push(off);
            next = align(off.saturating_add(t.data.len() as u64), self.alignment).max(next);
        }
        for (t, off) in self.tensors.iter().zip(&offsets) {
            b.extend(gguf_string(&t.name));
            b.extend((t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                b.extend(d.to_le_bytes());
            }
            b.extend(t.type_id.to_le_bytes());
            b.extend(off.to_le_bytes());
        }
        let data_start = align(b.len() as u64, self.alignment) as usize;
        b.resize(data_start, 0);
        for (t, off) in self.tensors.iter().zip(&offsets) {
            if t.data.is_empty() {
                continue; // lets tests claim offsets far past the end without writing there
            }
            let start = data_start + *off as usize;
            if b.len() < start + t.data.len() {
                b.resize(start + t.data.len(), 0);
            }
            b[start..start + t.data.len()].copy_from_slice(&t.data);
        }
        if let Some(n) = self.truncate_to {
            b.truncate(n);
        }
        b
    }

    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, self.bytes()).expect("write test file");
        p
    }
}
