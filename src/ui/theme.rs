//! Design tokens: every colour and size the app draws with comes from here, so the look changes
//! in one place. Status is never colour alone: each coloured mark also has a text label.

use eframe::egui::{self, Color32};

/// A passing comparison (text, marks on the plot, list rows).
pub const PASS: Color32 = Color32::from_rgb(0x3f, 0xb9, 0x50);
/// A failing comparison.
pub const FAIL: Color32 = Color32::from_rgb(0xf8, 0x51, 0x49);
/// A warning (no GPU backend, not isolated, sampled reference).
pub const WARN: Color32 = Color32::from_rgb(0xd2, 0x99, 0x22);
/// Neutral informational accent (selection, first divergence marker).
pub const ACCENT: Color32 = Color32::from_rgb(0x58, 0xa6, 0xff);
/// Error banner background.
pub const ERROR_BG: Color32 = Color32::from_rgb(0x4a, 0x1c, 0x1c);
/// Warning banner background.
pub const WARN_BG: Color32 = Color32::from_rgb(0x3d, 0x2f, 0x0c);

/// Series colours of the overview plot, one per comparison kind.
pub const SERIES_BACKEND_VS_GOLDEN: [Color32; 3] = [
    Color32::from_rgb(0x58, 0xa6, 0xff),
    Color32::from_rgb(0xbc, 0x8c, 0xff),
    Color32::from_rgb(0x39, 0xc5, 0xcf),
];
/// The series of backend-vs-backend comparisons (GPU vs oracle).
pub const SERIES_CROSS: Color32 = Color32::from_rgb(0xff, 0xa6, 0x57);
/// The pass line at ratio 1.
pub const PASS_LINE: Color32 = Color32::from_rgb(0x8b, 0x94, 0x9e);

/// Heatmap: a cell the reference holds no sample for.
pub const CELL_UNKNOWN: Color32 = Color32::from_rgb(0x30, 0x33, 0x38);
/// Heatmap: NaN.
pub const CELL_NAN: Color32 = Color32::from_rgb(0xff, 0x00, 0xff);
/// Heatmap: +inf.
pub const CELL_POS_INF: Color32 = Color32::from_rgb(0xff, 0xff, 0x00);
/// Heatmap: -inf.
pub const CELL_NEG_INF: Color32 = Color32::from_rgb(0x00, 0xff, 0x7f);
/// Diverging map ends and centre (negative, zero, positive).
pub const DIVERGING_NEG: Color32 = Color32::from_rgb(0x21, 0x66, 0xac);
pub const DIVERGING_ZERO: Color32 = Color32::from_rgb(0xf7, 0xf7, 0xf7);
pub const DIVERGING_POS: Color32 = Color32::from_rgb(0xb2, 0x18, 0x2b);

/// Set membership cells (top-k, window mask, routing).
pub const SET_BOTH: Color32 = Color32::from_rgb(0x2e, 0x7d, 0x32);
pub const SET_REF_ONLY: Color32 = Color32::from_rgb(0xc6, 0x28, 0x28);
pub const SET_TEST_ONLY: Color32 = Color32::from_rgb(0xef, 0x6c, 0x00);
pub const SET_TIE_FLIP: Color32 = Color32::from_rgb(0x8e, 0x24, 0xaa);
pub const SET_UNKNOWN: Color32 = CELL_UNKNOWN;
pub const SET_EMPTY: Color32 = Color32::from_rgb(0x1c, 0x1e, 0x22);
/// Window-mask cells: picked by the sliding window / by the compressed branch.
pub const MASK_WINDOW: Color32 = Color32::from_rgb(0x42, 0x8b, 0xca);
pub const MASK_COMPRESSED: Color32 = Color32::from_rgb(0xe0, 0x8e, 0x2b);

/// Side length in points of one cell in the small grids (top-k, mask, routing, HC).
pub const GRID_CELL_PT: f32 = 14.0;
/// Largest side of a heatmap texture in texels; bigger slices are downsampled to fit.
pub const MAX_HEATMAP_TEXELS: usize = 256;
/// Width of the side panel with the capture list, in points.
pub const CAPTURE_LIST_WIDTH_PT: f32 = 430.0;
/// Height of the overview plot, in points.
pub const OVERVIEW_HEIGHT_PT: f32 = 190.0;

/// The colour of a pass/fail verdict.
pub fn verdict_color(pass: bool) -> Color32 {
    if pass {
        PASS
    } else {
        FAIL
    }
}

/// Diverging colour of `v` on a scale symmetric around zero with half-width `max_abs`;
/// NaN and infinities get their own marks.
pub fn diverging(v: f32, max_abs: f32) -> Color32 {
    if v.is_nan() {
        return CELL_NAN;
    }
    if v.is_infinite() {
        return if v > 0.0 { CELL_POS_INF } else { CELL_NEG_INF };
    }
    let t = if max_abs > 0.0 {
        (v / max_abs).clamp(-1.0, 1.0)
    } else {
        0.0
    };
    let (end, t) = if t < 0.0 {
        (DIVERGING_NEG, -t)
    } else {
        (DIVERGING_POS, t)
    };
    lerp(DIVERGING_ZERO, end, t)
}

fn lerp(a: Color32, b: Color32, t: f32) -> Color32 {
    let mix = |x: u8, y: u8| (f32::from(x) + (f32::from(y) - f32::from(x)) * t).round() as u8;
    Color32::from_rgb(mix(a.r(), b.r()), mix(a.g(), b.g()), mix(a.b(), b.b()))
}

/// Apply the app's visuals (dark, with the accent as selection colour).
pub fn apply(ctx: &egui::Context) {
    ctx.set_theme(egui::Theme::Dark);
    ctx.set_visuals_of(egui::Theme::Dark, egui::Visuals::dark());
    ctx.style_mut_of(egui::Theme::Dark, |style| {
        style.visuals.selection.bg_fill = ACCENT.linear_multiply(0.45);
        style.spacing.item_spacing = egui::vec2(6.0, 4.0);
    });
}
