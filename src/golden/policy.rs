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

/// The Atlas model's reduction lengths behind every f32 capture its `F32_TOL` was set on: the hc
/// mixes (`*_pre/post/comb`, `pre_mix_*`) reduce the whole stream, hc_mult 4 × dim 64 = 256
/// terms; the routing weights (`moe_weights`) come from the gate over dim 64.
pub const ATLAS_HC_MIX_TERMS: usize = 256;
/// See [`ATLAS_HC_MIX_TERMS`]: the gate's reduction over the Atlas model's dim 64.
pub const ATLAS_GATE_TERMS: usize = 64;

/// The f32-chain bar at a reduction of `terms` terms whose Atlas counterpart had `atlas_terms`:
/// `F32_TOL · sqrt(max(terms, atlas_terms) / atlas_terms)`.
///
/// Why: an f32 chain's value is a sigmoid/softplus/Sinkhorn of one dot product over its
/// reduction (hc mixes: the RMS-normalised stream against `hc_*_fn`; routing: `ffn_in` against
/// the gate). Two correct implementations disagree on it through per-term errors: each term's
/// product and summation rounding, and above all the rounding flip each bf16 input element may
/// carry in from the stream (an element computed in f32 lands on the other side of a bf16
/// rounding boundary, one bf16 ulp away: the granularity the bf16 bars allow). Those per-term
/// errors have random signs, so their sum grows as the square root of the number of terms. The
/// Atlas bar is the allowance for the Atlas reduction length; this keeps that allowance per term
/// at a longer one (real dims, hc 4 × dim 5120 = 20480 terms: 8.94 × `F32_TOL`). It never goes
/// below `F32_TOL`, so every Atlas-size verdict is unchanged.
pub fn f32_chain_tol(terms: usize, atlas_terms: usize) -> f64 {
    let atlas = atlas_terms.max(1);
    F32_TOL * (terms.max(atlas) as f64 / atlas as f64).sqrt()
}

/// The model dims the f32 bars scale with (plain numbers, so `golden` needs no model config):
/// the hc stream length `hc_mult · dim` and the gate's `dim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyDims {
    /// Terms of the hc mixes' reduction, `hc_mult · dim`.
    pub hc_mix_terms: usize,
    /// Terms of the routing gate's reduction, `dim`.
    pub gate_terms: usize,
}

impl PolicyDims {
    /// The Atlas model's dims: the bars exactly as Atlas states them.
    pub const ATLAS: PolicyDims = PolicyDims {
        hc_mix_terms: ATLAS_HC_MIX_TERMS,
        gate_terms: ATLAS_GATE_TERMS,
    };

    /// Dims of a model with `hc_mult` stream copies of width `dim`.
    pub fn new(hc_mult: usize, dim: usize) -> PolicyDims {
        PolicyDims {
            hc_mix_terms: hc_mult.saturating_mul(dim),
            gate_terms: dim,
        }
    }

    /// `(terms, atlas_terms)` of the reduction behind the f32 capture with base name `base`
    /// (None: not an f32 chain).
    pub fn f32_reduction(&self, base: &str) -> Option<(usize, usize)> {
        match base {
            "pre_mix_in" | "pre_mix_out" | "attn_pre" | "attn_post" | "attn_comb" | "ffn_pre"
            | "ffn_post" | "ffn_comb" => Some((self.hc_mix_terms, ATLAS_HC_MIX_TERMS)),
            "moe_weights" => Some((self.gate_terms, ATLAS_GATE_TERMS)),
            _ => None,
        }
    }

    /// `policy` with its f32-chain bars (element and checksum) at these dims: unchanged for
    /// every other policy, and at the Atlas dims.
    pub fn scale(&self, policy: Policy, name: &str) -> Policy {
        if policy.element_tol != ElementTol::Abs(F32_TOL) {
            return policy;
        }
        let Some((terms, atlas)) = self.f32_reduction(&super::names::parse_capture_name(name).base)
        else {
            return policy;
        };
        let tol = f32_chain_tol(terms, atlas);
        Policy {
            element_tol: ElementTol::Abs(tol),
            ck_rel: policy.ck_rel / F32_TOL * tol,
            ..policy
        }
    }
}

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

/// bf16 ulps a backend's bf16 capture may be off by, in the binade of the reference tensor's
/// largest magnitude (see [`BACKEND_POLICY_BF16`]).
pub const BACKEND_BF16_ULPS: u32 = 2;

/// `ulps` bf16 ulps in the binade of the largest finite |value| (`2^(floor(log2 max) − 7)` each),
/// plus `BF16_TOL_FLOOR`. Unlike [`bf16_tol`]'s `2·2^-8·max` (which is between one and two ulps,
/// one ulp when max is a power of two), this is exactly `ulps` representable steps for every
/// element in the top binade.
pub fn bf16_ulps_of_max_tol(values: &[f64], ulps: u32) -> f64 {
    let max_abs = values
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let ulp = if max_abs > 0.0 {
        2f64.powi(max_abs.log2().floor() as i32 - 7)
    } else {
        0.0
    };
    f64::from(ulps) * ulp + BF16_TOL_FLOOR
}

/// How the element tolerance of a policy is obtained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ElementTol {
    /// A fixed absolute bar.
    Abs(f64),
    /// `bf16_tol` of the golden (reference) values that are compared.
    Bf16Sampled,
    /// [`bf16_ulps_of_max_tol`] of the reference values that are compared.
    Bf16UlpsOfMax(u32),
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
            ElementTol::Bf16UlpsOfMax(ulps) => bf16_ulps_of_max_tol(golden_values, ulps),
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
/// bf16 captures: two bf16 ulps in the binade of the largest reference magnitude over the whole
/// tensor ([`BACKEND_BF16_ULPS`], exactly two representable steps there, where the Atlas formula
/// `2·2^-8·max` can be as little as one) and `BF16_CK_REL` on the checksum. GEMMs on the GPU use
/// exact products and a pair accumulator, so they match the oracle's f64 sums; what remains comes
/// from WGSL `exp`/`sqrt` (not correctly rounded), which move f32 values by an ulp and flip a
/// bf16 rounding now and then. Two roundings inside one step (a stream mix rounded to bf16, then
/// the next mix of it) can each flip, so an element of the top binade may legitimately land two
/// steps away (real dims, `ffn_in` at 3.25: 3.28125).
pub const BACKEND_POLICY_BF16: Policy = Policy {
    name: "gpu-bf16",
    element_tol: ElementTol::Bf16UlpsOfMax(BACKEND_BF16_ULPS),
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

/// The policy of the table for a capture compared `against` something, at the Atlas dims.
pub fn policy_against(against: Against, name: &str, is_int: bool) -> Policy {
    policy_against_at(against, name, is_int, PolicyDims::ATLAS)
}

/// The policy of the table for a capture compared `against` something, with the f32-chain bars
/// at the model's `dims` ([`f32_chain_tol`]); every other bar does not depend on the dims.
pub fn policy_against_at(against: Against, name: &str, is_int: bool, dims: PolicyDims) -> Policy {
    let policy = match against {
        Against::Reference => policy_for_capture(name, is_int),
        Against::ReferenceStrict => strict_policy_for_capture(name, is_int),
        Against::Backend => backend_policy_for_capture(name, is_int),
    };
    dims.scale(policy, name)
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
    fn the_backend_bf16_bar_is_two_representable_steps_in_the_top_binade() {
        let p = policy_against(Against::Backend, "L1.ffn_in", false);
        // max 3.95 is in [2, 4), where one bf16 step is 2^-6: the bar is two steps, and the
        // Atlas formula gives less than that (1.975 steps).
        let tol = p.element_tol_for(&[3.95, -1.0]);
        assert_eq!(tol, 2.0 / 64.0 + BF16_TOL_FLOOR);
        assert!(bf16_tol(&[3.95]) < 2.0 / 64.0);
        // 3.25 -> 3.28125 is two steps: within; three steps are not.
        assert!(3.28125f64 - 3.25 <= tol, "two steps are within");
        assert!(3.0 / 64.0 > tol, "three steps are not");
        // A power of two as the max: still two steps (the Atlas formula gives one).
        assert_eq!(p.element_tol_for(&[2.0]), 2.0 / 64.0 + BF16_TOL_FLOOR);
        assert_eq!(p.element_tol_for(&[]), BF16_TOL_FLOOR);
        assert_eq!(
            p.element_tol_for(&[f64::NAN, 0.5]),
            2.0 / 256.0 + BF16_TOL_FLOOR
        );
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
    fn f32_chain_bars_grow_with_the_square_root_of_the_reduction() {
        // The Atlas dims keep the Atlas bar, and anything shorter never goes under it.
        assert_eq!(
            f32_chain_tol(ATLAS_HC_MIX_TERMS, ATLAS_HC_MIX_TERMS),
            F32_TOL
        );
        assert_eq!(f32_chain_tol(16, ATLAS_HC_MIX_TERMS), F32_TOL);
        // 4x the terms, 2x the bar; real dims (hc 4 x dim 5120) 8.94x.
        assert!((f32_chain_tol(1024, ATLAS_HC_MIX_TERMS) - 2.0 * F32_TOL).abs() < 1e-18);
        let real = PolicyDims::new(4, 5120);
        let p = policy_against_at(Against::Backend, "L0.ffn_post", false, real);
        let want = F32_TOL * 80f64.sqrt();
        assert_eq!(p.name, "gpu-f32");
        assert!((p.element_tol_for(&[]) - want).abs() < 1e-15, "{p:?}");
        assert!((p.ck_rel - want).abs() < 1e-15, "{p:?}");
        // The gate's reduction is dim, against the Atlas dim 64: also sqrt(80).
        let g = policy_against_at(Against::Reference, "L3.moe_weights", false, real);
        assert!((g.element_tol_for(&[]) - want).abs() < 1e-15, "{g:?}");
        // pre_mix_in is the previous block's pre_mix_out: the same bar.
        assert_eq!(
            policy_against_at(Against::Backend, "L2.pre_mix_in", false, real),
            policy_against_at(Against::Backend, "L1.pre_mix_out", false, real)
        );
        // bf16, integer and logits bars do not depend on the dims.
        for (name, int) in [
            ("L0.attn_in", false),
            ("L0.sa_topk_idxs", true),
            ("logits_full", false),
            ("shared.L2.candidates", true),
        ] {
            for against in [
                Against::Reference,
                Against::ReferenceStrict,
                Against::Backend,
            ] {
                assert_eq!(
                    policy_against_at(against, name, int, real),
                    policy_against(against, name, int),
                    "{name}"
                );
            }
        }
        // At the Atlas dims every row is the table's own.
        for against in [
            Against::Reference,
            Against::ReferenceStrict,
            Against::Backend,
        ] {
            let p = policy_against(against, "L0.ffn_post", false);
            assert_eq!(p.element_tol, ElementTol::Abs(F32_TOL));
            assert_eq!(p.ck_rel, F32_TOL);
        }
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
