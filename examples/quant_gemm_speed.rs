//! Times the oracle's GEMM over quantized expert blocks, one type and shape at a time, with the
//! weights either cycled through a pool larger than the last-level cache (`mem`) or kept in
//! L2 (`l2`: a small matrix multiplied again and again), and prints weights per second and CPU
//! nanoseconds per weight. For profiling one kernel (`perf record`) without the whole bench.
//! The best wall time is printed beside the best compute time: the process CPU clock reaches
//! other threads' time only at their scheduler ticks, so on a sub-millisecond run the least of
//! many compute times can undercount, and the wall time shows when it did.
//!
//! `cargo run --release --example quant_gemm_speed -- TYPE M N K [mem|l2] [seconds]`
//! (e.g. `Q2_K 1 2304 5120 mem 3`).

use golden_lens::gguf::quant::block_decoder;
use golden_lens::gguf::quant::sample::random_blocks;
use golden_lens::gguf::GgmlType;
use golden_lens::model::stored::StoredMatrix;
use golden_lens::oracle::gemm::roofline::best_compute_seconds;
use golden_lens::oracle::gemm::{gemm, WeightRows};
use std::borrow::Cow;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let ty = GgmlType::from_name(&arg(0, "Q2_K")).ok_or("unknown type")?;
    let m: usize = arg(1, "1").parse()?;
    let n: usize = arg(2, "2304").parse()?;
    let k: usize = arg(3, "5120").parse()?;
    let mem = arg(4, "mem") == "mem";
    let seconds: f64 = arg(5, "3").parse()?;
    let (bv, bb, _) = block_decoder(ty).ok_or("type without a decoder")?;
    let len = n * k / bv * bb;
    let slots = if mem { (2usize << 30) / len + 1 } else { 1 };
    let pool = random_blocks(ty, n * k / bv * slots, 11).ok_or("blocks")?;
    let mats = (0..slots)
        .map(|s| {
            StoredMatrix::new(
                "w",
                ty,
                n,
                k,
                Cow::Borrowed(&pool[s * len..(s + 1) * len]),
                true,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let x: Vec<f32> = (0..m * k).map(|i| ((i % 17) as f32 - 8.0) / 16.0).collect();
    let threads = rayon::current_num_threads();
    let t = Instant::now();
    let mut reps = 0usize;
    let (mut best, mut best_wall) = (f64::INFINITY, f64::INFINITY);
    while t.elapsed().as_secs_f64() < seconds {
        let w = WeightRows::Stored(&mats[reps % slots]);
        let t0 = Instant::now();
        let s = best_compute_seconds(1, threads, |_| {
            std::hint::black_box(gemm(&x, m, k, w, n, true));
        });
        best_wall = best_wall.min(t0.elapsed().as_secs_f64());
        best = best.min(s);
        reps += 1;
    }
    let weights = (n * k) as f64;
    println!(
        "{} m {m} n {n} k {k} {} on {threads} threads: best of {reps}: {:.3} ms ({:.3} ms wall), {:.2} G weights/s, {:.2} GB/s, {:.2} CPU ns per 1000 weights per thread",
        ty.name(),
        if mem { "from memory" } else { "in cache" },
        best * 1e3,
        best_wall * 1e3,
        weights / best / 1e9,
        len as f64 / best / 1e9,
        best * threads as f64 / weights * 1e12
    );
    Ok(())
}
