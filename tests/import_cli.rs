//! `golden-lens captures info|convert` through the binary: what a dump holds against a golden,
//! the canonical file it converts to, and clear errors.

mod import_common;
use import_common::*;
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

#[test]
fn info_lists_mapped_and_missing_and_convert_round_trips() {
    let full = golden("v3-full");
    let dir = scratch();
    // A partial dump: decode13's captures only, plus a tensor no rule maps.
    let mut tensors: Vec<_> = canonical(&full_captures(&full))
        .into_iter()
        .filter(|(n, _, _)| n.starts_with("decode13/"))
        .collect();
    tensors.push((
        "debug_probe".into(),
        vec![1],
        golden_lens::import::TensorValues::F32(vec![0.0]),
    ));
    let path = dir.path().join("d13.safetensors");
    golden_lens::import::safetensors::write(&path, &tensors, &[]).unwrap();
    let v3 = reference("ds41_tiny_golden.v3.json");
    let (code, out, err) = run(&[
        "captures",
        "info",
        path.to_str().unwrap(),
        "--golden",
        v3.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("mapped:  148 of 443 golden captures; 295 missing"),
        "{out}"
    );
    assert!(
        out.contains("unmapped, no rule matches (1):\n  debug_probe"),
        "{out}"
    );
    assert!(
        out.contains("golden captures with no tensor (295):"),
        "{out}"
    );
    assert!(out.contains("  decode13   L0.h_in"), "{out}");

    let canon = dir.path().join("canon.safetensors");
    let (code, out, err) = run(&[
        "captures",
        "convert",
        path.to_str().unwrap(),
        "--golden",
        v3.to_str().unwrap(),
        "--out",
        canon.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("148 captures in canonical names"), "{out}");
    let (code, out, _) = run(&[
        "captures",
        "info",
        canon.to_str().unwrap(),
        "--golden",
        v3.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("mapped:  148 of 443"), "{out}");
}

#[test]
fn bad_dumps_and_maps_are_clear_errors() {
    let dir = scratch();
    let bad = dir.path().join("bad.npy");
    std::fs::write(&bad, b"\x93NUMPY\x01\x00\x10\x00{'descr': '|O'}").unwrap();
    let (code, _, err) = run(&["captures", "info", bad.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("bad.npy"), "{err}");
    let (code, _, err) = run(&[
        "captures",
        "info",
        bad.to_str().unwrap(),
        "--map",
        "nonesuch",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("neither a shipped map (canonical, ggml, ds4, deepseek-ref)"),
        "{err}"
    );
}
