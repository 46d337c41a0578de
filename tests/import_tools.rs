//! tools/deepseek_hooks.py without torch: its naming logic (the shipped deepseek-ref map's
//! rules, applied in Python) turns raw forward-hook names into the canonical dump the importer
//! reads, and every capture it writes passes against v3.
//!
//! Needs a python with numpy (Python >= 3.11 for tomllib): `GOLDEN_LENS_PY`, else `python3`.
//! Under `CI=true` a missing one fails; otherwise the test skips with a notice.

mod import_common;
use import_common::*;
use std::path::PathBuf;
use std::process::Command;

fn python() -> Option<PathBuf> {
    let candidate = std::env::var_os("GOLDEN_LENS_PY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    let ok = Command::new(&candidate)
        .args(["-c", "import numpy, tomllib"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(candidate);
    }
    let msg = format!("{} cannot import numpy and tomllib", candidate.display());
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}");
    }
    eprintln!("notice: skipping: {msg}");
    None
}

#[test]
fn hook_script_names_raw_module_calls_canonically() {
    let Some(py) = python() else { return };
    let full = golden("v3-full");
    let v3 = golden("v3");
    let regimes: Vec<String> = full.regimes.iter().map(|r| r.name.clone()).collect();
    let mut members = Vec::new();
    for c in full_captures(&full) {
        let Some(m) = module_of(&c.name) else {
            continue;
        };
        let pass = regimes.iter().position(|r| *r == c.regime).unwrap();
        members.push((
            format!("pass{pass}/{m}"),
            golden_lens::session::export::npy_bytes(&c.shape, &c.values),
        ));
    }
    // A projection's output: the map skips it.
    members.push((
        "pass0/layers.0.attn.wq_a.output0".into(),
        golden_lens::session::export::npy_bytes(
            &[1],
            &golden_lens::import::TensorValues::F32(vec![0.0]),
        ),
    ));
    let dir = scratch();
    let raw = dir.path().join("raw.npz");
    golden_lens::import::npz::write(&raw, &members, true).unwrap();
    let out = dir.path().join("canonical.safetensors");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/deepseek_hooks.py");
    let run = Command::new(&py)
        .arg(script)
        .args(["convert", raw.to_str().unwrap(), out.to_str().unwrap()])
        .args(["--passes", "0:12,12:1,13:1"])
        .output()
        .expect("python runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let expected = members.len() - 1;
    assert!(
        String::from_utf8_lossy(&run.stdout).contains(&format!("{expected} captures")),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    let joined = join(&out, "canonical", &v3);
    assert_eq!(joined.mapped(), expected);
    assert!(joined.unmapped.is_empty());
    let (mapped, missing) = (joined.mapped(), joined.missing.len());
    let report = check(joined, &v3);
    assert_eq!(report.rows.len(), mapped);
    assert!(report.rows.iter().all(|r| r.cmp.pass));
    assert_eq!(report.missing.len(), missing);
}
