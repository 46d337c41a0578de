//! `golden-lens gui`: open the desktop window on a golden (default: the embedded one) and
//! optionally a GGUF. Built only with the `gui` feature; without it the command says so.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug, Default)]
pub struct GuiArgs {
    /// The golden to open (default: the embedded golden/ds41_tiny.json).
    #[arg(long)]
    pub golden: Option<PathBuf>,
    /// A deepseek41 GGUF to open alongside.
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
}

/// Open the window and block until it closes.
#[cfg(feature = "gui")]
pub fn run(args: GuiArgs) -> anyhow::Result<ExitCode> {
    use golden_lens::ui::DetailView;
    let mut options = golden_lens::ui::AppOptions::cpu_only();
    #[cfg(feature = "gpu")]
    with_gpu(&mut options);
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

/// Add the wgpu backend beside the oracle when an adapter exists (its name goes in the banner);
/// otherwise say why the app runs CPU-only. Selections run on the host with the torch-CPU tie
/// rule, as production ports do, so GPU-vs-golden differences are kernel differences.
#[cfg(all(feature = "gui", feature = "gpu"))]
fn with_gpu(options: &mut golden_lens::ui::AppOptions) {
    use golden_lens::gpu::{GpuBackend, GpuContext, GpuOptions};
    use golden_lens::model::{FillerSource, WeightSource};
    use golden_lens::session::controller::BoxedBackend;
    use golden_lens::ui::GpuStatus;
    use std::sync::Arc;
    match GpuContext::new() {
        Err(e) => options.gpu = GpuStatus::NoAdapter(e.to_string()),
        Ok(ctx) => {
            options.gpu = GpuStatus::Adapter(ctx.adapter.to_string());
            drop(ctx);
            options.backends = Arc::new(|g| {
                let oracle = golden_lens::session::oracle_for(g).map_err(|e| e.to_string())?;
                let (cfg, tables) = golden_lens::session::model_of(g).map_err(|e| e.to_string())?;
                let weights: Arc<dyn WeightSource> = Arc::new(FillerSource::new(
                    g.source.display().to_string(),
                    &g.weights_meta,
                ));
                let ctx = GpuContext::new().map_err(|e| e.to_string())?;
                let opts = GpuOptions {
                    reference_ties: true,
                    inject: None,
                    tie_audit: false,
                };
                let gpu =
                    GpuBackend::new(ctx, cfg, weights, tables, opts).map_err(|e| e.to_string())?;
                Ok(vec![
                    Box::new(oracle) as BoxedBackend,
                    Box::new(gpu) as BoxedBackend,
                ])
            });
        }
    }
}

/// Without the `gui` feature there is no window to open.
#[cfg(not(feature = "gui"))]
pub fn run(_args: GuiArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "this build has no desktop window (rebuild with `--features gui`); `golden-lens check` \
         runs the same comparison headless"
    )
}
