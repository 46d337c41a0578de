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
    /// Run the CPU oracle over a golden's fixture (`--fixture`), or over a GGUF's weights on
    /// given tokens (`--gguf F --tokens IDS|--prompt TEXT`), and write a golden in the Atlas
    /// schema.
    Write(WriteArgs),
}

#[derive(clap::Args, Debug)]
pub struct WriteArgs {
    /// A golden whose fixture and weights_meta define the graph.
    #[arg(long, conflicts_with = "gguf")]
    fixture: Option<std::path::PathBuf>,
    /// Record the oracle's run on this deepseek41 GGUF instead: the fixture from the GGUF's
    /// config, the file's identity in place of weights_meta.
    #[arg(long)]
    gguf: Option<std::path::PathBuf>,
    /// With --gguf: the prefill's token ids (comma-separated).
    #[arg(long, value_name = "IDS")]
    tokens: Option<String>,
    /// With --gguf: the prefill's text, tokenized with the GGUF's vocabulary.
    #[arg(long, value_name = "TEXT")]
    prompt: Option<String>,
    /// With --gguf: this many greedy decode steps after the prefill.
    #[arg(long, default_value_t = 0)]
    decode: usize,
    /// With --gguf: record only blocks A..=B (then `Final` on block B's output).
    #[arg(long, value_name = "A-B")]
    layers: Option<String>,
    /// With --gguf: byte budget in GiB of the GGUF's dequantized-tensor cache.
    #[arg(long, value_name = "GIB")]
    cache_gib: Option<f64>,
    /// Where to write the golden (atomically).
    #[arg(long)]
    out: std::path::PathBuf,
    /// Which captures are stored whole: `v3` (the engram and L0 inputs), `seeds` (what an
    /// isolated replay reseeds every step from, and the MoE routing), `all`, `none`, or a
    /// comma-separated list of capture names. Default: `v3` with --fixture, `seeds` with --gguf
    /// (a real-model golden replays isolated by default, so it carries its seeds).
    #[arg(long)]
    full: Option<String>,
}

pub fn run(cmd: GoldenCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        GoldenCmd::Info { path } => info(&path),
        GoldenCmd::Write(a) => match (&a.fixture, &a.gguf) {
            (Some(fixture), None) => {
                if a.tokens.is_some() || a.prompt.is_some() || a.layers.is_some() || a.decode > 0 {
                    anyhow::bail!(
                        "--tokens, --prompt, --decode and --layers record a GGUF's run: give \
                         --gguf F instead of --fixture"
                    );
                }
                write(fixture, &a.out, a.full.as_deref().unwrap_or("v3"))
            }
            (None, Some(gguf)) => write_gguf(gguf, &a),
            _ => anyhow::bail!("give --fixture G (a golden's model) or --gguf F (a GGUF's)"),
        },
    }
}

/// The `--full` value; `last_block` is the run's last block (for `seeds`).
fn full_captures(
    full: &str,
    last_block: usize,
) -> anyhow::Result<golden_lens::session::writer::FullCaptures> {
    use golden_lens::session::writer::FullCaptures;
    Ok(match full {
        "v3" => FullCaptures::V3,
        "seeds" => FullCaptures::Seeds { last_block },
        "all" => FullCaptures::All,
        "none" => FullCaptures::None,
        list => {
            let names: Vec<String> = list
                .split(',')
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect();
            if names.is_empty() {
                anyhow::bail!("--full {list}: expected v3, seeds, all, none or capture names");
            }
            FullCaptures::Names(names)
        }
    })
}

/// `golden write --gguf F --tokens IDS`: the oracle's run on the GGUF, recorded.
fn write_gguf(gguf: &Path, a: &WriteArgs) -> anyhow::Result<ExitCode> {
    use super::goldenless::{open_run, print_memory, GgufRunArgs, RunProgress};
    use golden_lens::model::memory::MemorySampler;
    use golden_lens::session::reference::TokensReference;
    use golden_lens::session::writer::{
        engram_tables_hash, write_gguf_golden, GgufIdentity, GgufRecording,
    };
    let run = open_run(&GgufRunArgs {
        gguf,
        tokens: a.tokens.as_deref(),
        prompt: a.prompt.as_deref(),
        layers: a.layers.as_deref(),
        cache_gib: a.cache_gib,
    })?;
    let last_block = run
        .model
        .layers()
        .map_or(run.model.cfg.n_layers.saturating_sub(1), |r| r.last());
    let full = full_captures(a.full.as_deref().unwrap_or("seeds"), last_block)?;
    let recording = GgufRecording {
        identity: GgufIdentity::of(gguf)?,
        layers: run.model.layers().map(|r| r.first()..=r.last()),
        engram_tables_fnv1a64: run.model.tables.as_ref().map(engram_tables_hash),
    };
    let reference = TokensReference::prompt(
        format!("{} (cpu oracle)", gguf.display()),
        run.model.cfg.clone(),
        run.ids.clone(),
        a.decode,
    );
    let mut progress = RunProgress::new(&run.model, reference.regimes.len());
    let mut oracle = run.model.oracle();
    let mut per_step: Vec<(String, f64)> = Vec::new();
    let text = write_gguf_golden(
        &run.model.cfg,
        &recording,
        reference,
        &mut oracle,
        &full,
        &mut |o| {
            progress.step(o, run.tokenizer.as_ref());
            let s = o.seconds.first().copied().unwrap_or(0.0);
            match per_step.iter_mut().find(|(n, _)| *n == o.step.to_string()) {
                Some((_, t)) => *t += s,
                None => per_step.push((o.step.to_string(), s)),
            }
        },
    )?;
    let wall = progress.elapsed();
    let mem = run.memory.map(MemorySampler::stop);
    golden_lens::session::export::write_atomic(&a.out, text.as_bytes())?;
    let written =
        Golden::load(&a.out).with_context(|| format!("re-reading {}", a.out.display()))?;
    println!("{:<12} {:>12}", "step", "cpu");
    let mut compute = 0.0;
    for (step, s) in &per_step {
        println!("{step:<12} {s:>10.3} s");
        compute += s;
    }
    println!("{:<12} {compute:>10.3} s", "total");
    progress.print_all_zero();
    print_memory(mem.as_ref());
    println!(
        "wrote {} ({} bytes, {} captures in {} regimes; recorded on {}, header fnv1a64 {}) in {wall:.3} s wall",
        a.out.display(),
        text.len(),
        written.capture_count(),
        written.regimes.len(),
        recording.identity.path,
        recording.identity.header_fnv1a64
    );
    Ok(ExitCode::SUCCESS)
}

fn write(fixture: &Path, out: &Path, full: &str) -> anyhow::Result<ExitCode> {
    use golden_lens::session::writer::write_golden;
    let golden = Golden::load(fixture)?;
    let layers = super::model::golden_config(&golden)?.n_layers;
    let full = full_captures(full, layers.saturating_sub(1))?;
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
