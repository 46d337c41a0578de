//! The Hyper-connection mixes view: per token, the `m × m` `comb` matrices of the attention and
//! FFN sites for reference, test and their difference, with readable numbers on every cell
//! (black or white by the cell's luminance), the row and column sums against the Sinkhorn
//! invariant (each within `SINKHORN_SUM_TOL` of 1), and `pre` and `post` with their numbers.

use super::heatmap::{fmt_cell, ColorScale, Grid, GridSource, MapKind, ScaleKind, Tensor};
use super::raster::{raster_ui, RasterArgs, RasterTexture, ZoomState};
use super::{content_key, find, Sides, ViewCaches, ViewCtx};
use crate::golden::names::parse_capture_name;
use crate::session::invariants::SINKHORN_SUM_TOL;
use crate::ui::commands::UiCommand;
use crate::ui::theme::{self, Palette};
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

/// Whether a Sinkhorn sum keeps the invariant.
pub fn sum_ok(s: Option<f64>) -> Option<bool> {
    s.map(|s| (s - 1.0).abs() <= f64::from(SINKHORN_SUM_TOL))
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("?".into(), |v| format!("{v:.4}"))
}

/// The `m × m` matrix of token `t` as a grid.
fn matrix(t: &Tensor, token: usize, m: usize) -> Grid {
    let base = token * m * m;
    Grid {
        rows: m,
        cols: m,
        cells: (0..m * m).map(|k| t.get(base + k)).collect(),
    }
}

/// The HC view's cache: textures and zooms of the six matrices.
#[derive(Default)]
pub struct HcCache {
    pub zoom: [ZoomState; 6],
    pub textures: [RasterTexture; 6],
}

/// Labels of the matrices (`attn reference comb`, ...).
pub fn matrix_label(site: &str, what: &str) -> String {
    format!("{site} {what} comb")
}

/// Draw the view for the layer of `ctx.r`.
pub fn hc_mix_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, caches: &mut ViewCaches) {
    let r = ctx.r;
    let Some(layer) = parse_capture_name(&r.name).layer else {
        ui.label("HC mixes: select a capture of a layer");
        return;
    };
    let m = ctx.golden.fixture.hc_mult.max(1);
    let tokens = find(ctx.results, r.regime_index, &format!("L{layer}.attn_comb"))
        .and_then(|c| {
            c.shape
                .len()
                .checked_sub(3)
                .and_then(|a| c.shape.get(a))
                .copied()
        })
        .unwrap_or(1)
        .max(1);
    let token = ctx.settings.hc_token.min(tokens - 1);
    let palette = theme::palette(ui.ctx());
    ui.horizontal_wrapped(|ui| {
        ui.label(format!("HC mixes of layer {layer} ({tokens} tokens)"));
        let text = ui.label("Token:");
        let mut t = token;
        if ui
            .add(egui::Slider::new(&mut t, 0..=tokens - 1))
            .labelled_by(text.id)
            .changed()
        {
            ctx.tx.send_ui(UiCommand::SetHcToken(t));
        }
        ui.weak(format!(
            "Sinkhorn invariant: every row and column of comb sums to 1 within {SINKHORN_SUM_TOL:e}"
        ));
    });
    let avail = ui.available_size();
    // Three matrices side by side, big enough for their numbers; the two sites stacked (the
    // selected capture's site first), scrolling when they do not fit.
    let cell = ((avail.x / 3.0 - theme::PANEL_GAP_PT - theme::RASTER_LEFT_PT - 8.0) / m as f32)
        .clamp(theme::HC_CELL_MIN_PT, theme::HC_CELL_MAX_PT);
    let sites = if parse_capture_name(&r.name).base.starts_with("ffn") {
        ["ffn", "attn"]
    } else {
        ["attn", "ffn"]
    };
    let mut hover = None;
    egui::ScrollArea::vertical()
        .id_salt("hc_scroll")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            for site in sites {
                let si = usize::from(site == "ffn");
                let get = |what: &str| {
                    super::related_sides(ctx, &format!("L{layer}.{site}_{what}")).map(|(s, _)| s)
                };
                let (Some(comb), Some(pre), Some(post)) = (get("comb"), get("pre"), get("post"))
                else {
                    ui.label(format!("{site}: not run yet"));
                    continue;
                };
                ui.strong(format!("{site} site, token {token}"));
                let grids = [
                    matrix(&comb.reference, token, m),
                    matrix(&comb.test, token, m),
                ];
                let diff = super::heatmap::diff_grid(&grids[0], &grids[1]);
                let scale = ColorScale {
                    map: MapKind::Sequential { lo: 0.0, hi: 1.0 },
                    kind: ScaleKind::Linear,
                    threshold: 1.0,
                };
                let dscale = ColorScale::diverging(&diff, ScaleKind::Linear);
                ui.horizontal(|ui| {
                    ui.spacing_mut().item_spacing.x = theme::PANEL_GAP_PT;
                    for (k, (what, grid, sc, side)) in [
                        ("reference", &grids[0], &scale, Some((&comb, true))),
                        ("test", &grids[1], &scale, Some((&comb, false))),
                        ("difference", &diff, &dscale, None),
                    ]
                    .into_iter()
                    .enumerate()
                    {
                        let slot = si * 3 + k;
                        ui.vertical(|ui| {
                            let name = match side {
                                Some((s, true)) => format!("Reference ({})", s.ref_name),
                                Some((s, false)) => format!("Test ({})", s.test_name),
                                None => "Difference (test − reference)".into(),
                            };
                            ui.label(format!("{name}: comb {m}×{m}"));
                            let label = matrix_label(site, what);
                            let size = egui::vec2(
                                m as f32 * cell + theme::RASTER_LEFT_PT,
                                m as f32 * cell + theme::RASTER_TOP_PT,
                            );
                            let resp = raster_ui(
                                ui,
                                size,
                                &RasterArgs {
                                    label: &label,
                                    source_key: content_key(&(
                                        r.order, layer, site, what, token,
                                        ctx.settings.test_backend, ctx.settings.reference,
                                    )),
                                    ticks: true,
                                },
                                &GridSource {
                                    grid,
                                    scale: sc,
                                    palette,
                                },
                                &mut caches.hc.zoom[slot],
                                &mut caches.hc.textures[slot],
                            );
                            super::probe_panel(&mut caches.layout, &label, resp.response.rect);
                            if let Some((i, j)) = resp.hovered {
                                hover = Some(format!(
                                    "layer {layer} {site} {what} comb, token {token} [residual {i}, output {j}]: {}",
                                    grid.at(i, j).map_or("no sample".into(), |v| format!("{v:.6e}"))
                                ));
                            }
                            if let Some((s, reference)) = side {
                                let t = if reference { &s.reference } else { &s.test };
                                sums_ui(ui, palette, site, t, token, m);
                            }
                        });
                    }
                });
                pre_post_ui(ui, palette, site, &pre, &post, token, m);
                ui.separator();
            }
        });
    caches.hover = hover.map(|text| super::HoverReadout::text(r.label(), text));
    super::readout_ui(
        ui,
        caches.hover.as_ref(),
        "Hover a cell for its exact value.",
    );
}

fn sums_ui(ui: &mut egui::Ui, palette: &Palette, site: &str, t: &Tensor, token: usize, m: usize) {
    let (rs, cs) = comb_sums(t, token, m);
    for (what, sums) in [("row sums", rs), ("col sums", cs)] {
        let ok = sums.iter().map(|s| sum_ok(*s)).collect::<Vec<_>>();
        let verdict = if ok.contains(&Some(false)) {
            "breaks the invariant"
        } else if ok.iter().all(|o| *o == Some(true)) {
            "ok"
        } else {
            "unknown"
        };
        let color = match verdict {
            "ok" => palette.pass_text,
            "unknown" => palette.warn_text,
            _ => palette.fail_text,
        };
        ui.colored_label(
            color,
            format!(
                "{site} {what}: {} ({verdict})",
                sums.iter()
                    .map(|v| fmt_opt(*v))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        );
    }
}

fn pre_post_ui(
    ui: &mut egui::Ui,
    palette: &Palette,
    site: &str,
    pre: &Sides,
    post: &Sides,
    token: usize,
    m: usize,
) {
    egui::Grid::new(("hc_pre_post", site))
        .striped(true)
        .show(ui, |ui| {
            ui.strong(site);
            for i in 0..m {
                ui.strong(format!("stream {i}"));
            }
            ui.end_row();
            for (what, s) in [("pre", pre), ("post", post)] {
                for (side, t) in [(&s.ref_name, &s.reference), (&s.test_name, &s.test)] {
                    ui.label(format!("{what} ({side})"));
                    for i in 0..m {
                        let v = t.get(token * m + i);
                        let other = if std::ptr::eq(t, &s.reference) {
                            s.test.get(token * m + i)
                        } else {
                            s.reference.get(token * m + i)
                        };
                        let text = v.map_or("?".into(), fmt_cell);
                        if v.is_some() && other.is_some() && v != other {
                            ui.colored_label(palette.fail_text, text);
                        } else {
                            ui.label(text);
                        }
                    }
                    ui.end_row();
                }
            }
        });
}
