//! MoE kernels (`shaders/moe.wgsl`, spec §14): gate scores, routing and the SwiGLU activation.
//! Routing tie rule on the GPU: descending biased score, equal scores by lower expert id.

use super::exec::{groups_for, Access, Family, Gpu, Tensor};
use super::provenance::WriteMap;
use super::{guard, GpuError};
use crate::model::{ModelConfig, ScoreFunc};

/// `shaders/moe.wgsl`: uniform, a, b, c (read), out (read-write).
pub static FAMILY: Family = Family {
    name: "moe",
    source: include_str!("../../shaders/moe.wgsl"),
    entries: &["gate_scores", "route", "swiglu"],
    bindings: &[
        Access::Uniform,
        Access::Read,
        Access::Read,
        Access::Read,
        Access::ReadWrite,
    ],
};

/// Most experts per token the routing lane holds.
pub const MAX_K: usize = 64;

/// The WGSL `Params` of `moe.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub s: u32,
    pub e: u32,
    pub k: u32,
    pub inter: u32,
    pub score_func: u32,
    pub given: u32,
    pub norm_topk: u32,
    pub zero: u32,
    pub gate_temp: f32,
    pub route_scale: f32,
    pub swiglu_limit: f32,
    pub weighted: u32,
}

fn base(cfg: &ModelConfig, s: usize) -> Params {
    Params {
        s: s as u32,
        e: cfg.n_routed_experts as u32,
        k: cfg.n_activated_experts as u32,
        inter: cfg.moe_inter_dim as u32,
        score_func: match cfg.score_func {
            ScoreFunc::Softmax => 0,
            ScoreFunc::Sigmoid => 1,
            ScoreFunc::SqrtSoftplus => 2,
        },
        norm_topk: (cfg.norm_topk_prob && cfg.n_activated_experts > 1) as u32,
        gate_temp: cfg.gate_temp,
        route_scale: cfg.route_scale,
        swiglu_limit: cfg.swiglu_limit,
        ..Default::default()
    }
}

/// The most loop back-edges one `gate_scores` lane (a token) takes: at most three passes over
/// the `e` experts (the softmax).
pub fn gate_scores_loop_count(e: usize) -> u64 {
    3 * (e as u64 + 1)
}

/// The most loop back-edges one `route` lane (a token) takes: for the j-th of `k` picks, every
/// one of the `e` experts against the j taken before it, then the weights.
pub fn route_loop_count(e: usize, k: usize) -> u64 {
    let (e, k) = (e as u64, k as u64);
    e * k * (k + 1) / 2 + (e + 1) * k + 3 * k + 1
}

/// Gate scores `[s, e]` from the GEMM-f32 logits.
pub fn gate_scores(
    gpu: &mut Gpu,
    cfg: &ModelConfig,
    logits: &Tensor,
    s: usize,
) -> Result<Tensor, GpuError> {
    if logits.len != s * cfg.n_routed_experts {
        return Err(guard("gate_scores", "shape"));
    }
    let ne = cfg.n_routed_experts;
    gpu.check_loops(&FAMILY, "gate_scores", gate_scores_loop_count(ne), || {
        format!("{ne} experts")
    })?;
    let out = gpu.zeros("gate scores", logits.len)?;
    let d = gpu.zeros("unused", 1)?;
    let p = base(cfg, s);
    gpu.dispatch(
        &FAMILY,
        "gate_scores",
        &p,
        &[logits, &d, &d, &out],
        (groups_for(s), 1, 1),
        WriteMap::RowThreads {
            offset: 0,
            ld: ne,
            width: ne,
            rows: s,
            period: s,
        },
    )?;
    Ok(out)
}

/// Routing `[s, k]` weights then `[s, k]` expert ids (exact f32) in one tensor. With `given`
/// ids (host top-k under `--reference-ties`, or pins), only the weights are computed.
pub fn route(
    gpu: &mut Gpu,
    cfg: &ModelConfig,
    scores: &Tensor,
    bias: &Tensor,
    s: usize,
    given: Option<&[f32]>,
) -> Result<Tensor, GpuError> {
    let (e, k) = (cfg.n_routed_experts, cfg.n_activated_experts);
    if k > MAX_K || k > e || scores.len != s * e || bias.len != e {
        return Err(guard("route", "shape or k"));
    }
    gpu.check_loops(&FAMILY, "route", route_loop_count(e, k), || {
        format!("top-{k} of {e} experts")
    })?;
    let out = gpu.zeros("routing", 2 * s * k)?;
    if let Some(ids) = given {
        if ids.len() != s * k || ids.iter().any(|&i| !(0.0..e as f32).contains(&i)) {
            return Err(guard("route", "given expert ids"));
        }
        gpu.write(&out, s * k, ids)?;
    }
    let d = gpu.zeros("unused", 1)?;
    let mut p = base(cfg, s);
    p.given = given.is_some() as u32;
    // Thread t writes row t of the weights `[s, k]` and of the ids after them.
    let k = cfg.n_activated_experts;
    let map = WriteMap::RowThreads {
        offset: 0,
        ld: k,
        width: k,
        rows: 2 * s,
        period: s,
    };
    gpu.dispatch(
        &FAMILY,
        "route",
        &p,
        &[scores, bias, &d, &out],
        (groups_for(s), 1, 1),
        map,
    )?;
    Ok(out)
}

/// `bf16(silu(min(g, lim)) · clamp(u) [· w])` `[n, inter]`.
pub fn swiglu(
    gpu: &mut Gpu,
    cfg: &ModelConfig,
    g: &Tensor,
    u: &Tensor,
    row_w: Option<&Tensor>,
    n: usize,
) -> Result<Tensor, GpuError> {
    let inter = cfg.moe_inter_dim;
    if g.len != n * inter || u.len != n * inter || row_w.is_some_and(|w| w.len != n) {
        return Err(guard("swiglu", "shape"));
    }
    let out = gpu.zeros("swiglu", n * inter)?;
    let d = gpu.zeros("unused", 1)?;
    let mut p = base(cfg, n);
    p.weighted = row_w.is_some() as u32;
    let w = row_w.unwrap_or(&d);
    gpu.dispatch(
        &FAMILY,
        "swiglu",
        &p,
        &[g, u, w, &out],
        (groups_for(inter), n as u32, 1),
        WriteMap::Grid {
            offset: 0,
            ld: inter,
            width: inter,
            rows: n,
            cols_per_thread: 1,
            rows_per_thread: 1,
        },
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn naga_validates_moe() {
        assert_eq!(super::super::exec::validate_family(&super::FAMILY), Ok(3));
    }
}
