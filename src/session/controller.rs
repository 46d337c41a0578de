//! The app's worker: a background thread that owns the backends, drives the stepper
//! (`super::lockstep`) over the reference source one step at a time on request (run all, one
//! step, to a layer; chained or isolated; Atlas or strict bars), and streams each step's typed
//! results (`super::results`), progress and errors back over a channel. The UI thread only sends
//! requests and drains events, so it never blocks on a forward. The same stepper runs `check`, so
//! the window and the command line give the same verdicts.

use super::lockstep::Stepper;
use super::reference::{GoldenReference, SharedReference};
use super::{CheckOptions, Mode, SessionError};
use crate::golden::Golden;
use crate::model::Step;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;

use super::invariants::Violation;
pub use super::localize::{run_localize, LocalizeOutcome, LocalizeRequest};
pub use super::lockstep::BoxedBackend;
pub use super::results::{
    first_divergence, upstream_rel_err, BackendCapture, BudgetCheck, CaptureResult, CaptureTriage,
    CrossComparison, Progress, TriageTotals,
};

/// Builds a fresh set of backends (the first one is the reference for cross comparisons, i.e.
/// the CPU oracle). Called at start and on every reset, because backends carry state across
/// regimes and a reset must start from nothing.
pub type BackendFactory = Box<dyn Fn() -> Result<Vec<BoxedBackend>, SessionError> + Send>;

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
    /// The kernel workbench's re-check after a shader edit: fresh backends (on the new shaders)
    /// replay, without reporting, the steps before the first occurrence of this step (None: up
    /// to where the run stood) but never past the steps already reported, then the run goes on
    /// to the end from there (see `super::rerun`). Announced by [`Event::Rerun`].
    RerunFrom(Option<Step>),
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
        /// Invariant violations of captures no result holds, with the backend's name; normally
        /// empty.
        other_violations: Vec<(String, Violation)>,
        /// Wall seconds each backend spent in the step, in backend order.
        seconds: Vec<f64>,
    },
    /// A re-check ([`Request::RerunFrom`]) resumes after the first `kept_steps` steps reported
    /// so far (their results stand); every later result is void and is reported again, starting
    /// with `step` of `regime` (None when the run has no step left).
    Rerun {
        kept_steps: usize,
        regime: String,
        step: Option<Step>,
    },
    /// Captures the reference holds that the first backend did not produce in a finished regime.
    Missing {
        regime: String,
        names: Vec<String>,
    },
    /// Steps that could not be fully reseeded in isolated mode (the first backend's list).
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
    /// None only while the controller is being dropped (dropping it ends the worker's loop).
    requests: Option<Sender<Request>>,
    events: Receiver<Event>,
    cancel: Arc<AtomicBool>,
    worker: Option<std::thread::JoinHandle<()>>,
}

/// How long dropping a [`Controller`] waits for its worker to finish the current step and free
/// its backends. Long enough for any tiny-graph step and for tearing down a GPU backend; a
/// real-dims forward that is still inside one step is left to finish on its own.
const WORKER_JOIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

impl Controller {
    /// Start a worker over `golden`, building backends with `factory`. `notify` is called after
    /// every event (the app passes `ctx.request_repaint`).
    pub fn spawn(
        golden: Arc<Golden>,
        factory: BackendFactory,
        mode: Mode,
        notify: Box<dyn Fn() + Send>,
    ) -> Controller {
        let reference = GoldenReference::new(golden).map(|r| Arc::new(r) as SharedReference);
        Controller::spawn_on(reference, factory, mode, notify)
    }

    /// Start a worker over any reference source (a golden, tokens on a GGUF with the oracle as
    /// the live reference, an imported dump).
    pub fn spawn_on(
        reference: Result<SharedReference, SessionError>,
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
                let mut w = Worker {
                    reference,
                    factory,
                    mode,
                    strict: false,
                    events: ev_tx,
                    notify,
                    cancel: worker_cancel,
                    stepper: None,
                    steps_done: 0,
                    failed: false,
                };
                w.rebuild();
                while let Ok(req) = req_rx.recv() {
                    w.cancel.store(false, Ordering::SeqCst);
                    w.handle(req);
                }
            })
            .ok();
        Controller {
            requests: Some(req_tx),
            events: ev_rx,
            cancel,
            worker,
        }
    }

    /// Queue a request; requests run one after the other.
    pub fn send(&self, req: Request) {
        // A closed channel means the worker is gone; the UI notices through `is_alive`.
        if let Some(r) = &self.requests {
            let _ = r.send(req);
        }
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
        // Dropping the sender ends the worker's loop after its current step. Then wait, up to a
        // deadline, for the worker to drop its backends: a GPU backend torn down on a detached
        // thread while the process exits races the Vulkan driver's unload in `exit` (lavapipe
        // crashed in `__cxa_finalize` that way). Past the deadline the worker is left running, so
        // a closing window never waits long on a forward.
        self.requests = None;
        let Some(worker) = self.worker.take() else {
            return;
        };
        let start = std::time::Instant::now();
        while !worker.is_finished() {
            if start.elapsed() >= WORKER_JOIN_DEADLINE {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        // The worker has returned; a panic in it was already reported as an event or on stderr.
        let _ = worker.join();
    }
}

struct Worker {
    reference: Result<SharedReference, SessionError>,
    factory: BackendFactory,
    mode: Mode,
    strict: bool,
    events: Sender<Event>,
    notify: Box<dyn Fn() + Send>,
    cancel: Arc<AtomicBool>,
    /// The stepper over the current backends (None until built, or after a failed build).
    stepper: Option<Stepper<'static>>,
    steps_done: usize,
    failed: bool,
}

impl Worker {
    fn emit(&self, e: Event) {
        let _ = self.events.send(e);
        (self.notify)();
    }

    fn finished(&self) -> bool {
        self.stepper.as_ref().is_none_or(Stepper::finished)
    }

    fn progress_event(&self, busy: bool, last_step: Option<String>) -> Event {
        Event::Progress(Progress {
            steps_done: self.steps_done,
            steps_total: self
                .stepper
                .as_ref()
                .and_then(Stepper::steps_total)
                .unwrap_or(self.steps_done),
            last_step,
            busy,
            finished: self.finished() && !self.failed,
        })
    }

    fn rebuild(&mut self) {
        self.emit(Event::Cleared);
        self.build();
        self.emit(self.progress_event(false, None));
    }

    /// Fresh backends and a stepper at the first step (errors reported, `failed` set).
    fn build(&mut self) {
        self.stepper = None;
        self.steps_done = 0;
        self.failed = false;
        let reference = match &self.reference {
            Ok(r) => r.clone(),
            Err(e) => {
                self.failed = true;
                self.emit(Event::Error(e.to_string()));
                return;
            }
        };
        let backends = match (self.factory)() {
            Ok(b) => b,
            Err(e) => {
                self.failed = true;
                self.emit(Event::Error(e.to_string()));
                return;
            }
        };
        let opts = CheckOptions {
            mode: self.mode,
            strict: self.strict,
            invariants: reference.config().cloned(),
            ..Default::default()
        };
        let backends = backends
            .into_iter()
            .map(|b| b as super::StepBackend<'static>)
            .collect();
        match Stepper::new(reference, backends, opts) {
            Ok(s) => {
                self.emit(Event::Backends(s.backend_names().to_vec()));
                self.stepper = Some(s);
            }
            Err(e) => {
                self.failed = true;
                self.emit(Event::Error(e.to_string()));
            }
        }
    }

    /// [`Request::RerunFrom`]: replay on fresh backends what stays, then run the rest.
    fn rerun_from(&mut self, from: Option<Step>) {
        // Steps whose results the UI holds: a replay never goes past them.
        let reported = self.steps_done;
        self.emit(self.progress_event(true, None));
        self.build();
        let mut kept = 0;
        while kept < reported && !self.failed {
            let Some(stepper) = self.stepper.as_mut() else {
                break;
            };
            let Some(next) = stepper.peek_step() else {
                break;
            };
            if Some(next) == from {
                break;
            }
            match stepper.next_step() {
                Ok(Some(_)) => kept += 1,
                Ok(None) => break,
                Err(e) => {
                    self.failed = true;
                    self.emit(Event::Error(e.to_string()));
                }
            }
            self.steps_done = kept;
            self.emit(self.progress_event(true, Some(format!("replaying {next}"))));
        }
        let (regime, step) = match &self.stepper {
            Some(s) => (s.reference().regime_name(s.cursor().regime), s.peek_step()),
            None => (String::new(), None),
        };
        self.emit(Event::Rerun {
            kept_steps: kept,
            regime,
            step,
        });
        self.run_until(None);
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
                self.emit(self.progress_event(true, None));
                self.run_one();
                self.emit(self.progress_event(false, None));
            }
            Request::RunAll => self.run_until(None),
            Request::RunToLayer(layer) => self.run_until(Some(layer)),
            Request::RerunFrom(step) => self.rerun_from(step),
        }
    }

    /// Run steps until the run ends, fails or is cancelled; with `Some(layer)`, stop once
    /// `Block(layer)` of the regime current at the start has run.
    fn run_until(&mut self, layer: Option<usize>) {
        let start_regime = self.stepper.as_ref().map_or(0, |s| s.cursor().regime);
        self.emit(self.progress_event(true, None));
        while !self.finished() && !self.failed {
            if self.cancel.load(Ordering::SeqCst) {
                self.emit(Event::Cancelled);
                break;
            }
            let Some(ran) = self.run_one() else {
                break;
            };
            if let Some(l) = layer {
                let regime_now = self.stepper.as_ref().map_or(0, |s| s.cursor().regime);
                if (ran.0 == start_regime && ran.1 == Step::Block(l)) || regime_now != start_regime
                {
                    break;
                }
            }
        }
        self.emit(self.progress_event(false, None));
    }

    /// Run one step; returns the regime index and step that ran.
    fn run_one(&mut self) -> Option<(usize, Step)> {
        if self.failed {
            return None;
        }
        let stepper = self.stepper.as_mut()?;
        match stepper.next_step() {
            Ok(Some(o)) => {
                self.steps_done += 1;
                for ni in o.not_isolated.iter().filter(|n| n.backend == 0) {
                    self.emit(Event::NotIsolated {
                        regime: o.regime.clone(),
                        step: o.step,
                        missing: ni.missing.clone(),
                    });
                }
                let ran = (o.regime_index, o.step);
                let last = format!("{} {}", o.regime, o.step);
                let regime = o.regime.clone();
                let missing = o
                    .regime_end
                    .as_ref()
                    .and_then(|e| e.missing.first().cloned())
                    .unwrap_or_default();
                self.emit(Event::StepDone {
                    regime: o.regime,
                    step: o.step,
                    results: o.results,
                    other_violations: o.other_violations,
                    seconds: o.seconds,
                });
                if !missing.is_empty() {
                    self.emit(Event::Missing {
                        regime,
                        names: missing,
                    });
                }
                self.emit(self.progress_event(true, Some(last)));
                Some(ran)
            }
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                self.emit(Event::Error(e.to_string()));
                None
            }
        }
    }
}

/// Why [`run_all_blocking`] returned without a finished run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BlockingRunError {
    #[error("run did not finish within {0:?}")]
    Timeout(std::time::Duration),
    /// The worker's error event (already a message: events cross a channel to the UI).
    #[error("{0}")]
    Worker(String),
}

/// Run a controller to the end synchronously (tests, headless use): sends `RunAll` and
/// collects every result until progress says finished, an error arrives, or `timeout` passes.
pub fn run_all_blocking(
    controller: &Controller,
    timeout: std::time::Duration,
) -> Result<Vec<CaptureResult>, BlockingRunError> {
    let deadline = std::time::Instant::now() + timeout;
    controller.send(Request::RunAll);
    let mut out = Vec::new();
    let mut seen_busy = false;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(BlockingRunError::Timeout(timeout));
        }
        match controller.recv_timeout(left) {
            Some(Event::StepDone { results, .. }) => out.extend(results),
            Some(Event::Error(e)) => return Err(BlockingRunError::Worker(e)),
            Some(Event::Progress(p)) => {
                seen_busy |= p.busy;
                if seen_busy && !p.busy {
                    return Ok(out);
                }
            }
            Some(_) => {}
            None => return Err(BlockingRunError::Timeout(timeout)),
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
            super::super::oracle_for(&g).map(|o| vec![Box::new(o) as BoxedBackend])
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

    /// Sets its flag when dropped, a little late, as tearing down a GPU backend is.
    struct SetOnDrop(Arc<AtomicBool>);

    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            std::thread::sleep(Duration::from_millis(200));
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn dropping_the_controller_waits_until_the_worker_has_freed_its_backends() {
        let golden = Arc::new(default_golden().expect("embedded golden"));
        let freed = Arc::new(AtomicBool::new(false));
        let guard = SetOnDrop(freed.clone());
        let g = golden.clone();
        let factory: BackendFactory = Box::new(move || {
            let _ = &guard;
            super::super::oracle_for(&g).map(|o| vec![Box::new(o) as BoxedBackend])
        });
        let c = Controller::spawn(golden, factory, Mode::Chained, Box::new(|| {}));
        next_progress(&c);
        c.send(Request::StepOne);
        drop(c);
        assert!(
            freed.load(Ordering::SeqCst),
            "the worker still held its backends after the controller was dropped"
        );
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
        // Wait until one step is done, then cancel.
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
        let factory = move || -> Result<Vec<BoxedBackend>, SessionError> {
            super::super::oracle_for(&g).map(|o| vec![Box::new(o) as BoxedBackend])
        };
        let bad = LocalizeRequest {
            plant: vec!["flip@L2".into()],
            ..Default::default()
        };
        let e = run_localize(&golden, &factory, &bad)
            .expect_err("bad spec")
            .to_string();
        assert!(e.contains("planted fault `flip@L2`"), "{e}");
        let far = LocalizeRequest {
            pin_from: Some(golden.fixture.n_layers),
            ..Default::default()
        };
        let e = run_localize(&golden, &factory, &far)
            .expect_err("layer out of range")
            .to_string();
        assert!(e.starts_with("pin from layer"), "{e}");
        let none = || -> Result<Vec<BoxedBackend>, SessionError> { Ok(Vec::new()) };
        let e = run_localize(&golden, &none, &LocalizeRequest::default())
            .expect_err("no backend")
            .to_string();
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
