//! Subcommand definitions and dispatch. Each subcommand family lives in its own file.

pub mod bench;
pub mod captures;
pub mod check;
pub mod check_print;
pub mod gguf;
pub mod golden;
pub mod goldenless;
pub mod gui;
pub mod kernels;
pub mod localize;
pub mod model;
pub mod selftest;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "golden-lens",
    version,
    about = "Where does a DeepSeek-V4.1 implementation leave the reference?"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub gpu: kernels::GpuArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Inspect or write goldens.
    #[command(subcommand)]
    Golden(golden::GoldenCmd),
    /// Inspect, export or synthesise deepseek41 GGUF files.
    #[command(subcommand)]
    Gguf(gguf::GgufCmd),
    /// Inspect or convert captures imported from another engine's dump.
    #[command(subcommand)]
    Captures(captures::CapturesCmd),
    /// Run backends over a golden and compare every capture; exits 1 on any failure.
    Check(check::CheckArgs),
    /// Open the desktop window (the default with no subcommand in a `gui` build).
    Gui(gui::GuiArgs),
    /// Plant every fault kind and require the check to catch each at the planted capture.
    Selftest(selftest::SelftestArgs),
    /// Per step: input, chained and local error and the gain; names the first local divergence.
    Localize(localize::LocalizeArgs),
    /// Export or check the WGSL kernels (`--shaders DIR` runs them).
    #[command(subcommand)]
    Shaders(kernels::ShadersCmd),
    /// This machine's FMA peak and memory bandwidth, and the oracle's GEMMs and decoders
    /// against them; the last line is the roofline summary.
    Bench(bench::BenchArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    cli.gpu.apply()?;
    match cli.command {
        Some(Command::Shaders(cmd)) => kernels::run(cmd),
        Some(Command::Golden(cmd)) => golden::run(cmd),
        Some(Command::Gguf(cmd)) => gguf::run(cmd),
        Some(Command::Captures(cmd)) => captures::run(cmd),
        Some(Command::Check(args)) => check::run(args),
        Some(Command::Gui(args)) => gui::run(args.with_shaders(cli.gpu.shaders)),
        Some(Command::Selftest(args)) => selftest::run(args),
        Some(Command::Localize(args)) => localize::run(args),
        Some(Command::Bench(args)) => bench::run(args),
        #[cfg(feature = "gui")]
        None => gui::run(gui::GuiArgs::default().with_shaders(cli.gpu.shaders)),
        #[cfg(not(feature = "gui"))]
        None => {
            // The desktop window is not built yet: run the headless check on the embedded
            // default golden, which is what the window would show first.
            println!("golden-lens {}: desktop window not yet available; checking the embedded default golden", env!("CARGO_PKG_VERSION"));
            check::run(check::CheckArgs {
                golden: None,
                gguf: None,
                backend: None,
                captures: None,
                map: "canonical".into(),
                mode: None,
                only: None,
                regime: None,
                json: None,
                export_failing: None,
                tokens: None,
                prompt: None,
                decode: 0,
                layers: None,
                cache_gib: None,
                quiet: true,
                strict: false,
                repeat: 1,
                reference_ties: false,
                inject: None,
            })
        }
    }
}
