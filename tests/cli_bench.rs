//! `golden-lens bench --quick`: every section runs, gguf-py's values equal ours where a python
//! with gguf-py is configured, and the last line is the roofline summary in its exact format.

use std::process::Command;

#[test]
fn quick_bench_ends_with_the_roofline_line() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_golden-lens"));
    cmd.args(["bench", "--quick"]);
    let with_python = std::env::var_os("GOLDEN_LENS_PY").is_some();
    let o = cmd.output().expect("bench runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for section in [
        "FMA peak",
        "memory: read",
        "GEMM (real dims",
        "dequantization (",
    ] {
        assert!(out.contains(section), "no `{section}` in:\n{out}");
    }
    for ty in [
        "Q2_K", "Q3_K", "Q4_K", "IQ2_XXS", "MXFP4", "Q8_0", "BF16", "F16",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("{ty} "))),
            "no dequant row for {ty}:\n{out}"
        );
    }
    if with_python {
        assert!(!out.contains("gguf-py skipped"), "{out}");
        assert!(out.contains("equal") && !out.contains("DIFFER"), "{out}");
    }
    let last = out.lines().last().unwrap_or_default();
    let re = regex::Regex::new(
        r"^roofline: worst GEMM \d+% of its limit, worst dequant \d+% of memcpy, dequant vs gguf-py (\d+\.\d|n/a) x$",
    )
    .expect("regex");
    assert!(re.is_match(last), "last line: {last:?}");
}
