//! The parameter list of a V4.1 graph, derived from its config by the reference's rules (spec
//! §4.2, §4.3): every name `model.named_parameters()` lists, in that order, with its shape,
//! storage dtype, filler init path and filler `(scale, offset)`. With it the filler source can
//! build any geometry (the real V4.1-Flash dims included) without a golden's `weights_meta`.
//! Also the multiply-add count of one block, for throughput figures.

use crate::golden::{StorageDtype, WeightKind, WeightMeta};
use crate::model::config::ModelConfig;

/// Elements per e8m0 scale of an engram table row (spec §3.2 `scale_block`).
pub const ENGRAM_SCALE_BLOCK: usize = 32;

/// `(scale, offset, kind)` of parameter `name` with shape `shape` by the reference's rule
/// (spec §4.2; the first match wins). Rank ≥ 2 tensors get `in_features^-0.5` with
/// `in_features = shape[-1]`.
pub fn filler_rule(name: &str, shape: &[usize]) -> (f64, f64, WeightKind) {
    let ends = |s: &str| name.ends_with(s);
    let engram = name.contains("engram");
    let second_last = name.rsplit('.').nth(1).unwrap_or("");
    if ends("embed.scale") {
        (1.0, 1.0, WeightKind::E8m0)
    } else if ends("embed.weight") && engram {
        (0.5, 0.0, WeightKind::Fp8)
    } else if name == "embed.weight" {
        (0.5, 0.0, WeightKind::F32)
    } else if ends("attn_sink") {
        (0.1, 0.0, WeightKind::F32)
    } else if ends("hc_attn_scale") || ends("hc_ffn_scale") {
        (0.05, 1.0, WeightKind::F32)
    } else if ends("hc_attn_base") || ends("hc_ffn_base") {
        (0.1, 0.0, WeightKind::F32)
    } else if (ends("q_weight") || ends("k_weight")) && engram {
        (0.05, 1.0, WeightKind::F32)
    } else if ends("gate.bias") || ends("gate.bias_vl") {
        (0.05, 0.0, WeightKind::F32)
    } else if second_last.contains("norm") || ends("norm.weight") {
        (0.05, 1.0, WeightKind::F32)
    } else if shape.len() >= 2 {
        let in_features = shape[shape.len() - 1] as f64;
        (in_features.powf(-0.5), 0.0, WeightKind::F32)
    } else {
        (0.05, 0.0, WeightKind::F32)
    }
}

/// Appends entries in order, applying the rule; `dtype` is the reference module's storage.
struct ListBuilder {
    out: Vec<WeightMeta>,
}

impl ListBuilder {
    fn push(&mut self, name: String, shape: Vec<usize>, dtype: StorageDtype) {
        let (scale, offset, kind) = filler_rule(&name, &shape);
        let n = shape.iter().product();
        self.out.push(WeightMeta {
            name,
            shape,
            n,
            scale,
            offset,
            kind,
            dtype,
            // Not computed: the checksum would need every parameter materialised (spec §3.5),
            // which at real dims is hundreds of GB. Goldens carry it; derived lists do not.
            ck: 0.0,
        });
    }
}

/// Every parameter of the graph `cfg` describes, in `model.named_parameters()` order (spec
/// §4.3): `embed.weight`, layers `0..n_layers`, `norm.weight`, `head.weight`. Per layer: the hc
/// mixes, attention, compressor (kv sources; `wgate` only at ratio > 1), indexer (index sources;
/// `wk`/`k_norm` only where the layer is also a kv source), gate, routed and shared experts, the
/// engram (engram layers), then the two block norms. `ck` is left 0.0 (not computed).
///
/// The vision-only routing bias `gate.bias_vl` is not listed: `ModelConfig` has no vision
/// layers, and the reference registers it only when `vision_n_layers > 0`.
pub fn param_list(cfg: &ModelConfig) -> Vec<WeightMeta> {
    use StorageDtype::{Bf16, F8E4m3, F8E8m0, F32};
    let (d, hc, hd) = (cfg.dim, cfg.hc_mult, cfg.head_dim);
    let mix = cfg.mix_hc();
    let mut b = ListBuilder { out: Vec::new() };
    b.push("embed.weight".into(), vec![cfg.vocab_size, d], Bf16);
    for l in 0..cfg.n_layers {
        let role = cfg.role(l);
        let p = |s: &str| format!("layers.{l}.{s}");
        for site in ["attn", "ffn"] {
            b.push(p(&format!("hc_{site}_fn")), vec![mix, hc * d], F32);
        }
        for site in ["attn", "ffn"] {
            b.push(p(&format!("hc_{site}_base")), vec![mix], F32);
        }
        for site in ["attn", "ffn"] {
            b.push(p(&format!("hc_{site}_scale")), vec![3], F32);
        }
        b.push(p("attn.attn_sink"), vec![cfg.n_heads], F32);
        b.push(p("attn.wq_a.weight"), vec![cfg.q_lora_rank, d], Bf16);
        b.push(p("attn.q_norm.weight"), vec![cfg.q_lora_rank], Bf16);
        b.push(
            p("attn.wq_b.weight"),
            vec![cfg.n_heads * hd, cfg.q_lora_rank],
            Bf16,
        );
        b.push(p("attn.wkv.weight"), vec![hd, d], Bf16);
        b.push(p("attn.kv_norm.weight"), vec![hd], Bf16);
        let g = cfg.o_groups;
        b.push(
            p("attn.wo_a.weight"),
            vec![g * cfg.o_lora_rank, cfg.n_heads * hd / g],
            Bf16,
        );
        b.push(p("attn.wo_b.weight"), vec![d, g * cfg.o_lora_rank], Bf16);
        if role.ratio > 0 && role.kv_source {
            // The ratio > 1 compressor keeps its projections in f32 (it pools in f32).
            let proj = if role.ratio > 1 { F32 } else { Bf16 };
            b.push(p("attn.compressor.norm.weight"), vec![hd], Bf16);
            b.push(p("attn.compressor.wkv.weight"), vec![hd, d], proj);
            if role.ratio > 1 {
                b.push(p("attn.compressor.wgate.weight"), vec![hd, d], F32);
            }
        }
        if role.ratio > 0 && role.index_source {
            let (ih, ihd) = (cfg.index_n_heads, cfg.index_head_dim);
            b.push(
                p("attn.indexer.wq_b.weight"),
                vec![ih * ihd, cfg.q_lora_rank],
                Bf16,
            );
            b.push(p("attn.indexer.weights_proj.weight"), vec![ih, d], Bf16);
            if role.kv_source {
                b.push(p("attn.indexer.wk.weight"), vec![ihd, hd], Bf16);
                b.push(p("attn.indexer.k_norm.weight"), vec![ihd], Bf16);
            }
        }
        let (e, inter) = (cfg.n_routed_experts, cfg.moe_inter_dim);
        b.push(p("ffn.gate.weight"), vec![e, d], Bf16);
        b.push(p("ffn.gate.bias"), vec![e], F32);
        for ex in 0..e {
            b.push(
                p(&format!("ffn.experts.{ex}.w1.weight")),
                vec![inter, d],
                Bf16,
            );
            b.push(
                p(&format!("ffn.experts.{ex}.w2.weight")),
                vec![d, inter],
                Bf16,
            );
            b.push(
                p(&format!("ffn.experts.{ex}.w3.weight")),
                vec![inter, d],
                Bf16,
            );
        }
        b.push(p("ffn.shared_experts.w1.weight"), vec![inter, d], Bf16);
        b.push(p("ffn.shared_experts.w2.weight"), vec![d, inter], Bf16);
        b.push(p("ffn.shared_experts.w3.weight"), vec![inter, d], Bf16);
        if let (Some(li), Some(ec)) = (role.engram_index, cfg.engram.as_ref()) {
            let rows = ec.num_embeddings.get(li).copied().unwrap_or(0);
            let ehd = ec.head_dim;
            b.push(p("engram.q_weight"), vec![hc, d], Bf16);
            b.push(p("engram.k_weight"), vec![hc, d], Bf16);
            b.push(p("engram.embed.weight"), vec![rows, ehd], F8E4m3);
            b.push(
                p("engram.embed.scale"),
                vec![rows, ehd / ENGRAM_SCALE_BLOCK],
                F8E8m0,
            );
            b.push(
                p("engram.wkv.weight"),
                vec![(hc + 1) * d, ec.n_hash_cols() * ehd],
                Bf16,
            );
        }
        b.push(p("attn_norm.weight"), vec![d], Bf16);
        b.push(p("ffn_norm.weight"), vec![d], Bf16);
    }
    b.push("norm.weight".into(), vec![d], Bf16);
    b.push("head.weight".into(), vec![cfg.vocab_size, d], F32);
    b.out
}

/// Multiply-adds of one `Block(l)` prefill of `s` tokens at position 0, by component. Counts
/// the matrix products the oracle performs (each routed token-expert pair is one row, so the
/// routed count does not depend on which experts the gate picks); element-wise work is not
/// counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockMacs {
    /// The two hc mixes: `s · mix · hc·dim` each.
    pub hc_mixes: u64,
    /// `wq_a`, `wq_b`, `wkv`.
    pub q_kv_proj: u64,
    /// Sparse attention: scores and weighted values over each query's index row.
    pub attn_core: u64,
    /// `wo_a` (grouped) and `wo_b`.
    pub o_proj: u64,
    /// Compressor `wkv` (+ `wgate` at ratio > 1).
    pub compressor: u64,
    /// Indexer: `wk` on the new latents, `wq_b`, `weights_proj`, and the index scores.
    pub indexer: u64,
    /// Router `gate.weight`.
    pub gate: u64,
    /// Routed experts: `s · top_k` rows of w1, w3, w2.
    pub routed_experts: u64,
    /// The shared expert: `s` rows of w1, w3, w2.
    pub shared_expert: u64,
}

impl BlockMacs {
    /// Sum over components.
    pub fn total(&self) -> u64 {
        self.hc_mixes
            + self.q_kv_proj
            + self.attn_core
            + self.o_proj
            + self.compressor
            + self.indexer
            + self.gate
            + self.routed_experts
            + self.shared_expert
    }
}

/// Multiply-adds of `Block(l)` for a prefill of `s` tokens at position 0 (see [`BlockMacs`]).
/// The compressed part assumes the layer publishes its own compressed rows (a kv source) or
/// reads as many as a kv source of the same ratio would have.
pub fn block_macs(cfg: &ModelConfig, l: usize, s: usize) -> BlockMacs {
    let u = |v: usize| v as u64;
    let (s64, d, hd, nh) = (u(s), u(cfg.dim), u(cfg.head_dim), u(cfg.n_heads));
    let (ql, hc, mix) = (u(cfg.q_lora_rank), u(cfg.hc_mult), u(cfg.mix_hc()));
    let role = cfg.role(l);
    let r = role.ratio;
    let compressed = s.checked_div(r).unwrap_or(0);
    let topk = if role.ratio > 0 {
        u(cfg.index_topk.min(compressed))
    } else {
        0
    };
    let window = u(s.min(cfg.window_size));
    let g = u(cfg.o_groups);
    let olr = u(cfg.o_lora_rank);
    let inter = u(cfg.moe_inter_dim);
    let expert_row = 3 * d * inter;
    let mut m = BlockMacs {
        hc_mixes: 2 * s64 * mix * hc * d,
        q_kv_proj: s64 * (d * ql + ql * nh * hd + d * hd),
        attn_core: 2 * s64 * nh * (window + topk) * hd,
        o_proj: s64 * (g * olr * (nh * hd / g) + g * olr * d),
        gate: s64 * d * u(cfg.n_routed_experts),
        routed_experts: s64 * u(cfg.n_activated_experts) * expert_row,
        shared_expert: s64 * expert_row,
        ..BlockMacs::default()
    };
    if r > 0 && role.kv_source {
        m.compressor = s64 * d * hd * if r > 1 { 2 } else { 1 };
    }
    if r > 0 && role.index_source {
        let (ih, ihd) = (u(cfg.index_n_heads), u(cfg.index_head_dim));
        let keys = if role.kv_source {
            u(compressed) * hd * ihd
        } else {
            0
        };
        m.indexer = keys + s64 * ql * ih * ihd + s64 * d * ih + s64 * u(compressed) * ih * ihd;
    }
    m
}
