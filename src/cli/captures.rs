//! `golden-lens captures ...`: what an imported dump holds against a golden (found, mapped,
//! skipped, unmapped, missing), and its conversion to the canonical safetensors form.

use golden_lens::golden::Golden;
use golden_lens::import::{self, Joined, NameMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
    print_joined(&joined);
    Ok(if joined.mapped() == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The join's lists, every one of them (nothing is dropped silently).
pub fn print_joined(joined: &Joined) {
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
    for r in &joined.regimes {
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
