//! `golden-lens check`: run a backend over a golden, compare every capture, print one row per
//! capture and a closing `N passed, M failed` line; exit 1 on any failure.

use anyhow::Context;
use golden_lens::golden::Golden;
use golden_lens::session::{self, CheckOptions, Mode};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeArg {
    Chained,
    Isolated,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The golden to check against (default: the embedded golden/ds41_tiny.json).
    #[arg(long)]
    pub golden: Option<PathBuf>,
    /// Run the CPU oracle on this deepseek41 GGUF's weights and metadata (either dialect, any
    /// shard of a set) instead of the golden's filler weights.
    #[arg(long)]
    pub gguf: Option<PathBuf>,
    /// Backends to run (only `cpu` so far).
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// `chained`: each backend carries its own state; `isolated`: every step's inputs and state
    /// are reseeded from the golden (needs full captures, e.g. the v3-full golden).
    #[arg(long, value_enum, default_value = "chained")]
    pub mode: ModeArg,
    /// Compare only captures whose name matches this regular expression.
    #[arg(long)]
    pub only: Option<String>,
    /// Stop after this regime.
    #[arg(long)]
    pub regime: Option<String>,
    /// Write the full report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Print only failing rows and the summary.
    #[arg(long)]
    pub quiet: bool,
    /// Hold bf16 captures to bit-exactness instead of the Atlas bar (f32 chains keep F32_TOL).
    #[arg(long)]
    pub strict: bool,
}

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    if args.backend != "cpu" {
        anyhow::bail!(
            "backend `{}` is not available in this build (use `cpu`)",
            args.backend
        );
    }
    let golden = match &args.golden {
        Some(p) => Golden::load(p)?,
        None => golden_lens::golden::embedded::default_golden()?,
    };
    if let Some(r) = &args.regime {
        if golden.regime(r).is_none() {
            let names: Vec<&str> = golden.regimes.iter().map(|r| r.name.as_str()).collect();
            anyhow::bail!("--regime {r}: the golden has regimes {names:?}");
        }
    }
    let only = args
        .only
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .context("--only is not a valid regular expression")?;
    let opts = CheckOptions {
        mode: match args.mode {
            ModeArg::Chained => Mode::Chained,
            ModeArg::Isolated => Mode::Isolated,
        },
        only,
        stop_after_regime: args.regime.clone(),
        strict: args.strict,
        invariants: Some(session::model_of(&golden)?.0),
    };
    let mut oracle = match &args.gguf {
        Some(path) => gguf_oracle(path, &golden)?,
        None => session::oracle_for(&golden)?,
    };
    let report = session::run_check(&golden, &mut oracle, &opts)?;
    println!("golden:  {}", report.golden_source);
    println!("backend: cpu oracle ({} mode)", report.mode.label());
    println!(
        "{:<10} {:<28} {:<6} {:>12} {:>12} {:>9}  verdict",
        "regime", "capture", "kind", "max_abs_err", "tol", "ratio"
    );
    for r in &report.rows {
        if args.quiet && r.cmp.pass {
            continue;
        }
        let verdict = match (r.cmp.pass, r.cmp.bit_exact) {
            (true, true) => "pass (bit-exact)".to_string(),
            (true, false) => "pass".to_string(),
            (false, _) => format!("FAIL: {}", r.cmp.reason),
        };
        println!(
            "{:<10} {:<28} {:<6} {:>12.3e} {:>12.3e} {:>9.3}  {}",
            r.regime,
            r.name,
            r.kind.label(),
            r.cmp.max_abs_err,
            r.cmp.tol,
            r.cmp.worst_ratio,
            verdict
        );
    }
    for (regime, name) in &report.missing {
        println!("{regime:<10} {name:<28} MISSING: the backend did not produce this capture");
    }
    for iso in &report.not_isolated {
        println!(
            "{:<10} {:<28} not isolated: needs full {}",
            iso.regime,
            iso.step.to_string(),
            iso.missing.join(", ")
        );
    }
    for (regime, v) in &report.violations {
        println!(
            "{regime:<10} {:<28} INVARIANT at flat index {}: {}",
            v.capture, v.index, v.what
        );
    }
    println!(
        "invariants: {} violations in the backend's own captures",
        report.violations.len()
    );
    let s = report.summary();
    println!(
        "bit-exact: {} of {} bf16 captures, {} of {} integer captures exact, {} of {} f32 captures",
        s.bf16_bit_exact, s.bf16_total, s.int_exact, s.int_total, s.f32_bit_exact, s.f32_total
    );
    if !report.extra.is_empty() {
        println!(
            "{} captures produced that this golden does not hold (not compared)",
            report.extra.len()
        );
    }
    if let Some(f) = report.first_failure() {
        println!("first failure: {} {} ({})", f.regime, f.name, f.step);
    }
    if let Some(path) = &args.json {
        write_atomic(path, &serde_json::to_vec_pretty(&report.to_json())?)?;
        println!("report written to {}", path.display());
    }
    println!("{} passed, {} failed", s.passed, s.failed);
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Write `bytes` to `path` through a temporary file in the same directory and a rename, so a
/// reader never sees a half-written file.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let name = path.file_name().context("output path has no file name")?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(())
}

/// The CPU oracle over a GGUF's weights, with the config and engram tables its metadata
/// describes; says so when that config differs from the golden's fixture.
fn gguf_oracle(
    path: &std::path::Path,
    golden: &Golden,
) -> anyhow::Result<golden_lens::oracle::Oracle> {
    use golden_lens::model::{GgufSource, WeightSource};
    let (source, model) = GgufSource::open(path)?;
    println!("weights: {}", source.describe());
    if model.cfg != session::model_of(golden)?.0 {
        println!("note: the GGUF's model config differs from the golden's fixture");
    }
    Ok(golden_lens::oracle::Oracle::new(
        model.cfg,
        std::sync::Arc::new(source),
        model.tables,
    ))
}
