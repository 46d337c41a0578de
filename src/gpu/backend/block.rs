//! One transformer block: the hyper-connection mixes around attention and the MoE, the norms,
//! the block's captures, and the shared slots' captures on the layers that publish them.

use super::{berr, invalid, GpuBackend};
use crate::gpu::exec::Tensor;
use crate::gpu::hc::{hc_mixes, hc_post, hc_pre, MixConsts, Mixes};
use crate::gpu::rows::rmsnorm;
use crate::model::{BackendError, CaptureDtype, Step};

impl GpuBackend {
    pub(super) fn mix_consts(&self) -> MixConsts {
        MixConsts {
            norm_eps: self.cfg.norm_eps,
            hc_eps: self.cfg.hc_eps,
            iters: self.cfg.hc_sinkhorn_iters,
        }
    }

    pub(super) fn mixes(
        &mut self,
        step: Step,
        l: usize,
        site: &str,
        h: &Tensor,
    ) -> Result<Mixes, BackendError> {
        let (s, d, hc) = (self.s(), self.cfg.dim, self.cfg.hc_mult);
        let mix = self.cfg.mix_hc();
        let p = format!("layers.{l}");
        let fn_w = self.w(step, &format!("{p}.hc_{site}_fn"), &[mix, hc * d])?;
        let key = format!("{p}.hc_{site}_scale+base");
        let sb = match self.wcache.get(&key).and_then(|w| w.single().cloned()) {
            Some(t) => t,
            None => {
                let mut v = self
                    .host_w(step, &format!("{p}.hc_{site}_scale"), &[3])?
                    .to_vec();
                v.extend_from_slice(&self.host_w(step, &format!("{p}.hc_{site}_base"), &[mix])?);
                let w = self
                    .gpu
                    .upload_weight(&key, &v, 1, v.len())
                    .map_err(berr(step))?;
                self.cache_weight(&key, &w, v.len() * std::mem::size_of::<f32>());
                w.single()
                    .cloned()
                    .ok_or_else(|| invalid(step, "scale/base chunked"))?
            }
        };
        let c = self.mix_consts();
        let m = hc_mixes(&mut self.gpu, h, s, hc, d, &fn_w, &sb, c).map_err(berr(step))?;
        let cap = |n: &str| format!("L{l}.{site}_{n}");
        self.cap(
            step,
            cap("pre"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &m.t,
            m.pre_off(),
        )?;
        self.cap(
            step,
            cap("post"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &m.t,
            m.post_off(),
        )?;
        self.cap(
            step,
            cap("comb"),
            vec![1, s, hc, hc],
            CaptureDtype::F32,
            &m.t,
            m.comb_off(),
        )?;
        Ok(m)
    }

    pub(super) fn step_block(&mut self, step: Step, l: usize) -> Result<(), BackendError> {
        let (s, d, hc) = (self.s(), self.cfg.dim, self.cfg.hc_mult);
        let h = self.stream(step)?;
        if h.len != s * hc * d {
            return Err(invalid(
                step,
                "the stream is not initialised (run Embed first)",
            ));
        }
        let pre_mix = self
            .pre_mix
            .clone()
            .ok_or_else(|| invalid(step, "no pre-mix"))?;
        let p = format!("layers.{l}");
        let cap = |n: &str| format!("L{l}.{n}");
        self.cap(
            step,
            cap("h_in"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &h,
            0,
        )?;
        self.cap(
            step,
            cap("pre_mix_in"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &pre_mix,
            0,
        )?;
        let am = self.mixes(step, l, "attn", &h)?;
        let attn_norm = self.v(step, &format!("{p}.attn_norm.weight"), &[d])?;
        let eps = self.cfg.norm_eps;
        let collapsed = hc_pre(&mut self.gpu, &h, &pre_mix, 0, s, hc, d).map_err(berr(step))?;
        let a_in = rmsnorm(&mut self.gpu, &collapsed, s, &attn_norm, eps).map_err(berr(step))?;
        self.cap(
            step,
            cap("attn_in"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &a_in,
            0,
        )?;
        let a_out = self.attention(step, l, &a_in)?;
        self.cap(
            step,
            cap("attn_out"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &a_out,
            0,
        )?;
        let h1 = hc_post(&mut self.gpu, &a_out, &h, &am, d).map_err(berr(step))?;
        let fm = self.mixes(step, l, "ffn", &h1)?;
        let ffn_norm = self.v(step, &format!("{p}.ffn_norm.weight"), &[d])?;
        let collapsed =
            hc_pre(&mut self.gpu, &h1, &am.t, am.pre_off(), s, hc, d).map_err(berr(step))?;
        let f_in = rmsnorm(&mut self.gpu, &collapsed, s, &ffn_norm, eps).map_err(berr(step))?;
        self.cap(
            step,
            cap("ffn_in"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &f_in,
            0,
        )?;
        let f_out = self.moe(step, l, &f_in)?;
        self.cap(
            step,
            cap("ffn_out"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &f_out,
            0,
        )?;
        let h2 = hc_post(&mut self.gpu, &f_out, &h1, &fm, d).map_err(berr(step))?;
        self.cap(
            step,
            cap("h_out"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &h2,
            0,
        )?;
        let next_pre = self
            .gpu
            .slice("pre_mix", &fm.t, fm.pre_off(), s * hc)
            .map_err(berr(step))?;
        self.cap(
            step,
            cap("pre_mix_out"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &next_pre,
            0,
        )?;
        self.h = Some(h2);
        self.pre_mix = Some(next_pre);
        if self.cfg.is_shared_capture_layer(l) {
            self.capture_shared(step, l)?;
        }
        Ok(())
    }

    pub(super) fn capture_shared(&mut self, step: Step, l: usize) -> Result<(), BackendError> {
        let s = self.s();
        let ratio = self.cfg.compress_ratios[l].max(1);
        let used = (self.sp + s) / ratio;
        if let Some(owner) = self.shared.compress_kv {
            let c = &mut self.layers[owner].compress_kv;
            let w = c.width;
            let t = c.ensure(&mut self.gpu, used).map_err(berr(step))?.clone();
            self.cap(
                step,
                format!("shared.L{l}.compress_kv"),
                vec![1, used, w],
                CaptureDtype::Bf16,
                &t,
                0,
            )?;
        }
        if let Some(owner) = self.shared.index_k {
            let c = &mut self.layers[owner].k_cache;
            let w = c.width;
            let t = c.ensure(&mut self.gpu, used).map_err(berr(step))?.clone();
            self.cap(
                step,
                format!("shared.L{l}.index_k"),
                vec![1, used, w],
                CaptureDtype::Bf16,
                &t,
                0,
            )?;
        }
        if let Some((rows, k, t)) = self
            .shared
            .topk_idxs
            .as_ref()
            .map(|(r, k, t)| (*r, *k, t.clone()))
        {
            self.cap(
                step,
                format!("shared.L{l}.topk_idxs"),
                vec![1, rows, k],
                CaptureDtype::Int,
                &t,
                0,
            )?;
        }
        if let Some((rows, w, t)) = self
            .shared
            .candidates
            .as_ref()
            .map(|(r, w, t)| (*r, *w, t.clone()))
        {
            self.cap(
                step,
                format!("shared.L{l}.candidates"),
                vec![1, rows, w],
                CaptureDtype::Int,
                &t,
                0,
            )?;
        }
        Ok(())
    }
}
