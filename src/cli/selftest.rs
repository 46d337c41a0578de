//! `golden-lens selftest`: plant every fault kind, require each to be caught at the planted
//! capture; prints the table and exits non-zero on any miss.

use golden_lens::golden::Golden;
use golden_lens::session::selftest::{default_targets, run_oracle_selftest, table};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct SelftestArgs {
    /// The golden to run against (default: the embedded v3-full reference golden).
    #[arg(long)]
    pub golden: Option<PathBuf>,
}

pub fn run(args: SelftestArgs) -> anyhow::Result<ExitCode> {
    let golden = match &args.golden {
        Some(p) => Golden::load(p)?,
        None => golden_lens::golden::embedded::default_golden()?,
    };
    #[allow(unused_mut)]
    let mut rows = run_oracle_selftest(&golden, &default_targets())?;
    #[cfg(feature = "gpu")]
    match golden_lens::session::selftest::run_gpu_selftest(&golden)? {
        Some((adapter, gpu_rows)) => {
            println!("gpu adapter: {adapter}");
            rows.extend(gpu_rows);
        }
        None if std::env::var("CI").is_ok_and(|v| v == "true") => {
            anyhow::bail!("no GPU adapter under CI: the GPU fault kinds cannot be self-tested")
        }
        None => println!("no GPU adapter: the GPU fault kinds were not run"),
    }
    print!("{}", table(&rows));
    let misses = rows.iter().filter(|r| !r.ok).count();
    println!("{} passed, {} failed", rows.len() - misses, misses);
    Ok(if misses == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
