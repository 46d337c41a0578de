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
    /// Run every regime as soon as the golden is loaded (the default; kept for old scripts).
    #[arg(long)]
    pub run: bool,
    /// Open idle: do not run the golden until asked.
    #[arg(long, conflicts_with = "run")]
    pub idle: bool,
    /// Select this capture (`regime/name`, e.g. `prefill12/L0.moe_indices`) once it has run.
    #[arg(long)]
    pub select: Option<String>,
    /// Show this detail view: values, topk, mask, hc or moe.
    #[arg(long)]
    pub view: Option<String>,
    /// Start in this theme: dark or light (default: the remembered one, else dark).
    #[arg(long)]
    pub theme: Option<String>,
    /// Window size in points, `WIDTHxHEIGHT` (default: the remembered size, else 1280x800).
    #[arg(long)]
    pub size: Option<String>,
    /// Write a PNG of the window here once the run has finished and the selection shows, then
    /// close (the README screenshots).
    #[arg(long)]
    pub screenshot: Option<PathBuf>,
    /// Ignore what the last session remembered (last files, theme, views).
    #[arg(long)]
    pub fresh: bool,
    /// Another engine's dump to show as the test side beside the oracle (see `captures info`).
    #[arg(long)]
    pub captures: Option<PathBuf>,
    /// The name map of `--captures`: a shipped one or a TOML file.
    #[arg(long, default_value = "canonical")]
    pub map: String,
}

/// Parse `WIDTHxHEIGHT`.
#[cfg(feature = "gui")]
pub fn parse_size(s: &str) -> anyhow::Result<[f32; 2]> {
    let bad = || anyhow::anyhow!("--size {s}: expected WIDTHxHEIGHT in points, e.g. 1280x800");
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let w: f32 = w.trim().parse().map_err(|_| bad())?;
    let h: f32 = h.trim().parse().map_err(|_| bad())?;
    if !(200.0..=10000.0).contains(&w) || !(200.0..=10000.0).contains(&h) {
        anyhow::bail!("--size {s}: each side must be between 200 and 10000 points");
    }
    Ok([w, h])
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
    // `--run` is the default now; `--idle` opts out.
    options.run_on_start = args.run || !args.idle;
    options.select_on_start = args.select;
    options.view_on_start = match args.view.as_deref() {
        None => None,
        Some(v) => Some(DetailView::from_key(v).ok_or_else(|| {
            anyhow::anyhow!("--view {v}: expected values, topk, mask, hc or moe")
        })?),
    };
    options.theme = match args.theme.as_deref() {
        None => None,
        Some(t) => Some(
            golden_lens::ui::theme::ThemeChoice::from_key(t)
                .ok_or_else(|| anyhow::anyhow!("--theme {t}: expected dark or light"))?,
        ),
    };
    options.screenshot = args.screenshot;
    options.fresh = args.fresh;
    let size = args.size.as_deref().map(parse_size).transpose()?;
    golden_lens::ui::run_native(options, size)?;
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
) -> Result<Vec<golden_lens::session::controller::BoxedBackend>, golden_lens::session::SessionError>
{
    use golden_lens::session::controller::BoxedBackend;
    let model = golden_lens::session::builder::ModelParts::open(g, gguf)?;
    // The reference's own scores let the app triage every top-k disagreement.
    let mut out = vec![Box::new(model.oracle_with_diagnostics()) as BoxedBackend];
    #[cfg(feature = "gpu")]
    if with_gpu {
        let opts = golden_lens::gpu::GpuOptions {
            reference_ties: true,
            inject: None,
            tie_audit: false,
        };
        let gpu = model
            .gpu(opts)
            .map_err(|e| golden_lens::session::SessionError::build("gpu", e))?;
        out.push(Box::new(gpu) as BoxedBackend);
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
