//! The top-k views' data model: each row's set agreement (both, reference only, test only, tie
//! flip, unknown), the position raster's cells, and the session's triage named per pair.

use super::heatmap::Tensor;
use super::{rows_of, Sides};
use crate::golden::names::CaptureKind;
use crate::golden::policy::F32_TOL;
use crate::session::controller::{CaptureResult, CaptureTriage};
use crate::ui::theme::Palette;
use eframe::egui::Color32;

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
