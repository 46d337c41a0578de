//! The GPU backend's persistent state (mirrors `oracle/state.rs`): per-layer window rings,
//! compressor partial groups and growable compressed-KV / index-key caches on the device, and
//! the shared slots as pointers to the layer whose cache they name.

use crate::gpu::exec::{Gpu, Tensor};
use crate::gpu::{guard, GpuError};
use crate::model::ModelConfig;

/// A growable cache of fixed-width rows on the device (unwritten rows read as zero).
pub(super) struct RowCache {
    pub(super) width: usize,
    cap_rows: usize,
    t: Option<Tensor>,
}

impl RowCache {
    pub(super) fn new(width: usize) -> RowCache {
        RowCache {
            width,
            cap_rows: 0,
            t: None,
        }
    }

    /// The cache tensor, grown (doubling, old rows copied) to hold at least `rows` rows.
    pub(super) fn ensure(&mut self, gpu: &mut Gpu, rows: usize) -> Result<&Tensor, GpuError> {
        if self.t.is_none() || self.cap_rows < rows {
            let cap = rows.max(2 * self.cap_rows).max(1);
            let t = gpu.zeros("row cache", cap * self.width)?;
            if let Some(old) = &self.t {
                gpu.copy(old, 0, &t, 0, self.cap_rows * self.width)?;
            }
            self.t = Some(t);
            self.cap_rows = cap;
        }
        self.t
            .as_ref()
            .ok_or_else(|| guard("row cache", "unallocated"))
    }

    /// Write the rows of `rows` from row `start` on.
    pub(super) fn write(
        &mut self,
        gpu: &mut Gpu,
        start: usize,
        rows: &Tensor,
    ) -> Result<(), GpuError> {
        let n = rows.len / self.width.max(1);
        let t = self.ensure(gpu, start + n)?.clone();
        gpu.copy(rows, 0, &t, start * self.width, n * self.width)
    }
}

/// One layer's device state.
pub(super) struct LayerState {
    /// The sliding window ring `[window_size, head_dim]`: slot `p % win` holds token p's row.
    pub(super) win: Tensor,
    /// A pooling compressor's partial group (kv and gate scores), on kv-source layers only.
    pub(super) kv_state: Option<Tensor>,
    pub(super) score_state: Option<Tensor>,
    pub(super) compress_kv: RowCache,
    pub(super) k_cache: RowCache,
}

impl LayerState {
    /// Fresh state of layer `l`: zero rings and caches, gate scores at -inf (an empty group).
    pub(super) fn fresh(gpu: &Gpu, cfg: &ModelConfig, l: usize) -> Result<LayerState, GpuError> {
        let r = cfg.compress_ratios[l];
        let pooled = cfg.kv_source_layers.contains(&l) && r > 1;
        let hd = cfg.head_dim;
        Ok(LayerState {
            win: gpu.zeros("window ring", cfg.window_size * hd)?,
            kv_state: if pooled {
                Some(gpu.zeros("kv_state", r * hd)?)
            } else {
                None
            },
            score_state: if pooled {
                Some(gpu.upload("score_state", &vec![f32::NEG_INFINITY; r * hd])?)
            } else {
                None
            },
            compress_kv: RowCache::new(hd),
            k_cache: RowCache::new(cfg.index_head_dim),
        })
    }
}

/// The four shared slots (spec §12.6): which layer's compressed-KV and index-key caches are
/// current, and the last published top-k rows `(rows, k, idx)` and candidate mask
/// `(rows, width, mask)`.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) compress_kv: Option<usize>,
    pub(super) index_k: Option<usize>,
    pub(super) topk_idxs: Option<(usize, usize, Tensor)>,
    pub(super) candidates: Option<(usize, usize, Tensor)>,
}
