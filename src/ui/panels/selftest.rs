//! The self-test window: the same table `golden-lens selftest` prints, one row per planted
//! fault, with the verdict as text (and colour) and a summary line tests read by label.

use crate::ui::app::AppState;
use crate::ui::commands::{JobKind, UiCommand, UiCommandSender};
use crate::ui::theme;
use eframe::egui;

/// Draw the self-test window when it is open.
pub fn selftest_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    let st = &state.selftest;
    if !st.open {
        return;
    }
    let palette = theme::palette(ui.ctx());
    egui::Window::new("Self-test")
        .collapsible(false)
        .show(ui.ctx(), |ui| {
            if st.running {
                super::run_controls::job_bar_ui(ui, JobKind::Selftest, &st.clock, tx);
            }
            match &st.result {
                None if st.running => {}
                None => {
                    ui.label("No self-test result (the run was cancelled).");
                }
                Some(Err(e)) => {
                    ui.colored_label(palette.fail_text, format!("Self-test could not run: {e}"));
                }
                Some(Ok(rows)) => {
                    let misses = rows.iter().filter(|r| !r.ok).count();
                    ui.colored_label(
                        palette.verdict(misses == 0),
                        format!("Self-test: {} passed, {misses} failed", rows.len() - misses),
                    );
                    egui::Grid::new("selftest_grid")
                        .striped(true)
                        .show(ui, |ui| {
                            for h in [
                                "backend",
                                "fault",
                                "planted at",
                                "strict",
                                "atlas",
                                "first failure",
                                "result",
                            ] {
                                ui.strong(h);
                            }
                            ui.end_row();
                            for r in rows {
                                ui.label(&r.backend);
                                ui.label(&r.kind);
                                ui.label(&r.planted_at);
                                ui.label(if r.caught { "yes" } else { "NO" });
                                ui.label(if r.caught_by_atlas_bars { "yes" } else { "no" });
                                ui.label(r.first_failure.as_deref().unwrap_or("-"));
                                ui.colored_label(
                                    palette.verdict(r.ok),
                                    if r.ok { "ok" } else { "MISS" },
                                );
                                ui.end_row();
                            }
                        });
                }
            }
            if ui.button("Close self-test").clicked() {
                tx.send_ui(UiCommand::CloseSelftest);
            }
        });
}
