//! Heatmaps of 2-D slices: cut a slice out of an N-D tensor, downsample it to at most
//! `theme::MAX_HEATMAP_TEXELS` per side (each texel keeps the value of largest magnitude in its
//! block, so a single outlier stays visible; NaN wins over everything), colour it on a diverging
//! map, and draw it with the value under the cursor.

use crate::ui::theme;
use eframe::egui;

/// A tensor as the views read it: values as f64 with an optional mask of which ones are known
/// (a sampled golden knows every `stride`-th value only).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub values: Vec<f64>,
    /// `None` when every value is known.
    pub known: Option<Vec<bool>>,
}

impl Tensor {
    /// A tensor whose values are all known.
    pub fn full(shape: Vec<usize>, values: Vec<f64>) -> Tensor {
        Tensor {
            shape,
            values,
            known: None,
        }
    }
    /// Value `i` when known.
    pub fn get(&self, i: usize) -> Option<f64> {
        let known = self.known.as_ref().is_none_or(|k| k.get(i) == Some(&true));
        if known {
            self.values.get(i).copied()
        } else {
            None
        }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.values.len()
    }
    /// True when the tensor holds nothing.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
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
    /// The last two axes (or the only one as columns), every other axis at 0.
    pub fn default_for(shape: &[usize]) -> SliceSpec {
        let n = shape.len();
        let (row_axis, col_axis) = match n {
            0 | 1 => (0, 0),
            _ => (n - 2, n - 1),
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
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
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
    let st = strides(shape);
    let (rows, cols) = if spec.row_axis == spec.col_axis {
        (1, shape[spec.col_axis])
    } else {
        (shape[spec.row_axis], shape[spec.col_axis])
    };
    let base: usize = spec
        .fixed
        .iter()
        .enumerate()
        .filter(|(a, _)| *a != spec.row_axis && *a != spec.col_axis)
        .map(|(a, &i)| i.saturating_mul(st[a]))
        .sum();
    let mut cells = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        for c in 0..cols {
            let off = if spec.row_axis == spec.col_axis {
                c * st[spec.col_axis]
            } else {
                r * st[spec.row_axis] + c * st[spec.col_axis]
            };
            cells.push(t.get(base + off));
        }
    }
    Grid { rows, cols, cells }
}

/// A texel: a value, or no sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Texel {
    Value(f64),
    Unknown,
}

/// Downsample `g` so neither side exceeds `max_side`: each texel covers a block of cells and
/// keeps the value of largest magnitude (NaN first, then infinities); a block without any known
/// cell is `Unknown`. Returns `(rows, cols, texels)`.
pub fn downsample(g: &Grid, max_side: usize) -> (usize, usize, Vec<Texel>) {
    let max_side = max_side.max(1);
    let br = g.rows.div_ceil(max_side).max(1);
    let bc = g.cols.div_ceil(max_side).max(1);
    let (tr, tc) = (g.rows.div_ceil(br), g.cols.div_ceil(bc));
    let mut out = Vec::with_capacity(tr * tc);
    for r0 in 0..tr {
        for c0 in 0..tc {
            let mut best: Option<f64> = None;
            for r in r0 * br..((r0 + 1) * br).min(g.rows) {
                for c in c0 * bc..((c0 + 1) * bc).min(g.cols) {
                    if let Some(v) = g.at(r, c) {
                        best = Some(match best {
                            None => v,
                            Some(b) if b.is_nan() => b,
                            Some(_) if v.is_nan() => v,
                            Some(b) if v.abs() > b.abs() => v,
                            Some(b) => b,
                        });
                    }
                }
            }
            out.push(best.map_or(Texel::Unknown, Texel::Value));
        }
    }
    (tr, tc, out)
}

/// Largest finite magnitude in the grid (the half-width of the diverging scale).
pub fn max_abs_finite(g: &Grid) -> f64 {
    g.cells
        .iter()
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0, |m, v| m.max(v.abs()))
}

/// A heatmap ready to draw: the texture and the full-resolution grid for hover readouts.
pub struct Heatmap {
    pub texture: egui::TextureHandle,
    pub grid: Grid,
    pub tex_rows: usize,
    pub tex_cols: usize,
    pub max_abs: f64,
    /// Cells that are NaN or infinite.
    pub non_finite: usize,
}

impl Heatmap {
    /// Build the texture for `grid` (done once per slice; the views cache it).
    pub fn build(ctx: &egui::Context, name: &str, grid: Grid, max_abs: f64) -> Heatmap {
        let (tr, tc, texels) = downsample(&grid, theme::MAX_HEATMAP_TEXELS);
        let pixels: Vec<egui::Color32> = texels
            .iter()
            .map(|t| match t {
                Texel::Value(v) => theme::diverging(*v as f32, max_abs as f32),
                Texel::Unknown => theme::CELL_UNKNOWN,
            })
            .collect();
        let image = egui::ColorImage::new([tc.max(1), tr.max(1)], pixels);
        let texture = ctx.load_texture(name, image, egui::TextureOptions::NEAREST);
        let non_finite = grid
            .cells
            .iter()
            .flatten()
            .filter(|v| !v.is_finite())
            .count();
        Heatmap {
            texture,
            grid,
            tex_rows: tr,
            tex_cols: tc,
            max_abs,
            non_finite,
        }
    }

    /// Draw it at `size` with a caption; hovering shows the cell index and value.
    pub fn heatmap_ui(&self, ui: &mut egui::Ui, caption: &str, size: egui::Vec2) {
        ui.vertical(|ui| {
            ui.label(format!(
                "{caption}: {}×{} cells (texture {}×{}), scale ±{:.3e}{}",
                self.grid.rows,
                self.grid.cols,
                self.tex_rows,
                self.tex_cols,
                self.max_abs,
                if self.non_finite > 0 {
                    format!(", {} NaN/inf marked", self.non_finite)
                } else {
                    String::new()
                }
            ));
            let resp =
                ui.add(egui::Image::new((self.texture.id(), size)).sense(egui::Sense::hover()));
            if let Some(pos) = resp.hover_pos() {
                let rel = (pos - resp.rect.min) / resp.rect.size();
                let r = ((rel.y * self.grid.rows as f32) as usize)
                    .min(self.grid.rows.saturating_sub(1));
                let c = ((rel.x * self.grid.cols as f32) as usize)
                    .min(self.grid.cols.saturating_sub(1));
                let text = match self.grid.at(r, c) {
                    Some(v) => format!("[{r}, {c}] = {v:.6e}"),
                    None => format!("[{r}, {c}] = no sample"),
                };
                resp.on_hover_text_at_pointer(text);
            }
        });
    }
}
