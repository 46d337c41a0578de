//! The kernel workbench in the app: a watched `--shaders DIR` (or one picked in the path
//! field), polled every frame. A save that validates is compiled by the backends the worker
//! builds next and re-checks the run from the first step that dispatched a changed kernel
//! family (the steps before keep their results; `session::rerun` says how the backends resume);
//! the rerun's captures are compared with the previous run's (pass -> fail and back, the
//! error/tolerance ratio before and after). A save that does not parse, validate or keep its
//! interface shows a banner with `FILE:LINE:COL` and the message, and the results stay.
//!
//! A save while a run or re-check is in progress cancels it after its current step and
//! re-checks again: the worker never replays past the steps it has reported, so the results
//! kept are always ones the new kernels cannot have changed.

use super::app::GoldenLensApp;
use crate::model::Step;
use crate::session::rerun::RecheckDiff;
use std::path::PathBuf;

/// A shader error shown in the workbench banner until a good save.
#[derive(Debug, Clone, PartialEq)]
pub struct ShaderBanner {
    /// `(file, line, column)` when the error is located in a file.
    pub location: Option<(String, u32, u32)>,
    /// The error as `check` prints it (the location, the message, the line quoted).
    pub message: String,
}

impl ShaderBanner {
    /// `FILE:LINE:COL` (or "shaders" for an error no file locates).
    pub fn headline(&self) -> String {
        match &self.location {
            Some((f, l, c)) => format!("{f}:{l}:{c}"),
            None => "shaders".into(),
        }
    }
}

/// The last re-check: what changed, where the rerun resumed and how its verdicts differ.
#[derive(Debug, Clone, Default)]
pub struct Recheck {
    /// The kernel families whose source changed.
    pub families: Vec<&'static str>,
    /// The first step that dispatched one of them (None: no reported step did; the rerun
    /// resumes where the run stood).
    pub first_step: Option<Step>,
    /// Set once the worker resumed: `(regime, step)` the rerun started at.
    pub resumed: Option<(String, Option<Step>)>,
    /// Steps (and their results) kept from the previous run.
    pub kept_steps: usize,
    pub kept_results: usize,
    /// The rerun's verdicts against the previous run's.
    pub diff: RecheckDiff,
    /// The run serial the rerun's steps carry ([`super::state::StepMark::run`]).
    pub run: u64,
}

impl Recheck {
    /// One line: what changed, where the rerun started, what it kept and found.
    pub fn summary(&self) -> String {
        let fams = self.families.join(", ");
        let Some((regime, step)) = &self.resumed else {
            return format!("{fams} changed: re-check queued");
        };
        let (broke, fixed) = self.diff.counts();
        let at = match step {
            Some(s) => format!("from {regime} {s}"),
            None => "(nothing left to run)".into(),
        };
        format!(
            "{fams} changed: rerun {at}, {} steps ({} captures) kept; {broke} pass -> fail, \
             {fixed} fail -> pass",
            self.kept_steps, self.kept_results
        )
    }
}

/// The workbench's state (what the panels read).
#[derive(Default)]
pub struct WorkbenchState {
    /// The text of the shader directory field.
    pub field: String,
    /// The directory watched.
    pub dir: Option<PathBuf>,
    /// The last shader error, until a good save.
    pub error: Option<ShaderBanner>,
    /// The last re-check.
    pub recheck: Option<Recheck>,
    /// Good reloads so far (each compiled by the next backends).
    pub reloads: u64,
    /// The Re-check window is shown.
    pub diff_open: bool,
    /// The Profile window is shown.
    pub profile_open: bool,
    /// The step the Profile window narrows to (None: every step).
    pub profile_step: Option<String>,
    #[cfg(feature = "gpu")]
    pub(super) watch: Option<crate::gpu::watch::ShaderWatch>,
    /// The GPU backend's dispatch times as of the last finished request.
    #[cfg(feature = "gpu")]
    pub profile: Option<std::sync::Arc<crate::gpu::profile::Profile>>,
}

impl GoldenLensApp {
    /// Whether this app has a GPU backend to put on the workbench.
    pub fn has_workbench(&self) -> bool {
        #[cfg(feature = "gpu")]
        return self.state.options.workbench.is_some();
        #[cfg(not(feature = "gpu"))]
        false
    }

    /// The workbench's state.
    pub fn workbench(&self) -> &WorkbenchState {
        &self.state.workbench
    }

    /// Watch `dir` from now on (replacing any watched directory) and apply what it holds now.
    #[cfg(feature = "gpu")]
    pub(super) fn watch_shaders(&mut self, dir: PathBuf) {
        use crate::gpu::watch::ShaderWatch;
        let Some(bench) = self.state.options.workbench.clone() else {
            self.state.errors.push(format!(
                "watch {}: the kernel workbench needs the GPU backend ({})",
                dir.display(),
                self.state.options.gpu.banner()
            ));
            return;
        };
        let ctx = self.ctx.clone();
        let wake = move || {
            if let Some(c) = &ctx {
                c.request_repaint();
            }
        };
        match ShaderWatch::new(&dir, bench.shaders(), wake) {
            Ok(mut w) => {
                let now = w.reload();
                let wb = &mut self.state.workbench;
                wb.watch = Some(w);
                wb.field = dir.display().to_string();
                wb.dir = Some(dir.clone());
                self.state.notice = Some(format!("watching {} for shader edits", dir.display()));
                if let Some(e) = now {
                    self.shader_event(e);
                }
            }
            Err(e) => self.state.errors.push(e.to_string()),
        }
    }

    #[cfg(not(feature = "gpu"))]
    pub(super) fn watch_shaders(&mut self, dir: PathBuf) {
        self.state.errors.push(format!(
            "watch {}: this build has no GPU backend (rebuild with the `gpu` feature)",
            dir.display()
        ));
    }

    /// Each frame: take what the watcher found; keep frames coming while a save settles.
    pub(super) fn poll_shaders(&mut self) {
        #[cfg(feature = "gpu")]
        {
            let Some(w) = self.state.workbench.watch.as_mut() else {
                return;
            };
            let event = w.poll();
            let settling = w.settling();
            if let Some(e) = event {
                self.shader_event(e);
            }
            if settling {
                if let Some(c) = &self.ctx {
                    c.request_repaint_after(crate::gpu::watch::SETTLE);
                }
            }
        }
    }

    #[cfg(feature = "gpu")]
    fn shader_event(&mut self, event: crate::gpu::watch::ShaderEvent) {
        use crate::gpu::watch::ShaderEvent;
        match event {
            ShaderEvent::Invalid(e) => {
                let location = e.location().map(|(f, l, c)| (f.to_string(), l, c));
                let banner = ShaderBanner {
                    location,
                    message: e.rendered(),
                };
                self.state.notice = Some(format!(
                    "{}: not compiled; the last good kernels and results stay",
                    banner.headline()
                ));
                self.state.workbench.error = Some(banner);
            }
            ShaderEvent::Changed { set, families } => {
                let s = &mut self.state;
                s.workbench.error = None;
                s.workbench.reloads += 1;
                if let Some(bench) = &s.options.workbench {
                    bench.set_shaders(set);
                }
                if families.is_empty() {
                    s.notice = Some(
                        "the shaders are valid again and as last compiled: results stand".into(),
                    );
                    return;
                }
                self.recheck(families);
            }
        }
    }

    /// Re-check the run after `families` changed (see the module doc).
    #[cfg(feature = "gpu")]
    fn recheck(&mut self, families: Vec<&'static str>) {
        use crate::session::controller::Request;
        let s = &mut self.state;
        let first_step = s
            .options
            .workbench
            .as_ref()
            .and_then(|b| b.first_step_using(&families));
        let Some(c) = &self.controller else {
            s.notice = Some(format!(
                "{} changed; the next run compiles it",
                families.join(", ")
            ));
            return;
        };
        let idle_and_done = s.progress.finished && !s.progress.busy;
        if idle_and_done && first_step.is_none() {
            s.notice = Some(format!(
                "{} changed, but no step of this run dispatches it: every result stands",
                families.join(", ")
            ));
            return;
        }
        if s.progress.busy {
            c.cancel();
        }
        c.send(Request::RerunFrom(first_step));
        s.progress.busy = true;
        s.notice = Some(format!(
            "{} changed: re-checking from {}",
            families.join(", "),
            first_step.map_or("where the run stood".to_string(), |st| st.to_string())
        ));
        s.workbench.recheck = Some(Recheck {
            families,
            first_step,
            ..Default::default()
        });
    }

    /// The worker resumed a re-check after `kept_steps` steps: every later result is void (kept
    /// aside as the diff's "before"), and the rerun's steps carry a new run serial.
    pub(super) fn rerun_started(&mut self, kept_steps: usize, regime: String, step: Option<Step>) {
        let s = &mut self.state;
        let k = kept_steps.min(s.step_log.len());
        let previous = match s.step_log.get(k).cloned() {
            Some(m) => {
                s.step_log.truncate(k);
                s.other_violations.truncate(m.violations_start);
                s.missing.truncate(m.missing_start);
                s.not_isolated.truncate(m.not_isolated_start);
                s.results.split_off(m.results_start)
            }
            None => Vec::new(),
        };
        // The selection comes back when its capture is rerun.
        if let Some(sel) = s.selected.filter(|&i| i >= s.results.len()) {
            if let Some(r) = previous.get(sel - s.results.len()) {
                s.options.select_on_start = Some(r.label());
            }
            s.selected = None;
        }
        self.caches.clear();
        s.run_serial += 1;
        let rc = s.workbench.recheck.get_or_insert_with(Recheck::default);
        rc.resumed = Some((regime, step));
        rc.kept_steps = k;
        rc.kept_results = s.results.len();
        rc.diff = RecheckDiff::new(&previous);
        rc.run = s.run_serial;
    }

    /// After a request finished: the GPU profile as of now (the Profile window).
    pub(super) fn refresh_profile(&mut self) {
        #[cfg(feature = "gpu")]
        if let Some(b) = &self.state.options.workbench {
            self.state.workbench.profile = b.profile().map(std::sync::Arc::new);
        }
    }
}
