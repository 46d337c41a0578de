//! The Top-k agreement view for index captures (`sa_topk_idxs`, `shared.*.topk_idxs`,
//! `shared.*.candidates`, `moe_indices`): a query × position raster (which positions each side
//! picked: both, reference only, test only, tie flip where scores are known), or the query ×
//! slot grid with the picked indices, beside a per-row agreement strip linked to its rows; the
//! legend with counts, the score at the k boundary where scores are captured, and the session's
//! triage of every differing row (tie flip / near tie / real, score gap, boundary margin).

use super::heatmap::Tensor;
use super::raster::{
    raster_ui, strongest, CellSource, RasterArgs, RasterTexture, Window, ZoomState,
};
use super::{content_key, find, rows_of, Sides, TopkLayout, ViewCaches, ViewCtx};
use crate::golden::names::{parse_capture_name, CaptureKind};
use crate::golden::policy::F32_TOL;
use crate::session::controller::{CaptureResult, CaptureTriage};
use crate::ui::commands::UiCommand;
use crate::ui::theme::{self, Palette};
use eframe::egui::{self, Color32};
use std::ops::Range;

/// How one slot of an index row compares with the other side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetCell {
    /// The index is in both sets.
    Both,
    /// Only the reference picked it.
    RefOnly,
    /// Only the test picked it.
    TestOnly,
    /// Picked by one side only, but its score ties with an index only the other side picked.
    TieFlip,
    /// The reference holds no sample here (or its row is incomplete, so membership is unknown).
    Unknown,
    /// `-1`: an empty slot (or, in the position raster, a position neither side picked).
    Absent,
}

impl SetCell {
    /// Legend text.
    pub fn label(self) -> &'static str {
        match self {
            SetCell::Both => "both",
            SetCell::RefOnly => "reference only",
            SetCell::TestOnly => "test only",
            SetCell::TieFlip => "tie flip",
            SetCell::Unknown => "no sample",
            SetCell::Absent => "not picked",
        }
    }
    /// Fill colour.
    pub fn color(self, p: &Palette) -> Color32 {
        match self {
            SetCell::Both => p.set_both,
            SetCell::RefOnly => p.set_ref_only,
            SetCell::TestOnly => p.set_test_only,
            SetCell::TieFlip => p.set_tie_flip,
            SetCell::Unknown => p.set_unknown,
            SetCell::Absent => p.set_empty,
        }
    }
    /// Which cell of a downsampled block stays visible: disagreements first.
    pub fn priority(self) -> u8 {
        match self {
            SetCell::RefOnly => 6,
            SetCell::TestOnly => 5,
            SetCell::TieFlip => 4,
            SetCell::Both => 3,
            SetCell::Unknown => 2,
            SetCell::Absent => 1,
        }
    }
    /// Every kind, in legend order.
    pub const ALL: [SetCell; 6] = [
        SetCell::Both,
        SetCell::RefOnly,
        SetCell::TestOnly,
        SetCell::TieFlip,
        SetCell::Unknown,
        SetCell::Absent,
    ];
}

/// One row classified on both sides.
#[derive(Debug, Clone, PartialEq)]
pub struct RowAgreement {
    pub ref_cells: Vec<SetCell>,
    pub test_cells: Vec<SetCell>,
    /// |both| / |union| over the known indices (1 for two empty rows).
    pub agreement: f64,
}

/// Classify an index row: `reference[j]` is `None` where the golden has no sample; negative
/// entries are absent. `tie(ref_index, test_index)` says whether the two have equal scores
/// (always false where scores are unknown).
pub fn classify_row(
    reference: &[Option<i64>],
    test: &[i64],
    tie: &dyn Fn(i64, i64) -> bool,
) -> RowAgreement {
    let ref_complete = reference.iter().all(Option::is_some);
    let ref_set: Vec<i64> = reference
        .iter()
        .flatten()
        .copied()
        .filter(|&v| v >= 0)
        .collect();
    let test_set: Vec<i64> = test.iter().copied().filter(|&v| v >= 0).collect();
    let ref_only: Vec<i64> = ref_set
        .iter()
        .copied()
        .filter(|v| !test_set.contains(v))
        .collect();
    let test_only: Vec<i64> = test_set
        .iter()
        .copied()
        .filter(|v| !ref_set.contains(v))
        .collect();
    let ref_cells = reference
        .iter()
        .map(|v| match v {
            None => SetCell::Unknown,
            Some(v) if *v < 0 => SetCell::Absent,
            Some(v) if test_set.contains(v) => SetCell::Both,
            Some(v) if test_only.iter().any(|&t| tie(*v, t)) => SetCell::TieFlip,
            Some(_) => SetCell::RefOnly,
        })
        .collect();
    let test_cells = test
        .iter()
        .map(|&v| {
            if v < 0 {
                SetCell::Absent
            } else if ref_set.contains(&v) {
                SetCell::Both
            } else if !ref_complete {
                SetCell::Unknown
            } else if ref_only.iter().any(|&r| tie(r, v)) {
                SetCell::TieFlip
            } else {
                SetCell::TestOnly
            }
        })
        .collect();
    let both = ref_set.iter().filter(|v| test_set.contains(v)).count();
    let union = both + ref_only.len() + if ref_complete { test_only.len() } else { 0 };
    RowAgreement {
        ref_cells,
        test_cells,
        agreement: if union == 0 {
            1.0
        } else {
            both as f64 / union as f64
        },
    }
}

/// Classify a 0/1 mask row position by position (`candidates`).
pub fn classify_mask_row(reference: &[Option<i64>], test: &[i64]) -> RowAgreement {
    let cell = |r: Option<i64>, t: i64| match (r, t != 0) {
        (None, _) => SetCell::Unknown,
        (Some(r), true) if r != 0 => SetCell::Both,
        (Some(r), false) if r != 0 => SetCell::RefOnly,
        (Some(_), true) => SetCell::TestOnly,
        (Some(_), false) => SetCell::Absent,
    };
    let cells: Vec<SetCell> = reference
        .iter()
        .zip(test)
        .map(|(&r, &t)| cell(r, t))
        .collect();
    let both = cells.iter().filter(|c| **c == SetCell::Both).count();
    let union = cells
        .iter()
        .filter(|c| matches!(c, SetCell::Both | SetCell::RefOnly | SetCell::TestOnly))
        .count();
    RowAgreement {
        ref_cells: cells.clone(),
        test_cells: cells,
        agreement: if union == 0 {
            1.0
        } else {
            both as f64 / union as f64
        },
    }
}

/// Row `row` of `t` (width = last dim) as optional integers.
pub fn int_row(t: &Tensor, row: usize, width: usize) -> Vec<Option<i64>> {
    (0..width)
        .map(|j| t.get(row * width + j).map(|v| v as i64))
        .collect()
}

/// Most cells of the position raster (rows × positions); wider captures show their first
/// positions and say so.
pub const MAX_POSITION_CELLS: usize = 1 << 23;

/// An index capture classified on both sides, by slot and by position.
pub struct TopkModel {
    pub target: String,
    pub sides: Sides,
    pub rows: usize,
    pub width: usize,
    pub is_mask: bool,
    pub per_row: Vec<RowAgreement>,
    /// Positions of the raster (largest picked index + 1, or the mask's width).
    pub positions: usize,
    /// True when indices beyond `positions` were left out (too many cells).
    pub truncated: bool,
    /// `rows × positions` cells.
    pub position_cells: Vec<SetCell>,
    /// Counts over both sides' slots.
    pub counts: Vec<(SetCell, usize)>,
    pub mean_agreement: f64,
    pub rows_differing: usize,
    /// The smallest selected weight of the test side (MoE routing only).
    pub boundary_score: Option<f64>,
    /// The session's triage of this capture (test backend against the first backend).
    /// The session's triages of the test backend's capture: against the recorded reference
    /// (the golden) and against the first backend.
    pub triages: Vec<NamedTriage>,
}

impl TopkModel {
    /// Build the model of index capture `target` (and, for `moe_indices`, its weights).
    pub fn build(
        target: &CaptureResult,
        sides: Sides,
        weights: Option<Sides>,
        test_backend: usize,
    ) -> TopkModel {
        let (reference, test) = (&sides.reference, &sides.test);
        let is_mask = target.kind == CaptureKind::Mask;
        let (rows, width) = rows_of(test);
        let mut per_row = Vec::with_capacity(rows);
        for row in 0..rows {
            let rref = int_row(reference, row, width);
            let rtest: Vec<i64> = int_row(test, row, width)
                .into_iter()
                .map(|v| v.unwrap_or(-1))
                .collect();
            let a = if is_mask {
                classify_mask_row(&rref, &rtest)
            } else {
                let tie = |ri: i64, ti: i64| -> bool {
                    let Some(w) = &weights else {
                        return false;
                    };
                    let wr = rref
                        .iter()
                        .position(|&x| x == Some(ri))
                        .and_then(|j| w.reference.get(row * width + j));
                    let wt = rtest
                        .iter()
                        .position(|&x| x == ti)
                        .and_then(|j| w.test.get(row * width + j));
                    matches!((wr, wt), (Some(a), Some(b)) if (a - b).abs() <= F32_TOL)
                };
                classify_row(&rref, &rtest, &tie)
            };
            per_row.push(a);
        }
        let triages = named_triages(target, test_backend);
        // Tie flips as the session scored them, against the side the view compares with.
        if let Some(t) = triages
            .iter()
            .find(|t| t.reference == sides.ref_name && t.triage.scores_known)
        {
            mark_tie_flips(&mut per_row, reference, test, width, &t.triage);
        }
        let max_index = (0..reference.len().max(test.len()))
            .flat_map(|i| [reference.get(i), test.get(i)])
            .flatten()
            .filter(|v| v.is_finite())
            .fold(-1.0f64, f64::max);
        let wanted = if is_mask {
            width
        } else {
            (max_index + 1.0).clamp(0.0, usize::MAX as f64 / 2.0) as usize
        };
        let cap = MAX_POSITION_CELLS / rows.max(1);
        let positions = wanted.min(cap).max(1);
        let mut position_cells = vec![SetCell::Absent; rows * positions];
        for (row, a) in per_row.iter().enumerate() {
            let cells = &mut position_cells[row * positions..(row + 1) * positions];
            if is_mask {
                for (p, c) in a.ref_cells.iter().enumerate().take(positions) {
                    cells[p] = *c;
                }
                continue;
            }
            let mut mark = |idx: Option<f64>, c: SetCell| {
                if let Some(i) = idx.filter(|v| *v >= 0.0) {
                    let i = i as usize;
                    if i < positions && c.priority() > cells[i].priority() {
                        cells[i] = c;
                    }
                }
            };
            for j in 0..width {
                mark(reference.get(row * width + j), a.ref_cells[j]);
                mark(test.get(row * width + j), a.test_cells[j]);
            }
        }
        let mut all: Vec<SetCell> = Vec::new();
        for a in &per_row {
            all.extend(a.ref_cells.iter().copied());
            if !is_mask {
                all.extend(a.test_cells.iter().copied());
            }
        }
        let counts = SetCell::ALL
            .iter()
            .map(|&k| (k, all.iter().filter(|&&c| c == k).count()))
            .collect();
        let mean_agreement = per_row.iter().map(|a| a.agreement).sum::<f64>() / rows.max(1) as f64;
        let rows_differing = per_row.iter().filter(|a| a.agreement < 1.0).count();
        let boundary_score = weights.as_ref().map(|w| {
            (0..rows)
                .filter_map(|row| {
                    (0..width)
                        .filter_map(|j| w.test.get(row * width + j))
                        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
                })
                .fold(f64::INFINITY, f64::min)
        });
        TopkModel {
            target: target.label(),
            truncated: positions < wanted,
            sides,
            rows,
            width,
            is_mask,
            per_row,
            positions,
            position_cells,
            counts,
            mean_agreement,
            rows_differing,
            boundary_score,
            triages,
        }
    }
    /// The position cell `(row, p)`.
    pub fn position(&self, row: usize, p: usize) -> SetCell {
        self.position_cells
            .get(row * self.positions + p)
            .copied()
            .unwrap_or(SetCell::Absent)
    }
}

/// One of the session's triages of a capture, with who was compared.
#[derive(Debug, Clone)]
pub struct NamedTriage {
    pub test: String,
    pub reference: String,
    pub triage: CaptureTriage,
}

/// The session's triages of test backend `test_backend`'s index capture (clamped): against
/// the recorded reference (`golden`) and against the first backend.
pub fn named_triages(r: &CaptureResult, test_backend: usize) -> Vec<NamedTriage> {
    let n = r.per_backend.len();
    if n == 0 {
        return Vec::new();
    }
    let b = &r.per_backend[test_backend.min(n - 1)];
    let mut out: Vec<NamedTriage> = b
        .triage
        .iter()
        .map(|t| NamedTriage {
            test: b.backend.clone(),
            reference: "golden".into(),
            triage: t.clone(),
        })
        .collect();
    out.extend(
        r.triages()
            .filter(|(x, _)| x.test == b.backend)
            .map(|(x, t)| NamedTriage {
                test: x.test.clone(),
                reference: x.reference.clone(),
                triage: t.clone(),
            }),
    );
    out
}

/// Rows the session's triage calls tie flips, where this view sees exactly the swapped indices,
/// have their reference-only and test-only cells marked as tie flips (the reference backend's
/// scores decided it; the view itself only knows scores for MoE routing).
pub fn mark_tie_flips(
    per_row: &mut [RowAgreement],
    reference: &Tensor,
    test: &Tensor,
    width: usize,
    t: &CaptureTriage,
) {
    use crate::session::triage::TopkClass;
    for d in t
        .triage
        .details
        .iter()
        .filter(|d| d.class == TopkClass::TieFlip)
    {
        let Some(a) = per_row.get_mut(d.row) else {
            continue;
        };
        let side = |tensor: &Tensor, cells: &[SetCell], kind: SetCell| -> Vec<i64> {
            let mut v: Vec<i64> = (0..width)
                .filter(|&j| cells.get(j) == Some(&kind))
                .filter_map(|j| tensor.get(d.row * width + j).map(|x| x as i64))
                .collect();
            v.sort_unstable();
            v
        };
        let (mut ro, mut to) = (d.reference_only.clone(), d.test_only.clone());
        ro.sort_unstable();
        to.sort_unstable();
        if side(reference, &a.ref_cells, SetCell::RefOnly) == ro
            && side(test, &a.test_cells, SetCell::TestOnly) == to
        {
            for c in a.ref_cells.iter_mut().chain(a.test_cells.iter_mut()) {
                if matches!(c, SetCell::RefOnly | SetCell::TestOnly) {
                    *c = SetCell::TieFlip;
                }
            }
        }
    }
}

/// The query × position raster.
pub struct PositionSource<'a> {
    pub model: &'a TopkModel,
    pub palette: &'a Palette,
}

impl CellSource for PositionSource<'_> {
    fn rows(&self) -> usize {
        self.model.rows
    }
    fn cols(&self) -> usize {
        self.model.positions
    }
    fn block_color(&self, rows: Range<usize>, cols: Range<usize>) -> Color32 {
        strongest(
            rows,
            cols,
            SetCell::Absent,
            |r, c| self.model.position(r, c),
            SetCell::priority,
        )
        .color(self.palette)
    }
}

/// The query × slot grid of one side, with the picked index on each slot.
pub struct SlotSource<'a> {
    pub model: &'a TopkModel,
    pub reference: bool,
    pub palette: &'a Palette,
}

impl CellSource for SlotSource<'_> {
    fn rows(&self) -> usize {
        self.model.rows
    }
    fn cols(&self) -> usize {
        self.model.width
    }
    fn block_color(&self, rows: Range<usize>, cols: Range<usize>) -> Color32 {
        let at = |r: usize, c: usize| {
            let a = &self.model.per_row[r];
            let cells = if self.reference {
                &a.ref_cells
            } else {
                &a.test_cells
            };
            cells.get(c).copied().unwrap_or(SetCell::Absent)
        };
        strongest(rows, cols, SetCell::Absent, at, SetCell::priority).color(self.palette)
    }
    fn cell_text(&self, r: usize, c: usize) -> Option<String> {
        let t = if self.reference {
            &self.model.sides.reference
        } else {
            &self.model.sides.test
        };
        t.get(r * self.model.width + c)
            .map(|v| format!("{}", v as i64))
    }
}

/// The per-row agreement strip.
pub struct AgreementSource<'a> {
    pub model: &'a TopkModel,
    pub palette: &'a Palette,
}

impl CellSource for AgreementSource<'_> {
    fn rows(&self) -> usize {
        self.model.rows
    }
    fn cols(&self) -> usize {
        1
    }
    fn block_color(&self, rows: Range<usize>, _cols: Range<usize>) -> Color32 {
        // The worst row of a block stays visible.
        let worst = rows
            .map(|r| self.model.per_row[r].agreement)
            .fold(1.0f64, f64::min);
        if worst >= 1.0 {
            self.palette.set_both
        } else {
            theme::diverging(1.0 - worst)
        }
    }
    fn cell_text(&self, r: usize, _c: usize) -> Option<String> {
        Some(format!("{:.2}", self.model.per_row[r].agreement))
    }
}

/// The top-k view's cache.
#[derive(Default)]
pub struct TopkCache {
    key: Option<u64>,
    pub model: Option<TopkModel>,
    pub zoom: ZoomState,
    pub strip_zoom: ZoomState,
    pub textures: [RasterTexture; 3],
}

/// The raster's label (and accessibility label).
pub const POSITIONS_PANEL: &str = "Top-k positions raster";
pub const AGREEMENT_PANEL: &str = "Row agreement strip";
pub const REF_SLOTS_PANEL: &str = "Reference slots";
pub const TEST_SLOTS_PANEL: &str = "Test slots";

/// Width of the agreement strip.
const STRIP_WIDTH_PT: f32 = 56.0;
/// Height kept under the raster for the readout and the triage header.
const BELOW_RASTER_PT: f32 = 64.0;
/// Least height of the raster.
const MIN_RASTER_HEIGHT_PT: f32 = 160.0;

/// Legend chips with the count of each cell kind (also the accessible text the tests read).
pub fn legend_ui(ui: &mut egui::Ui, counts: &[(SetCell, usize)]) {
    let palette = theme::palette(ui.ctx());
    ui.horizontal_wrapped(|ui| {
        for &(kind, n) in counts {
            let (rect, _) = ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
            ui.painter().rect_filled(rect, 2.0, kind.color(palette));
            ui.label(format!("{}: {n}", kind.label()));
        }
    });
}

/// The index capture the view shows for `r`: `r` itself, or its layer's `sa_topk_idxs`.
pub fn target_of<'a>(ctx: &ViewCtx<'a>) -> Option<&'a CaptureResult> {
    let r = ctx.r;
    if matches!(r.kind, CaptureKind::Index | CaptureKind::Mask) {
        return Some(r);
    }
    let layer = parse_capture_name(&r.name).layer?;
    find(
        ctx.results,
        r.regime_index,
        &format!("L{layer}.sa_topk_idxs"),
    )
}

/// Draw the view for `ctx.r` (or for its layer's `sa_topk_idxs` when `r` is not an index
/// capture).
pub fn topk_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, caches: &mut ViewCaches) {
    let Some(target) = target_of(ctx) else {
        ui.label("Top-k agreement: no index capture for this selection");
        return;
    };
    let key = super::capture_key(target, ctx.settings);
    let cache = &mut caches.topk;
    if cache.key != Some(key) {
        let Some(sides) = super::sides(ctx.golden, target, ctx.settings) else {
            ui.label("Top-k agreement: no data");
            return;
        };
        let weights = (parse_capture_name(&target.name).base == "moe_indices")
            .then(|| target.name.replace("moe_indices", "moe_weights"))
            .and_then(|w| find(ctx.results, target.regime_index, &w))
            .and_then(|w| super::sides(ctx.golden, w, ctx.settings));
        cache.model = Some(TopkModel::build(
            target,
            sides,
            weights,
            ctx.settings.test_backend,
        ));
        cache.key = Some(key);
        cache.zoom = ZoomState::default();
        cache.strip_zoom = ZoomState::default();
    }
    let Some(m) = cache.model.as_ref() else {
        return;
    };
    let palette = theme::palette(ui.ctx());
    ui.horizontal_wrapped(|ui| {
        ui.label(format!(
            "Top-k agreement of {}: reference = {}, test = {}; {} rows × {} slots over {} positions{}",
            m.target,
            m.sides.ref_name,
            m.sides.test_name,
            m.rows,
            m.width,
            m.positions,
            if m.truncated { " (first positions only)" } else { "" }
        ));
        ui.separator();
        let text = ui.label("Layout:");
        for (layout, name) in [
            (TopkLayout::Positions, "positions"),
            (TopkLayout::Slots, "slots"),
        ] {
            if ui
                .selectable_label(ctx.settings.topk_layout == layout, name)
                .labelled_by(text.id)
                .clicked()
            {
                ctx.tx.send_ui(UiCommand::SetTopkLayout(layout));
            }
        }
        if ui.button("Fit").clicked() {
            cache.zoom.fit();
        }
    });
    legend_ui(ui, &m.counts);
    ui.horizontal_wrapped(|ui| {
        ui.colored_label(
            palette.verdict(m.rows_differing == 0),
            format!(
                "Mean row agreement: {:.3}; rows differing: {} of {}",
                m.mean_agreement, m.rows_differing, m.rows
            ),
        );
        match m.boundary_score {
            Some(s) => {
                ui.label(format!(
                    "Score at the k boundary (smallest selected weight, test): {s:.6}"
                ));
            }
            None => {
                ui.weak("Scores at the k boundary are not captured for this index set; the triage below uses the reference backend's own scores where it emits them.");
            }
        }
    });
    let triage_rows: usize = m
        .triages
        .iter()
        .map(|t| t.triage.triage.details.len().min(TRIAGE_ROWS_SHOWN))
        .sum();
    let triage_h = if triage_rows > 0 {
        (triage_rows as f32 * 20.0 + 76.0).min(200.0)
    } else {
        24.0
    };
    let avail = ui.available_size();
    let h = (avail.y - BELOW_RASTER_PT - triage_h).max(MIN_RASTER_HEIGHT_PT);
    let mut hover = None;
    let layout = &mut caches.layout;
    let [t0, t1, t2] = &mut cache.textures;
    match ctx.settings.topk_layout {
        TopkLayout::Positions => {
            ui.horizontal(|ui| {
                let w =
                    (avail.x - STRIP_WIDTH_PT - theme::PANEL_GAP_PT).max(theme::MIN_PANEL_WIDTH_PT);
                let resp = raster_ui(
                    ui,
                    egui::vec2(w, h),
                    &RasterArgs {
                        label: POSITIONS_PANEL,
                        source_key: key,
                        ticks: true,
                    },
                    &PositionSource { model: m, palette },
                    &mut cache.zoom,
                    t0,
                );
                super::probe_panel(layout, POSITIONS_PANEL, resp.response.rect);
                if let Some((row, p)) = resp.hovered {
                    hover = Some(position_readout(m, row, p));
                }
                link_rows(&cache.zoom, &mut cache.strip_zoom, m.rows, m.positions);
                let sresp = raster_ui(
                    ui,
                    egui::vec2(STRIP_WIDTH_PT, h),
                    &RasterArgs {
                        label: AGREEMENT_PANEL,
                        source_key: key,
                        ticks: true,
                    },
                    &AgreementSource { model: m, palette },
                    &mut cache.strip_zoom,
                    t1,
                );
                if let Some((row, _)) = sresp.hovered {
                    hover = Some(format!(
                        "{} row {row}: agreement {:.3}",
                        m.target, m.per_row[row].agreement
                    ));
                }
            });
        }
        TopkLayout::Slots => {
            let (cols, w) = super::panel_columns(2, avail.x);
            let rows_of_panels = 2usize.div_ceil(cols);
            let ph = (h / rows_of_panels as f32).max(MIN_RASTER_HEIGHT_PT);
            let mut texes = [t0, t2].into_iter();
            let panels = [(REF_SLOTS_PANEL, true), (TEST_SLOTS_PANEL, false)];
            for chunk in panels.chunks(cols) {
                ui.horizontal(|ui| {
                    for &(label, reference) in chunk {
                        let Some(tex) = texes.next() else { continue };
                        ui.vertical(|ui| {
                            ui.label(if reference {
                                format!("Reference ({})", m.sides.ref_name)
                            } else {
                                format!("Test ({})", m.sides.test_name)
                            });
                            let resp = raster_ui(
                                ui,
                                egui::vec2(w, ph),
                                &RasterArgs {
                                    label,
                                    source_key: content_key(&(key, label)),
                                    ticks: true,
                                },
                                &SlotSource {
                                    model: m,
                                    reference,
                                    palette,
                                },
                                &mut cache.zoom,
                                tex,
                            );
                            super::probe_panel(layout, label, resp.response.rect);
                            if let Some((row, slot)) = resp.hovered {
                                hover = Some(slot_readout(m, row, slot, reference));
                            }
                        });
                    }
                });
            }
        }
    }
    caches.hover = hover.map(|text| super::HoverReadout::text(m.target.clone(), text));
    super::readout_ui(
        ui,
        caches.hover.as_ref(),
        "Hover a cell: query, position and who picked it; wheel zooms, drag pans, double-click fits.",
    );
    for t in &m.triages {
        triage_ui(ui, palette, t);
    }
}

/// Keep the strip's rows in step with the raster's.
fn link_rows(main: &ZoomState, strip: &mut ZoomState, rows: usize, cols: usize) {
    let w = main.window(rows, cols);
    strip.window = main.window.map(|_| Window {
        x0: 0.0,
        x1: 1.0,
        y0: w.y0,
        y1: w.y1,
    });
}

fn position_readout(m: &TopkModel, row: usize, p: usize) -> String {
    let kind = m.position(row, p);
    let slot = |t: &Tensor| {
        (0..m.width).find(|&j| {
            t.get(row * m.width + j)
                .is_some_and(|v| v as i64 == p as i64)
        })
    };
    let side = |name: &str, s: Option<usize>| match s {
        Some(j) => format!("{name} slot {j}"),
        None => format!("not picked by {name}"),
    };
    if m.is_mask {
        return format!("{} query {row}, block {p}: {}", m.target, kind.label());
    }
    format!(
        "{} query {row}, position {p}: {} ({}, {}); row agreement {:.3}",
        m.target,
        kind.label(),
        side(&m.sides.ref_name, slot(&m.sides.reference)),
        side(&m.sides.test_name, slot(&m.sides.test)),
        m.per_row.get(row).map_or(1.0, |a| a.agreement)
    )
}

fn slot_readout(m: &TopkModel, row: usize, slot: usize, reference: bool) -> String {
    let (t, name) = if reference {
        (&m.sides.reference, &m.sides.ref_name)
    } else {
        (&m.sides.test, &m.sides.test_name)
    };
    let a = &m.per_row[row];
    let kind = if reference {
        a.ref_cells.get(slot)
    } else {
        a.test_cells.get(slot)
    }
    .copied()
    .unwrap_or(SetCell::Absent);
    format!(
        "{} query {row}, slot {slot} ({name}): index {}, {}",
        m.target,
        t.get(row * m.width + slot)
            .map_or("no sample".into(), |v| format!("{}", v as i64)),
        kind.label()
    )
}

/// Rows of the per-row disagreement table drawn at most (a real-size capture may differ in
/// thousands of rows; the counts above cover all of them).
pub const TRIAGE_ROWS_SHOWN: usize = 200;

/// The summary line of one capture's triage (also the label tests read).
pub fn triage_line(t: &NamedTriage) -> String {
    let tt = &t.triage.triage;
    format!(
        "Top-k triage, {} vs {}: rows differing {} of {}; tie flip {}, near tie {}, real {}",
        t.test, t.reference, tt.rows_differing, tt.rows, tt.tie_flips, tt.near_ties, tt.real
    )
}

/// A score gap as the triage table shows it (infinite: a score was unknown).
fn fmt_gap(v: f32) -> String {
    if v.is_finite() {
        format!("{v:.4e}")
    } else {
        "unknown".into()
    }
}

/// The reference's margin at the k boundary: NaN is the difference of two -inf scores (masked
/// positions tie at the boundary), +inf a finite k-th score over a masked (k+1)-th.
fn fmt_margin(v: f32) -> String {
    if v.is_nan() {
        "0 (-inf tie)".into()
    } else if v.is_infinite() {
        "inf".into()
    } else {
        format!("{v:.4e}")
    }
}

fn fmt_indices(v: &[i64]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
    }
}

/// The triage of the capture: counts, then one row per disagreement with the indices only one
/// side picked, its class, score gap and the reference's boundary margin.
pub fn triage_ui(ui: &mut egui::Ui, palette: &Palette, named: &NamedTriage) {
    let t = &named.triage;
    let tt = &t.triage;
    ui.colored_label(
        palette.triage(tt.real, tt.rows_differing),
        triage_line(named),
    );
    if let Some(d) = &tt.downstream_of {
        ui.weak(format!(
            "An earlier selection disagreed first ({d}): this disagreement may follow from it."
        ));
    }
    if !t.scores_known && tt.rows_differing > 0 {
        ui.colored_label(
            palette.warn_text,
            "The reference backend emitted no scores for this capture (its diagnostic captures \
             are off): differing rows count as real and their gaps are unknown.",
        );
    }
    if tt.details.is_empty() {
        return;
    }
    egui::ScrollArea::both()
        .id_salt(("triage_scroll", &tt.capture, &named.reference))
        .max_height(160.0)
        .show(ui, |ui| {
            egui::Grid::new(("triage_grid", &tt.capture, &named.reference))
                .striped(true)
                .show(ui, |ui| {
                    for h in [
                        "row",
                        "reference only",
                        "test only",
                        "class",
                        "score gap",
                        "boundary margin",
                    ] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for d in tt.details.iter().take(TRIAGE_ROWS_SHOWN) {
                        ui.label(format!("row {}", d.row));
                        ui.label(fmt_indices(&d.reference_only));
                        ui.label(fmt_indices(&d.test_only));
                        let (class, color) = if !t.scores_known {
                            ("unscored".to_string(), palette.warn_text)
                        } else {
                            let c = match d.class {
                                crate::session::triage::TopkClass::Real => palette.fail_text,
                                _ => palette.warn_text,
                            };
                            (d.class.to_string(), c)
                        };
                        ui.colored_label(color, class);
                        ui.label(fmt_gap(d.score_gap));
                        ui.label(d.boundary_margin.map_or("-".into(), fmt_margin));
                        ui.end_row();
                    }
                });
            if tt.details.len() > TRIAGE_ROWS_SHOWN {
                ui.weak(format!(
                    "… {} more differing rows",
                    tt.details.len() - TRIAGE_ROWS_SHOWN
                ));
            }
        });
}
