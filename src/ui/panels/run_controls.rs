//! Run controls: run all, step, run to a layer, reset, cancel; chained or isolated mode; strict
//! policies; exports; the Self-test, Localize and Determinism windows. Under them the progress
//! of the run (step, elapsed time, ETA, Cancel) and of every background job, the pass/fail
//! summary, the first divergence, the error-budget and invariant counts and the top-k triage.

use crate::session::controller::{first_divergence, Request, TriageTotals};
use crate::session::Mode;
use crate::ui::app::{AppState, JobClock};
use crate::ui::commands::{FileKind, JobKind, UiCommand, UiCommandSender};
use crate::ui::theme;
use eframe::egui;
use std::path::PathBuf;

/// Width of a progress bar.
const PROGRESS_WIDTH_PT: f32 = 300.0;

/// Seconds as the progress bars show them.
pub fn fmt_secs(s: f64) -> String {
    if s < 60.0 {
        format!("{s:.1} s")
    } else {
        format!("{}:{:04.1}", (s / 60.0).floor() as u64, s % 60.0)
    }
}

/// The run's progress text (also the bar's accessibility label).
pub fn run_progress_text(state: &AppState) -> String {
    let p = &state.progress;
    let mut s = format!("{} / {} steps", p.steps_done, p.steps_total);
    if let Some(last) = &p.last_step {
        s.push_str(&format!(", last {last}"));
    }
    if p.busy {
        if let Some(e) = state.run_clock.elapsed_secs() {
            s.push_str(&format!(", {} elapsed", fmt_secs(e)));
        }
        match state.run_clock.eta_secs(p) {
            Some(eta) => s.push_str(&format!(", ETA {}", fmt_secs(eta))),
            None => s.push_str(", ETA after the first step"),
        }
    } else if let Some(t) = state.run_clock.last_secs.filter(|_| p.steps_done > 0) {
        s.push_str(&format!(", took {}", fmt_secs(t)));
    }
    s
}

/// A background job's progress text.
pub fn job_progress_text(kind: JobKind, clock: &JobClock) -> String {
    let elapsed = clock.elapsed_secs().unwrap_or(0.0);
    match clock.eta_secs() {
        Some(eta) => format!(
            "{}: {} elapsed, ETA {} (from the last run)",
            kind.label(),
            fmt_secs(elapsed),
            fmt_secs(eta)
        ),
        None => format!(
            "{}: {} elapsed (no earlier run to estimate from)",
            kind.label(),
            fmt_secs(elapsed)
        ),
    }
}

/// A background job's bar with Cancel (export cannot be cancelled: it writes one file).
pub fn job_bar_ui(ui: &mut egui::Ui, kind: JobKind, clock: &JobClock, tx: &dyn UiCommandSender) {
    ui.horizontal(|ui| {
        let text = job_progress_text(kind, clock);
        let frac = match (clock.elapsed_secs(), clock.last_secs) {
            (Some(e), Some(l)) if l > 0.0 => (e / l).min(0.99) as f32,
            _ => 0.0,
        };
        ui.add(
            egui::ProgressBar::new(frac)
                .desired_width(PROGRESS_WIDTH_PT)
                .animate(true)
                .text(text),
        );
        if kind != JobKind::Export
            && ui
                .button(format!("Cancel {}", kind.label()))
                .on_hover_text("Stop waiting: the job's result is dropped when it arrives")
                .clicked()
        {
            tx.send_ui(UiCommand::CancelJob(kind));
        }
    });
}

/// Draw the run row, the progress rows and the summary row.
pub fn run_controls_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    let palette = theme::palette(ui.ctx());
    let busy = state.progress.busy;
    ui.horizontal_wrapped(|ui| {
        let can_run = state.session && !busy && !state.progress.finished;
        if ui
            .add_enabled(can_run, egui::Button::new("Run all"))
            .clicked()
        {
            tx.send_ui(UiCommand::Run(Request::RunAll));
        }
        if ui.add_enabled(can_run, egui::Button::new("Step")).clicked() {
            tx.send_ui(UiCommand::Run(Request::StepOne));
        }
        let n_layers = state.dims().map_or(1, |d| d.n_layers.max(1));
        if ui
            .add_enabled(can_run, egui::Button::new("Run to layer"))
            .clicked()
        {
            tx.send_ui(UiCommand::Run(Request::RunToLayer(state.run_to_layer)));
        }
        let mut layer = state.run_to_layer;
        if ui
            .add(egui::DragValue::new(&mut layer).range(0..=n_layers - 1))
            .on_hover_text("Layer to run to")
            .changed()
        {
            tx.send_ui(UiCommand::SetRunToLayer(layer));
        }
        if ui
            .add_enabled(state.session && !busy, egui::Button::new("Reset"))
            .clicked()
        {
            tx.send_ui(UiCommand::Run(Request::Reset));
        }
        ui.separator();
        for (mode, text) in [(Mode::Chained, "Chained"), (Mode::Isolated, "Isolated")] {
            if ui
                .add_enabled(!busy, egui::RadioButton::new(state.mode == mode, text))
                .clicked()
                && state.mode != mode
            {
                tx.send_ui(UiCommand::Run(Request::SetMode(mode)));
            }
        }
        let mut strict = state.strict;
        if ui
            .add_enabled(
                !busy,
                egui::Checkbox::new(&mut strict, "Strict (bf16 bit-exact)"),
            )
            .changed()
        {
            tx.send_ui(UiCommand::Run(Request::SetStrict(strict)));
        }
        ui.separator();
        if ui.button("Export failing…").clicked() {
            tx.send_ui(UiCommand::PickFile(FileKind::ExportFailing));
        }
        if ui
            .button("Export failing to path")
            .on_hover_text("Write the failing captures JSON to the path in the path field")
            .clicked()
            && !state.path_field.trim().is_empty()
        {
            tx.send_ui(UiCommand::ExportFailing(PathBuf::from(
                state.path_field.trim(),
            )));
        }
        ui.separator();
        if ui
            .add_enabled(
                state.golden.is_some() && !state.selftest.running,
                egui::Button::new("Self-test"),
            )
            .on_hover_text("Plant every fault kind and check each is caught at the planted capture")
            .clicked()
        {
            tx.send_ui(UiCommand::RunSelftest);
        }
        if ui
            .add_enabled(state.golden.is_some(), egui::Button::new("Localize"))
            .on_hover_text(
                "Find where the error is born: each step's input, chained and local error, and \
                 the first local divergence",
            )
            .clicked()
        {
            tx.send_ui(UiCommand::OpenLocalize);
        }
        if ui
            .add_enabled(state.golden.is_some(), egui::Button::new("Determinism"))
            .on_hover_text(
                "Run the test backend several times from fresh state and list every capture \
                 whose bits change (check --repeat N)",
            )
            .clicked()
        {
            tx.send_ui(UiCommand::OpenDeterminism);
        }
    });
    ui.horizontal_wrapped(|ui| {
        let p = &state.progress;
        let frac = if p.steps_total > 0 {
            p.steps_done as f32 / p.steps_total as f32
        } else {
            0.0
        };
        let text = run_progress_text(state);
        let bar = ui.add(
            egui::ProgressBar::new(frac)
                .desired_width(PROGRESS_WIDTH_PT)
                .text(text.clone()),
        );
        bar.widget_info(|| egui::WidgetInfo::labeled(egui::Role::ProgressIndicator, true, &text));
        if ui.add_enabled(busy, egui::Button::new("Cancel")).clicked() {
            tx.send_ui(UiCommand::Cancel);
        }
        let status = if p.busy {
            "running"
        } else if p.finished {
            "finished"
        } else if p.steps_done > 0 {
            "paused"
        } else {
            "ready"
        };
        ui.label(format!("Status: {status}"));
        let (passed, failed) = state.summary_counts();
        ui.colored_label(
            palette.verdict(failed == 0),
            format!("{passed} passed, {failed} failed"),
        );
        match first_divergence(&state.results) {
            Some(r) => {
                ui.colored_label(
                    palette.fail_text,
                    format!("First divergence: {} at {}", r.label(), r.step),
                );
            }
            None if p.steps_done > 0 => {
                ui.colored_label(palette.pass_text, "No divergence so far");
            }
            None => {}
        }
        if p.steps_done > 0 || !state.results.is_empty() {
            let (within, budgeted) = state.budget_counts();
            ui.colored_label(
                palette.verdict(within == budgeted),
                budget_summary(within, budgeted),
            )
            .on_hover_text(
                "A capture is within budget when every backend's largest error against the \
                 golden is at most what its dtype, reduction length and reference magnitude \
                 explain (as `golden-lens check` counts it)",
            );
            let violations = state.violation_count();
            ui.colored_label(
                palette.verdict(violations == 0),
                invariant_summary(violations),
            )
            .on_hover_text(
                "Properties the graph guarantees whatever the weights (comb rows and columns sum \
                 to 1, routing weights to route_scale, indices in range, masks as the reference \
                 attends), checked on each backend's own captures",
            );
        }
        if let Some(line) = state
            .step_seconds_line()
            .filter(|_| state.options.show_frame_time)
        {
            ui.weak(line);
        }
        if let Some((mean, max)) = state
            .frame_time_secs()
            .filter(|_| state.options.show_frame_time)
        {
            ui.weak(format!(
                "frame {:.1} ms (max {:.1} ms)",
                mean * 1e3,
                max * 1e3
            ));
        }
    });
    let jobs = [
        (
            JobKind::Localize,
            state.localize.running,
            &state.localize.clock,
        ),
        (
            JobKind::Selftest,
            state.selftest.running,
            &state.selftest.clock,
        ),
        (
            JobKind::Determinism,
            state.determinism.running,
            &state.determinism.clock,
        ),
        (
            JobKind::Export,
            state.export.running > 0,
            &state.export.clock,
        ),
    ];
    for (kind, running, clock) in jobs {
        if running {
            job_bar_ui(ui, kind, clock, tx);
        }
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
