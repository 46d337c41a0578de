//! A background runner for the app: it owns the backends on a worker thread, runs them step by
//! step over a golden's regimes (chained or isolated), compares every capture with the golden and
//! with the first backend (triaging every top-k disagreement of an index capture), measures each
//! backend's error against the capture's error budget, checks each backend's own captures
//! against the graph's invariants (as `golden-lens check` does), and streams
//! results, progress and errors back over a channel. The UI thread only sends requests and drains
//! events, so it never blocks on a forward. [`run_localize`] is the app's localisation job.

use super::budget::{budget_for, observed_over_budget, reference_magnitude, within_budget, Budget};
use super::invariants::{check_step, Violation};
use super::localize::{is_step_input, Counterfactual, Localization, RecordedRun};
use super::triage::{TopkTriage, TriageState};
use super::{model_of, regime_inputs, GoldenSeeds, Mode, SessionError};
use crate::golden::compare::{compare_full, compare_with_golden, Comparison, Values};
use crate::golden::names::{capture_kind, parse_capture_name, CaptureKind};
use crate::golden::policy::{policy_for_capture, strict_policy_for_capture};
use crate::golden::Golden;
use crate::model::{Backend, Capture, CaptureValues, ModelConfig, Step};
use crate::oracle::faults::{Fault, FaultPlan};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;

/// A backend the controller can move to its worker thread.
pub type BoxedBackend = Box<dyn Backend + Send>;

/// Builds a fresh set of backends (the first one is the reference for cross comparisons, i.e.
/// the CPU oracle). Called at start and on every reset, because backends carry state across
/// regimes and a reset must start from nothing.
pub type BackendFactory = Box<dyn Fn() -> Result<Vec<BoxedBackend>, String> + Send>;

/// What the UI asks the worker to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Run every remaining step of every regime.
    RunAll,
    /// Run the next step only.
    StepOne,
    /// Run steps until `Block(layer)` of the current regime has run (or the regime ends).
    RunToLayer(usize),
    /// Drop every result, rebuild the backends and start again at the first step.
    Reset,
    /// Switch between chained and isolated mode (implies a reset).
    SetMode(Mode),
    /// Hold bf16 captures to bit-exactness (implies a reset).
    SetStrict(bool),
}

/// One backend's side of a capture.
#[derive(Debug, Clone)]
pub struct BackendCapture {
    /// The backend's short name (`cpu`, `gpu`).
    pub backend: String,
    /// The whole tensor the backend produced.
    pub values: Arc<CaptureValues>,
    /// This backend against the golden, when the golden holds the capture.
    pub vs_golden: Option<Comparison>,
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
    /// The budget of capture `name` against `golden`, and how much of it `cmp` used.
    pub fn new(
        cfg: &ModelConfig,
        name: &str,
        golden: &crate::golden::GoldenCapture,
        cmp: &Comparison,
    ) -> BudgetCheck {
        let budget = budget_for(cfg, name, reference_magnitude(golden));
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
    /// Top-k triage of an index capture (`sa_topk_idxs`, `shared.L*.topk_idxs`, `moe_indices`)
    /// against the reference; None for every other capture.
    pub triage: Option<CaptureTriage>,
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

/// Tie flips, near ties and real disagreements summed over many index captures.
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
        self.captures += 1;
        self.rows += t.triage.rows;
        self.rows_differing += t.triage.rows_differing;
        self.tie_flips += t.triage.tie_flips;
        self.near_ties += t.triage.near_ties;
        self.real += t.triage.real;
        if !t.scores_known {
            self.unscored_rows += t.triage.rows_differing;
        }
    }
}

/// Everything known about one capture after its step ran on every backend.
#[derive(Debug, Clone)]
pub struct CaptureResult {
    /// Position in execution order over the whole run (0-based).
    pub order: usize,
    /// Index of the regime in the golden.
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
    /// False when any comparison failed.
    pub fn pass(&self) -> bool {
        self.comparisons().iter().all(|(_, c)| c.pass)
    }
    /// The largest `max_abs_err / tol` over every comparison (0 when there is none).
    pub fn worst_ratio(&self) -> f64 {
        self.comparisons()
            .iter()
            .map(|(_, c)| c.worst_ratio)
            .fold(0.0, f64::max)
    }
    /// The first backend's comparison with the golden, as the CLI's report row.
    pub fn to_row(&self) -> Option<super::CaptureRow> {
        let first = self.per_backend.first()?;
        Some(super::CaptureRow {
            regime: self.regime.clone(),
            step: self.step,
            name: self.name.clone(),
            kind: self.kind,
            shape: self.shape.clone(),
            cmp: first.vs_golden.clone()?,
        })
    }
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

/// What the worker reports.
#[derive(Debug, Clone)]
pub enum Event {
    /// The backends were (re)built: their names, in order.
    Backends(Vec<String>),
    /// All captures of one step, on every backend.
    StepDone {
        regime: String,
        step: Step,
        results: Vec<CaptureResult>,
        /// Invariant violations of captures only a later backend produced (so no result holds
        /// them), with that backend's name; normally empty.
        other_violations: Vec<(String, Violation)>,
    },
    /// Captures the golden holds that no backend produced in a finished regime.
    Missing {
        regime: String,
        names: Vec<String>,
    },
    /// Steps that could not be fully reseeded in isolated mode.
    NotIsolated {
        regime: String,
        step: Step,
        missing: Vec<String>,
    },
    Progress(Progress),
    /// Every result so far is void (reset or mode change).
    Cleared,
    /// A request stopped because of the cancel flag.
    Cancelled,
    /// A backend failed; the run stops where it is.
    Error(String),
}

/// The UI's handle on the worker thread.
pub struct Controller {
    requests: Sender<Request>,
    events: Receiver<Event>,
    cancel: Arc<AtomicBool>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl Controller {
    /// Start a worker over `golden`, building backends with `factory`. `notify` is called after
    /// every event (the app passes `ctx.request_repaint`).
    pub fn spawn(
        golden: Arc<Golden>,
        factory: BackendFactory,
        mode: Mode,
        notify: Box<dyn Fn() + Send>,
    ) -> Controller {
        let (req_tx, req_rx) = channel::<Request>();
        let (ev_tx, ev_rx) = channel::<Event>();
        let cancel = Arc::new(AtomicBool::new(false));
        let worker_cancel = cancel.clone();
        let worker = std::thread::Builder::new()
            .name("golden-lens session".into())
            .spawn(move || {
                let mut w = Worker::new(golden, factory, mode, ev_tx, notify, worker_cancel);
                w.rebuild();
                while let Ok(req) = req_rx.recv() {
                    w.cancel.store(false, Ordering::SeqCst);
                    w.handle(req);
                }
            })
            .ok();
        Controller {
            requests: req_tx,
            events: ev_rx,
            cancel,
            worker,
        }
    }

    /// Queue a request; requests run one after the other.
    pub fn send(&self, req: Request) {
        // A closed channel means the worker is gone; the UI notices through `is_alive`.
        let _ = self.requests.send(req);
    }

    /// Ask the running request to stop after its current step.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }

    /// Every event reported since the last call, without waiting.
    pub fn drain(&self) -> Vec<Event> {
        let mut out = Vec::new();
        loop {
            match self.events.try_recv() {
                Ok(e) => out.push(e),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return out,
            }
        }
    }

    /// Block until an event arrives or `timeout` passes (tests and the headless path).
    pub fn recv_timeout(&self, timeout: std::time::Duration) -> Option<Event> {
        self.events.recv_timeout(timeout).ok()
    }

    /// False once the worker thread has ended.
    pub fn is_alive(&self) -> bool {
        self.worker.as_ref().is_some_and(|w| !w.is_finished())
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::SeqCst);
        // Dropping the sender ends the worker's loop after its current step; no join, so a
        // closing window never waits for a long step.
    }
}

struct Worker {
    golden: Arc<Golden>,
    factory: BackendFactory,
    mode: Mode,
    strict: bool,
    events: Sender<Event>,
    notify: Box<dyn Fn() + Send>,
    cancel: Arc<AtomicBool>,
    backends: Vec<BoxedBackend>,
    inputs: Vec<(String, Vec<i64>, usize)>,
    /// Regime index and step index of the next step to run.
    regime: usize,
    step: usize,
    /// The steps of the current regime (from the first backend after `begin`).
    steps: Vec<Step>,
    begun: bool,
    order: usize,
    steps_done: usize,
    steps_total: usize,
    produced: std::collections::HashSet<String>,
    failed: bool,
    /// The golden's model config (top-k triage needs the expert count and window size).
    cfg: Option<ModelConfig>,
    /// One top-k triage walk per backend after the first (against the first).
    triage: Vec<TriageState>,
    /// The reference emitted diagnostic captures (the scores its top-k ran on) in the current
    /// forward: it runs with diagnostics on.
    diagnostics_seen: bool,
}

impl Worker {
    fn new(
        golden: Arc<Golden>,
        factory: BackendFactory,
        mode: Mode,
        events: Sender<Event>,
        notify: Box<dyn Fn() + Send>,
        cancel: Arc<AtomicBool>,
    ) -> Worker {
        let steps_per_regime =
            Step::sequence(golden.fixture.n_layers, &golden.fixture.engram_layer_ids).len();
        let steps_total = steps_per_regime * golden.regimes.len();
        Worker {
            golden,
            factory,
            mode,
            strict: false,
            events,
            notify,
            cancel,
            backends: Vec::new(),
            inputs: Vec::new(),
            regime: 0,
            step: 0,
            steps: Vec::new(),
            begun: false,
            order: 0,
            steps_done: 0,
            steps_total,
            produced: Default::default(),
            failed: false,
            cfg: None,
            triage: Vec::new(),
            diagnostics_seen: false,
        }
    }

    fn emit(&self, e: Event) {
        let _ = self.events.send(e);
        (self.notify)();
    }

    fn progress(&self, busy: bool) {
        self.emit(Event::Progress(Progress {
            steps_done: self.steps_done,
            steps_total: self.steps_total,
            last_step: None,
            busy,
            finished: self.finished(),
        }));
    }

    fn finished(&self) -> bool {
        self.regime >= self.inputs.len()
    }

    fn rebuild(&mut self) {
        self.regime = 0;
        self.step = 0;
        self.begun = false;
        self.order = 0;
        self.steps_done = 0;
        self.failed = false;
        self.produced.clear();
        self.backends.clear();
        self.triage.clear();
        self.emit(Event::Cleared);
        if self.cfg.is_none() {
            // After `Cleared`, so the UI hears about the reset first (the golden never changes
            // under a worker, so once is enough).
            self.cfg = model_of(&self.golden).ok().map(|(cfg, _)| cfg);
        }
        match regime_inputs(&self.golden) {
            Ok(i) => self.inputs = i,
            Err(e) => {
                self.inputs.clear();
                self.failed = true;
                self.emit(Event::Error(e.to_string()));
                return;
            }
        }
        match (self.factory)() {
            Ok(b) if !b.is_empty() => {
                self.emit(Event::Backends(b.iter().map(|b| b.name()).collect()));
                self.triage = (1..b.len()).map(|_| TriageState::default()).collect();
                self.backends = b;
            }
            Ok(_) => {
                self.failed = true;
                self.emit(Event::Error("no backend to run".into()));
            }
            Err(e) => {
                self.failed = true;
                self.emit(Event::Error(e));
            }
        }
        self.progress(false);
    }

    fn handle(&mut self, req: Request) {
        match req {
            Request::Reset => self.rebuild(),
            Request::SetMode(m) => {
                self.mode = m;
                self.rebuild();
            }
            Request::SetStrict(s) => {
                self.strict = s;
                self.rebuild();
            }
            Request::StepOne => {
                self.progress(true);
                self.run_one();
                self.progress(false);
            }
            Request::RunAll => self.run_until(None),
            Request::RunToLayer(layer) => self.run_until(Some(layer)),
        }
    }

    /// Run steps until the run ends, fails or is cancelled; with `Some(layer)`, stop once
    /// `Block(layer)` of the regime current at the start has run.
    fn run_until(&mut self, layer: Option<usize>) {
        let start_regime = self.regime;
        self.progress(true);
        while !self.finished() && !self.failed {
            if self.cancel.load(Ordering::SeqCst) {
                self.emit(Event::Cancelled);
                break;
            }
            let before = (self.regime, self.steps.get(self.step).copied(), self.begun);
            self.run_one();
            if let Some(l) = layer {
                let ran_target =
                    before.0 == start_regime && before.2 && before.1 == Some(Step::Block(l));
                if ran_target || self.regime != start_regime {
                    break;
                }
            }
        }
        self.progress(false);
    }

    fn run_one(&mut self) {
        if self.finished() || self.failed {
            return;
        }
        let (regime_name, ids, start) = self.inputs[self.regime].clone();
        if !self.begun {
            let mut began = Ok(());
            for b in &mut self.backends {
                if let Err(e) = b.begin(&ids, start) {
                    began = Err((b.name(), e));
                    break;
                }
            }
            if let Err((name, e)) = began {
                self.fail(&regime_name, &name, e);
                return;
            }
            self.steps = self.backends.first().map(|b| b.steps()).unwrap_or_default();
            self.step = 0;
            self.begun = true;
            self.produced.clear();
            for t in &mut self.triage {
                t.begin();
            }
            self.diagnostics_seen = false;
        }
        let Some(&step) = self.steps.get(self.step) else {
            self.end_regime();
            return;
        };
        let mut per_backend: Vec<(String, Vec<Capture>)> = Vec::new();
        for bi in 0..self.backends.len() {
            let name = self.backends[bi].name();
            if self.mode == Mode::Isolated {
                let seeded = GoldenSeeds::new(&self.golden, self.regime)
                    .map_err(|e| e.to_string())
                    .and_then(|seeds| {
                        self.backends[bi]
                            .seed(step, &seeds)
                            .map_err(|e| e.to_string())
                    });
                match seeded {
                    Ok(missing) if !missing.is_empty() && bi == 0 => {
                        self.emit(Event::NotIsolated {
                            regime: regime_name.clone(),
                            step,
                            missing,
                        });
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.failed = true;
                        self.emit(Event::Error(format!("{regime_name} {step} ({name}): {e}")));
                        return;
                    }
                }
            }
            let mut caps = Vec::new();
            if let Err(e) = self.backends[bi].run(step, &mut caps) {
                self.fail(&regime_name, &name, e);
                return;
            }
            per_backend.push((name, caps));
        }
        let (results, other_violations) = self.compare_step(&regime_name, step, per_backend);
        self.step += 1;
        self.steps_done += 1;
        self.emit(Event::StepDone {
            regime: regime_name.clone(),
            step,
            results,
            other_violations,
        });
        let mut p = Progress {
            steps_done: self.steps_done,
            steps_total: self.steps_total,
            last_step: Some(format!("{regime_name} {step}")),
            busy: true,
            finished: false,
        };
        if self.step >= self.steps.len() {
            self.end_regime();
            p.finished = self.finished();
        }
        self.emit(Event::Progress(p));
    }

    fn fail(&mut self, regime: &str, backend: &str, e: crate::model::BackendError) {
        self.failed = true;
        self.emit(Event::Error(format!(
            "regime {regime}, backend {backend}: {e}"
        )));
    }

    fn end_regime(&mut self) {
        let regime_name = self.inputs[self.regime].0.clone();
        if let Some(r) = self.golden.regimes.get(self.regime) {
            let names: Vec<String> = r
                .captures
                .iter()
                .filter(|c| !self.produced.contains(&c.name))
                .map(|c| c.name.clone())
                .collect();
            if !names.is_empty() {
                self.emit(Event::Missing {
                    regime: regime_name,
                    names,
                });
            }
        }
        self.regime += 1;
        self.step = 0;
        self.begun = false;
    }

    fn compare_step(
        &mut self,
        regime_name: &str,
        step: Step,
        per_backend: Vec<(String, Vec<Capture>)>,
    ) -> (Vec<CaptureResult>, Vec<(String, Violation)>) {
        let triage = self.triage_step(&per_backend);
        // Each backend's own captures against the graph's invariants, as `check` runs them.
        let start = self.inputs.get(self.regime).map_or(0, |i| i.2);
        let mut violations: Vec<Vec<Violation>> = per_backend
            .iter()
            .map(|(_, caps)| {
                self.cfg
                    .as_ref()
                    .map(|cfg| check_step(cfg, start, caps))
                    .unwrap_or_default()
            })
            .collect();
        let regime = &self.golden.regimes[self.regime];
        let Some((_, first_caps)) = per_backend.first() else {
            return (Vec::new(), Vec::new());
        };
        let mut results = Vec::new();
        for cap in first_caps.iter().filter(|c| !c.is_diagnostic()) {
            self.produced.insert(cap.name.clone());
            let golden = regime.get(&cap.name);
            let is_int = golden.map_or(matches!(cap.values, CaptureValues::I64(_)), |g| g.is_int());
            let policy = if self.strict {
                strict_policy_for_capture(&cap.name, is_int)
            } else {
                policy_for_capture(&cap.name, is_int)
            };
            let mut sides = Vec::new();
            let mut cross = Vec::new();
            for (bi, (bname, caps)) in per_backend.iter().enumerate() {
                let Some(c) = caps.iter().find(|c| c.name == cap.name) else {
                    continue;
                };
                let vs_golden =
                    golden.map(|g| compare_with_golden(values_of(&c.values), &c.shape, g, &policy));
                let budget = match (&self.cfg, golden, &vs_golden) {
                    (Some(cfg), Some(g), Some(cmp)) => {
                        Some(BudgetCheck::new(cfg, &cap.name, g, cmp))
                    }
                    _ => None,
                };
                let own: Vec<Violation> = match violations.get_mut(bi) {
                    Some(vs) => {
                        let (here, rest) = std::mem::take(vs)
                            .into_iter()
                            .partition(|v| v.capture == cap.name);
                        *vs = rest;
                        here
                    }
                    None => Vec::new(),
                };
                if bi > 0 {
                    // The first backend emitted `cap`, so it is `sides[0]`; backend `bi`'s triage
                    // walk is `bi - 1`.
                    cross.push(CrossComparison {
                        test: bname.clone(),
                        reference: per_backend[0].0.clone(),
                        cmp: compare_full(
                            values_of(&c.values),
                            values_of(&cap.values),
                            &cap.shape,
                            &policy,
                        ),
                        triage: triage
                            .get(bi - 1)
                            .and_then(|ts| ts.iter().find(|t| t.triage.capture == cap.name))
                            .cloned(),
                    });
                }
                sides.push(BackendCapture {
                    backend: bname.clone(),
                    values: Arc::new(c.values.clone()),
                    vs_golden,
                    budget,
                    violations: own,
                });
            }
            results.push(CaptureResult {
                order: self.order,
                regime_index: self.regime,
                regime: regime_name.to_string(),
                step,
                name: cap.name.clone(),
                kind: capture_kind(&cap.name),
                shape: cap.shape.clone(),
                per_backend: sides,
                cross,
            });
            self.order += 1;
        }
        let other = per_backend
            .iter()
            .zip(violations)
            .flat_map(|((name, _), vs)| vs.into_iter().map(move |v| (name.clone(), v)))
            .collect();
        (results, other)
    }
}

impl Worker {
    /// Top-k triage of this step's index captures, per backend after the first, against the
    /// first (whose diagnostic captures carry the scores).
    fn triage_step(&mut self, per_backend: &[(String, Vec<Capture>)]) -> Vec<Vec<CaptureTriage>> {
        let (Some(cfg), Some((_, reference))) = (&self.cfg, per_backend.first()) else {
            return Vec::new();
        };
        let start = self.inputs.get(self.regime).map_or(0, |i| i.2);
        self.diagnostics_seen |= reference.iter().any(Capture::is_diagnostic);
        let mut out = Vec::new();
        for (state, (_, test)) in self.triage.iter_mut().zip(per_backend.iter().skip(1)) {
            let upstream = upstream_rel_err(reference, test);
            let step = state.step(cfg, start, reference, test, upstream);
            out.push(
                step.into_iter()
                    .map(|t| {
                        let parsed = parse_capture_name(&t.capture);
                        let scores_known = if parsed.base == "moe_indices" {
                            let want = format!("diag.L{}.gate_biased", parsed.layer.unwrap_or(0));
                            parsed.layer.is_some() && reference.iter().any(|c| c.name == want)
                        } else {
                            self.diagnostics_seen
                        };
                        CaptureTriage {
                            triage: t,
                            scores_known,
                        }
                    })
                    .collect(),
            );
        }
        out
    }
}

/// The worst relative error of a step's float input captures (`h_in`, `pre_mix_in`, ...) of
/// `test` against `reference`: `max |t - r| / max |r|`, 0 when there are none. Top-k triage
/// widens its near-tie bound by it.
pub fn upstream_rel_err(reference: &[Capture], test: &[Capture]) -> f32 {
    let mut worst = 0f32;
    for t in test.iter().filter(|c| is_step_input(&c.name)) {
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

fn values_of(v: &CaptureValues) -> Values<'_> {
    match v {
        CaptureValues::F32(v) => Values::F32(v),
        CaptureValues::I64(v) => Values::I64(v),
    }
}

/// What the app's localisation runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LocalizeRequest {
    /// Faults (`KIND@CAPTURE`, e.g. `bitflip@L2.attn_out`) to plant into a CPU oracle used as the
    /// test backend instead of the app's own; empty: the app's test backend.
    pub plant: Vec<String>,
    /// Judge local error with the Atlas bars instead of the strict (bf16 bit-exact) policies.
    pub atlas: bool,
    /// Also run the counterfactual with the reference's selections pinned from this layer on.
    pub pin_from: Option<usize>,
}

/// A finished localisation.
#[derive(Debug, Clone)]
pub struct LocalizeOutcome {
    /// What the reference and the test backend were (`cpu oracle`, `gpu`, `cpu oracle with …`).
    pub reference: String,
    pub test: String,
    pub localization: Localization,
    pub counterfactual: Option<Counterfactual>,
}

/// Localise the error of a test backend against the oracle over every regime of `golden` (the
/// app runs this on a worker thread). `factory` builds the app's backends, the oracle first:
/// without planted faults the test backend is the last one it builds (the GPU backend when the
/// app has one, else a second oracle, which localises nothing). With `request.plant`, reference
/// and test are CPU oracles on the golden's own weights, the test one with those faults.
pub fn run_localize(
    golden: &Golden,
    factory: &dyn Fn() -> Result<Vec<BoxedBackend>, String>,
    request: &LocalizeRequest,
) -> Result<LocalizeOutcome, String> {
    let faults: Vec<Fault> = request
        .plant
        .iter()
        .map(|p| {
            Fault::parse(p.trim()).ok_or_else(|| {
                format!(
                    "planted fault `{p}`: expected KIND@CAPTURE (kinds: bitflip, perturb[=d], \
                     dropped-workgroup, stale-buffer, rope-sign, window-off-by-one, tie-order), \
                     e.g. bitflip@L2.attn_out"
                )
            })
        })
        .collect::<Result<_, _>>()?;
    if let Some(layer) = request.pin_from {
        let n_layers = golden.fixture.n_layers;
        if layer >= n_layers {
            return Err(format!(
                "pin from layer {layer}: the model has layers 0..={}",
                n_layers.saturating_sub(1)
            ));
        }
    }
    let planted = !faults.is_empty();
    let (recorded, reference_name, other_backend) = if planted {
        let mut oracle = super::oracle_for(golden).map_err(|e| e.to_string())?;
        let recorded = RecordedRun::record(golden, &mut oracle).map_err(|e| e.to_string())?;
        (recorded, "cpu oracle".to_string(), false)
    } else {
        let mut backends = factory()?;
        let other = backends.len() > 1;
        let Some(first) = backends.first_mut() else {
            return Err("no backend to run".into());
        };
        let name = first.name();
        let recorded = RecordedRun::record(golden, first.as_mut()).map_err(|e| e.to_string())?;
        (recorded, name, other)
    };
    // An oracle under test (planted faults, or the reference itself) is held to bit-exactness;
    // another backend (the GPU) to the GPU policy against the oracle, as `check` and `localize
    // --backend gpu` do; "Atlas bars" overrides both.
    let judge = if request.atlas {
        super::localize::Judge::Atlas
    } else if other_backend {
        super::localize::Judge::Gpu
    } else {
        super::localize::Judge::Strict
    };
    let mut test_name = String::new();
    let mut make = || -> Result<Box<dyn Backend>, SessionError> {
        if planted {
            let mut o = super::oracle_for(golden)?;
            o.faults = FaultPlan::new(faults.clone());
            test_name = format!("cpu oracle with {}", request.plant.join(", "));
            return Ok(Box::new(o));
        }
        let mut backends = factory().map_err(|msg| SessionError::Golden {
            source_path: golden.source.display().to_string(),
            msg: format!("building the test backend: {msg}"),
        })?;
        let Some(test) = backends.pop() else {
            return Err(SessionError::Golden {
                source_path: golden.source.display().to_string(),
                msg: "no backend to run".into(),
            });
        };
        test_name = if backends.is_empty() {
            format!("{} (the reference itself: no other backend)", test.name())
        } else {
            test.name()
        };
        Ok(test)
    };
    let localization = super::localize::localize_with(golden, &recorded, &mut make, judge)
        .map_err(|e| e.to_string())?;
    let counterfactual = match request.pin_from {
        Some(layer) => Some(
            super::localize::counterfactual(golden, &recorded, &mut make, layer)
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    Ok(LocalizeOutcome {
        reference: reference_name,
        test: test_name,
        localization,
        counterfactual,
    })
}

/// The step-local first divergence: the first capture (in execution order) whose comparison
/// with the golden fails. Meaningful as "where the error starts" in isolated mode; in chained
/// mode it is the first place accumulated error shows.
pub fn first_divergence(results: &[CaptureResult]) -> Option<&CaptureResult> {
    results.iter().find(|r| !r.pass())
}

/// Run a controller to the end synchronously (tests, headless use): sends `RunAll` and
/// collects every result until progress says finished, an error arrives, or `timeout` passes.
pub fn run_all_blocking(
    controller: &Controller,
    timeout: std::time::Duration,
) -> Result<Vec<CaptureResult>, String> {
    let deadline = std::time::Instant::now() + timeout;
    controller.send(Request::RunAll);
    let mut out = Vec::new();
    let mut seen_busy = false;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(format!("run did not finish within {timeout:?}"));
        }
        match controller.recv_timeout(left) {
            Some(Event::StepDone { results, .. }) => out.extend(results),
            Some(Event::Error(e)) => return Err(e),
            Some(Event::Progress(p)) => {
                seen_busy |= p.busy;
                if seen_busy && !p.busy {
                    return Ok(out);
                }
            }
            Some(_) => {}
            None => return Err(format!("run did not finish within {timeout:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::embedded::default_golden;
    use std::time::Duration;

    /// Upper bound on a full run of the tiny golden in the test profile (a hang guard).
    const RUN_TIMEOUT: Duration = Duration::from_secs(600);
    /// How long to wait for one event.
    const EVENT_TIMEOUT: Duration = Duration::from_secs(120);

    fn spawn(golden: Arc<Golden>, mode: Mode) -> Controller {
        let g = golden.clone();
        let factory: BackendFactory = Box::new(move || {
            super::super::oracle_for(&g)
                .map(|o| vec![Box::new(o) as BoxedBackend])
                .map_err(|e| e.to_string())
        });
        Controller::spawn(golden, factory, mode, Box::new(|| {}))
    }

    fn next_progress(c: &Controller) -> Progress {
        loop {
            match c.recv_timeout(EVENT_TIMEOUT) {
                Some(Event::Progress(p)) if !p.busy => return p,
                Some(Event::Error(e)) => panic!("worker error: {e}"),
                Some(_) => {}
                None => panic!("no event within {EVENT_TIMEOUT:?}"),
            }
        }
    }

    #[test]
    fn run_all_matches_run_check() {
        let golden = Arc::new(default_golden().expect("embedded golden"));
        let c = spawn(golden.clone(), Mode::Chained);
        let results = run_all_blocking(&c, RUN_TIMEOUT).expect("run");
        let mut oracle = super::super::oracle_for(&golden).expect("oracle");
        let opts = super::super::CheckOptions {
            invariants: Some(super::super::model_of(&golden).expect("config").0),
            ..Default::default()
        };
        let report = super::super::run_check(&golden, &mut oracle, &opts).expect("check");
        let rows: Vec<_> = results
            .iter()
            .filter_map(|r| r.to_row().map(|row| (row, r)))
            .collect();
        assert_eq!(rows.len(), report.rows.len());
        for ((a, r), b) in rows.iter().zip(&report.rows) {
            assert_eq!((&a.regime, &a.name, a.step), (&b.regime, &b.name, b.step));
            assert_eq!(a.cmp, b.cmp, "{}", a.name);
            // The same budget and observed/budget as `check` prints.
            let (budget, over) = report.budget_ratio(b).expect("a budget");
            let mine = r.per_backend[0].budget.as_ref().expect("a budget");
            assert_eq!((&mine.budget, mine.ratio), (&budget, over), "{}", a.name);
            assert!(mine.within(), "{}", a.name);
        }
        // The same invariant violations as `check` (none on the oracle).
        assert_eq!(
            results
                .iter()
                .map(CaptureResult::violation_count)
                .sum::<usize>(),
            report.violations.len()
        );
        assert!(report.violations.is_empty());
        assert_eq!(results.len(), golden.capture_count());
        assert!(results.iter().all(CaptureResult::pass));
        assert!(first_divergence(&results).is_none());
        assert!(results.iter().enumerate().all(|(i, r)| r.order == i));
    }

    #[test]
    fn step_run_to_layer_and_reset() {
        let golden = Arc::new(default_golden().expect("embedded golden"));
        let c = spawn(golden, Mode::Chained);
        next_progress(&c); // the initial build
        c.send(Request::StepOne);
        let p = next_progress(&c);
        assert_eq!(p.steps_done, 1);
        c.send(Request::RunToLayer(2));
        let mut last_step = None;
        loop {
            match c.recv_timeout(EVENT_TIMEOUT) {
                Some(Event::StepDone { step, .. }) => last_step = Some(step),
                Some(Event::Progress(p)) if !p.busy => break,
                Some(_) => {}
                None => panic!("no event"),
            }
        }
        assert_eq!(last_step, Some(Step::Block(2)));
        c.send(Request::Reset);
        let mut cleared = false;
        loop {
            match c.recv_timeout(EVENT_TIMEOUT) {
                Some(Event::Cleared) => cleared = true,
                Some(Event::Progress(p)) if !p.busy => {
                    assert_eq!(p.steps_done, 0);
                    break;
                }
                Some(_) => {}
                None => panic!("no event"),
            }
        }
        assert!(cleared);
    }

    #[test]
    fn cancel_stops_a_run_early() {
        let golden = Arc::new(default_golden().expect("embedded golden"));
        let c = spawn(golden, Mode::Chained);
        next_progress(&c);
        c.send(Request::RunAll);
        // Wait for the first step, then cancel.
        loop {
            if let Some(Event::StepDone { .. }) = c.recv_timeout(EVENT_TIMEOUT) {
                break;
            }
        }
        c.cancel();
        let mut cancelled = false;
        let p = loop {
            match c.recv_timeout(EVENT_TIMEOUT) {
                Some(Event::Cancelled) => cancelled = true,
                Some(Event::Progress(p)) if !p.busy => break p,
                Some(_) => {}
                None => panic!("no event"),
            }
        };
        assert!(cancelled);
        assert!(!p.finished);
        assert!(p.steps_done < p.steps_total);
    }

    #[test]
    fn run_localize_rejects_a_bad_fault_spec_and_a_layer_out_of_range() {
        let golden = default_golden().expect("embedded golden");
        let g = golden.clone();
        let factory = move || -> Result<Vec<BoxedBackend>, String> {
            super::super::oracle_for(&g)
                .map(|o| vec![Box::new(o) as BoxedBackend])
                .map_err(|e| e.to_string())
        };
        let bad = LocalizeRequest {
            plant: vec!["flip@L2".into()],
            ..Default::default()
        };
        let e = run_localize(&golden, &factory, &bad).expect_err("bad spec");
        assert!(e.contains("planted fault `flip@L2`"), "{e}");
        let far = LocalizeRequest {
            pin_from: Some(golden.fixture.n_layers),
            ..Default::default()
        };
        let e = run_localize(&golden, &factory, &far).expect_err("layer out of range");
        assert!(e.starts_with("pin from layer"), "{e}");
        let none = || -> Result<Vec<BoxedBackend>, String> { Ok(Vec::new()) };
        let e = run_localize(&golden, &none, &LocalizeRequest::default()).expect_err("no backend");
        assert_eq!(e, "no backend to run");
    }

    #[test]
    fn isolated_mode_reports_steps_it_cannot_reseed() {
        // The sampled v3 reference golden (the embedded default is v3-full, which holds every
        // step's inputs at full resolution).
        let v3 = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/golden/reference/ds41_tiny_golden.v3.json"
        );
        let golden = Arc::new(Golden::load(std::path::Path::new(v3)).expect("v3 golden"));
        let c = spawn(golden, Mode::Isolated);
        next_progress(&c);
        c.send(Request::RunToLayer(1));
        let mut not_isolated = 0;
        loop {
            match c.recv_timeout(EVENT_TIMEOUT) {
                Some(Event::NotIsolated { .. }) => not_isolated += 1,
                Some(Event::Progress(p)) if !p.busy => break,
                Some(Event::Error(e)) => panic!("{e}"),
                Some(_) => {}
                None => panic!("no event"),
            }
        }
        // The shipped v3 golden holds layer 1's inputs only as samples.
        assert!(not_isolated > 0);
    }
}
