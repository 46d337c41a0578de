//! The detail area: the selected capture's metrics for every comparison, its exports, the test
//! backend and reference choice, the view tabs, and the chosen view.

use crate::golden::compare::Comparison;
use crate::ui::app::GoldenLensApp;
use crate::ui::commands::{DetailView, FileKind, UiCommand};
use crate::ui::theme;
use crate::ui::views::{self, ReferenceChoice};
use eframe::egui;
use std::path::PathBuf;

/// The metric lines of one comparison (each line is its own label, readable by tests).
pub fn metric_lines(name: &str, c: &Comparison) -> Vec<String> {
    vec![
        format!(
            "{name}: {} ({})",
            if c.pass { "pass" } else { "FAIL" },
            c.reason
        ),
        format!("{name} max_abs_err: {:.6e}", c.max_abs_err),
        format!("{name} tol: {:.6e}", c.tol),
        format!("{name} worst_ratio: {:.6}", c.worst_ratio),
        format!(
            "{name} max_rel_err: {:.3e}, max_bf16_ulp: {}, nmse: {:.3e}",
            c.max_rel_err, c.max_bf16_ulp, c.nmse
        ),
        format!(
            "{name} compared: {} at stride {}, outside tol: {}, bit-exact: {}",
            c.n_compared, c.stride, c.n_outside_tol, c.bit_exact
        ),
        format!(
            "{name} checksum: got {:.6e}, expected {:.6e} (rel diff {:.3e}, bar {:.1e})",
            c.ck_got, c.ck_expected, c.ck_rel_diff, c.ck_rel
        ),
    ]
}

/// Draw the detail area.
pub fn detail_ui(ui: &mut egui::Ui, app: &mut GoldenLensApp) {
    let Some(i) = app.selected else {
        ui.label("Select a capture in the list or on the plot to see its details.");
        return;
    };
    let Some(r) = app.results.get(i) else {
        return;
    };
    let Some(golden) = app.golden.as_ref().map(|g| g.golden.clone()) else {
        return;
    };
    ui.horizontal(|ui| {
        ui.heading(format!("Selected: {}", r.label()));
        ui.label(format!(
            "{} · {} · shape {:?}",
            r.step,
            r.kind.label(),
            r.shape
        ));
    });
    egui::CollapsingHeader::new("Metrics")
        .default_open(true)
        .show(ui, |ui| {
            for (name, c) in r.comparisons() {
                for (k, line) in metric_lines(&name, c).into_iter().enumerate() {
                    if k == 0 {
                        ui.colored_label(theme::verdict_color(c.pass), line);
                    } else {
                        ui.label(line);
                    }
                }
            }
            if r.comparisons().is_empty() {
                ui.label("Not in the golden: nothing to compare against");
            }
        });
    ui.horizontal(|ui| {
        if ui.button("Export .npy…").clicked() {
            app.commands.push(UiCommand::PickFile(FileKind::ExportNpy));
        }
        if ui
            .button("Export .npy to path")
            .on_hover_text("Write the selected capture (test side) to the path in the path field")
            .clicked()
            && !app.path_field.trim().is_empty()
        {
            app.commands
                .push(UiCommand::ExportSelectedNpy(PathBuf::from(
                    app.path_field.trim(),
                )));
        }
        ui.separator();
        let names: Vec<String> = r.per_backend.iter().map(|b| b.backend.clone()).collect();
        if names.len() > 1 {
            let text = ui.label("Test:");
            egui::ComboBox::from_id_salt("test_backend")
                .selected_text(names[app.views.test_backend.min(names.len() - 1)].clone())
                .show_ui(ui, |ui| {
                    for (k, n) in names.iter().enumerate() {
                        ui.selectable_value(&mut app.views.test_backend, k, n);
                    }
                })
                .response
                .labelled_by(text.id);
            ui.radio_value(
                &mut app.views.reference,
                ReferenceChoice::Golden,
                "vs golden",
            );
            ui.radio_value(
                &mut app.views.reference,
                ReferenceChoice::FirstBackend,
                format!("vs {}", names[0]),
            );
        } else {
            ui.weak(format!(
                "test = {}, reference = golden",
                names.first().map_or("-", String::as_str)
            ));
        }
    });
    ui.horizontal(|ui| {
        for v in DetailView::ALL {
            let enabled = views::applies(v, r);
            let resp = ui.add_enabled(enabled, egui::Button::selectable(app.view == v, v.title()));
            if resp.clicked() {
                app.commands.push(UiCommand::SetDetailView(v));
            }
        }
    });
    ui.separator();
    let results = &app.results;
    egui::ScrollArea::vertical()
        .id_salt("detail_scroll")
        .auto_shrink([false, false])
        .show(ui, |ui| match app.view {
            DetailView::Values => views::values::values_ui(ui, &golden, r, &mut app.views),
            DetailView::TopK => views::topk::topk_ui(ui, &golden, results, r, &app.views),
            DetailView::WindowMask => {
                views::window_mask::window_mask_ui(ui, &golden, results, r, &app.views)
            }
            DetailView::HcMix => views::hc_mix::hc_mix_ui(ui, &golden, results, r, &mut app.views),
            DetailView::Moe => views::moe::moe_ui(ui, &golden, results, r, &app.views),
        });
}
