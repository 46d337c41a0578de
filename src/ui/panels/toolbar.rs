//! The file row: open a golden or GGUF by dialog or typed path, go back to the embedded golden,
//! see what is open and which weights the backends run on (an opened GGUF's, or the golden's
//! filler, which the user can go back to), and switch between the dark and the light theme.

use crate::ui::app::AppState;
use crate::ui::commands::{FileKind, UiCommand, UiCommandSender};
use eframe::egui;
use std::path::PathBuf;

/// Draw the file row.
pub fn toolbar_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    ui.horizontal_wrapped(|ui| {
        ui.strong("golden-lens");
        if ui.button("Open golden…").clicked() {
            tx.send_ui(UiCommand::PickFile(FileKind::Golden));
        }
        if ui.button("Open GGUF…").clicked() {
            tx.send_ui(UiCommand::PickFile(FileKind::Gguf));
        }
        if ui.button("Embedded golden").clicked() {
            tx.send_ui(UiCommand::OpenEmbeddedGolden);
        }
        ui.separator();
        let label = ui.label("Path:");
        let mut text = state.path_field.clone();
        let field = ui
            .add(
                egui::TextEdit::singleline(&mut text)
                    .hint_text("golden .json or .gguf")
                    .desired_width(220.0),
            )
            .labelled_by(label.id);
        if text != state.path_field {
            tx.send_ui(UiCommand::SetPathField(text.clone()));
        }
        let enter = field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        if (ui.button("Open path").clicked() || enter) && !text.trim().is_empty() {
            tx.send_ui(UiCommand::OpenPath(PathBuf::from(text.trim())));
        }
        ui.separator();
        let opened = match (&state.golden, &state.loading) {
            (_, Some(l)) => format!("Loading {l}…"),
            (Some(g), None) => format!("Golden: {}", g.label),
            (None, None) => "No golden open".to_string(),
        };
        ui.label(opened);
        ui.separator();
        ui.label(state.weights_label());
        if state.weights.is_some()
            && ui
                .button("Use golden weights")
                .on_hover_text(
                    "Rebuild the backends on the golden's filler weights instead of the GGUF's",
                )
                .clicked()
        {
            tx.send_ui(UiCommand::UseGoldenWeights);
        }
        ui.separator();
        let other = state.theme.toggled();
        if ui
            .button(format!("{} theme", other.label()))
            .on_hover_text("Switch between the dark and the light theme")
            .clicked()
        {
            tx.send_ui(UiCommand::SetTheme(other));
        }
    });
    if let Some(g) = &state.gguf_summary {
        ui.label(g.as_str());
    }
}
