//! `golden-lens gguf info` and `golden-lens gguf tensor` on tiny files built in a temp dir.

mod gguf_common;

use gguf_common::*;
use golden_lens::gguf::GgufFile;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tempfile::TempDir;

fn golden_lens(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_golden-lens"))
        .args(args)
        .output()
        .expect("run golden-lens")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A ds4 tiny file with a long tokenizer array and a merged 3-D expert tensor.
fn tiny_with_experts(dir: &Path) -> PathBuf {
    let tokens: Vec<String> = (0..100).map(|i| format!("t{i}")).collect();
    let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let kvs = ds4_kvs().set("tokenizer.ggml.tokens", arr_str(&tokens));
    let experts: Vec<f32> = (0..3 * 2 * 4).map(|i| i as f32).collect();
    ds4_builder(&kvs)
        .tensor(tensor(
            "blk.0.ffn_gate_exps.weight",
            &[4, 2, 3],
            0,
            f32_bytes(&experts),
        ))
        .write(dir, "tiny.gguf")
}

/// Parses a .npy v1.0 f32 file: (shape, values).
fn read_npy(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
    assert!(header.contains("'descr': '<f4'") && header.contains("'fortran_order': False"));
    assert_eq!((10 + hlen) % 64, 0);
    let shape_txt = header
        .split("'shape': (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap();
    let shape = shape_txt
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().unwrap())
        .collect();
    let values = b[10 + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (shape, values)
}

#[test]
fn info_text_shows_dialect_engram_tensors_and_census() {
    let dir = TempDir::new().unwrap();
    let p = tiny_with_experts(dir.path());
    let o = golden_lens(&["gguf", "info", p.to_str().unwrap()]);
    let text = stdout(&o);
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for needle in [
        "dialect: ds4 (antirez)",
        "deepseek41 metadata: valid",
        "engram: encoding \"e4m3_e8m0_32_row264\"",
        "blk.1.engram_embd.weight",
        "[264, 963]",
        "(100 elements)",
        "census:",
        "I8",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn info_json_is_machine_readable_with_truncated_arrays() {
    let dir = TempDir::new().unwrap();
    let p = tiny_with_experts(dir.path());
    let o = golden_lens(&["gguf", "info", "--json", p.to_str().unwrap()]);
    assert!(o.status.success());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["dialect"], "ds4 (antirez)");
    assert_eq!(v["deepseek41"]["hidden_size"], 64);
    assert_eq!(v["deepseek41"]["engram"]["rows"][0], TINY_ROWS);
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 4);
    let table = tensors
        .iter()
        .find(|t| t["name"] == "blk.1.engram_embd.weight")
        .unwrap();
    assert_eq!(table["ggml_type"], "I8");
    assert_eq!(table["n_bytes"], 264 * TINY_ROWS);
    let tokens = v["metadata"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["key"] == "tokenizer.ggml.tokens")
        .unwrap();
    assert_eq!(tokens["value"]["count"], 100);
    assert_eq!(tokens["value"]["head"].as_array().unwrap().len(), 16);
    let census = v["census"].as_array().unwrap();
    let i8_row = census.iter().find(|c| c["ggml_type"] == "I8").unwrap();
    assert_eq!(i8_row["count"], 1);
    assert_eq!(i8_row["bits_per_weight"], 8.0);
    assert_eq!(census.last().unwrap()["ggml_type"], "total");
    assert_eq!(census.last().unwrap()["count"], 4);
}

#[test]
fn info_notes_an_invalid_deepseek41_file_and_strict_makes_it_an_error() {
    let dir = TempDir::new().unwrap();
    let kvs = ds4_kvs().set("deepseek41.engram.multipliers", arr_u64(&[2, 5, 7, 9]));
    let p = ds4_builder(&kvs).write(dir.path(), "bad.gguf");
    let o = golden_lens(&["gguf", "info", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "a valid GGUF prints and exits 0");
    let out = stdout(&o);
    assert!(out.contains("INVALID") && out.contains("is even"), "{out}");
    assert!(
        out.contains("note: not a complete deepseek41 model"),
        "{out}"
    );
    let o = golden_lens(&["gguf", "info", "--strict", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn info_on_another_architecture_prints_everything_and_exits_0() {
    let dir = TempDir::new().unwrap();
    let p = Builder::new()
        .kv("general.architecture", s("llama"))
        .kv("llama.block_count", V::U32(2))
        .tensor(tensor(
            "token_embd.weight",
            &[4, 2],
            0,
            f32_bytes(&[0.5; 8]),
        ))
        .write(dir.path(), "llama.gguf");
    let o = golden_lens(&["gguf", "info", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    assert!(out.contains("llama.block_count"), "{out}");
    assert!(out.contains("token_embd.weight"), "{out}");
    assert!(out.contains("note: not a deepseek41 model"), "{out}");
    let o = golden_lens(&["gguf", "info", "--json", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["notes"].as_array().map(Vec::len), Some(1));
    let o = golden_lens(&["gguf", "info", "--strict", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn info_on_a_vocabulary_only_file_exits_0_with_a_note() {
    let dir = TempDir::new().unwrap();
    let p = ds4_kvs().builder().write(dir.path(), "vocab.gguf");
    let o = golden_lens(&["gguf", "info", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    assert!(out.contains("note: no tensors: a vocabulary-only"), "{out}");
}

#[test]
fn info_on_a_shard_without_its_siblings_shows_it_alone() {
    let dir = TempDir::new().unwrap();
    let p = Builder::new()
        .kv("general.architecture", s("deepseek41"))
        .kv("split.no", V::U16(0))
        .kv("split.count", V::U16(2))
        .kv("split.tensors.count", V::I32(2))
        .tensor(tensor("token_embd.weight", &[4], 0, f32_bytes(&[1.0; 4])))
        .write(dir.path(), "m-00001-of-00002.gguf");
    let o = golden_lens(&["gguf", "info", p.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = stdout(&o);
    assert!(out.contains("token_embd.weight"), "{out}");
    assert!(
        out.contains("note: shown alone, not as a split set"),
        "{out}"
    );
    assert!(out.contains("shard 2 of 2 is missing"), "{out}");
}

#[test]
fn info_on_a_file_that_is_not_gguf_exits_1() {
    let dir = TempDir::new().unwrap();
    let p = dir.path().join("bad.gguf");
    std::fs::write(&p, b"GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10").unwrap();
    let o = golden_lens(&["gguf", "info", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("error:") && err.contains("truncated"), "{err}");
}

#[test]
fn tensor_writes_npy_atomically() {
    let dir = TempDir::new().unwrap();
    let p = tiny_with_experts(dir.path());
    let out = dir.path().join("embd.npy");
    let o = golden_lens(&[
        "gguf",
        "tensor",
        p.to_str().unwrap(),
        "token_embd.weight",
        "--npy",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (shape, values) = read_npy(&out);
    assert_eq!(shape, vec![TINY_VOCAB, 64]);
    let f = GgufFile::open(&p).unwrap();
    assert_eq!(values, f.tensor_f32("token_embd.weight").unwrap());
    assert!(!dir.path().join("embd.npy.tmp").exists());
}

#[test]
fn tensor_expert_slab() {
    let dir = TempDir::new().unwrap();
    let p = tiny_with_experts(dir.path());
    let out = dir.path().join("e2.npy");
    let o = golden_lens(&[
        "gguf",
        "tensor",
        p.to_str().unwrap(),
        "blk.0.ffn_gate_exps.weight",
        "--expert",
        "2",
        "--npy",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (shape, values) = read_npy(&out);
    assert_eq!(shape, vec![2, 4]);
    assert_eq!(values, (16..24).map(|i| i as f32).collect::<Vec<_>>());
    let o = golden_lens(&[
        "gguf",
        "tensor",
        p.to_str().unwrap(),
        "blk.0.ffn_gate_exps.weight",
        "--expert",
        "3",
        "--npy",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("expert 3 is out of range"));
}

#[test]
fn tensor_errors_leave_no_file() {
    let dir = TempDir::new().unwrap();
    let p = tiny_with_experts(dir.path());
    let out = dir.path().join("none.npy");
    let o = golden_lens(&[
        "gguf",
        "tensor",
        p.to_str().unwrap(),
        "no.such.weight",
        "--npy",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no tensor named \"no.such.weight\""));
    assert!(!out.exists());
    assert!(!dir.path().join("none.npy.tmp").exists());
}
