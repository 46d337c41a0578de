//! The parameter list of a V4.1 graph, derived from its config by the reference's rules (spec
//! §4.2, §4.3): every name `model.named_parameters()` lists, in that order, with its shape,
//! storage dtype, filler init path and filler `(scale, offset)`. With it the filler source can
//! build any geometry (the real V4.1-Flash dims included) without a golden's `weights_meta`.
//! Also the multiply-add count of one block, for throughput figures.

use crate::golden::{StorageDtype, WeightKind, WeightMeta};
use crate::model::config::{bad, ConfigError, ModelConfig};

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

/// The name of one [`ParamGroup`]: a global parameter, one of layer `layer`'s parameters, or
/// the `count` routed experts of one layer (each `w1` and `w3` of the group's shape
/// `[inter, dim]`, `w2` its transpose). Names are static pieces, so walking the geometry
/// allocates nothing per parameter, and grouping keeps every walk linear in the layer count
/// whatever expert count a file claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamName {
    Global(&'static str),
    Layer { layer: usize, suffix: &'static str },
    Experts { layer: usize, count: usize },
}

/// The three projections of a routed expert, in `named_parameters()` order, and whether each
/// is stored transposed relative to the group's `[inter, dim]` shape.
pub const EXPERT_PROJECTIONS: [(&str, bool); 3] = [("w1", false), ("w2", true), ("w3", false)];

impl ParamName {
    /// The reference name of projection `proj` of expert `expert` in layer `layer`.
    pub fn expert_name(layer: usize, expert: usize, proj: &str) -> String {
        format!("layers.{layer}.ffn.experts.{expert}.{proj}.weight")
    }

    /// The reference name of a single parameter (`None` for an expert group).
    pub fn single_name(&self) -> Option<String> {
        match self {
            ParamName::Global(name) => Some((*name).to_string()),
            ParamName::Layer { layer, suffix } => Some(format!("layers.{layer}.{suffix}")),
            ParamName::Experts { .. } => None,
        }
    }

    /// A label for messages (`layers.3.ffn.experts.*` for a group).
    fn label(&self) -> String {
        match self {
            ParamName::Experts { layer, .. } => format!("layers.{layer}.ffn.experts.*"),
            other => other.single_name().unwrap_or_default(),
        }
    }
}

/// One parameter (or one layer's routed experts) with its torch shape, its element count
/// (checked: it fits `usize`) and its storage dtype.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamGroup {
    pub name: ParamName,
    pub shape: Vec<usize>,
    /// Elements of one parameter (of one expert projection for a group).
    pub n: usize,
    pub dtype: StorageDtype,
}

/// `a · b` for shape arithmetic, or a config error naming the field whose size overflows.
fn mul(field: &str, a: usize, b: usize) -> Result<usize, ConfigError> {
    a.checked_mul(b).ok_or_else(|| {
        bad(
            field,
            format!("{a} x {b} overflows usize (a shape no machine can hold)"),
        )
    })
}

/// Receives each parameter of the walk: name, torch shape, checked element count, dtype.
type Visit<'a> =
    dyn FnMut(ParamName, &[usize], usize, StorageDtype) -> Result<(), ConfigError> + 'a;

/// Checks a shape's element count and hands the parameter on.
fn emit(
    f: &mut Visit<'_>,
    name: ParamName,
    shape: &[usize],
    dtype: StorageDtype,
) -> Result<(), ConfigError> {
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let n = n.ok_or_else(|| {
        bad(
            "shape",
            format!(
                "parameter `{}` of shape {shape:?} has more elements than usize holds",
                name.label()
            ),
        )
    })?;
    f(name, shape, n, dtype)
}

/// Walks every parameter of the graph `cfg` describes, in `model.named_parameters()` order
/// (spec §4.3), each layer's routed experts as one group: `embed.weight`, layers
/// `0..n_layers`, `norm.weight`, `head.weight`. Per layer: the hc mixes, attention, compressor
/// (kv sources; `wgate` only at ratio > 1), indexer (index sources; `wk`/`k_norm` only where
/// the layer is also a kv source), gate, routed and shared experts, the engram (engram
/// layers), then the two block norms. Every shape product is checked, so a hostile geometry is
/// an error here and never a wrapped size.
///
/// The vision-only routing bias `gate.bias_vl` is not listed: `ModelConfig` has no vision
/// layers, and the reference registers it only when `vision_n_layers > 0`.
fn walk_params(cfg: &ModelConfig, f: &mut Visit<'_>) -> Result<(), ConfigError> {
    use StorageDtype::{Bf16, F8E4m3, F8E8m0, F32};
    let (d, hc, hd) = (cfg.dim, cfg.hc_mult, cfg.head_dim);
    let mix = mul("hc_mult", 2usize.saturating_add(hc), hc)?;
    let hc_d = mul("hc_mult", hc, d)?;
    let q_heads = mul("n_heads", cfg.n_heads, hd)?;
    let g = cfg.o_groups.max(1);
    let o_rank = mul("o_lora_rank", g, cfg.o_lora_rank)?;
    let (ih, ihd) = (cfg.index_n_heads, cfg.index_head_dim);
    let iq = mul("index_n_heads", ih, ihd)?;
    let (e, inter) = (cfg.n_routed_experts, cfg.moe_inter_dim);
    emit(
        f,
        ParamName::Global("embed.weight"),
        &[cfg.vocab_size, d],
        Bf16,
    )?;
    for l in 0..cfg.n_layers {
        let role = cfg.role(l);
        let mut layer = |suffix: &'static str, shape: &[usize], dtype: StorageDtype| {
            emit(f, ParamName::Layer { layer: l, suffix }, shape, dtype)
        };
        layer("hc_attn_fn", &[mix, hc_d], F32)?;
        layer("hc_ffn_fn", &[mix, hc_d], F32)?;
        layer("hc_attn_base", &[mix], F32)?;
        layer("hc_ffn_base", &[mix], F32)?;
        layer("hc_attn_scale", &[3], F32)?;
        layer("hc_ffn_scale", &[3], F32)?;
        layer("attn.attn_sink", &[cfg.n_heads], F32)?;
        layer("attn.wq_a.weight", &[cfg.q_lora_rank, d], Bf16)?;
        layer("attn.q_norm.weight", &[cfg.q_lora_rank], Bf16)?;
        layer("attn.wq_b.weight", &[q_heads, cfg.q_lora_rank], Bf16)?;
        layer("attn.wkv.weight", &[hd, d], Bf16)?;
        layer("attn.kv_norm.weight", &[hd], Bf16)?;
        layer("attn.wo_a.weight", &[o_rank, q_heads / g], Bf16)?;
        layer("attn.wo_b.weight", &[d, o_rank], Bf16)?;
        if role.ratio > 0 && role.kv_source {
            // The ratio > 1 compressor keeps its projections in f32 (it pools in f32).
            let proj = if role.ratio > 1 { F32 } else { Bf16 };
            layer("attn.compressor.norm.weight", &[hd], Bf16)?;
            layer("attn.compressor.wkv.weight", &[hd, d], proj)?;
            if role.ratio > 1 {
                layer("attn.compressor.wgate.weight", &[hd, d], F32)?;
            }
        }
        if role.ratio > 0 && role.index_source {
            layer("attn.indexer.wq_b.weight", &[iq, cfg.q_lora_rank], Bf16)?;
            layer("attn.indexer.weights_proj.weight", &[ih, d], Bf16)?;
            if role.kv_source {
                layer("attn.indexer.wk.weight", &[ihd, hd], Bf16)?;
                layer("attn.indexer.k_norm.weight", &[ihd], Bf16)?;
            }
        }
        layer("ffn.gate.weight", &[e, d], Bf16)?;
        layer("ffn.gate.bias", &[e], F32)?;
        let experts = ParamName::Experts { layer: l, count: e };
        emit(f, experts, &[inter, d], Bf16)?;
        let mut layer = |suffix: &'static str, shape: &[usize], dtype: StorageDtype| {
            emit(f, ParamName::Layer { layer: l, suffix }, shape, dtype)
        };
        layer("ffn.shared_experts.w1.weight", &[inter, d], Bf16)?;
        layer("ffn.shared_experts.w2.weight", &[d, inter], Bf16)?;
        layer("ffn.shared_experts.w3.weight", &[inter, d], Bf16)?;
        if let (Some(li), Some(ec)) = (role.engram_index, cfg.engram.as_ref()) {
            let rows = ec.num_embeddings.get(li).copied().unwrap_or(0);
            let ehd = ec.head_dim;
            let cols = mul(
                "engram_n_heads",
                ec.max_ngram_size.saturating_sub(1),
                ec.n_heads,
            )?;
            let wkv_out = mul("hc_mult", hc.saturating_add(1), d)?;
            let wkv_in = mul("engram_head_dim", cols, ehd)?;
            layer("engram.q_weight", &[hc, d], Bf16)?;
            layer("engram.k_weight", &[hc, d], Bf16)?;
            layer("engram.embed.weight", &[rows, ehd], F8E4m3)?;
            layer(
                "engram.embed.scale",
                &[rows, ehd / ENGRAM_SCALE_BLOCK],
                F8E8m0,
            )?;
            layer("engram.wkv.weight", &[wkv_out, wkv_in], Bf16)?;
        }
        layer("attn_norm.weight", &[d], Bf16)?;
        layer("ffn_norm.weight", &[d], Bf16)?;
    }
    emit(f, ParamName::Global("norm.weight"), &[d], Bf16)?;
    emit(
        f,
        ParamName::Global("head.weight"),
        &[cfg.vocab_size, d],
        F32,
    )?;
    Ok(())
}

/// Every parameter of the graph (see [`walk_params`]'s order), each layer's routed experts as
/// one group.
pub fn param_groups(cfg: &ModelConfig) -> Result<Vec<ParamGroup>, ConfigError> {
    let mut out = Vec::new();
    walk_params(cfg, &mut |name, shape, n, dtype| {
        out.push(ParamGroup {
            name,
            shape: shape.to_vec(),
            n,
            dtype,
        });
        Ok(())
    })?;
    Ok(out)
}

/// Total parameter elements of the graph, checked: an error when it does not fit `u64`. Walks
/// the geometry without allocating (config validation calls it).
pub fn parameter_elements(cfg: &ModelConfig) -> Result<u64, ConfigError> {
    let mut total = 0u64;
    walk_params(cfg, &mut |name, _, n, _| {
        let count = match name {
            ParamName::Experts { count, .. } => (count as u64).checked_mul(3),
            _ => Some(1u64),
        };
        total = count
            .and_then(|c| (n as u64).checked_mul(c))
            .and_then(|n| total.checked_add(n))
            .ok_or_else(|| {
                bad(
                    "n_layers / n_routed_experts",
                    "the parameter count overflows u64".to_string(),
                )
            })?;
        Ok(())
    })?;
    Ok(total)
}

/// The `weights_meta` entry of one parameter, by the filler rule. `ck` is left 0.0: the
/// checksum would need every parameter materialised (spec §3.5), which at real dims is
/// hundreds of GB. Goldens carry it; derived lists do not.
pub fn weight_meta(name: String, shape: &[usize], n: usize, dtype: StorageDtype) -> WeightMeta {
    let (scale, offset, kind) = filler_rule(&name, shape);
    WeightMeta {
        name,
        shape: shape.to_vec(),
        n,
        scale,
        offset,
        kind,
        dtype,
        ck: 0.0,
    }
}

/// Every parameter of the graph, experts expanded, in `model.named_parameters()` order (see
/// [`walk_params`]), as `weights_meta` entries (`ck` left 0.0, not computed).
pub fn param_list(cfg: &ModelConfig) -> Result<Vec<WeightMeta>, ConfigError> {
    let mut out = Vec::new();
    walk_params(cfg, &mut |name, shape, n, dtype| {
        match name {
            ParamName::Experts { layer, count } => {
                let transposed: Vec<usize> = shape.iter().rev().copied().collect();
                for ex in 0..count {
                    for (proj, t) in EXPERT_PROJECTIONS {
                        let full = ParamName::expert_name(layer, ex, proj);
                        let s = if t { &transposed[..] } else { shape };
                        out.push(weight_meta(full, s, n, dtype));
                    }
                }
            }
            single => {
                let full = single.single_name().unwrap_or_default();
                out.push(weight_meta(full, shape, n, dtype));
            }
        }
        Ok(())
    })?;
    Ok(out)
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
