//! The stepper's comparison of one step: triage of every index capture (against the recorded
//! reference and against the first backend), invariants, and every capture compared with the
//! reference and with the first backend under the one policy table.

use super::{audit_key, is_index_capture, Stepper};
use crate::golden::compare::compare_full;
use crate::golden::names::{capture_kind, parse_capture_name};
use crate::golden::policy::{policy_against_at, Against, PolicyDims};
use crate::model::{Capture, CaptureValues, Step};
use crate::session::invariants::{check_step, Violation};
use crate::session::localize::is_input_capture;
use crate::session::reference::Expected;
use crate::session::results::{
    upstream_rel_err, BackendCapture, BudgetCheck, CaptureResult, CaptureTriage, CrossComparison,
};
use crate::session::triage::TopkTriage;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

impl Stepper<'_> {
    /// Triage this step's index captures: every backend against the recorded reference (where it
    /// holds them whole), every later backend against the first.
    fn triage_step(
        &mut self,
        caps: &[Vec<Capture>],
    ) -> (Vec<Vec<TopkTriage>>, Vec<Vec<TopkTriage>>) {
        let n = caps.len();
        let Some(cfg) = self.cfg.clone() else {
            return (vec![Vec::new(); n], vec![Vec::new(); n.saturating_sub(1)]);
        };
        let first = &caps[0];
        self.diagnostics_seen |= first.iter().any(Capture::is_diagnostic);
        let mut vs_reference = vec![Vec::new(); n];
        if !self.live() {
            // The reference's whole index tensors and step inputs, with the first backend's
            // diagnostic scores: the reference side of the triage against the recorded truth.
            let mut reference: Vec<Capture> = first
                .iter()
                .filter(|c| c.is_diagnostic())
                .cloned()
                .collect();
            for c in first.iter().filter(|c| !c.is_diagnostic()) {
                let Some(e) = self.reference.expected(self.regime, &c.name) else {
                    continue;
                };
                if is_index_capture(&c.name) || c.name.ends_with(".candidates") {
                    if let Some(v) = e.full_i64() {
                        reference.push(Capture::int(c.name.clone(), e.shape().to_vec(), v));
                    }
                } else if is_input_capture(&c.name) && !e.is_int() {
                    if let Some(v) = e.full_f32() {
                        reference.push(Capture::f32(
                            c.name.clone(),
                            e.shape().to_vec(),
                            c.dtype,
                            v,
                        ));
                    }
                }
            }
            for (bi, c) in caps.iter().enumerate() {
                let up = upstream_rel_err(&reference, c);
                vs_reference[bi] =
                    self.triage_reference[bi].step(&cfg, self.start_pos, &reference, c, up);
            }
        }
        let mut cross = Vec::with_capacity(n.saturating_sub(1));
        for (state, test) in self.triage_cross.iter_mut().zip(caps.iter().skip(1)) {
            let up = upstream_rel_err(first, test);
            cross.push(state.step(&cfg, self.start_pos, first, test, up));
        }
        (vs_reference, cross)
    }

    /// Whether the first backend emitted the scores a triaged capture's top-k ran on.
    fn scores_known(&self, first: &[Capture], capture: &str) -> bool {
        let parsed = parse_capture_name(capture);
        if parsed.base == "moe_indices" {
            let Some(l) = parsed.layer else {
                return false;
            };
            let want = format!("diag.L{l}.gate_biased");
            first.iter().any(|c| c.name == want)
        } else {
            self.diagnostics_seen
        }
    }

    #[allow(clippy::type_complexity)]
    pub(super) fn compare_step(
        &mut self,
        step: Step,
        caps: &[Vec<Capture>],
    ) -> (
        Vec<CaptureResult>,
        Vec<(String, Violation)>,
        Vec<(usize, Vec<String>)>,
    ) {
        let (triage_ref, triage_cross) = self.triage_step(caps);
        let mut violations: Vec<Vec<Violation>> = match (&self.opts.invariants, caps) {
            (Some(cfg), caps) => caps
                .iter()
                .map(|c| check_step(cfg, self.start_pos, c))
                .collect(),
            (None, caps) => vec![Vec::new(); caps.len()],
        };
        let wanted = |n: &str| self.opts.only.as_ref().is_none_or(|re| re.is_match(n));
        // Capture names in order: the first backend's, then any only a later one produced.
        let mut names: Vec<&str> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        for c in caps.iter().flatten().filter(|c| !c.is_diagnostic()) {
            if seen.insert(c.name.as_str()) {
                names.push(c.name.as_str());
            }
        }
        let by_name: Vec<HashMap<&str, &Capture>> = caps
            .iter()
            .map(|c| c.iter().map(|c| (c.name.as_str(), c)).collect())
            .collect();
        for (bi, m) in by_name.iter().enumerate() {
            for name in m
                .keys()
                .filter(|n| !n.starts_with(crate::model::backend::DIAGNOSTIC_PREFIX))
            {
                self.produced[bi].insert((*name).to_string());
            }
        }
        let against_reference = Against::reference(self.opts.strict);
        // The f32-chain bars scale with the model's reduction lengths (Atlas dims when the
        // config is unknown).
        let dims = self
            .cfg
            .as_ref()
            .map_or(PolicyDims::ATLAS, |c| PolicyDims::new(c.hc_mult, c.dim));
        let regime_name = self.reference.regime_name(self.regime);
        let mut results = Vec::new();
        for name in names.into_iter().filter(|n| wanted(n)) {
            let expected: Option<Expected<'_>> = self.reference.expected(self.regime, name);
            let mut sides = Vec::new();
            let mut cross = Vec::new();
            let mut shape = Vec::new();
            for (bi, m) in by_name.iter().enumerate() {
                let Some(&c) = m.get(name) else {
                    continue;
                };
                if shape.is_empty() {
                    shape = c.shape.clone();
                }
                let is_int =
                    expected.map_or(matches!(c.values, CaptureValues::I64(_)), |e| e.is_int());
                let policy = policy_against_at(against_reference, name, is_int, dims);
                let vs_golden = expected.map(|e| e.compare(c, &policy));
                let budget = match (&self.cfg, &expected, &vs_golden) {
                    (Some(cfg), Some(e), Some(cmp)) => Some(BudgetCheck::new(cfg, name, e, cmp)),
                    _ => None,
                };
                let own: Vec<Violation> = {
                    let (here, rest) = std::mem::take(&mut violations[bi])
                        .into_iter()
                        .partition(|v| v.capture == name);
                    violations[bi] = rest;
                    here
                };
                let triage =
                    triage_ref[bi]
                        .iter()
                        .find(|t| t.capture == name)
                        .map(|t| CaptureTriage {
                            triage: t.clone(),
                            scores_known: self.scores_known(&caps[0], name),
                        });
                if bi > 0 {
                    if let Some(&r) = by_name[0].get(name) {
                        let r_int = matches!(r.values, CaptureValues::I64(_));
                        let p = policy_against_at(Against::Backend, name, r_int, dims);
                        let cmp =
                            compare_full((&c.values).into(), (&r.values).into(), &r.shape, &p);
                        let own_dev = audit_key(name)
                            .and_then(|k| self.audits[bi].get(k))
                            .is_some_and(|&d| d > 0);
                        let tie_flip = !cmp.pass
                            && r_int
                            && c.shape == r.shape
                            && (own_dev || self.deviations[bi] > 0);
                        let triage = triage_cross
                            .get(bi - 1)
                            .and_then(|ts| ts.iter().find(|t| t.capture == name))
                            .map(|t| CaptureTriage {
                                triage: t.clone(),
                                scores_known: self.scores_known(&caps[0], name),
                            });
                        let budget = self
                            .cfg
                            .as_ref()
                            .map(|cfg| BudgetCheck::new(cfg, name, &Expected::Full(r), &cmp));
                        cross.push(CrossComparison {
                            test: self.names[bi].clone(),
                            reference: self.names[0].clone(),
                            cmp,
                            tie_flip,
                            budget,
                            triage,
                        });
                    }
                }
                sides.push(BackendCapture {
                    backend: self.names[bi].clone(),
                    values: Arc::new(c.values.clone()),
                    vs_golden,
                    triage,
                    budget,
                    violations: own,
                });
            }
            results.push(CaptureResult {
                order: self.order,
                regime_index: self.regime,
                regime: regime_name.clone(),
                step,
                name: name.to_string(),
                kind: capture_kind(name),
                shape,
                per_backend: sides,
                cross,
            });
            self.order += 1;
        }
        let mut cross_missing = Vec::new();
        for (bi, m) in by_name.iter().enumerate().skip(1) {
            let lacking: Vec<String> = caps[0]
                .iter()
                .filter(|c| {
                    !c.is_diagnostic() && wanted(&c.name) && !m.contains_key(c.name.as_str())
                })
                .map(|c| c.name.clone())
                .collect();
            if !lacking.is_empty() {
                cross_missing.push((bi, lacking));
            }
        }
        let other = self
            .names
            .iter()
            .zip(violations)
            .flat_map(|(name, vs)| vs.into_iter().map(move |v| (name.clone(), v)))
            .collect();
        (results, other, cross_missing)
    }
}
