//! A deepseek41 GGUF (either dialect, single file or split set) as a [`WeightSource`], and the
//! [`ModelConfig`] + [`EngramTables`] its metadata describes.
//!
//! Parameter names are the reference's (`layers.3.attn.wq_a.weight`), mapped to GGUF tensors by
//! [`crate::gguf::names`]; shapes are the ggml dims reversed (torch order). Routed experts are
//! sliced from the merged 3-D tensors one slab at a time, so unrouted experts are never read.
//! Engram tables are read row by row with positioned reads; only the rows a lookup asks for are
//! decoded, never the whole table.
//!
//! Precision rule: every value is dequantized to f32 and then, where the reference stores the
//! parameter in bf16 (per [`crate::model::params::param_list`]), rounded to bf16 (nearest even),
//! because that is the value the reference would hold after loading the file. Parameters the
//! reference keeps in f32 are returned as dequantized. Engram tables: with the e4m3/e8m0 row
//! encodings the FP8 codes and E8M0 scales are returned separately and exactly (the oracle
//! applies `bf16(value·scale)` as the reference does); every other table encoding (Q4_K rows,
//! lloyd4, the llama.cpp dialect's GGML-typed tables) already holds scaled values, so
//! `engram.embed.weight` is the decoded row and `engram.embed.scale` is all ones.

use crate::gguf::dialect::{Deepseek41Meta, Dialect, EngramMeta};
use crate::gguf::names::{reference_to_gguf, TensorPart};
use crate::gguf::quant::{e4m3_to_f32, e8m0_to_f32, EngramEncoding};
use crate::gguf::{EngramTables as GgufEngramTables, GgufError, GgufSet};
use crate::golden::{EngramFixture, StorageDtype};
use crate::model::config::{ConfigError, EngramConfig, ModelConfig, ScoreFunc};
use crate::model::engram::{EngramError, EngramTables};
use crate::model::params::{param_groups, ParamName, ENGRAM_SCALE_BLOCK, EXPERT_PROJECTIONS};
use crate::model::weights::{WeightError, WeightSource};
use crate::num::bf16_round;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Why a GGUF cannot become a model.
#[derive(Debug, thiserror::Error)]
pub enum GgufModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{path}: metadata `{key}`: {msg}")]
    Meta {
        path: String,
        key: String,
        msg: String,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Engram(#[from] EngramError),
}

/// Default byte budget of the dequantized-tensor cache (1 GiB, like the filler's): tiny models
/// fit whole; at real dims each step fetches a parameter once, so more buys no reuse.
pub const GGUF_DEFAULT_CACHE_BYTES: usize = 1 << 30;

/// Largest parameter `tensor()` dequantizes at once (elements); bigger ones (the real
/// `embed.weight`, engram tables) must be fetched with `rows()`.
pub const GGUF_MAX_TENSOR_ELEMENTS: usize = 1 << 28;

/// The model a deepseek41 GGUF describes.
#[derive(Debug, Clone)]
pub struct GgufModel {
    pub cfg: ModelConfig,
    pub tables: Option<EngramTables>,
    /// Values that were derived or defaulted rather than read (one line each).
    pub notes: Vec<String>,
}

fn usize_of(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// A u64/i64/f64 field of the `deepseek41.config` JSON, if the file carries one.
fn hf_config_u64(meta: &Deepseek41Meta, key: &str) -> Option<u64> {
    let json: serde_json::Value = serde_json::from_str(meta.hf_config_json.as_deref()?).ok()?;
    json.get(key)?.as_u64()
}

/// Layers that hold tensor `blk.L.<suffix>` (for the llama.cpp dialect, which stores no source
/// layer lists).
fn layers_with(set: &GgufSet, n_layers: u64, suffix: &str) -> Vec<usize> {
    (0..n_layers)
        .filter(|l| set.tensor(&format!("blk.{l}.{suffix}")).is_some())
        .map(usize_of)
        .collect()
}

/// Builds the [`ModelConfig`] and engram tables of a deepseek41 GGUF. Values the dialect does
/// not store are derived (source layer lists from which tensors exist), or take the reference
/// default (`gate_temp` 1.0), each with a note. `max_seq_len` is `max_position_embeddings`.
pub fn model_from_gguf(set: &GgufSet, meta: &Deepseek41Meta) -> Result<GgufModel, GgufModelError> {
    let path = set.path().display().to_string();
    let bad = |key: &str, msg: String| GgufModelError::Meta {
        path: path.clone(),
        key: key.to_string(),
        msg,
    };
    let mut notes = Vec::new();
    let score_func = match meta.scoring_func.as_deref() {
        Some("softmax") => ScoreFunc::Softmax,
        Some("sigmoid") => ScoreFunc::Sigmoid,
        Some("sqrtsoftplus") => ScoreFunc::SqrtSoftplus,
        other => {
            return Err(bad(
                "scoring_func / expert_gating_func",
                format!("{other:?}; expected softmax, sigmoid or sqrtsoftplus"),
            ))
        }
    };
    let norm_topk_prob = meta.norm_topk_prob.ok_or_else(|| {
        bad(
            "norm_topk_prob / expert_weights_norm",
            "absent; the router cannot know whether to renormalise".into(),
        )
    })?;
    let swiglu_limit = match (meta.swiglu_limit, meta.swiglu_limits_per_layer.is_empty()) {
        (Some(v), _) => v as f32,
        (None, false) => {
            return Err(bad(
                "swiglu_clamp_exp",
                "per-layer limits differ; the model has one clamp".into(),
            ))
        }
        (None, true) => return Err(bad("swiglu_limit", "absent".into())),
    };
    let n_layers = meta.n_layers;
    let kv_source_layers = match &meta.kv_source_layer_ids {
        Some(ids) => ids.iter().map(|&l| usize_of(l)).collect(),
        None => {
            let ls = layers_with(set, n_layers, "attn_compressor_kv.weight");
            notes.push(format!(
                "kv source layers {ls:?}: derived from the attn_compressor_kv tensors"
            ));
            ls
        }
    };
    let index_source_layers = match &meta.index_source_layer_ids {
        Some(ids) => ids.iter().map(|&l| usize_of(l)).collect(),
        None => {
            let ls = layers_with(set, n_layers, "indexer.attn_q_b.weight");
            notes.push(format!(
                "index source layers {ls:?}: derived from the indexer.attn_q_b tensors"
            ));
            ls
        }
    };
    let candidate_source_layer = match meta.candidate_source_layer_id {
        Some(l) => Some(usize_of(l)),
        // A llama.cpp file without candidate keys: the released geometry's source, the first
        // ratio-1 index source (the dialect reader already warned and set blocks and size).
        None if meta.candidate_topk_blocks.is_some() => {
            let source = index_source_layers
                .iter()
                .copied()
                .find(|&l| meta.compress_ratios.get(l).copied() == Some(1));
            notes.push(match source {
                Some(l) => format!(
                    "candidate source layer {l}: no candidate keys, the first ratio-1 index source"
                ),
                None => "no candidate keys and no ratio-1 index source: no candidate filter".into(),
            });
            source
        }
        None => {
            notes.push("no candidate-filter keys: running without the candidate filter".into());
            None
        }
    };
    let rope = meta.rope_scaling.clone();
    if rope.is_none() {
        notes.push("no rope scaling keys: YaRN factor 1 (no extension)".into());
    }
    notes.push("gate_temp 1.0: not stored in GGUF (reference default)".into());
    let engram = meta
        .engram
        .as_ref()
        .map(|e| engram_config(meta, e, &mut notes));
    let cfg = ModelConfig {
        vocab_size: usize_of(meta.vocab_size),
        dim: usize_of(meta.hidden_size),
        n_layers: usize_of(n_layers),
        n_heads: usize_of(meta.n_heads),
        head_dim: usize_of(meta.head_dim),
        rope_head_dim: usize_of(meta.rope_head_dim),
        q_lora_rank: usize_of(meta.q_lora_rank),
        o_lora_rank: usize_of(meta.o_lora_rank),
        o_groups: usize_of(meta.o_groups),
        moe_inter_dim: usize_of(meta.moe_intermediate_size),
        n_routed_experts: usize_of(meta.n_routed_experts),
        n_activated_experts: usize_of(meta.n_experts_per_tok),
        score_func,
        route_scale: meta.routed_scaling_factor as f32,
        norm_topk_prob,
        swiglu_limit,
        window_size: usize_of(meta.sliding_window),
        compress_ratios: meta
            .compress_ratios
            .iter()
            .take(usize_of(n_layers))
            .map(|&r| usize_of(r))
            .collect(),
        kv_source_layers,
        index_source_layers,
        candidate_source_layer,
        candidate_topk_blocks: meta.candidate_topk_blocks.map_or(0, usize_of),
        candidate_block_size: meta.candidate_block_size.map_or(0, usize_of),
        index_n_heads: usize_of(meta.index_n_heads),
        index_head_dim: usize_of(meta.index_head_dim),
        index_topk: usize_of(meta.index_topk),
        hc_mult: usize_of(meta.hc_mult),
        hc_sinkhorn_iters: usize_of(meta.hc_sinkhorn_iters),
        hc_eps: meta.hc_eps as f32,
        engram,
        rope_theta: meta.rope_theta,
        compress_rope_theta: meta.compress_rope_theta,
        rope_factor: rope.as_ref().map_or(1.0, |r| r.factor),
        original_seq_len: rope
            .as_ref()
            .map_or(usize_of(meta.max_position_embeddings), |r| {
                r.original_max_position_embeddings as usize
            }),
        beta_fast: rope.as_ref().map_or(32.0, |r| r.beta_fast),
        beta_slow: rope.as_ref().map_or(1.0, |r| r.beta_slow),
        norm_eps: meta.rms_norm_eps as f32,
        gate_temp: 1.0,
        max_seq_len: usize_of(meta.max_position_embeddings),
    };
    check_layers_present(set, cfg.n_layers)?;
    cfg.validate()?;
    let tables = match (&cfg.engram, &meta.engram) {
        (Some(ec), Some(e)) => Some(engram_tables(ec, e)?),
        _ => None,
    };
    Ok(GgufModel { cfg, tables, notes })
}

fn engram_config(meta: &Deepseek41Meta, e: &EngramMeta, notes: &mut Vec<String>) -> EngramConfig {
    // The raw pad id and the hash vocabulary are not engram keys; ds4 keeps them in the HF
    // config JSON. Otherwise: the first raw id that maps to the compressed pad, and the
    // compressed vocabulary (only the prime derivation, which a GGUF never needs, reads it).
    let pad_id = match hf_config_u64(meta, "engram_pad_token_id") {
        Some(p) => p as i64,
        None => {
            let raw = e
                .token_map
                .iter()
                .position(|&t| u64::from(t) == e.pad_id)
                .map_or(e.pad_id as i64, |p| p as i64);
            notes.push(format!(
                "engram raw pad id {raw}: the first token mapping to the compressed pad {}",
                e.pad_id
            ));
            raw
        }
    };
    let vocab_size = match hf_config_u64(meta, "engram_vocab_size") {
        Some(v) => usize_of(v),
        None => {
            notes.push("engram_vocab_size not stored: using the compressed vocabulary size".into());
            usize_of(e.compressed_vocab_size)
        }
    };
    EngramConfig {
        layer_ids: e.layer_ids.iter().map(|&l| usize_of(l)).collect(),
        max_ngram_size: usize_of(e.max_ngram_size),
        n_heads: usize_of(e.n_heads),
        head_dim: usize_of(e.head_dim),
        vocab_size,
        compressed_vocab_size: usize_of(e.compressed_vocab_size),
        pad_id,
        num_embeddings: e.rows.iter().map(|&r| usize_of(r)).collect(),
    }
}

/// The hash constants of the file, reshaped to the model's layout and validated.
fn engram_tables(ec: &EngramConfig, e: &EngramMeta) -> Result<EngramTables, EngramError> {
    let cols = e.columns_per_layer().max(1);
    let ngram = usize_of(e.max_ngram_size).max(1);
    let heads = usize_of(e.n_heads).max(1);
    let to_i64 = |v: u64| i64::try_from(v).map_err(|_| EngramError(format!("{v} exceeds i64")));
    let mut multipliers = Vec::new();
    for layer in e.multipliers.chunks(ngram) {
        multipliers.push(layer.iter().map(|&m| to_i64(m)).collect::<Result<_, _>>()?);
    }
    let mut primes = Vec::new();
    for layer in e.primes.chunks(cols) {
        let mut per_order = Vec::new();
        for order in layer.chunks(heads) {
            per_order.push(order.iter().map(|&p| to_i64(p)).collect::<Result<_, _>>()?);
        }
        primes.push(per_order);
    }
    let mut offsets = Vec::new();
    for layer in e.offsets.chunks(cols) {
        offsets.push(layer.iter().map(|&o| to_i64(o)).collect::<Result<_, _>>()?);
    }
    let fx = EngramFixture {
        layer_ids: ec.layer_ids.clone(),
        max_ngram_size: ec.max_ngram_size,
        n_heads: ec.n_heads,
        head_dim: ec.head_dim,
        n_hash_cols: ec.n_hash_cols(),
        num_embeddings: ec.num_embeddings.clone(),
        pad_id_compressed: to_i64(e.pad_id)?,
        token_map: e.token_map.iter().map(|&t| i64::from(t)).collect(),
        multipliers,
        primes,
        offsets,
        scale_block: ENGRAM_SCALE_BLOCK,
        scales: Vec::new(),
    };
    EngramTables::from_fixture(ec, &fx)
}

/// Where one reference parameter comes from.
#[derive(Debug, Clone)]
enum Origin {
    /// A whole GGUF tensor.
    Whole(String),
    /// Expert slab `expert` of a merged 3-D tensor.
    Expert(String, u64),
    /// The FP8 codes of engram layer `layer` (e4m3/e8m0 encodings).
    EngramCodes(u64),
    /// The E8M0 scales of engram layer `layer` (e4m3/e8m0 encodings).
    EngramScales(u64),
    /// Decoded, already scaled rows of engram layer `layer` (every other encoding).
    EngramValues(u64),
    /// All-ones scales for an `EngramValues` table.
    UnitScales(u64),
}

#[derive(Debug, Clone)]
struct Entry {
    origin: Origin,
    shape: Vec<usize>,
    /// Round dequantized values to bf16 (the reference stores the parameter in bf16).
    bf16: bool,
}

#[derive(Default)]
struct Cache {
    tensors: HashMap<String, Arc<Vec<f32>>>,
    bytes: usize,
}

/// A deepseek41 GGUF as a weight source (see the module docs for the mapping and precision).
pub struct GgufSource {
    set: GgufSet,
    meta: Deepseek41Meta,
    entries: HashMap<String, Entry>,
    cache: Mutex<Cache>,
    cache_budget_bytes: usize,
}

impl GgufSource {
    /// Opens `path` (any shard of a set), reads the deepseek41 metadata and builds the source
    /// and the model it describes.
    pub fn open(path: impl AsRef<Path>) -> Result<(GgufSource, GgufModel), GgufModelError> {
        let set = GgufSet::open(path)?;
        let meta = Deepseek41Meta::from_set(&set)?;
        let model = model_from_gguf(&set, &meta)?;
        let source = GgufSource::new(set, meta, &model.cfg)?;
        Ok((source, model))
    }

    /// A source over an open set whose parameters are those `cfg` lists (names the file lacks
    /// are reported as missing when fetched).
    pub fn new(
        set: GgufSet,
        meta: Deepseek41Meta,
        cfg: &ModelConfig,
    ) -> Result<GgufSource, GgufModelError> {
        let dialect = meta.dialect;
        let mut entries = HashMap::new();
        let e4m3 = meta.engram.as_ref().is_some_and(|e| {
            matches!(
                e.encoding,
                EngramEncoding::E4m3E8m0Row264 | EngramEncoding::E4m3E8m0Row { .. }
            )
        });
        let mut holds_experts = false;
        for g in param_groups(cfg)? {
            let bf16 = g.dtype == StorageDtype::Bf16;
            match g.name {
                ParamName::Experts { layer, count } => {
                    for (proj, _) in EXPERT_PROJECTIONS {
                        // Experts are listed only where a merged tensor holds them, and only as
                        // many as it holds: the count a file claims never outruns its bytes.
                        let probe = ParamName::expert_name(layer, 0, proj);
                        let Some(loc) = reference_to_gguf(dialect, &probe) else {
                            continue;
                        };
                        let Some((_, t)) = set.tensor(&loc.tensor) else {
                            continue;
                        };
                        check_expert_tensor(&set, t, count)?;
                        holds_experts = true;
                        for ex in 0..count {
                            let name = ParamName::expert_name(layer, ex, proj);
                            if let Some(entry) = map_param(&set, &meta, dialect, e4m3, &name, bf16)
                            {
                                entries.insert(name, entry);
                            }
                        }
                    }
                }
                single => {
                    let name = single.single_name().unwrap_or_default();
                    if let Some(entry) = map_param(&set, &meta, dialect, e4m3, &name, bf16) {
                        entries.insert(name, entry);
                    }
                }
            }
        }
        if cfg.n_routed_experts > 0 && !holds_experts {
            return Err(GgufModelError::Meta {
                path: set.path().display().to_string(),
                key: "n_routed_experts / expert_count".into(),
                msg: format!(
                    "{} routed experts, but the file holds no merged expert tensor \
                     (blk.L.ffn_{{gate,up,down}}_exps.weight) to back them",
                    cfg.n_routed_experts
                ),
            });
        }
        Ok(GgufSource {
            set,
            meta,
            entries,
            cache: Mutex::new(Cache::default()),
            cache_budget_bytes: GGUF_DEFAULT_CACHE_BYTES,
        })
    }

    /// Set the dequantized-tensor cache budget in bytes (0 caches nothing).
    pub fn with_cache_budget_bytes(mut self, bytes: usize) -> GgufSource {
        self.cache_budget_bytes = bytes;
        self
    }

    /// The set's deepseek41 metadata.
    pub fn meta(&self) -> &Deepseek41Meta {
        &self.meta
    }

    /// The open set.
    pub fn set(&self) -> &GgufSet {
        &self.set
    }

    /// The GGUF tensor (and expert) a reference parameter is read from, for reports.
    pub fn origin_of(&self, name: &str) -> Option<String> {
        self.entries.get(name).map(|e| match &e.origin {
            Origin::Whole(t) => t.clone(),
            Origin::Expert(t, x) => format!("{t} expert {x}"),
            Origin::EngramCodes(l) => format!("{} codes", EngramMeta::table_name(*l)),
            Origin::EngramScales(l) => format!("{} scales", EngramMeta::table_name(*l)),
            Origin::EngramValues(l) => EngramMeta::table_name(*l),
            Origin::UnitScales(l) => {
                format!("ones (scales folded into {})", EngramMeta::table_name(*l))
            }
        })
    }

    fn err(&self, name: &str, e: impl std::fmt::Display) -> WeightError {
        WeightError::Invalid {
            name: name.to_string(),
            msg: format!("{}: {e}", self.set.path().display()),
        }
    }

    fn entry(&self, name: &str) -> Result<&Entry, WeightError> {
        self.entries.get(name).ok_or_else(|| WeightError::Missing {
            name: name.to_string(),
            source_desc: self.describe(),
        })
    }

    /// Engram rows `rows` of layer `layer` as stored bytes, one `Vec` per row.
    fn engram_rows(
        &self,
        name: &str,
        layer: u64,
        rows: &[usize],
    ) -> Result<Vec<Vec<u8>>, WeightError> {
        let e = self
            .meta
            .engram
            .as_ref()
            .ok_or_else(|| self.err(name, "no engram metadata"))?;
        let tables = GgufEngramTables::open(&self.set, e).map_err(|x| self.err(name, x))?;
        rows.iter()
            .map(|&r| {
                tables
                    .row_bytes(layer, r as u64..r as u64 + 1)
                    .map_err(|x| self.err(name, x))
            })
            .collect()
    }

    fn finish(&self, entry: &Entry, mut v: Vec<f32>) -> Vec<f32> {
        if entry.bf16 {
            v.iter_mut().for_each(|x| *x = bf16_round(*x));
        }
        v
    }

    fn load_rows(
        &self,
        name: &str,
        entry: &Entry,
        rows: &[usize],
    ) -> Result<Vec<f32>, WeightError> {
        let n_rows = entry.shape.first().copied().unwrap_or(0);
        let width = checked_product(&entry.shape[entry.shape.len().min(1)..])
            .ok_or_else(|| self.err(name, format!("row width of {:?} overflows", entry.shape)))?;
        if let Some(&r) = rows.iter().find(|&&r| r >= n_rows) {
            return Err(WeightError::Invalid {
                name: name.to_string(),
                msg: format!("row {r} out of range (rows: {n_rows})"),
            });
        }
        let hd = self
            .meta
            .engram
            .as_ref()
            .map_or(0, |e| usize_of(e.head_dim));
        let mut out = Vec::with_capacity(rows.len().saturating_mul(width));
        match &entry.origin {
            Origin::Whole(t) => {
                // A torch row of a [d_k, .., d_1, ne0] tensor spans `width / ne0` ggml rows of
                // ne0 values (one for a matrix, ne1 for a 3-D tensor); a 1-D tensor's rows are
                // single values of its one ggml row.
                let ne0 = entry.shape.last().copied().unwrap_or(1).max(1);
                if entry.shape.len() == 1 {
                    let all = self
                        .set
                        .tensor_rows_f32(t, 0..1)
                        .map_err(|x| self.err(name, x))?;
                    for &r in rows {
                        out.push(all.get(r).copied().ok_or_else(|| {
                            self.err(name, format!("row {r} is outside the decoded {ne0} values"))
                        })?);
                    }
                } else {
                    let per_row = (width / ne0) as u64;
                    // One read per run of consecutive rows (a streamed head chunk is one run).
                    let mut i = 0;
                    while i < rows.len() {
                        let mut j = i + 1;
                        while j < rows.len() && rows[j] == rows[j - 1] + 1 {
                            j += 1;
                        }
                        // Bounded by the tensor's row count, checked above.
                        let first = rows[i] as u64 * per_row;
                        let end = (rows[j - 1] as u64 + 1) * per_row;
                        let v = self
                            .set
                            .tensor_rows_f32(t, first..end)
                            .map_err(|x| self.err(name, x))?;
                        out.extend(v);
                        i = j;
                    }
                }
            }
            Origin::Expert(t, x) => {
                let all = self.set.expert_f32(t, *x).map_err(|e| self.err(name, e))?;
                for &r in rows {
                    out.extend_from_slice(&all[r * width..(r + 1) * width]);
                }
            }
            Origin::EngramCodes(l) => {
                for (i, row) in self.engram_rows(name, *l, rows)?.iter().enumerate() {
                    for &code in &row[..hd] {
                        if code & 0x7f == 0x7f {
                            return Err(self.err(name, format!("row {}: NaN E4M3 code", rows[i])));
                        }
                        out.push(e4m3_to_f32(code));
                    }
                }
            }
            Origin::EngramScales(l) => {
                for (i, row) in self.engram_rows(name, *l, rows)?.iter().enumerate() {
                    for &s in &row[hd..hd + hd / ENGRAM_SCALE_BLOCK] {
                        if s == 255 {
                            return Err(self.err(name, format!("row {}: NaN E8M0 scale", rows[i])));
                        }
                        out.push(e8m0_to_f32(s));
                    }
                }
            }
            Origin::EngramValues(l) => {
                let e = self
                    .meta
                    .engram
                    .as_ref()
                    .ok_or_else(|| self.err(name, "no engram metadata"))?;
                let tables = GgufEngramTables::open(&self.set, e).map_err(|x| self.err(name, x))?;
                for &r in rows {
                    let v = tables
                        .rows_f32(*l, r as u64..r as u64 + 1)
                        .map_err(|x| self.err(name, x))?;
                    out.extend(v);
                }
            }
            Origin::UnitScales(_) => out.resize(rows.len().saturating_mul(width), 1.0),
        }
        if out.len() != rows.len().saturating_mul(width) {
            return Err(self.err(
                name,
                format!(
                    "decoded {} values for {} rows of {width}",
                    out.len(),
                    rows.len()
                ),
            ));
        }
        Ok(self.finish(entry, out))
    }
}

/// `Π dims`, or `None` when it overflows `usize`.
fn checked_product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// A merged expert tensor must be `[ne0, ne1, n_routed_experts]` and hold at least one byte per
/// expert, so the expert count the metadata claims is one the file can hold.
fn check_expert_tensor(
    set: &GgufSet,
    t: &crate::gguf::TensorInfo,
    n_experts: usize,
) -> Result<(), GgufModelError> {
    let holds = t.dims.len() == 3
        && t.dims[2] == n_experts as u64
        && t.n_elements > 0
        && t.n_bytes.is_some_and(|b| b >= n_experts as u64);
    if holds {
        Ok(())
    } else {
        Err(GgufModelError::Meta {
            path: set.path().display().to_string(),
            key: "n_routed_experts / expert_count".into(),
            msg: format!(
                "{n_experts} routed experts, but the merged expert tensor {} is {} {:?} ({} bytes): \
                 expected dims [ne0, ne1, {n_experts}] with data for every expert",
                t.name,
                t.ggml_type,
                t.dims,
                t.n_bytes.map_or("unknown".to_string(), |b| b.to_string())
            ),
        })
    }
}

/// Every backbone layer `0..n_layers` must hold at least one `blk.L.*` tensor: a layer count
/// the tensors do not back is refused before anything is built per layer. `n_layers` is
/// already bounded by the metadata's per-layer `compress_ratios` array.
fn check_layers_present(set: &GgufSet, n_layers: usize) -> Result<(), GgufModelError> {
    let mut present = vec![false; n_layers];
    for file in set.shards() {
        for t in file.tensors() {
            let layer = t
                .name
                .strip_prefix("blk.")
                .and_then(|r| r.split('.').next())
                .and_then(|n| n.parse::<usize>().ok());
            if let Some(slot) = layer.and_then(|l| present.get_mut(l)) {
                *slot = true;
            }
        }
    }
    match present.iter().position(|&p| !p) {
        None => Ok(()),
        Some(l) => Err(GgufModelError::Meta {
            path: set.path().display().to_string(),
            key: "num_hidden_layers / block_count".into(),
            msg: format!(
                "{n_layers} layers, but the file holds no tensor of layer {l} (blk.{l}.*); \
                 {} of {n_layers} layers have tensors",
                present.iter().filter(|&&p| p).count()
            ),
        }),
    }
}

/// Where parameter `name` lives in the set, with its torch shape, if the file holds it.
fn map_param(
    set: &GgufSet,
    meta: &Deepseek41Meta,
    dialect: Dialect,
    e4m3: bool,
    name: &str,
    bf16: bool,
) -> Option<Entry> {
    let engram_layer = || {
        name.strip_prefix("layers.")?
            .split('.')
            .next()?
            .parse::<u64>()
            .ok()
    };
    let e = meta.engram.as_ref();
    let hd = e.map_or(0, |e| usize_of(e.head_dim));
    let table_rows = |layer: u64| -> Option<usize> {
        let e = e?;
        let i = e.layer_ids.iter().position(|&l| l == layer)?;
        e.rows.get(i).map(|&r| usize_of(r))
    };
    let mk = |origin, shape| {
        Some(Entry {
            origin,
            shape,
            bf16: false,
        })
    };
    let loc = match reference_to_gguf(dialect, name) {
        Some(loc) => loc,
        None if name.ends_with("engram.embed.scale") => {
            // llama.cpp tables hold scaled values: the scales are ones.
            let l = engram_layer()?;
            return mk(
                Origin::UnitScales(l),
                vec![table_rows(l)?, hd / ENGRAM_SCALE_BLOCK],
            );
        }
        None => return None,
    };
    let (_, t) = set.tensor(&loc.tensor)?;
    let dims: Vec<usize> = t.dims.iter().map(|&d| usize_of(d)).collect();
    match (loc.part, loc.expert) {
        (TensorPart::Whole, Some(x)) => {
            if dims.len() != 3 || x >= t.dims[2] {
                return None;
            }
            Some(Entry {
                origin: Origin::Expert(loc.tensor, x),
                shape: vec![dims[1], dims[0]],
                bf16,
            })
        }
        (TensorPart::Whole, None) if name.ends_with("engram.embed.weight") => {
            let l = engram_layer()?;
            mk(Origin::EngramValues(l), vec![table_rows(l)?, hd])
        }
        (TensorPart::Whole, None) => Some(Entry {
            origin: Origin::Whole(loc.tensor),
            shape: dims.iter().rev().copied().collect(),
            bf16,
        }),
        (TensorPart::EngramCodes, _) => {
            let l = engram_layer()?;
            let origin = if e4m3 {
                Origin::EngramCodes(l)
            } else {
                Origin::EngramValues(l)
            };
            mk(origin, vec![table_rows(l)?, hd])
        }
        (TensorPart::EngramScales, _) => {
            let l = engram_layer()?;
            let origin = if e4m3 {
                Origin::EngramScales(l)
            } else {
                Origin::UnitScales(l)
            };
            mk(origin, vec![table_rows(l)?, hd / ENGRAM_SCALE_BLOCK])
        }
    }
}

impl WeightSource for GgufSource {
    fn describe(&self) -> String {
        format!(
            "GGUF {} ({} dialect)",
            self.set.path().display(),
            self.meta.dialect.name()
        )
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.entries.get(name).map(|e| e.shape.clone())
    }

    fn tensor(&self, name: &str) -> Result<Arc<Vec<f32>>, WeightError> {
        if let Some(t) = self
            .cache
            .lock()
            .ok()
            .and_then(|c| c.tensors.get(name).cloned())
        {
            return Ok(t);
        }
        let entry = self.entry(name)?;
        let n = checked_product(&entry.shape)
            .ok_or_else(|| self.err(name, format!("shape {:?} overflows", entry.shape)))?;
        if n > GGUF_MAX_TENSOR_ELEMENTS {
            return Err(WeightError::Invalid {
                name: name.to_string(),
                msg: format!(
                    "{n} elements exceed the whole-tensor cap {GGUF_MAX_TENSOR_ELEMENTS}; fetch rows"
                ),
            });
        }
        let values = match &entry.origin {
            Origin::Whole(t) => {
                let v = self.set.tensor_f32(t).map_err(|e| self.err(name, e))?;
                self.finish(entry, v)
            }
            Origin::Expert(t, x) => {
                let v = self.set.expert_f32(t, *x).map_err(|e| self.err(name, e))?;
                self.finish(entry, v)
            }
            _ => {
                let rows: Vec<usize> = (0..entry.shape.first().copied().unwrap_or(0)).collect();
                self.load_rows(name, entry, &rows)?
            }
        };
        if values.len() != n {
            return Err(self.err(
                name,
                format!(
                    "decoded {} values for shape {:?}",
                    values.len(),
                    entry.shape
                ),
            ));
        }
        let t = Arc::new(values);
        let size = n * std::mem::size_of::<f32>();
        if let Ok(mut c) = self.cache.lock() {
            if size <= self.cache_budget_bytes {
                if c.bytes + size > self.cache_budget_bytes {
                    // Simple policy: start over (a step touches each parameter once at real dims).
                    c.tensors.clear();
                    c.bytes = 0;
                }
                c.bytes += size;
                c.tensors.insert(name.to_string(), t.clone());
            }
        }
        Ok(t)
    }

    fn rows(&self, name: &str, rows: &[usize]) -> Result<Vec<f32>, WeightError> {
        let entry = self.entry(name)?;
        self.load_rows(name, entry, rows)
    }

    /// 2-D parameters (whole tensors and expert slabs) in a decodable type, as their mapped
    /// bytes: the oracle's GEMMs decode them chunk by chunk, with the same decoder and bf16
    /// rounding as [`GgufSource::tensor`], so no f32 copy is made and no bit changes.
    fn stored_matrix(
        &self,
        name: &str,
    ) -> Option<Result<crate::model::stored::StoredMatrix<'_>, WeightError>> {
        let entry = self.entries.get(name)?;
        let (tensor, rows) = match &entry.origin {
            Origin::Whole(t) => (t, None),
            Origin::Expert(t, x) => (t, Some(*x)),
            _ => return None,
        };
        let (file, info) = self.set.tensor(tensor)?;
        if entry.shape.len() != 2 || !info.ggml_type.is_dequantizable() {
            return None;
        }
        let (n_rows, cols) = (entry.shape[0], entry.shape[1]);
        let view = || -> Result<_, WeightError> {
            let row_bytes = info
                .row_bytes()
                .ok_or_else(|| self.err(name, "row size unknown"))?;
            let first_row = match rows {
                Some(x) => {
                    let r = self
                        .set
                        .expert_rows(tensor, x)
                        .map_err(|e| self.err(name, e))?;
                    r.start
                }
                None => 0,
            };
            let len = (n_rows as u64)
                .checked_mul(row_bytes)
                .ok_or_else(|| self.err(name, "size overflows"))?;
            let start = first_row
                .checked_mul(row_bytes)
                .and_then(|o| o.checked_add(info.offset))
                .ok_or_else(|| self.err(name, "offset overflows"))?;
            let bytes = file.read_bytes(start, len).map_err(|e| self.err(name, e))?;
            crate::model::stored::StoredMatrix::new(
                name,
                info.ggml_type,
                n_rows,
                cols,
                bytes,
                entry.bf16,
            )
        };
        Some(view())
    }
}
