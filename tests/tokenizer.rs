//! Prompts through the GGUF's own vocabulary: a byte-level BPE vocabulary (trained by Python
//! `tokenizers` on a small corpus) is written into a deepseek41-style GGUF by this test; our
//! `tokenize` and Python `tokenizers` (reading the same GGUF with gguf-py) give the same ids
//! for every prompt, and `detokenize` gives back the text.

mod bpe_common;
mod gguf_common;

use bpe_common::{add_tokenizer, bpe_vocab_py, python_with_tokenizers, read_vocab, Vocab};
use golden_lens::gguf::{GgufFile, GgufValue, GgufWriter};
use golden_lens::model::tokenizer::{GgufTokenizer, TokenizerError};
use serde_json::Value;
use std::path::Path;
use tempfile::TempDir;

const PROMPTS: &[&str] = &[
    "The quick brown fox",
    "Kernel developers compare their GPU path with the reference.",
    "  two leading spaces and trailing  ",
    "numbers 0 1 42 1234567 3.14159",
    "def forward(self, x):\n    return x\n",
    "Ünïcödé données 数据 🙂 ✓",
    "<|begin_of_sentence|>a control token inside the text<|end_of_sentence|>",
    "unseen wordsqzx and bytes \u{7f}\u{1}",
    "",
];

/// A GGUF with the tokenizer keys of the antirez dialect (spec §1.2) and no tensors.
fn write_gguf(path: &Path, v: &Vocab, add_bos: bool) {
    let mut w = GgufWriter::new();
    w.add("general.architecture", GgufValue::string("deepseek41"))
        .unwrap();
    add_tokenizer(&mut w, v, add_bos);
    w.write(path).unwrap();
}

#[test]
fn ids_match_python_tokenizers_on_a_vocabulary_written_into_a_gguf() {
    let Some(python) = python_with_tokenizers() else {
        return;
    };
    let dir = TempDir::new().unwrap();
    bpe_vocab_py(&python, &["train".as_ref(), dir.path().as_os_str()]);
    let vocab = read_vocab(dir.path());
    assert!(vocab.merges.len() > 100, "a real merge list");
    let prompts_path = dir.path().join("prompts.json");
    std::fs::write(&prompts_path, serde_json::to_vec(PROMPTS).unwrap()).unwrap();
    for add_bos in [true, false] {
        let gguf = dir.path().join(format!("vocab-bos{add_bos}.gguf"));
        write_gguf(&gguf, &vocab, add_bos);
        let expected_path = dir.path().join(format!("expected-bos{add_bos}.json"));
        bpe_vocab_py(
            &python,
            &[
                "encode".as_ref(),
                gguf.as_os_str(),
                prompts_path.as_os_str(),
                expected_path.as_os_str(),
            ],
        );
        let expected: Value =
            serde_json::from_slice(&std::fs::read(&expected_path).unwrap()).unwrap();
        let file = GgufFile::open(&gguf).expect("open");
        let tok = GgufTokenizer::from_gguf(&file).expect("tokenizer");
        assert!(tok.notes.is_empty(), "{:?}", tok.notes);
        assert_eq!(tok.vocab_size(), vocab.tokens.len());
        for (prompt, want) in PROMPTS.iter().zip(expected.as_array().unwrap()) {
            let want_ids: Vec<u32> = want["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as u32)
                .collect();
            let got = tok.tokenize(prompt).expect("tokenize");
            assert_eq!(got.ids, want_ids, "bos {add_bos}: {prompt:?}");
            if add_bos {
                assert_eq!(got.ids.first(), Some(&0), "BOS first: {prompt:?}");
            }
            for (id, piece) in got.ids.iter().zip(&got.pieces) {
                assert_eq!(&vocab.tokens[*id as usize], piece);
            }
            let text = tok.detokenize(&got.ids).expect("detokenize");
            assert_eq!(text, want["text"].as_str().unwrap(), "{prompt:?}");
            // Control tokens are dropped on the way back; everything else round-trips.
            let plain = prompt
                .replace("<|begin_of_sentence|>", "")
                .replace("<|end_of_sentence|>", "");
            assert_eq!(text, plain, "{prompt:?}");
        }
        // A control token in the text is one id, not split into pieces.
        let t = tok.tokenize("<|pad|>").unwrap();
        assert_eq!(t.ids.last(), Some(&2));
    }
}

/// A vocabulary of `tokens` (all normal), `merges`, `types` entries.
fn vocab(tokens: &[&str], merges: &[&str], types: usize) -> Vocab {
    Vocab {
        tokens: tokens.iter().map(|t| t.to_string()).collect(),
        merges: merges.iter().map(|m| m.to_string()).collect(),
        token_type: vec![1; types],
    }
}

/// Writes `v` into `dir/name` and builds its tokenizer.
fn build(dir: &Path, name: &str, v: &Vocab) -> Result<GgufTokenizer, TokenizerError> {
    let path = dir.join(name);
    write_gguf(&path, v, true);
    GgufTokenizer::from_gguf(&GgufFile::open(&path).unwrap())
}

#[test]
fn bad_vocabularies_are_refused_with_the_key() {
    let dir = TempDir::new().unwrap();
    let e = build(
        dir.path(),
        "merge.gguf",
        &vocab(&["a", "b", "ab"], &["ab"], 3),
    )
    .err()
    .expect("refused");
    assert!(
        matches!(
            e,
            TokenizerError::Meta {
                key: "tokenizer.ggml.merges",
                ..
            }
        ),
        "{e}"
    );
    let e = build(dir.path(), "dup.gguf", &vocab(&["a", "a"], &[], 2))
        .err()
        .expect("refused");
    assert!(e.to_string().contains("appears twice"), "{e}");
    let e = build(dir.path(), "types.gguf", &vocab(&["a", "b"], &[], 1))
        .err()
        .expect("refused");
    assert!(e.to_string().contains("token_type"), "{e}");
    // Unknown ids on the way back.
    let tok = build(
        dir.path(),
        "ok.gguf",
        &vocab(&["a", "b", "ab"], &["a b"], 3),
    )
    .unwrap();
    assert_eq!(tok.tokenize("ab").unwrap().ids, vec![0, 2]);
    assert!(tok.detokenize(&[7]).is_err());
}
