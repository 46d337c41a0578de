//! `check`'s printed report: one row per capture with its error budget, missing and
//! non-isolated captures, invariant violations, the top-k triage, bit-exact counts and the closing
//! `N passed, M failed` line. Shared by `check`, `check --captures` and the golden-less run.

use super::check::CheckArgs;
use golden_lens::session;
use std::process::ExitCode;

/// Print a triage list: each index capture with a disagreement, then the totals.
pub(super) fn print_triage(
    against: &str,
    list: &[(String, golden_lens::session::triage::TopkTriage)],
) {
    use golden_lens::session::multi::triage_totals;
    for (regime, t) in list.iter().filter(|(_, t)| t.rows_differing > 0) {
        let first = t.details.first().map(|d| {
            let margin = d
                .boundary_margin
                .map_or("n/a".to_string(), |m| format!("{m:.3e}"));
            format!(
                "; row {}: reference only {:?}, test only {:?}, {} (gap {:.3e}, boundary margin {margin})",
                d.row, d.reference_only, d.test_only, d.class, d.score_gap
            )
        });
        println!(
            "{regime:<10} {:<28} TRIAGE: {} of {} rows differ: {} tie flips, {} near ties, {} real{}{}",
            t.capture,
            t.rows_differing,
            t.rows,
            t.tie_flips,
            t.near_ties,
            t.real,
            first.unwrap_or_default(),
            t.downstream_of
                .as_ref()
                .map(|d| format!(" [after the selection disagreement at {d}]"))
                .unwrap_or_default()
        );
    }
    let x = triage_totals(list);
    println!(
        "top-k triage ({against}): {} index captures, {} rows differ: {} tie flips, {} near ties, {} real",
        x.captures, x.rows_differing, x.tie_flips, x.near_ties, x.real
    );
}

/// Print the selection rows backend `bi` of `record` resolved the reference's way (near ties
/// under `--reference-ties`, see `golden_lens::model::hints`), one line per selection, then
/// their total. Nothing when the run gave no hints.
pub(super) fn print_near_ties(record: &session::run::RunRecord, bi: usize, against: &str) {
    let Some(list) = record.near_ties.get(bi) else {
        return;
    };
    let name = record.backends.get(bi).map_or("backend", String::as_str);
    // A backend's failure anywhere: against the recorded reference or the first backend.
    let fails = |r: &session::results::CaptureResult| {
        r.per_backend
            .iter()
            .any(|b| b.backend == name && b.vs_golden.as_ref().is_some_and(|c| !c.pass))
            || r.cross.iter().any(|x| x.test == name && !x.ok())
    };
    for (regime, nt) in list {
        // Scores downstream of a failure are not noise: say so beside the row.
        let at = record
            .results
            .iter()
            .position(|r| r.regime == *regime && r.name == nt.capture);
        let upstream = at
            .and_then(|i| record.results[..i].iter().find(|r| fails(r)))
            .map(|r| format!(" [after the failure at {} {}]", r.regime, r.name))
            .unwrap_or_default();
        println!(
            "{regime:<10} {:<28} NEAR TIE: row(s) {:?} took {against}'s selection (the {name}'s own scores rank it within the gate's f32 bar){upstream}",
            nt.capture, nt.rows,
        );
    }
    let rows: usize = list.iter().map(|(_, nt)| nt.rows.len()).sum();
    println!(
        "near ties resolved {against}'s way: {rows} row(s) in {} selection capture(s)",
        list.len()
    );
}

pub(super) fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Print one backend's golden report (rows with their error budgets, missing, invariants, the
/// top-k triage when given). True when it passed.
pub(super) fn print_report(
    report: &session::Report,
    args: &CheckArgs,
    triage: Option<&[(String, golden_lens::session::triage::TopkTriage)]>,
) -> anyhow::Result<bool> {
    print_report_noting(report, args, triage, None)
}

/// [`print_report`] with `first_note` appended to the first failure line (the GPU backend's
/// kernel, workgroup and invocation behind the worst element).
pub(super) fn print_report_noting(
    report: &session::Report,
    args: &CheckArgs,
    triage: Option<&[(String, golden_lens::session::triage::TopkTriage)]>,
    first_note: Option<String>,
) -> anyhow::Result<bool> {
    println!(
        "{:<10} {:<28} {:<6} {:>12} {:>12} {:>9} {:>10} {:>8}  verdict",
        "regime", "capture", "kind", "max_abs_err", "tol", "ratio", "budget", "err/bud"
    );
    let (mut budgeted, mut within_budget) = (0usize, 0usize);
    let mut over_budget = Vec::new();
    for r in &report.rows {
        let budget = report.budget_ratio(r);
        if let Some((b, over)) = &budget {
            budgeted += 1;
            if session::budget::within_budget(*over) {
                within_budget += 1;
            } else {
                over_budget.push((r, b.clone(), *over));
            }
        }
        if args.quiet && r.cmp.pass {
            continue;
        }
        let verdict = match (r.cmp.pass, r.cmp.bit_exact) {
            (true, true) => "pass (bit-exact)".to_string(),
            (true, false) => "pass".to_string(),
            (false, _) => format!("FAIL: {}", r.cmp.reason),
        };
        let (bud, over) = match &budget {
            Some((b, o)) => (format!("{:.3e}", b.abs), format!("{o:.3}")),
            None => ("-".into(), "-".into()),
        };
        println!(
            "{:<10} {:<28} {:<6} {:>12.3e} {:>12.3e} {:>9.3} {:>10} {:>8}  {}",
            r.regime,
            r.name,
            r.kind.label(),
            r.cmp.max_abs_err,
            r.cmp.tol,
            r.cmp.worst_ratio,
            bud,
            over,
            verdict
        );
    }
    for (regime, name) in &report.missing {
        println!("{regime:<10} {name:<28} MISSING: the backend did not produce this capture");
    }
    for iso in &report.not_isolated {
        println!(
            "{:<10} {:<28} not isolated: needs full {}",
            iso.regime,
            iso.step.to_string(),
            iso.missing.join(", ")
        );
    }
    print_invariants(report, "the backend's");
    for (r, b, over) in &over_budget {
        println!(
            "{:<10} {:<28} OVER BUDGET: error {:.3e} is {over:.3}x the budget {:.3e} ({})",
            r.regime, r.name, r.cmp.max_abs_err, b.abs, b.reason
        );
    }
    println!(
        "error budgets: {within_budget} of {budgeted} captures within their budget (dtype, reduction length and reference magnitude)"
    );
    if let Some(list) = triage {
        print_triage(&format!("{} against the golden", report.backend), list);
    }
    let s = report.summary();
    println!(
        "bit-exact: {} of {} bf16 captures, {} of {} integer captures exact, {} of {} f32 captures",
        s.bf16_bit_exact, s.bf16_total, s.int_exact, s.int_total, s.f32_bit_exact, s.f32_total
    );
    if !report.extra.is_empty() {
        println!(
            "{} captures produced that this golden does not hold (not compared)",
            report.extra.len()
        );
    }
    if let Some(f) = report.first_failure() {
        println!(
            "first failure: {} {} ({}){}",
            f.regime,
            f.name,
            f.step,
            first_note.unwrap_or_default()
        );
    }
    Ok(report.ok())
}

/// Print each invariant violation in `whose` own captures, then their count.
pub(super) fn print_invariants(report: &session::Report, whose: &str) {
    for (regime, v) in &report.violations {
        println!(
            "{regime:<10} {:<28} INVARIANT at flat index {}: {}",
            v.capture, v.index, v.what
        );
    }
    println!(
        "invariants: {} violations in {whose} own captures",
        report.violations.len()
    );
}

/// The closing `N passed, M failed` line of a report.
pub(super) fn summary_line(report: &session::Report) -> String {
    let s = report.summary();
    format!("{} passed, {} failed", s.passed, s.failed)
}
