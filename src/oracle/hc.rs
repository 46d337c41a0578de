//! Hyper-connections (spec §10): the per-token mixes with Sinkhorn, `hc_pre` and `hc_post`.

use super::ops::{dot_f64, mean_sq, rsqrt, sigmoid, softmax_in_place};
use crate::num::bf16_round;

/// The three coefficient sets of one `hc_mixes` call for `s` tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Mixes {
    /// `[s, hc]`
    pub pre: Vec<f32>,
    /// `[s, hc]`
    pub post: Vec<f32>,
    /// `[s, hc, hc]`, `[j residual][k output]`
    pub comb: Vec<f32>,
}

/// `hc_mixes(h, fn, scale, base)` for a stream `h` of `[s, hc, d]` (spec §10.1).
#[allow(clippy::too_many_arguments)] // the reference's operands and constants
pub fn hc_mixes(
    h: &[f32],
    hc: usize,
    d: usize,
    fn_w: &[f32],
    scale: &[f32],
    base: &[f32],
    norm_eps: f32,
    hc_eps: f32,
    iters: usize,
) -> Mixes {
    let width = hc * d;
    let n_mix = (2 + hc) * hc;
    let s = h.len() / width;
    let mut pre = Vec::with_capacity(s * hc);
    let mut post = Vec::with_capacity(s * hc);
    let mut comb = Vec::with_capacity(s * hc * hc);
    for t in 0..s {
        let x = &h[t * width..(t + 1) * width];
        let r = rsqrt(mean_sq(x) + norm_eps);
        let m: Vec<f32> = (0..n_mix)
            .map(|o| dot_f64(x, &fn_w[o * width..(o + 1) * width]) * r)
            .collect();
        for c in 0..hc {
            pre.push(sigmoid(m[c] * scale[0] + base[c]) + hc_eps);
        }
        for c in 0..hc {
            post.push(2.0 * sigmoid(m[hc + c] * scale[1] + base[hc + c]));
        }
        let mut cm: Vec<f32> = (0..hc * hc)
            .map(|i| m[2 * hc + i] * scale[2] + base[2 * hc + i])
            .collect();
        for row in cm.chunks_mut(hc) {
            softmax_in_place(row);
            row.iter_mut().for_each(|v| *v += hc_eps);
        }
        col_normalise(&mut cm, hc, hc_eps);
        for _ in 1..iters {
            row_normalise(&mut cm, hc, hc_eps);
            col_normalise(&mut cm, hc, hc_eps);
        }
        comb.extend_from_slice(&cm);
    }
    Mixes { pre, post, comb }
}

fn row_normalise(c: &mut [f32], hc: usize, eps: f32) {
    for row in c.chunks_mut(hc) {
        let s = row.iter().fold(0f32, |a, &v| a + v) + eps;
        row.iter_mut().for_each(|v| *v /= s);
    }
}

fn col_normalise(c: &mut [f32], hc: usize, eps: f32) {
    for k in 0..hc {
        let mut s = 0f32;
        for j in 0..hc {
            s += c[j * hc + k];
        }
        let s = s + eps;
        for j in 0..hc {
            c[j * hc + k] /= s;
        }
    }
}

/// `hc_pre(h, pre) = bf16(Σ_c pre[c] · h[c])` for `h` of `[s, hc, d]`, giving `[s, d]`.
pub fn hc_pre(h: &[f32], pre: &[f32], hc: usize, d: usize) -> Vec<f32> {
    let s = h.len() / (hc * d);
    let mut out = Vec::with_capacity(s * d);
    for t in 0..s {
        for i in 0..d {
            let mut acc = 0f32;
            for c in 0..hc {
                acc += pre[t * hc + c] * h[(t * hc + c) * d + i];
            }
            out.push(bf16_round(acc));
        }
    }
    out
}

/// `hc_post(x, res, post, comb)[k][d] = bf16(post[k]·x[d] + Σ_j comb[j][k]·res[j][d])`.
pub fn hc_post(
    x: &[f32],
    res: &[f32],
    post: &[f32],
    comb: &[f32],
    hc: usize,
    d: usize,
) -> Vec<f32> {
    let s = x.len() / d;
    let mut out = vec![0f32; s * hc * d];
    for t in 0..s {
        for k in 0..hc {
            for i in 0..d {
                let mut acc = 0f32;
                for j in 0..hc {
                    acc += comb[(t * hc + j) * hc + k] * res[(t * hc + j) * d + i];
                }
                out[(t * hc + k) * d + i] = bf16_round(post[t * hc + k] * x[t * d + i] + acc);
            }
        }
    }
    out
}
