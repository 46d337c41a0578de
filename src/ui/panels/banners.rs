//! Banners under the toolbar: the GPU status, errors (each dismissable, naming file and field),
//! isolation gaps, and the last notice.

use crate::ui::app::GoldenLensApp;
use crate::ui::commands::UiCommand;
use crate::ui::theme;
use eframe::egui;

/// Draw the banners.
pub fn banners_ui(ui: &mut egui::Ui, app: &mut GoldenLensApp) {
    banner_ui(ui, theme::WARN_BG, &app.options.gpu.banner());
    let mut dismiss = None;
    for (i, e) in app.errors.iter().enumerate() {
        egui::Frame::new()
            .fill(theme::ERROR_BG)
            .inner_margin(4.0)
            .show(ui, |ui| {
                ui.horizontal(|ui| {
                    ui.colored_label(theme::FAIL, format!("Error: {e}"));
                    if ui
                        .small_button("Dismiss")
                        .on_hover_text("Dismiss this error")
                        .clicked()
                    {
                        dismiss = Some(i);
                    }
                });
            });
    }
    if let Some(i) = dismiss {
        app.push(UiCommand::DismissError(i));
    }
    if !app.not_isolated.is_empty() {
        banner_ui(
            ui,
            theme::WARN_BG,
            &format!(
                "Not isolated: {} steps could not be reseeded from the golden (it holds only \
                 samples); their errors include upstream error. First: {}",
                app.not_isolated.len(),
                app.not_isolated[0]
            ),
        );
    }
    if let Some(n) = &app.notice {
        ui.label(n.as_str());
    }
}

fn banner_ui(ui: &mut egui::Ui, fill: egui::Color32, text: &str) {
    egui::Frame::new()
        .fill(fill)
        .inner_margin(4.0)
        .show(ui, |ui| {
            ui.colored_label(theme::WARN, text);
        });
}
