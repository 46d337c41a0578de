//! `check --gguf F --prompt TEXT` end to end: the test trains a byte-level BPE vocabulary with
//! Python `tokenizers`, writes it (tokens, merges, token types, BOS) into the tiny model's GGUF,
//! runs the binary on prompts, and checks that the ids it prints are Python `tokenizers`' ids
//! on the same GGUF, that the pieces it prints are those ids' vocabulary entries, and that the
//! run goes on through the prefill and a decode step that prints the text it produces.

mod bpe_common;
#[allow(dead_code)]
mod gguf_cli_common;
mod gguf_common;

use bpe_common::{
    bpe_vocab_py, python_ids, python_with_tokenizers, read_vocab, tiny_gguf_with_vocabulary,
};
use gguf_cli_common::run;

/// The tiny model's embedding rows: every id a prompt tokenizes to must have one, so the test
/// vocabulary is trained to at most this many entries.
const VOCAB_ROWS: usize = 64;

/// Prompts within the small corpus's alphabet (lowercase letters and spaces), some with words
/// the merges build whole and some they only build in part.
const PROMPTS: &[&str] = &[
    "the oracle sees the kernel",
    "where the lens flips",
    "a developer reads tokens",
    "reference",
];

/// The value printed after `label` on its own line of `out`, parsed as JSON (the CLI prints the
/// ids and pieces as Rust lists, which are JSON for these values).
fn printed<T: serde::de::DeserializeOwned>(out: &str, label: &str) -> T {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no `{label}` line in:\n{out}"));
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("`{line}`: {e}"))
}

#[test]
fn a_prompt_gets_python_tokenizers_ids_and_runs_the_model() {
    let Some(python) = python_with_tokenizers() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let rows = VOCAB_ROWS.to_string();
    bpe_vocab_py(
        &python,
        &[
            "train-small".as_ref(),
            dir.path().as_os_str(),
            rows.as_ref(),
        ],
    );
    let vocab = read_vocab(dir.path());
    assert!(vocab.tokens.len() <= VOCAB_ROWS, "{}", vocab.tokens.len());
    assert!(
        vocab.merges.len() > 20,
        "a real merge list: {:?}",
        vocab.merges
    );
    let gguf = tiny_gguf_with_vocabulary(dir.path(), "tiny-bpe.gguf", &vocab, true);
    let want = python_ids(&python, &gguf, PROMPTS, dir.path());
    let gguf = gguf.to_str().expect("utf8");
    let mut merged_pieces = 0;
    for (prompt, want) in PROMPTS.iter().zip(&want) {
        let (code, out, err) = run(&["check", "--gguf", gguf, "--prompt", prompt, "--decode", "1"]);
        assert_eq!(code, 0, "{prompt:?}\n{out}\n{err}");
        assert!(out.contains(&format!("prompt:  {prompt:?}")), "{out}");
        let ids: Vec<u32> = printed(&out, "tokens:");
        assert_eq!(&ids, want, "{prompt:?}: ours vs Python tokenizers");
        assert_eq!(
            ids.first(),
            Some(&0),
            "BOS first (add_bos_token): {prompt:?}"
        );
        let pieces: Vec<String> = printed(&out, "pieces:");
        let entries: Vec<&str> = ids
            .iter()
            .map(|&i| vocab.tokens[i as usize].as_str())
            .collect();
        assert_eq!(pieces, entries, "{prompt:?}");
        merged_pieces += pieces
            .iter()
            .skip(1)
            .filter(|p| p.chars().count() > 1)
            .count();
        // The prefill over the prompt's ids, then a decode step fed its greedy token, with the
        // text the generated tokens spell.
        let prefill = format!("prefill{}: greedy next token", ids.len());
        assert!(out.contains(&prefill), "{out}");
        let decode = format!("decode{}: greedy next token", ids.len());
        assert!(out.contains(&decode), "{out}");
        assert!(out.contains("; text so far "), "{out}");
        assert!(out.contains("generated: ["), "{out}");
    }
    assert!(merged_pieces > 0, "the merges are used");
}
