//! `golden write`: run the oracle over a fixture and write a golden in the exact Atlas schema
//! (spec §3): key order, the stride rule and its caps, FULL_CAPTURES, Python's float `repr`,
//! `ck` over the whole tensor, compact separators and ASCII-only strings as `json.dump` writes.

use super::SessionError;
use crate::golden::weights::{checksum, regenerate};
use crate::golden::{Golden, WeightMeta};
use crate::model::{Backend, Capture, CaptureValues};
use crate::num::fixed_int;
use serde_json::{Map, Value};
use std::fmt::Write as _;

/// Captures per float/int capture before striding kicks in (generator constants).
pub const FLOAT_SAMPLE_CAP: usize = 12;
pub const INT_SAMPLE_CAP: usize = 64;

/// Which captures are written whole (stride 1) regardless of size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FullCaptures {
    /// None (v1 behaviour).
    None,
    /// v3's set: the engram inputs and every L0 input the block scaffold needs.
    V3,
    /// Every capture (a `-full` golden for isolated checks).
    All,
    /// These captures by name.
    Names(Vec<String>),
}

impl FullCaptures {
    fn contains(&self, name: &str) -> bool {
        const V3: [&str; 8] = [
            "L1.engram_in",
            "L4.engram_in",
            "L0.h_in",
            "L0.pre_mix_in",
            "L0.attn_in",
            "L0.attn_out",
            "L0.ffn_in",
            "L0.ffn_out",
        ];
        match self {
            FullCaptures::None => false,
            FullCaptures::V3 => V3.contains(&name),
            FullCaptures::All => true,
            FullCaptures::Names(names) => names.iter().any(|n| n == name),
        }
    }
}

/// Smallest prime >= max(2, k).
pub fn next_prime(k: usize) -> usize {
    let mut c = k.max(2);
    loop {
        if (2..).take_while(|d| d * d <= c).all(|d| c % d != 0) {
            return c;
        }
        c += 1;
    }
}

/// The generator's stride for a capture of `n` elements.
pub fn stride_for(n: usize, is_int: bool, full: bool) -> usize {
    let cap = if is_int {
        INT_SAMPLE_CAP
    } else {
        FLOAT_SAMPLE_CAP
    };
    if full || n <= cap {
        1
    } else {
        next_prime(n.div_ceil(cap))
    }
}

/// How a golden's captures are strided: the generator's rule (tiny goldens, byte for byte as
/// Atlas writes them) or the rule for goldens recorded on a GGUF at real dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    /// [`stride_for`]: 12 float / 64 integer samples per capture.
    Atlas,
    /// [`gguf_stride_for`]: at least one sample per element of the last axis.
    PerLastAxis,
}

impl Sampling {
    /// The stride of capture `c` (whole when `full`).
    pub fn stride(self, c: &Capture, full: bool) -> usize {
        let n: usize = c.shape.iter().product();
        let is_int = matches!(c.values, CaptureValues::I64(_));
        match self {
            Sampling::Atlas => stride_for(n, is_int, full),
            Sampling::PerLastAxis => gguf_stride_for(&c.shape, is_int, full),
        }
    }
}

/// The stride of a capture of `shape` in a golden recorded on a GGUF: the largest prime at most
/// `n / max(cap, last)` that does not divide the last axis' length `last` (1, the whole tensor,
/// when there is none).
///
/// Why: with the generator's 12 float samples, a real-dims capture (`sa_q` holds 8 × 64 × 512
/// values) is judged on 12 values and its checksum, and a defect confined to part of every row
/// (RoPE's last 64 of each head's 512 dims, one head, one expert's channels) lands on none of
/// them: only the checksum sees it, and its bar (two bf16 ulps of the checksum's scale) is weak
/// by design. A stride coprime with the last axis visits its residues in turn, and at most
/// `n / last` it leaves at least `last` samples, so every element of that axis is sampled (each
/// at some token and head).
pub fn gguf_stride_for(shape: &[usize], is_int: bool, full: bool) -> usize {
    let n: usize = shape.iter().product();
    let cap = if is_int {
        INT_SAMPLE_CAP
    } else {
        FLOAT_SAMPLE_CAP
    };
    let last = shape.last().copied().unwrap_or(1).max(1);
    if full {
        return 1;
    }
    let is_prime = |c: usize| c >= 2 && (2..).take_while(|d| d * d <= c).all(|d| c % d != 0);
    (2..=n / cap.max(last))
        .rev()
        .find(|&p| is_prime(p) && last % p != 0)
        .unwrap_or(1)
}

/// Python's `repr(float)`: the shortest round-trip digits, fixed notation for decimal
/// exponents in [-4, 16), scientific (`1e-05`, `1.5e+16`) otherwise, always a `.0` or exponent.
pub fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let sci = format!("{x:e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if neg { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let decpt = exp + 1;
        let body = if decpt <= 0 {
            format!("0.{}{}", "0".repeat((-decpt) as usize), digits)
        } else if decpt as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(decpt as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..decpt as usize],
                &digits[decpt as usize..]
            )
        };
        format!("{sign}{body}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        let es = if exp < 0 { "-" } else { "+" };
        format!("{sign}{m}e{es}{:02}", exp.abs())
    }
}

/// Append `v` as `json.dumps(v, separators=(",", ":"))` would (ASCII-only strings).
pub fn write_py_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_f64() {
                out.push_str(&py_float_repr(n.as_f64().unwrap_or(f64::NAN)));
            } else {
                let _ = write!(out, "{n}");
            }
        }
        Value::String(s) => write_py_str(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_py_json(out, x);
            }
            out.push(']');
        }
        Value::Object(m) => write_py_object(out, m.iter()),
    }
}

fn write_py_object<'a>(out: &mut String, entries: impl Iterator<Item = (&'a String, &'a Value)>) {
    out.push('{');
    for (i, (k, x)) in entries.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_py_str(out, k);
        out.push(':');
        write_py_json(out, x);
    }
    out.push('}');
}

fn write_py_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The token ids of each regime by the fixture's rule: `fixed_int("input_ids", t, vocab)`;
/// regime 0 is the prefill, each later regime decodes the next single token.
pub fn fixture_inputs(golden: &Golden) -> Result<Vec<(String, Vec<i64>, usize)>, SessionError> {
    let f = &golden.fixture;
    let err = |msg: String| SessionError::Fixture {
        source_path: golden.source.display().to_string(),
        field: "fixture".into(),
        msg,
    };
    if f.batch != 1 {
        return Err(err(format!(
            "fixture.batch = {}: only batch 1 is supported",
            f.batch
        )));
    }
    let per_row = f.prefill_len + 2;
    let id = |t: usize| fixed_int("input_ids", t as u64, f.vocab_size as u64) as i64;
    let mut out = Vec::new();
    for (i, name) in f.regimes.iter().enumerate() {
        if i == 0 {
            out.push((name.clone(), (0..f.prefill_len).map(id).collect(), 0));
        } else {
            let pos = f.prefill_len + i - 1;
            if pos >= per_row {
                return Err(err(format!("fixture.regimes: regime {name} needs token {pos}, the input rule has {per_row}")));
            }
            out.push((name.clone(), vec![id(pos)], pos));
        }
    }
    Ok(out)
}

fn capture_json(c: &Capture, full: &FullCaptures, sampling: Sampling) -> Value {
    let n: usize = c.shape.iter().product();
    // `input_ids` is always whole: a replay takes each regime's tokens from it.
    let stride = sampling.stride(c, c.name == "input_ids" || full.contains(&c.name));
    let (ck, data): (f64, Vec<Value>) = match &c.values {
        CaptureValues::F32(v) => (
            v.iter()
                .enumerate()
                .map(|(i, &x)| x as f64 * (i as f64 + 1.0))
                .sum(),
            v.iter()
                .step_by(stride)
                .map(|&x| Value::from(x as f64))
                .collect(),
        ),
        CaptureValues::I64(v) => (
            v.iter()
                .enumerate()
                .map(|(i, &x)| x as f64 * (i as f64 + 1.0))
                .sum(),
            v.iter().step_by(stride).map(|&x| Value::from(x)).collect(),
        ),
    };
    let mut m = Map::new();
    m.insert("shape".into(), Value::from(c.shape.clone()));
    m.insert("n".into(), Value::from(n));
    m.insert("stride".into(), Value::from(stride));
    m.insert("ck".into(), Value::from(ck));
    m.insert("data".into(), Value::Array(data));
    Value::Object(m)
}

fn weight_meta_json(w: &WeightMeta) -> Result<Value, SessionError> {
    let values = regenerate(w).map_err(|e| SessionError::Fixture {
        source_path: "weights_meta".into(),
        field: w.name.clone(),
        msg: e.to_string(),
    })?;
    let mut m = Map::new();
    m.insert("shape".into(), Value::from(w.shape.clone()));
    m.insert("n".into(), Value::from(w.n));
    m.insert("scale".into(), Value::from(w.scale));
    m.insert("offset".into(), Value::from(w.offset));
    m.insert("kind".into(), Value::from(w.kind.label()));
    m.insert("dtype".into(), Value::from(w.dtype.label()));
    m.insert("ck".into(), Value::from(checksum(&values)));
    Ok(Value::Object(m))
}

/// The fixture's provenance keys for a golden this writer produced (`reference` ends with
/// `weights`, e.g. " on a GGUF's weights").
fn stamp_writer(fixture: &mut Map<String, Value>, weights: &str) {
    fixture.insert(
        "reference".into(),
        Value::from(format!(
            "golden-lens {} CPU oracle (Rust, spec ds41-reference.md){weights}",
            env!("CARGO_PKG_VERSION")
        )),
    );
    fixture.insert(
        "kernels".into(),
        Value::from("golden-lens oracle kernels (shim semantics)"),
    );
    fixture.insert("torch".into(), Value::from("none"));
}

/// Run `backend` through the fixture's regimes and return the golden text.
pub fn write_golden(
    golden: &Golden,
    backend: &mut dyn Backend,
    full: &FullCaptures,
) -> Result<String, SessionError> {
    let mut fixture = golden.fixture.raw.clone();
    stamp_writer(&mut fixture, "");
    let mut out = String::new();
    out.push_str("{\"fixture\":");
    write_py_json(&mut out, &Value::Object(fixture));
    out.push_str(",\"weights_meta\":{");
    for (i, w) in golden.weights_meta.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_py_str(&mut out, &w.name);
        out.push(':');
        write_py_json(&mut out, &weight_meta_json(w)?);
    }
    out.push('}');
    // The fixture's regimes and tokens, the backend itself the (live) reference: the stepper
    // runs it and every capture it yields is written.
    let config = super::model_of(golden)?.0;
    let reference = super::reference::TokensReference {
        label: golden.source.display().to_string(),
        config,
        regimes: fixture_inputs(golden)?
            .into_iter()
            .map(|(name, ids, _)| (name, super::reference::RegimeTokens::Given(ids)))
            .collect(),
    };
    write_regimes(
        &mut out,
        reference,
        backend,
        full,
        Sampling::Atlas,
        &mut |_| {},
    )?;
    out.push('}');
    Ok(out)
}

/// Run `backend` as the live reference of `reference`'s regimes and append every capture it
/// yields to `out` as `,"regime":{"capture":{...},...}` (Atlas key order); `each` sees every
/// step as it ends (progress, timing).
fn write_regimes(
    out: &mut String,
    reference: super::reference::TokensReference,
    backend: &mut dyn Backend,
    full: &FullCaptures,
    sampling: Sampling,
    each: &mut dyn FnMut(&super::StepOutcome),
) -> Result<(), SessionError> {
    let mut stepper = super::Stepper::new(
        std::sync::Arc::new(reference),
        vec![Box::new(backend)],
        super::CheckOptions::default(),
    )?;
    let mut regime: Option<usize> = None;
    let mut first = true;
    while let Some(o) = stepper.next_step()? {
        if regime != Some(o.regime_index) {
            if regime.is_some() {
                out.push('}');
            }
            regime = Some(o.regime_index);
            first = true;
            out.push(',');
            write_py_str(out, &o.regime);
            out.push_str(":{");
        }
        for r in &o.results {
            let Some(c) = r.capture_of(0) else {
                continue;
            };
            if !first {
                out.push(',');
            }
            first = false;
            write_py_str(out, &c.name);
            out.push(':');
            write_py_json(out, &capture_json(&c, full, sampling));
        }
        each(&o);
    }
    if regime.is_some() {
        out.push('}');
    }
    Ok(())
}

/// The fixture key of a golden recorded on a GGUF: the file's identity, the layer range and the
/// engram tables' hash, in place of the `weights_meta` that regenerates a filler model's weights.
pub const GGUF_FIXTURE_KEY: &str = "gguf";

/// Which GGUF a golden was recorded on: enough to refuse replaying it on another file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufIdentity {
    /// The path given when recording (informational: the file may move).
    pub path: String,
    /// Bytes of every shard together.
    pub bytes: u64,
    /// Shards of the set.
    pub shards: usize,
    /// FNV-1a 64 over every shard's header, metadata and tensor table (the bytes before its
    /// tensor data), in shard order: what defines the model, not the weights' values.
    pub header_fnv1a64: String,
}

impl GgufIdentity {
    /// The identity of the GGUF (set) at `path`.
    pub fn of(path: &std::path::Path) -> Result<GgufIdentity, SessionError> {
        let weights_err = |msg: String| SessionError::Weights {
            path: path.display().to_string(),
            msg,
        };
        let set = crate::gguf::GgufSet::open(path).map_err(|e| weights_err(e.to_string()))?;
        let mut header = Vec::new();
        let mut bytes = 0u64;
        for shard in set.shards() {
            let head = shard
                .read_bytes(0, shard.data_offset())
                .map_err(|e| weights_err(e.to_string()))?;
            header.extend_from_slice(&head);
            bytes = bytes.saturating_add(shard.file_len());
        }
        Ok(GgufIdentity {
            path: path.display().to_string(),
            bytes,
            shards: set.shards().len(),
            header_fnv1a64: super::export::content_hash_hex(&header),
        })
    }
}

/// What a GGUF golden's fixture records beside the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufRecording {
    pub identity: GgufIdentity,
    /// The blocks the recorded run ran (`--layers`), when restricted.
    pub layers: Option<std::ops::RangeInclusive<usize>>,
    /// FNV-1a 64 of the engram tables the run hashed with (token map, multipliers, primes,
    /// offsets), when the model has engram layers.
    pub engram_tables_fnv1a64: Option<String>,
}

/// FNV-1a 64 over the engram tables' numbers, in a fixed order.
pub fn engram_tables_hash(t: &crate::model::EngramTables) -> String {
    let mut bytes = Vec::new();
    let mut push = |v: &[i64]| {
        bytes.extend_from_slice(&(v.len() as u64).to_le_bytes());
        for x in v {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    };
    push(&t.token_map);
    push(&[t.pad_id_compressed]);
    for m in &t.multipliers {
        push(m);
    }
    for layer in &t.primes {
        for g in layer {
            push(g);
        }
    }
    for o in &t.offsets {
        push(o);
    }
    super::export::content_hash_hex(&bytes)
}

impl GgufRecording {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("path".into(), Value::from(self.identity.path.clone()));
        m.insert("bytes".into(), Value::from(self.identity.bytes));
        m.insert("shards".into(), Value::from(self.identity.shards));
        m.insert(
            "header_fnv1a64".into(),
            Value::from(self.identity.header_fnv1a64.clone()),
        );
        m.insert(
            "layers".into(),
            match &self.layers {
                Some(r) => Value::from(format!("{}-{}", r.start(), r.end())),
                None => Value::Null,
            },
        );
        m.insert(
            "engram_tables_fnv1a64".into(),
            self.engram_tables_fnv1a64
                .clone()
                .map_or(Value::Null, Value::from),
        );
        Value::Object(m)
    }

    /// The recording a golden's fixture holds: None for a golden of filler weights, an error
    /// naming the field when the `gguf` block is malformed.
    pub fn of_golden(golden: &Golden) -> Result<Option<GgufRecording>, SessionError> {
        let Some(v) = golden.fixture.raw.get(GGUF_FIXTURE_KEY) else {
            return Ok(None);
        };
        let bad = |field: &str, msg: &str| SessionError::Fixture {
            source_path: golden.source.display().to_string(),
            field: format!("fixture.{GGUF_FIXTURE_KEY}.{field}"),
            msg: msg.to_string(),
        };
        let str_field = |key: &str| -> Result<String, SessionError> {
            v.get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| bad(key, "expected a string"))
        };
        let u64_field = |key: &str| -> Result<u64, SessionError> {
            v.get(key)
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(key, "expected a non-negative integer"))
        };
        if !v.is_object() {
            return Err(bad("", "expected an object"));
        }
        let shards = usize::try_from(u64_field("shards")?)
            .map_err(|_| bad("shards", "does not fit this platform"))?;
        let layers = match v.get("layers") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(
                crate::model::LayerRange::parse(s).map_err(|e| bad("layers", &e.to_string()))?,
            ),
            Some(_) => return Err(bad("layers", "expected `A-B` or null")),
        };
        let engram_tables_fnv1a64 = match v.get("engram_tables_fnv1a64") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(bad("engram_tables_fnv1a64", "expected a string or null")),
        };
        Ok(Some(GgufRecording {
            identity: GgufIdentity {
                path: str_field("path")?,
                bytes: u64_field("bytes")?,
                shards,
                header_fnv1a64: str_field("header_fnv1a64")?,
            },
            layers,
            engram_tables_fnv1a64,
        }))
    }
}

/// The fixture keys a model config is written as (and compared by), in file order.
pub fn config_fixture_entries(cfg: &crate::model::ModelConfig) -> Vec<(&'static str, Value)> {
    use crate::model::ScoreFunc;
    let e = cfg.engram.as_ref();
    let list = |v: &[usize]| Value::from(v.to_vec());
    vec![
        ("vocab_size", Value::from(cfg.vocab_size)),
        ("dim", Value::from(cfg.dim)),
        ("n_layers", Value::from(cfg.n_layers)),
        ("n_heads", Value::from(cfg.n_heads)),
        ("head_dim", Value::from(cfg.head_dim)),
        ("rope_head_dim", Value::from(cfg.rope_head_dim)),
        ("q_lora_rank", Value::from(cfg.q_lora_rank)),
        ("o_lora_rank", Value::from(cfg.o_lora_rank)),
        ("o_groups", Value::from(cfg.o_groups)),
        ("moe_inter_dim", Value::from(cfg.moe_inter_dim)),
        ("n_routed_experts", Value::from(cfg.n_routed_experts)),
        ("n_shared_experts", Value::from(1)),
        ("n_activated_experts", Value::from(cfg.n_activated_experts)),
        (
            "score_func",
            Value::from(match cfg.score_func {
                ScoreFunc::Softmax => "softmax",
                ScoreFunc::Sigmoid => "sigmoid",
                ScoreFunc::SqrtSoftplus => "sqrtsoftplus",
            }),
        ),
        ("route_scale", Value::from(f64::from(cfg.route_scale))),
        ("norm_topk_prob", Value::from(cfg.norm_topk_prob)),
        ("swiglu_limit", Value::from(f64::from(cfg.swiglu_limit))),
        ("window_size", Value::from(cfg.window_size)),
        ("compress_ratios", list(&cfg.compress_ratios)),
        ("kv_source_layers", list(&cfg.kv_source_layers)),
        ("index_source_layers", list(&cfg.index_source_layers)),
        (
            "candidate_source_layer",
            cfg.candidate_source_layer
                .map_or(Value::from(-1), Value::from),
        ),
        (
            "candidate_topk_blocks",
            Value::from(cfg.candidate_topk_blocks),
        ),
        (
            "candidate_block_size",
            Value::from(cfg.candidate_block_size),
        ),
        ("index_n_heads", Value::from(cfg.index_n_heads)),
        ("index_head_dim", Value::from(cfg.index_head_dim)),
        ("index_topk", Value::from(cfg.index_topk)),
        ("hc_mult", Value::from(cfg.hc_mult)),
        ("hc_sinkhorn_iters", Value::from(cfg.hc_sinkhorn_iters)),
        ("hc_eps", Value::from(f64::from(cfg.hc_eps))),
        (
            "engram_layer_ids",
            list(e.map_or(&[][..], |e| &e.layer_ids)),
        ),
        (
            "engram_max_ngram_size",
            Value::from(e.map_or(0, |e| e.max_ngram_size)),
        ),
        (
            "engram_vocab_size",
            Value::from(e.map_or(0, |e| e.vocab_size)),
        ),
        ("engram_n_heads", Value::from(e.map_or(0, |e| e.n_heads))),
        ("engram_head_dim", Value::from(e.map_or(0, |e| e.head_dim))),
        ("engram_pad_id", Value::from(e.map_or(0, |e| e.pad_id))),
        (
            "engram_compressed_vocab_size",
            Value::from(e.map_or(0, |e| e.compressed_vocab_size)),
        ),
        (
            "engram_num_embeddings",
            list(e.map_or(&[][..], |e| &e.num_embeddings)),
        ),
        ("rope_theta", Value::from(cfg.rope_theta)),
        ("compress_rope_theta", Value::from(cfg.compress_rope_theta)),
        ("rope_factor", Value::from(cfg.rope_factor)),
        ("original_seq_len", Value::from(cfg.original_seq_len)),
        ("beta_fast", Value::from(cfg.beta_fast)),
        ("beta_slow", Value::from(cfg.beta_slow)),
        ("norm_eps", Value::from(f64::from(cfg.norm_eps))),
        ("gate_temp", Value::from(f64::from(cfg.gate_temp))),
        ("max_seq_len", Value::from(cfg.max_seq_len)),
    ]
}

/// The first config field where `recorded` (a golden's fixture) and `actual` (a GGUF's
/// metadata) differ: `(field, recorded value, actual value)`.
pub fn config_difference(
    recorded: &crate::model::ModelConfig,
    actual: &crate::model::ModelConfig,
) -> Option<(&'static str, String, String)> {
    config_fixture_entries(recorded)
        .into_iter()
        .zip(config_fixture_entries(actual))
        .find(|((_, a), (_, b))| a != b)
        .map(|((k, a), (_, b))| (k, a.to_string(), b.to_string()))
}

/// Write a golden of `backend` (the CPU oracle on a GGUF's weights) run over `reference`'s
/// regimes: the fixture from the GGUF's config with `recording` (the file's identity, the layer
/// range, the engram tables' hash) under [`GGUF_FIXTURE_KEY`], an empty `weights_meta` (the
/// weights are the GGUF's, not a filler), then every capture. The engram tables are recorded by
/// hash, not as `fixture.engram`, whose schema stores a scale per table row (768 M values at
/// real dims); a replay takes them from the GGUF and checks the hash. `each` sees every step.
pub fn write_gguf_golden(
    cfg: &crate::model::ModelConfig,
    recording: &GgufRecording,
    reference: super::reference::TokensReference,
    backend: &mut dyn Backend,
    full: &FullCaptures,
    each: &mut dyn FnMut(&super::StepOutcome),
) -> Result<String, SessionError> {
    let mut fixture = Map::new();
    for (k, v) in config_fixture_entries(cfg) {
        fixture.insert(k.into(), v);
    }
    let prefill_len = match reference.regimes.first() {
        Some((_, super::reference::RegimeTokens::Given(ids))) => ids.len(),
        _ => 0,
    };
    fixture.insert("batch".into(), Value::from(1));
    fixture.insert("prefill_len".into(), Value::from(prefill_len));
    fixture.insert(
        "regimes".into(),
        Value::from(
            reference
                .regimes
                .iter()
                .map(|(n, _)| n.clone())
                .collect::<Vec<_>>(),
        ),
    );
    stamp_writer(&mut fixture, " on a GGUF's weights");
    fixture.insert(
        "input_ids_rule".into(),
        Value::from("given tokens (the input_ids capture of each regime; decode: greedy)"),
    );
    fixture.insert(
        "lcg_probe".into(),
        Value::from((0..8).map(crate::num::lcg_probe).collect::<Vec<_>>()),
    );
    fixture.insert(GGUF_FIXTURE_KEY.into(), recording.to_json());
    let mut out = String::new();
    out.push_str("{\"fixture\":");
    write_py_json(&mut out, &Value::Object(fixture));
    out.push_str(",\"weights_meta\":{}");
    write_regimes(
        &mut out,
        reference,
        backend,
        full,
        Sampling::PerLastAxis,
        each,
    )?;
    out.push('}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_repr_cases() {
        for (x, want) in [
            (1.0, "1.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (-0.307547390460968, "-0.307547390460968"),
            (0.1767766952966369, "0.1767766952966369"),
            (10000.0, "10000.0"),
            (1e-20, "1e-20"),
            (-0.0, "-0.0"),
            (123.5, "123.5"),
        ] {
            assert_eq!(py_float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn strides_follow_the_generator_rule() {
        assert_eq!(stride_for(3072, false, false), 257);
        assert_eq!(stride_for(768, false, false), 67);
        assert_eq!(stride_for(144, true, false), 3);
        assert_eq!(stride_for(12, false, false), 1);
        assert_eq!(stride_for(3072, false, true), 1);
    }

    #[test]
    fn gguf_strides_sample_every_element_of_the_last_axis() {
        // sa_q at real dims, prefill 8: 8 x 64 heads x 512 dims.
        let shape = [1, 8, 64, 512];
        let stride = gguf_stride_for(&shape, false, false);
        assert_eq!(stride, 509);
        let n: usize = shape.iter().product();
        let dims: std::collections::HashSet<usize> =
            (0..n).step_by(stride).map(|i| i % 512).collect();
        assert_eq!(dims.len(), 512, "every head dim, RoPE's last 64 included");
        // The generator's rule reaches none of the RoPE dims (448..512) of this capture.
        let atlas = stride_for(n, false, false);
        assert!((0..n).step_by(atlas).all(|i| i % 512 < 448));
        // The stream (hc 4 x dim 5120 per token): every channel.
        assert_eq!(gguf_stride_for(&[1, 8, 4, 5120], false, false), 31);
        // A prime that divides the last axis is skipped (2 would sample only even elements):
        // 39 values in rows of 3 keep every other row; rows of 6 with no coprime prime stay whole.
        assert_eq!(gguf_stride_for(&[13, 3], false, false), 2);
        assert_eq!(gguf_stride_for(&[8, 6], false, false), 1);
        // Small captures and full ones are whole; integers keep their larger cap.
        assert_eq!(gguf_stride_for(&[64], true, false), 1);
        assert_eq!(gguf_stride_for(&[1, 8, 4], false, false), 1);
        assert_eq!(gguf_stride_for(&shape, false, true), 1);
    }

    #[test]
    fn strings_are_ascii_escaped() {
        let mut s = String::new();
        write_py_str(&mut s, "a\"b\\c\u{e9}\u{1f600}");
        assert_eq!(s, "\"a\\\"b\\\\c\\u00e9\\ud83d\\ude00\"");
    }
}
