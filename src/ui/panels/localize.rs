//! The Localize window: where is the error *born*? It runs the session's localisation on a
//! worker thread (the app's test backend, or a CPU oracle with a planted fault, against the CPU
//! oracle's full tensors) and shows, per regime and step, the input, chained and local error as
//! ratios to the Atlas tolerance and the gain, with the first local divergence named and
//! highlighted. Clicking a capture selects it in the main view; the optional counterfactual pins
//! the reference's selections from a layer on and shows its verdict.

use crate::session::controller::{LocalizeOutcome, LocalizeRequest};
use crate::session::localize::StepError;
use crate::ui::app::AppState;
use crate::ui::commands::{JobKind, UiCommand, UiCommandSender};
use crate::ui::theme;
use eframe::egui;

/// The window's settings (changed through [`UiCommand::SetLocalizeSettings`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalizeSettings {
    /// Faults to plant into a CPU oracle test backend, `KIND@CAPTURE`, comma separated; empty:
    /// localise the app's own test backend.
    pub plant: String,
    /// Judge local error with the Atlas bars instead of strict bf16 bit-exactness.
    pub atlas: bool,
    /// Run the counterfactual from `pin_from`.
    pub pin: bool,
    pub pin_from: usize,
    /// Show only steps with some error.
    pub only_with_error: bool,
}

impl LocalizeSettings {
    /// The request the window's settings describe.
    pub fn request(&self) -> LocalizeRequest {
        LocalizeRequest {
            plant: self
                .plant
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            atlas: self.atlas,
            pin_from: self.pin.then_some(self.pin_from),
        }
    }
}

/// The window's state and its last result.
#[derive(Debug, Default)]
pub struct LocalizeState {
    /// The window is shown.
    pub open: bool,
    pub settings: LocalizeSettings,
    /// Bumped by every run; a result from an older run is dropped.
    pub generation: u64,
    /// A run is in flight.
    pub running: bool,
    /// The last run's result (what it ran and what it found, or why it could not run).
    pub result: Option<Result<LocalizeOutcome, String>>,
    pub clock: crate::ui::app::JobClock,
}

/// A ratio to tolerance as the table shows it: `0` when exact, else three significant digits.
pub fn fmt_ratio(r: f64) -> String {
    if r == 0.0 {
        "0".into()
    } else if r.is_infinite() {
        "inf".into()
    } else if r.is_nan() {
        "NaN".into()
    } else {
        format!("{r:.3e}")
    }
}

/// The gain column: `inf` where error appears from exact inputs, `-` where there is none.
pub fn fmt_gain(g: f64) -> String {
    if g.is_infinite() {
        "inf".into()
    } else if g == 0.0 {
        "-".into()
    } else {
        format!("{g:.2}")
    }
}

/// The verdict line (also the label tests read).
pub fn verdict_line(o: &LocalizeOutcome) -> String {
    let l = &o.localization;
    match l.first_local_divergence.and_then(|i| l.steps.get(i)) {
        Some(e) => format!(
            "First local divergence: {} {} at {} ({}), local error {}× its tolerance",
            e.regime,
            e.step,
            e.worst_capture,
            if e.worst_location.is_empty() {
                "whole tensor"
            } else {
                e.worst_location.as_str()
            },
            fmt_ratio(e.local_ratio)
        ),
        None => "No local divergence: every step's local error is within tolerance".into(),
    }
}

fn has_error(e: &StepError) -> bool {
    e.input_ratio > 0.0 || e.chained_ratio > 0.0 || e.local_ratio > 0.0 || e.local_breaks
}

/// Draw the window when it is open.
pub fn localize_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    let l = &state.localize;
    if !l.open {
        return;
    }
    let palette = theme::palette(ui.ctx());
    let n_layers = state
        .golden
        .as_ref()
        .map_or(1, |g| g.golden.fixture.n_layers.max(1));
    let mut open = true;
    let mut settings = l.settings.clone();
    egui::Window::new("Localize divergences")
        .collapsible(false)
        .resizable(true)
        .default_width(900.0)
        .default_pos(egui::pos2(360.0, 120.0))
        .open(&mut open)
        .show(ui.ctx(), |ui| {
            ui.weak(
                "Each step runs chained (carrying its own state) and isolated (inputs and state \
                 reseeded from the oracle). Errors are worst error / Atlas tolerance; gain = \
                 chained output error / input error.",
            );
            ui.horizontal_wrapped(|ui| {
                let label = ui.label("Plant fault:");
                ui.add(
                    egui::TextEdit::singleline(&mut settings.plant)
                        .hint_text("e.g. bitflip@L2.attn_out (empty: the app's test backend)")
                        .desired_width(300.0),
                )
                .labelled_by(label.id);
                ui.checkbox(&mut settings.atlas, "Atlas bars (not bit-exact)")
                    .on_hover_text(
                        "Off: an oracle under test is held to bf16 bit-exactness and another \
                         backend (the GPU) to the GPU policy against the oracle",
                    );
                ui.checkbox(&mut settings.pin, "Pin selections from layer");
                ui.add_enabled(
                    settings.pin,
                    egui::DragValue::new(&mut settings.pin_from).range(0..=n_layers - 1),
                )
                .on_hover_text("First layer whose routing and index top-k are pinned");
                if ui
                    .add_enabled(!l.running, egui::Button::new("Run localization"))
                    .clicked()
                {
                    tx.send_ui(UiCommand::RunLocalize(settings.request()));
                }
            });
            ui.separator();
            if l.running {
                super::run_controls::job_bar_ui(ui, JobKind::Localize, &l.clock, tx);
            }
            match &l.result {
                None if !l.running => {
                    ui.label("No localization yet: press Run localization.");
                }
                None => {}
                Some(Err(e)) => {
                    ui.colored_label(
                        palette.fail_text,
                        format!("Localization could not run: {e}"),
                    );
                }
                Some(Ok(o)) => outcome_ui(ui, palette, o, &mut settings.only_with_error, tx),
            }
            if ui.button("Close localization").clicked() {
                tx.send_ui(UiCommand::CloseLocalize);
            }
        });
    if settings != l.settings {
        tx.send_ui(UiCommand::SetLocalizeSettings(settings));
    }
    if !open {
        tx.send_ui(UiCommand::CloseLocalize);
    }
}

fn outcome_ui(
    ui: &mut egui::Ui,
    palette: &crate::ui::theme::Palette,
    o: &LocalizeOutcome,
    only_with_error: &mut bool,
    tx: &dyn UiCommandSender,
) {
    let l = &o.localization;
    ui.label(format!("Reference: {}; test: {}", o.reference, o.test));
    let first = l.first_local_divergence.and_then(|i| l.steps.get(i));
    ui.horizontal_wrapped(|ui| {
        ui.colored_label(palette.verdict(first.is_none()), verdict_line(o));
        if let Some(e) = first {
            let label = format!("{}/{}", e.regime, e.worst_capture);
            if ui
                .button(format!("Show {label}"))
                .on_hover_text("Select this capture in the main view")
                .clicked()
            {
                tx.send_ui(UiCommand::SelectCaptureLabel(label));
            }
        }
    });
    if let Some(c) = &o.counterfactual {
        let ok = c.supported && (c.unpinned_ratio <= 1.0 || c.pinned_ratio <= 1.0);
        ui.colored_label(
            if ok {
                palette.pass_text
            } else {
                palette.warn_text
            },
            format!("Pinned from layer {}: {}", c.from_layer, c.verdict),
        );
    }
    ui.checkbox(only_with_error, "Only steps with error");
    egui::ScrollArea::both()
        .id_salt("localize_scroll")
        .max_height(460.0)
        .min_scrolled_height(360.0)
        .auto_shrink([false, true])
        .show(ui, |ui| {
            egui::Grid::new("localize_grid")
                .striped(true)
                .show(ui, |ui| {
                    for h in [
                        "regime",
                        "step",
                        "input",
                        "chained",
                        "local",
                        "gain",
                        "capture",
                        "worst element",
                        "verdict",
                    ] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    let table_rows = l.steps.iter().enumerate();
                    for (i, e) in table_rows {
                        if *only_with_error && !has_error(e) {
                            continue;
                        }
                        let is_first = l.first_local_divergence == Some(i);
                        let color = if is_first {
                            palette.fail_text
                        } else if e.local_breaks {
                            palette.warn_text
                        } else {
                            palette.text
                        };
                        let text = |s: String| egui::RichText::new(s).color(color);
                        ui.label(text(e.regime.clone()));
                        ui.label(text(e.step.to_string()));
                        ui.label(text(fmt_ratio(e.input_ratio)));
                        ui.label(text(fmt_ratio(e.chained_ratio)));
                        ui.label(text(fmt_ratio(e.local_ratio)));
                        ui.label(text(fmt_gain(e.gain)));
                        if e.worst_capture.is_empty() {
                            ui.label("-");
                        } else if ui
                            .add(egui::Button::new(text(e.worst_capture.clone())).small())
                            .on_hover_text(format!(
                                "Select {}/{} in the main view",
                                e.regime, e.worst_capture
                            ))
                            .clicked()
                        {
                            tx.send_ui(UiCommand::SelectCaptureLabel(format!(
                                "{}/{}",
                                e.regime, e.worst_capture
                            )));
                        }
                        ui.label(text(if e.worst_location.is_empty() {
                            "-".into()
                        } else {
                            e.worst_location.clone()
                        }));
                        ui.label(text(
                            if is_first {
                                "first local divergence"
                            } else if e.local_breaks {
                                "local error breaks"
                            } else {
                                "ok"
                            }
                            .into(),
                        ));
                        ui.end_row();
                    }
                });
        });
}
