//! x86-64 microkernels. Both compute exactly `tile_portable`: each output's four f64 lanes live
//! in one 256-bit register (AVX2) or in one half of a 512-bit register (AVX-512), and every
//! update is one FMA whose product is exact (see the `gemm` module docs).

use super::{NR, PANEL_STEP};
use std::arch::x86_64::*;

/// Registers per row: two outputs each.
const Z: usize = NR / 2;

/// AVX-512 tile: `R` rows against a 12-output panel, 24 accumulators in registers.
///
/// # Safety
/// AVX-512F must be present, and the pointers must cover the bounds `super::microkernel`
/// checks: `x` `(R - 1) * x_stride + 4 * steps` values, `wp` `steps * PANEL_STEP`, `lanes`
/// `R * PANEL_STEP`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn avx512<const R: usize>(
    x: *const f64,
    x_stride: usize,
    wp: *const f64,
    steps: usize,
    lanes: *mut f64,
) {
    // SAFETY (whole body): offsets stay inside the bounds the caller guarantees.
    unsafe {
        let mut c = [[_mm512_setzero_pd(); Z]; R];
        for (r, row) in c.iter_mut().enumerate() {
            for (z, acc) in row.iter_mut().enumerate() {
                *acc = _mm512_loadu_pd(lanes.add(r * PANEL_STEP + 8 * z));
            }
        }
        for s in 0..steps {
            let wb = wp.add(s * PANEL_STEP);
            let w: [__m512d; Z] = std::array::from_fn(|z| _mm512_loadu_pd(wb.add(8 * z)));
            for (r, row) in c.iter_mut().enumerate() {
                // The row's four values for this step, in both halves.
                let xv = _mm512_broadcast_f64x4(_mm256_loadu_pd(x.add(r * x_stride + 4 * s)));
                for (acc, wz) in row.iter_mut().zip(&w) {
                    *acc = _mm512_fmadd_pd(xv, *wz, *acc);
                }
            }
        }
        for (r, row) in c.iter().enumerate() {
            for (z, acc) in row.iter().enumerate() {
                _mm512_storeu_pd(lanes.add(r * PANEL_STEP + 8 * z), *acc);
            }
        }
    }
}

/// Outputs per AVX2 pass.
const G: usize = 3;

/// AVX2 + FMA tile: `R` rows against the panel, three outputs (12 accumulators) at a time.
///
/// # Safety
/// AVX2 and FMA must be present; the bounds are those of [`avx512`].
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn avx2<const R: usize>(
    x: *const f64,
    x_stride: usize,
    wp: *const f64,
    steps: usize,
    lanes: *mut f64,
) {
    // SAFETY (whole body): offsets stay inside the bounds the caller guarantees.
    unsafe {
        for g in (0..NR).step_by(G) {
            let mut c = [[_mm256_setzero_pd(); G]; R];
            for (r, row) in c.iter_mut().enumerate() {
                for (q, acc) in row.iter_mut().enumerate() {
                    *acc = _mm256_loadu_pd(lanes.add(r * PANEL_STEP + 4 * (g + q)));
                }
            }
            for s in 0..steps {
                let wb = wp.add(s * PANEL_STEP + 4 * g);
                let w: [__m256d; G] = std::array::from_fn(|q| _mm256_loadu_pd(wb.add(4 * q)));
                for (r, row) in c.iter_mut().enumerate() {
                    let xv = _mm256_loadu_pd(x.add(r * x_stride + 4 * s));
                    for (acc, wq) in row.iter_mut().zip(&w) {
                        *acc = _mm256_fmadd_pd(xv, *wq, *acc);
                    }
                }
            }
            for (r, row) in c.iter().enumerate() {
                for (q, acc) in row.iter().enumerate() {
                    _mm256_storeu_pd(lanes.add(r * PANEL_STEP + 4 * (g + q)), *acc);
                }
            }
        }
    }
}

/// Packs one weight row into its panel slot (`wp[s][q][j] = f64(src[4s + j])`), four values per
/// conversion. The caller (`pack_row`) checked `q < NR`, `src.len() >= 4 * steps` and
/// `wp.len() >= steps * PANEL_STEP`, and that AVX2 is present.
pub(super) fn pack_row_avx2(src: &[f32], wp: &mut [f64], q: usize, steps: usize) {
    let (sp, dp) = (src.as_ptr(), wp.as_mut_ptr());
    // SAFETY: AVX2 was detected by the caller; the offsets `4s + 3` (< 4·steps ≤ src.len()) and
    // `s·PANEL_STEP + 4q + 3` (< steps·PANEL_STEP ≤ wp.len()) are in bounds.
    unsafe { pack_avx2(sp, dp, q, steps) }
}

#[target_feature(enable = "avx2")]
unsafe fn pack_avx2(src: *const f32, wp: *mut f64, q: usize, steps: usize) {
    // SAFETY (whole body): offsets as documented by `pack_row_avx2`.
    unsafe {
        for s in 0..steps {
            if s % 4 == 0 {
                // The same row's next chunk (a pack reads 12 rows a chunk at a time, too many
                // interleaved streams for the hardware prefetcher). A prefetch never faults, so
                // the address may run past the row; it is formed without `add`'s bounds rule.
                let ahead = src.wrapping_add(4 * s + super::KC);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
            }
            let v = _mm_loadu_ps(src.add(4 * s));
            _mm256_storeu_pd(wp.add(s * PANEL_STEP + 4 * q), _mm256_cvtps_pd(v));
        }
    }
}

/// The register-only FMA loop behind `roofline::fma_peak_gflops`: `PEAK_CHAINS` independent
/// accumulators, `iters` FMAs each, at 512 bits (`wide`) or 256, in f64 or f32.
pub(super) fn peak(wide: bool, f64_lanes: bool, iters: u64) -> f64 {
    let path = if wide {
        super::KernelPath::Avx512
    } else {
        super::KernelPath::Avx2
    };
    assert!(path.is_supported());
    // SAFETY: the path's features were detected just above; the kernels touch no memory.
    unsafe {
        match (wide, f64_lanes) {
            (true, true) => peak_512_pd(iters),
            (true, false) => peak_512_ps(iters),
            (false, true) => peak_256_pd(iters),
            (false, false) => peak_256_ps(iters),
        }
    }
}

use super::roofline::PEAK_CHAINS as CHAINS;

macro_rules! peak_kernel {
    ($name:ident, $feat:literal, $set1:ident, $fma:ident, $store:ident, $ty:ty, $lanes:expr, $b:expr, $c:expr) => {
        #[target_feature(enable = $feat)]
        unsafe fn $name(iters: u64) -> f64 {
            let b = $set1(std::hint::black_box($b));
            let c = $set1(std::hint::black_box($c));
            let mut a = [$set1(1.0); CHAINS];
            for _ in 0..iters {
                for v in a.iter_mut() {
                    *v = $fma(*v, b, c);
                }
            }
            let mut sum = 0f64;
            for v in a {
                let mut out = [0 as $ty; $lanes];
                // SAFETY: `out` holds exactly one register's lanes.
                unsafe { $store(out.as_mut_ptr(), v) };
                sum += out.iter().map(|&x| x as f64).sum::<f64>();
            }
            sum
        }
    };
}

peak_kernel!(
    peak_512_pd,
    "avx512f",
    _mm512_set1_pd,
    _mm512_fmadd_pd,
    _mm512_storeu_pd,
    f64,
    8,
    0.999_999,
    1e-6
);
peak_kernel!(
    peak_512_ps,
    "avx512f",
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_storeu_ps,
    f32,
    16,
    0.999_9,
    1e-4
);
peak_kernel!(
    peak_256_pd,
    "avx2,fma",
    _mm256_set1_pd,
    _mm256_fmadd_pd,
    _mm256_storeu_pd,
    f64,
    4,
    0.999_999,
    1e-6
);
peak_kernel!(
    peak_256_ps,
    "avx2,fma",
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_storeu_ps,
    f32,
    8,
    0.999_9,
    1e-4
);
