//! The metrics table of the selected capture: one row per backend pair (each backend against the
//! golden, each test backend against the first), columns verdict, max abs and rel error, bf16
//! ulps, NMSE, checksum, budget use and where the worst element is; below it, the invariants
//! the backends' captures violate. A compact region under the view that folds away.

use super::capture_list::ChipState;
use crate::golden::compare::Comparison;
use crate::session::controller::{BudgetCheck, CaptureResult};
use crate::session::invariants::Violation;
use crate::ui::app::AppState;
use crate::ui::commands::{Region, UiCommand, UiCommandSender};
use crate::ui::theme::{self, Palette};
use eframe::egui;

/// The error-budget text of one pair (`cpu vs golden`, `gpu vs cpu`; also the label tests
/// read).
pub fn budget_line(pair: &str, b: &BudgetCheck) -> String {
    format!(
        "{pair} budget: {:.1e} ({}), error/budget {:.2}{}",
        b.budget.abs,
        b.budget.reason,
        b.ratio,
        if b.within() { "" } else { ": OVER BUDGET" }
    )
}

/// One invariant violation of the selected capture (also the label tests read).
pub fn violation_line(backend: &str, v: &Violation) -> String {
    format!("{backend} at flat index {}: {}", v.index, v.what)
}

/// Violations of one capture listed at most (the count above covers all of them).
pub const VIOLATIONS_SHOWN: usize = 200;

/// The table's columns.
pub const COLUMNS: [&str; 11] = [
    "pair",
    "verdict",
    "max abs err",
    "tol",
    "ratio",
    "max rel err",
    "bf16 ulps",
    "NMSE",
    "checksum rel diff",
    "budget use",
    "worst element",
];

/// One row of the table: `(column, shown text, accessibility label)` per cell.
pub fn metric_cells(
    pair: &str,
    c: &Comparison,
    state: ChipState,
    budget: Option<&BudgetCheck>,
) -> Vec<(&'static str, String, String)> {
    let verdict = state.word();
    let worst = if c.max_abs_err_multi_index.is_empty() {
        "-".to_string()
    } else {
        format!(
            "{:?}: {:.4e} vs {:.4e}",
            c.max_abs_err_multi_index, c.worst_got, c.worst_expected
        )
    };
    let budget_text = budget.map_or("-".to_string(), |b| {
        format!("{:.2}{}", b.ratio, if b.within() { "" } else { " OVER" })
    });
    let budget_label = match budget {
        Some(b) => budget_line(pair, b),
        None => format!("{pair} budget use: -"),
    };
    vec![
        ("pair", pair.to_string(), pair.to_string()),
        (
            "verdict",
            verdict.to_string(),
            format!(
                "{pair}: {} ({})",
                match state {
                    ChipState::Exact | ChipState::Pass => "pass",
                    s => s.word(),
                },
                c.reason
            ),
        ),
        (
            "max abs err",
            format!("{:.3e}", c.max_abs_err),
            format!("{pair} max_abs_err: {:.6e}", c.max_abs_err),
        ),
        (
            "tol",
            format!("{:.3e}", c.tol),
            format!("{pair} tol: {:.6e}", c.tol),
        ),
        (
            "ratio",
            format!("{:.3e}", c.worst_ratio),
            format!("{pair} worst_ratio: {:.6}", c.worst_ratio),
        ),
        (
            "max rel err",
            format!("{:.3e}", c.max_rel_err),
            format!("{pair} max_rel_err: {:.3e}", c.max_rel_err),
        ),
        (
            "bf16 ulps",
            c.max_bf16_ulp.to_string(),
            format!("{pair} max_bf16_ulp: {}", c.max_bf16_ulp),
        ),
        (
            "NMSE",
            format!("{:.3e}", c.nmse),
            format!("{pair} nmse: {:.3e}", c.nmse),
        ),
        (
            "checksum rel diff",
            format!("{:.2e} (bar {:.1e})", c.ck_rel_diff, c.ck_rel),
            format!(
                "{pair} checksum: got {:.6e}, expected {:.6e} (rel diff {:.3e}, bar {:.1e})",
                c.ck_got, c.ck_expected, c.ck_rel_diff, c.ck_rel
            ),
        ),
        ("budget use", budget_text, budget_label),
        (
            "worst element",
            worst.clone(),
            format!(
                "{pair} worst element: {worst}; compared {} at stride {}, outside tol {}",
                c.n_compared, c.stride, c.n_outside_tol
            ),
        ),
    ]
}

/// One row of the table.
pub struct MetricsRow<'a> {
    pub pair: String,
    pub cmp: &'a Comparison,
    pub state: ChipState,
    pub budget: Option<&'a BudgetCheck>,
}

/// Every row of the selected capture.
pub fn rows_of(r: &CaptureResult) -> Vec<MetricsRow<'_>> {
    let mut out = Vec::new();
    for b in &r.per_backend {
        if let Some(c) = &b.vs_golden {
            out.push(MetricsRow {
                pair: format!("{} vs golden", b.backend),
                cmp: c,
                state: ChipState::of(Some(c), false),
                budget: b.budget.as_ref(),
            });
        }
    }
    for x in &r.cross {
        out.push(MetricsRow {
            pair: format!("{} vs {}", x.test, x.reference),
            cmp: &x.cmp,
            state: ChipState::of(Some(&x.cmp), x.tie_flip),
            budget: x.budget.as_ref(),
        });
    }
    out
}

fn cell_ui(ui: &mut egui::Ui, text: &str, label: &str, color: Option<egui::Color32>) {
    let rich = egui::RichText::new(text).monospace();
    let rich = match color {
        Some(c) => rich.color(c),
        None => rich,
    };
    let resp = ui.add(egui::Label::new(rich));
    let label = label.to_string();
    resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &label));
}

/// The region: a header that folds it, then the table.
pub fn metrics_region_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    if !state.metrics_open {
        egui::Panel::bottom("metrics folded")
            .resizable(false)
            .show(ui, |ui| header_ui(ui, state, tx));
        return;
    }
    egui::Panel::bottom("metrics")
        .resizable(true)
        .default_size(theme::METRICS_HEIGHT_PT)
        .min_size(theme::REGION_MIN_HEIGHT_PT)
        .show(ui, |ui| {
            header_ui(ui, state, tx);
            let Some(r) = state.selected() else {
                ui.weak("Select a capture in the list or on the overview to see its metrics.");
                return;
            };
            egui::ScrollArea::both()
                .id_salt("metrics_scroll")
                .auto_shrink([false, false])
                .show(ui, |ui| table_ui(ui, r));
        });
}

fn header_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    ui.horizontal_wrapped(|ui| {
        let open = state.metrics_open;
        if super::capture_list::fold_toggle_ui(ui, open, "Metrics", true).clicked() {
            tx.send_ui(UiCommand::SetRegionOpen {
                region: Region::Metrics,
                open: !open,
            });
        }
        if let Some(r) = state.selected() {
            let palette = theme::palette(ui.ctx());
            ui.label(format!(
                "{} · {} · {} · shape {:?}",
                r.label(),
                r.step,
                r.kind.label(),
                r.shape
            ));
            if !open {
                ui.colored_label(palette.verdict(r.pass()), super::capture_list::verdicts(r));
            }
        }
    });
}

fn table_ui(ui: &mut egui::Ui, r: &CaptureResult) {
    let palette = theme::palette(ui.ctx());
    let rows = rows_of(r);
    if rows.is_empty() {
        ui.label("Not in the golden: nothing to compare against");
    } else {
        egui::Grid::new("metrics_grid")
            .striped(true)
            .spacing([12.0, 2.0])
            .show(ui, |ui| {
                for h in COLUMNS {
                    ui.strong(h);
                }
                ui.end_row();
                for row in &rows {
                    let cells = metric_cells(&row.pair, row.cmp, row.state, row.budget);
                    for (col, text, label) in cells {
                        let color = match col {
                            "verdict" if row.state == ChipState::TieFlip => Some(palette.warn_text),
                            "verdict" => Some(palette.verdict(row.cmp.pass)),
                            "budget use" => row.budget.map(|b| palette.verdict(b.within())),
                            _ => None,
                        };
                        cell_ui(ui, &text, &label, color);
                    }
                    ui.end_row();
                }
            });
    }
    violations_ui(ui, palette, r);
}

fn violations_ui(ui: &mut egui::Ui, palette: &Palette, r: &CaptureResult) {
    let n = r.violation_count();
    if n == 0 {
        return;
    }
    egui::CollapsingHeader::new(format!("Invariant violations ({n})"))
        .default_open(true)
        .show(ui, |ui| {
            for (backend, v) in r.violations().take(VIOLATIONS_SHOWN) {
                ui.colored_label(palette.fail_text, violation_line(backend, v));
            }
            if n > VIOLATIONS_SHOWN {
                ui.weak(format!("… {} more violations", n - VIOLATIONS_SHOWN));
            }
        });
}
