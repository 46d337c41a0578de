//! Banners under the toolbar: the GPU status, errors (each dismissable, naming file and field),
//! isolation gaps, and the last notice.

use crate::ui::app::AppState;
use crate::ui::commands::{UiCommand, UiCommandSender};
use crate::ui::theme;
use eframe::egui;

/// Draw the banners.
pub fn banners_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    let palette = theme::palette(ui.ctx());
    ui.horizontal_wrapped(|ui| {
        banner_ui(
            ui,
            palette.warn_bg,
            palette.warn_bg_text,
            &state.options.gpu.banner(),
        );
        let triage = state.triage_totals();
        if triage.captures > 0 {
            ui.colored_label(
                palette.triage(triage.real, triage.rows_differing),
                super::run_controls::triage_summary(&triage),
            );
        }
        if let Some(n) = &state.notice {
            ui.label(n.as_str());
        }
    });
    for (i, e) in state.errors.iter().enumerate() {
        egui::Frame::new()
            .fill(palette.error_bg)
            .inner_margin(4.0)
            .show(ui, |ui| {
                ui.horizontal_wrapped(|ui| {
                    ui.colored_label(palette.error_text, format!("Error: {e}"));
                    if ui
                        .small_button("Dismiss")
                        .on_hover_text("Dismiss this error")
                        .clicked()
                    {
                        tx.send_ui(UiCommand::DismissError(i));
                    }
                });
            });
    }
    if !state.not_isolated.is_empty() {
        banner_ui(
            ui,
            palette.warn_bg,
            palette.warn_bg_text,
            &format!(
                "Not isolated: {} steps could not be reseeded from the golden (it holds only \
                 samples); their errors include upstream error. First: {}",
                state.not_isolated.len(),
                state.not_isolated[0]
            ),
        );
    }
}

fn banner_ui(ui: &mut egui::Ui, fill: egui::Color32, text_color: egui::Color32, text: &str) {
    egui::Frame::new()
        .fill(fill)
        .inner_margin(4.0)
        .show(ui, |ui| {
            ui.colored_label(text_color, text);
        });
}
