//! MoE (spec §14): gate with bias-only selection, routed SwiGLU experts with the asymmetric
//! clamp, one shared expert, combine in f32.

use super::gemm::{gemm, WeightRows};
use super::ops::{gemm_f32, sigmoid, silu, softmax_in_place, softplus};
use crate::model::{ModelConfig, ScoreFunc};
use crate::num::{bf16_round, torch_cpu_topk_order};

/// Routing of `s` tokens: `[s, k]` weights and expert ids in topk order.
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    pub weights: Vec<f32>,
    pub indices: Vec<i64>,
}

/// Gate scores `[s, E]` (unbiased) from `x [s, dim]`.
pub fn gate_scores(cfg: &ModelConfig, x: &[f32], gate_w: &[f32]) -> Vec<f32> {
    let s = x.len() / cfg.dim;
    let mut scores = gemm_f32(x, s, cfg.dim, gate_w, cfg.n_routed_experts);
    for v in scores.iter_mut() {
        *v /= cfg.gate_temp;
    }
    match cfg.score_func {
        ScoreFunc::Softmax => scores
            .chunks_mut(cfg.n_routed_experts)
            .for_each(softmax_in_place),
        ScoreFunc::Sigmoid => scores.iter_mut().for_each(|v| *v = sigmoid(*v)),
        ScoreFunc::SqrtSoftplus => scores.iter_mut().for_each(|v| *v = softplus(*v).sqrt()),
    }
    scores
}

/// The `score + bias` values the expert selection ranks, `[s, E]`.
pub fn biased_scores(cfg: &ModelConfig, scores: &[f32], bias: &[f32]) -> Vec<f32> {
    scores
        .chunks(cfg.n_routed_experts)
        .flat_map(|row| row.iter().zip(bias).map(|(a, b)| a + b))
        .collect()
}

/// Select experts by `score + bias` (torch topk order, or lowest index first on ties when
/// `lowest_index_ties`), weight them by the unbiased scores. `pinned` replaces the selection
/// (counterfactual pinning) while keeping the weight rule.
pub fn route(
    cfg: &ModelConfig,
    scores: &[f32],
    bias: &[f32],
    pinned: Option<&[i64]>,
    lowest_index_ties: bool,
) -> Routing {
    let e = cfg.n_routed_experts;
    let k = cfg.n_activated_experts;
    let s = scores.len() / e;
    let mut weights = Vec::with_capacity(s * k);
    let mut indices = Vec::with_capacity(s * k);
    for t in 0..s {
        let row = &scores[t * e..(t + 1) * e];
        let sel: Vec<usize> = match pinned {
            Some(p) => p[t * k..(t + 1) * k]
                .iter()
                .map(|&i| i.clamp(0, e as i64 - 1) as usize)
                .collect(),
            None => {
                let biased: Vec<f32> = row.iter().zip(bias).map(|(a, b)| a + b).collect();
                if lowest_index_ties {
                    crate::oracle::faults::lowest_index_topk(&biased, k)
                } else {
                    torch_cpu_topk_order(&biased, k)
                }
            }
        };
        let mut w: Vec<f32> = sel.iter().map(|&i| row[i]).collect();
        if cfg.norm_topk_prob && k > 1 {
            let sum = w.iter().fold(0f32, |a, &v| a + v) + 1e-20f32;
            w.iter_mut().for_each(|v| *v /= sum);
        }
        w.iter_mut().for_each(|v| *v *= cfg.route_scale);
        weights.extend(w);
        indices.extend(sel.iter().map(|&i| i as i64));
    }
    Routing { weights, indices }
}

/// One SwiGLU expert on rows `x [n, dim]` with f32 weights (see [`expert_rows`]).
pub fn expert(
    cfg: &ModelConfig,
    x: &[f32],
    w1: &[f32],
    w2: &[f32],
    w3: &[f32],
    row_weights: Option<&[f32]>,
) -> Vec<f32> {
    use WeightRows::F32;
    expert_rows(cfg, x, F32(w1), F32(w2), F32(w3), row_weights)
}

/// One SwiGLU expert on rows `x [n, dim]`, optionally scaling each row's activation by a routing
/// weight before the down projection. Returns bf16 `[n, dim]`.
pub fn expert_rows(
    cfg: &ModelConfig,
    x: &[f32],
    w1: WeightRows<'_>,
    w2: WeightRows<'_>,
    w3: WeightRows<'_>,
    row_weights: Option<&[f32]>,
) -> Vec<f32> {
    let n = x.len() / cfg.dim;
    let inter = cfg.moe_inter_dim;
    let g = gemm(x, n, cfg.dim, w1, inter, true);
    let u = gemm(x, n, cfg.dim, w3, inter, true);
    let lim = cfg.swiglu_limit;
    let mut a = Vec::with_capacity(n * inter);
    for r in 0..n {
        for i in 0..inter {
            let mut gv = g[r * inter + i];
            let mut uv = u[r * inter + i];
            if lim > 0.0 {
                uv = uv.clamp(-lim, lim);
                gv = gv.min(lim);
            }
            let mut v = silu(gv) * uv;
            if let Some(w) = row_weights {
                v *= w[r];
            }
            a.push(bf16_round(v));
        }
    }
    gemm(&a, n, inter, w2, cfg.dim, true)
}
