//! Row decoders of every block type, fast (chosen by the CPU) against the one-block reference
//! decoders: `cargo bench --bench dequant`. Throughput is in f32 values produced.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use golden_lens::gguf::quant::sample::random_blocks;
use golden_lens::gguf::quant::{block_decoder, reference_block_decoder};
use golden_lens::gguf::GgmlType;
use std::hint::black_box;
use std::time::Duration;

/// Values decoded per iteration (4 MiB of output: beyond L2, inside a large L3).
const VALUES: usize = 1 << 20;

fn dequant(c: &mut Criterion) {
    use GgmlType::*;
    let mut group = c.benchmark_group("dequant");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(VALUES as u64));
    let mut out = vec![0f32; VALUES];
    for ty in [
        F32, F16, Bf16, I8, Q8_0, Q4_0, Q2K, Q3K, Q4K, Q5K, Q6K, Iq2Xxs, Mxfp4,
    ] {
        let (bv, _, fast) = block_decoder(ty).expect("decoder");
        let (_, _, reference) = reference_block_decoder(ty).expect("decoder");
        let blocks = random_blocks(ty, VALUES / bv, 3).expect("blocks");
        for (which, decode) in [("fast", fast), ("reference", reference)] {
            let id = format!("{}/{which}", ty.name());
            group.bench_function(BenchmarkId::from_parameter(id), |b| {
                b.iter(|| decode(black_box(&blocks), &mut out))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, dequant);
criterion_main!(benches);
