//! The app: its state, the one command handler, and the frame layout. Panels and views draw from
//! read-only state and push [`UiCommand`]s; slow work (loading files, running backends, file
//! dialogs) happens on other threads and comes back through channels polled each frame.

use super::commands::{DetailView, FileKind, UiCommand};
use super::files::{self, FileJob, LoadedGolden};
use super::panels;
use super::theme;
use super::views::ViewState;
use crate::golden::Golden;
use crate::session::controller::{
    BackendFactory, BoxedBackend, CaptureResult, Controller, Event, Progress, Request, TriageTotals,
};
use crate::session::export::{self, Provenance};
use crate::session::invariants::Violation;
use crate::session::Mode;
use eframe::egui;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

/// Whether a GPU backend is part of this run, and why not when it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuStatus {
    /// Built without the `gpu` feature.
    NotBuilt,
    /// Built with it, but no adapter was found (the message says what was tried).
    NoAdapter(String),
    /// Running on this adapter.
    Adapter(String),
}

impl GpuStatus {
    /// The banner line shown under the toolbar.
    pub fn banner(&self) -> String {
        match self {
            GpuStatus::NotBuilt => {
                "No GPU backend in this build: CPU oracle only (GPU comparisons light up when \
                 built with the `gpu` feature)."
                    .into()
            }
            GpuStatus::NoAdapter(why) => format!("No GPU adapter found ({why}): CPU oracle only."),
            GpuStatus::Adapter(name) => format!("GPU adapter: {name}"),
        }
    }
}

/// Builds the backends for a golden: the CPU oracle first, then any GPU backend. The path is the
/// GGUF whose weights and metadata they run on (`--gguf`, or one opened in the app); None: the
/// golden's filler weights.
pub type BackendMaker =
    Arc<dyn Fn(&Golden, Option<&Path>) -> Result<Vec<BoxedBackend>, String> + Send + Sync>;

/// How the app is started.
#[derive(Clone)]
pub struct AppOptions {
    /// A golden to open instead of the embedded one.
    pub golden: Option<PathBuf>,
    /// A GGUF to open at start: the backends run on its weights from the first run.
    pub gguf: Option<PathBuf>,
    /// The backends to run.
    pub backends: BackendMaker,
    /// What to say about the GPU.
    pub gpu: GpuStatus,
    /// Send `RunAll` as soon as a golden is loaded.
    pub run_on_start: bool,
    /// Show the measured frame time (off in snapshot tests, where it would differ per run).
    pub show_frame_time: bool,
    /// Select this capture (`regime/name`) as soon as it has run.
    pub select_on_start: Option<String>,
    /// Show this view with that selection.
    pub view_on_start: Option<DetailView>,
    /// The name map a dump opened in the app is read through (`gui --map`).
    pub captures_map: String,
}

impl AppOptions {
    /// The CPU oracle alone, on the embedded golden.
    pub fn cpu_only() -> AppOptions {
        AppOptions {
            golden: None,
            gguf: None,
            backends: Arc::new(|g: &Golden, gguf: Option<&Path>| {
                crate::session::oracle_on(g, gguf)
                    .map(|o| vec![Box::new(o) as BoxedBackend])
                    .map_err(|e| e.to_string())
            }),
            gpu: GpuStatus::NotBuilt,
            run_on_start: false,
            show_frame_time: true,
            select_on_start: None,
            view_on_start: None,
            captures_map: "canonical".into(),
        }
    }
}

/// Capture list filters.
#[derive(Debug, Clone, Default)]
pub struct ListState {
    /// Only captures whose `regime/name` contains this text.
    pub filter: String,
    /// Only failing captures.
    pub failing_only: bool,
}

/// The app's whole state.
pub struct GoldenLensApp {
    pub(crate) options: AppOptions,
    pub(crate) golden: Option<LoadedGolden>,
    /// One line about the opened GGUF (or its error).
    pub(crate) gguf_summary: Option<String>,
    /// The GGUF whose weights and metadata the backends run on; None: the golden's filler.
    pub(crate) weights: Option<PathBuf>,
    pub(crate) controller: Option<Controller>,
    pub(crate) backends: Vec<String>,
    pub(crate) results: Vec<CaptureResult>,
    pub(crate) missing: Vec<(String, String)>,
    pub(crate) not_isolated: Vec<String>,
    /// Invariant violations of captures no result holds (only a later backend produced them):
    /// `(regime, backend, violation)`.
    pub(crate) other_violations: Vec<(String, String, Violation)>,
    pub(crate) progress: Progress,
    pub(crate) mode: Mode,
    pub(crate) strict: bool,
    pub(crate) run_to_layer: usize,
    pub(crate) selected: Option<usize>,
    pub(crate) view: DetailView,
    pub(crate) list: ListState,
    pub(crate) views: ViewState,
    /// Errors shown as banners until dismissed (file and field named in each).
    pub(crate) errors: Vec<String>,
    /// The last informational message (export written, file opened).
    pub(crate) notice: Option<String>,
    /// The text of the path field.
    pub(crate) path_field: String,
    pub(crate) commands: Vec<UiCommand>,
    jobs_tx: Sender<FileJob>,
    jobs_rx: Receiver<FileJob>,
    /// The backends the app was started with (an opened dump replaces the test side of these).
    base_backends: BackendMaker,
    pub(crate) loading: Option<String>,
    ctx: Option<egui::Context>,
    /// Durations of the last frames' `ui` calls, in seconds (newest last).
    pub(crate) frame_secs: std::collections::VecDeque<f64>,
    /// The self-test window: None while hidden; `Some(None)` while running.
    pub(crate) selftest: Option<Option<Result<Vec<crate::session::selftest::SelftestRow>, String>>>,
    /// The Localize window's settings and last result.
    pub(crate) localize: panels::localize::LocalizeState,
    pub(crate) determinism: panels::determinism::DeterminismState,
}

/// How many recent frame durations are kept for the frame-time readout.
const FRAME_HISTORY: usize = 120;

impl GoldenLensApp {
    /// A new app; it opens `options.golden` (or the embedded golden) right away.
    pub fn new(ctx: &egui::Context, options: AppOptions) -> GoldenLensApp {
        theme::apply(ctx);
        let (jobs_tx, jobs_rx) = channel();
        let mut app = GoldenLensApp {
            options: options.clone(),
            golden: None,
            gguf_summary: None,
            weights: options.gguf.clone(),
            controller: None,
            backends: Vec::new(),
            results: Vec::new(),
            missing: Vec::new(),
            not_isolated: Vec::new(),
            other_violations: Vec::new(),
            progress: Progress::default(),
            mode: Mode::Chained,
            strict: false,
            run_to_layer: 0,
            selected: None,
            view: DetailView::Values,
            list: ListState::default(),
            views: ViewState::default(),
            errors: Vec::new(),
            notice: None,
            path_field: String::new(),
            commands: Vec::new(),
            jobs_tx,
            jobs_rx,
            base_backends: options.backends.clone(),
            loading: None,
            ctx: Some(ctx.clone()),
            frame_secs: Default::default(),
            selftest: None,
            localize: Default::default(),
            determinism: Default::default(),
        };
        match &options.golden {
            Some(p) => app.handle(UiCommand::OpenGolden(p.clone())),
            None => app.handle(UiCommand::OpenEmbeddedGolden),
        }
        if let Some(p) = &options.gguf {
            app.handle(UiCommand::OpenGguf(p.clone()));
        }
        app
    }

    /// Queue a command for the end of this frame (what panels call).
    pub fn push(&mut self, cmd: UiCommand) {
        self.commands.push(cmd);
    }

    /// The loaded golden, if any.
    pub fn golden(&self) -> Option<&LoadedGolden> {
        self.golden.as_ref()
    }
    /// The GGUF the backends run on (None: the golden's filler weights).
    pub fn weights_gguf(&self) -> Option<&Path> {
        self.weights.as_deref()
    }
    /// What the backends run on, in words (the toolbar's label; tests read it).
    pub fn weights_label(&self) -> String {
        match &self.weights {
            Some(p) => format!("Weights: GGUF {}", p.display()),
            None => "Weights: the golden's filler".to_string(),
        }
    }
    /// Results so far, in execution order.
    pub fn results(&self) -> &[CaptureResult] {
        &self.results
    }
    /// Messages currently shown as error banners.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }
    /// The run's progress as last reported.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }
    /// The selected capture.
    pub fn selected(&self) -> Option<&CaptureResult> {
        self.selected.and_then(|i| self.results.get(i))
    }
    /// The last informational message.
    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }
    /// Mean and max duration of the recent frames, in seconds.
    pub fn frame_time_secs(&self) -> Option<(f64, f64)> {
        let n = self.frame_secs.len();
        (n > 0).then(|| {
            let sum: f64 = self.frame_secs.iter().sum();
            let max = self.frame_secs.iter().copied().fold(0.0, f64::max);
            (sum / n as f64, max)
        })
    }
    /// Insert results directly (tests with synthetic captures; the worker is not involved).
    pub fn inject_results(&mut self, results: Vec<CaptureResult>) {
        self.results.extend(results);
    }
    /// True while a request runs, a file loads or a localisation runs.
    pub fn busy(&self) -> bool {
        self.progress.busy
            || self.loading.is_some()
            || self.localize.running
            || self.determinism.running
    }
    /// The Localize window's state and last result.
    pub fn determinism_state(&self) -> &panels::determinism::DeterminismState {
        &self.determinism
    }

    pub fn localize_state(&self) -> &panels::localize::LocalizeState {
        &self.localize
    }
    /// Top-k triage summed over every index capture so far (every test backend against the
    /// first backend).
    pub fn triage_totals(&self) -> TriageTotals {
        let mut t = TriageTotals::default();
        for (_, x) in self.results.iter().flat_map(CaptureResult::triages) {
            t.add(x);
        }
        t
    }

    /// `(within, budgeted)`: captures whose every backend stayed within the capture's error
    /// budget, of the captures with a budget (those the golden holds), as `check` counts them.
    pub fn budget_counts(&self) -> (usize, usize) {
        let mut within = 0;
        let mut budgeted = 0;
        for ok in self.results.iter().filter_map(CaptureResult::within_budget) {
            budgeted += 1;
            within += ok as usize;
        }
        (within, budgeted)
    }

    /// Invariant violations in the backends' own captures so far (every backend, every regime).
    pub fn violation_count(&self) -> usize {
        self.results
            .iter()
            .map(CaptureResult::violation_count)
            .sum::<usize>()
            + self.other_violations.len()
    }

    /// `(regime, backend, violation)` of captures no result holds (a later backend alone
    /// produced them).
    pub fn other_violations(&self) -> &[(String, String, Violation)] {
        &self.other_violations
    }

    /// `(passed, failed)` captures so far; a capture the golden holds but no backend produced
    /// counts as failed once its regime has run.
    pub fn summary_counts(&self) -> (usize, usize) {
        let failing = self.results.iter().filter(|r| !r.pass()).count();
        (self.results.len() - failing, failing + self.missing.len())
    }

    /// Apply one command. The only place state changes in response to the user.
    pub fn handle(&mut self, cmd: UiCommand) {
        match cmd {
            UiCommand::OpenGolden(path) => {
                self.loading = Some(path.display().to_string());
                files::load_golden_async(path, self.jobs_tx.clone(), self.ctx.clone());
            }
            UiCommand::OpenEmbeddedGolden => match files::embedded_golden() {
                Ok(g) => self.start_session(g),
                Err(e) => self.errors.push(e),
            },
            UiCommand::OpenGguf(path) => {
                self.loading = Some(path.display().to_string());
                files::load_gguf_async(path, self.jobs_tx.clone(), self.ctx.clone());
            }
            UiCommand::OpenPath(path) => {
                let ext = path.extension().map(|e| e.to_ascii_lowercase());
                let is_gguf = ext.as_ref().is_some_and(|e| e == "gguf");
                self.handle(if is_gguf {
                    UiCommand::OpenGguf(path)
                } else if super::imported::is_dump(&path) {
                    UiCommand::OpenCaptures(path)
                } else {
                    UiCommand::OpenGolden(path)
                });
            }
            UiCommand::OpenCaptures(path) => {
                match crate::import::NameMap::load(&self.options.captures_map) {
                    Ok(map) => {
                        self.options.backends = super::imported::with_captures(
                            self.base_backends.clone(),
                            path.clone(),
                            map,
                        );
                        self.restart_session_on(self.weights.clone());
                        self.notice = Some(format!("the test side replays {}", path.display()));
                    }
                    Err(e) => self.errors.push(e.to_string()),
                }
            }
            UiCommand::PickFile(kind) => {
                files::pick_file_async(kind, self.jobs_tx.clone(), self.ctx.clone());
            }
            UiCommand::Run(req) => {
                match req {
                    Request::SetMode(m) => self.mode = m,
                    Request::SetStrict(s) => self.strict = s,
                    _ => {}
                }
                match &self.controller {
                    Some(c) => {
                        self.progress.busy = true;
                        c.send(req);
                    }
                    None => self
                        .errors
                        .push("no golden is loaded: open one first".into()),
                }
            }
            UiCommand::RunSelftest => {
                if let Some(g) = &self.golden {
                    self.selftest = Some(None);
                    let with_gpu = matches!(self.options.gpu, GpuStatus::Adapter(_));
                    files::run_selftest_async(
                        g.golden.clone(),
                        with_gpu,
                        self.jobs_tx.clone(),
                        self.ctx.clone(),
                    );
                }
            }
            UiCommand::CloseSelftest => self.selftest = None,
            UiCommand::OpenLocalize => {
                self.localize.open = true;
                if self.localize.result.is_none() && !self.localize.running {
                    self.handle(UiCommand::RunLocalize(self.localize.request()));
                }
            }
            UiCommand::RunLocalize(request) => match &self.golden {
                Some(g) => {
                    self.localize.open = true;
                    self.localize.generation += 1;
                    self.localize.running = true;
                    self.localize.result = None;
                    files::run_localize_async(
                        g.golden.clone(),
                        self.options.backends.clone(),
                        self.weights.clone(),
                        request,
                        self.localize.generation,
                        self.jobs_tx.clone(),
                        self.ctx.clone(),
                    );
                }
                None => self
                    .errors
                    .push("localize: no golden is loaded: open one first".into()),
            },
            UiCommand::CloseLocalize => self.localize.open = false,
            UiCommand::OpenDeterminism => self.determinism.open = true,
            UiCommand::CloseDeterminism => self.determinism.open = false,
            UiCommand::RunDeterminism(runs) => match &self.golden {
                Some(g) => {
                    let d = &mut self.determinism;
                    d.open = true;
                    d.runs = runs.clamp(2, panels::determinism::MAX_RUNS);
                    d.generation += 1;
                    d.running = true;
                    d.result = None;
                    files::run_determinism_async(
                        g.golden.clone(),
                        self.options.backends.clone(),
                        self.weights.clone(),
                        d.runs,
                        d.generation,
                        self.jobs_tx.clone(),
                        self.ctx.clone(),
                    );
                }
                None => self
                    .errors
                    .push("determinism: no golden is loaded: open one first".into()),
            },
            UiCommand::UseGoldenWeights => {
                if self.weights.is_some() {
                    self.gguf_summary = None;
                    self.restart_session_on(None);
                    self.notice = Some("the backends run on the golden's filler weights".into());
                }
            }
            UiCommand::SelectCaptureLabel(label) => self.select_label(label),
            UiCommand::Cancel => {
                if let Some(c) = &self.controller {
                    c.cancel();
                }
            }
            UiCommand::SelectCapture(i) => {
                if i < self.results.len() {
                    self.selected = Some(i);
                    self.view = super::views::best_view_for(&self.results[i], self.view);
                }
            }
            UiCommand::SetDetailView(v) => self.view = v,
            UiCommand::ExportFailing(path) => self.export_failing(&path),
            UiCommand::ExportSelectedNpy(path) => self.export_npy(&path),
            UiCommand::SetTestSide { backend, reference } => {
                self.views.test_backend = backend;
                self.views.reference = reference;
            }
            UiCommand::DismissError(i) => {
                if i < self.errors.len() {
                    self.errors.remove(i);
                }
            }
        }
    }

    fn start_session(&mut self, golden: LoadedGolden) {
        self.results.clear();
        self.missing.clear();
        self.not_isolated.clear();
        self.other_violations.clear();
        self.selected = None;
        self.views = ViewState::default();
        self.progress = Progress::default();
        // A localisation of the previous golden no longer applies; one in flight is dropped.
        self.localize.generation += 1;
        self.localize.running = false;
        self.localize.result = None;
        // So does a determinism run.
        self.determinism.generation += 1;
        self.determinism.running = false;
        self.determinism.result = None;
        let maker = self.options.backends.clone();
        let g = golden.golden.clone();
        let gguf = self.weights.clone();
        let factory: BackendFactory = Box::new(move || maker(&g, gguf.as_deref()));
        let ctx = self.ctx.clone();
        let notify: Box<dyn Fn() + Send> = Box::new(move || {
            if let Some(c) = &ctx {
                c.request_repaint();
            }
        });
        self.controller = Some(Controller::spawn(
            golden.golden.clone(),
            factory,
            self.mode,
            notify,
        ));
        self.notice = Some(format!(
            "opened {} ({} captures in {} regimes)",
            golden.label,
            golden.golden.capture_count(),
            golden.golden.regimes.len()
        ));
        self.golden = Some(golden);
        if self.options.run_on_start {
            self.handle(UiCommand::Run(Request::RunAll));
        }
    }

    /// Run the backends on `weights` (a GGUF, or None for the golden's filler) from now on:
    /// the open golden's session starts again with new backends.
    fn restart_session_on(&mut self, weights: Option<PathBuf>) {
        self.weights = weights;
        if let Some(g) = self.golden.clone() {
            self.start_session(g);
        }
    }

    fn provenance(&self) -> Option<Provenance> {
        let g = self.golden.as_ref()?;
        Some(Provenance {
            golden_path: g.label.clone(),
            golden_hash: g.hash_hex.clone(),
            backends: self.backends.clone(),
            adapter: match &self.options.gpu {
                GpuStatus::Adapter(a) => Some(a.clone()),
                _ => None,
            },
            mode: self.mode,
            strict: self.strict,
            weights: self.weights.as_ref().map(|p| p.display().to_string()),
        })
    }

    fn export_failing(&mut self, path: &std::path::Path) {
        let (Some(g), Some(prov)) = (self.golden.as_ref(), self.provenance()) else {
            self.errors.push("export: no golden is loaded".into());
            return;
        };
        match export::write_failing_captures(path, &g.golden, &self.results, &prov) {
            Ok(n) => {
                self.notice = Some(format!(
                    "exported {n} failing captures to {}",
                    path.display()
                ))
            }
            Err(e) => self.errors.push(format!("export failed: {e}")),
        }
    }

    fn export_npy(&mut self, path: &std::path::Path) {
        let Some(r) = self.selected() else {
            self.errors
                .push("export .npy: no capture is selected".into());
            return;
        };
        let Some(side) = r.per_backend.first() else {
            self.errors
                .push("export .npy: the capture has no backend values".into());
            return;
        };
        let label = r.label();
        match export::write_npy(path, &r.shape, &side.values) {
            Ok(()) => {
                self.notice = Some(format!("exported {label} to {}", path.display()));
            }
            Err(e) => self.errors.push(format!("export .npy failed: {e}")),
        }
    }

    /// Select the capture labelled `regime/name`, or, when it has not run yet, run until it has
    /// and select it then.
    fn select_label(&mut self, label: String) {
        if let Some(i) = self.results.iter().position(|r| r.label() == label) {
            self.handle(UiCommand::SelectCapture(i));
            return;
        }
        let Some(c) = &self.controller else {
            self.errors
                .push(format!("select {label}: no golden is loaded"));
            return;
        };
        if self.progress.finished {
            self.errors
                .push(format!("select {label}: the run has no such capture"));
            return;
        }
        self.notice = Some(format!("running until {label} is available"));
        self.options.select_on_start = Some(label);
        if !self.progress.busy {
            self.progress.busy = true;
            c.send(Request::RunAll);
        }
    }

    /// Select `options.select_on_start` once it has run (once only).
    fn apply_start_selection(&mut self) {
        let Some(want) = self.options.select_on_start.clone() else {
            return;
        };
        if let Some(i) = self.results.iter().position(|r| r.label() == want) {
            self.options.select_on_start = None;
            self.handle(UiCommand::SelectCapture(i));
            if let Some(v) = self.options.view_on_start.take() {
                self.view = v;
            }
        }
    }

    /// Drain worker events and finished file jobs.
    fn poll(&mut self) {
        let events = self
            .controller
            .as_ref()
            .map(|c| c.drain())
            .unwrap_or_default();
        for e in events {
            match e {
                Event::Backends(b) => self.backends = b,
                Event::StepDone {
                    regime,
                    results,
                    other_violations,
                    ..
                } => {
                    self.results.extend(results);
                    self.other_violations.extend(
                        other_violations
                            .into_iter()
                            .map(|(b, v)| (regime.clone(), b, v)),
                    );
                    self.apply_start_selection();
                }
                Event::Missing { regime, names } => self
                    .missing
                    .extend(names.into_iter().map(|n| (regime.clone(), n))),
                Event::NotIsolated {
                    regime,
                    step,
                    missing,
                } => self.not_isolated.push(format!(
                    "{regime} {step}: needs full {}",
                    missing.join(", ")
                )),
                Event::Progress(p) => self.progress = p,
                Event::Cleared => {
                    self.results.clear();
                    self.missing.clear();
                    self.not_isolated.clear();
                    self.other_violations.clear();
                    self.selected = None;
                    self.views.clear_cache();
                }
                Event::Cancelled => self.notice = Some("cancelled".into()),
                Event::Error(e) => self.errors.push(e),
            }
        }
        while let Ok(job) = self.jobs_rx.try_recv() {
            match job {
                FileJob::Golden(Ok(g)) => {
                    self.loading = None;
                    self.start_session(g);
                }
                FileJob::Golden(Err(e)) | FileJob::Gguf(Err(e)) => {
                    self.loading = None;
                    self.errors.push(e);
                }
                FileJob::Gguf(Ok(opened)) => {
                    self.loading = None;
                    match opened.runnable {
                        Ok(()) => {
                            self.gguf_summary = Some(opened.summary);
                            if self.weights.as_deref() != Some(opened.path.as_path()) {
                                // Same as `--gguf`: new backends on the GGUF's weights and
                                // metadata (built on the session's worker thread).
                                self.restart_session_on(Some(opened.path.clone()));
                            }
                            self.notice = Some(format!(
                                "the backends run on the GGUF {}",
                                opened.path.display()
                            ));
                        }
                        Err(why) => self.errors.push(format!(
                            "{}; the backends keep running on {}",
                            why,
                            match &self.weights {
                                Some(p) => format!("the GGUF {}", p.display()),
                                None => "the golden's filler weights".to_string(),
                            }
                        )),
                    }
                }
                FileJob::Picked(kind, path) => {
                    self.commands.push(match kind {
                        FileKind::Golden => UiCommand::OpenGolden(path),
                        FileKind::Gguf => UiCommand::OpenGguf(path),
                        FileKind::ExportFailing => UiCommand::ExportFailing(path),
                        FileKind::ExportNpy => UiCommand::ExportSelectedNpy(path),
                    });
                }
                FileJob::DialogFailed(msg) => self.errors.push(msg),
                FileJob::Selftest(result) => self.selftest = Some(Some(result)),
                FileJob::Determinism { generation, result } => {
                    if generation == self.determinism.generation {
                        self.determinism.running = false;
                        self.determinism.result = Some(result);
                    }
                }
                FileJob::Localize { generation, result } => {
                    if generation == self.localize.generation {
                        self.localize.running = false;
                        self.localize.result = Some(result);
                    }
                }
            }
        }
    }

    /// One frame of the whole UI (what `eframe::App::ui` calls; tests call it through the
    /// harness).
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        let started = std::time::Instant::now();
        if self.ctx.is_none() {
            self.ctx = Some(ui.ctx().clone());
        }
        self.poll();
        files::dropped_files_ui(ui, &mut self.commands);

        egui::Panel::top("toolbar").show(ui, |ui| {
            panels::toolbar::toolbar_ui(ui, self);
            panels::run_controls::run_controls_ui(ui, self);
            panels::banners::banners_ui(ui, self);
        });
        egui::Panel::left("captures")
            .resizable(true)
            .default_size(theme::CAPTURE_LIST_WIDTH_PT)
            .show(ui, |ui| {
                panels::capture_list::capture_list_ui(ui, self);
            });
        egui::CentralPanel::default().show(ui, |ui| {
            panels::overview::overview_ui(ui, self);
            ui.separator();
            panels::detail::detail_ui(ui, self);
        });
        panels::selftest::selftest_ui(ui, self);
        panels::localize::localize_ui(ui, self);
        panels::determinism::determinism_ui(ui, self);

        for cmd in std::mem::take(&mut self.commands) {
            self.handle(cmd);
        }
        if self.busy() {
            ui.ctx()
                .request_repaint_after(std::time::Duration::from_millis(50));
        }
        self.frame_secs.push_back(started.elapsed().as_secs_f64());
        while self.frame_secs.len() > FRAME_HISTORY {
            self.frame_secs.pop_front();
        }
    }
}

impl eframe::App for GoldenLensApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        GoldenLensApp::ui(self, ui);
    }
}
