//! The oracle's GEMM kernels keep the bits: the check report on the reference goldens is
//! identical for every kernel path this CPU supports (portable, AVX2, AVX-512, NEON) and for 1, 2
//! and 16 rayon threads; GEMMs over a file's own blocks (no f32 copy) equal dequantize-then-GEMM
//! bit for bit for every decodable type, and a whole check over a quantized GGUF export gives
//! the same report whether the oracle multiplies the blocks or their f32 copies.

use golden_lens::gguf::quant::{dequantize, encode::quantize, sample::random_blocks};
use golden_lens::gguf::{Dialect, GgmlType};
use golden_lens::golden::Golden;
use golden_lens::model::gguf_export::{export_golden, ExportOptions, TypePlan};
use golden_lens::model::stored::StoredMatrix;
use golden_lens::model::{GgufSource, WeightError, WeightSource};
use golden_lens::oracle::gemm::{
    gemm_on, set_kernel_path, supported_paths, KernelPath, WeightRows,
};
use golden_lens::oracle::Oracle;
use golden_lens::session::{self, CheckOptions, Mode};
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

/// Thread counts the report must not depend on: one, this machine's two, and more threads than
/// cores (tasks then interleave differently again).
const THREAD_COUNTS: [usize; 3] = [1, 2, 16];

/// A reference golden from the repository's copies (golden/reference/).
fn reference(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("golden/reference")
        .join(name)
}

fn report_json(golden: &Golden, oracle: &mut Oracle, mode: Mode) -> String {
    let opts = CheckOptions {
        mode,
        ..Default::default()
    };
    let report = session::run_check(golden, oracle, &opts).expect("check runs");
    report.to_json().to_string()
}

fn on_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool")
        .install(f)
}

#[test]
fn reports_are_identical_for_every_kernel_path_and_thread_count() {
    let paths = supported_paths();
    assert!(paths.len() >= 2 || cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64"))));
    for (name, mode) in [
        ("ds41_tiny_golden.v3.json", Mode::Chained),
        ("ds41_tiny_golden.v3-full.json", Mode::Isolated),
        ("ds41_tiny_golden.v1.json", Mode::Chained),
    ] {
        let golden = Golden::load(&reference(name)).expect("golden loads");
        let mut first: Option<(String, String)> = None;
        for &path in &paths {
            for threads in THREAD_COUNTS {
                set_kernel_path(Some(path)).expect("supported path");
                let json = on_threads(threads, || {
                    let mut oracle = session::oracle_for(&golden).expect("oracle");
                    report_json(&golden, &mut oracle, mode)
                });
                let label = format!("{} x {threads} threads", path.name());
                match &first {
                    None => first = Some((label, json)),
                    Some((l0, j0)) => assert!(
                        *j0 == json,
                        "{name}: the report on {label} differs from the one on {l0}"
                    ),
                }
            }
        }
        set_kernel_path(None).expect("reset");
    }
}

/// Deterministic values of mixed sign and magnitude.
fn values(len: usize, salt: u64) -> Vec<f32> {
    (0..len as u64)
        .map(|i| {
            let r = golden_lens::num::splitmix64(i ^ salt.wrapping_mul(0x9e37_79b9));
            ((r >> 40) as f32 / 8_388_608.0 - 1.0) * if r & 7 == 0 { 8.0 } else { 0.5 }
        })
        .collect()
}

/// `rows × cols` blocks of `ty`: encoded from values where an encoder exists, else (MXFP4)
/// random valid blocks.
fn blocks(ty: GgmlType, rows: usize, cols: usize, salt: u64) -> Vec<u8> {
    if ty == GgmlType::Mxfp4 {
        return random_blocks(ty, rows * cols / 32, salt).expect("MXFP4 blocks");
    }
    quantize(ty, &values(rows * cols, salt)).expect("encodable")
}

#[test]
fn gemm_over_stored_blocks_equals_dequantize_then_gemm() {
    use GgmlType::*;
    // Ragged panels and tasks; enough multiply-adds at m = 1 for the GEMM to go parallel.
    let n = 100;
    for ty in [
        Q2K, Q3K, Q4K, Iq2Xxs, Mxfp4, Q8_0, Q4_0, Q5K, Q6K, F16, Bf16, F32,
    ] {
        // Three whole 256-column chunks; for 32-value blocks also a ragged last chunk.
        let ks: &[usize] = match ty {
            Mxfp4 | Q8_0 | Q4_0 | F16 | Bf16 | F32 => &[768, 800],
            _ => &[768],
        };
        for &k in ks {
            let bytes = blocks(ty, n, k, ty.id() as u64);
            for round_bf16 in [false, true] {
                stored_equals_dense(ty, &bytes, (n, k), round_bf16);
            }
        }
    }
}

/// Every path and thread count, over the blocks and over their f32 copy, gives the portable
/// kernel's bits over the f32 copy, for 1 to 4 (the fused and direct kernels), 5, 8, 16 and 70
/// input rows (two blocks of `MC` rows).
fn stored_equals_dense(ty: GgmlType, bytes: &[u8], (n, k): (usize, usize), round_bf16: bool) {
    let stored = StoredMatrix::new("w", ty, n, k, Cow::Borrowed(bytes), round_bf16).expect("valid");
    let mut dense = vec![0f32; n * k];
    dequantize(ty, bytes, &mut dense).expect("dequantize");
    if round_bf16 {
        dense
            .iter_mut()
            .for_each(|v| *v = golden_lens::num::bf16_round(*v));
    }
    for m in [1, 2, 3, 4, 5, 8, 16, 70] {
        let x: Vec<f32> = values(m * k, 99)
            .into_iter()
            .map(golden_lens::num::bf16_round)
            .collect();
        for out_bf16 in [false, true] {
            // The definition: the portable kernel over the f32 copy.
            let want = gemm_on(
                KernelPath::Portable,
                &x,
                m,
                k,
                WeightRows::F32(&dense),
                n,
                out_bf16,
            );
            for path in supported_paths() {
                for threads in THREAD_COUNTS {
                    for w in [WeightRows::F32(&dense), WeightRows::Stored(&stored)] {
                        let got = on_threads(threads, || gemm_on(path, &x, m, k, w, n, out_bf16));
                        let same = want
                            .iter()
                            .zip(&got)
                            .all(|(p, q)| p.to_bits() == q.to_bits());
                        assert!(
                            same,
                            "{} k {k} m {m} round {round_bf16} path {} threads {threads} out_bf16 {out_bf16} stored {}",
                            ty.name(),
                            path.name(),
                            matches!(w, WeightRows::Stored(_))
                        );
                    }
                }
            }
        }
    }
}

/// A GGUF source that never lends its blocks, so the oracle multiplies f32 copies.
struct DenseOnly(GgufSource);

impl WeightSource for DenseOnly {
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.0.shape(name)
    }
    fn tensor(&self, name: &str) -> Result<Arc<Vec<f32>>, WeightError> {
        self.0.tensor(name)
    }
    fn rows(&self, name: &str, rows: &[usize]) -> Result<Vec<f32>, WeightError> {
        self.0.rows(name, rows)
    }
}

#[test]
fn a_quantized_export_checks_the_same_from_blocks_and_from_f32_copies() {
    let golden = Golden::load(&reference("ds41_tiny_golden.v3.json")).expect("golden loads");
    let dir = tempfile::TempDir::new().expect("tempdir");
    for (dialect, types) in [
        (
            Dialect::LlamaCpp,
            "default=q8_0,hc=q4_k,router=f16,head=q4_0",
        ),
        (Dialect::Ds4, "default=auto"),
    ] {
        let p = dir.path().join(format!("tiny-{dialect:?}.gguf"));
        let mut opts = ExportOptions::new(dialect);
        opts.types = TypePlan::parse(types).expect("type plan");
        export_golden(&golden, &p, &opts).expect("export");
        let (stored_src, model) = GgufSource::open(&p).expect("open");
        let lent = golden
            .weights_meta
            .iter()
            .filter(|m| matches!(stored_src.stored_matrix(&m.name), Some(Ok(_))))
            .count();
        assert!(lent > 10, "{types}: only {lent} parameters lent as blocks");
        let (dense_src, _) = GgufSource::open(&p).expect("open");
        let run = |w: Arc<dyn WeightSource>| {
            let mut oracle = Oracle::new(model.cfg.clone(), w, model.tables.clone());
            report_json(&golden, &mut oracle, Mode::Chained)
        };
        let from_blocks = run(Arc::new(stored_src));
        let from_copies = run(Arc::new(DenseOnly(dense_src)));
        assert!(from_blocks == from_copies, "{types}: reports differ");
    }
}
