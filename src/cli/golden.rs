//! `golden-lens golden ...`: inspect goldens.
use anyhow::Context;
use clap::Subcommand;
use golden_lens::golden::weights::{verify_all, WEIGHT_CK_REL};
use golden_lens::golden::{Golden, GoldenVersion};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum GoldenCmd {
    /// Print the fixture summary of a golden; non-zero exit on an invalid file (2) or when its
    /// weights do not regenerate from `weights_meta` (1).
    Info { path: std::path::PathBuf },
    /// Run the CPU oracle over a golden's fixture and write a golden in the Atlas schema.
    Write {
        /// A golden whose fixture and weights_meta define the graph.
        #[arg(long)]
        fixture: std::path::PathBuf,
        /// Where to write the golden (atomically).
        #[arg(long)]
        out: std::path::PathBuf,
        /// Which captures are stored whole: `v3` (the engram and L0 inputs), `all`, or `none`.
        #[arg(long, default_value = "v3")]
        full: String,
    },
}

pub fn run(cmd: GoldenCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        GoldenCmd::Info { path } => info(&path),
        GoldenCmd::Write { fixture, out, full } => write(&fixture, &out, &full),
    }
}

fn write(fixture: &Path, out: &Path, full: &str) -> anyhow::Result<ExitCode> {
    use golden_lens::session::writer::{write_golden, FullCaptures};
    let full = match full {
        "v3" => FullCaptures::V3,
        "all" => FullCaptures::All,
        "none" => FullCaptures::None,
        other => anyhow::bail!("--full {other}: expected v3, all or none"),
    };
    let golden = Golden::load(fixture)?;
    let mut oracle = golden_lens::session::oracle_for(&golden)?;
    let text = write_golden(&golden, &mut oracle, &full)?;
    golden_lens::session::export::write_atomic(out, text.as_bytes())?;
    let written = Golden::load(out).with_context(|| format!("re-reading {}", out.display()))?;
    println!(
        "wrote {} ({} bytes, {} captures in {} regimes)",
        out.display(),
        text.len(),
        written.capture_count(),
        written.regimes.len()
    );
    Ok(ExitCode::SUCCESS)
}

fn info(path: &Path) -> anyhow::Result<ExitCode> {
    let size_bytes = std::fs::metadata(path)
        .with_context(|| format!("{}: cannot read", path.display()))?
        .len();
    let golden = Golden::load(path)?;
    let (summary, all_weights_ok) = info_text(&golden, size_bytes);
    print!("{summary}");
    Ok(if all_weights_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The `golden info` report, and whether every weight regenerated within the bar.
fn info_text(g: &Golden, size_bytes: u64) -> (String, bool) {
    let f = &g.fixture;
    let mut out = String::new();
    let version = g.version();
    let version_note = match version {
        GoldenVersion::V1 => "no fixture.engram",
        GoldenVersion::V2 => "fixture.engram; L0 captures strided",
        GoldenVersion::V3 => "fixture.engram; L0 captures full",
        GoldenVersion::V3Full => "fixture.engram; every capture full",
    };
    // `write!` into a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(out, "file: {} ({size_bytes} bytes)", g.source.display());
    let _ = writeln!(out, "version: {} ({version_note})", version.label());
    let _ = writeln!(
        out,
        "geometry: vocab {}, dim {}, layers {}, heads {} x head_dim {}, hc_mult {}",
        f.vocab_size, f.dim, f.n_layers, f.n_heads, f.head_dim, f.hc_mult
    );
    let _ = writeln!(
        out,
        "experts: {} routed, {} activated, {} shared",
        f.n_routed_experts, f.n_activated_experts, f.n_shared_experts
    );
    let _ = writeln!(out, "window: {}", f.window_size);
    let _ = writeln!(out, "compress_ratios: {:?}", f.compress_ratios);
    let candidate = if f.candidate_source_layer < 0 {
        "none".to_string()
    } else {
        f.candidate_source_layer.to_string()
    };
    let _ = writeln!(
        out,
        "sources: kv {:?}, index {:?}, candidate {candidate}",
        f.kv_source_layers, f.index_source_layers
    );
    let _ = writeln!(out, "index_topk: {}", f.index_topk);
    let _ = writeln!(out, "engram layers: {:?}", f.engram_layer_ids);
    let _ = writeln!(out, "prefill length: {}", f.prefill_len);
    let per_regime: Vec<String> = g
        .regimes
        .iter()
        .map(|r| format!("{} {}", r.name, r.captures.len()))
        .collect();
    let _ = writeln!(
        out,
        "regimes: {} ({} captures)",
        per_regime.join(", "),
        g.capture_count()
    );
    let all = || g.regimes.iter().flat_map(|r| r.captures.iter());
    let ints = all().filter(|c| c.is_int()).count();
    let full = all().filter(|c| c.stride == 1).count();
    let _ = writeln!(
        out,
        "captures: {ints} int, {} float, {full} full (stride 1)",
        g.capture_count() - ints
    );
    let checks = verify_all(g);
    let failed: Vec<_> = checks.iter().filter(|c| !c.ok).collect();
    let _ = writeln!(
        out,
        "weights: {} of {} regenerated within {WEIGHT_CK_REL:e}",
        checks.len() - failed.len(),
        checks.len()
    );
    for c in &failed {
        match &c.error {
            Some(err) => {
                let _ = writeln!(out, "  FAILED {}: {err}", c.name);
            }
            None => {
                let _ = writeln!(
                    out,
                    "  FAILED {}: ck {} (rel err {:.3e})",
                    c.name, c.ck, c.rel_err
                );
            }
        }
    }
    (out, failed.is_empty())
}
