//! The forward's first steps: the input ids and engram hashes, the embedding into
//! the hyper-connection stream, and the engram layers that add their gated lookups to it.

use super::*;
use crate::model::engram::{engram_hash_step, EngramHashes};

impl Oracle {
    pub(super) fn step_engram_hash(
        &mut self,
        step: Step,
        out: &mut Vec<Capture>,
    ) -> Result<(), BackendError> {
        let s = self.s();
        let mut taken = std::mem::take(&mut self.ids);
        self.put_int(out, "input_ids", vec![1, s], &mut taken);
        self.ids = taken;
        let Some(EngramHashes { shape, mut hashes }) = engram_hash_step(
            &self.cfg,
            self.engram.as_ref(),
            &mut self.state.hash_cache,
            &self.ids,
            self.sp,
            step,
        )?
        else {
            self.hashes.clear();
            return Ok(());
        };
        self.put_int(out, "engram_hashes", shape, &mut hashes);
        self.hashes = hashes;
        Ok(())
    }

    pub(super) fn step_embed(
        &mut self,
        step: Step,
        out: &mut Vec<Capture>,
    ) -> Result<(), BackendError> {
        let (s, d, hc) = (self.s(), self.cfg.dim, self.cfg.hc_mult);
        let mut e = crate::model::weights::embedding_rows(
            &self.cfg,
            self.weights.as_ref(),
            step,
            &self.ids,
        )?;
        self.put_f32(out, "embed", vec![1, s, d], CaptureDtype::Bf16, &mut e);
        let mut h = Vec::with_capacity(s * hc * d);
        for t in 0..s {
            for _ in 0..hc {
                h.extend_from_slice(&e[t * d..(t + 1) * d]);
            }
        }
        self.h = h;
        self.pre_mix = (0..s * hc)
            .map(|i| if i % hc == 0 { 1.0 } else { 0.0 })
            .collect();
        Ok(())
    }

    pub(super) fn step_engram(
        &mut self,
        step: Step,
        l: usize,
        out: &mut Vec<Capture>,
    ) -> Result<(), BackendError> {
        let (s, d, hc) = (self.s(), self.cfg.dim, self.cfg.hc_mult);
        let ecfg = self
            .cfg
            .engram
            .clone()
            .ok_or_else(|| invalid(step, "no engram config"))?;
        let (li, mut ids) = ecfg
            .layer_hash_ids(l, s, &self.hashes)
            .map_err(|m| invalid(step, m))?;
        let cols = ecfg.n_hash_cols();
        let hd = ecfg.head_dim;
        let mut taken = std::mem::take(&mut self.h);
        self.put_f32(
            out,
            format!("L{l}.engram_in"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &mut taken,
        );
        self.h = taken;
        self.put_int(
            out,
            format!("L{l}.engram_hash_ids"),
            vec![1, s, cols],
            &mut ids,
        );
        let (table, scales) = crate::model::engram::engram_table_rows(
            self.weights.as_ref(),
            step,
            &ecfg,
            l,
            li,
            &ids,
        )?;
        let pre = format!("layers.{l}.engram");
        let mut emb: Vec<f32> = table
            .iter()
            .enumerate()
            .map(|(i, &v)| bf16_round(v * scales[(i / hd) * (hd / 32) + (i % hd) / 32]))
            .collect();
        self.put_f32(
            out,
            format!("L{l}.engram_embed"),
            vec![1, s, cols, hd],
            CaptureDtype::Bf16,
            &mut emb,
        );
        let kv_w = (hc + 1) * d;
        let ws = self.weights.clone();
        let wkv = linear::linear(&*ws, step, &format!("{pre}.wkv.weight"), [kv_w, cols * hd])?;
        let mut kv = wkv.bf16(&emb, s, cols * hd, kv_w);
        self.put_f32(
            out,
            format!("L{l}.engram_kv"),
            vec![1, s, kv_w],
            CaptureDtype::Bf16,
            &mut kv,
        );
        let qw = self.w(step, &format!("{pre}.q_weight"), &[hc, d])?;
        let kw = self.w(step, &format!("{pre}.k_weight"), &[hc, d])?;
        let eps = self.cfg.norm_eps;
        let inv_sqrt_d = (d as f64).powf(-0.5) as f32;
        let mut new_h = vec![0f32; s * hc * d];
        for t in 0..s {
            let value = &kv[t * kv_w + hc * d..(t + 1) * kv_w];
            for c in 0..hc {
                let hrow = &self.h[(t * hc + c) * d..(t * hc + c + 1) * d];
                let key = &kv[t * kv_w + c * d..t * kv_w + (c + 1) * d];
                let rstd = rsqrt(mean_sq(hrow) + eps) * rsqrt(mean_sq(key) + eps);
                let mut acc = 0f64;
                for i in 0..d {
                    let wgt = qw[c * d + i] * kw[c * d + i];
                    acc += (hrow[i] * wgt * key[i]) as f64;
                }
                let dot = (acc as f32) * rstd * inv_sqrt_d;
                let mag = dot.abs().max(1e-6).sqrt();
                let gate = sigmoid(mag.copysign(dot));
                for i in 0..d {
                    new_h[(t * hc + c) * d + i] = bf16_round(hrow[i] + gate * value[i]);
                }
            }
        }
        self.put_f32(
            out,
            format!("L{l}.engram_out"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &mut new_h,
        );
        self.h = new_h;
        Ok(())
    }
}
