//! `ModelConfig`: every size, ratio, source-layer list, window, top-k, hc and engram parameter
//! of a V4.1 graph. Built from a golden's fixture (and from GGUF metadata in `gguf`). Nothing in
//! the backends assumes the tiny geometry; everything reads this.

use crate::golden::Fixture;

/// A config that cannot drive the graph, with the field at fault.
/// A forward the reference cannot run (ModelConfig::check_forward).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    #[error("a forward needs at least one token")]
    NoTokens,
    #[error(
        "the reference decodes one token at a time after the first chunk \
         ({n_tokens} tokens at position {start_pos})"
    )]
    ChunkAfterStart { n_tokens: usize, start_pos: usize },
    #[error("positions up to {end} exceed max_seq_len {max_seq_len}")]
    PastMaxSeqLen { end: usize, max_seq_len: usize },
}

#[derive(Debug, thiserror::Error)]
#[error("model config: field `{field}`: {msg}")]
pub struct ConfigError {
    pub field: String,
    pub msg: String,
}

pub(crate) fn bad(field: &str, msg: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.to_string(),
        msg: msg.into(),
    }
}

/// `list` holds layer ids strictly ascending and each below `n_layers`.
fn ascending_layers(field: &str, list: &[usize], n_layers: usize) -> Result<(), ConfigError> {
    if let Some(&l) = list.iter().find(|&&l| l >= n_layers) {
        return Err(bad(
            field,
            format!("layer {l} is not below n_layers {n_layers}"),
        ));
    }
    if let Some(w) = list.windows(2).find(|w| w[1] <= w[0]) {
        return Err(bad(
            field,
            format!(
                "layer {} follows layer {}: the list must be strictly ascending (no layer twice)",
                w[1], w[0]
            ),
        ));
    }
    Ok(())
}

/// MoE gate score function (`ModelArgs.score_func`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreFunc {
    Softmax,
    Sigmoid,
    SqrtSoftplus,
}

/// Engram geometry (tables themselves live in `EngramTables` and the weight source).
#[derive(Debug, Clone, PartialEq)]
pub struct EngramConfig {
    pub layer_ids: Vec<usize>,
    pub max_ngram_size: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub compressed_vocab_size: usize,
    pub pad_id: i64,
    pub num_embeddings: Vec<usize>,
}

impl EngramConfig {
    /// Hash columns per engram layer: `(max_ngram - 1) * n_heads`.
    pub fn n_hash_cols(&self) -> usize {
        self.max_ngram_size.saturating_sub(1) * self.n_heads
    }

    /// Engram layer `l`'s index among the engram layers and its `[s, cols]` hash ids, taken from
    /// the forward's `[s, n_engram_layers, cols]` hashes.
    pub fn layer_hash_ids(
        &self,
        l: usize,
        s: usize,
        hashes: &[i64],
    ) -> Result<(usize, Vec<i64>), &'static str> {
        let li = self
            .layer_ids
            .iter()
            .position(|&x| x == l)
            .ok_or("not an engram layer")?;
        let (n_eng, cols) = (self.layer_ids.len(), self.n_hash_cols());
        if hashes.len() != s * n_eng * cols {
            return Err("EngramHash must run before Engram");
        }
        let ids = (0..s)
            .flat_map(|t| hashes[(t * n_eng + li) * cols..(t * n_eng + li + 1) * cols].to_vec())
            .collect();
        Ok((li, ids))
    }
}

/// What one layer does in the shared compressed-attention scheme (spec §12.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerRole {
    pub ratio: usize,
    pub kv_source: bool,
    pub index_source: bool,
    pub candidate_source: bool,
    pub candidate_consumer: bool,
    /// Index of this layer in the engram layer list, if it carries an engram.
    pub engram_index: Option<usize>,
}

/// The geometry and constants of one V4.1 graph.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
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
    pub n_activated_experts: usize,
    pub score_func: ScoreFunc,
    pub route_scale: f32,
    pub norm_topk_prob: bool,
    pub swiglu_limit: f32,
    pub window_size: usize,
    pub compress_ratios: Vec<usize>,
    pub kv_source_layers: Vec<usize>,
    pub index_source_layers: Vec<usize>,
    pub candidate_source_layer: Option<usize>,
    pub candidate_topk_blocks: usize,
    pub candidate_block_size: usize,
    pub index_n_heads: usize,
    pub index_head_dim: usize,
    pub index_topk: usize,
    pub hc_mult: usize,
    pub hc_sinkhorn_iters: usize,
    pub hc_eps: f32,
    pub engram: Option<EngramConfig>,
    pub rope_theta: f64,
    pub compress_rope_theta: f64,
    pub rope_factor: f64,
    pub original_seq_len: usize,
    pub beta_fast: f64,
    pub beta_slow: f64,
    pub norm_eps: f32,
    pub gate_temp: f32,
    pub max_seq_len: usize,
}

impl ModelConfig {
    /// Build and validate the config of a golden's fixture.
    pub fn from_fixture(f: &Fixture) -> Result<ModelConfig, ConfigError> {
        let score_func = match f.score_func.as_str() {
            "softmax" => ScoreFunc::Softmax,
            "sigmoid" => ScoreFunc::Sigmoid,
            "sqrtsoftplus" => ScoreFunc::SqrtSoftplus,
            other => {
                return Err(bad(
                    "score_func",
                    format!("expected softmax, sigmoid or sqrtsoftplus, got {other:?}"),
                ))
            }
        };
        let candidate_source_layer = if f.candidate_source_layer < 0 {
            None
        } else {
            Some(f.candidate_source_layer as usize)
        };
        let engram = if f.engram_layer_ids.is_empty() {
            None
        } else {
            Some(EngramConfig {
                layer_ids: f.engram_layer_ids.clone(),
                max_ngram_size: f.engram_max_ngram_size,
                n_heads: f.engram_n_heads,
                head_dim: f.engram_head_dim,
                vocab_size: f.engram_vocab_size,
                compressed_vocab_size: f.engram_compressed_vocab_size,
                pad_id: f.engram_pad_id,
                num_embeddings: f.engram_num_embeddings.clone(),
            })
        };
        if f.n_shared_experts != 1 {
            return Err(bad(
                "n_shared_experts",
                format!("the reference asserts 1, got {}", f.n_shared_experts),
            ));
        }
        let cfg = ModelConfig {
            vocab_size: f.vocab_size,
            dim: f.dim,
            n_layers: f.n_layers,
            n_heads: f.n_heads,
            head_dim: f.head_dim,
            rope_head_dim: f.rope_head_dim,
            q_lora_rank: f.q_lora_rank,
            o_lora_rank: f.o_lora_rank,
            o_groups: f.o_groups,
            moe_inter_dim: f.moe_inter_dim,
            n_routed_experts: f.n_routed_experts,
            n_activated_experts: f.n_activated_experts,
            score_func,
            route_scale: f.route_scale as f32,
            norm_topk_prob: f.norm_topk_prob,
            swiglu_limit: f.swiglu_limit as f32,
            window_size: f.window_size,
            compress_ratios: f.compress_ratios.clone(),
            kv_source_layers: f.kv_source_layers.clone(),
            index_source_layers: f.index_source_layers.clone(),
            candidate_source_layer,
            candidate_topk_blocks: f.candidate_topk_blocks,
            candidate_block_size: f.candidate_block_size,
            index_n_heads: f.index_n_heads,
            index_head_dim: f.index_head_dim,
            index_topk: f.index_topk,
            hc_mult: f.hc_mult,
            hc_sinkhorn_iters: f.hc_sinkhorn_iters,
            hc_eps: f.hc_eps as f32,
            engram,
            rope_theta: f.rope_theta,
            compress_rope_theta: f.compress_rope_theta,
            rope_factor: f.rope_factor,
            original_seq_len: f.original_seq_len,
            beta_fast: f.beta_fast,
            beta_slow: f.beta_slow,
            norm_eps: f.norm_eps as f32,
            gate_temp: f.gate_temp as f32,
            max_seq_len: f.max_seq_len,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The real DeepSeek-V4.1-Flash geometry (gguf spec §1.1, from the released `config.json`),
    /// engram included. Fields the spec does not list take the reference defaults: `gate_temp`
    /// 1.0. `max_seq_len` is `max_position_embeddings` (1,048,576); the oracle allocates nothing
    /// per position up front, so it costs nothing until positions are used. The engram hash
    /// tables' token map is not part of the config (the GGUF ships it).
    pub fn deepseek_v41_flash() -> ModelConfig {
        let n_layers = 40;
        let mut compress_ratios = vec![0, 0];
        compress_ratios.extend(std::iter::repeat_n(2, 18));
        compress_ratios.extend(std::iter::repeat_n(1, 20));
        ModelConfig {
            vocab_size: 129_280,
            dim: 5120,
            n_layers,
            n_heads: 64,
            head_dim: 512,
            rope_head_dim: 64,
            q_lora_rank: 1280,
            o_lora_rank: 1024,
            o_groups: 8,
            moe_inter_dim: 2304,
            n_routed_experts: 384,
            n_activated_experts: 6,
            score_func: ScoreFunc::SqrtSoftplus,
            route_scale: 1.5,
            norm_topk_prob: true,
            swiglu_limit: 10.0,
            window_size: 128,
            compress_ratios,
            kv_source_layers: vec![2, 8, 14, 20],
            index_source_layers: vec![2, 8, 14, 20, 24, 28, 32, 36],
            candidate_source_layer: Some(20),
            candidate_topk_blocks: 2048,
            candidate_block_size: 8,
            index_n_heads: 32,
            index_head_dim: 128,
            index_topk: 512,
            hc_mult: 4,
            hc_sinkhorn_iters: 20,
            hc_eps: 1e-6,
            engram: Some(EngramConfig {
                layer_ids: vec![1, 14],
                max_ngram_size: 4,
                n_heads: 8,
                head_dim: 256,
                vocab_size: 16_000_000,
                compressed_vocab_size: 99_092,
                pad_id: 2,
                num_embeddings: vec![384_006_168, 384_016_682],
            }),
            rope_theta: 10_000.0,
            compress_rope_theta: 160_000.0,
            rope_factor: 16.0,
            original_seq_len: 65_536,
            beta_fast: 32.0,
            beta_slow: 1.0,
            norm_eps: 1e-20,
            gate_temp: 1.0,
            max_seq_len: 1 << 20,
        }
    }

    /// Check the relations the graph relies on, so a hostile or odd config fails here and not
    /// with an out-of-bounds index deep inside a step.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let pos = |field: &str, v: usize| {
            if v == 0 {
                Err(bad(field, "must be > 0"))
            } else {
                Ok(())
            }
        };
        pos("vocab_size", self.vocab_size)?;
        pos("dim", self.dim)?;
        pos("n_layers", self.n_layers)?;
        pos("n_heads", self.n_heads)?;
        pos("head_dim", self.head_dim)?;
        pos("q_lora_rank", self.q_lora_rank)?;
        pos("o_lora_rank", self.o_lora_rank)?;
        pos("o_groups", self.o_groups)?;
        pos("moe_inter_dim", self.moe_inter_dim)?;
        pos("n_routed_experts", self.n_routed_experts)?;
        pos("n_activated_experts", self.n_activated_experts)?;
        pos("window_size", self.window_size)?;
        pos("hc_mult", self.hc_mult)?;
        pos("hc_sinkhorn_iters", self.hc_sinkhorn_iters)?;
        pos("max_seq_len", self.max_seq_len)?;
        if self.rope_head_dim % 2 != 0 || self.rope_head_dim > self.head_dim {
            return Err(bad("rope_head_dim", "must be even and at most head_dim"));
        }
        if self.head_dim % 32 != 0 {
            return Err(bad(
                "head_dim",
                "must be a multiple of 32 (fp8 act_quant block)",
            ));
        }
        if self.n_heads % self.o_groups != 0 {
            return Err(bad("o_groups", "must divide n_heads"));
        }
        if self.n_activated_experts > self.n_routed_experts {
            return Err(bad(
                "n_activated_experts",
                "must be at most n_routed_experts",
            ));
        }
        if self.compress_ratios.len() < self.n_layers {
            return Err(bad(
                "compress_ratios",
                format!(
                    "needs one entry per layer ({}), got {}",
                    self.n_layers,
                    self.compress_ratios.len()
                ),
            ));
        }
        // Strictly ascending lists: no duplicates, at most n_layers entries, and `role()` can
        // look a layer up by binary search (validation and every per-layer lookup stay linear
        // or near-linear in the layer count however long a file makes the lists).
        for (field, list) in [
            ("kv_source_layers", &self.kv_source_layers),
            ("index_source_layers", &self.index_source_layers),
        ] {
            ascending_layers(field, list, self.n_layers)?;
            if let Some(&l) = list.iter().find(|&&l| self.compress_ratios[l] == 0) {
                return Err(bad(field, format!("layer {l} has compress ratio 0")));
            }
        }
        let first_kv_source = self.kv_source_layers.first().copied();
        let first_index_source = self.index_source_layers.first().copied();
        for l in 0..self.n_layers {
            let r = self.compress_ratios[l];
            if r > 0 && self.max_seq_len % r != 0 {
                return Err(bad(
                    "compress_ratios",
                    format!("layer {l}: ratio {r} must divide max_seq_len"),
                ));
            }
            // A consumer reads the shared slots; some earlier kv source must exist (a source
            // itself is fine: the lists are ascending, so "the first source is at or before l"
            // is the whole condition).
            if r > 0 && first_kv_source.is_none_or(|s| s > l) {
                return Err(bad(
                    "kv_source_layers",
                    format!("layer {l} (ratio {r}) has no earlier kv source"),
                ));
            }
            if r > 0 && first_index_source.is_none_or(|s| s > l) {
                return Err(bad(
                    "index_source_layers",
                    format!("layer {l} (ratio {r}) has no earlier index source"),
                ));
            }
        }
        if let Some(&l) = self
            .index_source_layers
            .iter()
            .find(|&&l| first_kv_source.is_none_or(|s| s > l))
        {
            return Err(bad(
                "index_source_layers",
                format!("layer {l} needs index keys from an earlier kv source"),
            ));
        }
        if let Some(c) = self.candidate_source_layer {
            if c >= self.n_layers || self.index_source_layers.binary_search(&c).is_err() {
                return Err(bad(
                    "candidate_source_layer",
                    format!("layer {c} must be an index source"),
                ));
            }
            pos("candidate_topk_blocks", self.candidate_topk_blocks)?;
            // Every later index source masks its scores with the published mask, which only fits
            // scores over the same compressed positions.
            for &l in self.index_source_layers.iter().filter(|&&l| l > c) {
                if self.compress_ratios[l] != self.compress_ratios[c] {
                    return Err(bad(
                        "candidate_source_layer",
                        format!(
                            "index source {l} (ratio {}) consumes the candidate mask of layer {c} (ratio {}); the ratios must match",
                            self.compress_ratios[l], self.compress_ratios[c]
                        ),
                    ));
                }
            }
            pos("candidate_block_size", self.candidate_block_size)?;
        }
        if !self.index_source_layers.is_empty() {
            pos("index_n_heads", self.index_n_heads)?;
            pos("index_topk", self.index_topk)?;
            if self.index_head_dim % 32 != 0 || self.index_head_dim < self.rope_head_dim {
                return Err(bad(
                    "index_head_dim",
                    "must be a multiple of 32 and at least rope_head_dim",
                ));
            }
        }
        if let Some(e) = &self.engram {
            if e.max_ngram_size < 2 {
                return Err(bad("engram_max_ngram_size", "must be at least 2"));
            }
            pos("engram_n_heads", e.n_heads)?;
            if e.head_dim == 0 || e.head_dim % 32 != 0 {
                return Err(bad(
                    "engram_head_dim",
                    "must be a positive multiple of 32 (fp8 scale block)",
                ));
            }
            if e.num_embeddings.len() != e.layer_ids.len() {
                return Err(bad(
                    "engram_num_embeddings",
                    "needs one entry per engram layer",
                ));
            }
            ascending_layers("engram_layer_ids", &e.layer_ids, self.n_layers)?;
        }
        crate::model::params::parameter_elements(self)?;
        Ok(())
    }

    /// Role of layer `l` in the shared compressed-attention scheme (the layer lists are
    /// ascending once [`validate`](Self::validate) passed, so each lookup is a binary search).
    pub fn role(&self, l: usize) -> LayerRole {
        let ratio = self.compress_ratios.get(l).copied().unwrap_or(0);
        let candidate_source = self.candidate_source_layer == Some(l);
        LayerRole {
            ratio,
            kv_source: self.kv_source_layers.binary_search(&l).is_ok(),
            index_source: self.index_source_layers.binary_search(&l).is_ok(),
            candidate_source,
            candidate_consumer: matches!(self.candidate_source_layer, Some(c) if c < l),
            engram_index: self
                .engram
                .as_ref()
                .and_then(|e| e.layer_ids.binary_search(&l).ok()),
        }
    }

    /// Layers after whose block the shared slots are captured: the union of kv, index and
    /// candidate sources (spec §16.1).
    pub fn is_shared_capture_layer(&self, l: usize) -> bool {
        let r = self.role(l);
        r.kv_source || r.index_source || r.candidate_source
    }

    /// The steps of one regime's forward.
    pub fn steps(&self) -> Vec<crate::model::Step> {
        let engram_layers = self
            .engram
            .as_ref()
            .map(|e| e.layer_ids.as_slice())
            .unwrap_or(&[]);
        crate::model::Step::sequence(self.n_layers, engram_layers)
    }

    /// Whether a forward of `n_tokens` at `start_pos` is one the reference can run: at least one
    /// token, one token at a time after the first chunk, and within `max_seq_len`.
    pub fn check_forward(&self, n_tokens: usize, start_pos: usize) -> Result<(), ForwardError> {
        if n_tokens == 0 {
            return Err(ForwardError::NoTokens);
        }
        if start_pos > 0 && n_tokens != 1 {
            return Err(ForwardError::ChunkAfterStart {
                n_tokens,
                start_pos,
            });
        }
        let end = start_pos.saturating_add(n_tokens);
        if end > self.max_seq_len {
            return Err(ForwardError::PastMaxSeqLen {
                end,
                max_seq_len: self.max_seq_len,
            });
        }
        Ok(())
    }

    /// Width of the hc mix vector: `(2 + hc) * hc`.
    pub fn mix_hc(&self) -> usize {
        (2 + self.hc_mult) * self.hc_mult
    }
}
