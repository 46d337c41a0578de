//! The comparator self-test: every planted fault kind is caught, and the first failing capture
//! is the one it was planted at; isolated mode confines each to its own step.

use golden_lens::golden::Golden;
use golden_lens::oracle::faults::{Fault, FaultKind, FaultPlan};
use golden_lens::oracle::Oracle;
use golden_lens::session::selftest::{default_targets, run_oracle_selftest};
use golden_lens::session::{self, CheckOptions, Mode};
use std::path::PathBuf;

fn reference(name: &str) -> Golden {
    Golden::load(
        &PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/golden/reference")).join(name),
    )
    .expect("golden")
}

#[test]
fn every_fault_kind_is_caught_at_the_planted_capture() {
    let g = golden_lens::golden::embedded::default_golden().expect("embedded golden");
    let rows = run_oracle_selftest(&g, &default_targets()).expect("selftest runs");
    for kind in FaultKind::ALL {
        let name = kind.to_string();
        let base = name.split('=').next().unwrap_or(&name);
        assert!(
            rows.iter().any(|r| r.kind.split('=').next() == Some(base)),
            "{kind} not exercised"
        );
    }
    for r in &rows {
        assert!(
            r.ok,
            "{} at {}: caught {}, first failure {:?}",
            r.kind, r.planted_at, r.caught, r.first_failure
        );
    }
}

#[test]
fn isolated_mode_confines_each_planted_fault_to_its_step() {
    let g = reference("ds41_tiny_golden.v3-full.json");
    let (cfg, tables) = session::model_of(&g).expect("model");
    for fault in default_targets() {
        let layer = fault.capture[1..]
            .split('.')
            .next()
            .and_then(|x| x.parse::<usize>().ok())
            .expect("layer");
        let w = std::sync::Arc::new(golden_lens::model::FillerSource::new(
            "v3-full",
            &g.weights_meta,
        ));
        let mut oracle = Oracle::new(cfg.clone(), w, tables.clone());
        oracle.faults = FaultPlan::new(vec![Fault {
            regime_start: Some(0),
            ..fault.clone()
        }]);
        let r = session::run_check(
            &g,
            &mut oracle,
            &CheckOptions {
                mode: Mode::Isolated,
                strict: true,
                ..Default::default()
            },
        )
        .expect("check");
        let first = r.first_failure().expect("caught");
        assert_eq!(first.name, fault.capture, "{}", fault.kind);
        let leaked: Vec<String> = r
            .rows
            .iter()
            .filter(|row| {
                !row.cmp.pass
                    && (row.regime != "prefill12" || !row.name.starts_with(&format!("L{layer}.")))
            })
            .map(|row| format!("{} {}", row.regime, row.name))
            .collect();
        // Shared slots published by this layer may carry the fault; nothing else may.
        let leaked: Vec<&String> = leaked
            .iter()
            .filter(|n| !n.contains(&format!("shared.L{layer}.")))
            .collect();
        assert!(
            leaked.is_empty(),
            "{} at {}: failures outside its step: {leaked:?}",
            fault.kind,
            fault.capture
        );
    }
}

/// The GPU path's own injections (`--inject`), each caught at the injected capture.
#[cfg(feature = "gpu")]
#[test]
fn every_gpu_injection_is_caught_at_the_injected_capture() {
    if golden_lens::gpu::test_context("every_gpu_injection_is_caught_at_the_injected_capture")
        .is_none()
    {
        return;
    }
    let g = golden_lens::golden::embedded::default_golden().expect("embedded golden");
    let (_, rows) = golden_lens::session::selftest::run_gpu_selftest(&g)
        .expect("runs")
        .expect("adapter");
    assert_eq!(rows.len(), 5);
    for r in &rows {
        assert!(
            r.ok,
            "gpu {} at {}: caught {}, first failure {:?}",
            r.kind, r.planted_at, r.caught, r.first_failure
        );
    }
}
