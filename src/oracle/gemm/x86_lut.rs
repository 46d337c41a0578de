//! AVX-512 kernels over a prepared [`LutTile`]: each step's eight weights of a pair of rows
//! (four of each, the layout of a packed panel's step) come from one permute of the pair's
//! group tables by the step's code bytes, and go straight into the FMAs (or, for more input
//! rows than registers allow, into the packed panel).

use super::lut::{LutKind, LutTile, PAIRS, STEPS};
use super::{MR, PANEL_STEP};
use std::arch::x86_64::*;

/// The four (Q2_K), two or four table registers of pair `z` for group `g`.
///
/// # Safety
/// AVX-512F must be present and `tabs` must hold the tile's `NR` rows of `tab_stride` values.
#[inline(always)]
unsafe fn tables<const L: usize>(
    tabs: *const f64,
    stride: usize,
    z: usize,
    g: usize,
) -> [__m512d; 4] {
    // SAFETY (whole body): rows 2z and 2z + 1 hold group g's L entries at g·L.
    unsafe {
        let a = tabs.add(2 * z * stride + g * L);
        let b = tabs.add((2 * z + 1) * stride + g * L);
        let zero = _mm512_setzero_pd();
        match L {
            4 => [
                _mm512_insertf64x4::<1>(
                    _mm512_castpd256_pd512(_mm256_loadu_pd(a)),
                    _mm256_loadu_pd(b),
                ),
                zero,
                zero,
                zero,
            ],
            8 => [_mm512_loadu_pd(a), _mm512_loadu_pd(b), zero, zero],
            _ => [
                _mm512_loadu_pd(a),
                _mm512_loadu_pd(a.add(8)),
                _mm512_loadu_pd(b),
                _mm512_loadu_pd(b.add(8)),
            ],
        }
    }
}

/// The pair's eight weights at the step whose code bytes are at `codes`.
///
/// # Safety
/// AVX-512F must be present and `codes` must hold eight bytes.
#[inline(always)]
unsafe fn weights<const L: usize>(codes: *const u8, t: &[__m512d; 4]) -> __m512d {
    // SAFETY: eight readable bytes.
    let idx = unsafe { _mm512_cvtepu8_epi64(_mm_loadl_epi64(codes.cast())) };
    match L {
        // Codes 0..4 index the first row's table, 4..8 (offset at preparation) the second's.
        4 => _mm512_permutexvar_pd(idx, t[0]),
        // Bit 3 of a code picks the second row's table.
        8 => _mm512_permutex2var_pd(t[0], idx, t[1]),
        // Each row's sixteen entries for every lane, then each half from its own row.
        _ => _mm512_mask_blend_pd(
            0xf0,
            _mm512_permutex2var_pd(t[0], idx, t[1]),
            _mm512_permutex2var_pd(t[2], idx, t[3]),
        ),
    }
}

/// `R` input rows against the tile's `NR` rows for `steps` steps, weights looked up in
/// registers: the FMAs of `super::x86::avx512` over the packed panel of the same weights, in
/// the same order per lane (groups, then pairs, then the group's steps: each accumulator still
/// sees its steps in increasing order).
///
/// # Safety
/// AVX-512F must be present; `x` must hold `(R − 1)·x_stride + 4·steps` values, `lanes`
/// `R·PANEL_STEP`; `steps` must be a whole number of groups, at most `STEPS`.
#[target_feature(enable = "avx512f")]
unsafe fn fused<const R: usize, const L: usize, const G: usize>(
    tile: &LutTile,
    x: *const f64,
    x_stride: usize,
    steps: usize,
    lanes: *mut f64,
) {
    let per_group = G / 4;
    let stride = tile.kind.tab_stride();
    let (codes, tabs) = (tile.codes.as_ptr(), tile.tabs.as_ptr());
    // SAFETY (whole body): offsets stay inside the bounds the caller guarantees and the tile's
    // own (PAIRS × STEPS × 8 codes, NR × stride table values).
    unsafe {
        let mut c = [[_mm512_setzero_pd(); PAIRS]; R];
        for (r, row) in c.iter_mut().enumerate() {
            for (z, acc) in row.iter_mut().enumerate() {
                *acc = _mm512_loadu_pd(lanes.add(r * PANEL_STEP + 8 * z));
            }
        }
        for g in 0..steps / per_group {
            for z in 0..PAIRS {
                let t = tables::<L>(tabs, stride, z, g);
                for s in g * per_group..(g + 1) * per_group {
                    let w = weights::<L>(codes.add((z * STEPS + s) * 8), &t);
                    for (r, row) in c.iter_mut().enumerate() {
                        let xv =
                            _mm512_broadcast_f64x4(_mm256_loadu_pd(x.add(r * x_stride + 4 * s)));
                        row[z] = _mm512_fmadd_pd(xv, w, row[z]);
                    }
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

/// Writes the tile's packed panel for `steps` steps.
///
/// # Safety
/// As [`fused`], with `wp` holding `steps·PANEL_STEP` values.
#[target_feature(enable = "avx512f")]
unsafe fn expand_kernel<const L: usize, const G: usize>(
    tile: &LutTile,
    wp: *mut f64,
    steps: usize,
) {
    let per_group = G / 4;
    let stride = tile.kind.tab_stride();
    let (codes, tabs) = (tile.codes.as_ptr(), tile.tabs.as_ptr());
    // SAFETY (whole body): as in `fused`.
    unsafe {
        for g in 0..steps / per_group {
            for z in 0..PAIRS {
                let t = tables::<L>(tabs, stride, z, g);
                for s in g * per_group..(g + 1) * per_group {
                    let w = weights::<L>(codes.add((z * STEPS + s) * 8), &t);
                    _mm512_storeu_pd(wp.add(s * PANEL_STEP + 8 * z), w);
                }
            }
        }
    }
}

/// `dst` = `a` and `b` interleaved four bytes at a time, for lengths that are whole multiples
/// of 64 (`dst` twice as long as `a` and `b`).
///
/// # Safety
/// AVX-512F must be present.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn interleave64(dst: &mut [u8], a: &[u8], b: &[u8]) {
    assert!(a.len() == b.len() && dst.len() == 2 * a.len() && a.len() % 64 == 0);
    let lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    let hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    for ((d, x), y) in dst
        .chunks_exact_mut(128)
        .zip(a.chunks_exact(64))
        .zip(b.chunks_exact(64))
    {
        // SAFETY: 64 readable bytes in `x` and `y`, 128 writable in `d`.
        unsafe {
            let (va, vb) = (
                _mm512_loadu_si512(x.as_ptr().cast()),
                _mm512_loadu_si512(y.as_ptr().cast()),
            );
            _mm512_storeu_si512(d.as_mut_ptr().cast(), _mm512_permutex2var_epi32(va, lo, vb));
            _mm512_storeu_si512(
                d.as_mut_ptr().add(64).cast(),
                _mm512_permutex2var_epi32(va, hi, vb),
            );
        }
    }
}

/// Checks a chunk's step count against the tile.
fn check_steps(tile: &LutTile, steps: usize) {
    assert!(
        steps <= STEPS && (4 * steps) % tile.kind.group() == 0,
        "{steps} steps is not whole groups of a chunk"
    );
    assert!(
        super::KernelPath::Avx512.is_supported(),
        "kernel path avx512 not supported"
    );
}

/// [`LutTile::expand`] on AVX-512.
pub(super) fn expand(tile: &LutTile, wp: &mut [f64], steps: usize) {
    check_steps(tile, steps);
    assert!(wp.len() >= steps * PANEL_STEP, "panel too short");
    let p = wp.as_mut_ptr();
    // SAFETY: AVX-512F was detected and the bounds were checked just above.
    unsafe {
        match tile.kind {
            LutKind::Q2K => expand_kernel::<4, 16>(tile, p, steps),
            LutKind::Q3K => expand_kernel::<8, 16>(tile, p, steps),
            LutKind::Iq2Xxs => expand_kernel::<8, 32>(tile, p, steps),
            LutKind::Q4K | LutKind::Mxfp4 => expand_kernel::<16, 32>(tile, p, steps),
        }
    }
}

/// `lanes[r][q][j] += Σ_s x[r][4s + j] · w[q][4s + j]` for `mr ≤ MR` rows over the tile.
pub(super) fn fused_rows(
    tile: &LutTile,
    mr: usize,
    (x, x_stride): (&[f64], usize),
    steps: usize,
    lanes: &mut [f64],
) {
    check_steps(tile, steps);
    assert!(
        (1..=MR).contains(&mr)
            && x.len() >= (mr - 1) * x_stride + 4 * steps
            && lanes.len() >= mr * PANEL_STEP,
        "fused kernel operands too short"
    );
    let (xp, lp) = (x.as_ptr(), lanes.as_mut_ptr());
    macro_rules! by_rows {
        ($l:literal, $g:literal) => {
            // SAFETY: AVX-512F was detected and every bound was checked just above.
            unsafe {
                match mr {
                    1 => fused::<1, $l, $g>(tile, xp, x_stride, steps, lp),
                    2 => fused::<2, $l, $g>(tile, xp, x_stride, steps, lp),
                    3 => fused::<3, $l, $g>(tile, xp, x_stride, steps, lp),
                    _ => fused::<MR, $l, $g>(tile, xp, x_stride, steps, lp),
                }
            }
        };
    }
    match tile.kind {
        LutKind::Q2K => by_rows!(4, 16),
        LutKind::Q3K => by_rows!(8, 16),
        LutKind::Iq2Xxs => by_rows!(8, 32),
        LutKind::Q4K | LutKind::Mxfp4 => by_rows!(16, 32),
    }
}
