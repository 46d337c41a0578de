//! The kernel workbench row (the watched shader directory, the last re-check, the Profile
//! button), its shader-error banner, and the Re-check window: every capture whose verdict the
//! last re-check changed, with its error/tolerance ratio before and after.

use crate::session::rerun::Transition;
use crate::ui::app::AppState;
use crate::ui::commands::{UiCommand, UiCommandSender, WorkbenchWindow};
use crate::ui::theme;
use eframe::egui;
use std::path::PathBuf;

/// Width of the shader directory field.
const DIR_FIELD_WIDTH_PT: f32 = 260.0;

/// The workbench row and, after a bad save, its banner.
pub fn workbench_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    let palette = theme::palette(ui.ctx());
    let wb = &state.workbench;
    ui.horizontal_wrapped(|ui| {
        ui.label("Kernel workbench:");
        let mut field = wb.field.clone();
        let resp = ui.add(
            egui::TextEdit::singleline(&mut field)
                .hint_text("shader directory (shaders export DIR)")
                .desired_width(DIR_FIELD_WIDTH_PT),
        );
        resp.widget_info(|| {
            egui::WidgetInfo::text_edit(true, wb.field.as_str(), field.as_str(), "Shader directory")
        });
        if resp.changed() {
            tx.send_ui(UiCommand::SetShadersField(field.clone()));
        }
        let submitted = resp.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        if (ui
            .button("Watch")
            .on_hover_text("Watch this directory: every save that validates re-checks the run")
            .clicked()
            || submitted)
            && !field.trim().is_empty()
        {
            tx.send_ui(UiCommand::WatchShaders(PathBuf::from(field.trim())));
        }
        match &wb.dir {
            Some(d) => ui.weak(format!("watching {}", d.display())),
            None => ui.weak("not watching: the embedded kernels run"),
        };
        if let Some(rc) = &wb.recheck {
            let (broke, _) = rc.diff.counts();
            let color = if broke > 0 {
                palette.fail_text
            } else {
                palette.text
            };
            ui.colored_label(color, format!("Re-check: {}", rc.summary()));
            if ui.button("Re-check diff…").clicked() {
                tx.send_ui(UiCommand::SetWorkbenchWindow {
                    window: WorkbenchWindow::Recheck,
                    open: true,
                });
            }
        }
        if ui
            .button("Profile…")
            .on_hover_text("Per-kernel GPU times of the last run")
            .clicked()
        {
            tx.send_ui(UiCommand::SetWorkbenchWindow {
                window: WorkbenchWindow::Profile,
                open: true,
            });
        }
    });
    if let Some(e) = &wb.error {
        egui::Frame::new()
            .fill(palette.error_bg)
            .inner_margin(4.0)
            .show(ui, |ui| {
                let head = format!(
                    "Shader error at {}: not compiled; the last good kernels and results stay",
                    e.headline()
                );
                ui.colored_label(palette.error_text, egui::RichText::new(head).strong());
                ui.colored_label(
                    palette.error_text,
                    egui::RichText::new(&e.message).monospace(),
                );
            });
    }
}

/// The Re-check window.
pub fn recheck_window_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    let wb = &state.workbench;
    if !wb.diff_open {
        return;
    }
    let mut open = true;
    egui::Window::new("Re-check")
        .open(&mut open)
        .default_width(560.0)
        .show(ui.ctx(), |ui| {
            let Some(rc) = &wb.recheck else {
                ui.label("No re-check yet: save a watched shader file");
                return;
            };
            ui.label(rc.summary());
            ui.weak(format!(
                "{} rerun captures compared with the previous run; {} kept their verdict with a \
                 different error",
                rc.diff.compared, rc.diff.ratio_changed
            ));
            ui.separator();
            if rc.diff.transitions.is_empty() {
                ui.label("No capture changed its verdict");
                return;
            }
            let palette = theme::palette(ui.ctx());
            egui::ScrollArea::vertical().show(ui, |ui| {
                egui::Grid::new("recheck transitions")
                    .striped(true)
                    .show(ui, |ui| {
                        for t in &rc.diff.transitions {
                            transition_row_ui(ui, palette, t, tx);
                            ui.end_row();
                        }
                    });
            });
        });
    if !open {
        tx.send_ui(UiCommand::SetWorkbenchWindow {
            window: WorkbenchWindow::Recheck,
            open: false,
        });
    }
}

fn transition_row_ui(
    ui: &mut egui::Ui,
    palette: &theme::Palette,
    t: &Transition,
    tx: &dyn UiCommandSender,
) {
    if ui.link(&t.label).clicked() {
        tx.send_ui(UiCommand::SelectCaptureLabel(t.label.clone()));
    }
    ui.label(t.step.to_string());
    let color = if t.passes_now {
        palette.pass_text
    } else {
        palette.fail_text
    };
    let full = t.describe();
    let resp = ui.colored_label(color, t.arrow());
    resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &full));
    ui.monospace(format!("{:.3e} -> {:.3e}", t.ratio_before, t.ratio_now));
}

/// The chip a capture row shows when the last re-check changed its verdict (its accessibility
/// label is the whole transition).
pub fn transition_chip_ui(ui: &mut egui::Ui, palette: &theme::Palette, t: &Transition) {
    let (text, color) = if t.passes_now {
        ("now passes", palette.pass_text)
    } else {
        ("now fails", palette.fail_text)
    };
    let full = format!("Re-check {}", t.describe());
    let resp = ui.colored_label(color, text);
    resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &full));
    resp.on_hover_text(full);
}
