//! `WeightSource`: "give me parameter P as f32 values in its stored precision". The filler source
//! regenerates the tiny model from `weights_meta`; the GGUF source (in `gguf`) dequantizes from a
//! mapped file. Parameters are produced lazily and cached, so a real-dims graph materialises only
//! what a step touches (unrouted experts never).

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
    /// Fetch `name` and check its shape.
    fn expect(&self, name: &str, shape: &[usize]) -> Result<Arc<Vec<f32>>, WeightError> {
        let found = self.shape(name).ok_or_else(|| WeightError::Missing {
            name: name.to_string(),
            source_desc: self.describe(),
        })?;
        if found != shape {
            return Err(WeightError::Shape {
                name: name.to_string(),
                expected: shape.to_vec(),
                found,
                source_desc: self.describe(),
            });
        }
        self.tensor(name)
    }
}

/// Copy rows out of a `[shape[0], rest]` tensor, bounds-checked.
pub fn gather_rows(
    name: &str,
    shape: &[usize],
    t: &[f32],
    rows: &[usize],
) -> Result<Vec<f32>, WeightError> {
    let n_rows = shape.first().copied().unwrap_or(0);
    let width = if n_rows == 0 { 0 } else { t.len() / n_rows };
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

/// Largest filler parameter we agree to materialise at once (elements). Real-dims runs fetch
/// experts and table rows piecemeal, far below this.
pub const FILLER_MAX_ELEMENTS: usize = 1 << 28;

/// Regenerates parameters from `weights_meta` on demand (spec §4), caching what was built.
pub struct FillerSource {
    label: String,
    metas: HashMap<String, WeightMeta>,
    cache: Mutex<HashMap<String, Arc<Vec<f32>>>>,
}

impl FillerSource {
    /// A filler over the given parameter list; `label` names it in messages.
    pub fn new(label: impl Into<String>, metas: &[WeightMeta]) -> FillerSource {
        FillerSource {
            label: label.into(),
            metas: metas.iter().map(|m| (m.name.clone(), m.clone())).collect(),
            cache: Mutex::new(HashMap::new()),
        }
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
            return Ok(t.clone());
        }
        let meta = self.meta(name)?;
        if meta.n > FILLER_MAX_ELEMENTS {
            return Err(WeightError::Invalid {
                name: name.to_string(),
                msg: format!("{} elements exceed the filler's whole-tensor cap {FILLER_MAX_ELEMENTS}; fetch rows", meta.n),
            });
        }
        let values: Vec<f32> = (0..meta.n as u64)
            .map(|i| filler_element(meta, i))
            .collect();
        let t = Arc::new(values);
        self.cache
            .lock()
            .map_err(|_| poisoned(name))?
            .insert(name.to_string(), t.clone());
        Ok(t)
    }
    fn rows(&self, name: &str, rows: &[usize]) -> Result<Vec<f32>, WeightError> {
        let meta = self.meta(name)?;
        let n_rows = meta.shape.first().copied().unwrap_or(0);
        let width = if n_rows == 0 { 0 } else { meta.n / n_rows };
        let mut out = Vec::with_capacity(rows.len() * width);
        for &r in rows {
            if r >= n_rows {
                return Err(WeightError::Invalid {
                    name: name.to_string(),
                    msg: format!("row {r} out of range (rows: {n_rows})"),
                });
            }
            let base = (r * width) as u64;
            out.extend((0..width as u64).map(|j| filler_element(meta, base + j)));
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
