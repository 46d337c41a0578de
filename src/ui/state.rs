//! The app's state: how it is started ([`AppOptions`]), everything the panels read
//! ([`AppState`]), the job clocks behind progress bars and ETAs, and what is remembered between
//! sessions. Only the command handler (`super::handler`) and the event poll change it.

use super::commands::{DetailView, ListFilter, ViewFamily};
use super::files::LoadedGolden;
use super::goldenless::{PreparedRun, PromptForm, TokensMaker};
use super::panels;
use super::theme::ThemeChoice;
use super::views::{ModelDims, ViewSettings};
use crate::golden::Golden;
use crate::model::Step;
use crate::session::controller::{BoxedBackend, CaptureResult, Progress, TriageTotals};
use crate::session::invariants::Violation;
use crate::session::{Mode, SessionError};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
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
    /// Show the measured frame time and step times (off in snapshot tests, where they would
    /// differ per run).
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
    /// The backends of a golden-less run on a GGUF (the oracle first, the live reference).
    pub tokens_backends: TokensMaker,
    /// Run this prompt on `gguf` at start instead of opening a golden (`gui --prompt/--tokens`).
    pub prompt_on_start: Option<PromptForm>,
    /// Replay this dump as the test side from the start (`gui --captures`).
    pub captures: Option<PathBuf>,
    /// Watch this shader directory from the start (`gui --shaders DIR`): a save re-checks the
    /// run live (needs [`AppOptions::workbench`]).
    pub shaders_dir: Option<PathBuf>,
    /// The kernel workbench shared with the GPU backends `backends` builds (they must be put on
    /// it with `Workbench::attach`); None: no live re-check or Profile view.
    #[cfg(feature = "gpu")]
    pub workbench: Option<Arc<crate::session::rerun::Workbench>>,
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
            tokens_backends: super::goldenless::oracle_maker(),
            prompt_on_start: None,
            captures: None,
            shaders_dir: None,
            #[cfg(feature = "gpu")]
            workbench: None,
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

/// One step the worker reported: which run produced it, how long each backend took, and where
/// its entries begin in the app's lists (a re-check truncates them there).
#[derive(Debug, Clone, PartialEq)]
pub struct StepMark {
    pub regime: String,
    pub step: Step,
    /// The run that produced it: 0 for the session's run, then one more per re-check.
    pub run: u64,
    /// Wall seconds per backend, in backend order.
    pub seconds: Vec<f64>,
    /// In a golden-less run, after a regime's `Final`: the oracle's greedy next token.
    pub greedy: Option<i64>,
    pub results_start: usize,
    pub violations_start: usize,
    pub missing_start: usize,
    pub not_isolated_start: usize,
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
    /// The user picked `mode` (the radio buttons): a golden-less run then keeps it instead of
    /// its own default, isolated (as `check --tokens` does; see `cli::check::default_mode`).
    pub mode_chosen: bool,
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
    /// The prompt row's fields.
    pub prompt: PromptForm,
    /// The golden-less run in progress (None while a golden is the reference).
    pub prompt_run: Option<PreparedRun>,
    /// A prompt is being tokenized.
    pub preparing: bool,
    /// The dump replayed as the test side, if one was opened.
    pub dump: Option<super::imported::OpenedDump>,
    /// Every step reported since the session (re)started, in run order.
    pub step_log: Vec<StepMark>,
    /// The current run's serial (see [`StepMark::run`]).
    pub run_serial: u64,
    /// The kernel workbench (watched shaders, re-checks, the GPU profile).
    pub workbench: super::workbench::WorkbenchState,
}

impl AppState {
    /// The model sizes the views read: the golden's, or the GGUF's in a golden-less run.
    pub fn dims(&self) -> Option<ModelDims> {
        match (&self.golden, &self.prompt_run) {
            (Some(g), _) => Some(ModelDims::of_golden(&g.golden)),
            (None, Some(run)) => Some(ModelDims::of_config(&run.cfg)),
            (None, None) => None,
        }
    }
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
    /// The oracle's greedy next token after each regime so far (golden-less runs).
    pub fn greedy_tokens(&self) -> Vec<i64> {
        self.step_log.iter().filter_map(|m| m.greedy).collect()
    }
    /// Seconds per backend summed over the steps reported so far, with the backend's name.
    pub fn step_seconds_by_backend(&self) -> Vec<(String, f64)> {
        let mut sums = vec![0.0; self.backends.len()];
        for m in &self.step_log {
            for (sum, s) in sums.iter_mut().zip(&m.seconds) {
                *sum += s;
            }
        }
        self.backends.iter().cloned().zip(sums).collect()
    }
    /// The run panel's timing line: seconds per backend over the steps so far, the slowest
    /// step and the last one (tests read it).
    pub fn step_seconds_line(&self) -> Option<String> {
        let last = self.step_log.last()?;
        let per = |m: &StepMark| {
            self.backends
                .iter()
                .zip(&m.seconds)
                .map(|(b, s)| format!("{b} {s:.3} s"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let total = |m: &StepMark| -> f64 { m.seconds.iter().sum() };
        let slowest = self
            .step_log
            .iter()
            .max_by(|a, b| total(a).total_cmp(&total(b)))?;
        let sums = self
            .step_seconds_by_backend()
            .iter()
            .map(|(b, s)| format!("{b} {s:.3} s"))
            .collect::<Vec<_>>()
            .join(", ");
        Some(format!(
            "Step time over {} steps: {sums}; slowest {} {} ({}); last {} {} ({})",
            self.step_log.len(),
            slowest.regime,
            slowest.step,
            per(slowest),
            last.regime,
            last.step,
            per(last)
        ))
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
