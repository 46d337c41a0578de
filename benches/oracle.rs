//! CPU oracle benchmarks: (a) the whole tiny-golden check (v3, chained); (b) one real-dims
//! DeepSeek-V4.1-Flash compressed block (layer 2: ratio 2, kv and index source, so the
//! Compressor and the Indexer both run) for a 16-token prefill from filler weights.
//!
//! `cargo bench --bench oracle` (three minutes on two idle cores, more on a loaded machine;
//! criterion runs the real-dims block exactly ten times, one per sample). The real-dims block
//! regenerates its weights every iteration (they do not fit the cache), so its time is filler
//! generation plus compute; `examples/realdims_block.rs` prints the split.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode};
use golden_lens::golden::Golden;
use golden_lens::model::{
    Backend, Capture, EngramTables, FillerSource, ModelConfig, Step, WeightSource,
};
use golden_lens::oracle::Oracle;
use golden_lens::session::{oracle_for, run_check, CheckOptions};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Prefill length of the real-dims block: eight ratio-2 groups, enough for the Indexer to rank.
const REAL_TOKENS: usize = 16;
/// The real-dims layer: the first compressed layer, a kv and index source.
const REAL_LAYER: usize = 2;

fn tiny_check(c: &mut Criterion) {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/reference/ds41_tiny_golden.v3.json"
    ));
    let golden = match Golden::load(&path) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("skipping tiny_check: {}: {e}", path.display());
            return;
        }
    };
    let opts = CheckOptions::default();
    let mut group = c.benchmark_group("tiny");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("v3_chained_check", |b| {
        b.iter(|| {
            let mut oracle = oracle_for(&golden).expect("oracle");
            let report = run_check(&golden, &mut oracle, &opts).expect("check");
            black_box(report)
        })
    });
    group.finish();
}

fn real_block(c: &mut Criterion) {
    let cfg = ModelConfig::deepseek_v41_flash();
    let tables = cfg
        .engram
        .as_ref()
        .map(|e| EngramTables::derive(e).expect("engram tables"));
    // Ids inside the vocabulary and the derived (identity) engram token map.
    let id_range = cfg.engram.as_ref().map_or(cfg.vocab_size, |e| {
        e.compressed_vocab_size.min(cfg.vocab_size)
    });
    let ids: Vec<i64> = (0..REAL_TOKENS as u64)
        .map(|t| golden_lens::num::fixed_int("input_ids", t, id_range as u64) as i64)
        .collect();
    let weights: Arc<dyn WeightSource> =
        Arc::new(FillerSource::from_config("DeepSeek-V4.1-Flash dims", &cfg).expect("geometry"));
    let mut group = c.benchmark_group("real_dims");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(150));
    group.bench_function("layer2_block_prefill16", |b| {
        b.iter_batched(
            || {
                // A fresh oracle with its stream seeded by Embed; only Block(l) is timed.
                let mut oracle = Oracle::new(cfg.clone(), weights.clone(), tables.clone());
                let mut sink: Vec<Capture> = Vec::new();
                oracle.begin(&ids, 0).expect("begin");
                oracle.run(Step::EngramHash, &mut sink).expect("hash");
                oracle.run(Step::Embed, &mut sink).expect("embed");
                oracle
            },
            |mut oracle| {
                let mut sink: Vec<Capture> = Vec::new();
                oracle
                    .run(Step::Block(REAL_LAYER), &mut sink)
                    .expect("block");
                black_box(sink)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, tiny_check, real_block);
criterion_main!(benches);
