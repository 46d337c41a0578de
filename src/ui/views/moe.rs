//! The MoE routing view: tokens by experts, the experts each side selected with their weights,
//! and per-token agreement with the reference.

use super::topk::{cell_grid_ui, classify_row, int_row, legend_ui, SetCell};
use super::{find, rows_of, ViewState};
use crate::golden::names::parse_capture_name;
use crate::golden::policy::F32_TOL;
use crate::golden::Golden;
use crate::session::controller::CaptureResult;
use crate::ui::theme;
use eframe::egui;

/// Draw the view for the layer of `r`.
pub fn moe_ui(
    ui: &mut egui::Ui,
    golden: &Golden,
    results: &[CaptureResult],
    r: &CaptureResult,
    state: &ViewState,
) {
    let Some(layer) = parse_capture_name(&r.name).layer else {
        ui.label("MoE routing: select a capture of a layer");
        return;
    };
    let get = |name: &str| {
        find(results, r.regime_index, &format!("L{layer}.{name}"))
            .and_then(|c| super::sides(golden, c, state))
    };
    let (Some(idx), Some(w)) = (get("moe_indices"), get("moe_weights")) else {
        ui.label(format!("MoE routing: layer {layer} has not run yet"));
        return;
    };
    let n_experts = golden.fixture.n_routed_experts.max(1);
    let (tokens, k) = rows_of(&idx.1);
    let mut agree_tokens = 0;
    let mut grid = vec![SetCell::Absent; tokens * n_experts];
    let mut weight_text = vec![String::new(); tokens * n_experts];
    for t in 0..tokens {
        let rref = int_row(&idx.0, t, k);
        let rtest: Vec<i64> = int_row(&idx.1, t, k)
            .into_iter()
            .map(|v| v.unwrap_or(-1))
            .collect();
        let tie = |re: i64, te: i64| {
            let wr = rref
                .iter()
                .position(|&x| x == Some(re))
                .and_then(|j| w.0.get(t * k + j));
            let wt = rtest
                .iter()
                .position(|&x| x == te)
                .and_then(|j| w.1.get(t * k + j));
            matches!((wr, wt), (Some(a), Some(b)) if (a - b).abs() <= F32_TOL)
        };
        let a = classify_row(&rref, &rtest, &tie);
        if a.agreement >= 1.0 {
            agree_tokens += 1;
        }
        for (j, e) in rtest.iter().enumerate() {
            if let Ok(e) = usize::try_from(*e) {
                if e < n_experts {
                    grid[t * n_experts + e] = a.test_cells[j];
                    weight_text[t * n_experts + e] =
                        w.1.get(t * k + j).map_or("?".into(), |v| format!("{v:.2}"));
                }
            }
        }
        for (j, e) in rref.iter().enumerate() {
            if let Some(Ok(e)) = e.map(usize::try_from) {
                if e < n_experts && a.ref_cells[j] != SetCell::Both {
                    grid[t * n_experts + e] = a.ref_cells[j];
                }
            }
        }
    }
    ui.label(format!(
        "MoE routing of layer {layer}: {tokens} tokens × {n_experts} experts, top-{k}; reference = {}, test = {}",
        idx.2, idx.3
    ));
    ui.colored_label(
        theme::verdict_color(agree_tokens == tokens),
        format!("Tokens routed identically: {agree_tokens} of {tokens}"),
    );
    let kinds = [
        SetCell::Both,
        SetCell::RefOnly,
        SetCell::TestOnly,
        SetCell::TieFlip,
        SetCell::Unknown,
    ];
    let counts: Vec<(SetCell, usize)> = kinds
        .iter()
        .map(|&kd| (kd, grid.iter().filter(|&&c| c == kd).count()))
        .collect();
    legend_ui(ui, &counts);
    egui::ScrollArea::both()
        .id_salt("moe_scroll")
        .max_height(340.0)
        .show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.vertical(|ui| {
                    ui.label("tokens × experts (test weights)");
                    cell_grid_ui(ui, tokens, n_experts, 30.0, &|t, e| {
                        let c = grid[t * n_experts + e];
                        let text = weight_text[t * n_experts + e].clone();
                        (c.color(), (!text.is_empty()).then_some(text))
                    });
                });
                ui.vertical(|ui| {
                    ui.label("selected experts (reference | test)");
                    for t in 0..tokens {
                        let side = |tsr: &super::heatmap::Tensor, ws: &super::heatmap::Tensor| {
                            (0..k)
                                .map(|j| {
                                    let e = tsr
                                        .get(t * k + j)
                                        .map_or("?".into(), |v| format!("{}", v as i64));
                                    let wv =
                                        ws.get(t * k + j).map_or("?".into(), |v| format!("{v:.3}"));
                                    format!("{e}:{wv}")
                                })
                                .collect::<Vec<_>>()
                                .join(" ")
                        };
                        ui.add_sized(
                            [260.0, 29.0],
                            egui::Label::new(format!(
                                "t{t}: {} | {}",
                                side(&idx.0, &w.0),
                                side(&idx.1, &w.1)
                            )),
                        );
                    }
                });
            });
        });
}
