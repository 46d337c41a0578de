//! `golden-lens gguf ...`. TO BE IMPLEMENTED.
use clap::Subcommand;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum GgufCmd {
    /// Print dialect, metadata, tensor table and census of a GGUF.
    Info { path: std::path::PathBuf },
}

pub fn run(cmd: GgufCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        GgufCmd::Info { path } => anyhow::bail!("not yet: {}", path.display()),
    }
}
