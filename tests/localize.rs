//! Localisation: a fault planted in one kernel at one layer is named as the first local
//! divergence (step, capture and worst element), with the error it carries downstream shown as
//! chained error and gain while downstream steps' local error stays within tolerance.

use golden_lens::model::{Backend, Step};
use golden_lens::oracle::faults::{Fault, FaultPlan};
use golden_lens::session::localize::{localize, table, RecordedRun};
use golden_lens::session::selftest::default_targets;
use golden_lens::session::{self, SessionError};

#[test]
fn each_planted_fault_is_the_first_local_divergence() {
    let g = golden_lens::golden::embedded::default_golden().expect("golden");
    let mut reference = session::oracle_for(&g).expect("oracle");
    let recorded = RecordedRun::record(&g, &mut reference).expect("record");
    for fault in default_targets() {
        let mut make = || -> Result<Box<dyn Backend>, SessionError> {
            let mut o = session::oracle_for(&g)?;
            o.faults = FaultPlan::new(vec![Fault {
                regime_start: Some(0),
                ..fault.clone()
            }]);
            Ok(Box::new(o))
        };
        let l = localize(&g, &recorded, &mut make, true).expect("localize");
        let first = &l.steps[l
            .first_local_divergence
            .unwrap_or_else(|| panic!("{}: nothing found\n{}", fault.kind, table(&l)))];
        let layer: usize = fault.capture[1..]
            .split('.')
            .next()
            .and_then(|x| x.parse().ok())
            .expect("layer");
        assert_eq!(first.regime, "prefill12");
        assert_eq!(
            first.step,
            Step::Block(layer),
            "{}\n{}",
            fault.kind,
            table(&l)
        );
        assert_eq!(
            first.worst_capture,
            fault.capture,
            "{}\n{}",
            fault.kind,
            table(&l)
        );
        assert!(first.local_breaks && first.local_ratio > 0.0);
        assert!(!first.worst_location.is_empty());
        // The planted step starts from exact inputs: all its error is born here.
        assert_eq!(first.input_ratio, 0.0, "{}", fault.kind);
        assert!(first.gain.is_infinite());
        // Every other step's local error is within tolerance.
        let others: Vec<String> = l
            .steps
            .iter()
            .filter(|s| s.local_breaks && !(s.regime == first.regime && s.step == first.step))
            .map(|s| format!("{} {} {}", s.regime, s.step, s.worst_capture))
            .collect();
        assert!(
            others.is_empty(),
            "{} at {}: local error elsewhere {others:?}",
            fault.kind,
            fault.capture
        );
    }
}

#[test]
fn a_clean_backend_has_no_local_divergence() {
    let g = golden_lens::golden::embedded::default_golden().expect("golden");
    let mut reference = session::oracle_for(&g).expect("oracle");
    let recorded = RecordedRun::record(&g, &mut reference).expect("record");
    let mut make =
        || -> Result<Box<dyn Backend>, SessionError> { Ok(Box::new(session::oracle_for(&g)?)) };
    let l = localize(&g, &recorded, &mut make, true).expect("localize");
    assert!(l.first_local_divergence.is_none(), "{}", table(&l));
    assert!(l
        .steps
        .iter()
        .all(|s| s.local_ratio == 0.0 && s.chained_ratio == 0.0));
    assert_eq!(l.steps.len(), 3 * 11);
}

#[test]
fn pinning_tells_a_selection_flip_from_a_compute_bug() {
    use golden_lens::oracle::faults::FaultKind;
    use golden_lens::session::localize::counterfactual;
    let g = golden_lens::golden::embedded::default_golden().expect("golden");
    let mut reference = session::oracle_for(&g).expect("oracle");
    let recorded = RecordedRun::record(&g, &mut reference).expect("record");
    let run = |kind: FaultKind, capture: &str| {
        let fault = Fault {
            kind,
            capture: capture.into(),
            regime_start: None,
            index: 0,
        };
        let mut make = || -> Result<Box<dyn Backend>, SessionError> {
            let mut o = session::oracle_for(&g)?;
            o.faults = FaultPlan::new(vec![fault.clone()]);
            Ok(Box::new(o))
        };
        counterfactual(&g, &recorded, &mut make, 5).expect("counterfactual")
    };
    let flip = run(FaultKind::TieOrder, "L5.sa_topk_idxs");
    assert!(
        flip.unpinned_ratio > 1.0,
        "the tie flip must diverge downstream: {}",
        flip.verdict
    );
    assert!(flip.pinned_ratio <= 1.0, "{}", flip.verdict);
    assert!(
        flip.verdict.starts_with("selection flip"),
        "{}",
        flip.verdict
    );
    let compute = run(FaultKind::Perturb(0.05), "L5.sa_o");
    assert!(
        compute.verdict.starts_with("compute"),
        "{}",
        compute.verdict
    );
}
