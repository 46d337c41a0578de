//! One real-dims DeepSeek-V4.1-Flash compressed block (layer 2 by default: ratio 2, Compressor,
//! Indexer) from filler weights, through the CPU oracle and the wgpu path, with weights above
//! the adapter's storage-binding limit chunked. Prints both wall times and the GPU-vs-oracle
//! agreement of the block's captures.
//!
//! `cargo run --release --features gpu --example gpu_realdims_block -- [tokens=2] [layer=2]`

#[cfg(not(feature = "gpu"))]
fn main() {
    eprintln!("this example needs the `gpu` feature: cargo run --features gpu --example gpu_realdims_block");
}

#[cfg(feature = "gpu")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use golden_lens::golden::compare::{compare_full, Values};
    use golden_lens::golden::policy::backend_policy_for_capture as gpu_policy_for_capture;
    use golden_lens::gpu::{GpuBackend, GpuContext, GpuOptions};
    use golden_lens::model::{
        Backend, Capture, CaptureValues, EngramTables, FillerSource, ModelConfig, Step,
        WeightSource,
    };
    use golden_lens::oracle::Oracle;
    use std::sync::Arc;
    use std::time::Instant;

    let arg = |n: usize, default: usize| -> Result<usize, String> {
        match std::env::args().nth(n) {
            None => Ok(default),
            Some(a) => a.parse().map_err(|e| format!("argument {n} ({a:?}): {e}")),
        }
    };
    let tokens = arg(1, 2)?;
    let layer = arg(2, 2)?;
    let cfg = ModelConfig::deepseek_v41_flash();
    cfg.validate()?;
    let tables = match &cfg.engram {
        Some(e) => Some(EngramTables::derive(e)?),
        None => None,
    };
    let id_range = cfg.engram.as_ref().map_or(cfg.vocab_size, |e| {
        e.compressed_vocab_size.min(cfg.vocab_size)
    });
    let ids: Vec<i64> = (0..tokens as u64)
        .map(|t| golden_lens::num::fixed_int("input_ids", t, id_range as u64) as i64)
        .collect();
    let source = Arc::new(
        FillerSource::from_config("DeepSeek-V4.1-Flash dims", &cfg)
            .expect("the real geometry")
            .with_cache_budget_bytes(8 << 30),
    );
    let weights: Arc<dyn WeightSource> = source.clone();
    let ctx = GpuContext::new()?;
    println!("adapter: {}", ctx.adapter);
    println!(
        "layer {layer} ({:?}), {tokens} tokens of prefill",
        cfg.role(layer)
    );

    let run = |b: &mut dyn Backend| -> Result<(Vec<Capture>, f64), Box<dyn std::error::Error>> {
        let mut sink = Vec::new();
        b.begin(&ids, 0)?;
        b.run(Step::EngramHash, &mut sink)?;
        b.run(Step::Embed, &mut sink)?;
        sink.clear();
        let t = Instant::now();
        b.run(Step::Block(layer), &mut sink)?;
        Ok((sink, t.elapsed().as_secs_f64()))
    };
    let mut oracle = Oracle::new(cfg.clone(), weights.clone(), tables.clone());
    let gen0 = source.stats().generate_seconds;
    let (cpu_caps, cpu_s) = run(&mut oracle)?;
    let gen_s = source.stats().generate_seconds - gen0;
    println!("oracle Block({layer}): {cpu_s:.3} s wall ({gen_s:.3} s of it generating filler weights), rayon threads {}", rayon::current_num_threads());
    let mut gpu = GpuBackend::new(
        ctx,
        cfg,
        weights,
        tables,
        GpuOptions {
            reference_ties: true,
            ..Default::default()
        },
    )?;
    let (gpu_caps, gpu_s) = run(&mut gpu)?;
    println!("gpu    Block({layer}): {gpu_s:.3} s wall incl. weight upload ({} dispatches; weights from the warm filler cache)", gpu.dispatch_count());
    let (gpu_caps2, gpu_s2) = run(&mut gpu)?;
    println!("gpu    Block({layer}) again (weights resident, fresh regime state not reset): {gpu_s2:.3} s wall");
    let _ = gpu_caps2;
    let mut within = 0;
    let mut exact = 0;
    for c in &gpu_caps {
        let Some(r) = cpu_caps.iter().find(|r| r.name == c.name) else {
            continue;
        };
        fn v(x: &Capture) -> Values<'_> {
            match &x.values {
                CaptureValues::F32(v) => Values::F32(v),
                CaptureValues::I64(v) => Values::I64(v),
            }
        }
        let is_int = matches!(r.values, CaptureValues::I64(_));
        let cmp = compare_full(
            v(c),
            v(r),
            &r.shape,
            &gpu_policy_for_capture(&c.name, is_int),
        );
        within += cmp.pass as usize;
        exact += cmp.bit_exact as usize;
        if !cmp.pass {
            println!("  {} outside the GPU policy: {}", c.name, cmp.reason);
        }
    }
    println!("captures: {} from the gpu, {within} within the GPU policy of the oracle, {exact} bit-exact", gpu_caps.len());
    println!("REALDIMS_SUMMARY layer={layer} tokens={tokens} oracle_s={cpu_s:.3} gpu_s={gpu_s:.3} gpu_warm_s={gpu_s2:.3}");
    Ok(())
}
