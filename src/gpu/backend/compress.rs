//! The compressed branch (spec §12): the compressor (projection, softmax-gated pooling with the
//! partial group carried across regimes), the indexer (keys into the index cache, scores,
//! top-k) and the candidate blocks, with the shared slots' pointer semantics.

use super::{berr, invalid, GpuBackend, F32_EXACT_INT};
use crate::gpu::compress::{self, Causal};
use crate::gpu::exec::Tensor;
use crate::gpu::gemm::linear;
use crate::gpu::quant::{quant, QuantMode};
use crate::gpu::rope::{rope, Positions};
use crate::gpu::rows::{rmsnorm, scale_round};
use crate::model::sparse::{index_topk_rows, select_candidate_blocks, visible_lens};
use crate::model::{BackendError, Capture, Step};
use crate::num::torch_cpu_topk_set;

impl GpuBackend {
    /// Returns the compressed rows `[compress_len, hd]`, the compressed index width and the
    /// `[s, width]` compressed indices (None when the width is 0).
    pub(super) fn compress_branch(
        &mut self,
        step: Step,
        l: usize,
        x: &Tensor,
        qr: &Tensor,
        offset: usize,
    ) -> Result<(Tensor, usize, Option<Tensor>), BackendError> {
        let cfg = self.cfg.clone();
        let role = cfg.role(l);
        let (s, hd, sp) = (self.s(), cfg.head_dim, self.sp);
        let r = role.ratio;
        let end = sp + s;
        let compress_len = end / r;
        let e = berr(step);
        let mut latent = None;
        if role.kv_source {
            latent = self.compressor(step, l, x)?;
            self.shared.compress_kv = Some(l);
        }
        let (cw, cidx) = if !role.index_source {
            let (rows, k, t) = self
                .shared
                .topk_idxs
                .as_ref()
                .map(|(r, k, t)| (*r, *k, t.clone()))
                .ok_or_else(|| invalid(step, "no index source has published top-k indices yet"))?;
            if rows != s {
                return Err(invalid(
                    step,
                    format!("shared top-k has {rows} rows, the chunk has {s}"),
                ));
            }
            (k, Some(t))
        } else {
            let (k, t) = if compress_len == 0 {
                (0, None)
            } else {
                let (k, t) = self.indexer(step, l, x, qr, latent.as_ref(), offset)?;
                match self
                    .pins
                    .topk_for(l, s, k)
                    .map_err(|source| BackendError::Pin { step, source })?
                {
                    Some(p) => {
                        let f: Vec<f32> = p.iter().map(|&i| i as f32).collect();
                        (k, Some(self.gpu.upload("pinned topk", &f).map_err(&e)?))
                    }
                    None => (k, Some(t)),
                }
            };
            let stored = match &t {
                Some(t) => t.clone(),
                None => self.gpu.zeros("topk (empty)", 0).map_err(&e)?,
            };
            self.shared.topk_idxs = Some((s, k, stored));
            (k, t)
        };
        if let Some((lat, ng)) = latent {
            let pos = Positions::compressed(sp, r);
            let table = self.rope_of(l).clone();
            rope(&mut self.gpu, &table, &lat, ng, hd, pos, false).map_err(&e)?;
            quant(&mut self.gpu, &lat, QuantMode::Fp4E4m3Block16).map_err(&e)?;
            self.layers[l]
                .compress_kv
                .write(&mut self.gpu, sp / r, &lat)
                .map_err(&e)?;
        }
        let owner = self
            .shared
            .compress_kv
            .ok_or_else(|| invalid(step, "no kv source has published a compressed cache yet"))?;
        let cache = self.layers[owner]
            .compress_kv
            .ensure(&mut self.gpu, compress_len)
            .map_err(&e)?
            .clone();
        let ckv = self
            .gpu
            .slice("compress_kv head", &cache, 0, compress_len * hd)
            .map_err(&e)?;
        Ok((ckv, cw, cidx.filter(|_| cw > 0)))
    }

    pub(super) fn compressor(
        &mut self,
        step: Step,
        l: usize,
        x: &Tensor,
    ) -> Result<Option<(Tensor, usize)>, BackendError> {
        let cfg = self.cfg.clone();
        let (s, d, hd, sp) = (self.s(), cfg.dim, cfg.head_dim, self.sp);
        let r = cfg.compress_ratios[l];
        let p = format!("layers.{l}.attn.compressor");
        let e = berr(step);
        let norm = self.v(step, &format!("{p}.norm.weight"), &[hd])?;
        let wkv = self.w(step, &format!("{p}.wkv.weight"), &[hd, d])?;
        if r == 1 {
            let k0 = linear(&mut self.gpu, x, s, &wkv, true).map_err(&e)?;
            return Ok(Some((
                rmsnorm(&mut self.gpu, &k0, s, &norm, cfg.norm_eps).map_err(&e)?,
                s,
            )));
        }
        let wgate = self.w(step, &format!("{p}.wgate.weight"), &[hd, d])?;
        let kv = linear(&mut self.gpu, x, s, &wkv, false).map_err(&e)?;
        let score = linear(&mut self.gpu, x, s, &wgate, false).map_err(&e)?;
        let (kv_state, score_state) = match (&self.layers[l].kv_state, &self.layers[l].score_state)
        {
            (Some(a), Some(b)) => (a.clone(), b.clone()),
            _ => {
                return Err(invalid(
                    step,
                    "pooling compressor without partial-group state",
                ))
            }
        };
        let (pooled, groups) = if sp == 0 {
            let rem = s % r;
            let cut = s - rem;
            if rem > 0 {
                self.gpu
                    .copy(&kv, cut * hd, &kv_state, 0, rem * hd)
                    .map_err(&e)?;
                self.gpu
                    .copy(&score, cut * hd, &score_state, 0, rem * hd)
                    .map_err(&e)?;
            }
            if s < r {
                return Ok(None);
            }
            (
                compress::pool(&mut self.gpu, &kv, &score, cut / r, r, hd).map_err(&e)?,
                cut / r,
            )
        } else {
            let slot = sp % r;
            self.gpu
                .copy(&kv, 0, &kv_state, slot * hd, hd)
                .map_err(&e)?;
            self.gpu
                .copy(&score, 0, &score_state, slot * hd, hd)
                .map_err(&e)?;
            if (sp + 1) % r != 0 {
                return Ok(None);
            }
            (
                compress::pool(&mut self.gpu, &kv_state, &score_state, 1, r, hd).map_err(&e)?,
                1,
            )
        };
        Ok(Some((
            rmsnorm(&mut self.gpu, &pooled, groups, &norm, cfg.norm_eps).map_err(&e)?,
            groups,
        )))
    }

    pub(super) fn indexer(
        &mut self,
        step: Step,
        l: usize,
        x: &Tensor,
        qr: &Tensor,
        latent: Option<&(Tensor, usize)>,
        offset: usize,
    ) -> Result<(usize, Tensor), BackendError> {
        let cfg = self.cfg.clone();
        let role = cfg.role(l);
        let (s, d, hd, sp) = (self.s(), cfg.dim, cfg.head_dim, self.sp);
        let (ih, ihd, r) = (cfg.index_n_heads, cfg.index_head_dim, role.ratio);
        let end = sp + s;
        let p = format!("layers.{l}.attn.indexer");
        let e = berr(step);
        let table = self.rope_of(l).clone();
        if role.kv_source {
            if let Some((lat, ng)) = latent {
                let wk = self.w(step, &format!("{p}.wk.weight"), &[ihd, hd])?;
                let k_norm = self.v(step, &format!("{p}.k_norm.weight"), &[ihd])?;
                let k0 = linear(&mut self.gpu, lat, *ng, &wk, true).map_err(&e)?;
                let k = rmsnorm(&mut self.gpu, &k0, *ng, &k_norm, cfg.norm_eps).map_err(&e)?;
                let pos = Positions::compressed(sp, r);
                rope(&mut self.gpu, &table, &k, *ng, ihd, pos, false).map_err(&e)?;
                quant(&mut self.gpu, &k, QuantMode::Fp4E8m0Block32).map_err(&e)?;
                self.layers[l]
                    .k_cache
                    .write(&mut self.gpu, sp / r, &k)
                    .map_err(&e)?;
                self.shared.index_k = Some(l);
            }
        }
        let wq_b = self.w(
            step,
            &format!("{p}.wq_b.weight"),
            &[ih * ihd, cfg.q_lora_rank],
        )?;
        let q = linear(&mut self.gpu, qr, s, &wq_b, true).map_err(&e)?;
        let per_token = Positions::per_token(sp, ih);
        rope(&mut self.gpu, &table, &q, s * ih, ihd, per_token, false).map_err(&e)?;
        quant(&mut self.gpu, &q, QuantMode::Fp4E8m0Block32).map_err(&e)?;
        let t_vis = end / r;
        let owner = self
            .shared
            .index_k
            .ok_or_else(|| invalid(step, "no index keys have been published yet"))?;
        if self.layers[owner].k_cache.width != ihd {
            return Err(invalid(
                step,
                "index key width does not match index_head_dim",
            ));
        }
        let keys = self.layers[owner]
            .k_cache
            .ensure(&mut self.gpu, t_vis)
            .map_err(&e)?
            .clone();
        let wp = self.w(step, &format!("{p}.weights_proj.weight"), &[ih, d])?;
        let wscale = ((ihd as f64).powf(-0.5) * (ih as f64).powf(-0.5)) as f32;
        let w0 = linear(&mut self.gpu, x, s, &wp, true).map_err(&e)?;
        let wts = scale_round(&mut self.gpu, &w0, wscale).map_err(&e)?;
        let causal = Causal {
            prefill: sp == 0,
            r,
        };
        let score =
            compress::index_scores(&mut self.gpu, &q, &keys, &wts, s, t_vis, ih, ihd, causal)
                .map_err(&e)?;
        let clen = visible_lens(s, sp, r, t_vis);
        if role.candidate_source {
            let mask = if self.opts.reference_ties {
                let sc = self.gpu.read_all(&score).map_err(&e)?;
                let m = select_candidate_blocks(
                    &sc,
                    t_vis,
                    &clen,
                    cfg.candidate_topk_blocks,
                    cfg.candidate_block_size,
                );
                let mf: Vec<f32> = m.iter().map(|&b| b as u8 as f32).collect();
                self.gpu.upload("candidates", &mf).map_err(&e)?
            } else {
                let m = compress::candidate_blocks(
                    &mut self.gpu,
                    &score,
                    s,
                    t_vis,
                    causal,
                    cfg.candidate_topk_blocks,
                    cfg.candidate_block_size,
                )
                .map_err(&e)?;
                if self.opts.tie_audit {
                    let sc = self.gpu.read_all(&score).map_err(&e)?;
                    let mine = self.gpu.read_all(&m).map_err(&e)?;
                    let host = select_candidate_blocks(
                        &sc,
                        t_vis,
                        &clen,
                        cfg.candidate_topk_blocks,
                        cfg.candidate_block_size,
                    );
                    let rows = (0..s)
                        .filter(|&t| {
                            (0..t_vis).any(|p| (mine[t * t_vis + p] != 0.0) != host[t * t_vis + p])
                        })
                        .count();
                    self.cap_host(Capture::int(
                        format!("tieflip.L{l}.candidates"),
                        vec![1],
                        vec![rows as i64],
                    ));
                }
                m
            };
            self.shared.candidates = Some((s, t_vis, mask));
        } else if role.candidate_consumer {
            let (rows, w, m) = self
                .shared
                .candidates
                .as_ref()
                .map(|(r, w, m)| (*r, *w, m.clone()))
                .ok_or_else(|| invalid(step, "no candidate mask has been published yet"))?;
            if rows != s || w != t_vis {
                return Err(invalid(
                    step,
                    format!("candidate mask [{rows}, {w}] does not match scores [{s}, {t_vis}]"),
                ));
            }
            compress::cand_mask_apply(&mut self.gpu, &score, &m, s, t_vis).map_err(&e)?;
        }
        let k = cfg.index_topk.min(t_vis);
        if t_vis + offset >= F32_EXACT_INT {
            return Err(invalid(
                step,
                "compressed positions beyond exact f32 indices",
            ));
        }
        let idx = if self.opts.reference_ties {
            let sc = self.gpu.read_all(&score).map_err(&e)?;
            let v: Vec<f32> = index_topk_rows(&sc, t_vis, &clen, k, offset, torch_cpu_topk_set)
                .into_iter()
                .map(|i| i as f32)
                .collect();
            self.gpu.upload("topk", &v).map_err(&e)?
        } else {
            let t =
                compress::topk(&mut self.gpu, &score, s, t_vis, k, offset, causal).map_err(&e)?;
            if self.opts.tie_audit {
                let sc = self.gpu.read_all(&score).map_err(&e)?;
                let mine = self.gpu.read_all(&t).map_err(&e)?;
                let host = index_topk_rows(&sc, t_vis, &clen, k, offset, torch_cpu_topk_set);
                let rows = (0..s)
                    .filter(|&tt| (0..k).any(|j| host[tt * k + j] as f32 != mine[tt * k + j]))
                    .count() as i64;
                self.cap_host(Capture::int(
                    format!("tieflip.L{l}.topk_idxs"),
                    vec![1],
                    vec![rows],
                ));
            }
            t
        };
        Ok((k, idx))
    }
}
