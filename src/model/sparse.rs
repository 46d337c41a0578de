//! The index math of sparse attention that every backend shares: the sliding window's index rows
//! (spec §11.3), the compressed positions each query sees, the indexer's top-k rows (spec §12.4)
//! and candidate block scoring and selection (spec §12.5). Pure functions over host slices; the
//! oracle runs them as they are, the GPU path runs them where the torch-CPU tie rule must hold
//! (`--reference-ties`, tie audits) and checks its own kernels against them.

use crate::num::torch_cpu_topk_set;

/// Window index rows (spec §11.3): prefill `[s, min(s, win)]`, decode `[1, win]` oldest first.
pub fn window_idxs(win: usize, s: usize, sp: usize) -> (usize, Vec<i64>) {
    if sp == 0 {
        let w = s.min(win);
        let mut v = Vec::with_capacity(s * w);
        for t in 0..s {
            let first = (t + 1).saturating_sub(win);
            for c in 0..w {
                let j = first + c;
                v.push(if j > t { -1 } else { j as i64 });
            }
        }
        (w, v)
    } else {
        let oldest = sp % win + 1;
        let v = (oldest..win)
            .chain(0..oldest)
            .map(|j| if j > sp { -1 } else { j as i64 })
            .collect();
        (win, v)
    }
}

/// How many of the `t_vis` compressed positions each of the `s` queries of a chunk at `sp` may
/// see (ratio `r`): in a prefill, token `t` sees the groups it has completed (`(t + 1) / r`);
/// a decode step sees them all.
pub fn visible_lens(s: usize, sp: usize, r: usize, t_vis: usize) -> Vec<usize> {
    if sp == 0 {
        (0..s).map(|t| (t + 1) / r.max(1)).collect()
    } else {
        vec![t_vis; s]
    }
}

/// The indexer's `[s, k]` top-k rows (spec §12.4) over score rows `[s, w]` under the tie rule
/// `topk`: each row's set ascending, positions the query cannot see as -1, the rest shifted by
/// `offset` (the window rows that precede the compressed ones in the attention KV).
pub fn index_topk_rows(
    score: &[f32],
    w: usize,
    clen: &[usize],
    k: usize,
    offset: usize,
    topk: fn(&[f32], usize) -> Vec<usize>,
) -> Vec<i64> {
    let rows = score.len().checked_div(w).unwrap_or(0).min(clen.len());
    let mut idxs = Vec::with_capacity(rows * k);
    for (t, &visible) in clen.iter().enumerate().take(rows) {
        let mut set = topk(&score[t * w..(t + 1) * w], k);
        set.sort_unstable();
        idxs.extend(
            set.into_iter()
                .map(|p| if p < visible { (p + offset) as i64 } else { -1 }),
        );
    }
    idxs
}

/// `select_candidate_blocks` (spec §12.5) for score rows `[rows, w]` with per-row visible
/// lengths; returns the `[rows, w]` keep mask.
pub fn select_candidate_blocks(
    score: &[f32],
    w: usize,
    clen: &[usize],
    topk_blocks: usize,
    block: usize,
) -> Vec<bool> {
    select_candidate_blocks_by(score, w, clen, topk_blocks, block, torch_cpu_topk_set)
}

/// One row's candidate block scores: each block's best index score, the block holding the last
/// of the `clen` visible positions forced to +inf (it is always selected).
pub fn candidate_block_scores(row: &[f32], clen: usize, block: usize) -> Vec<f32> {
    let block = block.max(1);
    let w = row.len();
    let nb = w.div_ceil(block);
    let mut bs: Vec<f32> = (0..nb)
        .map(|b| {
            row[b * block..((b + 1) * block).min(w)]
                .iter()
                .copied()
                .fold(f32::NEG_INFINITY, f32::max)
        })
        .collect();
    if clen > 0 && (clen - 1) / block < nb {
        bs[(clen - 1) / block] = f32::INFINITY;
    }
    bs
}

/// [`select_candidate_blocks`] with another top-k rule over the block scores (the tie-order
/// fault uses the lowest-index rule).
pub fn select_candidate_blocks_by(
    score: &[f32],
    w: usize,
    clen: &[usize],
    topk_blocks: usize,
    block: usize,
    topk: fn(&[f32], usize) -> Vec<usize>,
) -> Vec<bool> {
    let block = block.max(1);
    let rows = score.len().checked_div(w).unwrap_or(0).min(clen.len());
    let nb = w.div_ceil(block);
    let mut mask = vec![false; rows * w];
    for r in 0..rows {
        let bs = candidate_block_scores(&score[r * w..(r + 1) * w], clen[r], block);
        let picks = topk(&bs, topk_blocks.min(nb));
        for b in picks {
            if bs[b] > f32::NEG_INFINITY {
                for p in b * block..((b + 1) * block).min(w) {
                    mask[r * w + p] = true;
                }
            }
        }
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_index_rows_match_the_spec() {
        let (w, v) = window_idxs(8, 12, 0);
        assert_eq!(w, 8);
        assert_eq!(&v[0..8], &[0, -1, -1, -1, -1, -1, -1, -1]);
        assert_eq!(&v[16..24], &[0, 1, 2, -1, -1, -1, -1, -1]);
        assert_eq!(&v[88..96], &[4, 5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(window_idxs(8, 1, 12).1, vec![5, 6, 7, 0, 1, 2, 3, 4]);
        assert_eq!(window_idxs(8, 1, 13).1, vec![6, 7, 0, 1, 2, 3, 4, 5]);
        // Ring still filling: slots beyond the position are absent.
        assert_eq!(window_idxs(8, 1, 3).1, vec![-1, -1, -1, -1, 0, 1, 2, 3]);
        // A prefill shorter than the window has one column per token.
        assert_eq!(
            window_idxs(8, 3, 0),
            (3, vec![0, -1, -1, 0, 1, -1, 0, 1, 2])
        );
    }

    #[test]
    fn candidate_blocks_pin_the_newest_block_and_drop_unreachable_picks() {
        let ninf = f32::NEG_INFINITY;
        // Decode-like row: 13 positions, blocks of 2, newest position 12 pinned.
        let score = [
            0.5, 0.25, 2.0, 1.0, ninf, ninf, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.1,
        ];
        let m = select_candidate_blocks(&score, 13, &[13], 3, 2);
        let kept: Vec<usize> = (0..13).filter(|&p| m[p]).collect();
        assert_eq!(kept, vec![2, 3, 10, 11, 12]);
        // Only one reachable block: -inf picks are dropped.
        let m = select_candidate_blocks(&[1.0, ninf, ninf, ninf], 4, &[1], 3, 2);
        assert_eq!(m, vec![true, true, false, false]);
    }

    #[test]
    fn prefill_queries_see_only_completed_groups() {
        assert_eq!(visible_lens(5, 0, 2, 2), vec![0, 1, 1, 2, 2]);
        assert_eq!(visible_lens(1, 9, 2, 5), vec![5]);
    }

    #[test]
    fn index_rows_are_ascending_shifted_and_mask_the_unseen() {
        let ninf = f32::NEG_INFINITY;
        // Row 0 sees one position, row 1 all three; top-2 of each.
        let score = [0.5, ninf, ninf, 0.1, 0.9, 0.4];
        let rows = index_topk_rows(&score, 3, &[1, 3], 2, 10, torch_cpu_topk_set);
        assert_eq!(&rows[..2], &[10, -1]);
        assert_eq!(&rows[2..], &[11, 12]);
    }
}
