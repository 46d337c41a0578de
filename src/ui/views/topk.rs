//! The Top-k agreement view for index captures (`sa_topk_idxs`, `shared.*.topk_idxs`,
//! `shared.*.candidates`, `moe_indices`): one row per query position, each cell *both*,
//! *reference only*, *test only* or *tie flip* (where scores are known), per-row agreement, and
//! the score at the k boundary where the capture set carries scores (MoE weights).

use super::heatmap::Tensor;
use super::{find, rows_of, ViewState};
use crate::golden::names::{parse_capture_name, CaptureKind};
use crate::golden::policy::F32_TOL;
use crate::golden::Golden;
use crate::session::controller::CaptureResult;
use crate::ui::theme;
use eframe::egui;

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
    /// `-1`: an empty slot.
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
            SetCell::Absent => "-1 (absent)",
        }
    }
    /// Fill colour.
    pub fn color(self) -> egui::Color32 {
        match self {
            SetCell::Both => theme::SET_BOTH,
            SetCell::RefOnly => theme::SET_REF_ONLY,
            SetCell::TestOnly => theme::SET_TEST_ONLY,
            SetCell::TieFlip => theme::SET_TIE_FLIP,
            SetCell::Unknown => theme::SET_UNKNOWN,
            SetCell::Absent => theme::SET_EMPTY,
        }
    }
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

/// Draw a grid of coloured cells with optional text; returns the hovered cell.
pub fn cell_grid_ui(
    ui: &mut egui::Ui,
    rows: usize,
    cols: usize,
    cell_pt: f32,
    cell: &dyn Fn(usize, usize) -> (egui::Color32, Option<String>),
) -> Option<(usize, usize)> {
    let size = egui::vec2(cols as f32 * cell_pt, rows as f32 * cell_pt);
    let (rect, resp) = ui.allocate_exact_size(size, egui::Sense::hover());
    let painter = ui.painter_at(rect);
    for r in 0..rows {
        for c in 0..cols {
            let min = rect.min + egui::vec2(c as f32 * cell_pt, r as f32 * cell_pt);
            let cr = egui::Rect::from_min_size(min, egui::vec2(cell_pt - 1.0, cell_pt - 1.0));
            let (fill, text) = cell(r, c);
            painter.rect_filled(cr, 1.0, fill);
            if let Some(t) = text {
                let font = egui::FontId::monospace(
                    (cell_pt * 1.5 / t.chars().count().max(2) as f32)
                        .min(cell_pt * 0.6)
                        .max(6.0),
                );
                painter.text(
                    cr.center(),
                    egui::Align2::CENTER_CENTER,
                    t,
                    font,
                    egui::Color32::WHITE,
                );
            }
        }
    }
    let pos = resp.hover_pos()?;
    let rel = pos - rect.min;
    let (r, c) = ((rel.y / cell_pt) as usize, (rel.x / cell_pt) as usize);
    (r < rows && c < cols).then_some((r, c))
}

/// Legend chips with the count of each cell kind (also the accessible text the tests read).
pub fn legend_ui(ui: &mut egui::Ui, counts: &[(SetCell, usize)]) {
    ui.horizontal_wrapped(|ui| {
        for &(kind, n) in counts {
            let (rect, _) = ui.allocate_exact_size(egui::vec2(10.0, 10.0), egui::Sense::hover());
            ui.painter().rect_filled(rect, 2.0, kind.color());
            ui.label(format!("{}: {n}", kind.label()));
        }
    });
}

fn count(cells: &[SetCell], kinds: &[SetCell]) -> Vec<(SetCell, usize)> {
    kinds
        .iter()
        .map(|&k| (k, cells.iter().filter(|&&c| c == k).count()))
        .collect()
}

/// Draw the view for `r` (or for its layer's `sa_topk_idxs` when `r` is not an index capture).
pub fn topk_ui(
    ui: &mut egui::Ui,
    golden: &Golden,
    results: &[CaptureResult],
    r: &CaptureResult,
    state: &ViewState,
) {
    let parsed = parse_capture_name(&r.name);
    let target = if matches!(r.kind, CaptureKind::Index | CaptureKind::Mask) {
        r
    } else {
        match parsed
            .layer
            .and_then(|l| find(results, r.regime_index, &format!("L{l}.sa_topk_idxs")))
        {
            Some(t) => t,
            None => {
                ui.label("Top-k agreement: no index capture for this selection");
                return;
            }
        }
    };
    let Some((reference, test, ref_name, test_name)) = super::sides(golden, target, state) else {
        ui.label("Top-k agreement: no data");
        return;
    };
    let is_mask = target.kind == CaptureKind::Mask;
    // MoE routing carries scores: the weights of the selected experts on each side.
    let weights = if parse_capture_name(&target.name).base == "moe_indices" {
        let wname = target.name.replace("moe_indices", "moe_weights");
        find(results, target.regime_index, &wname).and_then(|w| super::sides(golden, w, state))
    } else {
        None
    };
    let (rows, width) = rows_of(&test);
    let mut all_ref = Vec::new();
    let mut all_test = Vec::new();
    let mut per_row = Vec::new();
    for row in 0..rows {
        let rref = int_row(&reference, row, width);
        let rtest: Vec<i64> = int_row(&test, row, width)
            .into_iter()
            .map(|v| v.unwrap_or(-1))
            .collect();
        let a = if is_mask {
            classify_mask_row(&rref, &rtest)
        } else {
            let tie = |ri: i64, ti: i64| -> bool {
                let Some((wr, wt, _, _)) = &weights else {
                    return false;
                };
                let wr_at = rref
                    .iter()
                    .position(|&x| x == Some(ri))
                    .and_then(|j| wr.get(row * width + j));
                let wt_at = rtest
                    .iter()
                    .position(|&x| x == ti)
                    .and_then(|j| wt.get(row * width + j));
                matches!((wr_at, wt_at), (Some(a), Some(b)) if (a - b).abs() <= F32_TOL)
            };
            classify_row(&rref, &rtest, &tie)
        };
        all_ref.extend(a.ref_cells.iter().copied());
        all_test.extend(a.test_cells.iter().copied());
        per_row.push(a);
    }
    let kinds = [
        SetCell::Both,
        SetCell::RefOnly,
        SetCell::TestOnly,
        SetCell::TieFlip,
        SetCell::Unknown,
        SetCell::Absent,
    ];
    let mut cells_all = all_ref.clone();
    cells_all.extend(all_test.iter().copied());
    ui.label(format!(
        "Top-k agreement of {}: reference = {ref_name}, test = {test_name}; {rows} rows × {width}",
        target.label()
    ));
    legend_ui(ui, &count(&cells_all, &kinds));
    let mean = per_row.iter().map(|a| a.agreement).sum::<f64>() / rows.max(1) as f64;
    let rows_differing = per_row.iter().filter(|a| a.agreement < 1.0).count();
    ui.label(format!(
        "Mean row agreement: {mean:.3}; rows differing: {rows_differing} of {rows}"
    ));
    match &weights {
        Some((_, wt, _, _)) => {
            let margin = (0..rows)
                .filter_map(|row| {
                    (0..width)
                        .filter_map(|j| wt.get(row * width + j))
                        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
                })
                .fold(f64::INFINITY, f64::min);
            ui.label(format!(
                "Score at the k boundary (smallest selected weight, test): {margin:.6}"
            ));
        }
        None => {
            ui.weak("Scores at the k boundary are not captured for this index set; tie flips cannot be told apart.");
        }
    }
    let cell_pt = theme::GRID_CELL_PT;
    egui::ScrollArea::both()
        .id_salt("topk_scroll")
        .max_height(320.0)
        .show(ui, |ui| {
            ui.horizontal(|ui| {
                for (title, side_ref) in [("Reference", true), ("Test", false)] {
                    ui.vertical(|ui| {
                        ui.label(title);
                        let hovered = cell_grid_ui(ui, rows, width, cell_pt, &|row, c| {
                            let a = &per_row[row];
                            let kind = if side_ref {
                                a.ref_cells[c]
                            } else {
                                a.test_cells[c]
                            };
                            let src = if side_ref { &reference } else { &test };
                            let text = src.get(row * width + c).map(|v| format!("{}", v as i64));
                            (kind.color(), if is_mask { None } else { text })
                        });
                        if let Some((row, c)) = hovered {
                            let a = &per_row[row];
                            let kind = if side_ref {
                                a.ref_cells[c]
                            } else {
                                a.test_cells[c]
                            };
                            ui.label(format!("row {row}, slot {c}: {}", kind.label()));
                        }
                    });
                }
                ui.vertical(|ui| {
                    ui.label("Agreement");
                    for (row, a) in per_row.iter().enumerate() {
                        ui.add_sized(
                            [60.0, cell_pt - 1.0],
                            egui::Label::new(
                                egui::RichText::new(format!("r{row} {:.2}", a.agreement))
                                    .size(cell_pt * 0.6)
                                    .color(theme::verdict_color(a.agreement >= 1.0)),
                            ),
                        );
                    }
                });
            });
        });
}
