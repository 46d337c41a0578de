//! What the tests of prompts on a GGUF's vocabulary share: Python `tokenizers` (through
//! `tests/py/bpe_vocab.py`) training a byte-level BPE vocabulary and encoding prompts on a GGUF,
//! and the tiny model exported as a GGUF whose `tokenizer.ggml.*` keys hold a given vocabulary.
//! Used as `mod gguf_common; mod bpe_common;`.
#![allow(dead_code)]

use crate::gguf_common::{python_with_gguf, writer_value};
use golden_lens::gguf::{Dialect, GgufFile, GgufValue, GgufWriter};
use golden_lens::model::gguf_export::{export_golden, ExportOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A vocabulary in id order: tokens, merges (`a b`), token types (3 = control).
pub struct Vocab {
    pub tokens: Vec<String>,
    pub merges: Vec<String>,
    pub token_type: Vec<i32>,
}

/// The Python that has gguf-py and `tokenizers`, or None (with a notice; a panic on CI).
pub fn python_with_tokenizers() -> Option<PathBuf> {
    let python = python_with_gguf()?;
    let ok = Command::new(&python)
        .args(["-c", "import tokenizers"])
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(python);
    }
    let msg = format!(
        "{} cannot import tokenizers (tests/py/requirements.txt)",
        python.display()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}");
    }
    eprintln!("notice: skipping: {msg}");
    None
}

/// Runs `tests/py/bpe_vocab.py ARGS`; panics with its stderr on failure.
pub fn bpe_vocab_py(python: &Path, args: &[&std::ffi::OsStr]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/bpe_vocab.py");
    let out = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `vocab.json` that `bpe_vocab.py train` wrote into `dir`.
pub fn read_vocab(dir: &Path) -> Vocab {
    let v: Value =
        serde_json::from_slice(&std::fs::read(dir.join("vocab.json")).expect("vocab.json"))
            .expect("json");
    let strings = |k: &str| -> Vec<String> {
        v[k].as_array()
            .expect(k)
            .iter()
            .map(|s| s.as_str().expect("string").to_string())
            .collect()
    };
    Vocab {
        tokens: strings("tokens"),
        merges: strings("merges"),
        token_type: v["token_type"]
            .as_array()
            .expect("token_type")
            .iter()
            .map(|t| t.as_i64().expect("int") as i32)
            .collect(),
    }
}

/// Python `tokenizers`' ids of each prompt on the vocabulary `gguf` holds (BOS first when the
/// file asks for it), written to and read back from `dir/expected.json`.
pub fn python_ids(python: &Path, gguf: &Path, prompts: &[&str], dir: &Path) -> Vec<Vec<u32>> {
    let prompts_path = dir.join("prompts.json");
    std::fs::write(&prompts_path, serde_json::to_vec(prompts).unwrap()).unwrap();
    let expected_path = dir.join("expected.json");
    bpe_vocab_py(
        python,
        &[
            "encode".as_ref(),
            gguf.as_os_str(),
            prompts_path.as_os_str(),
            expected_path.as_os_str(),
        ],
    );
    let expected: Value = serde_json::from_slice(&std::fs::read(&expected_path).unwrap()).unwrap();
    expected
        .as_array()
        .expect("one entry per prompt")
        .iter()
        .map(|e| {
            e["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|i| u32::try_from(i.as_u64().expect("id")).expect("u32 id"))
                .collect()
        })
        .collect()
}

/// The tokenizer keys of the antirez dialect (spec §1.2) for `v`, BOS 0 and EOS 1.
pub fn add_tokenizer(w: &mut GgufWriter, v: &Vocab, add_bos: bool) {
    w.add("tokenizer.ggml.model", GgufValue::string("gpt2"))
        .unwrap();
    w.add("tokenizer.ggml.pre", GgufValue::string("gpt2"))
        .unwrap();
    w.add("tokenizer.ggml.tokens", GgufValue::strings(&v.tokens))
        .unwrap();
    w.add("tokenizer.ggml.token_type", GgufValue::i32s(&v.token_type))
        .unwrap();
    w.add("tokenizer.ggml.merges", GgufValue::strings(&v.merges))
        .unwrap();
    w.add("tokenizer.ggml.bos_token_id", GgufValue::U32(0))
        .unwrap();
    w.add("tokenizer.ggml.eos_token_id", GgufValue::U32(1))
        .unwrap();
    w.add("tokenizer.ggml.add_bos_token", GgufValue::Bool(add_bos))
        .unwrap();
}

/// The tiny model (the embedded golden's fixture and filler weights) as a GGUF at
/// `dir/name` whose `tokenizer.ggml.*` keys hold `v`.
pub fn tiny_gguf_with_vocabulary(dir: &Path, name: &str, v: &Vocab, add_bos: bool) -> PathBuf {
    let golden = golden_lens::golden::embedded::default_golden().expect("golden");
    let plain = dir.join(format!("{name}.plain"));
    export_golden(&golden, &plain, &ExportOptions::new(Dialect::LlamaCpp)).expect("export");
    let src = GgufFile::open(&plain).expect("open export");
    let mut w = GgufWriter::new();
    w.set_alignment(u32::try_from(src.alignment()).expect("alignment"))
        .unwrap();
    for e in src.metadata() {
        if e.key.starts_with("tokenizer.") || e.key == "general.alignment" {
            continue;
        }
        w.add(&e.key, writer_value(&src, &e.value)).unwrap();
    }
    add_tokenizer(&mut w, v, add_bos);
    for t in src.tensors() {
        let bytes = src
            .tensor_bytes(&t.name)
            .expect("tensor bytes")
            .into_owned();
        w.add_tensor(&t.name, &t.dims, t.ggml_type, bytes).unwrap();
    }
    let path = dir.join(name);
    w.write(&path).unwrap();
    path
}
