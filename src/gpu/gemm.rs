//! GEMM-bf16 / GEMM-f32 (`shaders/gemm.wgsl`): `y = x · w^T`, exact products accumulated as an
//! f32 pair and rounded once to f32 (and once more to bf16 for GEMM-bf16), so results match the
//! oracle's f64-accumulated GEMMs except where the exact sum sits within ~2^-44 of a rounding
//! boundary. Weights come chunked by rows; each chunk is one dispatch writing its columns of y.
//!
//! Three kernels compute the same bits per output: `gemm` (one thread per output, operands read
//! from storage; the decode GEMV shape), `gemm_rows4` (one thread per column and four rows, in
//! registers) and `gemm_tiled` (16 x 64 blocks of y per workgroup, k slabs staged in workgroup
//! memory, a 4 x 4 register tile per thread). Each has a `_bw` twin for weights without low
//! halves ([`WeightTensor::low_halves`], e.g. bf16), which leaves out the products that would
//! be skipped as zero anyway. [`GemmKernel::for_shape`] picks a kernel; [`gemm_into_using`]
//! forces one (tests, `examples/gemm_speed.rs`).

use super::exec::{groups_for, Access, Family, Gpu, Tensor, WeightTensor, MAX_GROUPS};
use super::provenance::WriteMap;
use super::{guard, GpuError};

/// Rows of y per `gemm_tiled` workgroup (`TILE_M` in the shader).
pub const TILE_M: usize = 16;
/// Columns of y per `gemm_tiled` workgroup (`TILE_N` in the shader).
pub const TILE_N: usize = 64;
/// `gemm_tiled`'s `@workgroup_size(16, 4)`: thread (tx, ty) owns rows ty + 4a, columns tx + 16b.
pub const TILED_THREADS: (usize, usize) = (16, 4);
/// Columns of x and w per `gemm_tiled` slab (`TILE_K` in the shader).
pub const TILE_K: usize = 16;
/// Rows of y per `gemm_rows4` thread.
pub const ROWS4: usize = 4;
/// Workgroup memory `gemm_tiled` stages: x and w slabs of `TILE_K = 16` rows, as high and low
/// halves (`(16 + 64) · 16 · 2` f32). GLES 3.1 and WebGPU guarantee 16 KiB; an adapter that
/// offers less runs the four-row kernel instead (same bits).
pub const TILED_WORKGROUP_BYTES: u32 = ((TILE_M + TILE_N) * TILE_K * 2 * 4) as u32;

/// Which kernel of `gemm.wgsl` runs a GEMM. All give the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmKernel {
    /// `gemm`: one thread per output element.
    PerOutput,
    /// `gemm_rows4`: one thread per column and four rows, registers only.
    Rows4,
    /// `gemm_tiled`: workgroup-memory slabs and 4 x 4 register tiles.
    Tiled,
}

impl GemmKernel {
    /// The kernel for `m` rows of x, on a CPU adapter (lavapipe) or a GPU. Measured on lavapipe
    /// (`examples/gemm_speed.rs`): one or two rows stay per output (four-row threads would
    /// compute mostly padding); from 3 rows the four-row kernel is about 1.5-2x faster than per
    /// output, and 10-20% faster than the tiled one even on full 16-row tiles (workgroup memory
    /// is ordinary memory there and every barrier a coroutine switch). On a GPU, full 16-row
    /// tiles go to the tiled kernel, whose slabs are read coalesced (the four-row kernel's
    /// threads each stream their own weight row).
    pub fn for_shape(m: usize, cpu_adapter: bool) -> GemmKernel {
        match m {
            0..=2 => GemmKernel::PerOutput,
            _ if cpu_adapter || m < TILE_M => GemmKernel::Rows4,
            _ => GemmKernel::Tiled,
        }
    }

    /// [`GemmKernel::for_shape`] on `gpu`'s adapter, within its limits: the tiled kernel only
    /// where its workgroup memory fits.
    pub fn for_gpu(m: usize, gpu: &Gpu) -> GemmKernel {
        match GemmKernel::for_shape(m, GemmKernel::cpu_adapter(gpu)) {
            GemmKernel::Tiled
                if gpu.ctx.adapter.limits.max_workgroup_storage_bytes < TILED_WORKGROUP_BYTES =>
            {
                GemmKernel::Rows4
            }
            k => k,
        }
    }

    /// Whether `gpu` runs on a CPU adapter (lavapipe, llvmpipe), for [`GemmKernel::for_shape`].
    pub fn cpu_adapter(gpu: &Gpu) -> bool {
        gpu.ctx.adapter.is_cpu()
    }

    /// The entry point; `low_halves`: whether the weight has values with nonzero low halves.
    fn entry(self, low_halves: bool) -> &'static str {
        match (self, low_halves) {
            (GemmKernel::PerOutput, true) => "gemm",
            (GemmKernel::PerOutput, false) => "gemm_bw",
            (GemmKernel::Rows4, true) => "gemm_rows4",
            (GemmKernel::Rows4, false) => "gemm_rows4_bw",
            (GemmKernel::Tiled, true) => "gemm_tiled",
            (GemmKernel::Tiled, false) => "gemm_tiled_bw",
        }
    }

    /// Which invocation writes which element of y (columns `[y_off, y_off + n)` of `m` rows of
    /// stride `ldy`), from each kernel's own indexing.
    fn write_map(self, y_off: usize, ldy: usize, n: usize, m: usize) -> WriteMap {
        match self {
            GemmKernel::PerOutput | GemmKernel::Rows4 => WriteMap::Grid {
                offset: y_off,
                ld: ldy,
                width: n,
                rows: m,
                cols_per_thread: 1,
                rows_per_thread: if self == GemmKernel::Rows4 { ROWS4 } else { 1 },
            },
            GemmKernel::Tiled => WriteMap::Tiled {
                offset: y_off,
                ld: ldy,
                width: n,
                rows: m,
                tile_m: TILE_M,
                tile_n: TILE_N,
                threads_x: TILED_THREADS.0,
                threads_y: TILED_THREADS.1,
            },
        }
    }

    /// The most loop back-edges one invocation takes at depth `k`: the per-output and four-row
    /// kernels step through k once; the tiled one, per slab of 16, stages its x and w shares
    /// (4 and 16 steps) and runs the slab's 16 steps.
    pub fn loop_count(self, k: usize) -> u64 {
        match self {
            GemmKernel::PerOutput | GemmKernel::Rows4 => k as u64 + 1,
            GemmKernel::Tiled => {
                let staging = (TILE_M + TILE_N) * TILE_K / (TILED_THREADS.0 * TILED_THREADS.1);
                k.div_ceil(TILE_K) as u64 * (TILE_K + staging + 3) as u64 + 1
            }
        }
    }

    /// Workgroups for `m` rows and `n` columns (one weight chunk).
    fn groups(self, m: usize, n: usize) -> Result<(u32, u32, u32), GpuError> {
        let (gx, gy) = match self {
            GemmKernel::PerOutput => (groups_for(n) as usize, m),
            GemmKernel::Rows4 => (groups_for(n) as usize, m.div_ceil(ROWS4)),
            GemmKernel::Tiled => (n.div_ceil(TILE_N), m.div_ceil(TILE_M)),
        };
        if gx > MAX_GROUPS as usize || gy > MAX_GROUPS as usize {
            return Err(guard(
                "gemm",
                format!("[{m}, {n}] needs {gx} x {gy} workgroups ({self:?})"),
            ));
        }
        Ok((gx as u32, gy as u32, 1))
    }
}

/// `shaders/gemm.wgsl`: uniform, x (read), w chunk (read), y (read-write).
pub static FAMILY: Family = Family {
    name: "gemm",
    source: include_str!("../../shaders/gemm.wgsl"),
    entries: &[
        "gemm",
        "gemm_bw",
        "gemm_rows4",
        "gemm_rows4_bw",
        "gemm_tiled",
        "gemm_tiled_bw",
    ],
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

/// `y[i, y_off + o] = x[i, ..] · w[w_row0 + o, ..]` for `o < n`, with `y` of row stride `ldy`,
/// on the entry point [`GemmKernel::for_gpu`] picks.
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
    let kernel = GemmKernel::for_gpu(xv.m, gpu);
    gemm_into_using(gpu, kernel, x, xv, w, w_row0, n, y, ldy, y_off, round_bf16)
}

/// [`gemm_into`] on a chosen entry point.
#[allow(clippy::too_many_arguments)] // operand views and offsets, as the kernel takes them
pub fn gemm_into_using(
    gpu: &mut Gpu,
    kernel: GemmKernel,
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
    // The row count alone must fit a dispatch (columns are checked per chunk below).
    kernel.groups(xv.m, 1)?;
    let entry = kernel.entry(w.low_halves);
    gpu.check_loops(&FAMILY, entry, kernel.loop_count(xv.k), || {
        format!("[{}, {}] x [{n}, {}]^T", xv.m, xv.k, xv.k)
    })?;
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
        let map = kernel.write_map(y_off + (lo - w_row0), ldy, hi - lo, xv.m);
        let flops = 2 * (xv.m * xv.k * (hi - lo)) as u64;
        gpu.dispatch_counted(
            &FAMILY,
            entry,
            &p,
            &[x, chunk, y],
            kernel.groups(xv.m, hi - lo)?,
            map,
            flops,
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
    use super::GemmKernel;

    /// The documented boundaries: per output up to 2 rows, four-row threads below a full tile
    /// (and always on a CPU adapter), tiles from 16 rows on a GPU.
    #[test]
    fn kernel_choice_by_rows_and_adapter() {
        for cpu in [false, true] {
            assert_eq!(GemmKernel::for_shape(1, cpu), GemmKernel::PerOutput);
            assert_eq!(GemmKernel::for_shape(2, cpu), GemmKernel::PerOutput);
            assert_eq!(GemmKernel::for_shape(3, cpu), GemmKernel::Rows4);
            assert_eq!(GemmKernel::for_shape(15, cpu), GemmKernel::Rows4);
        }
        assert_eq!(GemmKernel::for_shape(16, false), GemmKernel::Tiled);
        assert_eq!(GemmKernel::for_shape(16, true), GemmKernel::Rows4);
        assert_eq!(GemmKernel::for_shape(300, false), GemmKernel::Tiled);
    }

    #[test]
    fn naga_validates_gemm() {
        assert_eq!(super::super::exec::validate_family(&super::FAMILY), Ok(6));
    }
}
