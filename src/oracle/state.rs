//! State that persists across regimes (spec §15): window rings, compressor partial groups,
//! compressed-KV and index-key caches, the shared slots (as pointers to a layer's cache), and the
//! n-gram hash history.

/// A cache of fixed-width rows that grows on write; unwritten rows read as zero (the reference
/// zero-initialises its buffers), so real `max_seq_len` caches cost only what is used.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowCache {
    pub width: usize,
    pub data: Vec<f32>,
}

impl RowCache {
    pub fn new(width: usize) -> RowCache {
        RowCache {
            width,
            data: Vec::new(),
        }
    }
    /// Write `rows` (a multiple of `width` values) starting at row `start`.
    pub fn write(&mut self, start: usize, rows: &[f32]) {
        let end = start * self.width + rows.len();
        if self.data.len() < end {
            self.data.resize(end, 0.0);
        }
        self.data[start * self.width..end].copy_from_slice(rows);
    }
    /// The first `n` rows (zero-padded past what was written).
    pub fn head(&self, n: usize) -> Vec<f32> {
        let want = n * self.width;
        let mut out = self.data[..want.min(self.data.len())].to_vec();
        out.resize(want, 0.0);
        out
    }
}

/// Per-layer persistent state.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerState {
    /// Sliding-window ring `[window, head_dim]`, slot order.
    pub win: Vec<f32>,
    /// Compressor partial group `[ratio, head_dim]` (ratio > 1 kv sources).
    pub kv_state: Vec<f32>,
    /// Compressor partial-group scores, initialised to -inf.
    pub score_state: Vec<f32>,
    /// Compressed-KV cache (kv sources): post-RoPE, fp4(e4m3/16) latents.
    pub compress_kv: RowCache,
    /// Index-key cache (kv sources).
    pub k_cache: RowCache,
}

/// The module-global `SharedAttentionRuntime`: four slots that sources overwrite and consumers
/// read, never reset between forwards. Cache slots are pointers: the layer whose cache they name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SharedSlots {
    pub compress_kv: Option<usize>,
    pub index_k: Option<usize>,
    /// `[s, k]` with its k, from the last index source.
    pub topk_idxs: Option<(usize, usize, Vec<i64>)>,
    /// `[rows, width]` mask from the candidate source.
    pub candidates: Option<(usize, usize, Vec<bool>)>,
}

/// Everything that persists across regimes.
#[derive(Debug, Clone, PartialEq)]
pub struct PersistentState {
    pub layers: Vec<LayerState>,
    pub shared: SharedSlots,
    /// Compressed token id per absolute position seen so far.
    pub hash_cache: Vec<i64>,
}
