//! Runs one real-dims DeepSeek-V4.1-Flash block through the CPU oracle from filler weights and
//! prints wall time, multiply-adds, throughput and peak memory.
//!
//! `cargo run --release --example realdims_block -- [tokens=16] [layer=2] [cache_gib=4]`

use golden_lens::model::params::block_macs;
use golden_lens::model::{
    Backend, Capture, EngramTables, FillerSource, ModelConfig, Step, WeightSource,
};
use golden_lens::oracle::Oracle;
use std::sync::Arc;
use std::time::Instant;

/// Peak resident set (VmHWM) of this process in KiB, if the kernel reports it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn arg(n: usize, default: usize) -> Result<usize, String> {
    match std::env::args().nth(n) {
        None => Ok(default),
        Some(a) => a.parse().map_err(|e| format!("argument {n} ({a:?}): {e}")),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tokens = arg(1, 16)?;
    let layer = arg(2, 2)?;
    let cache_gib = arg(3, 4)?;
    let cfg = ModelConfig::deepseek_v41_flash();
    cfg.validate()?;
    let t0 = Instant::now();
    let tables = match &cfg.engram {
        Some(e) => Some(EngramTables::derive(e)?),
        None => None,
    };
    let tables_s = t0.elapsed().as_secs_f64();
    // Token ids inside both the vocabulary and the derived (identity) engram token map.
    let id_range = cfg.engram.as_ref().map_or(cfg.vocab_size, |e| {
        e.compressed_vocab_size.min(cfg.vocab_size)
    });
    let ids: Vec<i64> = (0..tokens as u64)
        .map(|t| golden_lens::num::fixed_int("input_ids", t, id_range as u64) as i64)
        .collect();
    let source = Arc::new(
        FillerSource::from_config("DeepSeek-V4.1-Flash dims", &cfg)
            .expect("the real geometry")
            .with_cache_budget_bytes(cache_gib << 30),
    );
    let weights: Arc<dyn WeightSource> = source.clone();
    let macs = block_macs(&cfg, layer, tokens);
    let role = cfg.role(layer);
    let mut oracle = Oracle::new(cfg, weights, tables);
    let mut sink: Vec<Capture> = Vec::new();
    oracle.begin(&ids, 0)?;
    let t1 = Instant::now();
    oracle.run(Step::EngramHash, &mut sink)?;
    oracle.run(Step::Embed, &mut sink)?;
    let embed_s = t1.elapsed().as_secs_f64();
    let gen_before = source.stats().generate_seconds;
    let t2 = Instant::now();
    oracle.run(Step::Block(layer), &mut sink)?;
    let block_s = t2.elapsed().as_secs_f64();
    let stats = source.stats();
    let gen_s = stats.generate_seconds - gen_before;
    let compute_s = (block_s - gen_s).max(f64::MIN_POSITIVE);
    let flops = 2.0 * macs.total() as f64;
    let experts = source
        .materialised_names()
        .iter()
        .filter(|n| n.contains(".ffn.experts."))
        .count()
        / 3;
    println!(
        "layer {layer} ({role:?}), {tokens} tokens of prefill, rayon threads {}",
        rayon::current_num_threads()
    );
    println!("engram tables derived in {tables_s:.3} s; EngramHash+Embed {embed_s:.3} s");
    println!("Block({layer}) wall {block_s:.3} s: filler generation {gen_s:.3} s, compute {compute_s:.3} s");
    println!(
        "multiply-adds {:.3} G ({macs:?})",
        macs.total() as f64 / 1e9
    );
    println!(
        "GFLOP/s (2 x MACs): {:.2} over the block wall time, {:.2} over compute alone",
        flops / block_s / 1e9,
        flops / compute_s / 1e9
    );
    println!(
        "filler: {} tensors, {:.3} G elements generated ({:.1} M elements/s), routed experts materialised {experts}, evictions {}, buffers recycled {}, cache now {:.2} GiB (peak {:.2} GiB, budget {cache_gib} GiB)",
        stats.tensors_generated,
        stats.elements_generated as f64 / 1e9,
        stats.elements_generated as f64 / gen_s.max(f64::MIN_POSITIVE) / 1e6,
        stats.evictions,
        stats.buffers_recycled,
        stats.cache_bytes as f64 / (1u64 << 30) as f64,
        stats.peak_cache_bytes as f64 / (1u64 << 30) as f64,
    );
    match peak_rss_kib() {
        Some(k) => println!("peak RSS (VmHWM) {:.2} GiB", k as f64 / (1u64 << 20) as f64),
        None => println!("peak RSS unavailable (no /proc/self/status)"),
    }
    Ok(())
}
