//! Isolated mode on the GPU: the reference's tensors planned by [`crate::model::seed::plan`] are
//! uploaded into the device buffers the step reads (stream, pre-mix, window ring, compressed-KV
//! and index-key caches, the shared slots, the compressor's partial group), so the step's local
//! error shows alone. The partial-group rows are projected by the GPU's own GEMM kernel, as the
//! chained run would have.

use super::{berr, invalid, GpuBackend};
use crate::gpu::gemm::linear;
use crate::model::seed::{apply_host_item, plan, SeedItem, SlotsInUse};
use crate::model::{BackendError, SeedTensors, Step};

impl GpuBackend {
    pub(super) fn seed_step(
        &mut self,
        step: Step,
        reference: &dyn SeedTensors,
    ) -> Result<Vec<String>, BackendError> {
        let slots = SlotsInUse {
            topk_idxs: self.shared.topk_idxs.is_some(),
            candidates: self.shared.candidates.is_some(),
        };
        let p = plan(&self.cfg, step, self.sp, self.s(), slots, reference);
        let mut missing = p.missing;
        for item in p.items {
            self.apply_seed(step, item, &mut missing)?;
        }
        self.gpu.flush();
        Ok(missing)
    }

    fn apply_seed(
        &mut self,
        step: Step,
        item: SeedItem,
        missing: &mut Vec<String>,
    ) -> Result<(), BackendError> {
        let s = self.s();
        let e = berr(step);
        let Some(item) = apply_host_item(
            item,
            &self.cfg,
            self.engram.as_ref(),
            s,
            &mut self.hash_cache,
            &mut self.hashes,
            missing,
        ) else {
            return Ok(());
        };
        match item {
            SeedItem::HashHistory { .. } | SeedItem::Hashes(_) | SeedItem::LayerHashIds { .. } => {}
            SeedItem::Stream(v) => self.h = Some(self.gpu.upload("stream", &v).map_err(&e)?),
            SeedItem::PreMix(v) => self.pre_mix = Some(self.gpu.upload("pre_mix", &v).map_err(&e)?),
            SeedItem::WindowRing { layer, rows } => {
                let ring = self.layers[layer].win.clone();
                if ring.len != rows.len() {
                    missing.push(format!("L{layer}.sa_kv (window ring size)"));
                } else {
                    self.gpu.write(&ring, 0, &rows).map_err(&e)?;
                }
            }
            SeedItem::CompressKv { rows, .. } | SeedItem::IndexK { rows, .. }
                if rows.is_empty() => {}
            SeedItem::CompressKv { layer, rows } => {
                let t = self.gpu.upload("compress_kv seed", &rows).map_err(&e)?;
                self.layers[layer]
                    .compress_kv
                    .write(&mut self.gpu, 0, &t)
                    .map_err(&e)?;
            }
            SeedItem::IndexK { layer, rows } => {
                let t = self.gpu.upload("index_k seed", &rows).map_err(&e)?;
                self.layers[layer]
                    .k_cache
                    .write(&mut self.gpu, 0, &t)
                    .map_err(&e)?;
            }
            SeedItem::TopkSlot(v) => {
                if let Some((rows, k)) = self.shared.topk_idxs.as_ref().map(|x| (x.0, x.1)) {
                    if v.len() == rows * k && !v.is_empty() {
                        let f: Vec<f32> = v.iter().map(|&i| i as f32).collect();
                        let t = self.gpu.upload("topk seed", &f).map_err(&e)?;
                        self.shared.topk_idxs = Some((rows, k, t));
                    }
                }
            }
            SeedItem::CandidateSlot(v) => {
                if let Some((rows, w)) = self.shared.candidates.as_ref().map(|x| (x.0, x.1)) {
                    if v.len() == rows * w && !v.is_empty() {
                        let f: Vec<f32> = v.iter().map(|&b| (b != 0) as u8 as f32).collect();
                        let t = self.gpu.upload("candidates seed", &f).map_err(&e)?;
                        self.shared.candidates = Some((rows, w, t));
                    }
                }
            }
            SeedItem::CompressorRow { layer, slot, x } => {
                let (d, hd) = (self.cfg.dim, self.cfg.head_dim);
                if x.len() != d {
                    return Err(invalid(step, "compressor seed row is not [dim]"));
                }
                let (Some(kv_state), Some(score_state)) = (
                    self.layers[layer].kv_state.clone(),
                    self.layers[layer].score_state.clone(),
                ) else {
                    missing.push(format!("L{layer} compressor partial group (no state)"));
                    return Ok(());
                };
                if kv_state.len < (slot + 1) * hd || score_state.len < (slot + 1) * hd {
                    missing.push(format!("L{layer} compressor slot {slot} (state too small)"));
                    return Ok(());
                }
                let p = format!("layers.{layer}.attn.compressor");
                let wkv = self.w(step, &format!("{p}.wkv.weight"), &[hd, d])?;
                let wgate = self.w(step, &format!("{p}.wgate.weight"), &[hd, d])?;
                let xt = self.gpu.upload("compressor seed row", &x).map_err(&e)?;
                let kv = linear(&mut self.gpu, &xt, 1, &wkv, false).map_err(&e)?;
                let sc = linear(&mut self.gpu, &xt, 1, &wgate, false).map_err(&e)?;
                self.gpu
                    .copy(&kv, 0, &kv_state, slot * hd, hd)
                    .map_err(&e)?;
                self.gpu
                    .copy(&sc, 0, &score_state, slot * hd, hd)
                    .map_err(&e)?;
            }
        }
        Ok(())
    }
}
