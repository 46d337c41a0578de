//! `golden-lens check --gguf F --tokens ... [--decode N]`: a run with no golden. One prefill regime
//! over the tokens, then N greedy decode steps; the CPU oracle is the live reference and every
//! later backend (the wgpu path) is compared with it under the backend policy, with top-k triage,
//! error budgets and invariants as in a golden check, and the same rows, summary line and exit
//! codes. The oracle alone checks its invariants and reports its timing.

use super::check::{print_triage, CheckArgs};
use super::model::ModelParts;
use golden_lens::session::export::write_atomic;
use golden_lens::session::multi::{cross_json, triage_totals};
use golden_lens::session::reference::TokensReference;
use golden_lens::session::run::{KeepValues, RunRecord};
use golden_lens::session::{CheckOptions, StepBackend, Stepper};
use serde_json::json;
use std::process::ExitCode;
use std::sync::Arc;

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

/// Run the golden-less check.
pub fn run(args: &CheckArgs, with_gpu: bool) -> anyhow::Result<ExitCode> {
    let Some(gguf) = &args.gguf else {
        anyhow::bail!("--tokens and --prompt run a GGUF without a golden: give --gguf F");
    };
    if args.golden.is_some() {
        anyhow::bail!("--tokens/--prompt take the truth from the oracle: drop --golden");
    }
    let model = ModelParts::from_gguf(gguf)?;
    println!("weights: {}", model.describe());
    let ids = match (&args.tokens, &args.prompt) {
        (Some(t), None) => parse_tokens(t, model.cfg.vocab_size)?,
        (None, Some(_)) => anyhow::bail!(
            "--prompt needs the GGUF's tokenizer, which this build does not have yet; give \
             --tokens"
        ),
        _ => anyhow::bail!("give either --tokens or --prompt, not both"),
    };
    println!("tokens:  {ids:?}");
    let reference = TokensReference::prompt(
        format!("{} (cpu oracle, live)", gguf.display()),
        model.cfg.clone(),
        ids,
        args.decode,
    );
    let opts = CheckOptions {
        only: args
            .only
            .as_deref()
            .map(regex::Regex::new)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--only is not a valid regular expression: {e}"))?,
        invariants: Some(model.cfg.clone()),
        ..Default::default()
    };
    let mut gpu = gpu_backend(&model, args, with_gpu)?;
    let mut oracle = model.oracle_with_diagnostics();
    let mut backends: Vec<StepBackend<'_>> = vec![Box::new(&mut oracle)];
    if let Some(g) = gpu.as_mut() {
        backends.push(g.backend());
    }
    let t0 = std::time::Instant::now();
    let mut stepper = Stepper::new(Arc::new(reference), backends, opts)?;
    let mut record = RunRecord::for_stepper(&stepper, KeepValues::Failing);
    while let Some(o) = stepper.next_step()? {
        eprintln!(
            "[{:>8.1} s] {} {} ({} captures)",
            t0.elapsed().as_secs_f64(),
            o.regime,
            o.step,
            o.results.len()
        );
        if o.regime_end.is_some() {
            if let Some(next) = golden_lens::session::reference::greedy_next_token(
                &o.results
                    .iter()
                    .filter_map(|r| r.capture_of(0))
                    .collect::<Vec<_>>(),
            ) {
                println!("{}: greedy next token {next}", o.regime);
            }
        }
        record.push(o);
    }
    drop(stepper);
    let total_s = t0.elapsed().as_secs_f64();
    print_timing(&record);
    let oracle_report = record.report(0);
    for (regime, v) in &oracle_report.violations {
        println!(
            "{regime:<10} {:<28} INVARIANT at flat index {}: {}",
            v.capture, v.index, v.what
        );
    }
    println!(
        "invariants: {} violations in the oracle's own captures",
        oracle_report.violations.len()
    );
    let mut ok = oracle_report.violations.is_empty();
    let (mut passed, mut failed) = (0usize, oracle_report.violations.len());
    let multi = record.multi();
    if let Some(g) = &gpu {
        println!("adapter: {}", g.adapter);
        let gpu_report = record.report(1);
        for (regime, v) in &gpu_report.violations {
            println!(
                "{regime:<10} {:<28} INVARIANT at flat index {}: {}",
                v.capture, v.index, v.what
            );
        }
        println!(
            "invariants: {} violations in the gpu's own captures",
            gpu_report.violations.len()
        );
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
    println!("run: {total_s:.3} s wall");
    if let Some(path) = &args.json {
        let doc = json!({
            "reference": record.reference,
            "ok": ok,
            "backends": (0..record.backends.len()).map(|i| record.report(i).to_json()).collect::<Vec<_>>(),
            "cross": (0..multi.cross.len()).map(|i| cross_json(&multi, i)).collect::<Vec<_>>(),
            "timing": timing_json(&record),
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

/// Per step kind (summed over regimes) and per backend, wall seconds.
fn print_timing(record: &RunRecord) {
    println!(
        "{:<12} {}",
        "step",
        record
            .backends
            .iter()
            .map(|b| format!("{b:>12}"))
            .collect::<String>()
    );
    for (kind, secs) in record.seconds_per_kind() {
        println!(
            "{:<12} {}",
            kind.to_string(),
            secs.iter()
                .map(|s| format!("{s:>10.3} s"))
                .collect::<String>()
        );
    }
}

fn timing_json(record: &RunRecord) -> serde_json::Value {
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
