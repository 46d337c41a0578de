//! The capture list's data logic: groups and folds, filters, order, the rows shown, verdict
//! text, chip states per backend pair, and the error/tolerance bar's scale.

use crate::golden::compare::Comparison;
use crate::golden::names::parse_capture_name;
use crate::session::controller::CaptureResult;
use crate::ui::commands::{ListFilter, ListSort, VerdictFilter};
use crate::ui::theme::{self, Palette};
use eframe::egui;
use std::collections::HashSet;

/// One line of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListRow {
    /// A regime (level 0) or layer group (level 1) header.
    Header {
        key: String,
        title: String,
        level: usize,
        captures: usize,
        failing: usize,
        open: bool,
    },
    /// A capture (index into the results).
    Capture(usize),
}

/// The layer group of a capture inside its regime: `layer N`, `shared LN` or `model`.
pub fn group_of(r: &CaptureResult) -> String {
    let parsed = parse_capture_name(&r.name);
    match (parsed.layer, parsed.shared) {
        (Some(l), false) => format!("layer {l}"),
        (Some(l), true) => format!("shared L{l}"),
        (None, _) => "model".into(),
    }
}

/// The fold key of a regime header.
pub fn regime_key(r: &CaptureResult) -> String {
    format!("regime:{}", r.regime)
}

/// The fold key of a layer group header.
pub fn group_key(r: &CaptureResult) -> String {
    format!("group:{}:{}", r.regime, group_of(r))
}

/// Unfold the groups that hold `r`.
pub fn unfold_for(r: &CaptureResult, collapsed: &mut HashSet<String>) {
    collapsed.remove(&regime_key(r));
    collapsed.remove(&group_key(r));
}

/// Whether some comparison of `r` is not bit-exact.
fn not_bit_exact(r: &CaptureResult) -> bool {
    r.comparisons().iter().any(|(_, c)| !c.bit_exact)
}

/// Whether `r` passes the filter.
pub fn matches(r: &CaptureResult, f: &ListFilter) -> bool {
    let needle = f.name.trim().to_lowercase();
    if !needle.is_empty() && !r.label().to_lowercase().contains(&needle) {
        return false;
    }
    if f.kind.is_some_and(|k| k != r.kind) {
        return false;
    }
    if let Some(layer) = f.layer {
        if parse_capture_name(&r.name).layer != layer {
            return false;
        }
    }
    match f.verdict {
        VerdictFilter::All => true,
        VerdictFilter::Failing => !r.pass(),
        VerdictFilter::Passing => r.pass(),
        VerdictFilter::NotBitExact => r.pass() && not_bit_exact(r),
    }
}

/// The captures the filter keeps, in the list's order (folds ignored).
pub fn list_order(results: &[CaptureResult], f: &ListFilter) -> Vec<usize> {
    let mut order: Vec<usize> = (0..results.len())
        .filter(|&i| matches(&results[i], f))
        .collect();
    if f.sort == ListSort::RatioDescending {
        order.sort_by(|&a, &b| {
            results[b]
                .worst_ratio()
                .total_cmp(&results[a].worst_ratio())
                .then(a.cmp(&b))
        });
    }
    order
}

/// The rows to show: headers where the regime or layer group changes (execution order only),
/// captures of folded groups left out.
pub fn list_rows(
    results: &[CaptureResult],
    f: &ListFilter,
    collapsed: &HashSet<String>,
) -> Vec<ListRow> {
    let order = list_order(results, f);
    if f.sort == ListSort::RatioDescending {
        return order.into_iter().map(ListRow::Capture).collect();
    }
    // Counts per header first (a header shows how many captures it folds away).
    let mut counts: std::collections::HashMap<String, (usize, usize)> = Default::default();
    for &i in &order {
        let r = &results[i];
        let failing = usize::from(!r.pass());
        for k in [regime_key(r), group_key(r)] {
            let e = counts.entry(k).or_default();
            e.0 += 1;
            e.1 += failing;
        }
    }
    let mut rows = Vec::new();
    let (mut last_regime, mut last_group) = (String::new(), String::new());
    for i in order {
        let r = &results[i];
        let rk = regime_key(r);
        let gk = group_key(r);
        if rk != last_regime {
            let (captures, failing) = counts.get(&rk).copied().unwrap_or_default();
            rows.push(ListRow::Header {
                key: rk.clone(),
                title: r.regime.clone(),
                level: 0,
                captures,
                failing,
                open: !collapsed.contains(&rk),
            });
            last_regime = rk.clone();
            last_group.clear();
        }
        if collapsed.contains(&rk) {
            continue;
        }
        if gk != last_group {
            let (captures, failing) = counts.get(&gk).copied().unwrap_or_default();
            rows.push(ListRow::Header {
                key: gk.clone(),
                title: group_of(r),
                level: 1,
                captures,
                failing,
                open: !collapsed.contains(&gk),
            });
            last_group = gk.clone();
        }
        if !collapsed.contains(&gk) {
            rows.push(ListRow::Capture(i));
        }
    }
    rows
}

/// The captures that are visible (not filtered out, not folded), in order.
pub fn visible_captures(
    results: &[CaptureResult],
    f: &ListFilter,
    collapsed: &HashSet<String>,
) -> Vec<usize> {
    list_rows(results, f, collapsed)
        .into_iter()
        .filter_map(|r| match r {
            ListRow::Capture(i) => Some(i),
            ListRow::Header { .. } => None,
        })
        .collect()
}

/// The short verdicts of every comparison: `cpu vs golden: pass`, ...
pub fn verdicts(r: &CaptureResult) -> String {
    pair_states(r)
        .iter()
        .map(|(name, s, _)| format!("{name}: {}", s.word()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The top-k triage counts of an index capture, compact (`top-k Δ1/12: 1 tie flip, 0 near
/// tie, 0 real`), the test backend named when there are several; None without triage.
pub fn triage_counts(r: &CaptureResult) -> Option<String> {
    let several = r.triages().count() > 1;
    let parts: Vec<String> = r
        .triages()
        .map(|(x, t)| {
            let t = &t.triage;
            format!(
                "top-k{} Δ{}/{}: {} tie flip, {} near tie, {} real",
                if several {
                    format!(" {}", x.test)
                } else {
                    String::new()
                },
                t.rows_differing,
                t.rows,
                t.tie_flips,
                t.near_ties,
                t.real
            )
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The marks of a capture beside its chips: `over budget` when a backend's error against the
/// golden exceeds the capture's error budget, `invariants: N violated` when the backends' own
/// captures break the graph's invariants (both in words, never colour alone).
pub fn marks(r: &CaptureResult) -> Vec<String> {
    let mut out = Vec::new();
    if r.within_budget() == Some(false) {
        out.push("over budget".to_string());
    }
    let n = r.violation_count();
    if n > 0 {
        out.push(format!("invariants: {n} violated"));
    }
    out
}

/// The name a row shows: without the layer prefix its group header already names (execution
/// order), or the whole `regime/name` (sorted by ratio, no groups).
pub fn row_name(r: &CaptureResult, sort: ListSort) -> String {
    match sort {
        ListSort::Execution => parse_capture_name(&r.name).base,
        ListSort::RatioDescending => r.label(),
    }
}

/// A shape as the list shows it: `1×12×64`.
pub fn short_shape(shape: &[usize]) -> String {
    if shape.is_empty() {
        return "scalar".into();
    }
    shape
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join("×")
}

/// What a chip says about one comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChipState {
    /// Bit-exact.
    Exact,
    /// Within the policy.
    Pass,
    /// Outside the policy, but the test backend's own top-k tie rule explains it (reported,
    /// not failed).
    TieFlip,
    Fail,
    /// The pair was not compared for this capture.
    None,
}

impl ChipState {
    /// The state of comparison `c` (`tie_flip`: a cross comparison the tie rule explains).
    pub fn of(c: Option<&Comparison>, tie_flip: bool) -> ChipState {
        match c {
            None => ChipState::None,
            Some(c) if c.pass && c.bit_exact => ChipState::Exact,
            Some(c) if c.pass => ChipState::Pass,
            Some(_) if tie_flip => ChipState::TieFlip,
            Some(_) => ChipState::Fail,
        }
    }
    /// The chip's text (also the verdict word of its accessibility label).
    pub fn word(self) -> &'static str {
        match self {
            ChipState::Exact => "exact",
            ChipState::Pass => "pass",
            ChipState::TieFlip => "tie flip",
            ChipState::Fail => "FAIL",
            ChipState::None => "not compared",
        }
    }
    /// The chip's colour.
    pub fn color(self, p: &Palette) -> egui::Color32 {
        match self {
            ChipState::Exact => p.chip_exact_bg,
            ChipState::Pass => p.chip_pass_bg,
            ChipState::TieFlip => p.chip_warn_bg,
            ChipState::Fail => p.chip_fail_bg,
            ChipState::None => p.chip_none_bg,
        }
    }
    /// The short text drawn on the chip.
    pub fn short(self) -> &'static str {
        match self {
            ChipState::TieFlip => "tie",
            ChipState::None => "—",
            s => s.word(),
        }
    }
}

/// Every comparison of `r` with its chip state, by pair name.
pub fn pair_states(r: &CaptureResult) -> Vec<(String, ChipState, Option<&Comparison>)> {
    let mut out = Vec::new();
    for b in &r.per_backend {
        if let Some(c) = &b.vs_golden {
            out.push((
                format!("{} vs golden", b.backend),
                ChipState::of(Some(c), false),
                Some(c),
            ));
        }
    }
    for x in &r.cross {
        out.push((
            format!("{} vs {}", x.test, x.reference),
            ChipState::of(Some(&x.cmp), x.tie_flip),
            Some(&x.cmp),
        ));
    }
    out
}

/// Where ratio `ratio` sits on the list's log bar, 0..1 (`None` for a ratio of 0).
pub fn bar_fraction(ratio: f64) -> Option<f64> {
    if ratio == 0.0 {
        return None;
    }
    if !ratio.is_finite() {
        return Some(1.0);
    }
    let span = theme::RATIO_BAR_DECADES_BELOW + theme::RATIO_BAR_DECADES_ABOVE;
    Some(((ratio.log10() + theme::RATIO_BAR_DECADES_BELOW) / span).clamp(0.02, 1.0))
}

/// The comparison names in the order the chips show them (every comparison any capture has).
pub fn pair_names(results: &[CaptureResult]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in results.iter().take(64) {
        for (n, _) in r.comparisons() {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

/// A short form of a pair name for the chip header: `cpu·G`, `gpu·cpu`.
pub fn short_pair(name: &str) -> String {
    match name.split_once(" vs ") {
        Some((a, "golden")) => format!("{a}·G"),
        Some((a, b)) => format!("{a}·{b}"),
        None => name.to_string(),
    }
}
