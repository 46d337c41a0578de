//! A whole run collected from the stepper's outcomes: every capture result, and per backend what
//! was missing, what could not be isolated and which invariants broke. The CLI's reports
//! ([`Report`] per backend against the reference, [`MultiReport`] with every later backend
//! against the first) are views of it, so `check` and the app judge a run from the same results.

use super::invariants::Violation;
use super::lockstep::{NearTiesResolved, StepOutcome, Stepper};
use super::multi::{CrossRow, MultiReport};
use super::reference::ReferenceKind;
use super::results::CaptureResult;
use super::triage::TopkTriage;
use super::{Mode, Report, SessionError, StepIsolation};
use crate::model::{CaptureValues, Step};
use std::sync::Arc;

/// Which backend tensors a collected run keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepValues {
    /// Every tensor (the app; small runs).
    All,
    /// Only the tensors of failing captures (what an export of failing captures needs): a
    /// real-dims run stays within memory.
    Failing,
}

/// Wall time of one step on every backend.
#[derive(Debug, Clone)]
pub struct StepTiming {
    pub regime: String,
    pub step: Step,
    /// Seconds per backend, in backend order.
    pub seconds: Vec<f64>,
}

/// Everything a run found, in execution order.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// The reference source's label (a golden's path, `cpu oracle (live)`).
    pub reference: String,
    pub reference_kind: ReferenceKind,
    /// Backend names, in order (the first is the cross-comparison reference).
    pub backends: Vec<String>,
    pub mode: Mode,
    pub results: Vec<CaptureResult>,
    /// Per backend: `(regime, capture)` the recorded reference holds that it did not produce.
    pub missing: Vec<Vec<(String, String)>>,
    /// Per backend: steps it could not be fully reseeded for.
    pub not_isolated: Vec<Vec<StepIsolation>>,
    /// Per backend: invariant violations of captures no result holds.
    pub other_violations: Vec<Vec<(String, Violation)>>,
    /// Per backend (index 0 always empty): captures the first backend produced that it did not.
    pub cross_missing: Vec<Vec<(String, String)>>,
    /// Per backend: `(regime, selection rows)` it resolved the reference's way (near ties).
    pub near_ties: Vec<Vec<(String, NearTiesResolved)>>,
    pub timings: Vec<StepTiming>,
    keep: KeepValues,
}

impl RunRecord {
    /// An empty record of a run by `stepper`.
    pub fn for_stepper(stepper: &Stepper<'_>, keep: KeepValues) -> RunRecord {
        let n = stepper.backend_names().len();
        RunRecord {
            reference: stepper.reference().label(),
            reference_kind: stepper.reference().kind(),
            backends: stepper.backend_names().to_vec(),
            mode: stepper.options().mode,
            results: Vec::new(),
            missing: vec![Vec::new(); n],
            not_isolated: vec![Vec::new(); n],
            other_violations: vec![Vec::new(); n],
            cross_missing: vec![Vec::new(); n],
            near_ties: vec![Vec::new(); n],
            timings: Vec::new(),
            keep,
        }
    }

    /// Add one step's outcome.
    pub fn push(&mut self, o: StepOutcome) {
        for ni in o.not_isolated {
            if let Some(list) = self.not_isolated.get_mut(ni.backend) {
                list.push(StepIsolation {
                    regime: o.regime.clone(),
                    step: o.step,
                    missing: ni.missing,
                });
            }
        }
        for nt in o.near_ties {
            if let Some(list) = self.near_ties.get_mut(nt.backend) {
                list.push((o.regime.clone(), nt));
            }
        }
        for (bi, names) in o.cross_missing {
            if let Some(list) = self.cross_missing.get_mut(bi) {
                list.extend(names.into_iter().map(|n| (o.regime.clone(), n)));
            }
        }
        for (backend, v) in o.other_violations {
            if let Some(bi) = self.backends.iter().position(|b| *b == backend) {
                self.other_violations[bi].push((o.regime.clone(), v));
            }
        }
        if let Some(end) = o.regime_end {
            for (bi, names) in end.missing.into_iter().enumerate() {
                if let Some(list) = self.missing.get_mut(bi) {
                    list.extend(names.into_iter().map(|n| (o.regime.clone(), n)));
                }
            }
        }
        self.timings.push(StepTiming {
            regime: o.regime.clone(),
            step: o.step,
            seconds: o.seconds,
        });
        for mut r in o.results {
            if self.keep == KeepValues::Failing && r.pass() {
                let empty = |v: &CaptureValues| match v {
                    CaptureValues::F32(_) => CaptureValues::F32(Vec::new()),
                    CaptureValues::I64(_) => CaptureValues::I64(Vec::new()),
                };
                for side in &mut r.per_backend {
                    side.values = Arc::new(empty(&side.values));
                }
            }
            self.results.push(r);
        }
    }

    /// Run `stepper` to the end and collect everything.
    pub fn collect(stepper: &mut Stepper<'_>, keep: KeepValues) -> Result<RunRecord, SessionError> {
        let mut rec = RunRecord::for_stepper(stepper, keep);
        while let Some(o) = stepper.next_step()? {
            rec.push(o);
        }
        Ok(rec)
    }

    /// Backend `bi`'s report against the reference source (every capture the reference holds,
    /// what it lacked, what it did not produce, its invariant violations).
    pub fn report(&self, bi: usize) -> Report {
        let name = self.backends.get(bi).cloned().unwrap_or_default();
        let mut report = Report::new(&self.reference, &name, self.mode);
        for r in &self.results {
            let Some(side) = r.per_backend.iter().find(|s| s.backend == name) else {
                continue;
            };
            for v in &side.violations {
                report.violations.push((r.regime.clone(), v.clone()));
            }
            match r.row_of(
                r.per_backend
                    .iter()
                    .position(|s| s.backend == name)
                    .unwrap_or(0),
            ) {
                Some(row) => report.rows.push(row),
                None if self.reference_kind == ReferenceKind::Recorded => {
                    report.extra.push((r.regime.clone(), r.name.clone()))
                }
                None => {}
            }
        }
        if let Some(v) = self.other_violations.get(bi) {
            report.violations.extend(v.iter().cloned());
        }
        report.missing = self.missing.get(bi).cloned().unwrap_or_default();
        report.not_isolated = self.not_isolated.get(bi).cloned().unwrap_or_default();
        report
    }

    /// Backend `bi`'s top-k triage against the recorded reference, `(regime, triage)` per index
    /// capture the reference holds whole.
    pub fn triage_vs_reference(&self, bi: usize) -> Vec<(String, TopkTriage)> {
        let name = self.backends.get(bi).cloned().unwrap_or_default();
        self.results
            .iter()
            .filter_map(|r| {
                let side = r.side(&name)?;
                side.triage
                    .as_ref()
                    .map(|t| (r.regime.clone(), t.triage.clone()))
            })
            .collect()
    }

    /// Backend `bi`'s (bi >= 1) top-k triage against the first backend.
    pub fn triage_vs_first(&self, bi: usize) -> Vec<(String, TopkTriage)> {
        let name = self.backends.get(bi).cloned().unwrap_or_default();
        self.results
            .iter()
            .filter_map(|r| {
                let x = r.cross.iter().find(|x| x.test == name)?;
                x.triage
                    .as_ref()
                    .map(|t| (r.regime.clone(), t.triage.clone()))
            })
            .collect()
    }

    /// Every later backend's comparisons with the first, in execution order.
    pub fn cross_rows(&self, bi: usize) -> Vec<CrossRow> {
        let name = self.backends.get(bi).cloned().unwrap_or_default();
        self.results
            .iter()
            .filter_map(|r| {
                let x = r.cross.iter().find(|x| x.test == name)?;
                Some(CrossRow {
                    regime: r.regime.clone(),
                    step: r.step,
                    name: r.name.clone(),
                    kind: r.kind,
                    cmp: x.cmp.clone(),
                    tie_flip: x.tie_flip,
                })
            })
            .collect()
    }

    /// The lockstep report: every backend against the reference, every later one against the
    /// first.
    pub fn multi(&self) -> MultiReport {
        let n = self.backends.len();
        MultiReport {
            golden: (0..n).map(|i| self.report(i)).collect(),
            reference: self.backends.first().cloned().unwrap_or_default(),
            cross: (1..n)
                .map(|i| (self.backends[i].clone(), self.cross_rows(i)))
                .collect(),
            cross_missing: (1..n)
                .map(|i| (self.backends[i].clone(), self.cross_missing[i].clone()))
                .collect(),
            triage_golden: (0..n)
                .map(|i| (self.backends[i].clone(), self.triage_vs_reference(i)))
                .collect(),
            triage_cross: (1..n)
                .map(|i| (self.backends[i].clone(), self.triage_vs_first(i)))
                .collect(),
        }
    }

    /// Seconds summed over the run per step kind and backend, in run order (`Block(3)` sums
    /// that block over every regime).
    pub fn seconds_per_kind(&self) -> Vec<(Step, Vec<f64>)> {
        let n = self.backends.len();
        let mut out: Vec<(Step, Vec<f64>)> = Vec::new();
        for t in &self.timings {
            let at = match out.iter().position(|(s, _)| *s == t.step) {
                Some(i) => i,
                None => {
                    out.push((t.step, vec![0.0; n]));
                    out.len() - 1
                }
            };
            for (acc, s) in out[at].1.iter_mut().zip(&t.seconds) {
                *acc += s;
            }
        }
        out
    }
}
