//! The overview plot: every capture in execution order on x, worst error over tolerance on a log
//! y axis, the pass line at 1, one series per comparison, failures marked; hovering names the
//! capture, clicking selects it, and the first divergence is marked and named.

use crate::session::controller::{first_divergence, CaptureResult};
use crate::ui::app::GoldenLensApp;
use crate::ui::commands::UiCommand;
use crate::ui::theme;
use eframe::egui;
use egui_plot::{HLine, MarkerShape, Plot, PlotPoints, Points, VLine};

/// Ratios at or below this (bit-exact captures have ratio 0) are drawn at this floor so the log
/// axis can show them.
pub const RATIO_FLOOR: f64 = 1e-6;

/// `log10(max(ratio, RATIO_FLOOR))`, the plotted y of a ratio.
pub fn plot_y(ratio: f64) -> f64 {
    if ratio.is_nan() || ratio == f64::INFINITY {
        // Non-finite errors are failures; draw them at the top of the usual range.
        return 3.0;
    }
    ratio.max(RATIO_FLOOR).log10()
}

/// One plotted capture: `(order, worst ratio, pass)`.
pub type SeriesPoint = (usize, f64, bool);

/// One series per comparison name (`cpu vs golden`, `gpu vs golden`, `gpu vs cpu`).
pub fn series(results: &[CaptureResult]) -> Vec<(String, Vec<SeriesPoint>)> {
    let mut out: Vec<(String, Vec<SeriesPoint>)> = Vec::new();
    for r in results {
        for (name, c) in r.comparisons() {
            let point = (r.order, c.worst_ratio, c.pass);
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some((_, pts)) => pts.push(point),
                None => out.push((name, vec![point])),
            }
        }
    }
    out
}

/// Draw the plot.
pub fn overview_ui(ui: &mut egui::Ui, app: &mut GoldenLensApp) {
    let all = series(&app.results);
    let divergence = first_divergence(&app.results).map(|r| (r.order, r.label()));
    ui.horizontal(|ui| {
        ui.strong("Overview");
        ui.weak("worst error / tolerance per capture, log scale; the line at 1 is the pass bar");
        if let Some((_, name)) = &divergence {
            ui.colored_label(theme::FAIL, format!("First divergence marked: {name}"));
        }
    });
    let labels: Vec<String> = app.results.iter().map(CaptureResult::label).collect();
    let response = Plot::new("overview")
        .height(theme::OVERVIEW_HEIGHT_PT)
        .allow_scroll(false)
        .y_axis_formatter(|mark, _| format!("1e{}", mark.value.round() as i64))
        .label_formatter(move |pos| {
            use egui_plot::HoverPosition;
            match pos {
                HoverPosition::NearDataPoint {
                    plot_name,
                    position,
                    ..
                } => {
                    let i = position.x.round().max(0.0) as usize;
                    let name = labels.get(i).map_or("?", String::as_str);
                    Some(format!(
                        "{name}\n{plot_name}: ratio {:.3e}",
                        10f64.powf(position.y)
                    ))
                }
                HoverPosition::Elsewhere { .. } => None,
            }
        })
        .show(ui, |plot_ui| {
            plot_ui.hline(HLine::new("pass line (ratio 1)", 0.0).color(theme::PASS_LINE));
            for (si, (name, pts)) in all.iter().enumerate() {
                let color = if name.ends_with("vs golden") {
                    theme::SERIES_BACKEND_VS_GOLDEN[si % theme::SERIES_BACKEND_VS_GOLDEN.len()]
                } else {
                    theme::SERIES_CROSS
                };
                let ok: Vec<[f64; 2]> = pts
                    .iter()
                    .filter(|p| p.2)
                    .map(|&(x, r, _)| [x as f64, plot_y(r)])
                    .collect();
                let bad: Vec<[f64; 2]> = pts
                    .iter()
                    .filter(|p| !p.2)
                    .map(|&(x, r, _)| [x as f64, plot_y(r)])
                    .collect();
                plot_ui.points(
                    Points::new(name.clone(), PlotPoints::from(ok))
                        .color(color)
                        .radius(2.0),
                );
                if !bad.is_empty() {
                    plot_ui.points(
                        Points::new(format!("{name} (failing)"), PlotPoints::from(bad))
                            .color(theme::FAIL)
                            .shape(MarkerShape::Cross)
                            .radius(5.0),
                    );
                }
            }
            if let Some((x, name)) = &divergence {
                plot_ui.vline(
                    VLine::new(format!("first divergence: {name}"), *x as f64).color(theme::FAIL),
                );
            }
            if plot_ui.response().clicked() {
                plot_ui.pointer_coordinate().map(|p| p.x.round())
            } else {
                None
            }
        });
    if let Some(x) = response.inner {
        if x >= 0.0 && (x as usize) < app.results.len() {
            app.push(UiCommand::SelectCapture(x as usize));
        }
    }
}
