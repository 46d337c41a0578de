//! The Window mask view: the query × kv-row mask a layer's `sa_topk_idxs` implies, reference and
//! test drawn as one raster that fills the view: the sliding-window part (the first
//! `window_size` slots) and the compressed part (the rest) told apart, every cell where the two
//! sides differ marked (reference only, test only, other branch), the slot that picked each kv
//! row written on it once cells are big enough, `-1` slots counted, and the decode ring order.

use super::heatmap::Tensor;
use super::raster::{raster_ui, strongest, CellSource, RasterArgs, RasterTexture, ZoomState};
use super::{find, rows_of, Sides, ViewCaches, ViewCtx};
use crate::golden::names::parse_capture_name;
use crate::ui::theme::{self, Palette};
use eframe::egui::{self, Color32};
use std::ops::Range;

/// What a (query, kv row) cell of one side's mask is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaskCell {
    /// Not attended.
    Off,
    /// Attended through the sliding window.
    Window,
    /// Attended through the compressed branch.
    Compressed,
    /// The reference row is incomplete (sampled), so the cell is unknown.
    Unknown,
}

/// The mask of one side: `rows × n_kv` cells, plus the `-1` slots of each row.
#[derive(Debug, Clone, PartialEq)]
pub struct Mask {
    pub rows: usize,
    pub n_kv: usize,
    pub cells: Vec<MaskCell>,
    pub absent_per_row: Vec<usize>,
    /// The slot that picked each cell (`usize::MAX`: none).
    pub slot: Vec<usize>,
}

/// Most cells of a mask (rows × kv rows); kv rows beyond are left out and the view says so.
pub const MAX_MASK_CELLS: usize = 1 << 23;

/// Build the mask from index rows of `width` slots: slots `< window_cols` are the window part,
/// the rest the compressed part. A row with an unknown slot marks its unpicked cells Unknown.
pub fn build_mask(idx: &Tensor, window_cols: usize, n_kv: usize) -> Mask {
    let (rows, width) = rows_of(idx);
    let n_kv = n_kv.min(MAX_MASK_CELLS / rows.max(1));
    let mut cells = vec![MaskCell::Off; rows * n_kv];
    let mut slot = vec![usize::MAX; rows * n_kv];
    let mut absent_per_row = vec![0; rows];
    for r in 0..rows {
        let mut complete = true;
        for j in 0..width {
            match idx.get(r * width + j) {
                None => complete = false,
                Some(v) if v < 0.0 => absent_per_row[r] += 1,
                Some(v) => {
                    let k = v as usize;
                    if k < n_kv {
                        cells[r * n_kv + k] = if j < window_cols {
                            MaskCell::Window
                        } else {
                            MaskCell::Compressed
                        };
                        slot[r * n_kv + k] = j;
                    }
                }
            }
        }
        if !complete {
            for c in &mut cells[r * n_kv..(r + 1) * n_kv] {
                if *c == MaskCell::Off {
                    *c = MaskCell::Unknown;
                }
            }
        }
    }
    Mask {
        rows,
        n_kv,
        cells,
        absent_per_row,
        slot,
    }
}

/// The width of the window part read from the indices, for a capture the golden does not
/// describe (another model's run): `sa_kv` is the window rows followed by the compressed rows,
/// so the window slots hold indices below their count and the compressed slots indices at or
/// above it. The answer is the largest `w` for which every row's first `w` slots hold indices
/// `< w` and its other slots indices `>= w` (`-1` slots fit either side).
pub fn infer_window(idx: &Tensor) -> usize {
    let (rows, width) = rows_of(idx);
    // Per slot, the smallest and largest index over the rows (ignoring -1 and unknowns).
    let mut lo = vec![f64::INFINITY; width];
    let mut hi = vec![f64::NEG_INFINITY; width];
    for r in 0..rows {
        for j in 0..width {
            if let Some(v) = idx.get(r * width + j).filter(|v| *v >= 0.0) {
                lo[j] = lo[j].min(v);
                hi[j] = hi[j].max(v);
            }
        }
    }
    // prefix_hi[w]: largest index in slots < w; suffix_lo[w]: smallest in slots >= w.
    let mut prefix_hi = vec![f64::NEG_INFINITY; width + 1];
    for j in 0..width {
        prefix_hi[j + 1] = prefix_hi[j].max(hi[j]);
    }
    let mut suffix_lo = vec![f64::INFINITY; width + 1];
    for j in (0..width).rev() {
        suffix_lo[j] = suffix_lo[j + 1].min(lo[j]);
    }
    (0..=width)
        .rev()
        .find(|&w| prefix_hi[w] < w as f64 && suffix_lo[w] >= w as f64)
        .unwrap_or(0)
}

/// Cells where both sides are known and differ.
pub fn mask_differences(a: &Mask, b: &Mask) -> usize {
    a.cells
        .iter()
        .zip(&b.cells)
        .filter(|(x, y)| **x != MaskCell::Unknown && **y != MaskCell::Unknown && x != y)
        .count()
}

/// A cell of the combined raster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Combined {
    Off,
    Window,
    Compressed,
    /// Attended by the reference only.
    RefOnly,
    /// Attended by the test only.
    TestOnly,
    /// Attended by both, through different branches.
    OtherBranch,
    Unknown,
}

impl Combined {
    pub fn of(reference: MaskCell, test: MaskCell) -> Combined {
        use MaskCell::*;
        match (reference, test) {
            (Unknown, _) | (_, Unknown) => Combined::Unknown,
            (Off, Off) => Combined::Off,
            (Window, Window) => Combined::Window,
            (Compressed, Compressed) => Combined::Compressed,
            (Off, _) => Combined::TestOnly,
            (_, Off) => Combined::RefOnly,
            _ => Combined::OtherBranch,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Combined::Off => "not attended",
            Combined::Window => "window",
            Combined::Compressed => "compressed",
            Combined::RefOnly => "reference only",
            Combined::TestOnly => "test only",
            Combined::OtherBranch => "other branch",
            Combined::Unknown => "no sample",
        }
    }
    pub fn color(self, p: &Palette) -> Color32 {
        match self {
            Combined::Off => p.set_empty,
            Combined::Window => p.mask_window,
            Combined::Compressed => p.mask_compressed,
            Combined::RefOnly => p.set_ref_only,
            Combined::TestOnly => p.set_test_only,
            Combined::OtherBranch => p.set_tie_flip,
            Combined::Unknown => p.set_unknown,
        }
    }
    fn priority(self) -> u8 {
        match self {
            Combined::RefOnly => 7,
            Combined::TestOnly => 6,
            Combined::OtherBranch => 5,
            Combined::Compressed => 4,
            Combined::Window => 3,
            Combined::Unknown => 2,
            Combined::Off => 1,
        }
    }
    pub const ALL: [Combined; 7] = [
        Combined::Window,
        Combined::Compressed,
        Combined::RefOnly,
        Combined::TestOnly,
        Combined::OtherBranch,
        Combined::Unknown,
        Combined::Off,
    ];
}

/// Both sides' masks of one `sa_topk_idxs` and their combination.
pub struct MaskModel {
    pub target: String,
    pub sides: Sides,
    pub reference: Mask,
    pub test: Mask,
    pub combined: Vec<Combined>,
    pub window_cols: usize,
    pub width: usize,
    /// kv rows the layer attends over (`sa_kv`'s rows, or the largest index + 1).
    pub n_kv_wanted: usize,
    pub differences: usize,
    /// The window's width was read from the indices (the golden does not describe the capture).
    pub window_inferred: bool,
}

impl MaskModel {
    pub fn build(target: String, sides: Sides, window: usize, n_kv: usize) -> MaskModel {
        let (_, width) = rows_of(&sides.test);
        let window_cols = window.min(width);
        let reference = build_mask(&sides.reference, window_cols, n_kv);
        let test = build_mask(&sides.test, window_cols, n_kv);
        let combined = reference
            .cells
            .iter()
            .zip(&test.cells)
            .map(|(&a, &b)| Combined::of(a, b))
            .collect();
        let differences = mask_differences(&reference, &test);
        MaskModel {
            target,
            sides,
            reference,
            test,
            combined,
            window_cols,
            width,
            n_kv_wanted: n_kv,
            differences,
            window_inferred: false,
        }
    }
    fn at(&self, r: usize, c: usize) -> Combined {
        self.combined
            .get(r * self.test.n_kv + c)
            .copied()
            .unwrap_or(Combined::Off)
    }
}

struct MaskSource<'a> {
    m: &'a MaskModel,
    palette: &'a Palette,
}

impl CellSource for MaskSource<'_> {
    fn rows(&self) -> usize {
        self.m.test.rows
    }
    fn cols(&self) -> usize {
        self.m.test.n_kv
    }
    fn block_color(&self, rows: Range<usize>, cols: Range<usize>) -> Color32 {
        strongest(
            rows,
            cols,
            Combined::Off,
            |r, c| self.m.at(r, c),
            Combined::priority,
        )
        .color(self.palette)
    }
    fn cell_text(&self, r: usize, c: usize) -> Option<String> {
        let i = r * self.m.test.n_kv + c;
        let s = match self.m.test.slot.get(i) {
            Some(&s) if s != usize::MAX => s,
            _ => *self.m.reference.slot.get(i)?,
        };
        (s != usize::MAX).then(|| s.to_string())
    }
}

/// The mask view's cache.
#[derive(Default)]
pub struct MaskCache {
    key: Option<u64>,
    pub model: Option<MaskModel>,
    pub zoom: ZoomState,
    pub texture: RasterTexture,
}

/// The raster's label.
pub const MASK_PANEL: &str = "Window mask raster";

/// Draw the view for the layer of `ctx.r`.
pub fn window_mask_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, caches: &mut ViewCaches) {
    let r = ctx.r;
    let Some(layer) = parse_capture_name(&r.name).layer else {
        ui.label("Window mask: select a capture of a layer");
        return;
    };
    let idx_name = format!("L{layer}.sa_topk_idxs");
    let Some(target) = find(ctx.results, r.regime_index, &idx_name) else {
        ui.label(format!("Window mask: {idx_name} has not run yet"));
        return;
    };
    let key = super::capture_key(target, ctx.settings);
    let cache = &mut caches.mask;
    if cache.key != Some(key) {
        let Some(sides) = super::sides(ctx.golden, target, ctx.settings) else {
            ui.label("Window mask: no data");
            return;
        };
        let n_kv = find(ctx.results, r.regime_index, &format!("L{layer}.sa_kv"))
            .and_then(|kv| kv.shape.get(1).copied())
            .unwrap_or_else(|| {
                let t = &sides.test;
                (0..t.len())
                    .filter_map(|i| t.get(i))
                    .fold(0.0f64, |m, v| m.max(v + 1.0))
                    .clamp(0.0, usize::MAX as f64 / 2.0) as usize
            });
        // The window's width is the model's (the golden's fixture); a capture the golden does
        // not hold says it through its own indices.
        let (window, inferred) = if super::golden_describes(ctx.golden, target) {
            (ctx.golden.fixture.window_size, false)
        } else {
            (infer_window(&sides.reference), true)
        };
        let mut model = MaskModel::build(target.label(), sides, window, n_kv);
        model.window_inferred = inferred;
        cache.model = Some(model);
        cache.key = Some(key);
        cache.zoom = ZoomState::default();
    }
    let Some(m) = cache.model.as_ref() else {
        return;
    };
    let palette = theme::palette(ui.ctx());
    let count = |mask: &Mask, k: MaskCell| mask.cells.iter().filter(|&&c| c == k).count();
    ui.horizontal_wrapped(|ui| {
        ui.label(format!(
            "Window mask of {}: {} queries × {} kv rows; window part = first {} slots{}, compressed part = {} slots{}",
            m.target,
            m.test.rows,
            m.test.n_kv,
            m.window_cols,
            if m.window_inferred { " (read from the indices)" } else { "" },
            m.width - m.window_cols,
            if m.test.n_kv < m.n_kv_wanted { " (first kv rows only)" } else { "" }
        ));
        if ui.button("Fit").clicked() {
            cache.zoom.fit();
        }
    });
    ui.horizontal_wrapped(|ui| {
        ui.label(format!(
            "Test ({}): window cells {}, compressed cells {}, -1 slots {}",
            m.sides.test_name,
            count(&m.test, MaskCell::Window),
            count(&m.test, MaskCell::Compressed),
            m.test.absent_per_row.iter().sum::<usize>()
        ));
        ui.label(format!(
            "Reference ({}): window cells {}, compressed cells {}, unknown cells {}",
            m.sides.ref_name,
            count(&m.reference, MaskCell::Window),
            count(&m.reference, MaskCell::Compressed),
            count(&m.reference, MaskCell::Unknown)
        ));
        ui.colored_label(
            palette.verdict(m.differences == 0),
            format!("Mask differences: {}", m.differences),
        );
    });
    for t in super::topk::named_triages(target, ctx.settings.test_backend) {
        let tt = &t.triage.triage;
        ui.colored_label(
            palette.triage(tt.real, tt.rows_differing),
            super::topk::triage_line(&t),
        )
        .on_hover_text("The Top-k agreement view lists every differing row");
    }
    if m.test.rows == 1 {
        let ring: Vec<String> = (0..m.window_cols)
            .filter_map(|j| m.sides.test.get(j).map(|v| format!("{}", v as i64)))
            .collect();
        ui.label(format!(
            "Decode ring order (slots, oldest first): {}",
            ring.join(", ")
        ));
    }
    ui.horizontal_wrapped(|ui| {
        for k in Combined::ALL {
            let n = m.combined.iter().filter(|&&c| c == k).count();
            let (rect, _) = ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
            ui.painter().rect_filled(rect, 2.0, k.color(palette));
            ui.label(format!("{}: {n}", k.label()));
        }
    });
    let readout_h = ui.text_style_height(&egui::TextStyle::Body) + 8.0;
    let avail = ui.available_size();
    let size = egui::vec2(avail.x, (avail.y - readout_h).max(160.0));
    let resp = raster_ui(
        ui,
        size,
        &RasterArgs {
            label: MASK_PANEL,
            source_key: key,
            ticks: true,
        },
        &MaskSource { m, palette },
        &mut cache.zoom,
        &mut cache.texture,
    );
    super::probe_panel(&mut caches.layout, MASK_PANEL, resp.response.rect);
    caches.hover = resp.hovered.map(|(row, kv)| {
        let i = row * m.test.n_kv + kv;
        let side = |mask: &Mask| {
            let slot = mask.slot.get(i).copied().unwrap_or(usize::MAX);
            let what = match mask.cells.get(i) {
                Some(MaskCell::Window) => "window",
                Some(MaskCell::Compressed) => "compressed",
                Some(MaskCell::Unknown) => "no sample",
                _ => "not attended",
            };
            if slot == usize::MAX {
                what.to_string()
            } else {
                format!("{what} (slot {slot})")
            }
        };
        let text = format!(
            "{} query {row}, kv row {kv}: {}; {} {}, {} {}",
            m.target,
            m.at(row, kv).label(),
            m.sides.ref_name,
            side(&m.reference),
            m.sides.test_name,
            side(&m.test)
        );
        super::HoverReadout {
            capture: m.target.clone(),
            flat_index: i,
            index: vec![("query".into(), row), ("kv row".into(), kv)],
            reference: None,
            test: None,
            text,
        }
    });
    super::readout_ui(
        ui,
        caches.hover.as_ref(),
        "Hover a cell: which side attends to that kv row, through which branch and slot.",
    );
}
