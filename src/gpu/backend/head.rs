//! The stream's end: the final hc collapse, the norm and the LM head.

use super::{berr, invalid, GpuBackend};
use crate::gpu::gemm::linear;
use crate::gpu::hc::hc_pre;
use crate::gpu::rows::rmsnorm;
use crate::model::{BackendError, CaptureDtype, Step};

impl GpuBackend {
    pub(super) fn step_final(&mut self, step: Step) -> Result<(), BackendError> {
        let (s, d, hc, v) = (
            self.s(),
            self.cfg.dim,
            self.cfg.hc_mult,
            self.cfg.vocab_size,
        );
        let h = self.stream(step)?;
        if h.len != s * hc * d {
            return Err(invalid(step, "the stream is not initialised"));
        }
        let pre_mix = self
            .pre_mix
            .clone()
            .ok_or_else(|| invalid(step, "no pre-mix"))?;
        let e = berr(step);
        let hf = hc_pre(&mut self.gpu, &h, &pre_mix, 0, s, hc, d).map_err(&e)?;
        self.cap(
            step,
            "h_final".into(),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &hf,
            0,
        )?;
        let norm = self.v(step, "norm.weight", &[d])?;
        let head_in = rmsnorm(&mut self.gpu, &hf, s, &norm, self.cfg.norm_eps).map_err(&e)?;
        self.cap(
            step,
            "head_in".into(),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &head_in,
            0,
        )?;
        let head = self.w(step, "head.weight", &[v, d])?;
        let logits = linear(&mut self.gpu, &head_in, s, &head, false).map_err(&e)?;
        self.cap(
            step,
            "logits_full".into(),
            vec![1, s, v],
            CaptureDtype::F32,
            &logits,
            0,
        )?;
        Ok(())
    }
}
