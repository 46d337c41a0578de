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

/// RoPE frequencies `f_k` for `k < rope_dim/2`, with YaRN when `original_seq_len > 0`
/// (spec §11.2), in f32 as the reference builds them. The angle `pos · f_k` is formed in f32 and
/// its cos/sin taken on demand, so real `max_seq_len` costs no table memory.
#[derive(Debug, Clone)]
pub struct RopeTable {
    pub half: usize,
    pub freqs: Vec<f32>,
}

impl RopeTable {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rope_dim: usize,
        original_seq_len: usize,
        base: f64,
        factor: f64,
        beta_fast: f64,
        beta_slow: f64,
    ) -> RopeTable {
        let half = rope_dim / 2;
        let base32 = base as f32;
        let mut freqs: Vec<f32> = (0..half)
            .map(|k| {
                let e = (2 * k) as f32 / rope_dim as f32;
                1.0 / base32.powf(e)
            })
            .collect();
        if original_seq_len > 0 {
            let dim = rope_dim as f64;
            let corr = |rot: f64| {
                dim * (original_seq_len as f64 / (rot * 2.0 * std::f64::consts::PI)).ln()
                    / (2.0 * base.ln())
            };
            let low = corr(beta_fast).floor().max(0.0);
            let high = corr(beta_slow).ceil().min(dim - 1.0);
            let span = (high - low).max(1e-3) as f32;
            let factor32 = factor as f32;
            for (k, f) in freqs.iter_mut().enumerate() {
                let ramp = ((k as f32 - low as f32) / span).clamp(0.0, 1.0);
                let smooth = 1.0 - ramp;
                *f = *f / factor32 * (1.0 - smooth) + *f * smooth;
            }
        }
        RopeTable { half, freqs }
    }

    /// `(cos, sin)` of the f32 angle `pos · f_k`.
    #[inline]
    pub fn cis(&self, pos: usize, k: usize) -> (f32, f32) {
        let a = (pos as f32 * self.freqs[k]) as f64;
        (a.cos() as f32, a.sin() as f32)
    }

    /// Rotate the last `2·half` values of `v` by position `pos` (or its conjugate), rounding the
    /// real and imaginary parts to bf16.
    pub fn apply(&self, v: &mut [f32], pos: usize, inverse: bool) {
        let rd = 2 * self.half;
        let start = v.len() - rd;
        for k in 0..self.half {
            let (c, s0) = self.cis(pos, k);
            let s = if inverse { -s0 } else { s0 };
            let a = v[start + 2 * k];
            let b = v[start + 2 * k + 1];
            let re = a * c - b * s;
            let im = a * s + b * c;
            v[start + 2 * k] = bf16_round(re);
            v[start + 2 * k + 1] = bf16_round(im);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::excessive_precision)] // the spec's printed values
    fn yarn_frequencies_match_the_spec() {
        let t = RopeTable::new(8, 32, 40000.0, 2.0, 32.0, 1.0);
        let want = [1.0f32, 0.0353553407, 0.0024999999, 0.000176776681];
        for (g, w) in t.freqs.iter().zip(want) {
            assert!((g - w).abs() <= w * 1e-6, "{g} vs {w}");
        }
        let plain = RopeTable::new(8, 0, 10000.0, 2.0, 32.0, 1.0);
        for (g, w) in plain.freqs.iter().zip([1.0f32, 0.1, 0.01, 0.001]) {
            assert!((g - w).abs() <= w * 1e-6, "{g} vs {w}");
        }
    }

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
