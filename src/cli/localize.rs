//! `golden-lens localize`: where is the error born? Runs the test backend chained and
//! isolated (reseeded from the oracle's full tensors) and prints, per step, the input error, the
//! chained and local output error and the gain, then names the first local divergence.

use golden_lens::golden::Golden;
use golden_lens::model::Backend;
use golden_lens::oracle::faults::{Fault, FaultPlan};
use golden_lens::session::localize::{localize, table, RecordedRun};
use golden_lens::session::{self, SessionError};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct LocalizeArgs {
    /// The golden whose fixture defines the run (default: the embedded golden/ds41_tiny.json).
    #[arg(long)]
    pub golden: Option<PathBuf>,
    /// Plant a fault into the CPU test backend, `KIND@CAPTURE` (kinds: bitflip, perturb[=d],
    /// dropped-workgroup, stale-buffer, rope-sign, window-off-by-one, tie-order); repeatable.
    #[arg(long)]
    pub plant: Vec<String>,
    /// Judge with the Atlas bars instead of the strict (bf16 bit-exact) policies.
    #[arg(long)]
    pub atlas: bool,
    /// Also rerun with the reference's selections (routing, index top-k) pinned from this layer
    /// on, to tell a selection flip from a compute bug downstream.
    #[arg(long)]
    pub pin_from: Option<usize>,
}

pub fn run(args: LocalizeArgs) -> anyhow::Result<ExitCode> {
    let golden = match &args.golden {
        Some(p) => Golden::load(p)?,
        None => golden_lens::golden::embedded::default_golden()?,
    };
    let faults: Vec<Fault> = args
        .plant
        .iter()
        .map(|p| {
            Fault::parse(p).ok_or_else(|| {
                anyhow::anyhow!("--plant {p}: expected KIND@CAPTURE, e.g. bitflip@L3.attn_out")
            })
        })
        .collect::<Result<_, _>>()?;
    let mut reference = session::oracle_for(&golden)?;
    let recorded = RecordedRun::record(&golden, &mut reference)?;
    let mut make = || -> Result<Box<dyn Backend>, SessionError> {
        let mut o = session::oracle_for(&golden)?;
        o.faults = FaultPlan::new(faults.clone());
        Ok(Box::new(o))
    };
    let l = localize(&golden, &recorded, &mut make, !args.atlas)?;
    println!(
        "reference: cpu oracle (full tensors); test: cpu oracle{}",
        if faults.is_empty() {
            String::new()
        } else {
            format!(" with {}", args.plant.join(", "))
        }
    );
    print!("{}", table(&l));
    if let Some(layer) = args.pin_from {
        let c =
            golden_lens::session::localize::counterfactual(&golden, &recorded, &mut make, layer)?;
        println!("pinned from layer {layer}: {}", c.verdict);
    }
    Ok(if l.first_local_divergence.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
