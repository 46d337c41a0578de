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

/// The captures of regime 0 (prefill) run up to and including `Block(layer)` by `backend`,
/// handing it `hints` just before that block.
fn prefill_to_block(
    g: &Golden,
    backend: &mut dyn Backend,
    layer: usize,
    hints: Option<&golden_lens::model::hints::SelectionHints>,
) -> Vec<golden_lens::model::Capture> {
    use golden_lens::model::Step;
    let inputs = session::regime_inputs(g).expect("inputs");
    let (_, ids, start) = &inputs[0];
    backend.begin(ids, *start).expect("begin");
    let mut out = Vec::new();
    for s in backend.steps() {
        if s == Step::Block(layer) {
            if let Some(h) = hints {
                assert!(
                    backend.hint(h).expect("hint"),
                    "a reference-ties GPU takes hints"
                );
            }
        }
        let mut sink = Vec::new();
        backend.run(s, &mut sink).expect("step");
        out.extend(sink);
        if s == Step::Block(layer) {
            break;
        }
    }
    out
}

fn ints(caps: &[golden_lens::model::Capture], name: &str) -> Vec<i64> {
    match caps.iter().find(|c| c.name == name).map(|c| &c.values) {
        Some(golden_lens::model::CaptureValues::I64(v)) => v.clone(),
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn a_reference_ties_gpu_takes_a_hinted_routing_only_within_the_score_bar() {
    use golden_lens::model::hints::{SelectionHints, NEAR_TIE_PREFIX};
    if test_context("gpu_hints").is_none() {
        return;
    }
    let g = load("ds41_tiny_golden.v3.json");
    let layer = 2;
    let moe = format!("L{layer}.moe_indices");
    // The oracle's ranking of row 0: swap its k-th pick for the best expert it left out.
    let mut oracle = session::oracle_for(&g).expect("oracle");
    oracle.diagnostics = true;
    let caps = prefill_to_block(&g, &mut oracle, layer, None);
    let reference = ints(&caps, &moe);
    let biased = match caps
        .iter()
        .find(|c| c.name == format!("diag.L{layer}.gate_biased"))
        .map(|c| &c.values)
    {
        Some(golden_lens::model::CaptureValues::F32(v)) => v.clone(),
        other => panic!("gate scores: {other:?}"),
    };
    let tokens = session::regime_inputs(&g).expect("inputs")[0].1.len();
    let (k, ne) = (reference.len() / tokens, biased.len() / tokens);
    assert!(k >= 1 && ne > k, "k {k} of {ne} experts");
    let row0 = &biased[..ne];
    let mut order: Vec<usize> = (0..ne).collect();
    order.sort_by(|&a, &b| row0[b].total_cmp(&row0[a]));
    let left_out = order[k] as i64;
    let mut hint = reference.clone();
    let last = hint[..k]
        .iter()
        .position(|&e| e == order[k - 1] as i64)
        .expect("the k-th pick is in row 0");
    hint[last] = left_out;
    let margin = row0[order[k - 1]] - row0[order[k]];
    assert!(margin > 0.0, "row 0 has no tie at its boundary");
    let hints = |tol: f32| SelectionHints {
        moe_indices: [(layer, hint.clone())].into_iter().collect(),
        moe_score_tol: tol,
    };
    // Within the bar: row 0 takes the hint (and says so); the other rows keep the GPU's own.
    let mut taken = gpu(&g, true, None);
    let caps = prefill_to_block(&g, taken.as_mut(), layer, Some(&hints(2.0 * margin)));
    assert_eq!(
        ints(&caps, &moe),
        hint,
        "row 0 hinted, the rest equal the oracle's"
    );
    assert_eq!(ints(&caps, &format!("{NEAR_TIE_PREFIX}{moe}")), vec![0]);
    // Under the margin: the GPU keeps its own routing and reports nothing.
    let mut kept = gpu(&g, true, None);
    let caps = prefill_to_block(&g, kept.as_mut(), layer, Some(&hints(0.5 * margin)));
    assert_eq!(ints(&caps, &moe), reference);
    assert!(caps.iter().all(|c| !c.name.starts_with(NEAR_TIE_PREFIX)));
    // Without reference ties the GPU selects on the device and takes no hints.
    let mut own = gpu(&g, false, None);
    assert!(!own.hint(&hints(1.0)).expect("hint"));
}
