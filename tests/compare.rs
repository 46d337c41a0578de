//! The comparator against real goldens: full tensors from v3 / v3-full play the backend, the
//! strided captures of v2 / v3 play the golden. Planted defects show what the Atlas bars catch
//! and what only the stricter bit-exact report sees (spec §17.1).

use golden_lens::golden::compare::{compare_full, compare_with_golden, Comparison, Values};
use golden_lens::golden::policy::{
    bf16_tol, policy_for_capture, BF16_CK_REL, BIT_EXACT_CK_REL, F32_TOL, POLICY_BF16,
    POLICY_EXACT, POLICY_F32, POLICY_INDEX,
};
use golden_lens::golden::{Golden, GoldenCapture};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Size of the defect the Atlas `tests.rs` plants in a capture.
const PLANTED_DEFECT: f32 = 1e-3;

/// Slack when checking a measured error against the planted defect: the perturbed value is
/// rounded to f32, which moves it by at most half an f32 ulp at magnitude ~2 (1.2e-7).
const F32_ROUNDING_SLACK: f64 = 2.5e-7;

/// How far above the planted defect the Atlas bf16 bar sits on `L0.attn_in` (about 14x): the
/// point of the test is that the bar is an order of magnitude too loose to see it.
const ATLAS_BAR_OVER_DEFECT: f64 = 10.0;

/// Worst error / tolerance of the planted defect under that bar (about 0.07).
const DEFECT_RATIO_UNDER_ATLAS: f64 = 0.1;

/// A checksum moved by one 1e-3 element out of ~2000 of Σ|x|(i+1) shows as a relative diff of
/// ~3e-7: well above this floor of f64 summation noise, well below the Atlas checksum bar.
const ONE_ELEMENT_CK_REL_FLOOR: f64 = 1e-8;

/// A defect of twice the tolerance reads as a ratio of 2, up to the f32 rounding of the shifted
/// element and of the tolerance itself.
const TWICE_TOL_RATIO_SLACK: f64 = 0.1;

/// A shift between the f32 bar (1e-4) and the bf16 bar of `logits_full` (~1e-2).
const BETWEEN_THE_BARS: f32 = 5e-4;

/// Exact f64 arithmetic on a handful of rationals (a Jaccard mean over 12 rows).
const EXACT_F64_SLACK: f64 = 1e-12;

/// NMSE of a tensor scaled by 1 + 4 f32 epsilons: (4·2^-23)² ≈ 2.3e-13.
const FOUR_EPS_NMSE_CEILING: f64 = 1e-12;

/// Relative error of the same scaling: 4·2^-23 ≈ 4.8e-7.
const FOUR_EPS_REL_CEILING: f64 = 1e-6;

fn load(version: &str) -> Golden {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/golden/reference/"))
        .join(format!("ds41_tiny_golden.{version}.json"));
    Golden::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn golden(version: &str) -> &'static Golden {
    static V1: OnceLock<Golden> = OnceLock::new();
    static V2: OnceLock<Golden> = OnceLock::new();
    static V3: OnceLock<Golden> = OnceLock::new();
    static V3_FULL: OnceLock<Golden> = OnceLock::new();
    let cell = match version {
        "v1" => &V1,
        "v2" => &V2,
        "v3" => &V3,
        _ => &V3_FULL,
    };
    cell.get_or_init(|| load(version))
}

fn capture(version: &str, regime: &str, name: &str) -> &'static GoldenCapture {
    golden(version)
        .regime(regime)
        .and_then(|r| r.get(name))
        .unwrap_or_else(|| panic!("{version} {regime} {name}"))
}

/// The whole prefill `L0.attn_in` (stored full in v3) as the "backend tensor".
fn attn_in_full() -> Vec<f32> {
    capture("v3", "prefill12", "L0.attn_in")
        .full_f32()
        .expect("v3 stores L0.attn_in full")
}

fn check(got: &[f32], golden: &GoldenCapture) -> Comparison {
    let policy = policy_for_capture(&golden.name, golden.is_int());
    compare_with_golden(Values::F32(got), &golden.shape, golden, &policy)
}

#[test]
fn unperturbed_tensor_passes_bit_exact_against_every_version() {
    let got = attn_in_full();
    for version in ["v1", "v2", "v3"] {
        let g = capture(version, "prefill12", "L0.attn_in");
        let c = check(&got, g);
        assert!(c.pass && c.bit_exact, "{version}: {}", c.reason);
        assert_eq!(c.n_compared, g.sample_len());
        assert_eq!(c.n_equal, c.n_compared);
        assert_eq!(c.n_outside_tol, 0);
        assert_eq!(c.policy_name, "bf16");
        assert_eq!(c.max_bf16_ulp, 0);
        assert!(
            c.ck_rel_diff < BIT_EXACT_CK_REL,
            "{version}: {}",
            c.ck_rel_diff
        );
        assert!(c.reason.starts_with("pass: bit-exact"), "{}", c.reason);
    }
    assert_eq!(
        check(&got, capture("v2", "prefill12", "L0.attn_in")).n_compared,
        12
    );
    assert_eq!(
        check(&got, capture("v3", "prefill12", "L0.attn_in")).n_compared,
        768
    );
}

/// A 1e-3 defect on a **sampled** element of a bf16 capture (v2 samples flat index 67).
/// The element is seen (max_abs_err at [0,1,3], one sample unequal) and the bit-exact report
/// fails, but the Atlas verdict passes: `bf16_tol` here is 2·2^-8·1.82 ≈ 0.0142, far above 1e-3,
/// and the bf16 checksum bar (2^-7 of Σ|x|(i+1) ≈ 2000) is blind to a 0.068 shift.
#[test]
fn planted_defect_on_a_sampled_element() {
    let g = capture("v2", "prefill12", "L0.attn_in");
    assert_eq!(g.stride, 67);
    let mut got = attn_in_full();
    got[67] += PLANTED_DEFECT;
    let c = check(&got, g);
    assert!(!c.bit_exact, "the bit-exact report sees the defect");
    assert_eq!(c.n_equal, c.n_compared - 1);
    assert!(
        (c.max_abs_err - f64::from(PLANTED_DEFECT)).abs() < F32_ROUNDING_SLACK,
        "{}",
        c.max_abs_err
    );
    assert_eq!(c.max_abs_err_index, Some(67));
    assert_eq!(c.max_abs_err_multi_index, vec![0, 1, 3]);
    assert_eq!(c.tol, bf16_tol(&g.samples_f64()));
    assert!(c.tol > ATLAS_BAR_OVER_DEFECT * f64::from(PLANTED_DEFECT));
    assert!(
        c.pass,
        "the Atlas bf16 bar is too loose to fail a 1e-3 defect: {}",
        c.reason
    );
    assert!(c.worst_ratio < DEFECT_RATIO_UNDER_ATLAS);
}

/// The same defect on an element the golden does **not** sample (flat 68): no sampled value
/// moves, so only the checksum can see it. The Atlas checksum bar cannot (0.069 against a bound
/// near 2000), but the bit-exact report can (relative diff ~3e-7 > 1e-12).
#[test]
fn planted_defect_on_an_unsampled_element() {
    let g = capture("v2", "prefill12", "L0.attn_in");
    let mut got = attn_in_full();
    got[68] += PLANTED_DEFECT;
    let c = check(&got, g);
    assert_eq!(c.n_equal, c.n_compared);
    assert_eq!(c.max_abs_err, 0.0);
    assert!(c.ck_ok && c.pass, "{}", c.reason);
    assert!(
        !c.bit_exact,
        "the checksum moved by ~0.069, so the bit-exact report fails"
    );
    assert!(
        c.ck_rel_diff > ONE_ELEMENT_CK_REL_FLOOR && c.ck_rel_diff < BF16_CK_REL,
        "{}",
        c.ck_rel_diff
    );
    // Against the v3 golden (stride 1) the same element is compared directly.
    let c = check(&got, capture("v3", "prefill12", "L0.attn_in"));
    assert_eq!(c.max_abs_err_index, Some(68));
    assert!(!c.bit_exact);
}

/// A defect the size of twice the bar: caught by the element bar where sampled, still invisible
/// to the Atlas verdict where not sampled (the weak checksum bar of spec §17.1).
#[test]
fn defect_above_the_bar_fails_only_where_sampled() {
    let g = capture("v2", "prefill12", "L0.attn_in");
    let tol = bf16_tol(&g.samples_f64()) as f32;
    let mut sampled = attn_in_full();
    sampled[67] += 2.0 * tol;
    let c = check(&sampled, g);
    assert!(!c.pass);
    assert_eq!(c.n_outside_tol, 1);
    assert!(
        (c.worst_ratio - 2.0).abs() < TWICE_TOL_RATIO_SLACK,
        "{}",
        c.worst_ratio
    );
    assert!(
        c.reason.contains("1 of 12 compared values outside tol"),
        "{}",
        c.reason
    );
    let mut unsampled = attn_in_full();
    unsampled[68] += 2.0 * tol;
    let c = check(&unsampled, g);
    assert!(c.pass && !c.bit_exact, "{}", c.reason);
}

/// In an f32 chain (bar 1e-4) the planted 1e-3 defect on a sampled element fails the element bar.
#[test]
fn planted_defect_in_an_f32_capture_is_caught() {
    let g = capture("v3", "prefill12", "L0.attn_comb");
    assert_eq!(g.stride, 17);
    let full = capture("v3-full", "prefill12", "L0.attn_comb")
        .full_f32()
        .expect("v3-full is full");
    let c = check(&full, g);
    assert!(c.pass && c.bit_exact, "{}", c.reason);
    let mut got = full.clone();
    got[17 * 3] += PLANTED_DEFECT;
    let c = check(&got, g);
    assert!(!c.pass);
    assert_eq!((c.policy_name, c.tol, c.n_outside_tol), ("f32", F32_TOL, 1));
    assert_eq!(c.max_abs_err_index, Some(51));
    assert!(c.reason.starts_with("fail:"), "{}", c.reason);
}

#[test]
fn nan_in_an_unsampled_element_fails() {
    let g = capture("v2", "prefill12", "L0.attn_in");
    let mut got = attn_in_full();
    got[68] = f32::NAN;
    got[69] = f32::INFINITY;
    let c = check(&got, g);
    assert!(!c.pass);
    assert_eq!((c.nan_count, c.inf_count), (1, 1));
    assert!(!c.ck_ok);
    assert!(c.reason.contains("1 NaN and 1 inf"), "{}", c.reason);
}

#[test]
fn int_capture_mismatch_is_caught() {
    let g = capture("v3", "prefill12", "L0.sa_topk_idxs");
    assert!(g.stride > 1 && g.is_int());
    let full = capture("v3-full", "prefill12", "L0.sa_topk_idxs")
        .full_i64()
        .expect("full ints");
    let policy = policy_for_capture(&g.name, true);
    let c = compare_with_golden(Values::I64(&full), &g.shape, g, &policy);
    assert!(c.pass && c.bit_exact, "{}", c.reason);
    assert_eq!(
        c.index_agreement, None,
        "rows are not whole at stride {}",
        g.stride
    );
    let mut got = full.clone();
    got[0] += 1;
    let c = compare_with_golden(Values::I64(&got), &g.shape, g, &policy);
    assert!(!c.pass && !c.bit_exact);
    assert_eq!(
        (c.n_outside_tol, c.max_abs_err, c.max_abs_err_index),
        (1, 1.0, Some(0))
    );
}

/// `moe_indices` is stored whole (24 ints); a swapped pair within a row is an exact mismatch but
/// the row sets agree, while a different expert lowers the Jaccard index of its row.
#[test]
fn index_rows_report_set_agreement() {
    let g = capture("v3", "prefill12", "L0.moe_indices");
    let full = g.full_i64().expect("stride 1");
    assert_eq!(&full[..4], &[3, 0, 0, 2], "spec §20 rows [3,0], [0,2]");
    let mut swapped = full.clone();
    swapped.swap(0, 1);
    let c = compare_with_golden(Values::I64(&swapped), &g.shape, g, &POLICY_INDEX);
    assert!(!c.pass);
    let a = c.index_agreement.clone().expect("whole rows");
    assert_eq!((a.rows, a.rows_differing, a.min_jaccard), (12, 0, 1.0));
    let mut wrong = full.clone();
    wrong[0] = 1; // row 0 becomes {1, 0} instead of {3, 0}
    let c = compare_with_golden(Values::I64(&wrong), &g.shape, g, &POLICY_INDEX);
    let a = c.index_agreement.clone().expect("whole rows");
    assert_eq!((a.rows_differing, a.min_jaccard), (1, 1.0 / 3.0));
    assert!((a.mean_jaccard - (11.0 + 1.0 / 3.0) / 12.0).abs() < EXACT_F64_SLACK);
    assert!(
        c.reason.contains("1 of 12 index rows differ"),
        "{}",
        c.reason
    );
}

#[test]
fn wrong_length_fails_gracefully() {
    let g = capture("v2", "prefill12", "L0.attn_in");
    let got = attn_in_full();
    let c = compare_with_golden(Values::F32(&got[..767]), &[1, 767], g, &POLICY_BF16);
    assert!(!c.pass && !c.len_ok && !c.shape_ok);
    assert_eq!((c.got_len, c.expected_len, c.n_compared), (767, 768, 0));
    assert!(c.reason.contains("length 767"), "{}", c.reason);
    // A shape that does not describe the values is caught before anything is indexed.
    let c = compare_with_golden(Values::F32(&got), &[1, 12, 65], g, &POLICY_BF16);
    assert!(!c.pass && !c.len_ok);
    assert!(c.reason.contains("its shape"), "{}", c.reason);
    // Same length, different shape: compared, but fails.
    let c = compare_with_golden(Values::F32(&got), &[12, 64], g, &POLICY_BF16);
    assert!(c.len_ok && !c.shape_ok && !c.pass && c.n_equal == c.n_compared);
    // Empty input.
    let c = compare_with_golden(Values::F32(&[]), &[0], g, &POLICY_BF16);
    assert!(!c.pass && !c.len_ok);
}

/// GPU-vs-oracle style: two full tensors. A "GPU" that is off by a few f32 ulps passes the bf16
/// bar, is not bit-exact, and reports small ulp/NMSE figures; a NaN fails it.
#[test]
fn compare_full_gpu_vs_oracle() {
    let oracle = capture("v3-full", "prefill12", "logits_full")
        .full_f32()
        .expect("full");
    let c = compare_full(
        Values::F32(&oracle),
        Values::F32(&oracle),
        &[1, 12, 64],
        &POLICY_BF16,
    );
    assert!(
        c.pass && c.bit_exact && c.ck_rel_diff == 0.0,
        "{}",
        c.reason
    );
    assert_eq!(c.n_compared, 768);
    let gpu: Vec<f32> = oracle
        .iter()
        .map(|&x| x * (1.0 + 4.0 * f32::EPSILON))
        .collect();
    let c = compare_full(
        Values::F32(&gpu),
        Values::F32(&oracle),
        &[1, 12, 64],
        &POLICY_BF16,
    );
    assert!(c.pass && !c.bit_exact, "{}", c.reason);
    assert!(c.max_bf16_ulp <= 1, "{}", c.max_bf16_ulp);
    assert!(c.nmse > 0.0 && c.nmse < FOUR_EPS_NMSE_CEILING, "{}", c.nmse);
    assert!(c.max_rel_err < FOUR_EPS_REL_CEILING, "{}", c.max_rel_err);
    let mut broken = oracle.clone();
    broken[100] = f32::NAN;
    let c = compare_full(
        Values::F32(&broken),
        Values::F32(&oracle),
        &[1, 12, 64],
        &POLICY_BF16,
    );
    assert!(!c.pass && c.nan_count == 1);
    assert_eq!(c.max_abs_err_multi_index, vec![0, 1, 36]);
    // The f32 policy is stricter than the bf16 one for the same tensors.
    let shifted: Vec<f32> = oracle.iter().map(|&x| x + BETWEEN_THE_BARS).collect();
    assert!(
        compare_full(
            Values::F32(&shifted),
            Values::F32(&oracle),
            &[1, 12, 64],
            &POLICY_BF16
        )
        .pass
    );
    assert!(
        !compare_full(
            Values::F32(&shifted),
            Values::F32(&oracle),
            &[1, 12, 64],
            &POLICY_F32
        )
        .pass
    );
    // Full integer tensors: row-set agreement is computed (whole rows).
    let idx = capture("v3-full", "prefill12", "L2.sa_topk_idxs")
        .full_i64()
        .expect("full");
    let c = compare_full(
        Values::I64(&idx),
        Values::I64(&idx),
        &[1, 12, 14],
        &POLICY_INDEX,
    );
    assert!(
        c.pass && c.index_agreement.map(|a| a.rows) == Some(12),
        "{}",
        c.reason
    );
    let c = compare_full(
        Values::I64(&idx),
        Values::I64(&idx[..10]),
        &[1, 12, 14],
        &POLICY_EXACT,
    );
    assert!(
        !c.pass,
        "a reference that does not fit the shape fails: {}",
        c.reason
    );
}

/// Under the strict policy (bf16 bit-exact, spec §17.1) the same planted 1e-3 defect fails,
/// while the unperturbed tensor passes.
#[test]
fn planted_defect_fails_the_strict_bf16_policy() {
    use golden_lens::golden::policy::strict_policy_for_capture;
    let g = capture("v3", "prefill12", "L0.attn_in");
    let strict = strict_policy_for_capture("L0.attn_in", false);
    let clean = attn_in_full();
    let ok = compare_with_golden(Values::F32(&clean), &g.shape, g, &strict);
    assert!(ok.pass, "unperturbed: {}", ok.reason);
    let mut bad = clean.clone();
    bad[g.stride] += PLANTED_DEFECT;
    let caught = compare_with_golden(Values::F32(&bad), &g.shape, g, &strict);
    assert!(!caught.pass, "the strict bar must fail a 1e-3 defect");
    assert_eq!(caught.max_abs_err_index, Some(g.stride));
}
