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

// ---- Python (gguf-py 0.19.0) discovery ------------------------------------------------------

use std::process::Command;
use std::sync::OnceLock;

/// The gguf-py version the cross-checks are pinned to (tests/py/requirements.txt).
pub const GGUF_PY_VERSION: &str = "0.19.0";

fn has_gguf(python: &Path) -> bool {
    let check = format!(
        "import importlib.metadata as m, numpy, gguf; assert m.version('gguf') == '{GGUF_PY_VERSION}'"
    );
    Command::new(python)
        .args(["-c", &check])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn create_venv(venv: &Path) -> Result<PathBuf, String> {
    let tmp = venv.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let run = |cmd: &mut Command| -> Result<(), String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{cmd:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    run(Command::new("python3").arg("-m").arg("venv").arg(&tmp))?;
    let requirements = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/requirements.txt");
    run(Command::new(tmp.join("bin/python"))
        .args(["-m", "pip", "install", "-q", "-r"])
        .arg(&requirements))?;
    if std::fs::rename(&tmp, venv).is_err() {
        let _ = std::fs::remove_dir_all(&tmp); // another test binary won the race
    }
    let python = venv.join("bin/python");
    if has_gguf(&python) {
        Ok(python)
    } else {
        Err(format!(
            "{} has no gguf {GGUF_PY_VERSION}",
            python.display()
        ))
    }
}

fn find_python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GOLDEN_LENS_PY") {
        let p = PathBuf::from(p);
        assert!(
            has_gguf(&p),
            "GOLDEN_LENS_PY={} cannot import gguf=={GGUF_PY_VERSION} and numpy; \
             install them with `{} -m pip install -r tests/py/requirements.txt`",
            p.display(),
            p.display()
        );
        return Some(p);
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gguf-py-venv");
    let python = venv.join("bin/python");
    if has_gguf(&python) {
        return Some(python);
    }
    match create_venv(&venv) {
        Ok(p) => Some(p),
        Err(why) => {
            let msg = format!(
                "gguf-py cross-check needs python with gguf=={GGUF_PY_VERSION}: set GOLDEN_LENS_PY \
                 to such a python, or let the test create {} (pip needs PyPI). Setup failed: {why}",
                venv.display()
            );
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{msg}");
            }
            eprintln!("notice: skipping: {msg}");
            None
        }
    }
}

/// A python that imports gguf 0.19.0, or `None` (after a printed notice) outside CI. Under
/// `CI=true` a missing python/gguf fails the calling test.
pub fn python_with_gguf() -> Option<PathBuf> {
    static PYTHON: OnceLock<Option<PathBuf>> = OnceLock::new();
    PYTHON.get_or_init(find_python).clone()
}

/// Runs `tests/py/<script> <out_dir>` with `python`; panics with its stderr on failure.
pub fn run_py_script(python: &Path, script: &str, out_dir: &Path) {
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(script);
    let out = Command::new(python)
        .arg(&script_path)
        .arg(out_dir)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        script_path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Reads a little-endian f32 file.
pub fn read_f32_file(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).expect("read f32 file");
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Index and values of the first element whose bits differ (NaN matches any NaN).
pub fn first_bit_mismatch(ours: &[f32], theirs: &[f32]) -> Option<(usize, f32, f32)> {
    ours.iter()
        .zip(theirs)
        .enumerate()
        .find(|(_, (a, b))| a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()))
        .map(|(i, (a, b))| (i, *a, *b))
}

// ---- tiny deepseek41 files in both dialects ------------------------------------------------

/// An ordered, editable metadata list (tests replace or drop single keys).
#[derive(Clone, Debug, Default)]
pub struct Kvs(pub Vec<(String, V)>);

impl Kvs {
    pub fn set(mut self, key: &str, v: V) -> Self {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => self.0.push((key.to_string(), v)),
        }
        self
    }
    pub fn remove(mut self, key: &str) -> Self {
        self.0.retain(|(k, _)| k != key);
        self
    }
    pub fn builder(&self) -> Builder {
        let mut b = Builder::new();
        for (k, v) in &self.0 {
            if k == "general.alignment" {
                if let V::U32(a) = v {
                    b.alignment = *a as u64;
                }
            }
            b = b.kv(k, v.clone());
        }
        b
    }
}

/// The first 24 primes: one tiny engram layer of 8 heads x 3 n-gram orders; they sum to 963.
pub const TINY_PRIMES: [u64; 24] = [
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89,
];
pub const TINY_ROWS: u64 = 963;
pub const TINY_VOCAB: u64 = 16;
pub const TINY_COMPRESSED_VOCAB: u64 = 10;
pub const TINY_MULTIPLIERS: [u64; 4] = [3, 5, 7, 9];

/// ds4-dialect metadata of a 3-layer model with one engram layer (block 1).
pub fn ds4_kvs() -> Kvs {
    let p = |k: &str| format!("deepseek41.{k}");
    let mut kvs = Kvs::default()
        .set("general.architecture", s("deepseek41"))
        .set("general.name", s("tiny ds4"))
        .set("general.alignment", V::U32(64));
    for (k, v) in [
        ("vocab_size", TINY_VOCAB as u32),
        ("hidden_size", 64),
        ("moe_intermediate_size", 32),
        ("num_hidden_layers", 3),
        ("num_attention_heads", 4),
        ("num_key_value_heads", 1),
        ("head_dim", 32),
        ("qk_rope_head_dim", 8),
        ("q_lora_rank", 16),
        ("o_lora_rank", 16),
        ("o_groups", 2),
        ("n_routed_experts", 4),
        ("n_shared_experts", 1),
        ("num_experts_per_tok", 2),
        ("max_position_embeddings", 1024),
        ("sliding_window", 8),
        ("index_n_heads", 2),
        ("index_head_dim", 32),
        ("index_topk", 4),
        ("candidate_source_layer_id", 2),
        ("candidate_topk_blocks", 4),
        ("candidate_block_size", 2),
        ("hc_mult", 4),
        ("hc_sinkhorn_iters", 20),
        ("rope_theta", 10000),
        ("compress_rope_theta", 160000),
    ] {
        kvs = kvs.set(&p(k), V::U32(v));
    }
    for (k, v) in [
        ("rms_norm_eps", 1e-20f32),
        ("hc_eps", 1e-6),
        ("swiglu_limit", 10.0),
        ("routed_scaling_factor", 1.5),
        ("rope_scaling.factor", 16.0),
        ("rope_scaling.beta_fast", 32.0),
        ("rope_scaling.beta_slow", 1.0),
        ("rope_scaling.original_max_position_embeddings", 65536.0),
    ] {
        kvs = kvs.set(&p(k), V::F32(v));
    }
    kvs.set(&p("scoring_func"), s("sqrtsoftplus"))
        .set(&p("hidden_act"), s("silu"))
        .set(&p("topk_method"), s("noaux_tc"))
        .set(&p("norm_topk_prob"), V::Bool(true))
        .set(&p("compress_ratios"), arr_u32(&[0, 2, 1]))
        .set(&p("kv_source_layer_ids"), arr_u32(&[2]))
        .set(&p("index_source_layer_ids"), arr_u32(&[2]))
        .set(&p("config"), s("{\"model_type\":\"deepseek_v41\"}"))
        .set(&p("engram.encoding"), s("e4m3_e8m0_32_row264"))
        .set(&p("engram.layer_ids"), arr_u32(&[1]))
        .set(&p("engram.rows"), arr_u32(&[TINY_ROWS as u32]))
        .set(
            &p("engram.compressed_vocab_size"),
            V::U32(TINY_COMPRESSED_VOCAB as u32),
        )
        .set(&p("engram.pad_id"), V::U32(2))
        .set(
            &p("engram.token_map"),
            arr_u32(
                &(0..TINY_VOCAB as u32)
                    .map(|i| i % TINY_COMPRESSED_VOCAB as u32)
                    .collect::<Vec<_>>(),
            ),
        )
        .set(
            &p("engram.primes"),
            V::Arr(4, TINY_PRIMES.iter().map(|&x| V::U32(x as u32)).collect()),
        )
        .set(&p("engram.multipliers"), arr_u64(&TINY_MULTIPLIERS))
}

/// One e4m3_e8m0_32_row264 row with valid codes (no NaN codes, no scale 255).
pub fn ds4_engram_row(row: u64) -> Vec<u8> {
    let mut b: Vec<u8> = (0..256u64)
        .map(|j| {
            let code = ((row * 7 + j * 3) % 0x7e) as u8; // 0..=0x7d, never 0x7f
            if j % 2 == 1 {
                code | 0x80
            } else {
                code
            }
        })
        .collect();
    b.extend((0..8u64).map(|k| 120 + ((row + k) % 10) as u8));
    b
}

/// A complete tiny ds4 file: a few backbone tensors, then the engram table last.
pub fn ds4_builder(kvs: &Kvs) -> Builder {
    let table: Vec<u8> = (0..TINY_ROWS).flat_map(ds4_engram_row).collect();
    kvs.builder()
        .tensor(tensor(
            "token_embd.weight",
            &[64, TINY_VOCAB],
            0,
            f32_bytes(&vec![0.25; 64 * TINY_VOCAB as usize]),
        ))
        .tensor(tensor(
            "output_norm.weight",
            &[64],
            0,
            f32_bytes(&[1.0; 64]),
        ))
        .tensor(tensor(
            "blk.1.engram_embd.weight",
            &[264, TINY_ROWS],
            24,
            table,
        ))
}

/// llama.cpp-dialect metadata: one engram layer (block 1) with 2 heads x 1 n-gram order.
pub fn llama_kvs() -> Kvs {
    let p = |k: &str| format!("deepseek41.{k}");
    let mut kvs = Kvs::default()
        .set("general.architecture", s("deepseek41"))
        .set("general.alignment", V::U32(32))
        .set(
            "tokenizer.ggml.tokens",
            arr_str(&["a"; TINY_VOCAB as usize]),
        );
    for (k, v) in [
        ("block_count", 3u32),
        ("context_length", 1024),
        ("embedding_length", 64),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 1),
        ("attention.key_length", 32),
        ("attention.value_length", 32),
        ("rope.dimension_count", 8),
        ("attention.q_lora_rank", 16),
        ("attention.output_lora_rank", 16),
        ("attention.output_group_count", 2),
        ("attention.sliding_window", 8),
        ("expert_count", 4),
        ("expert_used_count", 2),
        ("expert_shared_count", 1),
        ("expert_feed_forward_length", 32),
        ("attention.indexer.head_count", 2),
        ("attention.indexer.key_length", 32),
        ("attention.indexer.top_k", 4),
        ("hyper_connection.count", 4),
        ("engram.head_count", 2),
        ("engram.key_length", 256),
        ("engram.max_ngram_size", 2),
        ("engram.pad_id", 2),
    ] {
        kvs = kvs.set(&p(k), V::U32(v));
    }
    for (k, v) in [
        ("rope.freq_base", 10000.0f32),
        ("attention.layer_norm_rms_epsilon", 1e-20),
        ("expert_weights_scale", 1.5),
        ("attention.compress_rope_freq_base", 160000.0),
    ] {
        kvs = kvs.set(&p(k), V::F32(v));
    }
    kvs.set(&p("expert_weights_norm"), V::Bool(true))
        .set(&p("expert_gating_func"), V::U32(3))
        .set(
            &p("attention.compress_ratios"),
            arr_i32(&[0, 2, 1, 0, 0, 0]),
        )
        .set(&p("swiglu_clamp_exp"), V::Arr(6, vec![V::F32(10.0); 3]))
        .set(&p("engram.layer_ids"), arr_i32(&[1]))
        .set(&p("engram.primes"), arr_u64(&[5, 7]))
        .set(&p("engram.offsets"), arr_u64(&[0, 5]))
        .set(&p("engram.multipliers"), arr_u64(&[3, 5]))
        .set(
            &p("engram.token_map"),
            arr_i32(&(0..TINY_VOCAB as i32).map(|i| i % 10).collect::<Vec<_>>()),
        )
}

/// Rows of the llama.cpp tiny engram table (sum of [5, 7]).
pub const LLAMA_TINY_ROWS: u64 = 12;

/// One Q8_0 engram row (8 blocks): scale 0.5, values (row + j) % 7 − 3.
pub fn llama_engram_row(row: u64) -> Vec<u8> {
    let mut b = Vec::new();
    for blk in 0..8u64 {
        b.extend([0x00, 0x38]); // f16 0.5
        b.extend((0..32u64).map(|j| (((row + blk * 32 + j) % 7) as i8 - 3) as u8));
    }
    b
}

pub fn llama_builder(kvs: &Kvs) -> Builder {
    let table: Vec<u8> = (0..LLAMA_TINY_ROWS).flat_map(llama_engram_row).collect();
    kvs.builder()
        .tensor(tensor(
            "token_embd.weight",
            &[64, TINY_VOCAB],
            30,
            vec![0x80; 2 * 64 * TINY_VOCAB as usize],
        ))
        .tensor(tensor(
            "blk.1.engram_embd.weight",
            &[256, LLAMA_TINY_ROWS],
            8,
            table,
        ))
}

/// A metadata value read from `file` as the writer's value (arrays read whole), for tests that
/// copy a GGUF's metadata into a [`golden_lens::gguf::GgufWriter`] with some edit.
pub fn writer_value(
    file: &golden_lens::gguf::GgufFile,
    v: &golden_lens::gguf::MetaValue,
) -> golden_lens::gguf::GgufValue {
    use golden_lens::gguf::{GgufValue, MetaValue};
    match v {
        MetaValue::U8(x) => GgufValue::U8(*x),
        MetaValue::I8(x) => GgufValue::I8(*x),
        MetaValue::U16(x) => GgufValue::U16(*x),
        MetaValue::I16(x) => GgufValue::I16(*x),
        MetaValue::U32(x) => GgufValue::U32(*x),
        MetaValue::I32(x) => GgufValue::I32(*x),
        MetaValue::U64(x) => GgufValue::U64(*x),
        MetaValue::I64(x) => GgufValue::I64(*x),
        MetaValue::F32(x) => GgufValue::F32(*x),
        MetaValue::F64(x) => GgufValue::F64(*x),
        MetaValue::Bool(x) => GgufValue::Bool(*x),
        MetaValue::String(s) => GgufValue::String(s.clone()),
        MetaValue::Array(a) => GgufValue::Array(
            a.elem_type,
            file.array_values(a, None)
                .expect("array values")
                .iter()
                .map(|x| writer_value(file, x))
                .collect(),
        ),
    }
}
