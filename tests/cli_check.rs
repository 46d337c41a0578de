//! `golden-lens check` end to end through the binary: exit codes, the closing line, the JSON
//! report, filters, strict mode, and clear errors on bad input.

use std::path::PathBuf;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_golden-lens"))
}

fn reference(name: &str) -> String {
    format!("{}/golden/reference/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).output().expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn v3_check_exits_zero_with_the_closing_line() {
    let (code, out, err) = run(&["check", "--golden", &reference("ds41_tiny_golden.v3.json")]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().last(), Some("443 passed, 0 failed"));
    assert!(
        out.contains("bit-exact: 213 of 213 bf16 captures, 65 of 65 integer captures exact"),
        "{out}"
    );
    // Budgets and the top-k triage appear in the text report too.
    assert!(
        out.contains("error budgets: 443 of 443 captures within their budget"),
        "{out}"
    );
    assert!(
        out.contains(
            "top-k triage (cpu against the golden): 38 index captures, 0 rows differ: 0 tie flips, 0 near ties, 0 real"
        ),
        "{out}"
    );
    assert!(
        out.contains("prefill12  L5.sa_topk_idxs"),
        "one row per capture"
    );
}

#[test]
fn strict_mode_passes_on_the_bit_exact_oracle() {
    let (code, out, _) = run(&[
        "check",
        "--strict",
        "--quiet",
        "--golden",
        &reference("ds41_tiny_golden.v2.json"),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("443 passed, 0 failed\n"));
}

#[test]
fn json_report_filters_and_regime_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let (code, out, err) = run(&[
        "check",
        "--golden",
        &reference("ds41_tiny_golden.v3.json"),
        "--only",
        r"^L4\.",
        "--regime",
        "decode12",
        "--json",
        json.to_str().expect("utf8"),
    ]);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("report")).expect("json");
    // One document shape for every --backend: a report per backend, then the cross comparisons.
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["cross"].as_array().map(Vec::len), Some(0));
    let v = &doc["backends"][0];
    assert_eq!(v["backend"], "cpu");
    let caps = v["captures"].as_array().expect("captures");
    assert!(caps
        .iter()
        .all(|c| c["capture"].as_str().is_some_and(|n| n.starts_with("L4."))));
    assert!(caps.iter().all(|c| c["regime"] != "decode13"));
    assert_eq!(
        caps.len() as u64,
        v["summary"]["passed"].as_u64().expect("passed")
    );
    assert!(out.contains(&format!("{} passed, 0 failed", caps.len())));
}

#[test]
fn a_corrupted_golden_sample_fails_with_exit_one_and_names_the_capture() {
    let text = std::fs::read_to_string(reference("ds41_tiny_golden.v3.json")).expect("v3");
    // Change the first sample of L3.sa_topk_idxs in prefill (an exact index capture).
    let key = "\"L3.sa_topk_idxs\":{\"shape\":[1,12,14],\"n\":168,\"stride\":3,\"ck\":";
    let at = text.find(key).expect("capture present");
    let data_at = at + text[at..].find("\"data\":[").expect("data") + "\"data\":[".len();
    let end = data_at + text[data_at..].find(',').expect("comma");
    let mut bad = text.clone();
    bad.replace_range(data_at..end, "5");
    let dir = tempfile::tempdir().expect("tempdir");
    let p: PathBuf = dir.path().join("bad.json");
    std::fs::write(&p, bad).expect("write");
    let (code, out, _) = run(&["check", "--quiet", "--golden", p.to_str().expect("utf8")]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("first failure: prefill12 L3.sa_topk_idxs (Block(3))"),
        "{out}"
    );
    assert!(out.ends_with("442 passed, 1 failed\n"), "{out}");
}

#[test]
fn bad_inputs_give_clear_errors() {
    let (code, _, err) = run(&["check", "--golden", "/nonexistent/g.json"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/g.json"), "{err}");
    let (code, _, err) = run(&[
        "check",
        "--golden",
        &reference("ds41_tiny_golden.v3.json"),
        "--regime",
        "decode99",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("decode99") && err.contains("prefill12"),
        "{err}"
    );
    let (code, _, err) = run(&[
        "check",
        "--golden",
        &reference("ds41_tiny_golden.v3.json"),
        "--only",
        "(",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--only"), "{err}");
}

#[test]
fn check_without_a_golden_uses_the_embedded_default() {
    let (code, out, _) = run(&["check", "--quiet"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(golden_lens::golden::embedded::DEFAULT_GOLDEN_LABEL));
    assert!(out.ends_with("443 passed, 0 failed\n"));
}

/// Without the window (a build without `gui`), the bare command runs that same check.
#[cfg(not(feature = "gui"))]
#[test]
fn bare_invocation_checks_the_embedded_default_golden() {
    let (code, out, _) = run(&[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(golden_lens::golden::embedded::DEFAULT_GOLDEN_LABEL));
    assert!(out.ends_with("443 passed, 0 failed\n"));
}
