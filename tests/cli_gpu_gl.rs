//! The GPU path without a Vulkan driver (issue 14): with `VK_ICD_FILENAMES`/`VK_DRIVER_FILES`
//! pointing nowhere, `check --backend gpu --reference-ties` runs on wgpu's GL backend (Mesa's
//! llvmpipe here) and gives the v3 golden the same report, row for row, as Vulkan (lavapipe).
#![cfg(feature = "gpu")]

use std::process::Command;

fn v3() -> String {
    format!(
        "{}/golden/reference/ds41_tiny_golden.v3.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `check --backend gpu --reference-ties` on v3 with `env` set: exit code and stdout.
fn check(env: &[(&str, &str)], extra: &[&str]) -> (i32, String, String) {
    let v3 = v3();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_golden-lens"));
    cmd.args([
        "check",
        "--backend",
        "gpu",
        "--reference-ties",
        "--golden",
        &v3,
    ])
    .args(extra)
    // The choice comes from the arguments and `env` only.
    .env_remove("WGPU_BACKEND")
    .env_remove("GOLDEN_LENS_ADAPTER")
    .env_remove("WGPU_ADAPTER_NAME");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The capture rows and the bit-exact line of a report.
fn rows(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter(|l| {
            l.starts_with("prefill") || l.starts_with("decode") || l.starts_with("bit-exact:")
        })
        .collect()
}

/// True when the run found no adapter of the asked kind (skipped, except under CI).
fn missing(test: &str, what: &str, code: i32, err: &str) -> bool {
    if code == 2 && err.contains("no wgpu adapter with compute shaders") {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "{test}: CI=true and no {what} adapter: {err}");
        eprintln!("{test}: skipped, no {what} adapter: {err}");
        return true;
    }
    false
}

#[test]
fn without_a_vulkan_driver_v3_passes_on_gl_row_for_row_as_on_vulkan() {
    let test = "without_a_vulkan_driver_v3_passes_on_gl_row_for_row_as_on_vulkan";
    let (code, vulkan, err) = check(&[], &["--adapter", "vulkan"]);
    if missing(test, "Vulkan", code, &err) {
        return;
    }
    assert_eq!(code, 0, "{vulkan}\n{err}");
    let nowhere = "/nonexistent/vulkan-icd.json";
    let (code, gl, err) = check(
        &[("VK_ICD_FILENAMES", nowhere), ("VK_DRIVER_FILES", nowhere)],
        &[],
    );
    if missing(test, "GL", code, &err) {
        return;
    }
    assert_eq!(code, 0, "{gl}\n{err}");
    let adapter = gl
        .lines()
        .find(|l| l.starts_with("adapter: "))
        .unwrap_or_default();
    assert!(adapter.contains("(Gl, "), "the GL backend ran: {adapter}");
    assert!(
        vulkan
            .lines()
            .any(|l| l.starts_with("adapter: ") && l.contains("(Vulkan, ")),
        "{vulkan}"
    );
    assert!(rows(&gl).len() > 443, "{gl}");
    assert_eq!(rows(&gl), rows(&vulkan));
    assert_eq!(gl.lines().last(), Some("443 passed, 0 failed"), "{gl}");
}
