//! The detail views of the selected capture, one file each, plus what they share: the two sides
//! being compared (reference and test) as [`heatmap::Tensor`]s, and the views' own state.
//! Until the GPU backend lands, "test" is the CPU oracle and "reference" the golden (which holds
//! strided samples for most captures: only those positions are known).

pub mod hc_mix;
pub mod heatmap;
pub mod moe;
pub mod topk;
pub mod values;
pub mod window_mask;

use crate::golden::names::{parse_capture_name, CaptureKind};
use crate::golden::{CaptureData, Golden};
use crate::model::CaptureValues;
use crate::session::controller::CaptureResult;
use crate::ui::commands::DetailView;
use heatmap::{SliceSpec, Tensor};

/// What the reference side of the views is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReferenceChoice {
    /// The golden's values (samples where it holds only samples).
    #[default]
    Golden,
    /// The first backend's full tensor (the CPU oracle), for GPU vs oracle.
    FirstBackend,
}

/// Settings and caches of the views.
#[derive(Default)]
pub struct ViewState {
    /// Which backend is the test side (index into the capture's backends; clamped).
    pub test_backend: usize,
    pub reference: ReferenceChoice,
    /// The Values view's slice per capture name.
    pub slices: std::collections::HashMap<String, SliceSpec>,
    /// Token (query row) shown by the HC view.
    pub hc_token: usize,
    /// Cached heatmaps of the Values view, keyed by what they show.
    pub heatmaps: std::collections::HashMap<String, values::HeatmapSet>,
}

impl ViewState {
    /// Drop cached textures (after a reset or a new golden).
    pub fn clear_cache(&mut self) {
        self.heatmaps.clear();
    }
}

/// The view to show for `r`: keep `current` when it applies, otherwise the most specific one.
pub fn best_view_for(r: &CaptureResult, current: DetailView) -> DetailView {
    let base = parse_capture_name(&r.name).base;
    let specific = if base == "sa_topk_idxs" {
        Some(DetailView::WindowMask)
    } else if base.starts_with("moe_") {
        Some(DetailView::Moe)
    } else if base.starts_with("attn_pre")
        || base.starts_with("attn_post")
        || base.starts_with("attn_comb")
        || base.starts_with("ffn_pre")
        || base.starts_with("ffn_post")
        || base.starts_with("ffn_comb")
    {
        Some(DetailView::HcMix)
    } else if matches!(r.kind, CaptureKind::Index | CaptureKind::Mask) {
        Some(DetailView::TopK)
    } else {
        None
    };
    match (current, specific) {
        (DetailView::Values, Some(s)) => s,
        (c, Some(s)) if c != s => s,
        (c, _) if applies(c, r) => c,
        _ => DetailView::Values,
    }
}

/// Whether `view` has something to show for `r` (every view falls back to the capture's
/// layer, so most apply to any layer capture).
pub fn applies(view: DetailView, r: &CaptureResult) -> bool {
    let layer = parse_capture_name(&r.name).layer;
    match view {
        DetailView::Values => true,
        DetailView::TopK => {
            matches!(r.kind, CaptureKind::Index | CaptureKind::Mask) || layer.is_some()
        }
        DetailView::WindowMask | DetailView::HcMix | DetailView::Moe => layer.is_some(),
    }
}

/// The capture `name` of regime `regime_index` in `results`.
pub fn find<'a>(
    results: &'a [CaptureResult],
    regime_index: usize,
    name: &str,
) -> Option<&'a CaptureResult> {
    results
        .iter()
        .find(|r| r.regime_index == regime_index && r.name == name)
}

/// The golden's capture as a tensor with only its sampled positions known.
pub fn golden_tensor(golden: &Golden, regime_index: usize, name: &str) -> Option<Tensor> {
    let c = golden.regimes.get(regime_index)?.get(name)?;
    let stride = c.stride.max(1);
    let samples: Vec<f64> = match &c.data {
        CaptureData::Float(v) => v.clone(),
        CaptureData::Int(v) => v.iter().map(|&x| x as f64).collect(),
    };
    if stride == 1 && samples.len() == c.n {
        return Some(Tensor::full(c.shape.clone(), samples));
    }
    // `n` was checked against the sample count by the loader, so this allocation is bounded
    // by the file's own data list times the stride.
    let mut values = vec![0.0; c.n];
    let mut known = vec![false; c.n];
    for (j, v) in samples.into_iter().enumerate() {
        if let Some(slot) = values.get_mut(j * stride) {
            *slot = v;
            known[j * stride] = true;
        }
    }
    Some(Tensor {
        shape: c.shape.clone(),
        values,
        known: Some(known),
    })
}

/// A backend's tensor of a result.
pub fn backend_tensor(r: &CaptureResult, backend: usize) -> Option<Tensor> {
    let b = r.per_backend.get(backend)?;
    let values = match &*b.values {
        CaptureValues::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        CaptureValues::I64(v) => v.iter().map(|&x| x as f64).collect(),
    };
    Some(Tensor::full(r.shape.clone(), values))
}

/// The two sides of a capture under the view settings: `(reference, test, ref name, test name)`.
pub fn sides(
    golden: &Golden,
    r: &CaptureResult,
    state: &ViewState,
) -> Option<(Tensor, Tensor, String, String)> {
    let n = r.per_backend.len();
    if n == 0 {
        return None;
    }
    let ti = state.test_backend.min(n - 1);
    let test = backend_tensor(r, ti)?;
    let test_name = r.per_backend[ti].backend.clone();
    match state.reference {
        ReferenceChoice::FirstBackend if ti > 0 => Some((
            backend_tensor(r, 0)?,
            test,
            r.per_backend[0].backend.clone(),
            test_name,
        )),
        _ => Some((
            golden_tensor(golden, r.regime_index, &r.name)?,
            test,
            "golden".to_string(),
            test_name,
        )),
    }
}

/// Sides of a related capture `name` in the same regime as `r` (the views' layer fallbacks).
pub fn related_sides(
    golden: &Golden,
    results: &[CaptureResult],
    r: &CaptureResult,
    name: &str,
    state: &ViewState,
) -> Option<(Tensor, Tensor, String, String)> {
    let other = find(results, r.regime_index, name)?;
    sides(golden, other, state)
}

/// Rows of a tensor along its last axis: `(rows, width)`.
pub fn rows_of(t: &Tensor) -> (usize, usize) {
    let width = t.shape.last().copied().unwrap_or(1).max(1);
    (t.len() / width, width)
}
