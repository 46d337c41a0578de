//! The one stepper. Given a reference source, a list of backends and the run's options, it runs
//! every regime step by step: each step on every backend in turn (reseeding each one first in
//! isolated mode), then checks every backend's own captures against the graph's invariants,
//! compares each backend with the reference source and each later backend with the first one
//! under the one policy table (`golden::policy::policy_against`), triages every index capture,
//! and yields a typed [`StepOutcome`]. `check`, `localize`, `selftest`, determinism, the golden
//! writer and the app's worker all drive it; no other module holds a step loop.
//!
//! A recorded reference (a golden, a recorded oracle run, an imported dump) is compared with
//! every backend. A live reference (tokens only: golden-less runs, the golden writer) makes the
//! first backend, the CPU oracle, the reference: later backends are compared with it, and in
//! isolated mode they are reseeded from its captures of the same step.
//!
//! Tie flips: a backend that runs its top-k with its own tie rule reports, through `tieflip.*`
//! audit captures, whether that rule chose differently from the torch rule on the same scores. An
//! integer disagreement with the first backend is a *tie flip* when such a deviation happened for
//! this capture's own selection or any earlier one in the regime (a flipped candidate mask changes
//! the scores a later indexer ranks); it is reported, not failed. Float captures downstream of a
//! tie flip are not excused, which is why the GPU has `--reference-ties`.

mod compare;

use super::invariants::Violation;
use super::reference::{RecordedRegime, RecordedRun, ReferenceKind, SharedReference};
use super::results::CaptureResult;
use super::triage::TriageState;
use super::{CheckOptions, Mode, SessionError};
use crate::model::hints::{SelectionHints, NEAR_TIE_PREFIX};
use crate::model::{Backend, Capture, CaptureValues, ModelConfig, SeedTensors, Step};
use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// A backend the stepper (and the app's worker thread) can own.
pub type BoxedBackend = Box<dyn Backend + Send>;

/// Prefix of the audit captures a backend emits to report its tie rule's deviations from the
/// torch rule (never compared, never shown).
pub const TIE_AUDIT_PREFIX: &str = "tieflip.";

/// Rows of one selection a backend resolved the reference's way (a near tie under its own
/// scores; see [`crate::model::hints`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NearTiesResolved {
    /// Index of the backend.
    pub backend: usize,
    /// The selection capture (`L3.moe_indices`).
    pub capture: String,
    /// Its rows (tokens) that took the reference's selection.
    pub rows: Vec<usize>,
}

/// A step whose inputs could not all be reseeded in isolated mode, and why.
#[derive(Debug, Clone)]
pub struct NotIsolated {
    /// Index of the backend.
    pub backend: usize,
    /// The reference tensors that were needed in full but are only sampled (or absent).
    pub missing: Vec<String>,
}

/// What a finished regime left unproduced.
#[derive(Debug, Clone, Default)]
pub struct RegimeEnd {
    /// Per backend: captures the recorded reference holds that the backend did not produce.
    pub missing: Vec<Vec<String>>,
}

/// Everything one step found, on every backend.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    pub regime_index: usize,
    pub regime: String,
    /// Position of the regime's first token.
    pub start_pos: usize,
    pub step: Step,
    /// Every compared capture of the step: the first backend's in its order, then any only a
    /// later backend produced.
    pub results: Vec<CaptureResult>,
    /// Invariant violations of captures no result holds (diagnostic ones), with the backend.
    pub other_violations: Vec<(String, Violation)>,
    /// Backends that could not be fully reseeded before this step (isolated mode).
    pub not_isolated: Vec<NotIsolated>,
    /// Selections a backend under test resolved the reference's way in this step (near ties;
    /// every such backend is handed the reference's selections, and only one that selects on
    /// the host under the torch-CPU rule, the GPU with `--reference-ties`, takes them).
    pub near_ties: Vec<NearTiesResolved>,
    /// Per later backend `i` (index into the backend list): captures the first backend produced
    /// in this step that backend `i` did not.
    pub cross_missing: Vec<(usize, Vec<String>)>,
    /// Wall seconds each backend spent in this step (seeding excluded).
    pub seconds: Vec<f64>,
    /// Set when this step ended its regime.
    pub regime_end: Option<RegimeEnd>,
}

/// Where a stepper stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub regime: usize,
    /// Index of the next step in the regime (0 before `begin`).
    pub step: usize,
    /// The next step, once the regime has begun.
    pub next: Option<Step>,
    pub finished: bool,
}

/// A backend the stepper drives: owned (the app's worker) or borrowed (`Box::new(&mut gpu)`, so
/// a caller keeps its concrete backend for timings afterwards).
pub type StepBackend<'a> = Box<dyn Backend + 'a>;

/// Runs a reference source and backends in lockstep, one step at a time.
pub struct Stepper<'a> {
    reference: SharedReference,
    backends: Vec<StepBackend<'a>>,
    names: Vec<String>,
    opts: CheckOptions,
    /// The config triage and budgets use: the options' invariant config, else the reference's.
    cfg: Option<ModelConfig>,
    regime: usize,
    start_pos: usize,
    /// Tokens of the current regime's forward.
    regime_len: usize,
    steps: Vec<Step>,
    step_index: usize,
    begun: bool,
    finished: bool,
    order: usize,
    produced: Vec<HashSet<String>>,
    /// Latest tie-audit count per audit key, per backend, and deviations so far in the regime.
    audits: Vec<HashMap<&'static str, i64>>,
    deviations: Vec<i64>,
    triage_reference: Vec<TriageState>,
    triage_cross: Vec<TriageState>,
    diagnostics_seen: bool,
    /// The first backend's captures of every regime so far (live reference in isolated mode:
    /// what later backends are reseeded from).
    recorded: RecordedRun,
    /// The first backend's captures of the last step of the previous regime (its logits choose
    /// the next token of a greedy regime).
    previous: Vec<Capture>,
    /// Per backend: every pin request it accepted (false once one was refused).
    pin_supported: Vec<bool>,
}

fn audit_key(name: &str) -> Option<&'static str> {
    let base = name.rsplit('.').next().unwrap_or(name);
    match base {
        "moe_indices" => Some("moe"),
        "sa_topk_idxs" | "topk_idxs" => Some("topk"),
        "candidates" => Some("candidates"),
        _ => None,
    }
}

fn is_index_capture(name: &str) -> bool {
    let base = name.rsplit('.').next().unwrap_or(name);
    matches!(base, "sa_topk_idxs" | "topk_idxs" | "moe_indices")
}

impl<'a> Stepper<'a> {
    /// A stepper over `reference` and `backends` (the first one is the cross-comparison reference,
    /// normally the CPU oracle, and the reference itself when the source is live).
    pub fn new(
        reference: SharedReference,
        backends: Vec<StepBackend<'a>>,
        opts: CheckOptions,
    ) -> Result<Stepper<'a>, SessionError> {
        if backends.is_empty() {
            return Err(SessionError::NoBackend);
        }
        let n = backends.len();
        // Names label every comparison (`gpu vs cpu`); two backends of one kind get `#2`, `#3`.
        let mut names: Vec<String> = Vec::with_capacity(n);
        for b in &backends {
            let base = b.name();
            let mut name = base.clone();
            let mut k = 1;
            while names.contains(&name) {
                k += 1;
                name = format!("{base}#{k}");
            }
            names.push(name);
        }
        let cfg = opts
            .invariants
            .clone()
            .or_else(|| reference.config().cloned());
        let recorded = RecordedRun {
            regimes: Vec::new(),
            config: reference.config().cloned(),
            label: "the first backend".into(),
        };
        Ok(Stepper {
            reference,
            backends,
            names,
            opts,
            cfg,
            regime: 0,
            start_pos: 0,
            regime_len: 0,
            steps: Vec::new(),
            step_index: 0,
            begun: false,
            finished: false,
            order: 0,
            produced: vec![HashSet::new(); n],
            audits: vec![HashMap::new(); n],
            deviations: vec![0; n],
            triage_reference: (0..n).map(|_| TriageState::default()).collect(),
            triage_cross: (1..n).map(|_| TriageState::default()).collect(),
            diagnostics_seen: false,
            recorded,
            previous: Vec::new(),
            pin_supported: vec![true; n],
        })
    }

    /// The backends' names, in order.
    pub fn backend_names(&self) -> &[String] {
        &self.names
    }

    /// The reference source.
    pub fn reference(&self) -> &SharedReference {
        &self.reference
    }

    /// The run's options.
    pub fn options(&self) -> &CheckOptions {
        &self.opts
    }

    /// Where the stepper stands.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            regime: self.regime,
            step: self.step_index,
            next: self
                .begun
                .then(|| self.steps.get(self.step_index).copied())
                .flatten(),
            finished: self.finished,
        }
    }

    /// True once every regime has run (or the run stopped after `stop_after_regime`).
    pub fn finished(&self) -> bool {
        self.finished || self.regime >= self.reference.regime_count()
    }

    /// The step [`Stepper::next_step`] runs next (before a regime begins: the first backend's
    /// first step); None once the run is over.
    pub fn peek_step(&self) -> Option<Step> {
        if self.finished() {
            None
        } else if self.begun {
            self.steps.get(self.step_index).copied()
        } else {
            self.backends.first()?.steps().first().copied()
        }
    }

    /// Steps in the whole run, from the graph's step sequence (the first backend's, once a regime
    /// has begun); None when the config is unknown before the first step.
    pub fn steps_total(&self) -> Option<usize> {
        // The first backend's steps honour a layer range (`--layers`); the config's are all.
        let per_regime = if self.begun {
            self.steps.len()
        } else if let Some(first) = self.backends.first() {
            first.steps().len()
        } else {
            self.cfg.as_ref()?.steps().len()
        };
        Some(per_regime * self.reference.regime_count())
    }

    /// Per backend: false when it refused a pin request (counterfactual pinning).
    pub fn pin_supported(&self) -> &[bool] {
        &self.pin_supported
    }

    fn live(&self) -> bool {
        self.reference.kind() == ReferenceKind::Live
    }

    fn berr(&self, bi: usize) -> impl Fn(crate::model::BackendError) -> SessionError + '_ {
        move |source| SessionError::Backend {
            regime: self.reference.regime_name(self.regime),
            backend: self.names.get(bi).cloned().unwrap_or_default(),
            source: Box::new(source),
        }
    }

    fn begin_regime(&mut self) -> Result<(), SessionError> {
        let ids = self.reference.regime_tokens(self.regime, &self.previous)?;
        self.regime_len = ids.len();
        for bi in 0..self.backends.len() {
            let r = self.backends[bi].begin(&ids, self.start_pos);
            r.map_err(self.berr(bi))?;
        }
        if let Some(from) = self.opts.pin_from {
            let pins = if self.live() {
                self.recorded_pins(from)
            } else {
                self.reference.pins(self.regime, from)
            };
            let first = usize::from(self.live());
            for bi in first..self.backends.len() {
                let r = self.backends[bi].pin(&pins);
                let ok = r.map_err(self.berr(bi))?;
                self.pin_supported[bi] &= ok;
            }
        }
        self.steps = self.backends[0].steps();
        self.step_index = 0;
        self.begun = true;
        for p in &mut self.produced {
            p.clear();
        }
        for a in &mut self.audits {
            a.clear();
        }
        self.deviations.iter_mut().for_each(|d| *d = 0);
        let name = self.reference.regime_name(self.regime);
        for t in self
            .triage_reference
            .iter_mut()
            .chain(self.triage_cross.iter_mut())
        {
            t.begin_regime(&name);
        }
        self.diagnostics_seen = false;
        if self.live() && self.opts.mode == Mode::Isolated {
            self.recorded.regimes.push(RecordedRegime {
                name,
                start_pos: self.start_pos,
                ids: ids.clone(),
                captures: HashMap::new(),
            });
        }
        Ok(())
    }

    /// Pins from the live reference's recorded captures (a live run pins nothing it has not
    /// computed yet, so this is empty unless the same regime was recorded).
    fn recorded_pins(&self, from: usize) -> crate::model::Pins {
        use super::reference::ReferenceSource;
        self.recorded.pins(self.regime, from)
    }

    /// Run the next step on every backend and compare; None once the run is over.
    pub fn next_step(&mut self) -> Result<Option<StepOutcome>, SessionError> {
        if self.finished() {
            self.finished = true;
            return Ok(None);
        }
        if !self.begun {
            self.begin_regime()?;
        }
        let Some(&step) = self.steps.get(self.step_index) else {
            // A backend with no steps: end the regime without running anything.
            let end = self.end_regime();
            return Ok(Some(StepOutcome {
                regime_index: self.regime.saturating_sub(1),
                regime: self.reference.regime_name(self.regime.saturating_sub(1)),
                start_pos: self.start_pos,
                step: Step::Final,
                results: Vec::new(),
                other_violations: Vec::new(),
                not_isolated: Vec::new(),
                near_ties: Vec::new(),
                cross_missing: Vec::new(),
                seconds: Vec::new(),
                regime_end: Some(end),
            }));
        };
        let regime_index = self.regime;
        let regime = self.reference.regime_name(regime_index);
        let start_pos = self.start_pos;
        let n = self.backends.len();
        let mut caps: Vec<Vec<Capture>> = Vec::with_capacity(n);
        let mut not_isolated = Vec::new();
        let mut near_ties = Vec::new();
        let mut seconds = Vec::with_capacity(n);
        for bi in 0..n {
            if self.opts.mode == Mode::Isolated && !(self.live() && bi == 0) {
                let missing = self.seed(bi, step)?;
                if !missing.is_empty() {
                    not_isolated.push(NotIsolated {
                        backend: bi,
                        missing,
                    });
                }
            }
            // A recorded reference is every backend's reference; a live one is backend 0.
            if bi > 0 || !self.live() {
                let hints = self.hints_for(step, caps.first().map_or(&[][..], Vec::as_slice));
                let r = self.backends[bi].hint(&hints);
                r.map_err(self.berr(bi))?;
            }
            let t0 = Instant::now();
            let mut c = Vec::new();
            let r = self.backends[bi].run(step, &mut c);
            r.map_err(self.berr(bi))?;
            seconds.push(t0.elapsed().as_secs_f64());
            let (audits, deviations) = (&mut self.audits[bi], &mut self.deviations[bi]);
            c.retain(|cap| {
                if let Some(rest) = cap.name.strip_prefix(NEAR_TIE_PREFIX) {
                    if let CaptureValues::I64(rows) = &cap.values {
                        near_ties.push(NearTiesResolved {
                            backend: bi,
                            capture: rest.to_string(),
                            rows: rows.iter().map(|&r| r.max(0) as usize).collect(),
                        });
                    }
                    return false;
                }
                let Some(rest) = cap.name.strip_prefix(TIE_AUDIT_PREFIX) else {
                    return true;
                };
                if let (Some(key), CaptureValues::I64(v)) = (audit_key(rest), &cap.values) {
                    let k: i64 = v.iter().sum();
                    audits.insert(key, k);
                    *deviations += k;
                }
                false
            });
            if bi == 0 && self.live() && self.opts.mode == Mode::Isolated {
                if let Some(r) = self.recorded.regimes.last_mut() {
                    for cap in c.iter().filter(|c| !c.is_diagnostic()) {
                        r.captures.insert(cap.name.clone(), cap.clone());
                    }
                }
            }
            caps.push(c);
        }
        let (results, other_violations, cross_missing) = self.compare_step(step, &caps);
        self.step_index += 1;
        let regime_end = if self.step_index >= self.steps.len() {
            self.previous = caps.swap_remove(0);
            Some(self.end_regime())
        } else {
            None
        };
        Ok(Some(StepOutcome {
            regime_index,
            regime,
            start_pos,
            step,
            results,
            other_violations,
            not_isolated,
            near_ties,
            cross_missing,
            seconds,
            regime_end,
        }))
    }

    /// The reference's selections for `step` (its MoE routing), from the reference backend's
    /// captures of the step just run (`reference_caps`, a live reference) or the recorded
    /// reference's whole tensor; the near-tie bar is the gate's f32-chain bar at the model's
    /// dims.
    fn hints_for(&self, step: Step, reference_caps: &[Capture]) -> SelectionHints {
        use crate::golden::policy::{f32_chain_tol, ATLAS_GATE_TERMS};
        let mut hints = SelectionHints {
            moe_score_tol: self.cfg.as_ref().map_or(
                f32_chain_tol(ATLAS_GATE_TERMS, ATLAS_GATE_TERMS) as f32,
                super::triage::routing_near_tie_abs,
            ),
            ..Default::default()
        };
        let Step::Block(l) = step else {
            return hints;
        };
        let name = format!("L{l}.moe_indices");
        let routing = if self.live() {
            reference_caps
                .iter()
                .find(|c| c.name == name)
                .and_then(|c| match &c.values {
                    CaptureValues::I64(v) => Some(v.clone()),
                    _ => None,
                })
        } else {
            self.reference
                .seeds(self.regime)
                .and_then(|s| s.full_i64(0, &name))
        };
        if let Some(v) = routing {
            hints.moe_indices.insert(l, v);
        }
        hints
    }

    fn seed(&mut self, bi: usize, step: Step) -> Result<Vec<String>, SessionError> {
        let regime = self.regime;
        let reference = self.reference.clone();
        let seeds: Option<Box<dyn SeedTensors + '_>> = if self.live() {
            Some(Box::new(self.recorded.seeds_at(regime)))
        } else {
            reference.seeds(regime)
        };
        let Some(seeds) = seeds else {
            return Ok(vec!["the reference holds no tensors to reseed from".into()]);
        };
        let name = self.names[bi].clone();
        let regime_name = reference.regime_name(regime);
        self.backends[bi]
            .seed(step, seeds.as_ref())
            .map_err(|source| SessionError::Backend {
                regime: regime_name,
                backend: name,
                source: Box::new(source),
            })
    }

    fn end_regime(&mut self) -> RegimeEnd {
        let regime = self.regime;
        let expected = self.reference.expected_names(regime);
        let wanted = |n: &str| self.opts.only.as_ref().is_none_or(|re| re.is_match(n));
        let missing = self
            .produced
            .iter()
            .map(|p| {
                expected
                    .iter()
                    .filter(|n| wanted(n) && !p.contains(n.as_str()))
                    .cloned()
                    .collect()
            })
            .collect();
        let stop = self
            .opts
            .stop_after_regime
            .as_deref()
            .is_some_and(|s| s == self.reference.regime_name(regime));
        self.start_pos += self.regime_len;
        self.regime += 1;
        self.step_index = 0;
        self.begun = false;
        if stop {
            self.finished = true;
        }
        RegimeEnd { missing }
    }

    /// Run every remaining step, handing each outcome to `each`.
    pub fn run_to_end(&mut self, mut each: impl FnMut(&StepOutcome)) -> Result<(), SessionError> {
        for outcome in std::iter::from_fn(|| self.next_step().transpose()) {
            each(&outcome?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_total_counts_only_the_layer_range_before_and_after_a_regime() {
        use crate::session::reference::GoldenReference;
        let golden = crate::golden::embedded::default_golden().expect("embedded golden");
        let reference: SharedReference = std::sync::Arc::new(
            GoldenReference::new(std::sync::Arc::new(golden.clone())).expect("reference"),
        );
        let mut oracle = crate::session::oracle_for(&golden).expect("oracle");
        let all = oracle.steps().len();
        oracle.set_layer_range(Some(0..=1)).expect("layers 0-1");
        let ranged = oracle.steps().len();
        assert!(ranged < all, "{ranged} of {all}");
        let regimes = reference.regime_count();
        let stepper = Stepper::new(reference, vec![Box::new(oracle)], CheckOptions::default())
            .expect("stepper");
        // Before the first regime begins (and, the same code path, after each one ends).
        assert_eq!(stepper.steps_total(), Some(ranged * regimes));
    }

    /// The oracle, recording every hint it is handed (and taking none).
    struct Hinted {
        inner: crate::oracle::Oracle,
        got: std::sync::Arc<std::sync::Mutex<Vec<SelectionHints>>>,
    }

    impl Backend for Hinted {
        fn name(&self) -> String {
            "hinted".into()
        }
        fn begin(&mut self, ids: &[i64], sp: usize) -> Result<(), crate::model::BackendError> {
            self.inner.begin(ids, sp)
        }
        fn steps(&self) -> Vec<Step> {
            self.inner.steps()
        }
        fn run(
            &mut self,
            step: Step,
            sink: &mut Vec<Capture>,
        ) -> Result<(), crate::model::BackendError> {
            self.inner.run(step, sink)
        }
        fn seed(
            &mut self,
            step: Step,
            reference: &dyn SeedTensors,
        ) -> Result<Vec<String>, crate::model::BackendError> {
            self.inner.seed(step, reference)
        }
        fn hint(&mut self, hints: &SelectionHints) -> Result<bool, crate::model::BackendError> {
            self.got.lock().expect("hints").push(hints.clone());
            Ok(false)
        }
    }

    #[test]
    fn a_recorded_reference_hints_every_backend_with_its_routing() {
        use crate::session::reference::GoldenReference;
        let golden = crate::golden::embedded::default_golden().expect("embedded golden");
        let reference: SharedReference = std::sync::Arc::new(
            GoldenReference::new(std::sync::Arc::new(golden.clone())).expect("reference"),
        );
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let backend = Hinted {
            inner: crate::session::oracle_for(&golden).expect("oracle"),
            got: got.clone(),
        };
        let opts = CheckOptions {
            stop_after_regime: Some(golden.regimes[0].name.clone()),
            ..CheckOptions::default()
        };
        let mut stepper = Stepper::new(reference, vec![Box::new(backend)], opts).expect("stepper");
        stepper.run_to_end(|_| {}).expect("run");
        let got = got.lock().expect("hints");
        let regime = &golden.regimes[0];
        let cfg = crate::session::model_of(&golden).expect("config").0;
        // One hint per step; each block's carries the golden's whole routing of that block.
        let blocks: Vec<&SelectionHints> =
            got.iter().filter(|h| !h.moe_indices.is_empty()).collect();
        assert_eq!(blocks.len(), cfg.n_layers, "{got:?}");
        for (l, h) in blocks.iter().enumerate() {
            let want = regime
                .get(&format!("L{l}.moe_indices"))
                .and_then(|c| c.full_i64())
                .expect("whole routing in the golden");
            assert_eq!(h.moe_indices.get(&l), Some(&want), "L{l}");
            assert_eq!(h.moe_score_tol, crate::golden::policy::F32_TOL as f32);
        }
    }

    #[test]
    fn audit_keys_by_selection() {
        assert_eq!(audit_key("shared.L2.topk_idxs"), Some("topk"));
        assert_eq!(audit_key("L0.moe_indices"), Some("moe"));
        assert_eq!(audit_key("shared.L4.candidates"), Some("candidates"));
        assert_eq!(audit_key("L0.sa_o"), None);
    }
}
