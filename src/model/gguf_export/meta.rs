//! The fixture's geometry as a [`Deepseek41Meta`], which the dialect writer turns into keys.

use super::ExportError;
use crate::gguf::quant::EngramEncoding;
use crate::gguf::{Deepseek41Meta, Dialect, EngramMeta, EngramStorage};
use crate::golden::Golden;
use crate::model::config::{ModelConfig, ScoreFunc};
use crate::model::engram::EngramTables;

fn score_name(s: ScoreFunc) -> &'static str {
    match s {
        ScoreFunc::Softmax => "softmax",
        ScoreFunc::Sigmoid => "sigmoid",
        ScoreFunc::SqrtSoftplus => "sqrtsoftplus",
    }
}

fn u64s(xs: &[usize]) -> Vec<u64> {
    xs.iter().map(|&x| x as u64).collect()
}

fn non_negative(what: &str, v: i64) -> Result<u64, ExportError> {
    u64::try_from(v).map_err(|_| ExportError::Types(format!("engram {what} {v} is negative")))
}

/// The metadata of `golden`'s model in `dialect`: the reference's hyper-parameters (one KV head
/// and one shared expert, as V4.1 has), the engram constants of `tables`, and for ds4 the
/// HF-style `config` string naming the golden. `engram_encoding` is how the tables are stored
/// (ds4: the FP8 row encoding; llama.cpp: the table tensor's GGML type).
pub(super) fn deepseek41_meta(
    golden: &Golden,
    cfg: &ModelConfig,
    dialect: Dialect,
    tables: Option<&EngramTables>,
    engram_encoding: Option<EngramEncoding>,
) -> Result<Deepseek41Meta, ExportError> {
    let mut m = Deepseek41Meta::empty(dialect);
    m.name = Some(format!(
        "golden-lens tiny export of {}",
        golden.source.display()
    ));
    m.vocab_size = cfg.vocab_size as u64;
    m.hidden_size = cfg.dim as u64;
    m.n_layers = cfg.n_layers as u64;
    m.n_heads = cfg.n_heads as u64;
    m.n_kv_heads = 1;
    m.head_dim = cfg.head_dim as u64;
    m.rope_head_dim = cfg.rope_head_dim as u64;
    m.q_lora_rank = cfg.q_lora_rank as u64;
    m.o_lora_rank = cfg.o_lora_rank as u64;
    m.o_groups = cfg.o_groups as u64;
    m.n_routed_experts = cfg.n_routed_experts as u64;
    m.n_shared_experts = 1;
    m.n_experts_per_tok = cfg.n_activated_experts as u64;
    m.moe_intermediate_size = cfg.moe_inter_dim as u64;
    m.max_position_embeddings = cfg.max_seq_len as u64;
    m.sliding_window = cfg.window_size as u64;
    m.index_n_heads = cfg.index_n_heads as u64;
    m.index_head_dim = cfg.index_head_dim as u64;
    m.index_topk = cfg.index_topk as u64;
    m.candidate_source_layer_id = cfg.candidate_source_layer.map(|l| l as u64);
    m.candidate_topk_blocks = Some(cfg.candidate_topk_blocks as u64);
    m.candidate_block_size = Some(cfg.candidate_block_size as u64);
    m.hc_mult = cfg.hc_mult as u64;
    m.hc_sinkhorn_iters = cfg.hc_sinkhorn_iters as u64;
    m.hc_eps = f64::from(cfg.hc_eps);
    m.rms_norm_eps = f64::from(cfg.norm_eps);
    m.swiglu_limit = Some(f64::from(cfg.swiglu_limit));
    m.routed_scaling_factor = f64::from(cfg.route_scale);
    m.rope_theta = cfg.rope_theta;
    m.compress_rope_theta = cfg.compress_rope_theta;
    m.rope_scaling = Some(crate::gguf::deepseek41::RopeScaling {
        factor: cfg.rope_factor,
        beta_fast: cfg.beta_fast,
        beta_slow: cfg.beta_slow,
        original_max_position_embeddings: cfg.original_seq_len as f64,
    });
    m.scoring_func = Some(score_name(cfg.score_func).to_string());
    m.norm_topk_prob = Some(cfg.norm_topk_prob);
    m.compress_ratios = u64s(&cfg.compress_ratios[..cfg.n_layers]);
    if dialect == Dialect::Ds4 {
        if cfg.candidate_source_layer.is_none() {
            return Err(ExportError::Golden {
                source_path: golden.source.display().to_string(),
                msg: "the ds4 dialect needs a candidate source layer".into(),
            });
        }
        m.hidden_act = Some("silu".into());
        m.topk_method = Some("noaux_tc".into());
        m.kv_source_layer_ids = Some(u64s(&cfg.kv_source_layers));
        m.index_source_layer_ids = Some(u64s(&cfg.index_source_layers));
        let engram = cfg.engram.as_ref();
        let hf = serde_json::json!({
            "model_type": "deepseek_v41",
            "golden_lens_tiny_export": golden.source.display().to_string(),
            "engram_vocab_size": engram.map(|e| e.vocab_size),
            "engram_pad_token_id": engram.map(|e| e.pad_id),
        });
        m.hf_config_json = Some(hf.to_string());
        m.quantization = Some("golden-lens tiny export".into());
    }
    if let (Some(ec), Some(t), Some(encoding)) = (&cfg.engram, tables, engram_encoding) {
        let token_map = t
            .token_map
            .iter()
            .map(|&x| {
                u32::try_from(x)
                    .map_err(|_| ExportError::Types(format!("engram token map entry {x}")))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        let flat = |xs: &mut dyn Iterator<Item = &i64>, what: &str| {
            xs.map(|&x| non_negative(what, x))
                .collect::<Result<Vec<u64>, _>>()
        };
        m.engram = Some(EngramMeta {
            encoding,
            storage: EngramStorage::Embedded,
            layer_ids: u64s(&ec.layer_ids),
            n_heads: ec.n_heads as u64,
            head_dim: ec.head_dim as u64,
            max_ngram_size: ec.max_ngram_size as u64,
            compressed_vocab_size: ec.compressed_vocab_size as u64,
            pad_id: non_negative("pad id", t.pad_id_compressed)?,
            token_map,
            primes: flat(&mut t.primes.iter().flatten().flatten(), "prime")?,
            offsets: flat(&mut t.offsets.iter().flatten(), "offset")?,
            multipliers: flat(&mut t.multipliers.iter().flatten(), "multiplier")?,
            rows: u64s(&ec.num_embeddings),
        });
    }
    Ok(m)
}
