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
    /// Backends to run: `cpu` (the oracle), `gpu` (the wgpu path; needs the `gpu` feature) or
    /// `cpu,gpu` (both in lockstep: each against the golden, and the GPU against the oracle).
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// GPU: run the top-k selections on the host with the torch-CPU tie rule (as production
    /// ports do), so the golden's tie-broken indices can match exactly.
    #[arg(long)]
    pub reference_ties: bool,
    /// GPU: perturb the kernel producing one capture on purpose, `KIND@CAPTURE` with KIND one of
    /// bitflip, window-off-by-one, rope-sign, dropped-workgroup, stale-buffer.
    #[arg(long, value_name = "KIND@CAPTURE")]
    pub inject: Option<String>,
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
    /// Also run the backend (the GPU where one is chosen) this many times and report every
    /// capture whose bits change between runs (determinism, apart from error).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
}

/// Which backends a `--backend` value asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backends {
    Cpu,
    Gpu,
    CpuGpu,
}

fn parse_backends(v: &str) -> anyhow::Result<Backends> {
    match v {
        "cpu" => Ok(Backends::Cpu),
        "gpu" => Ok(Backends::Gpu),
        "cpu,gpu" | "gpu,cpu" => Ok(Backends::CpuGpu),
        other => anyhow::bail!("--backend {other}: expected cpu, gpu or cpu,gpu"),
    }
}

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let backends = parse_backends(&args.backend)?;
    if backends == Backends::Cpu && (args.reference_ties || args.inject.is_some()) {
        anyhow::bail!("--reference-ties and --inject apply to the GPU backend (use --backend gpu)");
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
    if args.repeat > 1 {
        determinism(&golden, &args, backends)?;
    }
    match backends {
        Backends::Cpu => {
            let mut oracle = match &args.gguf {
                Some(path) => gguf_oracle(path, &golden)?,
                None => session::oracle_for(&golden)?,
            };
            let report = session::run_check(&golden, &mut oracle, &opts)?;
            println!("golden:  {}", report.golden_source);
            println!("backend: cpu oracle ({} mode)", report.mode.label());
            let ok = print_report(&report, &args)?;
            Ok(exit(ok))
        }
        Backends::Gpu | Backends::CpuGpu => run_gpu(&golden, &opts, &args, backends),
    }
}

/// `--repeat N`: fresh backends run N times; bitwise instability per capture.
fn determinism(golden: &Golden, args: &CheckArgs, backends: Backends) -> anyhow::Result<()> {
    use golden_lens::model::Backend;
    use golden_lens::session::SessionError;
    let on_gpu = backends != Backends::Cpu;
    let mut make = || -> Result<Box<dyn Backend>, SessionError> {
        if on_gpu {
            return gpu_backend_for_repeat(golden, args);
        }
        Ok(Box::new(session::oracle_for(golden)?))
    };
    let d = golden_lens::session::determinism::repeat_runs(golden, &mut make, args.repeat)?;
    println!(
        "determinism: {} runs of the {} backend, {} of {} captures bitwise unstable",
        d.runs,
        if on_gpu { "gpu" } else { "cpu" },
        d.unstable.len(),
        d.captures
    );
    for u in &d.unstable {
        println!(
            "{:<10} {:<28} UNSTABLE: {} of {} later runs differ, up to {} elements (first at flat index {})",
            u.regime,
            u.capture,
            u.runs_differing,
            d.runs - 1,
            u.max_elements_differing,
            u.first_index
        );
    }
    Ok(())
}

#[cfg(feature = "gpu")]
fn gpu_backend_for_repeat(
    golden: &Golden,
    args: &CheckArgs,
) -> Result<Box<dyn golden_lens::model::Backend>, golden_lens::session::SessionError> {
    use golden_lens::gpu::{GpuBackend, GpuContext, GpuOptions};
    use golden_lens::model::{BackendError, FillerSource, WeightSource};
    use golden_lens::session::SessionError;
    let fail = |msg: String| SessionError::Backend {
        regime: "-".into(),
        source: Box::new(BackendError::Invalid {
            step: "gpu".into(),
            msg,
        }),
    };
    let ctx = GpuContext::new().map_err(|e| fail(e.to_string()))?;
    let (cfg, tables) = session::model_of(golden)?;
    let weights: std::sync::Arc<dyn WeightSource> = std::sync::Arc::new(FillerSource::new(
        golden.source.display().to_string(),
        &golden.weights_meta,
    ));
    let opts = GpuOptions {
        reference_ties: args.reference_ties,
        inject: None,
        tie_audit: false,
    };
    Ok(Box::new(
        GpuBackend::new(ctx, cfg, weights, tables, opts).map_err(|e| fail(e.to_string()))?,
    ))
}

#[cfg(not(feature = "gpu"))]
fn gpu_backend_for_repeat(
    _golden: &Golden,
    args: &CheckArgs,
) -> Result<Box<dyn golden_lens::model::Backend>, golden_lens::session::SessionError> {
    Err(golden_lens::session::SessionError::Golden {
        source_path: "-".into(),
        msg: format!(
            "backend `{}` needs a build with the `gpu` feature",
            args.backend
        ),
    })
}

#[cfg(not(feature = "gpu"))]
fn run_gpu(
    _golden: &Golden,
    _opts: &CheckOptions,
    args: &CheckArgs,
    _backends: Backends,
) -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "backend `{}` needs a build with the `gpu` feature (cargo build --features gpu)",
        args.backend
    )
}

#[cfg(feature = "gpu")]
fn run_gpu(
    golden: &Golden,
    opts: &CheckOptions,
    args: &CheckArgs,
    backends: Backends,
) -> anyhow::Result<ExitCode> {
    use golden_lens::gpu::{GpuBackend, GpuContext, GpuOptions, Injection};
    use golden_lens::model::{FillerSource, WeightSource};
    use std::sync::Arc;
    let inject = args
        .inject
        .as_deref()
        .map(str::parse::<Injection>)
        .transpose()?;
    let ctx = GpuContext::new()?;
    println!("adapter: {}", ctx.adapter);
    let (cfg, tables) = session::model_of(golden)?;
    let weights: Arc<dyn WeightSource> = Arc::new(FillerSource::new(
        golden.source.display().to_string(),
        &golden.weights_meta,
    ));
    let gopts = GpuOptions {
        reference_ties: args.reference_ties,
        inject: inject.clone(),
        tie_audit: !args.reference_ties && backends == Backends::CpuGpu,
    };
    let mut gpu = GpuBackend::new(ctx, cfg, weights, tables, gopts)?;
    let ties = if args.reference_ties {
        "top-k on the host (torch-CPU tie rule)"
    } else {
        "top-k on the GPU (tie rule: larger first, equal values by lower index)"
    };
    if let Some(i) = &inject {
        println!("inject:  {i}");
    }
    if backends == Backends::Gpu {
        let report = session::run_check(golden, &mut gpu, opts)?;
        println!("golden:  {}", report.golden_source);
        println!("backend: gpu ({} mode; {ties})", report.mode.label());
        let ok = print_report(&report, args)?;
        println!(
            "gpu: {} dispatches, {:.3} s in steps",
            gpu.dispatch_count(),
            gpu.run_seconds
        );
        return Ok(exit(ok));
    }
    if opts.mode != Mode::Chained {
        anyhow::bail!("--backend cpu,gpu runs chained only (use one backend for --mode isolated)");
    }
    let mut oracle = session::oracle_for(golden)?;
    let t0 = std::time::Instant::now();
    let multi = {
        let mut list: [&mut dyn golden_lens::model::Backend; 2] = [&mut oracle, &mut gpu];
        session::multi::run_lockstep(golden, &mut list, 0, opts)?
    };
    let total_s = t0.elapsed().as_secs_f64();
    let mut ok = true;
    for report in &multi.golden {
        println!(
            "== {} against the golden ({} mode) ==",
            report.backend,
            report.mode.label()
        );
        println!("golden:  {}", report.golden_source);
        ok &= print_report(report, args)?;
    }
    println!("== gpu against the cpu oracle (GPU policy; {ties}) ==");
    println!(
        "{:<10} {:<28} {:<10} {:>12} {:>12} {:>9}  verdict",
        "regime", "capture", "policy", "max_abs_err", "tol", "ratio"
    );
    for r in multi.cross.iter().flat_map(|(_, rows)| rows) {
        if args.quiet && r.cmp.pass {
            continue;
        }
        let verdict = match (r.cmp.pass, r.cmp.bit_exact, r.tie_flip) {
            (true, true, _) => "within (bit-exact)".to_string(),
            (true, false, _) => "within".to_string(),
            (false, _, true) => "TIE FLIP (tie rule only)".to_string(),
            (false, _, false) => format!("OUTSIDE: {}", r.cmp.reason),
        };
        println!(
            "{:<10} {:<28} {:<10} {:>12.3e} {:>12.3e} {:>9.3}  {}",
            r.regime,
            r.name,
            r.cmp.policy_name,
            r.cmp.max_abs_err,
            r.cmp.tol,
            r.cmp.worst_ratio,
            verdict
        );
    }
    for (_, missing) in &multi.cross_missing {
        for (regime, name) in missing {
            println!("{regime:<10} {name:<28} MISSING on the gpu");
        }
    }
    let c = multi.cross_summary(0);
    println!(
        "gpu vs cpu: {} captures compared, {} within the GPU policy ({} bit-exact), {} tie flips, {} outside, {} missing",
        c.compared, c.within_policy, c.bit_exact, c.tie_flips, c.failed, c.missing
    );
    if let Some(f) = multi.first_cross_failure(0) {
        println!("first gpu divergence: {} {} ({})", f.regime, f.name, f.step);
    }
    println!(
        "gpu: {} dispatches, {:.3} s in gpu steps, {:.3} s lockstep total",
        gpu.dispatch_count(),
        gpu.run_seconds,
        total_s
    );
    ok &= c.failed == 0 && c.missing == 0;
    println!("overall: {}", if ok { "pass" } else { "FAIL" });
    Ok(exit(ok))
}

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Print one backend's golden report (rows, missing, invariants, summary); true when it passed.
fn print_report(report: &session::Report, args: &CheckArgs) -> anyhow::Result<bool> {
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
    Ok(report.ok())
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
