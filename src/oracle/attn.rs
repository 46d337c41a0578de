//! Attention (spec §11) and the shared compressed branch: Compressor, Indexer, candidate blocks
//! (spec §12), with the shared slots' pointer semantics.

use super::faults::FaultKind;
use super::linear::linear;
use super::ops::{dot_f64, rmsnorm, softmax_in_place};
use super::{invalid, Oracle};
use crate::model::rope::compressed_row_pos;
use crate::model::sparse::{index_topk_rows, select_candidate_blocks_by, visible_lens};
use crate::model::{BackendError, Capture, CaptureDtype, Step};
use crate::num::{
    act_quant_fp8_block32, bf16_round, fp4_e4m3_block16_round_trip, fp4_e8m0_block32_round_trip,
    torch_cpu_topk_set,
};

/// The shared index math moved to [`crate::model::sparse`]; re-exported for the session's
/// invariant and triage checks that still name it here.
pub use crate::model::sparse::{candidate_block_scores, window_idxs};

/// `sparse_attn` with shim semantics (spec §11.5): q `[s, h, hd]`, kv `[n, hd]`, idx `[s, w]`.
#[allow(clippy::too_many_arguments)] // the kernel's operands, as the reference passes them
pub fn sparse_attn(
    q: &[f32],
    kv: &[f32],
    sink: &[f32],
    idx: &[i64],
    n_heads: usize,
    hd: usize,
    w: usize,
    scale: f32,
) -> Vec<f32> {
    let s = q.len() / (n_heads * hd);
    let mut o = vec![0f32; q.len()];
    for t in 0..s {
        let row = &idx[t * w..(t + 1) * w];
        for h in 0..n_heads {
            let qv = &q[(t * n_heads + h) * hd..(t * n_heads + h + 1) * hd];
            let mut z: Vec<f32> = row
                .iter()
                .map(|&j| {
                    if j < 0 {
                        f32::NEG_INFINITY
                    } else {
                        dot_f64(qv, &kv[j as usize * hd..(j as usize + 1) * hd]) * scale
                    }
                })
                .collect();
            z.push(sink[h]);
            softmax_in_place(&mut z);
            for d in 0..hd {
                let mut acc = 0f64;
                for (c, &j) in row.iter().enumerate() {
                    let p = if z[c].is_nan() { 0.0 } else { z[c] };
                    if j >= 0 && p != 0.0 {
                        acc += p as f64 * kv[j as usize * hd + d] as f64;
                    }
                }
                o[(t * n_heads + h) * hd + d] = bf16_round(acc as f32);
            }
        }
    }
    o
}

impl Oracle {
    /// `Attention.forward` for layer `l` on `x [s, dim]`; emits `sa_q`, `sa_kv`, `sa_topk_idxs`,
    /// `sa_o` and returns the attention output `[s, dim]`.
    pub(super) fn attention(
        &mut self,
        step: Step,
        l: usize,
        x: &[f32],
        out: &mut Vec<Capture>,
    ) -> Result<Vec<f32>, BackendError> {
        let cfg = self.cfg.clone();
        let (s, d, nh, hd) = (self.s(), cfg.dim, cfg.n_heads, cfg.head_dim);
        let sp = self.sp;
        let p = format!("layers.{l}.attn");
        let role = cfg.role(l);
        let ws = self.weights.clone();
        let wq_a = linear(
            &*ws,
            step,
            &format!("{p}.wq_a.weight"),
            [cfg.q_lora_rank, d],
        )?;
        let q_norm = self.w(step, &format!("{p}.q_norm.weight"), &[cfg.q_lora_rank])?;
        let qr = rmsnorm(&wq_a.bf16(x, s, d, cfg.q_lora_rank), &q_norm, cfg.norm_eps);
        let wq_b = linear(
            &*ws,
            step,
            &format!("{p}.wq_b.weight"),
            [nh * hd, cfg.q_lora_rank],
        )?;
        let mut q = wq_b.bf16(&qr, s, cfg.q_lora_rank, nh * hd);
        let q_inverse = self
            .faults
            .structural(FaultKind::RopeSign, &format!("L{l}.sa_q"), sp);
        for t in 0..s {
            for h in 0..nh {
                let b = (t * nh + h) * hd;
                self.rope(l).apply(&mut q[b..b + hd], sp + t, q_inverse);
            }
        }
        self.put_f32(
            out,
            format!("L{l}.sa_q"),
            vec![1, s, nh, hd],
            CaptureDtype::Bf16,
            &mut q,
        );
        let wkv = linear(&*ws, step, &format!("{p}.wkv.weight"), [hd, d])?;
        let kv_norm = self.w(step, &format!("{p}.kv_norm.weight"), &[hd])?;
        let mut kv = rmsnorm(&wkv.bf16(x, s, d, hd), &kv_norm, cfg.norm_eps);
        for t in 0..s {
            self.rope(l)
                .apply(&mut kv[t * hd..(t + 1) * hd], sp + t, false);
            act_quant_fp8_block32(&mut kv[t * hd..(t + 1) * hd]);
        }
        let win = cfg.window_size;
        let ring = &mut self.state.layers[l].win;
        let window_kv = if sp == 0 {
            if s <= win {
                ring[..s * hd].copy_from_slice(&kv);
            } else {
                // win[p % win] holds the row of token p for the last `win` tokens.
                for t in s - win..s {
                    let slot = t % win;
                    ring[slot * hd..(slot + 1) * hd].copy_from_slice(&kv[t * hd..(t + 1) * hd]);
                }
            }
            kv
        } else {
            let slot = sp % win;
            ring[slot * hd..(slot + 1) * hd].copy_from_slice(&kv);
            ring.clone()
        };
        let (ww, mut widx) = window_idxs(win, s, sp);
        let offset = window_kv.len() / hd;
        if self
            .faults
            .structural(FaultKind::WindowOffByOne, &format!("L{l}.sa_topk_idxs"), sp)
        {
            widx.iter_mut()
                .filter(|j| **j >= 0)
                .for_each(|j| *j = (*j + 1) % offset as i64);
        }
        let (mut kv_all, idx_w, mut idx) = if role.ratio > 0 {
            let (ckv, cw, cidx) = self.compress_branch(step, l, x, &qr, offset)?;
            let mut all = window_kv;
            all.extend_from_slice(&ckv);
            let w = ww + cw;
            let mut idx = Vec::with_capacity(s * w);
            for t in 0..s {
                let wrow = if sp == 0 {
                    &widx[t * ww..(t + 1) * ww]
                } else {
                    &widx[..]
                };
                idx.extend_from_slice(wrow);
                idx.extend_from_slice(&cidx[t * cw..(t + 1) * cw]);
            }
            (all, w, idx)
        } else {
            let idx = if sp == 0 { widx } else { widx.repeat(s) };
            (window_kv, ww, idx)
        };
        let n_rows = kv_all.len() / hd;
        if let Some(&bad) = idx.iter().find(|&&j| j >= n_rows as i64) {
            return Err(invalid(
                step,
                format!("attention index {bad} beyond the {n_rows} kv rows"),
            ));
        }
        self.put_f32(
            out,
            format!("L{l}.sa_kv"),
            vec![1, n_rows, hd],
            CaptureDtype::Bf16,
            &mut kv_all,
        );
        self.put_int(
            out,
            format!("L{l}.sa_topk_idxs"),
            vec![1, s, idx_w],
            &mut idx,
        );
        let sink = self.w(step, &format!("{p}.attn_sink"), &[nh])?;
        let scale = (hd as f64).powf(-0.5) as f32;
        let mut o = sparse_attn(&q, &kv_all, &sink, &idx, nh, hd, idx_w, scale);
        self.put_f32(
            out,
            format!("L{l}.sa_o"),
            vec![1, s, nh, hd],
            CaptureDtype::Bf16,
            &mut o,
        );
        for t in 0..s {
            for h in 0..nh {
                let b = (t * nh + h) * hd;
                self.rope(l).apply(&mut o[b..b + hd], sp + t, true);
            }
        }
        let g = cfg.o_groups;
        let gd = nh * hd / g;
        let olr = cfg.o_lora_rank;
        let wo_a = linear(&*ws, step, &format!("{p}.wo_a.weight"), [g * olr, gd])?;
        // Group gi: its slice of every token's heads against wo_a rows gi·olr.., one GEMM-bf16.
        let mut u = vec![0f32; s * g * olr];
        let mut og = Vec::with_capacity(s * gd);
        for gi in 0..g {
            og.clear();
            for t in 0..s {
                og.extend_from_slice(&o[t * nh * hd + gi * gd..t * nh * hd + (gi + 1) * gd]);
            }
            let ug = wo_a.bf16_rows(&og, s, gd, gi * olr..(gi + 1) * olr);
            for t in 0..s {
                u[(t * g + gi) * olr..(t * g + gi + 1) * olr]
                    .copy_from_slice(&ug[t * olr..(t + 1) * olr]);
            }
        }
        let wo_b = linear(&*ws, step, &format!("{p}.wo_b.weight"), [d, g * olr])?;
        Ok(wo_b.bf16(&u, s, g * olr, d))
    }

    /// `_compress_kv`: returns the compressed rows to append (`[compress_len, hd]`), the width of
    /// the compressed index part and the `[s, width]` compressed indices.
    fn compress_branch(
        &mut self,
        step: Step,
        l: usize,
        x: &[f32],
        qr: &[f32],
        offset: usize,
    ) -> Result<(Vec<f32>, usize, Vec<i64>), BackendError> {
        let cfg = self.cfg.clone();
        let role = cfg.role(l);
        let (s, hd, sp) = (self.s(), cfg.head_dim, self.sp);
        let r = role.ratio;
        let end = sp + s;
        let compress_len = end / r;
        let mut latent = None;
        if role.kv_source {
            latent = self.compressor(step, l, x)?;
            self.state.shared.compress_kv = Some(l);
        }
        let (cw, cidx) = if !role.index_source {
            let (rows, k, v) =
                self.state.shared.topk_idxs.clone().ok_or_else(|| {
                    invalid(step, "no index source has published top-k indices yet")
                })?;
            if rows != s {
                return Err(invalid(
                    step,
                    format!("shared top-k has {rows} rows, the chunk has {s}"),
                ));
            }
            (k, v)
        } else {
            let (k, v) = if compress_len == 0 {
                (0, Vec::new())
            } else if let Some(p) = self
                .pins
                .topk_for(l, s, cfg.index_topk.min(compress_len))
                .map_err(|source| BackendError::Pin { step, source })?
                .map(<[i64]>::to_vec)
            {
                self.indexer(step, l, x, qr, latent.as_deref(), offset)?;
                (cfg.index_topk.min(compress_len), p)
            } else {
                self.indexer(step, l, x, qr, latent.as_deref(), offset)?
            };
            self.state.shared.topk_idxs = Some((s, k, v.clone()));
            (k, v)
        };
        if let Some(mut lat) = latent {
            let n_groups = lat.len() / hd;
            for j in 0..n_groups {
                let pos = compressed_row_pos(sp, r, j);
                let row = &mut lat[j * hd..(j + 1) * hd];
                self.rope(l).apply(row, pos, false);
                fp4_e4m3_block16_round_trip(row);
            }
            self.state.layers[l].compress_kv.write(sp / r, &lat);
        }
        let owner =
            self.state.shared.compress_kv.ok_or_else(|| {
                invalid(step, "no kv source has published a compressed cache yet")
            })?;
        let ckv = self.state.layers[owner].compress_kv.head(compress_len);
        if cidx.len() != s * cw {
            return Err(invalid(
                step,
                "compressed index rows do not match the chunk",
            ));
        }
        Ok((ckv, cw, cidx))
    }

    /// The Compressor: the pre-RoPE latent `[n_groups, hd]`, or None while a group fills.
    fn compressor(
        &mut self,
        step: Step,
        l: usize,
        x: &[f32],
    ) -> Result<Option<Vec<f32>>, BackendError> {
        let cfg = &self.cfg;
        let (s, d, hd, sp) = (self.s(), cfg.dim, cfg.head_dim, self.sp);
        let r = cfg.compress_ratios[l];
        let p = format!("layers.{l}.attn.compressor");
        let norm = self.w(step, &format!("{p}.norm.weight"), &[hd])?;
        let ws = self.weights.clone();
        let wkv = linear(&*ws, step, &format!("{p}.wkv.weight"), [hd, d])?;
        if r == 1 {
            return Ok(Some(rmsnorm(&wkv.bf16(x, s, d, hd), &norm, cfg.norm_eps)));
        }
        let wgate = linear(&*ws, step, &format!("{p}.wgate.weight"), [hd, d])?;
        let kv = wkv.f32(x, s, d, hd);
        let score = wgate.f32(x, s, d, hd);
        let st = &mut self.state.layers[l];
        let pooled = if sp == 0 {
            let rem = s % r;
            let cut = s - rem;
            if rem > 0 {
                st.kv_state[..rem * hd].copy_from_slice(&kv[cut * hd..]);
                st.score_state[..rem * hd].copy_from_slice(&score[cut * hd..]);
            }
            if s < r {
                return Ok(None);
            }
            pool(&kv[..cut * hd], &score[..cut * hd], r, hd)
        } else {
            let slot = sp % r;
            st.kv_state[slot * hd..(slot + 1) * hd].copy_from_slice(&kv);
            st.score_state[slot * hd..(slot + 1) * hd].copy_from_slice(&score);
            if (sp + 1) % r != 0 {
                return Ok(None);
            }
            pool(&st.kv_state, &st.score_state, r, hd)
        };
        let pooled: Vec<f32> = pooled.into_iter().map(bf16_round).collect();
        Ok(Some(rmsnorm(&pooled, &norm, cfg.norm_eps)))
    }

    /// The Indexer: publishes index keys (owners with a latent), scores the visible compressed
    /// positions, applies the causal and candidate masks and returns `(k, [s, k] indices)`.
    fn indexer(
        &mut self,
        step: Step,
        l: usize,
        x: &[f32],
        qr: &[f32],
        latent: Option<&[f32]>,
        offset: usize,
    ) -> Result<(usize, Vec<i64>), BackendError> {
        let cfg = self.cfg.clone();
        let role = cfg.role(l);
        let (s, d, hd, sp) = (self.s(), cfg.dim, cfg.head_dim, self.sp);
        let (ih, ihd, r) = (cfg.index_n_heads, cfg.index_head_dim, role.ratio);
        let end = sp + s;
        let p = format!("layers.{l}.attn.indexer");
        if role.kv_source {
            if let Some(lat) = latent {
                let ws = self.weights.clone();
                let wk = linear(&*ws, step, &format!("{p}.wk.weight"), [ihd, hd])?;
                let k_norm = self.w(step, &format!("{p}.k_norm.weight"), &[ihd])?;
                let ng = lat.len() / hd;
                let mut k = rmsnorm(&wk.bf16(lat, ng, hd, ihd), &k_norm, cfg.norm_eps);
                for j in 0..ng {
                    let pos = compressed_row_pos(sp, r, j);
                    let row = &mut k[j * ihd..(j + 1) * ihd];
                    self.rope(l).apply(row, pos, false);
                    fp4_e8m0_block32_round_trip(row);
                }
                self.state.layers[l].k_cache.write(sp / r, &k);
                self.state.shared.index_k = Some(l);
            }
        }
        let ws = self.weights.clone();
        let wq_b = linear(
            &*ws,
            step,
            &format!("{p}.wq_b.weight"),
            [ih * ihd, cfg.q_lora_rank],
        )?;
        let mut q = wq_b.bf16(qr, s, cfg.q_lora_rank, ih * ihd);
        for t in 0..s {
            for h in 0..ih {
                let b = (t * ih + h) * ihd;
                self.rope(l).apply(&mut q[b..b + ihd], sp + t, false);
                fp4_e8m0_block32_round_trip(&mut q[b..b + ihd]);
            }
        }
        let t_vis = end / r;
        let owner = self
            .state
            .shared
            .index_k
            .ok_or_else(|| invalid(step, "no index keys have been published yet"))?;
        let keys = self.state.layers[owner].k_cache.head(t_vis);
        if self.state.layers[owner].k_cache.width != ihd {
            return Err(invalid(
                step,
                "index key width does not match index_head_dim",
            ));
        }
        let wp = linear(&*ws, step, &format!("{p}.weights_proj.weight"), [ih, d])?;
        let wscale = ((ihd as f64).powf(-0.5) * (ih as f64).powf(-0.5)) as f32;
        let wts: Vec<f32> = wp
            .bf16(x, s, d, ih)
            .into_iter()
            .map(|v| bf16_round(v * wscale))
            .collect();
        let mut score = vec![0f32; s * t_vis];
        for t in 0..s {
            for pp in 0..t_vis {
                let key = &keys[pp * ihd..(pp + 1) * ihd];
                let mut acc = 0f64;
                for h in 0..ih {
                    let dot =
                        bf16_round(dot_f64(&q[(t * ih + h) * ihd..(t * ih + h + 1) * ihd], key));
                    let v = bf16_round(dot.max(0.0) * wts[t * ih + h]);
                    acc += v as f64;
                }
                score[t * t_vis + pp] = bf16_round(acc as f32);
            }
        }
        let clen = visible_lens(s, sp, r, t_vis);
        if sp == 0 {
            for t in 0..s {
                for pp in clen[t]..t_vis {
                    score[t * t_vis + pp] = f32::NEG_INFINITY;
                }
            }
        }
        if role.candidate_source {
            let tie_fault =
                self.faults
                    .structural(FaultKind::TieOrder, &format!("shared.L{l}.candidates"), sp);
            let m = select_candidate_blocks_by(
                &score,
                t_vis,
                &clen,
                cfg.candidate_topk_blocks,
                cfg.candidate_block_size,
                if tie_fault {
                    super::faults::lowest_index_topk
                } else {
                    torch_cpu_topk_set
                },
            );
            self.state.shared.candidates = Some((s, t_vis, m));
        } else if role.candidate_consumer {
            let (rows, w, m) = self
                .state
                .shared
                .candidates
                .as_ref()
                .ok_or_else(|| invalid(step, "no candidate mask has been published yet"))?;
            if *rows != s || *w != t_vis {
                return Err(invalid(
                    step,
                    format!("candidate mask [{rows}, {w}] does not match scores [{s}, {t_vis}]"),
                ));
            }
            for (v, &keep) in score.iter_mut().zip(m.iter()) {
                if !keep {
                    *v = f32::NEG_INFINITY;
                }
            }
        }
        let k = cfg.index_topk.min(t_vis);
        if self.diagnostics {
            self.pending_diag.push(Capture::f32(
                format!("diag.L{l}.index_score"),
                vec![1, s, t_vis],
                CaptureDtype::Bf16,
                score.clone(),
            ));
        }
        let tie_fault =
            self.faults
                .structural(FaultKind::TieOrder, &format!("L{l}.sa_topk_idxs"), sp);
        let topk = if tie_fault {
            super::faults::lowest_index_topk
        } else {
            torch_cpu_topk_set
        };
        let idxs = index_topk_rows(&score, t_vis, &clen, k, offset, topk);
        Ok((k, idxs))
    }
}

/// Softmax-gated pooling of `r` consecutive rows per group, per dimension, in f32.
pub fn pool(kv: &[f32], score: &[f32], r: usize, hd: usize) -> Vec<f32> {
    let groups = kv.len() / (r * hd);
    let mut out = Vec::with_capacity(groups * hd);
    for g in 0..groups {
        for dd in 0..hd {
            let mut sc: Vec<f32> = (0..r).map(|m| score[(g * r + m) * hd + dd]).collect();
            softmax_in_place(&mut sc);
            let mut acc = 0f32;
            for (m, &pm) in sc.iter().enumerate() {
                acc += kv[(g * r + m) * hd + dd] * pm;
            }
            out.push(acc);
        }
    }
    out
}
