//! `check --gguf F --tokens ... --decode N`: a run with no golden, the oracle as the live reference
//! (regimes named as goldens name them, greedy decode tokens, the GPU compared with the oracle,
//! the same closing line and exit codes as a golden check).

mod gguf_cli_common;

use gguf_cli_common::run;
use std::path::Path;

/// A tiny deepseek41 GGUF of the embedded golden's model, written by `gguf export`.
fn tiny_gguf(dir: &Path) -> String {
    gguf_cli_common::tiny_gguf(dir, "tiny.gguf", "ds4")
}

#[test]
fn the_oracle_alone_runs_prefill_and_greedy_decode_steps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gguf = tiny_gguf(dir.path());
    let json = dir.path().join("run.json");
    let (code, out, err) = run(&[
        "check",
        "--gguf",
        &gguf,
        "--tokens",
        "0,17,42,9,3",
        "--decode",
        "2",
        "--json",
        json.to_str().expect("utf8"),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    // Regimes named as the goldens name them, each decode step fed a greedy token.
    for regime in ["prefill5", "decode5", "decode6"] {
        assert!(
            out.contains(&format!("{regime}: greedy next token")),
            "{out}"
        );
    }
    assert!(out.contains("invariants: 0 violations in the oracle's own captures"));
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("parse");
    assert_eq!(doc["ok"], true);
    let timing = doc["timing"].as_array().expect("timing");
    assert!(timing.iter().any(|t| t["step"] == "Final"));
    assert!(out.trim_end().ends_with(" passed, 0 failed"), "{out}");
}

#[test]
fn bad_tokens_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gguf = tiny_gguf(dir.path());
    let (code, _, err) = run(&["check", "--gguf", &gguf, "--tokens", "0,64"]);
    assert_ne!(code, 0);
    assert!(err.contains("item 1 is token 64, outside"), "{err}");
    let (code, _, err) = run(&["check", "--tokens", "1,2"]);
    assert_ne!(code, 0);
    assert!(err.contains("give --gguf F"), "{err}");
}

#[cfg(feature = "gpu")]
#[test]
fn the_gpu_is_compared_with_the_live_oracle_and_an_injection_is_named() {
    if golden_lens::gpu::test_context("cli_goldenless").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let gguf = tiny_gguf(dir.path());
    let base = [
        "check",
        "--gguf",
        gguf.as_str(),
        "--tokens",
        "0,17,42,9,3,11,5,7",
        "--decode",
        "1",
        "--backend",
        "cpu,gpu",
        "--reference-ties",
        "--quiet",
    ];
    let (code, out, err) = run(&base);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("0 outside, 0 missing"), "{out}");
    // A run on a real model's tokens is isolated unless asked otherwise.
    assert!(out.contains("mode:    isolated (the default"), "{out}");
    assert!(
        out.contains("near ties resolved the oracle's way: 0 row(s)"),
        "{out}"
    );
    let mut injected = base.to_vec();
    injected.extend(["--inject", "rope-sign@L2.sa_q"]);
    let (code, out, _) = run(&injected);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("first gpu divergence: prefill8 L2.sa_q (Block(2))"),
        "{out}"
    );
    // Chained: each backend carries its own state; at the tiny dims still within policy.
    let mut chained = base.to_vec();
    chained.extend(["--mode", "chained"]);
    let (code, out, err) = run(&chained);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("mode:    chained (--mode chained)"), "{out}");
    // Isolated: the GPU reseeded from the live oracle before every step, every step whole,
    // still within policy, and the injection still the first divergence.
    let mut isolated = base.to_vec();
    isolated.extend(["--mode", "isolated"]);
    let (code, out, err) = run(&isolated);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("mode:    isolated"), "{out}");
    assert!(!out.contains("NOT ISOLATED"), "{out}");
    assert!(out.contains("0 outside, 0 missing"), "{out}");
    isolated.extend(["--inject", "rope-sign@L2.sa_q"]);
    let (code, out, _) = run(&isolated);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("first gpu divergence: prefill8 L2.sa_q (Block(2))"),
        "{out}"
    );
}

#[test]
fn a_layer_range_runs_its_blocks_with_times_and_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gguf = tiny_gguf(dir.path());
    let json = dir.path().join("run.json");
    let (code, out, err) = run(&[
        "check",
        "--gguf",
        &gguf,
        "--tokens",
        "0,17,42,9,3",
        "--decode",
        "1",
        "--layers",
        "2-4",
        "--json",
        json.to_str().expect("utf8"),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("layers:  2-4 of 0-5"), "{out}");
    // One timing row per block of the range, none outside it.
    for l in 2..=4 {
        assert!(out.contains(&format!("\nBlock({l}) ")), "{out}");
    }
    assert!(
        !out.contains("Block(0)") && !out.contains("Block(5)"),
        "{out}"
    );
    assert!(out.contains("peak anonymous memory"), "{out}");
    // Progress on stderr: step counter, elapsed and ETA.
    assert!(err.contains("[1/") && err.contains("ETA"), "{err}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("parse");
    assert_eq!(doc["layers"], "2-4");
    assert!(doc["memory"]["peak_rss_anon_bytes"].as_u64().unwrap_or(0) > 0);
    assert_eq!(doc["generated"].as_array().map(Vec::len), Some(2));
    let timing = doc["timing"].as_array().expect("timing");
    assert!(timing.iter().any(|t| t["step"] == "Block(3)"));
    assert!(!timing.iter().any(|t| t["step"] == "Block(1)"));
}

#[test]
fn bad_layers_and_a_prompt_without_a_vocabulary_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gguf = tiny_gguf(dir.path());
    let (code, _, err) = run(&["check", "--gguf", &gguf, "--tokens", "1", "--layers", "2-9"]);
    assert_ne!(code, 0);
    assert!(err.contains("the model has layers 0-5"), "{err}");
    let (code, _, err) = run(&["check", "--gguf", &gguf, "--tokens", "1", "--layers", "x"]);
    assert_ne!(code, 0);
    assert!(err.contains("expected `A-B`"), "{err}");
    // The tiny export ships tokens but no merges: --prompt names the missing key.
    let (code, _, err) = run(&["check", "--gguf", &gguf, "--prompt", "hello"]);
    assert_ne!(code, 0);
    assert!(err.contains("tokenizer.ggml.merges"), "{err}");
    let (code, _, err) = run(&["check", "--layers", "2-3"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--layers applies to runs on --tokens"),
        "{err}"
    );
}
