//! Lockstep runs of several backends over the same steps: every backend runs step k of a regime
//! before any runs step k+1; each backend's captures are compared with the golden, and every
//! other backend's captures are also compared, in full, with the reference backend's (the CPU
//! oracle) under the GPU tolerance policy below. Integer disagreements that come only from the
//! GPU's top-k tie rule are counted apart as tie flips.
//!
//! GPU tolerance policy against the oracle, per capture kind (full tensors, every element):
//! * bf16 captures: two bf16 ulps at the largest reference magnitude (`POLICY_BF16`'s rule over
//!   the whole tensor) and `BF16_CK_REL` on the checksum. GEMMs on the GPU use exact products
//!   and a pair accumulator, so they match the oracle's f64 sums; the remaining differences come
//!   from WGSL `exp`/`sqrt` (not correctly rounded), which move f32 values by an ulp and flip a
//!   bf16 rounding now and then, and from chained propagation of such flips.
//! * f32 chains (hc mixes, pre-mix, routing weights): `F32_TOL` absolute, as the Atlas bar, for
//!   the same transcendental noise through Sinkhorn and softplus.
//! * `logits_full`: the bf16 rule (its input is bf16; Atlas does the same).
//! * integer captures: equality. A disagreement is a *tie flip* when the GPU backend reported
//!   (through its `tieflip.*` audit captures) that its tie rule chose differently from the torch
//!   rule on the same scores, for this capture's own selection or for any selection earlier in
//!   the same regime (a flipped candidate mask changes the scores a later indexer ranks);
//!   otherwise it is a mismatch. Float captures downstream of a tie flip are not excused: with
//!   the GPU tie rule they may leave the policy, which is why `--reference-ties` exists.
//!
//! Top-k triage (`super::triage`) runs beside the comparisons: every backend's index captures
//! against the golden's (where the golden holds them in full) and every other backend's against
//! the reference backend's, each disagreement classified tie flip / near tie / real from the
//! reference backend's diagnostic scores (the oracle emits them with `diagnostics` on).

use super::localize::is_step_input;
use super::triage::{TopkTriage, TriageState};
use super::{regime_inputs, CaptureRow, CheckOptions, Report, SessionError};
use crate::golden::compare::{compare_full, compare_with_golden, Comparison, Values};
use crate::golden::names::{capture_kind, CaptureKind};
use crate::golden::policy::{
    policy_for_capture, strict_policy_for_capture, ElementTol, Policy, BF16_CK_REL, EXACT, F32_TOL,
};
use crate::golden::Golden;
use crate::model::{Backend, Capture, CaptureValues, Step};
use std::collections::HashMap;

/// GPU vs oracle, bf16 captures: two bf16 ulps at the largest reference magnitude (see the
/// module doc for why the GPU can move a bf16 rounding at all).
pub const GPU_POLICY_BF16: Policy = Policy {
    name: "gpu-bf16",
    element_tol: ElementTol::Bf16Sampled,
    ck_rel: BF16_CK_REL,
    exact: false,
    row_sets: false,
};

/// GPU vs oracle, f32 chains: `F32_TOL` for elements and checksum.
pub const GPU_POLICY_F32: Policy = Policy {
    name: "gpu-f32",
    element_tol: ElementTol::Abs(F32_TOL),
    ck_rel: F32_TOL,
    exact: false,
    row_sets: false,
};

/// GPU vs oracle, integer captures: equality (tie flips are classified apart).
pub const GPU_POLICY_INT: Policy = Policy {
    name: "gpu-exact",
    element_tol: ElementTol::Abs(EXACT),
    ck_rel: EXACT,
    exact: true,
    row_sets: true,
};

/// Prefix of the audit captures a backend emits to report tie-rule deviations (not golden
/// captures; never compared).
pub const TIE_AUDIT_PREFIX: &str = "tieflip.";

/// The GPU policy for a capture against the oracle.
pub fn gpu_policy_for_capture(name: &str, is_int: bool) -> Policy {
    if name == "logits_full" {
        return GPU_POLICY_BF16;
    }
    match capture_kind(name) {
        CaptureKind::F32 => GPU_POLICY_F32,
        k if k.is_int() => GPU_POLICY_INT,
        CaptureKind::Other if is_int => GPU_POLICY_INT,
        _ => GPU_POLICY_BF16,
    }
}

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

/// Totals of one triage list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TriageTotals {
    pub captures: usize,
    pub rows_differing: usize,
    pub tie_flips: usize,
    pub near_ties: usize,
    pub real: usize,
}

/// Sum a triage list.
pub fn triage_totals(list: &[(String, TopkTriage)]) -> TriageTotals {
    let mut t = TriageTotals::default();
    for (_, x) in list {
        t.captures += 1;
        t.rows_differing += x.rows_differing;
        t.tie_flips += x.tie_flips;
        t.near_ties += x.near_ties;
        t.real += x.real;
    }
    t
}

/// Largest |a - b| relative to the largest |b| (0 when b is all zero or the lengths differ).
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut err, mut mag) = (0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        err = err.max((x - y).abs());
        mag = mag.max(y.abs());
    }
    if mag > 0.0 && err.is_finite() {
        err / mag
    } else {
        0.0
    }
}

/// The relative error of the step's input captures (`h_in`, `engram_in`, ...) of `test`
/// against `reference`: how far upstream error can move this step's scores.
fn upstream_rel_err(test: &[Capture], reference: &[Capture]) -> f32 {
    let mut worst = 0f32;
    for t in test.iter().filter(|c| is_step_input(&c.name)) {
        if let (Some(r), CaptureValues::F32(a)) =
            (reference.iter().find(|c| c.name == t.name), &t.values)
        {
            if let CaptureValues::F32(b) = &r.values {
                worst = worst.max(rel_err(a, b));
            }
        }
    }
    worst
}

fn is_index_capture(name: &str) -> bool {
    let base = name.rsplit('.').next().unwrap_or(name);
    matches!(base, "sa_topk_idxs" | "topk_idxs" | "moe_indices")
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

fn values(c: &Capture) -> Values<'_> {
    match &c.values {
        CaptureValues::F32(v) => Values::F32(v),
        CaptureValues::I64(v) => Values::I64(v),
    }
}

/// Which tie audit a capture's selection comes from.
fn audit_key(name: &str) -> Option<&'static str> {
    let base = name.rsplit('.').next().unwrap_or(name);
    match base {
        "moe_indices" => Some("moe"),
        "sa_topk_idxs" | "topk_idxs" => Some("topk"),
        "candidates" => Some("candidates"),
        _ => None,
    }
}

fn golden_row(
    golden_regime: &crate::golden::Regime,
    regime: &str,
    step: Step,
    cap: &Capture,
    opts: &CheckOptions,
) -> Option<CaptureRow> {
    let g = golden_regime.get(&cap.name)?;
    let policy = if opts.strict {
        strict_policy_for_capture(&cap.name, g.is_int())
    } else {
        policy_for_capture(&cap.name, g.is_int())
    };
    Some(CaptureRow {
        regime: regime.to_string(),
        step,
        name: cap.name.clone(),
        kind: capture_kind(&cap.name),
        shape: cap.shape.clone(),
        cmp: compare_with_golden(values(cap), &cap.shape, g, &policy),
    })
}

/// Run `backends` in lockstep over every regime of `golden`; `reference` indexes the backend the
/// others are compared with in full. In isolated mode every backend is reseeded from the golden
/// before each step, so the cross comparison is of local errors.
pub fn run_lockstep(
    golden: &Golden,
    backends: &mut [&mut dyn Backend],
    reference: usize,
    opts: &CheckOptions,
) -> Result<MultiReport, SessionError> {
    let inputs = regime_inputs(golden)?;
    let mut reports: Vec<Report> = backends
        .iter()
        .map(|b| Report::new(golden, &b.name(), opts.mode))
        .collect();
    let ref_name =
        backends
            .get(reference)
            .map(|b| b.name())
            .ok_or_else(|| SessionError::Golden {
                source_path: golden.source.display().to_string(),
                msg: format!("reference backend {reference} of {}", backends.len()),
            })?;
    let others: Vec<usize> = (0..backends.len()).filter(|&i| i != reference).collect();
    let mut cross: Vec<(String, Vec<CrossRow>)> = others
        .iter()
        .map(|&i| (backends[i].name(), Vec::new()))
        .collect();
    let mut cross_missing: Vec<(String, Vec<(String, String)>)> = others
        .iter()
        .map(|&i| (backends[i].name(), Vec::new()))
        .collect();
    let triage_cfg = opts
        .invariants
        .clone()
        .or_else(|| super::model_of(golden).ok().map(|m| m.0));
    let mut triage_golden: Vec<(String, Vec<(String, TopkTriage)>)> =
        backends.iter().map(|b| (b.name(), Vec::new())).collect();
    let mut triage_cross: Vec<(String, Vec<(String, TopkTriage)>)> = others
        .iter()
        .map(|&i| (backends[i].name(), Vec::new()))
        .collect();
    let mut triage_golden_state: Vec<TriageState> =
        backends.iter().map(|_| TriageState::default()).collect();
    let mut triage_cross_state: Vec<TriageState> =
        others.iter().map(|_| TriageState::default()).collect();
    for (ri, (regime_name, ids, start)) in inputs.iter().enumerate() {
        let regime = &golden.regimes[ri];
        let berr = |source: crate::model::BackendError| SessionError::Backend {
            regime: regime_name.clone(),
            source: Box::new(source),
        };
        for b in backends.iter_mut() {
            b.begin(ids, *start).map_err(berr)?;
        }
        for t in triage_golden_state
            .iter_mut()
            .chain(triage_cross_state.iter_mut())
        {
            t.begin_regime(regime_name);
        }
        let steps = backends[reference].steps();
        let mut produced: Vec<std::collections::HashSet<String>> =
            vec![Default::default(); backends.len()];
        // Latest tie-audit count per audit key, per backend.
        let mut audits: Vec<HashMap<&'static str, i64>> = vec![HashMap::new(); backends.len()];
        // Tie-rule deviations so far in this regime, per backend.
        let mut deviations: Vec<i64> = vec![0; backends.len()];
        let seeds = if opts.mode == super::Mode::Isolated {
            Some(super::GoldenSeeds::new(golden, ri)?)
        } else {
            None
        };
        for step in steps {
            let mut caps: Vec<Vec<Capture>> = Vec::with_capacity(backends.len());
            for (bi, b) in backends.iter_mut().enumerate() {
                if let Some(seeds) = &seeds {
                    let missing = b.seed(step, seeds).map_err(berr)?;
                    if !missing.is_empty() {
                        reports[bi].not_isolated.push(super::StepIsolation {
                            regime: regime_name.clone(),
                            step,
                            missing,
                        });
                    }
                }
                let mut c = Vec::new();
                b.run(step, &mut c).map_err(berr)?;
                c.retain(|cap| {
                    if let Some(rest) = cap.name.strip_prefix(TIE_AUDIT_PREFIX) {
                        if let (Some(key), CaptureValues::I64(v)) = (audit_key(rest), &cap.values) {
                            let n: i64 = v.iter().sum();
                            audits[bi].insert(key, n);
                            deviations[bi] += n;
                        }
                        return false;
                    }
                    true
                });
                if let Some(cfg) = &opts.invariants {
                    for v in super::invariants::check_step(cfg, *start, &c) {
                        reports[bi].violations.push((regime_name.clone(), v));
                    }
                }
                caps.push(c);
            }
            let wanted = |n: &str| opts.only.as_ref().is_none_or(|re| re.is_match(n));
            for (bi, c) in caps.iter().enumerate() {
                for cap in c.iter().filter(|c| !c.is_diagnostic()) {
                    produced[bi].insert(cap.name.clone());
                    if !wanted(&cap.name) {
                        continue;
                    }
                    match golden_row(regime, regime_name, step, cap, opts) {
                        Some(row) => {
                            if let Some(g) = regime.get(&cap.name) {
                                let m = super::budget::reference_magnitude(g);
                                reports[bi]
                                    .reference_max_abs
                                    .insert((regime_name.clone(), cap.name.clone()), m);
                            }
                            reports[bi].rows.push(row)
                        }
                        None => reports[bi]
                            .extra
                            .push((regime_name.clone(), cap.name.clone())),
                    }
                }
            }
            if let Some(cfg) = &triage_cfg {
                // The golden's full index tensors and its step inputs, with the reference
                // backend's diagnostic scores: the reference of the golden triage.
                let mut golden_caps: Vec<Capture> = caps[reference]
                    .iter()
                    .filter(|c| c.is_diagnostic())
                    .cloned()
                    .collect();
                for c in caps[reference].iter().filter(|c| !c.is_diagnostic()) {
                    let Some(g) = regime.get(&c.name) else {
                        continue;
                    };
                    if is_index_capture(&c.name) || c.name.ends_with(".candidates") {
                        if let Some(v) = g.full_i64() {
                            golden_caps.push(Capture::int(c.name.clone(), g.shape.clone(), v));
                        }
                    } else if is_step_input(&c.name) && !g.is_int() {
                        if let Some(v) = g.full_f32() {
                            golden_caps.push(Capture::f32(
                                c.name.clone(),
                                g.shape.clone(),
                                c.dtype,
                                v,
                            ));
                        }
                    }
                }
                for (bi, c) in caps.iter().enumerate() {
                    let up = upstream_rel_err(c, &golden_caps);
                    for t in triage_golden_state[bi].step(cfg, *start, &golden_caps, c, up) {
                        if wanted(&t.capture) {
                            triage_golden[bi].1.push((regime_name.clone(), t));
                        }
                    }
                }
                for (oi, &bi) in others.iter().enumerate() {
                    let up = upstream_rel_err(&caps[bi], &caps[reference]);
                    for t in
                        triage_cross_state[oi].step(cfg, *start, &caps[reference], &caps[bi], up)
                    {
                        if wanted(&t.capture) {
                            triage_cross[oi].1.push((regime_name.clone(), t));
                        }
                    }
                }
            }
            let by_name: HashMap<&str, &Capture> = caps[reference]
                .iter()
                .map(|c| (c.name.as_str(), c))
                .collect();
            for (oi, &bi) in others.iter().enumerate() {
                let mine: HashMap<&str, &Capture> =
                    caps[bi].iter().map(|c| (c.name.as_str(), c)).collect();
                for r in caps[reference].iter().filter(|c| !c.is_diagnostic()) {
                    if wanted(&r.name) && !mine.contains_key(r.name.as_str()) {
                        cross_missing[oi]
                            .1
                            .push((regime_name.clone(), r.name.clone()));
                    }
                }
                for cap in caps[bi].iter().filter(|c| !c.is_diagnostic()) {
                    let Some(r) = by_name.get(cap.name.as_str()) else {
                        continue;
                    };
                    if !wanted(&cap.name) {
                        continue;
                    }
                    let is_int = matches!(r.values, CaptureValues::I64(_));
                    let policy = gpu_policy_for_capture(&cap.name, is_int);
                    let cmp = if cap.shape != r.shape {
                        compare_full(values(cap), values(r), &r.shape, &policy)
                    } else {
                        compare_full(values(cap), values(r), &cap.shape, &policy)
                    };
                    let own = audit_key(&cap.name)
                        .and_then(|k| audits[bi].get(k))
                        .is_some_and(|&n| n > 0);
                    let tie_flip =
                        !cmp.pass && is_int && cap.shape == r.shape && (own || deviations[bi] > 0);
                    cross[oi].1.push(CrossRow {
                        regime: regime_name.clone(),
                        step,
                        name: cap.name.clone(),
                        kind: capture_kind(&cap.name),
                        cmp,
                        tie_flip,
                    });
                }
            }
        }
        for (bi, report) in reports.iter_mut().enumerate() {
            for c in &regime.captures {
                if opts.only.as_ref().is_none_or(|re| re.is_match(&c.name))
                    && !produced[bi].contains(&c.name)
                {
                    report.missing.push((regime_name.clone(), c.name.clone()));
                }
            }
        }
        if opts.stop_after_regime.as_deref() == Some(regime_name.as_str()) {
            break;
        }
    }
    Ok(MultiReport {
        golden: reports,
        reference: ref_name,
        cross,
        cross_missing,
        triage_golden,
        triage_cross,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_policies_by_kind() {
        assert_eq!(gpu_policy_for_capture("L0.attn_in", false).name, "gpu-bf16");
        assert_eq!(
            gpu_policy_for_capture("L0.attn_comb", false).name,
            "gpu-f32"
        );
        assert_eq!(
            gpu_policy_for_capture("logits_full", false).name,
            "gpu-bf16"
        );
        assert_eq!(
            gpu_policy_for_capture("L3.sa_topk_idxs", true).name,
            "gpu-exact"
        );
        assert_eq!(
            gpu_policy_for_capture("shared.L4.candidates", true).name,
            "gpu-exact"
        );
        assert_eq!(audit_key("shared.L2.topk_idxs"), Some("topk"));
        assert_eq!(audit_key("L0.moe_indices"), Some("moe"));
        assert_eq!(audit_key("L0.sa_o"), None);
    }
}
