//! Design tokens: every colour and size the app draws with comes from here, so the look changes
//! in one place (Rerun's `design_tokens.rs` habit). There is a dark and a light [`Palette`]; the
//! contrast of every text token against the backgrounds it is drawn on is checked by a test
//! (WCAG AA, 4.5:1). Status is never colour alone: each coloured mark also has a text label.
//! The heatmap colour maps are ramps in OKLab, so equal steps of value are equal steps of
//! perceived lightness: a sequential map for values and a diverging one for differences.

use eframe::egui::{self, Color32};
use std::sync::OnceLock;

/// Which palette the app draws with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum ThemeChoice {
    #[default]
    Dark,
    Light,
}

impl ThemeChoice {
    /// The toggle's text.
    pub fn label(self) -> &'static str {
        match self {
            ThemeChoice::Dark => "Dark",
            ThemeChoice::Light => "Light",
        }
    }
    /// The other theme.
    pub fn toggled(self) -> ThemeChoice {
        match self {
            ThemeChoice::Dark => ThemeChoice::Light,
            ThemeChoice::Light => ThemeChoice::Dark,
        }
    }
    /// The palette of this theme.
    pub fn palette(self) -> &'static Palette {
        match self {
            ThemeChoice::Dark => &DARK,
            ThemeChoice::Light => &LIGHT,
        }
    }
    /// Stable name (persistence).
    pub fn key(self) -> &'static str {
        match self {
            ThemeChoice::Dark => "dark",
            ThemeChoice::Light => "light",
        }
    }
    /// The theme named by [`Self::key`].
    pub fn from_key(key: &str) -> Option<ThemeChoice> {
        match key {
            "dark" => Some(ThemeChoice::Dark),
            "light" => Some(ThemeChoice::Light),
            _ => None,
        }
    }
}

/// Every colour of one theme.
#[derive(Debug, Clone, PartialEq)]
pub struct Palette {
    pub name: &'static str,
    /// Background of panels and of windows.
    pub panel_bg: Color32,
    /// Background of text fields, plots and heatmap frames.
    pub extreme_bg: Color32,
    /// Stripes of tables.
    pub faint_bg: Color32,
    /// Button backgrounds (inactive, hovered, pressed).
    pub button_bg: Color32,
    pub button_hover_bg: Color32,
    pub button_active_bg: Color32,
    /// Separators and frames.
    pub separator: Color32,
    /// Body text, weak (secondary) text and strong (headings, hovered buttons) text.
    pub text: Color32,
    pub text_weak: Color32,
    pub text_strong: Color32,
    /// Selected list rows and toggles: background and the text on it.
    pub selection_bg: Color32,
    pub selection_text: Color32,
    /// Status text on the panel background.
    pub pass_text: Color32,
    pub fail_text: Color32,
    pub warn_text: Color32,
    pub accent: Color32,
    /// Status chips of the capture list (the text on them is black or white by luminance).
    pub chip_exact_bg: Color32,
    pub chip_pass_bg: Color32,
    pub chip_fail_bg: Color32,
    pub chip_warn_bg: Color32,
    pub chip_none_bg: Color32,
    /// Banners: background and text.
    pub error_bg: Color32,
    pub error_text: Color32,
    pub warn_bg: Color32,
    pub warn_bg_text: Color32,
    /// Overview plot: one series per backend-vs-golden pair, the cross series, the pass line,
    /// the bit-exact band, the shading of every other lane, the hovered point's ring.
    pub series_vs_golden: [Color32; 3],
    pub series_cross: Color32,
    pub pass_line: Color32,
    pub exact_band: Color32,
    pub lane_shade: Color32,
    pub hover_ring: Color32,
    /// Error/tolerance bar of the list: its track, a passing and a failing fill.
    pub bar_track: Color32,
    /// Set-membership cells (top-k, window mask, routing).
    pub set_both: Color32,
    pub set_ref_only: Color32,
    pub set_test_only: Color32,
    pub set_tie_flip: Color32,
    pub set_unknown: Color32,
    pub set_empty: Color32,
    pub mask_window: Color32,
    pub mask_compressed: Color32,
    /// Heatmap marks: no sample, NaN, +inf, -inf; the lines between large cells.
    pub cell_unknown: Color32,
    pub cell_nan: Color32,
    pub cell_pos_inf: Color32,
    pub cell_neg_inf: Color32,
    pub cell_gap: Color32,
}

/// The dark palette (the default).
pub const DARK: Palette = Palette {
    name: "dark",
    panel_bg: Color32::from_rgb(0x1b, 0x1d, 0x21),
    extreme_bg: Color32::from_rgb(0x10, 0x11, 0x14),
    faint_bg: Color32::from_rgb(0x23, 0x26, 0x2b),
    button_bg: Color32::from_rgb(0x33, 0x37, 0x3e),
    button_hover_bg: Color32::from_rgb(0x40, 0x45, 0x4d),
    button_active_bg: Color32::from_rgb(0x2a, 0x2e, 0x34),
    separator: Color32::from_rgb(0x3d, 0x42, 0x4a),
    text: Color32::from_rgb(0xd6, 0xd9, 0xde),
    text_weak: Color32::from_rgb(0x9a, 0xa1, 0xab),
    text_strong: Color32::from_rgb(0xf4, 0xf5, 0xf7),
    selection_bg: Color32::from_rgb(0x1f, 0x4f, 0x8a),
    selection_text: Color32::from_rgb(0xff, 0xff, 0xff),
    pass_text: Color32::from_rgb(0x4c, 0xc3, 0x5d),
    fail_text: Color32::from_rgb(0xff, 0x6b, 0x63),
    warn_text: Color32::from_rgb(0xe3, 0xb3, 0x41),
    accent: Color32::from_rgb(0x6c, 0xb2, 0xff),
    chip_exact_bg: Color32::from_rgb(0x2f, 0x9e, 0x44),
    chip_pass_bg: Color32::from_rgb(0x8c, 0xd1, 0x8f),
    chip_fail_bg: Color32::from_rgb(0xe0, 0x3e, 0x36),
    chip_warn_bg: Color32::from_rgb(0xe3, 0xb3, 0x41),
    chip_none_bg: Color32::from_rgb(0x5c, 0x63, 0x6e),
    error_bg: Color32::from_rgb(0x4a, 0x1c, 0x1c),
    error_text: Color32::from_rgb(0xff, 0xb4, 0xae),
    warn_bg: Color32::from_rgb(0x3d, 0x2f, 0x0c),
    warn_bg_text: Color32::from_rgb(0xf2, 0xcc, 0x60),
    series_vs_golden: [
        Color32::from_rgb(0x6c, 0xb2, 0xff),
        Color32::from_rgb(0xc3, 0x9b, 0xff),
        Color32::from_rgb(0x39, 0xc5, 0xcf),
    ],
    series_cross: Color32::from_rgb(0xff, 0xa6, 0x57),
    pass_line: Color32::from_rgb(0x8b, 0x94, 0x9e),
    exact_band: Color32::from_rgba_premultiplied(0x1e, 0x3d, 0x26, 0x60),
    lane_shade: Color32::from_rgba_premultiplied(0x14, 0x16, 0x19, 0x50),
    hover_ring: Color32::from_rgb(0xff, 0xff, 0xff),
    bar_track: Color32::from_rgb(0x2c, 0x30, 0x36),
    set_both: Color32::from_rgb(0x2e, 0x7d, 0x32),
    set_ref_only: Color32::from_rgb(0xe5, 0x39, 0x35),
    set_test_only: Color32::from_rgb(0xff, 0x98, 0x00),
    set_tie_flip: Color32::from_rgb(0xab, 0x47, 0xbc),
    set_unknown: Color32::from_rgb(0x4a, 0x4f, 0x57),
    set_empty: Color32::from_rgb(0x24, 0x27, 0x2c),
    mask_window: Color32::from_rgb(0x42, 0x8b, 0xca),
    mask_compressed: Color32::from_rgb(0x26, 0xa6, 0x9a),
    cell_unknown: Color32::from_rgb(0x4a, 0x4f, 0x57),
    cell_nan: Color32::from_rgb(0xff, 0x00, 0xff),
    cell_pos_inf: Color32::from_rgb(0xff, 0xff, 0x00),
    cell_neg_inf: Color32::from_rgb(0x00, 0xff, 0x7f),
    cell_gap: Color32::from_rgb(0x10, 0x11, 0x14),
};

/// The light palette.
pub const LIGHT: Palette = Palette {
    name: "light",
    panel_bg: Color32::from_rgb(0xf6, 0xf7, 0xf9),
    extreme_bg: Color32::from_rgb(0xff, 0xff, 0xff),
    faint_bg: Color32::from_rgb(0xea, 0xed, 0xf1),
    button_bg: Color32::from_rgb(0xdf, 0xe3, 0xe8),
    button_hover_bg: Color32::from_rgb(0xd0, 0xd6, 0xdd),
    button_active_bg: Color32::from_rgb(0xc4, 0xcb, 0xd3),
    separator: Color32::from_rgb(0xc8, 0xce, 0xd6),
    text: Color32::from_rgb(0x1f, 0x23, 0x28),
    text_weak: Color32::from_rgb(0x55, 0x5d, 0x68),
    text_strong: Color32::from_rgb(0x00, 0x00, 0x00),
    selection_bg: Color32::from_rgb(0xb6, 0xd4, 0xfb),
    selection_text: Color32::from_rgb(0x0b, 0x1f, 0x3a),
    pass_text: Color32::from_rgb(0x16, 0x6b, 0x2e),
    fail_text: Color32::from_rgb(0xc1, 0x1f, 0x2a),
    warn_text: Color32::from_rgb(0x8a, 0x5a, 0x00),
    accent: Color32::from_rgb(0x09, 0x5f, 0xc8),
    chip_exact_bg: Color32::from_rgb(0x1a, 0x7f, 0x37),
    chip_pass_bg: Color32::from_rgb(0xa6, 0xe3, 0xae),
    chip_fail_bg: Color32::from_rgb(0xcf, 0x22, 0x2e),
    chip_warn_bg: Color32::from_rgb(0xf2, 0xc9, 0x4c),
    chip_none_bg: Color32::from_rgb(0xc8, 0xce, 0xd6),
    error_bg: Color32::from_rgb(0xff, 0xe3, 0xe0),
    error_text: Color32::from_rgb(0x8e, 0x15, 0x19),
    warn_bg: Color32::from_rgb(0xff, 0xf1, 0xc7),
    warn_bg_text: Color32::from_rgb(0x6b, 0x45, 0x00),
    series_vs_golden: [
        Color32::from_rgb(0x09, 0x5f, 0xc8),
        Color32::from_rgb(0x82, 0x50, 0xdf),
        Color32::from_rgb(0x0a, 0x7e, 0x86),
    ],
    series_cross: Color32::from_rgb(0xc2, 0x5e, 0x00),
    pass_line: Color32::from_rgb(0x6e, 0x77, 0x81),
    exact_band: Color32::from_rgba_premultiplied(0x9a, 0xd6, 0xa6, 0x60),
    lane_shade: Color32::from_rgba_premultiplied(0xd8, 0xdd, 0xe3, 0x60),
    hover_ring: Color32::from_rgb(0x00, 0x00, 0x00),
    bar_track: Color32::from_rgb(0xdf, 0xe3, 0xe8),
    set_both: Color32::from_rgb(0x4c, 0xaf, 0x50),
    set_ref_only: Color32::from_rgb(0xd3, 0x2f, 0x2f),
    set_test_only: Color32::from_rgb(0xf5, 0x7c, 0x00),
    set_tie_flip: Color32::from_rgb(0x8e, 0x24, 0xaa),
    set_unknown: Color32::from_rgb(0xb0, 0xb7, 0xc0),
    set_empty: Color32::from_rgb(0xe9, 0xec, 0xf0),
    mask_window: Color32::from_rgb(0x1e, 0x88, 0xe5),
    mask_compressed: Color32::from_rgb(0x00, 0x89, 0x7b),
    cell_unknown: Color32::from_rgb(0xb0, 0xb7, 0xc0),
    cell_nan: Color32::from_rgb(0xff, 0x00, 0xff),
    cell_pos_inf: Color32::from_rgb(0xff, 0xd6, 0x00),
    cell_neg_inf: Color32::from_rgb(0x00, 0xc8, 0x53),
    cell_gap: Color32::from_rgb(0xff, 0xff, 0xff),
};

impl Palette {
    /// Every (what, text, background) pair the app draws text with: the contrast test checks each
    /// against WCAG AA. Chip texts are not listed: they are chosen per chip by [`text_on`].
    pub fn text_pairs(&self) -> Vec<(String, Color32, Color32)> {
        let mut out = Vec::new();
        for (bg_name, bg) in [
            ("panel", self.panel_bg),
            ("extreme", self.extreme_bg),
            ("stripe", self.faint_bg),
        ] {
            for (fg_name, fg) in [
                ("text", self.text),
                ("weak text", self.text_weak),
                ("strong text", self.text_strong),
                ("pass", self.pass_text),
                ("fail", self.fail_text),
                ("warn", self.warn_text),
                ("accent", self.accent),
            ] {
                out.push((format!("{fg_name} on {bg_name}"), fg, bg));
            }
        }
        for (what, fg, bg) in [
            ("button text on button", self.text, self.button_bg),
            (
                "hovered button text",
                self.text_strong,
                self.button_hover_bg,
            ),
            (
                "pressed button text",
                self.text_strong,
                self.button_active_bg,
            ),
            ("selected text", self.selection_text, self.selection_bg),
            ("error banner", self.error_text, self.error_bg),
            ("warning banner", self.warn_bg_text, self.warn_bg),
        ] {
            out.push((what.to_string(), fg, bg));
        }
        out
    }

    /// The chip backgrounds (each carries black or white text, by [`text_on`]).
    pub fn chip_backgrounds(&self) -> [Color32; 5] {
        [
            self.chip_exact_bg,
            self.chip_pass_bg,
            self.chip_fail_bg,
            self.chip_warn_bg,
            self.chip_none_bg,
        ]
    }

    /// The colour of a top-k triage: real disagreements fail, tie flips and near ties warn.
    pub fn triage(&self, real: usize, rows_differing: usize) -> Color32 {
        if real > 0 {
            self.fail_text
        } else if rows_differing > 0 {
            self.warn_text
        } else {
            self.pass_text
        }
    }

    /// The colour of a pass/fail verdict as text.
    pub fn verdict(&self, pass: bool) -> Color32 {
        if pass {
            self.pass_text
        } else {
            self.fail_text
        }
    }

    /// egui's visuals for this palette (what [`apply`] installs); the contrast test reads the text
    /// and background colours egui will actually use from here.
    pub fn visuals(&self, dark: bool) -> egui::Visuals {
        let mut v = if dark {
            egui::Visuals::dark()
        } else {
            egui::Visuals::light()
        };
        v.panel_fill = self.panel_bg;
        v.window_fill = self.panel_bg;
        v.extreme_bg_color = self.extreme_bg;
        v.faint_bg_color = self.faint_bg;
        v.code_bg_color = self.faint_bg;
        v.weak_text_color = Some(self.text_weak);
        v.hyperlink_color = self.accent;
        v.warn_fg_color = self.warn_text;
        v.error_fg_color = self.fail_text;
        v.window_stroke.color = self.separator;
        v.selection.bg_fill = self.selection_bg;
        v.selection.stroke.color = self.selection_text;
        let w = &mut v.widgets;
        w.noninteractive.bg_fill = self.panel_bg;
        w.noninteractive.weak_bg_fill = self.panel_bg;
        w.noninteractive.fg_stroke.color = self.text;
        w.noninteractive.bg_stroke.color = self.separator;
        w.inactive.bg_fill = self.button_bg;
        w.inactive.weak_bg_fill = self.button_bg;
        w.inactive.fg_stroke.color = self.text;
        w.hovered.bg_fill = self.button_hover_bg;
        w.hovered.weak_bg_fill = self.button_hover_bg;
        w.hovered.fg_stroke.color = self.text_strong;
        w.active.bg_fill = self.button_active_bg;
        w.active.weak_bg_fill = self.button_active_bg;
        w.active.fg_stroke.color = self.text_strong;
        w.open.bg_fill = self.panel_bg;
        w.open.weak_bg_fill = self.button_bg;
        w.open.fg_stroke.color = self.text;
        v
    }
}

/// The palette of the theme `ctx` shows now.
pub fn palette(ctx: &egui::Context) -> &'static Palette {
    match ctx.theme() {
        egui::Theme::Dark => &DARK,
        egui::Theme::Light => &LIGHT,
    }
}

/// Install both palettes' visuals and show `choice`.
pub fn apply(ctx: &egui::Context, choice: ThemeChoice) {
    ctx.set_visuals_of(egui::Theme::Dark, DARK.visuals(true));
    ctx.set_visuals_of(egui::Theme::Light, LIGHT.visuals(false));
    for t in [egui::Theme::Dark, egui::Theme::Light] {
        ctx.style_mut_of(t, |style| {
            style.spacing.item_spacing = egui::vec2(ITEM_SPACING_PT[0], ITEM_SPACING_PT[1]);
        });
    }
    ctx.set_theme(match choice {
        ThemeChoice::Dark => egui::Theme::Dark,
        ThemeChoice::Light => egui::Theme::Light,
    });
}

// ---- sizes ----------------------------------------------------------------------------------

/// Spacing between widgets (x, y) in points.
pub const ITEM_SPACING_PT: [f32; 2] = [6.0, 4.0];
/// Initial window size in points (also the screenshots' size).
pub const WINDOW_SIZE_PT: [f32; 2] = [1280.0, 800.0];
/// The capture list's default width as a fraction of the window, and its bounds in points.
pub const LIST_WIDTH_FRACTION: f32 = 0.235;
pub const LIST_MIN_WIDTH_PT: f32 = 240.0;
pub const LIST_MAX_DEFAULT_WIDTH_PT: f32 = 460.0;
/// Default height of the overview strip and of the metrics table, in points.
pub const OVERVIEW_HEIGHT_PT: f32 = 150.0;
pub const METRICS_HEIGHT_PT: f32 = 118.0;
/// Smallest height the overview and metrics regions can be dragged to.
pub const REGION_MIN_HEIGHT_PT: f32 = 60.0;
/// Smallest width of one heatmap panel of the Values view: below it the panels stack.
pub const MIN_PANEL_WIDTH_PT: f32 = 300.0;
/// Gap between side-by-side panels.
pub const PANEL_GAP_PT: f32 = 10.0;
/// Height of a capture list row.
pub const LIST_ROW_HEIGHT_PT: f32 = 20.0;
/// Width of a status chip and of the list's error/tolerance bar.
pub const CHIP_WIDTH_PT: f32 = 34.0;
pub const RATIO_BAR_WIDTH_PT: f32 = 44.0;
/// Font sizes of the list's names and shapes, and of the chips.
pub const LIST_FONT_PT: f32 = 11.5;
pub const CHIP_FONT_PT: f32 = 10.0;
/// Decades the list's error/tolerance bar spans, below and above ratio 1.
pub const RATIO_BAR_DECADES_BELOW: f64 = 6.0;
pub const RATIO_BAR_DECADES_ABOVE: f64 = 2.0;
/// Indent of a group level in the list.
pub const LIST_INDENT_PT: f32 = 8.0;
/// Room for the row and column tick labels around a raster.
pub const RASTER_LEFT_PT: f32 = 40.0;
pub const RASTER_TOP_PT: f32 = 16.0;
/// Cells at least this big (in points) get thin gaps and, with room, their number drawn.
pub const CELL_GAP_MIN_PT: f32 = 6.0;
/// Smallest font a number in a cell is drawn with.
pub const CELL_TEXT_MIN_PT: f32 = 9.0;
/// Largest font a number in a cell is drawn with.
pub const CELL_TEXT_MAX_PT: f32 = 16.0;
/// Most cells whose numbers are drawn in one frame (beyond: zoom in).
pub const CELL_TEXT_MAX_CELLS: usize = 2500;
/// Height of the colour legend bar.
pub const LEGEND_BAR_HEIGHT_PT: f32 = 10.0;
/// Radius of overview points, failing crosses and the hover ring.
pub const POINT_RADIUS_PT: f32 = 2.5;
pub const FAIL_MARK_RADIUS_PT: f32 = 5.0;
pub const HOVER_RADIUS_PT: f32 = 10.0;
/// Zoom per scrolled point on rasters (wheel).
pub const ZOOM_PER_SCROLL_PT: f32 = 0.004;
/// Width of the overview's ulp histogram as a fraction of the strip.
pub const HISTOGRAM_WIDTH_FRACTION: f32 = 0.32;
/// Side of one HC mix matrix cell, at least (its number stays readable) and at most.
pub const HC_CELL_MIN_PT: f32 = 44.0;
pub const HC_CELL_MAX_PT: f32 = 72.0;

// ---- colour maps ----------------------------------------------------------------------------

/// Entries of each colour map's lookup table.
pub const MAP_STEPS: usize = 256;

/// OKLab lightness at the two ends of the sequential map (dark to light).
pub const SEQ_L: [f64; 2] = [0.27, 0.94];
/// OKLCh hue (degrees) at the two ends of the sequential map (blue-violet to yellow).
pub const SEQ_HUE_DEG: [f64; 2] = [285.0, 100.0];
/// Peak chroma of the sequential map (reduced where sRGB cannot show it).
pub const SEQ_CHROMA: f64 = 0.16;
/// OKLab lightness at the centre and at the ends of the diverging map.
pub const DIV_L_CENTRE: f64 = 0.96;
pub const DIV_L_END: f64 = 0.46;
/// OKLCh hues of the negative (blue) and positive (red) arms.
pub const DIV_HUE_NEG_DEG: f64 = 255.0;
pub const DIV_HUE_POS_DEG: f64 = 27.0;
/// Chroma at the ends of the diverging map.
pub const DIV_CHROMA: f64 = 0.17;

/// An OKLab colour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Oklab {
    pub l: f64,
    pub a: f64,
    pub b: f64,
}

impl Oklab {
    /// From lightness, chroma and hue in degrees.
    pub fn from_lch(l: f64, c: f64, hue_deg: f64) -> Oklab {
        let h = hue_deg.to_radians();
        Oklab {
            l,
            a: c * h.cos(),
            b: c * h.sin(),
        }
    }
    /// Linear sRGB (may be outside [0, 1] when out of gamut).
    pub fn to_linear_srgb(self) -> [f64; 3] {
        let l_ = self.l + 0.396_337_777_4 * self.a + 0.215_803_757_3 * self.b;
        let m_ = self.l - 0.105_561_345_8 * self.a - 0.063_854_172_8 * self.b;
        let s_ = self.l - 0.089_484_177_5 * self.a - 1.291_485_548_0 * self.b;
        let (l, m, s) = (l_ * l_ * l_, m_ * m_ * m_, s_ * s_ * s_);
        [
            4.076_741_662_1 * l - 3.307_711_591_3 * m + 0.230_969_929_2 * s,
            -1.268_438_004_6 * l + 2.609_757_401_1 * m - 0.341_319_396_5 * s,
            -0.004_196_086_3 * l - 0.703_418_614_7 * m + 1.707_614_701_0 * s,
        ]
    }
    /// From an sRGB colour.
    pub fn from_srgb(c: Color32) -> Oklab {
        let [r, g, b] = [c.r(), c.g(), c.b()].map(srgb_to_linear);
        let l = 0.412_221_470_8 * r + 0.536_332_536_3 * g + 0.051_445_992_9 * b;
        let m = 0.211_903_498_2 * r + 0.680_699_545_1 * g + 0.107_396_956_6 * b;
        let s = 0.088_302_461_9 * r + 0.281_718_837_6 * g + 0.629_978_700_5 * b;
        let (l_, m_, s_) = (l.cbrt(), m.cbrt(), s.cbrt());
        Oklab {
            l: 0.210_454_255_3 * l_ + 0.793_617_785_0 * m_ - 0.004_072_046_8 * s_,
            a: 1.977_998_495_1 * l_ - 2.428_592_205_0 * m_ + 0.450_593_709_9 * s_,
            b: 0.025_904_037_1 * l_ + 0.782_771_766_2 * m_ - 0.808_675_766_0 * s_,
        }
    }
}

/// The sRGB colour of lightness `l`, hue `hue_deg` and the largest chroma up to `c` that sRGB can
/// show (found by bisection), so every map keeps its lightness ramp exactly.
pub fn lch_in_gamut(l: f64, c: f64, hue_deg: f64) -> Color32 {
    let inside = |c: f64| {
        Oklab::from_lch(l, c, hue_deg)
            .to_linear_srgb()
            .iter()
            .all(|v| (-1e-9..=1.0 + 1e-9).contains(v))
    };
    let mut chroma = c;
    if !inside(chroma) {
        let (mut lo, mut hi) = (0.0, c);
        for _ in 0..30 {
            let mid = 0.5 * (lo + hi);
            if inside(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        chroma = lo;
    }
    let [r, g, b] = Oklab::from_lch(l, chroma, hue_deg)
        .to_linear_srgb()
        .map(linear_to_srgb);
    Color32::from_rgb(r, g, b)
}

fn srgb_to_linear(v: u8) -> f64 {
    let c = f64::from(v) / 255.0;
    if c <= 0.040_45 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

fn linear_to_srgb(v: f64) -> u8 {
    let v = v.clamp(0.0, 1.0);
    let c = if v <= 0.003_130_8 {
        12.92 * v
    } else {
        1.055 * v.powf(1.0 / 2.4) - 0.055
    };
    (c * 255.0).round() as u8
}

fn sequential_table() -> &'static [Color32; MAP_STEPS] {
    static TABLE: OnceLock<[Color32; MAP_STEPS]> = OnceLock::new();
    TABLE.get_or_init(|| {
        std::array::from_fn(|i| {
            let t = i as f64 / (MAP_STEPS - 1) as f64;
            let l = SEQ_L[0] + (SEQ_L[1] - SEQ_L[0]) * t;
            let hue = SEQ_HUE_DEG[0] + (SEQ_HUE_DEG[1] - SEQ_HUE_DEG[0]) * t;
            // Chroma swells in the middle and stays clear of grey at both ends.
            let c = SEQ_CHROMA * (0.55 + 0.45 * (std::f64::consts::PI * t).sin());
            lch_in_gamut(l, c, hue)
        })
    })
}

fn diverging_table() -> &'static [Color32; MAP_STEPS] {
    static TABLE: OnceLock<[Color32; MAP_STEPS]> = OnceLock::new();
    TABLE.get_or_init(|| {
        std::array::from_fn(|i| {
            let t = 2.0 * i as f64 / (MAP_STEPS - 1) as f64 - 1.0;
            let m = t.abs();
            let l = DIV_L_CENTRE + (DIV_L_END - DIV_L_CENTRE) * m;
            let hue = if t < 0.0 {
                DIV_HUE_NEG_DEG
            } else {
                DIV_HUE_POS_DEG
            };
            lch_in_gamut(l, DIV_CHROMA * m, hue)
        })
    })
}

/// The sequential map at `t` in [0, 1] (clamped; NaN maps to 0).
pub fn sequential(t: f64) -> Color32 {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    sequential_table()[(t * (MAP_STEPS - 1) as f64).round() as usize]
}

/// The diverging map at `t` in [-1, 1] (clamped; NaN maps to the centre).
pub fn diverging(t: f64) -> Color32 {
    let t = if t.is_nan() { 0.0 } else { t.clamp(-1.0, 1.0) };
    diverging_table()[((t + 1.0) * 0.5 * (MAP_STEPS - 1) as f64).round() as usize]
}

// ---- contrast -------------------------------------------------------------------------------

/// WCAG AA: the least contrast ratio of body text against its background.
pub const MIN_TEXT_CONTRAST: f64 = 4.5;

/// WCAG relative luminance of an sRGB colour (alpha ignored).
pub fn relative_luminance(c: Color32) -> f64 {
    let [r, g, b] = [c.r(), c.g(), c.b()].map(srgb_to_linear);
    0.2126 * r + 0.7152 * g + 0.0722 * b
}

/// WCAG contrast ratio of two colours (1 to 21).
pub fn contrast_ratio(a: Color32, b: Color32) -> f64 {
    let (la, lb) = (relative_luminance(a), relative_luminance(b));
    let (hi, lo) = if la > lb { (la, lb) } else { (lb, la) };
    (hi + 0.05) / (lo + 0.05)
}

/// Black or white, whichever reads better on `bg` (numbers drawn on cells and chips).
pub fn text_on(bg: Color32) -> Color32 {
    if contrast_ratio(Color32::BLACK, bg) >= contrast_ratio(Color32::WHITE, bg) {
        Color32::BLACK
    } else {
        Color32::WHITE
    }
}
