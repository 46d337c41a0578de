//! `golden-lens golden ...`. TO BE IMPLEMENTED (info).
use clap::Subcommand;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum GoldenCmd {
    /// Print the fixture summary of a golden; non-zero exit on an invalid file.
    Info { path: std::path::PathBuf },
}

pub fn run(cmd: GoldenCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        GoldenCmd::Info { path } => anyhow::bail!("not yet: {}", path.display()),
    }
}
