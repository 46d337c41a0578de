//! Top-k triage: every disagreement in an index capture (`sa_topk_idxs`, `shared.*.topk_idxs`,
//! `moe_indices`, and the candidate source's block selection `shared.L*.candidates`) between a
//! test backend and the reference is classified as a *tie flip* (the reference scores at the
//! swapped positions are equal), a *near tie* (within a bound from the score dtype plus the
//! upstream error), or *real*, with the reference's margin at the k-boundary. The reference scores come from the oracle's diagnostic captures
//! (`diag.L{l}.index_score`, `diag.L{l}.gate_biased`).

use crate::golden::names::parse_capture_name;
use crate::model::{Capture, CaptureValues, ModelConfig};
use std::fmt;

/// Two bf16 ulps, relative: index scores are bf16, so scores this close may swap order under
/// one rounding difference upstream.
pub const BF16_NEAR_TIE_REL: f32 = 1.0 / 128.0;
/// Gate scores are f32 chains: a few f32 ulps of reduction-order noise.
pub const F32_NEAR_TIE_REL: f32 = 1e-5;

/// The absolute part of the routing near-tie bound: the gate's f32-chain bar at the model's
/// dim (`f32_chain_tol(dim, 64)`, the bar `moe_weights` is held to: 1e-4 at the Atlas dims,
/// 8.94e-4 at dim 5120). Two correct implementations may disagree on a gate score by that much,
/// so experts whose reference scores are closer may swap; the same bar decides which hinted
/// rows a backend takes ([`crate::model::hints`]).
pub fn routing_near_tie_abs(cfg: &ModelConfig) -> f32 {
    use crate::golden::policy::{f32_chain_tol, ATLAS_GATE_TERMS};
    f32_chain_tol(cfg.dim, ATLAS_GATE_TERMS) as f32
}

/// Class of one disagreement (ordered by severity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TopkClass {
    TieFlip,
    NearTie,
    Real,
}

impl fmt::Display for TopkClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TopkClass::TieFlip => "tie flip",
            TopkClass::NearTie => "near tie",
            TopkClass::Real => "real",
        })
    }
}

/// One row whose selected sets differ.
#[derive(Debug, Clone, PartialEq)]
pub struct RowDisagreement {
    pub row: usize,
    /// Indices only the reference selected (as stored, offset included).
    pub reference_only: Vec<i64>,
    /// Indices only the test selected.
    pub test_only: Vec<i64>,
    pub class: TopkClass,
    /// Largest reference-score gap over the swapped pairs (0 for tie flips).
    pub score_gap: f32,
    /// Reference margin at the k-boundary: k-th best score minus the (k+1)-th (None when no
    /// scores are known or the row has no (k+1)-th position).
    pub boundary_margin: Option<f32>,
}

/// Triage of one index capture.
#[derive(Debug, Clone, PartialEq)]
pub struct TopkTriage {
    pub capture: String,
    pub rows: usize,
    pub rows_differing: usize,
    pub tie_flips: usize,
    pub near_ties: usize,
    pub real: usize,
    pub details: Vec<RowDisagreement>,
    /// The latest earlier selection (index capture or candidate mask, `regime capture`) whose
    /// test and reference disagreed: a disagreement here may be its consequence (e.g. a flipped
    /// candidate mask hands this top-k different scores), not a fault of this selection.
    pub downstream_of: Option<String>,
}

/// The reference scores of each row over its positions; an index `i >= offset` names position
/// `i - offset`, smaller indices (window rows) carry no score.
#[derive(Debug, Clone, Copy)]
pub struct ScoreRows<'a> {
    pub scores: &'a [f32],
    pub width: usize,
    pub offset: i64,
    pub near_tie_rel: f32,
    /// An absolute allowance added to the relative one (routing: the gate's f32-chain bar, the
    /// disagreement two correct implementations may have on a score; 0 elsewhere).
    pub near_tie_abs: f32,
}

impl ScoreRows<'_> {
    fn score(&self, row: usize, idx: i64) -> Option<f32> {
        let p = idx - self.offset;
        if idx < self.offset || p as usize >= self.width {
            return None;
        }
        self.scores.get(row * self.width + p as usize).copied()
    }
}

fn classify(a: Option<f32>, b: Option<f32>, rel: f32, abs: f32) -> (TopkClass, f32) {
    match (a, b) {
        (Some(x), Some(y))
            if x == y || (x.is_infinite() && y.is_infinite() && x.signum() == y.signum()) =>
        {
            (TopkClass::TieFlip, 0.0)
        }
        (Some(x), Some(y)) => {
            let gap = (x - y).abs();
            if gap.is_finite() && gap <= rel * x.abs().max(y.abs()) + abs {
                (TopkClass::NearTie, gap)
            } else {
                (TopkClass::Real, gap)
            }
        }
        _ => (TopkClass::Real, f32::INFINITY),
    }
}

/// Triage `test` against `reference`, both `[rows, width]` index tensors (-1 = absent).
pub fn triage_rows(
    capture: &str,
    reference: &[i64],
    test: &[i64],
    width: usize,
    scores: Option<ScoreRows<'_>>,
) -> TopkTriage {
    let rows = reference
        .len()
        .min(test.len())
        .checked_div(width)
        .unwrap_or(0);
    let mut t = TopkTriage {
        capture: capture.to_string(),
        rows,
        rows_differing: 0,
        tie_flips: 0,
        near_ties: 0,
        real: 0,
        details: Vec::new(),
        downstream_of: None,
    };
    for r in 0..rows {
        let set = |v: &[i64]| {
            let mut s: Vec<i64> = v[r * width..(r + 1) * width]
                .iter()
                .copied()
                .filter(|&i| i >= 0)
                .collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        let (a, b) = (set(reference), set(test));
        let mut ref_only: Vec<i64> = a.iter().copied().filter(|i| !b.contains(i)).collect();
        let mut test_only: Vec<i64> = b.iter().copied().filter(|i| !a.contains(i)).collect();
        if ref_only.is_empty() && test_only.is_empty() {
            continue;
        }
        t.rows_differing += 1;
        let score = |i: i64| scores.and_then(|s| s.score(r, i));
        let by_score = |v: &mut Vec<i64>| {
            v.sort_by(|&x, &y| {
                score(y)
                    .unwrap_or(f32::NEG_INFINITY)
                    .total_cmp(&score(x).unwrap_or(f32::NEG_INFINITY))
            })
        };
        by_score(&mut ref_only);
        by_score(&mut test_only);
        let rel = scores.map_or(0.0, |s| s.near_tie_rel);
        let abs = scores.map_or(0.0, |s| s.near_tie_abs);
        let mut class = TopkClass::TieFlip;
        let mut gap = 0f32;
        let n = ref_only.len().max(test_only.len());
        for j in 0..n {
            let (c, g) = match (ref_only.get(j), test_only.get(j)) {
                (Some(&x), Some(&y)) => classify(score(x), score(y), rel, abs),
                // An unpaired pick: the other side chose a position that maps to -1; equal only if
                // this pick's own score is -inf (a masked tie filler).
                (Some(&x), None) | (None, Some(&x)) => match score(x) {
                    Some(v) if v == f32::NEG_INFINITY => (TopkClass::TieFlip, 0.0),
                    _ => (TopkClass::Real, f32::INFINITY),
                },
                (None, None) => (TopkClass::TieFlip, 0.0),
            };
            class = class.max(c);
            gap = gap.max(g);
        }
        let boundary_margin = scores.and_then(|s| {
            // k counts the reference picks that are scored positions (window rows of
            // `sa_topk_idxs` are not); equal boundary scores (also -inf ones) have margin 0.
            let k = a.iter().filter(|&&i| s.score(r, i).is_some()).count();
            let mut row: Vec<f32> = s.scores.get(r * s.width..(r + 1) * s.width)?.to_vec();
            row.sort_by(|x, y| y.total_cmp(x));
            (k >= 1 && k < row.len()).then(|| {
                if row[k - 1] == row[k] {
                    0.0
                } else {
                    row[k - 1] - row[k]
                }
            })
        });
        match class {
            TopkClass::TieFlip => t.tie_flips += 1,
            TopkClass::NearTie => t.near_ties += 1,
            TopkClass::Real => t.real += 1,
        }
        t.details.push(RowDisagreement {
            row: r,
            reference_only: ref_only,
            test_only,
            class,
            score_gap: gap,
            boundary_margin,
        });
    }
    t
}

/// Walks a regime's steps in order and triages every index capture of a test backend against
/// the reference backend's captures of the same step, tracking which index source published the
/// compressed top-k each layer reads (the shared slot).
#[derive(Debug, Default)]
pub struct TriageState {
    /// `(layer, scores [s, T], T)` of the last index source of this forward.
    last_index_scores: Option<(usize, Vec<f32>, usize)>,
    /// Selections that disagreed so far, `(regime, layer, capture)` in order (kept across
    /// forwards: persistent state carries a flip's consequences).
    flips: Vec<(String, Option<usize>, String)>,
    /// Label of the current forward (for `downstream_of`).
    regime: String,
    /// `(rows, T, block scores [rows, n_blocks])` of the candidate source in this forward.
    block_scores: Option<(usize, usize, Vec<f32>)>,
}

impl TriageState {
    /// Start a new forward.
    pub fn begin(&mut self) {
        self.last_index_scores = None;
        self.block_scores = None;
    }

    /// Triage a candidate mask `[1, rows, T]`: each row's selected blocks (a block is selected
    /// when any of its positions is) against the reference's, scored by the reference block
    /// scores (the block's best index score; the block of the last visible position forced to
    /// +inf, as the selection does). Only the candidate source's own capture is scored; a
    /// republished copy that differs is recorded as a flip for `downstream_of` but not scored.
    fn candidates(
        &mut self,
        cfg: &ModelConfig,
        start_pos: usize,
        rc: &Capture,
        test: &[Capture],
        upstream_rel_err: f32,
    ) -> Option<TopkTriage> {
        let name = parse_capture_name(&rc.name);
        let tc = test.iter().find(|c| c.name == rc.name)?;
        let (CaptureValues::I64(a), CaptureValues::I64(b)) = (&rc.values, &tc.values) else {
            return None;
        };
        let t_w = *rc.shape.last().unwrap_or(&0);
        let bs = cfg.candidate_block_size.max(1);
        let nb = t_w.div_ceil(bs);
        let rows = a.len().checked_div(t_w).unwrap_or(0);
        let is_source = name.layer.is_some() && name.layer == cfg.candidate_source_layer;
        if is_source {
            self.block_scores = match &self.last_index_scores {
                Some((l, v, w)) if Some(*l) == name.layer && *w == t_w && v.len() == rows * t_w => {
                    let r = cfg.compress_ratios.get(*l).copied().unwrap_or(1).max(1);
                    let mut out = Vec::with_capacity(rows * nb);
                    for t in 0..rows {
                        let clen = if start_pos == 0 { (t + 1) / r } else { t_w };
                        out.extend(crate::oracle::attn::candidate_block_scores(
                            &v[t * t_w..(t + 1) * t_w],
                            clen,
                            bs,
                        ));
                    }
                    Some((rows, t_w, out))
                }
                _ => None,
            };
        }
        let as_blocks = |m: &[i64]| -> Vec<i64> {
            let mut v = Vec::with_capacity(rows * nb);
            for t in 0..rows {
                for k in 0..nb {
                    let sel = (k * bs..((k + 1) * bs).min(t_w)).any(|p| m[t * t_w + p] != 0);
                    v.push(if sel { k as i64 } else { -1 });
                }
            }
            v
        };
        if a.len() != rows * t_w || b.len() != a.len() {
            return None;
        }
        let differs = a != b;
        let scored = self
            .block_scores
            .as_ref()
            .filter(|(r, w, _)| is_source && *r == rows && *w == t_w);
        let Some((_, _, scores)) = scored else {
            if differs {
                self.flips
                    .push((self.regime.clone(), name.layer, rc.name.clone()));
            }
            return None;
        };
        let mut t = triage_rows(
            &rc.name,
            &as_blocks(a),
            &as_blocks(b),
            nb,
            Some(ScoreRows {
                scores,
                width: nb,
                offset: 0,
                near_tie_rel: BF16_NEAR_TIE_REL + upstream_rel_err,
                near_tie_abs: 0.0,
            }),
        );
        t.downstream_of = self.flips.last().map(|(r, _, n)| format!("{r} {n}"));
        if differs {
            self.flips
                .push((self.regime.clone(), name.layer, rc.name.clone()));
        }
        Some(t)
    }

    /// Start a new forward named `regime` (named in `downstream_of`).
    pub fn begin_regime(&mut self, regime: &str) {
        self.begin();
        self.regime = regime.to_string();
    }

    /// Triage one step: `reference` must include the reference backend's diagnostic captures.
    /// `upstream_rel_err` widens the near-tie bound by the step input's relative error.
    pub fn step(
        &mut self,
        cfg: &ModelConfig,
        start_pos: usize,
        reference: &[Capture],
        test: &[Capture],
        upstream_rel_err: f32,
    ) -> Vec<TopkTriage> {
        for c in reference {
            if let (Some(rest), CaptureValues::F32(v)) = (c.name.strip_prefix("diag.L"), &c.values)
            {
                if let Some(l) = rest
                    .strip_suffix(".index_score")
                    .and_then(|x| x.parse::<usize>().ok())
                {
                    self.last_index_scores = Some((l, v.clone(), *c.shape.last().unwrap_or(&0)));
                }
            }
        }
        let mut out = Vec::new();
        for rc in reference.iter().filter(|c| !c.is_diagnostic()) {
            let name = parse_capture_name(&rc.name);
            if name.base == "candidates" {
                if let Some(t) = self.candidates(cfg, start_pos, rc, test, upstream_rel_err) {
                    out.push(t);
                }
                continue;
            }
            let index_like = matches!(
                name.base.as_str(),
                "sa_topk_idxs" | "topk_idxs" | "moe_indices"
            );
            if !index_like {
                continue;
            }
            let Some(tc) = test.iter().find(|c| c.name == rc.name) else {
                continue;
            };
            let (CaptureValues::I64(a), CaptureValues::I64(b)) = (&rc.values, &tc.values) else {
                continue;
            };
            let width = *rc.shape.last().unwrap_or(&0);
            let s_tokens = if rc.shape.len() >= 2 {
                rc.shape[rc.shape.len() - 2]
            } else {
                1
            };
            let gate;
            let scores = if name.base == "moe_indices" {
                gate = reference.iter().find(|c| {
                    c.name == format!("diag.L{}.gate_biased", name.layer.unwrap_or(usize::MAX))
                });
                match gate.map(|g| &g.values) {
                    Some(CaptureValues::F32(v)) => Some(ScoreRows {
                        scores: v,
                        width: cfg.n_routed_experts,
                        offset: 0,
                        near_tie_rel: F32_NEAR_TIE_REL + upstream_rel_err,
                        near_tie_abs: routing_near_tie_abs(cfg),
                    }),
                    _ => None,
                }
            } else {
                let offset = if start_pos == 0 {
                    s_tokens
                } else {
                    cfg.window_size
                } as i64;
                self.last_index_scores.as_ref().map(|(_, v, w)| ScoreRows {
                    scores: v,
                    width: *w,
                    offset,
                    near_tie_rel: BF16_NEAR_TIE_REL + upstream_rel_err,
                    near_tie_abs: 0.0,
                })
            };
            let mut t = triage_rows(&rc.name, a, b, width, scores);
            // The latest disagreement of an earlier selection; a layer's shared copy of its own
            // top-k (`shared.L{l}.topk_idxs`) is the same selection, not a consequence.
            t.downstream_of = self
                .flips
                .iter()
                .rev()
                .find(|(r, l, n)| {
                    let own_copy = name.shared
                        && name.base == "topk_idxs"
                        && *r == self.regime
                        && *l == name.layer
                        && n.ends_with(".sa_topk_idxs");
                    !own_copy
                })
                .map(|(r, _, n)| format!("{r} {n}"));
            if t.rows_differing > 0 && !name.shared {
                self.flips
                    .push((self.regime.clone(), name.layer, rc.name.clone()));
            }
            out.push(t);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swapped_equal_scores_are_tie_flips_and_others_real() {
        let ninf = f32::NEG_INFINITY;
        // Spec §12.6's decode12 L5 row: 13 positions, offset 8, position 8 wins a -inf tie.
        let scores = [
            ninf, ninf, 0.5, 0.4, ninf, ninf, ninf, ninf, ninf, ninf, 0.3, 0.2, 0.1,
        ];
        // Reference picks positions {2,3,8,10,11,12}; 8 is a -inf filler. Picking 0 instead is a tie flip.
        let s = ScoreRows {
            scores: &scores,
            width: 13,
            offset: 8,
            near_tie_rel: BF16_NEAR_TIE_REL,
            near_tie_abs: 0.0,
        };
        let reference = [10, 11, 16, 18, 19, 20];
        let tie = [8, 10, 11, 18, 19, 20];
        let t = triage_rows("L5.sa_topk_idxs", &reference, &tie, 6, Some(s));
        assert_eq!((t.rows_differing, t.tie_flips, t.real), (1, 1, 0));
        let real = [10, 11, 16, 18, 19, 14];
        let t = triage_rows("L5.sa_topk_idxs", &reference, &real, 6, Some(s));
        assert_eq!(t.real, 1);
        assert_eq!(t.details[0].reference_only, vec![20]);
        let near = [0.5f32, 0.501, 0.1];
        let s = ScoreRows {
            scores: &near,
            width: 3,
            offset: 0,
            near_tie_rel: BF16_NEAR_TIE_REL,
            near_tie_abs: 0.0,
        };
        let t = triage_rows("L0.moe_indices", &[1, 0], &[1, 2], 2, Some(s));
        assert_eq!(t.real, 1, "0.5 vs 0.1 is real");
        let t = triage_rows("L0.moe_indices", &[1], &[0], 1, Some(s));
        assert_eq!(t.near_ties, 1);
        assert!(t.details[0].boundary_margin.is_some());
    }

    #[test]
    fn routing_near_ties_allow_the_gates_f32_bar_on_top_of_the_relative_one() {
        let cfg = ModelConfig::deepseek_v41_flash();
        let abs = routing_near_tie_abs(&cfg);
        assert!((abs - 8.944e-4).abs() < 1e-6, "{abs}");
        // 0.5 vs 0.5 - 0.8 abs: near; 0.5 vs 0.5 - 1.2 abs: real.
        for (gap, class) in [
            (0.8 * abs, TopkClass::NearTie),
            (1.2 * abs, TopkClass::Real),
        ] {
            let scores = [0.5f32, 0.5 - gap, 0.1];
            let s = ScoreRows {
                scores: &scores,
                width: 3,
                offset: 0,
                near_tie_rel: F32_NEAR_TIE_REL,
                near_tie_abs: abs,
            };
            let t = triage_rows("L3.moe_indices", &[0], &[1], 1, Some(s));
            assert_eq!(t.details[0].class, class, "gap {gap}");
        }
    }
}
