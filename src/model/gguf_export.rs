//! Tiny deepseek41 GGUFs from a golden: the fixture's geometry as metadata of either dialect
//! and its filler weights (`golden::weights::regenerate`) as tensors, each in a chosen GGML type.
//!
//! Layout: the three global tensors, then every layer's tensors in parameter order (experts
//! merged per projection into 3-D `[in, out, n_experts]` tensors), engram tables last.
//!
//! Type choice (`--types`): comma-separated `SELECTOR=TYPE` rules, later rules overriding
//! earlier ones. Selectors: `default` (every tensor); a class: `experts` (merged routed
//! experts), `shared` (shared expert), `attn` (q/kv/output projections), `compressor`, `indexer`,
//! `router` (`ffn_gate_inp`), `hc` (hyper-connection mixes), `embed`, `head`, `engram_kv`
//! (`engram_kv`/`engram_wkv`), `engram_qk` (`engram_q`/`engram_k` norms), `vectors` (every 1-D
//! tensor), `engram` (the tables); or a GGUF tensor name, where `*` matches any run of
//! characters (`blk.2.*`). Types: `auto`, `f32`, `f16`, `bf16`, `q8_0`, `q4_0`, `q2_k`, `q3_k`,
//! `q4_k`, `q5_k`, `q6_k`, `iq2_xxs`. `auto` (the default) stores each parameter losslessly in
//! the reference's precision: BF16 where the reference stores bf16, F32 where it stores f32. A
//! type whose block does not divide a tensor's row (e.g. a K-quant on a 64-wide row) falls back
//! to `auto` for that tensor; the summary lists every fallback.
//!
//! Engram tables. ds4 dialect: the FP8 rows of spec §2.1 generalised to the tiny head dim — per
//! row `hd` E4M3 codes then `hd/32` E8M0 scales, an I8 tensor `[hd + hd/32, rows]` named by
//! `deepseek41.engram.encoding = e4m3_e8m0_32_row{hd + hd/32}` (for hd = 256 that is exactly
//! `e4m3_e8m0_32_row264`); lossless, the filler values being E4M3 codes times E8M0 scales, and
//! only `auto` applies there (`default=` rules leave it alone; a rule naming it
//! with another type is an error). llama.cpp dialect: the spec gives no FP8 form ("follow the
//! rung": an ordinary GGML tensor `[hd, rows]` of scaled values), so `auto` writes F32 (lossless:
//! an E4M3 value times a power of two is exact in f32); any type whose block divides `hd` may be
//! chosen instead.
//!
//! Keys the llama.cpp dialect lacks but the model needs are written as golden-lens extensions:
//! `deepseek41.attention.indexer.candidate_{source_layer,top_k_blocks,block_size}`.

use crate::gguf::dialect::{Dialect, LLAMA_CANDIDATE_KEYS};
use crate::gguf::ggml_type::GgmlType;
use crate::gguf::quant::encode::quantize;
use crate::gguf::quant::EngramEncoding;
use crate::gguf::{GgufError, GgufValue, GgufWriter, ValueType};
use crate::golden::weights::regenerate;
use crate::golden::{Golden, StorageDtype, WeightMeta};
use crate::model::config::{ModelConfig, ScoreFunc};
use crate::model::engram::EngramTables;
use crate::model::params::ENGRAM_SCALE_BLOCK;
use crate::num::{e4m3_encode, e8m0_encode};
use std::collections::HashMap;
use std::path::Path;

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("--types: {0}")]
    Types(String),
    #[error("golden {source_path}: {msg}")]
    Golden { source_path: String, msg: String },
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Config(#[from] crate::model::ConfigError),
    #[error(transparent)]
    Engram(#[from] crate::model::engram::EngramError),
}

/// A type a rule asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeChoice {
    /// The reference's own precision (lossless).
    Auto,
    /// This GGML type.
    Ggml(GgmlType),
}

/// What a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Selector {
    Default,
    Class(&'static str),
    Pattern(String),
}

const CLASSES: &[&str] = &[
    "experts",
    "shared",
    "attn",
    "compressor",
    "indexer",
    "router",
    "hc",
    "embed",
    "head",
    "engram_kv",
    "engram_qk",
    "vectors",
    "engram",
];

/// The parsed `--types` rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypePlan {
    rules: Vec<(Selector, TypeChoice)>,
}

impl Default for TypePlan {
    fn default() -> Self {
        TypePlan {
            rules: vec![(Selector::Default, TypeChoice::Auto)],
        }
    }
}

fn parse_type(s: &str) -> Option<TypeChoice> {
    let t = match s.to_ascii_lowercase().as_str() {
        "auto" => return Some(TypeChoice::Auto),
        "f32" => GgmlType::F32,
        "f16" => GgmlType::F16,
        "bf16" => GgmlType::Bf16,
        "q8_0" => GgmlType::Q8_0,
        "q4_0" => GgmlType::Q4_0,
        "q2_k" => GgmlType::Q2K,
        "q3_k" => GgmlType::Q3K,
        "q4_k" => GgmlType::Q4K,
        "q5_k" => GgmlType::Q5K,
        "q6_k" => GgmlType::Q6K,
        "iq2_xxs" => GgmlType::Iq2Xxs,
        _ => return None,
    };
    Some(TypeChoice::Ggml(t))
}

/// `*` glob over a tensor name.
fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let mut rest = name;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// The class of a GGUF tensor name (see the module docs).
fn class_of(name: &str, rank: usize) -> Option<&'static str> {
    let has = |s: &str| name.contains(s);
    Some(if name.ends_with("engram_embd.weight") {
        "engram"
    } else if rank == 1 {
        "vectors"
    } else if has("_exps") {
        "experts"
    } else if has("_shexp") {
        "shared"
    } else if has("attn_compressor") {
        "compressor"
    } else if has("indexer.") {
        "indexer"
    } else if has("ffn_gate_inp") {
        "router"
    } else if has("hc_") {
        "hc"
    } else if name == "token_embd.weight" {
        "embed"
    } else if name == "output.weight" {
        "head"
    } else if has("engram_kv") || has("engram_wkv") {
        "engram_kv"
    } else if has("engram_q") || has("engram_k") {
        "engram_qk"
    } else if has("attn_") {
        "attn"
    } else {
        return None;
    })
}

impl TypePlan {
    /// Parses `SELECTOR=TYPE[,SELECTOR=TYPE...]`; a bare `TYPE` means `default=TYPE`.
    pub fn parse(spec: &str) -> Result<TypePlan, ExportError> {
        let mut plan = TypePlan::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (sel, ty) = item.split_once('=').unwrap_or(("default", item));
            let choice = parse_type(ty.trim()).ok_or_else(|| {
                ExportError::Types(format!(
                    "{ty:?} is not a type (auto, f32, f16, bf16, q8_0, q4_0, q2_k, q3_k, q4_k, \
                     q5_k, q6_k, iq2_xxs)"
                ))
            })?;
            let sel = sel.trim();
            let selector = if sel == "default" {
                Selector::Default
            } else if let Some(c) = CLASSES.iter().find(|c| **c == sel) {
                Selector::Class(c)
            } else if sel.starts_with("blk.") || sel.contains('*') || sel.ends_with(".weight") {
                Selector::Pattern(sel.to_string())
            } else {
                return Err(ExportError::Types(format!(
                    "{sel:?} is neither `default`, a class ({}) nor a tensor name pattern",
                    CLASSES.join(", ")
                )));
            };
            plan.rules.push((selector, choice));
        }
        Ok(plan)
    }

    /// The choice for GGUF tensor `name` of rank `rank` (last matching rule).
    pub fn choice(&self, name: &str, rank: usize) -> TypeChoice {
        self.matching(name, rank, true)
    }

    /// Like [`choice`](Self::choice) but ignoring `default` rules: what a rule naming this
    /// tensor (by class or pattern) asks for.
    pub fn explicit_choice(&self, name: &str, rank: usize) -> TypeChoice {
        self.matching(name, rank, false)
    }

    fn matching(&self, name: &str, rank: usize, with_default: bool) -> TypeChoice {
        let class = class_of(name, rank);
        self.rules
            .iter()
            .rev()
            .find(|(sel, _)| match sel {
                Selector::Default => with_default,
                Selector::Class(c) => class == Some(*c),
                Selector::Pattern(p) => glob(p, name),
            })
            .map_or(TypeChoice::Auto, |(_, c)| *c)
    }
}

/// What to write.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub dialect: Dialect,
    pub types: TypePlan,
    /// `general.alignment` (ds4 files use 16384, llama.cpp 32).
    pub alignment: u32,
}

impl ExportOptions {
    /// The dialect's usual alignment and `auto` types.
    pub fn new(dialect: Dialect) -> ExportOptions {
        ExportOptions {
            dialect,
            types: TypePlan::default(),
            alignment: match dialect {
                Dialect::Ds4 => 16384,
                Dialect::LlamaCpp => 32,
            },
        }
    }
}

/// One written tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedTensor {
    pub name: String,
    /// ggml dims (`ne` order).
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Why the requested type was not used, if it was not.
    pub fallback: Option<String>,
}

/// What an export wrote.
#[derive(Debug, Clone)]
pub struct ExportSummary {
    pub tensors: Vec<ExportedTensor>,
    pub file_bytes: u64,
    /// The engram encoding string (ds4) or table type (llama.cpp), if the model has engrams.
    pub engram_encoding: Option<String>,
}

fn golden_err(golden: &Golden, msg: impl Into<String>) -> ExportError {
    ExportError::Golden {
        source_path: golden.source.display().to_string(),
        msg: msg.into(),
    }
}

/// The lossless type for a parameter stored as `dtype`.
fn auto_type(dtype: StorageDtype) -> GgmlType {
    match dtype {
        StorageDtype::Bf16 => GgmlType::Bf16,
        _ => GgmlType::F32,
    }
}

/// Writes `golden`'s fixture and filler weights as a tiny deepseek41 GGUF at `path`.
pub fn export_golden(
    golden: &Golden,
    path: &Path,
    opts: &ExportOptions,
) -> Result<ExportSummary, ExportError> {
    let cfg = ModelConfig::from_fixture(&golden.fixture)?;
    let tables = match (&cfg.engram, &golden.fixture.engram) {
        (None, _) => None,
        (Some(e), Some(fx)) => Some(EngramTables::from_fixture(e, fx)?),
        (Some(e), None) => Some(EngramTables::derive(e)?),
    };
    let mut w = GgufWriter::new();
    w.add("general.architecture", GgufValue::string("deepseek41"))?;
    w.add(
        "general.name",
        GgufValue::string(format!(
            "golden-lens tiny export of {}",
            golden.source.display()
        )),
    )?;
    w.set_alignment(opts.alignment)?;
    tokenizer(&mut w, &cfg)?;
    let engram_encoding = match opts.dialect {
        Dialect::Ds4 => ds4_metadata(&mut w, golden, &cfg, tables.as_ref())?,
        Dialect::LlamaCpp => llama_metadata(&mut w, &cfg, tables.as_ref())?,
    };
    let metas: HashMap<&str, &WeightMeta> = golden
        .weights_meta
        .iter()
        .map(|m| (m.name.as_str(), m))
        .collect();
    let values = |name: &str| -> Result<(Vec<f32>, &WeightMeta), ExportError> {
        let m = metas
            .get(name)
            .ok_or_else(|| golden_err(golden, format!("weights_meta lacks {name}")))?;
        let v = regenerate(m).map_err(|e| golden_err(golden, e.to_string()))?;
        Ok((v, m))
    };
    let mut written = Vec::new();
    let dims_of =
        |m: &WeightMeta| -> Vec<u64> { m.shape.iter().rev().map(|&d| d as u64).collect() };
    for reference in ["embed.weight", "norm.weight", "head.weight"] {
        let (v, m) = values(reference)?;
        let gguf = gguf_name(opts.dialect, reference)?;
        put(
            &mut w,
            &mut written,
            &opts.types,
            gguf,
            dims_of(m),
            &v,
            m.dtype,
        )?;
    }
    for meta in &golden.weights_meta {
        let name = meta.name.as_str();
        if !name.starts_with("layers.") || name.contains("engram.embed.") {
            continue;
        }
        if let Some(rest) = name.split(".ffn.experts.").nth(1) {
            // Merge experts at the first expert's w1: gate (w1), up (w3), down (w2).
            if rest != "0.w1.weight" {
                continue;
            }
            let layer = name.trim_end_matches(".ffn.experts.0.w1.weight");
            for proj in ["w1", "w3", "w2"] {
                let mut all = Vec::new();
                let mut dims = Vec::new();
                let mut dtype = StorageDtype::Bf16;
                for x in 0..cfg.n_routed_experts {
                    let (v, m) = values(&format!("{layer}.ffn.experts.{x}.{proj}.weight"))?;
                    all.extend(v);
                    dims = dims_of(m);
                    dtype = m.dtype;
                }
                dims.push(cfg.n_routed_experts as u64);
                let gguf = gguf_name(
                    opts.dialect,
                    &format!("{layer}.ffn.experts.0.{proj}.weight"),
                )?;
                put(&mut w, &mut written, &opts.types, gguf, dims, &all, dtype)?;
            }
            continue;
        }
        let (v, m) = values(name)?;
        let gguf = gguf_name(opts.dialect, name)?;
        put(
            &mut w,
            &mut written,
            &opts.types,
            gguf,
            dims_of(m),
            &v,
            m.dtype,
        )?;
    }
    if let Some(ec) = &cfg.engram {
        let hd = ec.head_dim;
        let nb = hd / ENGRAM_SCALE_BLOCK;
        for (li, &layer) in ec.layer_ids.iter().enumerate() {
            let rows = ec.num_embeddings[li];
            let (codes, _) = values(&format!("layers.{layer}.engram.embed.weight"))?;
            let (scales, _) = values(&format!("layers.{layer}.engram.embed.scale"))?;
            if codes.len() != rows * hd || scales.len() != rows * nb {
                return Err(golden_err(
                    golden,
                    format!("engram layer {layer}: table sizes disagree with the config"),
                ));
            }
            let name = format!("blk.{layer}.engram_embd.weight");
            match opts.dialect {
                Dialect::Ds4 => {
                    // `default=` rules do not reach the FP8 table; a rule naming it must be auto.
                    if opts.types.explicit_choice(&name, 2) != TypeChoice::Auto {
                        return Err(ExportError::Types(format!(
                            "{name}: the ds4 dialect stores engram rows as FP8 (e4m3_e8m0_32_row{}); only `auto` applies",
                            hd + nb
                        )));
                    }
                    let mut bytes = Vec::with_capacity(rows * (hd + nb));
                    for r in 0..rows {
                        bytes.extend(codes[r * hd..(r + 1) * hd].iter().map(|&v| e4m3_encode(v)));
                        bytes.extend(scales[r * nb..(r + 1) * nb].iter().map(|&s| e8m0_encode(s)));
                    }
                    let dims = vec![(hd + nb) as u64, rows as u64];
                    w.add_tensor(&name, &dims, GgmlType::I8, bytes)?;
                    written.push(ExportedTensor {
                        name,
                        dims,
                        ggml_type: GgmlType::I8,
                        fallback: None,
                    });
                }
                Dialect::LlamaCpp => {
                    let scaled: Vec<f32> = codes
                        .iter()
                        .enumerate()
                        .map(|(i, &c)| c * scales[(i / hd) * nb + (i % hd) / ENGRAM_SCALE_BLOCK])
                        .collect();
                    put(
                        &mut w,
                        &mut written,
                        &opts.types,
                        name,
                        vec![hd as u64, rows as u64],
                        &scaled,
                        StorageDtype::F32,
                    )?;
                }
            }
        }
    }
    let engram_encoding = match opts.dialect {
        Dialect::Ds4 => engram_encoding,
        Dialect::LlamaCpp => written
            .iter()
            .find(|t| t.name.ends_with("engram_embd.weight"))
            .map(|t| format!("ggml:{}", t.ggml_type)),
    };
    w.write(path)?;
    let file_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    Ok(ExportSummary {
        tensors: written,
        file_bytes,
        engram_encoding,
    })
}

/// Encodes `v` as the type the plan chooses for `name` (falling back to the lossless type
/// where the block does not divide the row) and appends it.
fn put(
    w: &mut GgufWriter,
    written: &mut Vec<ExportedTensor>,
    types: &TypePlan,
    name: String,
    dims: Vec<u64>,
    v: &[f32],
    dtype: StorageDtype,
) -> Result<(), ExportError> {
    let auto = auto_type(dtype);
    let (ty, fallback) = match types.choice(&name, dims.len()) {
        TypeChoice::Auto => (auto, None),
        TypeChoice::Ggml(t) => {
            let block = t.block_layout().map_or(1, |b| b.0) as u64;
            if dims.first().is_some_and(|&ne0| ne0 % block == 0) {
                (t, None)
            } else {
                let why = format!(
                    "{t} needs rows of a multiple of {block} values; ne0 = {}: wrote {auto}",
                    dims.first().copied().unwrap_or(0)
                );
                (auto, Some(why))
            }
        }
    };
    w.add_tensor(&name, &dims, ty, quantize(ty, v)?)?;
    written.push(ExportedTensor {
        name,
        dims,
        ggml_type: ty,
        fallback,
    });
    Ok(())
}

fn gguf_name(dialect: Dialect, reference: &str) -> Result<String, ExportError> {
    crate::gguf::names::reference_to_gguf(dialect, reference)
        .map(|l| l.tensor)
        .ok_or_else(|| ExportError::Types(format!("no GGUF name for {reference}")))
}

fn tokenizer(w: &mut GgufWriter, cfg: &ModelConfig) -> Result<(), ExportError> {
    let tokens: Vec<String> = (0..cfg.vocab_size).map(|i| format!("<t{i}>")).collect();
    w.add("tokenizer.ggml.model", GgufValue::string("gpt2"))?;
    w.add("tokenizer.ggml.tokens", GgufValue::strings(&tokens))?;
    let types: Vec<i32> = (0..cfg.vocab_size)
        .map(|i| if i < 3 { 3 } else { 1 })
        .collect();
    w.add("tokenizer.ggml.token_type", GgufValue::i32s(&types))?;
    w.add("tokenizer.ggml.bos_token_id", GgufValue::U32(0))?;
    w.add("tokenizer.ggml.eos_token_id", GgufValue::U32(1))?;
    Ok(())
}

fn score_name(s: ScoreFunc) -> &'static str {
    match s {
        ScoreFunc::Softmax => "softmax",
        ScoreFunc::Sigmoid => "sigmoid",
        ScoreFunc::SqrtSoftplus => "sqrtsoftplus",
    }
}

fn u32_of(v: usize) -> Result<u32, ExportError> {
    u32::try_from(v).map_err(|_| ExportError::Types(format!("{v} does not fit a u32 key")))
}

fn u32s(xs: &[usize]) -> Result<GgufValue, ExportError> {
    Ok(GgufValue::u32s(
        &xs.iter()
            .map(|&x| u32_of(x))
            .collect::<Result<Vec<_>, _>>()?,
    ))
}

fn i32s(xs: &[usize]) -> Result<GgufValue, ExportError> {
    let v: Result<Vec<i32>, _> = xs
        .iter()
        .map(|&x| i32::try_from(x).map_err(|_| ExportError::Types(format!("{x} exceeds i32"))))
        .collect();
    Ok(GgufValue::i32s(&v?))
}

/// Flattened engram constants: (primes, offsets, multipliers, token map).
type EngramFlat = (Vec<u64>, Vec<u64>, Vec<u64>, Vec<u64>);

fn engram_flat(t: &EngramTables) -> EngramFlat {
    let primes = t
        .primes
        .iter()
        .flatten()
        .flatten()
        .map(|&p| p as u64)
        .collect();
    let offsets = t.offsets.iter().flatten().map(|&o| o as u64).collect();
    let mults = t.multipliers.iter().flatten().map(|&m| m as u64).collect();
    let map = t.token_map.iter().map(|&x| x as u64).collect();
    (primes, offsets, mults, map)
}

/// spec §1.2 keys; returns the engram encoding string.
fn ds4_metadata(
    w: &mut GgufWriter,
    golden: &Golden,
    cfg: &ModelConfig,
    tables: Option<&EngramTables>,
) -> Result<Option<String>, ExportError> {
    let p = |k: &str| format!("deepseek41.{k}");
    let engram = cfg.engram.as_ref();
    let hf = serde_json::json!({
        "model_type": "deepseek_v41",
        "golden_lens_tiny_export": golden.source.display().to_string(),
        "engram_vocab_size": engram.map(|e| e.vocab_size),
        "engram_pad_token_id": engram.map(|e| e.pad_id),
    });
    w.add(&p("config"), GgufValue::string(hf.to_string()))?;
    w.add(
        &p("quantization"),
        GgufValue::string("golden-lens tiny export"),
    )?;
    let candidate = cfg
        .candidate_source_layer
        .ok_or_else(|| golden_err(golden, "the ds4 dialect needs a candidate source layer"))?;
    for (k, v) in [
        ("vocab_size", cfg.vocab_size),
        ("hidden_size", cfg.dim),
        ("moe_intermediate_size", cfg.moe_inter_dim),
        ("num_hidden_layers", cfg.n_layers),
        ("num_attention_heads", cfg.n_heads),
        ("num_key_value_heads", 1),
        ("head_dim", cfg.head_dim),
        ("qk_rope_head_dim", cfg.rope_head_dim),
        ("q_lora_rank", cfg.q_lora_rank),
        ("o_lora_rank", cfg.o_lora_rank),
        ("o_groups", cfg.o_groups),
        ("n_routed_experts", cfg.n_routed_experts),
        ("n_shared_experts", 1),
        ("num_experts_per_tok", cfg.n_activated_experts),
        ("max_position_embeddings", cfg.max_seq_len),
        ("sliding_window", cfg.window_size),
        ("index_n_heads", cfg.index_n_heads),
        ("index_head_dim", cfg.index_head_dim),
        ("index_topk", cfg.index_topk),
        ("candidate_source_layer_id", candidate),
        ("candidate_topk_blocks", cfg.candidate_topk_blocks),
        ("candidate_block_size", cfg.candidate_block_size),
        ("hc_mult", cfg.hc_mult),
        ("hc_sinkhorn_iters", cfg.hc_sinkhorn_iters),
        ("rope_theta", cfg.rope_theta as usize),
        ("compress_rope_theta", cfg.compress_rope_theta as usize),
    ] {
        w.add(&p(k), GgufValue::U32(u32_of(v)?))?;
    }
    for (k, v) in [
        ("rms_norm_eps", cfg.norm_eps),
        ("hc_eps", cfg.hc_eps),
        ("swiglu_limit", cfg.swiglu_limit),
        ("routed_scaling_factor", cfg.route_scale),
    ] {
        w.add(&p(k), GgufValue::F32(v))?;
    }
    w.add(
        &p("scoring_func"),
        GgufValue::string(score_name(cfg.score_func)),
    )?;
    w.add(&p("hidden_act"), GgufValue::string("silu"))?;
    w.add(&p("topk_method"), GgufValue::string("noaux_tc"))?;
    w.add(&p("norm_topk_prob"), GgufValue::Bool(cfg.norm_topk_prob))?;
    w.add(
        &p("compress_ratios"),
        u32s(&cfg.compress_ratios[..cfg.n_layers])?,
    )?;
    w.add(&p("kv_source_layer_ids"), u32s(&cfg.kv_source_layers)?)?;
    w.add(
        &p("index_source_layer_ids"),
        u32s(&cfg.index_source_layers)?,
    )?;
    for (k, v) in [
        ("rope_scaling.factor", cfg.rope_factor as f32),
        ("rope_scaling.beta_fast", cfg.beta_fast as f32),
        ("rope_scaling.beta_slow", cfg.beta_slow as f32),
        (
            "rope_scaling.original_max_position_embeddings",
            cfg.original_seq_len as f32,
        ),
    ] {
        w.add(&p(k), GgufValue::F32(v))?;
    }
    let (Some(ec), Some(t)) = (engram, tables) else {
        return Ok(None);
    };
    let encoding = EngramEncoding::e4m3_with_values(u32_of(ec.head_dim)?)
        .ok_or_else(|| {
            ExportError::Types(format!(
                "engram head dim {} is not a positive multiple of 32 (one E8M0 scale per 32 codes)",
                ec.head_dim
            ))
        })?
        .name();
    let (primes, _, mults, map) = engram_flat(t);
    w.add(&p("engram.encoding"), GgufValue::string(encoding.clone()))?;
    w.add(&p("engram.layer_ids"), u32s(&ec.layer_ids)?)?;
    w.add(&p("engram.rows"), u32s(&ec.num_embeddings)?)?;
    w.add(
        &p("engram.compressed_vocab_size"),
        GgufValue::U32(u32_of(ec.compressed_vocab_size)?),
    )?;
    w.add(
        &p("engram.pad_id"),
        GgufValue::U32(u32_of(t.pad_id_compressed as usize)?),
    )?;
    w.add(
        &p("engram.token_map"),
        u32s(&map.iter().map(|&x| x as usize).collect::<Vec<_>>())?,
    )?;
    w.add(
        &p("engram.primes"),
        u32s(&primes.iter().map(|&x| x as usize).collect::<Vec<_>>())?,
    )?;
    w.add(&p("engram.multipliers"), GgufValue::u64s(&mults))?;
    Ok(Some(encoding))
}

/// spec §1.3 keys (plus the candidate-filter extension keys). The table type is known only once
/// the table is written, so this returns `None`.
fn llama_metadata(
    w: &mut GgufWriter,
    cfg: &ModelConfig,
    tables: Option<&EngramTables>,
) -> Result<Option<String>, ExportError> {
    let p = |k: &str| format!("deepseek41.{k}");
    for (k, v) in [
        ("block_count", cfg.n_layers),
        ("context_length", cfg.max_seq_len),
        ("embedding_length", cfg.dim),
        ("vocab_size", cfg.vocab_size),
        ("attention.head_count", cfg.n_heads),
        ("attention.head_count_kv", 1),
        ("attention.key_length", cfg.head_dim),
        ("attention.value_length", cfg.head_dim),
        ("rope.dimension_count", cfg.rope_head_dim),
        ("attention.q_lora_rank", cfg.q_lora_rank),
        ("attention.output_lora_rank", cfg.o_lora_rank),
        ("attention.output_group_count", cfg.o_groups),
        ("attention.sliding_window", cfg.window_size),
        ("expert_count", cfg.n_routed_experts),
        ("expert_used_count", cfg.n_activated_experts),
        ("expert_shared_count", 1),
        ("expert_feed_forward_length", cfg.moe_inter_dim),
        ("attention.indexer.head_count", cfg.index_n_heads),
        ("attention.indexer.key_length", cfg.index_head_dim),
        ("attention.indexer.top_k", cfg.index_topk),
        ("hyper_connection.count", cfg.hc_mult),
        (
            "hyper_connection.sinkhorn_iterations",
            cfg.hc_sinkhorn_iters,
        ),
        ("rope.scaling.original_context_length", cfg.original_seq_len),
    ] {
        w.add(&p(k), GgufValue::U32(u32_of(v)?))?;
    }
    let gating = match cfg.score_func {
        ScoreFunc::Softmax => 1,
        ScoreFunc::Sigmoid => 2,
        ScoreFunc::SqrtSoftplus => 4,
    };
    w.add(&p("expert_gating_func"), GgufValue::U32(gating))?;
    w.add(
        &p("expert_weights_norm"),
        GgufValue::Bool(cfg.norm_topk_prob),
    )?;
    for (k, v) in [
        ("rope.freq_base", cfg.rope_theta as f32),
        ("attention.layer_norm_rms_epsilon", cfg.norm_eps),
        ("expert_weights_scale", cfg.route_scale),
        (
            "attention.compress_rope_freq_base",
            cfg.compress_rope_theta as f32,
        ),
        ("hyper_connection.epsilon", cfg.hc_eps),
        ("rope.scaling.factor", cfg.rope_factor as f32),
        ("rope.scaling.yarn_beta_fast", cfg.beta_fast as f32),
        ("rope.scaling.yarn_beta_slow", cfg.beta_slow as f32),
    ] {
        w.add(&p(k), GgufValue::F32(v))?;
    }
    w.add(
        &p("swiglu_clamp_exp"),
        GgufValue::f32s(&vec![cfg.swiglu_limit; cfg.n_layers]),
    )?;
    w.add(
        &p("attention.compress_ratios"),
        i32s(&cfg.compress_ratios[..cfg.n_layers])?,
    )?;
    if let Some(c) = cfg.candidate_source_layer {
        // The forks' spelling (spec §1.3), the first name of each entry of the reader's table.
        let [(source, _), (topk, _), (block, _)] = LLAMA_CANDIDATE_KEYS;
        for (k, v) in [
            (source, c),
            (topk, cfg.candidate_topk_blocks),
            (block, cfg.candidate_block_size),
        ] {
            w.add(&p(k), GgufValue::U32(u32_of(v)?))?;
        }
    }
    let (Some(ec), Some(t)) = (cfg.engram.as_ref(), tables) else {
        return Ok(None);
    };
    let (primes, offsets, mults, map) = engram_flat(t);
    w.add(&p("engram.layer_ids"), i32s(&ec.layer_ids)?)?;
    w.add(&p("engram.head_count"), GgufValue::U32(u32_of(ec.n_heads)?))?;
    w.add(
        &p("engram.key_length"),
        GgufValue::U32(u32_of(ec.head_dim)?),
    )?;
    w.add(
        &p("engram.max_ngram_size"),
        GgufValue::U32(u32_of(ec.max_ngram_size)?),
    )?;
    w.add(
        &p("engram.pad_id"),
        GgufValue::U32(u32_of(t.pad_id_compressed as usize)?),
    )?;
    w.add(&p("engram.multipliers"), GgufValue::u64s(&mults))?;
    w.add(&p("engram.primes"), GgufValue::u64s(&primes))?;
    w.add(&p("engram.offsets"), GgufValue::u64s(&offsets))?;
    w.add(
        &p("engram.token_map"),
        GgufValue::Array(
            ValueType::I32,
            map.iter().map(|&x| GgufValue::I32(x as i32)).collect(),
        ),
    )?;
    Ok(None)
}
