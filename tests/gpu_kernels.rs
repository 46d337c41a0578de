//! Per-kernel conformance of the wgpu path against the oracle's own functions, on small random
//! inputs with ragged tails (sizes that are not multiples of the workgroup or of 4). A test that
//! needs an adapter skips with a notice when none is found, and fails under `CI=true`.
#![cfg(feature = "gpu")]

use golden_lens::gpu::attn as gattn;
use golden_lens::gpu::compress::{self as gcomp, Causal};
use golden_lens::gpu::gemm::{gemm_into, gemm_into_using, linear, GemmKernel, XView};
use golden_lens::gpu::hc as ghc;
use golden_lens::gpu::loops::LLVMPIPE_LOOP_CAP;
use golden_lens::gpu::quant::{quant, QuantMode};
use golden_lens::gpu::rope::{rope, Positions};
use golden_lens::gpu::rows;
use golden_lens::gpu::{engram as geng, moe as gmoe, test_context, Gpu, GpuError};
use golden_lens::model::rope::RopeTable;
use golden_lens::model::sparse::{select_candidate_blocks, window_idxs};
use golden_lens::model::{ModelConfig, ScoreFunc};
use golden_lens::num::{
    act_quant_fp8_block32, bf16_round, bf16_ulp_distance, fp4_e4m3_block16_round_trip,
    fp4_e8m0_block32_round_trip, splitmix64, torch_cpu_topk_set,
};
use golden_lens::oracle::attn::{pool, sparse_attn};
use golden_lens::oracle::ops::{gemm_bf16, gemm_f32, mean_sq, rmsnorm, rsqrt, sigmoid};
use golden_lens::oracle::{hc, moe};

/// f32 chains through WGSL `exp`/`sqrt` (not correctly rounded): the Atlas `F32_TOL` bar.
const F32_CHAIN_TOL: f32 = 1e-4;
/// bf16 outputs behind a WGSL transcendental (sigmoid, exp) may move one bf16 ulp.
const BF16_TRANSCENDENTAL_ULPS: u64 = 1;
/// Sinkhorn's last iteration normalises columns, so each column of `comb` sums to 1 up to the f32
/// rounding of its `hc` terms and of the WGSL `exp` before it: the same Atlas `F32_TOL` bar.
const SINKHORN_COLUMN_SUM_TOL: f32 = F32_CHAIN_TOL;
/// At real dims the kernel's 16384-long f32 reductions differ from the oracle's f64 ones only in
/// rounding order: a tenth of `F32_TOL`, so a regression that eats the headroom shows here before
/// it shows as an Atlas-bar failure on a real block.
const HC_MIXES_REAL_DIMS_TOL: f32 = F32_CHAIN_TOL / 10.0;
/// The tests' norm epsilon: tiny, so the rsqrt of the mean square (not eps) decides the bits.
const NORM_EPS: f32 = 1e-20;
/// The hyper-connection constants of the tiny goldens (`hc_eps`, Sinkhorn iterations).
const HC_EPS: f32 = 1e-6;
const SINKHORN_ITERS: usize = 20;

fn gpu(test: &str) -> Option<Gpu> {
    test_context(test).map(Gpu::new)
}

/// Deterministic values in [-amp, amp), rounded to bf16 when `bf16`.
fn rand(seed: u64, n: usize, amp: f32, bf16: bool) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let r = splitmix64(seed.wrapping_mul(0x9E37_79B9).wrapping_add(i as u64));
            let v = ((r >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amp;
            if bf16 {
                bf16_round(v)
            } else {
                v
            }
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn max_ulps(a: &[f32], b: &[f32]) -> u64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| bf16_ulp_distance(*x, *y))
        .max()
        .unwrap_or(0)
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn gemm_bf16_and_f32_match_the_oracle_bit_for_bit_with_ragged_tails() {
    let Some(mut g) = gpu("gemm") else { return };
    for &(m, k, n) in &[(3usize, 37usize, 67usize), (1, 320, 5), (13, 64, 130)] {
        let x = rand(1, m * k, 2.0, true);
        let w = rand(2, n * k, 0.3, true);
        let wf = rand(3, n * k, 0.3, false);
        let xt = g.upload("x", &x).unwrap();
        let wt = g.upload_weight("w", &w, n, k).unwrap();
        let wft = g.upload_weight("wf", &wf, n, k).unwrap();
        let yb = linear(&mut g, &xt, m, &wt, true).unwrap();
        let yf = linear(&mut g, &xt, m, &wft, false).unwrap();
        assert_eq!(
            bits(&g.read_all(&yb).unwrap()),
            bits(&gemm_bf16(&x, m, k, &w, n)),
            "bf16 {m}x{k}x{n}"
        );
        assert_eq!(
            bits(&g.read_all(&yf).unwrap()),
            bits(&gemm_f32(&x, m, k, &wf, n)),
            "f32 {m}x{k}x{n}"
        );
    }
}

/// Every GEMM kernel, forced, on shapes around the tiled kernel's 16 x 64 x 16 tiles and the
/// four-row kernel's row groups (one short of, exactly on and one past each boundary, and the
/// m = 1 GEMV shape), with bf16 and f32 operands on either side, and for bf16 weights both the
/// entry points without low-half products and (flag forced) the full ones: every output is the
/// oracle's bits.
#[test]
fn gemm_entry_points_match_the_oracle_bit_for_bit_across_tile_boundaries() {
    let Some(mut g) = gpu("gemm_tiles") else {
        return;
    };
    let shapes: &[(usize, usize, usize)] = &[
        (1, 16, 64),
        (1, 17, 65),
        (2, 1, 1),
        (15, 15, 63),
        (16, 16, 64),
        (17, 17, 65),
        (12, 64, 130),
        (33, 47, 129),
        (5, 320, 200),
        (3, 33, 70),
        (7, 18, 9),
    ];
    let mut seed = 100;
    for &(m, k, n) in shapes {
        for (x_bf16, w_bf16) in [(true, true), (true, false), (false, true), (false, false)] {
            seed += 3;
            let x = rand(seed, m * k, 2.0, x_bf16);
            let w = rand(seed + 1, n * k, 0.3, w_bf16);
            let xt = g.upload("x", &x).unwrap();
            let wt = g.upload_weight("w", &w, n, k).unwrap();
            assert_eq!(wt.low_halves, !w_bf16);
            let mut forced = wt.clone();
            forced.low_halves = true;
            for round in [true, false] {
                let want = if round {
                    gemm_bf16(&x, m, k, &w, n)
                } else {
                    gemm_f32(&x, m, k, &w, n)
                };
                for kernel in [GemmKernel::PerOutput, GemmKernel::Rows4, GemmKernel::Tiled] {
                    for weight in [&wt, &forced] {
                        let y = g.zeros("y", m * n).unwrap();
                        gemm_into_using(
                            &mut g,
                            kernel,
                            &xt,
                            XView::dense(m, k),
                            weight,
                            0,
                            n,
                            &y,
                            n,
                            0,
                            round,
                        )
                        .unwrap();
                        assert_eq!(
                            bits(&g.read_all(&y).unwrap()),
                            bits(&want),
                            "{kernel:?} {m}x{k}x{n} x_bf16={x_bf16} w_bf16={w_bf16} \
                             round={round} low_halves={}",
                            weight.low_halves
                        );
                    }
                }
            }
        }
    }
}

/// Every kernel on a strided x view (row stride and column offset), a y block at a row
/// stride and column offset, and a weight row range that starts inside one chunk and ends inside
/// another (chunks of 37 rows, not a multiple of the tile): the block gets the oracle's bits and
/// every other value of y keeps its sentinel.
#[test]
fn gemm_kernels_honour_strided_views_offsets_and_weight_chunks() {
    let Some(mut g) = gpu("gemm_tiled_views") else {
        return;
    };
    let (m, k, ldx, x_off) = (19, 41, 100, 23);
    let (rows, w_row0, n) = (230, 29, 150);
    let (ldy, y_off) = (170, 11);
    let xbuf = rand(201, m * ldx, 1.5, true);
    let w = rand(202, rows * k, 0.4, false);
    let xt = g.upload("x", &xbuf).unwrap();
    g.max_chunk_bytes = (37 * k * 4) as u64;
    let wt = g.upload_weight("w", &w, rows, k).unwrap();
    assert_eq!(wt.chunks.len(), 7);
    let sentinel = -7.25f32;
    let y = g.upload("y", &vec![sentinel; m * ldy]).unwrap();
    let xv = XView { m, k, ldx, x_off };
    for kernel in [GemmKernel::Tiled, GemmKernel::Rows4, GemmKernel::PerOutput] {
        gemm_into_using(
            &mut g, kernel, &xt, xv, &wt, w_row0, n, &y, ldy, y_off, true,
        )
        .unwrap();
        let got = g.read_all(&y).unwrap();
        let dense: Vec<f32> = (0..m)
            .flat_map(|i| xbuf[i * ldx + x_off..i * ldx + x_off + k].to_vec())
            .collect();
        let want = gemm_bf16(&dense, m, k, &w[w_row0 * k..(w_row0 + n) * k], n);
        for i in 0..m {
            for c in 0..ldy {
                let v = got[i * ldy + c];
                if (y_off..y_off + n).contains(&c) {
                    assert_eq!(
                        v.to_bits(),
                        want[i * n + c - y_off].to_bits(),
                        "{kernel:?} y[{i}, {c}]"
                    );
                } else {
                    assert_eq!(v, sentinel, "{kernel:?} y[{i}, {c}] outside the block");
                }
            }
        }
    }
}

/// Weights with low halves (f32 values, infinities) are flagged at upload; bf16 ones are not.
#[test]
fn weight_upload_flags_low_halves() {
    let Some(g) = gpu("gemm_low_halves") else {
        return;
    };
    let subnormal = f32::from_bits(0x0002_0000);
    let bf = g
        .upload_weight("bf", &[1.0, -0.5, -0.0, subnormal], 2, 2)
        .unwrap();
    assert!(!bf.low_halves);
    let f = g.upload_weight("f", &[1.0, 0.1, 0.0, 2.0], 2, 2).unwrap();
    assert!(f.low_halves);
    let inf = g.upload_weight("inf", &[1.0, f32::INFINITY], 1, 2).unwrap();
    assert!(inf.low_halves);
}

#[test]
fn chunked_weights_give_the_same_bits_as_one_binding() {
    let Some(mut g) = gpu("gemm_chunked") else {
        return;
    };
    let (m, k, n) = (4, 33, 101);
    let x = rand(4, m * k, 1.0, true);
    let w = rand(5, n * k, 0.5, true);
    let xt = g.upload("x", &x).unwrap();
    // 10 rows per chunk: 11 chunks, the last one ragged.
    g.max_chunk_bytes = (10 * k * 4) as u64;
    let wt = g.upload_weight("w", &w, n, k).unwrap();
    assert_eq!(wt.chunks.len(), 11);
    let y = linear(&mut g, &xt, m, &wt, true).unwrap();
    assert_eq!(
        bits(&g.read_all(&y).unwrap()),
        bits(&gemm_bf16(&x, m, k, &w, n))
    );
    // A row range across chunk boundaries (the grouped projection's slices).
    let out = g.zeros("y", m * 25).unwrap();
    gemm_into(
        &mut g,
        &xt,
        XView::dense(m, k),
        &wt,
        37,
        25,
        &out,
        25,
        0,
        true,
    )
    .unwrap();
    let want = gemm_bf16(&x, m, k, &w[37 * k..62 * k], 25);
    assert_eq!(bits(&g.read_all(&out).unwrap()), bits(&want));
}

#[test]
fn grouped_output_projection_matches_the_oracle_loop() {
    let Some(mut g) = gpu("grouped_projection") else {
        return;
    };
    let (s, groups, gd, olr) = (3, 2, 64, 16);
    let o = rand(6, s * groups * gd, 1.0, true);
    let wo_a = rand(7, groups * olr * gd, 0.2, true);
    let ot = g.upload("o", &o).unwrap();
    let wt = g.upload_weight("wo_a", &wo_a, groups * olr, gd).unwrap();
    let u = g.zeros("u", s * groups * olr).unwrap();
    for gi in 0..groups {
        let xv = XView {
            m: s,
            k: gd,
            ldx: groups * gd,
            x_off: gi * gd,
        };
        gemm_into(
            &mut g,
            &ot,
            xv,
            &wt,
            gi * olr,
            olr,
            &u,
            groups * olr,
            gi * olr,
            true,
        )
        .unwrap();
    }
    let mut want = vec![0f32; s * groups * olr];
    for t in 0..s {
        for gi in 0..groups {
            let ov = &o[t * groups * gd + gi * gd..t * groups * gd + (gi + 1) * gd];
            for r in 0..olr {
                let row = &wo_a[(gi * olr + r) * gd..(gi * olr + r + 1) * gd];
                want[(t * groups + gi) * olr + r] = gemm_bf16(ov, 1, gd, row, 1)[0];
            }
        }
    }
    assert_eq!(bits(&g.read_all(&u).unwrap()), bits(&want));
}

#[test]
fn rmsnorm_matches_the_oracle() {
    let Some(mut g) = gpu("rmsnorm") else { return };
    let (rows_n, w) = (5, 67);
    let x = rand(8, rows_n * w, 3.0, true);
    let wt = rand(9, w, 1.5, true);
    let xt = g.upload("x", &x).unwrap();
    let wg = g.upload("w", &wt).unwrap();
    let y = rows::rmsnorm(&mut g, &xt, rows_n, &wg, NORM_EPS).unwrap();
    assert_eq!(
        bits(&g.read_all(&y).unwrap()),
        bits(&rmsnorm(&x, &wt, NORM_EPS))
    );
}

#[test]
fn rope_and_its_inverse_match_the_oracle() {
    let Some(mut g) = gpu("rope") else { return };
    let yarn = RopeTable::new(8, 32, 40000.0, 2.0, 32.0, 1.0);
    let plain = RopeTable::new(8, 0, 10000.0, 2.0, 32.0, 1.0);
    for (table, inverse) in [
        (&yarn, false),
        (&yarn, true),
        (&plain, false),
        (&plain, true),
    ] {
        let (s, heads, hd, sp) = (5, 3, 32, 7);
        let x = rand(10, s * heads * hd, 2.0, true);
        let t = g.upload("x", &x).unwrap();
        let pos = Positions {
            first: sp,
            step: 1,
            rows_per_pos: heads,
        };
        rope(&mut g, table, &t, s * heads, hd, pos, inverse).unwrap();
        let mut want = x.clone();
        for tt in 0..s {
            for h in 0..heads {
                let b = (tt * heads + h) * hd;
                table.apply(&mut want[b..b + hd], sp + tt, inverse);
            }
        }
        assert_eq!(
            bits(&g.read_all(&t).unwrap()),
            bits(&want),
            "inverse {inverse}"
        );
    }
}

#[test]
fn quantiser_round_trips_match_the_oracle_including_ties() {
    let Some(mut g) = gpu("quant") else { return };
    let mut x = rand(11, 32 * 7, 4.0, true);
    // Tie and edge values: e2m1 midpoints, zeros, an amax exactly at a power of two.
    for (i, v) in [0.25f32, 0.75, 2.5, 5.0, -1.25, 0.0, -0.0, 448.0, 6.0, 1e-30]
        .iter()
        .enumerate()
    {
        x[i * 3] = *v;
    }
    type RoundTrip = fn(&mut [f32]);
    let cases: [(QuantMode, RoundTrip); 3] = [
        (QuantMode::Fp8Block32, act_quant_fp8_block32),
        (QuantMode::Fp4E8m0Block32, fp4_e8m0_block32_round_trip),
        (QuantMode::Fp4E4m3Block16, fp4_e4m3_block16_round_trip),
    ];
    for (mode, reference) in cases {
        let t = g.upload("x", &x).unwrap();
        quant(&mut g, &t, mode).unwrap();
        let mut want = x.clone();
        reference(&mut want);
        assert_eq!(bits(&g.read_all(&t).unwrap()), bits(&want), "{mode:?}");
    }
}

/// `hc_mixes` on the GPU and in the oracle on the same inputs: the uploaded stream, the GPU's
/// `[pre | post | comb]` values and the oracle's mixes.
#[allow(clippy::too_many_arguments)] // the kernel's operands
fn mixes_on_both(
    g: &mut Gpu,
    h: &[f32],
    s: usize,
    hcm: usize,
    d: usize,
    fnw: &[f32],
    scale: &[f32],
    base: &[f32],
) -> (golden_lens::gpu::Tensor, Vec<f32>, hc::Mixes) {
    let mix = (2 + hcm) * hcm;
    let ht = g.upload("h", h).unwrap();
    let fnt = g.upload_weight("fn", fnw, mix, hcm * d).unwrap();
    let sbt = g.upload("sb", &[scale, base].concat()).unwrap();
    let c = ghc::MixConsts {
        norm_eps: NORM_EPS,
        hc_eps: HC_EPS,
        iters: SINKHORN_ITERS,
    };
    let m = ghc::hc_mixes(g, &ht, s, hcm, d, &fnt, &sbt, c).unwrap();
    let got = g.read_all(&m.t).unwrap();
    let want = hc::hc_mixes(
        h,
        hcm,
        d,
        fnw,
        scale,
        base,
        NORM_EPS,
        HC_EPS,
        SINKHORN_ITERS,
    );
    (ht, got, want)
}

#[test]
fn hc_mixes_pre_and_post_match_the_oracle() {
    let Some(mut g) = gpu("hc") else { return };
    let (s, hcm, d) = (3, 4, 64);
    let mix = (2 + hcm) * hcm;
    let h = rand(12, s * hcm * d, 2.0, true);
    let fnw = rand(13, mix * hcm * d, 0.05, false);
    let scale = rand(14, 3, 1.0, false);
    let base = rand(15, mix, 1.0, false);
    let (ht, got, want) = mixes_on_both(&mut g, &h, s, hcm, d, &fnw, &scale, &base);
    assert!(max_abs(&got[..s * hcm], &want.pre) <= F32_CHAIN_TOL);
    assert!(max_abs(&got[s * hcm..2 * s * hcm], &want.post) <= F32_CHAIN_TOL);
    assert!(max_abs(&got[2 * s * hcm..], &want.comb) <= F32_CHAIN_TOL);
    // Sinkhorn: columns sum to ~1 (the last step is a column normalisation).
    for t in 0..s {
        for k in 0..hcm {
            let col: f32 = (0..hcm)
                .map(|j| got[2 * s * hcm + (t * hcm + j) * hcm + k])
                .sum();
            assert!(
                (col - 1.0).abs() < SINKHORN_COLUMN_SUM_TOL,
                "column sum {col}"
            );
        }
    }
    // hc_pre / hc_post on the oracle's own coefficients: bit-exact.
    let coef: Vec<f32> = [want.pre.clone(), want.post.clone(), want.comb.clone()].concat();
    let ct = g.upload("coef", &coef).unwrap();
    let pre = ghc::hc_pre(&mut g, &ht, &ct, 0, s, hcm, d).unwrap();
    assert_eq!(
        bits(&g.read_all(&pre).unwrap()),
        bits(&hc::hc_pre(&h, &want.pre, hcm, d))
    );
    let x = rand(16, s * d, 1.0, true);
    let xt = g.upload("x", &x).unwrap();
    let mixes = ghc::Mixes { t: ct, s, hc: hcm };
    let post = ghc::hc_post(&mut g, &xt, &ht, &mixes, d).unwrap();
    assert_eq!(
        bits(&g.read_all(&post).unwrap()),
        bits(&hc::hc_post(&x, &h, &want.post, &want.comb, hcm, d))
    );
}

/// `hc_mixes` at V4.1-Flash dims (hc = 4, d = 4096: 16384-long reductions), on the same inputs
/// for both sides, with the filler's weight scales (fn ±1/16, scale 1 ± 0.05, base ±0.1): the
/// kernel itself stays far inside `F32_TOL`. (The real-dims block example's ffn_pre/post/comb
/// misses come from their input h1, which inherits the attention output's bf16-ulp flips.)
#[test]
fn hc_mixes_at_real_dims_match_the_oracle_on_identical_inputs() {
    let Some(mut g) = gpu("hc_real_dims") else {
        return;
    };
    let (s, hcm, d) = (3, 4, 4096);
    let mix = (2 + hcm) * hcm;
    let h = rand(31, s * hcm * d, 1.0, true);
    let fnw = rand(32, mix * hcm * d, 0.0625, false);
    let scale: Vec<f32> = rand(33, 3, 0.05, false).iter().map(|v| 1.0 + v).collect();
    let base = rand(34, mix, 0.1, false);
    let (_, got, want) = mixes_on_both(&mut g, &h, s, hcm, d, &fnw, &scale, &base);
    let errs = [
        max_abs(&got[..s * hcm], &want.pre),
        max_abs(&got[s * hcm..2 * s * hcm], &want.post),
        max_abs(&got[2 * s * hcm..], &want.comb),
    ];
    eprintln!("hc_mixes real dims: max |gpu - oracle| pre/post/comb = {errs:?}");
    for e in errs {
        assert!(e <= HC_MIXES_REAL_DIMS_TOL, "{errs:?}");
    }
}

#[test]
fn engram_dequant_and_gate_match_the_reference_formulas() {
    let Some(mut g) = gpu("engram") else { return };
    let (rows_n, width) = (7, 32);
    let table: Vec<f32> = rand(17, rows_n * width, 400.0, false)
        .into_iter()
        .map(|v| {
            golden_lens::num::e4m3_decode(golden_lens::num::e4m3_encode(v.clamp(-448.0, 448.0)))
        })
        .collect();
    let scales: Vec<f32> = (0..rows_n).map(|i| 2f32.powi(i as i32 - 9)).collect();
    let tt = g.upload("rows", &table).unwrap();
    let st = g.upload("scales", &scales).unwrap();
    let emb = geng::engram_embed(&mut g, &tt, &st, rows_n, width).unwrap();
    let want: Vec<f32> = table
        .iter()
        .enumerate()
        .map(|(i, v)| bf16_round(v * scales[i / width]))
        .collect();
    assert_eq!(bits(&g.read_all(&emb).unwrap()), bits(&want));
    let (s, hcm, d) = (3, 4, 64);
    let h = rand(18, s * hcm * d, 2.0, true);
    let kv = rand(19, s * (hcm + 1) * d, 1.0, true);
    let qw = rand(20, hcm * d, 1.0, true);
    let kw = rand(21, hcm * d, 1.0, true);
    let up = |n: &str, v: &[f32], g: &Gpu| g.upload(n, v).unwrap();
    let (ht, kvt, qt, kt) = (
        up("h", &h, &g),
        up("kv", &kv, &g),
        up("q", &qw, &g),
        up("k", &kw, &g),
    );
    let out = geng::engram_gate(&mut g, &ht, &kvt, &qt, &kt, s, hcm, d, NORM_EPS).unwrap();
    let got = g.read_all(&out).unwrap();
    // The oracle's gate (spec §9), restated with the oracle's own ops.
    let kv_w = (hcm + 1) * d;
    let mut want = vec![0f32; s * hcm * d];
    for t in 0..s {
        let value = &kv[t * kv_w + hcm * d..(t + 1) * kv_w];
        for c in 0..hcm {
            let hrow = &h[(t * hcm + c) * d..(t * hcm + c + 1) * d];
            let key = &kv[t * kv_w + c * d..t * kv_w + (c + 1) * d];
            let rstd = rsqrt(mean_sq(hrow) + NORM_EPS) * rsqrt(mean_sq(key) + NORM_EPS);
            let acc: f64 = (0..d)
                .map(|i| (hrow[i] * (qw[c * d + i] * kw[c * d + i]) * key[i]) as f64)
                .sum();
            let dot = (acc as f32) * rstd * (d as f32).powf(-0.5);
            let gate = sigmoid(dot.abs().max(1e-6).sqrt().copysign(dot));
            for i in 0..d {
                want[(t * hcm + c) * d + i] = bf16_round(hrow[i] + gate * value[i]);
            }
        }
    }
    assert!(max_ulps(&got, &want) <= BF16_TRANSCENDENTAL_ULPS);
}

#[test]
fn window_ring_and_index_rows_match_the_oracle() {
    let Some(mut g) = gpu("window") else { return };
    let (win, hd) = (8, 32);
    let ring = g.zeros("ring", win * hd).unwrap();
    let kv = rand(22, 12 * hd, 1.0, true);
    let kvt = g.upload("kv", &kv).unwrap();
    gattn::ring_write(&mut g, &kvt, &ring, 12, 0, win, hd).unwrap();
    let r = g.read_all(&ring).unwrap();
    for p in 4..12 {
        assert_eq!(
            &r[(p % win) * hd..(p % win + 1) * hd],
            &kv[p * hd..(p + 1) * hd],
            "token {p}"
        );
    }
    let one = rand(23, hd, 1.0, true);
    let ot = g.upload("kv1", &one).unwrap();
    gattn::ring_write(&mut g, &ot, &ring, 1, 13, win, hd).unwrap();
    assert_eq!(&g.read_all(&ring).unwrap()[5 * hd..6 * hd], &one[..]);
    for &(s, sp) in &[(12usize, 0usize), (3, 0), (1, 12), (1, 13), (1, 3)] {
        let (ww, want) = window_idxs(win, s, sp);
        let w = ww + 2;
        let idx = g.zeros("idx", s * w).unwrap();
        gattn::window_idx(&mut g, &idx, s, sp, win, ww, w, false).unwrap();
        let cidx: Vec<f32> = (0..s * 2).map(|i| 100.0 + i as f32).collect();
        let ct = g.upload("cidx", &cidx).unwrap();
        gattn::idx_concat(&mut g, &ct, &idx, s, ww, 2).unwrap();
        let got = g.read_all(&idx).unwrap();
        for t in 0..s {
            let wrow: Vec<i64> = got[t * w..t * w + ww].iter().map(|&v| v as i64).collect();
            let want_row = if sp == 0 {
                &want[t * ww..(t + 1) * ww]
            } else {
                &want[..]
            };
            assert_eq!(wrow, want_row, "s {s} sp {sp} t {t}");
            assert_eq!(&got[t * w + ww..(t + 1) * w], &cidx[t * 2..t * 2 + 2]);
        }
    }
}

#[test]
fn compressor_pooling_matches_the_oracle() {
    let Some(mut g) = gpu("pool") else { return };
    let (groups, r, hd) = (5, 2, 32);
    let kv = rand(24, groups * r * hd, 2.0, false);
    let score = rand(25, groups * r * hd, 3.0, false);
    let (kt, st) = (
        g.upload("kv", &kv).unwrap(),
        g.upload("score", &score).unwrap(),
    );
    let out = gcomp::pool(&mut g, &kt, &st, groups, r, hd).unwrap();
    let want: Vec<f32> = pool(&kv, &score, r, hd)
        .into_iter()
        .map(bf16_round)
        .collect();
    assert!(max_ulps(&g.read_all(&out).unwrap(), &want) <= BF16_TRANSCENDENTAL_ULPS);
}

#[test]
fn indexer_scores_match_the_reference_stages() {
    let Some(mut g) = gpu("index_scores") else {
        return;
    };
    let (s, t_vis, ih, ihd, r) = (5, 7, 2, 32, 1);
    let q = rand(26, s * ih * ihd, 2.0, true);
    let keys = rand(27, t_vis * ihd, 2.0, true);
    let w = rand(28, s * ih, 0.5, true);
    let (qt, kt, wt) = (
        g.upload("q", &q).unwrap(),
        g.upload("k", &keys).unwrap(),
        g.upload("w", &w).unwrap(),
    );
    let sc = gcomp::index_scores(
        &mut g,
        &qt,
        &kt,
        &wt,
        s,
        t_vis,
        ih,
        ihd,
        Causal { prefill: true, r },
    )
    .unwrap();
    let got = g.read_all(&sc).unwrap();
    for t in 0..s {
        for p in 0..t_vis {
            let mut acc = 0f64;
            for h in 0..ih {
                let dot = gemm_bf16(
                    &q[(t * ih + h) * ihd..(t * ih + h + 1) * ihd],
                    1,
                    ihd,
                    &keys[p * ihd..(p + 1) * ihd],
                    1,
                )[0];
                acc += bf16_round(dot.max(0.0) * w[t * ih + h]) as f64;
            }
            let want = if p >= (t + 1) / r {
                f32::NEG_INFINITY
            } else {
                bf16_round(acc as f32)
            };
            assert_eq!(got[t * t_vis + p].to_bits(), want.to_bits(), "t {t} p {p}");
        }
    }
}

#[test]
fn topk_and_candidate_blocks_agree_with_torch_without_ties_and_follow_the_gpu_rule_with_them() {
    let Some(mut g) = gpu("topk") else { return };
    let (s, t_vis, k, offset) = (4, 13, 6, 8);
    let score = rand(29, s * t_vis, 4.0, false);
    let st = g.upload("score", &score).unwrap();
    let decode = Causal {
        prefill: false,
        r: 1,
    };
    let got_t = gcomp::topk(&mut g, &st, s, t_vis, k, offset, decode).unwrap();
    let got = g.read_all(&got_t).unwrap();
    for t in 0..s {
        let mut set = torch_cpu_topk_set(&score[t * t_vis..(t + 1) * t_vis], k);
        set.sort_unstable();
        let want: Vec<f32> = set.iter().map(|&p| (p + offset) as f32).collect();
        assert_eq!(&got[t * k..(t + 1) * k], &want[..], "row {t}");
    }
    let clen = vec![t_vis; s];
    let mask_t = gcomp::candidate_blocks(&mut g, &st, s, t_vis, decode, 3, 2).unwrap();
    let mask = g.read_all(&mask_t).unwrap();
    let want = select_candidate_blocks(&score, t_vis, &clen, 3, 2);
    assert_eq!(mask.iter().map(|&v| v != 0.0).collect::<Vec<_>>(), want);
    // Ties (spec §12.6 example 1): torch picks {0,1,7,8,9,11}; the GPU rule takes equal values
    // by lower index: {0,1,7} then the -inf ties 2,3,4.
    let ninf = f32::NEG_INFINITY;
    let row = [
        1.0, 1.0, ninf, ninf, ninf, ninf, ninf, 1.0, ninf, ninf, ninf, ninf,
    ];
    let rt = g.upload("row", &row).unwrap();
    let got_t = gcomp::topk(&mut g, &rt, 1, 12, 6, 0, decode).unwrap();
    let got = g.read_all(&got_t).unwrap();
    assert_eq!(got, vec![0.0, 1.0, 2.0, 3.0, 4.0, 7.0]);
}

#[test]
fn sparse_attention_with_sinks_matches_the_oracle() {
    let Some(mut g) = gpu("sparse_attn") else {
        return;
    };
    let (s, nh, hd, n_rows, w) = (5, 4, 32, 11, 9);
    let q = rand(30, s * nh * hd, 1.0, true);
    let kv = rand(31, n_rows * hd, 1.0, true);
    let sink = rand(32, nh, 1.0, false);
    let idx: Vec<i64> = (0..s * w)
        .map(|i| {
            if i % 4 == 3 {
                -1
            } else {
                (splitmix64(i as u64) % n_rows as u64) as i64
            }
        })
        .collect();
    let idx_f: Vec<f32> = idx.iter().map(|&v| v as f32).collect();
    let up = |n: &str, v: &[f32], g: &Gpu| g.upload(n, v).unwrap();
    let (qt, kt, st, it) = (
        up("q", &q, &g),
        up("kv", &kv, &g),
        up("sink", &sink, &g),
        up("idx", &idx_f, &g),
    );
    let scale = (hd as f32).powf(-0.5);
    let o = gattn::sparse_attn(&mut g, &qt, &kt, &st, &it, s, nh, hd, w, scale).unwrap();
    let want = sparse_attn(&q, &kv, &sink, &idx, nh, hd, w, scale);
    assert!(max_ulps(&g.read_all(&o).unwrap(), &want) <= BF16_TRANSCENDENTAL_ULPS);
}

fn moe_cfg() -> ModelConfig {
    let mut cfg = ModelConfig::deepseek_v41_flash();
    cfg.dim = 64;
    cfg.n_routed_experts = 5;
    cfg.n_activated_experts = 2;
    cfg.moe_inter_dim = 24;
    cfg.score_func = ScoreFunc::SqrtSoftplus;
    cfg
}

#[test]
fn moe_gate_routing_and_experts_match_the_oracle() {
    let Some(mut g) = gpu("moe") else { return };
    let cfg = moe_cfg();
    let (s, d, e, inter) = (5, cfg.dim, cfg.n_routed_experts, cfg.moe_inter_dim);
    let x = rand(33, s * d, 2.0, true);
    let gate_w = rand(34, e * d, 0.2, true);
    let bias = rand(35, e, 0.1, false);
    let xt = g.upload("x", &x).unwrap();
    let gw = g.upload_weight("gate", &gate_w, e, d).unwrap();
    let bt = g.upload("bias", &bias).unwrap();
    let logits = linear(&mut g, &xt, s, &gw, false).unwrap();
    let scores = gmoe::gate_scores(&mut g, &cfg, &logits, s).unwrap();
    let got_scores = g.read_all(&scores).unwrap();
    let want_scores = moe::gate_scores(&cfg, &x, &gate_w);
    assert!(max_abs(&got_scores, &want_scores) <= F32_CHAIN_TOL);
    // Routing on the oracle's scores: same experts, weights within the f32 bar.
    let st = g.upload("scores", &want_scores).unwrap();
    let routing_t = gmoe::route(&mut g, &cfg, &st, &bt, s, None).unwrap();
    let routing = g.read_all(&routing_t).unwrap();
    let want = moe::route(&cfg, &want_scores, &bias, None, false);
    let k = cfg.n_activated_experts;
    assert_eq!(
        routing[s * k..]
            .iter()
            .map(|&v| v as i64)
            .collect::<Vec<_>>(),
        want.indices
    );
    assert!(max_abs(&routing[..s * k], &want.weights) <= F32_CHAIN_TOL);
    // One routed expert with per-row weights, and the shared expert without.
    let w1 = rand(36, inter * d, 0.3, true);
    let w3 = rand(37, inter * d, 0.3, true);
    let w2 = rand(38, d * inter, 0.3, true);
    let rw = rand(39, s, 0.8, false);
    let (w1t, w3t, w2t) = (
        g.upload_weight("w1", &w1, inter, d).unwrap(),
        g.upload_weight("w3", &w3, inter, d).unwrap(),
        g.upload_weight("w2", &w2, d, inter).unwrap(),
    );
    let rwt = g.upload("rw", &rw).unwrap();
    for weights in [Some(&rwt), None] {
        let gg = linear(&mut g, &xt, s, &w1t, true).unwrap();
        let uu = linear(&mut g, &xt, s, &w3t, true).unwrap();
        let a = gmoe::swiglu(&mut g, &cfg, &gg, &uu, weights, s).unwrap();
        let y = linear(&mut g, &a, s, &w2t, true).unwrap();
        let want = moe::expert(&cfg, &x, &w1, &w2, &w3, weights.map(|_| &rw[..]));
        assert!(max_ulps(&g.read_all(&y).unwrap(), &want) <= BF16_TRANSCENDENTAL_ULPS);
    }
}

#[test]
fn bitflip_and_dropped_workgroup_perturb_what_they_claim() {
    let Some(mut g) = gpu("perturb") else { return };
    let v = rand(40, 100, 1.0, true);
    let t = g.upload("v", &v).unwrap();
    rows::bitflip(&mut g, &t, 3, 1 << 30).unwrap();
    let got = g.read_all(&t).unwrap();
    assert_eq!(got[3].to_bits(), v[3].to_bits() ^ (1 << 30));
    assert_eq!(&got[4..], &v[4..]);
    rows::drop_first(&mut g, &t, 10, 90).unwrap();
    let got = g.read_all(&t).unwrap();
    assert!(got[10..74].iter().all(|&x| x == 0.0));
    assert_eq!(&got[74..], &v[74..]);
}

/// Real-dims decode (head_dim 512, 128 index columns, every one present): llvmpipe ends an
/// invocation's loops after 65535 back-edges in total, which the un-unrolled kernel exceeded
/// here (the last ~50 dims of every head came back 0).
#[test]
fn sparse_attention_at_real_dims_matches_the_oracle() {
    let Some(mut g) = gpu("sparse_attn_real_dims") else {
        return;
    };
    let (nh, hd, n_rows, w) = (4, 512, 128, 128);
    let q = rand(40, nh * hd, 1.0, true);
    let kv = rand(41, n_rows * hd, 1.0, true);
    let sink = rand(42, nh, 1.0, false);
    // The ring oldest first, as decode writes it; the last column is absent.
    let idx: Vec<i64> = (0..w)
        .map(|c| {
            if c + 1 == w {
                -1
            } else {
                ((c + 37) % n_rows) as i64
            }
        })
        .collect();
    let idx_f: Vec<f32> = idx.iter().map(|&v| v as f32).collect();
    let up = |n: &str, v: &[f32], g: &Gpu| g.upload(n, v).unwrap();
    let (qt, kt, st, it) = (
        up("q", &q, &g),
        up("kv", &kv, &g),
        up("sink", &sink, &g),
        up("idx", &idx_f, &g),
    );
    let scale = (hd as f32).powf(-0.5);
    let o = gattn::sparse_attn(&mut g, &qt, &kt, &st, &it, 1, nh, hd, w, scale).unwrap();
    let want = sparse_attn(&q, &kv, &sink, &idx, nh, hd, w, scale);
    assert!(max_ulps(&g.read_all(&o).unwrap(), &want) <= BF16_TRANSCENDENTAL_ULPS);
}

/// The inputs of a sparse-attention conformance case: q `[s, nh, hd]`, kv `[n_rows, hd]`, the
/// sinks and `idx [s, w]` with every `absent_every`-th column absent (-1); with
/// `kv_nonnegative` the rows hold |v|, so p·v sums never cancel (an output then moves at most
/// the one bf16 ulp its probabilities' WGSL `exp` can move it).
struct SparseAttnCase {
    s: usize,
    nh: usize,
    hd: usize,
    n_rows: usize,
    w: usize,
    absent_every: usize,
    kv_nonnegative: bool,
    seed: u64,
}

impl SparseAttnCase {
    /// The kernel's output and the oracle's on this case's inputs, through `g`.
    fn run(&self, g: &mut Gpu) -> (Vec<f32>, Vec<f32>) {
        let (s, nh, hd, w) = (self.s, self.nh, self.hd, self.w);
        let q = rand(self.seed, s * nh * hd, 1.0, true);
        let mut kv = rand(self.seed + 1, self.n_rows * hd, 1.0, true);
        if self.kv_nonnegative {
            kv.iter_mut().for_each(|v| *v = v.abs());
        }
        let sink = rand(self.seed + 2, nh, 1.0, false);
        let idx: Vec<i64> = (0..s * w)
            .map(|i| {
                if i % self.absent_every == self.absent_every - 1 {
                    -1
                } else {
                    (splitmix64(i as u64 ^ self.seed) % self.n_rows as u64) as i64
                }
            })
            .collect();
        let idx_f: Vec<f32> = idx.iter().map(|&v| v as f32).collect();
        let up = |n: &str, v: &[f32], g: &Gpu| g.upload(n, v).unwrap();
        let (qt, kt, st, it) = (
            up("q", &q, g),
            up("kv", &kv, g),
            up("sink", &sink, g),
            up("idx", &idx_f, g),
        );
        let scale = (hd as f32).powf(-0.5);
        let o = gattn::sparse_attn(g, &qt, &kt, &st, &it, s, nh, hd, w, scale).unwrap();
        let want = sparse_attn(&q, &kv, &sink, &idx, nh, hd, w, scale);
        (g.read_all(&o).unwrap(), want)
    }
}

/// A real-dims prefill row at the most index columns the kernel takes (window 128 plus up to
/// 512 compressed positions is 640 at the released geometry): one lane per (token, head) looped
/// about 170,000 times here, far past llvmpipe's 65535 back-edges, and its last dims came back
/// 0; the workgroup-per-row kernel loops about 6,200 times per invocation.
#[test]
fn sparse_attention_at_real_dims_and_max_index_columns_matches_the_oracle() {
    let Some(mut g) = gpu("sparse_attn_max_cols") else {
        return;
    };
    let case = SparseAttnCase {
        s: 2,
        nh: 2,
        hd: 512,
        n_rows: 1100,
        w: gattn::MAX_COLS,
        absent_every: 7,
        kv_nonnegative: false,
        seed: 43,
    };
    let (got, want) = case.run(&mut g);
    assert!(gattn::sparse_attn_loop_count(case.hd, case.w) < LLVMPIPE_LOOP_CAP);
    assert!(max_ulps(&got, &want) <= BF16_TRANSCENDENTAL_ULPS);
}

/// More (token, head) rows than one dispatch has workgroups (65535): the host splits them, and
/// the rows of the second dispatch match the oracle like those of the first.
#[test]
fn sparse_attention_splits_rows_beyond_one_dispatch() {
    let Some(mut g) = gpu("sparse_attn_many_rows") else {
        return;
    };
    let case = SparseAttnCase {
        s: 1100,
        nh: 64,
        hd: 4,
        n_rows: 50,
        w: 3,
        absent_every: 5,
        kv_nonnegative: true,
        seed: 44,
    };
    assert!(case.s * case.nh > g.max_groups() as usize);
    let (got, want) = case.run(&mut g);
    assert!(max_ulps(&got, &want) <= BF16_TRANSCENDENTAL_ULPS);
}

/// Mesa's llvmpipe stops an invocation's loops after `LLVMPIPE_LOOP_CAP` back-edges: a shape
/// past it is refused there with a typed error naming the kernel, the shape and the cap (it
/// would return stale flags); any other adapter runs it.
#[test]
fn shapes_past_the_llvmpipe_loop_cap_are_refused_there_and_run_elsewhere() {
    let Some(mut g) = gpu("loop_cap") else { return };
    let (t_vis, k) = (70_000, 4);
    let score = rand(45, t_vis, 4.0, false);
    let st = g.upload("score", &score).unwrap();
    let decode = Causal {
        prefill: false,
        r: 1,
    };
    let got = gcomp::topk(&mut g, &st, 1, t_vis, k, 0, decode);
    if g.loop_capped() {
        let err = got.expect_err("refused on llvmpipe");
        let msg = err.to_string();
        let GpuError::LoopCap {
            kernel,
            entry,
            back_edges,
            cap,
            ..
        } = err
        else {
            panic!("not a loop-cap refusal: {msg}");
        };
        assert_eq!(
            (kernel, entry, cap),
            ("compress", "topk_flags", LLVMPIPE_LOOP_CAP)
        );
        assert!(back_edges > cap, "{msg}");
        assert!(
            msg.contains("70000 visible positions") && msg.contains("65535"),
            "{msg}"
        );
    } else {
        let mut want = torch_cpu_topk_set(&score, k);
        want.sort_unstable();
        let want: Vec<f32> = want.iter().map(|&p| p as f32).collect();
        assert_eq!(g.read_all(&got.unwrap()).unwrap(), want);
    }
}
