//! Compressed-branch kernels (`shaders/compress.wgsl`, spec §12): compressor pooling, indexer
//! scores with the causal mask, the candidate-mask consumer, candidate blocks and top-k.
//!
//! GPU top-k tie rule (deterministic, documented): larger values first, NaN before everything,
//! equal values by lower index. torch CPU's introselect orders ties differently; the session
//! reports such disagreements as tie flips, and `--reference-ties` selects on the host with
//! `num::torch_cpu_topk_set` instead (as production ports do).

use super::exec::{flat_groups, groups_for, Access, Family, Gpu, Tensor};
use super::provenance::WriteMap;
use super::{guard, GpuError};

/// `shaders/compress.wgsl`: uniform, a, b, c (read), out (read-write).
pub static FAMILY: Family = Family {
    name: "compress",
    source: include_str!("../../shaders/compress.wgsl"),
    entries: &[
        "pool",
        "index_scores",
        "cand_mask_apply",
        "candidate_blocks",
        "topk_flags",
        "topk_compact",
    ],
    bindings: &[
        Access::Uniform,
        Access::Read,
        Access::Read,
        Access::Read,
        Access::ReadWrite,
    ],
};

/// Largest compression ratio the pooling lane holds privately.
pub const MAX_RATIO: usize = 16;

/// The WGSL `Params` of `compress.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub s: u32,
    pub t_vis: u32,
    pub ih: u32,
    pub ihd: u32,
    pub r: u32,
    pub prefill: u32,
    pub k: u32,
    pub offset: u32,
    pub block: u32,
    pub hd: u32,
    pub groups: u32,
    pub zero: u32,
}

/// Which rows a query sees: prefill `clen[t] = (t + 1) / r`, decode all `t_vis`.
#[derive(Debug, Clone, Copy)]
pub struct Causal {
    pub prefill: bool,
    pub r: usize,
}

fn dummy(gpu: &Gpu) -> Result<Tensor, GpuError> {
    gpu.zeros("unused", 1)
}

/// Softmax-gated pooling of `groups` groups of `r` rows: `bf16(Σ_m kv · softmax_m(score))` `[groups, hd]`.
pub fn pool(
    gpu: &mut Gpu,
    kv: &Tensor,
    score: &Tensor,
    groups: usize,
    r: usize,
    hd: usize,
) -> Result<Tensor, GpuError> {
    if r == 0 || r > MAX_RATIO || kv.len < groups * r * hd || score.len < groups * r * hd {
        return Err(guard("pool", "shape or ratio"));
    }
    let out = gpu.zeros("pooled", groups * hd)?;
    let d = dummy(gpu)?;
    let p = Params {
        r: r as u32,
        hd: hd as u32,
        groups: groups as u32,
        ..Default::default()
    };
    gpu.dispatch(
        &FAMILY,
        "pool",
        &p,
        &[kv, score, &d, &out],
        (groups_for(hd), groups as u32, 1),
        WriteMap::Grid {
            offset: 0,
            ld: hd,
            width: hd,
            rows: groups,
            cols_per_thread: 1,
            rows_per_thread: 1,
        },
    )?;
    Ok(out)
}

/// The most loop back-edges one `index_scores` lane (a (token, position) pair) takes: `ih`
/// heads of `ihd` products each.
pub fn index_scores_loop_count(ih: usize, ihd: usize) -> u64 {
    ih as u64 * (ihd as u64 + 2) + 1
}

/// The most loop back-edges one `candidate_blocks` lane (a (token, block) pair) takes: its own
/// block score, every block's score (a max over `block` positions each) for its rank, then
/// writing its block's positions.
pub fn candidate_blocks_loop_count(t_vis: usize, block: usize) -> u64 {
    let nb = t_vis.div_ceil(block.max(1)) as u64;
    (nb + 2) * (block as u64 + 1) + nb + 1
}

/// The most loop back-edges one `topk_flags` or `topk_compact` lane (a (token, position) pair)
/// takes: it compares its value with every position of the row (the rank), or counts the
/// selected positions before it (the slot).
pub fn topk_loop_count(t_vis: usize) -> u64 {
    t_vis as u64 + 1
}

/// Indexer scores `[s, t_vis]` (bf16 stages, causal -inf) from queries `[s, ih, ihd]`, keys
/// `[≥ t_vis, ihd]` and weights `[s, ih]`.
#[allow(clippy::too_many_arguments)] // the indexer's operands and geometry
pub fn index_scores(
    gpu: &mut Gpu,
    iq: &Tensor,
    keys: &Tensor,
    wts: &Tensor,
    s: usize,
    t_vis: usize,
    ih: usize,
    ihd: usize,
    causal: Causal,
) -> Result<Tensor, GpuError> {
    if iq.len != s * ih * ihd || keys.len < t_vis * ihd || wts.len != s * ih || causal.r == 0 {
        return Err(guard("index_scores", "shape"));
    }
    let loops = index_scores_loop_count(ih, ihd);
    gpu.check_loops(&FAMILY, "index_scores", loops, || {
        format!("{ih} indexer heads x {ihd} dims")
    })?;
    let out = gpu.zeros("index_scores", s * t_vis)?;
    let p = Params {
        s: s as u32,
        t_vis: t_vis as u32,
        ih: ih as u32,
        ihd: ihd as u32,
        r: causal.r as u32,
        prefill: causal.prefill as u32,
        ..Default::default()
    };
    gpu.dispatch(
        &FAMILY,
        "index_scores",
        &p,
        &[iq, keys, wts, &out],
        (groups_for(t_vis), s as u32, 1),
        WriteMap::Grid {
            offset: 0,
            ld: t_vis,
            width: t_vis,
            rows: s,
            cols_per_thread: 1,
            rows_per_thread: 1,
        },
    )?;
    Ok(out)
}

/// Candidate consumer: `score = -inf` where `mask` is 0 (in place).
pub fn cand_mask_apply(
    gpu: &mut Gpu,
    score: &Tensor,
    mask: &Tensor,
    s: usize,
    t_vis: usize,
) -> Result<(), GpuError> {
    if score.len != s * t_vis || mask.len != s * t_vis {
        return Err(guard("cand_mask_apply", "shape"));
    }
    let d = dummy(gpu)?;
    let p = Params {
        s: s as u32,
        t_vis: t_vis as u32,
        ..Default::default()
    };
    let (gx, gy) = flat_groups(s * t_vis);
    gpu.dispatch(
        &FAMILY,
        "cand_mask_apply",
        &p,
        &[&d, mask, &d, score],
        (gx, gy, 1),
        WriteMap::Flat {
            offset: 0,
            len: s * t_vis,
            per_thread: 1,
        },
    )
}

/// `select_candidate_blocks` with the GPU tie rule: the `[s, t_vis]` 0/1 keep mask.
pub fn candidate_blocks(
    gpu: &mut Gpu,
    score: &Tensor,
    s: usize,
    t_vis: usize,
    causal: Causal,
    topk_blocks: usize,
    block: usize,
) -> Result<Tensor, GpuError> {
    if score.len != s * t_vis || block == 0 {
        return Err(guard("candidate_blocks", "shape"));
    }
    let loops = candidate_blocks_loop_count(t_vis, block);
    gpu.check_loops(&FAMILY, "candidate_blocks", loops, || {
        format!("{t_vis} visible positions in blocks of {block}")
    })?;
    let out = gpu.zeros("candidates", s * t_vis)?;
    let d = dummy(gpu)?;
    let p = Params {
        s: s as u32,
        t_vis: t_vis as u32,
        r: causal.r as u32,
        prefill: causal.prefill as u32,
        k: topk_blocks as u32,
        block: block as u32,
        ..Default::default()
    };
    let nb = t_vis.div_ceil(block);
    // Thread (b, t) writes the `block` positions of block b in row t.
    gpu.dispatch(
        &FAMILY,
        "candidate_blocks",
        &p,
        &[score, &d, &d, &out],
        (groups_for(nb), s as u32, 1),
        WriteMap::Grid {
            offset: 0,
            ld: t_vis,
            width: t_vis,
            rows: s,
            cols_per_thread: block,
            rows_per_thread: 1,
        },
    )?;
    Ok(out)
}

/// Top-`k` of each score row with the GPU tie rule, ascending, mapped to `p + offset` where the
/// query sees `p` and -1 elsewhere: `[s, k]`.
pub fn topk(
    gpu: &mut Gpu,
    score: &Tensor,
    s: usize,
    t_vis: usize,
    k: usize,
    offset: usize,
    causal: Causal,
) -> Result<Tensor, GpuError> {
    if score.len != s * t_vis || k > t_vis {
        return Err(guard(
            "topk",
            format!("scores {} for [{s}, {t_vis}], k = {k}", score.len),
        ));
    }
    let loops = topk_loop_count(t_vis);
    for entry in ["topk_flags", "topk_compact"] {
        gpu.check_loops(&FAMILY, entry, loops, || {
            format!("{t_vis} visible positions")
        })?;
    }
    let flags = gpu.zeros("topk flags", s * t_vis)?;
    let out = gpu.zeros("topk", s * k)?;
    let d = dummy(gpu)?;
    let p = Params {
        s: s as u32,
        t_vis: t_vis as u32,
        r: causal.r as u32,
        prefill: causal.prefill as u32,
        k: k as u32,
        offset: offset as u32,
        ..Default::default()
    };
    let g = (groups_for(t_vis), s as u32, 1);
    gpu.dispatch(
        &FAMILY,
        "topk_flags",
        &p,
        &[score, &d, &d, &flags],
        g,
        WriteMap::Grid {
            offset: 0,
            ld: t_vis,
            width: t_vis,
            rows: s,
            cols_per_thread: 1,
            rows_per_thread: 1,
        },
    )?;
    // A kept position's slot in its row is its rank among the kept: data-dependent.
    gpu.dispatch(
        &FAMILY,
        "topk_compact",
        &p,
        &[score, &d, &flags, &out],
        g,
        WriteMap::Opaque,
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn naga_validates_compress() {
        assert_eq!(super::super::exec::validate_family(&super::FAMILY), Ok(6));
    }
}
