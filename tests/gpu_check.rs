//! The whole tiny forward on the wgpu path: the golden check with host top-k (exact), the
//! lockstep comparison with the oracle under the GPU policy, and one test per `--inject` kind
//! showing the fault is caught and the first failing capture is the injected one.
#![cfg(feature = "gpu")]

use golden_lens::golden::Golden;
use golden_lens::gpu::{test_context, GpuBackend, GpuOptions, Injection};
use golden_lens::model::{FillerSource, WeightSource};
use golden_lens::session::{self, CheckOptions};
use std::path::PathBuf;
use std::sync::Arc;

fn golden() -> Golden {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/reference/ds41_tiny_golden.v3.json"
    ));
    Golden::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn backend(test: &str, golden: &Golden, opts: GpuOptions) -> Option<GpuBackend> {
    let ctx = test_context(test)?;
    let (cfg, tables) = session::model_of(golden).expect("config");
    let weights: Arc<dyn WeightSource> = Arc::new(FillerSource::new("v3", &golden.weights_meta));
    Some(GpuBackend::new(ctx, cfg, weights, tables, opts).expect("gpu backend"))
}

fn opts_for(golden: &Golden) -> CheckOptions {
    CheckOptions {
        invariants: Some(session::model_of(golden).expect("config").0),
        ..CheckOptions::default()
    }
}

#[test]
fn gpu_backend_passes_the_v3_golden_with_reference_ties() {
    let g = golden();
    let opts = GpuOptions {
        reference_ties: true,
        ..Default::default()
    };
    let Some(mut gpu) = backend("gpu_golden", &g, opts) else {
        return;
    };
    let report = session::run_check(&g, &mut gpu, &opts_for(&g)).expect("check runs");
    let s = report.summary();
    eprintln!("gpu vs golden: {s:?}");
    if let Some(f) = report.first_failure() {
        panic!("first failure {} {}: {}", f.regime, f.name, f.cmp.reason);
    }
    assert!(report.missing.is_empty(), "missing {:?}", report.missing);
    assert!(
        report.violations.is_empty(),
        "invariants {:?}",
        report.violations.first()
    );
    assert_eq!(s.passed, 443);
    assert!(report.ok());
}

#[test]
fn lockstep_cpu_gpu_keeps_every_gpu_capture_within_the_gpu_policy() {
    let g = golden();
    let opts = GpuOptions {
        reference_ties: true,
        ..Default::default()
    };
    let Some(mut gpu) = backend("gpu_lockstep", &g, opts) else {
        return;
    };
    let mut oracle = session::oracle_for(&g).expect("oracle");
    let m = session::run_lockstep(
        &g,
        vec![Box::new(&mut oracle), Box::new(&mut gpu)],
        &opts_for(&g),
    )
    .expect("lockstep");
    let c = m.cross_summary(0);
    eprintln!("gpu vs cpu: {c:?}");
    if let Some(f) = m.first_cross_failure(0) {
        panic!("first divergence {} {}: {}", f.regime, f.name, f.cmp.reason);
    }
    assert_eq!(c.compared, 443);
    assert_eq!(c.missing, 0);
    assert!(m.ok());
}

#[test]
fn gpu_tie_rule_disagreements_are_counted_as_tie_flips() {
    let g = golden();
    let opts = GpuOptions {
        tie_audit: true,
        ..Default::default()
    };
    let Some(mut gpu) = backend("gpu_tie_flips", &g, opts) else {
        return;
    };
    let mut oracle = session::oracle_for(&g).expect("oracle");
    let m = session::run_lockstep(
        &g,
        vec![Box::new(&mut oracle), Box::new(&mut gpu)],
        &opts_for(&g),
    )
    .expect("lockstep");
    let c = m.cross_summary(0);
    eprintln!("gpu (GPU tie rule) vs cpu: {c:?}");
    assert_eq!(c.compared, 443);
    // The golden holds real ties (spec §12.6: decode12 layer 5 takes a -inf tie filler), so the
    // GPU rule must flip at least one selection, and every integer disagreement is explained by
    // the tie rule.
    assert!(c.tie_flips > 0);
    for (_, rows) in &m.cross {
        for r in rows.iter().filter(|r| r.kind.is_int() && !r.cmp.pass) {
            assert!(
                r.tie_flip,
                "{} {} is a real index mismatch",
                r.regime, r.name
            );
        }
    }
}

fn injected_first_failure(test: &str, spec: &str) {
    let g = golden();
    let inject: Injection = spec.parse().expect("injection parses");
    let opts = GpuOptions {
        reference_ties: true,
        inject: Some(inject.clone()),
        ..Default::default()
    };
    let Some(mut gpu) = backend(test, &g, opts) else {
        return;
    };
    let mut copts = opts_for(&g);
    copts.stop_after_regime = Some("prefill12".into());
    let report = session::run_check(&g, &mut gpu, &copts).expect("check runs");
    let f = report
        .first_failure()
        .unwrap_or_else(|| panic!("{spec}: not caught"));
    assert_eq!(
        f.name, inject.capture,
        "{spec}: first failure {} ({})",
        f.name, f.cmp.reason
    );
    assert!(!report.ok());
}

#[test]
fn inject_bitflip_is_caught_at_its_capture() {
    injected_first_failure("inject_bitflip", "bitflip@L1.attn_in");
}

#[test]
fn inject_window_off_by_one_is_caught_at_its_capture() {
    injected_first_failure("inject_window", "window-off-by-one@L0.sa_topk_idxs");
}

#[test]
fn inject_rope_sign_is_caught_at_its_capture() {
    injected_first_failure("inject_rope", "rope-sign@L2.sa_q");
}

#[test]
fn inject_dropped_workgroup_is_caught_at_its_capture() {
    injected_first_failure("inject_dropped", "dropped-workgroup@L3.ffn_in");
}

#[test]
fn inject_stale_buffer_is_caught_at_its_capture() {
    injected_first_failure("inject_stale", "stale-buffer@L2.attn_out");
}
