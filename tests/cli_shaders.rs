//! The kernel workbench through the binary: `shaders export DIR`, `--shaders DIR` (the report says
//! which family came from where), a WGSL syntax error located as `FILE:LINE:COL` with exit 2, an
//! arithmetic edit caught at the first capture the edited kernel writes with the kernel named in
//! the failure lines and in `check --json`, and `check --profile`.
#![cfg(feature = "gpu")]

use golden_lens::golden::Golden;
use golden_lens::gpu::{test_context, GpuBackend, GpuOptions};
use golden_lens::model::{Backend, FillerSource, WeightSource};
use golden_lens::session;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// WGSL files `shaders export` writes: the prelude and one per kernel family.
const EXPORTED_FILES: usize = golden_lens::gpu::exec::FAMILIES.len() + 1;

fn v3() -> String {
    format!(
        "{}/golden/reference/ds41_tiny_golden.v3.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

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

fn export(dir: &Path) {
    let (code, out, err) = run(&["shaders", "export", &dir.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), EXPORTED_FILES, "{out}");
    for line in out.lines() {
        assert!(Path::new(line).is_file(), "{line} written");
    }
}

/// Replace the one occurrence of `from` in `file` by `to`; returns the 1-based line it is on.
fn edit(file: &Path, from: &str, to: &str) -> usize {
    let text = std::fs::read_to_string(file).expect("read");
    assert_eq!(
        text.matches(from).count(),
        1,
        "{from} once in {}",
        file.display()
    );
    let at = text.find(from).expect("found");
    let line = text[..at].matches('\n').count() + 1;
    std::fs::write(file, text.replacen(from, to, 1)).expect("write");
    line
}

/// True when the machine has a wgpu adapter (else the GPU runs are skipped with a notice).
fn has_gpu(test: &str) -> bool {
    test_context(test).is_some()
}

#[test]
fn an_exported_set_checks_v3_exactly_like_the_embedded_shaders() {
    if !has_gpu("an_exported_set_checks_v3_exactly_like_the_embedded_shaders") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    export(dir.path());
    let d = dir.path().display().to_string();
    let v3 = v3();
    let check = [
        "check",
        "--backend",
        "gpu",
        "--reference-ties",
        "--golden",
        &v3,
    ];
    let (code, embedded, err) = run(&check);
    assert_eq!(code, 0, "{embedded}\n{err}");
    let (code, out, err) = run(&[&check[..], &["--shaders", &d]].concat());
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(&format!("shaders: {EXPORTED_FILES} from {d} (")),
        "{out}"
    );
    assert!(out.contains("; embedded: none"), "{out}");
    // Every row, the bit-exact counts and the closing line are the embedded run's.
    let rows = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| {
                l.starts_with("prefill") || l.starts_with("decode") || l.starts_with("bit-exact:")
            })
            .map(str::to_string)
            .collect()
    };
    assert_eq!(rows(&out), rows(&embedded));
    assert!(rows(&out).len() > 443, "{out}");
    assert_eq!(out.lines().last(), Some("443 passed, 0 failed"), "{out}");
}

#[test]
fn a_syntax_error_in_a_copied_file_is_reported_as_file_line_column_and_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    export(dir.path());
    let rope = dir.path().join("rope.wgsl");
    let line = edit(&rope, "let a = y[i];", "let a = y[i]) ;");
    let location = format!("{}:{line}:", rope.display());
    let d = dir.path().display().to_string();
    // Refused before any adapter is opened, by every subcommand that runs kernels.
    for args in [
        vec![
            "check",
            "--backend",
            "gpu",
            "--shaders",
            &d,
            "--golden",
            &v3(),
        ],
        vec!["shaders", "check", &d],
    ] {
        let (code, out, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {out}\n{err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(&format!("error: {location}")),
            "{args:?}: the first line locates the error: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn an_interface_edit_is_refused_naming_what_the_rust_side_dispatches() {
    let dir = tempfile::tempdir().expect("tempdir");
    export(dir.path());
    edit(&dir.path().join("rope.wgsl"), "fn rope(", "fn rope_v2(");
    let (code, _, err) = run(&["shaders", "check", &dir.path().display().to_string()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("rope.wgsl: entry point `rope` is missing (the Rust side dispatches it)"),
        "{err}"
    );
}

/// Captures in the order the GPU backend produces them, each with the families of the
/// dispatches that wrote it.
type CaptureWriters = Vec<(String, Vec<&'static str>)>;

/// The v3 golden's first regime and its [`CaptureWriters`] with the embedded shaders.
fn writers_by_capture(test: &str) -> Option<(String, CaptureWriters)> {
    let ctx = test_context(test)?;
    let g = Golden::load(Path::new(&v3())).expect("v3 loads");
    let (cfg, tables) = session::model_of(&g).expect("config");
    let weights: Arc<dyn WeightSource> = Arc::new(FillerSource::new("v3", &g.weights_meta));
    let opts = GpuOptions {
        reference_ties: true,
        ..GpuOptions::default()
    };
    let mut gpu = GpuBackend::new(ctx, cfg, weights, tables, opts).expect("gpu backend");
    let (regime, ids, sp) = session::regime_inputs(&g)
        .expect("regimes")
        .into_iter()
        .next()
        .expect("a regime");
    gpu.begin(&ids, sp).expect("begin");
    let mut order = Vec::new();
    for step in gpu.steps() {
        let mut sink = Vec::new();
        gpu.run(step, &mut sink).expect("step");
        for c in sink {
            let fams = gpu
                .provenance(&c.name)
                .map(|p| p.dispatches().iter().map(|d| d.family).collect())
                .unwrap_or_default();
            order.push((c.name, fams));
        }
    }
    Some((regime, order))
}

#[test]
fn an_arithmetic_edit_fails_at_the_first_capture_its_kernel_writes_and_names_the_kernel() {
    let test =
        "an_arithmetic_edit_fails_at_the_first_capture_its_kernel_writes_and_names_the_kernel";
    let Some((regime, order)) = writers_by_capture(test) else {
        return;
    };
    // The first capture the rope kernel writes: nothing before it can see the edit.
    let (expected, _) = order
        .iter()
        .find(|(_, fams)| fams.contains(&"rope"))
        .expect("some capture is written by the rope kernel");
    let dir = tempfile::tempdir().expect("tempdir");
    export(dir.path());
    // Only the edited family travels; the others fall back to the embedded set.
    for p in std::fs::read_dir(dir.path()).expect("dir") {
        let p = p.expect("entry").path();
        if !p.ends_with("rope.wgsl") {
            std::fs::remove_file(p).expect("rm");
        }
    }
    let rope = dir.path().join("rope.wgsl");
    edit(
        &rope,
        "let re = keep(a * c) - keep(b * s);",
        "let re = keep(a * c) + keep(b * s);",
    );
    let json: PathBuf = dir.path().join("report.json");
    let (code, out, err) = run(&[
        "check",
        "--backend",
        "gpu",
        "--reference-ties",
        "--quiet",
        "--shaders",
        &dir.path().display().to_string(),
        "--golden",
        &v3(),
        "--json",
        &json.display().to_string(),
    ]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(&format!(
            "shaders: 1 from {} ({})",
            dir.path().display(),
            rope.display()
        )),
        "{out}"
    );
    assert!(out.contains("; embedded: common, "), "{out}");
    let first = out
        .lines()
        .find(|l| l.starts_with("first failure: "))
        .unwrap_or_else(|| panic!("a first failure line: {out}"));
    assert!(
        first.starts_with(&format!("first failure: {regime} {expected} (")),
        "expected {expected}: {first}"
    );
    let kernel = format!("[rope::rope in {}]", rope.display());
    assert!(
        first.contains(&kernel),
        "the failure line names the kernel: {first}"
    );
    assert!(first.contains("workgroup ("), "{first}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("json");
    let k = &doc["kernels"][0];
    assert_eq!(k["regime"], regime.as_str(), "{k}");
    assert_eq!(k["capture"], expected.as_str(), "{k}");
    let w = &k["written_by"][0];
    assert_eq!(w["family"], "rope", "{w}");
    assert_eq!(w["entry"], "rope", "{w}");
    assert_eq!(w["file"], rope.display().to_string(), "{w}");
    assert!(
        w["workgroup"].is_array() && w["invocation"].is_array(),
        "{w}"
    );
}

#[test]
fn check_profile_sums_every_dispatch_per_kernel_family_and_step() {
    if !has_gpu("check_profile_sums_every_dispatch_per_kernel_family_and_step") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let (code, out, err) = run(&[
        "check",
        "--backend",
        "gpu",
        "--reference-ties",
        "--quiet",
        "--profile",
        "--golden",
        &v3(),
        "--json",
        &json.display().to_string(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let dispatches: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("gpu: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a `gpu: N dispatches` line: {out}"));
    assert!(
        out.contains(&format!("profile: {dispatches} dispatches timed by ")),
        "every dispatch timed: {out}"
    );
    let sum = |prefix: &str| -> usize {
        out.lines()
            .filter(|l| l.starts_with(prefix))
            .map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                let at = cols
                    .iter()
                    .position(|c| *c == "dispatches")
                    .expect("column");
                cols[at - 1].parse::<usize>().expect("count")
            })
            .sum()
    };
    assert_eq!(sum("kernel "), dispatches, "{out}");
    assert_eq!(sum("family "), dispatches, "{out}");
    assert_eq!(sum("step "), dispatches, "{out}");
    for family in ["gemm", "attn", "rope", "rows"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("family  {family} "))),
            "{family}: {out}"
        );
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("json");
    assert!(doc["profile"].is_object(), "{}", doc["profile"]);
}
