//! The determinism window (what `golden-lens check --repeat N` prints): the app's test backend
//! (the wgpu backend when there is one, else the oracle) runs N times from fresh state over the
//! golden's inputs; every capture whose bits change between runs is listed, apart from any error
//! against the reference.

use crate::session::determinism::Determinism;
use crate::ui::app::{AppState, JobClock};
use crate::ui::commands::{JobKind, UiCommand, UiCommandSender};
use crate::ui::theme;
use eframe::egui;

/// Runs the window offers (a run of the tiny golden takes well under a second on the oracle).
pub const MAX_RUNS: usize = 20;

/// A finished determinism run: which backend ran, and what changed.
#[derive(Debug, Clone)]
pub struct DeterminismOutcome {
    pub backend: String,
    pub report: Determinism,
}

/// The window's state.
#[derive(Debug, Clone)]
pub struct DeterminismState {
    pub open: bool,
    /// Runs to make (at least 2).
    pub runs: usize,
    pub running: bool,
    /// Bumped per request; a result of an older request is dropped.
    pub generation: u64,
    pub result: Option<Result<DeterminismOutcome, String>>,
    pub clock: JobClock,
}

impl Default for DeterminismState {
    fn default() -> Self {
        DeterminismState {
            open: false,
            runs: 3,
            running: false,
            generation: 0,
            result: None,
            clock: JobClock::default(),
        }
    }
}

/// Draw the determinism window when it is open.
pub fn determinism_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    let d = &state.determinism;
    if !d.open {
        return;
    }
    let palette = theme::palette(ui.ctx());
    let mut runs = d.runs;
    egui::Window::new("Determinism")
        .collapsible(false)
        .show(ui.ctx(), |ui| {
            ui.label(
                "Runs the test backend from fresh state several times over the golden's inputs \
                 and lists every capture whose bits change between runs.",
            );
            ui.horizontal(|ui| {
                let label = ui.label("Runs:");
                ui.add(egui::DragValue::new(&mut runs).range(2..=MAX_RUNS))
                    .labelled_by(label.id);
                if ui
                    .add_enabled(!d.running, egui::Button::new("Run determinism"))
                    .clicked()
                {
                    tx.send_ui(UiCommand::RunDeterminism(runs));
                }
            });
            if d.running {
                super::run_controls::job_bar_ui(ui, JobKind::Determinism, &d.clock, tx);
            }
            match &d.result {
                None if d.running => {}
                None => {
                    ui.label("No determinism run yet: press Run determinism.");
                }
                Some(Err(e)) => {
                    ui.colored_label(palette.fail_text, format!("Determinism could not run: {e}"));
                }
                Some(Ok(o)) => outcome_ui(ui, palette, o),
            }
            if ui.button("Close determinism").clicked() {
                tx.send_ui(UiCommand::CloseDeterminism);
            }
        });
    if runs != d.runs {
        tx.send_ui(UiCommand::SetDeterminismRuns(runs));
    }
}

fn outcome_ui(ui: &mut egui::Ui, palette: &theme::Palette, o: &DeterminismOutcome) {
    let d = &o.report;
    ui.colored_label(
        palette.verdict(d.unstable.is_empty()),
        format!(
            "Determinism: {} runs of the {} backend, {} of {} captures bitwise unstable",
            d.runs,
            o.backend,
            d.unstable.len(),
            d.captures
        ),
    );
    if d.unstable.is_empty() {
        return;
    }
    egui::ScrollArea::vertical()
        .max_height(400.0)
        .show(ui, |ui| {
            egui::Grid::new("determinism_grid")
                .striped(true)
                .show(ui, |ui| {
                    for h in [
                        "regime",
                        "capture",
                        "runs differing",
                        "most elements",
                        "first index",
                    ] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for u in &d.unstable {
                        ui.label(&u.regime);
                        ui.colored_label(palette.fail_text, &u.capture);
                        ui.label(format!("{} of {}", u.runs_differing, d.runs - 1));
                        ui.label(u.max_elements_differing.to_string());
                        ui.label(u.first_index.to_string());
                        ui.end_row();
                    }
                });
        });
}
