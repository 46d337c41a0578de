//! Tiny deepseek41 exports: both dialects written from the v3 golden, read back as a
//! `GgufSource` whose config and every parameter equal the filler's (auto types), and the oracle
//! over the GGUF passing the golden exactly like the filler path; a Q8_0 export reports finite,
//! non-zero per-capture errors; gguf-py reads every field and tensor of our exports.

mod gguf_common;

use gguf_common::*;
use golden_lens::gguf::info::value_to_json;
use golden_lens::gguf::{Dialect, GgmlType, GgufFile};
use golden_lens::golden::Golden;
use golden_lens::model::gguf_export::{export_golden, ExportOptions, TypePlan};
use golden_lens::model::{FillerSource, GgufSource, WeightSource};
use golden_lens::oracle::Oracle;
use golden_lens::session::{self, CheckOptions};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use tempfile::TempDir;

fn v3() -> Golden {
    Golden::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/reference/ds41_tiny_golden.v3.json"
    )))
    .unwrap()
}

const DIALECTS: [Dialect; 2] = [Dialect::Ds4, Dialect::LlamaCpp];

fn export(golden: &Golden, dir: &Path, dialect: Dialect, types: &str) -> std::path::PathBuf {
    let p = dir.join(format!(
        "tiny-{dialect:?}-{}.gguf",
        types.replace([',', '='], "_")
    ));
    let mut opts = ExportOptions::new(dialect);
    opts.types = TypePlan::parse(types).unwrap();
    export_golden(golden, &p, &opts).unwrap();
    p
}

#[test]
fn auto_export_reads_back_as_the_filler_in_both_dialects() {
    let golden = v3();
    let (cfg, tables) = session::model_of(&golden).unwrap();
    let filler = FillerSource::new("v3", &golden.weights_meta);
    let dir = TempDir::new().unwrap();
    for dialect in DIALECTS {
        let p = export(&golden, dir.path(), dialect, "");
        let (src, model) = GgufSource::open(&p).unwrap();
        assert_eq!(src.meta().dialect, dialect);
        if dialect == Dialect::LlamaCpp {
            // The candidate prefilter is written as the forks spell it (spec §1.3).
            let file = src.set().primary();
            for key in [
                "deepseek41.attention.candidate_source_layer_id",
                "deepseek41.attention.candidate_topk_blocks",
                "deepseek41.attention.candidate_block_size",
            ] {
                assert!(file.get(key).is_some(), "{key} not written");
            }
        }
        assert_eq!(
            model.cfg, cfg,
            "{dialect:?}: config differs; notes {:?}",
            model.notes
        );
        assert_eq!(model.tables, tables, "{dialect:?}");
        for m in &golden.weights_meta {
            assert_eq!(
                src.shape(&m.name),
                Some(m.shape.clone()),
                "{dialect:?} {}",
                m.name
            );
            let ours = src.tensor(&m.name).unwrap();
            let mut want = (*filler.tensor(&m.name).unwrap()).clone();
            if dialect == Dialect::LlamaCpp && m.name.contains("engram.embed.") {
                // The llama.cpp table holds value x scale; its scales are ones.
                if m.name.ends_with("scale") {
                    want.iter_mut().for_each(|s| *s = 1.0);
                } else {
                    let scales = filler.tensor(&m.name.replace("weight", "scale")).unwrap();
                    let hd = m.shape[1];
                    for (i, v) in want.iter_mut().enumerate() {
                        *v *= scales[(i / hd) * (hd / 32) + (i % hd) / 32];
                    }
                }
            }
            let same = ours
                .iter()
                .zip(want.iter())
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{dialect:?} {}: values differ", m.name);
        }
        // Engram rows are read per lookup, and rows() equals the whole table's rows.
        let rows = [0usize, 461, 7];
        let got = src.rows("layers.1.engram.embed.scale", &rows).unwrap();
        let want = filler.rows("layers.1.engram.embed.scale", &rows).unwrap();
        if dialect == Dialect::Ds4 {
            assert_eq!(got, want);
        } else {
            assert!(
                got.iter().all(|&s| s == 1.0),
                "llama.cpp tables hold scaled values"
            );
        }
        assert!(src.rows("layers.1.engram.embed.weight", &[462]).is_err());
        let f = GgufFile::open(&p).unwrap();
        let last = f.tensors().last().unwrap();
        assert!(
            last.name.ends_with("engram_embd.weight"),
            "engram tables last"
        );
    }
}

#[test]
fn ds4_engram_table_is_the_generalised_fp8_encoding() {
    let golden = v3();
    let dir = TempDir::new().unwrap();
    let p = export(&golden, dir.path(), Dialect::Ds4, "");
    let f = GgufFile::open(&p).unwrap();
    assert_eq!(
        f.get_str("deepseek41.engram.encoding").unwrap(),
        Some("e4m3_e8m0_32_row33")
    );
    let t = f.tensor("blk.4.engram_embd.weight").unwrap();
    assert_eq!((t.ggml_type, t.dims.clone()), (GgmlType::I8, vec![33, 630]));
    assert_eq!(f.alignment(), 16384);
    let p = export(&golden, dir.path(), Dialect::LlamaCpp, "");
    let f = GgufFile::open(&p).unwrap();
    let t = f.tensor("blk.4.engram_embd.weight").unwrap();
    assert_eq!(
        (t.ggml_type, t.dims.clone()),
        (GgmlType::F32, vec![32, 630])
    );
    assert!(f.tensor("blk.1.engram_wkv.weight").is_some());
}

fn run_gguf_check(golden: &Golden, p: &Path) -> session::Report {
    let (src, model) = GgufSource::open(p).unwrap();
    let mut oracle = Oracle::new(model.cfg.clone(), Arc::new(src), model.tables);
    let opts = CheckOptions {
        invariants: Some(model.cfg),
        ..CheckOptions::default()
    };
    session::run_check(golden, &mut oracle, &opts).unwrap()
}

#[test]
fn check_on_the_auto_export_passes_like_the_filler_path() {
    let golden = v3();
    let mut filler_oracle = session::oracle_for(&golden).unwrap();
    let filler = session::run_check(&golden, &mut filler_oracle, &CheckOptions::default()).unwrap();
    assert!(filler.ok());
    let dir = TempDir::new().unwrap();
    for dialect in DIALECTS {
        let report = run_gguf_check(&golden, &export(&golden, dir.path(), dialect, ""));
        assert!(
            report.ok(),
            "{dialect:?}: {:?}",
            report.first_failure().map(|f| &f.name)
        );
        assert_eq!(report.rows.len(), filler.rows.len());
        for (a, b) in report.rows.iter().zip(&filler.rows) {
            assert_eq!(a.name, b.name);
            assert_eq!(
                a.cmp.max_abs_err.to_bits(),
                b.cmp.max_abs_err.to_bits(),
                "{dialect:?} {}: the GGUF path must be bit-identical to the filler path",
                a.name
            );
        }
    }
}

#[test]
fn q8_0_export_reports_its_quantization_error_per_capture() {
    let golden = v3();
    let dir = TempDir::new().unwrap();
    for dialect in DIALECTS {
        let p = export(&golden, dir.path(), dialect, "default=q8_0,vectors=auto");
        let f = GgufFile::open(&p).unwrap();
        assert!(f.tensors().iter().any(|t| t.ggml_type == GgmlType::Q8_0));
        let report = run_gguf_check(&golden, &p);
        for r in &report.rows {
            assert!(r.cmp.max_abs_err.is_finite(), "{dialect:?} {}", r.name);
        }
        let nonzero = report
            .rows
            .iter()
            .filter(|r| r.cmp.max_abs_err > 0.0)
            .count();
        assert!(
            nonzero * 2 > report.rows.len(),
            "{dialect:?}: only {nonzero} of {} captures differ from the golden",
            report.rows.len()
        );
        let embed = report.rows.iter().find(|r| r.name == "embed").unwrap();
        assert!(embed.cmp.max_abs_err > 0.0, "Q8_0 embed must differ");
    }
}

#[test]
fn every_type_exports_and_reads_back_close() {
    let golden = v3();
    let dir = TempDir::new().unwrap();
    // hc mixes are 256 wide: the only tiny rows a K-quant or IQ2_XXS block fits.
    for ty in [
        "f16", "bf16", "q4_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq2_xxs",
    ] {
        let p = export(
            &golden,
            dir.path(),
            Dialect::LlamaCpp,
            &format!("default={ty}"),
        );
        let (src, _) = GgufSource::open(&p).unwrap();
        let f = GgufFile::open(&p).unwrap();
        let t = f.tensor("blk.0.hc_attn_fn.weight").unwrap();
        assert_eq!(t.ggml_type.name().to_ascii_lowercase(), ty);
        let ours = src.tensor("layers.0.hc_attn_fn").unwrap();
        let want = golden_lens::golden::weights::regenerate(
            golden.weight_meta("layers.0.hc_attn_fn").unwrap(),
        )
        .unwrap();
        let amax = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = ours
            .iter()
            .zip(&want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(worst <= amax, "{ty}: worst error {worst} vs amax {amax}");
    }
    assert!(TypePlan::parse("default=q9_9").is_err());
    assert!(TypePlan::parse("nonsense=f16").is_err());
    let mut opts = ExportOptions::new(Dialect::Ds4);
    opts.types = TypePlan::parse("engram=q8_0").unwrap();
    let err = export_golden(&golden, &dir.path().join("x.gguf"), &opts).unwrap_err();
    assert!(err.to_string().contains("only `auto`"), "{err}");
}

/// gguf-py reads our exports with every field and tensor equal.
#[test]
fn gguf_py_reads_our_exports() {
    let Some(python) = python_with_gguf() else {
        return;
    };
    let golden = v3();
    let dir = TempDir::new().unwrap();
    for (dialect, types) in [
        (Dialect::Ds4, "default=auto"),
        (Dialect::LlamaCpp, "default=q8_0,hc=q4_k,blk.0.hc_ffn_fn.weight=iq2_xxs,blk.1.hc_attn_fn.weight=q2_k,blk.1.hc_ffn_fn.weight=q3_k,blk.2.hc_attn_fn.weight=q5_k,blk.2.hc_ffn_fn.weight=q6_k,router=f16,head=q4_0"),
    ] {
        let p = export(&golden, dir.path(), dialect, types);
        let out = dir.path().join(format!("py-{dialect:?}"));
        std::fs::create_dir(&out).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/read_gguf_file.py");
        let o = std::process::Command::new(&python).arg(script).arg(&p).arg(&out).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let read: Value = serde_json::from_slice(&std::fs::read(out.join("read.json")).unwrap()).unwrap();
        let f = GgufFile::open(&p).unwrap();
        assert_eq!(read["alignment"], f.alignment());
        assert_eq!(read["data_offset"], f.data_offset());
        let meta = read["metadata"].as_array().unwrap();
        assert_eq!(meta.len(), f.metadata().len());
        for (entry, py) in f.metadata().iter().zip(meta) {
            assert_eq!(py["key"], entry.key.as_str());
            assert_eq!(py["type"], entry.value.value_type().name());
            assert_eq!(py["value"], value_to_json(&f, &entry.value, None).unwrap(), "{}", entry.key);
        }
        let tensors = read["tensors"].as_array().unwrap();
        assert_eq!(tensors.len(), f.tensors().len());
        let mut types = std::collections::BTreeSet::new();
        for (i, (t, py)) in f.tensors().iter().zip(tensors).enumerate() {
            assert_eq!(py["name"], t.name.as_str());
            assert_eq!(py["type_id"], t.ggml_type.id());
            assert_eq!(py["dims"], json!(t.dims));
            assert_eq!(py["offset"], t.offset);
            assert_eq!(py["n_bytes"], t.n_bytes.unwrap());
            let theirs = read_f32_file(&out.join(format!("t{i}.f32")));
            let ours = f.tensor_f32(&t.name).unwrap();
            assert!(first_bit_mismatch(&ours, &theirs).is_none(), "{} values differ", t.name);
            types.insert(t.ggml_type.name());
        }
        if dialect == Dialect::LlamaCpp {
            for must in ["Q8_0", "Q4_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ2_XXS", "F16", "BF16", "F32"] {
                assert!(types.contains(must), "{must} not in {types:?}");
            }
        } else {
            assert!(types.contains("I8") && types.contains("BF16"), "{types:?}");
        }
    }
}

fn cli(args: &[&str]) -> (bool, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_golden-lens"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr),
    )
}

#[test]
fn cli_export_then_check_on_gguf() {
    let dir = TempDir::new().unwrap();
    let g = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/reference/ds41_tiny_golden.v3.json"
    );
    for dialect in ["ds4", "llamacpp"] {
        let out = dir.path().join(format!("tiny-bf16-{dialect}.gguf"));
        let o = out.to_str().unwrap();
        let (ok, text) = cli(&[
            "gguf",
            "export",
            "--golden",
            g,
            "--out",
            o,
            "--dialect",
            dialect,
        ]);
        assert!(ok, "{text}");
        assert!(text.contains("170 tensors"), "{text}");
        let (ok, text) = cli(&["check", "--golden", g, "--gguf", o, "--quiet"]);
        assert!(ok, "{text}");
        assert!(text.contains("443 passed, 0 failed"), "{text}");
        assert!(!text.contains("differs from the golden"), "{text}");
    }
    let q8 = dir.path().join("tiny-q8.gguf");
    let q8 = q8.to_str().unwrap();
    let (ok, text) = cli(&[
        "gguf",
        "export",
        "--golden",
        g,
        "--out",
        q8,
        "--types",
        "default=q8_0",
    ]);
    assert!(
        ok && text.contains("Q8_0") && text.contains("fallbacks:"),
        "{text}"
    );
    let (ok, text) = cli(&["check", "--golden", g, "--gguf", q8]);
    assert!(!ok, "Q8_0 weights cannot meet the filler bars:\n{text}");
    // One row per capture with its error, e.g. `prefill12  embed  bf16  1.953e-3 ...`.
    let embed = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("embed"))
        .unwrap_or_else(|| panic!("no embed row:\n{text}"));
    let err: f64 = embed.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(err > 0.0 && err.is_finite(), "{embed}");
    let (ok, text) = cli(&[
        "gguf",
        "export",
        "--golden",
        g,
        "--out",
        q8,
        "--types",
        "engram=q4_k",
    ]);
    assert!(!ok && text.contains("only `auto`"), "{text}");
}
