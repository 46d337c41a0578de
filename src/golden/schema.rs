//! The typed golden (spec §2, §3): captures, regimes, `weights_meta`, the fixture, and the entry
//! points that load and validate one (`Golden::load`, `Golden::parse`; the streaming pass is in
//! `parse`, the fixture's checks in `fixture`, error positions in `json_error`). Every count,
//! length and shape in the file is checked against the file itself before anything is built
//! from it, and every message names the file, regime, capture and field.

use super::json_error::json_error;
use super::parse::{parse_golden, ParseFailure};
use std::collections::HashMap;
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
    /// Capture name -> position in `captures`, built by the loader.
    index: HashMap<String, usize>,
}

impl Regime {
    /// A regime whose `index` maps each capture name to its position in `captures`.
    pub(super) fn with_index(
        name: String,
        captures: Vec<GoldenCapture>,
        index: HashMap<String, usize>,
    ) -> Regime {
        Regime {
            name,
            captures,
            index,
        }
    }

    /// The capture called `name`: a hash lookup (so a run that looks up every capture stays
    /// linear however many a regime holds), falling back to a scan if `captures` was edited.
    pub fn get(&self, name: &str) -> Option<&GoldenCapture> {
        self.index
            .get(name)
            .and_then(|&i| self.captures.get(i))
            .filter(|c| c.name == name)
            .or_else(|| self.captures.iter().find(|c| c.name == name))
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
    /// `[layer][row · head_dim/scale_block + block]` powers of two: row r's
    /// `head_dim / scale_block` scales are consecutive.
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
/// all-full v3 is 1.7 MB). The loader streams, so memory is about what the golden holds (8
/// bytes a value), not a tree of the text; the cap bounds the work a file can ask for.
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
    /// Read and validate a golden file. The file is parsed as it is read (its text is never
    /// held whole); only when it is rejected is the text read again, to say where.
    pub fn load(path: &Path) -> Result<Golden, GoldenError> {
        let label = path.display().to_string();
        let io_err = |source| GoldenError::Io {
            path: label.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io_err)?;
        let size_bytes = file.metadata().map_err(io_err)?.len();
        if size_bytes > MAX_GOLDEN_BYTES {
            return Err(invalid(
                path,
                format!(
                    "file is {size_bytes} bytes, more than the {MAX_GOLDEN_BYTES}-byte cap for a \
                     golden (the shipped goldens are a few MB)"
                ),
            ));
        }
        // `take` holds the parse to the size checked above even if the file grows meanwhile.
        let reader = std::io::BufReader::new(std::io::Read::take(file, MAX_GOLDEN_BYTES));
        let mut de = serde_json::Deserializer::from_reader(reader);
        match parse_golden(&mut de, path) {
            Ok(golden) => Ok(golden),
            Err(ParseFailure::Invalid(msg)) => Err(invalid(path, msg)),
            Err(ParseFailure::Syntax(e)) => {
                // Rejected: read the (size-checked) text once to place the error.
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
                Err(invalid(path, syntax_message(&text, &e)))
            }
        }
    }
    /// Parse and validate golden JSON text; `source` labels messages.
    pub fn parse(text: &str, source: &Path) -> Result<Golden, GoldenError> {
        let mut de = serde_json::Deserializer::from_str(text);
        match parse_golden(&mut de, source) {
            Ok(golden) => Ok(golden),
            Err(ParseFailure::Invalid(msg)) => Err(invalid(source, msg)),
            Err(ParseFailure::Syntax(e)) => Err(invalid(source, syntax_message(text, &e))),
        }
    }
}

/// An empty (or all-whitespace) file says so; any other syntax error gets its position.
fn syntax_message(text: &str, err: &serde_json::Error) -> String {
    if text.trim().is_empty() {
        "file is empty (expected a JSON object)".to_string()
    } else {
        json_error(text, err)
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
