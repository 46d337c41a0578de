//! The lockstep report: each backend against the reference source and every later backend
//! against the first one (the CPU oracle), as the CLI prints and writes them. Built by
//! [`super::run::RunRecord::multi`] from the stepper's results (`super::lockstep`), whose module
//! doc says how tie flips are told apart; the policies are `golden::policy::policy_against`'s.

use super::results::TriageTotals;
use super::triage::TopkTriage;
use super::Report;
use crate::golden::compare::Comparison;
use crate::golden::names::CaptureKind;
use crate::model::Step;

/// One capture of a non-reference backend compared with the reference backend.
#[derive(Debug, Clone)]
pub struct CrossRow {
    pub regime: String,
    pub step: Step,
    pub name: String,
    pub kind: CaptureKind,
    pub cmp: Comparison,
    /// An integer disagreement explained by the tie rule alone.
    pub tie_flip: bool,
}

impl CrossRow {
    /// Within the GPU policy (a tie flip is reported, not failed).
    pub fn ok(&self) -> bool {
        self.cmp.pass || self.tie_flip
    }
}

/// Counts for one backend pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrossSummary {
    pub compared: usize,
    pub within_policy: usize,
    pub bit_exact: usize,
    pub tie_flips: usize,
    pub failed: usize,
    pub missing: usize,
}

/// What a lockstep run found.
#[derive(Debug, Clone)]
pub struct MultiReport {
    /// One golden report per backend, in the order given.
    pub golden: Vec<Report>,
    /// Name of the reference backend.
    pub reference: String,
    /// Per non-reference backend name: its captures against the reference.
    pub cross: Vec<(String, Vec<CrossRow>)>,
    /// Per non-reference backend: captures the reference produced that it did not.
    pub cross_missing: Vec<(String, Vec<(String, String)>)>,
    /// Per backend (in the order given): top-k triage of its index captures against the golden,
    /// `(regime, triage)` per index capture the golden holds in full.
    pub triage_golden: Vec<(String, Vec<(String, TopkTriage)>)>,
    /// Per non-reference backend: top-k triage against the reference backend.
    pub triage_cross: Vec<(String, Vec<(String, TopkTriage)>)>,
}

/// Sum a triage list.
pub fn triage_totals(list: &[(String, TopkTriage)]) -> TriageTotals {
    let mut t = TriageTotals::default();
    for (_, x) in list {
        t.add_triage(x, true);
    }
    t
}

impl MultiReport {
    /// Counts of backend `i` of `cross`.
    pub fn cross_summary(&self, i: usize) -> CrossSummary {
        let mut s = CrossSummary::default();
        if let Some((_, rows)) = self.cross.get(i) {
            for r in rows {
                s.compared += 1;
                s.bit_exact += r.cmp.bit_exact as usize;
                s.tie_flips += (r.tie_flip && !r.cmp.pass) as usize;
                if r.ok() {
                    s.within_policy += 1;
                } else {
                    s.failed += 1;
                }
            }
        }
        s.missing = self.cross_missing.get(i).map_or(0, |(_, m)| m.len());
        s
    }

    /// True when every backend passed the golden and every cross comparison is within policy.
    pub fn ok(&self) -> bool {
        self.golden.iter().all(|r| r.ok())
            && (0..self.cross.len()).all(|i| {
                let s = self.cross_summary(i);
                s.failed == 0 && s.missing == 0
            })
    }

    /// The first cross row outside the policy, in execution order.
    pub fn first_cross_failure(&self, i: usize) -> Option<&CrossRow> {
        self.cross.get(i)?.1.iter().find(|r| !r.ok())
    }
}

/// A triage list as JSON: totals, and every capture with a disagreement in detail.
pub fn triage_json(list: &[(String, TopkTriage)]) -> serde_json::Value {
    use super::report::finite_or_null;
    use serde_json::json;
    let t = triage_totals(list);
    json!({
        "index_captures": t.captures,
        "rows_differing": t.rows_differing,
        "tie_flips": t.tie_flips,
        "near_ties": t.near_ties,
        "real": t.real,
        "disagreements": list.iter().filter(|(_, x)| x.rows_differing > 0).map(|(regime, x)| json!({
            "regime": regime,
            "capture": x.capture,
            "rows": x.rows,
            "rows_differing": x.rows_differing,
            "tie_flips": x.tie_flips,
            "near_ties": x.near_ties,
            "real": x.real,
            "downstream_of": x.downstream_of,
            "details": x.details.iter().map(|d| json!({
                "row": d.row,
                "reference_only": d.reference_only,
                "test_only": d.test_only,
                "class": d.class.to_string(),
                "score_gap": finite_or_null(d.score_gap as f64),
                "boundary_margin": d.boundary_margin.map(|m| finite_or_null(m as f64)),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// Cross rows of one backend as JSON.
pub fn cross_json(m: &MultiReport, i: usize) -> serde_json::Value {
    use super::report::finite_or_null;
    use serde_json::json;
    let s = m.cross_summary(i);
    let Some((name, rows)) = m.cross.get(i) else {
        return serde_json::Value::Null;
    };
    json!({
        "backend": name,
        "reference": m.reference,
        "summary": {
            "compared": s.compared, "within_policy": s.within_policy, "bit_exact": s.bit_exact,
            "tie_flips": s.tie_flips, "failed": s.failed, "missing": s.missing,
        },
        "first_divergence": m.first_cross_failure(i).map(|r| json!({"regime": r.regime, "capture": r.name, "step": r.step.to_string()})),
        "captures": rows.iter().map(|r| json!({
            "regime": r.regime,
            "step": r.step.to_string(),
            "capture": r.name,
            "policy": r.cmp.policy_name,
            "within_policy": r.ok(),
            "bit_exact": r.cmp.bit_exact,
            "tie_flip": r.tie_flip,
            "max_abs_err": finite_or_null(r.cmp.max_abs_err),
            "max_abs_err_index": r.cmp.max_abs_err_multi_index,
            "tol": r.cmp.tol,
            "worst_ratio": finite_or_null(r.cmp.worst_ratio),
            "reason": r.cmp.reason,
        })).collect::<Vec<_>>(),
        "missing": m.cross_missing.get(i).map(|(_, v)| v.iter().map(|(r, n)| json!({"regime": r, "capture": n})).collect::<Vec<_>>()).unwrap_or_default(),
        "topk_triage": m.triage_cross.get(i).map(|(_, l)| triage_json(l)),
    })
}
