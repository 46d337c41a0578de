//! The capture list: grouped by regime and layer, filtered by name and failing-only, with shape,
//! kind, worst error, tolerance, ratio and a verdict per comparison (plus the top-k triage counts
//! of index captures, and marks for captures over their error budget or breaking invariants). Only visible rows are laid out, so thousands of captures stay cheap.

use crate::session::controller::CaptureResult;
use crate::ui::app::GoldenLensApp;
use crate::ui::commands::UiCommand;
use crate::ui::theme;
use eframe::egui;

/// One line of the list: a group header or a capture (index into the results).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListRow {
    Header(String),
    Capture(usize),
}

/// The group a capture belongs to: `regime · layer N`, `regime · shared LN` or `regime · model`.
pub fn group_of(r: &CaptureResult) -> String {
    let parsed = crate::golden::names::parse_capture_name(&r.name);
    match (parsed.layer, parsed.shared) {
        (Some(l), false) => format!("{} · layer {l}", r.regime),
        (Some(l), true) => format!("{} · shared L{l}", r.regime),
        (None, _) => format!("{} · model", r.regime),
    }
}

/// The rows to show for `results` under the filters, headers inserted where the group changes.
pub fn list_rows(results: &[CaptureResult], filter: &str, failing_only: bool) -> Vec<ListRow> {
    let needle = filter.trim().to_lowercase();
    let mut rows = Vec::new();
    let mut last_group = String::new();
    for (i, r) in results.iter().enumerate() {
        if failing_only && r.pass() {
            continue;
        }
        if !needle.is_empty() && !r.label().to_lowercase().contains(&needle) {
            continue;
        }
        let g = group_of(r);
        if g != last_group {
            rows.push(ListRow::Header(g.clone()));
            last_group = g;
        }
        rows.push(ListRow::Capture(i));
    }
    rows
}

/// The short verdicts of every comparison: `cpu vs golden: pass`, ...
pub fn verdicts(r: &CaptureResult) -> String {
    r.comparisons()
        .iter()
        .map(|(name, c)| format!("{name}: {}", if c.pass { "pass" } else { "FAIL" }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The top-k triage counts of an index capture, compact (the list is narrow): `top-k Δ1/12:
/// 1 tie flip, 0 near tie, 0 real`, the test backend named when there are several; None for
/// captures without triage.
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

/// The marks of a capture beside its verdicts: `over budget` when a backend's error against the
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

/// Draw the list.
pub fn capture_list_ui(ui: &mut egui::Ui, app: &mut GoldenLensApp) {
    ui.heading("Captures");
    ui.horizontal(|ui| {
        let label = ui.label("Filter:");
        ui.add(
            egui::TextEdit::singleline(&mut app.list.filter)
                .hint_text("name contains…")
                .desired_width(180.0),
        )
        .labelled_by(label.id);
        ui.checkbox(&mut app.list.failing_only, "Failing only");
    });
    let rows = list_rows(&app.results, &app.list.filter, app.list.failing_only);
    ui.label(format!("{} rows", rows.len()));
    ui.horizontal(|ui| {
        ui.add_sized(
            [190.0, 14.0],
            egui::Label::new(egui::RichText::new("capture").weak()),
        );
        ui.add_sized(
            [70.0, 14.0],
            egui::Label::new(egui::RichText::new("shape").weak()),
        );
        ui.add_sized(
            [40.0, 14.0],
            egui::Label::new(egui::RichText::new("kind").weak()),
        );
        ui.weak("worst err / tol = ratio, verdict");
    });
    let row_h = ui.spacing().interact_size.y;
    let mut clicked = None;
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show_rows(ui, row_h, rows.len(), |ui, range| {
            for row in &rows[range] {
                match row {
                    ListRow::Header(g) => {
                        ui.add_sized(
                            [ui.available_width(), row_h],
                            egui::Label::new(egui::RichText::new(g).strong()),
                        );
                    }
                    ListRow::Capture(i) => {
                        let r = &app.results[*i];
                        ui.horizontal(|ui| {
                            let selected = app.selected == Some(*i);
                            let resp = ui.add_sized(
                                [190.0, row_h],
                                egui::Button::selectable(selected, r.label()),
                            );
                            if resp.clicked() {
                                clicked = Some(*i);
                            }
                            ui.add_sized(
                                [70.0, row_h],
                                egui::Label::new(format!("{:?}", r.shape)).truncate(),
                            );
                            ui.add_sized([40.0, row_h], egui::Label::new(r.kind.label()));
                            let worst = r.per_backend.first().and_then(|b| b.vs_golden.as_ref());
                            let numbers = match worst {
                                Some(c) => format!(
                                    "{:.1e} / {:.1e} = {:.2}",
                                    c.max_abs_err, c.tol, c.worst_ratio
                                ),
                                None => "not in golden".into(),
                            };
                            ui.label(numbers);
                            ui.colored_label(theme::verdict_color(r.pass()), verdicts(r));
                            if let Some(t) = triage_counts(r) {
                                ui.label(t);
                            }
                            for mark in marks(r) {
                                ui.colored_label(theme::FAIL, mark);
                            }
                        });
                    }
                }
            }
        });
    if let Some(i) = clicked {
        app.push(UiCommand::SelectCapture(i));
    }
}
