//! RoPE with YaRN (spec §11.2): the frequency tables both backends rotate with. The oracle
//! applies them on the host; the GPU path builds its per-call (cos, sin) table from the same
//! [`RopeTable::cis`], so the two agree to the bit on every angle.

use super::ModelConfig;
use crate::num::bf16_round;

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

/// The two tables a V4.1 model rotates with: plain RoPE (`rope_theta`, no YaRN) on the
/// uncompressed layers, YaRN (`compress_rope_theta`, `original_seq_len`) on the compressed ones.
#[derive(Debug, Clone)]
pub struct RopeTables {
    pub plain: RopeTable,
    pub yarn: RopeTable,
}

impl RopeTables {
    /// Both tables of `cfg`.
    pub fn new(cfg: &ModelConfig) -> RopeTables {
        RopeTables {
            plain: RopeTable::new(
                cfg.rope_head_dim,
                0,
                cfg.rope_theta,
                cfg.rope_factor,
                cfg.beta_fast,
                cfg.beta_slow,
            ),
            yarn: RopeTable::new(
                cfg.rope_head_dim,
                cfg.original_seq_len,
                cfg.compress_rope_theta,
                cfg.rope_factor,
                cfg.beta_fast,
                cfg.beta_slow,
            ),
        }
    }

    /// The table layer `l` rotates with: YaRN where the layer compresses (ratio > 0).
    pub fn for_layer(&self, cfg: &ModelConfig, l: usize) -> &RopeTable {
        if cfg.compress_ratios.get(l).is_some_and(|&r| r > 0) {
            &self.yarn
        } else {
            &self.plain
        }
    }
}

/// The position of compressed row `j` of a chunk at `start_pos` with compression ratio `r`
/// (spec §12.2): a prefill's rows sit at the first position of their group (`j · r`); a decode
/// step completes at most one group, whose first position is `start_pos + 1 - r`.
pub fn compressed_row_pos(start_pos: usize, r: usize, j: usize) -> usize {
    if start_pos == 0 {
        j * r
    } else {
        (start_pos + 1).saturating_sub(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec prints its YaRN frequencies to 9 significant digits; a relative 1e-6 is their
    /// last printed digit, well above one f32 ulp (6e-8) of our own computation.
    const SPEC_PRINTED_REL: f32 = 1e-6;

    #[test]
    #[allow(clippy::excessive_precision)] // the spec's printed values
    fn yarn_frequencies_match_the_spec() {
        let t = RopeTable::new(8, 32, 40000.0, 2.0, 32.0, 1.0);
        let want = [1.0f32, 0.0353553407, 0.0024999999, 0.000176776681];
        for (g, w) in t.freqs.iter().zip(want) {
            assert!((g - w).abs() <= w * SPEC_PRINTED_REL, "{g} vs {w}");
        }
        let plain = RopeTable::new(8, 0, 10000.0, 2.0, 32.0, 1.0);
        for (g, w) in plain.freqs.iter().zip([1.0f32, 0.1, 0.01, 0.001]) {
            assert!((g - w).abs() <= w * SPEC_PRINTED_REL, "{g} vs {w}");
        }
    }

    #[test]
    fn compressed_layers_rotate_with_yarn() {
        // V4.1-Flash: layers 0-1 are uncompressed, 2.. compress.
        let cfg = ModelConfig::deepseek_v41_flash();
        let t = RopeTables::new(&cfg);
        assert_eq!(t.for_layer(&cfg, 0).freqs, t.plain.freqs);
        assert_eq!(t.for_layer(&cfg, 2).freqs, t.yarn.freqs);
        assert_ne!(t.plain.freqs, t.yarn.freqs);
    }

    #[test]
    fn compressed_rows_sit_at_their_groups_first_position() {
        assert_eq!(compressed_row_pos(0, 4, 3), 12);
        assert_eq!(compressed_row_pos(11, 4, 0), 8);
        assert_eq!(compressed_row_pos(127, 128, 0), 0);
    }
}
