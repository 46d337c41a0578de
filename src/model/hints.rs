//! Near-tie hints. Two correct implementations compute a routing score in different orders and
//! from inputs that may differ by a bf16 rounding flip, so their scores disagree by up to the
//! gate's f32-chain bar ([`crate::golden::policy::f32_chain_tol`]). Where two experts' scores
//! are closer than that, either choice is right, and the two routings split: after that, every
//! capture downstream (routing weights, the expert mix, the residual stream) compares different
//! computations, and the run fails for no kernel's fault.
//!
//! With `--reference-ties` against a reference, the stepper hands the test backend the
//! reference's selections of the step about to run. A backend that selects on the host with the
//! torch-CPU rule keeps its own selection unless the hinted one is a near tie *under its own
//! scores* (every pick it would give up scores within the bar of the hinted pick replacing it);
//! then it takes the hinted row and reports it through a `neartie.<capture>` audit capture, so
//! the run prints every row resolved the reference's way. A hint that its own scores rank
//! further apart is ignored: that disagreement is real and fails as before.

use std::collections::HashMap;

/// Prefix of the audit captures listing, per selection, the rows a backend resolved the
/// reference's way (never compared, never shown as captures).
pub const NEAR_TIE_PREFIX: &str = "neartie.";

/// The reference's selections for one step, and how close a near tie is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SelectionHints {
    /// Per layer: the reference's MoE routing `[s, k]` (expert ids, the reference's order).
    pub moe_indices: HashMap<usize, Vec<i64>>,
    /// The largest margin, in the backend's own biased gate scores, by which it may prefer its
    /// pick to the hinted one and still take the hint: the gate's f32-chain bar.
    pub moe_score_tol: f32,
}

/// A row of `k` distinct ids in `0..width`.
fn valid_row(row: &[i64], width: usize) -> bool {
    row.iter()
        .enumerate()
        .all(|(i, &x)| x >= 0 && (x as u64) < width as u64 && !row[..i].contains(&x))
}

/// Row by row, replace `own` (`[rows, k]`, the backend's picks) with `hint` (the same shape)
/// where the hint is a near tie under `scores` (`[rows, width]`, the backend's own biased
/// scores): pairing the picks only `own` made with those only `hint` made, each sorted by
/// score (best first), every pair's margin `score(own pick) − score(hinted pick)` is at most
/// `tol`. Rows whose hint is not `k` distinct ids in range, or whose scores at the swapped ids
/// are not finite, are left alone. Returns the adopted rows. Mismatched lengths adopt nothing.
pub fn adopt_near_ties(
    own: &mut [i64],
    hint: &[i64],
    scores: &[f32],
    width: usize,
    k: usize,
    tol: f32,
) -> Vec<usize> {
    let mut adopted = Vec::new();
    if k == 0 || width == 0 || own.len() != hint.len() || own.len() % k != 0 {
        return adopted;
    }
    let rows = own.len() / k;
    if scores.len() != rows.saturating_mul(width) || tol.is_nan() || tol < 0.0 {
        return adopted;
    }
    for r in 0..rows {
        let (o, h) = (&own[r * k..(r + 1) * k], &hint[r * k..(r + 1) * k]);
        if o == h || !valid_row(o, width) || !valid_row(h, width) {
            continue;
        }
        let row_scores = &scores[r * width..(r + 1) * width];
        let score = |i: i64| row_scores[i as usize];
        let by_score = |mut v: Vec<i64>| {
            v.sort_by(|&x, &y| score(y).total_cmp(&score(x)));
            v
        };
        let own_only = by_score(o.iter().copied().filter(|x| !h.contains(x)).collect());
        let hint_only = by_score(h.iter().copied().filter(|x| !o.contains(x)).collect());
        let near = own_only.iter().zip(&hint_only).all(|(&mine, &theirs)| {
            let (a, b) = (score(mine), score(theirs));
            a.is_finite() && b.is_finite() && a - b <= tol
        });
        if near {
            own[r * k..(r + 1) * k].copy_from_slice(h);
            adopted.push(r);
        }
    }
    adopted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bar of the tests: a score margin of this much or less is a near tie.
    const TOL: f32 = 1e-3;

    #[test]
    fn a_near_tie_takes_the_hint_and_a_real_gap_does_not() {
        // Two rows of 4 experts, k = 2.
        let scores = [
            0.9, 0.5, 0.4995, 0.1, // row 0: experts 1 and 2 within 5e-4
            0.9, 0.5, 0.45, 0.1, // row 1: 0.05 apart
        ];
        let mut own = vec![0, 1, 0, 1];
        let hint = [0, 2, 2, 0];
        let rows = adopt_near_ties(&mut own, &hint, &scores, 4, 2, TOL);
        assert_eq!(rows, vec![0]);
        assert_eq!(
            own,
            vec![0, 2, 0, 1],
            "row 0 takes the hint's ids and order"
        );
        // A reordering alone is adopted too (no pick given up: nothing to bound).
        let mut own = vec![0, 1, 0, 1];
        let rows = adopt_near_ties(&mut own, &[1, 0, 0, 1], &scores, 4, 2, TOL);
        assert_eq!((rows, own), (vec![0], vec![1, 0, 0, 1]));
    }

    #[test]
    fn every_swapped_pair_must_be_near() {
        // k = 3; own {0,1,2}, hint {0,3,4}: pairs (1,3) near, (2,4) far.
        let scores = [0.9, 0.6, 0.5, 0.5995, 0.2];
        let mut own = vec![0, 1, 2];
        assert!(adopt_near_ties(&mut own, &[0, 3, 4], &scores, 5, 3, TOL).is_empty());
        assert_eq!(own, vec![0, 1, 2]);
    }

    #[test]
    fn hostile_hints_and_scores_are_left_alone() {
        let scores = [0.5, 0.5, f32::NAN, 0.1];
        let mut own = vec![0, 1];
        for bad in [[0, 0], [0, 4], [-1, 0], [0, 2]] {
            assert!(
                adopt_near_ties(&mut own, &bad, &scores, 4, 2, TOL).is_empty(),
                "{bad:?}"
            );
            assert_eq!(own, vec![0, 1]);
        }
        // Shapes that do not agree adopt nothing.
        assert!(adopt_near_ties(&mut own, &[1, 0, 2], &scores, 4, 2, TOL).is_empty());
        assert!(adopt_near_ties(&mut own, &[1, 0], &scores[..3], 4, 2, TOL).is_empty());
        assert!(adopt_near_ties(&mut own, &[1, 0], &scores, 4, 2, f32::NAN).is_empty());
        assert!(adopt_near_ties(&mut own, &[1, 0], &scores, 4, 0, TOL).is_empty());
    }
}
