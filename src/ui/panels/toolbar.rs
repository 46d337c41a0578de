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
        if ui
            .button("Open dump…")
            .on_hover_text(
                "Replay another engine's dump (safetensors, .npz, .npy, a raw-dump manifest) as \
                 the test side beside the oracle",
            )
            .clicked()
        {
            tx.send_ui(UiCommand::PickFile(FileKind::Captures));
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
        let opened = match (&state.golden, &state.loading, &state.prompt_run) {
            (_, Some(l), _) => format!("Loading {l}…"),
            (Some(g), None, _) => format!("Golden: {}", g.label),
            (None, None, Some(_)) => "No golden: the cpu oracle is the live reference".to_string(),
            (None, None, None) => "No golden open".to_string(),
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
    prompt_row_ui(ui, state, tx);
}

/// The golden-less row: a prompt (or token ids), decode steps and a layer range, run on the
/// open GGUF with the CPU oracle as the live reference; then the prompt's ids and pieces.
/// Shown once a GGUF is open (a prompt runs on its weights and vocabulary).
fn prompt_row_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    if state.weights.is_none() && state.prompt_run.is_none() {
        return;
    }
    let mut form = state.prompt.clone();
    ui.horizontal_wrapped(|ui| {
        let label = ui.label(if form.as_ids { "Token ids:" } else { "Prompt:" });
        ui.add(
            egui::TextEdit::singleline(&mut form.text)
                .hint_text(if form.as_ids {
                    "0,17,42"
                } else {
                    "text, tokenized with the GGUF's vocabulary"
                })
                .desired_width(260.0),
        )
        .labelled_by(label.id);
        ui.checkbox(&mut form.as_ids, "ids")
            .on_hover_text("Read the field as comma- or space-separated token ids");
        let label = ui.label("Decode:");
        ui.add(egui::DragValue::new(&mut form.decode).range(0..=4096))
            .labelled_by(label.id)
            .on_hover_text("Greedy decode steps after the prefill");
        let label = ui.label("Layers:");
        ui.add(
            egui::TextEdit::singleline(&mut form.layers)
                .hint_text("all, or A-B")
                .desired_width(60.0),
        )
        .labelled_by(label.id);
        let can_run = state.weights.is_some() && !state.preparing && !state.progress.busy;
        if ui
            .add_enabled(can_run, egui::Button::new("Run prompt"))
            .on_hover_text(
                "Run the prompt on the open GGUF with no golden: the cpu oracle is the live \
                 reference and every other backend is compared with it",
            )
            .on_disabled_hover_text("Open a GGUF first; a prompt runs on its weights")
            .clicked()
        {
            tx.send_ui(UiCommand::RunPrompt);
        }
        if state.preparing {
            ui.spinner();
            ui.label("tokenizing…");
        }
    });
    if form != state.prompt {
        tx.send_ui(UiCommand::SetPromptForm(form));
    }
    if let Some(run) = &state.prompt_run {
        ui.horizontal_wrapped(|ui| {
            ui.label(format!("Prompt ids: {}", run.ids_line()));
        });
        let greedy = state.greedy_tokens();
        if !greedy.is_empty() {
            ui.horizontal_wrapped(|ui| {
                ui.label(run.decode_line(&greedy));
            });
        }
        for note in &run.notes {
            ui.weak(note.as_str());
        }
    }
}
