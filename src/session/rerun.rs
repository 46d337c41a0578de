//! The live re-check of the kernel workbench: what a rerun after a shader edit changed against
//! the run before it ([`RecheckDiff`]: captures that went from pass to fail or back, with their
//! error/tolerance ratio before and after), and, with the GPU path, the link between the app and
//! the GPU backends its worker builds ([`Workbench`]): the shader set every new backend compiles,
//! the kernel families each step dispatched (so a rerun starts at the first step using a changed
//! family) and the dispatch times of the last run (the Profile view).
//!
//! How a rerun resumes: the worker builds fresh backends on the new shader set and *replays*
//! the steps before the first step using a changed family without comparing or reporting them
//! (`controller::Request::RerunFrom`), so the results the app holds for those steps stay as they
//! are and the backends stand exactly where the previous run stood (same kernels, and both
//! backends are bitwise deterministic, `check --repeat`). Seeding the resumed step from the kept
//! captures instead would restore only that step's inputs: the window rings, compressor partial
//! groups and compressed/index caches the earlier steps wrote would be missing for every later
//! step and regime, so a seeded resume would not be the run a restart gives.

use super::results::CaptureResult;
use crate::model::Step;
use std::collections::HashMap;

/// A capture whose verdict changed between the previous run and a re-check.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// `regime/name`.
    pub label: String,
    pub step: Step,
    pub passed_before: bool,
    pub passes_now: bool,
    /// Worst error/tolerance over every comparison, before and now.
    pub ratio_before: f64,
    pub ratio_now: f64,
}

impl Transition {
    /// `pass -> fail` or `fail -> pass`.
    pub fn arrow(&self) -> &'static str {
        if self.passes_now {
            "fail -> pass"
        } else {
            "pass -> fail"
        }
    }

    /// One line: what changed and the ratio before and after (the row chips' and the panel's
    /// accessibility label).
    pub fn describe(&self) -> String {
        format!(
            "{}: {} (error/tolerance {:.3e} -> {:.3e})",
            self.label,
            self.arrow(),
            self.ratio_before,
            self.ratio_now
        )
    }
}

/// What a re-check changed: every rerun capture is compared with the previous run's verdict of
/// the same capture.
#[derive(Debug, Clone, Default)]
pub struct RecheckDiff {
    /// `label -> (passed, worst ratio)` of the previous run's captures the re-check replaces.
    before: HashMap<String, (bool, f64)>,
    /// Verdict changes, in execution order.
    pub transitions: Vec<Transition>,
    /// Rerun captures the previous run also had.
    pub compared: usize,
    /// Of those, captures whose verdict held but whose worst ratio changed.
    pub ratio_changed: usize,
}

impl RecheckDiff {
    /// A diff against `previous`, the results the re-check replaces.
    pub fn new(previous: &[CaptureResult]) -> RecheckDiff {
        RecheckDiff {
            before: previous
                .iter()
                .map(|r| (r.label(), (r.pass(), r.worst_ratio())))
                .collect(),
            ..Default::default()
        }
    }

    /// Fold in the re-check's results of one step.
    pub fn add(&mut self, now: &[CaptureResult]) {
        for r in now {
            let label = r.label();
            let Some(&(passed_before, ratio_before)) = self.before.get(&label) else {
                continue;
            };
            self.compared += 1;
            let (passes_now, ratio_now) = (r.pass(), r.worst_ratio());
            if passes_now != passed_before {
                self.transitions.push(Transition {
                    label,
                    step: r.step,
                    passed_before,
                    passes_now,
                    ratio_before,
                    ratio_now,
                });
            } else if ratio_now.to_bits() != ratio_before.to_bits() {
                self.ratio_changed += 1;
            }
        }
    }

    /// The verdict change of capture `label`, if it had one.
    pub fn transition_of(&self, label: &str) -> Option<&Transition> {
        self.transitions.iter().find(|t| t.label == label)
    }

    /// `(pass -> fail, fail -> pass)` counts.
    pub fn counts(&self) -> (usize, usize) {
        let fixed = self.transitions.iter().filter(|t| t.passes_now).count();
        (self.transitions.len() - fixed, fixed)
    }
}

#[cfg(feature = "gpu")]
pub use gpu_link::{Workbench, WorkbenchGpu};

#[cfg(feature = "gpu")]
mod gpu_link {
    use crate::gpu::profile::Profile;
    use crate::gpu::{GpuBackend, ShaderSet};
    use crate::model::{Backend, BackendError, Capture, Pins, SeedTensors, Step};
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::{Arc, Mutex, PoisonError, RwLock};

    /// Shared between the app and the GPU backends its worker builds: the shader set new
    /// backends compile, and what those backends report back (kernel use per step, dispatch
    /// times, the adapter).
    #[derive(Debug)]
    pub struct Workbench {
        shaders: RwLock<Arc<ShaderSet>>,
        seen: Mutex<Seen>,
    }

    #[derive(Debug, Default)]
    struct Seen {
        /// The GPU backend's steps, in forward order.
        steps: Vec<Step>,
        /// The kernel families each step dispatched (the backend's `kernels_of`).
        kernels: BTreeMap<Step, BTreeSet<&'static str>>,
        /// Dispatch times of the latest backend, as of its last finished regime.
        profile: Option<Profile>,
        /// The adapter, in words, with the limits the kernels were sized by.
        adapter: Option<String>,
    }

    impl Workbench {
        /// A workbench whose backends start on `shaders`.
        pub fn new(shaders: Arc<ShaderSet>) -> Arc<Workbench> {
            Arc::new(Workbench {
                shaders: RwLock::new(shaders),
                seen: Mutex::new(Seen::default()),
            })
        }

        /// A workbench on the process's `--shaders` set (else the embedded one).
        pub fn from_settings() -> Arc<Workbench> {
            let set = crate::gpu::settings::current()
                .shaders
                .unwrap_or_else(|| Arc::new(ShaderSet::embedded()));
            Workbench::new(set)
        }

        /// The set the next backend compiles.
        pub fn shaders(&self) -> Arc<ShaderSet> {
            self.shaders
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }

        /// Compile `set` in every backend built from now on (a good reload).
        pub fn set_shaders(&self, set: Arc<ShaderSet>) {
            *self.shaders.write().unwrap_or_else(PoisonError::into_inner) = set;
        }

        fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
            self.seen.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// Put `gpu` on this workbench: it compiles the current set, times every dispatch
        /// (GPU timestamps where the adapter has them) and reports its kernel use back.
        pub fn attach(self: &Arc<Self>, mut gpu: GpuBackend) -> WorkbenchGpu {
            gpu.set_shaders(self.shaders());
            gpu.start_profiling();
            {
                let mut seen = self.seen();
                seen.steps = gpu.steps();
                seen.profile = None;
                let a = gpu.adapter();
                seen.adapter = Some(format!(
                    "{a}; storage binding {} MiB, {} invocations per workgroup, {} B workgroup \
                     memory",
                    a.limits.max_storage_binding_bytes >> 20,
                    a.limits.max_invocations_per_workgroup,
                    a.limits.max_workgroup_storage_bytes
                ));
            }
            WorkbenchGpu {
                inner: gpu,
                bench: self.clone(),
            }
        }

        /// The first step, in forward order, whose kernels include one of `families` in the
        /// runs so far (the backend's `first_step_using`); None when no step used them.
        pub fn first_step_using(&self, families: &[&str]) -> Option<Step> {
            let seen = self.seen();
            seen.steps.iter().copied().find(|s| {
                seen.kernels
                    .get(s)
                    .is_some_and(|k| k.iter().any(|f| families.contains(f)))
            })
        }

        /// The kernel families `step` dispatched.
        pub fn kernels_of(&self, step: Step) -> Vec<&'static str> {
            self.seen()
                .kernels
                .get(&step)
                .map(|k| k.iter().copied().collect())
                .unwrap_or_default()
        }

        /// The latest backend's dispatch times, as of its last finished regime.
        pub fn profile(&self) -> Option<Profile> {
            self.seen().profile.clone()
        }

        /// The adapter the latest backend runs on, with its kernel limits.
        pub fn adapter(&self) -> Option<String> {
            self.seen().adapter.clone()
        }
    }

    /// A GPU backend attached to a [`Workbench`] (it runs exactly as the backend does).
    pub struct WorkbenchGpu {
        inner: GpuBackend,
        bench: Arc<Workbench>,
    }

    impl WorkbenchGpu {
        /// The backend itself.
        pub fn gpu(&self) -> &GpuBackend {
            &self.inner
        }
    }

    impl Backend for WorkbenchGpu {
        fn name(&self) -> String {
            self.inner.name()
        }
        fn begin(&mut self, ids: &[i64], start_pos: usize) -> Result<(), BackendError> {
            self.inner.begin(ids, start_pos)
        }
        fn steps(&self) -> Vec<Step> {
            self.inner.steps()
        }
        fn run(&mut self, step: Step, sink: &mut Vec<Capture>) -> Result<(), BackendError> {
            let r = self.inner.run(step, sink);
            let used = self.inner.kernels_of(step);
            // The profile is read once per regime: it is every dispatch so far, cloned.
            let profile = (step == Step::Final)
                .then(|| self.inner.profile())
                .flatten();
            let mut seen = self.bench.seen();
            seen.kernels.entry(step).or_default().extend(used);
            if profile.is_some() {
                seen.profile = profile;
            }
            r
        }
        fn pin(&mut self, pins: &Pins) -> Result<bool, BackendError> {
            self.inner.pin(pins)
        }
        fn seed(
            &mut self,
            step: Step,
            reference: &dyn SeedTensors,
        ) -> Result<Vec<String>, BackendError> {
            self.inner.seed(step, reference)
        }
        fn hint(
            &mut self,
            hints: &crate::model::hints::SelectionHints,
        ) -> Result<bool, BackendError> {
            self.inner.hint(hints)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::compare::{compare_full, Values};
    use crate::golden::names::CaptureKind;
    use crate::golden::policy_for_capture;
    use crate::model::CaptureValues;
    use crate::session::results::BackendCapture;
    use std::sync::Arc;

    /// `err` added to one element of a bf16 capture: 0 passes, 1.0 is far past the bar.
    fn result(name: &str, err: f32) -> CaptureResult {
        let reference = vec![1.0f32, 2.0, 3.0, 4.0];
        let mut test = reference.clone();
        test[2] += err;
        let policy = policy_for_capture(name, false);
        let cmp = compare_full(Values::F32(&test), Values::F32(&reference), &[4], &policy);
        CaptureResult {
            order: 0,
            regime_index: 0,
            regime: "prefill12".into(),
            step: Step::Block(0),
            name: name.into(),
            kind: CaptureKind::Bf16,
            shape: vec![4],
            per_backend: vec![BackendCapture {
                backend: "gpu".into(),
                values: Arc::new(CaptureValues::F32(test)),
                vs_golden: Some(cmp),
                triage: None,
                budget: None,
                violations: Vec::new(),
            }],
            cross: Vec::new(),
        }
    }

    #[test]
    fn a_recheck_lists_verdict_changes_with_their_ratios() {
        let before = [result("L0.sa_q", 0.0), result("L0.sa_kv", 1.0)];
        let mut d = RecheckDiff::new(&before);
        // A capture the previous run did not have is not a transition.
        d.add(&[result("L0.sa_q", 1.0), result("L0.new", 1.0)]);
        d.add(&[result("L0.sa_kv", 0.0)]);
        assert_eq!(d.compared, 2);
        assert_eq!(d.counts(), (1, 1));
        let broke = d.transition_of("prefill12/L0.sa_q").expect("sa_q changed");
        assert!(broke.passed_before && !broke.passes_now);
        assert_eq!(broke.ratio_before, 0.0);
        assert!(broke.ratio_now > 1.0, "{broke:?}");
        assert!(broke.describe().contains("pass -> fail"));
        let fixed = d
            .transition_of("prefill12/L0.sa_kv")
            .expect("sa_kv changed");
        assert_eq!(fixed.arrow(), "fail -> pass");
        assert!(d.transition_of("prefill12/L0.new").is_none());
    }

    mod worker {
        use crate::golden::Golden;
        use crate::model::Step;
        use crate::session::controller::{
            BackendFactory, BoxedBackend, CaptureResult, Controller, Event, Request,
        };
        use crate::session::Mode;
        use std::sync::Arc;
        use std::time::Duration;

        /// How long to wait for one worker event (a hang guard; a tiny step takes milliseconds).
        const EVENT_TIMEOUT: Duration = Duration::from_secs(120);

        fn oracle_worker() -> Controller {
            let golden =
                Arc::new(crate::golden::embedded::default_golden().expect("the embedded golden"));
            let g: Arc<Golden> = golden.clone();
            let factory: BackendFactory = Box::new(move || {
                crate::session::oracle_for(&g).map(|o| vec![Box::new(o) as BoxedBackend])
            });
            Controller::spawn(golden, factory, Mode::Chained, Box::new(|| {}))
        }

        /// What a request reported until the worker went idle: steps (with their results)
        /// before and after an `Event::Rerun`, and the rerun itself.
        #[derive(Default)]
        struct Seen {
            before: Vec<(Step, Vec<CaptureResult>)>,
            rerun: Option<(usize, Option<Step>)>,
            after: Vec<(Step, Vec<CaptureResult>)>,
        }

        fn until_idle(c: &Controller, seen: &mut Seen) {
            let mut busy = false;
            loop {
                match c.recv_timeout(EVENT_TIMEOUT) {
                    Some(Event::StepDone { step, results, .. }) => match seen.rerun {
                        None => seen.before.push((step, results)),
                        Some(_) => seen.after.push((step, results)),
                    },
                    Some(Event::Rerun {
                        kept_steps, step, ..
                    }) => seen.rerun = Some((kept_steps, step)),
                    Some(Event::Progress(p)) => {
                        busy |= p.busy;
                        if busy && !p.busy {
                            return;
                        }
                    }
                    Some(Event::Error(e)) => panic!("worker error: {e}"),
                    Some(_) => {}
                    None => panic!("no event within {EVENT_TIMEOUT:?}"),
                }
            }
        }

        fn bits(results: &[(Step, Vec<CaptureResult>)]) -> Vec<(String, f64)> {
            results
                .iter()
                .flat_map(|(_, r)| r.iter().map(|r| (r.label(), r.worst_ratio())))
                .collect()
        }

        #[test]
        fn a_rerun_keeps_the_steps_before_its_first_step_and_reports_the_rest_again() {
            let c = oracle_worker();
            let mut run = Seen::default();
            c.send(Request::RunAll);
            until_idle(&c, &mut run);
            let total = run.before.len();
            let from = Step::Block(1);
            let at = run
                .before
                .iter()
                .position(|(s, _)| *s == from)
                .expect("Block(1) ran");
            let mut re = Seen::default();
            c.send(Request::RerunFrom(Some(from)));
            until_idle(&c, &mut re);
            assert!(re.before.is_empty(), "replayed steps are not reported");
            assert_eq!(re.rerun, Some((at, Some(from))));
            assert_eq!(re.after.first().map(|(s, _)| *s), Some(from));
            assert_eq!(
                re.after.len(),
                total - at,
                "every later step is reported again"
            );
            // The replay left the backends where the first run stood: the same verdicts.
            assert_eq!(bits(&re.after), bits(&run.before[at..]));
        }

        #[test]
        fn a_rerun_asked_for_mid_run_never_keeps_a_step_that_was_not_reported() {
            let c = oracle_worker();
            c.send(Request::RunAll);
            let mut seen = Seen::default();
            while seen.before.len() < 3 {
                if let Some(Event::StepDone { step, results, .. }) = c.recv_timeout(EVENT_TIMEOUT) {
                    seen.before.push((step, results));
                }
            }
            // A save arrives while the run goes on: cancel it and re-check from `Final`.
            c.cancel();
            c.send(Request::RerunFrom(Some(Step::Final)));
            until_idle(&c, &mut seen); // the cancelled run (or, had it ended, the whole run)
            if seen.rerun.is_none() {
                until_idle(&c, &mut seen); // the rerun
            }
            let (kept, step) = seen.rerun.expect("a rerun");
            // It keeps what was reported up to the first `Final`, never more.
            let reported: Vec<Step> = seen.before.iter().map(|(s, _)| *s).collect();
            let first_final = reported.iter().position(|s| *s == Step::Final);
            assert_eq!(kept, first_final.unwrap_or(reported.len()), "{reported:?}");
            assert!(step.is_some());
            let full = {
                let w = oracle_worker();
                let mut full = Seen::default();
                w.send(Request::RunAll);
                until_idle(&w, &mut full);
                full.before
            };
            assert_eq!(
                kept + seen.after.len(),
                full.len(),
                "no step lost or doubled"
            );
            assert_eq!(bits(&seen.after), bits(&full[kept..]));
        }
    }
}
