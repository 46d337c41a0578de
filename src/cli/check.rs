//! `golden-lens check`. TO BE IMPLEMENTED.
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The golden to check against.
    #[arg(long)]
    pub golden: std::path::PathBuf,
}

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet: {}", args.golden.display())
}
