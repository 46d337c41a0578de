//! The kernel workbench on the command line: `--adapter`, `--shaders DIR` and `--profile` (global
//! flags every GPU-running subcommand honours), `shaders export DIR`, and the report lines that
//! name the kernel, workgroup and invocation behind a failing GPU capture and the per-kernel
//! times.

use std::path::PathBuf;

/// GPU flags, accepted by every subcommand.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct GpuArgs {
    /// The wgpu adapter: BACKEND, NAME or BACKEND:NAME (vulkan, gl, metal, dx12; a substring of
    /// the adapter's name), e.g. `gl`, `vulkan:llvmpipe`. Default: the best adapter
    /// (`WGPU_BACKEND` and `GOLDEN_LENS_ADAPTER` narrow it).
    #[arg(long, global = true)]
    pub adapter: Option<String>,
    /// Compile the GPU kernels from the WGSL files in DIR (`shaders export DIR` writes the
    /// embedded set): every kernel family found there replaces the embedded one.
    #[arg(long, global = true, value_name = "DIR")]
    pub shaders: Option<PathBuf>,
    /// Time every GPU dispatch and print the per-kernel and per-step times after the check.
    #[arg(long, global = true)]
    pub profile: bool,
}

impl GpuArgs {
    /// Validate the flags and make them the defaults of every GPU backend of this run; says which
    /// shader files come from where. A WGSL error is `FILE:LINE:COL: message` (exit 2).
    #[cfg(feature = "gpu")]
    pub fn apply(&self) -> anyhow::Result<()> {
        use golden_lens::gpu::{settings, AdapterChoice, ShaderOrigin, ShaderSet};
        use std::sync::Arc;
        let adapter = self
            .adapter
            .as_deref()
            .map(str::parse::<AdapterChoice>)
            .transpose()?;
        let shaders = match &self.shaders {
            Some(dir) => {
                let set = ShaderSet::from_dir(dir).map_err(|e| anyhow::anyhow!(e.rendered()))?;
                let (files, embedded): (Vec<_>, Vec<_>) = set
                    .origins()
                    .into_iter()
                    .partition(|(_, o)| matches!(o, ShaderOrigin::File(_)));
                let files: Vec<String> = files.iter().map(|(_, o)| o.to_string()).collect();
                let embedded: Vec<&str> = embedded.iter().map(|(f, _)| *f).collect();
                println!(
                    "shaders: {} from {} ({}); embedded: {}",
                    files.len(),
                    dir.display(),
                    files.join(", "),
                    if embedded.is_empty() {
                        "none".to_string()
                    } else {
                        embedded.join(", ")
                    }
                );
                for p in &set.ignored {
                    println!("shaders: {} names no kernel family (ignored)", p.display());
                }
                Some(Arc::new(set))
            }
            None => None,
        };
        settings::configure(settings::GpuSettings {
            adapter,
            shaders,
            profile: self.profile,
        });
        Ok(())
    }

    /// Without the GPU path the flags only refuse what they cannot do.
    #[cfg(not(feature = "gpu"))]
    pub fn apply(&self) -> anyhow::Result<()> {
        if self.adapter.is_some() || self.shaders.is_some() || self.profile {
            anyhow::bail!("--adapter, --shaders and --profile need the `gpu` feature");
        }
        Ok(())
    }
}

/// `golden-lens shaders ...`
#[derive(clap::Subcommand, Debug)]
pub enum ShadersCmd {
    /// Write the embedded WGSL kernels into DIR (one file per kernel family, plus common.wgsl),
    /// to edit and run with `--shaders DIR`.
    Export { dir: PathBuf },
    /// Parse, validate and interface-check the WGSL files of DIR without running anything.
    Check { dir: PathBuf },
}

#[cfg(feature = "gpu")]
pub fn run(cmd: ShadersCmd) -> anyhow::Result<std::process::ExitCode> {
    use golden_lens::gpu::ShaderSet;
    match cmd {
        ShadersCmd::Export { dir } => {
            for p in ShaderSet::export(&dir)? {
                println!("{}", p.display());
            }
        }
        ShadersCmd::Check { dir } => {
            ShaderSet::from_dir(&dir).map_err(|e| anyhow::anyhow!(e.rendered()))?;
            println!(
                "{}: every kernel family parses, validates and keeps its interface",
                dir.display()
            );
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(not(feature = "gpu"))]
pub fn run(_cmd: ShadersCmd) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("`shaders` needs the `gpu` feature")
}

/// A failing capture to trace: its regime, name and comparison.
#[cfg(feature = "gpu")]
pub type FailingRow<'a> = (
    &'a str,
    &'a str,
    &'a golden_lens::golden::compare::Comparison,
);

/// The failing rows of a report against the golden.
#[cfg(feature = "gpu")]
pub fn report_rows(report: &golden_lens::session::Report) -> Vec<FailingRow<'_>> {
    report
        .rows
        .iter()
        .filter(|r| !r.cmp.pass)
        .map(|r| (r.regime.as_str(), r.name.as_str(), &r.cmp))
        .collect()
}

/// The failing rows of the GPU against the oracle (tie flips are not failures).
#[cfg(feature = "gpu")]
pub fn cross_rows(rows: &[golden_lens::session::multi::CrossRow]) -> Vec<FailingRow<'_>> {
    rows.iter()
        .filter(|r| !r.ok())
        .map(|r| (r.regime.as_str(), r.name.as_str(), &r.cmp))
        .collect()
}

/// The writers of each row's worst element, the forward of a regime being its position in
/// `regimes` (the order the run began them).
#[cfg(feature = "gpu")]
fn writers<'a>(
    gpu: &golden_lens::gpu::GpuBackend,
    rows: &[FailingRow<'a>],
    regimes: &[String],
    limit: usize,
) -> Vec<(FailingRow<'a>, Vec<golden_lens::gpu::provenance::Writer>)> {
    rows.iter()
        .take(limit)
        .filter_map(|row| {
            let (regime, name, cmp) = *row;
            let forward = regimes.iter().position(|r| r == regime)?;
            let prov = gpu.provenance_in(forward, name)?;
            let w = cmp
                .max_abs_err_index
                .map(|i| prov.writers_of(i))
                .unwrap_or_default();
            Some((*row, w))
        })
        .collect()
}

/// Failing GPU captures whose writers are printed.
#[cfg(feature = "gpu")]
const PROVENANCE_ROWS: usize = 8;

/// ` written by `FILE:LINE ENTRY` workgroup (..), invocation (..) [FAMILY::ENTRY in FILE]`: the
/// write whose value the worst element of a failing capture holds, for its failure line.
#[cfg(feature = "gpu")]
pub fn writer_note(
    gpu: &golden_lens::gpu::GpuBackend,
    row: FailingRow<'_>,
    regimes: &[String],
) -> Option<String> {
    let (_, ws) = writers(gpu, &[row], regimes, 1).pop()?;
    ws.first().map(describe)
}

#[cfg(feature = "gpu")]
fn describe(w: &golden_lens::gpu::provenance::Writer) -> String {
    use golden_lens::gpu::provenance::Writer;
    match w {
        Writer::Kernel { dispatch, .. } => format!(
            " written by {w} [{}::{} in {}]",
            dispatch.family, dispatch.entry, dispatch.file
        ),
        Writer::Host { .. } => format!(" written by {w}"),
    }
}

/// Print, for the first failing GPU captures, the kernel (family, entry point, WGSL file and
/// line), workgroup and invocation that wrote the worst element, then the earlier writes of
/// that element (in-place kernels after their producer).
#[cfg(feature = "gpu")]
pub fn print_provenance(
    gpu: &golden_lens::gpu::GpuBackend,
    rows: &[FailingRow<'_>],
    regimes: &[String],
) {
    for ((regime, name, cmp), ws) in writers(gpu, rows, regimes, PROVENANCE_ROWS) {
        let at = if cmp.max_abs_err_multi_index.is_empty() {
            String::new()
        } else {
            format!(" {:?}", cmp.max_abs_err_multi_index)
        };
        match ws.split_first() {
            None => println!("{regime:<10} {name}{at}: no kernel recorded"),
            Some((last, earlier)) => {
                println!("{regime:<10} {name}{at}{}", describe(last));
                for wr in earlier {
                    println!("{:<10} {:width$}  after {wr}", "", "", width = name.len());
                }
            }
        }
    }
}

/// The same as JSON, for `check --json`.
#[cfg(feature = "gpu")]
pub fn provenance_json(
    gpu: &golden_lens::gpu::GpuBackend,
    rows: &[FailingRow<'_>],
    regimes: &[String],
) -> serde_json::Value {
    use golden_lens::gpu::provenance::Writer;
    let out: Vec<serde_json::Value> = writers(gpu, rows, regimes, usize::MAX)
        .into_iter()
        .map(|((regime, name, cmp), ws)| {
            let ws: Vec<serde_json::Value> = ws
                .iter()
                .map(|w| match w {
                    Writer::Kernel {
                        dispatch,
                        invocation,
                    } => serde_json::json!({
                        "family": dispatch.family,
                        "entry": dispatch.entry,
                        "file": dispatch.file,
                        "line": dispatch.line,
                        "workgroup_size": dispatch.workgroup_size,
                        "dispatch": dispatch.groups,
                        "uniforms": dispatch.uniforms,
                        "workgroup": invocation.map(|i| i.workgroup),
                        "invocation": invocation.map(|i| i.local),
                    }),
                    Writer::Host { what } => serde_json::json!({ "host_write": what }),
                })
                .collect();
            serde_json::json!({
                "regime": regime,
                "capture": name,
                "worst_index": cmp.max_abs_err_multi_index,
                "written_by": ws,
            })
        })
        .collect();
    serde_json::Value::Array(out)
}

/// Print the per-kernel, per-family and per-step times (`--profile`).
#[cfg(feature = "gpu")]
pub fn print_profile(gpu: &mut golden_lens::gpu::GpuBackend) -> Option<serde_json::Value> {
    let p = gpu.profile()?;
    let l = gpu.adapter().limits;
    println!(
        "profile: {} dispatches timed by {}",
        p.dispatches.len(),
        p.source
    );
    println!(
        "profile: adapter {}; limits: storage binding {} MiB, {} storage buffers per stage, {} B workgroup memory, {} invocations per workgroup",
        gpu.adapter().name,
        l.max_storage_binding_bytes >> 20,
        l.max_storage_buffers_per_stage,
        l.max_workgroup_storage_bytes,
        l.max_invocations_per_workgroup
    );
    let line = |what: &str, name: &str, t: &golden_lens::gpu::profile::Totals| {
        let flops = if t.flops > 0 {
            format!("{:>9.3} GFLOP/s", t.gflop_per_s())
        } else {
            String::new()
        };
        println!(
            "{what:<7} {name:<28} {:>6} dispatches {:>10.3} ms {:>9.3} GB/s {flops}",
            t.dispatches,
            t.seconds * 1e3,
            t.gb_per_s()
        );
    };
    for (name, t) in p.by_kernel() {
        line("kernel", &name, &t);
    }
    for (name, t) in p.by_family() {
        line("family", name, &t);
    }
    for (name, t) in p.by_step() {
        line("step", &name, &t);
    }
    line("total", "", &p.total());
    Some(p.to_json())
}
