//! The [`ModelConfig`] and engram tables a deepseek41 GGUF's metadata describes, with a note
//! for every value derived or defaulted rather than read.

use super::*;

pub(super) fn usize_of(v: u64) -> usize {
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
