//! `golden write --gguf`: a real-dims golden recorded on a GGUF's weights. The fixture carries the
//! file's identity (header and tensor-table hash per shard), the layer range, the engram tables'
//! hash and the model config in place of `weights_meta`, so a replay refuses another file.

use super::{stamp_writer, write_py_json, write_regimes, FullCaptures, Sampling};
use crate::golden::Golden;
use crate::model::Backend;
use crate::session::SessionError;
use serde_json::{Map, Value};
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
            header_fnv1a64: crate::session::export::content_hash_hex(&header),
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
    crate::session::export::content_hash_hex(&bytes)
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
    reference: crate::session::reference::TokensReference,
    backend: &mut dyn Backend,
    full: &FullCaptures,
    each: &mut dyn FnMut(&crate::session::StepOutcome),
) -> Result<String, SessionError> {
    let mut fixture = Map::new();
    for (k, v) in config_fixture_entries(cfg) {
        fixture.insert(k.into(), v);
    }
    let prefill_len = match reference.regimes.first() {
        Some((_, crate::session::reference::RegimeTokens::Given(ids))) => ids.len(),
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
