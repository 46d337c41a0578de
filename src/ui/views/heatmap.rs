//! Heatmaps of 2-D slices: the tensors the views read (without copying a backend's or the
//! golden's data), a slice out of an N-D tensor, folding a slice by a kernel's tile, the colour
//! scales (sequential for values, diverging for differences, linear or symmetric-log), the
//! raster source that colours a slice (a downsampled block keeps its most extreme value; NaN
//! wins over everything, then infinities), and the colour legend with numbers.

use super::raster::CellSource;
use crate::golden::{CaptureData, Golden};
use crate::model::CaptureValues;
use crate::ui::theme::{self, Palette};
use eframe::egui::{self, Color32};
use std::ops::Range;
use std::sync::Arc;

/// Where a tensor's values live.
#[derive(Clone)]
enum TensorData {
    /// Values made for the view (tests, derived tensors), with an optional known-mask.
    Owned {
        values: Arc<[f64]>,
        known: Option<Arc<[bool]>>,
    },
    /// A backend's whole capture.
    Backend(Arc<CaptureValues>),
    /// A golden capture: every `stride`-th value is known.
    Golden {
        golden: Arc<Golden>,
        regime: usize,
        capture: usize,
    },
}

/// A tensor as the views read it: cheap to clone (the data is shared), read element by element.
#[derive(Clone)]
pub struct Tensor {
    pub shape: Vec<usize>,
    data: TensorData,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor{:?} ({} elements)", self.shape, self.len())
    }
}

impl Tensor {
    /// A tensor whose values are all known.
    pub fn full(shape: Vec<usize>, values: Vec<f64>) -> Tensor {
        Tensor {
            shape,
            data: TensorData::Owned {
                values: values.into(),
                known: None,
            },
        }
    }
    /// A tensor of which only the `known` positions hold values.
    pub fn sampled(shape: Vec<usize>, values: Vec<f64>, known: Vec<bool>) -> Tensor {
        Tensor {
            shape,
            data: TensorData::Owned {
                values: values.into(),
                known: Some(known.into()),
            },
        }
    }
    /// A backend's capture.
    pub fn from_backend(shape: Vec<usize>, values: Arc<CaptureValues>) -> Tensor {
        Tensor {
            shape,
            data: TensorData::Backend(values),
        }
    }
    /// Capture `name` of regime `regime` of the golden, if it holds one.
    pub fn from_golden(golden: &Arc<Golden>, regime: usize, name: &str) -> Option<Tensor> {
        let reg = golden.regimes.get(regime)?;
        let capture = reg.captures.iter().position(|c| c.name == name)?;
        Some(Tensor {
            shape: reg.captures[capture].shape.clone(),
            data: TensorData::Golden {
                golden: golden.clone(),
                regime,
                capture,
            },
        })
    }
    /// Value `i` when known.
    pub fn get(&self, i: usize) -> Option<f64> {
        match &self.data {
            TensorData::Owned { values, known } => {
                if known.as_ref().is_some_and(|k| k.get(i) != Some(&true)) {
                    return None;
                }
                values.get(i).copied()
            }
            TensorData::Backend(v) => match &**v {
                CaptureValues::F32(v) => v.get(i).map(|&x| f64::from(x)),
                CaptureValues::I64(v) => v.get(i).map(|&x| x as f64),
            },
            TensorData::Golden {
                golden,
                regime,
                capture,
            } => {
                let c = &golden.regimes[*regime].captures[*capture];
                let stride = c.stride.max(1);
                if i >= c.n || i % stride != 0 {
                    return None;
                }
                match &c.data {
                    CaptureData::Float(v) => v.get(i / stride).copied(),
                    CaptureData::Int(v) => v.get(i / stride).map(|&x| x as f64),
                }
            }
        }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.data {
            TensorData::Owned { values, .. } => values.len(),
            TensorData::Backend(v) => v.len(),
            TensorData::Golden {
                golden,
                regime,
                capture,
            } => golden.regimes[*regime].captures[*capture].n,
        }
    }
    /// True when the tensor holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// True when only some positions are known (a sampled golden capture).
    pub fn is_sampled(&self) -> bool {
        match &self.data {
            TensorData::Owned { known, .. } => known.is_some(),
            TensorData::Backend(_) => false,
            TensorData::Golden {
                golden,
                regime,
                capture,
            } => golden.regimes[*regime].captures[*capture].stride > 1,
        }
    }
}

/// Row-major strides of `shape` (saturating: shapes come from files).
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

/// The multi-index of flat index `i` in `shape`.
pub fn unravel(i: usize, shape: &[usize]) -> Vec<usize> {
    strides(shape)
        .iter()
        .zip(shape)
        .map(|(&s, &d)| (i / s.max(1)) % d.max(1))
        .collect()
}

/// Which two axes form the slice and where the other axes are fixed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SliceSpec {
    pub row_axis: usize,
    pub col_axis: usize,
    /// One index per axis (those of the row and column axes are ignored).
    pub fixed: Vec<usize>,
}

impl SliceSpec {
    /// The two largest axes (the later one on ties; rows before columns in axis order), every
    /// other axis at 0: a `[1, 16, 64, 512]` capture shows heads × dims, `[1, 16, 4, 5120]`
    /// tokens × dims.
    pub fn default_for(shape: &[usize]) -> SliceSpec {
        let n = shape.len();
        let (row_axis, col_axis) = match n {
            0 | 1 => (0, 0),
            _ => {
                let mut axes: Vec<usize> = (0..n).collect();
                axes.sort_by_key(|&a| (std::cmp::Reverse(shape[a]), std::cmp::Reverse(a)));
                let (a, b) = (axes[0], axes[1]);
                (a.min(b), a.max(b))
            }
        };
        SliceSpec {
            row_axis,
            col_axis,
            fixed: vec![0; n],
        }
    }
    /// Clamp the axes and indices to `shape`.
    pub fn clamp_to(&mut self, shape: &[usize]) {
        let n = shape.len();
        self.fixed.resize(n, 0);
        if n == 0 {
            return;
        }
        self.row_axis = self.row_axis.min(n - 1);
        self.col_axis = self.col_axis.min(n - 1);
        for (f, &d) in self.fixed.iter_mut().zip(shape) {
            *f = (*f).min(d.saturating_sub(1));
        }
    }
    /// The flat index of slice cell `(r, c)` in a tensor of `shape`.
    pub fn flat_index(&self, shape: &[usize], r: usize, c: usize) -> usize {
        if shape.is_empty() {
            return 0;
        }
        let st = strides(shape);
        let mut off = 0usize;
        for (a, &s) in st.iter().enumerate() {
            let i = if self.row_axis == self.col_axis {
                if a == self.col_axis {
                    c
                } else {
                    self.fixed[a]
                }
            } else if a == self.row_axis {
                r
            } else if a == self.col_axis {
                c
            } else {
                self.fixed[a]
            };
            off = off.saturating_add(i.saturating_mul(s));
        }
        off
    }
}

/// A 2-D grid of optional values (row-major).
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    pub rows: usize,
    pub cols: usize,
    pub cells: Vec<Option<f64>>,
}

impl Grid {
    /// Cell `(r, c)`.
    pub fn at(&self, r: usize, c: usize) -> Option<f64> {
        self.cells.get(r * self.cols + c).copied().flatten()
    }
    /// Smallest and largest finite value (None when there is none).
    pub fn finite_range(&self) -> Option<(f64, f64)> {
        self.cells
            .iter()
            .flatten()
            .filter(|v| v.is_finite())
            .fold(None, |acc, &v| match acc {
                None => Some((v, v)),
                Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
            })
    }
    /// Largest finite magnitude (0 when there is none).
    pub fn max_abs_finite(&self) -> f64 {
        self.cells
            .iter()
            .flatten()
            .filter(|v| v.is_finite())
            .fold(0.0, |m, v| m.max(v.abs()))
    }
    /// Smallest non-zero finite magnitude.
    pub fn min_abs_nonzero(&self) -> Option<f64> {
        self.cells
            .iter()
            .flatten()
            .filter(|v| v.is_finite() && **v != 0.0)
            .map(|v| v.abs())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
    }
    /// Cells that are NaN or infinite.
    pub fn non_finite(&self) -> usize {
        self.cells
            .iter()
            .flatten()
            .filter(|v| !v.is_finite())
            .count()
    }
}

/// The slice of `t` under `spec` (a 1-D tensor gives one row; a scalar one cell).
pub fn slice(t: &Tensor, spec: &SliceSpec) -> Grid {
    let shape = &t.shape;
    if shape.is_empty() {
        return Grid {
            rows: 1,
            cols: 1,
            cells: vec![t.get(0)],
        };
    }
    let (rows, cols) = if spec.row_axis == spec.col_axis {
        (1, shape[spec.col_axis])
    } else {
        (shape[spec.row_axis], shape[spec.col_axis])
    };
    let st = strides(shape);
    let base = spec.flat_index(shape, 0, 0);
    let (rs, cs) = if spec.row_axis == spec.col_axis {
        (0, st[spec.col_axis])
    } else {
        (st[spec.row_axis], st[spec.col_axis])
    };
    let mut cells = Vec::with_capacity(rows.saturating_mul(cols));
    for r in 0..rows {
        for c in 0..cols {
            cells.push(t.get(base + r * rs + c * cs));
        }
    }
    Grid { rows, cols, cells }
}

/// `test − reference` cell by cell (unknown where either side is).
pub fn diff_grid(reference: &Grid, test: &Grid) -> Grid {
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

/// How a slice folds by a kernel's tile of `tile[0]` rows × `tile[1]` columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// Position inside the tile: cell `(i, j)` gathers every `(r, c)` with `r % tr == i`,
    /// `c % tc == j` (a tile-edge bug lights up an edge row or column).
    WithinTile,
    /// One cell per tile: cell `(i, j)` gathers tile `(i, j)` (a partial-tile bug lights up
    /// the last row or column of tiles).
    PerTile,
}

/// Fold `g` by `tile` keeping the largest |value| per folded cell and, in the second grid, how
/// many cells were folded into it.
pub fn fold_grid(g: &Grid, tile: [usize; 2], fold: Fold) -> (Grid, Vec<usize>) {
    let (tr, tc) = (
        tile[0].max(1).min(g.rows.max(1)),
        tile[1].max(1).min(g.cols.max(1)),
    );
    let (rows, cols) = match fold {
        Fold::WithinTile => (tr, tc),
        Fold::PerTile => (g.rows.div_ceil(tr), g.cols.div_ceil(tc)),
    };
    let mut cells: Vec<Option<f64>> = vec![None; rows * cols];
    let mut counts = vec![0usize; rows * cols];
    for r in 0..g.rows {
        for c in 0..g.cols {
            let (i, j) = match fold {
                Fold::WithinTile => (r % tr, c % tc),
                Fold::PerTile => (r / tr, c / tc),
            };
            let k = i * cols + j;
            counts[k] += 1;
            if let Some(v) = g.at(r, c) {
                let m = if v.is_nan() { f64::NAN } else { v.abs() };
                cells[k] = Some(match cells[k] {
                    None => m,
                    Some(b) if b.is_nan() => b,
                    Some(_) if m.is_nan() => m,
                    Some(b) => b.max(m),
                });
            }
        }
    }
    (Grid { rows, cols, cells }, counts)
}

/// Linear or symmetric-log colour scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ScaleKind {
    #[default]
    Linear,
    /// `sign(v)·log10(1 + |v|/t)` with `t` the smallest non-zero magnitude in the slice, so
    /// values spanning decades all get colours.
    Log,
}

/// Which map a scale colours with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MapKind {
    /// Values: the sequential map over `[lo, hi]`.
    Sequential { lo: f64, hi: f64 },
    /// Differences: the diverging map over `[-max_abs, max_abs]`.
    Diverging { max_abs: f64 },
}

/// A colour scale: map, linear or log, and the log's linear threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ColorScale {
    pub map: MapKind,
    pub kind: ScaleKind,
    /// The log's linear threshold (only used by [`ScaleKind::Log`]).
    pub threshold: f64,
}

/// Smallest log threshold relative to the largest magnitude (keeps `log` finite).
const LOG_THRESHOLD_FLOOR_REL: f64 = 1e-12;

impl ColorScale {
    /// A sequential scale over the finite range of `grids`.
    pub fn sequential(grids: &[&Grid], kind: ScaleKind) -> ColorScale {
        let range = grids
            .iter()
            .filter_map(|g| g.finite_range())
            .fold(None, |acc: Option<(f64, f64)>, (lo, hi)| {
                Some(acc.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))))
            })
            .unwrap_or((0.0, 0.0));
        let max_abs = range.0.abs().max(range.1.abs());
        let min_nz = grids
            .iter()
            .filter_map(|g| g.min_abs_nonzero())
            .fold(f64::INFINITY, f64::min);
        ColorScale {
            map: MapKind::Sequential {
                lo: range.0,
                hi: range.1,
            },
            kind,
            threshold: threshold(min_nz, max_abs),
        }
    }
    /// A diverging scale symmetric around zero over `g`.
    pub fn diverging(g: &Grid, kind: ScaleKind) -> ColorScale {
        let max_abs = g.max_abs_finite();
        ColorScale {
            map: MapKind::Diverging { max_abs },
            kind,
            threshold: threshold(g.min_abs_nonzero().unwrap_or(f64::INFINITY), max_abs),
        }
    }
    /// `v` as the scale transforms it.
    pub fn transform(&self, v: f64) -> f64 {
        match self.kind {
            ScaleKind::Linear => v,
            ScaleKind::Log => v.signum() * (1.0 + v.abs() / self.threshold).log10(),
        }
    }
    /// The inverse of [`Self::transform`].
    pub fn untransform(&self, y: f64) -> f64 {
        match self.kind {
            ScaleKind::Linear => y,
            ScaleKind::Log => y.signum() * (10f64.powf(y.abs()) - 1.0) * self.threshold,
        }
    }
    /// Position of `v` on the map: [0, 1] (sequential) or [-1, 1] (diverging).
    pub fn position(&self, v: f64) -> f64 {
        match self.map {
            MapKind::Sequential { lo, hi } => {
                let (a, b) = (self.transform(lo), self.transform(hi));
                if b > a {
                    (self.transform(v) - a) / (b - a)
                } else {
                    0.5
                }
            }
            MapKind::Diverging { max_abs } => {
                let m = self.transform(max_abs);
                if m > 0.0 {
                    self.transform(v) / m
                } else {
                    0.0
                }
            }
        }
    }
    /// The colour of `v` (NaN and infinities get their own marks).
    pub fn color(&self, v: f64, palette: &Palette) -> Color32 {
        if v.is_nan() {
            return palette.cell_nan;
        }
        if v.is_infinite() {
            return if v > 0.0 {
                palette.cell_pos_inf
            } else {
                palette.cell_neg_inf
            };
        }
        match self.map {
            MapKind::Sequential { .. } => theme::sequential(self.position(v)),
            MapKind::Diverging { .. } => theme::diverging(self.position(v)),
        }
    }
    /// The value a block keeps when downsampled: the one farthest from the map's centre.
    fn salience(&self, v: f64) -> f64 {
        match self.map {
            MapKind::Sequential { lo, hi } => (v - 0.5 * (lo + hi)).abs(),
            MapKind::Diverging { .. } => v.abs(),
        }
    }
    /// The ends of the scale.
    pub fn ends(&self) -> (f64, f64) {
        match self.map {
            MapKind::Sequential { lo, hi } => (lo, hi),
            MapKind::Diverging { max_abs } => (-max_abs, max_abs),
        }
    }
}

fn threshold(min_nonzero: f64, max_abs: f64) -> f64 {
    let floor = (max_abs * LOG_THRESHOLD_FLOOR_REL).max(f64::MIN_POSITIVE);
    if min_nonzero.is_finite() {
        min_nonzero.max(floor)
    } else {
        floor.max(1.0)
    }
}

/// A slice coloured by a scale, as a raster source.
pub struct GridSource<'a> {
    pub grid: &'a Grid,
    pub scale: &'a ColorScale,
    pub palette: &'a Palette,
}

impl CellSource for GridSource<'_> {
    fn rows(&self) -> usize {
        self.grid.rows
    }
    fn cols(&self) -> usize {
        self.grid.cols
    }
    fn block_color(&self, rows: Range<usize>, cols: Range<usize>) -> Color32 {
        let mut best: Option<f64> = None;
        for r in rows {
            for c in cols.clone() {
                let Some(v) = self.grid.at(r, c) else {
                    continue;
                };
                best = Some(match best {
                    None => v,
                    Some(b) if b.is_nan() => b,
                    Some(_) if v.is_nan() => v,
                    Some(b) if b.is_infinite() => b,
                    Some(_) if v.is_infinite() => v,
                    Some(b) if self.scale.salience(v) > self.scale.salience(b) => v,
                    Some(b) => b,
                });
            }
        }
        match best {
            Some(v) => self.scale.color(v, self.palette),
            None => self.palette.cell_unknown,
        }
    }
    fn cell_text(&self, r: usize, c: usize) -> Option<String> {
        Some(match self.grid.at(r, c) {
            Some(v) => fmt_cell(v),
            None => "·".into(),
        })
    }
}

/// A number short enough for a cell: 4 significant digits.
pub fn fmt_cell(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else if v == 0.0 {
        "0".into()
    } else if (1e-2..1e4).contains(&v.abs()) {
        let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 4) as usize;
        format!("{v:.digits$}")
    } else {
        format!("{v:.2e}")
    }
}

/// A number in a readout or legend: 6 significant digits in scientific notation.
pub fn fmt_value(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.6e}")
    } else {
        format!("{v}")
    }
}

/// Ticks of the legend: five on a wide legend, three on a narrow one (numbers never touch).
const LEGEND_TICKS_WIDE: usize = 5;
const LEGEND_TICKS_NARROW: usize = 3;
/// Width from which the legend has room for five numbers.
const LEGEND_WIDE_PT: f32 = 420.0;

/// The colour legend of `scale`: a bar with numbers under it (the numbers are also its
/// accessibility label).
pub fn legend_ui(ui: &mut egui::Ui, title: &str, scale: &ColorScale, width: f32) {
    let palette = theme::palette(ui.ctx());
    let (lo, hi) = scale.ends();
    let (tlo, thi) = (scale.transform(lo), scale.transform(hi));
    let n_ticks = if width >= LEGEND_WIDE_PT {
        LEGEND_TICKS_WIDE
    } else {
        LEGEND_TICKS_NARROW
    };
    let ticks: Vec<f64> = (0..n_ticks)
        .map(|k| scale.untransform(tlo + (thi - tlo) * k as f64 / (n_ticks - 1) as f64))
        .collect();
    if lo == hi {
        let text = format!("{title}: every value is {}", fmt_cell(lo));
        ui.label(egui::RichText::new(text).small());
        return;
    }
    let text = format!(
        "{title} {}: {}",
        match scale.kind {
            ScaleKind::Linear => "linear",
            ScaleKind::Log => "log",
        },
        ticks
            .iter()
            .map(|&v| fmt_cell(v))
            .collect::<Vec<_>>()
            .join(" … ")
    );
    let height = theme::LEGEND_BAR_HEIGHT_PT + 14.0;
    let (rect, response) =
        ui.allocate_exact_size(egui::vec2(width.max(60.0), height), egui::Sense::hover());
    response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, text.clone()));
    let bar = egui::Rect::from_min_size(
        rect.min,
        egui::vec2(rect.width(), theme::LEGEND_BAR_HEIGHT_PT),
    );
    let painter = ui.painter_at(rect);
    let steps = (bar.width() as usize).clamp(2, 256);
    for s in 0..steps {
        let f = s as f64 / (steps - 1) as f64;
        let v = scale.untransform(tlo + (thi - tlo) * f);
        let x0 = bar.min.x + bar.width() * s as f32 / steps as f32;
        let x1 = bar.min.x + bar.width() * (s + 1) as f32 / steps as f32;
        painter.rect_filled(
            egui::Rect::from_min_max(egui::pos2(x0, bar.min.y), egui::pos2(x1, bar.max.y)),
            0.0,
            scale.color(v, palette),
        );
    }
    for (k, v) in ticks.iter().enumerate() {
        let x = bar.min.x + bar.width() * k as f32 / (n_ticks - 1) as f32;
        let align = match k {
            0 => egui::Align2::LEFT_TOP,
            k if k == n_ticks - 1 => egui::Align2::RIGHT_TOP,
            _ => egui::Align2::CENTER_TOP,
        };
        painter.text(
            egui::pos2(x, bar.max.y + 1.0),
            align,
            fmt_cell(*v),
            egui::FontId::monospace(10.0),
            palette.text_weak,
        );
    }
}
