//! The kernel workbench in the app (egui_kittest, the wgpu backend on lavapipe): the app watches
//! an exported shader directory; an arithmetic break in `rope.wgsl` re-checks the run from the
//! first step that dispatches `rope` (the steps before it keep their results, checked on the
//! data model) and fails first there, with the verdict changes in the Re-check window and on the
//! rows; the fix passes again without a restart; a syntax error shows `FILE:LINE:COL` in a banner
//! and keeps the results; removing the file or the whole directory panics nothing. The Profile
//! view lists per-kernel-family GPU times after a run.
#![cfg(all(feature = "gui", feature = "gpu"))]

use eframe::egui::Role;
use egui_kittest::kittest::{NodeT, Queryable};
use egui_kittest::Harness;
use golden_lens::golden::Golden;
use golden_lens::gpu::{test_context, GpuOptions, ShaderSet};
use golden_lens::session::controller::BoxedBackend;
use golden_lens::session::rerun::Workbench;
use golden_lens::session::{self};
use golden_lens::ui::{AppOptions, GoldenLensApp, GpuStatus};
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod ui_common;
use ui_common::*;

/// The sampled v3 reference golden (small: the GPU run stays short on lavapipe).
fn v3() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/reference/ds41_tiny_golden.v3.json")
}

/// The app on v3 with the oracle and the wgpu backend put on `bench`, run at once.
fn workbench_app(bench: Arc<Workbench>, dir: Option<PathBuf>) -> Harness<'static, GoldenLensApp> {
    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    o.golden = Some(v3());
    o.gpu = GpuStatus::Adapter("the test adapter".into());
    o.shaders_dir = dir;
    o.workbench = Some(bench.clone());
    o.backends = Arc::new(move |g: &Golden, gguf: Option<&Path>| {
        let reference = session::oracle_on(g, gguf)?;
        let gpu = session::gpu_for(
            g,
            GpuOptions {
                reference_ties: true,
                ..Default::default()
            },
        )?;
        Ok(vec![
            Box::new(reference) as BoxedBackend,
            Box::new(bench.attach(gpu)) as BoxedBackend,
        ])
    });
    harness_at(o, SIZE_PT)
}

/// Wait until re-check number `run` has resumed and run to the end.
fn wait_recheck(h: &mut Harness<'static, GoldenLensApp>, run: u64) {
    wait_until(h, &format!("re-check {run} to finish"), RUN_TIMEOUT, |h| {
        let s = h.state().state();
        let resumed = s
            .workbench
            .recheck
            .as_ref()
            .is_some_and(|rc| rc.run == run && rc.resumed.is_some());
        resumed && s.progress.finished && !s.progress.busy
    });
}

fn failing(h: &Harness<'static, GoldenLensApp>) -> usize {
    h.state().summary_counts().1
}

/// The steps of the last re-check: those kept from an earlier run come first and are exactly
/// the steps before the first occurrence of `first` in the first regime; every later step is
/// the re-check's own.
fn assert_resumed_at(h: &Harness<'static, GoldenLensApp>, first: golden_lens::model::Step) {
    let s = h.state().state();
    let rc = s.workbench.recheck.as_ref().expect("a re-check");
    let k = rc.kept_steps;
    let log = &s.step_log;
    assert!(k < log.len(), "kept {k} of {} steps", log.len());
    let first_regime = &log[0].regime;
    assert!(
        log[..k]
            .iter()
            .all(|m| m.run < rc.run && m.regime == *first_regime && m.step != first),
        "the kept steps were rerun or go past {first}: {:?}",
        &log[..k]
    );
    assert_eq!(
        (&log[k].regime, log[k].step),
        (first_regime, first),
        "the re-check resumed elsewhere"
    );
    assert!(log[k..].iter().all(|m| m.run == rc.run));
    assert_eq!(
        rc.resumed.as_ref().map(|(r, st)| (r.as_str(), *st)),
        Some((first_regime.as_str(), Some(first)))
    );
    assert_eq!(rc.kept_results, log[k].results_start);
}

#[test]
fn a_watched_rope_edit_rechecks_from_the_rope_step_and_recovers_without_a_restart() {
    if test_context("ui_workbench").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    ShaderSet::export(dir.path()).expect("export");
    let set = ShaderSet::from_dir(dir.path()).expect("the exported set validates");
    let bench = Workbench::new(Arc::new(set));
    let mut h = workbench_app(bench.clone(), Some(dir.path().to_path_buf()));
    wait_finished(&mut h);
    assert_eq!(
        failing(&h),
        0,
        "the exported shaders pass v3 like the embedded ones"
    );
    assert_eq!(
        h.state().workbench().dir.as_deref(),
        Some(dir.path()),
        "the app watches --shaders DIR"
    );
    let first = bench
        .first_step_using(&["rope"])
        .expect("a step dispatched rope");
    assert!(bench.kernels_of(first).contains(&"rope"));
    let steps_before = h.state().state().step_log.len();
    let full_secs = h.state().state().run_clock.last_secs;

    // Break the arithmetic: a sign flip in the rotation.
    let rope = dir.path().join("rope.wgsl");
    let text = std::fs::read_to_string(&rope).expect("read rope.wgsl");
    let minus = "let re = keep(a * c) - keep(b * s);";
    assert!(text.contains(minus), "rope.wgsl changed: update the edit");
    let broken = text.replacen(minus, "let re = keep(a * c) + keep(b * s);", 1);
    std::fs::write(&rope, &broken).expect("write");
    wait_recheck(&mut h, 1);
    assert_resumed_at(&h, first);
    // The figures the note quotes (wall seconds of the whole first run and of the re-check).
    eprintln!(
        "ui_workbench: full run {full_secs:?} s, re-check from {first} {:?} s",
        h.state().state().run_clock.last_secs
    );
    assert_eq!(h.state().state().step_log.len(), steps_before);
    let first_failure = h
        .state()
        .results()
        .iter()
        .find(|r| !r.pass())
        .expect("the sign flip fails a capture");
    assert_eq!(first_failure.step, first, "{}", first_failure.label());
    let label = first_failure.label();
    let rc = h.state().workbench().recheck.clone().expect("a re-check");
    assert_eq!(rc.families, vec!["rope"]);
    let t = rc.diff.transition_of(&label).expect("a pass -> fail");
    assert!(t.passed_before && !t.passes_now && t.ratio_now > t.ratio_before);
    let (broke, fixed) = rc.diff.counts();
    assert!(broke > 0 && fixed == 0, "{broke} broke, {fixed} fixed");
    // The verdict change on the panel and on its row.
    h.get_by_role_and_label(Role::Button, "Re-check diff…")
        .click();
    let row = t.describe();
    wait_until(&mut h, "the Re-check window's row", LOAD_TIMEOUT, |h| {
        h.query_by_label(&row).is_some()
    });
    // Its link selects the capture (the list scrolls to its row).
    h.get_by_role_and_label(Role::Link, &label).click();
    wait_until(&mut h, "the selection", LOAD_TIMEOUT, |h| {
        h.state().selected().is_some_and(|r| r.label() == label)
    });
    h.get_by_label(&format!("Re-check {}", t.describe()));

    // The fix: all pass again, no restart.
    std::fs::write(&rope, &text).expect("write");
    wait_recheck(&mut h, 2);
    assert_resumed_at(&h, first);
    assert_eq!(failing(&h), 0);
    let rc = h.state().workbench().recheck.clone().expect("a re-check");
    assert_eq!(
        rc.diff.counts(),
        (0, broke),
        "every broken capture passes again"
    );

    // A syntax error: the banner names FILE:LINE:COL; the results stay.
    let results_before = h.state().results().len();
    let syntax = text.replacen("let a = y[i];", "let a = y[i]) ;", 1);
    assert_ne!(syntax, text, "rope.wgsl changed: update the edit");
    std::fs::write(&rope, &syntax).expect("write");
    wait_until(&mut h, "the shader error banner", LOAD_TIMEOUT, |h| {
        h.state().workbench().error.is_some()
    });
    let e = h.state().workbench().error.clone().expect("banner");
    let (file, line, col) = e.location.clone().expect("located");
    assert_eq!(Path::new(&file), rope.as_path());
    assert!(line > 0 && col > 0, "{line}:{col}");
    h.get_by_label_contains(&format!("Shader error at {file}:{line}:{col}"));
    let s = h.state().state();
    assert_eq!(s.run_serial, 2, "a broken save reruns nothing");
    assert_eq!(s.results.len(), results_before);
    assert!(!s.progress.busy);
    assert_eq!(failing(&h), 0, "the last good results stay");

    // The file removed: the embedded rope (what last compiled) applies, nothing reruns.
    std::fs::remove_file(&rope).expect("remove");
    wait_until(&mut h, "the banner to go", LOAD_TIMEOUT, |h| {
        h.state().workbench().error.is_none()
    });
    assert_eq!(h.state().state().run_serial, 2);
    // The whole directory removed: an error banner, no panic, results kept.
    let path = dir.path().to_path_buf();
    dir.close().expect("remove the directory");
    assert!(!path.exists());
    h.state_mut()
        .push(golden_lens::ui::UiCommand::WatchShaders(path.clone()));
    h.run_steps(2);
    assert_eq!(failing(&h), 0);
    assert_eq!(h.state().results().len(), results_before);
    assert!(
        h.state()
            .errors()
            .iter()
            .any(|e| e.contains(&path.display().to_string())),
        "{:?}",
        h.state().errors()
    );
}

#[test]
fn the_profile_view_lists_gpu_time_per_kernel_family() {
    if test_context("ui_workbench_profile").is_none() {
        return;
    }
    let bench = Workbench::new(Arc::new(ShaderSet::embedded()));
    let mut h = workbench_app(bench, None);
    wait_finished(&mut h);
    h.get_by_role_and_label(Role::Button, "Profile…").click();
    h.run_steps(3);
    let p = h
        .state()
        .workbench()
        .profile
        .clone()
        .expect("a profile of the run");
    assert!(!p.dispatches.is_empty());
    h.get_by_label_contains("Timing: ");
    // The gemm family's row, through its label: `family gemm: N dispatches, T ms, ...`.
    let row = h.get_by_label_contains("family gemm: ");
    // A label's text is its accessibility value.
    let label = row.accesskit_node().value().unwrap_or_default();
    let ms: f64 = label
        .split(", ")
        .find_map(|part| part.strip_suffix(" ms"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no time in {label:?}"));
    assert!(ms > 0.0, "{label}");
    eprintln!("ui_workbench: {label} ({})", p.source);
    let families = p.by_family();
    let gemm = families
        .iter()
        .find(|(f, _)| *f == "gemm")
        .expect("gemm ran");
    assert!(gemm.1.flops > 0, "the GEMMs state their flops");
    assert!(label.contains("GFLOP/s"), "{label}");
}
