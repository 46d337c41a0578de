//! The check report: one row per compared capture, plus what was missing, extra or could not be
//! isolated, with summary counts and a JSON form.

use super::results::BudgetCheck;
use super::Mode;
use crate::golden::compare::Comparison;
use crate::golden::names::CaptureKind;
use crate::model::Step;
use serde_json::{json, Value};

/// One compared capture.
#[derive(Debug, Clone)]
pub struct CaptureRow {
    pub regime: String,
    pub step: Step,
    pub name: String,
    pub kind: CaptureKind,
    pub shape: Vec<usize>,
    pub cmp: Comparison,
    /// The capture's error budget and the observed error over it, when the config and the
    /// reference magnitude are known.
    pub budget: Option<BudgetCheck>,
}

/// A step whose inputs could not all be reseeded in isolated mode, and why.
#[derive(Debug, Clone)]
pub struct StepIsolation {
    pub regime: String,
    pub step: Step,
    /// The reference tensors that were needed in full but are only sampled (or absent).
    pub missing: Vec<String>,
}

/// Everything a check found.
#[derive(Debug, Clone)]
pub struct Report {
    pub golden_source: String,
    pub backend: String,
    pub mode: Mode,
    pub rows: Vec<CaptureRow>,
    /// Captures the golden has that the backend did not produce.
    pub missing: Vec<(String, String)>,
    /// Captures the backend produced that the golden lacks (e.g. v2 captures on a v1 golden).
    pub extra: Vec<(String, String)>,
    pub not_isolated: Vec<StepIsolation>,
    /// Invariant violations in the backend's own captures (regime, violation).
    pub violations: Vec<(String, super::invariants::Violation)>,
}

/// Summary counts of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub bf16_total: usize,
    pub bf16_bit_exact: usize,
    pub int_total: usize,
    pub int_exact: usize,
    pub f32_total: usize,
    pub f32_bit_exact: usize,
}

impl Report {
    /// An empty report of `backend` against the reference labelled `golden_source`.
    pub fn new(golden_source: &str, backend: &str, mode: Mode) -> Report {
        Report {
            golden_source: golden_source.to_string(),
            backend: backend.to_string(),
            mode,
            rows: Vec::new(),
            missing: Vec::new(),
            extra: Vec::new(),
            not_isolated: Vec::new(),
            violations: Vec::new(),
        }
    }

    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for r in &self.rows {
            if r.cmp.pass {
                s.passed += 1;
            } else {
                s.failed += 1;
            }
            match r.kind {
                CaptureKind::Bf16 => {
                    s.bf16_total += 1;
                    s.bf16_bit_exact += r.cmp.bit_exact as usize;
                }
                CaptureKind::F32 => {
                    s.f32_total += 1;
                    s.f32_bit_exact += r.cmp.bit_exact as usize;
                }
                k if k.is_int() => {
                    s.int_total += 1;
                    s.int_exact += r.cmp.bit_exact as usize;
                }
                _ => {}
            }
        }
        s.failed += self.missing.len();
        s
    }

    /// True when every capture passed and nothing the golden holds is missing.
    pub fn ok(&self) -> bool {
        let s = self.summary();
        s.failed == 0 && s.passed > 0 && self.violations.is_empty()
    }

    /// The first failing row in execution order.
    pub fn first_failure(&self) -> Option<&CaptureRow> {
        self.rows.iter().find(|r| !r.cmp.pass)
    }

    /// The error budget of a row, when the config and the reference magnitude are known.
    pub fn budget(&self, r: &CaptureRow) -> Option<super::budget::Budget> {
        r.budget.as_ref().map(|b| b.budget.clone())
    }

    /// The budget of a row and observed error / budget (0 when both are 0, infinite when only
    /// the budget is).
    pub fn budget_ratio(&self, r: &CaptureRow) -> Option<(super::budget::Budget, f64)> {
        r.budget.as_ref().map(|b| (b.budget.clone(), b.ratio))
    }

    pub fn to_json(&self) -> Value {
        let s = self.summary();
        json!({
            "golden": self.golden_source,
            "backend": self.backend,
            "mode": self.mode.label(),
            "summary": {
                "passed": s.passed, "failed": s.failed,
                "bf16_bit_exact": s.bf16_bit_exact, "bf16_total": s.bf16_total,
                "int_exact": s.int_exact, "int_total": s.int_total,
                "f32_bit_exact": s.f32_bit_exact, "f32_total": s.f32_total,
            },
            "first_failure": self.first_failure().map(|r| json!({"regime": r.regime, "capture": r.name, "step": r.step.to_string()})),
            "captures": self.rows.iter().map(|r| {
                let mut v = row_json(r);
                if let (Some((b, over)), Value::Object(m)) = (self.budget_ratio(r), &mut v) {
                    m.insert("budget".into(), finite_or_null(b.abs));
                    m.insert("observed_over_budget".into(), finite_or_null(over));
                    m.insert("budget_reason".into(), json!(b.reason));
                }
                v
            }).collect::<Vec<_>>(),
            "missing": self.missing.iter().map(|(r, n)| json!({"regime": r, "capture": n})).collect::<Vec<_>>(),
            "extra": self.extra.iter().map(|(r, n)| json!({"regime": r, "capture": n})).collect::<Vec<_>>(),
            "invariant_violations": self.violations.iter().map(|(r, v)| json!({"regime": r, "capture": v.capture, "index": v.index, "what": v.what})).collect::<Vec<_>>(),
            "not_isolated": self.not_isolated.iter().map(|i| json!({"regime": i.regime, "step": i.step.to_string(), "missing": i.missing})).collect::<Vec<_>>(),
        })
    }
}

pub(crate) fn finite_or_null(v: f64) -> Value {
    if v.is_finite() {
        json!(v)
    } else {
        Value::Null
    }
}

fn row_json(r: &CaptureRow) -> Value {
    let c = &r.cmp;
    json!({
        "regime": r.regime,
        "step": r.step.to_string(),
        "capture": r.name,
        "kind": r.kind.label(),
        "shape": r.shape,
        "policy": c.policy_name,
        "pass": c.pass,
        "bit_exact": c.bit_exact,
        "max_abs_err": finite_or_null(c.max_abs_err),
        "max_abs_err_index": c.max_abs_err_multi_index,
        "max_rel_err": finite_or_null(c.max_rel_err),
        "max_bf16_ulp": c.max_bf16_ulp,
        "nmse": finite_or_null(c.nmse),
        "tol": c.tol,
        "worst_ratio": finite_or_null(c.worst_ratio),
        "ck_got": finite_or_null(c.ck_got),
        "ck_expected": c.ck_expected,
        "ck_rel_diff": finite_or_null(c.ck_rel_diff),
        "n_compared": c.n_compared,
        "n_outside_tol": c.n_outside_tol,
        "reason": c.reason,
    })
}
