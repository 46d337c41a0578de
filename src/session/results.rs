//! The typed result of one run, capture by capture: every backend's tensor, its comparison with
//! the reference source, its error budget and invariant violations, every later backend against
//! the first one, and the top-k triage of index captures. The stepper (`super::lockstep`) builds
//! it; the app shows it, the CLI prints and writes it, the export writes it: one data model, so
//! every face gives the same verdict.

use super::budget::{budget_for, observed_over_budget, within_budget, Budget};
use super::invariants::Violation;
use super::localize::is_input_capture;
use super::reference::Expected;
use super::triage::TopkTriage;
use crate::golden::compare::Comparison;
use crate::golden::names::CaptureKind;
use crate::model::{Capture, CaptureValues, ModelConfig, Step};
use std::sync::Arc;

/// One backend's side of a capture.
#[derive(Debug, Clone)]
pub struct BackendCapture {
    /// The backend's short name (`cpu`, `gpu`).
    pub backend: String,
    /// The whole tensor the backend produced.
    pub values: Arc<CaptureValues>,
    /// This backend against the recorded reference (the golden, a recorded run, an imported
    /// dump), when it holds the capture; None in a live run (there the first backend is the
    /// reference, see [`CaptureResult::cross`]).
    pub vs_golden: Option<Comparison>,
    /// Top-k triage of this backend's index capture against the recorded reference's, where the
    /// reference holds it whole (scored with the first backend's diagnostic scores).
    pub triage: Option<CaptureTriage>,
    /// The capture's error budget and this backend's observed error over it (as `check`
    /// prints them), when the golden holds the capture and the model config is known.
    pub budget: Option<BudgetCheck>,
    /// Invariants this backend's own capture violates (as `check` lists them), whatever the
    /// golden says; empty when none (or when the model config is unknown).
    pub violations: Vec<Violation>,
}

/// A backend's error against the golden, measured against the capture's error budget (see
/// [`super::budget`]).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetCheck {
    pub budget: Budget,
    /// `max_abs_err / budget` (0 when both are 0, infinite when only the budget is 0).
    pub ratio: f64,
}

impl BudgetCheck {
    /// The budget of capture `name` against its reference, and how much of it `cmp` used.
    pub fn new(
        cfg: &ModelConfig,
        name: &str,
        reference: &Expected<'_>,
        cmp: &Comparison,
    ) -> BudgetCheck {
        let budget = budget_for(cfg, name, reference.magnitude());
        let ratio = observed_over_budget(cmp.max_abs_err, budget.abs);
        BudgetCheck { budget, ratio }
    }
    /// At most the budget (a NaN error is not).
    pub fn within(&self) -> bool {
        within_budget(self.ratio)
    }
}

/// A comparison of one backend against another one (e.g. GPU vs oracle), over full tensors.
#[derive(Debug, Clone)]
pub struct CrossComparison {
    /// The backend under test.
    pub test: String,
    /// The backend taken as reference (the first backend, the CPU oracle).
    pub reference: String,
    pub cmp: Comparison,
    /// An integer disagreement that only the test backend's own top-k tie rule explains (its
    /// tie audit reported a deviation from the torch rule in this selection or an earlier one
    /// of the regime): reported, not failed.
    pub tie_flip: bool,
    /// The capture's error budget at the reference backend's magnitude, and the test backend's
    /// error over it (what a golden-less run measures budgets against).
    pub budget: Option<BudgetCheck>,
    /// Top-k triage of an index capture (`sa_topk_idxs`, `shared.L*.topk_idxs`, `moe_indices`)
    /// against the reference; None for every other capture.
    pub triage: Option<CaptureTriage>,
}

impl CrossComparison {
    /// Within the policy, or a disagreement the tie rule alone explains.
    pub fn ok(&self) -> bool {
        self.cmp.pass || self.tie_flip
    }
}

/// The top-k triage of one index capture, and whether the reference's scores were known.
#[derive(Debug, Clone, PartialEq)]
pub struct CaptureTriage {
    pub triage: TopkTriage,
    /// The reference backend emitted the scores this capture's top-k ran on (`diag.L*.index_score`
    /// or `diag.L*.gate_biased`); without them every differing row counts as real and its gap is
    /// unknown.
    pub scores_known: bool,
}

/// Tie flips, near ties and real disagreements summed over many index captures (the CLI's
/// summary lines and the app's run summary both count with it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TriageTotals {
    /// Index captures triaged.
    pub captures: usize,
    /// Rows compared and rows whose selected sets differ.
    pub rows: usize,
    pub rows_differing: usize,
    pub tie_flips: usize,
    pub near_ties: usize,
    pub real: usize,
    /// Differing rows triaged without reference scores (counted as real above).
    pub unscored_rows: usize,
}

impl TriageTotals {
    /// Add one capture's triage.
    pub fn add(&mut self, t: &CaptureTriage) {
        self.add_triage(&t.triage, t.scores_known);
    }
    /// Add one capture's triage, scored or not.
    pub fn add_triage(&mut self, t: &TopkTriage, scores_known: bool) {
        self.captures += 1;
        self.rows += t.rows;
        self.rows_differing += t.rows_differing;
        self.tie_flips += t.tie_flips;
        self.near_ties += t.near_ties;
        self.real += t.real;
        if !scores_known {
            self.unscored_rows += t.rows_differing;
        }
    }
}

/// Everything known about one capture after its step ran on every backend.
#[derive(Debug, Clone)]
pub struct CaptureResult {
    /// Position in execution order over the whole run (0-based).
    pub order: usize,
    /// Index of the regime in the run.
    pub regime_index: usize,
    pub regime: String,
    pub step: Step,
    pub name: String,
    pub kind: CaptureKind,
    pub shape: Vec<usize>,
    /// One entry per backend, in backend order.
    pub per_backend: Vec<BackendCapture>,
    /// Every backend after the first against the first.
    pub cross: Vec<CrossComparison>,
}

impl CaptureResult {
    /// `regime/name`, the label the UI shows and tests search for.
    pub fn label(&self) -> String {
        format!("{}/{}", self.regime, self.name)
    }
    /// Every comparison of this capture with a name: `cpu vs golden`, `gpu vs cpu`, ...
    pub fn comparisons(&self) -> Vec<(String, &Comparison)> {
        let mut out = Vec::new();
        for b in &self.per_backend {
            if let Some(c) = &b.vs_golden {
                out.push((format!("{} vs golden", b.backend), c));
            }
        }
        for x in &self.cross {
            out.push((format!("{} vs {}", x.test, x.reference), &x.cmp));
        }
        out
    }
    /// The top-k triage of this capture against the reference, per test backend.
    pub fn triages(&self) -> impl Iterator<Item = (&CrossComparison, &CaptureTriage)> {
        self.cross
            .iter()
            .filter_map(|x| x.triage.as_ref().map(|t| (x, t)))
    }
    /// Every backend's error budget check against the golden, with the backend's name.
    pub fn budgets(&self) -> impl Iterator<Item = (&str, &BudgetCheck)> {
        self.per_backend
            .iter()
            .filter_map(|b| b.budget.as_ref().map(|c| (b.backend.as_str(), c)))
    }
    /// Whether every backend stayed within the capture's error budget; None when no backend has
    /// a budget here (the golden lacks the capture, or the config is unknown).
    pub fn within_budget(&self) -> Option<bool> {
        let mut any = false;
        let mut all = true;
        for (_, b) in self.budgets() {
            any = true;
            all &= b.within();
        }
        any.then_some(all)
    }
    /// Every invariant violation of this capture, with the backend that produced it.
    pub fn violations(&self) -> impl Iterator<Item = (&str, &Violation)> {
        self.per_backend
            .iter()
            .flat_map(|b| b.violations.iter().map(move |v| (b.backend.as_str(), v)))
    }
    /// How many invariant violations the backends' captures of this name have.
    pub fn violation_count(&self) -> usize {
        self.per_backend.iter().map(|b| b.violations.len()).sum()
    }
    /// False when any comparison failed (a tie flip against the first backend is reported, not
    /// failed).
    pub fn pass(&self) -> bool {
        self.per_backend
            .iter()
            .all(|b| b.vs_golden.as_ref().is_none_or(|c| c.pass))
            && self.cross.iter().all(CrossComparison::ok)
    }
    /// The largest `max_abs_err / tol` over every comparison (0 when there is none).
    pub fn worst_ratio(&self) -> f64 {
        self.comparisons()
            .iter()
            .map(|(_, c)| c.worst_ratio)
            .fold(0.0, f64::max)
    }
    /// The first backend's comparison with the reference, as the CLI's report row.
    pub fn to_row(&self) -> Option<super::CaptureRow> {
        self.row_of(0)
    }
    /// Backend `i`'s comparison with the reference, as the CLI's report row.
    pub fn row_of(&self, i: usize) -> Option<super::CaptureRow> {
        let side = self.per_backend.get(i)?;
        Some(super::CaptureRow {
            regime: self.regime.clone(),
            step: self.step,
            name: self.name.clone(),
            kind: self.kind,
            shape: self.shape.clone(),
            cmp: side.vs_golden.clone()?,
            budget: side.budget.clone(),
        })
    }
    /// Backend `i`'s tensor as a capture (its dtype from the capture's kind).
    pub fn capture_of(&self, i: usize) -> Option<Capture> {
        let side = self.per_backend.get(i)?;
        let dtype = match (&*side.values, self.kind) {
            (CaptureValues::I64(_), _) => crate::model::CaptureDtype::Int,
            (CaptureValues::F32(_), CaptureKind::Bf16) => crate::model::CaptureDtype::Bf16,
            (CaptureValues::F32(_), _) => crate::model::CaptureDtype::F32,
        };
        Some(Capture {
            name: self.name.clone(),
            shape: self.shape.clone(),
            dtype,
            values: (*side.values).clone(),
        })
    }
    /// This capture's side of backend `name`, if it produced one.
    pub fn side(&self, name: &str) -> Option<&BackendCapture> {
        self.per_backend.iter().find(|b| b.backend == name)
    }
}

/// The step-local first divergence: the first capture (in execution order) whose comparison
/// fails. Meaningful as "where the error starts" in isolated mode; in chained mode it is the first
/// place accumulated error shows.
pub fn first_divergence(results: &[CaptureResult]) -> Option<&CaptureResult> {
    results.iter().find(|r| !r.pass())
}

/// The worst relative error of a step's float input captures (`h_in`, `pre_mix_in`, ...) of
/// `test` against `reference`: `max |t - r| / max |r|`, 0 when there are none. Top-k triage
/// widens its near-tie bound by it: error handed to a step can move its scores that far.
pub fn upstream_rel_err(reference: &[Capture], test: &[Capture]) -> f32 {
    let mut worst = 0f32;
    for t in test.iter().filter(|c| is_input_capture(&c.name)) {
        let Some(r) = reference.iter().find(|r| r.name == t.name) else {
            continue;
        };
        let (CaptureValues::F32(tv), CaptureValues::F32(rv)) = (&t.values, &r.values) else {
            continue;
        };
        if tv.len() != rv.len() {
            continue;
        }
        let scale = rv.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = tv
            .iter()
            .zip(rv)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        if scale > 0.0 && err.is_finite() {
            worst = worst.max(err / scale);
        }
    }
    worst
}

/// Where the run stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Progress {
    /// Steps run so far over all regimes.
    pub steps_done: usize,
    /// Steps in the whole run (every regime).
    pub steps_total: usize,
    /// The last step that ran, as `regime Step`.
    pub last_step: Option<String>,
    /// The worker is running a request now.
    pub busy: bool,
    /// Every regime has run.
    pub finished: bool,
}
