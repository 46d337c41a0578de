//! Drives the real app in egui_kittest: start on the embedded golden, run all, read the summary
//! through accessibility labels, select a capture by its label and read its metrics, switch
//! every detail view (with strict snapshots), open a malformed golden, export failing captures
//! and load the export back, and show a real-dims capture through a downsampled texture.
#![cfg(feature = "gui")]

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use golden_lens::golden::Golden;
use golden_lens::model::CaptureValues;
use golden_lens::session::controller::{BackendCapture, CaptureResult};
use golden_lens::ui::views::ReferenceChoice;
use golden_lens::ui::{AppOptions, GoldenLensApp, UiCommand};
use std::sync::Arc;
use std::time::Instant;

mod ui_common;
use ui_common::*;

/// Frame budget for a steady frame in the test profile (debug build of our code at opt-level 1);
/// the release window meets 16 ms, this bound catches a frame that rebuilds a texture every time.
const STEADY_FRAME_BUDGET_SECS: f64 = 0.25;
/// Budget of the one frame that slices and downsamples the 64×512 capture and uploads it.
const FIRST_FRAME_BUDGET_SECS: f64 = 2.0;

fn test_options() -> AppOptions {
    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    o
}

fn type_into(h: &mut Harness<'static, GoldenLensApp>, label: &str, text: &str) {
    h.get_by_label(label).focus();
    h.step();
    h.get_by_label(label).type_text(text);
    h.step();
}

fn select_capture(h: &mut Harness<'static, GoldenLensApp>, label: &str) {
    type_into(h, "Filter:", label);
    h.run_steps(2);
    h.get_by_label(label).click();
    h.run_steps(3);
}

#[test]
fn runs_the_default_golden_and_reads_summary_metrics_and_every_view() {
    let mut h = harness(test_options());
    wait_until(&mut h, "the embedded golden", LOAD_TIMEOUT, |h| {
        h.query_by_label_contains("Golden: <embedded").is_some()
    });
    h.get_by_label_contains("No GPU backend in this build");
    run_all(&mut h);
    let golden = golden_lens::golden::embedded::default_golden().expect("embedded golden");
    let total = golden.capture_count();
    h.get_by_label(&format!("{total} passed, 0 failed"));
    h.get_by_label("No divergence so far");
    assert_eq!(h.state().results().len(), total);

    select_capture(&mut h, "prefill12/L0.moe_indices");
    h.get_by_label("Selected: prefill12/L0.moe_indices");
    let selected = h.state().selected().expect("a selection");
    assert_eq!(selected.name, "L0.moe_indices");
    h.get_by_label_contains("cpu vs golden: pass (pass: bit-exact");
    h.get_by_label("cpu vs golden max_abs_err: 0.000000e0");
    h.get_by_label("cpu vs golden worst_ratio: 0.000000");

    // MoE routing is the view picked for a routing capture.
    h.get_by_label("Tokens routed identically: 12 of 12");
    h.get_by_label("tie flip: 0");
    h.remove_cursor();
    h.snapshot("ui_moe_routing");

    h.get_by_label("Top-k agreement").click();
    h.run_steps(3);
    h.get_by_label("Mean row agreement: 1.000; rows differing: 0 of 12");
    h.get_by_label("reference only: 0");
    h.get_by_label("test only: 0");
    h.remove_cursor();
    h.snapshot("ui_topk");

    h.get_by_label("Window mask").click();
    h.run_steps(3);
    h.get_by_label("Mask differences: 0");
    h.get_by_label_contains("Test (cpu): window cells");
    h.remove_cursor();
    h.snapshot("ui_window_mask");

    h.get_by_label("HC mixes").click();
    h.run_steps(3);
    assert!(h.query_all_by_label_contains("attn row sums:").count() == 2);
    h.get_by_label_contains("HC mixes of layer 0");
    h.remove_cursor();
    h.snapshot("ui_hc_mixes");

    h.get_by_label("Values").click();
    h.run_steps(3);
    h.get_by_label_contains("Values: reference = golden");
    h.get_by_label("Error histogram (|test − reference| by decade)");
    h.remove_cursor();
    h.snapshot("ui_values");
}

#[test]
fn malformed_golden_shows_an_error_and_the_app_keeps_running() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("broken.json");
    std::fs::write(&bad, "{\"fixture\": {\"dim\": 64,").expect("write");
    let mut h = harness(test_options());
    wait_until(&mut h, "the embedded golden", LOAD_TIMEOUT, |h| {
        h.query_by_label_contains("Golden: <embedded").is_some()
    });
    type_into(&mut h, "Path:", &bad.display().to_string());
    h.get_by_label("Open path").click();
    wait_until(&mut h, "the error banner", LOAD_TIMEOUT, |h| {
        h.query_by_label_contains("Error: ").is_some()
    });
    // The message names the file and says what is wrong with it.
    h.get_by_label_contains("broken.json: file is truncated");
    // Still on the embedded golden, and still usable.
    h.get_by_label_contains("Golden: <embedded");
    h.get_by_label("Dismiss").click();
    h.run_steps(2);
    assert!(h.query_by_label_contains("Error: ").is_none());
}

#[test]
fn export_failing_captures_loads_back_as_a_golden() {
    // A golden with one planted defect: logits_full of the prefill is off by 0.5 at index 0.
    let dir = tempfile::tempdir().expect("temp dir");
    let mut doc: serde_json::Value =
        serde_json::from_str(golden_lens::golden::embedded::DEFAULT_GOLDEN_JSON).expect("json");
    let first = &mut doc["prefill12"]["logits_full"]["data"][0];
    let v = first.as_f64().expect("float") + 0.5;
    *first = serde_json::json!(v);
    let planted = dir.path().join("planted.json");
    std::fs::write(&planted, serde_json::to_vec(&doc).expect("ser")).expect("write");

    let mut h = harness(test_options());
    type_into(&mut h, "Path:", &planted.display().to_string());
    h.get_by_label("Open path").click();
    // The toolbar names the opened golden (the path field holds the name from the start), and
    // the new session's worker has reported: otherwise `Run all` could go to the embedded
    // golden's session just before the planted one replaces it.
    let opened = format!("Golden: {}", planted.display());
    wait_until(&mut h, "the planted golden", LOAD_TIMEOUT, |h| {
        h.query_by_label(&opened).is_some()
            && h.state().progress().steps_total > 0
            && h.query_by_label_contains("Status: ready").is_some()
    });
    run_all(&mut h);
    h.get_by_label_contains("1 failed");
    h.get_by_label("First divergence: prefill12/logits_full at Final");

    let out = dir.path().join("failing.json");
    // Replace the field's text: select all, then type the export path.
    h.get_by_label("Path:").focus();
    h.step();
    h.key_combination_modifiers(eframe::egui::Modifiers::COMMAND, &[eframe::egui::Key::A]);
    h.step();
    h.get_by_label("Path:")
        .type_text(&out.display().to_string());
    h.step();
    h.get_by_label("Export failing to path").click();
    wait_until(&mut h, "the export notice", LOAD_TIMEOUT, |h| {
        h.query_by_label_contains("exported 1 failing captures")
            .is_some()
    });
    let back = Golden::load(&out).expect("the export loads as a golden");
    let cap = back
        .regime("prefill12")
        .and_then(|r| r.get("logits_full"))
        .expect("the failing capture is in the export");
    assert!((cap.samples_f64()[0] - v).abs() < f64::EPSILON);
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).expect("read")).expect("json");
    let gl = &raw["golden_lens"];
    assert_eq!(gl["provenance"]["mode"], "chained");
    assert_eq!(gl["provenance"]["weights"], "golden filler");
    assert_eq!(gl["provenance"]["backends"][0], "cpu");
    assert_eq!(gl["failing"][0]["capture"], "logits_full");
    assert_eq!(gl["failing"][0]["backends"][0]["vs_golden"]["pass"], false);
    let n = gl["failing"][0]["backends"][0]["data"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(n, cap.n, "the test side is exported whole");
}

/// A capture of real DeepSeek-V4.1 size per token (64 heads × 512 values) over 4 tokens.
fn large_result(order: usize) -> CaptureResult {
    let shape = vec![1, 4, 64, 512];
    let n: usize = shape.iter().product();
    let a: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.001).sin()).collect();
    let mut b = a.clone();
    b[12345] += 0.25;
    b[777] = f32::NAN;
    let side = |name: &str, v: Vec<f32>| BackendCapture {
        backend: name.into(),
        values: Arc::new(CaptureValues::F32(v)),
        vs_golden: None,
        triage: None,
        budget: None,
        violations: Vec::new(),
    };
    CaptureResult {
        order,
        regime_index: 0,
        regime: "synthetic".into(),
        step: golden_lens::model::Step::Block(0),
        name: "L0.big_tensor".into(),
        kind: golden_lens::golden::CaptureKind::Bf16,
        shape,
        per_backend: vec![side("cpu", a), side("gpu", b)],
        cross: Vec::new(),
    }
}

#[test]
fn real_dims_capture_shows_through_a_downsampled_texture_without_stalling() {
    let mut h = harness(test_options());
    // Wait for the worker's first progress report too: it follows the worker's `Cleared`, which
    // would otherwise race with (and drop) the injected result on a loaded machine.
    wait_until(&mut h, "the embedded golden", LOAD_TIMEOUT, |h| {
        h.query_by_label_contains("Golden: <embedded").is_some()
            && h.state().progress().steps_total > 0
    });
    h.state_mut().inject_results(vec![large_result(0)]);
    h.state_mut().handle(UiCommand::SetTestSide {
        backend: 1,
        reference: ReferenceChoice::FirstBackend,
    });
    h.state_mut().handle(UiCommand::SelectCapture(0));
    let t0 = Instant::now();
    h.step();
    let first = t0.elapsed().as_secs_f64();
    h.run_steps(2);
    h.get_by_label_contains("Reference: 64×512 cells (texture 64×256)");
    h.get_by_label_contains("Difference (test − reference): 64×512 cells");
    h.get_by_label_contains(
        "Test: 64×512 cells (texture 64×256), scale ±1.000e0, 1 NaN/inf marked",
    );
    let mut steady = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        h.step();
        steady.push(t.elapsed().as_secs_f64());
    }
    let worst = steady.iter().copied().fold(0.0, f64::max);
    let (mean_ui, max_ui) = h.state().frame_time_secs().expect("frames measured");
    println!(
        "real-dims capture: first frame {:.1} ms, steady frames worst {:.1} ms, app ui mean {:.2} ms / max {:.2} ms",
        first * 1e3,
        worst * 1e3,
        mean_ui * 1e3,
        max_ui * 1e3
    );
    assert!(
        first < FIRST_FRAME_BUDGET_SECS,
        "first frame took {first} s"
    );
    assert!(
        worst < STEADY_FRAME_BUDGET_SECS,
        "a steady frame took {worst} s"
    );
}

#[test]
fn frame_time_on_the_tiny_golden_after_a_full_run() {
    let mut h = harness(test_options());
    wait_until(&mut h, "the embedded golden", LOAD_TIMEOUT, |h| {
        h.query_by_label_contains("Golden: <embedded").is_some()
    });
    run_all(&mut h);
    select_capture(&mut h, "prefill12/L3.sa_topk_idxs");
    let mut frames = Vec::new();
    for _ in 0..60 {
        let t = Instant::now();
        h.step();
        frames.push(t.elapsed().as_secs_f64());
    }
    frames.sort_by(f64::total_cmp);
    let median = frames[frames.len() / 2];
    let (mean_ui, max_ui) = h.state().frame_time_secs().expect("frames measured");
    println!(
        "tiny golden: harness frame median {:.2} ms, max {:.2} ms; app ui mean {:.2} ms, max {:.2} ms",
        median * 1e3,
        frames[frames.len() - 1] * 1e3,
        mean_ui * 1e3,
        max_ui * 1e3
    );
    assert!(median < STEADY_FRAME_BUDGET_SECS, "median frame {median} s");
}

/// The app shows the same self-test table as `golden-lens selftest`.
#[test]
fn the_selftest_window_shows_every_planted_fault_caught() {
    let mut h = harness(test_options());
    wait_until(&mut h, "the golden to load", RUN_TIMEOUT, |h| {
        h.query_by_label("Self-test").is_some()
    });
    h.get_by_label("Self-test").click();
    wait_until(&mut h, "the self-test to finish", RUN_TIMEOUT, |h| {
        h.query_by_label("Self-test: 8 passed, 0 failed").is_some()
    });
    assert!(h.query_by_label("L0.sa_topk_idxs").is_some());
    assert!(h.query_by_label("MISS").is_none());
    h.get_by_label("Close self-test").click();
    h.run_steps(2);
    assert!(h.query_by_label("Self-test: 8 passed, 0 failed").is_none());
}
