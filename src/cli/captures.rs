//! `golden-lens captures ...`: what an imported dump holds against a golden (found, mapped,
//! skipped, unmapped, missing), and its conversion to the canonical safetensors form.

use super::check::{exit, print_report, report_json, summary_line, CheckArgs};
use super::model::ModelParts;
use golden_lens::golden::Golden;
use golden_lens::import::{self, ImportedBackend, Joined, NameMap};
use golden_lens::session::export::write_atomic;
use golden_lens::session::imported::ScopedReference;
use golden_lens::session::run::{KeepValues, RunRecord};
use golden_lens::session::{self, CheckOptions, GoldenReference, SharedReference, Stepper};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Subcommand, Debug)]
pub enum CapturesCmd {
    /// List what a dump holds: tensors mapped to captures, skipped on purpose or unmapped, and
    /// the golden's captures it has no tensor for. Exits 1 when nothing maps.
    Info(CapturesArgs),
    /// Write the mapped captures as one canonical safetensors file (`{regime}/{capture}`).
    Convert {
        #[command(flatten)]
        args: CapturesArgs,
        /// The safetensors file to write (atomically).
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
pub struct CapturesArgs {
    /// The dump: a .safetensors, .npy or .npz file, a manifest (.tsv/.json) or a folder with
    /// manifest.tsv/manifest.json, or a ds4 prefix DIR/PREFIX.
    pub path: PathBuf,
    /// Name map: a shipped one (canonical, ggml, ds4, deepseek-ref) or a TOML file.
    #[arg(long, default_value = "canonical")]
    pub map: String,
    /// The golden whose capture names, shapes and regimes the dump is joined with (default:
    /// the embedded golden/ds41_tiny.json).
    #[arg(long)]
    pub golden: Option<PathBuf>,
}

pub fn run(cmd: CapturesCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        CapturesCmd::Info(args) => info(&args),
        CapturesCmd::Convert { args, out } => convert(&args, &out),
    }
}

/// Load the golden and map an imported dump through them (shared with `check --captures`).
pub fn open(args: &CapturesArgs) -> anyhow::Result<(Golden, import::Dump, Joined)> {
    let golden = match &args.golden {
        Some(p) => Golden::load(p)?,
        None => golden_lens::golden::embedded::default_golden()?,
    };
    let map = NameMap::load(&args.map)?;
    let (dump, joined) = import::import(&args.path, &map, &golden)?;
    Ok((golden, dump, joined))
}

fn info(args: &CapturesArgs) -> anyhow::Result<ExitCode> {
    let (golden, dump, joined) = open(args)?;
    println!(
        "dump:    {} ({}, {} tensors)",
        dump.path.display(),
        dump.format.label(),
        dump.tensors.len()
    );
    println!("map:     {}", joined.map);
    println!("golden:  {}", golden.source.display());
    print_joined(&joined, true);
    Ok(if joined.mapped() == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The join's lists, every one of them (nothing is dropped silently); `per_capture` also lists
/// every mapped capture with the tensors it came from.
pub fn print_joined(joined: &Joined, per_capture: bool) {
    let total: usize = joined.mapped() + joined.missing.len();
    println!(
        "mapped:  {} of {} golden captures; {} missing, {} tensors skipped by rule, {} unmapped, {} unplaced, {} not in the golden",
        joined.mapped(),
        total,
        joined.missing.len(),
        joined.skipped.len(),
        joined.unmapped.len(),
        joined.unplaced.len(),
        joined.unknown.len()
    );
    for r in joined.regimes.iter().filter(|_| per_capture) {
        for c in &r.captures {
            let reordered = if c.rows_reordered > 0 {
                format!("  ({} rows reordered as sets)", c.rows_reordered)
            } else {
                String::new()
            };
            let from = if c.tensors.len() == 1 {
                c.tensors[0].clone()
            } else {
                format!(
                    "{} .. {} ({} pieces)",
                    c.tensors[0],
                    c.tensors[c.tensors.len() - 1],
                    c.tensors.len()
                )
            };
            println!(
                "  {:<10} {:<24} <- {:<36} {:<7} {:?}{reordered}",
                r.name,
                c.capture.name,
                from,
                c.source_dtype.name(),
                c.capture.shape
            );
        }
    }
    if !joined.skipped.is_empty() {
        println!("skipped by the map ({}):", joined.skipped.len());
        for (t, why) in &joined.skipped {
            println!("  {t}: {why}");
        }
    }
    if !joined.unmapped.is_empty() {
        println!("unmapped, no rule matches ({}):", joined.unmapped.len());
        for t in &joined.unmapped {
            println!("  {t}");
        }
    }
    if !joined.unplaced.is_empty() {
        println!("mapped but in no regime ({}):", joined.unplaced.len());
        for (t, why) in &joined.unplaced {
            println!("  {t}: {why}");
        }
    }
    if !joined.unknown.is_empty() {
        println!(
            "mapped to captures the golden does not hold ({}):",
            joined.unknown.len()
        );
        for (t, r, c) in &joined.unknown {
            println!("  {t} -> {r}/{c}");
        }
    }
    if !joined.missing.is_empty() {
        println!("golden captures with no tensor ({}):", joined.missing.len());
        for r in &joined.regimes {
            let names: Vec<&str> = joined
                .missing
                .iter()
                .filter(|(reg, _)| *reg == r.name)
                .map(|(_, c)| c.as_str())
                .collect();
            if !names.is_empty() {
                println!("  {:<10} {}", r.name, names.join(" "));
            }
        }
    }
}

fn convert(args: &CapturesArgs, out: &Path) -> anyhow::Result<ExitCode> {
    let (golden, dump, joined) = open(args)?;
    if joined.mapped() == 0 {
        anyhow::bail!(
            "{}: no tensor maps to a capture of {} through map {} (see `captures info`)",
            dump.path.display(),
            golden.source.display(),
            joined.map
        );
    }
    let tensors = import::canonical_tensors(&joined);
    let meta = vec![
        ("source".to_string(), dump.path.display().to_string()),
        ("format".to_string(), dump.format.label().to_string()),
        ("map".to_string(), joined.map.clone()),
        ("golden".to_string(), golden.source.display().to_string()),
    ];
    import::safetensors::write(out, &tensors, &meta)?;
    println!(
        "wrote {} ({} captures in canonical names; {} golden captures had no tensor)",
        out.display(),
        tensors.len(),
        joined.missing.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Import `dump` through `map` for a check or a localisation, printing what was found and every
/// list of the join (the golden captures it lacks are listed, not failed).
fn open_for_run(dump: &Path, map: &str, golden: &Golden) -> anyhow::Result<(import::Dump, Joined)> {
    let map = NameMap::load(map)?;
    let (opened, joined) = import::import(dump, &map, golden)?;
    println!(
        "captures: {} ({}, {} tensors; map {})",
        opened.path.display(),
        opened.format.label(),
        opened.tensors.len(),
        joined.map
    );
    print_joined(&joined, false);
    Ok((opened, joined))
}

/// `check --captures D [--backend cpu]`: the dump as the backend, against the golden scoped to
/// the captures the dump holds (the rest are listed, not failed); with `--backend cpu` the oracle
/// runs first and the dump is also compared with it under the backend policy.
pub fn check(
    golden: Arc<Golden>,
    model: &ModelParts,
    opts: &CheckOptions,
    args: &CheckArgs,
    dump: &Path,
) -> anyhow::Result<ExitCode> {
    let with_oracle = match args.backend.as_deref() {
        None => false,
        Some("cpu") => true,
        Some(other) => anyhow::bail!(
            "--backend {other} with --captures: expected cpu (the dump is compared with the oracle too) or no --backend"
        ),
    };
    if args.repeat > 1 {
        anyhow::bail!("--repeat does not apply to --captures (a recorded dump cannot change)");
    }
    let (_, joined) = open_for_run(dump, &args.map, &golden)?;
    let reference: SharedReference = Arc::new(ScopedReference::new(
        Arc::new(GoldenReference::new(golden.clone())?),
        &joined,
    ));
    let imported = ImportedBackend::for_config(joined, &model.cfg, session::step_of_capture);
    let mut oracle = model.oracle_with_diagnostics();
    let mut backends: Vec<session::StepBackend<'_>> = Vec::new();
    if with_oracle {
        backends.push(Box::new(&mut oracle));
    }
    backends.push(Box::new(imported));
    let last = backends.len() - 1;
    let mut stepper = Stepper::new(reference, backends, opts.clone())?;
    let record = RunRecord::collect(&mut stepper, KeepValues::Failing)?;
    let report = record.report(last);
    println!("golden:  {}", report.golden_source);
    println!("backend: {} ({} mode)", report.backend, report.mode.label());
    let triage = record.triage_vs_reference(last);
    let mut ok = print_report(&report, args, Some(&triage))?;
    let mut cross_json = Vec::new();
    if with_oracle {
        let multi = record.multi();
        println!(
            "== {} against the cpu oracle (backend policy) ==",
            report.backend
        );
        for r in multi.cross.iter().flat_map(|(_, rows)| rows) {
            if !r.ok() {
                println!(
                    "{:<10} {:<28} {:>12.3e} {:>12.3e}  OUTSIDE: {}",
                    r.regime, r.name, r.cmp.max_abs_err, r.cmp.tol, r.cmp.reason
                );
            }
        }
        let c = multi.cross_summary(0);
        println!(
            "dump vs cpu: {} captures compared, {} within the backend policy ({} bit-exact), {} outside; {} oracle captures not in the dump",
            c.compared, c.within_policy, c.bit_exact, c.failed, c.missing
        );
        if let Some(f) = multi.first_cross_failure(0) {
            println!(
                "first divergence from the oracle: {} {} ({})",
                f.regime, f.name, f.step
            );
        }
        ok &= c.failed == 0;
        cross_json.push(golden_lens::session::multi::cross_json(&multi, 0));
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "ok": ok,
            "backends": (0..=last).map(|i| report_json(&record, i)).collect::<Vec<_>>(),
            "cross": cross_json,
        });
        write_atomic(path, &serde_json::to_vec_pretty(&doc)?)?;
        println!("report written to {}", path.display());
    }
    super::check::export_failing(&golden, &record, model, args, None, ok)?;
    println!("{}", summary_line(&report));
    Ok(exit(ok))
}

/// `localize --captures D`: per step, the dump's input error, its chained error against the
/// oracle's recorded run, and its local error against the oracle run on the dump's own inputs;
/// then where every regime's inputs came from.
pub fn localize(
    golden: &Golden,
    model: &ModelParts,
    args: &super::localize::LocalizeArgs,
    dump: &Path,
) -> anyhow::Result<ExitCode> {
    use golden_lens::session::localize::{table, Judge};
    // The golden's own tensors where it holds every capture whole (a dump of the reference then
    // has exactly zero error); else the oracle's recorded run, which matches the golden bit for
    // bit on its bf16 and integer captures.
    let (recorded, reference_label) = match session::imported::recorded_from_full_golden(golden)? {
        Some(r) => (r, "the golden's full tensors"),
        None => (
            session::RecordedRun::record(golden, &mut model.oracle())?,
            "cpu oracle (full tensors)",
        ),
    };
    let recorded = &recorded;
    let (opened, joined) = open_for_run(dump, &args.map, golden)?;
    let imported = ImportedBackend::for_config(joined, &model.cfg, session::step_of_capture);
    // An external engine is judged like the GPU path (ulp-level noise is not a divergence)
    // unless the Atlas bars are asked for.
    let judge = if args.atlas { Judge::Atlas } else { Judge::Gpu };
    let (l, provenance) = session::imported::localize_imported(
        recorded,
        imported,
        Box::new(model.oracle()),
        &model.cfg,
        judge,
    )?;
    println!(
        "reference: {reference_label}; test: {}; local error: the dump against the oracle on the dump's own inputs; judged by {judge:?}",
        opened.path.display()
    );
    print!("{}", table(&l));
    for p in &provenance {
        let derived: Vec<String> = p
            .derived
            .iter()
            .map(|(n, from)| format!("{n} (= {from})"))
            .collect();
        println!(
            "{:<10} inputs from the dump: {}; derived from the dump: {}; from the reference (not in the dump): {}",
            p.regime,
            p.from_dump.len(),
            if derived.is_empty() { "none".to_string() } else { derived.join(", ") },
            if p.from_reference.is_empty() { "none".to_string() } else { p.from_reference.join(", ") }
        );
    }
    Ok(exit(l.first_local_divergence.is_none()))
}
