//! The app's Determinism window (what `check --repeat N` prints): the default app's test backend
//! (the oracle here) is bitwise stable over three runs; a test backend whose planted perturbation
//! changes from one fresh backend to the next is listed capture by capture, starting with the
//! perturbed one.
#![cfg(feature = "gui")]

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use golden_lens::golden::Golden;
use golden_lens::oracle::faults::{Fault, FaultPlan};
use golden_lens::session::controller::BoxedBackend;
use golden_lens::session::{self};
use golden_lens::ui::{AppOptions, GoldenLensApp, UiCommand};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

mod ui_common;
use ui_common::*;

fn wait_determinism(h: &mut Harness<'static, GoldenLensApp>) {
    wait_until(h, "the determinism run", RUN_TIMEOUT, |h| {
        let d = h.state().determinism_state();
        !d.running && d.result.is_some()
    });
}

#[test]
fn the_oracle_is_bitwise_stable_over_three_runs() {
    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    let mut h = harness(o);
    wait_ready(&mut h);
    h.get_by_label("Determinism").click();
    wait_until(&mut h, "the determinism window", RUN_TIMEOUT, |h| {
        h.query_by_label("No determinism run yet: press Run determinism.")
            .is_some()
    });
    h.get_by_label("Run determinism").click();
    wait_determinism(&mut h);
    let o = match &h.state().determinism_state().result {
        Some(Ok(o)) => o.clone(),
        other => panic!("determinism failed: {other:?}"),
    };
    assert_eq!(o.backend, "cpu");
    assert_eq!(o.report.runs, 3);
    assert!(o.report.captures >= 443, "{}", o.report.captures);
    assert!(o.report.unstable.is_empty(), "{:?}", o.report.unstable);
    h.get_by_label(&format!(
        "Determinism: 3 runs of the cpu backend, 0 of {} captures bitwise unstable",
        o.report.captures
    ));
    h.get_by_label("Close determinism").click();
    h.run_steps(2);
    assert!(h.query_by_label_contains("Determinism: 3 runs").is_none());
}

#[test]
fn a_backend_that_changes_between_runs_is_listed_from_the_perturbed_capture() {
    // Every fresh test backend plants a different perturbation at L2.attn_out, as a racy
    // reduction would leave different bits each run.
    let built = Arc::new(AtomicUsize::new(0));
    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    let counter = built.clone();
    o.backends = Arc::new(move |g: &Golden, gguf: Option<&Path>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let reference = session::oracle_on(g, gguf)?;
        let mut test = session::oracle_on(g, gguf)?;
        let spec = format!("perturb={}@L2.attn_out", 0.01 * (n + 1) as f64);
        test.faults =
            FaultPlan::new(vec![Fault::parse(&spec)
                .ok_or(session::SessionError::BadFault { spec: spec.clone() })?]);
        Ok(vec![
            Box::new(reference) as BoxedBackend,
            Box::new(Renamed {
                name: "racy",
                inner: test,
            }) as BoxedBackend,
        ])
    });
    let mut h = harness(o);
    wait_ready(&mut h);
    h.state_mut().handle(UiCommand::RunDeterminism(4));
    wait_determinism(&mut h);
    let o = match &h.state().determinism_state().result {
        Some(Ok(o)) => o.clone(),
        other => panic!("determinism failed: {other:?}"),
    };
    assert_eq!((o.backend.as_str(), o.report.runs), ("racy", 4));
    let first = o.report.unstable.first().expect("instability found");
    assert_eq!(
        (first.regime.as_str(), first.capture.as_str()),
        ("prefill12", "L2.attn_out")
    );
    assert_eq!(first.runs_differing, 3, "every later run differs");
    assert!(o.report.unstable.iter().all(|u| u.capture != "L1.h_out"));
    h.get_by_label(&format!(
        "Determinism: 4 runs of the racy backend, {} of {} captures bitwise unstable",
        o.report.unstable.len(),
        o.report.captures
    ));
    assert!(h.query_all_by_label("L2.attn_out").count() >= 1);
    // One row per unstable capture, each saying in how many later runs it differed.
    for k in 1..=3 {
        assert_eq!(
            h.query_all_by_label(&format!("{k} of 3")).count(),
            o.report
                .unstable
                .iter()
                .filter(|u| u.runs_differing == k)
                .count(),
            "rows differing in {k} of 3 later runs"
        );
    }
}
