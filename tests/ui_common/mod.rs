//! Shared harness of the app tests (egui_kittest): window size, timeouts, waiting for worker
//! threads, running the loaded golden.
#![allow(dead_code)] // each test binary uses its own subset

use eframe::egui::Role;
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
/// Window size of the tests (also the snapshots' and README screenshots' size).
pub const SIZE_PT: [f32; 2] = [1280.0, 800.0];
/// The large window the layout is also checked at.
pub const LARGE_SIZE_PT: [f32; 2] = [1920.0, 1080.0];

/// The app as the options say, at `size`.
pub fn harness_at(options: AppOptions, size: [f32; 2]) -> Harness<'static, GoldenLensApp> {
    Harness::builder()
        .with_size(size)
        .with_max_steps(16)
        .build_eframe(move |cc| GoldenLensApp::new(&cc.egui_ctx, options))
}

/// The app opened idle (tests drive the run themselves; the app's own default runs at once).
pub fn harness(mut options: AppOptions) -> Harness<'static, GoldenLensApp> {
    options.run_on_start = false;
    harness_at(options, SIZE_PT)
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
    h.get_by_role_and_label(Role::Button, "Run all").click();
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
        let mut reference = session::oracle_on(g, gguf)?;
        reference.diagnostics = diagnostics;
        let mut test = session::oracle_on(g, gguf)?;
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

/// Wait for a run started on open (the app's default) to finish.
pub fn wait_finished(h: &mut Harness<'static, GoldenLensApp>) {
    wait_until(h, "the run to finish", RUN_TIMEOUT, |h| {
        h.query_by_label("Status: finished").is_some()
    });
}

/// Select a capture by typing its label into the list's filter and clicking its row.
pub fn select_capture(h: &mut Harness<'static, GoldenLensApp>, label: &str) {
    h.get_by_label("Filter:").focus();
    h.step();
    h.key_combination_modifiers(eframe::egui::Modifiers::COMMAND, &[eframe::egui::Key::A]);
    h.step();
    h.get_by_label("Filter:").type_text(label);
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, label).click();
    wait_until(h, "the selection", LOAD_TIMEOUT, |h| {
        h.state().selected().is_some_and(|r| r.label() == label)
    });
}

/// Clear the list's filter (so keyboard navigation sees every capture).
pub fn clear_filter(h: &mut Harness<'static, GoldenLensApp>) {
    h.get_by_label("Filter:").focus();
    h.step();
    h.key_combination_modifiers(eframe::egui::Modifiers::COMMAND, &[eframe::egui::Key::A]);
    h.step();
    h.key_press(eframe::egui::Key::Backspace);
    h.step();
    // Give the keyboard back to the app (n/p and the arrows are ignored while a field has it).
    h.key_press(eframe::egui::Key::Escape);
    h.run_steps(2);
}

// ---- synthetic results at DeepSeek-V4.1 sizes ------------------------------------------------

use golden_lens::golden::compare::{compare_full, Values};
use golden_lens::golden::policy::policy_for_capture;
use golden_lens::golden::CaptureKind;
use golden_lens::model::CaptureValues;
use golden_lens::session::controller::{BackendCapture, CaptureResult, CrossComparison};

/// Tokens of the synthetic real-dims captures.
pub const REAL_TOKENS: usize = 16;
/// Routed experts and experts per token of the real model.
pub const REAL_EXPERTS: usize = 384;
pub const REAL_TOPK_EXPERTS: usize = 6;
/// Indexer top-k and the compressed positions it picks from.
pub const REAL_INDEX_TOPK: usize = 512;
pub const REAL_INDEX_POSITIONS: usize = 2048;
/// Sliding-window slots of a real `sa_topk_idxs` row, and its kv rows.
pub const REAL_WINDOW: usize = 128;
pub const REAL_KV_ROWS: usize = REAL_WINDOW + REAL_INDEX_POSITIONS;

/// splitmix64: deterministic test data without a dependency.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn unit(seed: u64) -> f32 {
    (mix(seed) >> 40) as f32 / (1u64 << 24) as f32
}

fn result(
    order: usize,
    name: &str,
    kind: CaptureKind,
    shape: Vec<usize>,
    cpu: CaptureValues,
    gpu: CaptureValues,
) -> CaptureResult {
    let policy = policy_for_capture(name, kind.is_int());
    fn vals(v: &CaptureValues) -> Values<'_> {
        match v {
            CaptureValues::F32(x) => Values::F32(x),
            CaptureValues::I64(x) => Values::I64(x),
        }
    }
    let cmp = compare_full(vals(&gpu), vals(&cpu), &shape, &policy);
    let side = |name: &str, v: CaptureValues| BackendCapture {
        backend: name.into(),
        values: std::sync::Arc::new(v),
        vs_golden: None,
        triage: None,
        budget: None,
        violations: Vec::new(),
    };
    CaptureResult {
        order,
        regime_index: 0,
        regime: "realdims".into(),
        step: golden_lens::model::Step::Block(0),
        name: name.into(),
        kind,
        shape,
        per_backend: vec![side("cpu", cpu), side("gpu", gpu)],
        cross: vec![CrossComparison {
            test: "gpu".into(),
            reference: "cpu".into(),
            cmp,
            triage: None,
            tie_flip: false,
            budget: None,
        }],
    }
}

/// Bf16-representable values (the low 16 bits cleared).
fn bf16ish(v: f32) -> f32 {
    f32::from_bits(v.to_bits() & 0xffff_0000)
}

/// A float capture whose GPU side differs in a tile-edge column and holds one NaN.
fn float_result(order: usize, name: &str, shape: Vec<usize>, seed: u64) -> CaptureResult {
    let n: usize = shape.iter().product();
    let last = *shape.last().unwrap_or(&1);
    let cpu: Vec<f32> = (0..n)
        .map(|i| bf16ish((unit(seed ^ i as u64) - 0.5) * 4.0))
        .collect();
    let mut gpu = cpu.clone();
    for (i, g) in gpu.iter_mut().enumerate() {
        // Every 64th column is off by one bf16 ulp: a tile-edge bug.
        if i % last % 64 == 63 {
            *g = f32::from_bits(g.to_bits() + 0x1_0000);
        }
    }
    gpu[n / 3] = f32::NAN;
    result(
        order,
        name,
        CaptureKind::Bf16,
        shape,
        CaptureValues::F32(cpu),
        CaptureValues::F32(gpu),
    )
}

/// `k` distinct indices below `n` per row, row-seeded; the GPU side swaps one index in every
/// fourth row.
fn index_rows(rows: usize, k: usize, n: usize, seed: u64, pad: &[i64]) -> (Vec<i64>, Vec<i64>) {
    let mut cpu = Vec::with_capacity(rows * (pad.len() + k));
    let mut gpu = Vec::with_capacity(rows * (pad.len() + k));
    for r in 0..rows {
        let start = (mix(seed ^ r as u64) % (n as u64 - k as u64)) as i64;
        let picks: Vec<i64> = (0..k as i64).map(|j| start + j).collect();
        let mut g = picks.clone();
        if r % 4 == 1 {
            g[k / 2] = (start + k as i64) % n as i64;
        }
        cpu.extend(pad.iter().copied().chain(picks));
        gpu.extend(pad.iter().copied().chain(g));
    }
    (cpu, gpu)
}

/// The captures the views must draw at real sizes: a `[1, 16, 64, 512]` attention output,
/// the `[1, 16, 4, 5120]` stream, 6-of-384 routing, the 512-of-2048 index top-k and a
/// 128 + 512 wide `sa_topk_idxs` over 2176 kv rows.
pub fn real_dims_results() -> Vec<CaptureResult> {
    let mut out = vec![
        float_result(0, "L0.sa_o", vec![1, REAL_TOKENS, 64, 512], 1),
        float_result(1, "L0.h_in", vec![1, REAL_TOKENS, 4, 5120], 2),
    ];
    let (ci, gi) = index_rows(REAL_TOKENS, REAL_TOPK_EXPERTS, REAL_EXPERTS, 3, &[]);
    let weights =
        |idx: &[i64]| -> Vec<f32> { idx.iter().map(|&e| 0.25 * (1.0 + unit(e as u64))).collect() };
    let (cw, gw) = (weights(&ci), weights(&gi));
    out.push(result(
        2,
        "L0.moe_weights",
        CaptureKind::F32,
        vec![REAL_TOKENS, REAL_TOPK_EXPERTS],
        CaptureValues::F32(cw),
        CaptureValues::F32(gw),
    ));
    out.push(result(
        3,
        "L0.moe_indices",
        CaptureKind::Index,
        vec![REAL_TOKENS, REAL_TOPK_EXPERTS],
        CaptureValues::I64(ci),
        CaptureValues::I64(gi),
    ));
    let (ct, gt) = index_rows(REAL_TOKENS, REAL_INDEX_TOPK, REAL_INDEX_POSITIONS, 4, &[]);
    out.push(result(
        4,
        "shared.L0.topk_idxs",
        CaptureKind::Index,
        vec![1, REAL_TOKENS, REAL_INDEX_TOPK],
        CaptureValues::I64(ct),
        CaptureValues::I64(gt),
    ));
    let window: Vec<i64> = (0..REAL_WINDOW as i64).collect();
    let (cm, gm) = index_rows(
        REAL_TOKENS,
        REAL_INDEX_TOPK,
        REAL_INDEX_POSITIONS,
        5,
        &window,
    );
    let offset = |v: Vec<i64>| -> Vec<i64> {
        v.chunks(REAL_WINDOW + REAL_INDEX_TOPK)
            .flat_map(|row| {
                row.iter()
                    .enumerate()
                    .map(|(j, &x)| {
                        if j < REAL_WINDOW {
                            x
                        } else {
                            x + REAL_WINDOW as i64
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    out.push(result(
        5,
        "L0.sa_topk_idxs",
        CaptureKind::Index,
        vec![1, REAL_TOKENS, REAL_WINDOW + REAL_INDEX_TOPK],
        CaptureValues::I64(offset(cm)),
        CaptureValues::I64(offset(gm)),
    ));
    let kv = vec![1, REAL_KV_ROWS, 64];
    let zeros = vec![0.0f32; REAL_KV_ROWS * 64];
    out.push(result(
        6,
        "L0.sa_kv",
        CaptureKind::Bf16,
        kv,
        CaptureValues::F32(zeros.clone()),
        CaptureValues::F32(zeros),
    ));
    out
}

/// Colour distance under which a pixel counts as unchanged: antialiased glyph edges differ by up
/// to ~0.6 between runs of the same frame on lavapipe.
pub const SNAPSHOT_COLOR_THRESHOLD: f32 = 1.0;
/// Pixels allowed to differ in a full-window snapshot (1280x800 = 1,024,000): one text row of the
/// detail area can land one pixel lower between runs (sub-pixel layout of a wrapped row), which
/// moves ~5,000 glyph pixels; a changed view, colour or layout moves far more.
pub const SNAPSHOT_JITTER_PIXELS: usize = 8_000;

/// A window snapshot that tolerates the run-to-run jitter above.
pub fn snapshot_tolerant(h: &mut Harness<'static, GoldenLensApp>, name: &str) {
    let opts = egui_kittest::SnapshotOptions::new()
        .threshold(SNAPSHOT_COLOR_THRESHOLD)
        .max_failed_pixels(SNAPSHOT_JITTER_PIXELS);
    h.snapshot_options(name, &opts);
}
