//! Top-k triage end to end: a backend whose top-k breaks ties by the lowest index (as a simple
//! GPU selection does) disagrees with the reference only by tie flips, and the triage says so;
//! the oracle against itself has no disagreement at all.

use golden_lens::golden::Golden;
use golden_lens::oracle::faults::{Fault, FaultKind, FaultPlan};
use golden_lens::session::triage::TopkTriage;
use golden_lens::session::{self, CheckOptions};
use std::path::PathBuf;

/// Every selection of an oracle with `faults` triaged against a clean oracle (with its
/// diagnostic scores), per regime, through the lockstep run `check --backend` uses.
fn lockstep(g: &Golden, faults: Vec<Fault>) -> Vec<(String, TopkTriage)> {
    let mut reference = session::oracle_for(g).expect("oracle");
    reference.diagnostics = true;
    let mut test = session::oracle_for(g).expect("oracle");
    test.faults = FaultPlan::new(faults);
    let mut m = session::run_lockstep(
        g,
        vec![Box::new(&mut reference), Box::new(&mut test)],
        &CheckOptions::default(),
    )
    .expect("lockstep");
    m.triage_cross.remove(0).1
}

fn v3() -> Golden {
    Golden::load(&PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/reference/ds41_tiny_golden.v3.json"
    )))
    .expect("v3")
}

#[test]
fn oracle_against_itself_has_no_topk_disagreement() {
    let t = lockstep(&v3(), Vec::new());
    assert_eq!(
        t.len(),
        48,
        "6 sa_topk_idxs + 6 moe_indices + 3 shared topk_idxs + the candidate source's mask per regime"
    );
    assert!(t.iter().all(|(_, x)| x.rows_differing == 0));
}

#[test]
fn lowest_index_tie_rule_yields_only_tie_flips() {
    let at = |c: &str| Fault {
        kind: FaultKind::TieOrder,
        capture: c.into(),
        regime_start: None,
        index: 0,
    };
    let t = lockstep(&v3(), vec![at("L5.sa_topk_idxs"), at("L5.moe_indices")]);
    let differing: Vec<&(String, TopkTriage)> =
        t.iter().filter(|(_, x)| x.rows_differing > 0).collect();
    assert!(
        !differing.is_empty(),
        "the -inf tie of decode12 L5 (spec §12.6) must flip"
    );
    for (regime, x) in &differing {
        assert_eq!(
            x.real + x.near_ties,
            0,
            "{regime} {}: {:?}",
            x.capture,
            x.details
        );
        assert_eq!(x.tie_flips, x.rows_differing);
    }
    assert!(differing
        .iter()
        .any(|(r, x)| r == "decode12" && x.capture == "L5.sa_topk_idxs"));
}

#[test]
fn a_lowest_index_candidate_rule_is_a_tie_flip_and_later_selections_name_it() {
    let fault = Fault {
        kind: FaultKind::TieOrder,
        capture: "shared.L4.candidates".into(),
        regime_start: None,
        index: 0,
    };
    let t = lockstep(&v3(), vec![fault]);
    let cand: Vec<&(String, TopkTriage)> = t
        .iter()
        .filter(|(_, x)| x.capture == "shared.L4.candidates" && x.rows_differing > 0)
        .collect();
    assert!(
        !cand.is_empty(),
        "a block tie at the candidate boundary must flip under the lowest-index rule"
    );
    for (regime, x) in &cand {
        assert_eq!(x.tie_flips, x.rows_differing, "{regime}: {:?}", x.details);
    }
    // Every later disagreement in the same forward follows the flipped mask.
    for (regime, x) in t.iter().filter(|(r, x)| {
        x.rows_differing > 0
            && x.capture != "shared.L4.candidates"
            && cand.iter().any(|(cr, _)| cr == r)
    }) {
        assert_eq!(
            x.downstream_of.as_deref(),
            Some(format!("{regime} shared.L4.candidates").as_str()),
            "{regime} {}",
            x.capture
        );
    }
}
