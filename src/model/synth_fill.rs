//! Synthesized real files with data (`gguf synth --fill-layers A-B [--fill-experts N]`): the
//! real antirez tensor plan ([`crate::gguf::synth`]) with real blocks, in each tensor's own type,
//! for the token embedding, the output norm, the head, every tensor of the chosen layers and
//! the first N routed experts of each of their expert tensors. The rest stays holes (zero
//! weights are valid, so the file still runs end to end), engram tables included.
//!
//! Values: each filled GGUF tensor holds the filler values ([`filler_element`], spec §4.1) of
//! the reference parameter it stores (`blk.3.attn_q_a.weight` holds `layers.3.attn.wq_a.weight`
//! of the real geometry's parameter list), encoded with our encoders
//! ([`crate::gguf::quant::encode`]). So F32 tensors read back exactly as the filler, F16 ones
//! exactly where the reference stores bf16 (f16 holds those values in this range) and within
//! f16's rounding elsewhere, quantized ones within their type's step. The fill streams tensor by tensor in row chunks and writes in place, so memory stays
//! a few hundred MB whatever the file size.
//!
//! Lives in `model` rather than `gguf` because it reads the reference parameter list and the
//! filler (`gguf` never depends on `model`).

use crate::gguf::dialect::Dialect;
use crate::gguf::names::{gguf_to_reference, ReferenceTarget};
use crate::gguf::quant::encode::quantize;
use crate::gguf::synth::{antirez_plan, write_sparse_layout, PlannedTensor, RealLayout};
use crate::gguf::GgufError;
use crate::golden::WeightMeta;
use crate::model::params::param_list;
use crate::model::weights::filler_element;
use crate::model::ModelConfig;
use rayon::prelude::*;
use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Values generated and encoded per chunk of a streamed tensor (16M values: 64 MB as f32).
const FILL_CHUNK_VALUES: usize = 1 << 24;

/// Why a fill failed.
#[derive(Debug, thiserror::Error)]
pub enum SynthFillError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Config(#[from] crate::model::ConfigError),
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("--fill-layers {first}-{last}: the layout has layers 0-{max_layer}")]
    Layers {
        first: u64,
        last: u64,
        max_layer: u64,
    },
    #[error("--fill-experts {asked}: the layout has {experts} routed experts per layer")]
    Experts { asked: u64, experts: u64 },
    #[error("tensor {tensor}: {msg}")]
    Tensor { tensor: String, msg: String },
}

/// What to fill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FillPlan {
    /// Layers whose every tensor gets data.
    pub layers: RangeInclusive<u64>,
    /// Routed experts (the first N) filled in each expert tensor of those layers.
    pub experts: u64,
    /// Fill the token embedding, output norm and head (what the CLI always does; 2 GB of the
    /// file, so tests of one layer may leave them as holes).
    pub globals: bool,
}

/// What a fill wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FillReport {
    /// Data section start.
    pub data_offset: u64,
    /// The file's apparent length (the real file's for the layout).
    pub file_len: u64,
    /// Bytes the file occupies on disk (allocated blocks; holes cost nothing).
    pub bytes_on_disk: u64,
    /// Tensor data bytes written.
    pub bytes_written: u64,
    /// Tensors that got data (an expert tensor counts once however many experts).
    pub tensors_filled: usize,
    /// Tensors left as holes.
    pub tensors_left_as_holes: usize,
}

/// One filled region: every filler element of `meta`, encoded as the tensor's type at absolute
/// file offset `offset`.
struct Region<'a> {
    meta: &'a WeightMeta,
    offset: u64,
}

fn block_layout(t: &PlannedTensor) -> Result<(usize, usize), SynthFillError> {
    t.ggml_type
        .block_layout()
        .ok_or_else(|| SynthFillError::Tensor {
            tensor: t.name.clone(),
            msg: format!("type {} has no block layout", t.ggml_type),
        })
}

/// Writes `layout` to `path` with the tensors `plan` selects filled (see the module docs) and
/// returns what was written. The file is built as `<path>.fill.tmp` and renamed when complete.
pub fn write_filled_layout(
    path: &Path,
    layout: RealLayout,
    plan: &FillPlan,
) -> Result<FillReport, SynthFillError> {
    let cfg = ModelConfig::deepseek_v41_flash();
    let (first, last) = (*plan.layers.start(), *plan.layers.end());
    let n_layers = cfg.n_layers as u64;
    if first > last || last >= n_layers {
        return Err(SynthFillError::Layers {
            first,
            last,
            max_layer: n_layers - 1,
        });
    }
    if plan.experts > cfg.n_routed_experts as u64 {
        return Err(SynthFillError::Experts {
            asked: plan.experts,
            experts: cfg.n_routed_experts as u64,
        });
    }
    let metas: HashMap<String, WeightMeta> = param_list(&cfg)?
        .into_iter()
        .map(|m| (m.name.clone(), m))
        .collect();
    let tmp = PathBuf::from(format!("{}.fill.tmp", path.display()));
    let io = |action: &'static str| {
        let p = tmp.clone();
        move |source| SynthFillError::Io {
            path: p,
            action,
            source,
        }
    };
    let result = (|| {
        let data_offset = write_sparse_layout(&tmp, layout)?;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&tmp)
            .map_err(io("open"))?;
        let mut offset = data_offset;
        let (mut filled, mut holes, mut written) = (0usize, 0usize, 0u64);
        for t in antirez_plan(layout) {
            let (bv, bb) = block_layout(&t)?;
            let n: u64 = t.dims.iter().product();
            let n_bytes = n / bv as u64 * bb as u64;
            let regions = regions_of(&t, offset, n_bytes, plan, &metas)?;
            if regions.is_empty() {
                holes += 1;
            } else {
                filled += 1;
            }
            for r in regions {
                written += write_region(&file, &t, &r, bv, bb, &tmp)?;
            }
            offset += n_bytes.div_ceil(16384) * 16384;
        }
        file.sync_all().map_err(io("sync"))?;
        let meta = file.metadata().map_err(io("stat"))?;
        drop(file);
        std::fs::rename(&tmp, path).map_err(io("rename"))?;
        Ok(FillReport {
            data_offset,
            file_len: meta.len(),
            bytes_on_disk: meta.blocks() * 512,
            bytes_written: written,
            tensors_filled: filled,
            tensors_left_as_holes: holes,
        })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The layer of a `blk.N.` tensor.
fn layer_of(name: &str) -> Option<u64> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// The regions of tensor `t` (at absolute `offset`, `n_bytes` long) the plan fills.
fn regions_of<'a>(
    t: &PlannedTensor,
    offset: u64,
    n_bytes: u64,
    plan: &FillPlan,
    metas: &'a HashMap<String, WeightMeta>,
) -> Result<Vec<Region<'a>>, SynthFillError> {
    let wanted = match layer_of(&t.name) {
        Some(l) => plan.layers.contains(&l),
        // Globals: the embedding, the output norm and the head.
        None => plan.globals,
    };
    if !wanted {
        return Ok(Vec::new());
    }
    let bad = |msg: String| SynthFillError::Tensor {
        tensor: t.name.clone(),
        msg,
    };
    let meta_of = |name: &str, n: u64| -> Result<&'a WeightMeta, SynthFillError> {
        let m = metas.get(name).ok_or_else(|| {
            bad(format!(
                "reference parameter {name} is not in the parameter list"
            ))
        })?;
        if m.n as u64 != n {
            return Err(bad(format!("{name} has {} elements, the slot {n}", m.n)));
        }
        Ok(m)
    };
    let n: u64 = t.dims.iter().product();
    match gguf_to_reference(Dialect::Ds4, &t.name) {
        // A tensor the reference model does not compute with (the vision-only routing bias)
        // stays a hole.
        Some(ReferenceTarget::Param(name)) if !metas.contains_key(&name) => Ok(Vec::new()),
        Some(ReferenceTarget::Param(name)) => Ok(vec![Region {
            meta: meta_of(&name, n)?,
            offset,
        }]),
        Some(target @ ReferenceTarget::Experts { .. }) => {
            let n_experts = t.dims.get(2).copied().unwrap_or(1);
            let slab_values = n / n_experts;
            let slab_bytes = n_bytes / n_experts;
            (0..plan.experts.min(n_experts))
                .map(|e| {
                    let name = target
                        .expert_param(e)
                        .ok_or_else(|| bad("no expert parameter name".into()))?;
                    Ok(Region {
                        meta: meta_of(&name, slab_values)?,
                        offset: offset + e * slab_bytes,
                    })
                })
                .collect()
        }
        // Engram tables stay holes (zero rows are valid codes and scales); so do tensors with
        // no reference counterpart.
        Some(ReferenceTarget::EngramTable { .. }) | None => Ok(Vec::new()),
    }
}

/// Generates, encodes and writes one region in chunks of whole rows; returns the bytes written.
fn write_region(
    file: &std::fs::File,
    t: &PlannedTensor,
    r: &Region<'_>,
    block_values: usize,
    block_bytes: usize,
    path: &Path,
) -> Result<u64, SynthFillError> {
    let row = t.dims.first().copied().unwrap_or(1) as usize;
    let rows_per_chunk = (FILL_CHUNK_VALUES / row).max(1);
    let total = r.meta.n;
    let mut written = 0u64;
    let mut start = 0usize;
    while start < total {
        let end = (start + rows_per_chunk * row).min(total);
        let mut values = vec![0f32; end - start];
        values
            .par_chunks_mut(row)
            .enumerate()
            .for_each(|(i, chunk)| {
                let base = (start + i * row) as u64;
                for (j, v) in chunk.iter_mut().enumerate() {
                    *v = filler_element(r.meta, base + j as u64);
                }
            });
        let pieces: Vec<Vec<u8>> = values
            .par_chunks(row)
            .map(|x| quantize(t.ggml_type, x))
            .collect::<Result<_, _>>()?;
        let bytes: Vec<u8> = pieces.concat();
        let at = r.offset + (start / block_values * block_bytes) as u64;
        file.write_all_at(&bytes, at)
            .map_err(|source| SynthFillError::Io {
                path: path.to_path_buf(),
                action: "write",
                source,
            })?;
        written += bytes.len() as u64;
        start = end;
    }
    Ok(written)
}
