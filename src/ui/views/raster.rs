//! The one cell raster every view draws with: a rows × cols grid of cells shown through a
//! texture of at most one texel per screen pixel (big tensors are downsampled, and each source
//! decides which cell of a block wins, so an outlier or a disagreement stays visible), with
//! zoom (wheel or pinch, around the pointer), pan (drag) and fit (double-click), tick labels,
//! thin gaps between cells once they are big, numbers on cells once they fit (black or white
//! by the cell's luminance), and the hovered cell. Linked rasters share one [`ZoomState`].

use crate::ui::theme::{self, Palette};
use eframe::egui::{self, Color32, Pos2, Rect, Vec2};
use std::ops::Range;

/// What a raster shows.
pub trait CellSource {
    fn rows(&self) -> usize;
    fn cols(&self) -> usize;
    /// The colour of the texel covering `rows` × `cols` (one cell when zoomed in; a block when
    /// downsampled: the source picks the cell that must stay visible).
    fn block_color(&self, rows: Range<usize>, cols: Range<usize>) -> Color32;
    /// The number drawn on cell `(r, c)` when cells are big enough (None: nothing).
    fn cell_text(&self, _r: usize, _c: usize) -> Option<String> {
        None
    }
}

/// The cell of a block that must stay visible when the block is one texel: the one whose
/// `priority` is highest (the first such cell; `none` for an empty block).
pub fn strongest<T: Copy>(
    rows: Range<usize>,
    cols: Range<usize>,
    none: T,
    at: impl Fn(usize, usize) -> T,
    priority: impl Fn(T) -> u8,
) -> T {
    let mut best = none;
    for r in rows {
        for c in cols.clone() {
            let k = at(r, c);
            if priority(k) > priority(best) {
                best = k;
            }
        }
    }
    best
}

/// The visible part of a raster in cell units: columns `x0..x1`, rows `y0..y1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub x0: f64,
    pub x1: f64,
    pub y0: f64,
    pub y1: f64,
}

/// Fewest cells a zoomed window spans on each axis.
pub const MIN_WINDOW_CELLS: f64 = 1.0;

impl Window {
    /// The whole raster.
    pub fn full(rows: usize, cols: usize) -> Window {
        Window {
            x0: 0.0,
            x1: cols.max(1) as f64,
            y0: 0.0,
            y1: rows.max(1) as f64,
        }
    }
    pub fn width(&self) -> f64 {
        self.x1 - self.x0
    }
    pub fn height(&self) -> f64 {
        self.y1 - self.y0
    }
    /// Zoom by `factor` (< 1 zooms in) around the cell point `(x, y)`, per axis.
    pub fn zoom_around(&mut self, x: f64, y: f64, factor: [f64; 2]) {
        self.x0 = x + (self.x0 - x) * factor[0];
        self.x1 = x + (self.x1 - x) * factor[0];
        self.y0 = y + (self.y0 - y) * factor[1];
        self.y1 = y + (self.y1 - y) * factor[1];
    }
    /// Keep the window inside the raster and at least [`MIN_WINDOW_CELLS`] (or the raster's
    /// size) wide and high.
    pub fn clamp_to(&mut self, rows: usize, cols: usize) {
        fn axis(a0: &mut f64, a1: &mut f64, n: f64) {
            let span = (*a1 - *a0).clamp(MIN_WINDOW_CELLS.min(n), n);
            let mut lo = *a0;
            if !lo.is_finite() {
                lo = 0.0;
            }
            lo = lo.clamp(0.0, n - span);
            *a0 = lo;
            *a1 = lo + span;
        }
        axis(&mut self.x0, &mut self.x1, cols.max(1) as f64);
        axis(&mut self.y0, &mut self.y1, rows.max(1) as f64);
    }
    /// The integer cells that are at least partly visible: `(rows, cols)`.
    pub fn cells(&self, rows: usize, cols: usize) -> (Range<usize>, Range<usize>) {
        let r0 = (self.y0.floor().max(0.0) as usize).min(rows);
        let r1 = (self.y1.ceil().max(0.0) as usize).min(rows).max(r0);
        let c0 = (self.x0.floor().max(0.0) as usize).min(cols);
        let c1 = (self.x1.ceil().max(0.0) as usize).min(cols).max(c0);
        (r0..r1, c0..c1)
    }
}

/// Zoom and pan of one raster, or of several linked ones (None: fit).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ZoomState {
    pub window: Option<Window>,
}

impl ZoomState {
    /// The visible window of a `rows × cols` raster.
    pub fn window(&self, rows: usize, cols: usize) -> Window {
        let mut w = self.window.unwrap_or_else(|| Window::full(rows, cols));
        w.clamp_to(rows, cols);
        w
    }
    /// Back to the whole raster.
    pub fn fit(&mut self) {
        self.window = None;
    }
}

/// What a raster's texture was built from; the texture is rebuilt only when this changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TexKey {
    source: u64,
    rows: (usize, usize),
    cols: (usize, usize),
    texels: (usize, usize),
    dark: bool,
}

/// A raster's texture, kept between frames.
#[derive(Default)]
pub struct RasterTexture {
    key: Option<TexKey>,
    handle: Option<egui::TextureHandle>,
    /// Times the texture was (re)built (tests check that steady frames build none).
    pub builds: usize,
}

/// How to draw a raster.
pub struct RasterArgs<'a> {
    /// Its accessibility label (e.g. `Reference heatmap`).
    pub label: &'a str,
    /// Identifies the source's content: a different key rebuilds the texture.
    pub source_key: u64,
    /// Draw row and column tick labels (room is kept for them).
    pub ticks: bool,
}

/// What happened to a raster this frame.
pub struct RasterResponse {
    /// The whole widget.
    pub response: egui::Response,
    /// Where the cells are drawn.
    pub cells_rect: Rect,
    /// The cell under the pointer.
    pub hovered: Option<(usize, usize)>,
}

/// Texels of one side of the texture for `cells` cells shown over `pixels` pixels.
pub fn texels_for(cells: usize, pixels: f32) -> usize {
    cells.min(pixels.ceil().max(1.0) as usize).max(1)
}

/// The cells texel `t` of `n` texels covers out of `range`.
pub fn texel_cells(range: &Range<usize>, n: usize, t: usize) -> Range<usize> {
    let len = range.len();
    let a = range.start + t * len / n;
    let b = (range.start + (t + 1) * len / n).max(a + 1).min(range.end);
    a..b
}

/// Build the colour image of `source` over the cells `rows × cols` at `tw × th` texels.
pub fn build_image(
    source: &dyn CellSource,
    rows: &Range<usize>,
    cols: &Range<usize>,
    tw: usize,
    th: usize,
) -> egui::ColorImage {
    let mut pixels = Vec::with_capacity(tw * th);
    for ty in 0..th {
        let rr = texel_cells(rows, th, ty);
        for tx in 0..tw {
            pixels.push(source.block_color(rr.clone(), texel_cells(cols, tw, tx)));
        }
    }
    egui::ColorImage::new([tw, th], pixels)
}

/// A step of 1, 2 or 5 times a power of ten such that `step * px_per_cell >= min_px`.
pub fn tick_step(px_per_cell: f64, min_px: f64) -> usize {
    let mut step = 1usize;
    loop {
        for m in [1, 2, 5] {
            let s = step.saturating_mul(m);
            if s as f64 * px_per_cell >= min_px || s >= usize::MAX / 10 {
                return s;
            }
        }
        step = step.saturating_mul(10);
    }
}

/// Least spacing of tick labels along rows and columns, in points.
const ROW_TICK_MIN_PT: f64 = 16.0;
const COL_TICK_MIN_PT: f64 = 44.0;

/// Draw `source` into `size` points, zoomable through `zoom`, its texture kept in `tex`.
pub fn raster_ui(
    ui: &mut egui::Ui,
    size: Vec2,
    args: &RasterArgs<'_>,
    source: &dyn CellSource,
    zoom: &mut ZoomState,
    tex: &mut RasterTexture,
) -> RasterResponse {
    let palette = theme::palette(ui.ctx());
    let (outer, response) = ui.allocate_exact_size(size, egui::Sense::click_and_drag());
    let label = args.label.to_string();
    response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Image, true, label.clone()));
    let cells_rect = if args.ticks {
        Rect::from_min_max(
            outer.min + egui::vec2(theme::RASTER_LEFT_PT, theme::RASTER_TOP_PT),
            outer.max,
        )
    } else {
        outer
    };
    let (rows, cols) = (source.rows(), source.cols());
    if rows == 0 || cols == 0 || cells_rect.width() < 1.0 || cells_rect.height() < 1.0 {
        return RasterResponse {
            response,
            cells_rect,
            hovered: None,
        };
    }
    interact(ui, &response, cells_rect, rows, cols, zoom);
    let w = zoom.window(rows, cols);
    let (rr, cr) = w.cells(rows, cols);
    let ppp = ui.ctx().pixels_per_point();
    let tw = texels_for(cr.len(), cells_rect.width() * ppp);
    let th = texels_for(rr.len(), cells_rect.height() * ppp);
    let key = TexKey {
        source: args.source_key,
        rows: (rr.start, rr.end),
        cols: (cr.start, cr.end),
        texels: (tw, th),
        dark: ui.visuals().dark_mode,
    };
    if tex.key != Some(key) || tex.handle.is_none() {
        let image = build_image(source, &rr, &cr, tw, th);
        match &mut tex.handle {
            Some(h) => h.set(image, egui::TextureOptions::NEAREST),
            None => {
                tex.handle = Some(ui.ctx().load_texture(
                    format!("raster {}", args.label),
                    image,
                    egui::TextureOptions::NEAREST,
                ))
            }
        }
        tex.key = Some(key);
        tex.builds += 1;
    }
    let painter = ui.painter_at(cells_rect);
    painter.rect_filled(cells_rect, 0.0, palette.extreme_bg);
    let to_x = |c: f64| cells_rect.min.x + ((c - w.x0) / w.width()) as f32 * cells_rect.width();
    let to_y = |r: f64| cells_rect.min.y + ((r - w.y0) / w.height()) as f32 * cells_rect.height();
    let drawn = Rect::from_min_max(
        Pos2::new(to_x(cr.start as f64), to_y(rr.start as f64)),
        Pos2::new(to_x(cr.end as f64), to_y(rr.end as f64)),
    );
    if let Some(h) = &tex.handle {
        painter.image(
            h.id(),
            drawn,
            Rect::from_min_max(Pos2::ZERO, Pos2::new(1.0, 1.0)),
            Color32::WHITE,
        );
    }
    let cell_w = cells_rect.width() as f64 / w.width();
    let cell_h = cells_rect.height() as f64 / w.height();
    if cell_w >= f64::from(theme::CELL_GAP_MIN_PT) && cell_h >= f64::from(theme::CELL_GAP_MIN_PT) {
        let stroke = egui::Stroke::new(1.0, palette.cell_gap);
        for c in cr.clone().skip(1) {
            let x = to_x(c as f64);
            painter.line_segment(
                [Pos2::new(x, drawn.min.y), Pos2::new(x, drawn.max.y)],
                stroke,
            );
        }
        for r in rr.clone().skip(1) {
            let y = to_y(r as f64);
            painter.line_segment(
                [Pos2::new(drawn.min.x, y), Pos2::new(drawn.max.x, y)],
                stroke,
            );
        }
    }
    if rr.len() * cr.len() <= theme::CELL_TEXT_MAX_CELLS
        && cell_h >= f64::from(theme::CELL_TEXT_MIN_PT) + 2.0
    {
        cell_numbers(
            &painter,
            source,
            &rr,
            &cr,
            cell_w as f32,
            cell_h as f32,
            &to_x,
            &to_y,
        );
    }
    if args.ticks {
        ticks_ui(ui, palette, outer, cells_rect, &w, &rr, &cr, cell_w, cell_h);
    }
    let hovered = response.hover_pos().and_then(|p| {
        if !cells_rect.contains(p) {
            return None;
        }
        let c = w.x0 + f64::from((p.x - cells_rect.min.x) / cells_rect.width()) * w.width();
        let r = w.y0 + f64::from((p.y - cells_rect.min.y) / cells_rect.height()) * w.height();
        let (c, r) = (c.floor(), r.floor());
        (c >= 0.0 && r >= 0.0 && (c as usize) < cols && (r as usize) < rows)
            .then_some((r as usize, c as usize))
    });
    if let Some((r, c)) = hovered {
        let cell = Rect::from_min_max(
            Pos2::new(to_x(c as f64), to_y(r as f64)),
            Pos2::new(to_x(c as f64 + 1.0), to_y(r as f64 + 1.0)),
        );
        if cell.width() >= 3.0 && cell.height() >= 3.0 {
            painter.rect_stroke(
                cell,
                0.0,
                egui::Stroke::new(1.5, palette.hover_ring),
                egui::StrokeKind::Inside,
            );
        }
    }
    RasterResponse {
        response,
        cells_rect,
        hovered,
    }
}

fn interact(
    ui: &egui::Ui,
    response: &egui::Response,
    cells_rect: Rect,
    rows: usize,
    cols: usize,
    zoom: &mut ZoomState,
) {
    if response.double_clicked() {
        zoom.fit();
        return;
    }
    let mut w = zoom.window(rows, cols);
    let before = w;
    if response.dragged() {
        let d = response.drag_delta();
        w.x0 -= f64::from(d.x / cells_rect.width()) * w.width();
        w.x1 -= f64::from(d.x / cells_rect.width()) * w.width();
        w.y0 -= f64::from(d.y / cells_rect.height()) * w.height();
        w.y1 -= f64::from(d.y / cells_rect.height()) * w.height();
    }
    if let Some(p) = response.hover_pos().filter(|p| cells_rect.contains(*p)) {
        let (scroll, pinch) = ui.input(|i| (i.smooth_scroll_delta.y, i.zoom_delta()));
        let factor = if pinch != 1.0 {
            1.0 / f64::from(pinch)
        } else if scroll != 0.0 {
            f64::from((-scroll * theme::ZOOM_PER_SCROLL_PT).exp())
        } else {
            1.0
        };
        if factor != 1.0 {
            let x = w.x0 + f64::from((p.x - cells_rect.min.x) / cells_rect.width()) * w.width();
            let y = w.y0 + f64::from((p.y - cells_rect.min.y) / cells_rect.height()) * w.height();
            // A raster one cell high (or wide) zooms along its long axis only.
            let fx = if cols > 1 { factor } else { 1.0 };
            let fy = if rows > 1 { factor } else { 1.0 };
            w.zoom_around(x, y, [fx, fy]);
            // The wheel zoomed this raster: the panel around it must not scroll too.
            ui.ctx().input_mut(|i| {
                i.smooth_scroll_delta = Vec2::ZERO;
            });
        }
    }
    if w != before {
        w.clamp_to(rows, cols);
        zoom.window = if w == Window::full(rows, cols) {
            None
        } else {
            Some(w)
        };
    }
}

#[allow(clippy::too_many_arguments)]
fn cell_numbers(
    painter: &egui::Painter,
    source: &dyn CellSource,
    rr: &Range<usize>,
    cr: &Range<usize>,
    cell_w: f32,
    cell_h: f32,
    to_x: &dyn Fn(f64) -> f32,
    to_y: &dyn Fn(f64) -> f32,
) {
    for r in rr.clone() {
        for c in cr.clone() {
            let Some(text) = source.cell_text(r, c) else {
                continue;
            };
            let chars = text.chars().count().max(1) as f32;
            // Monospace digits are about 0.6 em wide; keep a little margin in the cell.
            let size = (cell_h * 0.7)
                .min(cell_w * 0.9 / (chars * 0.6))
                .min(theme::CELL_TEXT_MAX_PT);
            if size < theme::CELL_TEXT_MIN_PT {
                continue;
            }
            let fill = source.block_color(r..r + 1, c..c + 1);
            let centre = Pos2::new(to_x(c as f64 + 0.5), to_y(r as f64 + 0.5));
            painter.text(
                centre,
                egui::Align2::CENTER_CENTER,
                text,
                egui::FontId::monospace(size),
                theme::text_on(fill),
            );
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn ticks_ui(
    ui: &egui::Ui,
    palette: &Palette,
    outer: Rect,
    cells_rect: Rect,
    w: &Window,
    rr: &Range<usize>,
    cr: &Range<usize>,
    cell_w: f64,
    cell_h: f64,
) {
    let painter = ui.painter_at(outer);
    let font = egui::FontId::monospace(10.0);
    let rstep = tick_step(cell_h, ROW_TICK_MIN_PT);
    let first = rr.start.div_ceil(rstep) * rstep;
    for r in (first..rr.end).step_by(rstep) {
        let y = cells_rect.min.y + ((r as f64 + 0.5 - w.y0) * cell_h) as f32;
        if y < cells_rect.min.y || y > cells_rect.max.y {
            continue;
        }
        painter.text(
            Pos2::new(cells_rect.min.x - 4.0, y),
            egui::Align2::RIGHT_CENTER,
            r.to_string(),
            font.clone(),
            palette.text_weak,
        );
    }
    let cstep = tick_step(cell_w, COL_TICK_MIN_PT);
    let first = cr.start.div_ceil(cstep) * cstep;
    for c in (first..cr.end).step_by(cstep) {
        let x = cells_rect.min.x + ((c as f64 + 0.5 - w.x0) * cell_w) as f32;
        if x < cells_rect.min.x || x > cells_rect.max.x {
            continue;
        }
        painter.text(
            Pos2::new(x, cells_rect.min.y - 2.0),
            egui::Align2::CENTER_BOTTOM,
            c.to_string(),
            font.clone(),
            palette.text_weak,
        );
    }
}
