//! Strict loader for goldens v1, v2 and v3 (spec §2, §3). TYPES FIXED; loader to be implemented.

use std::path::{Path, PathBuf};

/// Every way a golden can be rejected. Messages name the file, and where it applies the
/// regime, the capture and the field.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    #[error("{path}: {msg}")]
    Invalid { path: String, msg: String },
    #[error("{path}: cannot read: {source}")]
    Io { path: String, source: std::io::Error },
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

impl Golden {
    pub fn regime(&self, name: &str) -> Option<&Regime> {
        self.regimes.iter().find(|r| r.name == name)
    }
    pub fn weight_meta(&self, name: &str) -> Option<&WeightMeta> {
        self.weights_meta.iter().find(|w| w.name == name)
    }
    /// Read and validate a golden file.
    pub fn load(path: &Path) -> Result<Golden, GoldenError> {
        todo!("{path:?}")
    }
    /// Parse and validate golden JSON text; `source` labels messages.
    pub fn parse(text: &str, source: &Path) -> Result<Golden, GoldenError> {
        todo!("{text}{source:?}")
    }
}
