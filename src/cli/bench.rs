//! `golden-lens bench`: this machine's limits and the oracle's kernels against them, in one run.
//!
//! It measures the FMA peak (register-only kernels, every thread) and memory bandwidth (a
//! parallel copy and a parallel read), then times every real-dims GEMM shape the oracle runs
//! (weights as f32, as bf16 blocks and as each quantized expert type, cycled through a pool
//! several times the last-level cache so they come from memory) and every block type's row
//! decoder, and prints each one's throughput and its fraction of the limit that binds it. Where
//! a python with gguf-py exists, its `gguf.quants.dequantize` runs on the same blocks and its
//! values are checked bit for bit against ours. The last line is the roofline summary scripts
//! track.

use anyhow::{bail, Context};
use golden_lens::gguf::quant::rows::{cap_simd_level, simd_level, SimdLevel};
use golden_lens::gguf::quant::sample::random_blocks;
use golden_lens::gguf::quant::{block_decoder, reference_block_decoder, BlockDecoder};
use golden_lens::gguf::GgmlType;
use golden_lens::model::stored::StoredMatrix;
use golden_lens::oracle::gemm::roofline::{
    bandwidth, best_compute_seconds, fma_peak_gflops, repeat_compute_seconds, Bandwidth, Precision,
    Repeated,
};
use golden_lens::oracle::gemm::{best_path, gemm, kernel_path_note, KernelPath, WeightRows};
use rayon::prelude::*;
use serde_json::json;
use std::borrow::Cow;
use std::path::PathBuf;
use std::process::ExitCode;

mod gguf_py;
mod shapes;

use gguf_py::{find_python, gguf_py_side};
use shapes::{
    Weights, ATTN_SHAPES, DEQUANT_TYPES, EXPERT_SHAPES, EXPERT_TYPES, F32_SHAPES, TOKEN_COUNTS,
};

#[derive(clap::Args, Debug, Default)]
pub struct BenchArgs {
    /// A few shapes and types at small sizes (a smoke run: seconds, numbers not meaningful).
    #[arg(long)]
    pub quick: bool,
    /// Python with gguf-py for the side-by-side dequantization (default: $GOLDEN_LENS_PY, else
    /// ./.venv/bin/python if present; without one that column is skipped).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// MiB of weights each GEMM cycles through, so every repetition reads its weights from memory
    /// (default: four times the last-level cache the kernel reports, at least 512 MiB).
    #[arg(long)]
    pub pool_mib: Option<usize>,
    /// Repetitions per measurement; the best is kept (this is a shared, noisy machine).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Milliseconds each GEMM shape runs for, split over three rounds through the table (each
    /// round at least `--reps` runs, at most 100000 runs in all): a sub-millisecond GEMM needs
    /// hundreds of runs before one is not interrupted on a shared machine. The table prints
    /// the best and the median run.
    #[arg(long, default_value_t = 900)]
    pub gemm_ms: u64,
    /// Write every figure as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Only GEMM shapes whose name or weight type contains this (e.g. `Q2_K`, `wq_b`); the
    /// dequantization table still runs unless `--gemm-only`.
    #[arg(long)]
    pub only: Option<String>,
    /// Skip the dequantization table (and gguf-py).
    #[arg(long)]
    pub gemm_only: bool,
}

/// Seconds the FMA peak kernels run per repetition.
const PEAK_SECONDS: f64 = 0.25;
/// Values decoded per dequantization measurement (128 MiB of f32 output).
const DEQUANT_VALUES: usize = 32 << 20;
/// Values per rayon task when decoding in parallel (a multiple of every block size).
const DEQUANT_CHUNK_VALUES: usize = 1 << 16;
/// Values handed to gguf-py per type (numpy is slow; 32 MiB of output is enough to time).
const GGUF_PY_VALUES: usize = 8 << 20;
/// Leading values whose bits are compared with gguf-py's.
const GGUF_PY_VERIFY_VALUES: usize = 1 << 16;
/// Buffer of the bandwidth measurements (far above any cache a VM exposes).
const BANDWIDTH_BYTES: usize = 512 << 20;

/// Rounds of the limit measurements, one after the other; each limit is the best that any
/// round saw, so that a slow moment of a shared machine (a run measured the f64 peak at half
/// its usual value once) cannot lower the bar the kernels are held to.
const LIMIT_ROUNDS: usize = 3;

/// The machine's measured limits.
struct Limits {
    f32_gflops: f64,
    f64_gflops: f64,
    bw: Bandwidth,
}

impl Limits {
    /// Both FMA peaks (`peak_s` seconds a repetition) and the bandwidths (a `bw_bytes`
    /// buffer), `reps` repetitions each, in `rounds` rounds: the best of all of them.
    fn measure(
        path: KernelPath,
        peak_s: f64,
        bw_bytes: usize,
        (reps, rounds): (usize, usize),
    ) -> Limits {
        let mut l = Limits {
            f32_gflops: 0.0,
            f64_gflops: 0.0,
            bw: Bandwidth {
                memcpy_gbs: 0.0,
                read_gbs: 0.0,
            },
        };
        for _ in 0..rounds.max(1) {
            l.f32_gflops = l
                .f32_gflops
                .max(fma_peak_gflops(path, Precision::F32, peak_s, reps));
            l.f64_gflops = l
                .f64_gflops
                .max(fma_peak_gflops(path, Precision::F64, peak_s, reps));
            let bw = bandwidth(bw_bytes, reps);
            l.bw.memcpy_gbs = l.bw.memcpy_gbs.max(bw.memcpy_gbs);
            l.bw.read_gbs = l.bw.read_gbs.max(bw.read_gbs);
        }
        l
    }
}

struct GemmRow {
    what: &'static str,
    weights: String,
    m: usize,
    n: usize,
    k: usize,
    bytes: usize,
    seconds: f64,
    median_seconds: f64,
    reps: usize,
    gflops: f64,
    limit_gflops: f64,
    bound: &'static str,
    of_limit: f64,
    of_f32_limit: f64,
}

struct DequantRow {
    ty: GgmlType,
    gbs: f64,
    one_thread_gbs: f64,
    reference_gbs: f64,
    baseline_simd_gbs: f64,
    of_memcpy: f64,
    gguf_py_gbs: Option<f64>,
    /// Ours, one thread, on exactly the blocks gguf-py decoded (the ratio's numerator).
    same_blocks_gbs: Option<f64>,
    gguf_py_bit_exact: Option<bool>,
}

/// Our one-thread throughput over gguf-py's, both on the blocks gguf-py decoded.
fn vs_gguf_py(r: &DequantRow) -> Option<f64> {
    Some(r.same_blocks_gbs? / r.gguf_py_gbs?)
}

/// bf16-representable inputs of mixed sign.
fn inputs(len: usize, seed: u64) -> Vec<f32> {
    (0..len as u64)
        .map(|i| {
            let r = golden_lens::num::splitmix64(seed ^ i);
            golden_lens::num::bf16_round((r >> 40) as f32 / 8_388_608.0 - 1.0)
        })
        .collect()
}

/// A GEMM row's runs: at least this many, for at least these seconds, at most this many.
type Reps = (usize, f64, usize);

/// Most runs of one GEMM shape.
const GEMM_MAX_REPS: usize = 100_000;

/// A pool of weights of one kind that GEMMs cycle through.
enum Pool {
    F32(Vec<f32>),
    Bytes(GgmlType, Vec<u8>),
}

impl Pool {
    fn new(w: Weights, bytes: usize) -> anyhow::Result<Pool> {
        Ok(match w {
            Weights::F32 => Pool::F32(inputs(bytes / 4, 7)),
            Weights::Stored(t) => {
                let (_, bb, _) = block_decoder(t).context("benchmarked types decode")?;
                let blocks = random_blocks(t, bytes / bb, 11).context("random blocks")?;
                Pool::Bytes(t, blocks)
            }
        })
    }

    /// Times one GEMM shape, each repetition on weights at a different place in the pool.
    /// Run `r` (counting from `first`) reads slot `r` of the pool, modulo its slots.
    fn time(
        &self,
        (m, n, k): (usize, usize, usize),
        reps: Reps,
        first: usize,
    ) -> anyhow::Result<Repeated> {
        let x = inputs(m * k, 3);
        let threads = rayon::current_num_threads();
        match self {
            Pool::F32(p) => {
                let len = n * k;
                if len > p.len() {
                    bail!(
                        "the pool holds {} values, a {n}x{k} weight needs {len}",
                        p.len()
                    );
                }
                let slots = (p.len() / len).max(1);
                Ok(repeat_compute_seconds(reps, threads, first, |r| {
                    let w = &p[(r % slots) * len..(r % slots + 1) * len];
                    std::hint::black_box(gemm(&x, m, k, WeightRows::F32(w), n, true));
                }))
            }
            Pool::Bytes(t, p) => {
                let len = Weights::Stored(*t).bytes(n, k);
                if len > p.len() {
                    bail!(
                        "the pool holds {} bytes, a {n}x{k} weight needs {len}",
                        p.len()
                    );
                }
                let slots = (p.len() / len).max(1);
                let mats = (0..slots)
                    .map(|s| {
                        let bytes = Cow::Borrowed(&p[s * len..(s + 1) * len]);
                        StoredMatrix::new("bench", *t, n, k, bytes, true)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(repeat_compute_seconds(reps, threads, first, |r| {
                    let w = WeightRows::Stored(&mats[r % mats.len()]);
                    std::hint::black_box(gemm(&x, m, k, w, n, true));
                }))
            }
        }
    }
}

/// A GEMM shape's row from its runs.
fn gemm_row(
    limits: &Limits,
    what: &'static str,
    w: Weights,
    (m, n, k): (usize, usize, usize),
    timed: &Repeated,
) -> GemmRow {
    let seconds = timed.best();
    let flops = 2.0 * (m * n * k) as f64;
    let bytes = w.bytes(n, k) + 4 * m * (k + n);
    let memory_s = bytes as f64 / (limits.bw.read_gbs * 1e9);
    let fma_s = flops / (limits.f64_gflops * 1e9);
    let fma32_s = flops / (limits.f32_gflops * 1e9);
    let limit_s = memory_s.max(fma_s);
    GemmRow {
        what,
        weights: w.name(),
        m,
        n,
        k,
        bytes,
        seconds,
        median_seconds: timed.median(),
        reps: timed.reps(),
        gflops: flops / seconds / 1e9,
        limit_gflops: flops / limit_s / 1e9,
        bound: if memory_s >= fma_s {
            "memory"
        } else {
            "f64 FMA"
        },
        of_limit: limit_s / seconds,
        of_f32_limit: memory_s.max(fma32_s) / seconds,
    }
}

/// Decodes `bytes` into `out` with `decode`, in parallel chunks or on this thread.
fn decode_all(decode: BlockDecoder, ty: GgmlType, bytes: &[u8], out: &mut [f32], parallel: bool) {
    let (bv, bb, _) = block_decoder(ty).expect("benchmarked types decode");
    let chunk_bytes = DEQUANT_CHUNK_VALUES / bv * bb;
    if parallel {
        out.par_chunks_mut(DEQUANT_CHUNK_VALUES)
            .zip(bytes.par_chunks(chunk_bytes))
            .for_each(|(o, b)| decode(b, o));
    } else {
        decode(bytes, out);
    }
}

fn dequant_row(
    ty: GgmlType,
    values: usize,
    reps: usize,
    limits: &Limits,
) -> anyhow::Result<(DequantRow, Vec<u8>)> {
    let (bv, _, fast) = block_decoder(ty).context("decodable type")?;
    let (_, _, reference) = reference_block_decoder(ty).context("decodable type")?;
    let blocks = random_blocks(ty, values / bv, 5).context("random blocks")?;
    let mut out = vec![0f32; values];
    let gbs = |s: f64| (values * 4) as f64 / s / 1e9;
    let threads = rayon::current_num_threads();
    let all = best_compute_seconds(reps, threads, |_| {
        decode_all(fast, ty, &blocks, &mut out, true)
    });
    let one = best_compute_seconds(reps, 1, |_| decode_all(fast, ty, &blocks, &mut out, false));
    let level = simd_level();
    cap_simd_level(Some(SimdLevel::Baseline));
    let baseline =
        best_compute_seconds(reps, 1, |_| decode_all(fast, ty, &blocks, &mut out, false));
    cap_simd_level(None);
    debug_assert_eq!(level, simd_level());
    let reference_s = best_compute_seconds(reps, 1, |_| {
        decode_all(reference, ty, &blocks, &mut out, false)
    });
    Ok((
        DequantRow {
            ty,
            gbs: gbs(all),
            one_thread_gbs: gbs(one),
            reference_gbs: gbs(reference_s),
            baseline_simd_gbs: gbs(baseline),
            of_memcpy: gbs(all) / limits.bw.memcpy_gbs,
            gguf_py_gbs: None,
            same_blocks_gbs: None,
            gguf_py_bit_exact: None,
        },
        blocks,
    ))
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let threads = rayon::current_num_threads();
    let pool_mib = args.pool_mib.unwrap_or_else(default_pool_mib);
    let (reps, pool_bytes) = if args.quick {
        (1, 16 << 20)
    } else {
        let bytes = pool_mib
            .checked_mul(1 << 20)
            .with_context(|| format!("--pool-mib {pool_mib}: too large"))?;
        (args.reps, bytes)
    };
    println!(
        "golden-lens bench: {threads} rayon threads; {}",
        kernel_path_note()
    );
    if !args.quick {
        let llc =
            last_level_cache_bytes().map_or("unknown".to_string(), |b| format!("{} MiB", b >> 20));
        println!("weight pool: {pool_mib} MiB per GEMM (last-level cache: {llc})");
    }
    let path = best_path();
    let peak_s = if args.quick { 0.01 } else { PEAK_SECONDS };
    let limits = Limits::measure(
        path,
        peak_s,
        if args.quick {
            16 << 20
        } else {
            BANDWIDTH_BYTES
        },
        (reps.max(2), if args.quick { 1 } else { LIMIT_ROUNDS }),
    );
    println!(
        "FMA peak ({} registers only, all threads): f32 {:.1} GFLOP/s, f64 {:.1} GFLOP/s",
        path.name(),
        limits.f32_gflops,
        limits.f64_gflops
    );
    println!(
        "memory: read {:.2} GB/s, memcpy {:.2} GB/s (bytes copied per second)",
        limits.bw.read_gbs, limits.bw.memcpy_gbs
    );

    // GEMMs.
    let mut plan: Vec<(Weights, &'static str, usize, usize)> = Vec::new();
    for s in &ATTN_SHAPES {
        plan.push((Weights::Stored(GgmlType::Bf16), s.what, s.n, s.k));
    }
    for s in &F32_SHAPES {
        plan.push((Weights::F32, s.what, s.n, s.k));
    }
    for t in EXPERT_TYPES {
        for s in &EXPERT_SHAPES {
            plan.push((Weights::Stored(t), s.what, s.n, s.k));
        }
    }
    if args.quick {
        plan.retain(|(w, what, _, _)| {
            *what == "attn.wkv" || (*w == Weights::Stored(GgmlType::Q2K) && *what == "expert.w2")
        });
    }
    if let Some(only) = &args.only {
        plan.retain(|(w, what, _, _)| what.contains(only.as_str()) || w.name() == *only);
    }
    let tokens: &[usize] = if args.quick { &[1, 16] } else { &TOKEN_COUNTS };
    let gemm_ms = if args.quick { 0 } else { args.gemm_ms };
    let gemm_rounds = if args.quick { 1 } else { LIMIT_ROUNDS };
    let gemm_reps: Reps = (
        reps,
        gemm_ms as f64 * 1e-3 / gemm_rounds as f64,
        GEMM_MAX_REPS / gemm_rounds,
    );
    println!();
    println!("GEMM (real dims; limit = min(f64 FMA peak, read bandwidth x FLOP per byte), the f64 peak because the oracle's bits are an f64 reduction; 'f32 lim' uses the f32 peak instead; each shape runs at least {reps} times and for {gemm_ms} ms: 'ms' is the best run, which the rates use, 'med ms' the median of the 'runs')");
    println!(
        "{:<18} {:>8} {:>3} {:>6} {:>6} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8} {:>8} {:>7} {:>8}",
        "shape",
        "weights",
        "m",
        "n",
        "k",
        "MB",
        "ms",
        "med ms",
        "runs",
        "GFLOP/s",
        "limit",
        "bound",
        "of lim",
        "f32 lim"
    );
    let mut gemm_rows = Vec::new();
    let mut kinds: Vec<Weights> = plan.iter().map(|p| p.0).collect();
    kinds.dedup();
    for kind in kinds {
        let pool = Pool::new(kind, pool_bytes)?;
        let shapes: Vec<(&'static str, Weights, (usize, usize, usize))> = plan
            .iter()
            .filter(|p| p.0 == kind)
            .flat_map(|&(w, what, n, k)| tokens.iter().map(move |&m| (what, w, (m, n, k))))
            .collect();
        // Every shape once a round, the rounds one after the other: a slow stretch of a
        // shared machine then falls on one round of a shape, not on all its runs.
        let mut timed = vec![Repeated::default(); shapes.len()];
        for _ in 0..gemm_rounds {
            for (t, &(_, _, mnk)) in timed.iter_mut().zip(&shapes) {
                let first = t.reps();
                t.merge(pool.time(mnk, gemm_reps, first)?);
            }
        }
        for (t, &(what, w, mnk)) in timed.iter().zip(&shapes) {
            let row = gemm_row(&limits, what, w, mnk, t);
            println!(
                "{:<18} {:>8} {:>3} {:>6} {:>6} {:>9.1} {:>9.3} {:>9.3} {:>6} {:>8.1} {:>8.1} {:>8} {:>6.0}% {:>7.0}%",
                row.what,
                row.weights,
                row.m,
                row.n,
                row.k,
                row.bytes as f64 / 1e6,
                row.seconds * 1e3,
                row.median_seconds * 1e3,
                row.reps,
                row.gflops,
                row.limit_gflops,
                row.bound,
                100.0 * row.of_limit,
                100.0 * row.of_f32_limit
            );
            gemm_rows.push(row);
        }
    }

    // Dequantization.
    let values = if args.quick { 1 << 20 } else { DEQUANT_VALUES };
    let types: &[GgmlType] = if args.gemm_only { &[] } else { &DEQUANT_TYPES };
    println!();
    println!("dequantization ({} values per type, GB/s of f32 output; decoders at {}; 'x ref' is the fast decoder on one thread over the one-block reference decoder; 'same blk' is ours on one thread over exactly the blocks gguf-py decoded, and 'x gguf-py' its ratio)", values, simd_level().name());
    let mut dq_rows = Vec::new();
    let mut dq_blocks = Vec::new();
    for &ty in types {
        let (row, blocks) = dequant_row(ty, values, reps, &limits)?;
        dq_rows.push(row);
        dq_blocks.push(blocks);
    }
    let python = if args.gemm_only {
        None
    } else {
        find_python(&args.python)
    };
    let py_note = match &python {
        Some(p) => match gguf_py_side(
            p,
            &mut dq_rows,
            &dq_blocks,
            GGUF_PY_VALUES.min(values),
            reps,
        ) {
            Ok(()) => format!("gguf-py: {} (numpy, one thread)", p.display()),
            Err(e) => format!("gguf-py skipped: {e:#}"),
        },
        None => "gguf-py skipped: no python (pass --python or set GOLDEN_LENS_PY)".into(),
    };
    println!("{py_note}");
    println!(
        "{:<8} {:>9} {:>8} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9} {:>6}",
        "type",
        "GB/s",
        "memcpy",
        "1 thread",
        "baseline",
        "ref",
        "x ref",
        "same blk",
        "gguf-py",
        "x gguf-py",
        "bits"
    );
    for r in &dq_rows {
        let py = r.gguf_py_gbs.map_or("-".to_string(), |g| format!("{g:.3}"));
        let same = r
            .same_blocks_gbs
            .map_or("-".to_string(), |g| format!("{g:.2}"));
        let ratio = vs_gguf_py(r).map_or("-".to_string(), |x| format!("{x:.1}"));
        let bits = match r.gguf_py_bit_exact {
            Some(true) => "equal",
            Some(false) => "DIFFER",
            None => "-",
        };
        println!(
            "{:<8} {:>9.2} {:>7.0}% {:>9.2} {:>9.2} {:>9.2} {:>7.1} {:>9} {:>9} {:>9} {:>6}",
            r.ty.name(),
            r.gbs,
            100.0 * r.of_memcpy,
            r.one_thread_gbs,
            r.baseline_simd_gbs,
            r.reference_gbs,
            r.one_thread_gbs / r.reference_gbs,
            same,
            py,
            ratio,
            bits
        );
    }
    if dq_rows.iter().any(|r| r.gguf_py_bit_exact == Some(false)) {
        bail!("a decoder disagrees with gguf-py (row marked DIFFER)");
    }

    let worst_gemm = gemm_rows
        .iter()
        .map(|r| r.of_limit)
        .fold(f64::INFINITY, f64::min);
    let worst_gemm_f32 = gemm_rows
        .iter()
        .map(|r| r.of_f32_limit)
        .fold(f64::INFINITY, f64::min);
    let worst_dq = dq_rows
        .iter()
        .map(|r| r.of_memcpy)
        .fold(f64::INFINITY, f64::min);
    let vs_py = dq_rows
        .iter()
        .filter_map(vs_gguf_py)
        .fold(f64::INFINITY, f64::min);
    if let Some(path) = &args.json {
        let v = json!({
            "threads": threads,
            "kernels": kernel_path_note(),
            "fma_peak_gflops": {"f32": limits.f32_gflops, "f64": limits.f64_gflops},
            "bandwidth_gbs": {"read": limits.bw.read_gbs, "memcpy": limits.bw.memcpy_gbs},
            "gemm": gemm_rows.iter().map(|r| json!({
                "shape": r.what, "weights": r.weights, "m": r.m, "n": r.n, "k": r.k,
                "bytes": r.bytes, "seconds": r.seconds, "median_seconds": r.median_seconds,
                "runs": r.reps, "gflops": r.gflops,
                "limit_gflops": r.limit_gflops, "bound": r.bound, "of_limit": r.of_limit,
                "of_f32_limit": r.of_f32_limit,
            })).collect::<Vec<_>>(),
            "dequant": dq_rows.iter().map(|r| json!({
                "type": r.ty.name(), "gbs": r.gbs, "one_thread_gbs": r.one_thread_gbs,
                "baseline_simd_gbs": r.baseline_simd_gbs, "reference_gbs": r.reference_gbs,
                "of_memcpy": r.of_memcpy, "gguf_py_gbs": r.gguf_py_gbs,
                "gguf_py_bit_exact": r.gguf_py_bit_exact, "same_blocks_gbs": r.same_blocks_gbs,
            })).collect::<Vec<_>>(),
            "gguf_py": py_note,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&v)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!();
    let pct = |v: f64| {
        if v.is_finite() {
            format!("{:.0}%", 100.0 * v)
        } else {
            "n/a".into()
        }
    };
    println!(
        "worst GEMM against the f32 FMA peak instead: {} of its limit",
        pct(worst_gemm_f32)
    );
    let py = if vs_py.is_finite() {
        format!("{vs_py:.1}")
    } else {
        "n/a".into()
    };
    println!(
        "roofline: worst GEMM {} of its limit, worst dequant {} of memcpy, dequant vs gguf-py {py} x",
        pct(worst_gemm),
        pct(worst_dq)
    );
    Ok(ExitCode::SUCCESS)
}

/// The largest CPU cache the kernel reports for cpu0 (`/sys/devices/system/cpu/cpu0/cache`), in
/// bytes; None where sysfs does not say.
fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("size")).ok())
        .filter_map(|s| parse_cache_size(s.trim()))
        .max()
}

/// A sysfs cache size such as `32K`, `1024K` or `480M`, in bytes.
fn parse_cache_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// Four times the last-level cache, in MiB, and at least 512 MiB: a GEMM's weights then come from
/// memory on every repetition rather than partly from cache.
fn default_pool_mib() -> usize {
    const FLOOR_MIB: usize = 512;
    const CACHE_MULTIPLE: usize = 4;
    last_level_cache_bytes()
        .map(|b| (b >> 20).saturating_mul(CACHE_MULTIPLE))
        .unwrap_or(0)
        .max(FLOOR_MIB)
}

#[cfg(test)]
mod pool_tests {
    use super::parse_cache_size;

    #[test]
    fn sysfs_cache_sizes_parse() {
        assert_eq!(parse_cache_size("32K"), Some(32 << 10));
        assert_eq!(parse_cache_size("480M"), Some(480 << 20));
        assert_eq!(parse_cache_size("1024"), Some(1024));
        assert_eq!(parse_cache_size("12X"), None);
        assert_eq!(parse_cache_size(""), None);
    }
}
