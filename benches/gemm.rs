//! The oracle's GEMM kernels at real-dims shapes, per weight encoding and kernel path:
//! `cargo bench --bench gemm`. `golden-lens bench` prints the same shapes as fractions of this
//! machine's measured limits; this is the criterion view (time per call, regressions).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use golden_lens::gguf::quant::sample::random_blocks;
use golden_lens::gguf::GgmlType;
use golden_lens::model::stored::StoredMatrix;
use golden_lens::oracle::gemm::{gemm_on, supported_paths, WeightRows};
use std::borrow::Cow;
use std::hint::black_box;
use std::time::Duration;

/// `(what, n, k)`: an attention projection and an expert's down projection.
const SHAPES: [(&str, usize, usize); 2] = [("wq_a", 1280, 5120), ("expert_w2", 5120, 2304)];
/// Decode and a 16-token prefill.
const TOKENS: [usize; 2] = [1, 16];

fn inputs(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| golden_lens::num::bf16_round(((i * 7919 % 2003) as f32 - 1001.0) / 997.0))
        .collect()
}

fn gemm(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemm");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (what, n, k) in SHAPES {
        let dense = inputs(n * k);
        for ty in [GgmlType::Bf16, GgmlType::Q2K, GgmlType::Iq2Xxs] {
            let (bv, _, _) = golden_lens::gguf::quant::block_decoder(ty).expect("decoder");
            let bytes = random_blocks(ty, n * k / bv, 1).expect("blocks");
            let stored =
                StoredMatrix::new(what, ty, n, k, Cow::Owned(bytes), true).expect("valid matrix");
            for m in TOKENS {
                let x = inputs(m * k);
                group.throughput(Throughput::Elements((2 * m * n * k) as u64));
                for path in supported_paths() {
                    let id = format!("{what}/{}/m{m}/{}", ty.name(), path.name());
                    group.bench_function(BenchmarkId::from_parameter(id), |b| {
                        b.iter(|| {
                            black_box(gemm_on(
                                path,
                                &x,
                                m,
                                k,
                                WeightRows::Stored(&stored),
                                n,
                                true,
                            ))
                        })
                    });
                }
                if ty == GgmlType::Bf16 {
                    let id = format!("{what}/f32/m{m}");
                    group.bench_function(BenchmarkId::from_parameter(id), |b| {
                        b.iter(|| {
                            let path = golden_lens::oracle::gemm::best_path();
                            black_box(gemm_on(path, &x, m, k, WeightRows::F32(&dense), n, true))
                        })
                    });
                }
            }
        }
    }
    group.finish();
}

criterion_group!(benches, gemm);
criterion_main!(benches);
