//! Every deepseek41 metadata key of both dialects, spelled once (spec §1.2 ds4, §1.3
//! llama.cpp). The reader ([`Deepseek41Meta::from_set`]), its writer
//! ([`Deepseek41Meta::write`], used by `gguf export` and `gguf synth`) and the error messages
//! all take their names from these tables. Names are suffixes under `<architecture>.`.
//!
//! [`Deepseek41Meta::from_set`]: super::Deepseek41Meta::from_set
//! [`Deepseek41Meta::write`]: super::Deepseek41Meta::write

use super::Deepseek41Meta;

/// How a scalar key is stored when written (any integer or float type is accepted on read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// `UINT32`; a float field whose value is not a whole u32 is written as `FLOAT32` instead.
    U32,
    /// `FLOAT32`.
    F32,
}

/// A number read into or written from one field of [`Deepseek41Meta`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Int(u64),
    Float(f64),
}

/// A field of [`Deepseek41Meta`] by kind, mutable (for the reader).
pub(super) enum Slot<'a> {
    Int(&'a mut u64),
    OptInt(&'a mut Option<u64>),
    Float(&'a mut f64),
    OptFloat(&'a mut Option<f64>),
}

/// A field of [`Deepseek41Meta`] by kind, shared (for the writer).
enum SlotRef<'a> {
    Int(&'a u64),
    OptInt(&'a Option<u64>),
    Float(&'a f64),
    OptFloat(&'a Option<f64>),
}

impl SlotRef<'_> {
    fn num(&self) -> Option<Num> {
        match self {
            SlotRef::Int(v) => Some(Num::Int(**v)),
            SlotRef::OptInt(v) => v.map(Num::Int),
            SlotRef::Float(v) => Some(Num::Float(**v)),
            SlotRef::OptFloat(v) => v.map(Num::Float),
        }
    }
}

/// One enum variant per numeric field that a dialect stores as one plain scalar key, with its
/// getter and its slot generated from the field name and kind.
macro_rules! numeric_fields {
    ($($variant:ident => $field:ident: $kind:ident),* $(,)?) => {
        /// A numeric field of [`Deepseek41Meta`] that a dialect stores as one scalar key.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Field { $($variant),* }

        impl Field {
            /// The field's value in `m` (`None` for an optional field that is unset).
            pub fn value(self, m: &Deepseek41Meta) -> Option<Num> {
                match self { $(Field::$variant => SlotRef::$kind(&m.$field).num()),* }
            }

            pub(super) fn slot(self, m: &mut Deepseek41Meta) -> Slot<'_> {
                match self { $(Field::$variant => Slot::$kind(&mut m.$field)),* }
            }

            /// The field's name in [`Deepseek41Meta`].
            pub fn name(self) -> &'static str {
                match self { $(Field::$variant => stringify!($field)),* }
            }
        }
    };
}

numeric_fields! {
    VocabSize => vocab_size: Int,
    HiddenSize => hidden_size: Int,
    Layers => n_layers: Int,
    Heads => n_heads: Int,
    KvHeads => n_kv_heads: Int,
    HeadDim => head_dim: Int,
    RopeHeadDim => rope_head_dim: Int,
    QLoraRank => q_lora_rank: Int,
    OLoraRank => o_lora_rank: Int,
    OGroups => o_groups: Int,
    RoutedExperts => n_routed_experts: Int,
    SharedExperts => n_shared_experts: Int,
    ExpertsPerToken => n_experts_per_tok: Int,
    MoeIntermediate => moe_intermediate_size: Int,
    MaxPositions => max_position_embeddings: Int,
    SlidingWindow => sliding_window: Int,
    IndexHeads => index_n_heads: Int,
    IndexHeadDim => index_head_dim: Int,
    IndexTopk => index_topk: Int,
    CandidateSource => candidate_source_layer_id: OptInt,
    CandidateTopkBlocks => candidate_topk_blocks: OptInt,
    CandidateBlockSize => candidate_block_size: OptInt,
    HcMult => hc_mult: Int,
    HcSinkhornIters => hc_sinkhorn_iters: Int,
    HcEps => hc_eps: Float,
    RmsNormEps => rms_norm_eps: Float,
    SwigluLimit => swiglu_limit: OptFloat,
    RoutedScalingFactor => routed_scaling_factor: Float,
    RopeTheta => rope_theta: Float,
    CompressRopeTheta => compress_rope_theta: Float,
}

/// A required scalar key: its name, the field it fills and how it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScalarKey {
    pub suffix: &'static str,
    pub field: Field,
    pub stored: Stored,
}

const fn u32(suffix: &'static str, field: Field) -> ScalarKey {
    ScalarKey {
        suffix,
        field,
        stored: Stored::U32,
    }
}

const fn f32(suffix: &'static str, field: Field) -> ScalarKey {
    ScalarKey {
        suffix,
        field,
        stored: Stored::F32,
    }
}

/// The key that stores `field` in a scalar table; empty when the table lacks the field (the
/// tests below check the fields the dialect detector asks for).
pub fn scalar_key(table: &[ScalarKey], field: Field) -> &'static str {
    table
        .iter()
        .find(|k| k.field == field)
        .map_or("", |k| k.suffix)
}

/// The ds4 dialect's keys (spec §1.2: HF `config.json` names).
#[derive(Debug)]
pub struct Ds4Keys {
    /// Required scalars, in the order they are read and written.
    pub scalars: &'static [ScalarKey],
    pub scoring_func: &'static str,
    pub hidden_act: &'static str,
    pub topk_method: &'static str,
    pub norm_topk_prob: &'static str,
    pub compress_ratios: &'static str,
    pub kv_source_layer_ids: &'static str,
    pub index_source_layer_ids: &'static str,
    /// YaRN: `factor` decides whether the group is present; then all four are required.
    pub rope_scaling_factor: &'static str,
    pub rope_scaling_beta_fast: &'static str,
    pub rope_scaling_beta_slow: &'static str,
    pub rope_scaling_original: &'static str,
    /// The HF `config.json`, as a string.
    pub config: &'static str,
    pub quantization: &'static str,
    /// A description of the imatrix calibration (optional).
    pub calibration: &'static str,
}

/// The ds4 table.
pub const DS4: Ds4Keys = Ds4Keys {
    scalars: &[
        u32("vocab_size", Field::VocabSize),
        u32("hidden_size", Field::HiddenSize),
        u32("moe_intermediate_size", Field::MoeIntermediate),
        u32("num_hidden_layers", Field::Layers),
        u32("num_attention_heads", Field::Heads),
        u32("num_key_value_heads", Field::KvHeads),
        u32("head_dim", Field::HeadDim),
        u32("qk_rope_head_dim", Field::RopeHeadDim),
        u32("q_lora_rank", Field::QLoraRank),
        u32("o_lora_rank", Field::OLoraRank),
        u32("o_groups", Field::OGroups),
        u32("n_routed_experts", Field::RoutedExperts),
        u32("n_shared_experts", Field::SharedExperts),
        u32("num_experts_per_tok", Field::ExpertsPerToken),
        u32("max_position_embeddings", Field::MaxPositions),
        u32("sliding_window", Field::SlidingWindow),
        u32("index_n_heads", Field::IndexHeads),
        u32("index_head_dim", Field::IndexHeadDim),
        u32("index_topk", Field::IndexTopk),
        u32("candidate_source_layer_id", Field::CandidateSource),
        u32("candidate_topk_blocks", Field::CandidateTopkBlocks),
        u32("candidate_block_size", Field::CandidateBlockSize),
        u32("hc_mult", Field::HcMult),
        u32("hc_sinkhorn_iters", Field::HcSinkhornIters),
        // The ds4 converter stores the RoPE bases as integers.
        u32("rope_theta", Field::RopeTheta),
        u32("compress_rope_theta", Field::CompressRopeTheta),
        f32("rms_norm_eps", Field::RmsNormEps),
        f32("hc_eps", Field::HcEps),
        f32("swiglu_limit", Field::SwigluLimit),
        f32("routed_scaling_factor", Field::RoutedScalingFactor),
    ],
    scoring_func: "scoring_func",
    hidden_act: "hidden_act",
    topk_method: "topk_method",
    norm_topk_prob: "norm_topk_prob",
    compress_ratios: "compress_ratios",
    kv_source_layer_ids: "kv_source_layer_ids",
    index_source_layer_ids: "index_source_layer_ids",
    rope_scaling_factor: "rope_scaling.factor",
    rope_scaling_beta_fast: "rope_scaling.beta_fast",
    rope_scaling_beta_slow: "rope_scaling.beta_slow",
    rope_scaling_original: "rope_scaling.original_max_position_embeddings",
    config: "config",
    quantization: "quantization",
    calibration: "calibration",
};

/// One candidate-prefilter key of the llama.cpp dialect: the forks' spelling, then the aliases
/// other readers accept.
pub type CandidateKey = (&'static str, &'static [&'static str]);

/// The llama.cpp dialect's keys (spec §1.3: llama.cpp's `LLM_KV_*` names).
#[derive(Debug)]
pub struct LlamaKeys {
    /// Required scalars, in the order they are read and written.
    pub scalars: &'static [ScalarKey],
    /// Optional; when present it must equal `attention.key_length` (one latent for K and V).
    pub value_length: &'static str,
    /// Optional; without it, `tokenizer.ggml.tokens` gives the count.
    pub vocab_size: &'static str,
    pub expert_weights_norm: &'static str,
    /// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_*` number.
    pub expert_gating_func: &'static str,
    pub compress_ratios: &'static str,
    /// The candidate prefilter: source layer, top-k blocks, block size (all three or none).
    pub candidate: [CandidateKey; 3],
    /// Optional: ik_llama falls back to [`super::LLAMA_DEFAULT_SINKHORN_ITERS`].
    pub sinkhorn_iterations: &'static str,
    /// Optional: ik_llama falls back to the RMS norm epsilon.
    pub hc_epsilon: &'static str,
    /// Per-layer SwiGLU clamp (optional, with a warning).
    pub swiglu_clamp_exp: &'static str,
    /// YaRN: `factor` decides whether the group is present; then all four are required.
    pub rope_scaling_factor: &'static str,
    pub rope_scaling_beta_fast: &'static str,
    pub rope_scaling_beta_slow: &'static str,
    pub rope_scaling_original: &'static str,
}

/// The llama.cpp table.
pub const LLAMA: LlamaKeys = LlamaKeys {
    scalars: &[
        u32("block_count", Field::Layers),
        u32("context_length", Field::MaxPositions),
        u32("embedding_length", Field::HiddenSize),
        u32("attention.head_count", Field::Heads),
        u32("attention.head_count_kv", Field::KvHeads),
        u32("attention.key_length", Field::HeadDim),
        u32("rope.dimension_count", Field::RopeHeadDim),
        f32("rope.freq_base", Field::RopeTheta),
        f32("attention.layer_norm_rms_epsilon", Field::RmsNormEps),
        u32("attention.q_lora_rank", Field::QLoraRank),
        u32("attention.output_lora_rank", Field::OLoraRank),
        u32("attention.output_group_count", Field::OGroups),
        u32("attention.sliding_window", Field::SlidingWindow),
        u32("expert_count", Field::RoutedExperts),
        u32("expert_used_count", Field::ExpertsPerToken),
        u32("expert_shared_count", Field::SharedExperts),
        u32("expert_feed_forward_length", Field::MoeIntermediate),
        f32("expert_weights_scale", Field::RoutedScalingFactor),
        f32(
            "attention.compress_rope_freq_base",
            Field::CompressRopeTheta,
        ),
        u32("attention.indexer.head_count", Field::IndexHeads),
        u32("attention.indexer.key_length", Field::IndexHeadDim),
        u32("attention.indexer.top_k", Field::IndexTopk),
        u32("hyper_connection.count", Field::HcMult),
    ],
    value_length: "attention.value_length",
    vocab_size: "vocab_size",
    expert_weights_norm: "expert_weights_norm",
    expert_gating_func: "expert_gating_func",
    compress_ratios: "attention.compress_ratios",
    candidate: [
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
    ],
    sinkhorn_iterations: "hyper_connection.sinkhorn_iterations",
    hc_epsilon: "hyper_connection.epsilon",
    swiglu_clamp_exp: "swiglu_clamp_exp",
    rope_scaling_factor: "rope.scaling.factor",
    rope_scaling_beta_fast: "rope.scaling.yarn_beta_fast",
    rope_scaling_beta_slow: "rope.scaling.yarn_beta_slow",
    rope_scaling_original: "rope.scaling.original_context_length",
};

/// The engram constants' keys (spec §1.8), spelled alike in both dialects.
#[derive(Debug)]
pub struct EngramKeys {
    pub layer_ids: &'static str,
    pub token_map: &'static str,
    pub pad_id: &'static str,
    pub primes: &'static str,
    pub multipliers: &'static str,
    /// ds4 only: the row encoding name.
    pub encoding: &'static str,
    /// llama.cpp only (ds4 derives them from the encoding and the arrays).
    pub head_count: &'static str,
    pub key_length: &'static str,
    pub max_ngram_size: &'static str,
    /// Optional: the per-layer running sums of the primes (llama.cpp writes them).
    pub offsets: &'static str,
    /// Optional: rows per layer (ds4 writes them).
    pub rows: &'static str,
    /// Optional in llama.cpp files (derived from the token map, with a warning).
    pub compressed_vocab_size: &'static str,
    /// `embedded` (default) or `external` (the ishikawa fork's sidecars).
    pub storage: &'static str,
    pub external_paths: &'static str,
    pub external_offsets: &'static str,
    pub sidecar_size: &'static str,
}

/// The engram table.
pub const ENGRAM: EngramKeys = EngramKeys {
    layer_ids: "engram.layer_ids",
    token_map: "engram.token_map",
    pad_id: "engram.pad_id",
    primes: "engram.primes",
    multipliers: "engram.multipliers",
    encoding: "engram.encoding",
    head_count: "engram.head_count",
    key_length: "engram.key_length",
    max_ngram_size: "engram.max_ngram_size",
    offsets: "engram.offsets",
    rows: "engram.rows",
    compressed_vocab_size: "engram.compressed_vocab_size",
    storage: "engram.storage",
    external_paths: "engram.external_paths",
    external_offsets: "engram.external_offsets",
    sidecar_size: "engram.sidecar_size",
};

/// Outside the dialect prefix: the architecture, model name and (llama.cpp fallback for the
/// vocabulary size) tokenizer token list.
pub const ARCHITECTURE: &str = "general.architecture";
/// See [`ARCHITECTURE`].
pub const NAME: &str = "general.name";
/// See [`ARCHITECTURE`].
pub const TOKENIZER_TOKENS: &str = "tokenizer.ggml.tokens";

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// No key is spelled twice within a dialect, and no two keys fill the same field.
    #[test]
    fn scalar_tables_have_unique_keys_and_fields() {
        for (dialect, table) in [("ds4", DS4.scalars), ("llama.cpp", LLAMA.scalars)] {
            let mut keys = HashSet::new();
            let mut fields = HashSet::new();
            for k in table {
                assert!(keys.insert(k.suffix), "{dialect}: {} twice", k.suffix);
                assert!(
                    fields.insert(k.field.name()),
                    "{dialect}: {:?} twice",
                    k.field
                );
            }
        }
        assert_eq!(scalar_key(DS4.scalars, Field::HiddenSize), "hidden_size");
        assert_eq!(scalar_key(LLAMA.scalars, Field::Layers), "block_count");
        assert_eq!(
            scalar_key(LLAMA.scalars, Field::HiddenSize),
            "embedding_length"
        );
        assert_eq!(scalar_key(LLAMA.scalars, Field::SwigluLimit), "");
    }
}
