//! The wgpu path with selections pinned (counterfactual) and its top-k disagreements triaged,
//! plus the CLI's lockstep runs. Isolated mode, fault confinement and localisation are the same
//! properties for every backend: tests/conformance.rs.
#![cfg(feature = "gpu")]

use golden_lens::golden::Golden;
use golden_lens::gpu::{test_context, GpuOptions};
use golden_lens::model::Backend;
use golden_lens::session::localize::{counterfactual, RecordedRun};
use golden_lens::session::multi::triage_totals;
use golden_lens::session::{self, CheckOptions, SessionError};
use std::path::PathBuf;

fn load(name: &str) -> Golden {
    let p = PathBuf::from(format!(
        "{}/golden/reference/{name}",
        env!("CARGO_MANIFEST_DIR")
    ));
    Golden::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn gpu(golden: &Golden, reference_ties: bool, inject: Option<&str>) -> Box<dyn Backend> {
    let opts = GpuOptions {
        reference_ties,
        inject: inject.map(|s| s.parse().expect("injection")),
        tie_audit: !reference_ties,
    };
    Box::new(session::gpu_for(golden, opts).expect("gpu backend"))
}

/// Run the binary: (success, stdout).
fn cli(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_golden-lens"))
        .args(args)
        .output()
        .expect("run");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

fn recorded(g: &Golden) -> RecordedRun {
    let mut o = session::oracle_for(g).expect("oracle");
    RecordedRun::record(g, &mut o).expect("record")
}

#[test]
fn pinning_tells_a_gpu_tie_flip_from_a_compute_fault() {
    if test_context("gpu_pin").is_none() {
        return;
    }
    let g = load("ds41_tiny_golden.v3.json");
    let rec = recorded(&g);
    // The GPU's own tie rule flips selections in layer 5; pinned, the divergence disappears.
    let mut make = || -> Result<Box<dyn Backend>, SessionError> { Ok(gpu(&g, false, None)) };
    let c = counterfactual(&g, &rec, &mut make, 4).expect("counterfactual");
    assert!(c.supported);
    assert!(c.unpinned_ratio > 1.0, "{c:?}");
    assert!(c.verdict.starts_with("selection flip"), "{}", c.verdict);
    // A broken kernel stays broken with the selections pinned.
    let mut make = || -> Result<Box<dyn Backend>, SessionError> {
        Ok(gpu(&g, true, Some("bitflip@L5.attn_out")))
    };
    let c = counterfactual(&g, &rec, &mut make, 4).expect("counterfactual");
    assert!(c.verdict.starts_with("compute"), "{}", c.verdict);
}

#[test]
fn triage_classifies_every_gpu_topk_disagreement_and_none_for_the_oracle() {
    if test_context("gpu_triage").is_none() {
        return;
    }
    let g = load("ds41_tiny_golden.v3.json");
    let mut oracle = session::oracle_for(&g).expect("oracle");
    oracle.diagnostics = true;
    let mut b = gpu(&g, false, None);
    let m = {
        session::run_lockstep(
            &g,
            vec![Box::new(&mut oracle), Box::new(b.as_mut())],
            &CheckOptions {
                invariants: Some(session::model_of(&g).expect("config").0),
                ..CheckOptions::default()
            },
        )
        .expect("lockstep")
    };
    let cpu = triage_totals(&m.triage_golden[0].1);
    assert!(cpu.captures > 0);
    assert_eq!(
        (cpu.rows_differing, cpu.real),
        (0, 0),
        "the oracle matches the golden"
    );
    let cross = triage_totals(&m.triage_cross[0].1);
    assert_eq!(
        cross.captures, 48,
        "every index capture and candidate selection of three regimes"
    );
    assert!(
        cross.tie_flips > 0,
        "the GPU tie rule flips the golden's ties"
    );
    assert_eq!(
        cross.rows_differing,
        cross.tie_flips + cross.near_ties + cross.real
    );
    // A disagreement the reference scores cannot explain must follow an earlier flip.
    for (regime, t) in &m.triage_cross[0].1 {
        if t.real > 0 {
            assert!(
                t.downstream_of.is_some(),
                "{regime} {}: real disagreement with no earlier selection flip",
                t.capture
            );
        }
    }
    // The GPU's tie flips are what moved its golden comparison.
    let gpu_golden = triage_totals(&m.triage_golden[1].1);
    assert!(gpu_golden.tie_flips > 0);
}

#[test]
fn check_cli_writes_one_json_for_cpu_and_gpu_and_runs_gpu_isolated() {
    if test_context("gpu_cli_json").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("r.json");
    let json_s = json.to_str().expect("utf8");
    let v3 = format!(
        "{}/golden/reference/ds41_tiny_golden.v3.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let (ok, text) = cli(&[
        "check",
        "--golden",
        &v3,
        "--backend",
        "cpu,gpu",
        "--reference-ties",
        "--quiet",
        "--json",
        json_s,
    ]);
    assert!(ok, "{text}");
    assert!(text
        .contains("top-k triage (gpu against the cpu oracle): 48 index captures, 0 rows differ"));
    assert!(text.contains("error budgets: "));
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("parse");
    let backends: Vec<&str> = v["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .map(|b| b["backend"].as_str().expect("name"))
        .collect();
    assert_eq!(backends, ["cpu", "gpu"]);
    assert_eq!(v["backends"][1]["summary"]["passed"], 443);
    assert_eq!(v["cross"][0]["summary"]["compared"], 443);
    assert_eq!(v["cross"][0]["topk_triage"]["index_captures"], 48);
    let full = format!(
        "{}/golden/reference/ds41_tiny_golden.v3-full.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let (ok, text) = cli(&[
        "check",
        "--golden",
        &full,
        "--backend",
        "gpu",
        "--reference-ties",
        "--mode",
        "isolated",
        "--quiet",
    ]);
    assert!(ok, "{text}");
    assert!(!text.contains("not isolated"), "{text}");
    assert!(text.ends_with("443 passed, 0 failed\n"), "{text}");
    // Both in lockstep, each reseeded before every step: the GPU's local errors against the
    // oracle's.
    let (ok, text) = cli(&[
        "check",
        "--golden",
        &full,
        "--backend",
        "cpu,gpu",
        "--reference-ties",
        "--mode",
        "isolated",
        "--quiet",
    ]);
    assert!(ok, "{text}");
    assert!(!text.contains("not isolated"), "{text}");
    assert!(
        text.contains("gpu vs cpu: 443 captures compared, 443 within the GPU policy"),
        "{text}"
    );
}

#[test]
fn check_runs_both_backends_on_a_gguf_s_weights() {
    if test_context("gpu_gguf").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let g = format!(
        "{}/golden/reference/ds41_tiny_golden.v3.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let run = cli;
    let bf16 = dir.path().join("tiny-bf16.gguf");
    let bf16 = bf16.to_str().expect("utf8");
    let (ok, text) = run(&["gguf", "export", "--golden", &g, "--out", bf16]);
    assert!(ok, "{text}");
    let (ok, text) = run(&[
        "check",
        "--golden",
        &g,
        "--gguf",
        bf16,
        "--backend",
        "cpu,gpu",
        "--reference-ties",
        "--quiet",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("weights: "), "{text}");
    assert!(text.contains("overall: pass"), "{text}");
    // Quantised weights: both backends leave the golden. Chained, a one-ulp bf16 flip in a
    // stream carries into the f32 mixes of later layers, so the lockstep comparison may show
    // carried error; the selections agree, and localisation finds no step whose own (local)
    // error leaves the GPU policy.
    let q8 = dir.path().join("tiny-q8.gguf");
    let q8 = q8.to_str().expect("utf8");
    let (ok, text) = run(&[
        "gguf",
        "export",
        "--golden",
        &g,
        "--out",
        q8,
        "--types",
        "default=q8_0",
    ]);
    assert!(ok, "{text}");
    let (ok, text) = run(&[
        "check",
        "--golden",
        &g,
        "--gguf",
        q8,
        "--backend",
        "cpu,gpu",
        "--reference-ties",
        "--quiet",
    ]);
    assert!(!ok, "q8_0 weights cannot meet the golden's bars");
    assert!(text.contains("gpu vs cpu: 443 captures compared"), "{text}");
    assert!(
        text.contains(
            "top-k triage (gpu against the cpu oracle): 48 index captures, 0 rows differ"
        ),
        "{text}"
    );
    let (ok, text) = run(&[
        "localize",
        "--golden",
        &g,
        "--gguf",
        q8,
        "--backend",
        "gpu",
        "--reference-ties",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("weights: GGUF"), "{text}");
    assert!(text.contains("first local divergence: none"), "{text}");
}
