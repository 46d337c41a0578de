//! The file row: open a golden or GGUF by dialog or typed path, go back to the embedded golden,
//! see what is open and which weights the backends run on (an opened GGUF's, or the golden's
//! filler, which the user can go back to).

use crate::ui::app::GoldenLensApp;
use crate::ui::commands::{FileKind, UiCommand};
use eframe::egui;
use std::path::PathBuf;

/// Draw the file row.
pub fn toolbar_ui(ui: &mut egui::Ui, app: &mut GoldenLensApp) {
    ui.horizontal(|ui| {
        ui.strong("golden-lens");
        if ui.button("Open golden…").clicked() {
            app.push(UiCommand::PickFile(FileKind::Golden));
        }
        if ui.button("Open GGUF…").clicked() {
            app.push(UiCommand::PickFile(FileKind::Gguf));
        }
        if ui.button("Embedded golden").clicked() {
            app.push(UiCommand::OpenEmbeddedGolden);
        }
        ui.separator();
        let label = ui.label("Path:");
        let field = ui
            .add(
                egui::TextEdit::singleline(&mut app.path_field)
                    .hint_text("golden .json or .gguf")
                    .desired_width(260.0),
            )
            .labelled_by(label.id);
        let enter = field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        if (ui.button("Open path").clicked() || enter) && !app.path_field.trim().is_empty() {
            app.push(UiCommand::OpenPath(PathBuf::from(app.path_field.trim())));
        }
        ui.separator();
        let opened = match (&app.golden, &app.loading) {
            (_, Some(l)) => format!("Loading {l}…"),
            (Some(g), None) => format!("Golden: {}", g.label),
            (None, None) => "No golden open".to_string(),
        };
        ui.label(opened);
        ui.separator();
        ui.label(app.weights_label());
        if app.weights.is_some()
            && ui
                .button("Use golden weights")
                .on_hover_text(
                    "Rebuild the backends on the golden's filler weights instead of the GGUF's",
                )
                .clicked()
        {
            app.push(UiCommand::UseGoldenWeights);
        }
    });
    if let Some(g) = &app.gguf_summary {
        ui.label(g.as_str());
    }
}
