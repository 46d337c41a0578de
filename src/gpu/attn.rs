//! Attention kernels (`shaders/attn.wgsl`, spec §11): window ring write, window index rows,
//! index concatenation and sparse attention with sinks.

use super::exec::{groups_for, Access, Family, Gpu, Tensor};
use super::provenance::WriteMap;
use super::{guard, GpuError};

/// `shaders/attn.wgsl`: uniform, a, kv, sink, idx (read), out (read-write).
pub static FAMILY: Family = Family {
    name: "attn",
    source: include_str!("../../shaders/attn.wgsl"),
    entries: &["ring_write", "window_idx", "idx_concat", "sparse_attn"],
    bindings: &[
        Access::Uniform,
        Access::Read,
        Access::Read,
        Access::Read,
        Access::Read,
        Access::ReadWrite,
    ],
};

/// Most index columns (plus the sink) one sparse-attention lane holds privately.
pub const MAX_COLS: usize = 1023;

/// The WGSL `Params` of `attn.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub s: u32,
    pub sp: u32,
    pub win: u32,
    pub hd: u32,
    pub n_heads: u32,
    pub w: u32,
    pub ww: u32,
    pub cw: u32,
    pub scale: f32,
    pub zero: u32,
    pub off_by_one: u32,
    pub n_rows: u32,
    /// `sparse_attn`: the first (token, head) row of the dispatch.
    pub row0: u32,
    pub _pad0: u32,
    pub _pad1: u32,
    pub _pad2: u32,
}

/// Write the chunk's kv rows `[s, hd]` into the ring `[win, hd]` (slot `(sp + t) % win` for the
/// last `min(s, win)` rows).
pub fn ring_write(
    gpu: &mut Gpu,
    kv: &Tensor,
    ring: &Tensor,
    s: usize,
    sp: usize,
    win: usize,
    hd: usize,
) -> Result<(), GpuError> {
    if kv.len != s * hd || ring.len != win * hd || win == 0 {
        return Err(guard("ring_write", "shape"));
    }
    let d = gpu.zeros("unused", 1)?;
    let p = Params {
        s: s as u32,
        sp: sp as u32,
        win: win as u32,
        hd: hd as u32,
        ..Default::default()
    };
    gpu.dispatch(
        &FAMILY,
        "ring_write",
        &p,
        &[kv, &d, &d, &d, ring],
        (groups_for(hd), s as u32, 1),
        // The ring slot depends on the position.
        WriteMap::Opaque,
    )
}

/// Window index columns `[s, ww]` written into `idx [s, w]` (`off_by_one`: fault injection).
#[allow(clippy::too_many_arguments)] // the window geometry, as the kernel takes it
pub fn window_idx(
    gpu: &mut Gpu,
    idx: &Tensor,
    s: usize,
    sp: usize,
    win: usize,
    ww: usize,
    w: usize,
    off_by_one: bool,
) -> Result<(), GpuError> {
    if idx.len != s * w || ww > w || win == 0 {
        return Err(guard("window_idx", "shape"));
    }
    let d = gpu.zeros("unused", 1)?;
    let p = Params {
        s: s as u32,
        sp: sp as u32,
        win: win as u32,
        w: w as u32,
        ww: ww as u32,
        off_by_one: off_by_one as u32,
        ..Default::default()
    };
    gpu.dispatch(
        &FAMILY,
        "window_idx",
        &p,
        &[&d, &d, &d, &d, idx],
        (groups_for(ww), s as u32, 1),
        WriteMap::Grid {
            offset: 0,
            ld: w,
            width: ww,
            rows: s,
            cols_per_thread: 1,
            rows_per_thread: 1,
        },
    )
}

/// Copy compressed indices `[s, cw]` into columns `ww..` of `idx [s, w]`.
pub fn idx_concat(
    gpu: &mut Gpu,
    cidx: &Tensor,
    idx: &Tensor,
    s: usize,
    ww: usize,
    cw: usize,
) -> Result<(), GpuError> {
    let w = ww + cw;
    if cidx.len != s * cw || idx.len != s * w {
        return Err(guard("idx_concat", "shape"));
    }
    let d = gpu.zeros("unused", 1)?;
    let p = Params {
        s: s as u32,
        w: w as u32,
        ww: ww as u32,
        cw: cw as u32,
        ..Default::default()
    };
    gpu.dispatch(
        &FAMILY,
        "idx_concat",
        &p,
        &[cidx, &d, &d, &d, idx],
        (groups_for(cw), s as u32, 1),
        WriteMap::Grid {
            offset: ww,
            ld: w,
            width: cw,
            rows: s,
            cols_per_thread: 1,
            rows_per_thread: 1,
        },
    )
}

/// Invocations of one `sparse_attn` workgroup (its `@workgroup_size`): they split a row's index
/// columns for q·k and its output dims for p·v.
pub const SPARSE_ATTN_THREADS: usize = 64;

/// Output dims one `sparse_attn` workgroup's p·v pass covers: each invocation owns four of them
/// (64 apart) and reads each column's index and probability once for the four.
pub const SPARSE_ATTN_PV_BLOCK: usize = 4 * SPARSE_ATTN_THREADS;

/// The most loop back-edges one `sparse_attn` invocation takes at `hd` dims and `w` index
/// columns (invocation 0, which also runs the max and the softmax sum): per column of its
/// share the q·k loop (`hd / 4` unrolled steps, `hd % 4` tail steps, one exit), then `2w` for
/// the max and the sum, its share of the normalisation, and per block of
/// [`SPARSE_ATTN_PV_BLOCK`] output dims the p·v loop over the `w` columns (and one exit).
pub fn sparse_attn_loop_count(hd: usize, w: usize) -> u64 {
    let cols = w.div_ceil(SPARSE_ATTN_THREADS) as u64;
    let blocks = hd.div_ceil(SPARSE_ATTN_PV_BLOCK) as u64;
    let (hd, w) = (hd as u64, w as u64);
    let qk = cols * (hd / 4 + hd % 4 + 2);
    let softmax = 2 * w + 2;
    let norm = cols + 1;
    let pv = blocks * (w + 2);
    qk + softmax + norm + pv + 1
}

/// `sparse_attn(q [s, heads, hd], kv [n_rows, hd], sink [heads], idx [s, w])` → `[s, heads, hd]` bf16.
#[allow(clippy::too_many_arguments)] // the kernel's operands, as the reference passes them
pub fn sparse_attn(
    gpu: &mut Gpu,
    q: &Tensor,
    kv: &Tensor,
    sink: &Tensor,
    idx: &Tensor,
    s: usize,
    n_heads: usize,
    hd: usize,
    w: usize,
    scale: f32,
) -> Result<Tensor, GpuError> {
    if w > MAX_COLS {
        return Err(guard(
            "sparse_attn",
            format!("{w} index columns exceed {MAX_COLS}"),
        ));
    }
    if q.len != s * n_heads * hd
        || kv.len % hd.max(1) != 0
        || sink.len != n_heads
        || idx.len != s * w
    {
        return Err(guard("sparse_attn", "shape"));
    }
    gpu.check_loops(
        &FAMILY,
        "sparse_attn",
        sparse_attn_loop_count(hd, w),
        || format!("head_dim {hd} x {w} index columns"),
    )?;
    let o = gpu.zeros("sa_o", s * n_heads * hd)?;
    let rows = s * n_heads;
    let per_dispatch = gpu.max_groups() as usize;
    let mut row0 = 0;
    while row0 < rows {
        let n = per_dispatch.min(rows - row0);
        let p = Params {
            s: s as u32,
            hd: hd as u32,
            n_heads: n_heads as u32,
            w: w as u32,
            scale,
            n_rows: (kv.len / hd.max(1)) as u32,
            row0: row0 as u32,
            ..Default::default()
        };
        // One workgroup per (token, head) row, its invocations strided along the output dims.
        let map = WriteMap::RowGroups {
            offset: row0 * hd,
            ld: hd,
            width: hd,
            rows: n,
        };
        // q·k and p·v are hd multiply-adds per column each.
        let flops = 4 * (n * w * hd) as u64;
        gpu.dispatch_counted(
            &FAMILY,
            "sparse_attn",
            &p,
            &[q, kv, sink, idx, &o],
            (n as u32, 1, 1),
            map,
            flops,
        )?;
        row0 += n;
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    #[test]
    fn naga_validates_attn() {
        assert_eq!(super::super::exec::validate_family(&super::FAMILY), Ok(4));
    }
}
