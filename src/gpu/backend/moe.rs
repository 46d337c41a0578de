//! The MoE (spec §14): gate scores and routing (on the GPU, or on the host under the torch-CPU
//! rule), the routed experts gathered per expert, the shared expert, and their sum.

use super::{berr, GpuBackend};
use crate::gpu::exec::Tensor;
use crate::gpu::gemm::linear;
use crate::gpu::moe;
use crate::gpu::rows::{add_round, gather_rows, scatter_add};
use crate::model::hints::{adopt_near_ties, NEAR_TIE_PREFIX};
use crate::model::{BackendError, Capture, CaptureDtype, Step};
use crate::num::torch_cpu_topk_order;

impl GpuBackend {
    pub(super) fn moe(&mut self, step: Step, l: usize, x: &Tensor) -> Result<Tensor, BackendError> {
        let cfg = self.cfg.clone();
        let (d, ne, k, inter) = (
            cfg.dim,
            cfg.n_routed_experts,
            cfg.n_activated_experts,
            cfg.moe_inter_dim,
        );
        let s = self.s();
        let p = format!("layers.{l}.ffn");
        let e = berr(step);
        let gate_w = self.w(step, &format!("{p}.gate.weight"), &[ne, d])?;
        let bias = self.v(step, &format!("{p}.gate.bias"), &[ne])?;
        let logits = linear(&mut self.gpu, x, s, &gate_w, false).map_err(&e)?;
        let scores = moe::gate_scores(&mut self.gpu, &cfg, &logits, s).map_err(&e)?;
        let pinned = self
            .pins
            .moe_indices
            .get(&l)
            .filter(|v| v.len() == s * k)
            .map(|v| v.iter().map(|&i| i as f32).collect::<Vec<f32>>());
        let given = if pinned.is_some() {
            pinned
        } else if self.opts.reference_ties {
            let sc = self.gpu.read_all(&scores).map_err(&e)?;
            let b = self.host_w(step, &format!("{p}.gate.bias"), &[ne])?;
            let biased = biased_scores(&sc, &b);
            let mut sel = host_selection(&biased, ne, k);
            if let Some(hint) = self.hints.moe_indices.get(&l).filter(|h| h.len() == s * k) {
                let mut own: Vec<i64> = sel.iter().map(|&x| x as i64).collect();
                let tol = self.hints.moe_score_tol;
                let rows = adopt_near_ties(&mut own, hint, &biased, ne, k, tol);
                if !rows.is_empty() {
                    sel = own.iter().map(|&x| x as f32).collect();
                    self.cap_host(Capture::int(
                        format!("{NEAR_TIE_PREFIX}L{l}.moe_indices"),
                        vec![rows.len()],
                        rows.iter().map(|&r| r as i64).collect(),
                    ));
                }
            }
            Some(sel)
        } else {
            None
        };
        let routing =
            moe::route(&mut self.gpu, &cfg, &scores, &bias, s, given.as_deref()).map_err(&e)?;
        if self.opts.tie_audit && given.is_none() {
            let sc = self.gpu.read_all(&scores).map_err(&e)?;
            let mine = self.gpu.read(&routing, s * k, s * k).map_err(&e)?;
            let b = self.host_w(step, &format!("{p}.gate.bias"), &[ne])?;
            let host = host_selection(&biased_scores(&sc, &b), ne, k);
            let rows = host
                .chunks(k.max(1))
                .zip(mine.chunks(k.max(1)))
                .filter(|(h, m)| h != m)
                .count() as i64;
            self.cap_host(Capture::int(
                format!("tieflip.L{l}.moe_indices"),
                vec![1],
                vec![rows],
            ));
        }
        self.cap(
            step,
            format!("L{l}.moe_weights"),
            vec![s, k],
            CaptureDtype::F32,
            &routing,
            0,
        )?;
        self.cap(
            step,
            format!("L{l}.moe_indices"),
            vec![s, k],
            CaptureDtype::Int,
            &routing,
            s * k,
        )?;
        // The host needs the routing to pick expert weights (as a real engine's dispatcher does).
        let ids = self.gpu.read(&routing, s * k, s * k).map_err(&e)?;
        let y = self.gpu.zeros("moe y", s * d).map_err(&e)?;
        for ex in 0..ne {
            let mut toks = Vec::new();
            let mut slots = Vec::new();
            for t in 0..s {
                for j in 0..k {
                    if ids[t * k + j] == ex as f32 {
                        toks.push(t as f32);
                        slots.push((t * k + j) as f32);
                    }
                }
            }
            if toks.is_empty() {
                continue;
            }
            let n = toks.len();
            let tok_t = self.gpu.upload("expert rows", &toks).map_err(&e)?;
            let slot_t = self.gpu.upload("expert slots", &slots).map_err(&e)?;
            let xe = gather_rows(&mut self.gpu, x, d, &tok_t).map_err(&e)?;
            let we = gather_rows(&mut self.gpu, &routing, 1, &slot_t).map_err(&e)?;
            let ep = format!("{p}.experts.{ex}");
            let w1 = self.w_once(step, &format!("{ep}.w1.weight"), &[inter, d])?;
            let w3 = self.w_once(step, &format!("{ep}.w3.weight"), &[inter, d])?;
            let w2 = self.w_once(step, &format!("{ep}.w2.weight"), &[d, inter])?;
            let g = linear(&mut self.gpu, &xe, n, &w1, true).map_err(&e)?;
            let u = linear(&mut self.gpu, &xe, n, &w3, true).map_err(&e)?;
            let a = moe::swiglu(&mut self.gpu, &cfg, &g, &u, Some(&we), n).map_err(&e)?;
            let ye = linear(&mut self.gpu, &a, n, &w2, true).map_err(&e)?;
            scatter_add(&mut self.gpu, &ye, d, &tok_t, &y).map_err(&e)?;
            // Release this expert's weights once its work is submitted (real dims: ~140 MB each).
            self.gpu.flush();
        }
        let sp = format!("{p}.shared_experts");
        let w1 = self.w(step, &format!("{sp}.w1.weight"), &[inter, d])?;
        let w3 = self.w(step, &format!("{sp}.w3.weight"), &[inter, d])?;
        let w2 = self.w(step, &format!("{sp}.w2.weight"), &[d, inter])?;
        let g = linear(&mut self.gpu, x, s, &w1, true).map_err(&e)?;
        let u = linear(&mut self.gpu, x, s, &w3, true).map_err(&e)?;
        let a = moe::swiglu(&mut self.gpu, &cfg, &g, &u, None, s).map_err(&e)?;
        let ys = linear(&mut self.gpu, &a, s, &w2, true).map_err(&e)?;
        add_round(&mut self.gpu, &y, &ys).map_err(&e)
    }
}

/// Every row's gate scores plus the routing bias: what the selection ranks.
fn biased_scores(scores: &[f32], bias: &[f32]) -> Vec<f32> {
    scores
        .chunks(bias.len().max(1))
        .flat_map(|row| row.iter().zip(bias).map(|(a, b)| a + b))
        .collect()
}

/// The torch-CPU expert selection on the host: per token, the top-`k` of its `ne` biased scores
/// in topk order, as exact f32 ids (`--reference-ties` and the tie audit).
fn host_selection(biased: &[f32], ne: usize, k: usize) -> Vec<f32> {
    let mut ids = Vec::with_capacity(biased.len() / ne.max(1) * k);
    for row in biased.chunks(ne.max(1)) {
        ids.extend(torch_cpu_topk_order(row, k).into_iter().map(|i| i as f32));
    }
    ids
}
