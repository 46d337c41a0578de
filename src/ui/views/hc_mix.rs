//! The Hyper-connection mixes view: per token, the 4×4 `comb` matrices of the attention and FFN
//! sites with their row and column sums (the Sinkhorn constraint: each near 1), and `pre` and
//! `post` as bars, reference and test side by side.

use super::heatmap::Tensor;
use super::topk::cell_grid_ui;
use super::{find, ViewState};
use crate::golden::names::parse_capture_name;
use crate::golden::Golden;
use crate::session::controller::CaptureResult;
use crate::ui::theme;
use eframe::egui;

/// Row and column sums of the `m × m` matrix of token `t` in a `[.., T, m, m]` tensor; a sum
/// is `None` when one of its entries has no sample.
pub fn comb_sums(comb: &Tensor, t: usize, m: usize) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
    let base = t * m * m;
    let at = |i: usize, j: usize| comb.get(base + i * m + j);
    let rows = (0..m)
        .map(|i| (0..m).map(|j| at(i, j)).sum::<Option<f64>>())
        .collect();
    let cols = (0..m)
        .map(|j| (0..m).map(|i| at(i, j)).sum::<Option<f64>>())
        .collect();
    (rows, cols)
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("?".into(), |v| format!("{v:.4}"))
}

fn bars_ui(ui: &mut egui::Ui, label: &str, t: &Tensor, token: usize, m: usize) {
    ui.horizontal(|ui| {
        ui.label(format!("{label}:"));
        let h = 28.0;
        for i in 0..m {
            let v = t.get(token * m + i);
            let (rect, _) = ui.allocate_exact_size(egui::vec2(14.0, h), egui::Sense::hover());
            let frac = v.map_or(0.0, |v| v.clamp(0.0, 2.0) as f32 / 2.0);
            let bar =
                egui::Rect::from_min_max(egui::pos2(rect.min.x, rect.max.y - frac * h), rect.max);
            ui.painter().rect_filled(rect, 1.0, theme::SET_EMPTY);
            ui.painter().rect_filled(
                bar,
                1.0,
                if v.is_some() {
                    theme::ACCENT
                } else {
                    theme::SET_UNKNOWN
                },
            );
        }
        let values: Vec<String> = (0..m).map(|i| fmt_opt(t.get(token * m + i))).collect();
        ui.label(values.join(" "));
    });
}

/// Draw the view for the layer of `r`.
pub fn hc_mix_ui(
    ui: &mut egui::Ui,
    golden: &Golden,
    results: &[CaptureResult],
    r: &CaptureResult,
    state: &mut ViewState,
) {
    let Some(layer) = parse_capture_name(&r.name).layer else {
        ui.label("HC mixes: select a capture of a layer");
        return;
    };
    let m = golden.fixture.hc_mult.max(1);
    let tokens = find(results, r.regime_index, &format!("L{layer}.attn_comb"))
        .and_then(|c| c.shape.get(1).copied())
        .unwrap_or(1)
        .max(1);
    state.hc_token = state.hc_token.min(tokens - 1);
    ui.horizontal(|ui| {
        ui.label(format!("HC mixes of layer {layer} ({} tokens)", tokens));
        let text = ui.label("Token:");
        ui.add(egui::Slider::new(&mut state.hc_token, 0..=tokens - 1))
            .labelled_by(text.id);
    });
    let token = state.hc_token;
    let state = &*state;
    egui::ScrollArea::vertical()
        .id_salt("hc_scroll")
        .max_height(380.0)
        .show(ui, |ui| {
            for site in ["attn", "ffn"] {
                let get = |what: &str| {
                    find(results, r.regime_index, &format!("L{layer}.{site}_{what}"))
                        .and_then(|c| super::sides(golden, c, state))
                };
                let (Some(comb), Some(pre), Some(post)) = (get("comb"), get("pre"), get("post"))
                else {
                    ui.label(format!("{site}: not run yet"));
                    continue;
                };
                ui.strong(format!("{site} site"));
                ui.horizontal(|ui| {
                    for (title, c, p, q) in [
                        (format!("Reference ({})", comb.2), &comb.0, &pre.0, &post.0),
                        (format!("Test ({})", comb.3), &comb.1, &pre.1, &post.1),
                    ] {
                        ui.vertical(|ui| {
                            ui.label(format!("{title}: comb {m}×{m}"));
                            let base = token * m * m;
                            let max_abs = (0..m * m)
                                .filter_map(|k| c.get(base + k))
                                .fold(0.0f64, |a, v| a.max(v.abs()));
                            cell_grid_ui(ui, m, m, 34.0, &|i, j| match c.get(base + i * m + j) {
                                Some(v) => (
                                    theme::diverging(v as f32, max_abs as f32 * 2.0),
                                    Some(format!("{v:.2}")),
                                ),
                                None => (theme::CELL_UNKNOWN, Some("?".into())),
                            });
                            let (rs, cs) = comb_sums(c, token, m);
                            ui.label(format!(
                                "{site} row sums: {}",
                                rs.iter().map(|v| fmt_opt(*v)).collect::<Vec<_>>().join(" ")
                            ));
                            ui.label(format!(
                                "{site} col sums: {}",
                                cs.iter().map(|v| fmt_opt(*v)).collect::<Vec<_>>().join(" ")
                            ));
                            bars_ui(ui, "pre", p, token, m);
                            bars_ui(ui, "post", q, token, m);
                        });
                    }
                });
                ui.separator();
            }
        });
}
