//! The Window mask view: the query-by-kv-row mask that a layer's `sa_topk_idxs` implies, with
//! the sliding-window part (the first `window_size` columns) and the compressed part (the rest,
//! offset by the number of window rows) told apart, `-1` slots counted, the decode ring order,
//! and reference and test side by side with their differences.

use super::heatmap::Tensor;
use super::topk::cell_grid_ui;
use super::{find, rows_of, ViewState};
use crate::golden::names::parse_capture_name;
use crate::golden::Golden;
use crate::session::controller::CaptureResult;
use crate::ui::theme;
use eframe::egui;

/// What a (query, kv row) cell of the mask is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaskCell {
    /// Not attended.
    Off,
    /// Attended through the sliding window.
    Window,
    /// Attended through the compressed branch.
    Compressed,
    /// The reference row is incomplete (sampled), so the cell is unknown.
    Unknown,
}

/// The mask of one side: `rows × n_kv` cells, plus the `-1` slots of each row.
#[derive(Debug, Clone, PartialEq)]
pub struct Mask {
    pub rows: usize,
    pub n_kv: usize,
    pub cells: Vec<MaskCell>,
    pub absent_per_row: Vec<usize>,
}

/// Build the mask from index rows of `width` slots: slots `< window_cols` are the window part,
/// the rest the compressed part. A row with an unknown slot marks its unpicked cells Unknown.
pub fn build_mask(idx: &Tensor, window_cols: usize, n_kv: usize) -> Mask {
    let (rows, width) = rows_of(idx);
    let mut cells = vec![MaskCell::Off; rows * n_kv];
    let mut absent_per_row = vec![0; rows];
    for r in 0..rows {
        let mut complete = true;
        for j in 0..width {
            match idx.get(r * width + j) {
                None => complete = false,
                Some(v) if v < 0.0 => absent_per_row[r] += 1,
                Some(v) => {
                    let k = v as usize;
                    if k < n_kv {
                        cells[r * n_kv + k] = if j < window_cols {
                            MaskCell::Window
                        } else {
                            MaskCell::Compressed
                        };
                    }
                }
            }
        }
        if !complete {
            for c in &mut cells[r * n_kv..(r + 1) * n_kv] {
                if *c == MaskCell::Off {
                    *c = MaskCell::Unknown;
                }
            }
        }
    }
    Mask {
        rows,
        n_kv,
        cells,
        absent_per_row,
    }
}

/// Cells where both sides are known and differ.
pub fn mask_differences(a: &Mask, b: &Mask) -> usize {
    a.cells
        .iter()
        .zip(&b.cells)
        .filter(|(x, y)| **x != MaskCell::Unknown && **y != MaskCell::Unknown && x != y)
        .count()
}

fn color(c: MaskCell) -> egui::Color32 {
    match c {
        MaskCell::Off => theme::SET_EMPTY,
        MaskCell::Window => theme::MASK_WINDOW,
        MaskCell::Compressed => theme::MASK_COMPRESSED,
        MaskCell::Unknown => theme::SET_UNKNOWN,
    }
}

/// Draw the view for the layer of `r`.
pub fn window_mask_ui(
    ui: &mut egui::Ui,
    golden: &Golden,
    results: &[CaptureResult],
    r: &CaptureResult,
    state: &ViewState,
) {
    let Some(layer) = parse_capture_name(&r.name).layer else {
        ui.label("Window mask: select a capture of a layer");
        return;
    };
    let idx_name = format!("L{layer}.sa_topk_idxs");
    let Some(target) = find(results, r.regime_index, &idx_name) else {
        ui.label(format!("Window mask: {idx_name} has not run yet"));
        return;
    };
    let Some((reference, test, ref_name, test_name)) = super::sides(golden, target, state) else {
        ui.label("Window mask: no data");
        return;
    };
    let window = golden.fixture.window_size;
    let (_, width) = rows_of(&test);
    let n_kv = find(results, r.regime_index, &format!("L{layer}.sa_kv"))
        .and_then(|kv| kv.shape.get(1).copied())
        .unwrap_or_else(|| {
            test.values
                .iter()
                .fold(0.0f64, |m, &v| m.max(v + 1.0))
                .max(0.0) as usize
        });
    let window_cols = window.min(width);
    let mref = build_mask(&reference, window_cols, n_kv);
    let mtest = build_mask(&test, window_cols, n_kv);
    let diffs = mask_differences(&mref, &mtest);
    let count = |m: &Mask, k: MaskCell| m.cells.iter().filter(|&&c| c == k).count();
    ui.label(format!(
        "Window mask of {}: {} queries × {n_kv} kv rows; window part = first {window_cols} slots, compressed part = {} slots",
        target.label(),
        mtest.rows,
        width - window_cols
    ));
    ui.label(format!(
        "Test ({test_name}): window cells {}, compressed cells {}, -1 slots {}",
        count(&mtest, MaskCell::Window),
        count(&mtest, MaskCell::Compressed),
        mtest.absent_per_row.iter().sum::<usize>()
    ));
    ui.label(format!(
        "Reference ({ref_name}): window cells {}, compressed cells {}, unknown cells {}",
        count(&mref, MaskCell::Window),
        count(&mref, MaskCell::Compressed),
        count(&mref, MaskCell::Unknown)
    ));
    ui.colored_label(
        theme::verdict_color(diffs == 0),
        format!("Mask differences: {diffs}"),
    );
    if mtest.rows == 1 {
        let ring: Vec<String> = (0..window_cols)
            .filter_map(|j| test.get(j).map(|v| format!("{}", v as i64)))
            .collect();
        ui.label(format!(
            "Decode ring order (slots, oldest first): {}",
            ring.join(", ")
        ));
    }
    let cell_pt = (theme::GRID_CELL_PT * 0.8).max(8.0);
    egui::ScrollArea::both()
        .id_salt("mask_scroll")
        .max_height(340.0)
        .show(ui, |ui| {
            ui.horizontal(|ui| {
                for (title, m) in [("Reference", &mref), ("Test", &mtest)] {
                    ui.vertical(|ui| {
                        ui.label(title);
                        cell_grid_ui(ui, m.rows, m.n_kv, cell_pt, &|row, c| {
                            (color(m.cells[row * m.n_kv + c]), None)
                        });
                    });
                }
                ui.vertical(|ui| {
                    ui.label("Differences");
                    cell_grid_ui(ui, mtest.rows, n_kv, cell_pt, &|row, c| {
                        let (a, b) = (mref.cells[row * n_kv + c], mtest.cells[row * n_kv + c]);
                        let fill = if a == MaskCell::Unknown || b == MaskCell::Unknown {
                            theme::SET_UNKNOWN
                        } else if a == b {
                            theme::SET_EMPTY
                        } else {
                            theme::FAIL
                        };
                        (fill, None)
                    });
                });
            });
        });
    ui.horizontal(|ui| {
        for (k, text) in [
            (MaskCell::Window, "window"),
            (MaskCell::Compressed, "compressed"),
            (MaskCell::Unknown, "no sample"),
        ] {
            let (rect, _) = ui.allocate_exact_size(egui::vec2(10.0, 10.0), egui::Sense::hover());
            ui.painter().rect_filled(rect, 2.0, color(k));
            ui.label(text);
        }
    });
}
