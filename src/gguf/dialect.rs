//! The two deepseek41 dialects (spec §1.2 antirez/ds4, §1.3 llama.cpp PR) read into one typed
//! [`Deepseek41Meta`], with the engram constants validated (spec §1.8) and a warning wherever a
//! loader would silently fall back to a default.

use super::error::{GgufError, Result};
use super::quant::EngramEncoding;
use super::reader::GgufFile;
use super::split::GgufSet;
use serde::Serialize;
use serde_json::{json, Value};

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

/// ik_llama's fallback when `hyper_connection.sinkhorn_iterations` is absent (spec §1.3).
pub const LLAMA_DEFAULT_SINKHORN_ITERS: u64 = 3;

/// Reads `general.architecture` and decides the dialect from which key family is present.
pub fn detect_dialect(file: &GgufFile) -> Result<Dialect> {
    let arch = architecture(file)?;
    let has = |suffix: &str| file.get(&format!("{arch}.{suffix}")).is_some();
    let ds4 = has("engram.encoding") || has("hidden_size");
    let llama = has("engram.offsets") || has("block_count") || has("embedding_length");
    match (ds4, llama) {
        (true, false) => Ok(Dialect::Ds4),
        (false, true) => Ok(Dialect::LlamaCpp),
        (true, true) => Err(GgufError::Dialect {
            path: file.path().to_path_buf(),
            problem: format!(
                "both dialects' keys are present ({arch}.hidden_size/engram.encoding of ds4 and \
                 {arch}.block_count/engram.offsets of llama.cpp); refusing to guess"
            ),
        }),
        (false, false) => Err(GgufError::Dialect {
            path: file.path().to_path_buf(),
            problem: format!(
                "no deepseek41 hyper-parameters: expected {arch}.hidden_size (ds4 dialect) or \
                 {arch}.block_count (llama.cpp dialect)"
            ),
        }),
    }
}

fn architecture(file: &GgufFile) -> Result<&str> {
    let arch = file
        .get_str("general.architecture")?
        .ok_or_else(|| GgufError::MissingKey {
            path: file.path().to_path_buf(),
            key: "general.architecture".into(),
            hint: " (every GGUF model names its architecture)".into(),
        })?;
    if !ARCHITECTURES.contains(&arch) {
        return Err(GgufError::Dialect {
            path: file.path().to_path_buf(),
            problem: format!("general.architecture is {arch:?}; expected \"deepseek41\""),
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

/// Where the engram rows live.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum EngramStorage {
    /// Tensors `blk.L.engram_embd.weight` inside the GGUF (set).
    Embedded,
    /// Raw sidecar files next to the GGUF (ishikawa fork), one per engram layer.
    External {
        /// Paths as written in the file (resolved later, only inside the GGUF's directory).
        paths: Vec<String>,
        /// Byte offset of row 0 in each sidecar.
        offsets: Vec<u64>,
        /// Expected sidecar sizes, when recorded.
        sizes: Option<Vec<u64>>,
    },
}

/// The engram constants (spec §1.8), validated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngramMeta {
    /// How rows are stored.
    pub encoding: EngramEncoding,
    /// Where rows are stored.
    pub storage: EngramStorage,
    /// Backbone layers with an engram block ([1, 14] in the real model).
    pub layer_ids: Vec<u64>,
    /// Hash heads per n-gram order (8).
    pub n_heads: u64,
    /// Values per row (256).
    pub head_dim: u64,
    /// Largest n-gram (4: 2-, 3- and 4-grams).
    pub max_ngram_size: u64,
    /// Size of the compressed token space.
    pub compressed_vocab_size: u64,
    /// Pad id, already in the compressed space.
    pub pad_id: u64,
    /// Token id -> compressed id, one entry per vocabulary token.
    pub token_map: Vec<u32>,
    /// Per layer, `(max_ngram_size − 1)·n_heads` primes, flattened layer-major.
    pub primes: Vec<u64>,
    /// Per layer, exclusive prefix sums of that layer's primes (same layout as `primes`).
    pub offsets: Vec<u64>,
    /// Per layer, `max_ngram_size` odd multipliers, flattened layer-major.
    pub multipliers: Vec<u64>,
    /// Rows per engram layer (= sum of that layer's primes).
    pub rows: Vec<u64>,
}

impl EngramMeta {
    /// Hash columns per layer: `(max_ngram_size − 1)·n_heads` (24 in the real model).
    pub fn columns_per_layer(&self) -> usize {
        ((self.max_ngram_size - 1) * self.n_heads) as usize
    }

    /// GGUF tensor name of the table of engram layer `layer_id`.
    pub fn table_name(layer_id: u64) -> String {
        format!("blk.{layer_id}.engram_embd.weight")
    }
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
    pub engram: Option<EngramMeta>,
    pub warnings: Vec<String>,
}

/// Reads keys under one architecture prefix with errors that name the key and dialect.
struct Keys<'a> {
    file: &'a GgufFile,
    prefix: String,
    dialect: Dialect,
}

impl Keys<'_> {
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
}

impl Deepseek41Meta {
    /// Reads and validates the deepseek41 metadata of a set (metadata from shard 0; engram
    /// tables looked up across shards).
    pub fn from_set(set: &GgufSet) -> Result<Self> {
        let file = set.primary();
        let dialect = detect_dialect(file)?;
        let arch = architecture(file)?.to_string();
        let keys = Keys {
            file,
            prefix: arch.clone(),
            dialect,
        };
        let mut warnings = Vec::new();
        if arch != "deepseek41" {
            warnings.push(format!(
                "general.architecture is the pre-2026-09-10 {arch:?}; keys are read under {arch}.*"
            ));
        }
        let mut meta = match dialect {
            Dialect::Ds4 => read_ds4(&keys, &mut warnings)?,
            Dialect::LlamaCpp => read_llama(&keys, &mut warnings)?,
        };
        meta.architecture = arch;
        meta.name = file.get_str("general.name")?.map(str::to_string);
        meta.engram = read_engram(&keys, set, &meta, &mut warnings)?;
        meta.warnings = warnings;
        meta.validate(file)?;
        if let Some(e) = &meta.engram {
            validate_engram_tables(set, e)?;
        }
        Ok(meta)
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
            ("kv_source_layer_ids", &self.kv_source_layer_ids),
            ("index_source_layer_ids", &self.index_source_layer_ids),
        ] {
            if let Some(bad_id) = ids.iter().flatten().find(|&&l| l >= self.n_layers) {
                return Err(bad(
                    &format!("{p}.{name}"),
                    format!("layer {bad_id} is not below {} layers", self.n_layers),
                ));
            }
        }
        if let Some(e) = &self.engram {
            validate_engram(file, p, e, self)?;
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

fn base_meta(dialect: Dialect) -> Deepseek41Meta {
    Deepseek41Meta {
        dialect,
        architecture: String::new(),
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
        engram: None,
        warnings: Vec::new(),
    }
}

/// spec §1.2: HF-style keys.
fn read_ds4(k: &Keys, _warnings: &mut Vec<String>) -> Result<Deepseek41Meta> {
    let mut m = base_meta(Dialect::Ds4);
    m.vocab_size = k.u64("vocab_size")?;
    m.hidden_size = k.u64("hidden_size")?;
    m.moe_intermediate_size = k.u64("moe_intermediate_size")?;
    m.n_layers = k.u64("num_hidden_layers")?;
    m.n_heads = k.u64("num_attention_heads")?;
    m.n_kv_heads = k.u64("num_key_value_heads")?;
    m.head_dim = k.u64("head_dim")?;
    m.rope_head_dim = k.u64("qk_rope_head_dim")?;
    m.q_lora_rank = k.u64("q_lora_rank")?;
    m.o_lora_rank = k.u64("o_lora_rank")?;
    m.o_groups = k.u64("o_groups")?;
    m.n_routed_experts = k.u64("n_routed_experts")?;
    m.n_shared_experts = k.u64("n_shared_experts")?;
    m.n_experts_per_tok = k.u64("num_experts_per_tok")?;
    m.max_position_embeddings = k.u64("max_position_embeddings")?;
    m.sliding_window = k.u64("sliding_window")?;
    m.index_n_heads = k.u64("index_n_heads")?;
    m.index_head_dim = k.u64("index_head_dim")?;
    m.index_topk = k.u64("index_topk")?;
    m.candidate_source_layer_id = Some(k.u64("candidate_source_layer_id")?);
    m.candidate_topk_blocks = Some(k.u64("candidate_topk_blocks")?);
    m.candidate_block_size = Some(k.u64("candidate_block_size")?);
    m.hc_mult = k.u64("hc_mult")?;
    m.hc_sinkhorn_iters = k.u64("hc_sinkhorn_iters")?;
    m.rope_theta = k.f64("rope_theta")?;
    m.compress_rope_theta = k.f64("compress_rope_theta")?;
    m.rms_norm_eps = k.f64("rms_norm_eps")?;
    m.hc_eps = k.f64("hc_eps")?;
    m.swiglu_limit = Some(k.f64("swiglu_limit")?);
    m.routed_scaling_factor = k.f64("routed_scaling_factor")?;
    m.scoring_func = k.opt_str("scoring_func")?;
    m.hidden_act = k.opt_str("hidden_act")?;
    m.topk_method = k.opt_str("topk_method")?;
    m.norm_topk_prob = k.opt_bool("norm_topk_prob")?;
    m.compress_ratios = k.u64s("compress_ratios")?;
    m.kv_source_layer_ids = Some(k.u64s("kv_source_layer_ids")?);
    m.index_source_layer_ids = Some(k.u64s("index_source_layer_ids")?);
    m.rope_scaling = match k.opt_f64("rope_scaling.factor")? {
        None => None,
        Some(factor) => Some(RopeScaling {
            factor,
            beta_fast: k.f64("rope_scaling.beta_fast")?,
            beta_slow: k.f64("rope_scaling.beta_slow")?,
            original_max_position_embeddings: k
                .f64("rope_scaling.original_max_position_embeddings")?,
        }),
    };
    m.hf_config_json = k.opt_str("config")?;
    m.quantization = k.opt_str("quantization")?;
    Ok(m)
}

/// spec §1.3: llama.cpp-style keys.
fn read_llama(k: &Keys, warnings: &mut Vec<String>) -> Result<Deepseek41Meta> {
    let mut m = base_meta(Dialect::LlamaCpp);
    m.n_layers = k.u64("block_count")?;
    m.max_position_embeddings = k.u64("context_length")?;
    m.hidden_size = k.u64("embedding_length")?;
    m.n_heads = k.u64("attention.head_count")?;
    m.n_kv_heads = k.u64("attention.head_count_kv")?;
    m.head_dim = k.u64("attention.key_length")?;
    if let Some(v) = k.opt_u64("attention.value_length")? {
        if v != m.head_dim {
            return Err(k.bad(
                &k.key("attention.value_length"),
                format!(
                    "{v} differs from attention.key_length {}; V4.1 shares one latent for K and V",
                    m.head_dim
                ),
            ));
        }
    }
    m.rope_head_dim = k.u64("rope.dimension_count")?;
    m.rope_theta = k.f64("rope.freq_base")?;
    m.rms_norm_eps = k.f64("attention.layer_norm_rms_epsilon")?;
    m.q_lora_rank = k.u64("attention.q_lora_rank")?;
    m.o_lora_rank = k.u64("attention.output_lora_rank")?;
    m.o_groups = k.u64("attention.output_group_count")?;
    m.sliding_window = k.u64("attention.sliding_window")?;
    m.n_routed_experts = k.u64("expert_count")?;
    m.n_experts_per_tok = k.u64("expert_used_count")?;
    m.n_shared_experts = k.u64("expert_shared_count")?;
    m.moe_intermediate_size = k.u64("expert_feed_forward_length")?;
    m.routed_scaling_factor = k.f64("expert_weights_scale")?;
    m.norm_topk_prob = k.opt_bool("expert_weights_norm")?;
    m.scoring_func = k.opt_u64("expert_gating_func")?.map(|g| match g {
        1 => "softmax".to_string(),
        2 => "sigmoid".to_string(),
        // LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS in the deepseek4 ports.
        4 => "sqrtsoftplus".to_string(),
        n => format!("expert_gating_func={n}"),
    });
    m.compress_rope_theta = k.f64("attention.compress_rope_freq_base")?;
    m.compress_ratios = k.u64s("attention.compress_ratios")?;
    m.index_n_heads = k.u64("attention.indexer.head_count")?;
    m.index_head_dim = k.u64("attention.indexer.key_length")?;
    m.index_topk = k.u64("attention.indexer.top_k")?;
    read_llama_candidate_keys(k, &mut m, warnings)?;
    m.hc_mult = k.u64("hyper_connection.count")?;
    m.hc_sinkhorn_iters = match k.opt_u64("hyper_connection.sinkhorn_iterations")? {
        Some(v) => v,
        None => {
            warnings.push(format!(
                "{} is absent: ik_llama silently uses {LLAMA_DEFAULT_SINKHORN_ITERS}; the real model uses 20",
                k.key("hyper_connection.sinkhorn_iterations")
            ));
            LLAMA_DEFAULT_SINKHORN_ITERS
        }
    };
    m.hc_eps = match k.opt_f64("hyper_connection.epsilon")? {
        Some(v) => v,
        None => {
            warnings.push(format!(
                "{} is absent: ik_llama silently uses the RMS norm epsilon ({:e}); the real model uses 1e-6",
                k.key("hyper_connection.epsilon"),
                m.rms_norm_eps
            ));
            m.rms_norm_eps
        }
    };
    if let Some(limits) = k.opt_f64s("swiglu_clamp_exp")? {
        if let Some(&first) = limits.first() {
            if limits.iter().all(|&l| l == first) {
                m.swiglu_limit = Some(first);
            }
        }
        m.swiglu_limits_per_layer = limits;
    } else {
        warnings.push(format!(
            "{} is absent: a loader would run without the SwiGLU clamp (10.0 in the real model)",
            k.key("swiglu_clamp_exp")
        ));
    }
    m.rope_scaling = match k.opt_f64("rope.scaling.factor")? {
        None => None,
        Some(factor) => Some(RopeScaling {
            factor,
            beta_fast: k.f64("rope.scaling.yarn_beta_fast")?,
            beta_slow: k.f64("rope.scaling.yarn_beta_slow")?,
            original_max_position_embeddings: k.f64("rope.scaling.original_context_length")?,
        }),
    };
    let file = k.file;
    m.vocab_size = match k.opt_u64("vocab_size")? {
        Some(v) => v,
        None => match file.get_array("tokenizer.ggml.tokens")? {
            Some(arr) => arr.count,
            None => return Err(k.missing(k.key("vocab_size"))),
        },
    };
    Ok(m)
}

/// The llama.cpp dialect's candidate-prefilter keys as the forks that run V4.1 spell them
/// (spec §1.3: smalinin's `llama-arch.cpp`, ik_llama.cpp), each followed by the aliases other
/// readers accept (TensorSharp's `attention.indexer.*`, and golden-lens's own earlier exports).
pub const LLAMA_CANDIDATE_KEYS: [(&str, &[&str]); 3] = [
    (
        "attention.candidate_source_layer_id",
        &["attention.indexer.candidate_source_layer"],
    ),
    (
        "attention.candidate_topk_blocks",
        &[
            "attention.indexer.candidate_top_k",
            "attention.indexer.candidate_top_k_blocks",
        ],
    ),
    (
        "attention.candidate_block_size",
        &["attention.indexer.candidate_block_size"],
    ),
];

/// The released geometry's candidate prefilter, which loaders fall back to when a llama.cpp
/// file stores no candidate keys (the public GGUFs predate them): `topk_blocks` blocks of
/// `block_size`, the source being the first ratio-1 index source (layer 20).
pub const RELEASED_CANDIDATE_TOPK_BLOCKS: u64 = 2048;
/// See [`RELEASED_CANDIDATE_TOPK_BLOCKS`].
pub const RELEASED_CANDIDATE_BLOCK_SIZE: u64 = 8;

/// Reads the three candidate keys (each under its spelling or one alias; a key and its alias
/// must not disagree), all three or none. With none, the released block count and size are
/// used with a warning, and the source layer is left to the model builder (the first ratio-1
/// index source, which needs the tensor table).
fn read_llama_candidate_keys(
    k: &Keys,
    m: &mut Deepseek41Meta,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let mut values = [None; 3];
    for (slot, (key, aliases)) in values.iter_mut().zip(LLAMA_CANDIDATE_KEYS) {
        let mut found: Option<(String, u64)> = None;
        for name in std::iter::once(key).chain(aliases.iter().copied()) {
            if let Some(v) = k.opt_u64(name)? {
                match &found {
                    Some((first, w)) if *w != v => {
                        return Err(k.bad(&k.key(name), format!("{v} disagrees with {first} = {w}")))
                    }
                    Some(_) => {}
                    None => found = Some((k.key(name), v)),
                }
            }
        }
        *slot = found.map(|(_, v)| v);
    }
    match values {
        [Some(source), Some(topk), Some(block)] => {
            m.candidate_source_layer_id = Some(source);
            m.candidate_topk_blocks = Some(topk);
            m.candidate_block_size = Some(block);
        }
        [None, None, None] => {
            warnings.push(format!(
                "no candidate-prefilter keys ({}, {}, {} or their aliases): falling back to the \
                 released geometry ({RELEASED_CANDIDATE_TOPK_BLOCKS} blocks of \
                 {RELEASED_CANDIDATE_BLOCK_SIZE}, source = the first ratio-1 index source), as \
                 the loaders that run V4.1 do",
                k.key(LLAMA_CANDIDATE_KEYS[0].0),
                k.key(LLAMA_CANDIDATE_KEYS[1].0),
                k.key(LLAMA_CANDIDATE_KEYS[2].0)
            ));
            m.candidate_topk_blocks = Some(RELEASED_CANDIDATE_TOPK_BLOCKS);
            m.candidate_block_size = Some(RELEASED_CANDIDATE_BLOCK_SIZE);
        }
        partial => {
            let missing: Vec<String> = partial
                .iter()
                .zip(LLAMA_CANDIDATE_KEYS)
                .filter(|(v, _)| v.is_none())
                .map(|(_, (key, _))| k.key(key))
                .collect();
            return Err(k.bad(
                &missing[0],
                format!(
                    "the candidate prefilter needs all three keys or none; missing {}",
                    missing.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn read_engram(
    k: &Keys,
    set: &GgufSet,
    m: &Deepseek41Meta,
    warnings: &mut Vec<String>,
) -> Result<Option<EngramMeta>> {
    let Some(layer_ids) = k.opt_u64s("engram.layer_ids")? else {
        if m.dialect == Dialect::LlamaCpp && k.file.get("deepseek4.engram.layer_ids").is_some() {
            warnings.push(
                "engram constants are stored under deepseek4.* (an early conversion); \
                 run fix_gguf_engram_kv.py or treat the engram as missing"
                    .into(),
            );
        }
        return Ok(None);
    };
    let token_map_key = k.key("engram.token_map");
    let token_map_raw = k.u64s("engram.token_map")?;
    let token_map = token_map_raw
        .iter()
        .map(|&t| {
            u32::try_from(t).map_err(|_| {
                k.bad(
                    &token_map_key,
                    format!("entry {t} does not fit the compressed id space (u32)"),
                )
            })
        })
        .collect::<Result<Vec<u32>>>()?;
    let pad_id = k.u64("engram.pad_id")?;
    let primes = k.u64s("engram.primes")?;
    let multipliers = k.u64s("engram.multipliers")?;
    let n_layers = layer_ids.len();
    let ds4_encoding = match m.dialect {
        Dialect::Ds4 => {
            let name = k
                .opt_str("engram.encoding")?
                .ok_or_else(|| k.missing(k.key("engram.encoding")))?;
            Some(EngramEncoding::from_name(&name).ok_or_else(|| {
                k.bad(
                    &k.key("engram.encoding"),
                    format!(
                        "{name:?}; expected e4m3_e8m0_32_row264 (or e4m3_e8m0_32_row{{33·hd/32}} \
                         for another head dim), q4_k_row144 or lloyd4_e5m3_32_r136"
                    ),
                )
            })?)
        }
        Dialect::LlamaCpp => None,
    };
    let (n_heads, head_dim, max_ngram_size) = match ds4_encoding {
        // ds4 stores no head count, head dim or n-gram size: ds4_engram.h hard-codes 8, 256, 4
        // for its 256-value encodings, and so do we.
        Some(enc) if enc.fixed_row_values() == Some(256) => (8, 256, 4),
        // The generalised e4m3 rows of tiny files: the head dim from the encoding; n-gram size
        // and heads from the arrays (`max_ngram_size` multipliers and
        // `(max_ngram_size − 1)·n_heads` primes per layer).
        Some(enc) => {
            let per_layer = |len: usize| {
                len.checked_div(n_layers)
                    .filter(|_| len % n_layers.max(1) == 0)
            };
            let ngram = per_layer(multipliers.len()).ok_or_else(|| {
                k.bad(
                    &k.key("engram.multipliers"),
                    format!(
                        "{} multipliers do not split evenly over {n_layers} engram layers",
                        multipliers.len()
                    ),
                )
            })? as u64;
            let cols = per_layer(primes.len()).unwrap_or(0) as u64;
            let heads = cols.checked_div(ngram.saturating_sub(1)).unwrap_or(0);
            if heads == 0 || heads * (ngram.saturating_sub(1)) != cols {
                return Err(k.bad(
                    &k.key("engram.primes"),
                    format!(
                        "{} primes cannot be {n_layers} layers x ({ngram} - 1) n-gram orders x heads",
                        primes.len()
                    ),
                ));
            }
            (heads, enc.row_values(0), ngram)
        }
        None => (
            k.u64("engram.head_count")?,
            k.u64("engram.key_length")?,
            k.u64("engram.max_ngram_size")?,
        ),
    };
    if max_ngram_size < 2 || n_heads == 0 || n_heads > 1024 || max_ngram_size > 64 {
        return Err(k.bad(
            &k.key("engram.max_ngram_size"),
            format!("{max_ngram_size}-grams with {n_heads} heads; expected at least 2-grams and 1..=1024 heads"),
        ));
    }
    let columns = ((max_ngram_size - 1) * n_heads) as usize;
    if primes.len() != n_layers * columns {
        return Err(k.bad(
            &k.key("engram.primes"),
            format!(
                "{} primes; expected {n_layers} layers x {columns} columns = {}",
                primes.len(),
                n_layers * columns
            ),
        ));
    }
    let derived_offsets: Vec<u64> = primes
        .chunks(columns.max(1))
        .flat_map(|layer| {
            layer.iter().scan(0u64, |acc, &p| {
                let off = *acc;
                *acc = acc.saturating_add(p);
                Some(off)
            })
        })
        .collect();
    let layer_sums: Vec<Option<u64>> = primes
        .chunks(columns.max(1))
        .map(|layer| layer.iter().try_fold(0u64, |a, &p| a.checked_add(p)))
        .collect();
    let offsets = match k.opt_u64s("engram.offsets")? {
        Some(stored) => {
            if stored != derived_offsets {
                return Err(k.bad(
                    &k.key("engram.offsets"),
                    "offsets are not the per-layer running sums of the primes".into(),
                ));
            }
            stored
        }
        None => derived_offsets,
    };
    let rows = match k.opt_u64s("engram.rows")? {
        Some(r) => r,
        None => layer_sums
            .iter()
            .map(|s| s.ok_or_else(|| k.bad(&k.key("engram.primes"), "prime sum overflows".into())))
            .collect::<Result<Vec<u64>>>()?,
    };
    let compressed_vocab_size = match k.opt_u64("engram.compressed_vocab_size")? {
        Some(v) => v,
        None => {
            let derived = token_map
                .iter()
                .copied()
                .max()
                .map_or(0, |x| u64::from(x) + 1);
            warnings.push(format!(
                "{} is absent (llama.cpp dialect): using max(token_map) + 1 = {derived}",
                k.key("engram.compressed_vocab_size")
            ));
            derived
        }
    };
    let storage = match k.opt_str("engram.storage")?.as_deref() {
        None | Some("embedded") => EngramStorage::Embedded,
        Some("external") => {
            let paths = k
                .opt_strings("engram.external_paths")?
                .ok_or_else(|| k.missing(k.key("engram.external_paths")))?;
            let offsets = k.u64s("engram.external_offsets")?;
            let sizes = k.opt_u64s("engram.sidecar_size")?;
            EngramStorage::External {
                paths,
                offsets,
                sizes,
            }
        }
        Some(other) => {
            return Err(k.bad(
                &k.key("engram.storage"),
                format!("{other:?}; expected \"embedded\" or \"external\""),
            ))
        }
    };
    let encoding = match ds4_encoding {
        Some(enc) => enc,
        None => {
            let first = layer_ids.first().copied().unwrap_or(0);
            let name = EngramMeta::table_name(first);
            let (_, t) = set.require_tensor(&name)?;
            EngramEncoding::Ggml(t.ggml_type)
        }
    };
    Ok(Some(EngramMeta {
        encoding,
        storage,
        layer_ids,
        n_heads,
        head_dim,
        max_ngram_size,
        compressed_vocab_size,
        pad_id,
        token_map,
        primes,
        offsets,
        multipliers,
        rows,
    }))
}

/// ds4's `ds4_engram_layout_valid` checks plus shape checks of the tables.
fn validate_engram(file: &GgufFile, p: &str, e: &EngramMeta, m: &Deepseek41Meta) -> Result<()> {
    let bad = |suffix: &str, problem: String| GgufError::BadMeta {
        path: file.path().to_path_buf(),
        key: format!("{p}.engram.{suffix}"),
        problem,
    };
    let n = e.layer_ids.len();
    if n == 0 {
        return Err(bad("layer_ids", "no engram layers listed".into()));
    }
    // One pass with a set: the duplicate check stays linear however many layers a file lists.
    let mut seen = std::collections::HashSet::with_capacity(n);
    for &l in &e.layer_ids {
        if l >= m.n_layers {
            return Err(bad(
                "layer_ids",
                format!("layer {l} is not below {} layers", m.n_layers),
            ));
        }
        if !seen.insert(l) {
            return Err(bad("layer_ids", format!("layer {l} is listed twice")));
        }
    }
    if e.head_dim == 0 || e.head_dim % 32 != 0 || e.head_dim > 1 << 20 {
        return Err(bad(
            "key_length",
            format!(
                "{} values per row; expected a positive multiple of 32 (one scale per 32)",
                e.head_dim
            ),
        ));
    }
    if let Some(v) = e.encoding.fixed_row_values().filter(|&v| v != e.head_dim) {
        return Err(bad(
            "key_length",
            format!(
                "{} values per row, but encoding {} holds {v}",
                e.head_dim,
                e.encoding.name()
            ),
        ));
    }
    if e.compressed_vocab_size == 0 {
        return Err(bad("compressed_vocab_size", "must be positive".into()));
    }
    if let Some((i, &t)) = e
        .token_map
        .iter()
        .enumerate()
        .find(|(_, &t)| u64::from(t) >= e.compressed_vocab_size)
    {
        return Err(bad(
            "token_map",
            format!(
                "token {i} maps to {t}, not below compressed_vocab_size {}",
                e.compressed_vocab_size
            ),
        ));
    }
    if e.token_map.len() as u64 != m.vocab_size {
        return Err(bad(
            "token_map",
            format!(
                "{} entries for a vocabulary of {}",
                e.token_map.len(),
                m.vocab_size
            ),
        ));
    }
    if e.pad_id >= e.compressed_vocab_size {
        return Err(bad(
            "pad_id",
            format!(
                "{} is not below compressed_vocab_size {} (pad_id is already a compressed id)",
                e.pad_id, e.compressed_vocab_size
            ),
        ));
    }
    let per_layer = e.max_ngram_size as usize;
    if e.multipliers.len() != n * per_layer {
        return Err(bad(
            "multipliers",
            format!(
                "{} multipliers; expected {n} layers x {per_layer} = {}",
                e.multipliers.len(),
                n * per_layer
            ),
        ));
    }
    let bound = i64::MAX as u64 / e.compressed_vocab_size;
    for (i, &mult) in e.multipliers.iter().enumerate() {
        if mult % 2 == 0 {
            return Err(bad(
                "multipliers",
                format!("multiplier {i} = {mult} is even; expected odd"),
            ));
        }
        if mult > bound {
            return Err(bad(
                "multipliers",
                format!(
                    "multiplier {i} = {mult} exceeds INT64_MAX / compressed_vocab_size = {bound}, so the hash could overflow"
                ),
            ));
        }
    }
    if let Some((i, &prime)) = e.primes.iter().enumerate().find(|(_, &q)| q < 2) {
        return Err(bad(
            "primes",
            format!("prime {i} is {prime}; expected at least 2"),
        ));
    }
    if e.rows.len() != n {
        return Err(bad(
            "rows",
            format!("{} row counts for {n} engram layers", e.rows.len()),
        ));
    }
    let columns = e.columns_per_layer();
    for (l, (layer_primes, &rows)) in e.primes.chunks(columns).zip(&e.rows).enumerate() {
        let sum = layer_primes.iter().try_fold(0u64, |a, &q| a.checked_add(q));
        if sum != Some(rows) {
            return Err(bad(
                "rows",
                format!(
                    "engram layer {l} (block {}) has {rows} rows but its primes sum to {}",
                    e.layer_ids[l],
                    sum.map_or("an overflow".to_string(), |s| s.to_string())
                ),
            ));
        }
    }
    if let EngramStorage::External {
        paths,
        offsets,
        sizes,
    } = &e.storage
    {
        if paths.len() != n || offsets.len() != n || sizes.as_ref().is_some_and(|s| s.len() != n) {
            return Err(bad(
                "external_paths",
                format!(
                    "{} paths / {} offsets for {n} engram layers",
                    paths.len(),
                    offsets.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Checks each engram table against the constants: an embedded table is present with the
/// encoding's type and row width and `rows` rows; a sidecar is opened (inside the GGUF's
/// directory) and must hold `rows` rows from its offset. Either way every row count is backed
/// by bytes before anything is built from it.
pub fn validate_engram_tables(set: &GgufSet, e: &EngramMeta) -> Result<()> {
    if e.storage != EngramStorage::Embedded {
        return super::engram::EngramTables::open(set, e).map(|_| ());
    }
    let (ggml_type, ne0) = e.encoding.tensor_layout_for(e.head_dim);
    for (&layer, &rows) in e.layer_ids.iter().zip(&e.rows) {
        let name = EngramMeta::table_name(layer);
        let (file, t) = set.require_tensor(&name)?;
        let want = [ne0, rows];
        if !ggml_type.is_dequantizable() && ggml_type != super::ggml_type::GgmlType::I8 {
            return Err(GgufError::NotDequantizable {
                path: file.path().to_path_buf(),
                tensor: name,
                ggml_type: ggml_type.name(),
            });
        }
        if t.ggml_type != ggml_type || t.dims != want {
            return Err(GgufError::BadRequest {
                path: file.path().to_path_buf(),
                tensor: name,
                problem: format!(
                    "engram table is {} {:?}; encoding {} needs {} {:?}",
                    t.ggml_type,
                    t.dims,
                    e.encoding.name(),
                    ggml_type,
                    want
                ),
            });
        }
    }
    Ok(())
}
