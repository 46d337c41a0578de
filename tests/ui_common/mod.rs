//! Shared harness of the app tests (egui_kittest): window size, timeouts, waiting for worker
//! threads, running the loaded golden.
#![allow(dead_code)] // each test binary uses its own subset

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use golden_lens::golden::Golden;
use golden_lens::model::{Backend, BackendError, Capture, Pins, SeedTensors, Step};
use golden_lens::oracle::faults::{Fault, FaultPlan};
use golden_lens::session::{self, controller::BoxedBackend};
use golden_lens::ui::{AppOptions, GoldenLensApp};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a full run of the tiny golden may take in the test profile (it takes seconds; the
/// bound only keeps a hung worker from hanging CI).
pub const RUN_TIMEOUT: Duration = Duration::from_secs(600);
/// How long loading a small file may take.
pub const LOAD_TIMEOUT: Duration = Duration::from_secs(60);
/// Window size of the tests (also the snapshots' size).
pub const SIZE_PT: [f32; 2] = [1600.0, 1000.0];

pub fn harness(options: AppOptions) -> Harness<'static, GoldenLensApp> {
    Harness::builder()
        .with_size(SIZE_PT)
        .with_max_steps(16)
        .build_eframe(move |cc| GoldenLensApp::new(&cc.egui_ctx, options))
}

/// Step the harness until `done` holds, sleeping between frames so worker threads progress.
pub fn wait_until(
    h: &mut Harness<'static, GoldenLensApp>,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Harness<'static, GoldenLensApp>) -> bool,
) {
    let start = Instant::now();
    loop {
        h.step();
        if done(h) {
            // Let the layout settle (lists and plots size themselves over a frame or two).
            h.step();
            h.step();
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Click "Run all" and wait for the run to finish.
pub fn run_all(h: &mut Harness<'static, GoldenLensApp>) {
    h.get_by_label("Run all").click();
    wait_until(h, "the run to finish", RUN_TIMEOUT, |h| {
        h.query_by_label("Status: finished").is_some()
    });
}

/// A backend under another name, so the app's labels tell a test backend (e.g. a second oracle
/// with planted faults) from the reference oracle.
pub struct Renamed<B> {
    pub name: &'static str,
    pub inner: B,
}

impl<B: Backend> Backend for Renamed<B> {
    fn name(&self) -> String {
        self.name.into()
    }
    fn begin(&mut self, ids: &[i64], start_pos: usize) -> Result<(), BackendError> {
        self.inner.begin(ids, start_pos)
    }
    fn steps(&self) -> Vec<Step> {
        self.inner.steps()
    }
    fn run(&mut self, step: Step, sink: &mut Vec<Capture>) -> Result<(), BackendError> {
        self.inner.run(step, sink)
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
}

/// The app with the CPU oracle as reference (emitting its diagnostic scores when `diagnostics`)
/// and, as its test backend, a second oracle named `cpu-test` with `faults` planted (what the
/// GPU backend is in the real app).
pub fn planted_options(faults: Vec<Fault>, diagnostics: bool) -> AppOptions {
    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    o.backends = Arc::new(move |g: &Golden, gguf: Option<&Path>| {
        let mut reference = session::oracle_on(g, gguf).map_err(|e| e.to_string())?;
        reference.diagnostics = diagnostics;
        let mut test = session::oracle_on(g, gguf).map_err(|e| e.to_string())?;
        test.faults = FaultPlan::new(faults.clone());
        Ok(vec![
            Box::new(reference) as BoxedBackend,
            Box::new(Renamed {
                name: "cpu-test",
                inner: test,
            }) as BoxedBackend,
        ])
    });
    o
}

/// Wait for the embedded golden and the session worker's first report.
pub fn wait_ready(h: &mut Harness<'static, GoldenLensApp>) {
    wait_until(h, "the embedded golden", RUN_TIMEOUT, |h| {
        h.query_by_label_contains("Golden: <embedded").is_some()
            && h.state().progress().steps_total > 0
            && h.query_by_label("Status: ready").is_some()
    });
}
