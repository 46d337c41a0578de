//! `golden-lens check`: run a backend over a golden, compare every capture, print one row per
//! capture and a closing `N passed, M failed` line; exit 1 on any failure.

use super::model::ModelParts;
use anyhow::Context;
use golden_lens::golden::Golden;
use golden_lens::session::export::{write_atomic, Provenance};
use golden_lens::session::multi::triage_json;
use golden_lens::session::run::{KeepValues, RunRecord};
use golden_lens::session::{self, CheckOptions, Mode};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

pub(super) use super::check_print::{exit, print_report, print_triage, summary_line};

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeArg {
    Chained,
    Isolated,
}

/// The run's mode: `--mode` when given, else isolated on a real model and chained otherwise,
/// with the reason printed beside it.
///
/// Why isolated on a real model: two correct implementations differ by bf16 rounding flips,
/// and at real dims a chained run compounds them. A block's within-policy output flips feed the
/// next block's hc mixes (Sinkhorn over 4 × 5120 terms), and where a flip lands next to an fp8
/// (e4m3 KV latents) or fp4 (indexer keys) rounding boundary the element moves by a whole step,
/// which every later attention reads. Measured on the synthesized real layout (4 filled
/// layers, 8 tokens, 2 decode steps, lavapipe): block 0 within policy, then L1.attn_post at
/// 1.57x its bar, one fp8 step in L1.sa_kv, 14x by L2; reseeded, 282 of 282 within policy.
/// Reseeded, each step starts from the reference's inputs, so a capture over its bar is that
/// step's own error. Chained mode stays available as the report of the drift.
pub(super) fn default_mode(given: Option<ModeArg>, real_model: bool) -> (Mode, &'static str) {
    match (given, real_model) {
        (Some(ModeArg::Chained), _) => (Mode::Chained, "--mode chained"),
        (Some(ModeArg::Isolated), _) => (Mode::Isolated, "--mode isolated"),
        (None, true) => (
            Mode::Isolated,
            "the default on a real model; --mode chained lets each backend carry its own state",
        ),
        (None, false) => (Mode::Chained, "the default"),
    }
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The golden to check against (default: the embedded v3-full reference golden).
    #[arg(long)]
    pub golden: Option<PathBuf>,
    /// Run the CPU oracle on this deepseek41 GGUF's weights and metadata (either dialect, any
    /// shard of a set) instead of the golden's filler weights.
    #[arg(long)]
    pub gguf: Option<PathBuf>,
    /// Backends to run: `cpu` (the oracle, the default), `gpu` (the wgpu path; needs the `gpu`
    /// feature) or `cpu,gpu` (both in lockstep: each against the golden, and the GPU against the
    /// oracle). With `--captures`: none by default (the dump alone), or `cpu` to compare the dump
    /// with the oracle too.
    #[arg(long)]
    pub backend: Option<String>,
    /// Check another engine's dump (safetensors, .npy/.npz, raw + manifest, ds4 prefix) as the
    /// backend, through `--map`; see `golden-lens captures info`.
    #[arg(long)]
    pub captures: Option<PathBuf>,
    /// The name map of `--captures`: a shipped one (canonical, ggml, ds4, deepseek-ref) or a
    /// TOML file.
    #[arg(long, default_value = "canonical")]
    pub map: String,
    /// GPU: run the top-k selections on the host with the torch-CPU tie rule (as production
    /// ports do), so the golden's tie-broken indices can match exactly.
    #[arg(long)]
    pub reference_ties: bool,
    /// GPU: perturb the kernel producing one capture on purpose, `KIND@CAPTURE` with KIND one of
    /// bitflip, window-off-by-one, rope-sign, dropped-workgroup, stale-buffer.
    #[arg(long, value_name = "KIND@CAPTURE")]
    pub inject: Option<String>,
    /// `chained`: each backend carries its own state; `isolated`: every step's inputs and state
    /// are reseeded from the reference (a golden's full captures, e.g. the v3-full golden, or
    /// the live oracle). Default: `isolated` on a real model (a run on --tokens/--prompt, or a
    /// golden recorded on a GGUF), `chained` otherwise; see [`default_mode`].
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Compare only captures whose name matches this regular expression.
    #[arg(long)]
    pub only: Option<String>,
    /// Stop after this regime.
    #[arg(long)]
    pub regime: Option<String>,
    /// Write the full report as JSON here: every backend's report against the golden (with
    /// error budgets and top-k triage) and every later backend against the first.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the failing captures here, exactly as the app's "Export failing…" does: both
    /// sides' tensors, metrics and provenance, in the golden schema (loadable by `check
    /// --golden` and the app), so a CI job can attach it and a developer open it locally.
    #[arg(long, value_name = "OUT.json")]
    pub export_failing: Option<PathBuf>,
    /// Run the GGUF (`--gguf`) on these token ids with no golden: the CPU oracle is the
    /// reference and the GPU is compared with it (comma-separated, e.g. 0,17,42).
    #[arg(long, value_name = "IDS")]
    pub tokens: Option<String>,
    /// Like `--tokens`, tokenized with the GGUF's own vocabulary.
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// After the prefill of `--tokens`/`--prompt`, this many decode steps, each feeding the
    /// oracle's greedy next token.
    #[arg(long, default_value_t = 0)]
    pub decode: usize,
    /// With `--tokens`/`--prompt`: run only blocks A..=B (then `Final` on block B's output),
    /// e.g. `2-3` or `2`. A golden written on a GGUF replays the range it records.
    #[arg(long, value_name = "A-B")]
    pub layers: Option<String>,
    /// Byte budget in GiB of each weight cache (the GGUF's dequantized tensors, the GPU's
    /// device weights); default 1 GiB each, sized for a 24 GB machine.
    #[arg(long, value_name = "GIB")]
    pub cache_gib: Option<f64>,
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
    let backends = parse_backends(args.backend.as_deref().unwrap_or("cpu"))?;
    if backends == Backends::Cpu && (args.reference_ties || args.inject.is_some()) {
        anyhow::bail!("--reference-ties and --inject apply to the GPU backend (use --backend gpu)");
    }
    if super::goldenless::wanted(&args) && args.captures.is_some() {
        anyhow::bail!("--captures needs a golden to join the dump with (not --tokens or --prompt)");
    }
    if super::goldenless::wanted(&args) {
        // No golden: the oracle is the reference, so a GPU run always runs beside it.
        return super::goldenless::run(&args, backends != Backends::Cpu);
    }
    if args.decode > 0 {
        anyhow::bail!("--decode applies to runs on --tokens or --prompt");
    }
    if args.layers.is_some() {
        anyhow::bail!(
            "--layers applies to runs on --tokens or --prompt (a golden written on a GGUF \
             replays the range it records)"
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
    let recorded_on_gguf = golden
        .fixture
        .raw
        .get(golden_lens::session::writer::GGUF_FIXTURE_KEY)
        .is_some();
    let (mode, why) = default_mode(args.mode, recorded_on_gguf);
    if recorded_on_gguf {
        println!("mode:    {} ({why})", mode.label());
    }
    let opts = CheckOptions {
        mode,
        only,
        stop_after_regime: args.regime.clone(),
        strict: args.strict,
        invariants: Some(super::model::golden_config(&golden)?),
        pin_from: None,
    };
    let model = super::model::open(&golden, args.gguf.as_deref())?;
    if let Some(dump) = &args.captures {
        return super::captures::check(Arc::new(golden), &model, &opts, &args, dump);
    }
    if args.repeat > 1 {
        determinism(&golden, &model, &args, backends)?;
    }
    let golden = Arc::new(golden);
    match backends {
        Backends::Cpu => {
            // The oracle alone, with its diagnostic scores, so its index captures are triaged
            // against the golden.
            let mut oracle = model.oracle_with_diagnostics();
            let record = run_stepper(&golden, vec![Box::new(&mut oracle)], &opts)?;
            let report = record.report(0);
            println!("golden:  {}", report.golden_source);
            println!("backend: cpu oracle ({} mode)", report.mode.label());
            let triage = record.triage_vs_reference(0);
            let ok = print_report(&report, &args, Some(&triage))?;
            if let Some(path) = &args.json {
                let doc = json!({
                    "ok": ok,
                    "backends": [report_json(&record, 0)],
                    "cross": [],
                });
                write_atomic(path, &serde_json::to_vec_pretty(&doc)?)?;
                println!("report written to {}", path.display());
            }
            export_failing(&golden, &record, &model, &args, None, ok)?;
            println!("{}", summary_line(&report));
            Ok(exit(ok))
        }
        Backends::Gpu | Backends::CpuGpu => run_gpu(&golden, &model, &opts, &args, backends),
    }
}

/// Run the stepper over the golden and these backends and collect the run.
fn run_stepper(
    golden: &Arc<Golden>,
    backends: Vec<session::StepBackend<'_>>,
    opts: &CheckOptions,
) -> anyhow::Result<RunRecord> {
    let reference = Arc::new(session::GoldenReference::new(golden.clone())?);
    let mut stepper = session::Stepper::new(reference, backends, opts.clone())?;
    Ok(RunRecord::collect(&mut stepper, KeepValues::Failing)?)
}

/// Backend `i`'s report against the golden as JSON, with its top-k triage.
pub(super) fn report_json(record: &RunRecord, i: usize) -> serde_json::Value {
    let mut v = record.report(i).to_json();
    if let serde_json::Value::Object(m) = &mut v {
        m.insert(
            "topk_triage".into(),
            triage_json(&record.triage_vs_reference(i)),
        );
    }
    v
}

/// `--export-failing OUT`: the failing captures in the golden schema, as the app's "Export
/// failing…" writes them (the same writer, the same results).
pub(super) fn export_failing(
    golden: &Golden,
    record: &RunRecord,
    model: &ModelParts,
    args: &CheckArgs,
    adapter: Option<String>,
    ok: bool,
) -> anyhow::Result<()> {
    let Some(path) = &args.export_failing else {
        return Ok(());
    };
    let golden_hash = match &args.golden {
        Some(p) => golden_lens::session::export::content_hash_hex(
            &std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
        ),
        None => golden_lens::session::export::content_hash_hex(
            golden_lens::golden::embedded::DEFAULT_GOLDEN_JSON.as_bytes(),
        ),
    };
    let provenance = Provenance {
        golden_path: golden.source.display().to_string(),
        golden_hash,
        backends: record.backends.clone(),
        adapter,
        mode: record.mode,
        strict: args.strict,
        weights: model.gguf_path().map(str::to_string),
    };
    let n = golden_lens::session::export::write_failing_captures(
        path,
        golden,
        &record.results,
        &provenance,
    )?;
    println!(
        "{n} failing captures written to {}{}",
        path.display(),
        if ok { " (none failed)" } else { "" }
    );
    Ok(())
}

/// `--repeat N`: fresh backends run N times; bitwise instability per capture.
fn determinism(
    golden: &Golden,
    model: &ModelParts,
    args: &CheckArgs,
    backends: Backends,
) -> anyhow::Result<()> {
    use golden_lens::model::Backend;
    use golden_lens::session::SessionError;
    let on_gpu = backends != Backends::Cpu;
    let mut make = || -> Result<Box<dyn Backend>, SessionError> {
        if on_gpu {
            return gpu_backend_for_repeat(model, args);
        }
        Ok(Box::new(model.oracle()))
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
    model: &ModelParts,
    args: &CheckArgs,
) -> Result<Box<dyn golden_lens::model::Backend>, golden_lens::session::SessionError> {
    use golden_lens::gpu::GpuOptions;
    let opts = GpuOptions {
        reference_ties: args.reference_ties,
        inject: None,
        tie_audit: false,
    };
    Ok(Box::new(model.gpu(opts)?))
}

#[cfg(not(feature = "gpu"))]
fn gpu_backend_for_repeat(
    _model: &ModelParts,
    args: &CheckArgs,
) -> Result<Box<dyn golden_lens::model::Backend>, golden_lens::session::SessionError> {
    Err(golden_lens::session::SessionError::Build {
        backend: args.backend.clone().unwrap_or_else(|| "cpu".into()),
        msg: "this build has no `gpu` feature".into(),
    })
}

#[cfg(not(feature = "gpu"))]
fn run_gpu(
    _golden: &Arc<Golden>,
    _model: &ModelParts,
    _opts: &CheckOptions,
    args: &CheckArgs,
    _backends: Backends,
) -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "backend `{}` needs a build with the `gpu` feature (cargo build --features gpu)",
        args.backend.as_deref().unwrap_or("cpu")
    )
}

#[cfg(feature = "gpu")]
fn run_gpu(
    golden: &Arc<Golden>,
    model: &ModelParts,
    opts: &CheckOptions,
    args: &CheckArgs,
    backends: Backends,
) -> anyhow::Result<ExitCode> {
    use golden_lens::gpu::{GpuOptions, Injection};
    use golden_lens::session::multi::{cross_json, triage_totals};
    let inject = args
        .inject
        .as_deref()
        .map(str::parse::<Injection>)
        .transpose()?;
    let gopts = GpuOptions {
        reference_ties: args.reference_ties,
        inject: inject.clone(),
        tie_audit: !args.reference_ties && backends == Backends::CpuGpu,
    };
    let mut gpu = model.gpu(gopts)?;
    let adapter = gpu.adapter().to_string();
    println!("adapter: {adapter}");
    let ties = if args.reference_ties {
        "top-k on the host (torch-CPU tie rule)"
    } else {
        "top-k on the GPU (tie rule: larger first, equal values by lower index)"
    };
    if let Some(i) = &inject {
        println!("inject:  {i}");
    }
    if backends == Backends::Gpu {
        let record = run_stepper(golden, vec![Box::new(&mut gpu)], opts)?;
        let report = record.report(0);
        println!("golden:  {}", report.golden_source);
        println!("backend: gpu ({} mode; {ties})", report.mode.label());
        println!(
            "gpu: {} dispatches, {:.3} s in steps",
            gpu.dispatch_count(),
            gpu.run_seconds
        );
        let regimes: Vec<String> = golden.regimes.iter().map(|r| r.name.clone()).collect();
        let failing = super::kernels::report_rows(&report);
        let note = failing
            .first()
            .and_then(|row| super::kernels::writer_note(&gpu, *row, &regimes));
        let ok = super::check_print::print_report_noting(&report, args, None, note)?;
        if args.reference_ties {
            super::check_print::print_near_ties(&record, 0, "the golden");
        }
        super::kernels::print_provenance(&gpu, &failing, &regimes);
        let profile = super::kernels::print_profile(&mut gpu);
        if let Some(path) = &args.json {
            let doc = json!({
                "adapter": adapter,
                "top_k": ties,
                "ok": ok,
                "backends": [report.to_json()],
                "cross": [],
                "kernels": super::kernels::provenance_json(&gpu, &failing, &regimes),
                "profile": profile,
            });
            write_atomic(path, &serde_json::to_vec_pretty(&doc)?)?;
            println!("report written to {}", path.display());
        }
        export_failing(golden, &record, model, args, Some(adapter), ok)?;
        println!("{}", summary_line(&report));
        return Ok(exit(ok));
    }
    // The oracle's own scores let the triage classify every top-k disagreement.
    let mut oracle = model.oracle_with_diagnostics();
    let t0 = std::time::Instant::now();
    let record = run_stepper(
        golden,
        vec![Box::new(&mut oracle), Box::new(&mut gpu)],
        opts,
    )?;
    let total_s = t0.elapsed().as_secs_f64();
    let multi = record.multi();
    let mut ok = true;
    let regimes: Vec<String> = golden.regimes.iter().map(|r| r.name.clone()).collect();
    for (i, report) in multi.golden.iter().enumerate() {
        println!(
            "== {} against the golden ({} mode) ==",
            report.backend,
            report.mode.label()
        );
        println!("golden:  {}", report.golden_source);
        let triage = multi.triage_golden.get(i).map(|(_, l)| l.as_slice());
        // Backend 1 is the GPU: its first failure names the kernel behind it.
        let note = (i == 1)
            .then(|| super::kernels::report_rows(report).into_iter().next())
            .flatten()
            .and_then(|row| super::kernels::writer_note(&gpu, row, &regimes));
        ok &= super::check_print::print_report_noting(report, args, triage, note)?;
        println!("{}", summary_line(report));
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
    if let Some((_, list)) = multi.triage_cross.first() {
        print_triage("gpu against the cpu oracle", list);
    }
    if args.reference_ties {
        super::check_print::print_near_ties(&record, 1, "the golden");
    }
    let c = multi.cross_summary(0);
    println!(
        "gpu vs cpu: {} captures compared, {} within the GPU policy ({} bit-exact), {} tie flips, {} outside, {} missing",
        c.compared, c.within_policy, c.bit_exact, c.tie_flips, c.failed, c.missing
    );
    if let Some(f) = multi.first_cross_failure(0) {
        let note = super::kernels::writer_note(
            &gpu,
            (f.regime.as_str(), f.name.as_str(), &f.cmp),
            &regimes,
        );
        println!(
            "first gpu divergence: {} {} ({}){}",
            f.regime,
            f.name,
            f.step,
            note.unwrap_or_default()
        );
    }
    let mut failing = multi
        .golden
        .get(1)
        .map(super::kernels::report_rows)
        .unwrap_or_default();
    if let Some((_, rows)) = multi.cross.first() {
        failing.extend(super::kernels::cross_rows(rows));
    }
    super::kernels::print_provenance(&gpu, &failing, &regimes);
    let profile = super::kernels::print_profile(&mut gpu);
    println!(
        "gpu: {} dispatches, {:.3} s in gpu steps, {:.3} s lockstep total",
        gpu.dispatch_count(),
        gpu.run_seconds,
        total_s
    );
    // Real top-k mismatches against the oracle fail the run even where the index policy would
    // call them tie flips from the audit alone.
    let real = multi
        .triage_cross
        .first()
        .map_or(0, |(_, l)| triage_totals(l).real);
    ok &= c.failed == 0 && c.missing == 0 && real == 0;
    if let Some(path) = &args.json {
        let doc = json!({
            "adapter": adapter,
            "top_k": ties,
            "ok": ok,
            "backends": (0..record.backends.len()).map(|i| report_json(&record, i)).collect::<Vec<_>>(),
            "cross": (0..multi.cross.len()).map(|i| cross_json(&multi, i)).collect::<Vec<_>>(),
            "kernels": super::kernels::provenance_json(&gpu, &failing, &regimes),
            "profile": profile,
        });
        write_atomic(path, &serde_json::to_vec_pretty(&doc)?)?;
        println!("report written to {}", path.display());
    }
    export_failing(golden, &record, model, args, Some(adapter), ok)?;
    println!("overall: {}", if ok { "pass" } else { "FAIL" });
    let g = &multi.golden;
    let passed: usize = g.iter().map(|r| r.summary().passed).sum();
    let failed: usize = g.iter().map(|r| r.summary().failed).sum::<usize>() + c.failed + c.missing;
    println!("{} passed, {} failed", passed + c.within_policy, failed);
    Ok(exit(ok))
}
