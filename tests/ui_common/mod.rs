//! Shared harness of the app tests (egui_kittest): window size, timeouts, waiting for worker
//! threads, running the loaded golden.
#![allow(dead_code)] // each test binary uses its own subset

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use golden_lens::ui::{AppOptions, GoldenLensApp};
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
