//! Isolated mode, backend-neutral half: which of the reference's tensors reseed a step's inputs
//! and persistent state. [`plan`] walks the position bookkeeping (which cache rows exist when a
//! block starts, which regime last published a layer's index keys, which source last filled the
//! shared slots, which tokens of the compressor's partial group came before) once; each backend
//! only writes the planned tensors into its own storage (host vectors or device buffers).

use super::{ModelConfig, SeedTensors, Step};

/// One tensor to write before the step runs.
#[derive(Debug, Clone, PartialEq)]
pub enum SeedItem {
    /// An earlier regime's token ids at `start` (the engram n-gram hash history).
    HashHistory { start: usize, ids: Vec<i64> },
    /// The whole `[s, n_engram_layers, cols]` hash tensor of the current forward.
    Hashes(Vec<i64>),
    /// One engram layer's `[s, cols]` hash ids (index `li` among the engram layers), when the
    /// reference holds only those.
    LayerHashIds { li: usize, ids: Vec<i64> },
    /// The residual stream `[s, hc, dim]`.
    Stream(Vec<f32>),
    /// The pre-mix weights `[s, hc]` the block collapses the stream with.
    PreMix(Vec<f32>),
    /// Layer `layer`'s window ring `[window, head_dim]` (decode only).
    WindowRing { layer: usize, rows: Vec<f32> },
    /// The first rows of kv source `layer`'s compressed-KV cache.
    CompressKv { layer: usize, rows: Vec<f32> },
    /// The first rows of kv source `layer`'s index-key cache.
    IndexK { layer: usize, rows: Vec<f32> },
    /// The shared compressed top-k slot `[s, k]` as the last index source left it.
    TopkSlot(Vec<i64>),
    /// The shared candidate mask `[s, T]` (0/1) as the candidate source left it.
    CandidateSlot(Vec<i64>),
    /// The `attn_in` row `x` of an earlier position of layer `layer`'s partial compressor group;
    /// the backend projects it (wkv, wgate, f32) into partial-group slot `slot`.
    CompressorRow {
        layer: usize,
        slot: usize,
        x: Vec<f32>,
    },
}

/// What to write, and what the reference could not provide (named, for the report).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeedPlan {
    pub items: Vec<SeedItem>,
    pub missing: Vec<String>,
}

/// Which shared slots the backend's own run has filled so far in this forward (only filled
/// slots are reseeded: an empty one is not read before it is written).
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotsInUse {
    pub topk_idxs: bool,
    pub candidates: bool,
}

impl ModelConfig {
    /// Does kv source `l` produce a compressed latent in a forward of `s` tokens at `sp`?
    pub fn has_latent(&self, l: usize, sp: usize, s: usize) -> bool {
        let r = self.compress_ratios.get(l).copied().unwrap_or(0);
        match r {
            0 => false,
            1 => true,
            _ if sp == 0 => s >= r,
            _ => (sp + 1) % r == 0,
        }
    }
}

/// Whether the reference ran block `l` in regime `back` (it holds the block's `pre_mix_out`,
/// a few values, so asking is cheap).
fn ran_layer(reference: &dyn SeedTensors, back: usize, l: usize) -> bool {
    reference
        .full_f32(back, &format!("L{l}.pre_mix_out"))
        .is_some()
}

/// The tensors that reseed `step` of a forward of `s` tokens at `sp`.
pub fn plan(
    cfg: &ModelConfig,
    step: Step,
    sp: usize,
    s: usize,
    slots: SlotsInUse,
    reference: &dyn SeedTensors,
) -> SeedPlan {
    let mut p = SeedPlan::default();
    let (d, hc) = (cfg.dim, cfg.hc_mult);
    match step {
        Step::EngramHash => {
            for back in 1..=reference.earlier_regimes() {
                match (
                    reference.start_pos(back),
                    reference.full_i64(back, "input_ids"),
                ) {
                    (Some(start), Some(ids)) => p.items.push(SeedItem::HashHistory { start, ids }),
                    _ => p
                        .missing
                        .push(format!("input_ids of regime -{back} (hash history)")),
                }
            }
        }
        Step::Embed => {}
        Step::Engram(l) => {
            p.f32(
                reference,
                &format!("L{l}.engram_in"),
                s * hc * d,
                SeedItem::Stream,
            );
            if let Some(e) = &cfg.engram {
                let n_eng = e.layer_ids.len();
                let cols = e.n_hash_cols();
                if let Some(all) = reference
                    .full_i64(0, "engram_hashes")
                    .filter(|v| v.len() == s * n_eng * cols)
                {
                    p.items.push(SeedItem::Hashes(all));
                } else if let (Some(li), Some(ids)) = (
                    e.layer_ids.iter().position(|&x| x == l),
                    reference
                        .full_i64(0, &format!("L{l}.engram_hash_ids"))
                        .filter(|v| v.len() == s * cols),
                ) {
                    p.items.push(SeedItem::LayerHashIds { li, ids });
                } else {
                    p.missing.push(format!("L{l}.engram_hash_ids"));
                }
            }
        }
        Step::Block(l) => {
            p.f32(
                reference,
                &format!("L{l}.h_in"),
                s * hc * d,
                SeedItem::Stream,
            );
            p.f32(
                reference,
                &format!("L{l}.pre_mix_in"),
                s * hc,
                SeedItem::PreMix,
            );
            p.window(cfg, l, sp, reference);
            p.caches(cfg, l, sp, s, reference);
            p.slots(cfg, l, slots, reference);
            if cfg.kv_source_layers.contains(&l) && cfg.compress_ratios[l] > 1 && sp > 0 {
                p.compressor(cfg, l, sp, reference);
            }
        }
        Step::Final => {
            // The last block the reference ran: the model's last, or a `--layers` range's.
            let last = (0..cfg.n_layers)
                .rev()
                .find(|&l| ran_layer(reference, 0, l))
                .unwrap_or(cfg.n_layers.saturating_sub(1));
            p.f32(
                reference,
                &format!("L{last}.h_out"),
                s * hc * d,
                SeedItem::Stream,
            );
            p.f32(
                reference,
                &format!("L{last}.pre_mix_out"),
                s * hc,
                SeedItem::PreMix,
            );
        }
    }
    p
}

impl SeedPlan {
    fn f32(
        &mut self,
        reference: &dyn SeedTensors,
        name: &str,
        len: usize,
        item: fn(Vec<f32>) -> SeedItem,
    ) {
        match reference.full_f32(0, name) {
            Some(v) if v.len() == len => self.items.push(item(v)),
            _ => self.missing.push(name.to_string()),
        }
    }

    /// The ring before a decode step equals this step's `sa_kv` window rows except the slot the
    /// step overwrites.
    fn window(&mut self, cfg: &ModelConfig, l: usize, sp: usize, reference: &dyn SeedTensors) {
        if sp == 0 {
            return;
        }
        let n = cfg.window_size * cfg.head_dim;
        match reference.full_f32(0, &format!("L{l}.sa_kv")) {
            Some(mut v) if v.len() >= n => {
                v.truncate(n);
                self.items.push(SeedItem::WindowRing { layer: l, rows: v });
            }
            _ => self.missing.push(format!("L{l}.sa_kv (window ring)")),
        }
    }

    /// Compressed-KV and index-key caches of every kv source, with the rows that exist when
    /// block `l` starts.
    fn caches(
        &mut self,
        cfg: &ModelConfig,
        l: usize,
        sp: usize,
        s: usize,
        reference: &dyn SeedTensors,
    ) {
        for &x in &cfg.kv_source_layers {
            // A source layer the reference never ran (outside a `--layers` range) published
            // nothing, and the backend leaves its slot untouched: nothing to seed.
            if !(0..=reference.earlier_regimes()).any(|b| ran_layer(reference, b, x)) {
                continue;
            }
            let r = cfg.compress_ratios[x].max(1);
            let rows = if x < l { (sp + s) / r } else { sp / r };
            if rows == 0 {
                continue;
            }
            let hd = cfg.head_dim;
            // The cache is append-only, so any regime's capture that holds the first `rows`
            // rows holds them as they are now: the current regime's first (a golden holds the
            // whole regime up front), else the latest earlier one (a live recording has not
            // reached layer x of the current regime when an earlier layer is seeded).
            let name = format!("shared.L{x}.compress_kv");
            match (0..=reference.earlier_regimes()).find_map(|back| {
                reference
                    .full_f32(back, &name)
                    .filter(|v| v.len() >= rows * hd)
            }) {
                Some(mut v) => {
                    v.truncate(rows * hd);
                    self.items.push(SeedItem::CompressKv { layer: x, rows: v });
                }
                None => self.missing.push(format!("shared.L{x}.compress_kv")),
            }
            // Index keys: from the latest regime (current first) in which x published its keys.
            let ihd = cfg.index_head_dim;
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
                if len == 0 || !cfg.has_latent(x, start, len) {
                    continue;
                }
                if let Some(mut v) = reference
                    .full_f32(back, &format!("shared.L{x}.index_k"))
                    .filter(|v| v.len() >= rows.min((start + len) / r) * ihd)
                {
                    let n = rows.min(v.len() / ihd.max(1));
                    v.truncate(n * ihd);
                    self.items.push(SeedItem::IndexK { layer: x, rows: v });
                    found = true;
                }
                break;
            }
            if !found {
                self.missing.push(format!("shared.L{x}.index_k"));
            }
        }
    }

    /// The published top-k and candidate slots as the last source before block `l` left them.
    fn slots(
        &mut self,
        cfg: &ModelConfig,
        l: usize,
        in_use: SlotsInUse,
        reference: &dyn SeedTensors,
    ) {
        let n = cfg.n_layers;
        let order: Vec<(usize, usize)> = (0..l)
            .rev()
            .map(|j| (0, j))
            .chain(
                (1..=reference.earlier_regimes()).flat_map(|b| (0..n).rev().map(move |j| (b, j))),
            )
            .collect();
        for (used, name) in [
            (in_use.topk_idxs, "topk_idxs"),
            (in_use.candidates, "candidates"),
        ] {
            if !used {
                continue;
            }
            let hit = order.iter().find_map(|&(b, j)| {
                if !cfg.is_shared_capture_layer(j) {
                    return None;
                }
                reference.full_i64(b, &format!("shared.L{j}.{name}"))
            });
            match hit {
                Some(v) if name == "topk_idxs" => self.items.push(SeedItem::TopkSlot(v)),
                Some(v) => self.items.push(SeedItem::CandidateSlot(v)),
                None => self.missing.push(format!("shared slot {name} before L{l}")),
            }
        }
    }

    /// The compressor's partial group: the reference's `attn_in` rows of the group's earlier
    /// tokens, from the regimes that ran them.
    fn compressor(&mut self, cfg: &ModelConfig, l: usize, sp: usize, reference: &dyn SeedTensors) {
        let d = cfg.dim;
        let r = cfg.compress_ratios[l];
        for pos in sp - sp % r..sp {
            let row = (1..=reference.earlier_regimes()).find_map(|b| {
                let start = reference.start_pos(b)?;
                let x = reference.full_f32(b, &format!("L{l}.attn_in"))?;
                let len = x.len() / d.max(1);
                (pos >= start && pos < start + len)
                    .then(|| x[(pos - start) * d..(pos - start + 1) * d].to_vec())
            });
            match row {
                Some(x) => self.items.push(SeedItem::CompressorRow {
                    layer: l,
                    slot: pos % r,
                    x,
                }),
                None => self.missing.push(format!(
                    "L{l}.attn_in at position {pos} (compressor partial group)"
                )),
            }
        }
    }
}

/// Apply the items every backend keeps on the host (the hash history and the forward's engram
/// hashes) to `hash_cache` and `hashes`; any other item is handed back for the backend to write.
pub fn apply_host_item(
    item: SeedItem,
    cfg: &ModelConfig,
    tables: Option<&super::EngramTables>,
    s: usize,
    hash_cache: &mut Vec<i64>,
    hashes: &mut Vec<i64>,
    missing: &mut Vec<String>,
) -> Option<SeedItem> {
    match item {
        SeedItem::HashHistory { start, ids } => {
            if let Some(t) = tables {
                t.seed_history(hash_cache, start, &ids);
            }
        }
        SeedItem::Hashes(v) => *hashes = v,
        SeedItem::LayerHashIds { li, ids } => {
            if let Some(e) = &cfg.engram {
                let (n, cols) = (e.layer_ids.len(), e.n_hash_cols());
                if !super::engram::splice_layer_hash_ids(hashes, s, n, cols, li, &ids) {
                    missing.push(format!("engram hash ids of engram layer {li}"));
                }
            }
        }
        other => return Some(other),
    }
    None
}
