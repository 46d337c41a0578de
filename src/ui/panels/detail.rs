//! The detail area: the selected capture's name, its test backend and reference choice, its
//! exports, the view tabs, and the chosen view filling the rest of the area (its region is an
//! accessibility node named after the view, so tests find it by role and label).

use crate::ui::app::AppState;
use crate::ui::commands::{DetailView, FileKind, UiCommand, UiCommandSender};
use crate::ui::views::{self, ReferenceChoice, ViewCaches, ViewCtx};
use eframe::egui;
use std::path::PathBuf;

/// Draw the detail area.
pub fn detail_ui(
    ui: &mut egui::Ui,
    state: &AppState,
    caches: &mut ViewCaches,
    tx: &dyn UiCommandSender,
) {
    caches.layout.detail = Some(ui.available_rect_before_wrap());
    let Some(r) = state.selected() else {
        ui.label("Select a capture in the list or on the overview to see its details.");
        return;
    };
    let Some(golden) = state.golden.as_ref().map(|g| g.golden.clone()) else {
        return;
    };
    ui.horizontal_wrapped(|ui| {
        ui.heading(format!("Selected: {}", r.label()));
        ui.label(format!(
            "{} · {} · shape {:?}",
            r.step,
            r.kind.label(),
            r.shape
        ));
    });
    ui.horizontal_wrapped(|ui| {
        for v in DetailView::ALL {
            let enabled = views::applies(v, r);
            let selected = state.view == v;
            let resp = ui.add_enabled(enabled, egui::Button::selectable(selected, v.title()));
            resp.widget_info(|| {
                egui::WidgetInfo::selected(egui::Role::Tab, enabled, selected, v.title())
            });
            if resp.clicked() {
                tx.send_ui(UiCommand::SetDetailView(v));
            }
        }
        ui.separator();
        side_choice_ui(ui, state, r, tx);
        ui.separator();
        if ui.button("Export .npy…").clicked() {
            tx.send_ui(UiCommand::PickFile(FileKind::ExportNpy));
        }
        if ui
            .button("Export .npy to path")
            .on_hover_text("Write the selected capture (test side) to the path in the path field")
            .clicked()
            && !state.path_field.trim().is_empty()
        {
            tx.send_ui(UiCommand::ExportSelectedNpy(PathBuf::from(
                state.path_field.trim(),
            )));
        }
    });
    ui.separator();
    let rect = ui.available_rect_before_wrap();
    caches.layout.view = Some(rect);
    // The view's region, named after the view (registered first so the view's widgets, drawn
    // over it, get the pointer).
    let region = ui.interact(
        rect,
        ui.scope_id().with("view region"),
        egui::Sense::hover(),
    );
    let label = state.view.region_label();
    region.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Pane, true, label));
    let ctx = ViewCtx {
        golden: &golden,
        results: &state.results,
        r,
        settings: &state.settings,
        tx,
    };
    views::view_ui(ui, state.view, &ctx, caches);
}

fn side_choice_ui(
    ui: &mut egui::Ui,
    state: &AppState,
    r: &crate::session::controller::CaptureResult,
    tx: &dyn UiCommandSender,
) {
    let names: Vec<String> = r.per_backend.iter().map(|b| b.backend.clone()).collect();
    let s = &state.settings;
    if names.len() > 1 {
        let mut backend = s.test_backend.min(names.len() - 1);
        let mut reference = s.reference;
        let text = ui.label("Test:");
        egui::ComboBox::from_id_salt("test_backend")
            .selected_text(names[backend].clone())
            .show_ui(ui, |ui| {
                for (k, n) in names.iter().enumerate() {
                    ui.selectable_value(&mut backend, k, n);
                }
            })
            .response
            .labelled_by(text.id);
        ui.radio_value(&mut reference, ReferenceChoice::Golden, "vs golden");
        ui.radio_value(
            &mut reference,
            ReferenceChoice::FirstBackend,
            format!("vs {}", names[0]),
        );
        if backend != s.test_backend.min(names.len() - 1) || reference != s.reference {
            tx.send_ui(UiCommand::SetTestSide { backend, reference });
        }
    } else {
        ui.weak(format!(
            "test = {}, reference = golden",
            names.first().map_or("-", String::as_str)
        ));
    }
}
