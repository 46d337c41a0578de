//! aarch64 NEON microkernel: each output's four f64 lanes live in two 128-bit registers and
//! every update is one FMA whose product is exact, so it computes exactly `tile_portable`.

use super::{NR, PANEL_STEP};
use std::arch::aarch64::*;

/// Outputs per pass.
const G: usize = 2;

/// NEON tile: `R` rows against the panel, two outputs (16 accumulators) at a time.
///
/// # Safety
/// NEON must be present, and the pointers must cover the bounds `super::microkernel` checks:
/// `x` `(R - 1) * x_stride + 4 * steps` values, `wp` `steps * PANEL_STEP`, `lanes`
/// `R * PANEL_STEP`.
#[target_feature(enable = "neon")]
pub(super) unsafe fn neon<const R: usize>(
    x: *const f64,
    x_stride: usize,
    wp: *const f64,
    steps: usize,
    lanes: *mut f64,
) {
    // SAFETY (whole body): offsets stay inside the bounds the caller guarantees.
    unsafe {
        for g in (0..NR).step_by(G) {
            // c[r][q][h]: row r, output g + q, lanes 2h and 2h + 1.
            let mut c = [[[vdupq_n_f64(0.0); 2]; G]; R];
            for (r, row) in c.iter_mut().enumerate() {
                for (q, out) in row.iter_mut().enumerate() {
                    for (h, acc) in out.iter_mut().enumerate() {
                        *acc = vld1q_f64(lanes.add(r * PANEL_STEP + 4 * (g + q) + 2 * h));
                    }
                }
            }
            for s in 0..steps {
                let wb = wp.add(s * PANEL_STEP + 4 * g);
                let w: [[float64x2_t; 2]; G] = std::array::from_fn(|q| {
                    [vld1q_f64(wb.add(4 * q)), vld1q_f64(wb.add(4 * q + 2))]
                });
                for (r, row) in c.iter_mut().enumerate() {
                    let xb = x.add(r * x_stride + 4 * s);
                    let xv = [vld1q_f64(xb), vld1q_f64(xb.add(2))];
                    for (out, wq) in row.iter_mut().zip(&w) {
                        for h in 0..2 {
                            out[h] = vfmaq_f64(out[h], xv[h], wq[h]);
                        }
                    }
                }
            }
            for (r, row) in c.iter().enumerate() {
                for (q, out) in row.iter().enumerate() {
                    for (h, acc) in out.iter().enumerate() {
                        vst1q_f64(lanes.add(r * PANEL_STEP + 4 * (g + q) + 2 * h), *acc);
                    }
                }
            }
        }
    }
}
