//! The step API on its own: each step is seeded from the golden's full captures and its outputs
//! are checked, so a failure names the sublayer. That isolated mode confines a fault chained mode
//! carries downstream is a property of every backend: tests/conformance.rs.

use golden_lens::golden::compare::{compare_with_golden, Values};
use golden_lens::golden::policy::policy_for_capture;
use golden_lens::golden::Golden;
use golden_lens::model::{Backend, Capture, Step};
use golden_lens::session::{self, GoldenSeeds};
use std::path::PathBuf;

fn golden(name: &str) -> Golden {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/golden/reference")).join(name);
    Golden::load(&p).expect("golden loads")
}

/// Seed `step` of regime 0 from the golden, run it alone, and check every capture it emits
/// against the golden; returns the names checked.
fn run_seeded_step(g: &Golden, regime: usize, prior: &[Step], step: Step) -> Vec<String> {
    let mut oracle = session::oracle_for(g).expect("oracle");
    let inputs = session::regime_inputs(g).expect("inputs");
    // Earlier regimes run chained so the state that is not reseeded (pointers) is in place.
    for (ri, (_, ids, start)) in inputs.iter().enumerate().take(regime + 1) {
        oracle.begin(ids, *start).expect("begin");
        let steps = if ri < regime {
            oracle.steps()
        } else {
            prior.to_vec()
        };
        for s in steps {
            let mut sink = Vec::new();
            oracle.run(s, &mut sink).expect("prior step");
        }
    }
    let seeds = GoldenSeeds::new(g, regime).expect("seeds");
    let missing = oracle.seed(step, &seeds).expect("seed");
    // Hash ids are integer outputs of EngramHash (already run above); everything else must seed.
    assert!(
        missing.iter().all(|m| m.ends_with("engram_hash_ids")),
        "{step}: cannot seed {missing:?}"
    );
    let mut caps: Vec<Capture> = Vec::new();
    oracle.run(step, &mut caps).expect("step runs");
    let reg = &g.regimes[regime];
    let mut checked = Vec::new();
    for c in &caps {
        let Some(gc) = reg.get(&c.name) else { continue };
        let cmp = compare_with_golden(
            Values::from(&c.values),
            &c.shape,
            gc,
            &policy_for_capture(&c.name, gc.is_int()),
        );
        assert!(
            cmp.pass,
            "{} {step}: sublayer capture {} fails: {}",
            reg.name, c.name, cmp.reason
        );
        checked.push(c.name.clone());
    }
    checked
}

#[test]
fn block0_from_v3_full_l0_inputs() {
    let g = golden("ds41_tiny_golden.v3.json");
    let names = run_seeded_step(&g, 0, &[Step::EngramHash, Step::Embed], Step::Block(0));
    for want in [
        "L0.attn_in",
        "L0.sa_o",
        "L0.attn_out",
        "L0.ffn_in",
        "L0.moe_indices",
        "L0.ffn_out",
        "L0.h_out",
        "L0.pre_mix_out",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not checked");
    }
}

#[test]
fn engram_layers_from_v3_full_engram_in() {
    let g = golden("ds41_tiny_golden.v3.json");
    for (regime, l) in [(0, 1), (0, 4), (1, 1), (2, 4)] {
        let names = run_seeded_step(
            &g,
            regime,
            &[Step::EngramHash, Step::Embed],
            Step::Engram(l),
        );
        for want in ["engram_embed", "engram_kv", "engram_out"] {
            assert!(
                names.contains(&format!("L{l}.{want}")),
                "L{l}.{want} not checked in regime {regime}"
            );
        }
    }
}

#[test]
fn every_block_of_every_regime_from_v3_full_inputs() {
    let g = golden("ds41_tiny_golden.v3-full.json");
    for regime in 0..3 {
        for l in 0..6 {
            let mut prior = vec![Step::EngramHash, Step::Embed];
            for j in 0..l {
                if j == 1 || j == 4 {
                    prior.push(Step::Engram(j));
                }
                prior.push(Step::Block(j));
            }
            if l == 1 || l == 4 {
                prior.push(Step::Engram(l));
            }
            let names = run_seeded_step(&g, regime, &prior, Step::Block(l));
            assert!(
                names.len() >= 20,
                "regime {regime} L{l}: only {} captures checked",
                names.len()
            );
        }
    }
}
