//! Times `sparse_attn` (`shaders/attn.wgsl`) at real-dims shapes (64 heads of 512) on one
//! adapter and checks it against the CPU oracle; with a shader directory, also times the
//! `attn.wgsl` found there (e.g. an older kernel) and says whether the two kernels agree bit for
//! bit. One line per shape: median wall ms per call, the max abs error from the oracle (p·v sums
//! cancel, so it is the measure, not ulps), and the dir/new time ratio.
//!
//! `cargo run --features gpu --example sparse_attn_speed -- [reps=3] [DIR]`
//! The one-lane-per-row kernel before the workgroup split, its uniform padded to today's size:
//! `mkdir -p /tmp/old && git show 1829997:shaders/attn.wgsl | sed 's/^    n_rows: u32,$/& row0: u32, _pad0: u32, _pad1: u32, _pad2: u32,/' > /tmp/old/attn.wgsl`,
//! then `DIR=/tmp/old`. That kernel loses its last dims past about 250 index columns on llvmpipe.

#[cfg(not(feature = "gpu"))]
fn main() {
    eprintln!(
        "this example needs the `gpu` feature: cargo run --features gpu --example sparse_attn_speed"
    );
}

#[cfg(feature = "gpu")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use golden_lens::gpu::attn::sparse_attn;
    use golden_lens::gpu::{Gpu, GpuContext, ShaderSet};
    use golden_lens::num::{bf16_round, splitmix64};
    use std::sync::Arc;
    use std::time::Instant;

    let reps: usize = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 3,
    };
    let other = match std::env::args().nth(2) {
        Some(dir) => Some(Arc::new(ShaderSet::from_dir(std::path::Path::new(&dir))?)),
        None => None,
    };
    // (label, tokens, index columns): a decode over the full window, short prefills, and a
    // prefill at the released geometry's widest row (window 128 + index_topk 512).
    let shapes: &[(&str, usize, usize)] = &[
        ("decode w=128", 1, 128),
        ("prefill s=4 w=200", 4, 200),
        ("prefill s=2 w=640", 2, 640),
    ];
    let (nh, hd, n_rows) = (64, 512, 1100);
    let rand = |seed: u64, n: usize, bf16: bool| -> Vec<f32> {
        (0..n)
            .map(|i| {
                let r = splitmix64(seed.wrapping_mul(0x9E37_79B9).wrapping_add(i as u64));
                let v = (r >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                if bf16 {
                    bf16_round(v)
                } else {
                    v
                }
            })
            .collect()
    };
    let mut gpus = vec![("new", Gpu::new(GpuContext::new()?))];
    if let Some(set) = other {
        gpus.push(("dir", Gpu::with_shaders(GpuContext::new()?, set)));
    }
    println!("adapter: {}", gpus[0].1.ctx.adapter);
    println!("reps: {reps} (median wall ms per call; each rep one submission and wait)");
    for &(label, s, w) in shapes {
        let q = rand(1, s * nh * hd, true);
        let kv = rand(2, n_rows * hd, true);
        let sink = rand(3, nh, false);
        let idx: Vec<i64> = (0..s * w)
            .map(|i| match i % 9 {
                8 => -1,
                _ => (splitmix64(i as u64) % n_rows as u64) as i64,
            })
            .collect();
        let idx_f: Vec<f32> = idx.iter().map(|&v| v as f32).collect();
        let scale = (hd as f32).powf(-0.5);
        let want = golden_lens::oracle::attn::sparse_attn(&q, &kv, &sink, &idx, nh, hd, w, scale);
        let mut line = format!("SPARSE_ATTN {label:<20} heads={nh} hd={hd}");
        let mut results = Vec::new();
        for (name, g) in gpus.iter_mut() {
            let (qt, kt, st, it) = (
                g.upload("q", &q)?,
                g.upload("kv", &kv)?,
                g.upload("sink", &sink)?,
                g.upload("idx", &idx_f)?,
            );
            let run = |g: &mut Gpu| -> Result<(f64, Vec<f32>), Box<dyn std::error::Error>> {
                let t = Instant::now();
                let o = sparse_attn(g, &qt, &kt, &st, &it, s, nh, hd, w, scale)?;
                let out = g.read_all(&o)?;
                Ok((t.elapsed().as_secs_f64(), out))
            };
            let (_, out) = run(g)?; // pipeline creation and first touch
            let mut ts = Vec::new();
            for _ in 0..reps.max(1) {
                ts.push(run(g)?.0);
            }
            ts.sort_by(f64::total_cmp);
            let max_abs_err = out
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            let t = ts[ts.len() / 2];
            line.push_str(&format!(
                " | {name}={:>9.1} ms max_abs_err={max_abs_err:.3e}",
                t * 1e3
            ));
            results.push((t, out));
        }
        if let [(t_new, new), (t_dir, dir)] = results.as_slice() {
            let same = new.iter().zip(dir).all(|(a, b)| a.to_bits() == b.to_bits());
            line.push_str(&format!(
                " | dir/new={:.2}x bits_equal={same}",
                t_dir / t_new
            ));
        }
        println!("{line}");
    }
    Ok(())
}
