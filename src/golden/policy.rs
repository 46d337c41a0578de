//! Tolerance policies as named data (spec §17.1). These are the Atlas bars: what a golden
//! comparison must meet to pass. The comparator also reports a stricter bit-exact verdict,
//! which is information, not a pass criterion. The backend-against-backend policies (a GPU or an
//! imported engine against the CPU oracle) live here too, with their reasons: [`policy_against`]
//! is the one table every verdict of a run comes from.

use super::names::{capture_kind, CaptureKind};

/// Element and checksum bar for integer captures (indices, masks, hashes, ids): they are
/// computed exactly by the reference, so any difference is a real disagreement.
pub const EXACT: f64 = 1e-12;

/// Relative checksum bar for bf16 captures (2^-7, Atlas `BF16_CK_REL`): about two bf16 ulps of
/// the checksum's own scale. Weak by design: one element off by a few units can still pass.
pub const BF16_CK_REL: f64 = 0.0078125;

/// Element and checksum bar for f32 chains (hc mixes, `pre_mix_*`, `moe_weights`; Atlas
/// `F32_TOL`): those run through Sinkhorn/softplus in f32, where summation order moves the last
/// bits, so a fixed 1e-4 absolute bar is used for both.
pub const F32_TOL: f64 = 1e-4;

/// Factor of `bf16_tol`: two bf16 ulps (2 · 2^-8) relative to the largest sampled magnitude.
pub const BF16_TOL_ULPS_FACTOR: f64 = 2.0 / 256.0;

/// Absolute floor of `bf16_tol`, so an all-zero golden sample still has a non-zero bar.
pub const BF16_TOL_FLOOR: f64 = 1e-6;

/// Relative checksum bar of the comparator's separate bit-exact verdict: checksums that agree
/// this closely differ only by summation order (torch pairwise vs our sequential f64 sum).
pub const BIT_EXACT_CK_REL: f64 = 1e-12;

/// The Atlas element tolerance for a bf16 capture: about two bf16 ulps at the magnitude of the
/// largest **sampled** golden value, `2·2^-8·max|g| + 1e-6`. It is loose for small elements.
pub fn bf16_tol(golden_samples: &[f64]) -> f64 {
    let max_abs = golden_samples
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    BF16_TOL_ULPS_FACTOR * max_abs + BF16_TOL_FLOOR
}

/// How the element tolerance of a policy is obtained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ElementTol {
    /// A fixed absolute bar.
    Abs(f64),
    /// `bf16_tol` of the golden (reference) values that are compared.
    Bf16Sampled,
}

/// A named tolerance policy: the element bar, the relative checksum bar, and whether values
/// must be equal (integer captures).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Short name shown in reports (`exact`, `index`, `bf16`, `f32`).
    pub name: &'static str,
    /// The element bar rule.
    pub element_tol: ElementTol,
    /// Relative checksum bar: `|ck_got − ck| ≤ ck_rel · max(Σ|got_i|(i+1), 1)`.
    pub ck_rel: f64,
    /// Integer capture: compared for equality.
    pub exact: bool,
    /// Rows (last dim) are index sets: also report per-row set agreement (Jaccard).
    pub row_sets: bool,
}

impl Policy {
    /// The element tolerance this policy applies to the given golden (reference) values.
    pub fn element_tol_for(&self, golden_values: &[f64]) -> f64 {
        match self.element_tol {
            ElementTol::Abs(tol) => tol,
            ElementTol::Bf16Sampled => bf16_tol(golden_values),
        }
    }
}

/// Integer captures other than index sets (hashes, ids, masks): equality; the checksum of ints
/// is exact in f64 up to summation order, so `EXACT` relative.
pub const POLICY_EXACT: Policy = Policy {
    name: "exact",
    element_tol: ElementTol::Abs(EXACT),
    ck_rel: EXACT,
    exact: true,
    row_sets: false,
};

/// Index captures (`sa_topk_idxs`, `shared.*.topk_idxs`, `moe_indices`): equality as the pass
/// criterion, plus per-row set agreement so a reordering is told apart from a wrong selection.
pub const POLICY_INDEX: Policy = Policy {
    name: "index",
    element_tol: ElementTol::Abs(EXACT),
    ck_rel: EXACT,
    exact: true,
    row_sets: true,
};

/// bf16 captures: `bf16_tol` on the sampled elements and `BF16_CK_REL` on the checksum. Atlas
/// also uses this bar for `logits_full` even though that capture is f32 (its input is bf16 and
/// its magnitude is that of the bf16 stream).
pub const POLICY_BF16: Policy = Policy {
    name: "bf16",
    element_tol: ElementTol::Bf16Sampled,
    ck_rel: BF16_CK_REL,
    exact: false,
    row_sets: false,
};

/// f32 chains (hc mixes, `pre_mix_*`, `moe_weights`): `F32_TOL` for elements and checksum.
pub const POLICY_F32: Policy = Policy {
    name: "f32",
    element_tol: ElementTol::Abs(F32_TOL),
    ck_rel: F32_TOL,
    exact: false,
    row_sets: false,
};

/// The policy for a capture kind. `Other` (a name outside the catalogue) gets the bf16 bar;
/// use [`policy_for_capture`] to decide such a capture by its data type instead.
pub fn policy_for(kind: CaptureKind) -> Policy {
    match kind {
        CaptureKind::Bf16 | CaptureKind::Other => POLICY_BF16,
        CaptureKind::F32 => POLICY_F32,
        CaptureKind::Index => POLICY_INDEX,
        CaptureKind::Mask | CaptureKind::Hash | CaptureKind::Ids => POLICY_EXACT,
    }
}

/// The policy for a capture by name, as the Atlas tests use it: `logits_full` takes the bf16
/// bar; names outside the catalogue take `POLICY_EXACT` when their data are integers.
pub fn policy_for_capture(name: &str, is_int: bool) -> Policy {
    if name == "logits_full" {
        return POLICY_BF16;
    }
    match capture_kind(name) {
        CaptureKind::Other if is_int => POLICY_EXACT,
        kind => policy_for(kind),
    }
}

/// bf16 captures under the strict bar: every sampled element bit-equal and the checksum within
/// `BIT_EXACT_CK_REL`. The captures are bit-reproducible on CPU (spec §17.1, §19), so a team
/// oracle can hold itself to this where the Atlas bf16 bar (about two ulps of the largest
/// sample) would let a 1e-3 defect through.
pub const POLICY_BF16_BIT_EXACT: Policy = Policy {
    name: "bf16-bit-exact",
    element_tol: ElementTol::Abs(0.0),
    ck_rel: BIT_EXACT_CK_REL,
    exact: false,
    row_sets: false,
};

/// The strict policy for a capture: bf16 captures bit-exact, integers exact as always, f32
/// chains keep `F32_TOL` (their summation order is not reproducible across libraries).
pub fn strict_policy_for_capture(name: &str, is_int: bool) -> Policy {
    let atlas = policy_for_capture(name, is_int);
    if atlas.name == POLICY_BF16.name && name != "logits_full" {
        POLICY_BF16_BIT_EXACT
    } else {
        atlas
    }
}

/// A backend against another backend (the GPU, or an imported engine, against the CPU oracle),
/// bf16 captures: two bf16 ulps at the largest reference magnitude over the whole tensor and
/// `BF16_CK_REL` on the checksum. GEMMs on the GPU use exact products and a pair accumulator, so
/// they match the oracle's f64 sums; what remains comes from WGSL `exp`/`sqrt` (not correctly
/// rounded), which move f32 values by an ulp and flip a bf16 rounding now and then, and from the
/// chained propagation of such flips.
pub const BACKEND_POLICY_BF16: Policy = Policy {
    name: "gpu-bf16",
    element_tol: ElementTol::Bf16Sampled,
    ck_rel: BF16_CK_REL,
    exact: false,
    row_sets: false,
};

/// A backend against the oracle, f32 chains (hc mixes, pre-mix, routing weights): `F32_TOL`
/// absolute, as the Atlas bar, for the same transcendental noise through Sinkhorn and softplus.
pub const BACKEND_POLICY_F32: Policy = Policy {
    name: "gpu-f32",
    element_tol: ElementTol::Abs(F32_TOL),
    ck_rel: F32_TOL,
    exact: false,
    row_sets: false,
};

/// A backend against the oracle, integer captures: equality. A disagreement that only the
/// backend's own top-k tie rule explains is classified apart as a tie flip by the stepper.
pub const BACKEND_POLICY_INT: Policy = Policy {
    name: "gpu-exact",
    element_tol: ElementTol::Abs(EXACT),
    ck_rel: EXACT,
    exact: true,
    row_sets: true,
};

/// The policy for a capture of one backend against another (full tensors, every element):
/// `logits_full` takes the bf16 rule (its input is bf16, as Atlas treats it), f32 chains
/// `F32_TOL`, integers equality, everything else the bf16 rule.
pub fn backend_policy_for_capture(name: &str, is_int: bool) -> Policy {
    if name == "logits_full" {
        return BACKEND_POLICY_BF16;
    }
    match capture_kind(name) {
        CaptureKind::F32 => BACKEND_POLICY_F32,
        k if k.is_int() => BACKEND_POLICY_INT,
        CaptureKind::Other if is_int => BACKEND_POLICY_INT,
        _ => BACKEND_POLICY_BF16,
    }
}

/// What a capture is compared with: the row of the one policy table every verdict of a run
/// comes from (the CLI and the app both ask here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Against {
    /// A recorded reference (a golden, a recorded oracle run) under the Atlas bars.
    Reference,
    /// A recorded reference under the strict bars (bf16 bit-exact).
    ReferenceStrict,
    /// Another backend's full tensor (a backend against the CPU oracle).
    Backend,
}

impl Against {
    /// The reference row for a run with or without `--strict`.
    pub fn reference(strict: bool) -> Against {
        if strict {
            Against::ReferenceStrict
        } else {
            Against::Reference
        }
    }
}

/// The policy of the table for a capture compared `against` something.
pub fn policy_against(against: Against, name: &str, is_int: bool) -> Policy {
    match against {
        Against::Reference => policy_for_capture(name, is_int),
        Against::ReferenceStrict => strict_policy_for_capture(name, is_int),
        Against::Backend => backend_policy_for_capture(name, is_int),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_tol_is_two_ulps_of_the_largest_sample() {
        let tol = bf16_tol(&[0.5, -2.0, 1.0]);
        assert_eq!(tol, 2.0 * 2.0 / 256.0 + BF16_TOL_FLOOR);
        assert_eq!(bf16_tol(&[]), BF16_TOL_FLOOR);
    }

    #[test]
    fn policies_by_name() {
        assert_eq!(policy_for_capture("logits_full", false).name, "bf16");
        assert_eq!(policy_for_capture("L0.attn_comb", false).name, "f32");
        assert_eq!(policy_for_capture("L0.sa_topk_idxs", true).name, "index");
        assert_eq!(
            policy_for_capture("shared.L4.candidates", true).name,
            "exact"
        );
        assert_eq!(policy_for_capture("mystery", true).name, "exact");
        assert_eq!(policy_for_capture("mystery", false).name, "bf16");
        assert_eq!(POLICY_F32.element_tol_for(&[100.0]), F32_TOL);
    }

    #[test]
    fn backend_policies_by_name() {
        let b = |n, i| policy_against(Against::Backend, n, i).name;
        assert_eq!(b("L0.attn_in", false), "gpu-bf16");
        assert_eq!(b("L0.attn_comb", false), "gpu-f32");
        assert_eq!(b("logits_full", false), "gpu-bf16");
        assert_eq!(b("L3.sa_topk_idxs", true), "gpu-exact");
        assert_eq!(b("shared.L4.candidates", true), "gpu-exact");
        assert_eq!(b("mystery", true), "gpu-exact");
        assert_eq!(
            policy_against(Against::ReferenceStrict, "L0.attn_in", false).name,
            "bf16-bit-exact"
        );
        assert_eq!(
            policy_against(Against::Reference, "L0.attn_in", false).name,
            "bf16"
        );
    }
}
