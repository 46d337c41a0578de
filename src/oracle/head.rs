//! The forward's last step: the stream collapsed, normed, and the LM head's logits.

use super::*;

impl Oracle {
    pub(super) fn step_final(
        &mut self,
        step: Step,
        out: &mut Vec<Capture>,
    ) -> Result<(), BackendError> {
        let (s, d, hc, v) = (
            self.s(),
            self.cfg.dim,
            self.cfg.hc_mult,
            self.cfg.vocab_size,
        );
        if self.h.len() != s * hc * d {
            return Err(invalid(step, "the stream is not initialised"));
        }
        let mut hf = hc::hc_pre(&self.h, &self.pre_mix, hc, d);
        self.put_f32(out, "h_final", vec![1, s, d], CaptureDtype::Bf16, &mut hf);
        let norm = self.w(step, "norm.weight", &[d])?;
        let mut head_in = rmsnorm(&hf, &norm, self.cfg.norm_eps);
        self.put_f32(
            out,
            "head_in",
            vec![1, s, d],
            CaptureDtype::Bf16,
            &mut head_in,
        );
        // A GGUF lends the head's own blocks (decoded chunk by chunk inside the GEMM); any
        // other source streams it in row chunks (the real head is 2.6 GB as f32). Each logit is
        // one dot product, so neither path changes a bit.
        let ws = self.weights.clone();
        let mut logits = if ws.stored_matrix("head.weight").is_some() {
            linear::linear(&*ws, step, "head.weight", [v, d])?.f32(&head_in, s, d, v)
        } else {
            let mut logits = vec![0f32; s * v];
            crate::model::weights::stream_rows(
                &*ws,
                step,
                "head.weight",
                [v, d],
                self.head_chunk_bytes,
                |r0, w| {
                    let n = w.len() / d;
                    let part = linear::Linear::Dense(Arc::new(w.to_vec())).f32(&head_in, s, d, n);
                    for t in 0..s {
                        logits[t * v + r0..t * v + r0 + n]
                            .copy_from_slice(&part[t * n..(t + 1) * n]);
                    }
                    Ok(())
                },
            )?;
            logits
        };
        self.put_f32(
            out,
            "logits_full",
            vec![1, s, v],
            CaptureDtype::F32,
            &mut logits,
        );
        Ok(())
    }
}
