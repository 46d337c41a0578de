//! `WeightSource`: "give me parameter P as f32 values in its stored precision". The filler source
//! regenerates a model from a parameter list (a golden's `weights_meta`, or one derived from a
//! config by `params::param_list`); the GGUF source (in `gguf`) dequantizes from a mapped file.
//! Parameters are produced lazily and cached under a byte budget, so a real-dims graph
//! materialises only what a step touches (unrouted experts never).

use crate::golden::{StorageDtype, WeightKind, WeightMeta};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A parameter that cannot be produced.
#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    #[error("parameter `{name}` is missing from {source_desc}")]
    Missing { name: String, source_desc: String },
    #[error("parameter `{name}`: expected shape {expected:?}, {source_desc} has {found:?}")]
    Shape {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
        source_desc: String,
    },
    #[error("parameter `{name}`: {msg}")]
    Invalid { name: String, msg: String },
}

/// Where parameters come from.
pub trait WeightSource: Send + Sync {
    /// One line naming the source (file, kind) for reports.
    fn describe(&self) -> String;
    /// The shape of parameter `name` (torch order, `[out, in]` for linears), if present.
    fn shape(&self, name: &str) -> Option<Vec<usize>>;
    /// The whole parameter as f32 values, already in its stored precision.
    fn tensor(&self, name: &str) -> Result<Arc<Vec<f32>>, WeightError>;
    /// Rows `rows` of a parameter viewed as `[shape[0], rest]`; sources override this to avoid
    /// materialising big tables (embedding, engram tables).
    fn rows(&self, name: &str, rows: &[usize]) -> Result<Vec<f32>, WeightError> {
        let shape = self.shape(name).ok_or_else(|| WeightError::Missing {
            name: name.to_string(),
            source_desc: self.describe(),
        })?;
        let t = self.tensor(name)?;
        gather_rows(name, &shape, &t, rows)
    }
    /// Parameter `name` as its file stores it, when the source holds a 2-D parameter in an
    /// encoding the GEMM kernels decode chunk by chunk (GGML blocks, f16, bf16, f32): the GEMM
    /// then reads the file's bytes once and never materialises an f32 copy. `None` (the
    /// default) means "use [`WeightSource::tensor`]". The decoded values are exactly those of
    /// `tensor`, so the bits of a GEMM do not depend on which of the two it used.
    fn stored_matrix(
        &self,
        _name: &str,
    ) -> Option<Result<super::stored::StoredMatrix<'_>, WeightError>> {
        None
    }
    /// Fetch `name` and check its shape.
    fn expect(&self, name: &str, shape: &[usize]) -> Result<Arc<Vec<f32>>, WeightError> {
        check_shape(self.shape(name), &self.describe(), name, shape)?;
        self.tensor(name)
    }
}

/// `found` (a source's shape of `name`, described by `source_desc`) is `shape`, or the error
/// saying what is missing or different.
fn check_shape(
    found: Option<Vec<usize>>,
    source_desc: &str,
    name: &str,
    shape: &[usize],
) -> Result<(), WeightError> {
    let found = found.ok_or_else(|| WeightError::Missing {
        name: name.to_string(),
        source_desc: source_desc.to_string(),
    })?;
    if found != shape {
        return Err(WeightError::Shape {
            name: name.to_string(),
            expected: shape.to_vec(),
            found,
            source_desc: source_desc.to_string(),
        });
    }
    Ok(())
}

/// Copy rows out of a `[shape[0], rest]` tensor, bounds-checked.
pub fn gather_rows(
    name: &str,
    shape: &[usize],
    t: &[f32],
    rows: &[usize],
) -> Result<Vec<f32>, WeightError> {
    let n_rows = shape.first().copied().unwrap_or(0);
    let width = t.len().checked_div(n_rows).unwrap_or(0);
    let mut out = Vec::with_capacity(rows.len() * width);
    for &r in rows {
        if r >= n_rows {
            return Err(WeightError::Invalid {
                name: name.to_string(),
                msg: format!("row {r} out of range (rows: {n_rows})"),
            });
        }
        out.extend_from_slice(&t[r * width..(r + 1) * width]);
    }
    Ok(out)
}

/// The embedding rows of `ids` (the Embed step of every backend): each id checked against the
/// vocabulary and `embed.weight` against `[vocab, dim]`, then only those rows read (real
/// vocabularies are GBs; the table stays where it is).
pub fn embedding_rows(
    cfg: &super::ModelConfig,
    weights: &dyn WeightSource,
    step: super::Step,
    ids: &[i64],
) -> Result<Vec<f32>, super::BackendError> {
    let invalid = |msg: String| super::BackendError::Invalid { step, msg };
    let rows: Vec<usize> = ids
        .iter()
        .map(|&id| {
            usize::try_from(id)
                .ok()
                .filter(|&i| i < cfg.vocab_size)
                .ok_or_else(|| invalid(format!("token id {id} outside the vocabulary")))
        })
        .collect::<Result<_, _>>()?;
    let shape = weights.shape("embed.weight");
    if shape.as_deref() != Some(&[cfg.vocab_size, cfg.dim][..]) {
        return Err(invalid(format!(
            "embed.weight: expected [{}, {}], found {shape:?}",
            cfg.vocab_size, cfg.dim
        )));
    }
    weights
        .rows("embed.weight", &rows)
        .map_err(|source| super::BackendError::Weight { step, source })
}

/// Element `i` of a filler parameter in its stored precision (spec §4.1: f64 formula, f32 cast,
/// then the storage dtype's rounding).
pub fn filler_element(meta: &WeightMeta, i: u64) -> f32 {
    use crate::num;
    let v = num::fixed_value(&meta.name, i, meta.scale, meta.offset);
    match (meta.kind, meta.dtype) {
        (WeightKind::Fp8, _) | (_, StorageDtype::F8E4m3) => num::e4m3_decode(num::e4m3_encode(v)),
        (WeightKind::E8m0, _) | (_, StorageDtype::F8E8m0) => num::e8m0_decode(num::e8m0_encode(v)),
        (_, StorageDtype::Bf16) => num::bf16_round(v),
        (_, StorageDtype::F32) => v,
    }
}

/// Largest filler parameter we agree to materialise at once (elements), unless a source is built
/// with a larger cap. Real-dims runs fetch experts and table rows piecemeal, far below this;
/// the real `head.weight` (662M elements) is above it.
pub const FILLER_MAX_ELEMENTS: usize = 1 << 28;

/// Default byte budget of the filler's whole-tensor cache (1 GiB). At real dims a step fetches
/// each parameter once and a whole model (~100 GB as f32) never fits, so a bigger cache buys no
/// reuse; it only page-faults more fresh memory (a 4 GiB budget made a real-dims block 1.7x
/// slower than 1 GiB, measured with `examples/realdims_block.rs`). Tiny models fit whole.
pub const FILLER_DEFAULT_CACHE_BYTES: usize = 1 << 30;

/// Elements per rayon task when generating a tensor: large enough to amortise the task, small
/// enough to balance two to sixteen threads on an expert matrix.
const FILLER_PAR_CHUNK: usize = 1 << 16;

/// The filler value of element `i` with the name's FNV salt precomputed: the same formula and
/// roundings as [`filler_element`] (spec §4.1), without rehashing the name per element.
#[inline]
fn filler_element_salted(meta: &WeightMeta, salt: u64, i: u64) -> f32 {
    use crate::num;
    let raw = num::splitmix64(salt ^ i.wrapping_mul(num::GOLD));
    let u = (raw >> 40) as f64 / 16_777_216.0;
    let v = ((2.0 * u - 1.0) * meta.scale + meta.offset) as f32;
    match (meta.kind, meta.dtype) {
        (WeightKind::Fp8, _) | (_, StorageDtype::F8E4m3) => num::e4m3_decode(num::e4m3_encode(v)),
        (WeightKind::E8m0, _) | (_, StorageDtype::F8E8m0) => num::e8m0_decode(num::e8m0_encode(v)),
        (_, StorageDtype::Bf16) => num::bf16_round(v),
        (_, StorageDtype::F32) => v,
    }
}

/// Fill `out` with elements `start..start + out.len()` of a filler parameter, in parallel;
/// `out[j]` is `filler_element(meta, start + j)` whatever the thread count.
fn filler_fill(meta: &WeightMeta, start: u64, out: &mut [f32]) {
    use rayon::prelude::*;
    let salt = crate::num::fnv1a64(&meta.name);
    out.par_chunks_mut(FILLER_PAR_CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let base = start + (c * FILLER_PAR_CHUNK) as u64;
            for (j, y) in chunk.iter_mut().enumerate() {
                *y = filler_element_salted(meta, salt, base + j as u64);
            }
        });
}

/// What a filler source has done so far (for benches, tests and memory reports).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FillerStats {
    /// Whole tensors generated (a tensor evicted and fetched again counts twice).
    pub tensors_generated: u64,
    /// Elements generated for whole tensors.
    pub elements_generated: u64,
    /// Elements generated for `rows()` requests.
    pub row_elements_generated: u64,
    /// Wall seconds spent generating (whole tensors and rows).
    pub generate_seconds: f64,
    /// Tensors dropped from the cache to stay within the budget.
    pub evictions: u64,
    /// Tensors generated into the buffer of an evicted one (no fresh allocation, no page
    /// faults).
    pub buffers_recycled: u64,
    /// Bytes the cache holds now.
    pub cache_bytes: usize,
    /// Most bytes the cache held at once.
    pub peak_cache_bytes: usize,
}

struct CacheEntry {
    tensor: Arc<Vec<f32>>,
    last_used: u64,
}

/// The whole-tensor cache: least-recently-used eviction under a byte budget. Buffers of evicted
/// tensors that nobody else holds are reused for the next tensor, so cycling expert matrices
/// through the cache does not allocate (and page-fault) hundreds of MB per expert.
#[derive(Default)]
struct Cache {
    entries: HashMap<String, CacheEntry>,
    clock: u64,
    bytes: usize,
    /// Distinct names ever materialised as whole tensors, in first-materialisation order.
    materialised: Vec<String>,
    seen: std::collections::HashSet<String>,
    stats: FillerStats,
}

const F32_BYTES: usize = std::mem::size_of::<f32>();

impl Cache {
    fn get(&mut self, name: &str) -> Option<Arc<Vec<f32>>> {
        self.clock += 1;
        let now = self.clock;
        self.entries.get_mut(name).map(|e| {
            e.last_used = now;
            e.tensor.clone()
        })
    }

    /// The least recently used entry, removed (counted as an eviction).
    fn evict_oldest(&mut self) -> Option<Arc<Vec<f32>>> {
        let victim = self
            .entries
            .iter()
            .min_by_key(|(_, e)| e.last_used)
            .map(|(k, _)| k.clone())?;
        let e = self.entries.remove(&victim)?;
        self.bytes -= e.tensor.len() * F32_BYTES;
        self.stats.evictions += 1;
        Some(e.tensor)
    }

    /// Evict least-recently-used entries until a tensor of `n` elements fits in `budget` (or
    /// nothing is left to evict), and hand out a buffer for it: the buffer of an evicted tensor
    /// of exactly that size that nobody else holds (expert matrices all share one size), else a
    /// fresh allocation.
    fn make_room(&mut self, n: usize, budget: usize) -> Vec<f32> {
        let size = n * F32_BYTES;
        let mut spare: Option<Vec<f32>> = None;
        while self.bytes + size > budget {
            let Some(t) = self.evict_oldest() else {
                break;
            };
            if spare.is_none() && t.len() == n {
                spare = Arc::try_unwrap(t).ok();
            }
        }
        match spare {
            Some(buf) => {
                self.stats.buffers_recycled += 1;
                buf
            }
            None => vec![0f32; n],
        }
    }

    /// Insert `t` unless another thread already did (then return that one); a tensor larger
    /// than the whole budget is returned uncached.
    fn insert(&mut self, name: &str, t: Arc<Vec<f32>>, budget: usize) -> Arc<Vec<f32>> {
        if let Some(existing) = self.get(name) {
            return existing;
        }
        let size = t.len() * F32_BYTES;
        if size > budget {
            return t;
        }
        // Another thread may have filled the cache meanwhile.
        while self.bytes + size > budget && self.evict_oldest().is_some() {}
        self.clock += 1;
        self.entries.insert(
            name.to_string(),
            CacheEntry {
                tensor: t.clone(),
                last_used: self.clock,
            },
        );
        self.bytes += size;
        self.stats.peak_cache_bytes = self.stats.peak_cache_bytes.max(self.bytes);
        t
    }
}

/// Regenerates parameters from a parameter list on demand (spec §4). Whole tensors are kept in
/// a least-recently-used cache with a byte budget, so a real-dims MoE that visits a hundred
/// expert matrices holds only the budget; `rows()` generates just the rows asked for.
pub struct FillerSource {
    label: String,
    metas: HashMap<String, WeightMeta>,
    cache_budget_bytes: usize,
    max_tensor_elements: usize,
    cache: Mutex<Cache>,
}

impl FillerSource {
    /// A filler over the given parameter list; `label` names it in messages. The cache budget
    /// is [`FILLER_DEFAULT_CACHE_BYTES`], the tensor cap [`FILLER_MAX_ELEMENTS`].
    pub fn new(label: impl Into<String>, metas: &[WeightMeta]) -> FillerSource {
        FillerSource {
            label: label.into(),
            metas: metas.iter().map(|m| (m.name.clone(), m.clone())).collect(),
            cache_budget_bytes: FILLER_DEFAULT_CACHE_BYTES,
            max_tensor_elements: FILLER_MAX_ELEMENTS,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// A filler over the parameter list the reference would build for `cfg`
    /// ([`crate::model::params::param_list`]), e.g. the real V4.1-Flash geometry; an error when
    /// the geometry's shapes overflow.
    pub fn from_config(
        label: impl Into<String>,
        cfg: &crate::model::ModelConfig,
    ) -> Result<FillerSource, crate::model::ConfigError> {
        Ok(FillerSource::new(
            label,
            &crate::model::params::param_list(cfg)?,
        ))
    }

    /// Set the whole-tensor cache budget in bytes (0 caches nothing).
    pub fn with_cache_budget_bytes(mut self, bytes: usize) -> FillerSource {
        self.cache_budget_bytes = bytes;
        self
    }

    /// Set the largest tensor (elements) `tensor()` agrees to materialise.
    pub fn with_max_tensor_elements(mut self, elements: usize) -> FillerSource {
        self.max_tensor_elements = elements;
        self
    }

    /// The cache budget in bytes.
    pub fn cache_budget_bytes(&self) -> usize {
        self.cache_budget_bytes
    }

    /// The parameter entry of `name`, if listed.
    pub fn meta_of(&self, name: &str) -> Option<&WeightMeta> {
        self.metas.get(name)
    }

    /// Distinct parameters ever materialised as whole tensors, in first-materialisation order
    /// (`rows()` requests are not counted: they never build the table).
    pub fn materialised_names(&self) -> Vec<String> {
        self.cache
            .lock()
            .map(|c| c.materialised.clone())
            .unwrap_or_default()
    }

    /// Counters since construction.
    pub fn stats(&self) -> FillerStats {
        self.cache
            .lock()
            .map(|c| {
                let mut s = c.stats.clone();
                s.cache_bytes = c.bytes;
                s
            })
            .unwrap_or_default()
    }

    fn meta(&self, name: &str) -> Result<&WeightMeta, WeightError> {
        self.metas.get(name).ok_or_else(|| WeightError::Missing {
            name: name.to_string(),
            source_desc: self.describe(),
        })
    }
}

impl WeightSource for FillerSource {
    fn describe(&self) -> String {
        format!("filler weights of {}", self.label)
    }
    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.metas.get(name).map(|m| m.shape.clone())
    }
    fn tensor(&self, name: &str) -> Result<Arc<Vec<f32>>, WeightError> {
        if let Some(t) = self.cache.lock().map_err(|_| poisoned(name))?.get(name) {
            return Ok(t);
        }
        let meta = self.meta(name)?;
        if meta.n > self.max_tensor_elements {
            return Err(WeightError::Invalid {
                name: name.to_string(),
                msg: format!(
                    "{} elements exceed the filler's whole-tensor cap {}; fetch rows",
                    meta.n, self.max_tensor_elements
                ),
            });
        }
        let started = std::time::Instant::now();
        let mut buf = if meta.n * F32_BYTES <= self.cache_budget_bytes {
            self.cache
                .lock()
                .map_err(|_| poisoned(name))?
                .make_room(meta.n, self.cache_budget_bytes)
        } else {
            vec![0f32; meta.n]
        };
        // Generate outside the lock so other threads keep reading the cache meanwhile.
        filler_fill(meta, 0, &mut buf);
        let t = Arc::new(buf);
        let secs = started.elapsed().as_secs_f64();
        let mut cache = self.cache.lock().map_err(|_| poisoned(name))?;
        cache.stats.tensors_generated += 1;
        cache.stats.elements_generated += meta.n as u64;
        cache.stats.generate_seconds += secs;
        if cache.seen.insert(name.to_string()) {
            cache.materialised.push(name.to_string());
        }
        Ok(cache.insert(name, t, self.cache_budget_bytes))
    }
    fn rows(&self, name: &str, rows: &[usize]) -> Result<Vec<f32>, WeightError> {
        let meta = self.meta(name)?;
        let n_rows = meta.shape.first().copied().unwrap_or(0);
        let width = meta.n.checked_div(n_rows).unwrap_or(0);
        let started = std::time::Instant::now();
        let mut out = Vec::with_capacity(rows.len().saturating_mul(width));
        for &r in rows {
            if r >= n_rows {
                return Err(WeightError::Invalid {
                    name: name.to_string(),
                    msg: format!("row {r} out of range (rows: {n_rows})"),
                });
            }
            let at = out.len();
            out.resize(at + width, 0.0);
            filler_fill(meta, (r * width) as u64, &mut out[at..]);
        }
        let secs = started.elapsed().as_secs_f64();
        if let Ok(mut cache) = self.cache.lock() {
            cache.stats.row_elements_generated += out.len() as u64;
            cache.stats.generate_seconds += secs;
        }
        Ok(out)
    }
}

fn poisoned(name: &str) -> WeightError {
    WeightError::Invalid {
        name: name.to_string(),
        msg: "weight cache lock poisoned".into(),
    }
}

/// Most bytes (as f32) one row chunk of a big parameter takes when a step streams it instead
/// of materialising it: the real LM head `[129280, 5120]` is 2.6 GB as f32 and goes through in
/// 64 MiB chunks (3276 rows), one at a time; a chunk also fits one storage binding of any
/// adapter (lavapipe's limit is 128 MiB).
pub const ROW_CHUNK_BYTES: usize = 64 << 20;

/// Row ranges covering `rows` rows of `cols` f32 values in chunks of at most `max_bytes` (at
/// least one row per chunk).
pub fn row_chunks(rows: usize, cols: usize, max_bytes: usize) -> Vec<std::ops::Range<usize>> {
    let per = (max_bytes / (cols.max(1) * F32_BYTES)).max(1);
    (0..rows)
        .step_by(per)
        .map(|r0| r0..(r0 + per).min(rows))
        .collect()
}

/// Streams parameter `name` (shape `[rows, cols]`) through `f` in row chunks of at most
/// `max_bytes` as f32, each read without materialising the whole tensor: `f(first_row, rows)`
/// gets the chunk's first row index and its values. What the backends' `Final` does with the
/// LM head.
pub fn stream_rows(
    weights: &dyn WeightSource,
    step: super::Step,
    name: &str,
    shape: [usize; 2],
    max_bytes: usize,
    mut f: impl FnMut(usize, &[f32]) -> Result<(), super::BackendError>,
) -> Result<(), super::BackendError> {
    let werr = |source| super::BackendError::Weight { step, source };
    check_shape(weights.shape(name), &weights.describe(), name, &shape).map_err(werr)?;
    for range in row_chunks(shape[0], shape[1], max_bytes) {
        let r0 = range.start;
        let rows: Vec<usize> = range.collect();
        let values = weights.rows(name, &rows).map_err(werr)?;
        f(r0, &values)?;
    }
    Ok(())
}
