//! `golden-lens localize`: where is the error born? Runs the test backend (the CPU oracle with
//! planted faults, or the wgpu path with an optional injection) chained and isolated (reseeded
//! from the oracle's full tensors) and prints, per step, the input error, the chained and local
//! output error and the gain, then names the first local divergence.

use super::model::ModelParts;
use golden_lens::golden::Golden;
use golden_lens::model::Backend;
use golden_lens::oracle::faults::{Fault, FaultPlan};
use golden_lens::session::localize::{localize_with, table, Judge, RecordedRun};
use golden_lens::session::SessionError;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct LocalizeArgs {
    /// The golden whose fixture defines the run (default: the embedded v3-full reference golden).
    #[arg(long)]
    pub golden: Option<PathBuf>,
    /// Run on this deepseek41 GGUF's weights and metadata (reference and test backend alike)
    /// instead of the golden's filler weights.
    #[arg(long)]
    pub gguf: Option<PathBuf>,
    /// Plant a fault into the CPU test backend, `KIND@CAPTURE` (kinds: bitflip, perturb[=d],
    /// dropped-workgroup, stale-buffer, rope-sign, window-off-by-one, tie-order); repeatable.
    #[arg(long)]
    pub plant: Vec<String>,
    /// The test backend: `cpu` (the oracle, with `--plant` faults) or `gpu` (the wgpu path,
    /// with an optional `--inject`; judged by the GPU policy against the oracle).
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// GPU: perturb one kernel on purpose, `KIND@CAPTURE` (bitflip, window-off-by-one,
    /// rope-sign, dropped-workgroup, stale-buffer).
    #[arg(long, value_name = "KIND@CAPTURE")]
    pub inject: Option<String>,
    /// GPU: run the top-k selections on the host with the torch-CPU tie rule.
    #[arg(long)]
    pub reference_ties: bool,
    /// Judge with the Atlas bars instead of the strict (bf16 bit-exact) policies (CPU) or the
    /// GPU policy (GPU).
    #[arg(long)]
    pub atlas: bool,
    /// Also rerun with the reference's selections (routing, index top-k) pinned from this layer
    /// on, to tell a selection flip from a compute bug downstream.
    #[arg(long)]
    pub pin_from: Option<usize>,
    /// Localise another engine's dump instead: per step the oracle runs on the dump's own step
    /// inputs and state, and the dump's outputs are compared with the oracle's (local error).
    #[arg(long)]
    pub captures: Option<PathBuf>,
    /// The name map of `--captures`: a shipped one or a TOML file.
    #[arg(long, default_value = "canonical")]
    pub map: String,
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
    let on_gpu = match args.backend.as_str() {
        "cpu" => false,
        "gpu" => true,
        other => anyhow::bail!("--backend {other}: expected cpu or gpu"),
    };
    if on_gpu && !faults.is_empty() {
        anyhow::bail!("--plant applies to the CPU test backend (use --inject with --backend gpu)");
    }
    if !on_gpu && (args.inject.is_some() || args.reference_ties) {
        anyhow::bail!("--inject and --reference-ties apply to --backend gpu");
    }
    let model = super::model::open(&golden, args.gguf.as_deref())?;
    if let Some(dump) = &args.captures {
        if on_gpu || !faults.is_empty() || args.pin_from.is_some() {
            anyhow::bail!(
                "--captures localises the dump: --backend gpu, --plant and --pin-from do not apply"
            );
        }
        return super::captures::localize(&golden, &model, &args, dump);
    }
    let mut reference = model.oracle();
    let recorded = RecordedRun::record(&golden, &mut reference)?;
    let mut make = test_backend(&model, &args, faults.clone(), on_gpu)?;
    let judge = match (args.atlas, on_gpu) {
        (true, _) => Judge::Atlas,
        (false, true) => Judge::Gpu,
        (false, false) => Judge::Strict,
    };
    let l = localize_with(&golden, &recorded, &mut make, judge)?;
    let test = if on_gpu {
        let mut t = format!(
            "gpu ({})",
            if args.reference_ties {
                "top-k on the host, torch-CPU ties"
            } else {
                "top-k on the GPU"
            }
        );
        if let Some(i) = &args.inject {
            t.push_str(&format!(" with {i}"));
        }
        t
    } else if faults.is_empty() {
        "cpu oracle".to_string()
    } else {
        format!("cpu oracle with {}", args.plant.join(", "))
    };
    println!("reference: cpu oracle (full tensors); test: {test}; judged by {judge:?}");
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

type MakeBackend<'a> = Box<dyn FnMut() -> Result<Box<dyn Backend>, SessionError> + 'a>;

/// A factory of fresh test backends (localisation runs one chained and one isolated, pinning
/// two more).
fn test_backend<'a>(
    model: &'a ModelParts,
    args: &LocalizeArgs,
    faults: Vec<Fault>,
    on_gpu: bool,
) -> anyhow::Result<MakeBackend<'a>> {
    if on_gpu {
        return gpu_factory(model, args);
    }
    Ok(Box::new(move || {
        let mut o = model.oracle();
        o.faults = FaultPlan::new(faults.clone());
        Ok(Box::new(o) as Box<dyn Backend>)
    }))
}

#[cfg(feature = "gpu")]
fn gpu_factory<'a>(model: &'a ModelParts, args: &LocalizeArgs) -> anyhow::Result<MakeBackend<'a>> {
    use golden_lens::gpu::{GpuOptions, Injection};
    let inject = args
        .inject
        .as_deref()
        .map(str::parse::<Injection>)
        .transpose()?;
    let reference_ties = args.reference_ties;
    Ok(Box::new(move || {
        let opts = GpuOptions {
            reference_ties,
            inject: inject.clone(),
            tie_audit: false,
        };
        Ok(Box::new(model.gpu(opts)?) as Box<dyn Backend>)
    }))
}

#[cfg(not(feature = "gpu"))]
fn gpu_factory<'a>(
    _model: &'a ModelParts,
    _args: &LocalizeArgs,
) -> anyhow::Result<MakeBackend<'a>> {
    anyhow::bail!("--backend gpu needs a build with the `gpu` feature")
}
