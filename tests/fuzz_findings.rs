//! Every hostile input of the first fuzzing pass (tests/data/fuzz/, README there) as a
//! regression test: each gives a clear error or a correct result, without panicking, and the
//! ones that used to be quadratic finish well under a second. Each class is also tested where
//! it lives (checked shape arithmetic, expert counts against the tensors, sidecar rows against
//! the sidecar, linear validation), not only through the reproducer that first reached it.

mod gguf_common;

use golden_lens::gguf::info::build_report;
use golden_lens::gguf::quant::{dequantize_engram_rows_with, EngramEncoding};
use golden_lens::gguf::MetaValue;
use golden_lens::gguf::{Deepseek41Meta, GgufFile, GgufSet, GgufWriter};
use golden_lens::golden::embedded::DEFAULT_GOLDEN_JSON;
use golden_lens::golden::Golden;
use golden_lens::model::gguf_export::{export_golden, ExportOptions, TypePlan};
use golden_lens::model::params::{param_groups, param_list, ParamName};
use golden_lens::model::{GgufSource, ModelConfig, WeightSource};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Wall-clock bound for parsing or validating one reproducer (each is at most 0.8 MB). The
/// quadratic versions took 0.4 s (F6) to 23 s (F7) in release; the linear ones take a few
/// milliseconds, so one second leaves room for a debug build on a loaded machine and still
/// fails on any quadratic scan of these sizes.
const MAX_SECONDS_PER_REPRODUCER: Duration = Duration::from_secs(1);

fn data(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/fuzz/")).join(name)
}

fn reference(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/golden/reference/")).join(name)
}

/// Runs `f`, requires it to finish within [`MAX_SECONDS_PER_REPRODUCER`], returns its result.
fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    assert!(
        took <= MAX_SECONDS_PER_REPRODUCER,
        "{what} took {took:?}, more than {MAX_SECONDS_PER_REPRODUCER:?} (a quadratic scan?)"
    );
    out
}

/// Opens a deepseek41 GGUF as a model and returns the error it must give.
fn model_error(path: &Path) -> String {
    match GgufSource::open(path) {
        Ok(_) => panic!("{} opened as a model", path.display()),
        Err(e) => e.to_string(),
    }
}

fn tiny_config() -> ModelConfig {
    let g = Golden::parse(DEFAULT_GOLDEN_JSON, Path::new("<embedded>")).expect("golden");
    ModelConfig::from_fixture(&g.fixture).expect("config")
}

#[test]
fn f1_census_sums_do_not_overflow() {
    let set = GgufSet::open(data("F1_census_overflow.gguf")).expect("a valid GGUF container");
    let report = build_report(&set).expect("the report builds");
    let total = report.census.last().expect("a total row");
    assert_eq!(total.ggml_type, "total");
    // Three tensors of an unknown type, each claiming i64::MAX elements: the exact sum.
    assert_eq!(total.count, 3);
    assert_eq!(total.n_elements, 3 * u128::from(i64::MAX as u64));
    assert_eq!(total.bytes, 0);
}

#[test]
fn f2_a_claimed_expert_count_is_bounded_by_the_file() {
    let e = timed("F2", || model_error(&data("F2_experts_2p40.gguf")));
    assert!(e.contains("no tensor of layer 0"), "{e}");
}

/// The expert bound itself: a config claiming 2^40 experts over a file whose merged expert
/// tensors hold 4 is refused when the source is built, before anything is listed per expert.
#[test]
fn f2_an_expert_count_the_merged_tensors_do_not_hold_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tiny.gguf");
    let golden = Golden::load(&reference("ds41_tiny_golden.v3.json")).expect("v3");
    export_golden(
        &golden,
        &path,
        &ExportOptions::new(golden_lens::gguf::Dialect::Ds4),
    )
    .expect("export");
    let set = GgufSet::open(&path).expect("open");
    let meta = Deepseek41Meta::from_set(&set).expect("meta");
    let mut cfg = tiny_config();
    cfg.n_routed_experts = 1 << 40;
    let e = timed("2^40 experts", || {
        GgufSource::new(set, meta, &cfg).err().expect("refused")
    })
    .to_string();
    assert!(e.contains("1099511627776 routed experts"), "{e}");
    assert!(e.contains("ffn_gate_exps"), "{e}");
}

#[test]
fn f3_shape_products_are_checked() {
    let e = timed("F3", || model_error(&data("F3_heads_mul_overflow.gguf")));
    assert!(e.contains("layer 0"), "{e}");
    // The geometry F3 claims (2^40 heads of 2^30) is refused by the config itself.
    let mut cfg = tiny_config();
    cfg.n_heads = 1 << 40;
    cfg.o_groups = 1;
    cfg.head_dim = 1 << 30;
    let e = cfg
        .validate()
        .expect_err("overflowing geometry")
        .to_string();
    assert!(e.contains("overflows"), "{e}");
    assert!(param_groups(&cfg).is_err());
    assert!(param_list(&cfg).is_err());
    // hc_mult x dim and the element total overflow too.
    let mut cfg = tiny_config();
    cfg.hc_mult = usize::MAX / 2;
    assert!(cfg.validate().is_err());
    let mut cfg = tiny_config();
    cfg.vocab_size = usize::MAX / 2;
    assert!(cfg.validate().is_err());
}

#[test]
fn f4_external_engram_rows_are_checked_against_the_sidecars() {
    let e = timed("F4", || {
        model_error(&data("F4_external_rows_overflow.gguf"))
    });
    assert!(e.contains("engram sidecar \"a\""), "{e}");
    // The rows F4 claims (sums of 2^60 primes) overflow [rows, head_dim] in the config too.
    let mut cfg = tiny_config();
    let engram = cfg.engram.as_mut().expect("engram");
    engram.num_embeddings = vec![1 << 62; engram.layer_ids.len()];
    let e = cfg.validate().expect_err("overflowing rows").to_string();
    assert!(e.contains("engram.embed.weight"), "{e}");
}

#[test]
fn f5_forty_thousand_regimes_parse_in_linear_time() {
    let g = timed("F5", || {
        Golden::load(&data("F5_regimes_40000.json")).expect("a valid golden")
    });
    assert_eq!(g.regimes.len(), 40_001);
    assert_eq!(g.regimes[1].name, "r0");
}

#[test]
fn f6_engram_layer_duplicates_are_found_in_linear_time() {
    let set = GgufSet::open(data("F6_engram_layers_80000.gguf")).expect("container");
    let e = timed("F6", || {
        Deepseek41Meta::from_set(&set).expect_err("refused")
    })
    .to_string();
    // All 80,000 layer ids pass the duplicate check; the first missing table stops it.
    assert!(e.contains("blk.0.engram_embd.weight"), "{e}");
}

#[test]
fn f7_source_layer_lists_are_validated_in_linear_time() {
    let e = timed("F7", || model_error(&data("F7_kv_source_40000.gguf")));
    assert!(e.contains("40000 layers"), "{e}");
    // The config's own checks: a 40,000-layer geometry validates quickly, and a list that
    // names a layer twice (F7's 40,000 zeros) is refused by name.
    let mut cfg = tiny_config();
    let n = 40_000;
    cfg.n_layers = n;
    cfg.compress_ratios = vec![2; n];
    cfg.kv_source_layers = (0..n).step_by(2).collect();
    cfg.index_source_layers = (0..n).collect();
    cfg.candidate_source_layer = None;
    cfg.engram = None;
    timed("40,000-layer validate", || cfg.validate()).expect("valid");
    cfg.kv_source_layers = vec![0; n];
    let e = cfg.validate().expect_err("duplicates").to_string();
    assert!(
        e.contains("kv_source_layers") && e.contains("strictly ascending"),
        "{e}"
    );
}

/// The fuzzer's own crash and OOM inputs for the weight source: a GGUF plus a 4-byte harness
/// trailer; the harness zero-filled the file to 1 MiB so tensor data lie inside it.
#[test]
fn fuzzer_weight_source_inputs_give_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut names: Vec<_> = std::fs::read_dir(data(""))
        .expect("tests/data/fuzz")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "fuzzinput"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 5, "the five gguf_source inputs");
    for input in names {
        let bytes = std::fs::read(&input).expect("read");
        let path = dir.path().join("input.gguf");
        std::fs::write(&path, &bytes[..bytes.len() - 4]).expect("write");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        f.set_len(1 << 20).expect("zero-fill");
        drop(f);
        let what = input.file_name().unwrap_or_default().to_string_lossy();
        timed(&what, || match GgufSource::open(&path) {
            Err(e) => assert!(!e.to_string().is_empty()),
            // Opened: every parameter either loads or says why, within bounded memory.
            Ok((source, model)) => {
                let groups = param_groups(&model.cfg).expect("validated config");
                for g in groups {
                    let name = match g.name {
                        ParamName::Experts { layer, .. } => ParamName::expert_name(layer, 0, "w1"),
                        single => single.single_name().expect("a single parameter"),
                    };
                    if source.shape(&name).is_some() {
                        let _ = source.rows(&name, &[0]);
                    }
                }
            }
        });
    }
}

#[test]
fn f8_the_e4m3_constructor_refuses_widths_that_are_not_rows() {
    for bad in [0, 1, 31, 33, 100, u32::MAX] {
        assert_eq!(EngramEncoding::e4m3_with_values(bad), None, "{bad}");
    }
    assert_eq!(
        EngramEncoding::e4m3_with_values(256),
        Some(EngramEncoding::E4m3E8m0Row264)
    );
    assert_eq!(
        EngramEncoding::e4m3_with_values(64),
        Some(EngramEncoding::E4m3E8m0Row { values: 64 })
    );
    // The variant's field is public: a hand-built odd width is refused by the decoder.
    let odd = EngramEncoding::E4m3E8m0Row { values: 33 };
    assert!(!odd.is_well_formed());
    let mut out = [0f32; 33];
    assert!(dequantize_engram_rows_with(&odd, 33, &[0u8; 34], &mut out).is_err());
    assert!(odd.bytes_per_row().is_none());
}

/// The number of values `GgufSource::rows` returns for one row of a 3-D tensor is the row's
/// whole width (ne1 x ne0), with the values of that row.
#[test]
fn rows_of_a_3d_tensor_are_whole_rows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let flat = dir.path().join("flat.gguf");
    let golden = Golden::load(&reference("ds41_tiny_golden.v3.json")).expect("v3");
    let mut opts = ExportOptions::new(golden_lens::gguf::Dialect::Ds4);
    opts.types = TypePlan::parse("f32").expect("plan");
    export_golden(&golden, &flat, &opts).expect("export");
    // Rewrite the file with `blk.0.attn_q_b.weight` ([16, 128] in ggml order) as [16, 4, 32].
    let reshaped = dir.path().join("reshaped.gguf");
    let name = "blk.0.attn_q_b.weight";
    rewrite_with_dims(&flat, &reshaped, name, &[16, 4, 32]);
    let (src_flat, _) = GgufSource::open(&flat).expect("flat");
    let (src_3d, _) = GgufSource::open(&reshaped).expect("reshaped");
    let param = "layers.0.attn.wq_b.weight";
    assert_eq!(src_3d.shape(param), Some(vec![32, 4, 16]));
    let row = src_3d.rows(param, &[1]).expect("row 1");
    assert_eq!(row.len(), 4 * 16);
    // Torch row 1 of [32, 4, 16] is rows 4..8 of the same data seen as [128, 16].
    let expected = src_flat.rows(param, &[4, 5, 6, 7]).expect("rows 4..8");
    assert_eq!(row, expected);
}

/// Copies a GGUF, giving tensor `name` other dims with the same element count.
fn rewrite_with_dims(from: &Path, to: &Path, name: &str, dims: &[u64]) {
    let file = GgufFile::open(from).expect("open");
    let mut w = GgufWriter::new();
    for entry in file.metadata() {
        if entry.key == "general.alignment" {
            if let MetaValue::U32(a) = entry.value {
                w.set_alignment(a).expect("alignment");
            }
            continue;
        }
        w.add(&entry.key, gguf_common::writer_value(&file, &entry.value))
            .expect("metadata");
    }
    for t in file.tensors() {
        let bytes = file.tensor_bytes(&t.name).expect("bytes").to_vec();
        let d = if t.name == name { dims } else { &t.dims[..] };
        w.add_tensor(&t.name, d, t.ggml_type, bytes)
            .expect("tensor");
    }
    w.write(to).expect("write");
    assert_eq!(
        GgufFile::open(to)
            .expect("reopen")
            .tensor(name)
            .map(|t| t.dims.clone()),
        Some(dims.to_vec())
    );
}

/// Engram tables derived from a fixture (v1 goldens) are bounded: a vocabulary or a prime
/// count no file backs is refused at once instead of trial-dividing near 2^62.
#[test]
fn derived_engram_tables_refuse_claimed_sizes() {
    use golden_lens::model::engram::{derived_rows, EngramTables};
    let cfg = tiny_config();
    let mut e = cfg.engram.clone().expect("engram");
    let ok = timed("tiny derivation", || derived_rows(&e)).expect("the tiny tables derive");
    assert_eq!(ok.len(), e.layer_ids.len());
    e.vocab_size = 1 << 62;
    let err = timed("huge vocab", || {
        EngramTables::derive(&e).expect_err("refused")
    });
    assert!(err.0.contains("must be read from the file"), "{}", err.0);
    let mut e = cfg.engram.clone().expect("engram");
    e.n_heads = 1 << 40;
    assert!(timed("huge head count", || derived_rows(&e)).is_err());
}
