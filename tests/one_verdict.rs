//! One stepper, one verdict: `check --backend cpu,gpu --json --export-failing` and the app's
//! worker with its "Export failing…" writer, run on the same golden and backends, agree capture
//! for capture on every verdict and metric, on a clean run and on an injected GPU fault.
#![cfg(feature = "gpu")]

use golden_lens::golden::Golden;
use golden_lens::gpu::{test_context, GpuBackend, GpuOptions, Injection};
use golden_lens::session::builder::ModelParts;
use golden_lens::session::controller::{
    run_all_blocking, BackendFactory, BoxedBackend, CaptureResult, Controller,
};
use golden_lens::session::export::{write_failing_captures, Provenance};
use golden_lens::session::{Mode, SessionError};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// A hang guard for one whole tiny run of both backends in the app's worker.
const RUN_TIMEOUT: Duration = Duration::from_secs(900);

fn v3_path() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/reference/ds41_tiny_golden.v3.json"
    ))
}

/// The CLI's JSON report and failing-captures export of `check --backend cpu,gpu`.
fn cli_run(inject: Option<&str>, dir: &std::path::Path) -> (i32, Value, Value) {
    let (json, export) = (dir.join("report.json"), dir.join("failing.json"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_golden-lens"));
    cmd.args(["check", "--golden"])
        .arg(v3_path())
        .args(["--backend", "cpu,gpu", "--reference-ties", "--json"])
        .arg(&json)
        .arg("--export-failing")
        .arg(&export);
    if let Some(i) = inject {
        cmd.args(["--inject", i]);
    }
    let out = cmd.output().expect("binary runs");
    let read = |p: &PathBuf| -> Value {
        serde_json::from_slice(&std::fs::read(p).expect("written")).expect("json")
    };
    (out.status.code().unwrap_or(-1), read(&json), read(&export))
}

/// The app's worker over the same backends: the oracle with its scores, then the GPU.
fn app_run(golden: &Arc<Golden>, inject: Option<&str>) -> Option<Vec<CaptureResult>> {
    test_context("one_verdict")?;
    let model = ModelParts::from_golden(golden).expect("model");
    let injection = inject.map(|i| i.parse::<Injection>().expect("injection"));
    let factory: BackendFactory = Box::new(move || {
        let ctx = golden_lens::gpu::GpuContext::new().map_err(|e| SessionError::build("gpu", e))?;
        let opts = GpuOptions {
            reference_ties: true,
            inject: injection.clone(),
            tie_audit: false,
        };
        let gpu = GpuBackend::new(
            ctx,
            model.cfg.clone(),
            model.weights.clone(),
            model.tables.clone(),
            opts,
        )
        .map_err(|e| SessionError::build("gpu", e))?;
        Ok(vec![
            Box::new(model.oracle_with_diagnostics()) as BoxedBackend,
            Box::new(gpu) as BoxedBackend,
        ])
    });
    let c = Controller::spawn(golden.clone(), factory, Mode::Chained, Box::new(|| {}));
    Some(run_all_blocking(&c, RUN_TIMEOUT).expect("app run"))
}

fn find<'a>(list: &'a Value, regime: &str, capture: &str) -> &'a Value {
    list.as_array()
        .expect("captures")
        .iter()
        .find(|c| c["regime"] == regime && c["capture"] == capture)
        .unwrap_or_else(|| panic!("{regime}/{capture} missing from the CLI report"))
}

fn finite_or_null(v: f64) -> Value {
    if v.is_finite() {
        serde_json::json!(v)
    } else {
        Value::Null
    }
}

fn agree(inject: Option<&str>) {
    let golden = Arc::new(Golden::load(&v3_path()).expect("v3"));
    let Some(results) = app_run(&golden, inject) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, report, export) = cli_run(inject, dir.path());
    let app_fails = results.iter().any(|r| !r.pass());
    assert_eq!(
        code,
        i32::from(app_fails),
        "exit code against the app's verdict"
    );
    assert_eq!(report["ok"], !app_fails);
    let backends = report["backends"].as_array().expect("backends");
    let cross = &report["cross"][0]["captures"];
    let mut compared = 0;
    for r in &results {
        for (bi, side) in r.per_backend.iter().enumerate() {
            let Some(cmp) = &side.vs_golden else {
                continue;
            };
            let row = find(&backends[bi]["captures"], &r.regime, &r.name);
            assert_eq!(row["pass"], cmp.pass, "{} {}", side.backend, r.label());
            assert_eq!(row["bit_exact"], cmp.bit_exact, "{}", r.label());
            assert_eq!(
                row["max_abs_err"],
                finite_or_null(cmp.max_abs_err),
                "{}",
                r.label()
            );
            assert_eq!(row["tol"], cmp.tol, "{}", r.label());
            assert_eq!(row["nmse"], finite_or_null(cmp.nmse), "{}", r.label());
            compared += 1;
        }
        for x in &r.cross {
            let row = find(cross, &r.regime, &r.name);
            assert_eq!(row["within_policy"], x.ok(), "{}", r.label());
            assert_eq!(row["policy"], x.cmp.policy_name, "{}", r.label());
            assert_eq!(row["max_abs_err"], finite_or_null(x.cmp.max_abs_err));
            compared += 1;
        }
    }
    // Every golden capture of both backends, and the GPU against the oracle.
    assert_eq!(compared, 3 * 443);
    // The app's export of its results is the CLI's, failing capture for failing capture.
    let app_export = dir.path().join("app.json");
    let provenance = Provenance {
        golden_path: golden.source.display().to_string(),
        golden_hash: String::new(),
        backends: vec!["cpu".into(), "gpu".into()],
        adapter: None,
        mode: Mode::Chained,
        strict: false,
        weights: None,
    };
    let n = write_failing_captures(&app_export, &golden, &results, &provenance).expect("export");
    let app_doc: Value =
        serde_json::from_slice(&std::fs::read(&app_export).expect("written")).expect("json");
    let failing = &export["golden_lens"]["failing"];
    assert_eq!(failing.as_array().map(Vec::len), Some(n));
    assert_eq!(failing, &app_doc["golden_lens"]["failing"]);
    if inject.is_some() {
        assert!(n > 0, "the injected fault fails some capture");
    }
}

#[test]
fn check_and_the_app_agree_on_a_clean_gpu_run() {
    agree(None);
}

#[test]
fn check_and_the_app_agree_on_an_injected_gpu_fault() {
    agree(Some("bitflip@L1.attn_in"));
}
