//! The MoE routing view: a token × expert raster with both sides' picks (both, reference only,
//! test only, tie flip) and, once cells are big enough, the test's routing weight on each pick;
//! an expert-load histogram (tokens per expert, reference and test); and every token whose
//! experts differ, with both sides' experts and weights and the session's triage class.

use super::raster::{raster_ui, strongest, CellSource, RasterArgs, RasterTexture, ZoomState};
use super::topk::{classify_row, int_row, legend_ui, SetCell};
use super::{find, rows_of, Sides, ViewCaches, ViewCtx};
use crate::golden::names::parse_capture_name;
use crate::golden::policy::F32_TOL;
use crate::session::controller::CaptureTriage;
use crate::ui::theme::{self, Palette};
use eframe::egui::{self, Color32};
use std::ops::Range;

/// Most experts the raster shows (a file may claim any number).
pub const MAX_EXPERTS: usize = 1 << 16;

/// One token whose experts differ.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenDisagreement {
    pub token: usize,
    /// `(expert, weight)` only the reference picked, and only the test picked.
    pub reference_only: Vec<(i64, Option<f64>)>,
    pub test_only: Vec<(i64, Option<f64>)>,
    /// The session's class (`tie flip`, `near tie`, `real`) and score gap, when triaged.
    pub class: Option<String>,
    pub score_gap: Option<f32>,
}

/// Routing of one layer on both sides.
pub struct MoeModel {
    pub layer: usize,
    pub indices: Sides,
    pub weights: Sides,
    pub tokens: usize,
    pub k: usize,
    pub n_experts: usize,
    /// `tokens × n_experts` cells.
    pub cells: Vec<SetCell>,
    pub agree_tokens: usize,
    /// Tokens routed to each expert: reference, test.
    pub load: Vec<(usize, usize)>,
    pub disagreements: Vec<TokenDisagreement>,
    pub counts: Vec<(SetCell, usize)>,
}

impl MoeModel {
    pub fn build(
        layer: usize,
        indices: Sides,
        weights: Sides,
        fixture_experts: usize,
        triage: Option<&CaptureTriage>,
    ) -> MoeModel {
        let (tokens, k) = rows_of(&indices.test);
        let max_index = (0..indices.test.len().max(indices.reference.len()))
            .flat_map(|i| [indices.reference.get(i), indices.test.get(i)])
            .flatten()
            .filter(|v| v.is_finite())
            .fold(-1.0f64, f64::max);
        let n_experts = fixture_experts
            .max((max_index + 1.0).clamp(0.0, MAX_EXPERTS as f64) as usize)
            .clamp(1, MAX_EXPERTS);
        let mut cells = vec![SetCell::Absent; tokens * n_experts];
        let mut load = vec![(0usize, 0usize); n_experts];
        let mut agree_tokens = 0;
        let mut disagreements = Vec::new();
        for t in 0..tokens {
            let rref = int_row(&indices.reference, t, k);
            let rtest: Vec<i64> = int_row(&indices.test, t, k)
                .into_iter()
                .map(|v| v.unwrap_or(-1))
                .collect();
            let wr = |e: i64| {
                rref.iter()
                    .position(|&x| x == Some(e))
                    .and_then(|j| weights.reference.get(t * k + j))
            };
            let wt = |e: i64| {
                rtest
                    .iter()
                    .position(|&x| x == e)
                    .and_then(|j| weights.test.get(t * k + j))
            };
            let tie = |ri: i64, ti: i64| matches!((wr(ri), wt(ti)), (Some(a), Some(b)) if (a - b).abs() <= F32_TOL);
            let a = classify_row(&rref, &rtest, &tie);
            if a.agreement >= 1.0 {
                agree_tokens += 1;
            }
            let mut put = |e: i64, c: SetCell| {
                if e >= 0 && (e as usize) < n_experts {
                    let cell = &mut cells[t * n_experts + e as usize];
                    if c.priority() > cell.priority() {
                        *cell = c;
                    }
                }
            };
            for (j, e) in rref.iter().enumerate() {
                if let Some(e) = *e {
                    put(e, a.ref_cells[j]);
                    if e >= 0 && (e as usize) < n_experts {
                        load[e as usize].0 += 1;
                    }
                }
            }
            for (j, &e) in rtest.iter().enumerate() {
                put(e, a.test_cells[j]);
                if e >= 0 && (e as usize) < n_experts {
                    load[e as usize].1 += 1;
                }
            }
            if a.agreement < 1.0 {
                let ref_only: Vec<(i64, Option<f64>)> = rref
                    .iter()
                    .flatten()
                    .filter(|&&e| e >= 0 && !rtest.contains(&e))
                    .map(|&e| (e, wr(e)))
                    .collect();
                let test_only: Vec<(i64, Option<f64>)> = rtest
                    .iter()
                    .filter(|&&e| e >= 0 && !rref.contains(&Some(e)))
                    .map(|&e| (e, wt(e)))
                    .collect();
                let detail = triage.and_then(|tr| tr.triage.details.iter().find(|d| d.row == t));
                disagreements.push(TokenDisagreement {
                    token: t,
                    reference_only: ref_only,
                    test_only,
                    class: detail.map(|d| {
                        if triage.is_some_and(|tr| tr.scores_known) {
                            d.class.to_string()
                        } else {
                            "unscored".into()
                        }
                    }),
                    score_gap: detail.map(|d| d.score_gap),
                });
            }
        }
        let kinds = [
            SetCell::Both,
            SetCell::RefOnly,
            SetCell::TestOnly,
            SetCell::TieFlip,
            SetCell::Unknown,
        ];
        let counts = kinds
            .iter()
            .map(|&kd| (kd, cells.iter().filter(|&&c| c == kd).count()))
            .collect();
        MoeModel {
            layer,
            indices,
            weights,
            tokens,
            k,
            n_experts,
            cells,
            agree_tokens,
            load,
            disagreements,
            counts,
        }
    }
    fn cell(&self, t: usize, e: usize) -> SetCell {
        self.cells
            .get(t * self.n_experts + e)
            .copied()
            .unwrap_or(SetCell::Absent)
    }
    /// The weight side `reference` gave expert `e` for token `t`, if it picked it.
    pub fn weight(&self, t: usize, e: usize, reference: bool) -> Option<f64> {
        let (idx, w) = if reference {
            (&self.indices.reference, &self.weights.reference)
        } else {
            (&self.indices.test, &self.weights.test)
        };
        (0..self.k)
            .find(|&j| {
                idx.get(t * self.k + j)
                    .is_some_and(|v| v as i64 == e as i64)
            })
            .and_then(|j| w.get(t * self.k + j))
    }
}

struct RoutingSource<'a> {
    m: &'a MoeModel,
    palette: &'a Palette,
}

impl CellSource for RoutingSource<'_> {
    fn rows(&self) -> usize {
        self.m.tokens
    }
    fn cols(&self) -> usize {
        self.m.n_experts
    }
    fn block_color(&self, rows: Range<usize>, cols: Range<usize>) -> Color32 {
        strongest(
            rows,
            cols,
            SetCell::Absent,
            |t, e| self.m.cell(t, e),
            SetCell::priority,
        )
        .color(self.palette)
    }
    fn cell_text(&self, t: usize, e: usize) -> Option<String> {
        let w = self
            .m
            .weight(t, e, false)
            .or_else(|| self.m.weight(t, e, true))?;
        Some(format!("{w:.2}"))
    }
}

/// The routing view's cache.
#[derive(Default)]
pub struct MoeCache {
    key: Option<u64>,
    pub model: Option<MoeModel>,
    pub zoom: ZoomState,
    pub texture: RasterTexture,
}

/// Labels of the view's panels.
pub const ROUTING_PANEL: &str = "Routing raster";
pub const LOAD_PANEL: &str = "Expert load histogram";

/// Height of the expert-load histogram.
const LOAD_HEIGHT_PT: f32 = 90.0;
/// Rows of the disagreement table shown at most.
pub const DISAGREEMENTS_SHOWN: usize = 200;

fn fmt_picks(v: &[(i64, Option<f64>)]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.iter()
        .map(|(e, w)| match w {
            Some(w) => format!("{e} ({w:.4})"),
            None => format!("{e} (?)"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Draw the view for the layer of `ctx.r`.
pub fn moe_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, caches: &mut ViewCaches) {
    let r = ctx.r;
    let Some(layer) = parse_capture_name(&r.name).layer else {
        ui.label("MoE routing: select a capture of a layer");
        return;
    };
    let idx_r = find(
        ctx.results,
        r.regime_index,
        &format!("L{layer}.moe_indices"),
    );
    let w_r = find(
        ctx.results,
        r.regime_index,
        &format!("L{layer}.moe_weights"),
    );
    let (Some(idx_r), Some(w_r)) = (idx_r, w_r) else {
        ui.label(format!("MoE routing: layer {layer} has not run yet"));
        return;
    };
    let key = super::capture_key(idx_r, ctx.settings);
    let cache = &mut caches.moe;
    if cache.key != Some(key) {
        let (Some(idx), Some(w)) = (
            super::sides(ctx.golden, idx_r, ctx.settings),
            super::sides(ctx.golden, w_r, ctx.settings),
        ) else {
            ui.label("MoE routing: no data");
            return;
        };
        // The session's triage against the side the view compares with.
        let named = super::topk::named_triages(idx_r, ctx.settings.test_backend);
        let triage = named
            .iter()
            .find(|t| t.reference == idx.ref_name)
            .map(|t| &t.triage);
        cache.model = Some(MoeModel::build(
            layer,
            idx,
            w,
            ctx.golden.fixture.n_routed_experts,
            triage,
        ));
        cache.key = Some(key);
        cache.zoom = ZoomState::default();
    }
    let Some(m) = cache.model.as_ref() else {
        return;
    };
    let palette = theme::palette(ui.ctx());
    ui.horizontal_wrapped(|ui| {
        ui.label(format!(
            "MoE routing of layer {}: {} tokens × {} experts, {} per token; reference = {}, test = {}",
            m.layer, m.tokens, m.n_experts, m.k, m.indices.ref_name, m.indices.test_name
        ));
        ui.colored_label(
            palette.verdict(m.agree_tokens == m.tokens),
            format!("Tokens routed identically: {} of {}", m.agree_tokens, m.tokens),
        );
        if ui.button("Fit").clicked() {
            cache.zoom.fit();
        }
    });
    legend_ui(ui, &m.counts);
    let table_rows = m.disagreements.len().min(DISAGREEMENTS_SHOWN);
    let table_h = if table_rows > 0 {
        (table_rows as f32 * 20.0 + 44.0).min(170.0)
    } else {
        22.0
    };
    let readout_h = ui.text_style_height(&egui::TextStyle::Body) + 8.0;
    let avail = ui.available_size();
    let load_h = (avail.y * 0.2).clamp(40.0, LOAD_HEIGHT_PT);
    // Besides the raster: the load's caption, the load, the readout, the table and its heading.
    let raster_h = (avail.y - load_h - table_h - 2.0 * readout_h - 40.0).max(140.0);
    let resp = raster_ui(
        ui,
        egui::vec2(avail.x, raster_h),
        &RasterArgs {
            label: ROUTING_PANEL,
            source_key: key,
            ticks: true,
        },
        &RoutingSource { m, palette },
        &mut cache.zoom,
        &mut cache.texture,
    );
    super::probe_panel(&mut caches.layout, ROUTING_PANEL, resp.response.rect);
    let mut hover = resp.hovered.map(|(t, e)| {
        let w = |reference: bool| {
            m.weight(t, e, reference)
                .map_or("not picked".to_string(), |w| format!("weight {w:.6}"))
        };
        format!(
            "layer {} token {t}, expert {e}: {}; {} {}, {} {}",
            m.layer,
            m.cell(t, e).label(),
            m.indices.ref_name,
            w(true),
            m.indices.test_name,
            w(false)
        )
    });
    ui.label("Expert load (tokens per expert): reference left, test right in each column");
    let zoom_window = cache.zoom.window(m.tokens, m.n_experts);
    if let Some(text) = load_ui(ui, palette, m, egui::vec2(avail.x, load_h), zoom_window) {
        hover = Some(text);
    }
    let capture = format!("{}/L{}.moe_indices", r.regime, m.layer);
    caches.hover = hover.map(|text| super::HoverReadout::text(capture, text));
    super::readout_ui(
        ui,
        caches.hover.as_ref(),
        "Hover a cell or bar: token, expert, both sides' weights; wheel zooms, drag pans.",
    );
    disagreements_ui(ui, palette, m);
}

/// The expert-load histogram over the raster's visible experts; returns the hover text.
fn load_ui(
    ui: &mut egui::Ui,
    palette: &Palette,
    m: &MoeModel,
    size: egui::Vec2,
    window: super::raster::Window,
) -> Option<String> {
    let (rect, resp) = ui.allocate_exact_size(size, egui::Sense::hover());
    resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Image, true, LOAD_PANEL));
    let bars =
        egui::Rect::from_min_max(rect.min + egui::vec2(theme::RASTER_LEFT_PT, 0.0), rect.max);
    let painter = ui.painter_at(rect);
    painter.rect_filled(bars, 0.0, palette.extreme_bg);
    let (_, experts) = window.cells(m.tokens, m.n_experts);
    let max_load = m.load[experts.clone()]
        .iter()
        .map(|&(a, b)| a.max(b))
        .max()
        .unwrap_or(0)
        .max(1);
    painter.text(
        egui::pos2(bars.min.x - 4.0, bars.min.y),
        egui::Align2::RIGHT_TOP,
        max_load.to_string(),
        egui::FontId::monospace(10.0),
        palette.text_weak,
    );
    let n = experts.len().max(1);
    let px = (bars.width() as usize).max(1);
    let columns = n.min(px);
    for col in 0..columns {
        let es = super::raster::texel_cells(&experts, columns, col);
        let (a, b) = m.load[es]
            .iter()
            .fold((0, 0), |(x, y), &(a, b)| (x.max(a), y.max(b)));
        let x0 = bars.min.x + bars.width() * col as f32 / columns as f32;
        let x1 = bars.min.x + bars.width() * (col + 1) as f32 / columns as f32;
        let mid = 0.5 * (x0 + x1);
        let h = |v: usize| bars.height() * v as f32 / max_load as f32;
        painter.rect_filled(
            egui::Rect::from_min_max(
                egui::pos2(x0, bars.max.y - h(a)),
                egui::pos2(mid, bars.max.y),
            ),
            0.0,
            palette.set_ref_only,
        );
        painter.rect_filled(
            egui::Rect::from_min_max(
                egui::pos2(mid, bars.max.y - h(b)),
                egui::pos2(x1, bars.max.y),
            ),
            0.0,
            palette.set_test_only,
        );
    }
    let p = resp.hover_pos()?;
    if !bars.contains(p) {
        return None;
    }
    let col = (((p.x - bars.min.x) / bars.width()) * columns as f32) as usize;
    let es = super::raster::texel_cells(&experts, columns, col.min(columns - 1));
    let e = es.start;
    let (a, b) = m.load.get(e).copied().unwrap_or((0, 0));
    Some(format!(
        "layer {} expert {e}: {} tokens ({}), {} tokens ({})",
        m.layer, a, m.indices.ref_name, b, m.indices.test_name
    ))
}

fn disagreements_ui(ui: &mut egui::Ui, palette: &Palette, m: &MoeModel) {
    if m.disagreements.is_empty() {
        ui.colored_label(
            palette.pass_text,
            "Every token picked the same experts on both sides.",
        );
        return;
    }
    ui.colored_label(
        palette.fail_text,
        format!(
            "{} tokens routed differently (reference-only and test-only experts with their weights):",
            m.disagreements.len()
        ),
    );
    egui::ScrollArea::both()
        .id_salt("moe_disagreements")
        .max_height(140.0)
        .show(ui, |ui| {
            egui::Grid::new("moe_disagreements_grid")
                .striped(true)
                .show(ui, |ui| {
                    for h in ["token", "reference only", "test only", "class", "score gap"] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for d in m.disagreements.iter().take(DISAGREEMENTS_SHOWN) {
                        ui.label(format!("token {}", d.token));
                        ui.label(fmt_picks(&d.reference_only));
                        ui.label(fmt_picks(&d.test_only));
                        ui.label(d.class.clone().unwrap_or_else(|| "not triaged".into()));
                        ui.label(d.score_gap.map_or("-".into(), |g| format!("{g:.4e}")));
                        ui.end_row();
                    }
                });
        });
}
