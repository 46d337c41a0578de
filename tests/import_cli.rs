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

/// The perturbation the issue asks the check and the localisation to catch: 2% on one capture.
const PERTURB_FACTOR: f32 = 1.02;

/// v3-full's own captures as a canonical dump, with `perturb` scaled by [`PERTURB_FACTOR`].
fn v3_full_dump(dir: &std::path::Path, perturb: Option<&str>) -> std::path::PathBuf {
    let mut tensors = canonical(&full_captures(&golden("v3-full")));
    for (n, _, v) in tensors.iter_mut() {
        if Some(n.as_str()) == perturb {
            if let golden_lens::import::TensorValues::F32(x) = v {
                x.iter_mut().for_each(|e| *e *= PERTURB_FACTOR);
            }
        }
    }
    let path = dir.join(if perturb.is_some() {
        "perturbed.safetensors"
    } else {
        "dump.safetensors"
    });
    golden_lens::import::safetensors::write(&path, &tensors, &[]).unwrap();
    path
}

#[test]
fn check_captures_passes_443_and_a_perturbed_capture_fails_first() {
    let dir = scratch();
    let v3 = reference("ds41_tiny_golden.v3.json");
    let clean = v3_full_dump(dir.path(), None);
    let (code, out, err) = run(&[
        "check",
        "--golden",
        v3.to_str().unwrap(),
        "--captures",
        clean.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert_eq!(out.lines().last(), Some("443 passed, 0 failed"));
    assert!(
        out.contains("bit-exact: 213 of 213 bf16 captures, 65 of 65 integer captures exact"),
        "{out}"
    );
    let target = "prefill12/L2.attn_out";
    let bad = v3_full_dump(dir.path(), Some(target));
    let (code, out, _) = run(&[
        "check",
        "--golden",
        v3.to_str().unwrap(),
        "--captures",
        bad.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("first failure: prefill12 L2.attn_out (Block(2))"),
        "{out}"
    );
    assert_eq!(out.lines().last(), Some("442 passed, 1 failed"));
    // With the oracle too: the dump is also compared with it, and the same capture leaves it first.
    let (code, out, _) = run(&[
        "check",
        "--golden",
        v3.to_str().unwrap(),
        "--captures",
        bad.to_str().unwrap(),
        "--backend",
        "cpu",
        "--quiet",
    ]);
    assert_eq!(code, 1);
    assert!(
        out.contains("first divergence from the oracle: prefill12 L2.attn_out (Block(2))"),
        "{out}"
    );
    assert!(
        out.contains("443 captures compared, 442 within the backend policy"),
        "{out}"
    );
}

#[test]
fn localize_captures_finds_the_perturbed_step_with_zero_input_error() {
    let dir = scratch();
    let full = reference("ds41_tiny_golden.v3-full.json");
    let bad = v3_full_dump(dir.path(), Some("prefill12/L2.attn_out"));
    let (code, out, err) = run(&[
        "localize",
        "--golden",
        full.to_str().unwrap(),
        "--captures",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}\n{out}");
    assert!(
        out.contains("first local divergence: prefill12 Block(2) at L2.attn_out"),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.starts_with("prefill12  Block(2)"))
        .expect("the Block(2) row");
    let input: f64 = row.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert_eq!(input, 0.0, "{row}");
    assert!(out.contains("prefill12  inputs from the dump: 16; derived from the dump: none; from the reference (not in the dump): none"), "{out}");
    let clean = v3_full_dump(dir.path(), None);
    let (code, out, _) = run(&[
        "localize",
        "--golden",
        full.to_str().unwrap(),
        "--captures",
        clean.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("first local divergence: none"), "{out}");
}
