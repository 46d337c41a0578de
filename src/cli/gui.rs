//! `golden-lens gui`: open the desktop window on a golden (default: the embedded one) and
//! optionally a GGUF. Built only with the `gui` feature; without it the command says so.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug, Default)]
pub struct GuiArgs {
    /// The golden to open (default: the embedded v3-full reference golden).
    #[arg(long)]
    pub golden: Option<PathBuf>,
    /// A deepseek41 GGUF to open alongside: the backends run on its weights and metadata
    /// (the app can switch back to the golden's filler weights).
    #[arg(long)]
    pub gguf: Option<PathBuf>,
    /// Run every regime as soon as the golden is loaded.
    #[arg(long)]
    pub run: bool,
    /// Select this capture (`regime/name`, e.g. `prefill12/L0.moe_indices`) once it has run.
    #[arg(long)]
    pub select: Option<String>,
    /// Show this detail view: values, topk, mask, hc or moe.
    #[arg(long)]
    pub view: Option<String>,
    /// Another engine's dump to show as the test side beside the oracle (see `captures info`).
    #[arg(long)]
    pub captures: Option<PathBuf>,
    /// The name map of `--captures`: a shipped one or a TOML file.
    #[arg(long, default_value = "canonical")]
    pub map: String,
}

/// Open the window and block until it closes.
#[cfg(feature = "gui")]
pub fn run(args: GuiArgs) -> anyhow::Result<ExitCode> {
    use golden_lens::ui::{DetailView, GpuStatus};
    let mut options = golden_lens::ui::AppOptions::cpu_only();
    #[cfg(feature = "gpu")]
    let gpu_status = match golden_lens::gpu::GpuContext::new() {
        Ok(ctx) => GpuStatus::Adapter(ctx.adapter.to_string()),
        Err(e) => GpuStatus::NoAdapter(e.to_string()),
    };
    #[cfg(not(feature = "gpu"))]
    let gpu_status = GpuStatus::NotBuilt;
    let with_gpu = matches!(gpu_status, GpuStatus::Adapter(_));
    options.gpu = gpu_status;
    // The app passes the GGUF it runs on (`--gguf`, or one opened at runtime), or None for the
    // golden's filler weights.
    options.backends = std::sync::Arc::new(move |g, gguf| backends(g, gguf, with_gpu));
    options.captures_map = args.map.clone();
    if let Some(dump) = args.captures {
        let map = golden_lens::import::NameMap::load(&args.map)?;
        options.backends = golden_lens::ui::imported::with_captures(options.backends, dump, map);
    }
    options.golden = args.golden;
    options.gguf = args.gguf;
    options.run_on_start = args.run;
    options.select_on_start = args.select;
    options.view_on_start = match args.view.as_deref() {
        None => None,
        Some("values") => Some(DetailView::Values),
        Some("topk") => Some(DetailView::TopK),
        Some("mask") => Some(DetailView::WindowMask),
        Some("hc") => Some(DetailView::HcMix),
        Some("moe") => Some(DetailView::Moe),
        Some(other) => anyhow::bail!("--view {other}: expected values, topk, mask, hc or moe"),
    };
    golden_lens::ui::run_native(options)?;
    Ok(ExitCode::SUCCESS)
}

/// The oracle and, with an adapter, the wgpu backend, on the GGUF's weights and metadata when
/// one is given, else the golden's filler. GPU selections run on the host with the
/// torch-CPU tie rule, as production ports do, so GPU-vs-golden differences are kernel
/// differences.
#[cfg(feature = "gui")]
fn backends(
    g: &golden_lens::golden::Golden,
    gguf: Option<&std::path::Path>,
    with_gpu: bool,
) -> Result<Vec<golden_lens::session::controller::BoxedBackend>, String> {
    use golden_lens::session::controller::BoxedBackend;
    let model =
        golden_lens::session::builder::ModelParts::open(g, gguf).map_err(|e| e.to_string())?;
    // The reference's own scores let the app triage every top-k disagreement.
    let mut out = vec![Box::new(model.oracle_with_diagnostics()) as BoxedBackend];
    #[cfg(feature = "gpu")]
    if with_gpu {
        let opts = golden_lens::gpu::GpuOptions {
            reference_ties: true,
            inject: None,
            tie_audit: false,
        };
        out.push(Box::new(model.gpu(opts).map_err(|e| e.to_string())?) as BoxedBackend);
    }
    #[cfg(not(feature = "gpu"))]
    let _ = with_gpu;
    Ok(out)
}

/// Without the `gui` feature there is no window to open.
#[cfg(not(feature = "gui"))]
pub fn run(_args: GuiArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "this build has no desktop window (rebuild with `--features gui`); `golden-lens check` \
         runs the same comparison headless"
    )
}
