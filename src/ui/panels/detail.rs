//! The detail area: the selected capture's metrics for every comparison (with each backend's
//! error budget), the invariants its backends' captures violate, its exports, the test
//! backend and reference choice, the view tabs, and the chosen view, with an index capture's
//! top-k triage (every differing row: indices only one side picked, class, score gap, boundary
//! margin) above it.

use crate::golden::compare::Comparison;
use crate::session::controller::{BudgetCheck, CaptureResult, CaptureTriage, CrossComparison};
use crate::session::invariants::Violation;
use crate::ui::app::GoldenLensApp;
use crate::ui::commands::{DetailView, FileKind, UiCommand};
use crate::ui::theme;
use crate::ui::views::{self, ReferenceChoice};
use eframe::egui;
use std::path::PathBuf;

/// The metric lines of one comparison (each line is its own label, readable by tests).
pub fn metric_lines(name: &str, c: &Comparison) -> Vec<String> {
    vec![
        format!(
            "{name}: {} ({})",
            if c.pass { "pass" } else { "FAIL" },
            c.reason
        ),
        format!("{name} max_abs_err: {:.6e}", c.max_abs_err),
        format!("{name} tol: {:.6e}", c.tol),
        format!("{name} worst_ratio: {:.6}", c.worst_ratio),
        format!(
            "{name} max_rel_err: {:.3e}, max_bf16_ulp: {}, nmse: {:.3e}",
            c.max_rel_err, c.max_bf16_ulp, c.nmse
        ),
        format!(
            "{name} compared: {} at stride {}, outside tol: {}, bit-exact: {}",
            c.n_compared, c.stride, c.n_outside_tol, c.bit_exact
        ),
        format!(
            "{name} checksum: got {:.6e}, expected {:.6e} (rel diff {:.3e}, bar {:.1e})",
            c.ck_got, c.ck_expected, c.ck_rel_diff, c.ck_rel
        ),
    ]
}

/// The error-budget line of one backend against the golden (also the label tests read).
pub fn budget_line(backend: &str, b: &BudgetCheck) -> String {
    format!(
        "{backend} vs golden budget: {:.1e} ({}), error/budget {:.2}{}",
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

/// The summary line of one capture's triage (also the label tests read).
pub fn triage_line(x: &CrossComparison, t: &CaptureTriage) -> String {
    let tt = &t.triage;
    format!(
        "Top-k triage, {} vs {}: rows differing {} of {}; tie flip {}, near tie {}, real {}",
        x.test, x.reference, tt.rows_differing, tt.rows, tt.tie_flips, tt.near_ties, tt.real
    )
}

/// A score gap as the triage table shows it (infinite: a score was unknown).
fn fmt_gap(v: f32) -> String {
    if v.is_finite() {
        format!("{v:.4e}")
    } else {
        "unknown".into()
    }
}

/// The reference's margin at the k boundary: NaN is the difference of two -inf scores (masked
/// positions tie at the boundary), +inf a finite k-th score over a masked (k+1)-th.
fn fmt_margin(v: f32) -> String {
    if v.is_nan() {
        "0 (-inf tie)".into()
    } else if v.is_infinite() {
        "inf".into()
    } else {
        format!("{v:.4e}")
    }
}

fn fmt_indices(v: &[i64]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
    }
}

/// Rows of the per-row disagreement table drawn at most (a real-size capture may differ in
/// thousands of rows; the counts above cover all of them).
pub const TRIAGE_ROWS_SHOWN: usize = 200;

/// The triage of the selected index capture: counts, then one row per disagreement with the
/// indices only one side picked, its class, score gap and the reference's boundary margin.
fn triage_ui(ui: &mut egui::Ui, r: &CaptureResult) {
    for (k, (x, t)) in r.triages().enumerate() {
        let tt = &t.triage;
        ui.colored_label(
            if tt.real > 0 {
                theme::FAIL
            } else if tt.rows_differing > 0 {
                theme::WARN
            } else {
                theme::PASS
            },
            triage_line(x, t),
        );
        if !t.scores_known && tt.rows_differing > 0 {
            ui.colored_label(
                theme::WARN,
                "The reference backend emitted no scores for this capture (its diagnostic \
                 captures are off): differing rows count as real and their gaps are unknown.",
            );
        }
        if tt.details.is_empty() {
            continue;
        }
        egui::ScrollArea::vertical()
            .id_salt(("triage_scroll", k))
            .max_height(220.0)
            .show(ui, |ui| {
                egui::Grid::new(("triage_grid", k))
                    .striped(true)
                    .show(ui, |ui| {
                        for h in [
                            "row",
                            "reference only",
                            "test only",
                            "class",
                            "score gap",
                            "boundary margin",
                        ] {
                            ui.strong(h);
                        }
                        ui.end_row();
                        for d in tt.details.iter().take(TRIAGE_ROWS_SHOWN) {
                            ui.label(format!("row {}", d.row));
                            ui.label(fmt_indices(&d.reference_only));
                            ui.label(fmt_indices(&d.test_only));
                            let (class, color) = if !t.scores_known {
                                ("unscored".to_string(), theme::WARN)
                            } else {
                                let c = match d.class {
                                    crate::session::triage::TopkClass::Real => theme::FAIL,
                                    _ => theme::WARN,
                                };
                                (d.class.to_string(), c)
                            };
                            ui.colored_label(color, class);
                            ui.label(fmt_gap(d.score_gap));
                            ui.label(d.boundary_margin.map_or("-".into(), fmt_margin));
                            ui.end_row();
                        }
                    });
                if tt.details.len() > TRIAGE_ROWS_SHOWN {
                    ui.weak(format!(
                        "… {} more differing rows",
                        tt.details.len() - TRIAGE_ROWS_SHOWN
                    ));
                }
            });
    }
}

/// Draw the detail area.
pub fn detail_ui(ui: &mut egui::Ui, app: &mut GoldenLensApp) {
    let Some(i) = app.selected else {
        ui.label("Select a capture in the list or on the plot to see its details.");
        return;
    };
    let Some(r) = app.results.get(i) else {
        return;
    };
    let Some(golden) = app.golden.as_ref().map(|g| g.golden.clone()) else {
        return;
    };
    ui.horizontal(|ui| {
        ui.heading(format!("Selected: {}", r.label()));
        ui.label(format!(
            "{} · {} · shape {:?}",
            r.step,
            r.kind.label(),
            r.shape
        ));
    });
    egui::CollapsingHeader::new("Metrics")
        .default_open(true)
        .show(ui, |ui| {
            let lines = |ui: &mut egui::Ui, name: &str, c: &Comparison| {
                for (k, line) in metric_lines(name, c).into_iter().enumerate() {
                    if k == 0 {
                        ui.colored_label(theme::verdict_color(c.pass), line);
                    } else {
                        ui.label(line);
                    }
                }
            };
            for b in &r.per_backend {
                let Some(c) = &b.vs_golden else {
                    continue;
                };
                lines(ui, &format!("{} vs golden", b.backend), c);
                if let Some(bc) = &b.budget {
                    ui.colored_label(
                        theme::verdict_color(bc.within()),
                        budget_line(&b.backend, bc),
                    );
                }
            }
            for x in &r.cross {
                lines(ui, &format!("{} vs {}", x.test, x.reference), &x.cmp);
            }
            if r.comparisons().is_empty() {
                ui.label("Not in the golden: nothing to compare against");
            }
        });
    let n_violations = r.violation_count();
    if n_violations > 0 {
        egui::CollapsingHeader::new(format!("Invariant violations ({n_violations})"))
            .default_open(true)
            .show(ui, |ui| {
                egui::ScrollArea::vertical()
                    .id_salt("violations_scroll")
                    .max_height(160.0)
                    .show(ui, |ui| {
                        for (backend, v) in r.violations().take(VIOLATIONS_SHOWN) {
                            ui.colored_label(theme::FAIL, violation_line(backend, v));
                        }
                        if n_violations > VIOLATIONS_SHOWN {
                            ui.weak(format!(
                                "… {} more violations",
                                n_violations - VIOLATIONS_SHOWN
                            ));
                        }
                    });
            });
    }
    ui.horizontal(|ui| {
        if ui.button("Export .npy…").clicked() {
            app.commands.push(UiCommand::PickFile(FileKind::ExportNpy));
        }
        if ui
            .button("Export .npy to path")
            .on_hover_text("Write the selected capture (test side) to the path in the path field")
            .clicked()
            && !app.path_field.trim().is_empty()
        {
            app.commands
                .push(UiCommand::ExportSelectedNpy(PathBuf::from(
                    app.path_field.trim(),
                )));
        }
        ui.separator();
        let names: Vec<String> = r.per_backend.iter().map(|b| b.backend.clone()).collect();
        if names.len() > 1 {
            let text = ui.label("Test:");
            egui::ComboBox::from_id_salt("test_backend")
                .selected_text(names[app.views.test_backend.min(names.len() - 1)].clone())
                .show_ui(ui, |ui| {
                    for (k, n) in names.iter().enumerate() {
                        ui.selectable_value(&mut app.views.test_backend, k, n);
                    }
                })
                .response
                .labelled_by(text.id);
            ui.radio_value(
                &mut app.views.reference,
                ReferenceChoice::Golden,
                "vs golden",
            );
            ui.radio_value(
                &mut app.views.reference,
                ReferenceChoice::FirstBackend,
                format!("vs {}", names[0]),
            );
        } else {
            ui.weak(format!(
                "test = {}, reference = golden",
                names.first().map_or("-", String::as_str)
            ));
        }
    });
    ui.horizontal(|ui| {
        for v in DetailView::ALL {
            let enabled = views::applies(v, r);
            let resp = ui.add_enabled(enabled, egui::Button::selectable(app.view == v, v.title()));
            if resp.clicked() {
                app.commands.push(UiCommand::SetDetailView(v));
            }
        }
    });
    ui.separator();
    let results = &app.results;
    egui::ScrollArea::vertical()
        .id_salt("detail_scroll")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            // An index capture's top-k triage scrolls with the view, above it.
            if r.triages().next().is_some() {
                egui::CollapsingHeader::new("Top-k triage")
                    .default_open(true)
                    .show(ui, |ui| triage_ui(ui, r));
                ui.separator();
            }
            view_ui(ui, app.view, &golden, results, r, &mut app.views)
        });
}

/// The chosen view of `r`.
fn view_ui(
    ui: &mut egui::Ui,
    view: DetailView,
    golden: &crate::golden::Golden,
    results: &[CaptureResult],
    r: &CaptureResult,
    state: &mut views::ViewState,
) {
    match view {
        DetailView::Values => views::values::values_ui(ui, golden, r, state),
        DetailView::TopK => views::topk::topk_ui(ui, golden, results, r, state),
        DetailView::WindowMask => views::window_mask::window_mask_ui(ui, golden, results, r, state),
        DetailView::HcMix => views::hc_mix::hc_mix_ui(ui, golden, results, r, state),
        DetailView::Moe => views::moe::moe_ui(ui, golden, results, r, state),
    }
}
