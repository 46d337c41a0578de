//! `golden-lens check --gguf F --tokens ... [--decode N]`: a run with no golden. One prefill regime
//! over the tokens, then N greedy decode steps; the CPU oracle is the live reference and every
//! later backend (the wgpu path) is compared with it under the backend policy, with top-k triage,
//! error budgets and invariants as in a golden check, and the same rows, summary line and exit
//! codes. The oracle alone checks its invariants and reports its timing.

use super::check::{print_triage, CheckArgs};
use super::model::ModelParts;
use anyhow::Context;
use golden_lens::model::memory::{MemoryReport, MemorySampler, DEFAULT_SAMPLE_INTERVAL};
use golden_lens::model::tokenizer::GgufTokenizer;
use golden_lens::model::{CaptureValues, LayerRange, Step};
use golden_lens::session::export::write_atomic;
use golden_lens::session::multi::{cross_json, triage_totals};
use golden_lens::session::reference::TokensReference;
use golden_lens::session::run::{KeepValues, RunRecord};
use golden_lens::session::{CheckOptions, StepBackend, StepOutcome, Stepper};
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// Parse `--tokens 0,17,42`: comma-separated non-negative ids below the vocabulary size.
pub fn parse_tokens(text: &str, vocab: usize) -> anyhow::Result<Vec<i64>> {
    let mut ids = Vec::new();
    for (i, part) in text.split(',').enumerate() {
        let part = part.trim();
        let id: i64 = part.parse().map_err(|_| {
            anyhow::anyhow!("--tokens: item {i} `{part}` is not an integer token id")
        })?;
        if id < 0 || id as u64 >= vocab as u64 {
            anyhow::bail!(
                "--tokens: item {i} is token {id}, outside the GGUF's vocabulary 0..{vocab}"
            );
        }
        ids.push(id);
    }
    if ids.is_empty() {
        anyhow::bail!("--tokens: give at least one token id");
    }
    Ok(ids)
}

/// Whether this check is golden-less (tokens or a prompt given).
pub fn wanted(args: &CheckArgs) -> bool {
    args.tokens.is_some() || args.prompt.is_some()
}

/// What a run on a GGUF without a golden starts from (shared by `check --tokens/--prompt` and
/// `golden write --gguf`): the model (with its layer range), the prefill ids, the GGUF's
/// tokenizer when it has one, and the memory sampler, started before the GGUF was opened.
pub struct GgufRun {
    pub model: ModelParts,
    pub ids: Vec<i64>,
    pub tokenizer: Option<GgufTokenizer>,
    pub memory: Option<MemorySampler>,
}

/// The options of a run on a GGUF's tokens (`--tokens`, `--prompt`, `--layers`, `--cache-gib`).
pub struct GgufRunArgs<'a> {
    pub gguf: &'a Path,
    pub tokens: Option<&'a str>,
    pub prompt: Option<&'a str>,
    pub layers: Option<&'a str>,
    pub cache_gib: Option<f64>,
}

/// `--cache-gib G` in bytes: a positive finite number of GiB.
pub fn cache_bytes(gib: Option<f64>) -> anyhow::Result<Option<usize>> {
    let Some(g) = gib else {
        return Ok(None);
    };
    if !(g.is_finite() && g > 0.0) {
        anyhow::bail!("--cache-gib {g}: expected a positive number of GiB");
    }
    let bytes = g * f64::from(1u32 << 30);
    if bytes >= usize::MAX as f64 {
        anyhow::bail!("--cache-gib {g}: larger than this platform's address space");
    }
    Ok(Some(bytes as usize))
}

/// Open the GGUF, apply `--layers`, and turn `--tokens` or `--prompt` into ids (printed with
/// their pieces).
pub fn open_run(a: &GgufRunArgs<'_>) -> anyhow::Result<GgufRun> {
    let memory = MemorySampler::start(DEFAULT_SAMPLE_INTERVAL);
    let mut model = ModelParts::from_gguf_with_cache(a.gguf, cache_bytes(a.cache_gib)?)?;
    println!("weights: {}", model.describe());
    if let Some(text) = a.layers {
        let range = LayerRange::parse(text).context("--layers")?;
        model.set_layers(Some(range)).context("--layers")?;
    }
    if let Some(r) = model.layers() {
        println!(
            "layers:  {r} of 0-{} (then Final on block {}'s output)",
            model.cfg.n_layers - 1,
            r.last()
        );
    }
    // The vocabulary is optional for --tokens (pieces are printed when there is one) and
    // required for --prompt.
    let file = golden_lens::gguf::GgufFile::open(a.gguf)
        .with_context(|| format!("{}: reading the tokenizer metadata", a.gguf.display()))?;
    let tokenizer = GgufTokenizer::from_gguf(&file);
    let (ids, tokenizer) = match (a.tokens, a.prompt) {
        (Some(t), None) => (parse_tokens(t, model.cfg.vocab_size)?, tokenizer.ok()),
        (None, Some(text)) => {
            let tok = tokenizer.with_context(|| {
                format!("--prompt: {} has no usable tokenizer", a.gguf.display())
            })?;
            for n in &tok.notes {
                println!("note: {n}");
            }
            let t = tok.tokenize(text)?;
            let ids: Vec<i64> = t.ids.iter().map(|&i| i64::from(i)).collect();
            if let Some(bad) = ids
                .iter()
                .find(|&&i| i as u64 >= model.cfg.vocab_size as u64)
            {
                anyhow::bail!(
                    "--prompt: token {bad} is outside the model's vocabulary 0..{}",
                    model.cfg.vocab_size
                );
            }
            if ids.is_empty() {
                anyhow::bail!("--prompt: the text tokenizes to no tokens");
            }
            println!("prompt:  {text:?}");
            (ids, Some(tok))
        }
        (Some(_), Some(_)) => anyhow::bail!("give either --tokens or --prompt, not both"),
        (None, None) => anyhow::bail!("give --tokens IDS or --prompt TEXT"),
    };
    println!("tokens:  {ids:?}");
    if let Some(tok) = &tokenizer {
        println!("pieces:  {:?}", pieces(tok, &ids));
    }
    Ok(GgufRun {
        model,
        ids,
        tokenizer,
        memory,
    })
}

/// The vocabulary piece of each id.
fn pieces(tok: &GgufTokenizer, ids: &[i64]) -> Vec<String> {
    ids.iter()
        .map(|&i| {
            u32::try_from(i)
                .ok()
                .and_then(|i| tok.piece(i))
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

/// All-zero captures listed one per row before the rest are only counted (a synthesized file
/// with 36 unfilled layers has hundreds).
const MAX_ZERO_ROWS: usize = 24;

/// Progress of a long run on stderr: step, layer, elapsed and ETA (from the mean step time so
/// far), and the greedy tokens and text decode steps produce on stdout.
pub struct RunProgress {
    t0: Instant,
    steps_total: usize,
    done: usize,
    /// Captures that are zero in every element (regime, name), for the note.
    pub all_zero: Vec<(String, String)>,
    /// Greedy tokens chosen after each regime.
    pub generated: Vec<i64>,
}

impl RunProgress {
    /// Progress over `regimes` regimes of the model's steps.
    pub fn new(model: &ModelParts, regimes: usize) -> RunProgress {
        let per = golden_lens::model::layer_range::steps_for(&model.cfg, model.layers()).len();
        RunProgress {
            t0: Instant::now(),
            steps_total: per.saturating_mul(regimes),
            done: 0,
            all_zero: Vec::new(),
            generated: Vec::new(),
        }
    }

    /// Seconds since the run started.
    pub fn elapsed(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Account for one finished step.
    pub fn step(&mut self, o: &StepOutcome, tokenizer: Option<&GgufTokenizer>) {
        self.done += 1;
        let elapsed = self.elapsed();
        let left = self.steps_total.saturating_sub(self.done);
        let eta = elapsed / self.done as f64 * left as f64;
        let times = o
            .seconds
            .iter()
            .map(|s| format!("{s:.2} s"))
            .collect::<Vec<_>>()
            .join(" / ");
        eprintln!(
            "[{}/{} {:>8.1} s, ETA {:>7.1} s] {} {} ({} captures; {times})",
            self.done,
            self.steps_total,
            elapsed,
            eta,
            o.regime,
            o.step,
            o.results.len()
        );
        for r in &o.results {
            if let Some(c) = r.capture_of(0) {
                let zero = match &c.values {
                    CaptureValues::F32(v) => v.iter().all(|&x| x == 0.0),
                    CaptureValues::I64(v) => v.iter().all(|&x| x == 0),
                };
                if zero && !c.is_diagnostic() {
                    self.all_zero.push((o.regime.clone(), c.name.clone()));
                }
            }
        }
        if o.regime_end.is_none() {
            return;
        }
        let caps: Vec<_> = o.results.iter().filter_map(|r| r.capture_of(0)).collect();
        if let Some(next) = golden_lens::session::reference::greedy_next_token(&caps) {
            self.generated.push(next);
            let piece = tokenizer
                .and_then(|t| u32::try_from(next).ok().and_then(|i| t.piece(i)))
                .map(|p| format!(" `{p}`"))
                .unwrap_or_default();
            let text = tokenizer
                .and_then(|t| {
                    let ids: Vec<u32> = self
                        .generated
                        .iter()
                        .filter_map(|&i| u32::try_from(i).ok())
                        .collect();
                    t.detokenize(&ids).ok()
                })
                .map(|s| format!("; text so far {s:?}"))
                .unwrap_or_default();
            println!("{}: greedy next token {next}{piece}{text}", o.regime);
        }
    }

    /// The all-zero captures, for the closing note.
    pub fn print_all_zero(&self) {
        if self.all_zero.is_empty() {
            println!("all-zero captures: none");
            return;
        }
        println!(
            "all-zero captures: {} (zero in every element; holes in a synthesized GGUF, a \
             zero-initialised state or an unfilled layer give these)",
            self.all_zero.len()
        );
        for (regime, name) in self.all_zero.iter().take(MAX_ZERO_ROWS) {
            println!("{regime:<10} {name:<28} ALL ZERO");
        }
        if self.all_zero.len() > MAX_ZERO_ROWS {
            println!(
                "... and {} more (every one is in --json)",
                self.all_zero.len() - MAX_ZERO_ROWS
            );
        }
    }
}

/// Per-step times by layer and per backend, the total, and peak anonymous memory.
pub fn print_memory(mem: Option<&MemoryReport>) {
    match mem {
        Some(m) => println!("memory: {}", m.summary()),
        None => println!("memory: RssAnon is not reported on this platform"),
    }
}

/// The memory report as JSON.
pub fn memory_json(mem: Option<&MemoryReport>) -> serde_json::Value {
    match mem {
        Some(m) => json!({
            "peak_rss_anon_bytes": m.peak_rss_anon_bytes,
            "start_rss_anon_bytes": m.start_rss_anon_bytes,
            "peak_rss_file_bytes": m.peak_rss_file_bytes,
            "samples": m.samples,
        }),
        None => serde_json::Value::Null,
    }
}

/// Run the golden-less check.
pub fn run(args: &CheckArgs, with_gpu: bool) -> anyhow::Result<ExitCode> {
    let Some(gguf) = &args.gguf else {
        anyhow::bail!("--tokens and --prompt run a GGUF without a golden: give --gguf F");
    };
    if args.golden.is_some() {
        anyhow::bail!("--tokens/--prompt take the truth from the oracle: drop --golden");
    }
    let GgufRun {
        model,
        ids,
        tokenizer,
        memory,
    } = open_run(&GgufRunArgs {
        gguf,
        tokens: args.tokens.as_deref(),
        prompt: args.prompt.as_deref(),
        layers: args.layers.as_deref(),
        cache_gib: args.cache_gib,
    })?;
    let reference = TokensReference::prompt(
        format!("{} (cpu oracle, live)", gguf.display()),
        model.cfg.clone(),
        ids,
        args.decode,
    );
    let regimes = reference.regimes.len();
    let (mode, why) = super::check::default_mode(args.mode, true);
    let opts = CheckOptions {
        only: args
            .only
            .as_deref()
            .map(regex::Regex::new)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--only is not a valid regular expression: {e}"))?,
        invariants: Some(model.cfg.clone()),
        // Isolated (the default here): every later backend's step is reseeded from the
        // oracle's captures of the steps before it, so each step's own error is seen apart
        // from the chain's.
        mode,
        ..Default::default()
    };
    println!("mode:    {} ({why})", opts.mode.label());
    let mut gpu = gpu_backend(&model, args, with_gpu)?;
    let mut oracle = model.oracle_with_diagnostics();
    let mut backends: Vec<StepBackend<'_>> = vec![Box::new(&mut oracle)];
    if let Some(g) = gpu.as_mut() {
        backends.push(g.backend());
    }
    let mut progress = RunProgress::new(&model, regimes);
    let mut stepper = Stepper::new(Arc::new(reference), backends, opts)?;
    let mut record = RunRecord::for_stepper(&stepper, KeepValues::Failing);
    while let Some(o) = stepper.next_step()? {
        progress.step(&o, tokenizer.as_ref());
        record.push(o);
    }
    drop(stepper);
    let total_s = progress.elapsed();
    let mem = memory.map(MemorySampler::stop);
    print_timing(&record);
    progress.print_all_zero();
    let oracle_report = record.report(0);
    super::check_print::print_invariants(&oracle_report, "the oracle's");
    let mut ok = oracle_report.violations.is_empty();
    let (mut passed, mut failed) = (0usize, oracle_report.violations.len());
    let multi = record.multi();
    if let Some(g) = &gpu {
        println!("adapter: {}", g.adapter);
        let gpu_report = record.report(1);
        super::check_print::print_invariants(&gpu_report, "the gpu's");
        for ni in &gpu_report.not_isolated {
            println!(
                "{:<10} {:<28} NOT ISOLATED: no oracle tensor for {}",
                ni.regime,
                ni.step.to_string(),
                ni.missing.join(", ")
            );
        }
        println!(
            "{:<10} {:<28} {:<10} {:>12} {:>12} {:>9} {:>8}  verdict",
            "regime", "capture", "policy", "max_abs_err", "tol", "ratio", "err/bud"
        );
        for r in &record.results {
            for x in &r.cross {
                if args.quiet && x.cmp.pass {
                    continue;
                }
                let verdict = match (x.cmp.pass, x.cmp.bit_exact, x.tie_flip) {
                    (true, true, _) => "within (bit-exact)".to_string(),
                    (true, false, _) => "within".to_string(),
                    (false, _, true) => "TIE FLIP (tie rule only)".to_string(),
                    (false, _, false) => format!("OUTSIDE: {}", x.cmp.reason),
                };
                let bud = x
                    .budget
                    .as_ref()
                    .map_or("-".to_string(), |b| format!("{:.3}", b.ratio));
                println!(
                    "{:<10} {:<28} {:<10} {:>12.3e} {:>12.3e} {:>9.3} {:>8}  {}",
                    r.regime,
                    r.name,
                    x.cmp.policy_name,
                    x.cmp.max_abs_err,
                    x.cmp.tol,
                    x.cmp.worst_ratio,
                    bud,
                    verdict
                );
            }
        }
        for (_, missing) in &multi.cross_missing {
            for (regime, name) in missing {
                println!("{regime:<10} {name:<28} MISSING on the gpu");
            }
        }
        let over: Vec<_> = record
            .results
            .iter()
            .flat_map(|r| r.cross.iter().map(move |x| (r, x)))
            .filter(|(_, x)| x.budget.as_ref().is_some_and(|b| !b.within()))
            .collect();
        for (r, x) in &over {
            if let Some(b) = &x.budget {
                println!(
                    "{:<10} {:<28} OVER BUDGET: error {:.3e} is {:.3}x the budget {:.3e} ({})",
                    r.regime, r.name, x.cmp.max_abs_err, b.ratio, b.budget.abs, b.budget.reason
                );
            }
        }
        if let Some((_, list)) = multi.triage_cross.first() {
            print_triage("gpu against the cpu oracle", list);
        }
        if args.reference_ties {
            super::check_print::print_near_ties(&record, 1, "the oracle");
        }
        let c = multi.cross_summary(0);
        println!(
            "gpu vs cpu: {} captures compared, {} within the GPU policy ({} bit-exact), {} tie flips, {} outside, {} missing",
            c.compared, c.within_policy, c.bit_exact, c.tie_flips, c.failed, c.missing
        );
        if let Some(f) = multi.first_cross_failure(0) {
            println!("first gpu divergence: {} {} ({})", f.regime, f.name, f.step);
        }
        let real = multi
            .triage_cross
            .first()
            .map_or(0, |(_, l)| triage_totals(l).real);
        ok &= c.failed == 0 && c.missing == 0 && real == 0 && gpu_report.violations.is_empty();
        passed += c.within_policy;
        failed += c.failed + c.missing + gpu_report.violations.len();
    } else {
        passed += record.results.len();
        println!(
            "cpu oracle alone: {} captures over {} steps (no second backend to compare)",
            record.results.len(),
            record.timings.len()
        );
    }
    if let Some(tok) = &tokenizer {
        if !progress.generated.is_empty() {
            let ids: Vec<u32> = progress
                .generated
                .iter()
                .filter_map(|&i| u32::try_from(i).ok())
                .collect();
            println!(
                "generated: {:?} = {:?}",
                progress.generated,
                tok.detokenize(&ids).unwrap_or_default()
            );
        }
    }
    print_memory(mem.as_ref());
    println!("run: {total_s:.3} s wall");
    if let Some(path) = &args.json {
        let doc = json!({
            "reference": record.reference,
            "ok": ok,
            "backends": (0..record.backends.len()).map(|i| record.report(i).to_json()).collect::<Vec<_>>(),
            "cross": (0..multi.cross.len()).map(|i| cross_json(&multi, i)).collect::<Vec<_>>(),
            "timing": timing_json(&record),
            "layers": model.layers().map(|r| r.to_string()),
            "generated": progress.generated,
            "all_zero": progress.all_zero.iter().map(|(r, n)| json!({"regime": r, "capture": n})).collect::<Vec<_>>(),
            "memory": memory_json(mem.as_ref()),
            "wall_seconds": total_s,
        });
        write_atomic(path, &serde_json::to_vec_pretty(&doc)?)?;
        println!("report written to {}", path.display());
    }
    println!("overall: {}", if ok { "pass" } else { "FAIL" });
    println!("{passed} passed, {failed} failed");
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Per step (each layer's block on its own row, summed over regimes) and per backend, wall
/// seconds, then each backend's total.
pub fn print_timing(record: &RunRecord) {
    println!(
        "{:<12} {}",
        "step",
        record
            .backends
            .iter()
            .map(|b| format!("{b:>12}"))
            .collect::<String>()
    );
    let by_step = record.seconds_per_kind();
    for (kind, secs) in &by_step {
        println!(
            "{:<12} {}",
            kind.to_string(),
            secs.iter()
                .map(|s| format!("{s:>10.3} s"))
                .collect::<String>()
        );
    }
    let totals = step_totals(&by_step, record.backends.len());
    println!(
        "{:<12} {}",
        "total",
        totals
            .iter()
            .map(|s| format!("{s:>10.3} s"))
            .collect::<String>()
    );
}

/// Per backend, the sum over every step.
fn step_totals(by_step: &[(Step, Vec<f64>)], n: usize) -> Vec<f64> {
    let mut t = vec![0.0; n];
    for (_, secs) in by_step {
        for (acc, s) in t.iter_mut().zip(secs) {
            *acc += s;
        }
    }
    t
}

pub fn timing_json(record: &RunRecord) -> serde_json::Value {
    json!(record
        .seconds_per_kind()
        .into_iter()
        .map(|(step, secs)| json!({"step": step.to_string(), "seconds": secs}))
        .collect::<Vec<_>>())
}

/// The GPU side of a golden-less run, when asked for.
struct GpuSide {
    adapter: String,
    #[cfg(feature = "gpu")]
    backend: golden_lens::gpu::GpuBackend,
}

impl GpuSide {
    #[cfg(feature = "gpu")]
    fn backend(&mut self) -> StepBackend<'_> {
        Box::new(&mut self.backend)
    }
    #[cfg(not(feature = "gpu"))]
    fn backend(&mut self) -> StepBackend<'_> {
        unreachable!("no GPU side is built without the gpu feature")
    }
}

#[cfg(feature = "gpu")]
fn gpu_backend(
    model: &ModelParts,
    args: &CheckArgs,
    with_gpu: bool,
) -> anyhow::Result<Option<GpuSide>> {
    if !with_gpu {
        return Ok(None);
    }
    let inject = args
        .inject
        .as_deref()
        .map(str::parse::<golden_lens::gpu::Injection>)
        .transpose()?;
    let backend = model.gpu(golden_lens::gpu::GpuOptions {
        reference_ties: args.reference_ties,
        inject,
        tie_audit: !args.reference_ties,
    })?;
    Ok(Some(GpuSide {
        adapter: backend.adapter().to_string(),
        backend,
    }))
}

#[cfg(not(feature = "gpu"))]
fn gpu_backend(
    _model: &ModelParts,
    args: &CheckArgs,
    with_gpu: bool,
) -> anyhow::Result<Option<GpuSide>> {
    if with_gpu {
        anyhow::bail!(
            "backend `{}` needs a build with the `gpu` feature",
            args.backend.as_deref().unwrap_or("cpu")
        );
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_bad_ones_are_named() {
        assert_eq!(parse_tokens("0, 17,42", 64).expect("ids"), vec![0, 17, 42]);
        let e = parse_tokens("0,x", 64).expect_err("not an id").to_string();
        assert!(e.contains("item 1 `x`"), "{e}");
        let e = parse_tokens("64", 64).expect_err("outside").to_string();
        assert!(e.contains("outside the GGUF's vocabulary 0..64"), "{e}");
        assert!(parse_tokens("-1", 64).is_err());
    }
}
