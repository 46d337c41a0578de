//! The stream's start: input ids and engram hashes (host), the embedding and its hc-fold
//! expansion, and the engram layers (table rows, embed, kv projection, gate).

use super::{berr, invalid, GpuBackend};
use crate::gpu::engram;
use crate::gpu::exec::Tensor;
use crate::gpu::gemm::linear;
use crate::gpu::rows::expand;
use crate::model::engram::{engram_hash_step, EngramHashes};
use crate::model::{BackendError, Capture, CaptureDtype, Step};

impl GpuBackend {
    pub(super) fn step_engram_hash(&mut self, step: Step) -> Result<(), BackendError> {
        let s = self.s();
        self.cap_host(Capture::int("input_ids", vec![1, s], self.ids.clone()));
        let Some(EngramHashes { shape, hashes }) = engram_hash_step(
            &self.cfg,
            self.engram.as_ref(),
            &mut self.hash_cache,
            &self.ids,
            self.sp,
            step,
        )?
        else {
            self.hashes.clear();
            return Ok(());
        };
        self.cap_host(Capture::int("engram_hashes", shape, hashes.clone()));
        self.hashes = hashes;
        Ok(())
    }

    pub(super) fn step_embed(&mut self, step: Step) -> Result<(), BackendError> {
        let (s, d, hc) = (self.s(), self.cfg.dim, self.cfg.hc_mult);
        let e = crate::model::weights::embedding_rows(
            &self.cfg,
            self.weights.as_ref(),
            step,
            &self.ids,
        )?;
        let e = self.gpu.upload("embed", &e).map_err(berr(step))?;
        self.cap(
            step,
            "embed".into(),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &e,
            0,
        )?;
        let h = expand(&mut self.gpu, &e, s, hc).map_err(berr(step))?;
        let pm: Vec<f32> = (0..s * hc)
            .map(|i| if i % hc == 0 { 1.0 } else { 0.0 })
            .collect();
        self.pre_mix = Some(self.gpu.upload("pre_mix", &pm).map_err(berr(step))?);
        self.h = Some(h);
        Ok(())
    }

    pub(super) fn stream(&self, step: Step) -> Result<Tensor, BackendError> {
        self.h
            .clone()
            .ok_or_else(|| invalid(step, "the stream is not initialised (run Embed first)"))
    }

    pub(super) fn step_engram(&mut self, step: Step, l: usize) -> Result<(), BackendError> {
        let (s, d, hc) = (self.s(), self.cfg.dim, self.cfg.hc_mult);
        let ecfg = self
            .cfg
            .engram
            .clone()
            .ok_or_else(|| invalid(step, "no engram config"))?;
        let (li, ids) = ecfg
            .layer_hash_ids(l, s, &self.hashes)
            .map_err(|m| invalid(step, m))?;
        let cols = ecfg.n_hash_cols();
        let hd = ecfg.head_dim;
        let h = self.stream(step)?;
        self.cap(
            step,
            format!("L{l}.engram_in"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &h,
            0,
        )?;
        self.cap_host(Capture::int(
            format!("L{l}.engram_hash_ids"),
            vec![1, s, cols],
            ids.clone(),
        ));
        let (table, scales) = crate::model::engram::engram_table_rows(
            self.weights.as_ref(),
            step,
            &ecfg,
            l,
            li,
            &ids,
        )?;
        let pre = format!("layers.{l}.engram");
        let table = self.gpu.upload("engram rows", &table).map_err(berr(step))?;
        let scales = self
            .gpu
            .upload("engram scales", &scales)
            .map_err(berr(step))?;
        let emb = engram::engram_embed(&mut self.gpu, &table, &scales, s * cols, hd)
            .map_err(berr(step))?;
        self.cap(
            step,
            format!("L{l}.engram_embed"),
            vec![1, s, cols, hd],
            CaptureDtype::Bf16,
            &emb,
            0,
        )?;
        let kv_w = (hc + 1) * d;
        let wkv = self.w(step, &format!("{pre}.wkv.weight"), &[kv_w, cols * hd])?;
        let kv = linear(&mut self.gpu, &emb, s, &wkv, true).map_err(berr(step))?;
        self.cap(
            step,
            format!("L{l}.engram_kv"),
            vec![1, s, kv_w],
            CaptureDtype::Bf16,
            &kv,
            0,
        )?;
        let qw = self.v(step, &format!("{pre}.q_weight"), &[hc, d])?;
        let kw = self.v(step, &format!("{pre}.k_weight"), &[hc, d])?;
        let out = engram::engram_gate(
            &mut self.gpu,
            &h,
            &kv,
            &qw,
            &kw,
            s,
            hc,
            d,
            self.cfg.norm_eps,
        )
        .map_err(berr(step))?;
        self.cap(
            step,
            format!("L{l}.engram_out"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &out,
            0,
        )?;
        self.h = Some(out);
        Ok(())
    }
}
