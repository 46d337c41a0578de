//! The two deepseek41 dialects (spec §1.2 antirez/ds4, §1.3 llama.cpp PR) read into one typed
//! [`Deepseek41Meta`], with the engram constants validated (spec §1.8) and a warning wherever a
//! loader would silently fall back to a default; and written back from one, for `gguf export`
//! and `gguf synth`. Every key is spelled once, in [`keys`].

mod ds4;
mod engram_meta;
pub mod keys;
mod llamacpp;

pub use engram_meta::{prime_offsets, validate_engram_tables, EngramMeta, EngramStorage};
pub use llamacpp::{
    LLAMA_DEFAULT_SINKHORN_ITERS, RELEASED_CANDIDATE_BLOCK_SIZE, RELEASED_CANDIDATE_TOPK_BLOCKS,
};

use super::error::{GgufError, Result};
use super::reader::GgufFile;
use super::split::GgufSet;
use super::writer::{GgufValue, GgufWriter};
use keys::{Field, Num, ScalarKey, Slot, Stored, DS4, ENGRAM, LLAMA};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::PathBuf;

/// Which converter wrote a deepseek41 GGUF (spec §1.2, §1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Dialect {
    /// antirez/ds4: HF-style keys, raw FP8 engram rows in I8 tensors, one file.
    Ds4,
    /// llama.cpp PR / ik_llama: llama.cpp-style keys, quantized engram tables, split shards.
    LlamaCpp,
}

impl Dialect {
    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Ds4 => "ds4 (antirez)",
            Dialect::LlamaCpp => "llama.cpp",
        }
    }
}

/// Architecture strings that mean deepseek41 (files converted before 2026-09-10 say `deepseek4`).
const ARCHITECTURES: &[&str] = &["deepseek41", "deepseek4"];

/// Reads `general.architecture` and decides the dialect from which key family is present.
pub fn detect_dialect(file: &GgufFile) -> Result<Dialect> {
    let arch = architecture(file)?;
    let has = |suffix: &str| file.get(&format!("{arch}.{suffix}")).is_some();
    let ds4_size = keys::scalar_key(DS4.scalars, Field::HiddenSize);
    let llama_layers = keys::scalar_key(LLAMA.scalars, Field::Layers);
    let llama_size = keys::scalar_key(LLAMA.scalars, Field::HiddenSize);
    let ds4 = has(ENGRAM.encoding) || has(ds4_size);
    let llama = has(ENGRAM.offsets) || has(llama_layers) || has(llama_size);
    match (ds4, llama) {
        (true, false) => Ok(Dialect::Ds4),
        (false, true) => Ok(Dialect::LlamaCpp),
        (true, true) => Err(GgufError::Dialect {
            path: file.path().to_path_buf(),
            problem: format!(
                "both dialects' keys are present ({arch}.{ds4_size}/{} of ds4 and \
                 {arch}.{llama_layers}/{} of llama.cpp); refusing to guess",
                ENGRAM.encoding, ENGRAM.offsets
            ),
        }),
        (false, false) => Err(GgufError::Dialect {
            path: file.path().to_path_buf(),
            problem: format!(
                "no deepseek41 hyper-parameters: expected {arch}.{ds4_size} (ds4 dialect) or \
                 {arch}.{llama_layers} (llama.cpp dialect)"
            ),
        }),
    }
}

fn architecture(file: &GgufFile) -> Result<&str> {
    let arch = file
        .get_str(keys::ARCHITECTURE)?
        .ok_or_else(|| GgufError::MissingKey {
            path: file.path().to_path_buf(),
            key: keys::ARCHITECTURE.into(),
            hint: " (every GGUF model names its architecture)".into(),
        })?;
    if !ARCHITECTURES.contains(&arch) {
        return Err(GgufError::Dialect {
            path: file.path().to_path_buf(),
            problem: format!(
                "{} is {arch:?}; expected \"deepseek41\"",
                keys::ARCHITECTURE
            ),
        });
    }
    Ok(arch)
}

/// YaRN settings of the compressed layers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RopeScaling {
    /// Context extension factor (16 in the real model).
    pub factor: f64,
    /// YaRN beta_fast.
    pub beta_fast: f64,
    /// YaRN beta_slow.
    pub beta_slow: f64,
    /// Original context length (stored as f32 by ds4, integer by llama.cpp).
    pub original_max_position_embeddings: f64,
}

/// Typed deepseek41 hyper-parameters of either dialect. Fields that only one dialect stores are
/// `Option`s; `warnings` lists every value that was defaulted or derived rather than read.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Deepseek41Meta {
    pub dialect: Dialect,
    /// `general.architecture` (`deepseek41`, or legacy `deepseek4`).
    pub architecture: String,
    pub name: Option<String>,
    pub vocab_size: u64,
    pub hidden_size: u64,
    pub n_layers: u64,
    pub n_heads: u64,
    pub n_kv_heads: u64,
    pub head_dim: u64,
    pub rope_head_dim: u64,
    pub q_lora_rank: u64,
    pub o_lora_rank: u64,
    pub o_groups: u64,
    pub n_routed_experts: u64,
    pub n_shared_experts: u64,
    pub n_experts_per_tok: u64,
    pub moe_intermediate_size: u64,
    pub max_position_embeddings: u64,
    pub sliding_window: u64,
    pub index_n_heads: u64,
    pub index_head_dim: u64,
    pub index_topk: u64,
    /// ds4 always; llama.cpp when the file stores the candidate keys (else the model builder
    /// takes the first ratio-1 index source).
    pub candidate_source_layer_id: Option<u64>,
    /// Read, or the released 2048 when a llama.cpp file stores no candidate keys.
    pub candidate_topk_blocks: Option<u64>,
    /// Read, or the released 8 when a llama.cpp file stores no candidate keys.
    pub candidate_block_size: Option<u64>,
    pub hc_mult: u64,
    pub hc_sinkhorn_iters: u64,
    pub hc_eps: f64,
    pub rms_norm_eps: f64,
    /// One clamp for all layers (ds4), or the common value of the llama.cpp per-layer array.
    pub swiglu_limit: Option<f64>,
    /// llama.cpp `swiglu_clamp_exp`, per layer.
    pub swiglu_limits_per_layer: Vec<f64>,
    pub routed_scaling_factor: f64,
    pub rope_theta: f64,
    pub compress_rope_theta: f64,
    pub rope_scaling: Option<RopeScaling>,
    /// `sqrtsoftplus` (ds4) or `expert_gating_func=N` (llama.cpp).
    pub scoring_func: Option<String>,
    pub hidden_act: Option<String>,
    pub topk_method: Option<String>,
    pub norm_topk_prob: Option<bool>,
    /// Per layer compression ratio (ds4 truncates to the backbone; llama.cpp keeps 43).
    pub compress_ratios: Vec<u64>,
    /// ds4 only.
    pub kv_source_layer_ids: Option<Vec<u64>>,
    /// ds4 only.
    pub index_source_layer_ids: Option<Vec<u64>>,
    /// ds4: the HF `config.json` as stored under `deepseek41.config`.
    pub hf_config_json: Option<String>,
    /// ds4: `deepseek41.quantization` description.
    pub quantization: Option<String>,
    /// ds4: `deepseek41.calibration`, the converter's note on its imatrix data.
    pub calibration: Option<String>,
    pub engram: Option<EngramMeta>,
    pub warnings: Vec<String>,
}

/// Reads keys under one architecture prefix with errors that name the key and dialect.
struct KeyReader<'a> {
    file: &'a GgufFile,
    prefix: String,
    dialect: Dialect,
}

impl KeyReader<'_> {
    fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.prefix)
    }
    fn missing(&self, key: String) -> GgufError {
        GgufError::MissingKey {
            path: self.file.path().to_path_buf(),
            key,
            hint: format!(" (the {} dialect stores it)", self.dialect.name()),
        }
    }
    fn bad(&self, key: &str, problem: String) -> GgufError {
        GgufError::BadMeta {
            path: self.file.path().to_path_buf(),
            key: key.to_string(),
            problem,
        }
    }
    fn opt_u64(&self, suffix: &str) -> Result<Option<u64>> {
        self.file.get_u64(&self.key(suffix))
    }
    fn u64(&self, suffix: &str) -> Result<u64> {
        self.opt_u64(suffix)?
            .ok_or_else(|| self.missing(self.key(suffix)))
    }
    fn opt_f64(&self, suffix: &str) -> Result<Option<f64>> {
        self.file.get_f64(&self.key(suffix))
    }
    fn f64(&self, suffix: &str) -> Result<f64> {
        self.opt_f64(suffix)?
            .ok_or_else(|| self.missing(self.key(suffix)))
    }
    fn opt_str(&self, suffix: &str) -> Result<Option<String>> {
        Ok(self.file.get_str(&self.key(suffix))?.map(str::to_string))
    }
    fn opt_bool(&self, suffix: &str) -> Result<Option<bool>> {
        self.file.get_bool(&self.key(suffix))
    }
    fn opt_u64s(&self, suffix: &str) -> Result<Option<Vec<u64>>> {
        let key = self.key(suffix);
        match self.file.get_array(&key)? {
            None => Ok(None),
            Some(arr) => Ok(Some(self.file.array_u64(&key, &arr)?)),
        }
    }
    fn u64s(&self, suffix: &str) -> Result<Vec<u64>> {
        self.opt_u64s(suffix)?
            .ok_or_else(|| self.missing(self.key(suffix)))
    }
    fn opt_f64s(&self, suffix: &str) -> Result<Option<Vec<f64>>> {
        let key = self.key(suffix);
        match self.file.get_array(&key)? {
            None => Ok(None),
            Some(arr) => Ok(Some(self.file.array_f64(&key, &arr)?)),
        }
    }
    fn opt_strings(&self, suffix: &str) -> Result<Option<Vec<String>>> {
        let key = self.key(suffix);
        match self.file.get_array(&key)? {
            None => Ok(None),
            Some(arr) => Ok(Some(self.file.array_strings(&key, &arr)?)),
        }
    }
    /// Every key of a scalar table into its field, in table order (required keys).
    fn scalars(&self, table: &[ScalarKey], m: &mut Deepseek41Meta) -> Result<()> {
        for k in table {
            match k.field.slot(m) {
                Slot::Int(v) => *v = self.u64(k.suffix)?,
                Slot::OptInt(v) => *v = Some(self.u64(k.suffix)?),
                Slot::Float(v) => *v = self.f64(k.suffix)?,
                Slot::OptFloat(v) => *v = Some(self.f64(k.suffix)?),
            }
        }
        Ok(())
    }
    /// A YaRN group: absent when `factor` is, else all four keys.
    fn rope_scaling(
        &self,
        [factor, fast, slow, original]: [&str; 4],
    ) -> Result<Option<RopeScaling>> {
        let Some(factor) = self.opt_f64(factor)? else {
            return Ok(None);
        };
        Ok(Some(RopeScaling {
            factor,
            beta_fast: self.f64(fast)?,
            beta_slow: self.f64(slow)?,
            original_max_position_embeddings: self.f64(original)?,
        }))
    }
}

/// Writes keys under one architecture prefix; values that do not fit the key's GGUF type are
/// errors naming the key.
struct KeyWriter<'a> {
    w: &'a mut GgufWriter,
    prefix: String,
}

impl KeyWriter<'_> {
    fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.prefix)
    }
    fn misfit(&self, suffix: &str, problem: String) -> GgufError {
        GgufError::BadMeta {
            path: PathBuf::from("<writer>"),
            key: self.key(suffix),
            problem,
        }
    }
    fn put(&mut self, suffix: &str, value: GgufValue) -> Result<()> {
        let key = self.key(suffix);
        self.w.add(&key, value)
    }
    fn to_u32(&self, suffix: &str, v: u64) -> Result<u32> {
        u32::try_from(v).map_err(|_| self.misfit(suffix, format!("{v} does not fit a u32")))
    }
    fn to_i32(&self, suffix: &str, v: u64) -> Result<i32> {
        i32::try_from(v).map_err(|_| self.misfit(suffix, format!("{v} does not fit an i32")))
    }
    fn u32(&mut self, suffix: &str, v: u64) -> Result<()> {
        let v = self.to_u32(suffix, v)?;
        self.put(suffix, GgufValue::U32(v))
    }
    fn f32(&mut self, suffix: &str, v: f64) -> Result<()> {
        self.put(suffix, GgufValue::F32(v as f32))
    }
    /// A float the dialect stores as an integer: `UINT32` when `v` is a whole u32, else
    /// `FLOAT32` (readers accept either; truncating would change the model).
    fn whole_u32(&mut self, suffix: &str, v: f64) -> Result<()> {
        if v.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&v) {
            self.put(suffix, GgufValue::U32(v as u32))
        } else {
            self.f32(suffix, v)
        }
    }
    fn string(&mut self, suffix: &str, v: &str) -> Result<()> {
        self.put(suffix, GgufValue::string(v))
    }
    fn opt_string(&mut self, suffix: &str, v: &Option<String>) -> Result<()> {
        match v {
            Some(s) => self.string(suffix, s),
            None => Ok(()),
        }
    }
    fn u32s(&mut self, suffix: &str, xs: &[u64]) -> Result<()> {
        let v = xs
            .iter()
            .map(|&x| self.to_u32(suffix, x))
            .collect::<Result<Vec<_>>>()?;
        self.put(suffix, GgufValue::u32s(&v))
    }
    fn i32s(&mut self, suffix: &str, xs: &[u64]) -> Result<()> {
        let v = xs
            .iter()
            .map(|&x| self.to_i32(suffix, x))
            .collect::<Result<Vec<_>>>()?;
        self.put(suffix, GgufValue::i32s(&v))
    }
    fn u64s(&mut self, suffix: &str, xs: &[u64]) -> Result<()> {
        self.put(suffix, GgufValue::u64s(xs))
    }
    /// Every key of a scalar table from its field, in table order; an unset optional field
    /// (which the dialect requires) is an error.
    fn scalars(&mut self, table: &[ScalarKey], m: &Deepseek41Meta) -> Result<()> {
        for k in table {
            let value = k.field.value(m).ok_or_else(|| {
                self.misfit(
                    k.suffix,
                    format!("{} is unset, but the dialect requires it", k.field.name()),
                )
            })?;
            match (value, k.stored) {
                (Num::Int(v), Stored::U32) => self.u32(k.suffix, v)?,
                (Num::Float(v), Stored::U32) => self.whole_u32(k.suffix, v)?,
                (Num::Int(v), Stored::F32) => self.f32(k.suffix, v as f64)?,
                (Num::Float(v), Stored::F32) => self.f32(k.suffix, v)?,
            }
        }
        Ok(())
    }
    /// A YaRN group: `original` as the dialect stores it.
    fn rope_scaling(
        &mut self,
        r: &RopeScaling,
        [factor, fast, slow, original]: [&str; 4],
        original_stored: Stored,
    ) -> Result<()> {
        self.f32(factor, r.factor)?;
        self.f32(fast, r.beta_fast)?;
        self.f32(slow, r.beta_slow)?;
        match original_stored {
            Stored::U32 => self.whole_u32(original, r.original_max_position_embeddings),
            Stored::F32 => self.f32(original, r.original_max_position_embeddings),
        }
    }
}

impl Deepseek41Meta {
    /// Every field zero or empty, for a reader or writer to fill.
    pub fn empty(dialect: Dialect) -> Self {
        Deepseek41Meta {
            dialect,
            architecture: "deepseek41".to_string(),
            name: None,
            vocab_size: 0,
            hidden_size: 0,
            n_layers: 0,
            n_heads: 0,
            n_kv_heads: 0,
            head_dim: 0,
            rope_head_dim: 0,
            q_lora_rank: 0,
            o_lora_rank: 0,
            o_groups: 0,
            n_routed_experts: 0,
            n_shared_experts: 0,
            n_experts_per_tok: 0,
            moe_intermediate_size: 0,
            max_position_embeddings: 0,
            sliding_window: 0,
            index_n_heads: 0,
            index_head_dim: 0,
            index_topk: 0,
            candidate_source_layer_id: None,
            candidate_topk_blocks: None,
            candidate_block_size: None,
            hc_mult: 0,
            hc_sinkhorn_iters: 0,
            hc_eps: 0.0,
            rms_norm_eps: 0.0,
            swiglu_limit: None,
            swiglu_limits_per_layer: Vec::new(),
            routed_scaling_factor: 0.0,
            rope_theta: 0.0,
            compress_rope_theta: 0.0,
            rope_scaling: None,
            scoring_func: None,
            hidden_act: None,
            topk_method: None,
            norm_topk_prob: None,
            compress_ratios: Vec::new(),
            kv_source_layer_ids: None,
            index_source_layer_ids: None,
            hf_config_json: None,
            quantization: None,
            calibration: None,
            engram: None,
            warnings: Vec::new(),
        }
    }

    /// Reads and validates the deepseek41 metadata of a set (metadata from shard 0; engram
    /// tables looked up across shards).
    pub fn from_set(set: &GgufSet) -> Result<Self> {
        let file = set.primary();
        let dialect = detect_dialect(file)?;
        let arch = architecture(file)?.to_string();
        let keys = KeyReader {
            file,
            prefix: arch.clone(),
            dialect,
        };
        let mut warnings = Vec::new();
        if arch != "deepseek41" {
            warnings.push(format!(
                "{} is the pre-2026-09-10 {arch:?}; keys are read under {arch}.*",
                keys::ARCHITECTURE
            ));
        }
        let mut meta = match dialect {
            Dialect::Ds4 => ds4::read(&keys)?,
            Dialect::LlamaCpp => llamacpp::read(&keys, &mut warnings)?,
        };
        meta.architecture = arch;
        meta.name = file.get_str(keys::NAME)?.map(str::to_string);
        meta.engram = engram_meta::read(&keys, set, &meta, &mut warnings)?;
        meta.warnings = warnings;
        meta.validate(file)?;
        if let Some(e) = &meta.engram {
            validate_engram_tables(set, e)?;
        }
        Ok(meta)
    }

    /// Writes `general.architecture`, `general.name` (when set) and every key of the dialect,
    /// engram constants included, from these fields: what [`from_set`](Self::from_set) reads
    /// back (warnings aside). Tensors and the tokenizer are the caller's.
    pub fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add(keys::ARCHITECTURE, GgufValue::string(&self.architecture))?;
        if let Some(name) = &self.name {
            w.add(keys::NAME, GgufValue::string(name))?;
        }
        let mut kw = KeyWriter {
            w,
            prefix: self.architecture.clone(),
        };
        match self.dialect {
            Dialect::Ds4 => ds4::write(&mut kw, self)?,
            Dialect::LlamaCpp => llamacpp::write(&mut kw, self)?,
        }
        if let Some(e) = &self.engram {
            engram_meta::write(&mut kw, self.dialect, e)?;
        }
        Ok(())
    }

    fn validate(&self, file: &GgufFile) -> Result<()> {
        let bad = |key: &str, problem: String| GgufError::BadMeta {
            path: file.path().to_path_buf(),
            key: key.to_string(),
            problem,
        };
        let p = &self.architecture;
        if self.n_layers == 0 || self.hidden_size == 0 || self.n_heads == 0 {
            return Err(bad(
                &format!("{p}.(layers, hidden size, heads)"),
                "layers, hidden size and heads must be non-zero".into(),
            ));
        }
        if self.rope_head_dim > self.head_dim {
            return Err(bad(
                &format!("{p}.rope head dim"),
                format!(
                    "RoPE dims {} exceed the head dim {}",
                    self.rope_head_dim, self.head_dim
                ),
            ));
        }
        if self.n_experts_per_tok > self.n_routed_experts {
            return Err(bad(
                &format!("{p}.experts per token"),
                format!(
                    "{} active experts but only {} routed experts",
                    self.n_experts_per_tok, self.n_routed_experts
                ),
            ));
        }
        if self.o_groups == 0 || self.n_heads % self.o_groups != 0 {
            return Err(bad(
                &format!("{p}.output groups"),
                format!(
                    "{} heads cannot be split into {} output groups",
                    self.n_heads, self.o_groups
                ),
            ));
        }
        if (self.compress_ratios.len() as u64) < self.n_layers {
            return Err(bad(
                &format!("{p}.compress_ratios"),
                format!(
                    "{} entries for {} layers",
                    self.compress_ratios.len(),
                    self.n_layers
                ),
            ));
        }
        for (name, ids) in [
            (DS4.kv_source_layer_ids, &self.kv_source_layer_ids),
            (DS4.index_source_layer_ids, &self.index_source_layer_ids),
        ] {
            if let Some(bad_id) = ids.iter().flatten().find(|&&l| l >= self.n_layers) {
                return Err(bad(
                    &format!("{p}.{name}"),
                    format!("layer {bad_id} is not below {} layers", self.n_layers),
                ));
            }
        }
        if let Some(e) = &self.engram {
            engram_meta::validate(file, p, e, self)?;
        }
        Ok(())
    }

    /// A JSON summary for reports: every scalar, engram arrays reduced to counts and heads.
    pub fn summary_json(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Some(obj) = v.as_object_mut() {
            if let Some(cfg) = obj.get_mut("hf_config_json") {
                if let Some(s) = cfg.as_str() {
                    *cfg = json!(format!("{} bytes of JSON", s.len()));
                }
            }
            if let (Some(e), Some(eng)) = (&self.engram, obj.get_mut("engram")) {
                if let Some(eo) = eng.as_object_mut() {
                    eo.insert(
                        "token_map".into(),
                        json!({"count": e.token_map.len(), "head": e.token_map.iter().take(8).collect::<Vec<_>>()}),
                    );
                    eo.insert("encoding".into(), json!(e.encoding.name()));
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests;
