//! Strict loader for goldens v1, v2 and v3 (spec §2, §3): JSON text -> validated, typed `Golden`.
//! Every count, length and shape in the file is checked against the file itself before anything
//! is built from it, and every message names the file, regime, capture and field.

use std::path::{Path, PathBuf};

/// Every way a golden can be rejected. Messages name the file, and where it applies the
/// regime, the capture and the field.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    #[error("{path}: {msg}")]
    Invalid { path: String, msg: String },
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// Sampled capture values as the file holds them: floats (as f64, exact for f32 repr) or ints.
#[derive(Debug, Clone, PartialEq)]
pub enum CaptureData {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

/// One capture of one regime: `{shape, n, stride, ck, data}` with `data = flat[::stride]`.
#[derive(Debug, Clone)]
pub struct GoldenCapture {
    pub name: String,
    pub shape: Vec<usize>,
    pub n: usize,
    pub stride: usize,
    pub ck: f64,
    pub data: CaptureData,
}

impl GoldenCapture {
    /// The whole tensor as f32 if the capture is stored at stride 1 (a full capture).
    pub fn full_f32(&self) -> Option<Vec<f32>> {
        if self.stride != 1 {
            return None;
        }
        Some(match &self.data {
            CaptureData::Float(v) => v.iter().map(|&x| x as f32).collect(),
            CaptureData::Int(v) => v.iter().map(|&x| x as f32).collect(),
        })
    }
    /// The whole tensor as i64 if the capture is an integer capture stored at stride 1.
    pub fn full_i64(&self) -> Option<Vec<i64>> {
        match (&self.data, self.stride) {
            (CaptureData::Int(v), 1) => Some(v.clone()),
            _ => None,
        }
    }
    pub fn is_int(&self) -> bool {
        matches!(self.data, CaptureData::Int(_))
    }
}

/// One regime (`prefill12`, `decode12`, `decode13`): captures in file order.
#[derive(Debug, Clone)]
pub struct Regime {
    pub name: String,
    pub captures: Vec<GoldenCapture>,
}

impl Regime {
    pub fn get(&self, name: &str) -> Option<&GoldenCapture> {
        self.captures.iter().find(|c| c.name == name)
    }
}

/// Weight init path (`kind` in `weights_meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightKind {
    F32,
    Fp8,
    E8m0,
}

/// torch storage dtype of a parameter (`dtype` in `weights_meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageDtype {
    Bf16,
    F32,
    F8E4m3,
    F8E8m0,
}

impl WeightKind {
    /// The `kind` string of `weights_meta`.
    pub fn label(self) -> &'static str {
        match self {
            WeightKind::F32 => "f32",
            WeightKind::Fp8 => "fp8",
            WeightKind::E8m0 => "e8m0",
        }
    }
}

impl StorageDtype {
    /// The torch dtype name of `weights_meta`.
    pub fn label(self) -> &'static str {
        match self {
            StorageDtype::Bf16 => "bfloat16",
            StorageDtype::F32 => "float32",
            StorageDtype::F8E4m3 => "float8_e4m3fn",
            StorageDtype::F8E8m0 => "float8_e8m0fnu",
        }
    }
}

/// One `weights_meta` entry.
#[derive(Debug, Clone)]
pub struct WeightMeta {
    pub name: String,
    pub shape: Vec<usize>,
    pub n: usize,
    pub scale: f64,
    pub offset: f64,
    pub kind: WeightKind,
    pub dtype: StorageDtype,
    pub ck: f64,
}

/// `fixture.engram` (v2, v3).
#[derive(Debug, Clone)]
pub struct EngramFixture {
    pub layer_ids: Vec<usize>,
    pub max_ngram_size: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub n_hash_cols: usize,
    pub num_embeddings: Vec<usize>,
    pub pad_id_compressed: i64,
    pub token_map: Vec<i64>,
    /// `[layer][lookback]`
    pub multipliers: Vec<Vec<i64>>,
    /// `[layer][ngram-2][head]`
    pub primes: Vec<Vec<Vec<i64>>>,
    /// `[layer][col]`
    pub offsets: Vec<Vec<i64>>,
    pub scale_block: usize,
    /// `[layer][row]` powers of two
    pub scales: Vec<Vec<f64>>,
}

/// The typed `fixture` block. Every ModelArgs field the oracle needs, plus the run settings.
/// `raw` keeps the whole object in file order (for `golden write` and `info`).
#[derive(Debug, Clone)]
pub struct Fixture {
    pub vocab_size: usize,
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub rope_head_dim: usize,
    pub q_lora_rank: usize,
    pub o_lora_rank: usize,
    pub o_groups: usize,
    pub moe_inter_dim: usize,
    pub n_routed_experts: usize,
    pub n_shared_experts: usize,
    pub n_activated_experts: usize,
    pub score_func: String,
    pub route_scale: f64,
    pub norm_topk_prob: bool,
    pub swiglu_limit: f64,
    pub window_size: usize,
    pub compress_ratios: Vec<usize>,
    pub kv_source_layers: Vec<usize>,
    pub index_source_layers: Vec<usize>,
    /// -1 (or absent) means none.
    pub candidate_source_layer: i64,
    pub candidate_topk_blocks: usize,
    pub candidate_block_size: usize,
    pub index_n_heads: usize,
    pub index_head_dim: usize,
    pub index_topk: usize,
    pub hc_mult: usize,
    pub hc_sinkhorn_iters: usize,
    pub hc_eps: f64,
    pub engram_layer_ids: Vec<usize>,
    pub engram_max_ngram_size: usize,
    pub engram_vocab_size: usize,
    pub engram_n_heads: usize,
    pub engram_head_dim: usize,
    pub engram_pad_id: i64,
    pub engram_compressed_vocab_size: usize,
    pub engram_num_embeddings: Vec<usize>,
    pub rope_theta: f64,
    pub compress_rope_theta: f64,
    pub rope_factor: f64,
    pub original_seq_len: usize,
    pub beta_fast: f64,
    pub beta_slow: f64,
    pub norm_eps: f64,
    pub gate_temp: f64,
    pub max_seq_len: usize,
    pub batch: usize,
    pub prefill_len: usize,
    pub regimes: Vec<String>,
    pub lcg_probe: Vec<u64>,
    pub engram: Option<EngramFixture>,
    pub raw: serde_json::Map<String, serde_json::Value>,
}

/// A loaded, validated golden.
#[derive(Debug, Clone)]
pub struct Golden {
    /// Where it came from (a path, or a label such as `<embedded>`), used in every message.
    pub source: PathBuf,
    pub fixture: Fixture,
    /// In file order (`model.named_parameters()` order).
    pub weights_meta: Vec<WeightMeta>,
    /// In the order of `fixture.regimes`.
    pub regimes: Vec<Regime>,
}

/// Largest golden file `Golden::load` reads. The shipped goldens are at most a few MB (the
/// all-full v3 is 1.7 MB); a file this big is not a tiny-model golden, and parsing it would hold
/// many times its size in memory.
pub const MAX_GOLDEN_BYTES: u64 = 512 << 20;

impl Golden {
    /// The regime named `name`, if the golden has it.
    pub fn regime(&self, name: &str) -> Option<&Regime> {
        self.regimes.iter().find(|r| r.name == name)
    }
    /// The `weights_meta` entry of parameter `name`, if any.
    pub fn weight_meta(&self, name: &str) -> Option<&WeightMeta> {
        self.weights_meta.iter().find(|w| w.name == name)
    }
    /// Total number of captures over all regimes.
    pub fn capture_count(&self) -> usize {
        self.regimes.iter().map(|r| r.captures.len()).sum()
    }
    /// Read and validate a golden file.
    pub fn load(path: &Path) -> Result<Golden, GoldenError> {
        let label = path.display().to_string();
        let io_err = |source| GoldenError::Io {
            path: label.clone(),
            source,
        };
        let size_bytes = std::fs::metadata(path).map_err(io_err)?.len();
        if size_bytes > MAX_GOLDEN_BYTES {
            return Err(invalid(
                path,
                format!(
                    "file is {size_bytes} bytes, more than the {MAX_GOLDEN_BYTES}-byte cap for a \
                     golden (the shipped goldens are a few MB)"
                ),
            ));
        }
        let bytes = std::fs::read(path).map_err(io_err)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            invalid(
                path,
                format!(
                    "not UTF-8 text (invalid byte at offset {})",
                    e.utf8_error().valid_up_to()
                ),
            )
        })?;
        Golden::parse(&text, path)
    }
    /// Parse and validate golden JSON text; `source` labels messages.
    pub fn parse(text: &str, source: &Path) -> Result<Golden, GoldenError> {
        if text.trim().is_empty() {
            return Err(invalid(
                source,
                "file is empty (expected a JSON object)".to_string(),
            ));
        }
        let root: Json =
            serde_json::from_str(text).map_err(|e| invalid(source, json_error(text, &e)))?;
        build_golden(&root, source).map_err(|msg| invalid(source, msg))
    }
}

impl GoldenCapture {
    /// The capture's kind from its name (spec §16.3).
    pub fn kind(&self) -> super::names::CaptureKind {
        super::names::capture_kind(&self.name)
    }
    /// Number of sampled values held (`ceil(n / stride)`).
    pub fn sample_len(&self) -> usize {
        match &self.data {
            CaptureData::Float(v) => v.len(),
            CaptureData::Int(v) => v.len(),
        }
    }
    /// The sampled values as f64 (ints converted exactly up to 2^53).
    pub fn samples_f64(&self) -> Vec<f64> {
        match &self.data {
            CaptureData::Float(v) => v.clone(),
            CaptureData::Int(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }
}

fn invalid(source: &Path, msg: String) -> GoldenError {
    GoldenError::Invalid {
        path: source.display().to_string(),
        msg,
    }
}

// ---------------------------------------------------------------------------------------------
// A JSON tree that keeps every object member (so duplicate keys can be reported, which
// `serde_json::Value` would silently merge) and tells integer literals from float literals.

enum Json {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl<'de> serde::Deserialize<'de> for Json {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> serde::de::Visitor<'de> for JsonVisitor {
    type Value = Json;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Int(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Json>()? {
            items.push(item);
        }
        Ok(Json::Arr(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Json>()? {
            members.push((key, value));
        }
        Ok(Json::Obj(members))
    }
}

impl Json {
    /// A short description for messages: the value for scalars, the type for containers.
    fn describe(&self) -> String {
        match self {
            Json::Null => "null".to_string(),
            Json::Bool(b) => format!("bool {b}"),
            Json::Int(i) => format!("integer {i}"),
            Json::Float(x) => format!("float {x:?}"),
            Json::Str(s) if s.chars().count() > 40 => {
                format!("string \"{}…\"", s.chars().take(40).collect::<String>())
            }
            Json::Str(s) => format!("string \"{s}\""),
            Json::Arr(a) => format!("a list of {} values", a.len()),
            Json::Obj(o) => format!("an object with {} keys", o.len()),
        }
    }

    fn to_serde(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Int(i) => {
                if let Ok(v) = i64::try_from(*i) {
                    Value::from(v)
                } else if let Ok(v) = u64::try_from(*i) {
                    Value::from(v)
                } else {
                    // Unreachable from serde_json input (ints fit i64 or u64); keep it lossless-ish.
                    serde_json::Number::from_f64(*i as f64).map_or(Value::Null, Value::Number)
                }
            }
            Json::Float(x) => serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number),
            Json::Str(s) => Value::String(s.clone()),
            Json::Arr(a) => Value::Array(a.iter().map(Json::to_serde).collect()),
            Json::Obj(o) => {
                Value::Object(o.iter().map(|(k, v)| (k.clone(), v.to_serde())).collect())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parse-error messages: position, the JSON path at that position, and a plain word on NaN,
// Infinity and truncation.

/// Longest JSON path quoted in a parse error (a deeply nested hostile file has a long one).
const MAX_PATH_CHARS: usize = 160;

fn json_error(text: &str, err: &serde_json::Error) -> String {
    let line = err.line();
    let column = err.column();
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let byte = (line_start + column.saturating_sub(1)).min(text.len());
    let at = format!("line {line}, column {column} (byte {byte})");
    // serde_json's Display repeats the position; say it once.
    let full = err.to_string();
    let what = full
        .strip_suffix(&format!(" at line {line} column {column}"))
        .unwrap_or(&full)
        .to_string();
    let mut path = json_path_at(text, byte);
    if path.len() > MAX_PATH_CHARS {
        let cut = (0..=MAX_PATH_CHARS)
            .rev()
            .find(|&i| path.is_char_boundary(i))
            .unwrap_or(0);
        path.truncate(cut);
        path.push('…');
    }
    let inside = if path.is_empty() {
        String::new()
    } else {
        format!(", in {path}")
    };
    if let Some(literal) = non_finite_literal_near(text, byte) {
        return format!(
            "not valid JSON at {at}{inside}: `{literal}` is not a JSON number (Python's json writes \
             it for a non-finite float; a golden must hold finite numbers only)"
        );
    }
    match err.classify() {
        serde_json::error::Category::Eof => {
            format!("file is truncated: JSON ends early at {at}{inside}: {what}")
        }
        _ => format!("not valid JSON at {at}{inside}: {what}"),
    }
}

/// `NaN`, `Infinity` or `-Infinity` if one of them spans (or ends just before) byte `at`.
fn non_finite_literal_near(text: &str, at: usize) -> Option<&'static str> {
    let bytes = text.as_bytes();
    let lo = at.saturating_sub(10);
    for start in lo..=at.min(bytes.len()) {
        for literal in ["-Infinity", "Infinity", "NaN"] {
            let end = start + literal.len();
            if end <= bytes.len() && &bytes[start..end] == literal.as_bytes() && end + 1 >= at {
                return Some(literal);
            }
        }
    }
    None
}

/// The object keys / list indices that enclose byte `at`, as `a / b / c[3]`, from a light scan
/// that tracks only brackets, strings, commas and colons (it never fails).
fn json_path_at(text: &str, at: usize) -> String {
    enum Frame {
        Obj {
            key: Option<String>,
            expect_key: bool,
        },
        Arr {
            index: usize,
        },
    }
    let bytes = text.as_bytes();
    let end = at.min(bytes.len());
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < end {
        match bytes[i] {
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                if let Some(Frame::Obj {
                    key,
                    expect_key: expect_key @ true,
                }) = stack.last_mut()
                {
                    *key = Some(
                        String::from_utf8_lossy(&bytes[start..j.min(bytes.len())]).into_owned(),
                    );
                    *expect_key = false;
                }
                i = j + 1;
                continue;
            }
            b'{' => stack.push(Frame::Obj {
                key: None,
                expect_key: true,
            }),
            b'[' => stack.push(Frame::Arr { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Arr { index }) => *index += 1,
                Some(Frame::Obj { expect_key, .. }) => *expect_key = true,
                None => {}
            },
            _ => {}
        }
        i += 1;
    }
    let mut out = String::new();
    for frame in &stack {
        match frame {
            Frame::Obj { key: Some(key), .. } => {
                if !out.is_empty() {
                    out.push_str(" / ");
                }
                out.push_str(key);
            }
            Frame::Obj { key: None, .. } => {}
            Frame::Arr { index } => out.push_str(&format!("[{index}]")),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Typed field access with messages that name the context and the field.

type Msg<T> = Result<T, String>;

/// An object's members with the context used in messages (`fixture`, `regime `prefill12`,
/// capture `L0.h_in``, ...). Duplicate keys are rejected when it is built.
struct Fields<'a> {
    ctx: String,
    members: &'a [(String, Json)],
}

impl<'a> Fields<'a> {
    fn new(value: &'a Json, ctx: String, key_word: &str) -> Msg<Fields<'a>> {
        let Json::Obj(members) = value else {
            return Err(format!(
                "{ctx}: expected an object, got {}",
                value.describe()
            ));
        };
        let mut seen = std::collections::HashSet::with_capacity(members.len());
        for (key, _) in members {
            if !seen.insert(key.as_str()) {
                return Err(format!("{ctx}: duplicate {key_word} `{key}`"));
            }
        }
        Ok(Fields { ctx, members })
    }

    fn get(&self, key: &str) -> Option<&'a Json> {
        self.members.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn req(&self, key: &str) -> Msg<&'a Json> {
        self.get(key)
            .ok_or_else(|| format!("{}: missing field `{key}`", self.ctx))
    }

    fn bad(&self, key: &str, what: &str) -> String {
        format!("{}: field `{key}`: {what}", self.ctx)
    }

    /// Reject any member not in `allowed` (typed records: captures and weight entries).
    fn only(&self, allowed: &[&str]) -> Msg<()> {
        match self
            .members
            .iter()
            .find(|(k, _)| !allowed.contains(&k.as_str()))
        {
            Some((key, _)) => Err(format!(
                "{}: unknown field `{key}` (expected {})",
                self.ctx,
                allowed.join(", ")
            )),
            None => Ok(()),
        }
    }

    fn usize(&self, key: &str) -> Msg<usize> {
        as_usize(self.req(key)?).map_err(|what| self.bad(key, &what))
    }
    fn i64(&self, key: &str) -> Msg<i64> {
        as_i64(self.req(key)?).map_err(|what| self.bad(key, &what))
    }
    fn f64(&self, key: &str) -> Msg<f64> {
        as_f64(self.req(key)?).map_err(|what| self.bad(key, &what))
    }
    fn bool(&self, key: &str) -> Msg<bool> {
        match self.req(key)? {
            Json::Bool(b) => Ok(*b),
            other => Err(self.bad(key, &format!("expected a bool, got {}", other.describe()))),
        }
    }
    fn string(&self, key: &str) -> Msg<String> {
        match self.req(key)? {
            Json::Str(s) => Ok(s.clone()),
            other => Err(self.bad(key, &format!("expected a string, got {}", other.describe()))),
        }
    }
    fn list(&self, key: &str) -> Msg<&'a [Json]> {
        as_list(self.req(key)?).map_err(|what| self.bad(key, &what))
    }
    fn list_of<T>(&self, key: &str, item: impl Fn(&Json) -> Msg<T>) -> Msg<Vec<T>> {
        list_of(self.req(key)?, &item).map_err(|what| self.bad(key, &what))
    }
}

fn as_list(value: &Json) -> Msg<&[Json]> {
    match value {
        Json::Arr(items) => Ok(items),
        other => Err(format!("expected a list, got {}", other.describe())),
    }
}

/// Convert every element of a list; messages name the failing element (`element 3: …`).
fn list_of<T>(value: &Json, item: &impl Fn(&Json) -> Msg<T>) -> Msg<Vec<T>> {
    let items = as_list(value)?;
    let mut out = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        out.push(item(v).map_err(|what| format!("element {i}: {what}"))?);
    }
    Ok(out)
}

fn as_usize(value: &Json) -> Msg<usize> {
    match value {
        Json::Int(i) => usize::try_from(*i)
            .map_err(|_| format!("expected a non-negative integer that fits usize, got {i}")),
        other => Err(format!(
            "expected a non-negative integer, got {}",
            other.describe()
        )),
    }
}

fn as_i64(value: &Json) -> Msg<i64> {
    match value {
        Json::Int(i) => i64::try_from(*i).map_err(|_| format!("integer {i} does not fit i64")),
        other => Err(format!("expected an integer, got {}", other.describe())),
    }
}

fn as_u64(value: &Json) -> Msg<u64> {
    match value {
        Json::Int(i) => u64::try_from(*i).map_err(|_| format!("integer {i} does not fit u64")),
        other => Err(format!(
            "expected an unsigned integer, got {}",
            other.describe()
        )),
    }
}

/// Any finite number (an integer literal is accepted where a float is meant).
fn as_f64(value: &Json) -> Msg<f64> {
    let x = match value {
        Json::Float(x) => *x,
        Json::Int(i) => *i as f64,
        other => return Err(format!("expected a number, got {}", other.describe())),
    };
    if x.is_finite() {
        Ok(x)
    } else {
        Err(format!("expected a finite number, got {x}"))
    }
}

fn as_string(value: &Json) -> Msg<String> {
    match value {
        Json::Str(s) => Ok(s.clone()),
        other => Err(format!("expected a string, got {}", other.describe())),
    }
}

/// `Π shape` with overflow reported instead of wrapped.
fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

// ---------------------------------------------------------------------------------------------
// The typed build.

const TOP_FIXTURE: &str = "fixture";
const TOP_WEIGHTS: &str = "weights_meta";
/// Optional top-level object golden-lens exports carry (metrics, test tensors, provenance);
/// the loader ignores its contents so an export loads back as a golden.
pub const TOP_GOLDEN_LENS: &str = "golden_lens";

fn build_golden(root: &Json, source: &Path) -> Msg<Golden> {
    if !matches!(root, Json::Obj(_)) {
        return Err(format!(
            "top level: expected a JSON object, got {}",
            root.describe()
        ));
    }
    let top = Fields::new(root, "top level".to_string(), "top-level key")?;
    let fixture_json = top
        .get(TOP_FIXTURE)
        .ok_or("top level: missing key `fixture`")?;
    let weights_json = top
        .get(TOP_WEIGHTS)
        .ok_or("top level: missing key `weights_meta`")?;
    let fixture = build_fixture(fixture_json)?;
    for (key, _) in top.members {
        if key != TOP_FIXTURE
            && key != TOP_WEIGHTS
            && key != TOP_GOLDEN_LENS
            && !fixture.regimes.contains(key)
        {
            return Err(format!(
                "top level: unknown key `{key}` (not `fixture`, `weights_meta` or a regime listed \
                 in fixture.regimes {:?})",
                fixture.regimes
            ));
        }
    }
    let weights_meta = build_weights_meta(weights_json)?;
    let mut regimes = Vec::with_capacity(fixture.regimes.len());
    for name in &fixture.regimes {
        let value = top.get(name).ok_or_else(|| {
            format!("regime `{name}` is listed in fixture.regimes but missing from the file")
        })?;
        regimes.push(build_regime(name, value)?);
    }
    Ok(Golden {
        source: source.to_path_buf(),
        fixture,
        weights_meta,
        regimes,
    })
}

fn build_regime(name: &str, value: &Json) -> Msg<Regime> {
    let fields = Fields::new(value, format!("regime `{name}`"), "capture name")?;
    let mut captures = Vec::with_capacity(fields.members.len());
    for (capture, body) in fields.members {
        captures.push(build_capture(name, capture, body)?);
    }
    Ok(Regime {
        name: name.to_string(),
        captures,
    })
}

fn build_capture(regime: &str, name: &str, value: &Json) -> Msg<GoldenCapture> {
    let f = Fields::new(
        value,
        format!("regime `{regime}`, capture `{name}`"),
        "field",
    )?;
    f.only(&["shape", "n", "stride", "ck", "data"])?;
    let shape = f.list_of("shape", as_usize)?;
    let n = f.usize("n")?;
    let count = element_count(&shape).ok_or_else(|| {
        f.bad(
            "shape",
            &format!("element count of {shape:?} overflows usize"),
        )
    })?;
    if count != n {
        return Err(f.bad(
            "n",
            &format!("is {n} but shape {shape:?} has {count} elements"),
        ));
    }
    let stride = f.usize("stride")?;
    if stride == 0 {
        return Err(f.bad("stride", "must be >= 1, got 0"));
    }
    let ck = f.f64("ck")?;
    let items = f.list("data")?;
    // Checked before anything is built from `n`: the data list bounds every allocation.
    let expected_len = n.div_ceil(stride);
    if items.len() != expected_len {
        return Err(f.bad(
            "data",
            &format!(
                "has {} values but ceil(n / stride) = ceil({n} / {stride}) = {expected_len}",
                items.len()
            ),
        ));
    }
    let kind = super::names::capture_kind(name);
    let mut first_int = None;
    let mut first_float = None;
    for (i, item) in items.iter().enumerate() {
        match item {
            Json::Int(_) => {
                first_int.get_or_insert(i);
            }
            Json::Float(_) => {
                first_float.get_or_insert(i);
            }
            other => {
                return Err(f.bad(
                    "data",
                    &format!("element {i}: expected a number, got {}", other.describe()),
                ))
            }
        }
    }
    let data = match (first_int, first_float) {
        (Some(i), Some(j)) => {
            return Err(f.bad(
                "data",
                &format!("mixes integers (first at element {i}) and floats (first at element {j})"),
            ))
        }
        (Some(_), None) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(
                    as_i64(item).map_err(|what| f.bad("data", &format!("element {i}: {what}")))?,
                );
            }
            CaptureData::Int(out)
        }
        (None, Some(_)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(
                    as_f64(item).map_err(|what| f.bad("data", &format!("element {i}: {what}")))?,
                );
            }
            CaptureData::Float(out)
        }
        (None, None) if kind.is_int() => CaptureData::Int(Vec::new()),
        (None, None) => CaptureData::Float(Vec::new()),
    };
    let is_int = matches!(data, CaptureData::Int(_));
    if !items.is_empty() && ((kind.is_int() && !is_int) || (kind.is_float() && is_int)) {
        return Err(f.bad(
            "data",
            &format!(
                "a `{}` capture must hold {}, but its data are {}",
                kind.label(),
                if kind.is_int() { "integers" } else { "floats" },
                if is_int { "integers" } else { "floats" },
            ),
        ));
    }
    Ok(GoldenCapture {
        name: name.to_string(),
        shape,
        n,
        stride,
        ck,
        data,
    })
}

fn build_weights_meta(value: &Json) -> Msg<Vec<WeightMeta>> {
    let entries = Fields::new(value, "weights_meta".to_string(), "parameter")?;
    let mut out = Vec::with_capacity(entries.members.len());
    for (name, body) in entries.members {
        let f = Fields::new(body, format!("weights_meta `{name}`"), "field")?;
        f.only(&["shape", "n", "scale", "offset", "kind", "dtype", "ck"])?;
        let shape = f.list_of("shape", as_usize)?;
        let n = f.usize("n")?;
        let count = element_count(&shape).ok_or_else(|| {
            f.bad(
                "shape",
                &format!("element count of {shape:?} overflows usize"),
            )
        })?;
        if count != n {
            return Err(f.bad(
                "n",
                &format!("is {n} but shape {shape:?} has {count} elements"),
            ));
        }
        let kind = match f.string("kind")?.as_str() {
            "f32" => WeightKind::F32,
            "fp8" => WeightKind::Fp8,
            "e8m0" => WeightKind::E8m0,
            other => return Err(f.bad("kind", &format!("`{other}` is not one of f32, fp8, e8m0"))),
        };
        let dtype = match f.string("dtype")?.as_str() {
            "bfloat16" => StorageDtype::Bf16,
            "float32" => StorageDtype::F32,
            "float8_e4m3fn" => StorageDtype::F8E4m3,
            "float8_e8m0fnu" => StorageDtype::F8E8m0,
            other => {
                return Err(f.bad(
                    "dtype",
                    &format!(
                        "`{other}` is not one of bfloat16, float32, float8_e4m3fn, float8_e8m0fnu"
                    ),
                ))
            }
        };
        let consistent = matches!(
            (kind, dtype),
            (WeightKind::F32, StorageDtype::Bf16 | StorageDtype::F32)
                | (WeightKind::Fp8, StorageDtype::F8E4m3)
                | (WeightKind::E8m0, StorageDtype::F8E8m0)
        );
        if !consistent {
            return Err(f.bad(
                "dtype",
                &format!("{dtype:?} does not go with kind {kind:?}"),
            ));
        }
        out.push(WeightMeta {
            name: name.clone(),
            shape,
            n,
            scale: f.f64("scale")?,
            offset: f.f64("offset")?,
            kind,
            dtype,
            ck: f.f64("ck")?,
        });
    }
    Ok(out)
}

fn build_fixture(value: &Json) -> Msg<Fixture> {
    let f = Fields::new(value, "fixture".to_string(), "key")?;
    let Json::Obj(members) = value else {
        return Err("fixture: expected an object".to_string());
    };
    let usizes = |key: &str| f.list_of(key, as_usize);
    let candidate_source_layer = match f.get("candidate_source_layer") {
        None => -1,
        Some(_) => f.i64("candidate_source_layer")?,
    };
    let fixture = Fixture {
        vocab_size: f.usize("vocab_size")?,
        dim: f.usize("dim")?,
        n_layers: f.usize("n_layers")?,
        n_heads: f.usize("n_heads")?,
        head_dim: f.usize("head_dim")?,
        rope_head_dim: f.usize("rope_head_dim")?,
        q_lora_rank: f.usize("q_lora_rank")?,
        o_lora_rank: f.usize("o_lora_rank")?,
        o_groups: f.usize("o_groups")?,
        moe_inter_dim: f.usize("moe_inter_dim")?,
        n_routed_experts: f.usize("n_routed_experts")?,
        n_shared_experts: f.usize("n_shared_experts")?,
        n_activated_experts: f.usize("n_activated_experts")?,
        score_func: f.string("score_func")?,
        route_scale: f.f64("route_scale")?,
        norm_topk_prob: f.bool("norm_topk_prob")?,
        swiglu_limit: f.f64("swiglu_limit")?,
        window_size: f.usize("window_size")?,
        compress_ratios: usizes("compress_ratios")?,
        kv_source_layers: usizes("kv_source_layers")?,
        index_source_layers: usizes("index_source_layers")?,
        candidate_source_layer,
        candidate_topk_blocks: f.usize("candidate_topk_blocks")?,
        candidate_block_size: f.usize("candidate_block_size")?,
        index_n_heads: f.usize("index_n_heads")?,
        index_head_dim: f.usize("index_head_dim")?,
        index_topk: f.usize("index_topk")?,
        hc_mult: f.usize("hc_mult")?,
        hc_sinkhorn_iters: f.usize("hc_sinkhorn_iters")?,
        hc_eps: f.f64("hc_eps")?,
        engram_layer_ids: usizes("engram_layer_ids")?,
        engram_max_ngram_size: f.usize("engram_max_ngram_size")?,
        engram_vocab_size: f.usize("engram_vocab_size")?,
        engram_n_heads: f.usize("engram_n_heads")?,
        engram_head_dim: f.usize("engram_head_dim")?,
        engram_pad_id: f.i64("engram_pad_id")?,
        engram_compressed_vocab_size: f.usize("engram_compressed_vocab_size")?,
        engram_num_embeddings: usizes("engram_num_embeddings")?,
        rope_theta: f.f64("rope_theta")?,
        compress_rope_theta: f.f64("compress_rope_theta")?,
        rope_factor: f.f64("rope_factor")?,
        original_seq_len: f.usize("original_seq_len")?,
        beta_fast: f.f64("beta_fast")?,
        beta_slow: f.f64("beta_slow")?,
        norm_eps: f.f64("norm_eps")?,
        gate_temp: f.f64("gate_temp")?,
        max_seq_len: f.usize("max_seq_len")?,
        batch: f.usize("batch")?,
        prefill_len: f.usize("prefill_len")?,
        regimes: f.list_of("regimes", as_string)?,
        lcg_probe: f.list_of("lcg_probe", as_u64)?,
        engram: None,
        raw: members
            .iter()
            .map(|(k, v)| (k.clone(), v.to_serde()))
            .collect(),
    };
    check_fixture(&f, &fixture)?;
    let engram = match f.get("engram") {
        None => None,
        Some(value) => Some(build_engram(value, &fixture)?),
    };
    Ok(Fixture { engram, ..fixture })
}

/// Cheap cross-checks between fixture fields, so later code can index by them.
fn check_fixture(f: &Fields<'_>, x: &Fixture) -> Msg<()> {
    if x.regimes.is_empty() {
        return Err(f.bad("regimes", "is empty (a golden needs at least one regime)"));
    }
    let mut seen = std::collections::HashSet::new();
    for r in &x.regimes {
        if r == TOP_FIXTURE || r == TOP_WEIGHTS || r == TOP_GOLDEN_LENS {
            return Err(f.bad("regimes", &format!("`{r}` cannot be a regime name")));
        }
        if !seen.insert(r.as_str()) {
            return Err(f.bad("regimes", &format!("lists `{r}` twice")));
        }
    }
    if x.compress_ratios.len() != x.n_layers {
        return Err(f.bad(
            "compress_ratios",
            &format!(
                "has {} entries but n_layers = {}",
                x.compress_ratios.len(),
                x.n_layers
            ),
        ));
    }
    for (key, layers) in [
        ("kv_source_layers", &x.kv_source_layers),
        ("index_source_layers", &x.index_source_layers),
        ("engram_layer_ids", &x.engram_layer_ids),
    ] {
        if let Some(bad) = layers.iter().find(|&&l| l >= x.n_layers) {
            return Err(f.bad(
                key,
                &format!("layer {bad} is not below n_layers = {}", x.n_layers),
            ));
        }
    }
    let c = x.candidate_source_layer;
    if c < -1 || (c >= 0 && c as u64 >= x.n_layers as u64) {
        return Err(f.bad(
            "candidate_source_layer",
            &format!(
                "{c} is neither -1 (none) nor a layer below n_layers = {}",
                x.n_layers
            ),
        ));
    }
    if x.engram_num_embeddings.len() != x.engram_layer_ids.len() {
        return Err(f.bad(
            "engram_num_embeddings",
            &format!(
                "has {} entries but engram_layer_ids has {}",
                x.engram_num_embeddings.len(),
                x.engram_layer_ids.len()
            ),
        ));
    }
    Ok(())
}

fn build_engram(value: &Json, fx: &Fixture) -> Msg<EngramFixture> {
    let f = Fields::new(value, "fixture.engram".to_string(), "key")?;
    let layer_ids = f.list_of("layer_ids", as_usize)?;
    let max_ngram_size = f.usize("max_ngram_size")?;
    let n_heads = f.usize("n_heads")?;
    let head_dim = f.usize("head_dim")?;
    let n_hash_cols = f.usize("n_hash_cols")?;
    let num_embeddings = f.list_of("num_embeddings", as_usize)?;
    let pad_id_compressed = f.i64("pad_id_compressed")?;
    let token_map = f.list_of("token_map", as_i64)?;
    let multipliers = f.list_of("multipliers", |v| list_of(v, &as_i64))?;
    let primes = f.list_of("primes", |v| list_of(v, &|w: &Json| list_of(w, &as_i64)))?;
    let offsets = f.list_of("offsets", |v| list_of(v, &as_i64))?;
    let scale_block = f.usize("scale_block")?;
    let scales = f.list_of("scales", |v| list_of(v, &as_f64))?;

    let same = |key: &str, ours: String, theirs: String, top: &str| -> Msg<()> {
        if ours == theirs {
            Ok(())
        } else {
            Err(f.bad(key, &format!("is {ours} but fixture.{top} is {theirs}")))
        }
    };
    same(
        "layer_ids",
        format!("{layer_ids:?}"),
        format!("{:?}", fx.engram_layer_ids),
        "engram_layer_ids",
    )?;
    same(
        "max_ngram_size",
        max_ngram_size.to_string(),
        fx.engram_max_ngram_size.to_string(),
        "engram_max_ngram_size",
    )?;
    same(
        "n_heads",
        n_heads.to_string(),
        fx.engram_n_heads.to_string(),
        "engram_n_heads",
    )?;
    same(
        "head_dim",
        head_dim.to_string(),
        fx.engram_head_dim.to_string(),
        "engram_head_dim",
    )?;
    same(
        "num_embeddings",
        format!("{num_embeddings:?}"),
        format!("{:?}", fx.engram_num_embeddings),
        "engram_num_embeddings",
    )?;
    if max_ngram_size < 2 {
        return Err(f.bad(
            "max_ngram_size",
            &format!("must be >= 2 (n-grams of size 2..), got {max_ngram_size}"),
        ));
    }
    if scale_block == 0 {
        return Err(f.bad("scale_block", "must be >= 1, got 0"));
    }
    let n_sizes = max_ngram_size - 1;
    if n_sizes.checked_mul(n_heads) != Some(n_hash_cols) {
        return Err(f.bad(
            "n_hash_cols",
            &format!("is {n_hash_cols} but (max_ngram_size - 1) * n_heads = {n_sizes} * {n_heads}"),
        ));
    }
    if token_map.len() != fx.engram_compressed_vocab_size {
        return Err(f.bad(
            "token_map",
            &format!(
                "has {} entries but engram_compressed_vocab_size = {}",
                token_map.len(),
                fx.engram_compressed_vocab_size
            ),
        ));
    }
    if let Ok(pad) = usize::try_from(fx.engram_pad_id) {
        if let Some(&mapped) = token_map.get(pad) {
            if mapped != pad_id_compressed {
                return Err(f.bad(
                    "pad_id_compressed",
                    &format!(
                        "is {pad_id_compressed} but token_map[engram_pad_id = {pad}] = {mapped}"
                    ),
                ));
            }
        }
    }
    let n_layers = layer_ids.len();
    let rows = |key: &str, len: usize| -> Msg<()> {
        if len == n_layers {
            Ok(())
        } else {
            Err(f.bad(
                key,
                &format!("has {len} rows but there are {n_layers} engram layers"),
            ))
        }
    };
    rows("multipliers", multipliers.len())?;
    rows("primes", primes.len())?;
    rows("offsets", offsets.len())?;
    rows("scales", scales.len())?;
    for l in 0..n_layers {
        if multipliers[l].len() != max_ngram_size {
            return Err(f.bad(
                "multipliers",
                &format!(
                    "[{l}] has {} entries, expected max_ngram_size = {max_ngram_size}",
                    multipliers[l].len()
                ),
            ));
        }
        if primes[l].len() != n_sizes {
            return Err(f.bad(
                "primes",
                &format!(
                    "[{l}] has {} entries, expected max_ngram_size - 1 = {n_sizes}",
                    primes[l].len()
                ),
            ));
        }
        let mut next_offset: i64 = 0;
        let mut flat = 0usize;
        for (g, heads) in primes[l].iter().enumerate() {
            if heads.len() != n_heads {
                return Err(f.bad(
                    "primes",
                    &format!(
                        "[{l}][{g}] has {} entries, expected n_heads = {n_heads}",
                        heads.len()
                    ),
                ));
            }
            for (h, &p) in heads.iter().enumerate() {
                if p <= 0 {
                    return Err(f.bad("primes", &format!("[{l}][{g}][{h}] = {p} is not positive")));
                }
                match offsets[l].get(flat) {
                    Some(&o) if o == next_offset => {}
                    Some(&o) => {
                        return Err(f.bad(
                            "offsets",
                            &format!("[{l}][{flat}] is {o}, expected the exclusive prefix sum {next_offset} of primes"),
                        ))
                    }
                    None => break,
                }
                flat += 1;
                next_offset = next_offset
                    .checked_add(p)
                    .ok_or_else(|| f.bad("primes", &format!("[{l}] sum overflows i64")))?;
            }
        }
        if offsets[l].len() != n_hash_cols {
            return Err(f.bad(
                "offsets",
                &format!(
                    "[{l}] has {} entries, expected n_hash_cols = {n_hash_cols}",
                    offsets[l].len()
                ),
            ));
        }
        if u64::try_from(next_offset).ok() != Some(num_embeddings[l] as u64) {
            return Err(f.bad(
                "num_embeddings",
                &format!(
                    "[{l}] is {} but the primes of layer {l} sum to {next_offset}",
                    num_embeddings[l]
                ),
            ));
        }
        if scales[l].len() != num_embeddings[l] {
            return Err(f.bad(
                "scales",
                &format!(
                    "[{l}] has {} entries, expected num_embeddings[{l}] = {}",
                    scales[l].len(),
                    num_embeddings[l]
                ),
            ));
        }
        if let Some((r, s)) = scales[l]
            .iter()
            .enumerate()
            .find(|(_, &s)| !(s > 0.0 && s.is_finite() && s.to_bits() & ((1u64 << 52) - 1) == 0))
        {
            return Err(f.bad(
                "scales",
                &format!("[{l}][{r}] = {s} is not a positive power of two"),
            ));
        }
    }
    Ok(EngramFixture {
        layer_ids,
        max_ngram_size,
        n_heads,
        head_dim,
        n_hash_cols,
        num_embeddings,
        pad_id_compressed,
        token_map,
        multipliers,
        primes,
        offsets,
        scale_block,
        scales,
    })
}

/// Which generator version a golden comes from, told apart by content (spec §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoldenVersion {
    /// No `fixture.engram` block.
    V1,
    /// `fixture.engram` present, the L0 block inputs still strided.
    V2,
    /// The L0 captures (`L0.h_in`, ...) stored at stride 1.
    V3,
    /// Every capture stored at stride 1.
    V3Full,
}

impl GoldenVersion {
    /// `v1`, `v2`, `v3` or `v3-full`.
    pub fn label(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::V2 => "v2",
            Self::V3 => "v3",
            Self::V3Full => "v3-full",
        }
    }
}

impl Golden {
    /// The version by content: v1 without `fixture.engram`; v3-full if every capture is stride
    /// 1; v3 if the first regime's `L0.h_in` is stride 1; otherwise v2.
    pub fn version(&self) -> GoldenVersion {
        if self.fixture.engram.is_none() {
            return GoldenVersion::V1;
        }
        let mut captures = self.regimes.iter().flat_map(|r| r.captures.iter());
        if captures.all(|c| c.stride == 1) {
            return GoldenVersion::V3Full;
        }
        let l0_full = self
            .regimes
            .first()
            .and_then(|r| r.get("L0.h_in"))
            .is_some_and(|c| c.stride == 1);
        if l0_full {
            GoldenVersion::V3
        } else {
            GoldenVersion::V2
        }
    }
}
