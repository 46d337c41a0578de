//! The app: its state, the one command handler, and the frame layout. Panels draw from
//! read-only [`AppState`] and send [`UiCommand`]s through a [`UiCommandSender`]; the handler
//! applies them at the end of the frame. Slow work (loading files, running backends, file
//! dialogs, exports, localisation, self-test, determinism) happens on other threads and comes
//! back through channels polled each frame.

use super::commands::{
    command_channel, CommandSender, DetailView, FileKind, JobKind, ListFilter, Region, UiCommand,
    UiCommandSender, ViewFamily,
};
use super::files::{self, FileJob, LoadedGolden};
use super::panels;
use super::panels::capture_list;
use super::theme::{self, ThemeChoice};
use super::views::{ViewCaches, ViewSettings};
use crate::golden::Golden;
use crate::session::controller::{
    BackendFactory, BoxedBackend, CaptureResult, Controller, Event, Progress, Request, TriageTotals,
};
use crate::session::export::Provenance;
use crate::session::invariants::Violation;
use crate::session::Mode;
use crate::session::SessionError;
use eframe::egui;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

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
    Arc<dyn Fn(&Golden, Option<&Path>) -> Result<Vec<BoxedBackend>, SessionError> + Send + Sync>;

/// How the app is started.
#[derive(Clone)]
pub struct AppOptions {
    /// A golden to open instead of the embedded one (or the last one opened).
    pub golden: Option<PathBuf>,
    /// A GGUF to open at start: the backends run on its weights from the first run.
    pub gguf: Option<PathBuf>,
    /// The backends to run.
    pub backends: BackendMaker,
    /// What to say about the GPU.
    pub gpu: GpuStatus,
    /// Run every regime as soon as a golden is loaded (the app's default).
    pub run_on_start: bool,
    /// Show the measured frame time (off in snapshot tests, where it would differ per run).
    pub show_frame_time: bool,
    /// Select this capture (`regime/name`) as soon as it has run.
    pub select_on_start: Option<String>,
    /// Show this view with that selection.
    pub view_on_start: Option<DetailView>,
    /// The theme to start in (None: the remembered one, else dark).
    pub theme: Option<ThemeChoice>,
    /// Write a PNG of the window here once the run has finished and the start selection shows,
    /// then close (README screenshots).
    pub screenshot: Option<PathBuf>,
    /// Ignore the remembered state (last files, theme, views).
    pub fresh: bool,
    /// The name map a dump opened in the app is read through (`gui --map`).
    pub captures_map: String,
}

impl AppOptions {
    /// The CPU oracle alone, on the embedded golden, running as soon as it opens.
    pub fn cpu_only() -> AppOptions {
        AppOptions {
            golden: None,
            gguf: None,
            backends: Arc::new(|g: &Golden, gguf: Option<&Path>| {
                crate::session::oracle_on(g, gguf).map(|o| vec![Box::new(o) as BoxedBackend])
            }),
            gpu: GpuStatus::NotBuilt,
            run_on_start: true,
            show_frame_time: true,
            select_on_start: None,
            view_on_start: None,
            theme: None,
            screenshot: None,
            fresh: false,
            captures_map: "canonical".into(),
        }
    }
}

/// When a background job started and how long its last run took (progress bars and ETAs).
#[derive(Debug, Clone, Copy, Default)]
pub struct JobClock {
    pub started: Option<Instant>,
    /// Seconds the last finished run took.
    pub last_secs: Option<f64>,
}

impl JobClock {
    pub fn start(&mut self) {
        self.started = Some(Instant::now());
    }
    pub fn stop(&mut self) {
        if let Some(s) = self.started.take() {
            self.last_secs = Some(s.elapsed().as_secs_f64());
        }
    }
    /// Abandoned: no duration to learn from.
    pub fn drop_run(&mut self) {
        self.started = None;
    }
    pub fn elapsed_secs(&self) -> Option<f64> {
        self.started.map(|s| s.elapsed().as_secs_f64())
    }
    /// Seconds left, guessed from the last run's duration.
    pub fn eta_secs(&self) -> Option<f64> {
        Some((self.last_secs? - self.elapsed_secs()?).max(0.0))
    }
}

/// The main run's clock: when the current request began and at which step.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunClock {
    pub started: Option<Instant>,
    pub steps_at_start: usize,
    /// Seconds the last finished request took.
    pub last_secs: Option<f64>,
}

impl RunClock {
    /// Seconds since the current request began.
    pub fn elapsed_secs(&self) -> Option<f64> {
        self.started.map(|s| s.elapsed().as_secs_f64())
    }
    /// Seconds left at the pace of the steps run so far in this request.
    pub fn eta_secs(&self, p: &Progress) -> Option<f64> {
        let done = p.steps_done.checked_sub(self.steps_at_start)?;
        if done == 0 {
            return None;
        }
        let per_step = self.elapsed_secs()? / done as f64;
        Some(per_step * p.steps_total.saturating_sub(p.steps_done) as f64)
    }
}

/// The self-test window's state.
#[derive(Debug, Clone, Default)]
pub struct SelftestState {
    pub open: bool,
    pub running: bool,
    pub generation: u64,
    pub result: Option<Result<Vec<crate::session::selftest::SelftestRow>, String>>,
    pub clock: JobClock,
}

/// Exports in flight.
#[derive(Debug, Clone, Default)]
pub struct ExportState {
    pub running: usize,
    pub clock: JobClock,
}

/// Everything the panels read. Only [`GoldenLensApp::handle`] and the event poll change it.
pub struct AppState {
    pub options: AppOptions,
    pub golden: Option<LoadedGolden>,
    /// One line about the opened GGUF (or its error).
    pub gguf_summary: Option<String>,
    /// The GGUF whose weights and metadata the backends run on; None: the golden's filler.
    pub weights: Option<PathBuf>,
    /// A session worker is running.
    pub session: bool,
    pub backends: Vec<String>,
    pub results: Vec<CaptureResult>,
    pub missing: Vec<(String, String)>,
    pub not_isolated: Vec<String>,
    /// Invariant violations of captures no result holds (only a later backend produced them):
    /// `(regime, backend, violation)`.
    pub other_violations: Vec<(String, String, Violation)>,
    pub progress: Progress,
    pub run_clock: RunClock,
    pub mode: Mode,
    pub strict: bool,
    pub run_to_layer: usize,
    pub selected: Option<usize>,
    /// Bumped whenever the selection moves by keyboard or command (the list scrolls to it).
    pub selection_serial: u64,
    pub view: DetailView,
    /// The view last chosen for each family of captures.
    pub view_by_family: HashMap<ViewFamily, DetailView>,
    pub list: ListFilter,
    /// Folded list groups (their keys).
    pub collapsed: HashSet<String>,
    pub settings: ViewSettings,
    /// Errors shown as banners until dismissed (file and field named in each).
    pub errors: Vec<String>,
    /// The last informational message (export written, file opened).
    pub notice: Option<String>,
    /// The text of the path field.
    pub path_field: String,
    pub loading: Option<String>,
    pub selftest: SelftestState,
    pub localize: panels::localize::LocalizeState,
    pub determinism: panels::determinism::DeterminismState,
    pub export: ExportState,
    pub theme: ThemeChoice,
    pub overview_open: bool,
    pub metrics_open: bool,
    /// Durations of the last frames' `ui` calls, in seconds (newest last).
    pub frame_secs: VecDeque<f64>,
}

impl AppState {
    /// `(passed, failed)` captures so far; a capture the golden holds but no backend produced
    /// counts as failed once its regime has run.
    pub fn summary_counts(&self) -> (usize, usize) {
        let failing = self.results.iter().filter(|r| !r.pass()).count();
        (self.results.len() - failing, failing + self.missing.len())
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
    /// Top-k triage summed over every index capture so far.
    pub fn triage_totals(&self) -> TriageTotals {
        let mut t = TriageTotals::default();
        for (_, x) in self.results.iter().flat_map(CaptureResult::triages) {
            t.add(x);
        }
        t
    }
    /// The selected capture.
    pub fn selected(&self) -> Option<&CaptureResult> {
        self.selected.and_then(|i| self.results.get(i))
    }
    /// What the backends run on, in words (the toolbar's label; tests read it).
    pub fn weights_label(&self) -> String {
        match &self.weights {
            Some(p) => format!("Weights: GGUF {}", p.display()),
            None => "Weights: the golden's filler".to_string(),
        }
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
}

/// What is remembered between sessions (eframe persistence; window size and panel splits are
/// kept by eframe and egui themselves).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Remembered {
    pub last_golden: Option<PathBuf>,
    pub last_gguf: Option<PathBuf>,
    pub theme: Option<String>,
    /// `(family, view)` keys.
    pub views: Vec<(String, String)>,
    pub overview_open: Option<bool>,
    pub metrics_open: Option<bool>,
}

/// The storage key of [`Remembered`].
pub const REMEMBERED_KEY: &str = "golden-lens/remembered";

/// How many recent frame durations are kept for the frame-time readout.
const FRAME_HISTORY: usize = 120;
/// Frames to draw after the start selection shows before a screenshot is taken (layout and
/// textures settle).
const SCREENSHOT_SETTLE_FRAMES: u32 = 8;

/// The app.
pub struct GoldenLensApp {
    pub(crate) state: AppState,
    pub(crate) caches: ViewCaches,
    controller: Option<Controller>,
    sender: CommandSender,
    commands: Receiver<UiCommand>,
    jobs_tx: Sender<FileJob>,
    jobs_rx: Receiver<FileJob>,
    /// The backends the app was started with (an opened dump replaces the test side of these).
    base_backends: BackendMaker,
    ctx: Option<egui::Context>,
    /// Frames drawn since the screenshot's conditions held; None once it was requested.
    screenshot_wait: Option<u32>,
}

impl GoldenLensApp {
    /// A new app; it opens `options.golden` (or the embedded golden) right away.
    pub fn new(ctx: &egui::Context, options: AppOptions) -> GoldenLensApp {
        GoldenLensApp::with_remembered(ctx, options, None)
    }

    /// A new app started from eframe, with what the last session remembered.
    pub fn from_creation(cc: &eframe::CreationContext<'_>, options: AppOptions) -> GoldenLensApp {
        let remembered = if options.fresh {
            None
        } else {
            cc.storage
                .and_then(|s| s.get_string(REMEMBERED_KEY))
                .and_then(|s| serde_json::from_str::<Remembered>(&s).ok())
        };
        GoldenLensApp::with_remembered(&cc.egui_ctx, options, remembered)
    }

    /// A new app started with what an earlier session remembered (`None`: nothing).
    pub fn with_remembered(
        ctx: &egui::Context,
        mut options: AppOptions,
        remembered: Option<Remembered>,
    ) -> GoldenLensApp {
        let remembered = remembered.unwrap_or_default();
        if options.golden.is_none() {
            options.golden = remembered.last_golden.clone().filter(|p| p.is_file());
        }
        if options.gguf.is_none() {
            options.gguf = remembered.last_gguf.clone().filter(|p| p.is_file());
        }
        let theme_choice = options
            .theme
            .or_else(|| remembered.theme.as_deref().and_then(ThemeChoice::from_key))
            .unwrap_or_default();
        theme::apply(ctx, theme_choice);
        let view_by_family = remembered
            .views
            .iter()
            .filter_map(|(f, v)| {
                let fam = ViewFamily::ALL.into_iter().find(|x| x.key() == f)?;
                Some((fam, DetailView::from_key(v)?))
            })
            .collect();
        let (sender, commands) = command_channel();
        let (jobs_tx, jobs_rx) = channel();
        let state = AppState {
            options: options.clone(),
            golden: None,
            gguf_summary: None,
            weights: options.gguf.clone(),
            session: false,
            backends: Vec::new(),
            results: Vec::new(),
            missing: Vec::new(),
            not_isolated: Vec::new(),
            other_violations: Vec::new(),
            progress: Progress::default(),
            run_clock: RunClock::default(),
            mode: Mode::Chained,
            strict: false,
            run_to_layer: 0,
            selected: None,
            selection_serial: 0,
            view: DetailView::Values,
            view_by_family,
            list: ListFilter::default(),
            collapsed: HashSet::new(),
            settings: ViewSettings::default(),
            errors: Vec::new(),
            notice: None,
            path_field: String::new(),
            loading: None,
            selftest: SelftestState::default(),
            localize: Default::default(),
            determinism: Default::default(),
            export: ExportState::default(),
            theme: theme_choice,
            overview_open: remembered.overview_open.unwrap_or(true),
            metrics_open: remembered.metrics_open.unwrap_or(true),
            frame_secs: VecDeque::new(),
        };
        let mut app = GoldenLensApp {
            state,
            caches: ViewCaches::default(),
            controller: None,
            sender,
            commands,
            jobs_tx,
            jobs_rx,
            base_backends: options.backends.clone(),
            ctx: Some(ctx.clone()),
            screenshot_wait: options.screenshot.as_ref().map(|_| 0),
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

    /// What the app remembers for the next session.
    pub fn remembered(&self) -> Remembered {
        let s = &self.state;
        Remembered {
            last_golden: s
                .golden
                .as_ref()
                .map(|g| PathBuf::from(&g.label))
                .filter(|p| p.is_file()),
            last_gguf: s.weights.clone(),
            theme: Some(s.theme.key().to_string()),
            views: ViewFamily::ALL
                .iter()
                .filter_map(|f| {
                    s.view_by_family
                        .get(f)
                        .map(|v| (f.key().to_string(), v.key().to_string()))
                })
                .collect(),
            overview_open: Some(s.overview_open),
            metrics_open: Some(s.metrics_open),
        }
    }

    /// A sender panels (and tests) can queue commands with; they apply at the end of the frame.
    pub fn sender(&self) -> CommandSender {
        self.sender.clone()
    }
    /// Queue a command for the end of this frame.
    pub fn push(&self, cmd: UiCommand) {
        self.sender.send_ui(cmd);
    }
    /// The state panels read.
    pub fn state(&self) -> &AppState {
        &self.state
    }
    /// The views' caches (hover readout, layout probe).
    pub fn caches(&self) -> &ViewCaches {
        &self.caches
    }
    /// The loaded golden, if any.
    pub fn golden(&self) -> Option<&LoadedGolden> {
        self.state.golden.as_ref()
    }
    /// The GGUF the backends run on (None: the golden's filler weights).
    pub fn weights_gguf(&self) -> Option<&Path> {
        self.state.weights.as_deref()
    }
    /// What the backends run on, in words.
    pub fn weights_label(&self) -> String {
        self.state.weights_label()
    }
    /// Results so far, in execution order.
    pub fn results(&self) -> &[CaptureResult] {
        &self.state.results
    }
    /// Messages currently shown as error banners.
    pub fn errors(&self) -> &[String] {
        &self.state.errors
    }
    /// The run's progress as last reported.
    pub fn progress(&self) -> &Progress {
        &self.state.progress
    }
    /// The selected capture.
    pub fn selected(&self) -> Option<&CaptureResult> {
        self.state.selected()
    }
    /// The detail view shown.
    pub fn view(&self) -> DetailView {
        self.state.view
    }
    /// The last informational message.
    pub fn notice(&self) -> Option<&str> {
        self.state.notice.as_deref()
    }
    /// Mean and max duration of the recent frames, in seconds.
    pub fn frame_time_secs(&self) -> Option<(f64, f64)> {
        self.state.frame_time_secs()
    }
    /// Insert results directly (tests with synthetic captures; the worker is not involved).
    pub fn inject_results(&mut self, results: Vec<CaptureResult>) {
        self.state.results.extend(results);
    }
    /// True while a request runs, a file loads or a background job runs.
    pub fn busy(&self) -> bool {
        let s = &self.state;
        s.progress.busy
            || s.loading.is_some()
            || s.localize.running
            || s.determinism.running
            || s.selftest.running
            || s.export.running > 0
    }
    /// The Determinism window's state and last result.
    pub fn determinism_state(&self) -> &panels::determinism::DeterminismState {
        &self.state.determinism
    }
    /// The Localize window's state and last result.
    pub fn localize_state(&self) -> &panels::localize::LocalizeState {
        &self.state.localize
    }
    /// The self-test window's state and last result.
    pub fn selftest_state(&self) -> &SelftestState {
        &self.state.selftest
    }
    /// Top-k triage summed over every index capture so far.
    pub fn triage_totals(&self) -> TriageTotals {
        self.state.triage_totals()
    }
    /// See [`AppState::budget_counts`].
    pub fn budget_counts(&self) -> (usize, usize) {
        self.state.budget_counts()
    }
    /// See [`AppState::violation_count`].
    pub fn violation_count(&self) -> usize {
        self.state.violation_count()
    }
    /// `(regime, backend, violation)` of captures no result holds.
    pub fn other_violations(&self) -> &[(String, String, Violation)] {
        &self.state.other_violations
    }
    /// See [`AppState::summary_counts`].
    pub fn summary_counts(&self) -> (usize, usize) {
        self.state.summary_counts()
    }

    /// Apply one command. The only place state changes in response to the user.
    pub fn handle(&mut self, cmd: UiCommand) {
        let s = &mut self.state;
        match cmd {
            UiCommand::OpenGolden(path) => {
                s.loading = Some(path.display().to_string());
                files::load_golden_async(path, self.jobs_tx.clone(), self.ctx.clone());
            }
            UiCommand::OpenEmbeddedGolden => match files::embedded_golden() {
                Ok(g) => self.start_session(g),
                Err(e) => s.errors.push(e),
            },
            UiCommand::OpenGguf(path) => {
                s.loading = Some(path.display().to_string());
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
                match crate::import::NameMap::load(&s.options.captures_map) {
                    Ok(map) => {
                        s.options.backends = super::imported::with_captures(
                            self.base_backends.clone(),
                            path.clone(),
                            map,
                        );
                        let weights = s.weights.clone();
                        self.restart_session_on(weights);
                        self.state.notice =
                            Some(format!("the test side replays {}", path.display()));
                    }
                    Err(e) => s.errors.push(e.to_string()),
                }
            }
            UiCommand::PickFile(kind) => {
                files::pick_file_async(kind, self.jobs_tx.clone(), self.ctx.clone());
            }
            UiCommand::SetPathField(text) => s.path_field = text,
            UiCommand::Run(req) => {
                match req {
                    Request::SetMode(m) => s.mode = m,
                    Request::SetStrict(st) => s.strict = st,
                    _ => {}
                }
                match &self.controller {
                    Some(c) => {
                        s.progress.busy = true;
                        c.send(req);
                    }
                    None => s.errors.push("no golden is loaded: open one first".into()),
                }
            }
            UiCommand::Cancel => {
                if let Some(c) = &self.controller {
                    c.cancel();
                }
            }
            UiCommand::SetRunToLayer(l) => s.run_to_layer = l,
            UiCommand::RunSelftest => {
                if let Some(g) = &s.golden {
                    s.selftest.open = true;
                    s.selftest.running = true;
                    s.selftest.result = None;
                    s.selftest.generation += 1;
                    s.selftest.clock.start();
                    let with_gpu = matches!(s.options.gpu, GpuStatus::Adapter(_));
                    files::run_selftest_async(
                        g.golden.clone(),
                        with_gpu,
                        s.selftest.generation,
                        self.jobs_tx.clone(),
                        self.ctx.clone(),
                    );
                }
            }
            UiCommand::CloseSelftest => s.selftest.open = false,
            UiCommand::OpenLocalize => {
                s.localize.open = true;
                if s.localize.result.is_none() && !s.localize.running {
                    let req = s.localize.settings.request();
                    self.handle(UiCommand::RunLocalize(req));
                }
            }
            UiCommand::SetLocalizeSettings(settings) => s.localize.settings = settings,
            UiCommand::RunLocalize(request) => match &s.golden {
                Some(g) => {
                    let l = &mut s.localize;
                    l.open = true;
                    l.generation += 1;
                    l.running = true;
                    l.result = None;
                    l.clock.start();
                    files::run_localize_async(
                        g.golden.clone(),
                        s.options.backends.clone(),
                        s.weights.clone(),
                        request,
                        l.generation,
                        self.jobs_tx.clone(),
                        self.ctx.clone(),
                    );
                }
                None => s
                    .errors
                    .push("localize: no golden is loaded: open one first".into()),
            },
            UiCommand::CloseLocalize => s.localize.open = false,
            UiCommand::OpenDeterminism => s.determinism.open = true,
            UiCommand::CloseDeterminism => s.determinism.open = false,
            UiCommand::SetDeterminismRuns(n) => {
                s.determinism.runs = n.clamp(2, panels::determinism::MAX_RUNS)
            }
            UiCommand::RunDeterminism(runs) => match &s.golden {
                Some(g) => {
                    let d = &mut s.determinism;
                    d.open = true;
                    d.runs = runs.clamp(2, panels::determinism::MAX_RUNS);
                    d.generation += 1;
                    d.running = true;
                    d.result = None;
                    d.clock.start();
                    files::run_determinism_async(
                        g.golden.clone(),
                        s.options.backends.clone(),
                        s.weights.clone(),
                        d.runs,
                        d.generation,
                        self.jobs_tx.clone(),
                        self.ctx.clone(),
                    );
                }
                None => s
                    .errors
                    .push("determinism: no golden is loaded: open one first".into()),
            },
            UiCommand::CancelJob(kind) => {
                // The worker thread cannot be interrupted from here; bumping the generation makes
                // its result void, and the window is free to run again at once.
                match kind {
                    JobKind::Localize => {
                        s.localize.generation += 1;
                        s.localize.running = false;
                        s.localize.clock.drop_run();
                    }
                    JobKind::Selftest => {
                        s.selftest.generation += 1;
                        s.selftest.running = false;
                        s.selftest.clock.drop_run();
                    }
                    JobKind::Determinism => {
                        s.determinism.generation += 1;
                        s.determinism.running = false;
                        s.determinism.clock.drop_run();
                    }
                    JobKind::Export => {}
                }
                s.notice = Some(format!(
                    "{} cancelled: its result will be dropped",
                    kind.label()
                ));
            }
            UiCommand::UseGoldenWeights => {
                if s.weights.is_some() {
                    s.gguf_summary = None;
                    self.restart_session_on(None);
                    self.state.notice =
                        Some("the backends run on the golden's filler weights".into());
                }
            }
            UiCommand::SelectCaptureLabel(label) => self.select_label(label),
            UiCommand::SelectCapture(i) => self.select(i),
            UiCommand::SelectFailing { forward } => {
                let order = capture_list::list_order(&s.results, &s.list);
                let pos = s
                    .selected
                    .and_then(|sel| order.iter().position(|&i| i == sel));
                let failing = |i: &&usize| !s.results[**i].pass();
                let next = if forward {
                    match pos {
                        Some(p) => order[p + 1..].iter().find(failing),
                        None => order.iter().find(failing),
                    }
                } else {
                    match pos {
                        Some(p) => order[..p].iter().rev().find(failing),
                        None => order.iter().rev().find(failing),
                    }
                }
                .copied();
                match next {
                    Some(i) => {
                        capture_list::unfold_for(&s.results[i], &mut s.collapsed);
                        self.select(i);
                    }
                    None => {
                        s.notice = Some(if order.iter().any(|i| !s.results[*i].pass()) {
                            format!(
                                "no {} failing capture in the list",
                                if forward { "further" } else { "earlier" }
                            )
                        } else {
                            "no failing capture in the list".into()
                        })
                    }
                }
            }
            UiCommand::MoveSelection(delta) => {
                let visible = capture_list::visible_captures(&s.results, &s.list, &s.collapsed);
                if visible.is_empty() {
                    return;
                }
                let pos = s
                    .selected
                    .and_then(|sel| visible.iter().position(|&i| i == sel));
                let target = match pos {
                    Some(p) => (p as isize + delta).clamp(0, visible.len() as isize - 1) as usize,
                    None if delta < 0 => visible.len() - 1,
                    None => 0,
                };
                self.select(visible[target]);
            }
            UiCommand::SetDetailView(v) => {
                s.view = v;
                if let Some(r) = s.selected() {
                    let fam = ViewFamily::of(r);
                    s.view_by_family.insert(fam, v);
                }
            }
            UiCommand::SetListFilter(f) => s.list = f,
            UiCommand::ToggleGroup(key) => {
                if !s.collapsed.remove(&key) {
                    s.collapsed.insert(key);
                }
            }
            UiCommand::SetRegionOpen { region, open } => match region {
                Region::Overview => s.overview_open = open,
                Region::Metrics => s.metrics_open = open,
            },
            UiCommand::ExportFailing(path) => self.export_failing(path),
            UiCommand::ExportSelectedNpy(path) => self.export_npy(path),
            UiCommand::SetTestSide { backend, reference } => {
                s.settings.test_backend = backend;
                s.settings.reference = reference;
            }
            UiCommand::SetSlice { name, spec } => {
                s.settings.slices.insert(name, spec);
            }
            UiCommand::SetHeatmapOptions(o) => s.settings.heatmap = o,
            UiCommand::SetHcToken(t) => s.settings.hc_token = t,
            UiCommand::SetTopkLayout(l) => s.settings.topk_layout = l,
            UiCommand::DismissError(i) => {
                if i < s.errors.len() {
                    s.errors.remove(i);
                }
            }
            UiCommand::SetTheme(t) => {
                s.theme = t;
                if let Some(ctx) = &self.ctx {
                    theme::apply(ctx, t);
                }
            }
        }
    }

    /// Select capture `i` and open its family's view.
    fn select(&mut self, i: usize) {
        let s = &mut self.state;
        let Some(r) = s.results.get(i) else {
            return;
        };
        let fam = ViewFamily::of(r);
        s.selected = Some(i);
        s.selection_serial += 1;
        s.view = s
            .view_by_family
            .get(&fam)
            .copied()
            .unwrap_or_else(|| fam.default_view());
    }

    fn start_session(&mut self, golden: LoadedGolden) {
        let s = &mut self.state;
        s.results.clear();
        s.missing.clear();
        s.not_isolated.clear();
        s.other_violations.clear();
        s.selected = None;
        s.progress = Progress::default();
        s.run_clock = RunClock::default();
        self.caches.clear();
        // A localisation of the previous golden no longer applies; one in flight is dropped.
        s.localize.generation += 1;
        s.localize.running = false;
        s.localize.result = None;
        // So does a determinism run.
        s.determinism.generation += 1;
        s.determinism.running = false;
        s.determinism.result = None;
        let maker = s.options.backends.clone();
        let g = golden.golden.clone();
        let gguf = s.weights.clone();
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
            s.mode,
            notify,
        ));
        s.session = true;
        s.notice = Some(format!(
            "opened {} ({} captures in {} regimes)",
            golden.label,
            golden.golden.capture_count(),
            golden.golden.regimes.len()
        ));
        s.golden = Some(golden);
        if s.options.run_on_start {
            self.handle(UiCommand::Run(Request::RunAll));
        }
    }

    /// Run the backends on `weights` (a GGUF, or None for the golden's filler) from now on:
    /// the open golden's session starts again with new backends.
    fn restart_session_on(&mut self, weights: Option<PathBuf>) {
        self.state.weights = weights;
        if let Some(g) = self.state.golden.clone() {
            self.start_session(g);
        }
    }

    fn provenance(&self) -> Option<Provenance> {
        let s = &self.state;
        let g = s.golden.as_ref()?;
        Some(Provenance {
            golden_path: g.label.clone(),
            golden_hash: g.hash_hex.clone(),
            backends: s.backends.clone(),
            adapter: match &s.options.gpu {
                GpuStatus::Adapter(a) => Some(a.clone()),
                _ => None,
            },
            mode: s.mode,
            strict: s.strict,
            weights: s.weights.as_ref().map(|p| p.display().to_string()),
        })
    }

    fn export_failing(&mut self, path: PathBuf) {
        let (Some(golden), Some(prov)) = (
            self.state.golden.as_ref().map(|g| g.golden.clone()),
            self.provenance(),
        ) else {
            self.state.errors.push("export: no golden is loaded".into());
            return;
        };
        let failing: Vec<CaptureResult> = self
            .state
            .results
            .iter()
            .filter(|r| !r.pass())
            .cloned()
            .collect();
        self.begin_export();
        files::export_failing_async(
            path,
            golden,
            failing,
            prov,
            self.jobs_tx.clone(),
            self.ctx.clone(),
        );
    }

    fn export_npy(&mut self, path: PathBuf) {
        let Some(r) = self.state.selected() else {
            self.state
                .errors
                .push("export .npy: no capture is selected".into());
            return;
        };
        let Some(side) = r.per_backend.first() else {
            self.state
                .errors
                .push("export .npy: the capture has no backend values".into());
            return;
        };
        let (label, shape, values) = (r.label(), r.shape.clone(), side.values.clone());
        self.begin_export();
        files::export_npy_async(
            path,
            label,
            shape,
            values,
            self.jobs_tx.clone(),
            self.ctx.clone(),
        );
    }

    fn begin_export(&mut self) {
        let e = &mut self.state.export;
        if e.running == 0 {
            e.clock.start();
        }
        e.running += 1;
    }

    /// Select the capture labelled `regime/name`, or, when it has not run yet, run until it has
    /// and select it then.
    fn select_label(&mut self, label: String) {
        if let Some(i) = self.state.results.iter().position(|r| r.label() == label) {
            capture_list::unfold_for(&self.state.results[i], &mut self.state.collapsed);
            self.select(i);
            return;
        }
        let s = &mut self.state;
        let Some(c) = &self.controller else {
            s.errors
                .push(format!("select {label}: no golden is loaded"));
            return;
        };
        if s.progress.finished {
            s.errors
                .push(format!("select {label}: the run has no such capture"));
            return;
        }
        s.notice = Some(format!("running until {label} is available"));
        s.options.select_on_start = Some(label);
        if !s.progress.busy {
            s.progress.busy = true;
            c.send(Request::RunAll);
        }
    }

    /// Select `options.select_on_start` once it has run (once only).
    fn apply_start_selection(&mut self) {
        let Some(want) = self.state.options.select_on_start.clone() else {
            return;
        };
        if let Some(i) = self.state.results.iter().position(|r| r.label() == want) {
            self.state.options.select_on_start = None;
            self.select(i);
            if let Some(v) = self.state.options.view_on_start.take() {
                self.state.view = v;
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
            let s = &mut self.state;
            match e {
                Event::Backends(b) => s.backends = b,
                Event::StepDone {
                    regime,
                    results,
                    other_violations,
                    ..
                } => {
                    s.results.extend(results);
                    s.other_violations.extend(
                        other_violations
                            .into_iter()
                            .map(|(b, v)| (regime.clone(), b, v)),
                    );
                    self.apply_start_selection();
                }
                Event::Missing { regime, names } => s
                    .missing
                    .extend(names.into_iter().map(|n| (regime.clone(), n))),
                Event::NotIsolated {
                    regime,
                    step,
                    missing,
                } => s.not_isolated.push(format!(
                    "{regime} {step}: needs full {}",
                    missing.join(", ")
                )),
                Event::Progress(p) => {
                    if p.busy && s.run_clock.started.is_none() {
                        s.run_clock.started = Some(Instant::now());
                        s.run_clock.steps_at_start = p.steps_done;
                    }
                    if !p.busy {
                        if let Some(t) = s.run_clock.started.take() {
                            s.run_clock.last_secs = Some(t.elapsed().as_secs_f64());
                        }
                    }
                    s.progress = p;
                }
                Event::Cleared => {
                    s.results.clear();
                    s.missing.clear();
                    s.not_isolated.clear();
                    s.other_violations.clear();
                    s.selected = None;
                    self.caches.clear();
                }
                Event::Cancelled => s.notice = Some("cancelled".into()),
                Event::Error(e) => s.errors.push(e),
            }
        }
        while let Ok(job) = self.jobs_rx.try_recv() {
            self.job_done(job);
        }
    }

    fn job_done(&mut self, job: FileJob) {
        let s = &mut self.state;
        match job {
            FileJob::Golden(Ok(g)) => {
                s.loading = None;
                self.start_session(g);
            }
            FileJob::Golden(Err(e)) | FileJob::Gguf(Err(e)) => {
                s.loading = None;
                s.errors.push(e);
            }
            FileJob::Gguf(Ok(opened)) => {
                s.loading = None;
                match opened.runnable {
                    Ok(()) => {
                        s.gguf_summary = Some(opened.summary);
                        if s.weights.as_deref() != Some(opened.path.as_path()) {
                            // Same as `--gguf`: new backends on the GGUF's weights and
                            // metadata (built on the session's worker thread).
                            self.restart_session_on(Some(opened.path.clone()));
                        }
                        self.state.notice = Some(format!(
                            "the backends run on the GGUF {}",
                            opened.path.display()
                        ));
                    }
                    Err(why) => {
                        let on = match &s.weights {
                            Some(p) => format!("the GGUF {}", p.display()),
                            None => "the golden's filler weights".to_string(),
                        };
                        s.errors
                            .push(format!("{why}; the backends keep running on {on}"));
                    }
                }
            }
            FileJob::Picked(kind, path) => {
                self.sender.send_ui(match kind {
                    FileKind::Golden => UiCommand::OpenGolden(path),
                    FileKind::Gguf => UiCommand::OpenGguf(path),
                    FileKind::ExportFailing => UiCommand::ExportFailing(path),
                    FileKind::ExportNpy => UiCommand::ExportSelectedNpy(path),
                });
            }
            FileJob::DialogFailed(msg) => s.errors.push(msg),
            FileJob::Selftest { generation, result } => {
                if generation == s.selftest.generation {
                    s.selftest.running = false;
                    s.selftest.clock.stop();
                    s.selftest.result = Some(result);
                }
            }
            FileJob::Determinism { generation, result } => {
                if generation == s.determinism.generation {
                    s.determinism.running = false;
                    s.determinism.clock.stop();
                    s.determinism.result = Some(result);
                }
            }
            FileJob::Localize { generation, result } => {
                if generation == s.localize.generation {
                    s.localize.running = false;
                    s.localize.clock.stop();
                    s.localize.result = Some(result);
                }
            }
            FileJob::Exported(result) => {
                s.export.running = s.export.running.saturating_sub(1);
                if s.export.running == 0 {
                    s.export.clock.stop();
                }
                match result {
                    Ok(msg) => s.notice = Some(msg),
                    Err(e) => s.errors.push(e),
                }
            }
        }
    }

    /// `n`/`p` and the arrow keys, when no text field has the keyboard.
    fn keys(&self, ctx: &egui::Context) {
        if ctx.egui_wants_keyboard_input() {
            return;
        }
        let tx = &self.sender;
        ctx.input_mut(|i| {
            if i.consume_key(egui::Modifiers::NONE, egui::Key::N) {
                tx.send_ui(UiCommand::SelectFailing { forward: true });
            }
            if i.consume_key(egui::Modifiers::NONE, egui::Key::P) {
                tx.send_ui(UiCommand::SelectFailing { forward: false });
            }
            if i.consume_key(egui::Modifiers::NONE, egui::Key::ArrowDown) {
                tx.send_ui(UiCommand::MoveSelection(1));
            }
            if i.consume_key(egui::Modifiers::NONE, egui::Key::ArrowUp) {
                tx.send_ui(UiCommand::MoveSelection(-1));
            }
        });
    }

    /// Take the README screenshot once the run is done and the start selection shows; the
    /// callback writes the PNG and closes the window.
    fn screenshot(&mut self, ctx: &egui::Context) {
        let Some(path) = self.state.options.screenshot.clone() else {
            return;
        };
        let s = &self.state;
        let ready = s.progress.finished
            && !s.progress.busy
            && s.options.select_on_start.is_none()
            && s.loading.is_none();
        let Some(n) = self.screenshot_wait.as_mut() else {
            return;
        };
        if ready {
            *n += 1;
            if *n >= SCREENSHOT_SETTLE_FRAMES {
                self.screenshot_wait = None;
                let close = ctx.clone();
                ctx.request_screenshot(move |image| {
                    match files::write_png(&path, &image) {
                        Ok(()) => eprintln!("wrote {}", path.display()),
                        Err(e) => eprintln!("screenshot: {e}"),
                    }
                    close.send_viewport_cmd(egui::ViewportCommand::Close);
                    close.request_repaint();
                });
            }
        }
        ctx.request_repaint();
    }

    /// One frame of the whole UI (what `eframe::App::ui` calls; tests call it through the
    /// harness).
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        let started = Instant::now();
        if self.ctx.is_none() {
            self.ctx = Some(ui.ctx().clone());
        }
        self.poll();
        let ctx = ui.ctx().clone();
        files::dropped_files_ui(&ctx, &self.sender);
        self.keys(&ctx);
        self.caches.layout = Default::default();
        let list_default = (ctx.content_rect().width() * theme::LIST_WIDTH_FRACTION)
            .clamp(theme::LIST_MIN_WIDTH_PT, theme::LIST_MAX_DEFAULT_WIDTH_PT);
        let tx = &self.sender;
        let state = &self.state;
        egui::Panel::top("toolbar").show(ui, |ui| {
            panels::toolbar::toolbar_ui(ui, state, tx);
            panels::run_controls::run_controls_ui(ui, state, tx);
            panels::banners::banners_ui(ui, state, tx);
        });
        egui::Panel::left("captures")
            .resizable(true)
            .default_size(list_default)
            .min_size(theme::LIST_MIN_WIDTH_PT)
            .show(ui, |ui| {
                panels::capture_list::capture_list_ui(ui, state, tx);
            });
        let caches = &mut self.caches;
        egui::CentralPanel::default().show(ui, |ui| {
            panels::overview::overview_region_ui(ui, state, caches, tx);
            panels::metrics::metrics_region_ui(ui, state, tx);
            egui::CentralPanel::default().show(ui, |ui| {
                panels::detail::detail_ui(ui, state, caches, tx);
            });
        });
        panels::selftest::selftest_ui(ui, state, tx);
        panels::localize::localize_ui(ui, state, tx);
        panels::determinism::determinism_ui(ui, state, tx);

        while let Ok(cmd) = self.commands.try_recv() {
            self.handle(cmd);
        }
        self.screenshot(&ctx);
        if self.busy() {
            ctx.request_repaint_after(std::time::Duration::from_millis(50));
        }
        let s = &mut self.state;
        s.frame_secs.push_back(started.elapsed().as_secs_f64());
        while s.frame_secs.len() > FRAME_HISTORY {
            s.frame_secs.pop_front();
        }
    }
}

impl eframe::App for GoldenLensApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        GoldenLensApp::ui(self, ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        if let Ok(s) = serde_json::to_string(&self.remembered()) {
            storage.set_string(REMEMBERED_KEY, s);
        }
    }
}
