//! Drives the app's Localize window and its top-k triage in egui_kittest: a test backend with a
//! planted fault is localised to the planted step and capture (and clicking it selects the capture
//! in the main view), a clean oracle has no local divergence, a bad planted-fault spec is an
//! error in the window, and a test backend that breaks top-k ties by the lowest index shows only
//! tie flips, counted in the data model and in the labels.
#![cfg(feature = "gui")]

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use golden_lens::golden::Golden;
use golden_lens::model::{Backend, Step};
use golden_lens::oracle::faults::{Fault, FaultKind, FaultPlan};
use golden_lens::session::triage::{TopkClass, TopkTriage, TriageState};
use golden_lens::session::{self};
use golden_lens::ui::{AppOptions, GoldenLensApp};

mod ui_common;
use ui_common::*;

/// Open the Localize window (it starts a run) and wait for the result.
fn open_localize(h: &mut Harness<'static, GoldenLensApp>) {
    h.get_by_label("Localize").click();
    wait_localized(h);
}

fn wait_localized(h: &mut Harness<'static, GoldenLensApp>) {
    wait_until(h, "the localisation", RUN_TIMEOUT, |h| {
        let s = h.state().localize_state();
        s.open && !s.running && s.result.is_some()
    });
}

/// Replace the text of the field labelled `label`.
fn replace_text(h: &mut Harness<'static, GoldenLensApp>, label: &str, text: &str) {
    h.get_by_label(label).focus();
    h.step();
    h.key_combination_modifiers(eframe::egui::Modifiers::COMMAND, &[eframe::egui::Key::A]);
    h.step();
    h.get_by_label(label).type_text(text);
    h.step();
}

#[test]
fn localize_names_the_planted_step_and_capture_and_selects_it() {
    let planted = Fault::parse("bitflip@L2.attn_out").expect("fault spec");
    let mut h = harness(planted_options(vec![planted], false));
    wait_ready(&mut h);
    open_localize(&mut h);

    let o = match &h.state().localize_state().result {
        Some(Ok(o)) => o.clone(),
        other => panic!("localisation failed: {other:?}"),
    };
    assert_eq!(o.reference, "cpu");
    assert_eq!(o.test, "cpu-test");
    let first = &o.localization.steps[o
        .localization
        .first_local_divergence
        .expect("a local divergence")];
    assert_eq!(first.regime, "prefill12");
    assert_eq!(first.step, Step::Block(2));
    assert_eq!(first.worst_capture, "L2.attn_out");
    assert!(first.local_breaks && first.local_ratio > 1.0);
    // The planted step starts from exact inputs: all of its error is born there.
    assert_eq!(first.input_ratio, 0.0);
    assert!(first.gain.is_infinite());
    // The steps after it carry the error (chained) but add none of their own (local).
    let after = &o.localization.steps[o.localization.first_local_divergence.unwrap_or(0) + 1];
    assert_eq!(after.step, Step::Block(3));
    assert!(after.input_ratio > 0.0 && after.chained_ratio > 0.0);
    assert!(!after.local_breaks);

    // The window says so in words, names the worst element, and marks exactly one row.
    h.get_by_label("Reference: cpu; test: cpu-test");
    h.get_by_label(&format!(
        "First local divergence: prefill12 Block(2) at L2.attn_out ({}), local error {:.3e}× its tolerance",
        first.worst_location, first.local_ratio
    ));
    assert!(!first.worst_location.is_empty());
    h.get_by_label("first local divergence");
    // Every regime breaks at the planted step (the fault is planted in all of them); only the
    // first is the first local divergence.
    assert_eq!(h.query_all_by_label("local error breaks").count(), 2);
    assert!(h.query_all_by_label("inf").count() >= 3);
    h.remove_cursor();
    snapshot_tolerant(&mut h, "ui_localize");

    // Clicking the capture selects it in the main view (running the golden up to it first).
    h.get_by_label("Show prefill12/L2.attn_out").click();
    wait_until(&mut h, "the selection", RUN_TIMEOUT, |h| {
        h.state()
            .selected()
            .is_some_and(|r| r.label() == "prefill12/L2.attn_out")
    });
    h.get_by_label("Selected: prefill12/L2.attn_out");
    // Each row's capture is a button too: decode12's row selects decode12's capture.
    let buttons: Vec<_> = h.query_all_by_label("L2.attn_out").collect();
    assert_eq!(buttons.len(), 3, "one per regime");
    buttons[1].click();
    // decode12 may not have run yet (the first selection ran the golden up to prefill12 only).
    wait_until(&mut h, "the decode12 selection", RUN_TIMEOUT, |h| {
        h.state()
            .selected()
            .is_some_and(|r| r.label() == "decode12/L2.attn_out")
    });
    h.get_by_label("Selected: decode12/L2.attn_out");

    // The counterfactual: a bit flip is a compute bug, pinning selections does not remove it.
    h.get_by_label("Pin selections from layer").click();
    h.step();
    h.get_by_label("Run localization").click();
    wait_localized(&mut h);
    let c = match &h.state().localize_state().result {
        Some(Ok(o)) => o.counterfactual.clone().expect("a counterfactual"),
        other => panic!("localisation failed: {other:?}"),
    };
    assert_eq!(c.from_layer, 0);
    assert!(c.verdict.starts_with("compute"), "{}", c.verdict);
    h.get_by_label(&format!("Pinned from layer 0: {}", c.verdict));

    h.get_by_label("Close localization").click();
    h.run_steps(2);
    assert!(h
        .query_by_label_contains("First local divergence")
        .is_none());
}

#[test]
fn a_clean_oracle_has_no_local_divergence_and_a_planted_fault_field_works() {
    // The app without a GPU: its test backend is the oracle itself.
    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    let mut h = harness(o);
    wait_ready(&mut h);
    open_localize(&mut h);
    let l = match &h.state().localize_state().result {
        Some(Ok(o)) => o.localization.clone(),
        other => panic!("localisation failed: {other:?}"),
    };
    assert!(l.first_local_divergence.is_none());
    assert_eq!(l.steps.len(), 3 * 11);
    assert!(l
        .steps
        .iter()
        .all(|s| s.input_ratio == 0.0 && s.chained_ratio == 0.0 && s.local_ratio == 0.0));
    h.get_by_label("No local divergence: every step's local error is within tolerance");
    h.get_by_label("Reference: cpu; test: cpu (the reference itself: no other backend)");
    assert!(h.query_by_label("first local divergence").is_none());
    assert_eq!(h.query_all_by_label("ok").count(), 33);

    // A malformed spec is an error in the window, not a panic.
    replace_text(&mut h, "Plant fault:", "nonsense");
    h.get_by_label("Run localization").click();
    wait_localized(&mut h);
    h.get_by_label_contains("Localization could not run: planted fault `nonsense`");

    // The developer's planted fault: a CPU oracle with it is the test backend.
    replace_text(&mut h, "Plant fault:", "perturb=0.05@L4.ffn_out");
    h.get_by_label("Run localization").click();
    wait_localized(&mut h);
    h.get_by_label("Reference: cpu oracle; test: cpu oracle with perturb=0.05@L4.ffn_out");
    h.get_by_label_contains("First local divergence: prefill12 Block(4) at L4.ffn_out (");

    // Opening a golden drops the previous golden's localisation.
    h.get_by_label("Embedded golden").click();
    wait_until(&mut h, "the golden to reload", RUN_TIMEOUT, |h| {
        h.state().localize_state().result.is_none()
    });
    h.get_by_label("No localization yet: press Run localization.");
    assert!(h
        .query_by_label_contains("First local divergence")
        .is_none());
}

/// The lockstep walk of tests/triage.rs: every index capture of `test` triaged against the
/// reference oracle with its diagnostic scores, per regime.
fn lockstep(g: &Golden, faults: Vec<Fault>) -> Vec<(String, TopkTriage)> {
    let cfg = session::model_of(g).expect("model").0;
    let mut reference = session::oracle_for(g).expect("oracle");
    reference.diagnostics = true;
    let mut test = session::oracle_for(g).expect("oracle");
    test.faults = FaultPlan::new(faults);
    let mut state = TriageState::default();
    let mut out = Vec::new();
    for (regime, ids, start) in session::regime_inputs(g).expect("inputs") {
        reference.begin(&ids, start).expect("begin");
        test.begin(&ids, start).expect("begin");
        state.begin_regime(&regime);
        for step in reference.steps() {
            let (mut rc, mut tc) = (Vec::new(), Vec::new());
            reference.run(step, &mut rc).expect("reference step");
            test.run(step, &mut tc).expect("test step");
            for t in state.step(&cfg, start, &rc, &tc, 0.0) {
                out.push((regime.clone(), t));
            }
        }
    }
    out
}

fn tie_order_faults() -> Vec<Fault> {
    let at = |c: &str| Fault {
        kind: FaultKind::TieOrder,
        capture: c.into(),
        regime_start: None,
        index: 0,
    };
    vec![at("L5.sa_topk_idxs"), at("L5.moe_indices")]
}

#[test]
fn triage_of_a_lowest_index_tie_rule_shows_only_tie_flips() {
    let mut h = harness(planted_options(tie_order_faults(), true));
    wait_ready(&mut h);
    run_all(&mut h);

    // The app's triage of every index capture is the lockstep walk's.
    let golden = golden_lens::golden::embedded::default_golden().expect("golden");
    let expected = lockstep(&golden, tie_order_faults());
    let app: Vec<(String, TopkTriage)> = h
        .state()
        .results()
        .iter()
        .flat_map(|r| {
            r.triages()
                .map(|(x, t)| {
                    assert_eq!((x.test.as_str(), x.reference.as_str()), ("cpu-test", "cpu"));
                    assert!(t.scores_known, "{}", r.label());
                    (r.regime.clone(), t.triage.clone())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        app.len(),
        48,
        "15 index captures and the candidate source's mask per regime"
    );
    // Compared as Debug text (the triage holds f32 fields).
    assert_eq!(format!("{app:?}"), format!("{expected:?}"));

    let t = h.state().triage_totals();
    assert_eq!(t.captures, 48);
    assert!(
        t.rows_differing > 0,
        "the -inf tie of decode12 L5 must flip"
    );
    assert_eq!(t.tie_flips, t.rows_differing);
    assert_eq!((t.near_ties, t.real, t.unscored_rows), (0, 0, 0));
    h.get_by_label(&format!(
        "Top-k triage: {} of {} rows differ in 48 index captures (tie flip {}, near tie 0, real 0)",
        t.rows_differing, t.rows, t.tie_flips
    ));

    // The selected index capture's detail: counts, then each differing row as a tie flip.
    let (_, d12) = app
        .iter()
        .find(|(r, x)| r == "decode12" && x.capture == "L5.sa_topk_idxs")
        .expect("decode12 L5.sa_topk_idxs");
    assert!(d12.rows_differing > 0);
    assert!(d12.details.iter().all(|d| d.class == TopkClass::TieFlip));
    h.get_by_label("Filter:").focus();
    h.step();
    h.get_by_label("Filter:")
        .type_text("decode12/L5.sa_topk_idxs");
    h.run_steps(2);
    h.get_by_label("decode12/L5.sa_topk_idxs").click();
    h.run_steps(3);
    h.get_by_label("Selected: decode12/L5.sa_topk_idxs");
    // The window mask (its family's view) names the triage; the top-k view lists every row.
    h.get_by_label_contains("Top-k triage, cpu-test vs cpu: rows differing");
    h.get_by_role_and_label(eframe::egui::Role::Tab, "Top-k agreement")
        .click();
    h.run_steps(3);
    h.get_by_label(&format!(
        "Top-k triage, cpu-test vs cpu: rows differing {0} of {1}; tie flip {0}, near tie 0, real 0",
        d12.rows_differing, d12.rows
    ));
    h.get_by_label(&format!(
        "top-k Δ{0}/{1}: {0} tie flip, 0 near tie, 0 real",
        d12.rows_differing, d12.rows
    ));
    // One table against the golden (the recorded reference holds the capture whole) and one
    // against the first backend, each with one class cell per differing row.
    let tables = 1 + usize::from(
        h.state()
            .selected()
            .is_some_and(|r| r.per_backend[1].triage.is_some()),
    );
    assert_eq!(
        h.query_all_by_label("tie flip").count(),
        tables * d12.details.len(),
        "one class cell per differing row and table"
    );
    let first = &d12.details[0];
    assert_eq!(
        h.query_all_by_label(&format!("row {}", first.row)).count(),
        tables
    );
    assert!(h.query_by_label("real").is_none());
    h.remove_cursor();
    snapshot_tolerant(&mut h, "ui_topk_triage");
}

#[test]
fn triage_without_reference_scores_says_the_rows_are_unscored() {
    let mut h = harness(planted_options(tie_order_faults(), false));
    wait_ready(&mut h);
    run_all(&mut h);
    let t = h.state().triage_totals();
    // Candidate masks are only triaged with block scores, so 15 per regime here.
    assert_eq!(t.captures, 45);
    assert!(t.rows_differing > 0);
    // Without scores nothing can be called a tie: every differing row is real and unscored.
    assert_eq!(t.real, t.rows_differing);
    assert_eq!(t.unscored_rows, t.rows_differing);
    h.get_by_label_contains(&format!(
        "{} differing rows have no reference scores and count as real",
        t.unscored_rows
    ));
}

/// With the wgpu backend as the app's test backend, localisation judges it by the GPU policy
/// against the oracle (as `localize --backend gpu` does): the GPU's ulp-level transcendental
/// noise is not a divergence, while the strict (bit-exact) bar would call it one.
#[cfg(feature = "gpu")]
#[test]
fn a_gpu_test_backend_is_judged_by_the_gpu_policy() {
    use golden_lens::golden::Golden;
    use golden_lens::gpu::{test_context, GpuOptions};
    use golden_lens::session::controller::BoxedBackend;
    use golden_lens::session::localize::{localize_with, Judge, RecordedRun};
    use golden_lens::ui::AppOptions;
    use std::path::Path;
    use std::sync::Arc;
    if test_context("ui_localize_gpu").is_none() {
        return;
    }
    let gpu_opts = || GpuOptions {
        reference_ties: true,
        ..Default::default()
    };
    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    o.backends = Arc::new(move |g: &Golden, gguf: Option<&Path>| {
        let reference = session::oracle_on(g, gguf)?;
        let gpu = session::gpu_for(g, gpu_opts())?;
        Ok(vec![
            Box::new(reference) as BoxedBackend,
            Box::new(gpu) as BoxedBackend,
        ])
    });
    let mut h = harness(o);
    wait_ready(&mut h);
    open_localize(&mut h);
    let l = match &h.state().localize_state().result {
        Some(Ok(o)) => o.localization.clone(),
        other => panic!("localisation failed: {other:?}"),
    };
    assert!(
        l.first_local_divergence.is_none(),
        "{:?}",
        l.first_local_divergence.map(|i| &l.steps[i])
    );
    h.get_by_label("No local divergence: every step's local error is within tolerance");
    // The same GPU under the strict bar: its few one-ulp bf16 differences break it.
    let golden = golden_lens::golden::embedded::default_golden().expect("golden");
    let mut reference = session::oracle_for(&golden).expect("oracle");
    let rec = RecordedRun::record(&golden, &mut reference).expect("record");
    let mut make = || -> Result<Box<dyn golden_lens::model::Backend>, session::SessionError> {
        Ok(Box::new(session::gpu_for(&golden, gpu_opts())?))
    };
    let strict = localize_with(&golden, &rec, &mut make, Judge::Strict).expect("localize");
    assert!(strict.first_local_divergence.is_some());
}
