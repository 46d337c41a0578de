//! The overview strip: every capture's worst error over its tolerance on a log y axis, in
//! lanes per step (x: one lane per step of each regime, its captures side by side inside it),
//! one series per comparison; bit-exact captures sit in a labelled band under the decades
//! instead of on a floor value; failures are crossed; the first divergence is marked and
//! named. Hovering names the capture, clicking selects it, right-drag zooms a box and
//! double-click resets. Beside it, the selected capture's per-element ulp histogram.

use crate::session::controller::{first_divergence, CaptureResult};
use crate::ui::app::AppState;
use crate::ui::commands::{Region, UiCommand, UiCommandSender};
use crate::ui::theme::{self, Palette};
use crate::ui::views::{self, content_key, UlpHistogram, ViewCaches};
use eframe::egui;
use egui_plot::{GridMark, Line, MarkerShape, Plot, PlotPoints, Points, Span, Text, VLine};

/// One plotted capture.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverviewPoint {
    /// Index into the results.
    pub result: usize,
    pub x: f64,
    /// `log10(ratio)`, or the band's y for a bit-exact capture.
    pub y: f64,
    pub ratio: f64,
    pub pass: bool,
    pub bit_exact: bool,
}

/// One lane: a step of a regime.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    pub regime: String,
    pub step: String,
    /// The short label on the x axis (`L3`, `emb`, `fin`).
    pub short: String,
}

/// The overview's data: lanes, one series of points per comparison, the band's y.
#[derive(Debug, Clone, PartialEq)]
pub struct OverviewModel {
    pub lanes: Vec<Lane>,
    pub series: Vec<(String, Vec<OverviewPoint>)>,
    /// Centre of the bit-exact band.
    pub band_y: f64,
    /// Highest decade drawn.
    pub top_y: f64,
}

/// Least room for one ulp-bin label.
const ULP_LABEL_MIN_PT: f32 = 30.0;
/// The band sits this many decades under the smallest non-zero ratio's decade.
const BAND_GAP_DECADES: f64 = 1.5;
/// The band's y when no ratio is non-zero (everything bit-exact).
const BAND_DEFAULT_Y: f64 = -7.0;
/// Where non-finite ratios are drawn, above the top decade.
const NON_FINITE_ABOVE: f64 = 0.7;

/// The short label of a step.
pub fn short_step(step: &crate::model::Step) -> String {
    use crate::model::Step;
    match step {
        Step::EngramHash => "hash".into(),
        Step::Embed => "emb".into(),
        Step::Engram(l) => format!("E{l}"),
        Step::Block(l) => format!("L{l}"),
        Step::Final => "fin".into(),
    }
}

impl OverviewModel {
    /// Lay out `results`.
    pub fn build(results: &[CaptureResult]) -> OverviewModel {
        let mut lanes: Vec<Lane> = Vec::new();
        let mut lane_of = Vec::with_capacity(results.len());
        let mut key_last: Option<(usize, String)> = None;
        for r in results {
            let step = r.step.to_string();
            let key = (r.regime_index, step.clone());
            if key_last.as_ref() != Some(&key) {
                lanes.push(Lane {
                    regime: r.regime.clone(),
                    step,
                    short: short_step(&r.step),
                });
                key_last = Some(key);
            }
            lane_of.push(lanes.len() - 1);
        }
        let mut per_lane = vec![0usize; lanes.len()];
        for &l in &lane_of {
            per_lane[l] += 1;
        }
        let min_pos = results
            .iter()
            .flat_map(|r| r.comparisons().into_iter().map(|(_, c)| c.worst_ratio))
            .filter(|v| v.is_finite() && *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        let max_fin = results
            .iter()
            .flat_map(|r| r.comparisons().into_iter().map(|(_, c)| c.worst_ratio))
            .filter(|v| v.is_finite() && *v > 0.0)
            .fold(f64::NEG_INFINITY, f64::max);
        let band_y = if min_pos.is_finite() {
            min_pos.log10().floor() - BAND_GAP_DECADES
        } else {
            BAND_DEFAULT_Y
        };
        let top_y = if max_fin.is_finite() {
            max_fin.log10().ceil().max(1.0)
        } else {
            1.0
        };
        let mut series: Vec<(String, Vec<OverviewPoint>)> = Vec::new();
        let mut in_lane = vec![0usize; lanes.len()];
        for (i, r) in results.iter().enumerate() {
            let lane = lane_of[i];
            let k = in_lane[lane];
            in_lane[lane] += 1;
            let x = lane as f64 + 0.1 + 0.8 * (k as f64 + 0.5) / per_lane[lane] as f64;
            for (name, c) in r.comparisons() {
                let ratio = c.worst_ratio;
                let y = if ratio == 0.0 || c.bit_exact {
                    band_y
                } else if ratio.is_finite() {
                    ratio.log10()
                } else {
                    top_y + NON_FINITE_ABOVE
                };
                let p = OverviewPoint {
                    result: i,
                    x,
                    y,
                    ratio,
                    pass: c.pass,
                    bit_exact: ratio == 0.0 || c.bit_exact,
                };
                match series.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, pts)) => pts.push(p),
                    None => series.push((name, vec![p])),
                }
            }
        }
        OverviewModel {
            lanes,
            series,
            band_y,
            top_y,
        }
    }

    /// The point nearest to the screen position `pos` within `radius` points.
    pub fn nearest(
        &self,
        pos: egui::Pos2,
        radius: f32,
        to_screen: &dyn Fn(f64, f64) -> egui::Pos2,
    ) -> Option<(usize, &OverviewPoint)> {
        let mut best: Option<(f32, usize, &OverviewPoint)> = None;
        for (si, (_, pts)) in self.series.iter().enumerate() {
            for p in pts {
                let d = to_screen(p.x, p.y).distance(pos);
                if d <= radius && best.is_none_or(|(bd, _, _)| d < bd) {
                    best = Some((d, si, p));
                }
            }
        }
        best.map(|(_, si, p)| (si, p))
    }
}

/// The text under the plot for a hovered point (also its accessibility label).
pub fn hover_text(
    model: &OverviewModel,
    results: &[CaptureResult],
    si: usize,
    p: &OverviewPoint,
) -> String {
    let name = &model.series[si].0;
    let r = &results[p.result];
    let ratio = if p.bit_exact {
        "bit-exact".to_string()
    } else {
        format!("error/tolerance {:.3e}", p.ratio)
    };
    format!(
        "{} ({}, {}): {name} {ratio}, {}",
        r.label(),
        r.step,
        r.kind.label(),
        if p.pass { "pass" } else { "FAIL" }
    )
}

fn series_color(palette: &Palette, name: &str, k: usize) -> egui::Color32 {
    if name.ends_with("vs golden") {
        palette.series_vs_golden[k % palette.series_vs_golden.len()]
    } else {
        palette.series_cross
    }
}

/// The region: a header that folds it, the plot and the ulp histogram.
pub fn overview_region_ui(
    ui: &mut egui::Ui,
    state: &AppState,
    caches: &mut ViewCaches,
    tx: &dyn UiCommandSender,
) {
    if !state.overview_open {
        egui::Panel::top("overview folded")
            .resizable(false)
            .show(ui, |ui| header_ui(ui, state, tx));
        return;
    }
    egui::Panel::top("overview")
        .resizable(true)
        .default_size(theme::OVERVIEW_HEIGHT_PT)
        .min_size(theme::REGION_MIN_HEIGHT_PT)
        .show(ui, |ui| {
            header_ui(ui, state, tx);
            let avail = ui.available_size();
            let hist_w = (avail.x * theme::HISTOGRAM_WIDTH_FRACTION).clamp(220.0, 420.0);
            let plot_w = (avail.x - hist_w - theme::PANEL_GAP_PT).max(theme::MIN_PANEL_WIDTH_PT);
            ui.horizontal_top(|ui| {
                ui.vertical(|ui| {
                    ui.set_width(plot_w);
                    plot_ui(ui, state, caches, tx, plot_w, avail.y);
                });
                ui.vertical(|ui| {
                    ui.set_width(hist_w);
                    ulp_ui(ui, state, caches, hist_w, avail.y);
                });
            });
        });
}

fn header_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    let palette = theme::palette(ui.ctx());
    ui.horizontal_wrapped(|ui| {
        let open = state.overview_open;
        if super::capture_list::fold_toggle_ui(ui, open, "Overview", true)
            .clicked()
        {
            tx.send_ui(UiCommand::SetRegionOpen {
                region: Region::Overview,
                open: !open,
            });
        }
        ui.weak("error/tolerance by step (log; line at 1 = pass bar; band = bit-exact); right-drag zooms, double-click resets");
        key_ui(ui, state);
        if let Some(r) = first_divergence(&state.results) {
            ui.colored_label(
                palette.fail_text,
                format!("First divergence marked: {}", r.label()),
            );
        }
    });
}

/// The series key: a coloured mark and the comparison's name for each series, the failing mark.
fn key_ui(ui: &mut egui::Ui, state: &AppState) {
    let palette = theme::palette(ui.ctx());
    let names = super::capture_list::pair_names(&state.results);
    for (k, name) in names.iter().enumerate() {
        let (rect, _) = ui.allocate_exact_size(egui::vec2(10.0, 10.0), egui::Sense::hover());
        ui.painter()
            .circle_filled(rect.center(), 4.0, series_color(palette, name, k));
        ui.label(egui::RichText::new(name).small());
    }
    if !names.is_empty() {
        ui.label(
            egui::RichText::new("× failing")
                .small()
                .color(palette.fail_text),
        );
    }
}

fn plot_ui(
    ui: &mut egui::Ui,
    state: &AppState,
    caches: &mut ViewCaches,
    tx: &dyn UiCommandSender,
    width: f32,
    height: f32,
) {
    let palette = theme::palette(ui.ctx());
    let model = OverviewModel::build(&state.results);
    let divergence = first_divergence(&state.results).map(|r| r.order);
    let line_h = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
    let plot_h = (height - line_h).max(40.0);
    let lanes = model.lanes.clone();
    let band_y = model.band_y;
    let response = Plot::new("overview")
        .width(width)
        .height(plot_h)
        .allow_scroll(false)
        .allow_boxed_zoom(true)
        .allow_double_click_reset(true)
        .show_x(false)
        .show_y(false)
        .include_y(band_y - 0.6)
        .include_y(model.top_y + 0.2)
        .include_x(0.0)
        .include_x(model.lanes.len().max(1) as f64)
        .x_grid_spacer(move |input| {
            let (lo, hi) = input.bounds;
            let first = lo.floor().max(0.0) as usize;
            let last = (hi.ceil().max(0.0) as usize).min(lanes.len());
            (first..last)
                .map(|l| GridMark {
                    value: l as f64 + 0.5,
                    step_size: 1.0,
                })
                .collect()
        })
        .x_axis_formatter({
            let lanes = model.lanes.clone();
            move |mark, _| {
                let l = mark.value.floor();
                if l < 0.0 {
                    return String::new();
                }
                lanes
                    .get(l as usize)
                    .map_or(String::new(), |x| x.short.clone())
            }
        })
        .y_grid_spacer(move |input| {
            let (lo, hi) = input.bounds;
            let mut marks: Vec<GridMark> = ((lo.ceil() as i64)..=(hi.floor() as i64))
                .filter(|&d| d as f64 > band_y + 0.5)
                .map(|d| GridMark {
                    value: d as f64,
                    step_size: 1.0,
                })
                .collect();
            if band_y >= lo && band_y <= hi {
                marks.push(GridMark {
                    value: band_y,
                    step_size: 1.0,
                });
            }
            marks
        })
        .y_axis_formatter(move |mark, _| {
            if (mark.value - band_y).abs() < 1e-9 {
                "exact".into()
            } else {
                format!("1e{}", mark.value.round() as i64)
            }
        })
        .show(ui, |plot_ui| {
            plot_ui.span(
                Span::new("bit-exact", (band_y - 0.45)..=(band_y + 0.45))
                    .axis(egui_plot::Axis::Y)
                    .fill(palette.exact_band),
            );
            // Every other lane is shaded; then each regime's first lane is marked with its name
            // (after the shading, so no lane covers a name).
            for l in (1..model.lanes.len()).step_by(2) {
                plot_ui.span(Span::new("", (l as f64)..=(l as f64 + 1.0)).fill(palette.lane_shade));
            }
            let mut last_regime = "";
            for (l, lane) in model.lanes.iter().enumerate() {
                if lane.regime != last_regime {
                    plot_ui.vline(VLine::new("", l as f64).color(palette.pass_line));
                    plot_ui.text(
                        Text::new(
                            "",
                            egui_plot::PlotPoint::new(l as f64 + 0.1, model.top_y + 0.1),
                            egui::RichText::new(&lane.regime)
                                .small()
                                .color(palette.text_weak),
                        )
                        .anchor(egui::Align2::LEFT_TOP),
                    );
                    last_regime = &lane.regime;
                }
            }
            plot_ui.line(
                Line::new(
                    "pass line (ratio 1)",
                    PlotPoints::from(vec![[0.0, 0.0], [model.lanes.len().max(1) as f64, 0.0]]),
                )
                .color(palette.pass_line),
            );
            for (k, (name, pts)) in model.series.iter().enumerate() {
                let color = series_color(palette, name, k);
                let ok: Vec<[f64; 2]> = pts.iter().filter(|p| p.pass).map(|p| [p.x, p.y]).collect();
                let bad: Vec<[f64; 2]> =
                    pts.iter().filter(|p| !p.pass).map(|p| [p.x, p.y]).collect();
                plot_ui.points(
                    Points::new(name.clone(), PlotPoints::from(ok))
                        .color(color)
                        .radius(theme::POINT_RADIUS_PT),
                );
                if !bad.is_empty() {
                    plot_ui.points(
                        Points::new(format!("{name} (failing)"), PlotPoints::from(bad))
                            .color(palette.fail_text)
                            .shape(MarkerShape::Cross)
                            .radius(theme::FAIL_MARK_RADIUS_PT),
                    );
                }
            }
            if let Some(order) = divergence {
                if let Some(p) = model
                    .series
                    .iter()
                    .flat_map(|(_, pts)| pts)
                    .find(|p| state.results[p.result].order == order)
                {
                    plot_ui.vline(VLine::new("first divergence", p.x).color(palette.fail_text));
                }
            }
            let pointer = plot_ui.response().hover_pos();
            let hovered = pointer.and_then(|pos| {
                let t = *plot_ui.transform();
                model
                    .nearest(pos, theme::HOVER_RADIUS_PT, &|x, y| {
                        t.position_from_point(&egui_plot::PlotPoint::new(x, y))
                    })
                    .map(|(si, p)| (si, *p))
            });
            if let Some((_, p)) = hovered {
                plot_ui.points(
                    Points::new("", PlotPoints::from(vec![[p.x, p.y]]))
                        .color(palette.hover_ring)
                        .shape(MarkerShape::Circle)
                        .filled(false)
                        .radius(theme::FAIL_MARK_RADIUS_PT + 2.0),
                );
            }
            let clicked = plot_ui.response().clicked();
            (hovered, clicked)
        });
    let (hovered, clicked) = response.inner;
    response
        .response
        .widget_info(|| egui::WidgetInfo::labeled(egui::Role::Image, true, "Overview plot"));
    caches.overview_hover = hovered.map(|(_, p)| p.result);
    match hovered {
        Some((si, p)) => {
            let text = hover_text(&model, &state.results, si, &p);
            if clicked {
                tx.send_ui(UiCommand::SelectCapture(p.result));
            }
            response.response.on_hover_text_at_pointer(&text);
            ui.label(text);
        }
        None => {
            ui.weak("Hover a point to name its capture; click selects it.");
        }
    }
}

fn ulp_ui(ui: &mut egui::Ui, state: &AppState, caches: &mut ViewCaches, width: f32, height: f32) {
    let palette = theme::palette(ui.ctx());
    let Some(r) = state.selected() else {
        ui.weak("Select a capture for its per-element ulp histogram.");
        return;
    };
    let Some(golden) = state.golden.as_ref() else {
        return;
    };
    let key = content_key(&(
        r.order,
        &r.name,
        state.settings.test_backend,
        state.settings.reference,
    ));
    if caches.ulp.as_ref().map(|(k, _)| *k) != Some(key) {
        let Some(sides) = views::sides(&golden.golden, r, &state.settings) else {
            ui.weak("No data for this capture.");
            return;
        };
        caches.ulp = Some((key, UlpHistogram::build(r.label(), &sides, r.kind.is_int())));
    }
    let Some((_, h)) = caches.ulp.as_ref() else {
        return;
    };
    let title = if h.integer {
        format!(
            "{} vs {}: {} of {} elements differ",
            h.test_name,
            h.ref_name,
            h.compared - h.exact,
            h.compared
        )
    } else {
        format!(
            "bf16 ulps, {} vs {}: {} of {} exact{}",
            h.test_name,
            h.ref_name,
            h.exact,
            h.compared,
            if h.nan_mismatch > 0 {
                format!(", {} NaN vs number", h.nan_mismatch)
            } else {
                String::new()
            }
        )
    };
    ui.label(egui::RichText::new(title).small());
    let line_h = ui.text_style_height(&egui::TextStyle::Small) + 4.0;
    let bar_h = (height - 2.0 * line_h - 14.0).max(30.0);
    let (rect, resp) =
        ui.allocate_exact_size(egui::vec2(width, bar_h + 14.0), egui::Sense::hover());
    let bins: Vec<&(String, usize)> = {
        // Trailing empty bins are left out (most captures sit in the first few).
        let last = h.bins.iter().rposition(|(_, c)| *c > 0).unwrap_or(0);
        h.bins.iter().take((last + 1).max(3)).collect()
    };
    let label = format!(
        "Ulp histogram of {}: {}",
        h.capture,
        bins.iter()
            .map(|(l, c)| format!("{l}: {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Image, true, &label));
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 0.0, palette.extreme_bg);
    let max = bins.iter().map(|(_, c)| *c).max().unwrap_or(0).max(1) as f32;
    let n = bins.len().max(1);
    let bw = rect.width() / n as f32;
    // Bin labels every `label_step` bins so they never overlap (hover names every bin).
    let label_step = (ULP_LABEL_MIN_PT / bw).ceil().max(1.0) as usize;
    let mut hovered_bin = None;
    for (k, (l, c)) in bins.iter().enumerate() {
        let x0 = rect.min.x + k as f32 * bw;
        // Counts span decades: bar height on a log scale so a single element still shows.
        let frac = if *c == 0 {
            0.0
        } else {
            ((*c as f32).ln_1p() / max.ln_1p()).max(0.04)
        };
        let bar = egui::Rect::from_min_max(
            egui::pos2(x0 + 1.0, rect.min.y + bar_h * (1.0 - frac)),
            egui::pos2(x0 + bw - 1.0, rect.min.y + bar_h),
        );
        let color = if k == 0 {
            palette.set_both
        } else if l.starts_with("NaN") || l == "differ" {
            palette.set_ref_only
        } else {
            palette.series_vs_golden[0]
        };
        painter.rect_filled(bar, 1.0, color);
        if k % label_step == 0 {
            painter.text(
                egui::pos2(x0 + bw / 2.0, rect.min.y + bar_h + 1.0),
                egui::Align2::CENTER_TOP,
                l.as_str(),
                egui::FontId::proportional(9.0),
                palette.text_weak,
            );
        }
        if resp.hover_pos().is_some_and(|p| p.x >= x0 && p.x < x0 + bw) {
            hovered_bin = Some(format!("{l} ulps: {c} elements"));
        }
    }
    if let Some(t) = hovered_bin {
        resp.on_hover_text_at_pointer(t);
    }
}
