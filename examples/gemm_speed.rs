//! Times the GEMM kernels of `shaders/gemm.wgsl` on one adapter, in one run: the original
//! per-output kernel (`gemm`, the only one before the tiled work) against the kernel
//! `GemmKernel::for_shape` picks (on the weight's real low-halves flag), plus each kernel
//! forced, for the tiny graph's GEMM shapes and real-dims ones. Checks that every kernel gives
//! the original's bits. One line per shape: median wall ms per GEMM and the ratio old/new.
//!
//! `cargo run --release --features gpu --example gemm_speed -- [reps=3] [filter]`
//! (the work runs in the adapter, so a debug build times the same; `filter` keeps the shapes
//! whose label contains it). On lavapipe with two busy cores the whole run takes about a minute.

#[cfg(not(feature = "gpu"))]
fn main() {
    eprintln!(
        "this example needs the `gpu` feature: cargo run --features gpu --example gemm_speed"
    );
}

#[cfg(feature = "gpu")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use golden_lens::gpu::gemm::{gemm_into_using, GemmKernel, XView};
    use golden_lens::gpu::{Gpu, GpuContext, WeightTensor};
    use golden_lens::num::{bf16_round, splitmix64};
    use std::time::Instant;

    let reps: usize = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 3,
    };
    let filter = std::env::args().nth(2).unwrap_or_default();
    // (label, m, k, n, bf16 weights, bf16 output): the tiny graph's projections, hc mixes (f32
    // weights, f32 out), a tiny MoE expert and decode; real-dims V4.1-Flash shapes.
    let shapes: &[(&str, usize, usize, usize, bool, bool)] = &[
        ("tiny wq_b prefill", 12, 16, 128, true, true),
        ("tiny wkv prefill", 12, 64, 32, true, true),
        ("tiny hc_fn prefill f32", 12, 256, 24, false, false),
        ("tiny expert w1", 6, 64, 24, true, true),
        ("tiny wq_b decode", 1, 16, 128, true, true),
        ("real m=16 k=4096 n=1024", 16, 4096, 1024, true, true),
        ("real m=16 k=4096 n=1024 f32w", 16, 4096, 1024, false, true),
        ("real m=4 k=4096 n=1024", 4, 4096, 1024, true, true),
        ("real m=2 k=4096 n=1024", 2, 4096, 1024, true, true),
        ("real m=1 k=4096 n=1024", 1, 4096, 1024, true, true),
    ];
    let rand = |seed: u64, n: usize, amp: f32, bf16: bool| -> Vec<f32> {
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
    };
    let mut g = Gpu::new(GpuContext::new()?);
    println!("adapter: {}", g.ctx.adapter);
    println!("reps: {reps} (median wall ms per GEMM; each rep one submission and wait)");
    for &(label, m, k, n, w_bf16, round) in shapes {
        if !label.contains(filter.as_str()) {
            continue;
        }
        let x = rand(1, m * k, 2.0, true);
        let w = rand(2, n * k, 0.05, w_bf16);
        let xt = g.upload("x", &x)?;
        let wt = g.upload_weight("w", &w, n, k)?;
        // The original kernel ignored the flag: `gemm` is the entry for low_halves = true.
        let mut old_w = wt.clone();
        old_w.low_halves = true;
        let auto = GemmKernel::for_shape(m, GemmKernel::cpu_adapter(&g));
        // Small shapes are timed as batches so the submission overhead does not dominate.
        let batch = if m * n * k < 1 << 20 { 50 } else { 1 };
        let mut time = |kernel: GemmKernel,
                        w: &WeightTensor|
         -> Result<(f64, Vec<u32>), Box<dyn std::error::Error>> {
            let y = g.zeros("y", m * n)?;
            let run = |g: &mut Gpu| -> Result<f64, Box<dyn std::error::Error>> {
                let t = Instant::now();
                for _ in 0..batch {
                    gemm_into_using(g, kernel, &xt, XView::dense(m, k), w, 0, n, &y, n, 0, round)?;
                }
                g.read(&y, 0, 1)?;
                Ok(t.elapsed().as_secs_f64() / batch as f64)
            };
            run(&mut g)?; // pipeline creation and first touch
            let mut ts = (0..reps.max(1))
                .map(|_| run(&mut g))
                .collect::<Result<Vec<_>, _>>()?;
            ts.sort_by(f64::total_cmp);
            let bits = g.read_all(&y)?.iter().map(|v| v.to_bits()).collect();
            Ok((ts[ts.len() / 2], bits))
        };
        let (t_old, y_old) = time(GemmKernel::PerOutput, &old_w)?;
        let (t_new, y_new) = time(auto, &wt)?;
        let mut forced = String::new();
        let mut same = y_new == y_old;
        for kernel in [GemmKernel::PerOutput, GemmKernel::Rows4, GemmKernel::Tiled] {
            let (t, y) = time(kernel, &wt)?;
            same &= y == y_old;
            forced.push_str(&format!(" {kernel:?}={:.3}", t * 1e3));
        }
        println!(
            "GEMM_SPEED {label:<30} m={m:<3} k={k:<5} n={n:<5} low_halves={:<5} old={:>9.3} ms new({auto:?})={:>9.3} ms ratio={:>5.2}x | forced ms:{forced} | bits_equal={same}",
            wt.low_halves,
            t_old * 1e3,
            t_new * 1e3,
            t_old / t_new,
        );
        if !same {
            return Err(format!("{label}: a kernel disagrees with the original's bits").into());
        }
    }
    Ok(())
}
