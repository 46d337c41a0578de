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
//! Metadata: the fixture's geometry becomes a [`Deepseek41Meta`](crate::gguf::Deepseek41Meta)
//! ([`meta`]), written by the dialect writer that shares its key table with the reader; the
//! llama.cpp candidate-prefilter keys are written as the forks spell them.

mod meta;
mod types;

pub use types::{TypeChoice, TypePlan};

use crate::gguf::ggml_type::GgmlType;
use crate::gguf::quant::encode::quantize;
use crate::gguf::quant::EngramEncoding;
use crate::gguf::{Dialect, GgufError, GgufValue, GgufWriter};
use crate::golden::weights::regenerate;
use crate::golden::{Golden, StorageDtype, WeightMeta};
use crate::model::config::ModelConfig;
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
    let engram_encoding = match (&cfg.engram, opts.dialect) {
        (None, _) => None,
        (Some(ec), Dialect::Ds4) => {
            let hd = u32::try_from(ec.head_dim).ok();
            Some(
                hd.and_then(EngramEncoding::e4m3_with_values)
                    .ok_or_else(|| {
                        ExportError::Types(format!(
                            "engram head dim {} is not a positive multiple of 32 (one E8M0 \
                             scale per 32 codes)",
                            ec.head_dim
                        ))
                    })?,
            )
        }
        (Some(ec), Dialect::LlamaCpp) => {
            // Every table gets the type the plan resolves for the first one (same row width).
            let first = ec.layer_ids.first().copied().unwrap_or(0);
            let name = crate::gguf::EngramMeta::table_name(first as u64);
            let dims = [ec.head_dim as u64, 1];
            let (ty, _) = opts.types.resolve(&name, &dims, GgmlType::F32);
            Some(EngramEncoding::Ggml(ty))
        }
    };
    let mut w = GgufWriter::new();
    let m = meta::deepseek41_meta(golden, &cfg, opts.dialect, tables.as_ref(), engram_encoding)?;
    m.write(&mut w)?;
    w.set_alignment(opts.alignment)?;
    tokenizer(&mut w, &cfg)?;
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
    for item in tensor_order(golden) {
        let (gguf, dims, v, dtype) = match item {
            Item::Plain(name) => {
                let (v, m) = values(name)?;
                (gguf_name(opts.dialect, name)?, dims_of(m), v, m.dtype)
            }
            Item::Experts { layer, proj } => {
                // Gate (w1), up (w3), down (w2): every expert's matrix, then the expert axis.
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
                let first = format!("{layer}.ffn.experts.0.{proj}.weight");
                (gguf_name(opts.dialect, &first)?, dims, all, dtype)
            }
        };
        put(&mut w, &mut written, &opts.types, gguf, dims, &v, dtype)?;
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
        Dialect::Ds4 => engram_encoding.map(|e| e.name()),
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

/// One tensor to write other than an engram table.
enum Item<'a> {
    /// A reference parameter stored as it is.
    Plain(&'a str),
    /// One projection of every routed expert of a layer, merged into a 3-D tensor.
    Experts { layer: &'a str, proj: &'static str },
}

/// The file's tensor order: the three globals, then every layer's parameters in the golden's
/// order with the experts merged at the first expert's `w1`; engram tables are written apart.
fn tensor_order(golden: &Golden) -> Vec<Item<'_>> {
    let mut items: Vec<Item> = ["embed.weight", "norm.weight", "head.weight"]
        .into_iter()
        .map(Item::Plain)
        .collect();
    for meta in &golden.weights_meta {
        let name = meta.name.as_str();
        if !name.starts_with("layers.") || name.contains("engram.embed.") {
            continue;
        }
        match name.split_once(".ffn.experts.") {
            Some((layer, "0.w1.weight")) => {
                items.extend(["w1", "w3", "w2"].map(|proj| Item::Experts { layer, proj }))
            }
            Some(_) => {}
            None => items.push(Item::Plain(name)),
        }
    }
    items
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
    let (ty, fallback) = types.resolve(&name, &dims, auto_type(dtype));
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
