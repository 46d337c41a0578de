//! Isolated mode: before a step runs, overwrite its inputs and every piece of persistent state it
//! reads with the reference's tensors, so the step's own (local) error shows alone. What to
//! write comes from [`crate::model::seed::plan`]; this file writes it into the oracle's state.
//! Pointer semantics of the shared cache slots depend only on positions, so the oracle's own
//! pointers stay; their *contents* (caches, published indices and masks) are reseeded.

use super::Oracle;
use crate::model::seed::{apply_host_item, plan, SeedItem, SlotsInUse};
use crate::model::{BackendError, SeedTensors, Step};

impl Oracle {
    pub(super) fn seed_step(
        &mut self,
        step: Step,
        reference: &dyn SeedTensors,
    ) -> Result<Vec<String>, BackendError> {
        let slots = SlotsInUse {
            topk_idxs: self.state.shared.topk_idxs.is_some(),
            candidates: self.state.shared.candidates.is_some(),
        };
        let p = plan(&self.cfg, step, self.sp, self.s(), slots, reference);
        let mut missing = p.missing;
        for item in p.items {
            self.apply_seed(step, item, &mut missing)?;
        }
        Ok(missing)
    }

    fn apply_seed(
        &mut self,
        step: Step,
        item: SeedItem,
        missing: &mut Vec<String>,
    ) -> Result<(), BackendError> {
        let s = self.s();
        let Some(item) = apply_host_item(
            item,
            &self.cfg,
            self.engram.as_ref(),
            s,
            &mut self.state.hash_cache,
            &mut self.hashes,
            missing,
        ) else {
            return Ok(());
        };
        match item {
            SeedItem::HashHistory { .. } | SeedItem::Hashes(_) | SeedItem::LayerHashIds { .. } => {}
            SeedItem::Stream(v) => self.h = v,
            SeedItem::PreMix(v) => self.pre_mix = v,
            SeedItem::WindowRing { layer, rows } => {
                let win = &mut self.state.layers[layer].win;
                if win.len() == rows.len() {
                    win.copy_from_slice(&rows);
                }
            }
            SeedItem::CompressKv { layer, rows } => {
                self.state.layers[layer].compress_kv.write(0, &rows)
            }
            SeedItem::IndexK { layer, rows } => self.state.layers[layer].k_cache.write(0, &rows),
            SeedItem::TopkSlot(v) => {
                if let Some((rows, k, cur)) = &mut self.state.shared.topk_idxs {
                    if v.len() == *rows * *k {
                        *cur = v;
                    }
                }
            }
            SeedItem::CandidateSlot(v) => {
                if let Some((rows, w, cur)) = &mut self.state.shared.candidates {
                    if v.len() == *rows * *w {
                        *cur = v.iter().map(|&b| b != 0).collect();
                    }
                }
            }
            SeedItem::CompressorRow { layer, slot, x } => {
                let (d, hd) = (self.cfg.dim, self.cfg.head_dim);
                let p = format!("layers.{layer}.attn.compressor");
                let ws = self.weights.clone();
                let wkv = super::linear::linear(&*ws, step, &format!("{p}.wkv.weight"), [hd, d])?;
                let wgate =
                    super::linear::linear(&*ws, step, &format!("{p}.wgate.weight"), [hd, d])?;
                let kv = wkv.f32(&x, 1, d, hd);
                let sc = wgate.f32(&x, 1, d, hd);
                let st = &mut self.state.layers[layer];
                if st.kv_state.len() >= (slot + 1) * hd && st.score_state.len() >= (slot + 1) * hd {
                    st.kv_state[slot * hd..(slot + 1) * hd].copy_from_slice(&kv);
                    st.score_state[slot * hd..(slot + 1) * hd].copy_from_slice(&sc);
                }
            }
        }
        Ok(())
    }
}
