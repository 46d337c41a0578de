//! Encoders: f32 values to GGML blocks, for the tiny-file writer. F16/BF16 round to nearest
//! even. Q8_0 and Q4_0 follow ggml's reference quantizers (`quantize_row_q8_0_ref`,
//! `quantize_row_q4_0_ref`: the same scale rule, rounding and clamping, so the blocks are
//! byte-identical to gguf-py's `gguf.quants.quantize`), and so does MXFP4 (gguf-py's rule). The K-quants and IQ2_XXS use simple
//! min/max (K) and exhaustive grid search (IQ2_XXS) quantizers written here: they produce valid
//! blocks that decode close to the input, not ggml's optimised (imatrix-free) choice of scales.

use super::super::error::{GgufError, Result};
use super::super::ggml_type::GgmlType;
use super::float::round_to_bf16;
use super::iq2xxs::{GRID_2BIT, GRID_LEVELS};
use half::f16;

/// Encodes `values` (a whole number of blocks) as type `ty`.
pub fn quantize(ty: GgmlType, values: &[f32]) -> Result<Vec<u8>> {
    let err = |problem: String| GgufError::Quant {
        ggml_type: ty.name(),
        problem,
    };
    let (block_values, block_bytes) = ty
        .block_layout()
        .ok_or_else(|| err("unknown block size".into()))?;
    if values.len() % block_values != 0 {
        return Err(err(format!(
            "{} values is not a multiple of the block size {block_values}",
            values.len()
        )));
    }
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(err(format!("value {i} is not finite")));
    }
    let mut out = Vec::with_capacity(values.len() / block_values * block_bytes);
    let block_fn: fn(&[f32], &mut Vec<u8>) = match ty {
        GgmlType::F32 => |x, o| x.iter().for_each(|v| o.extend(v.to_le_bytes())),
        GgmlType::F16 => |x, o| {
            x.iter()
                .for_each(|v| o.extend(f16::from_f32(*v).to_bits().to_le_bytes()))
        },
        GgmlType::Bf16 => |x, o| {
            x.iter()
                .for_each(|v| o.extend(((round_to_bf16(*v).to_bits() >> 16) as u16).to_le_bytes()))
        },
        GgmlType::Q8_0 => q8_0_block,
        GgmlType::Q4_0 => q4_0_block,
        GgmlType::Q2K => q2_k_block,
        GgmlType::Q3K => q3_k_block,
        GgmlType::Q4K => q4_k_block,
        GgmlType::Q5K => q5_k_block,
        GgmlType::Q6K => q6_k_block,
        GgmlType::Iq2Xxs => iq2_xxs_block,
        GgmlType::Mxfp4 => mxfp4_block,
        _ => return Err(err("no encoder for this type".into())),
    };
    for block in values.chunks_exact(block_values) {
        block_fn(block, &mut out);
    }
    debug_assert_eq!(out.len(), values.len() / block_values * block_bytes);
    Ok(out)
}

/// Whether [`quantize`] can encode `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::Bf16
            | GgmlType::Q8_0
            | GgmlType::Q4_0
            | GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::Iq2Xxs
            | GgmlType::Mxfp4
    )
}

/// f32 -> f16 (nearest even), and the value the f16 holds.
fn to_f16(x: f32) -> (u16, f32) {
    let h = f16::from_f32(x);
    (h.to_bits(), h.to_f32())
}

fn push_f16(out: &mut Vec<u8>, bits: u16) {
    out.extend(bits.to_le_bytes());
}

/// C `roundf`: halves away from zero.
fn round_away(x: f32) -> f32 {
    x.round()
}

/// `quantize_row_q8_0_ref`: d = amax/127, q = roundf(x/d).
fn q8_0_block(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    push_f16(out, to_f16(d).0);
    out.extend(x.iter().map(|v| round_away(v * id) as i8 as u8));
}

/// `quantize_row_q4_0_ref`: d = (the value of largest magnitude) / -8, q = min(15,
/// trunc(x/d + 8.5)); value j in the low nibble of byte j, value j+16 in its high nibble.
fn q4_0_block(x: &[f32], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    push_f16(out, to_f16(d).0);
    // (int8_t)(x + 8.5f): truncation toward zero; the value is at least 0.5 by construction.
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    for j in 0..16 {
        out.push(q(x[j]) | (q(x[j + 16]) << 4));
    }
}

/// Rounds `x / step` to the nearest integer in `lo..=hi` (0 when `step` is 0).
fn level(x: f32, step: f32, lo: i32, hi: i32) -> i32 {
    if step == 0.0 {
        return 0.clamp(lo, hi);
    }
    ((x / step).round() as i32).clamp(lo, hi)
}

/// Per-group affine parameters for `levels` quantization steps: (scale, min) with
/// `x ≈ scale·q − min`, `min ≥ 0`.
fn affine(group: &[f32], levels: f32) -> (f32, f32) {
    let lo = group.iter().fold(0f32, |a, &v| a.min(v));
    let hi = group.iter().fold(f32::MIN, |a, &v| a.max(v));
    ((hi - lo).max(0.0) / levels, -lo)
}

/// Super-block scale (stored as f16) for sub-scales up to `max_code`, and its decoded value.
fn super_scale(max_sub: f32, max_code: f32) -> (u16, f32) {
    to_f16(max_sub / max_code)
}

/// Q2_K: 16 groups of 16, 2-bit codes, 4-bit scale and min per group.
fn q2_k_block(x: &[f32], out: &mut Vec<u8>) {
    let params: Vec<(f32, f32)> = x.chunks_exact(16).map(|g| affine(g, 3.0)).collect();
    let (d_bits, d) = super_scale(params.iter().fold(0f32, |a, p| a.max(p.0)), 15.0);
    let (m_bits, dmin) = super_scale(params.iter().fold(0f32, |a, p| a.max(p.1)), 15.0);
    let mut scales = [0u8; 16];
    let mut qs = [0u8; 64];
    for (g, &(scale, min)) in params.iter().enumerate() {
        let sc = level(scale, d, 0, 15);
        let m = level(min, dmin, 0, 15);
        scales[g] = (sc | (m << 4)) as u8;
        let (step, offset) = (d * sc as f32, dmin * m as f32);
        for i in 0..16 {
            let e = g * 16 + i;
            let q = level(x[e] + offset, step, 0, 3) as u8;
            let (half, r) = (e / 128, e % 128);
            qs[32 * half + r % 32] |= q << (2 * (r / 32));
        }
    }
    out.extend(scales);
    out.extend(qs);
    push_f16(out, d_bits);
    push_f16(out, m_bits);
}

/// Q3_K: 16 groups of 16, codes −4..3 (2 low bits + a high-mask bit), 6-bit signed scales.
fn q3_k_block(x: &[f32], out: &mut Vec<u8>) {
    let sub: Vec<f32> = x
        .chunks_exact(16)
        .map(|g| {
            let vmax = g
                .iter()
                .fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
            vmax / -4.0
        })
        .collect();
    let (d_bits, d) = super_scale(sub.iter().fold(0f32, |a, s| a.max(s.abs())), 31.0);
    let mut hmask = [0u8; 32];
    let mut qs = [0u8; 64];
    let mut scales = [0u8; 12];
    for (g, &s) in sub.iter().enumerate() {
        let sc = level(s, d, -32, 31);
        let stored = (sc + 32) as u8;
        scales[g % 8] |= (stored & 15) << (4 * (g / 8));
        scales[8 + g % 4] |= (stored >> 4) << (2 * (g / 4));
        let step = d * sc as f32;
        for i in 0..16 {
            let e = g * 16 + i;
            let q = (level(x[e], step, -4, 3) + 4) as u8;
            let (half, r) = (e / 128, e % 128);
            let (byte, shift) = (r % 32, r / 32);
            qs[32 * half + byte] |= (q & 3) << (2 * shift);
            if q >= 4 {
                hmask[byte] |= 1 << (4 * half + shift);
            }
        }
    }
    out.extend(hmask);
    out.extend(qs);
    out.extend(scales);
    push_f16(out, d_bits);
}

/// The 12 scale bytes of Q4_K/Q5_K: eight 6-bit (scale, min) pairs (inverse of ggml's
/// `get_scale_min_k4`).
fn pack_k4_scales(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            q[j] |= sc[j] & 63;
            q[j + 4] |= m[j] & 63;
        } else {
            q[j + 4] = (sc[j] & 15) | ((m[j] & 15) << 4);
            q[j - 4] |= (sc[j] >> 4) << 6;
            q[j] |= (m[j] >> 4) << 6;
        }
    }
    q
}

/// Shared part of Q4_K and Q5_K: 8 groups of 32, `levels` steps, 6-bit scales and mins.
/// Returns (d bits, dmin bits, packed scales, codes).
fn k4_codes(x: &[f32], levels: i32) -> (u16, u16, [u8; 12], [u8; 256]) {
    let params: Vec<(f32, f32)> = x
        .chunks_exact(32)
        .map(|g| affine(g, levels as f32))
        .collect();
    let (d_bits, d) = super_scale(params.iter().fold(0f32, |a, p| a.max(p.0)), 63.0);
    let (m_bits, dmin) = super_scale(params.iter().fold(0f32, |a, p| a.max(p.1)), 63.0);
    let (mut sc, mut m) = ([0u8; 8], [0u8; 8]);
    let mut codes = [0u8; 256];
    for (g, &(scale, min)) in params.iter().enumerate() {
        sc[g] = level(scale, d, 0, 63) as u8;
        m[g] = level(min, dmin, 0, 63) as u8;
        let (step, offset) = (d * f32::from(sc[g]), dmin * f32::from(m[g]));
        for i in 0..32 {
            codes[g * 32 + i] = level(x[g * 32 + i] + offset, step, 0, levels) as u8;
        }
    }
    (d_bits, m_bits, pack_k4_scales(&sc, &m), codes)
}

/// Q4_K: per 64-value chunk, 32 bytes: group 2i in the low nibbles, group 2i+1 in the high.
fn q4_k_block(x: &[f32], out: &mut Vec<u8>) {
    let (d, dmin, scales, codes) = k4_codes(x, 15);
    push_f16(out, d);
    push_f16(out, dmin);
    out.extend(scales);
    for chunk in 0..4 {
        for l in 0..32 {
            out.push(codes[64 * chunk + l] | (codes[64 * chunk + 32 + l] << 4));
        }
    }
}

/// Q5_K: Q4_K's nibbles plus the fifth bit of each code in `qh` (bit 2i / 2i+1 of byte l).
fn q5_k_block(x: &[f32], out: &mut Vec<u8>) {
    let (d, dmin, scales, codes) = k4_codes(x, 31);
    push_f16(out, d);
    push_f16(out, dmin);
    out.extend(scales);
    let mut qh = [0u8; 32];
    let mut qs = [0u8; 128];
    for chunk in 0..4 {
        for l in 0..32 {
            let (lo, hi) = (codes[64 * chunk + l], codes[64 * chunk + 32 + l]);
            qs[32 * chunk + l] = (lo & 15) | ((hi & 15) << 4);
            qh[l] |= ((lo >> 4) << (2 * chunk)) | ((hi >> 4) << (2 * chunk + 1));
        }
    }
    out.extend(qh);
    out.extend(qs);
}

/// Q6_K: 16 groups of 16, codes −32..31 stored +32 in 6 bits, signed 8-bit scales.
fn q6_k_block(x: &[f32], out: &mut Vec<u8>) {
    let sub: Vec<f32> = x
        .chunks_exact(16)
        .map(|g| {
            let vmax = g
                .iter()
                .fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
            vmax / -32.0
        })
        .collect();
    let (d_bits, d) = super_scale(sub.iter().fold(0f32, |a, s| a.max(s.abs())), 127.0);
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    let mut scales = [0u8; 16];
    for (g, &s) in sub.iter().enumerate() {
        let sc = level(s, d, -128, 127);
        scales[g] = sc as i8 as u8;
        let step = d * sc as f32;
        for i in 0..16 {
            let e = g * 16 + i;
            let q = (level(x[e], step, -32, 31) + 32) as u8;
            let (n, r) = (e / 128, e % 128);
            let (k, l) = (r / 32, r % 32);
            let ql_at = 64 * n + l + if k % 2 == 1 { 32 } else { 0 };
            ql[ql_at] |= (q & 15) << if k >= 2 { 4 } else { 0 };
            qh[32 * n + l] |= (q >> 4) << (2 * k);
        }
    }
    out.extend(ql);
    out.extend(qh);
    out.extend(scales);
    push_f16(out, d_bits);
}

/// The IQ2_XXS grid transposed for the search: `levels[j][g]` is the magnitude of value `j` of
/// grid entry `g`, and `sq[g]` the sum of its squares.
struct GridTable {
    levels: [[f32; 256]; 8],
    sq: [f32; 256],
}

fn grid_table() -> &'static GridTable {
    static TABLE: std::sync::OnceLock<GridTable> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = GridTable {
            levels: [[0.0; 256]; 8],
            sq: [0.0; 256],
        };
        for (g, &entry) in GRID_2BIT.iter().enumerate() {
            for j in 0..8 {
                let v = GRID_LEVELS[((entry >> (2 * j)) & 3) as usize];
                t.levels[j][g] = v;
                t.sq[g] += v * v;
            }
        }
        t
    })
}

/// The grid entry (of 256) whose values times `db` are nearest `target` (least squares, lowest
/// index on ties), by exhaustive search: `Σ (db·L − t)²` differs between entries only by
/// `db·(db·ΣL² − 2·Σ L·t)`, so entries are ranked by `db·ΣL² − 2·Σ L·t` (one pass of 256-wide
/// multiply-adds per value, which vectorises; real-dims experts have hundreds of millions of
/// values).
fn nearest_grid_entry(db: f32, target: &[f32; 8]) -> usize {
    let t = grid_table();
    let mut score = [0f32; 256];
    for (g, s) in score.iter_mut().enumerate() {
        *s = db * t.sq[g];
    }
    for (j, &x) in target.iter().enumerate() {
        let x2 = 2.0 * x;
        for (s, &l) in score.iter_mut().zip(&t.levels[j]) {
            *s -= l * x2;
        }
    }
    let mut best = 0;
    for (g, &s) in score.iter().enumerate() {
        if s < score[best] {
            best = g;
        }
    }
    best
}

/// MXFP4 as gguf-py's `quantize` (and ggml's reference) does it: the shared exponent is
/// `floor(log2(amax)) − 2 + 127` (0 for an all-zero block), so the largest magnitude lands in
/// E2M1's top binade, and each value takes the first of the 16 codes with the least
/// `|d·k − x|` in f32 (`d` = 2^(e−128), codes doubled as in the decoder).
fn mxfp4_block(x: &[f32], out: &mut Vec<u8>) {
    use super::mxfp4::{e8m0_to_f32_half, KVALUES_DOUBLED};
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let e = if amax > 0.0 {
        // Finite inputs (checked by `quantize`) keep this within 0..=254 except for amax below
        // 2^-125, which clamps to the smallest exponent.
        (amax.log2().floor() as i32 - 2 + 127).clamp(0, 254) as u8
    } else {
        0
    };
    let d = e8m0_to_f32_half(e);
    let code = |v: f32| -> u8 {
        let mut best = (f32::INFINITY, 0u8);
        for (k, &q) in KVALUES_DOUBLED.iter().enumerate() {
            let err = (d * f32::from(q) - v).abs();
            if err < best.0 {
                best = (err, k as u8);
            }
        }
        best.1
    };
    out.push(e);
    for j in 0..16 {
        out.push(code(x[j]) | (code(x[j + 16]) << 4));
    }
}

/// IQ2_XXS: per 32-value group a 4-bit scale `ls` (`db = d·(0.5 + ls)/4`), and per 8 values
/// the grid entry (of 256) and even-parity sign pattern that fit best (exhaustive search).
fn iq2_xxs_block(x: &[f32], out: &mut Vec<u8>) {
    let max_level = GRID_LEVELS[2];
    let group_amax: Vec<f32> = x
        .chunks_exact(32)
        .map(|g| g.iter().fold(0f32, |a, v| a.max(v.abs())))
        .collect();
    // The largest group gets ls = 15: d·15.5/4·43 = amax.
    let top = group_amax.iter().fold(0f32, |a, &v| a.max(v));
    let (d_bits, d) = to_f16(top / max_level / (15.5 * 0.25));
    push_f16(out, d_bits);
    for (g, group) in x.chunks_exact(32).enumerate() {
        let ls = if d == 0.0 {
            0
        } else {
            ((group_amax[g] / max_level / (d * 0.25) - 0.5).round() as i32).clamp(0, 15) as u32
        };
        let db = d * (0.5 + ls as f32) * 0.25;
        let mut grid_bytes = [0u8; 4];
        let mut aux = ls << 28;
        for (k, eight) in group.chunks_exact(8).enumerate() {
            let mut signs: u32 = 0;
            for (j, &v) in eight.iter().enumerate() {
                if v < 0.0 {
                    signs |= 1 << j;
                }
            }
            if signs.count_ones() % 2 == 1 {
                // Even parity is required: flip the sign of the smallest magnitude.
                let j = (0..8)
                    .min_by(|&a, &b| eight[a].abs().total_cmp(&eight[b].abs()))
                    .unwrap_or(0);
                signs ^= 1 << j;
            }
            let mut target = [0f32; 8];
            for (j, t) in target.iter_mut().enumerate() {
                *t = if signs & (1 << j) != 0 {
                    -eight[j]
                } else {
                    eight[j]
                };
            }
            grid_bytes[k] = nearest_grid_entry(db, &target) as u8;
            aux |= (signs & 0x7f) << (7 * k);
        }
        out.extend(grid_bytes);
        out.extend(aux.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::super::dequantize;
    use super::*;

    /// Deterministic test values in [-1, 1) with a few outliers.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|i| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
                if i % 97 == 0 {
                    u * 4.0
                } else {
                    u
                }
            })
            .collect()
    }

    /// Worst error relative to the block's largest magnitude each encoder must stay within:
    /// one half step of the type's grid plus the rounding of 4/6-bit sub-scales (generous).
    const REL_ERR: [(GgmlType, f32); 12] = [
        (GgmlType::F32, 0.0),
        (GgmlType::F16, 1e-3),
        (GgmlType::Bf16, 4e-3),
        (GgmlType::Q8_0, 0.01),
        (GgmlType::Q4_0, 0.07),
        (GgmlType::Q6K, 0.04),
        (GgmlType::Q5K, 0.08),
        (GgmlType::Q4K, 0.15),
        (GgmlType::Q3K, 0.3),
        (GgmlType::Q2K, 0.6),
        (GgmlType::Iq2Xxs, 1.0),
        // E2M1 steps are 1/6 of the top code; with the exponent rule above the block's largest
        // magnitude sits at most at 8/6 of the top code's value: half a step of 2 in units of
        // d is d, at most 1/4 of amax.
        (GgmlType::Mxfp4, 0.25),
    ];

    #[test]
    fn every_encoder_round_trips_within_its_step() {
        let x = values(512, 7);
        for (ty, rel) in REL_ERR {
            let bytes = quantize(ty, &x).unwrap();
            let (bv, bb) = ty.block_layout().unwrap();
            assert_eq!(bytes.len(), x.len() / bv * bb, "{ty}");
            let mut back = vec![0f32; x.len()];
            dequantize(ty, &bytes, &mut back).unwrap();
            for (blk, (a, b)) in x.chunks(256).zip(back.chunks(256)).enumerate() {
                let amax = a.iter().fold(0f32, |m, v| m.max(v.abs()));
                let worst = a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
                assert!(
                    worst <= rel * amax,
                    "{ty} block {blk}: worst {worst} > {rel} x {amax}"
                );
            }
            if ty != GgmlType::F32 {
                assert!(can_quantize(ty));
            }
        }
    }

    #[test]
    fn q8_0_and_q4_0_follow_the_reference_rule() {
        // Hand values: amax 2.54 -> d = 0.02; 1.0 -> q = 50.
        let mut x = [0f32; 32];
        x[0] = 2.54;
        x[1] = 1.0;
        x[2] = -0.01; // -0.5 rounds away from zero to -1
        let b = quantize(GgmlType::Q8_0, &x).unwrap();
        let d = f16::from_f32(2.54 / 127.0);
        assert_eq!(b[0..2], d.to_bits().to_le_bytes());
        assert_eq!((b[2] as i8, b[3] as i8, b[4] as i8), (127, 50, -1));
        // Q4_0: the largest magnitude -4 gives d = 0.5, codes x/d + 8.
        let mut y = [0f32; 32];
        y[0] = -4.0;
        y[16] = 3.0;
        y[1] = 0.75; // 1.5 + 8.5 = 10 -> 10
        let b = quantize(GgmlType::Q4_0, &y).unwrap();
        assert_eq!(b[2] & 15, 0); // -4 -> 0
        assert_eq!(b[2] >> 4, 14); // 3/0.5 + 8.5 = 14.5 -> 14
        assert_eq!(b[3] & 15, 10);
        assert_eq!(b[4] & 15, 8); // zero -> 8
    }

    #[test]
    fn refuses_partial_blocks_and_non_finite_values() {
        assert!(quantize(GgmlType::Q8_0, &[0.0; 31]).is_err());
        assert!(quantize(GgmlType::Q4K, &[0.0; 32]).is_err());
        assert!(quantize(GgmlType::F32, &[f32::NAN]).is_err());
        assert!(quantize(GgmlType::Iq4Xs, &[0.0; 256]).is_err());
        assert_eq!(
            quantize(GgmlType::Mxfp4, &[0.0; 32]).unwrap(),
            vec![0u8; 17]
        );
        assert_eq!(quantize(GgmlType::Q2K, &[0.0; 256]).unwrap().len(), 84);
    }
}
