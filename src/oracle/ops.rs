//! Tensor kernels of the oracle, each with the reference's rounding points (spec §6, §19.2).
//! Activations are row-major f32 slices; bf16 tensors hold bf16-representable values.
//! GEMMs run in `super::gemm` (blocked SIMD kernels, rayon over output blocks), each element
//! reduced in the one order [`dot_f64`] defines, so the bits depend on neither the kernel path
//! nor the thread count.

use crate::num::bf16_round;

/// Exact-as-possible dot product: f64 accumulation in four fixed lanes (products of an f32 and a
/// bf16/f32 value are exact or nearly so in f64), then one rounding to f32.
#[inline]
pub fn dot_f64(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        acc[0] += x[0] as f64 * y[0] as f64;
        acc[1] += x[1] as f64 * y[1] as f64;
        acc[2] += x[2] as f64 * y[2] as f64;
        acc[3] += x[3] as f64 * y[3] as f64;
    }
    let mut tail = 0f64;
    for (x, y) in ta.iter().zip(tb) {
        tail += *x as f64 * *y as f64;
    }
    (((acc[0] + acc[1]) + (acc[2] + acc[3])) + tail) as f32
}

/// `y[m, n] = x[m, k] · w[n, k]^T` with f32 output (GEMM-f32).
pub fn gemm_f32(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
    gemm(x, m, k, w, n, false)
}

/// `y = bf16(x · w^T)`: bf16 operands, wide accumulation, one bf16 rounding (GEMM-bf16).
pub fn gemm_bf16(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
    gemm(x, m, k, w, n, true)
}

fn gemm(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, round: bool) -> Vec<f32> {
    super::gemm::gemm(x, m, k, super::gemm::WeightRows::F32(w), n, round)
}

/// Mean of squares of an f32 row, as torch's `x.square().mean(-1)` up to summation order.
pub fn mean_sq(x: &[f32]) -> f32 {
    let s: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    (s / x.len().max(1) as f64) as f32
}

/// `1/sqrt(v)` in f32 (torch's vectorised rsqrt is a true divide by a correctly rounded sqrt).
#[inline]
pub fn rsqrt(v: f32) -> f32 {
    1.0 / v.sqrt()
}

/// RMSNorm over rows of width `w.len()`: `bf16(w · (x · rsqrt(mean(x²) + eps)))`.
pub fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let d = w.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(d) {
        let r = rsqrt(mean_sq(row) + eps);
        out.extend(row.iter().zip(w).map(|(&v, &g)| bf16_round(g * (v * r))));
    }
    out
}

/// f32 sigmoid as torch computes it: `1 / (1 + exp(-x))`.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// SiLU: `x / (1 + exp(-x))`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// torch softplus (β = 1, threshold 20).
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// In-place f32 softmax of one row (max-subtracted, multiplied by the reciprocal of the sum).
pub fn softmax_in_place(row: &mut [f32]) {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        row.iter_mut().for_each(|v| *v = f32::NAN);
        return;
    }
    let mut sum = 0f32;
    for v in row.iter_mut() {
        *v = (*v - m).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    row.iter_mut().for_each(|v| *v *= inv);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_bits_do_not_depend_on_thread_count() {
        let (m, k, n) = (7, 300, 190);
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| bf16_round(((i * 53 % 97) as f32 - 48.0) / 29.0))
            .collect();
        let pool1 = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool");
        let pool2 = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        let a = pool1.install(|| gemm_bf16(&x, m, k, &w, n));
        let b = pool2.install(|| gemm_bf16(&x, m, k, &w, n));
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}
