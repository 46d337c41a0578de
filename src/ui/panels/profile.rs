//! The Profile window: the GPU backend's dispatch times of the last run (the data `check
//! --profile` prints), summed per kernel family, per kernel entry point and per step, and the
//! slowest single dispatches, each sorted by time, with achieved GB/s and GFLOP/s where the
//! dispatch states its bytes and flops; narrowed to one step on request. Says how the times
//! were taken (GPU timestamp queries, or the host clock around each dispatch submitted alone).

use crate::gpu::profile::{DispatchTime, Profile, Totals};
use crate::ui::app::AppState;
use crate::ui::commands::{UiCommand, UiCommandSender, WorkbenchWindow};
use eframe::egui;

/// Single dispatches listed (the slowest first).
pub const SLOWEST_DISPATCHES: usize = 24;

/// One row's text: `what name: N dispatches, T ms, G GB/s[, F GFLOP/s]` (also its
/// accessibility label, which tests read).
pub fn totals_label(what: &str, name: &str, t: &Totals) -> String {
    let mut s = format!(
        "{what} {name}: {} dispatches, {:.3} ms, {:.3} GB/s",
        t.dispatches,
        t.seconds * 1e3,
        t.gb_per_s()
    );
    if t.flops > 0 {
        s.push_str(&format!(", {:.3} GFLOP/s", t.gflop_per_s()));
    }
    s
}

/// The profile narrowed to the dispatches of `step` (every step with None).
pub fn narrowed(p: &Profile, step: Option<&str>) -> Profile {
    match step {
        None => p.clone(),
        Some(st) => Profile {
            source: p.source,
            dispatches: p
                .dispatches
                .iter()
                .filter(|d| d.step == st)
                .cloned()
                .collect(),
        },
    }
}

/// The Profile window.
pub fn profile_window_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    let wb = &state.workbench;
    if !wb.profile_open {
        return;
    }
    let mut open = true;
    egui::Window::new("Profile")
        .open(&mut open)
        .default_width(640.0)
        .default_height(520.0)
        .show(ui.ctx(), |ui| {
            let Some(p) = &wb.profile else {
                ui.label("No GPU profile yet: it is taken while the GPU backend runs a regime");
                return;
            };
            ui.label(format!("Timing: {}", p.source));
            if let Some(a) = state.options.workbench.as_ref().and_then(|b| b.adapter()) {
                ui.weak(format!("Adapter: {a}"));
            }
            let steps = p.by_step();
            let chosen = wb.profile_step.as_deref();
            egui::ComboBox::from_label("Step")
                .selected_text(chosen.unwrap_or("every step"))
                .show_ui(ui, |ui| {
                    if ui
                        .selectable_label(chosen.is_none(), "every step")
                        .clicked()
                    {
                        tx.send_ui(UiCommand::SetProfileStep(None));
                    }
                    for (name, _) in &steps {
                        if ui
                            .selectable_label(chosen == Some(name.as_str()), name)
                            .clicked()
                        {
                            tx.send_ui(UiCommand::SetProfileStep(Some(name.clone())));
                        }
                    }
                });
            let view = narrowed(p, chosen);
            let total = view.total();
            ui.strong(totals_label("total", chosen.unwrap_or("run"), &total));
            egui::ScrollArea::vertical().show(ui, |ui| {
                section_ui(ui, "Kernel families", "family", &view.by_family());
                let kernels = view.by_kernel();
                section_ui(ui, "Kernels (entry points)", "kernel", &kernels);
                if chosen.is_none() {
                    let mut by_time = steps.clone();
                    by_time.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
                    section_ui(ui, "Steps", "step", &by_time);
                }
                slowest_ui(ui, &view.dispatches);
            });
        });
    if !open {
        tx.send_ui(UiCommand::SetWorkbenchWindow {
            window: WorkbenchWindow::Profile,
            open: false,
        });
    }
}

fn section_ui<N: AsRef<str>>(ui: &mut egui::Ui, title: &str, what: &str, rows: &[(N, Totals)]) {
    egui::CollapsingHeader::new(title)
        .default_open(true)
        .show(ui, |ui| {
            egui::Grid::new(title).striped(true).show(ui, |ui| {
                for h in ["name", "dispatches", "ms", "GB/s", "GFLOP/s"] {
                    ui.weak(h);
                }
                ui.end_row();
                for (name, t) in rows {
                    let full = totals_label(what, name.as_ref(), t);
                    let resp = ui.monospace(name.as_ref());
                    resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &full));
                    ui.label(t.dispatches.to_string());
                    ui.label(format!("{:.3}", t.seconds * 1e3));
                    ui.label(format!("{:.3}", t.gb_per_s()));
                    ui.label(if t.flops > 0 {
                        format!("{:.3}", t.gflop_per_s())
                    } else {
                        String::new()
                    });
                    ui.end_row();
                }
            });
        });
}

fn slowest_ui(ui: &mut egui::Ui, dispatches: &[DispatchTime]) {
    let mut slow: Vec<&DispatchTime> = dispatches.iter().collect();
    slow.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    slow.truncate(SLOWEST_DISPATCHES);
    egui::CollapsingHeader::new(format!("Slowest {} dispatches", slow.len()))
        .default_open(false)
        .show(ui, |ui| {
            egui::Grid::new("slowest dispatches")
                .striped(true)
                .show(ui, |ui| {
                    for d in slow {
                        let t = Totals {
                            dispatches: 1,
                            seconds: d.seconds,
                            bytes: d.bytes,
                            flops: d.flops,
                        };
                        let name = format!("{}::{} in {}", d.family, d.entry, d.step);
                        let full = totals_label("dispatch", &name, &t);
                        let resp = ui.monospace(&name);
                        resp.widget_info(|| {
                            egui::WidgetInfo::labeled(egui::Role::Label, true, &full)
                        });
                        ui.label(format!("{:.3} ms", d.seconds * 1e3));
                        ui.label(format!("{:.3} GB/s", t.gb_per_s()));
                        ui.end_row();
                    }
                });
        });
}
