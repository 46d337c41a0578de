//! Row-wise kernels (`shaders/rows.wgsl`): RMSNorm, row gather, stream expansion, bf16 scaling,
//! rounding add, scatter-add, and the `--inject` perturbations (bit flip, dropped workgroup).

use super::exec::{flat_groups, groups_for, Access, Family, Gpu, Tensor, MAX_GROUPS};
use super::provenance::WriteMap;
use super::{guard, GpuError};

/// `shaders/rows.wgsl`: uniform, x (read), w (read), idx (read), y (read-write).
pub static FAMILY: Family = Family {
    name: "rows",
    source: include_str!("../../shaders/rows.wgsl"),
    entries: &[
        "rmsnorm",
        "gather_rows",
        "expand",
        "scale_round",
        "add_round",
        "scatter_add",
        "bitflip",
        "drop_first",
    ],
    bindings: &[
        Access::Uniform,
        Access::Read,
        Access::Read,
        Access::Read,
        Access::ReadWrite,
    ],
};

/// The WGSL `Params` of `rows.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub rows: u32,
    pub width: u32,
    pub ldx: u32,
    pub x_off: u32,
    pub ldy: u32,
    pub y_off: u32,
    pub copies: u32,
    pub zero: u32,
    pub eps: f32,
    pub scale: f32,
    pub mask: u32,
    pub count: u32,
}

fn run(
    gpu: &mut Gpu,
    entry: &'static str,
    p: Params,
    bufs: [&Tensor; 4],
    groups: (u32, u32, u32),
    map: WriteMap,
) -> Result<(), GpuError> {
    gpu.dispatch(&FAMILY, entry, &p, &bufs, groups, map)
}

/// Rows of `width` written one thread per element, `gid = (col, row)`.
fn grid(offset: usize, ld: usize, width: usize, rows: usize) -> WriteMap {
    WriteMap::Grid {
        offset,
        ld,
        width,
        rows,
        cols_per_thread: 1,
        rows_per_thread: 1,
    }
}

/// `len` elements from `offset`, one thread each, flat.
fn flat(offset: usize, len: usize) -> WriteMap {
    WriteMap::Flat {
        offset,
        len,
        per_thread: 1,
    }
}

fn dummy(gpu: &Gpu) -> Result<Tensor, GpuError> {
    gpu.zeros("unused", 1)
}

/// The most loop back-edges one `rmsnorm` invocation takes: lane 0 sums the squares of the
/// whole row, then writes its share of it.
pub fn rmsnorm_loop_count(width: usize) -> u64 {
    width as u64 + width.div_ceil(64) as u64 + 2
}

/// `RMSNorm` of `rows` rows of width `w.len` into a fresh tensor: `bf16(w · x · rsqrt(mean(x²) + eps))`.
pub fn rmsnorm(
    gpu: &mut Gpu,
    x: &Tensor,
    rows: usize,
    w: &Tensor,
    eps: f32,
) -> Result<Tensor, GpuError> {
    let width = w.len;
    if rows * width != x.len {
        return Err(guard(
            "rmsnorm",
            format!("{} values for [{rows}, {width}]", x.len),
        ));
    }
    if rows > MAX_GROUPS as usize {
        return Err(guard("rmsnorm", format!("{rows} rows exceed one dispatch")));
    }
    let loops = rmsnorm_loop_count(width);
    gpu.check_loops(&FAMILY, "rmsnorm", loops, || format!("rows of {width}"))?;
    let y = gpu.zeros("rmsnorm", rows * width)?;
    let d = dummy(gpu)?;
    let p = Params {
        rows: rows as u32,
        width: width as u32,
        ldx: width as u32,
        ldy: width as u32,
        eps,
        ..Default::default()
    };
    let map = WriteMap::RowGroups {
        offset: 0,
        ld: width,
        width,
        rows,
    };
    run(gpu, "rmsnorm", p, [x, w, &d, &y], (rows as u32, 1, 1), map)?;
    Ok(y)
}

/// `y[r] = x[idx[r]]` for rows of `width`, `idx` holding exact f32 row numbers (checked on the
/// host by the caller against `x`'s row count).
pub fn gather_rows(
    gpu: &mut Gpu,
    x: &Tensor,
    width: usize,
    idx: &Tensor,
) -> Result<Tensor, GpuError> {
    if width == 0 || x.len % width != 0 {
        return Err(guard(
            "gather_rows",
            format!("{} values in rows of {width}", x.len),
        ));
    }
    let rows = idx.len;
    let y = gpu.zeros("gather", rows * width)?;
    let d = dummy(gpu)?;
    let p = Params {
        rows: rows as u32,
        width: width as u32,
        ldx: width as u32,
        ldy: width as u32,
        ..Default::default()
    };
    run(
        gpu,
        "gather_rows",
        p,
        [x, &d, idx, &y],
        (groups_for(width), rows as u32, 1),
        grid(0, width, width, rows),
    )?;
    Ok(y)
}

/// The stream `[rows, copies, width]` holding `copies` copies of each row of `x`.
pub fn expand(gpu: &mut Gpu, x: &Tensor, rows: usize, copies: usize) -> Result<Tensor, GpuError> {
    let width = x.len / rows.max(1);
    if rows * width != x.len {
        return Err(guard("expand", format!("{} values in {rows} rows", x.len)));
    }
    let y = gpu.zeros("stream", rows * copies * width)?;
    let d = dummy(gpu)?;
    let p = Params {
        rows: rows as u32,
        width: width as u32,
        copies: copies as u32,
        ..Default::default()
    };
    run(
        gpu,
        "expand",
        p,
        [x, &d, &d, &y],
        (groups_for(width), rows as u32, 1),
        // Output row r · copies + c is written by thread row r.
        WriteMap::Grid {
            offset: 0,
            ld: width,
            width,
            rows: rows * copies,
            cols_per_thread: 1,
            rows_per_thread: copies,
        },
    )?;
    Ok(y)
}

/// `bf16(x · scale)` elementwise into a fresh tensor.
pub fn scale_round(gpu: &mut Gpu, x: &Tensor, scale: f32) -> Result<Tensor, GpuError> {
    let y = gpu.zeros("scaled", x.len)?;
    let d = dummy(gpu)?;
    let p = Params {
        count: x.len as u32,
        scale,
        ..Default::default()
    };
    let (gx, gy) = flat_groups(x.len);
    run(
        gpu,
        "scale_round",
        p,
        [x, &d, &d, &y],
        (gx, gy, 1),
        flat(0, x.len),
    )?;
    Ok(y)
}

/// `bf16(a + b)` elementwise into a fresh tensor.
pub fn add_round(gpu: &mut Gpu, a: &Tensor, b: &Tensor) -> Result<Tensor, GpuError> {
    if a.len != b.len {
        return Err(guard("add_round", format!("{} vs {} values", a.len, b.len)));
    }
    let y = gpu.zeros("sum", a.len)?;
    let d = dummy(gpu)?;
    let p = Params {
        count: a.len as u32,
        ..Default::default()
    };
    let (gx, gy) = flat_groups(a.len);
    run(
        gpu,
        "add_round",
        p,
        [a, b, &d, &y],
        (gx, gy, 1),
        flat(0, a.len),
    )?;
    Ok(y)
}

/// `y[idx[r]] += x[r]` for rows of `width` (idx rows distinct).
pub fn scatter_add(
    gpu: &mut Gpu,
    x: &Tensor,
    width: usize,
    idx: &Tensor,
    y: &Tensor,
) -> Result<(), GpuError> {
    if idx.len * width != x.len {
        return Err(guard(
            "scatter_add",
            format!("{} values for {} rows of {width}", x.len, idx.len),
        ));
    }
    let d = dummy(gpu)?;
    let p = Params {
        rows: idx.len as u32,
        width: width as u32,
        ..Default::default()
    };
    run(
        gpu,
        "scatter_add",
        p,
        [x, &d, idx, y],
        (groups_for(width), idx.len as u32, 1),
        // The destination row comes from `idx`.
        WriteMap::Opaque,
    )
}

/// Fault injection: flip `mask` in the bits of element `at` of `y`.
pub fn bitflip(gpu: &mut Gpu, y: &Tensor, at: usize, mask: u32) -> Result<(), GpuError> {
    if at >= y.len {
        return Err(guard("bitflip", format!("element {at} of {}", y.len)));
    }
    let d = dummy(gpu)?;
    let p = Params {
        count: at as u32,
        mask,
        ..Default::default()
    };
    run(
        gpu,
        "bitflip",
        p,
        [&d, &d, &d, y],
        (1, 1, 1),
        WriteMap::Single { element: at },
    )
}

/// Fault injection: the first workgroup's outputs (64 values from `off`, at most `n`) left as a
/// fresh buffer holds them.
pub fn drop_first(gpu: &mut Gpu, y: &Tensor, off: usize, n: usize) -> Result<(), GpuError> {
    let d = dummy(gpu)?;
    let n = n.min(super::exec::WG as usize);
    if off + n > y.len {
        return Err(guard("drop_first", format!("{off}+{n} of {}", y.len)));
    }
    let p = Params {
        count: n as u32,
        y_off: off as u32,
        ..Default::default()
    };
    run(
        gpu,
        "drop_first",
        p,
        [&d, &d, &d, y],
        (1, 1, 1),
        flat(off, n),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn naga_validates_rows() {
        assert_eq!(super::super::exec::validate_family(&super::FAMILY), Ok(8));
    }
}
