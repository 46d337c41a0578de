//! Cross-checks against gguf-py 0.19.0: (a) files written by `gguf.GGUFWriter` read field by field
//! and tensor by tensor the way `gguf.GGUFReader` reads them; (b) random well-formed blocks of
//! every block type dequantize bit for bit like `gguf.quants.dequantize`; (c) our Q8_0, Q4_0,
//! BF16, F16 and MXFP4 encoders write the same bytes as `gguf.quants.quantize`.
//!
//! Needs a python with gguf==0.19.0: `GOLDEN_LENS_PY`, or a venv the test creates under the target
//! dir. Under `CI=true` a missing python fails; otherwise the tests skip with a notice.

mod gguf_common;

use gguf_common::*;
use golden_lens::gguf::info::value_to_json;
use golden_lens::gguf::quant::dequantize;
use golden_lens::gguf::quant::encode::quantize;
use golden_lens::gguf::{GgmlType, GgufFile, MetaValue};
use serde_json::Value;
use std::path::Path;
use tempfile::TempDir;

#[test]
fn dequant_matches_gguf_py_bit_for_bit() {
    let Some(python) = python_with_gguf() else {
        return;
    };
    let dir = TempDir::new().unwrap();
    run_py_script(&python, "gen_quant_blocks.py", dir.path());
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("manifest.json")).unwrap()).unwrap();
    let entries = manifest.as_array().unwrap();
    let mut checked = Vec::new();
    for entry in entries {
        let name = entry["type"].as_str().unwrap();
        let ty = GgmlType::from_name(name).unwrap();
        assert_eq!(ty.id() as u64, entry["type_id"].as_u64().unwrap());
        let blocks = std::fs::read(dir.path().join(format!("{name}.blocks"))).unwrap();
        let expected = read_f32_file(&dir.path().join(format!("{name}.f32")));
        assert_eq!(expected.len() as u64, entry["n_values"].as_u64().unwrap());
        let mut ours = vec![0f32; expected.len()];
        dequantize(ty, &blocks, &mut ours).unwrap();
        if let Some((i, a, b)) = first_bit_mismatch(&ours, &expected) {
            panic!("{name}: value {i} differs: golden-lens {a:e} ({:#010x}) vs gguf-py {b:e} ({:#010x})", a.to_bits(), b.to_bits());
        }
        checked.push(name.to_string());
    }
    for must in [
        "Q8_0", "Q4_0", "MXFP4", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ2_XXS", "F16", "BF16",
    ] {
        assert!(
            checked.iter().any(|c| c == must),
            "{must} not cross-checked"
        );
    }
}

fn check_file_against_reader(dir: &Path, expected: &Value) {
    let name = expected["file"].as_str().unwrap();
    let f = GgufFile::open(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        f.alignment(),
        expected["alignment"].as_u64().unwrap(),
        "{name}"
    );
    assert_eq!(
        f.data_offset(),
        expected["data_offset"].as_u64().unwrap(),
        "{name}"
    );

    // Metadata: same keys, same order, same types, same values.
    let want_meta = expected["metadata"].as_array().unwrap();
    let keys: Vec<&str> = f.metadata().iter().map(|e| e.key.as_str()).collect();
    let want_keys: Vec<&str> = want_meta
        .iter()
        .map(|m| m["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, want_keys, "{name}: key order");
    for (entry, want) in f.metadata().iter().zip(want_meta) {
        let key = &entry.key;
        assert_eq!(
            entry.value.value_type().name(),
            want["type"].as_str().unwrap(),
            "{name} {key}"
        );
        if let MetaValue::Array(a) = &entry.value {
            assert_eq!(
                a.elem_type.name(),
                want["elem_type"].as_str().unwrap(),
                "{name} {key}"
            );
        }
        let ours = value_to_json(&f, &entry.value, None).unwrap();
        assert_eq!(ours, want["value"], "{name} {key}");
    }

    // Tensors: infos and dequantized values.
    let want_tensors = expected["tensors"].as_array().unwrap();
    assert_eq!(
        f.tensors().len(),
        want_tensors.len(),
        "{name}: tensor count"
    );
    for (t, want) in f.tensors().iter().zip(want_tensors) {
        let tn = &t.name;
        assert_eq!(tn, want["name"].as_str().unwrap());
        assert_eq!(
            t.ggml_type.id() as u64,
            want["type_id"].as_u64().unwrap(),
            "{name} {tn}"
        );
        let dims: Vec<u64> = want["dims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(t.dims, dims, "{name} {tn}");
        assert_eq!(t.offset, want["offset"].as_u64().unwrap(), "{name} {tn}");
        assert_eq!(t.n_bytes, want["n_bytes"].as_u64(), "{name} {tn}");
        assert_eq!(
            t.n_elements,
            want["n_elements"].as_u64().unwrap(),
            "{name} {tn}"
        );
        let values = read_f32_file(&dir.join(want["values_file"].as_str().unwrap()));
        let ours = f.tensor_f32(tn).unwrap();
        assert_eq!(ours.len(), values.len());
        if let Some((i, a, b)) = first_bit_mismatch(&ours, &values) {
            panic!("{name} {tn}: value {i}: golden-lens {a:e} vs gguf-py {b:e}");
        }
        // Row ranges and expert slabs are views of the same values.
        let row_len = t.row_len() as usize;
        if t.n_rows() >= 2 {
            let rows = f.tensor_rows_f32(tn, 1..2).unwrap();
            assert_eq!(rows, ours[row_len..2 * row_len], "{name} {tn} row 1");
        }
        if t.dims.len() == 3 {
            let per_expert = row_len * t.dims[1] as usize;
            for e in 0..t.dims[2] as usize {
                let slab = f.expert_f32(tn, e as u64).unwrap();
                assert_eq!(
                    slab,
                    ours[e * per_expert..(e + 1) * per_expert],
                    "{name} {tn} expert {e}"
                );
            }
            assert!(f.expert_f32(tn, t.dims[2]).is_err());
        }
    }
}

#[test]
fn reads_gguf_py_files_like_gguf_py() {
    let Some(python) = python_with_gguf() else {
        return;
    };
    let dir = TempDir::new().unwrap();
    run_py_script(&python, "write_gguf_files.py", dir.path());
    let mut n = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let p = entry.unwrap().path();
        if p.to_string_lossy().ends_with(".expected.json") {
            let expected: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            check_file_against_reader(dir.path(), &expected);
            n += 1;
        }
    }
    assert_eq!(n, 4, "one file per alignment 1, 8, 64, 16384");
}

#[test]
fn cli_npy_loads_in_numpy() {
    let Some(python) = python_with_gguf() else {
        return;
    };
    let dir = TempDir::new().unwrap();
    let values: Vec<f32> = (0..3 * 2 * 32).map(|i| i as f32 * 0.5 - 7.0).collect();
    let p = Builder::new()
        .kv("general.architecture", s("deepseek41"))
        .tensor(tensor(
            "blk.0.ffn_up_exps.weight",
            &[32, 2, 3],
            0,
            f32_bytes(&values),
        ))
        .write(dir.path(), "m.gguf");
    for (expert, shape) in [(None, vec![3u64, 2, 32]), (Some(1u64), vec![2, 32])] {
        let npy = dir.path().join("t.npy");
        let mut args = vec![
            "gguf".to_string(),
            "tensor".into(),
            p.display().to_string(),
            "blk.0.ffn_up_exps.weight".into(),
            "--npy".into(),
            npy.display().to_string(),
        ];
        if let Some(e) = expert {
            args.extend(["--expert".to_string(), e.to_string()]);
        }
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_golden-lens"))
            .args(&args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let raw = dir.path().join("back.f32");
        let script = "import sys, json, numpy as np\n\
                      a = np.load(sys.argv[1])\n\
                      assert a.dtype == np.float32, a.dtype\n\
                      a.astype('<f4').tofile(sys.argv[2])\n\
                      print(json.dumps(list(a.shape)))";
        let o = std::process::Command::new(&python)
            .args(["-c", script])
            .arg(&npy)
            .arg(&raw)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got_shape: Vec<u64> = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(got_shape, shape);
        let back = read_f32_file(&raw);
        let want = match expert {
            None => values.clone(),
            Some(e) => values[e as usize * 64..(e as usize + 1) * 64].to_vec(),
        };
        assert_eq!(back, want);
    }
}

#[test]
fn quantize_matches_gguf_py_byte_for_byte() {
    let Some(python) = python_with_gguf() else {
        return;
    };
    let dir = TempDir::new().unwrap();
    run_py_script(&python, "gen_quant_inputs.py", dir.path());
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("manifest.json")).unwrap()).unwrap();
    let inputs = read_f32_file(&dir.path().join("inputs.f32"));
    assert_eq!(inputs.len() as u64, manifest["n_values"].as_u64().unwrap());
    let mut checked = Vec::new();
    for name in manifest["types"].as_array().unwrap() {
        let name = name.as_str().unwrap();
        let ty = GgmlType::from_name(name).unwrap();
        let expected = std::fs::read(dir.path().join(format!("{name}.bytes"))).unwrap();
        let ours = quantize(ty, &inputs).unwrap();
        assert_eq!(ours.len(), expected.len(), "{name}: encoded size");
        if let Some(i) = ours.iter().zip(&expected).position(|(a, b)| a != b) {
            let (block_values, block_bytes) = ty.block_layout().unwrap();
            let block = i / block_bytes;
            panic!(
                "{name}: byte {i} (block {block}, byte {} of it) differs: golden-lens {:#04x} vs gguf-py {:#04x}; block input {:?}",
                i % block_bytes,
                ours[i],
                expected[i],
                &inputs[block * block_values..(block + 1) * block_values]
            );
        }
        checked.push(name.to_string());
    }
    assert_eq!(checked, ["Q8_0", "Q4_0", "BF16", "F16", "MXFP4"]);
}
