//! The Values view: reference, test and difference of a 2-D slice as heatmaps (choose the two
//! axes, sliders for the others), value under the cursor, NaN/inf marked, and a histogram of
//! the error over every compared element.

use super::heatmap::{max_abs_finite, slice, Grid, Heatmap, SliceSpec, Tensor};
use super::ViewState;
use crate::golden::Golden;
use crate::session::controller::CaptureResult;
use eframe::egui;
use egui_plot::{Bar, BarChart, Plot};

/// Lowest decade of the error histogram; smaller errors (and exact zeros) land in its first bin.
pub const HIST_MIN_LOG10: i32 = -12;
/// Highest decade of the error histogram; larger (and non-finite) errors land in its last bin.
pub const HIST_MAX_LOG10: i32 = 4;

/// The three heatmaps of one slice plus the error histogram of the whole tensor.
pub struct HeatmapSet {
    pub reference: Heatmap,
    pub test: Heatmap,
    pub diff: Heatmap,
    /// `(log10 bin start, count)` of |test − reference| over the known positions.
    pub histogram: Vec<(i32, usize)>,
    /// Known positions compared.
    pub compared: usize,
}

/// |test − reference| per known position, binned by decade from `HIST_MIN_LOG10` to
/// `HIST_MAX_LOG10` (exact matches in the first bin, non-finite errors in the last).
pub fn error_histogram(reference: &Tensor, test: &Tensor) -> (Vec<(i32, usize)>, usize) {
    let n_bins = (HIST_MAX_LOG10 - HIST_MIN_LOG10 + 1) as usize;
    let mut counts = vec![0usize; n_bins];
    let mut compared = 0;
    for i in 0..reference.len().min(test.len()) {
        let (Some(r), Some(t)) = (reference.get(i), test.get(i)) else {
            continue;
        };
        compared += 1;
        let err = (t - r).abs();
        let bin = if !err.is_finite() {
            n_bins - 1
        } else if err == 0.0 {
            0
        } else {
            let d = err.log10().floor() as i32;
            (d.clamp(HIST_MIN_LOG10, HIST_MAX_LOG10) - HIST_MIN_LOG10) as usize
        };
        counts[bin] += 1;
    }
    let bins = counts
        .into_iter()
        .enumerate()
        .map(|(i, c)| (HIST_MIN_LOG10 + i as i32, c))
        .collect();
    (bins, compared)
}

fn diff_grid(reference: &Grid, test: &Grid) -> Grid {
    let cells = reference
        .cells
        .iter()
        .zip(&test.cells)
        .map(|(r, t)| match (r, t) {
            (Some(r), Some(t)) => Some(t - r),
            _ => None,
        })
        .collect();
    Grid {
        rows: reference.rows,
        cols: reference.cols,
        cells,
    }
}

/// Build the heatmaps and histogram of `reference` vs `test` under `spec`.
pub fn build_set(
    ctx: &egui::Context,
    key: &str,
    reference: &Tensor,
    test: &Tensor,
    spec: &SliceSpec,
) -> HeatmapSet {
    let rg = slice(reference, spec);
    let tg = slice(test, spec);
    let dg = diff_grid(&rg, &tg);
    // Reference and test share one scale so equal values get equal colours.
    let scale = max_abs_finite(&rg).max(max_abs_finite(&tg));
    let dscale = max_abs_finite(&dg);
    let (histogram, compared) = error_histogram(reference, test);
    HeatmapSet {
        reference: Heatmap::build(ctx, &format!("{key}/ref"), rg, scale),
        test: Heatmap::build(ctx, &format!("{key}/test"), tg, scale),
        diff: Heatmap::build(ctx, &format!("{key}/diff"), dg, dscale),
        histogram,
        compared,
    }
}

fn axis_combo_ui(ui: &mut egui::Ui, label: &str, axis: &mut usize, shape: &[usize]) {
    let text = ui.label(label);
    egui::ComboBox::from_id_salt(label)
        .selected_text(format!(
            "axis {} ({})",
            *axis,
            shape.get(*axis).unwrap_or(&0)
        ))
        .show_ui(ui, |ui| {
            for (a, d) in shape.iter().enumerate() {
                ui.selectable_value(axis, a, format!("axis {a} ({d})"));
            }
        })
        .response
        .labelled_by(text.id);
}

/// Draw the view for `r`.
pub fn values_ui(ui: &mut egui::Ui, golden: &Golden, r: &CaptureResult, state: &mut ViewState) {
    let Some((reference, test, ref_name, test_name)) = super::sides(golden, r, state) else {
        ui.label("Values: no data for this capture");
        return;
    };
    let shape = r.shape.clone();
    let mut spec = state
        .slices
        .get(&r.name)
        .cloned()
        .unwrap_or_else(|| SliceSpec::default_for(&shape));
    spec.clamp_to(&shape);
    ui.horizontal_wrapped(|ui| {
        if shape.len() >= 2 {
            axis_combo_ui(ui, "Rows:", &mut spec.row_axis, &shape);
            axis_combo_ui(ui, "Columns:", &mut spec.col_axis, &shape);
        }
        for (a, &d) in shape.iter().enumerate() {
            if a == spec.row_axis || a == spec.col_axis || d <= 1 {
                continue;
            }
            let text = ui.label(format!("axis {a}:"));
            ui.add(egui::Slider::new(&mut spec.fixed[a], 0..=d - 1))
                .labelled_by(text.id);
        }
    });
    spec.clamp_to(&shape);
    let key = format!(
        "{}|{}|{:?}|{:?}",
        r.order, state.test_backend, state.reference, spec
    );
    state.slices.insert(r.name.clone(), spec.clone());
    if !state.heatmaps.contains_key(&key) {
        // A handful of slices stay cached; older ones are dropped with their textures.
        if state.heatmaps.len() > 8 {
            state.heatmaps.clear();
        }
        let set = build_set(ui.ctx(), &key, &reference, &test, &spec);
        state.heatmaps.insert(key.clone(), set);
    }
    let Some(set) = state.heatmaps.get(&key) else {
        return;
    };
    let sampled = reference.known.is_some();
    ui.label(format!(
        "Values: reference = {ref_name}{}, test = {test_name}; {} positions compared",
        if sampled {
            " (sampled: grey cells have no sample)"
        } else {
            ""
        },
        set.compared
    ));
    let avail = ui.available_width();
    let side = ((avail - 24.0) / 3.0).clamp(80.0, 360.0);
    let aspect = set.reference.grid.rows as f32 / set.reference.grid.cols.max(1) as f32;
    let size = egui::vec2(side, (side * aspect).clamp(12.0, 260.0));
    ui.horizontal(|ui| {
        set.reference.heatmap_ui(ui, "Reference", size);
        set.test.heatmap_ui(ui, "Test", size);
        set.diff
            .heatmap_ui(ui, "Difference (test − reference)", size);
    });
    ui.label("Error histogram (|test − reference| by decade)");
    let bars: Vec<Bar> = set
        .histogram
        .iter()
        .map(|&(d, c)| Bar::new(f64::from(d) + 0.5, c as f64).width(0.9))
        .collect();
    Plot::new("error_histogram")
        .height(110.0)
        .allow_scroll(false)
        .x_axis_formatter(|m, _| format!("1e{}", m.value.floor() as i64))
        .show(ui, |plot_ui| {
            plot_ui.bar_chart(BarChart::new("|error|", bars));
        });
}
