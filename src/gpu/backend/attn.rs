//! Attention (spec §11) on the GPU: q and kv projections, RoPE, the window ring, the window and
//! compressed index rows, sparse attention with the sink, the inverse RoPE and the grouped
//! output projection (mirrors `oracle/attn.rs`).

use super::{berr, invalid, GpuBackend, F32_EXACT_INT};
use crate::gpu::attn::{idx_concat, ring_write, sparse_attn, window_idx};
use crate::gpu::exec::Tensor;
use crate::gpu::gemm::{gemm_into, linear, XView};
use crate::gpu::inject::InjectionKind;
use crate::gpu::quant::{quant, QuantMode};
use crate::gpu::rope::{rope, Positions};
use crate::gpu::rows::rmsnorm;
use crate::model::{BackendError, CaptureDtype, Step};

impl GpuBackend {
    pub(super) fn attention(
        &mut self,
        step: Step,
        l: usize,
        x: &Tensor,
    ) -> Result<Tensor, BackendError> {
        let cfg = self.cfg.clone();
        let (s, d, nh, hd) = (self.s(), cfg.dim, cfg.n_heads, cfg.head_dim);
        let sp = self.sp;
        let p = format!("layers.{l}.attn");
        let role = cfg.role(l);
        let eps = cfg.norm_eps;
        let e = berr(step);
        let wq_a = self.w(step, &format!("{p}.wq_a.weight"), &[cfg.q_lora_rank, d])?;
        let q_norm = self.v(step, &format!("{p}.q_norm.weight"), &[cfg.q_lora_rank])?;
        let qa = linear(&mut self.gpu, x, s, &wq_a, true).map_err(&e)?;
        let qr = rmsnorm(&mut self.gpu, &qa, s, &q_norm, eps).map_err(&e)?;
        let wq_b = self.w(
            step,
            &format!("{p}.wq_b.weight"),
            &[nh * hd, cfg.q_lora_rank],
        )?;
        let q = linear(&mut self.gpu, &qr, s, &wq_b, true).map_err(&e)?;
        let wrong_sign = self.inject_is(InjectionKind::RopeSign, &format!("L{l}.sa_q"));
        let table = self.rope_of(l).clone();
        let per_token = Positions::per_token(sp, nh);
        rope(&mut self.gpu, &table, &q, s * nh, hd, per_token, wrong_sign).map_err(&e)?;
        self.cap(
            step,
            format!("L{l}.sa_q"),
            vec![1, s, nh, hd],
            CaptureDtype::Bf16,
            &q,
            0,
        )?;
        let wkv = self.w(step, &format!("{p}.wkv.weight"), &[hd, d])?;
        let kv_norm = self.v(step, &format!("{p}.kv_norm.weight"), &[hd])?;
        let kv0 = linear(&mut self.gpu, x, s, &wkv, true).map_err(&e)?;
        let kv = rmsnorm(&mut self.gpu, &kv0, s, &kv_norm, eps).map_err(&e)?;
        let tok = Positions::per_token(sp, 1);
        rope(&mut self.gpu, &table, &kv, s, hd, tok, false).map_err(&e)?;
        quant(&mut self.gpu, &kv, QuantMode::Fp8Block32).map_err(&e)?;
        let win = cfg.window_size;
        let ring = self.layers[l].win.clone();
        ring_write(&mut self.gpu, &kv, &ring, s, sp, win, hd).map_err(&e)?;
        let window_kv = if sp == 0 { kv } else { ring };
        let ww = if sp == 0 { s.min(win) } else { win };
        let offset = window_kv.len / hd;
        let (ckv, cw, cidx) = if role.ratio > 0 {
            let (ckv, cw, cidx) = self.compress_branch(step, l, x, &qr, offset)?;
            (Some(ckv), cw, cidx)
        } else {
            (None, 0, None)
        };
        let n_rows = offset + ckv.as_ref().map_or(0, |t| t.len / hd);
        if n_rows >= F32_EXACT_INT {
            return Err(invalid(
                step,
                "too many attention rows for exact f32 indices",
            ));
        }
        let kv_all = self.gpu.zeros("sa_kv", n_rows * hd).map_err(&e)?;
        self.gpu
            .copy(&window_kv, 0, &kv_all, 0, offset * hd)
            .map_err(&e)?;
        if let Some(c) = &ckv {
            self.gpu
                .copy(c, 0, &kv_all, offset * hd, c.len)
                .map_err(&e)?;
        }
        let w = ww + cw;
        let idx = self.gpu.zeros("sa_topk_idxs", s * w).map_err(&e)?;
        let off_by_one =
            self.inject_is(InjectionKind::WindowOffByOne, &format!("L{l}.sa_topk_idxs"));
        window_idx(&mut self.gpu, &idx, s, sp, win, ww, w, off_by_one).map_err(&e)?;
        if let Some(c) = &cidx {
            idx_concat(&mut self.gpu, c, &idx, s, ww, cw).map_err(&e)?;
        }
        self.cap(
            step,
            format!("L{l}.sa_kv"),
            vec![1, n_rows, hd],
            CaptureDtype::Bf16,
            &kv_all,
            0,
        )?;
        self.cap(
            step,
            format!("L{l}.sa_topk_idxs"),
            vec![1, s, w],
            CaptureDtype::Int,
            &idx,
            0,
        )?;
        let sink = self.v(step, &format!("{p}.attn_sink"), &[nh])?;
        let scale = (hd as f64).powf(-0.5) as f32;
        let o = sparse_attn(&mut self.gpu, &q, &kv_all, &sink, &idx, s, nh, hd, w, scale)
            .map_err(&e)?;
        self.cap(
            step,
            format!("L{l}.sa_o"),
            vec![1, s, nh, hd],
            CaptureDtype::Bf16,
            &o,
            0,
        )?;
        rope(&mut self.gpu, &table, &o, s * nh, hd, per_token, true).map_err(&e)?;
        let g = cfg.o_groups;
        let gd = nh * hd / g;
        let olr = cfg.o_lora_rank;
        let wo_a = self.w(step, &format!("{p}.wo_a.weight"), &[g * olr, gd])?;
        let u = self.gpu.zeros("wo_a", s * g * olr).map_err(&e)?;
        for gi in 0..g {
            let xv = XView {
                m: s,
                k: gd,
                ldx: nh * hd,
                x_off: gi * gd,
            };
            gemm_into(
                &mut self.gpu,
                &o,
                xv,
                &wo_a,
                gi * olr,
                olr,
                &u,
                g * olr,
                gi * olr,
                true,
            )
            .map_err(&e)?;
        }
        let wo_b = self.w(step, &format!("{p}.wo_b.weight"), &[d, g * olr])?;
        linear(&mut self.gpu, &u, s, &wo_b, true).map_err(&e)
    }
}
