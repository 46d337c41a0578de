//! GEMM-bf16 / GEMM-f32 (`shaders/gemm.wgsl`): `y = x · w^T`, exact products accumulated as an
//! f32 pair and rounded once to f32 (and once more to bf16 for GEMM-bf16), so results match the
//! oracle's f64-accumulated GEMMs except where the exact sum sits within ~2^-44 of a rounding
//! boundary. Weights come chunked by rows; each chunk is one dispatch writing its columns of y.

use super::exec::{groups_for, Access, Family, Gpu, Tensor, WeightTensor, MAX_GROUPS};
use super::{guard, GpuError};

/// `shaders/gemm.wgsl`: uniform, x (read), w chunk (read), y (read-write).
pub static FAMILY: Family = Family {
    name: "gemm",
    source: include_str!("../../shaders/gemm.wgsl"),
    entries: &["gemm"],
    bindings: &[
        Access::Uniform,
        Access::Read,
        Access::Read,
        Access::ReadWrite,
    ],
};

/// The WGSL `Params` of `gemm.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub m: u32,
    pub k: u32,
    pub n: u32,
    pub ldx: u32,
    pub x_off: u32,
    pub ldy: u32,
    pub y_off: u32,
    pub w_row_off: u32,
    pub round_bf16: u32,
    pub zero: u32,
    pub _pad: [u32; 2],
}

/// Where the `[m, k]` operand sits inside `x`: row stride and column offset.
#[derive(Debug, Clone, Copy)]
pub struct XView {
    pub m: usize,
    pub k: usize,
    pub ldx: usize,
    pub x_off: usize,
}

impl XView {
    /// A dense `[m, k]` tensor.
    pub fn dense(m: usize, k: usize) -> XView {
        XView {
            m,
            k,
            ldx: k,
            x_off: 0,
        }
    }
}

fn u(v: usize, what: &str) -> Result<u32, GpuError> {
    u32::try_from(v).map_err(|_| guard("gemm", format!("{what} = {v} does not fit u32")))
}

/// `y[i, y_off + o] = x[i, ..] · w[w_row0 + o, ..]` for `o < n`, with `y` of row stride `ldy`.
#[allow(clippy::too_many_arguments)] // operand views and offsets, as the kernel takes them
pub fn gemm_into(
    gpu: &mut Gpu,
    x: &Tensor,
    xv: XView,
    w: &WeightTensor,
    w_row0: usize,
    n: usize,
    y: &Tensor,
    ldy: usize,
    y_off: usize,
    round_bf16: bool,
) -> Result<(), GpuError> {
    if w.cols != xv.k {
        return Err(guard(
            "gemm",
            format!("x has k = {}, w has {} columns", xv.k, w.cols),
        ));
    }
    if w_row0 + n > w.rows {
        return Err(guard(
            "gemm",
            format!("rows {w_row0}+{n} of a {}-row weight", w.rows),
        ));
    }
    if xv.m > 0 && (xv.m - 1) * xv.ldx + xv.x_off + xv.k > x.len {
        return Err(guard(
            "gemm",
            format!("x view {xv:?} beyond {} values", x.len),
        ));
    }
    if xv.m > 0 && n > 0 && (xv.m - 1) * ldy + y_off + n > y.len {
        return Err(guard(
            "gemm",
            format!("y [{}, {ldy}] +{y_off} beyond {} values", xv.m, y.len),
        ));
    }
    if xv.m > MAX_GROUPS as usize {
        return Err(guard("gemm", format!("{} rows exceed one dispatch", xv.m)));
    }
    for (r0, rows, chunk) in &w.chunks {
        let lo = w_row0.max(*r0);
        let hi = (w_row0 + n).min(r0 + rows);
        if lo >= hi {
            continue;
        }
        let p = Params {
            m: u(xv.m, "m")?,
            k: u(xv.k, "k")?,
            n: u(hi - lo, "n")?,
            ldx: u(xv.ldx, "ldx")?,
            x_off: u(xv.x_off, "x_off")?,
            ldy: u(ldy, "ldy")?,
            y_off: u(y_off + (lo - w_row0), "y_off")?,
            w_row_off: u(lo - r0, "w_row_off")?,
            round_bf16: round_bf16 as u32,
            zero: 0,
            _pad: [0; 2],
        };
        gpu.dispatch(
            &FAMILY,
            "gemm",
            bytemuck::bytes_of(&p),
            &[x, chunk, y],
            (groups_for(hi - lo), xv.m as u32, 1),
        )?;
    }
    Ok(())
}

/// `x [m, k] · w^T` into a fresh `[m, w.rows]` tensor (GEMM-bf16 when `round_bf16`).
pub fn linear(
    gpu: &mut Gpu,
    x: &Tensor,
    m: usize,
    w: &WeightTensor,
    round_bf16: bool,
) -> Result<Tensor, GpuError> {
    let y = gpu.zeros("linear", m * w.rows)?;
    gemm_into(
        gpu,
        x,
        XView::dense(m, w.cols),
        w,
        0,
        w.rows,
        &y,
        w.rows,
        0,
        round_bf16,
    )?;
    Ok(y)
}

#[cfg(test)]
mod tests {
    #[test]
    fn naga_validates_gemm() {
        assert_eq!(super::super::exec::validate_family(&super::FAMILY), Ok(1));
    }
}
