//! `golden-lens golden info` through the built binary: the summary of the shipped goldens and
//! a non-zero exit naming the file for a malformed one.

use std::process::{Command, Output};

fn reference(file: &str) -> String {
    format!("{}/golden/reference/{file}", env!("CARGO_MANIFEST_DIR"))
}

fn golden_info(path: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_golden-lens"))
        .args(["golden", "info", path])
        .output()
        .expect("the binary runs")
}

fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn info_on_v3_reports_counts_and_weights() {
    let out = golden_info(&reference("ds41_tiny_golden.v3.json"));
    let text = stdout_of(&out);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "ds41_tiny_golden.v3.json (297291 bytes)",
        "version: v3 ",
        "geometry: vocab 64, dim 64, layers 6, heads 4 x head_dim 32, hc_mult 4",
        "experts: 4 routed, 2 activated",
        "compress_ratios: [0, 0, 2, 2, 1, 1]",
        "sources: kv [2, 4], index [2, 4, 5], candidate 4",
        "index_topk: 6",
        "engram layers: [1, 4]",
        "prefill length: 12",
        "regimes: prefill12 147, decode12 148, decode13 148 (443 captures)",
        "captures: 65 int, 378 float, 156 full (stride 1)",
        "weights: 226 of 226 regenerated within 1e-9",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn info_tells_the_versions_apart() {
    for (file, version, captures) in [
        ("ds41_tiny_golden.v1.json", "version: v1 ", "(431 captures)"),
        ("ds41_tiny_golden.v2.json", "version: v2 ", "(443 captures)"),
        (
            "ds41_tiny_golden.v3-full.json",
            "version: v3-full ",
            "443 full (stride 1)",
        ),
    ] {
        let out = golden_info(&reference(file));
        let text = stdout_of(&out);
        assert!(out.status.success(), "{file}: {text}");
        assert!(
            text.contains(version) && text.contains(captures),
            "{file}:\n{text}"
        );
        assert!(text.contains("226 of 226"), "{file}:\n{text}");
    }
}

#[test]
fn info_on_a_malformed_file_fails_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("broken-golden.json");
    let v3 = std::fs::read_to_string(reference("ds41_tiny_golden.v3.json")).expect("v3");
    std::fs::write(&path, v3.replacen("\"stride\":1", "\"stride\":0", 1)).expect("write");
    let out = golden_info(&path.display().to_string());
    assert!(!out.status.success());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("broken-golden.json"), "{stderr}");
    assert!(stderr.contains("`stride`"), "{stderr}");
    assert!(stdout_of(&out).is_empty());

    let missing = dir.path().join("absent.json");
    let out = golden_info(&missing.display().to_string());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("absent.json"));
}
