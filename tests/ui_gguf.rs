//! A GGUF opened in the running app drives its backends (as `gui --gguf` does): a Q8_0 export of
//! the embedded golden opened through the path field makes the run fail against the golden, the
//! bf16 (auto) export passes it bit for bit like the filler, "Use golden weights" goes back to the
//! golden's filler, and a file that is not a GGUF is an error that keeps the weights in use.
#![cfg(feature = "gui")]

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use golden_lens::gguf::Dialect;
use golden_lens::golden::Golden;
use golden_lens::model::gguf_export::{export_golden, ExportOptions, TypePlan};
use golden_lens::ui::{AppOptions, GoldenLensApp, UiCommand};
use std::path::{Path, PathBuf};

mod ui_common;
use ui_common::*;

fn export(golden: &Golden, dir: &Path, name: &str, types: &str) -> PathBuf {
    let p = dir.join(name);
    let mut opts = ExportOptions::new(Dialect::Ds4);
    opts.types = TypePlan::parse(types).expect("type plan");
    export_golden(golden, &p, &opts).expect("export");
    p
}

/// Type `path` into the path field (replacing its text) and press Open path.
fn open_path(h: &mut Harness<'static, GoldenLensApp>, path: &Path) {
    h.get_by_label("Path:").focus();
    h.step();
    h.key_combination_modifiers(eframe::egui::Modifiers::COMMAND, &[eframe::egui::Key::A]);
    h.step();
    h.get_by_label("Path:")
        .type_text(&path.display().to_string());
    h.step();
    h.get_by_label("Open path").click();
}

/// Wait until the backends run on `weights` and the new session's worker has reported.
fn wait_weights(h: &mut Harness<'static, GoldenLensApp>, weights: Option<&Path>) {
    let label = match weights {
        Some(p) => format!("Weights: GGUF {}", p.display()),
        None => "Weights: the golden's filler".to_string(),
    };
    wait_until(h, &label, LOAD_TIMEOUT, |h| {
        h.state().weights_gguf() == weights
            && h.query_by_label(&label).is_some()
            && h.state().progress().steps_total > 0
            && h.query_by_label("Status: ready").is_some()
    });
}

/// `max_abs_err` bits of the first backend against the golden, per capture.
fn errors(h: &Harness<'static, GoldenLensApp>) -> Vec<(String, u64)> {
    h.state()
        .results()
        .iter()
        .map(|r| {
            let c = r.per_backend[0].vs_golden.as_ref().expect("in the golden");
            (r.label(), c.max_abs_err.to_bits())
        })
        .collect()
}

#[test]
fn a_gguf_opened_at_runtime_drives_the_backends_and_the_golden_weights_come_back() {
    let golden = golden_lens::golden::embedded::default_golden().expect("golden");
    let total = golden.capture_count();
    let dir = tempfile::tempdir().expect("temp dir");
    let bf16 = export(&golden, dir.path(), "tiny-auto.gguf", "");
    let q8 = export(
        &golden,
        dir.path(),
        "tiny-q8_0.gguf",
        "default=q8_0,vectors=auto",
    );

    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    let mut h = harness(o);
    wait_weights(&mut h, None);
    assert!(h.query_by_label("Use golden weights").is_none());
    run_all(&mut h);
    h.get_by_label(&format!("{total} passed, 0 failed"));
    let filler = errors(&h);

    // The Q8_0 export: its quantisation error shows against the golden.
    open_path(&mut h, &q8);
    wait_weights(&mut h, Some(&q8));
    let opened = golden_lens::ui::files::open_gguf(&q8).expect("the export opens");
    assert!(opened.runnable.is_ok());
    assert!(opened
        .summary
        .starts_with(&format!("GGUF {}: 1 shard(s), ", q8.display())));
    assert!(opened
        .summary
        .ends_with("; the backends run on its weights and metadata"));
    h.get_by_label(&opened.summary);
    h.get_by_label(&format!("the backends run on the GGUF {}", q8.display()));
    assert!(
        h.state().results().is_empty(),
        "the filler's results are dropped"
    );
    run_all(&mut h);
    assert_eq!(h.state().results().len(), total);
    let (_, failed) = h.state().summary_counts();
    assert!(failed > 0, "Q8_0 weights must fail some captures");
    h.get_by_label_contains(&format!(" passed, {failed} failed"));
    let embed = h
        .state()
        .results()
        .iter()
        .find(|r| r.label() == "prefill12/embed")
        .expect("embed");
    assert!(
        embed.per_backend[0]
            .vs_golden
            .as_ref()
            .expect("cmp")
            .max_abs_err
            > 0.0
    );
    // The failing captures' export names the weights they came from.
    let out = dir.path().join("failing.json");
    h.state_mut().handle(UiCommand::ExportFailing(out.clone()));
    // The export writes off the UI thread and reports back.
    let notice = format!("exported {failed} failing captures to {}", out.display());
    wait_until(&mut h, "the export", LOAD_TIMEOUT, |h| {
        h.query_by_label(&notice).is_some()
    });
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).expect("read")).expect("json");
    assert_eq!(
        raw["golden_lens"]["provenance"]["weights"],
        q8.display().to_string()
    );

    // The bf16 export holds the filler's values exactly: the same errors, bit for bit.
    open_path(&mut h, &bf16);
    wait_weights(&mut h, Some(&bf16));
    run_all(&mut h);
    h.get_by_label(&format!("{total} passed, 0 failed"));
    assert_eq!(errors(&h), filler);

    // Back to the golden's filler weights.
    h.get_by_label("Use golden weights").click();
    wait_weights(&mut h, None);
    assert!(h.query_by_label("Use golden weights").is_none());
    h.get_by_label("the backends run on the golden's filler weights");
    run_all(&mut h);
    h.get_by_label(&format!("{total} passed, 0 failed"));
    assert_eq!(errors(&h), filler);
}

#[test]
fn a_file_that_is_not_a_gguf_is_an_error_and_keeps_the_weights() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("broken.gguf");
    std::fs::write(&bad, b"GGUF but not really").expect("write");
    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    let mut h = harness(o);
    wait_weights(&mut h, None);
    open_path(&mut h, &bad);
    wait_until(&mut h, "the error banner", LOAD_TIMEOUT, |h| {
        h.query_by_label_contains("Error: ").is_some()
    });
    h.get_by_label_contains("broken.gguf");
    assert_eq!(h.state().weights_gguf(), None);
    h.get_by_label("Weights: the golden's filler");
}
