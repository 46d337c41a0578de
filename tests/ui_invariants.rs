//! Error budgets and invariant violations in the app (what `golden-lens check` prints): the
//! default run is within every budget with no violation; a test backend with a planted fault that
//! makes comb rows stop summing to 1 shows its violations in the data model, the run's label, the
//! capture list and the selected capture's detail, and shows over budget there too.
#![cfg(feature = "gui")]

use egui_kittest::kittest::Queryable;
use golden_lens::golden::Golden;
use golden_lens::model::Backend;
use golden_lens::oracle::faults::{Fault, FaultPlan};
use golden_lens::session::{self, invariants};
use golden_lens::ui::AppOptions;

mod ui_common;
use ui_common::*;

/// Where the fault is planted: element 0 of every regime's first comb matrix gains 0.01, so token
/// 0's row 0 and column 0 sum to about 1.01.
const PLANTED: &str = "perturb=0.01@L0.attn_comb";

/// Every invariant violation of an oracle with `faults` over the golden, checked outside the app
/// the way `check` does (per step, on the backend's own captures): `(regime, violation)`.
fn expected_violations(g: &Golden, faults: Vec<Fault>) -> Vec<(String, invariants::Violation)> {
    let cfg = session::model_of(g).expect("model").0;
    let mut o = session::oracle_for(g).expect("oracle");
    o.faults = FaultPlan::new(faults);
    let mut out = Vec::new();
    for (regime, ids, start) in session::regime_inputs(g).expect("inputs") {
        o.begin(&ids, start).expect("begin");
        for step in o.steps() {
            let mut caps = Vec::new();
            o.run(step, &mut caps).expect("step");
            for v in invariants::check_step(&cfg, start, &caps) {
                out.push((regime.clone(), v));
            }
        }
    }
    out
}

#[test]
fn the_default_run_is_within_every_budget_and_violates_no_invariant() {
    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    let mut h = harness(o);
    wait_ready(&mut h);
    // Nothing to count before a step has run.
    assert!(h.query_by_label_contains("Error budgets:").is_none());
    run_all(&mut h);
    let total = h.state().results().len();
    assert!(total > 0);
    assert_eq!(h.state().budget_counts(), (total, total));
    assert_eq!(h.state().violation_count(), 0);
    h.get_by_label(&format!(
        "Error budgets: {total} of {total} captures within budget"
    ));
    h.get_by_label("Invariants: 0 violations in the backends' own captures");
    assert!(h.query_by_label("over budget").is_none());
    assert!(h.query_by_label_contains("invariants: ").is_none());

    // A float capture's budget is the reduction bound; the detail names it and the ratio.
    select_capture(&mut h, "prefill12/L0.attn_comb");
    let r = h.state().selected().expect("selection").clone();
    let b = r.per_backend[0].budget.clone().expect("a budget");
    assert!(b.budget.abs > 0.0 && b.ratio <= 1.0);
    assert!(b.budget.reason.contains("reduction"), "{}", b.budget.reason);
    h.get_by_label(&format!(
        "cpu vs golden budget: {:.1e} ({}), error/budget {:.2}",
        b.budget.abs, b.budget.reason, b.ratio
    ));
    assert!(h.query_by_label_contains("Invariant violations").is_none());

    // An integer capture's budget is exactness.
    select_capture(&mut h, "prefill12/L0.moe_indices");
    h.get_by_label("cpu vs golden budget: 0.0e0 (integer capture: exact), error/budget 0.00");
}

#[test]
fn a_planted_comb_fault_shows_its_violations_and_goes_over_budget() {
    let fault = Fault::parse(PLANTED).expect("fault spec");
    let mut h = harness(planted_options(vec![fault.clone()], false));
    wait_ready(&mut h);
    run_all(&mut h);

    // The data model holds exactly the violations `check` finds on the faulty backend, each on
    // that backend's side of the capture it names; the reference has none.
    let golden = golden_lens::golden::embedded::default_golden().expect("golden");
    let expected = expected_violations(&golden, vec![fault]);
    assert!(!expected.is_empty());
    assert!(expected.iter().all(|(_, v)| v.capture == "L0.attn_comb"));
    let mut got = Vec::new();
    for r in h.state().results() {
        assert!(r.per_backend[0].violations.is_empty(), "{}", r.label());
        for (backend, v) in r.violations() {
            assert_eq!(backend, "cpu-test");
            assert_eq!(v.capture, r.name);
            got.push((r.regime.clone(), v.clone()));
        }
    }
    assert_eq!(got, expected);
    assert!(h.state().other_violations().is_empty());
    let n = expected.len();
    assert_eq!(h.state().violation_count(), n);
    h.get_by_label(&format!(
        "Invariants: {n} violations in the backends' own captures"
    ));

    // Over budget: the perturbation is far more than f32 arithmetic explains.
    let (within, budgeted) = h.state().budget_counts();
    assert_eq!(budgeted, h.state().results().len());
    assert!(within < budgeted);
    h.get_by_label(&format!(
        "Error budgets: {within} of {budgeted} captures within budget"
    ));

    // The capture list marks the capture; the detail lists each violation and the budget.
    select_capture(&mut h, "prefill12/L0.attn_comb");
    let r = h.state().selected().expect("selection").clone();
    let own = &r.per_backend[1].violations;
    assert!(!own.is_empty());
    assert!(
        own[0].what.contains("comb row 0 sums to"),
        "{}",
        own[0].what
    );
    assert_eq!(own[0].index, 0);
    h.get_by_label(&format!("invariants: {} violated", own.len()));
    h.get_by_label("over budget");
    h.get_by_label(&format!("Invariant violations ({})", own.len()));
    for v in own {
        h.get_by_label(&format!("cpu-test at flat index {}: {}", v.index, v.what));
    }
    assert_eq!(
        h.query_all_by_label_contains("cpu-test at flat index")
            .count(),
        own.len()
    );
    assert_eq!(r.within_budget(), Some(false));
    let test_budget = r.per_backend[1].budget.clone().expect("a budget");
    assert!(test_budget.ratio > 1.0);
    assert!(r.per_backend[0].budget.as_ref().is_some_and(|b| b.within()));
    h.get_by_label(&format!(
        "cpu-test vs golden budget: {:.1e} ({}), error/budget {:.2}: OVER BUDGET",
        test_budget.budget.abs, test_budget.budget.reason, test_budget.ratio
    ));
    h.get_by_label_contains("cpu vs golden budget: ");
}
