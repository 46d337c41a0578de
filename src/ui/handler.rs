//! The one command handler: every [`UiCommand`] the panels send is applied here, and the
//! background work's results (session events, file jobs) are folded into the state each frame.

use super::app::GoldenLensApp;
use super::commands::{
    FileKind, JobKind, Region, UiCommand, UiCommandSender, ViewFamily, WorkbenchWindow,
};
use super::files::{self, FileJob, LoadedGolden};
use super::goldenless::PreparedRun;
use super::panels;
use super::panels::capture_list;
use super::state::*;
use super::theme::{self};
use crate::model::Step;
use crate::session::controller::{BackendFactory, Controller, Event, Progress, Request};
use crate::session::reference::greedy_next_token;
use std::path::PathBuf;
use std::time::Instant;

impl GoldenLensApp {
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
                            map.clone(),
                        );
                        s.dump = Some(super::imported::OpenedDump {
                            path: path.clone(),
                            map,
                        });
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
            UiCommand::SetPromptForm(form) => s.prompt = form,
            UiCommand::RunPrompt => match s.weights.clone() {
                Some(gguf) => {
                    s.preparing = true;
                    super::goldenless::prepare_async(
                        gguf,
                        s.prompt.clone(),
                        self.jobs_tx.clone(),
                        self.ctx.clone(),
                    );
                }
                None => s.errors.push(
                    "a prompt runs on a GGUF's weights and vocabulary: open a .gguf first (Open \
                     GGUF…, the path field, or drop one on the window)"
                        .into(),
                ),
            },
            UiCommand::Run(req) => {
                match req {
                    Request::SetMode(m) => {
                        s.mode = m;
                        s.mode_chosen = true;
                    }
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
                        s.dump.clone(),
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
            UiCommand::WatchShaders(dir) => self.watch_shaders(dir),
            UiCommand::SetShadersField(text) => s.workbench.field = text,
            UiCommand::SetWorkbenchWindow { window, open } => match window {
                WorkbenchWindow::Recheck => s.workbench.diff_open = open,
                WorkbenchWindow::Profile => {
                    s.workbench.profile_open = open;
                    self.refresh_profile();
                }
            },
            UiCommand::SetProfileStep(step) => s.workbench.profile_step = step,
        }
    }

    /// Select capture `i` and open its family's view.
    pub(super) fn select(&mut self, i: usize) {
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

    /// Forget every result and every job of the previous session.
    fn clear_session(&mut self) {
        let s = &mut self.state;
        s.results.clear();
        s.missing.clear();
        s.not_isolated.clear();
        s.other_violations.clear();
        s.selected = None;
        s.progress = Progress::default();
        s.run_clock = RunClock::default();
        s.step_log.clear();
        s.workbench.recheck = None;
        self.caches.clear();
        // A localisation of the previous golden no longer applies; one in flight is dropped.
        s.localize.generation += 1;
        s.localize.running = false;
        s.localize.result = None;
        // So does a determinism run.
        s.determinism.generation += 1;
        s.determinism.running = false;
        s.determinism.result = None;
    }

    /// The worker's wake-up call: a repaint of the window.
    fn notify(&self) -> Box<dyn Fn() + Send> {
        let ctx = self.ctx.clone();
        Box::new(move || {
            if let Some(c) = &ctx {
                c.request_repaint();
            }
        })
    }

    pub(super) fn start_session(&mut self, golden: LoadedGolden) {
        self.clear_session();
        let notify = self.notify();
        let s = &mut self.state;
        s.prompt_run = None;
        let maker = s.options.backends.clone();
        let g = golden.golden.clone();
        let gguf = s.weights.clone();
        let factory: BackendFactory = Box::new(move || maker(&g, gguf.as_deref()));
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
    pub(super) fn restart_session_on(&mut self, weights: Option<PathBuf>) {
        self.state.weights = weights;
        if let Some(g) = self.state.golden.clone() {
            self.start_session(g);
        } else if self.state.prompt_run.is_some() {
            // A golden-less run follows its GGUF: the same prompt on the new file.
            self.handle(UiCommand::RunPrompt);
        }
    }

    /// A golden-less session: the prepared tokens through the GGUF's backends, the CPU oracle
    /// the live reference, every regime run at once.
    pub(super) fn start_prompt_session(&mut self, run: PreparedRun) {
        self.clear_session();
        let notify = self.notify();
        let s = &mut self.state;
        s.preparing = false;
        s.golden = None;
        // A run on a real model's tokens is isolated unless the user chose otherwise (the
        // CLI's default for the same run).
        if !s.mode_chosen {
            s.mode = crate::session::Mode::Isolated;
        }
        let maker = s.options.tokens_backends.clone();
        let (gguf, layers) = (run.gguf.clone(), run.layers.clone());
        let factory: BackendFactory = Box::new(move || maker(&gguf, layers.clone()));
        self.controller = Some(Controller::spawn_on(
            Ok(run.reference()),
            factory,
            s.mode,
            notify,
        ));
        s.session = true;
        s.notice = Some(format!(
            "running {} with no golden: the cpu oracle is the live reference",
            run.label()
        ));
        s.prompt_run = Some(run);
        self.handle(UiCommand::Run(Request::RunAll));
    }

    /// Drain worker events and finished file jobs.
    pub(super) fn poll(&mut self) {
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
                    step,
                    results,
                    other_violations,
                    seconds,
                } => {
                    // The greedy next token of a golden-less regime, from the oracle's logits.
                    let greedy = (s.prompt_run.is_some() && step == Step::Final)
                        .then(|| results.iter().find(|r| r.name == "logits_full"))
                        .flatten()
                        .and_then(|r| r.capture_of(0))
                        .and_then(|c| greedy_next_token(std::slice::from_ref(&c)));
                    s.step_log.push(StepMark {
                        regime: regime.clone(),
                        step,
                        run: s.run_serial,
                        seconds,
                        greedy,
                        results_start: s.results.len(),
                        violations_start: s.other_violations.len(),
                        missing_start: s.missing.len(),
                        not_isolated_start: s.not_isolated.len(),
                    });
                    if let Some(rc) = &mut s.workbench.recheck {
                        if rc.resumed.is_some() {
                            rc.diff.add(&results);
                        }
                    }
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
                    let idle = !p.busy;
                    if idle {
                        if let Some(t) = s.run_clock.started.take() {
                            s.run_clock.last_secs = Some(t.elapsed().as_secs_f64());
                        }
                    }
                    s.progress = p;
                    if idle {
                        self.refresh_profile();
                    }
                }
                Event::Rerun {
                    kept_steps,
                    regime,
                    step,
                } => self.rerun_started(kept_steps, regime, step),
                Event::Cleared => {
                    s.results.clear();
                    s.missing.clear();
                    s.not_isolated.clear();
                    s.other_violations.clear();
                    s.step_log.clear();
                    s.workbench.recheck = None;
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

    pub(super) fn job_done(&mut self, job: FileJob) {
        let s = &mut self.state;
        match job {
            FileJob::Golden(Ok(g)) => {
                s.loading = None;
                self.start_session(g);
            }
            FileJob::Prompt(Ok(run)) => self.start_prompt_session(*run),
            FileJob::Prompt(Err(e)) => {
                s.preparing = false;
                s.errors.push(e);
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
                    FileKind::Captures => UiCommand::OpenCaptures(path),
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
}
