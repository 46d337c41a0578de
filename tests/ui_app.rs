//! Drives the real app in egui_kittest: it runs the embedded golden as soon as it opens; the
//! summary, the metrics table and every view read through accessibility labels (with strict
//! snapshots); a malformed golden is an error and the app keeps running; failing captures export
//! off the UI thread and load back as a golden; `n`/`p` and the arrow keys move the selection in
//! the list's order; the self-test window.
#![cfg(feature = "gui")]

use eframe::egui::{Key, Role};
use egui_kittest::kittest::{NodeT, Queryable};
use egui_kittest::Harness;
use golden_lens::golden::Golden;
use golden_lens::oracle::faults::Fault;
use golden_lens::ui::panels::capture_list;
use golden_lens::ui::{AppOptions, DetailView, GoldenLensApp};

mod ui_common;
use ui_common::*;

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

fn show_view(h: &mut Harness<'static, GoldenLensApp>, view: DetailView) {
    h.get_by_role_and_label(Role::Tab, view.title()).click();
    wait_until(h, "the view", LOAD_TIMEOUT, |h| h.state().view() == view);
    h.get_by_role_and_label(Role::Pane, view.region_label());
}

#[test]
fn the_embedded_golden_runs_as_soon_as_the_window_opens() {
    // The app's own options: no click, no `--run`.
    let mut h = harness_at(test_options(), SIZE_PT);
    wait_finished(&mut h);
    let golden = golden_lens::golden::embedded::default_golden().expect("embedded golden");
    assert_eq!(h.state().results().len(), golden.capture_count());
    assert_eq!(
        h.state().progress().steps_done,
        h.state().progress().steps_total
    );
    h.get_by_label(&format!("{} passed, 0 failed", golden.capture_count()));
    // The progress bar names the steps and how long the run took.
    let bar = h.get_by_role(Role::ProgressIndicator);
    let text = bar.accesskit_node().label().unwrap_or_default();
    let total = h.state().progress().steps_total;
    assert!(
        text.starts_with(&format!("{total} / {total} steps")) && text.contains("took"),
        "progress text {text:?}"
    );
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
    // The metrics table: one row per pair, each cell labelled with its pair and column.
    h.get_by_label_contains("cpu vs golden: pass (pass: bit-exact");
    h.get_by_label("cpu vs golden max_abs_err: 0.000000e0");
    h.get_by_label("cpu vs golden worst_ratio: 0.000000");
    h.get_by_label("cpu vs golden max_bf16_ulp: 0");

    // MoE routing is the view picked for a routing capture.
    assert_eq!(h.state().view(), DetailView::Moe);
    h.get_by_label("Tokens routed identically: 12 of 12");
    h.get_by_label("tie flip: 0");
    h.get_by_role_and_label(Role::Image, "Routing raster");
    h.remove_cursor();
    h.snapshot("ui_moe_routing");

    show_view(&mut h, DetailView::TopK);
    h.get_by_label("Mean row agreement: 1.000; rows differing: 0 of 12");
    h.get_by_label("reference only: 0");
    h.get_by_label("test only: 0");
    h.get_by_role_and_label(Role::Image, "Top-k positions raster");
    h.remove_cursor();
    h.snapshot("ui_topk");

    show_view(&mut h, DetailView::WindowMask);
    h.get_by_label("Mask differences: 0");
    h.get_by_label_contains("Test (cpu): window cells");
    h.get_by_role_and_label(Role::Image, "Window mask raster");
    h.remove_cursor();
    h.snapshot("ui_window_mask");

    show_view(&mut h, DetailView::HcMix);
    assert_eq!(h.query_all_by_label_contains("attn row sums:").count(), 2);
    h.get_by_label_contains("HC mixes of layer 0");
    h.get_by_role_and_label(Role::Image, "attn test comb");
    h.remove_cursor();
    h.snapshot("ui_hc_mixes");

    show_view(&mut h, DetailView::Values);
    h.get_by_label_contains("Values: reference = golden");
    for panel in ["Reference heatmap", "Test heatmap", "Difference heatmap"] {
        h.get_by_role_and_label(Role::Image, panel);
    }
    h.get_by_label_contains("Reference (golden) linear:");
    h.remove_cursor();
    h.snapshot("ui_values");

    // The view chosen for a family is remembered: the next routing capture opens in Values.
    select_capture(&mut h, "prefill12/L1.moe_weights");
    assert_eq!(h.state().view(), DetailView::Values);
    // A family never chosen opens its most telling view.
    select_capture(&mut h, "prefill12/L1.sa_topk_idxs");
    assert_eq!(h.state().view(), DetailView::WindowMask);
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
    h.get_by_role_and_label(Role::Button, "Open path").click();
    wait_until(&mut h, "the error banner", LOAD_TIMEOUT, |h| {
        h.query_by_label_contains("Error: ").is_some()
    });
    // The message names the file and says what is wrong with it.
    h.get_by_label_contains("broken.json: file is truncated");
    // Still on the embedded golden, and still usable.
    h.get_by_label_contains("Golden: <embedded");
    h.get_by_role_and_label(Role::Button, "Dismiss").click();
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
    h.get_by_role_and_label(Role::Button, "Open path").click();
    // The toolbar names the opened golden, and the new session's worker has reported:
    // otherwise `Run all` could go to the embedded golden's session just before the planted one
    // replaces it.
    let opened = format!("Golden: {}", planted.display());
    wait_until(&mut h, "the planted golden", LOAD_TIMEOUT, |h| {
        h.query_by_label(&opened).is_some()
            && h.state().progress().steps_total > 0
            && h.query_by_label_contains("Status: ready").is_some()
    });
    run_all(&mut h);
    h.get_by_label_contains("1 failed");
    h.get_by_label("First divergence: prefill12/logits_full at Final");
    // Its chip says FAIL in words, not colour alone.
    select_capture(&mut h, "prefill12/logits_full");
    h.get_by_label("cpu vs golden: FAIL");
    h.get_by_label_contains("cpu vs golden: FAIL (");

    let out = dir.path().join("failing.json");
    // Replace the field's text: select all, then type the export path.
    h.get_by_label("Path:").focus();
    h.step();
    h.key_combination_modifiers(eframe::egui::Modifiers::COMMAND, &[Key::A]);
    h.step();
    h.get_by_label("Path:")
        .type_text(&out.display().to_string());
    h.step();
    h.get_by_role_and_label(Role::Button, "Export failing to path")
        .click();
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

/// `n`/`p` visit the failing captures in the list's order; the arrow keys move row by row.
#[test]
fn n_and_p_jump_between_failing_captures_and_arrows_move_the_selection() {
    let planted = Fault::parse("bitflip@L2.attn_out").expect("fault spec");
    let mut h = harness(planted_options(vec![planted], false));
    wait_ready(&mut h);
    run_all(&mut h);
    let order = capture_list::list_order(h.state().results(), &Default::default());
    let failing: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&i| !h.state().results()[i].pass())
        .collect();
    assert!(
        failing.len() >= 3,
        "the planted fault fails several captures"
    );
    let at = |h: &Harness<'static, GoldenLensApp>| {
        h.state().selected().map(|r| r.order).expect("a selection")
    };
    h.key_press(Key::N);
    h.run_steps(2);
    assert_eq!(at(&h), h.state().results()[failing[0]].order);
    h.get_by_label(&format!(
        "Selected: {}",
        h.state().results()[failing[0]].label()
    ));
    h.key_press(Key::N);
    h.run_steps(2);
    assert_eq!(at(&h), h.state().results()[failing[1]].order);
    h.key_press(Key::N);
    h.run_steps(2);
    assert_eq!(at(&h), h.state().results()[failing[2]].order);
    h.key_press(Key::P);
    h.run_steps(2);
    assert_eq!(at(&h), h.state().results()[failing[1]].order);
    // Down and up move one visible row (folded groups and filtered captures are skipped).
    let visible = capture_list::visible_captures(
        h.state().results(),
        &Default::default(),
        &Default::default(),
    );
    let pos = visible
        .iter()
        .position(|&i| i == failing[1])
        .expect("visible");
    h.key_press(Key::ArrowDown);
    h.run_steps(2);
    assert_eq!(at(&h), h.state().results()[visible[pos + 1]].order);
    h.key_press(Key::ArrowUp);
    h.key_press(Key::ArrowUp);
    h.run_steps(2);
    assert_eq!(at(&h), h.state().results()[visible[pos - 1]].order);
    // The first failing capture is where `p` stops.
    for _ in 0..failing.len() + 2 {
        h.key_press(Key::P);
    }
    h.run_steps(2);
    assert_eq!(at(&h), h.state().results()[failing[0]].order);
    h.get_by_label("no earlier failing capture in the list");
    // Typing into the filter does not move the selection.
    h.get_by_label("Filter:").focus();
    h.step();
    h.get_by_label("Filter:").type_text("n");
    h.run_steps(2);
    assert_eq!(at(&h), h.state().results()[failing[0]].order);
}

/// The app shows the same self-test table as `golden-lens selftest`.
#[test]
fn the_selftest_window_shows_every_planted_fault_caught() {
    let mut h = harness(test_options());
    wait_until(&mut h, "the golden to load", RUN_TIMEOUT, |h| {
        h.query_by_label("Self-test").is_some()
    });
    h.get_by_role_and_label(Role::Button, "Self-test").click();
    wait_until(&mut h, "the self-test to finish", RUN_TIMEOUT, |h| {
        h.query_by_label("Self-test: 8 passed, 0 failed").is_some()
    });
    assert!(h.query_by_label("L0.sa_topk_idxs").is_some());
    assert!(h.query_by_label("MISS").is_none());
    h.get_by_role_and_label(Role::Button, "Close self-test")
        .click();
    h.run_steps(2);
    assert!(h.query_by_label("Self-test: 8 passed, 0 failed").is_none());
}

/// What a session remembers (eframe persistence) comes back: the last golden, the theme, the
/// view chosen per family, folded regions; and what it remembers next reflects the changes.
#[test]
fn the_app_remembers_files_theme_views_and_regions() {
    use golden_lens::ui::app::Remembered;
    use golden_lens::ui::theme::ThemeChoice;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("last.json");
    std::fs::write(&path, golden_lens::golden::embedded::DEFAULT_GOLDEN_JSON).expect("write");
    let remembered = Remembered {
        last_golden: Some(path.clone()),
        last_gguf: None,
        theme: Some("light".into()),
        views: vec![("routing".into(), "values".into())],
        overview_open: Some(false),
        metrics_open: Some(true),
    };
    let mut o = test_options();
    o.run_on_start = false;
    let r = remembered.clone();
    let mut h: Harness<'static, GoldenLensApp> = Harness::builder()
        .with_size(SIZE_PT)
        .with_max_steps(16)
        .build_eframe(move |cc| GoldenLensApp::with_remembered(&cc.egui_ctx, o, Some(r)));
    let opened = format!("Golden: {}", path.display());
    wait_until(&mut h, "the remembered golden", LOAD_TIMEOUT, |h| {
        h.query_by_label(&opened).is_some() && h.query_by_label("Status: ready").is_some()
    });
    assert_eq!(h.state().state().theme, ThemeChoice::Light);
    // The folded overview offers to unfold.
    h.get_by_role_and_label(Role::Button, "Unfold Overview");
    run_all(&mut h);
    select_capture(&mut h, "prefill12/L0.moe_indices");
    assert_eq!(
        h.state().view(),
        DetailView::Values,
        "the remembered routing view"
    );
    h.get_by_role_and_label(Role::Tab, "MoE routing").click();
    h.get_by_role_and_label(Role::Button, "Dark theme").click();
    h.get_by_role_and_label(Role::Button, "Unfold Overview")
        .click();
    h.run_steps(3);
    let next = h.state().remembered();
    let back: Remembered =
        serde_json::from_str(&serde_json::to_string(&next).expect("ser")).expect("de");
    assert_eq!(back, next);
    assert_eq!(next.last_golden.as_deref(), Some(path.as_path()));
    assert_eq!(next.theme.as_deref(), Some("dark"));
    assert!(next
        .views
        .contains(&("routing".to_string(), "moe".to_string())));
    assert_eq!(next.overview_open, Some(true));
}

/// Cancel on a background job's bar frees its window at once; its late result is dropped.
#[test]
fn a_cancelled_job_drops_its_late_result() {
    let mut h = harness(test_options());
    wait_ready(&mut h);
    h.get_by_role_and_label(Role::Button, "Localize").click();
    h.run_steps(2);
    assert!(h.state().localize_state().running);
    h.get_by_label_contains("Localize: ");
    h.get_by_role_and_label(Role::Button, "Cancel Localize")
        .click();
    h.run_steps(2);
    assert!(!h.state().localize_state().running);
    h.get_by_label("Localize cancelled: its result will be dropped");
    // Long enough for the abandoned localisation to finish and report.
    let until = std::time::Instant::now() + LATE_RESULT_WAIT;
    while std::time::Instant::now() < until {
        h.step();
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(h.state().localize_state().result.is_none());
    h.get_by_label("No localization yet: press Run localization.");
}

/// How long the cancelled-job test waits for the abandoned job (a localisation of the tiny
/// golden takes about a second in the test profile).
const LATE_RESULT_WAIT: std::time::Duration = std::time::Duration::from_secs(8);
