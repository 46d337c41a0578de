//! The CPU oracle against DeepSeek's reference goldens, end to end: every capture of every
//! regime within the Atlas bars, integer captures exact, bf16 captures bit-exact.

use golden_lens::golden::Golden;
use golden_lens::session::{self, CheckOptions, Mode, Report};
use std::path::PathBuf;

/// The share of bf16 captures that must be bit-exact on every sampled element (issue bar; the
/// spec's independent implementation reached 100%).
const MIN_BF16_BIT_EXACT_SHARE: f64 = 0.95;

fn reference(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/golden/reference")).join(name)
}

fn check(name: &str, mode: Mode) -> Report {
    let golden = Golden::load(&reference(name)).expect("golden loads");
    let mut oracle = session::oracle_for(&golden).expect("oracle");
    session::run_check(
        &golden,
        &mut oracle,
        &CheckOptions {
            mode,
            ..Default::default()
        },
    )
    .expect("check runs")
}

fn assert_passes(report: &Report, captures: usize) {
    let failures: Vec<String> = report
        .rows
        .iter()
        .filter(|r| !r.cmp.pass)
        .map(|r| format!("{} {}: {}", r.regime, r.name, r.cmp.reason))
        .collect();
    assert!(failures.is_empty(), "failing captures: {failures:#?}");
    assert!(
        report.missing.is_empty(),
        "missing captures: {:?}",
        report.missing
    );
    let s = report.summary();
    assert_eq!(s.passed, captures);
    assert_eq!(
        s.int_exact, s.int_total,
        "every integer capture must be exact"
    );
    assert!(s.int_total >= 65);
    let share = s.bf16_bit_exact as f64 / s.bf16_total as f64;
    assert!(
        share >= MIN_BF16_BIT_EXACT_SHARE,
        "bf16 bit-exact {} of {}",
        s.bf16_bit_exact,
        s.bf16_total
    );
    assert!(report.ok());
}

#[test]
fn v3_chained_passes_every_capture() {
    assert_passes(&check("ds41_tiny_golden.v3.json", Mode::Chained), 443);
}

#[test]
fn v2_chained_passes_every_capture() {
    assert_passes(&check("ds41_tiny_golden.v2.json", Mode::Chained), 443);
}

#[test]
fn v1_chained_passes_with_derived_engram_tables() {
    let r = check("ds41_tiny_golden.v1.json", Mode::Chained);
    assert_passes(&r, 431);
    // v1 lacks engram_embed / engram_kv: produced, not compared.
    assert_eq!(r.extra.len(), 12);
}

#[test]
fn v3_full_passes_chained_and_isolated_with_every_element_compared() {
    for mode in [Mode::Chained, Mode::Isolated] {
        let r = check("ds41_tiny_golden.v3-full.json", mode);
        assert_passes(&r, 443);
        assert!(r
            .rows
            .iter()
            .all(|row| row.cmp.stride == 1 && row.cmp.n_compared == row.cmp.expected_len));
        assert!(r.not_isolated.is_empty(), "{:?}", r.not_isolated);
    }
}

#[test]
fn isolated_mode_on_a_sampled_golden_names_what_cannot_be_isolated() {
    let r = check("ds41_tiny_golden.v3.json", Mode::Isolated);
    assert!(!r.not_isolated.is_empty());
    let l2 = r
        .not_isolated
        .iter()
        .find(|i| i.regime == "prefill12" && i.step.to_string() == "Block(2)")
        .expect("L2 prefill");
    assert!(
        l2.missing.iter().any(|m| m == "L2.h_in"),
        "{:?}",
        l2.missing
    );
}

#[test]
fn report_bits_do_not_depend_on_the_thread_count() {
    let golden = Golden::load(&reference("ds41_tiny_golden.v3.json")).expect("golden");
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        pool.install(|| {
            let mut oracle = session::oracle_for(&golden).expect("oracle");
            let r =
                session::run_check(&golden, &mut oracle, &CheckOptions::default()).expect("check");
            serde_json::to_string(&r.to_json()).expect("json")
        })
    };
    assert_eq!(run(1), run(2));
}

/// `golden/ds41_tiny.json` is written by our own oracle, so reproducing it echoes the oracle (a
/// regression test of the writer and of the oracle's bits); the agreement with DeepSeek's
/// reference comes from the v3 comparison below.
#[test]
fn shipped_default_golden_is_reproducible_and_agrees_with_v3() {
    let shipped_path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/ds41_tiny.json"
    ));
    let shipped_text = std::fs::read_to_string(&shipped_path).expect("golden/ds41_tiny.json");
    let v3 = Golden::load(&reference("ds41_tiny_golden.v3.json")).expect("v3");
    let mut oracle = session::oracle_for(&v3).expect("oracle");
    let fresh = session::writer::write_golden(&v3, &mut oracle, &session::writer::FullCaptures::V3)
        .expect("write");
    assert!(
        fresh == shipped_text,
        "golden/ds41_tiny.json is stale: regenerate it (see golden/README.md)"
    );
    // The shipped golden holds DeepSeek's numbers within the Atlas bars: check the oracle of v3's
    // fixture against it, and v3's samples against its samples.
    let shipped = Golden::parse(&shipped_text, &shipped_path).expect("shipped golden parses");
    assert_eq!(shipped.capture_count(), 443);
    for (a, b) in shipped.regimes.iter().zip(&v3.regimes) {
        let names_a: Vec<&str> = a.captures.iter().map(|c| c.name.as_str()).collect();
        let names_b: Vec<&str> = b.captures.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names_a, names_b, "{}: capture order", a.name);
        for (ca, cb) in a.captures.iter().zip(&b.captures) {
            assert_eq!(
                (&ca.shape, ca.n, ca.stride),
                (&cb.shape, cb.n, cb.stride),
                "{} {}",
                a.name,
                ca.name
            );
            let policy = golden_lens::golden::policy::policy_for_capture(&cb.name, cb.is_int());
            let tol = policy.element_tol_for(&cb.samples_f64());
            for (x, y) in ca.samples_f64().iter().zip(cb.samples_f64()) {
                assert!(
                    (x - y).abs() <= tol,
                    "{} {}: {x} vs {y} beyond {tol}",
                    a.name,
                    ca.name
                );
            }
            assert!(
                (ca.ck - cb.ck).abs() <= policy.ck_rel * cb.ck.abs().max(1.0),
                "{} {}: ck",
                a.name,
                ca.name
            );
        }
    }
}

#[test]
fn oracle_captures_hold_every_graph_invariant() {
    let golden = Golden::load(&reference("ds41_tiny_golden.v3.json")).expect("golden");
    let mut oracle = session::oracle_for(&golden).expect("oracle");
    let cfg = session::model_of(&golden).expect("model").0;
    let opts = CheckOptions {
        invariants: Some(cfg),
        ..Default::default()
    };
    let r = session::run_check(&golden, &mut oracle, &opts).expect("check");
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
}

#[test]
fn invariant_checks_name_a_broken_sinkhorn_and_routing() {
    use golden_lens::model::{Capture, CaptureDtype};
    use golden_lens::session::invariants::check_capture;
    let golden = Golden::load(&reference("ds41_tiny_golden.v3.json")).expect("golden");
    let cfg = session::model_of(&golden).expect("model").0;
    let mut comb = vec![0.25f32; 16];
    comb[5] = 0.5;
    let v = check_capture(
        &cfg,
        &Capture::f32("L3.attn_comb", vec![1, 1, 4, 4], CaptureDtype::F32, comb),
        None,
    );
    assert!(v.iter().any(|x| x.what.contains("comb row 1")), "{v:?}");
    let v = check_capture(
        &cfg,
        &Capture::f32(
            "L0.moe_weights",
            vec![1, 2],
            CaptureDtype::F32,
            vec![0.7, 0.7],
        ),
        None,
    );
    assert!(v.iter().any(|x| x.what.contains("route_scale")), "{v:?}");
    let v = check_capture(
        &cfg,
        &Capture::int("L2.sa_topk_idxs", vec![1, 1, 3], vec![0, -1, 18]),
        Some(18),
    );
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].index, 2);
}

#[test]
fn mask_conformance_names_a_leaked_window_position() {
    use golden_lens::model::Capture;
    use golden_lens::session::invariants::check_attention_mask;
    let golden = Golden::load(&reference("ds41_tiny_golden.v3.json")).expect("golden");
    let cfg = session::model_of(&golden).expect("model").0;
    // decode12 on layer 0: the ring oldest first is [5,6,7,0,1,2,3,4]; put slot 9 in.
    let ok = Capture::int(
        "L0.sa_topk_idxs",
        vec![1, 1, 8],
        vec![5, 6, 7, 0, 1, 2, 3, 4],
    );
    assert!(check_attention_mask(&cfg, 0, 12, &ok).is_empty());
    let bad = Capture::int(
        "L0.sa_topk_idxs",
        vec![1, 1, 8],
        vec![5, 6, 7, 0, 1, 2, 3, 9],
    );
    let v = check_attention_mask(&cfg, 0, 12, &bad);
    assert_eq!(v.len(), 1);
    assert!(v[0].what.contains("leaked rows [9]"), "{}", v[0].what);
    // Prefill layer 2 (ratio 2): query 2 sees one complete group, so position 1 leaks.
    let mut row = vec![-1i64; 12 * 14];
    for t in 0..12usize {
        let first = (t + 1).saturating_sub(8);
        for c in 0..8 {
            let j = first + c;
            row[t * 14 + c] = if j > t { -1 } else { j as i64 };
        }
    }
    row[2 * 14 + 8] = 12 + 1;
    let v = check_attention_mask(
        &cfg,
        2,
        0,
        &Capture::int("L2.sa_topk_idxs", vec![1, 12, 14], row),
    );
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].what.contains("position 1) is not visible"),
        "{}",
        v[0].what
    );
}

#[test]
fn every_oracle_capture_is_within_its_error_budget() {
    let r = check("ds41_tiny_golden.v3.json", Mode::Chained);
    let mut checked = 0;
    for row in &r.rows {
        let b = r.budget(row).expect("budget");
        assert!(!b.reason.is_empty());
        assert!(
            row.cmp.max_abs_err <= b.abs,
            "{} {}: {} over budget {} ({})",
            row.regime,
            row.name,
            row.cmp.max_abs_err,
            b.abs,
            b.reason
        );
        checked += 1;
    }
    assert_eq!(checked, 443);
    let j = r.to_json();
    assert!(j["captures"][0]["budget_reason"].is_string());
}
