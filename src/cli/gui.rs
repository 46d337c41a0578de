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
    /// Run these token ids (`0,17,42`) on `--gguf` with no golden: the cpu oracle is the live
    /// reference.
    #[arg(long, requires = "gguf", conflicts_with_all = ["golden", "prompt"])]
    pub tokens: Option<String>,
    /// Run this text on `--gguf` with no golden, tokenized with the GGUF's own vocabulary.
    #[arg(long, requires = "gguf", conflicts_with = "golden")]
    pub prompt: Option<String>,
    /// Greedy decode steps after the prefill of `--tokens`/`--prompt`.
    #[arg(long, default_value_t = 0)]
    pub decode: usize,
    /// Run only blocks `A-B` (then `Final`) in a `--tokens`/`--prompt` run.
    #[arg(long)]
    pub layers: Option<String>,
    /// The global `--shaders DIR`: the app watches it and re-checks the run on every save.
    #[arg(skip)]
    pub shaders_dir: Option<PathBuf>,
}

impl GuiArgs {
    /// These arguments with the global `--shaders DIR` (the app watches it).
    pub fn with_shaders(mut self, dir: Option<PathBuf>) -> GuiArgs {
        self.shaders_dir = dir;
        self
    }
}

/// The kernel workbench the app's GPU backends are put on (None: no GPU backend).
#[cfg(all(feature = "gui", feature = "gpu"))]
type Bench = Option<std::sync::Arc<golden_lens::session::rerun::Workbench>>;
#[cfg(all(feature = "gui", not(feature = "gpu")))]
type Bench = Option<()>;

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
    #[cfg(feature = "gpu")]
    let bench: Bench = with_gpu.then(golden_lens::session::rerun::Workbench::from_settings);
    #[cfg(not(feature = "gpu"))]
    let bench: Bench = with_gpu.then_some(());
    #[cfg(feature = "gpu")]
    {
        options.workbench = bench.clone();
    }
    options.shaders_dir = args.shaders_dir.clone();
    // The app passes the GGUF it runs on (`--gguf`, or one opened at runtime), or None for the
    // golden's filler weights.
    let b = bench.clone();
    options.backends = std::sync::Arc::new(move |g, gguf| backends(g, gguf, &b));
    options.tokens_backends =
        std::sync::Arc::new(move |gguf, layers| tokens_backends(gguf, layers, &bench));
    options.prompt_on_start = match (&args.tokens, &args.prompt) {
        (Some(ids), _) => Some((ids.clone(), true)),
        (None, Some(text)) => Some((text.clone(), false)),
        (None, None) => None,
    }
    .map(|(text, as_ids)| golden_lens::ui::goldenless::PromptForm {
        text,
        as_ids,
        decode: args.decode,
        layers: args.layers.clone().unwrap_or_default(),
    });
    if options.prompt_on_start.is_none() && (args.decode > 0 || args.layers.is_some()) {
        anyhow::bail!(
            "--decode and --layers belong to a golden-less run: give --tokens or --prompt"
        );
    }
    options.captures_map = args.map.clone();
    if let Some(dump) = args.captures {
        // Refused here with a clear error; the app opens it through its own command.
        golden_lens::import::NameMap::load(&args.map)?;
        options.captures = Some(dump);
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
    bench: &Bench,
) -> Result<Vec<golden_lens::session::controller::BoxedBackend>, golden_lens::session::SessionError>
{
    use golden_lens::session::controller::BoxedBackend;
    let model = golden_lens::session::builder::ModelParts::open(g, gguf)?;
    // The reference's own scores let the app triage every top-k disagreement.
    let mut out = vec![Box::new(model.oracle_with_diagnostics()) as BoxedBackend];
    #[cfg(feature = "gpu")]
    if let Some(bench) = bench {
        let opts = golden_lens::gpu::GpuOptions {
            reference_ties: true,
            inject: None,
            tie_audit: false,
        };
        let gpu = model
            .gpu(opts)
            .map_err(|e| golden_lens::session::SessionError::build("gpu", e))?;
        out.push(Box::new(bench.attach(gpu)) as BoxedBackend);
    }
    #[cfg(not(feature = "gpu"))]
    let _ = bench;
    Ok(out)
}

/// The backends of a golden-less run: the oracle (the live reference) and, with an adapter, the
/// wgpu backend, both restricted to `layers` when given.
#[cfg(feature = "gui")]
fn tokens_backends(
    gguf: &std::path::Path,
    layers: Option<std::ops::RangeInclusive<usize>>,
    bench: &Bench,
) -> Result<Vec<golden_lens::session::controller::BoxedBackend>, golden_lens::session::SessionError>
{
    use golden_lens::session::controller::BoxedBackend;
    use golden_lens::session::SessionError;
    let mut out = (golden_lens::ui::goldenless::oracle_maker())(gguf, layers.clone())?;
    #[cfg(feature = "gpu")]
    if let Some(bench) = bench {
        let model = golden_lens::session::builder::ModelParts::from_gguf(gguf)?;
        let opts = golden_lens::gpu::GpuOptions {
            reference_ties: true,
            inject: None,
            tie_audit: false,
        };
        let mut gpu = model.gpu(opts).map_err(|e| SessionError::build("gpu", e))?;
        gpu.set_layer_range(layers).map_err(|e| {
            SessionError::build("gpu", format!("{}: --layers: {e}", gguf.display()))
        })?;
        out.push(Box::new(bench.attach(gpu)) as BoxedBackend);
    }
    #[cfg(not(feature = "gpu"))]
    let _ = (bench, layers);
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
