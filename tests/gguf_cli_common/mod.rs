//! What the CLI tests of runs on a GGUF share: running the binary and a tiny exported GGUF.

use std::path::Path;
use std::process::Command;

/// Run the binary: exit code, stdout, stderr.
pub fn run(args: &[&str]) -> (i32, String, String) {
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

/// A tiny deepseek41 GGUF of the embedded golden's model, written by `gguf export` in
/// `dialect` (`ds4` or `llamacpp`) to `dir/name`.
pub fn tiny_gguf(dir: &Path, name: &str, dialect: &str) -> String {
    let p = dir.join(name).to_str().expect("utf8").to_string();
    let (code, _, err) = run(&["gguf", "export", "--out", &p, "--dialect", dialect]);
    assert_eq!(code, 0, "{err}");
    p
}
