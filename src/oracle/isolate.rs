//! Isolated mode: before a step runs, overwrite its inputs and every piece of persistent state it
//! reads with the reference's tensors, so the step's own (local) error shows alone.
//! Pointer semantics of the shared cache slots depend only on positions, so the oracle's own
//! pointers stay; their *contents* (caches, published indices and masks) are reseeded.

use super::Oracle;
use crate::model::{BackendError, SeedTensors, Step};

impl Oracle {
    /// Does kv source `l` produce a latent in a forward of `s` tokens at `sp`?
    fn has_latent(&self, l: usize, sp: usize, s: usize) -> bool {
        let r = self.cfg.compress_ratios[l];
        match r {
            0 => false,
            1 => true,
            _ if sp == 0 => s >= r,
            _ => (sp + 1) % r == 0,
        }
    }

    pub(super) fn seed_step(
        &mut self,
        step: Step,
        reference: &dyn SeedTensors,
    ) -> Result<Vec<String>, BackendError> {
        let mut missing = Vec::new();
        let (s, d, hc) = (self.s(), self.cfg.dim, self.cfg.hc_mult);
        let sp = self.sp;
        match step {
            Step::EngramHash => {
                // The hash history: every earlier position's compressed id, from earlier input_ids.
                let tables = self.engram.clone();
                for back in 1..=reference.earlier_regimes() {
                    let (Some(start), Some(ids)) = (
                        reference.start_pos(back),
                        reference.full_i64(back, "input_ids"),
                    ) else {
                        missing.push(format!("input_ids of regime -{back} (hash history)"));
                        continue;
                    };
                    if let Some(t) = &tables {
                        if self.state.hash_cache.len() < start + ids.len() {
                            self.state.hash_cache.resize(start + ids.len(), 0);
                        }
                        for (i, &id) in ids.iter().enumerate() {
                            let c = usize::try_from(id)
                                .ok()
                                .and_then(|x| t.token_map.get(x).copied())
                                .unwrap_or(t.pad_id_compressed);
                            self.state.hash_cache[start + i] = c;
                        }
                    }
                }
            }
            Step::Embed => {}
            Step::Engram(l) => {
                seed_into(
                    &mut self.h,
                    reference,
                    &format!("L{l}.engram_in"),
                    s * hc * d,
                    &mut missing,
                );
                if let Some(e) = self.cfg.engram.clone() {
                    let n_eng = e.layer_ids.len();
                    let cols = e.n_hash_cols();
                    if let Some(all) = reference
                        .full_i64(0, "engram_hashes")
                        .filter(|v| v.len() == s * n_eng * cols)
                    {
                        self.hashes = all;
                    } else if let (Some(li), Some(ids)) = (
                        e.layer_ids.iter().position(|&x| x == l),
                        reference
                            .full_i64(0, &format!("L{l}.engram_hash_ids"))
                            .filter(|v| v.len() == s * cols),
                    ) {
                        if self.hashes.len() == s * n_eng * cols {
                            for t in 0..s {
                                self.hashes[(t * n_eng + li) * cols..(t * n_eng + li + 1) * cols]
                                    .copy_from_slice(&ids[t * cols..(t + 1) * cols]);
                            }
                        }
                    } else {
                        missing.push(format!("L{l}.engram_hash_ids"));
                    }
                }
            }
            Step::Block(l) => {
                seed_into(
                    &mut self.h,
                    reference,
                    &format!("L{l}.h_in"),
                    s * hc * d,
                    &mut missing,
                );
                seed_into(
                    &mut self.pre_mix,
                    reference,
                    &format!("L{l}.pre_mix_in"),
                    s * hc,
                    &mut missing,
                );
                self.seed_window(l, reference, &mut missing);
                self.seed_caches(l, reference, &mut missing);
                self.seed_slots(l, reference, &mut missing);
                if self.cfg.kv_source_layers.contains(&l)
                    && self.cfg.compress_ratios[l] > 1
                    && sp > 0
                {
                    self.seed_compressor(l, reference, &mut missing)?;
                }
            }
            Step::Final => {
                let last = self.cfg.n_layers - 1;
                seed_into(
                    &mut self.h,
                    reference,
                    &format!("L{last}.h_out"),
                    s * hc * d,
                    &mut missing,
                );
                seed_into(
                    &mut self.pre_mix,
                    reference,
                    &format!("L{last}.pre_mix_out"),
                    s * hc,
                    &mut missing,
                );
            }
        }
        Ok(missing)
    }

    /// The ring before a decode step equals this step's `sa_kv` window rows except the slot the
    /// step overwrites.
    fn seed_window(&mut self, l: usize, reference: &dyn SeedTensors, missing: &mut Vec<String>) {
        if self.sp == 0 {
            return;
        }
        let (win, hd) = (self.cfg.window_size, self.cfg.head_dim);
        match reference.full_f32(0, &format!("L{l}.sa_kv")) {
            Some(v) if v.len() >= win * hd => {
                self.state.layers[l].win.copy_from_slice(&v[..win * hd])
            }
            _ => missing.push(format!("L{l}.sa_kv (window ring)")),
        }
    }

    /// Compressed-KV and index-key caches of every kv source, with the rows that exist when
    /// block `l` starts.
    fn seed_caches(&mut self, l: usize, reference: &dyn SeedTensors, missing: &mut Vec<String>) {
        let (s, sp) = (self.s(), self.sp);
        for x in self.cfg.kv_source_layers.clone() {
            let r = self.cfg.compress_ratios[x];
            let rows = if x < l { (sp + s) / r } else { sp / r };
            if rows == 0 {
                continue;
            }
            let hd = self.cfg.head_dim;
            match reference
                .full_f32(0, &format!("shared.L{x}.compress_kv"))
                .filter(|v| v.len() >= rows * hd)
            {
                Some(v) => self.state.layers[x].compress_kv.write(0, &v[..rows * hd]),
                None => missing.push(format!("shared.L{x}.compress_kv")),
            }
            // Index keys: from the latest regime (current first) in which x published its own keys.
            let ihd = self.cfg.index_head_dim;
            let mut found = false;
            for back in 0..=reference.earlier_regimes() {
                let Some(start) = reference.start_pos(back) else {
                    continue;
                };
                let len = if back == 0 {
                    s
                } else {
                    reference
                        .full_i64(back, "input_ids")
                        .map(|v| v.len())
                        .unwrap_or(0)
                };
                if back == 0 && x >= l {
                    // x has not run yet in this regime: only earlier regimes hold its keys.
                    continue;
                }
                if len == 0 || !self.has_latent(x, start, len) {
                    continue;
                }
                if let Some(v) = reference
                    .full_f32(back, &format!("shared.L{x}.index_k"))
                    .filter(|v| v.len() >= rows.min((start + len) / r) * ihd)
                {
                    let n = rows.min(v.len() / ihd);
                    self.state.layers[x].k_cache.write(0, &v[..n * ihd]);
                    found = true;
                }
                break;
            }
            if !found {
                missing.push(format!("shared.L{x}.index_k"));
            }
        }
    }

    /// The published top-k and candidate slots as the last source before block `l` left them.
    fn seed_slots(&mut self, l: usize, reference: &dyn SeedTensors, missing: &mut Vec<String>) {
        let n = self.cfg.n_layers;
        let order: Vec<(usize, usize)> = (0..l)
            .rev()
            .map(|j| (0, j))
            .chain(
                (1..=reference.earlier_regimes()).flat_map(|b| (0..n).rev().map(move |j| (b, j))),
            )
            .collect();
        for (slot, name) in [(0, "topk_idxs"), (1, "candidates")] {
            let occupied = if slot == 0 {
                self.state.shared.topk_idxs.is_some()
            } else {
                self.state.shared.candidates.is_some()
            };
            if !occupied {
                continue;
            }
            let hit = order.iter().find_map(|&(b, j)| {
                if !self.cfg.is_shared_capture_layer(j) {
                    return None;
                }
                reference
                    .full_i64(b, &format!("shared.L{j}.{name}"))
                    .map(|v| (b, j, v))
            });
            match hit {
                Some((_, _, v)) => {
                    if slot == 0 {
                        if let Some((rows, k, cur)) = &mut self.state.shared.topk_idxs {
                            if v.len() == *rows * *k {
                                *cur = v;
                            }
                        }
                    } else if let Some((rows, w, cur)) = &mut self.state.shared.candidates {
                        if v.len() == *rows * *w {
                            *cur = v.iter().map(|&b| b != 0).collect();
                        }
                    }
                }
                None => missing.push(format!("shared slot {name} before L{l}")),
            }
        }
    }

    /// Refill the compressor's partial group by replaying it on the reference's `attn_in` rows of
    /// the group's earlier tokens.
    fn seed_compressor(
        &mut self,
        l: usize,
        reference: &dyn SeedTensors,
        missing: &mut Vec<String>,
    ) -> Result<(), BackendError> {
        let step = Step::Block(l);
        let (d, hd, sp) = (self.cfg.dim, self.cfg.head_dim, self.sp);
        let r = self.cfg.compress_ratios[l];
        let first = sp - sp % r;
        let p = format!("layers.{l}.attn.compressor");
        let wkv = self.w(step, &format!("{p}.wkv.weight"), &[hd, d])?;
        let wgate = self.w(step, &format!("{p}.wgate.weight"), &[hd, d])?;
        for pos in first..sp {
            let row = (1..=reference.earlier_regimes()).find_map(|b| {
                let start = reference.start_pos(b)?;
                let x = reference.full_f32(b, &format!("L{l}.attn_in"))?;
                let len = x.len() / d;
                (pos >= start && pos < start + len)
                    .then(|| x[(pos - start) * d..(pos - start + 1) * d].to_vec())
            });
            match row {
                Some(x) => {
                    let kv = super::ops::gemm_f32(&x, 1, d, &wkv, hd);
                    let sc = super::ops::gemm_f32(&x, 1, d, &wgate, hd);
                    let slot = pos % r;
                    let st = &mut self.state.layers[l];
                    st.kv_state[slot * hd..(slot + 1) * hd].copy_from_slice(&kv);
                    st.score_state[slot * hd..(slot + 1) * hd].copy_from_slice(&sc);
                }
                None => missing.push(format!(
                    "L{l}.attn_in at position {pos} (compressor partial group)"
                )),
            }
        }
        Ok(())
    }
}

fn seed_into(
    dst: &mut Vec<f32>,
    reference: &dyn SeedTensors,
    name: &str,
    len: usize,
    missing: &mut Vec<String>,
) {
    match reference.full_f32(0, name) {
        Some(v) if v.len() == len => *dst = v,
        _ => missing.push(name.to_string()),
    }
}
