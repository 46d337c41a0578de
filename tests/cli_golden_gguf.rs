//! `golden write --gguf F --tokens IDS`: the oracle's run on a GGUF recorded as a golden (the
//! fixture from the GGUF's config, the file's identity in place of `weights_meta`), replayed by
//! `check --golden G --gguf F`: the oracle bit for bit, the GPU within its policy, a planted
//! fault named at its capture, and a golden that does not belong to the GGUF refused by field.

mod gguf_cli_common;

use gguf_cli_common::{run, tiny_gguf};
use std::path::Path;

fn s(p: &Path) -> String {
    p.to_str().expect("utf8").to_string()
}

/// `golden write --gguf` on the tiny GGUF: 8 prefill tokens and one greedy decode step.
fn write_golden(gguf: &str, out: &Path, extra: &[&str]) -> String {
    let g = s(out);
    let mut args = vec![
        "golden",
        "write",
        "--gguf",
        gguf,
        "--tokens",
        "0,17,42,9,3,11,5,7",
        "--decode",
        "1",
        "--out",
        &g,
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("peak anonymous memory"), "{out}");
    g
}

#[test]
fn a_gguf_golden_replays_bit_for_bit_and_records_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gguf = tiny_gguf(dir.path(), "tiny.gguf", "ds4");
    let g = write_golden(&gguf, &dir.path().join("g.json"), &[]);
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&g).expect("golden")).expect("json");
    let rec = &doc["fixture"]["gguf"];
    assert_eq!(rec["path"], gguf.as_str());
    assert_eq!(
        rec["bytes"].as_u64(),
        Some(std::fs::metadata(&gguf).expect("size").len())
    );
    assert_eq!(rec["header_fnv1a64"].as_str().map(str::len), Some(16));
    assert!(rec["engram_tables_fnv1a64"].is_string(), "{rec}");
    assert_eq!(doc["weights_meta"], serde_json::json!({}));
    assert_eq!(
        doc["fixture"]["regimes"],
        serde_json::json!(["prefill8", "decode8"])
    );
    let (code, out, err) = run(&["check", "--golden", &g, "--gguf", &gguf, "--quiet"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("bit-exact: 142 of 142 bf16 captures, 43 of 43 integer captures exact, 110 of 110 f32 captures"), "{out}");
    assert!(out.trim_end().ends_with("295 passed, 0 failed"), "{out}");
    // The weights are the GGUF's: without it the golden cannot run.
    let (code, _, err) = run(&["check", "--golden", &g]);
    assert_ne!(code, 0);
    assert!(err.contains("records a run on the GGUF"), "{err}");
    assert!(err.contains("give --gguf F"), "{err}");
}

#[test]
fn a_layer_range_is_recorded_and_replayed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gguf = tiny_gguf(dir.path(), "tiny.gguf", "ds4");
    let g = write_golden(&gguf, &dir.path().join("g.json"), &["--layers", "2-4"]);
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&g).expect("golden")).expect("json");
    assert_eq!(doc["fixture"]["gguf"]["layers"], "2-4");
    let prefill = doc["prefill8"].as_object().expect("regime");
    assert!(prefill.contains_key("L2.sa_q") && prefill.contains_key("L4.attn_out"));
    assert!(
        !prefill
            .keys()
            .any(|k| k.starts_with("L0.") || k.starts_with("L5.")),
        "only blocks 2-4"
    );
    assert!(prefill.contains_key("logits_full"), "Final on block 4");
    let (code, out, err) = run(&["check", "--golden", &g, "--gguf", &gguf, "--quiet"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("layers:  2-4 (as recorded"), "{out}");
    assert!(out.trim_end().ends_with(" passed, 0 failed"), "{out}");
}

#[test]
fn a_golden_of_another_model_or_file_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gguf = tiny_gguf(dir.path(), "tiny.gguf", "ds4");
    let g = write_golden(&gguf, &dir.path().join("g.json"), &[]);
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&g).expect("golden")).expect("json");
    doc["fixture"]["window_size"] = serde_json::json!(16);
    let edited = dir.path().join("edited.json");
    std::fs::write(&edited, serde_json::to_vec(&doc).expect("json")).expect("write");
    let (code, _, err) = run(&["check", "--golden", &s(&edited), "--gguf", &gguf]);
    assert_ne!(code, 0);
    assert!(
        err.contains("fixture.window_size is 16 but") && err.contains("has 8"),
        "{err}"
    );
    // Same model, another file (the llama.cpp dialect's metadata and tensor table).
    let other = tiny_gguf(dir.path(), "other.gguf", "llamacpp");
    let (code, _, err) = run(&["check", "--golden", &g, "--gguf", &other]);
    assert_ne!(code, 0);
    assert!(err.contains("fixture.gguf.header_fnv1a64 is"), "{err}");
    assert!(err.contains("another file"), "{err}");
    // A malformed record is named too.
    doc["fixture"]["window_size"] = serde_json::json!(8);
    doc["fixture"]["gguf"]["layers"] = serde_json::json!("4-2");
    std::fs::write(&edited, serde_json::to_vec(&doc).expect("json")).expect("write");
    let (code, _, err) = run(&["check", "--golden", &s(&edited), "--gguf", &gguf]);
    assert_ne!(code, 0);
    assert!(err.contains("fixture.gguf.layers"), "{err}");
}

#[test]
fn write_refuses_mixed_or_missing_sources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = s(&dir.path().join("g.json"));
    let (code, _, err) = run(&["golden", "write", "--out", &out]);
    assert_ne!(code, 0);
    assert!(err.contains("give --fixture G"), "{err}");
    let gguf = tiny_gguf(dir.path(), "tiny.gguf", "ds4");
    let (code, _, err) = run(&["golden", "write", "--gguf", &gguf, "--out", &out]);
    assert_ne!(code, 0);
    assert!(err.contains("give --tokens IDS or --prompt TEXT"), "{err}");
    let (code, _, err) = run(&[
        "golden", "write", "--gguf", &gguf, "--tokens", "1,2", "--layers", "3-1", "--out", &out,
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--layers"), "{err}");
}

#[cfg(feature = "gpu")]
#[test]
fn the_gpu_replays_within_policy_and_a_planted_fault_fails_first_at_its_capture() {
    if golden_lens::gpu::test_context("cli_golden_gguf").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let gguf = tiny_gguf(dir.path(), "tiny.gguf", "ds4");
    let g = write_golden(&gguf, &dir.path().join("g.json"), &[]);
    let base = [
        "check",
        "--golden",
        g.as_str(),
        "--gguf",
        gguf.as_str(),
        "--backend",
        "gpu",
        "--reference-ties",
        "--quiet",
    ];
    let (code, out, err) = run(&base);
    assert_eq!(code, 0, "{out}\n{err}");
    // A golden recorded on a GGUF carries its seeds and replays isolated by default, every
    // step reseeded; the routing hints come from the golden.
    assert!(
        out.contains("mode:    isolated (the default on a real model"),
        "{out}"
    );
    assert!(!out.contains("NOT ISOLATED"), "{out}");
    assert!(
        out.contains("near ties resolved the golden's way: 0 row(s)"),
        "{out}"
    );
    let mut injected = base.to_vec();
    injected.extend(["--inject", "rope-sign@L2.sa_q"]);
    let (code, out, _) = run(&injected);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("first failure: prefill8 L2.sa_q (Block(2))"),
        "{out}"
    );
    // The fault moves L2's gate scores: a routing row its scores leave within the bar of the
    // golden's is resolved the golden's way, and the report says it came after the failure.
    assert!(
        out.contains("L2.moe_indices               NEAR TIE: row(s)")
            && out.contains("[after the failure at prefill8 L2.sa_q]"),
        "{out}"
    );
    // Chained on request, also within policy at the tiny dims.
    let mut chained = base.to_vec();
    chained.extend(["--mode", "chained"]);
    let (code, out, err) = run(&chained);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("mode:    chained (--mode chained)"), "{out}");
}

#[test]
fn a_gguf_golden_stores_its_seeds_whole_and_samples_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gguf = tiny_gguf(dir.path(), "tiny.gguf", "ds4");
    let stride = |g: &golden_lens::golden::Golden, regime: &str, name: &str| {
        g.regime(regime)
            .and_then(|r| r.captures.iter().find(|c| c.name == name))
            .map(|c| c.stride)
    };
    let seeded = write_golden(&gguf, &dir.path().join("seeds.json"), &[]);
    let g = golden_lens::golden::Golden::load(Path::new(&seeded)).expect("golden");
    let last = g.fixture.raw["n_layers"].as_u64().expect("n_layers") as usize - 1;
    for regime in ["prefill8", "decode8"] {
        for name in [
            "L1.h_in",
            "L2.attn_in",
            "L2.sa_kv",
            "L3.moe_indices",
            "L0.pre_mix_in",
        ] {
            assert_eq!(stride(&g, regime, name), Some(1), "{regime} {name}");
        }
        assert_eq!(
            stride(&g, regime, &format!("L{last}.h_out")),
            Some(1),
            "the last block's output reseeds Final"
        );
    }
    // Not seeds: sampled (a block's h_out is the next one's h_in, already whole). The decode
    // regime's captures are too small to sample once per last-axis element.
    for name in ["L2.sa_q", "L2.sa_o", "L1.h_out", "logits_full"] {
        assert!(stride(&g, "prefill8", name) > Some(1), "{name}");
    }
    // `--full none` samples everything, and that golden cannot reseed: chained is the
    // fallback for its steps, named in the report.
    let sampled = write_golden(&gguf, &dir.path().join("none.json"), &["--full", "none"]);
    let g = golden_lens::golden::Golden::load(Path::new(&sampled)).expect("golden");
    assert!(stride(&g, "prefill8", "L1.h_in") > Some(1));
    let (code, out, err) = run(&["check", "--golden", &sampled, "--gguf", &gguf, "--quiet"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("mode:    isolated"), "{out}");
}
