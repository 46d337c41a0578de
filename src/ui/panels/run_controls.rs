//! Run controls: run all, step, run to a layer, reset, cancel; chained or isolated mode; strict
//! policies; progress; the pass/fail summary and the first divergence; the error-budget and
//! invariant counts; the run's top-k triage counts; exports; the Self-test and Localize windows.

use crate::session::controller::{first_divergence, Request, TriageTotals};
use crate::session::Mode;
use crate::ui::app::GoldenLensApp;
use crate::ui::commands::{FileKind, UiCommand};
use crate::ui::theme;
use eframe::egui;
use std::path::PathBuf;

/// Draw the run row and the summary row.
pub fn run_controls_ui(ui: &mut egui::Ui, app: &mut GoldenLensApp) {
    let busy = app.progress.busy;
    ui.horizontal(|ui| {
        let can_run = app.controller.is_some() && !busy && !app.progress.finished;
        if ui
            .add_enabled(can_run, egui::Button::new("Run all"))
            .clicked()
        {
            app.push(UiCommand::Run(Request::RunAll));
        }
        if ui.add_enabled(can_run, egui::Button::new("Step")).clicked() {
            app.push(UiCommand::Run(Request::StepOne));
        }
        let n_layers = app
            .golden
            .as_ref()
            .map_or(1, |g| g.golden.fixture.n_layers.max(1));
        if ui
            .add_enabled(can_run, egui::Button::new("Run to layer"))
            .clicked()
        {
            app.push(UiCommand::Run(Request::RunToLayer(app.run_to_layer)));
        }
        ui.add(egui::DragValue::new(&mut app.run_to_layer).range(0..=n_layers - 1))
            .on_hover_text("Layer to run to");
        if ui
            .add_enabled(
                app.controller.is_some() && !busy,
                egui::Button::new("Reset"),
            )
            .clicked()
        {
            app.push(UiCommand::Run(Request::Reset));
        }
        if ui.add_enabled(busy, egui::Button::new("Cancel")).clicked() {
            app.push(UiCommand::Cancel);
        }
        ui.separator();
        for (mode, text) in [(Mode::Chained, "Chained"), (Mode::Isolated, "Isolated")] {
            if ui
                .add_enabled(!busy, egui::RadioButton::new(app.mode == mode, text))
                .clicked()
                && app.mode != mode
            {
                app.push(UiCommand::Run(Request::SetMode(mode)));
            }
        }
        let mut strict = app.strict;
        if ui
            .add_enabled(
                !busy,
                egui::Checkbox::new(&mut strict, "Strict (bf16 bit-exact)"),
            )
            .changed()
        {
            app.push(UiCommand::Run(Request::SetStrict(strict)));
        }
        ui.separator();
        if ui.button("Export failing…").clicked() {
            app.push(UiCommand::PickFile(FileKind::ExportFailing));
        }
        if ui
            .button("Export failing to path")
            .on_hover_text("Write the failing captures JSON to the path in the path field")
            .clicked()
            && !app.path_field.trim().is_empty()
        {
            app.push(UiCommand::ExportFailing(PathBuf::from(
                app.path_field.trim(),
            )));
        }
        ui.separator();
        let running = matches!(app.selftest, Some(None));
        if ui
            .add_enabled(
                app.golden.is_some() && !running,
                egui::Button::new("Self-test"),
            )
            .on_hover_text("Plant every fault kind and check each is caught at the planted capture")
            .clicked()
        {
            app.push(UiCommand::RunSelftest);
        }
        if ui
            .add_enabled(app.golden.is_some(), egui::Button::new("Localize"))
            .on_hover_text(
                "Find where the error is born: each step's input, chained and local error, and \
                 the first local divergence",
            )
            .clicked()
        {
            app.push(UiCommand::OpenLocalize);
        }
        if ui
            .add_enabled(app.golden.is_some(), egui::Button::new("Determinism"))
            .on_hover_text(
                "Run the test backend several times from fresh state and list every capture                  whose bits change (check --repeat N)",
            )
            .clicked()
        {
            app.push(UiCommand::OpenDeterminism);
        }
    });
    ui.horizontal(|ui| {
        let p = &app.progress;
        let frac = if p.steps_total > 0 {
            p.steps_done as f32 / p.steps_total as f32
        } else {
            0.0
        };
        ui.add(
            egui::ProgressBar::new(frac)
                .desired_width(160.0)
                .text(format!("{} / {} steps", p.steps_done, p.steps_total)),
        );
        let (passed, failed) = app.summary_counts();
        let state = if p.busy {
            "running"
        } else if p.finished {
            "finished"
        } else if p.steps_done > 0 {
            "paused"
        } else {
            "ready"
        };
        ui.label(format!("Status: {state}"));
        ui.colored_label(
            theme::verdict_color(failed == 0),
            format!("{passed} passed, {failed} failed"),
        );
        if let Some(last) = &p.last_step {
            ui.label(format!("Last step: {last}"));
        }
        match first_divergence(&app.results) {
            Some(r) => {
                ui.colored_label(
                    theme::FAIL,
                    format!("First divergence: {} at {}", r.label(), r.step),
                );
            }
            None if p.steps_done > 0 => {
                ui.colored_label(theme::PASS, "No divergence so far");
            }
            None => {}
        }
        if p.steps_done > 0 || !app.results.is_empty() {
            let (within, budgeted) = app.budget_counts();
            ui.colored_label(
                theme::verdict_color(within == budgeted),
                budget_summary(within, budgeted),
            )
            .on_hover_text(
                "A capture is within budget when every backend's largest error against the \
                 golden is at most what its dtype, reduction length and reference magnitude \
                 explain (as `golden-lens check` counts it)",
            );
            let violations = app.violation_count();
            ui.colored_label(
                theme::verdict_color(violations == 0),
                invariant_summary(violations),
            )
            .on_hover_text(
                "Properties the graph guarantees whatever the weights (comb rows and columns sum \
                 to 1, routing weights to route_scale, indices in range, masks as the reference \
                 attends), checked on each backend's own captures",
            );
        }
        if let Some((mean, max)) = app
            .frame_time_secs()
            .filter(|_| app.options.show_frame_time)
        {
            ui.weak(format!(
                "frame {:.1} ms (max {:.1} ms)",
                mean * 1e3,
                max * 1e3
            ));
        }
    });
    let triage = app.triage_totals();
    if triage.captures > 0 {
        ui.colored_label(
            if triage.real > 0 {
                theme::FAIL
            } else if triage.rows_differing > 0 {
                theme::WARN
            } else {
                theme::PASS
            },
            triage_summary(&triage),
        );
    }
}

/// The run's top-k triage line (also the label tests read).
pub fn triage_summary(t: &TriageTotals) -> String {
    let mut s = format!(
        "Top-k triage: {} of {} rows differ in {} index captures (tie flip {}, near tie {}, real {})",
        t.rows_differing, t.rows, t.captures, t.tie_flips, t.near_ties, t.real
    );
    if t.unscored_rows > 0 {
        s.push_str(&format!(
            "; {} differing rows have no reference scores and count as real",
            t.unscored_rows
        ));
    }
    s
}

/// The run's error-budget line (also the label tests read).
pub fn budget_summary(within: usize, budgeted: usize) -> String {
    format!("Error budgets: {within} of {budgeted} captures within budget")
}

/// The run's invariant line (also the label tests read).
pub fn invariant_summary(violations: usize) -> String {
    format!("Invariants: {violations} violations in the backends' own captures")
}
