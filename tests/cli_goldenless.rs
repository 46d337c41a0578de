//! `check --gguf F --tokens ... --decode N`: a run with no golden, the oracle as the live reference
//! (regimes named as goldens name them, greedy decode tokens, the GPU compared with the oracle,
//! the same closing line and exit codes as a golden check).

use std::path::Path;
use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_golden-lens"))
        .args(args)
        .output()
        .expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A tiny deepseek41 GGUF of the embedded golden's model, written by `gguf export`.
fn tiny_gguf(dir: &Path) -> String {
    let f = dir.join("tiny.gguf");
    let p = f.to_str().expect("utf8").to_string();
    let (code, _, err) = run(&["gguf", "export", "--out", &p]);
    assert_eq!(code, 0, "{err}");
    p
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
    let mut injected = base.to_vec();
    injected.extend(["--inject", "rope-sign@L2.sa_q"]);
    let (code, out, _) = run(&injected);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("first gpu divergence: prefill8 L2.sa_q (Block(2))"),
        "{out}"
    );
}
