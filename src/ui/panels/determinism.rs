//! The determinism window (what `golden-lens check --repeat N` prints): the app's test backend
//! (the wgpu backend when there is one, else the oracle) runs N times from fresh state over the
//! golden's inputs; every capture whose bits change between runs is listed, apart from any error
//! against the reference.

use crate::session::determinism::Determinism;
use crate::ui::app::GoldenLensApp;
use crate::ui::commands::UiCommand;
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
}

impl Default for DeterminismState {
    fn default() -> Self {
        DeterminismState {
            open: false,
            runs: 3,
            running: false,
            generation: 0,
            result: None,
        }
    }
}

/// Draw the determinism window when it is open.
pub fn determinism_ui(ui: &mut egui::Ui, app: &mut GoldenLensApp) {
    if !app.determinism.open {
        return;
    }
    let mut runs = app.determinism.runs;
    let mut run = false;
    let mut close = false;
    egui::Window::new("Determinism")
        .collapsible(false)
        .show(ui.ctx(), |ui| {
            ui.label(
                "Runs the test backend from fresh state several times over the golden's inputs \
                 and lists every capture whose bits change between runs.",
            );
            ui.horizontal(|ui| {
                ui.label("Runs:");
                ui.add(egui::DragValue::new(&mut runs).range(2..=MAX_RUNS));
                run = ui
                    .add_enabled(
                        !app.determinism.running,
                        egui::Button::new("Run determinism"),
                    )
                    .clicked();
            });
            match &app.determinism.result {
                None if app.determinism.running => {
                    ui.horizontal(|ui| {
                        ui.spinner();
                        ui.label("Determinism running…");
                    });
                }
                None => {
                    ui.label("No determinism run yet: press Run determinism.");
                }
                Some(Err(e)) => {
                    ui.colored_label(theme::FAIL, format!("Determinism could not run: {e}"));
                }
                Some(Ok(o)) => outcome_ui(ui, o),
            }
            close = ui.button("Close determinism").clicked();
        });
    app.determinism.runs = runs;
    if run {
        app.push(UiCommand::RunDeterminism(runs));
    }
    if close {
        app.push(UiCommand::CloseDeterminism);
    }
}

fn outcome_ui(ui: &mut egui::Ui, o: &DeterminismOutcome) {
    let d = &o.report;
    ui.colored_label(
        theme::verdict_color(d.unstable.is_empty()),
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
                        ui.colored_label(theme::FAIL, &u.capture);
                        ui.label(format!("{} of {}", u.runs_differing, d.runs - 1));
                        ui.label(u.max_elements_differing.to_string());
                        ui.label(u.first_index.to_string());
                        ui.end_row();
                    }
                });
        });
}
