//! The app: its construction, accessors, and the frame layout (state in `super::state`, the
//! command handler in `super::handler`). Panels draw from
//! read-only [`AppState`] and send [`UiCommand`]s through a [`UiCommandSender`]; the handler
//! applies them at the end of the frame. Slow work (loading files, running backends, file
//! dialogs, exports, localisation, self-test, determinism) happens on other threads and comes
//! back through channels polled each frame.

use super::commands::{
    command_channel, CommandSender, DetailView, ListFilter, UiCommand, UiCommandSender, ViewFamily,
};
use super::files::{self, FileJob, LoadedGolden};
use super::panels;
use super::panels::capture_list;
use super::theme::{self, ThemeChoice};
use super::views::{ViewCaches, ViewSettings};
use crate::session::controller::{CaptureResult, Controller, Progress, Request, TriageTotals};
use crate::session::export::Provenance;
use crate::session::invariants::Violation;
use crate::session::Mode;
use eframe::egui;
use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Instant;

pub use super::state::*;

/// How many recent frame durations are kept for the frame-time readout.
const FRAME_HISTORY: usize = 120;
/// Frames to draw after the start selection shows before a screenshot is taken (layout and
/// textures settle).
const SCREENSHOT_SETTLE_FRAMES: u32 = 8;

/// The app.
pub struct GoldenLensApp {
    pub(crate) state: AppState,
    pub(crate) caches: ViewCaches,
    pub(super) controller: Option<Controller>,
    pub(super) sender: CommandSender,
    pub(super) commands: Receiver<UiCommand>,
    pub(super) jobs_tx: Sender<FileJob>,
    pub(super) jobs_rx: Receiver<FileJob>,
    /// The backends the app was started with (an opened dump replaces the test side of these).
    pub(super) base_backends: BackendMaker,
    pub(super) ctx: Option<egui::Context>,
    /// Frames drawn since the screenshot's conditions held; None once it was requested.
    pub(super) screenshot_wait: Option<u32>,
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
        if options.golden.is_none() && options.prompt_on_start.is_none() {
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
            mode_chosen: false,
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
            prompt: options.prompt_on_start.clone().unwrap_or_default(),
            prompt_run: None,
            preparing: false,
            dump: None,
            step_log: Vec::new(),
            run_serial: 0,
            workbench: Default::default(),
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
        match (&options.golden, &options.prompt_on_start) {
            (Some(p), _) => app.handle(UiCommand::OpenGolden(p.clone())),
            (None, None) => app.handle(UiCommand::OpenEmbeddedGolden),
            // A golden-less start: the prompt runs on the GGUF once it is prepared.
            (None, Some(_)) => {}
        }
        if let Some(p) = &options.gguf {
            app.handle(UiCommand::OpenGguf(p.clone()));
        }
        if let Some(p) = &options.captures {
            app.handle(UiCommand::OpenCaptures(p.clone()));
        }
        if options.prompt_on_start.is_some() {
            app.handle(UiCommand::RunPrompt);
        }
        if let Some(dir) = &options.shaders_dir {
            app.handle(UiCommand::WatchShaders(dir.clone()));
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

    pub(super) fn provenance(&self) -> Option<Provenance> {
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

    pub(super) fn export_failing(&mut self, path: PathBuf) {
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

    pub(super) fn export_npy(&mut self, path: PathBuf) {
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

    pub(super) fn begin_export(&mut self) {
        let e = &mut self.state.export;
        if e.running == 0 {
            e.clock.start();
        }
        e.running += 1;
    }

    /// Select the capture labelled `regime/name`, or, when it has not run yet, run until it has
    /// and select it then.
    pub(super) fn select_label(&mut self, label: String) {
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
    pub(super) fn apply_start_selection(&mut self) {
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
        self.poll_shaders();
        let ctx = ui.ctx().clone();
        files::dropped_files_ui(&ctx, &self.sender);
        self.keys(&ctx);
        self.caches.layout = Default::default();
        let list_default = (ctx.content_rect().width() * theme::LIST_WIDTH_FRACTION)
            .clamp(theme::LIST_MIN_WIDTH_PT, theme::LIST_MAX_DEFAULT_WIDTH_PT);
        let tx = &self.sender;
        let state = &self.state;
        let workbench = self.has_workbench();
        egui::Panel::top("toolbar").show(ui, |ui| {
            panels::toolbar::toolbar_ui(ui, state, tx);
            panels::run_controls::run_controls_ui(ui, state, tx);
            if workbench {
                panels::workbench::workbench_ui(ui, state, tx);
            }
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
        panels::workbench::recheck_window_ui(ui, state, tx);
        #[cfg(feature = "gpu")]
        panels::profile::profile_window_ui(ui, state, tx);

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
