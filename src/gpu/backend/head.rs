//! The stream's end: the final hc collapse, the norm and the LM head.

use super::{berr, invalid, GpuBackend};
use crate::gpu::gemm::{gemm_into, XView};
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
        // The head streams in row chunks (the real one is 2.6 GB as f32), each uploaded, used
        // and released; every logit is one dot product, so the bits do not depend on the chunks.
        let logits = self.gpu.zeros("logits", s * v).map_err(&e)?;
        let weights = self.weights.clone();
        let chunk_bytes = self.head_chunk_bytes;
        crate::model::weights::stream_rows(
            weights.as_ref(),
            step,
            "head.weight",
            [v, d],
            chunk_bytes,
            |r0, data| {
                let n = data.len() / d;
                let chunk = self
                    .gpu
                    .upload_weight("head.weight", data, n, d)
                    .map_err(&e)?;
                gemm_into(
                    &mut self.gpu,
                    &head_in,
                    XView::dense(s, d),
                    &chunk,
                    0,
                    n,
                    &logits,
                    v,
                    r0,
                    false,
                )
                .map_err(&e)?;
                // Submit and wait, so at most one chunk (and its staging copy) is alive.
                self.settle();
                Ok(())
            },
        )?;
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
