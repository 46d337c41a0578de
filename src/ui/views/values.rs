//! The Values view: reference, test and difference of a 2-D slice as three linked heatmaps
//! (zoom and pan move all three; double-click fits), side by side when the view is wide enough
//! and stacked otherwise, each with its colour legend; axis pickers and sliders for tensors of
//! three or more axes; linear or log scales; "fold by tile" to make tile-edge and partial-tile
//! bugs stand out; and the hovered element's multi-index, reference, test, difference and bf16
//! ulp distance under the panels.

use super::heatmap::{
    diff_grid, fmt_value, fold_grid, legend_ui, slice, unravel, ColorScale, Fold, Grid, GridSource,
    ScaleKind, SliceSpec,
};
use super::raster::{raster_ui, RasterArgs, RasterTexture, ZoomState};
use super::{
    axis_names, content_key, panel_columns, HeatmapOptions, HoverReadout, Sides, ViewCaches,
    ViewCtx,
};
use crate::session::controller::CaptureResult;
use crate::ui::commands::UiCommand;
use crate::ui::theme;
use eframe::egui;

/// The slices and scales of the selected capture, built once per capture, slice and setting.
pub struct ValuesModel {
    pub sides: Sides,
    pub spec: SliceSpec,
    pub reference: Grid,
    pub test: Grid,
    pub diff: Grid,
    pub value_scale: ColorScale,
    pub diff_scale: ColorScale,
    /// The difference folded within the tile and per tile, with the cells folded into each.
    pub within: Option<(Grid, Vec<usize>, ColorScale)>,
    pub per_tile: Option<(Grid, Vec<usize>, ColorScale)>,
    pub axis_names: Vec<String>,
    /// NaN or infinite cells of the test slice.
    pub non_finite: usize,
}

/// The Values view's cache: its model, the linked zoom of the three panels, their textures.
#[derive(Default)]
pub struct ValuesCache {
    key: Option<u64>,
    /// Capture and slice the zoom belongs to (a new one fits again).
    zoom_key: Option<u64>,
    pub model: Option<ValuesModel>,
    pub zoom: ZoomState,
    pub fold_zoom: [ZoomState; 2],
    pub textures: [RasterTexture; 3],
    /// Models built so far (tests check steady frames build none).
    pub builds: usize,
}

/// The panels' labels (captions and accessibility labels).
pub const REFERENCE_PANEL: &str = "Reference heatmap";
pub const TEST_PANEL: &str = "Test heatmap";
pub const DIFF_PANEL: &str = "Difference heatmap";
pub const WITHIN_TILE_PANEL: &str = "Within-tile heatmap";
pub const PER_TILE_PANEL: &str = "Per-tile heatmap";

/// Smallest height of a heatmap panel.
const MIN_PANEL_HEIGHT_PT: f32 = 150.0;
/// Room a panel needs besides its raster: caption and legend.
const PANEL_CHROME_PT: f32 = 52.0;

/// Build the model of `r` under the settings.
pub fn build_model(
    sides: Sides,
    r: &CaptureResult,
    spec: &SliceSpec,
    opts: &HeatmapOptions,
) -> ValuesModel {
    let reference = slice(&sides.reference, spec);
    let test = slice(&sides.test, spec);
    let diff = diff_grid(&reference, &test);
    // Reference and test share one scale so equal values get equal colours.
    let value_scale = ColorScale::sequential(&[&reference, &test], opts.value_scale);
    let diff_scale = ColorScale::diverging(&diff, opts.diff_scale);
    let fold = |f: Fold| {
        let (g, counts) = fold_grid(&diff, opts.tile, f);
        let s = ColorScale::sequential(&[&g], opts.diff_scale);
        (g, counts, s)
    };
    let (within, per_tile) = if opts.fold {
        (Some(fold(Fold::WithinTile)), Some(fold(Fold::PerTile)))
    } else {
        (None, None)
    };
    ValuesModel {
        non_finite: test.non_finite(),
        axis_names: axis_names(&r.name, &r.shape),
        sides,
        spec: spec.clone(),
        reference,
        test,
        diff,
        value_scale,
        diff_scale,
        within,
        per_tile,
    }
}

/// The readout of slice cell `(row, col)`: multi-index, both sides, difference, bf16 ulps.
pub fn readout(model: &ValuesModel, r: &CaptureResult, row: usize, col: usize) -> HoverReadout {
    let flat = model.spec.flat_index(&r.shape, row, col);
    let multi = unravel(flat, &r.shape);
    let index: Vec<(String, usize)> = model
        .axis_names
        .iter()
        .cloned()
        .zip(multi.iter().copied())
        .collect();
    let reference = model.sides.reference.get(flat);
    let test = model.sides.test.get(flat);
    let idx_text = index
        .iter()
        .map(|(n, i)| format!("{n} {i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let side = |v: Option<f64>| v.map_or("no sample".to_string(), fmt_value);
    let mut text = format!(
        "{} [{idx_text}] (flat {flat}): {} {}, {} {}",
        r.label(),
        model.sides.ref_name,
        side(reference),
        model.sides.test_name,
        side(test)
    );
    if let (Some(a), Some(b)) = (reference, test) {
        text.push_str(&format!(", diff {}", fmt_value(b - a)));
        if r.kind.is_float() {
            let ulps = crate::num::bf16_ulp_distance(a as f32, b as f32);
            text.push_str(&format!(", {} bf16 ulps", fmt_ulps(ulps)));
        }
    }
    HoverReadout {
        capture: r.label(),
        flat_index: flat,
        index,
        reference,
        test,
        text,
    }
}

/// An ulp distance as text (`u64::MAX` means one side is NaN and the other is not).
pub fn fmt_ulps(u: u64) -> String {
    if u == u64::MAX {
        "NaN vs number".into()
    } else {
        u.to_string()
    }
}

fn scale_toggle_ui(
    ui: &mut egui::Ui,
    label: &str,
    current: ScaleKind,
    set: impl Fn(ScaleKind) -> HeatmapOptions,
    ctx: &ViewCtx<'_>,
) {
    let text = ui.label(label);
    for (kind, name) in [(ScaleKind::Linear, "linear"), (ScaleKind::Log, "log")] {
        let resp = ui
            .selectable_label(current == kind, name)
            .labelled_by(text.id);
        if resp.clicked() && current != kind {
            ctx.tx.send_ui(UiCommand::SetHeatmapOptions(set(kind)));
        }
    }
}

fn axis_combo_ui(
    ui: &mut egui::Ui,
    label: &str,
    axis: &mut usize,
    names: &[String],
    shape: &[usize],
) {
    let text = ui.label(label);
    egui::ComboBox::from_id_salt(label)
        .selected_text(format!(
            "{} ({})",
            names.get(*axis).map_or("-", String::as_str),
            shape.get(*axis).unwrap_or(&0)
        ))
        .show_ui(ui, |ui| {
            for (a, d) in shape.iter().enumerate() {
                ui.selectable_value(axis, a, format!("{} ({d})", names[a]));
            }
        })
        .response
        .labelled_by(text.id);
}

/// The slice controls; sends `SetSlice` when the user changes the slice.
fn slice_controls_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, spec: &SliceSpec, names: &[String]) {
    let r = ctx.r;
    let shape = &r.shape;
    let mut edited = spec.clone();
    if shape.len() >= 2 {
        axis_combo_ui(ui, "Rows:", &mut edited.row_axis, names, shape);
        axis_combo_ui(ui, "Columns:", &mut edited.col_axis, names, shape);
    }
    for (a, &d) in shape.iter().enumerate() {
        if a == edited.row_axis || a == edited.col_axis || d <= 1 {
            continue;
        }
        let text = ui.label(format!("{}:", names[a]));
        ui.add(egui::Slider::new(&mut edited.fixed[a], 0..=d - 1))
            .labelled_by(text.id);
    }
    edited.clamp_to(shape);
    if edited != *spec {
        ctx.tx.send_ui(UiCommand::SetSlice {
            name: r.name.clone(),
            spec: edited,
        });
    }
}

fn options_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, zoom: &mut ZoomState) {
    let opts = ctx.settings.heatmap;
    scale_toggle_ui(
        ui,
        "Values:",
        opts.value_scale,
        |k| HeatmapOptions {
            value_scale: k,
            ..opts
        },
        ctx,
    );
    scale_toggle_ui(
        ui,
        "Difference:",
        opts.diff_scale,
        |k| HeatmapOptions {
            diff_scale: k,
            ..opts
        },
        ctx,
    );
    ui.separator();
    let mut fold = opts.fold;
    if ui
        .checkbox(&mut fold, "Fold by tile")
        .on_hover_text(
            "Fold the difference by a kernel's tile: within-tile positions (tile-edge bugs) and \
             one cell per tile (partial-tile bugs)",
        )
        .changed()
    {
        ctx.tx.send_ui(UiCommand::SetHeatmapOptions(HeatmapOptions {
            fold,
            ..opts
        }));
    }
    let mut tile = opts.tile;
    let rows_label = ui.label("tile rows");
    let a = ui
        .add_enabled(fold, egui::DragValue::new(&mut tile[0]).range(1..=4096))
        .labelled_by(rows_label.id);
    let cols_label = ui.label("× cols");
    let b = ui
        .add_enabled(fold, egui::DragValue::new(&mut tile[1]).range(1..=4096))
        .labelled_by(cols_label.id);
    if (a.changed() || b.changed()) && tile != opts.tile {
        ctx.tx.send_ui(UiCommand::SetHeatmapOptions(HeatmapOptions {
            tile,
            ..opts
        }));
    }
    ui.separator();
    if ui
        .button("Fit")
        .on_hover_text("Show the whole slice (or double-click a heatmap)")
        .clicked()
    {
        zoom.fit();
    }
}

/// Draw the view for `ctx.r`.
pub fn values_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, caches: &mut ViewCaches) {
    let r = ctx.r;
    let mut spec = ctx
        .settings
        .slices
        .get(&r.name)
        .cloned()
        .unwrap_or_else(|| SliceSpec::default_for(&r.shape));
    spec.clamp_to(&r.shape);
    let opts = ctx.settings.heatmap;
    let key = content_key(&(
        r.order,
        r.regime_index,
        &r.name,
        ctx.settings.test_backend,
        ctx.settings.reference,
        &spec,
        opts,
    ));
    let cache = &mut caches.values;
    if cache.key != Some(key) {
        let Some(sides) = super::sides(ctx.golden, r, ctx.settings) else {
            ui.label("Values: no data for this capture");
            return;
        };
        cache.model = Some(build_model(sides, r, &spec, &opts));
        cache.key = Some(key);
        cache.builds += 1;
        let zk = content_key(&(r.order, &r.name, &spec, opts.tile));
        if cache.zoom_key != Some(zk) {
            cache.zoom = ZoomState::default();
            cache.fold_zoom = Default::default();
            cache.zoom_key = Some(zk);
        }
    }
    let Some(model) = cache.model.as_ref() else {
        return;
    };
    ui.horizontal_wrapped(|ui| {
        slice_controls_ui(ui, ctx, &spec, &model.axis_names);
        ui.separator();
        options_ui(ui, ctx, &mut cache.zoom);
    });
    let names = &model.axis_names;
    let slice_text = if model.spec.row_axis == model.spec.col_axis {
        names.get(model.spec.col_axis).cloned().unwrap_or_default()
    } else {
        format!(
            "{} × {}",
            names.get(model.spec.row_axis).map_or("-", String::as_str),
            names.get(model.spec.col_axis).map_or("-", String::as_str)
        )
    };
    ui.label(format!(
        "Values: reference = {}{}, test = {}; slice {slice_text}, {}×{} cells{}{}",
        model.sides.ref_name,
        if model.sides.reference.is_sampled() {
            " (sampled: grey cells have no sample)"
        } else {
            ""
        },
        model.sides.test_name,
        model.reference.rows,
        model.reference.cols,
        if model.non_finite > 0 {
            format!(", {} NaN/inf in the test slice (marked)", model.non_finite)
        } else {
            String::new()
        },
        model
            .sides
            .note
            .as_ref()
            .map_or(String::new(), |n| format!("; {n}"))
    ));
    let avail = ui.available_size();
    let (cols, panel_w) = panel_columns(3, avail.x);
    let rows_of_panels = 3usize.div_ceil(cols);
    let readout_h = ui.text_style_height(&egui::TextStyle::Body) + 6.0;
    let panel_h =
        ((avail.y - readout_h) / rows_of_panels as f32 - PANEL_CHROME_PT).max(MIN_PANEL_HEIGHT_PT);
    let raster_size = egui::vec2(panel_w, panel_h);
    let specs = panel_specs(model, &opts);
    let mut hover = None;
    let zoom = &mut cache.zoom;
    let fold_zoom = &mut cache.fold_zoom;
    let textures = &mut cache.textures;
    let layout = &mut caches.layout;
    for chunk in specs.chunks(cols) {
        ui.horizontal(|ui| {
            ui.spacing_mut().item_spacing.x = theme::PANEL_GAP_PT;
            for p in chunk {
                ui.vertical(|ui| {
                    ui.set_width(panel_w);
                    ui.label(&p.caption);
                    let z = match p.zoom_slot {
                        0 => &mut *zoom,
                        1 => &mut fold_zoom[0],
                        _ => &mut fold_zoom[1],
                    };
                    let source = GridSource {
                        grid: p.grid,
                        scale: p.scale,
                        palette: theme::palette(ui.ctx()),
                    };
                    let resp = raster_ui(
                        ui,
                        raster_size,
                        &RasterArgs {
                            label: p.label,
                            source_key: content_key(&(key, p.label)),
                            ticks: true,
                        },
                        &source,
                        z,
                        &mut textures[p.tex_slot],
                    );
                    super::probe_panel(layout, p.label, resp.response.rect);
                    if let Some((row, col)) = resp.hovered {
                        let h = match p.counts {
                            None => readout(model, r, row, col),
                            Some(counts) => fold_readout(p, counts, r, row, col),
                        };
                        // The tooltip follows the pointer; the line under the panels stays.
                        resp.response.on_hover_text_at_pointer(h.text.clone());
                        hover = Some(h);
                    }
                    ui.horizontal(|ui| {
                        ui.add_space(theme::RASTER_LEFT_PT - ui.spacing().item_spacing.x);
                        legend_ui(ui, &p.caption, p.scale, panel_w - theme::RASTER_LEFT_PT);
                    });
                });
            }
        });
    }
    caches.hover = hover;
    super::readout_ui(
        ui,
        caches.hover.as_ref(),
        "Hover a cell for its index and values; wheel zooms, drag pans, double-click fits.",
    );
}

/// One heatmap panel of the view.
struct PanelSpec<'m> {
    label: &'static str,
    caption: String,
    grid: &'m Grid,
    scale: &'m ColorScale,
    /// 0: the linked value zoom; 1, 2: the fold panels' own zooms.
    zoom_slot: usize,
    tex_slot: usize,
    /// Cells folded into each cell (fold panels only).
    counts: Option<&'m [usize]>,
}

fn panel_specs<'m>(model: &'m ValuesModel, opts: &HeatmapOptions) -> Vec<PanelSpec<'m>> {
    let diff = PanelSpec {
        label: DIFF_PANEL,
        caption: "Difference (test − reference)".into(),
        grid: &model.diff,
        scale: &model.diff_scale,
        zoom_slot: 0,
        tex_slot: 2,
        counts: None,
    };
    match (&model.within, &model.per_tile) {
        (Some((wg, wc, ws)), Some((pg, pc, ps))) => vec![
            PanelSpec {
                tex_slot: 0,
                ..diff
            },
            PanelSpec {
                label: WITHIN_TILE_PANEL,
                caption: format!("Within tile {}×{}: max |diff|", opts.tile[0], opts.tile[1]),
                grid: wg,
                scale: ws,
                zoom_slot: 1,
                tex_slot: 1,
                counts: Some(wc),
            },
            PanelSpec {
                label: PER_TILE_PANEL,
                caption: format!("Per tile: max |diff| ({}×{} tiles)", pg.rows, pg.cols),
                grid: pg,
                scale: ps,
                zoom_slot: 2,
                tex_slot: 2,
                counts: Some(pc),
            },
        ],
        _ => vec![
            PanelSpec {
                label: REFERENCE_PANEL,
                caption: format!("Reference ({})", model.sides.ref_name),
                grid: &model.reference,
                scale: &model.value_scale,
                zoom_slot: 0,
                tex_slot: 0,
                counts: None,
            },
            PanelSpec {
                label: TEST_PANEL,
                caption: format!("Test ({})", model.sides.test_name),
                grid: &model.test,
                scale: &model.value_scale,
                zoom_slot: 0,
                tex_slot: 1,
                counts: None,
            },
            diff,
        ],
    }
}

fn fold_readout(
    p: &PanelSpec<'_>,
    counts: &[usize],
    r: &CaptureResult,
    row: usize,
    col: usize,
) -> HoverReadout {
    let n = counts.get(row * p.grid.cols + col).copied().unwrap_or(0);
    let v = p.grid.at(row, col);
    let what = if p.label == WITHIN_TILE_PANEL {
        format!("tile position ({row}, {col})")
    } else {
        format!("tile ({row}, {col})")
    };
    HoverReadout {
        capture: r.label(),
        flat_index: row * p.grid.cols + col,
        index: vec![("tile row".into(), row), ("tile col".into(), col)],
        reference: None,
        test: v,
        text: format!(
            "{}: {what}: max |diff| {} over {n} cells",
            r.label(),
            v.map_or("no sample".into(), fmt_value)
        ),
    }
}
