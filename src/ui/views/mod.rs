//! The detail views of the selected capture, one file each, plus what they share: the two sides
//! being compared (reference and test) as [`heatmap::Tensor`]s that read the data in place, the
//! views' settings (changed only through commands) and their caches (textures, zoom, hover),
//! the names of a capture's axes, and the rule that lays panels side by side or stacks them so
//! none is ever narrower than [`theme::MIN_PANEL_WIDTH_PT`].

pub mod hc_mix;
pub mod heatmap;
pub mod moe;
pub mod raster;
pub mod topk;
pub mod values;
pub mod window_mask;

use crate::golden::names::parse_capture_name;
use crate::golden::Golden;
use crate::session::controller::CaptureResult;
use crate::ui::commands::{DetailView, UiCommandSender};
use crate::ui::theme;
use eframe::egui;
use heatmap::{ScaleKind, SliceSpec, Tensor};
use std::sync::Arc;

/// What the reference side of the views is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum ReferenceChoice {
    /// The golden's values (samples where it holds only samples).
    #[default]
    Golden,
    /// The first backend's full tensor (the CPU oracle), for GPU vs oracle.
    FirstBackend,
}

/// Heatmap settings of the Values view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeatmapOptions {
    /// Colour scale of the values (reference and test share it).
    pub value_scale: ScaleKind,
    /// Colour scale of the difference.
    pub diff_scale: ScaleKind,
    /// Fold the difference by a kernel's tile.
    pub fold: bool,
    /// The tile: rows × columns of the slice.
    pub tile: [usize; 2],
}

/// Default tile of the fold (a common GEMM output tile).
pub const DEFAULT_TILE: [usize; 2] = [16, 64];

impl Default for HeatmapOptions {
    fn default() -> Self {
        HeatmapOptions {
            value_scale: ScaleKind::Linear,
            diff_scale: ScaleKind::Linear,
            fold: false,
            tile: DEFAULT_TILE,
        }
    }
}

/// How the top-k view lays an index capture out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum TopkLayout {
    /// Query × position raster: which positions each side picked.
    #[default]
    Positions,
    /// Query × slot grid with the picked index in each slot.
    Slots,
}

/// The views' settings: app state, changed only by commands.
#[derive(Debug, Clone)]
pub struct ViewSettings {
    /// Which backend is the test side (index into the capture's backends; clamped, so the
    /// default, `usize::MAX`, is the last backend: the one under test).
    pub test_backend: usize,
    pub reference: ReferenceChoice,
    /// The Values view's slice per capture name.
    pub slices: std::collections::HashMap<String, SliceSpec>,
    pub heatmap: HeatmapOptions,
    /// Token (query row) shown by the HC view.
    pub hc_token: usize,
    pub topk_layout: TopkLayout,
}

impl Default for ViewSettings {
    fn default() -> Self {
        ViewSettings {
            test_backend: usize::MAX,
            reference: ReferenceChoice::default(),
            slices: Default::default(),
            heatmap: HeatmapOptions::default(),
            hc_token: 0,
            topk_layout: TopkLayout::default(),
        }
    }
}

/// What the pointer is over in a view, with the data model's numbers (tests compare them).
#[derive(Debug, Clone, PartialEq)]
pub struct HoverReadout {
    /// `regime/name` of the capture.
    pub capture: String,
    /// Flat index into the capture.
    pub flat_index: usize,
    /// The multi-index with each axis named: `(axis name, index)`.
    pub index: Vec<(String, usize)>,
    pub reference: Option<f64>,
    pub test: Option<f64>,
    /// The readout line shown under the view (also its accessibility label).
    pub text: String,
}

impl HoverReadout {
    /// A readout that is only its line of text (set views: the line says it all).
    pub fn text(capture: String, text: String) -> HoverReadout {
        HoverReadout {
            capture,
            flat_index: 0,
            index: Vec::new(),
            reference: None,
            test: None,
            text,
        }
    }
}

/// Rects of the last frame's layout (tests check that views get the room).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LayoutProbe {
    /// The whole detail area (view tabs, view).
    pub detail: Option<egui::Rect>,
    /// The view's region.
    pub view: Option<egui::Rect>,
    /// The view's main panels (heatmaps, rasters) by label.
    pub panels: Vec<(String, egui::Rect)>,
}

/// The views' caches and UI-local state: textures, zoom, the hover readout.
#[derive(Default)]
pub struct ViewCaches {
    pub values: values::ValuesCache,
    pub topk: topk::TopkCache,
    pub mask: window_mask::MaskCache,
    pub moe: moe::MoeCache,
    pub hc: hc_mix::HcCache,
    /// The readout of the last hovered cell (cleared when the pointer leaves).
    pub hover: Option<HoverReadout>,
    pub layout: LayoutProbe,
    /// The selected capture's ulp histogram, keyed by what it was built from.
    pub ulp: Option<(u64, UlpHistogram)>,
    /// The overview's hovered capture (index into the results).
    pub overview_hover: Option<usize>,
}

/// Bins of the ulp histogram: 0, 1, 2, 3–4, 5–8, … up to 2^[`ULP_TOP_POW`], then larger.
pub const ULP_TOP_POW: u32 = 16;

/// Per-element distance between test and reference over the positions both know: bf16 ulps
/// for float captures, equal or not for integer ones.
#[derive(Debug, Clone, PartialEq)]
pub struct UlpHistogram {
    pub capture: String,
    pub ref_name: String,
    pub test_name: String,
    /// `(bin label, count)`.
    pub bins: Vec<(String, usize)>,
    pub compared: usize,
    pub exact: usize,
    /// A NaN on one side only.
    pub nan_mismatch: usize,
    pub integer: bool,
}

/// The bin of an ulp distance: 0, 1, 2, then `k` for distances in `(2^(k-1), 2^k]` with
/// `k` = 2..=ULP_TOP_POW, then one bin for larger.
pub fn ulp_bin(u: u64) -> usize {
    match u {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => {
            let k = 64 - (u - 1).leading_zeros(); // ceil(log2 u)
            (k as usize + 1).min(ULP_TOP_POW as usize + 2)
        }
    }
}

impl UlpHistogram {
    /// The histogram of `sides` over every element.
    pub fn build(capture: String, sides: &Sides, integer: bool) -> UlpHistogram {
        let n_bins = ULP_TOP_POW as usize + 3;
        let mut counts = vec![0usize; n_bins];
        let (mut compared, mut exact, mut nan_mismatch) = (0, 0, 0);
        for i in 0..sides.test.len().min(sides.reference.len()) {
            let (Some(a), Some(b)) = (sides.reference.get(i), sides.test.get(i)) else {
                continue;
            };
            compared += 1;
            if integer {
                if a == b {
                    exact += 1;
                }
                continue;
            }
            let u = crate::num::bf16_ulp_distance(a as f32, b as f32);
            if u == u64::MAX {
                nan_mismatch += 1;
                continue;
            }
            if u == 0 {
                exact += 1;
            }
            counts[ulp_bin(u)] += 1;
        }
        let bins = if integer {
            vec![
                ("equal".to_string(), exact),
                ("differ".to_string(), compared - exact),
            ]
        } else {
            let mut bins: Vec<(String, usize)> = counts
                .into_iter()
                .enumerate()
                .map(|(k, c)| {
                    let label = match k {
                        0..=2 => k.to_string(),
                        k if k == n_bins - 1 => format!(">{}", 1u64 << ULP_TOP_POW),
                        k => format!("≤{}", 1u64 << (k - 1)),
                    };
                    (label, c)
                })
                .collect();
            bins.push(("NaN≠".to_string(), nan_mismatch));
            bins
        };
        UlpHistogram {
            capture,
            ref_name: sides.ref_name.clone(),
            test_name: sides.test_name.clone(),
            bins,
            compared,
            exact,
            nan_mismatch,
            integer,
        }
    }
}

impl ViewCaches {
    /// Drop everything cached (after a reset or a new golden).
    pub fn clear(&mut self) {
        *self = ViewCaches::default();
    }
}

/// What every view gets: the golden, the results, the selected capture, the settings.
pub struct ViewCtx<'a> {
    pub golden: &'a Arc<Golden>,
    pub results: &'a [CaptureResult],
    pub r: &'a CaptureResult,
    pub settings: &'a ViewSettings,
    pub tx: &'a dyn UiCommandSender,
}

/// The two sides of a capture under the view settings.
#[derive(Debug, Clone)]
pub struct Sides {
    pub reference: Tensor,
    pub test: Tensor,
    pub ref_name: String,
    pub test_name: String,
    /// Why the reference is not what the settings ask for (e.g. the golden lacks the capture).
    pub note: Option<String>,
}

/// Whether `view` has something to show for `r` (every view falls back to the capture's
/// layer, so most apply to any layer capture).
pub fn applies(view: DetailView, r: &CaptureResult) -> bool {
    use crate::golden::names::CaptureKind;
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

/// A backend's tensor of a result.
pub fn backend_tensor(r: &CaptureResult, backend: usize) -> Option<Tensor> {
    let b = r.per_backend.get(backend)?;
    Some(Tensor::from_backend(r.shape.clone(), b.values.clone()))
}

/// Whether the golden describes `r`'s run: it has `r`'s regime (results of another model's run,
/// or synthetic ones, come from regimes the golden does not have).
pub fn golden_describes(golden: &Golden, r: &CaptureResult) -> bool {
    golden
        .regimes
        .get(r.regime_index)
        .is_some_and(|g| g.name == r.regime)
}

/// The two sides of a capture under the view settings. Where the golden lacks the capture (a
/// synthetic or golden-less run) the first backend is the reference, and `note` says so.
pub fn sides(golden: &Arc<Golden>, r: &CaptureResult, settings: &ViewSettings) -> Option<Sides> {
    let n = r.per_backend.len();
    if n == 0 {
        return None;
    }
    let ti = settings.test_backend.min(n - 1);
    let test = backend_tensor(r, ti)?;
    let test_name = r.per_backend[ti].backend.clone();
    let first = || Some((backend_tensor(r, 0)?, r.per_backend[0].backend.clone()));
    if settings.reference == ReferenceChoice::FirstBackend && ti > 0 {
        let (reference, ref_name) = first()?;
        return Some(Sides {
            reference,
            test,
            ref_name,
            test_name,
            note: None,
        });
    }
    match Tensor::from_golden(golden, r.regime_index, &r.name)
        .filter(|_| golden_describes(golden, r))
    {
        Some(reference) => Some(Sides {
            reference,
            test,
            ref_name: "golden".into(),
            test_name,
            note: None,
        }),
        None => {
            let (reference, ref_name) = first()?;
            Some(Sides {
                reference,
                test,
                note: Some(format!(
                    "the golden does not hold {}: the reference is {ref_name}",
                    r.label()
                )),
                ref_name,
                test_name,
            })
        }
    }
}

/// Sides of a related capture `name` in the same regime as `r` (the views' layer fallbacks).
pub fn related_sides<'a>(ctx: &ViewCtx<'a>, name: &str) -> Option<(Sides, &'a CaptureResult)> {
    let other = find(ctx.results, ctx.r.regime_index, name)?;
    Some((sides(ctx.golden, other, ctx.settings)?, other))
}

/// Rows of a tensor along its last axis: `(rows, width)`.
pub fn rows_of(t: &Tensor) -> (usize, usize) {
    let width = t.shape.last().copied().unwrap_or(1).max(1);
    (t.len() / width, width)
}

/// The names of a capture's axes (spec §16.3), `axis N` where the catalogue says nothing.
pub fn axis_names(name: &str, shape: &[usize]) -> Vec<String> {
    let base = parse_capture_name(name).base;
    let n = shape.len();
    let named: &[&str] = match base.as_str() {
        "moe_weights" | "moe_indices" => &["token", "slot"],
        "sa_topk_idxs" | "topk_idxs" => &["batch", "query", "slot"],
        "candidates" => &["batch", "query", "block"],
        "sa_kv" | "compress_kv" | "index_k" => &["batch", "kv row", "dim"],
        "attn_comb" | "ffn_comb" => &["batch", "token", "residual", "output"],
        "attn_pre" | "attn_post" | "ffn_pre" | "ffn_post" | "pre_mix_in" | "pre_mix_out" => {
            &["batch", "token", "hc"]
        }
        "h_in" | "h_out" | "engram_in" | "engram_out" => &["batch", "token", "hc", "dim"],
        "sa_q" | "sa_o" => &["batch", "token", "head", "dim"],
        "engram_embed" => &["batch", "token", "hash head", "dim"],
        "engram_hashes" => &["batch", "token", "engram layer", "hash head"],
        "engram_hash_ids" => &["batch", "token", "hash head"],
        "input_ids" => &["batch", "token"],
        _ => &[],
    };
    if named.len() == n {
        return named.iter().map(|s| s.to_string()).collect();
    }
    // `[.., s, d]` tensors of the catalogue end in token, dim.
    let mut out: Vec<String> = (0..n).map(|a| format!("axis {a}")).collect();
    if n >= 2 && named.is_empty() {
        out[n - 1] = "dim".into();
        out[n - 2] = "token".into();
        if n >= 3 && shape[0] == 1 {
            out[0] = "batch".into();
        }
    }
    out
}

/// How a view lays out `n` panels of at least [`theme::MIN_PANEL_WIDTH_PT`] in `width`:
/// `(columns, panel width)`. Panels that do not fit side by side wrap onto further rows.
pub fn panel_columns(n: usize, width: f32) -> (usize, f32) {
    let n = n.max(1);
    let gap = theme::PANEL_GAP_PT;
    let fit = ((width + gap) / (theme::MIN_PANEL_WIDTH_PT + gap)).floor() as usize;
    let cols = fit.clamp(1, n);
    let w = ((width - gap * (cols as f32 - 1.0)) / cols as f32).max(theme::MIN_PANEL_WIDTH_PT);
    (cols, w)
}

/// Register a panel's rect under `label` (tests read them from the layout probe).
pub fn probe_panel(caches_layout: &mut LayoutProbe, label: &str, rect: egui::Rect) {
    caches_layout.panels.push((label.to_string(), rect));
}

/// A stable key of a capture's content for texture caches.
pub fn content_key(parts: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// The cache key of what a view builds from capture `r` under the settings' sides.
pub fn capture_key(r: &CaptureResult, settings: &ViewSettings) -> u64 {
    content_key(&(
        r.order,
        r.regime_index,
        &r.name,
        settings.test_backend,
        settings.reference,
    ))
}

/// Draw the chosen view of `ctx.r`.
pub fn view_ui(ui: &mut egui::Ui, view: DetailView, ctx: &ViewCtx<'_>, caches: &mut ViewCaches) {
    match view {
        DetailView::Values => values::values_ui(ui, ctx, caches),
        DetailView::TopK => topk::topk_ui(ui, ctx, caches),
        DetailView::WindowMask => window_mask::window_mask_ui(ui, ctx, caches),
        DetailView::HcMix => hc_mix::hc_mix_ui(ui, ctx, caches),
        DetailView::Moe => moe::moe_ui(ui, ctx, caches),
    }
}

/// The hover readout line (or a hint when nothing is hovered), always one line high so the
/// layout does not jump.
pub fn readout_ui(ui: &mut egui::Ui, hover: Option<&HoverReadout>, hint: &str) {
    match hover {
        Some(h) => {
            ui.label(egui::RichText::new(&h.text).monospace());
        }
        None => {
            ui.weak(hint);
        }
    }
}
