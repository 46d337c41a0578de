//! The capture list: one line per capture (name, shape, a status chip per comparison with
//! colour *and* text, a small log-scale bar of error/tolerance, and marks for captures over
//! their error budget or breaking invariants), grouped by regime and layer in groups that fold,
//! filtered by name, kind, layer and verdict, sortable by ratio. `n`/`p` jump to the next or
//! previous failing capture and the arrow keys move the selection (handled by the app). Only
//! visible rows are laid out, so thousands of captures stay cheap.

use crate::golden::compare::Comparison;
use crate::golden::names::CaptureKind;
use crate::session::controller::CaptureResult;
use crate::ui::app::AppState;
use crate::ui::commands::{ListFilter, ListSort, UiCommand, UiCommandSender, VerdictFilter};
use crate::ui::theme::{self, Palette};
use eframe::egui;

pub use super::capture_rows::*;

fn kind_label(k: Option<CaptureKind>) -> &'static str {
    k.map_or("any", CaptureKind::label)
}

/// The filter row.
fn filter_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    let mut f = state.list.clone();
    // Label and control pairs in a grid: they never wrap apart; in a narrow list the grid
    // scrolls sideways instead of widening the list.
    egui::ScrollArea::horizontal()
        .id_salt("list filters")
        .auto_shrink([false, true])
        .show(ui, |ui| filter_grid_ui(ui, &mut f, state));
    if f != state.list {
        tx.send_ui(UiCommand::SetListFilter(f));
    }
}

fn filter_grid_ui(ui: &mut egui::Ui, f: &mut ListFilter, state: &AppState) {
    let kinds = [
        None,
        Some(CaptureKind::Bf16),
        Some(CaptureKind::F32),
        Some(CaptureKind::Index),
        Some(CaptureKind::Mask),
        Some(CaptureKind::Hash),
        Some(CaptureKind::Ids),
    ];
    let n_layers = state.dims().map_or(0, |d| d.n_layers);
    let layer_text = |l: Option<Option<usize>>| match l {
        None => "any".to_string(),
        Some(None) => "none".to_string(),
        Some(Some(l)) => format!("layer {l}"),
    };
    egui::Grid::new("list_filters")
        .num_columns(4)
        .spacing([4.0, 2.0])
        .show(ui, |ui| {
            let label = ui.label("Filter:");
            ui.add(
                egui::TextEdit::singleline(&mut f.name)
                    .hint_text("name contains…")
                    .desired_width(FILTER_COMBO_WIDTH_PT),
            )
            .labelled_by(label.id);
            let kl = ui.label("Kind:");
            egui::ComboBox::from_id_salt("list_kind")
                .width(FILTER_COMBO_WIDTH_PT)
                .selected_text(kind_label(f.kind))
                .show_ui(ui, |ui| {
                    for k in kinds {
                        ui.selectable_value(&mut f.kind, k, kind_label(k));
                    }
                })
                .response
                .labelled_by(kl.id);
            ui.end_row();
            let ll = ui.label("Layer:");
            egui::ComboBox::from_id_salt("list_layer")
                .width(FILTER_COMBO_WIDTH_PT)
                .selected_text(layer_text(f.layer))
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut f.layer, None, layer_text(None));
                    ui.selectable_value(&mut f.layer, Some(None), layer_text(Some(None)));
                    for l in 0..n_layers {
                        ui.selectable_value(&mut f.layer, Some(Some(l)), layer_text(Some(Some(l))));
                    }
                })
                .response
                .labelled_by(ll.id);
            let vl = ui.label("Verdict:");
            egui::ComboBox::from_id_salt("list_verdict")
                .width(FILTER_COMBO_WIDTH_PT)
                .selected_text(f.verdict.label())
                .show_ui(ui, |ui| {
                    for v in VerdictFilter::ALL {
                        ui.selectable_value(&mut f.verdict, v, v.label());
                    }
                })
                .response
                .labelled_by(vl.id);
            ui.end_row();
            let sl = ui.label("Sort:");
            egui::ComboBox::from_id_salt("list_sort")
                .width(FILTER_COMBO_WIDTH_PT)
                .selected_text(f.sort.label())
                .show_ui(ui, |ui| {
                    for s in [ListSort::Execution, ListSort::RatioDescending] {
                        ui.selectable_value(&mut f.sort, s, s.label());
                    }
                })
                .response
                .labelled_by(sl.id);
            ui.end_row();
        });
}

/// Width of the filter's text field and combo boxes.
const FILTER_COMBO_WIDTH_PT: f32 = 72.0;

/// Draw the list.
pub fn capture_list_ui(ui: &mut egui::Ui, state: &AppState, tx: &dyn UiCommandSender) {
    let palette = theme::palette(ui.ctx());
    ui.horizontal_wrapped(|ui| {
        ui.heading("Captures");
        ui.weak("n / p: next / previous failing; arrow keys move");
    });
    filter_ui(ui, state, tx);
    let rows = list_rows(&state.results, &state.list, &state.collapsed);
    let shown = rows
        .iter()
        .filter(|r| matches!(r, ListRow::Capture(_)))
        .count();
    let matching = list_order(&state.results, &state.list).len();
    let failing = state.results.iter().filter(|r| !r.pass()).count();
    ui.label(format!(
        "{matching} of {} captures match ({shown} shown), {failing} failing",
        state.results.len()
    ));
    let pairs = pair_names(&state.results);
    let mono = egui::FontId::monospace(theme::LIST_FONT_PT);
    let glyph = ui.ctx().fonts_mut(|f| f.glyph_width(&mono, '0'));
    let sort = state.list.sort;
    let name_chars = rows
        .iter()
        .filter_map(|r| match r {
            ListRow::Capture(i) => Some(row_name(&state.results[*i], sort).chars().count()),
            ListRow::Header { .. } => None,
        })
        .max()
        .unwrap_or(8)
        .max(8);
    let name_w = glyph * name_chars as f32 + 10.0;
    let shape_chars = rows
        .iter()
        .filter_map(|r| match r {
            ListRow::Capture(i) => Some(short_shape(&state.results[*i].shape).chars().count()),
            ListRow::Header { .. } => None,
        })
        .max()
        .unwrap_or(5);
    let shape_w = glyph * shape_chars as f32 + 6.0;
    let indent = if state.list.sort == ListSort::Execution {
        2.0 * theme::LIST_INDENT_PT
    } else {
        0.0
    };
    let row_h = theme::LIST_ROW_HEIGHT_PT;
    // The column header names the chips; it scrolls sideways with the rows (their offset of
    // the last frame), its own scroll bar hidden.
    let header_id = ui.scope_id().with("capture header");
    let x_offset: f32 = ui.data(|d| d.get_temp(header_id).unwrap_or(0.0));
    egui::ScrollArea::horizontal()
        .id_salt("capture header")
        .auto_shrink([false, true])
        .horizontal_scroll_offset(x_offset)
        .scroll_bar_visibility(egui::scroll_area::ScrollBarVisibility::AlwaysHidden)
        .scroll_source(egui::scroll_area::ScrollSource::NONE)
        .show(ui, |ui| {
            column_header_ui(ui, &pairs, indent, name_w, shape_w)
        });
    ui.separator();
    // Scroll to a selection made by keyboard or elsewhere when it is not in view.
    let scroll_id = ui.scope_id().with("capture rows");
    let (last_serial, last_range): (u64, Option<(usize, usize)>) = ui.data(|d| {
        (
            d.get_temp(scroll_id.with("serial")).unwrap_or(0),
            d.get_temp(scroll_id.with("range")),
        )
    });
    let mut area = egui::ScrollArea::both()
        .id_salt("capture rows")
        .auto_shrink([false, false]);
    if state.selection_serial != last_serial {
        ui.data_mut(|d| d.insert_temp(scroll_id.with("serial"), state.selection_serial));
        if let Some(row) = state
            .selected
            .and_then(|sel| rows.iter().position(|r| *r == ListRow::Capture(sel)))
        {
            let in_view = last_range.is_some_and(|(a, b)| row > a && row + 1 < b);
            if !in_view {
                let spacing = ui.spacing().item_spacing.y;
                let visible_rows = (ui.available_height() / (row_h + spacing)).max(1.0);
                let top = (row as f32 - visible_rows / 2.0).max(0.0);
                area = area.vertical_scroll_offset(top * (row_h + spacing));
            }
        }
    }
    let mut range_seen = None;
    let out = area.show_rows(ui, row_h, rows.len(), |ui, range| {
        ui.spacing_mut().item_spacing.x = LIST_ITEM_SPACING_PT;
        range_seen = Some((range.start, range.end));
        for row in &rows[range] {
            match row {
                ListRow::Header {
                    key,
                    title,
                    level,
                    captures,
                    failing,
                    open,
                } => header_ui(
                    ui, palette, key, title, *level, *captures, *failing, *open, tx,
                ),
                ListRow::Capture(i) => {
                    capture_row_ui(ui, palette, state, *i, indent, name_w, shape_w, &pairs, tx)
                }
            }
        }
    });
    ui.data_mut(|d| d.insert_temp(header_id, out.state.clamped_offset().x));
    if let Some(r) = range_seen {
        ui.data_mut(|d| d.insert_temp(scroll_id.with("range"), r));
    }
}

/// Spacing between the cells of a row.
const LIST_ITEM_SPACING_PT: f32 = 4.0;

fn column_header_ui(ui: &mut egui::Ui, pairs: &[String], indent: f32, name_w: f32, shape_w: f32) {
    let row_h = theme::LIST_ROW_HEIGHT_PT;
    ui.horizontal(|ui| {
        ui.spacing_mut().item_spacing.x = LIST_ITEM_SPACING_PT;
        ui.add_space(indent);
        ui.add_sized(
            [name_w, row_h],
            egui::Label::new(egui::RichText::new("capture").weak()),
        );
        for p in pairs {
            ui.add_sized(
                [theme::CHIP_WIDTH_PT, row_h],
                egui::Label::new(egui::RichText::new(short_pair(p)).weak().small()),
            )
            .on_hover_text(p.as_str());
        }
        ui.add_sized(
            [theme::RATIO_BAR_WIDTH_PT, row_h],
            egui::Label::new(egui::RichText::new("err/tol").weak().small()),
        )
        .on_hover_text("worst error / tolerance, log scale: the tick is the pass bar (ratio 1)");
        ui.add_sized(
            [shape_w, row_h],
            egui::Label::new(egui::RichText::new("shape").weak()),
        );
    });
}

#[allow(clippy::too_many_arguments)]
fn header_ui(
    ui: &mut egui::Ui,
    palette: &Palette,
    key: &str,
    title: &str,
    level: usize,
    captures: usize,
    failing: usize,
    open: bool,
    tx: &dyn UiCommandSender,
) {
    ui.horizontal(|ui| {
        ui.add_space(level as f32 * theme::LIST_INDENT_PT);
        let resp = fold_toggle_ui(ui, open, title, level == 0);
        if resp.clicked() {
            tx.send_ui(UiCommand::ToggleGroup(key.to_string()));
        }
        ui.weak(format!("{captures} captures"));
        if failing > 0 {
            ui.colored_label(palette.fail_text, format!("{failing} failing"));
        }
    });
}

#[allow(clippy::too_many_arguments)]
fn capture_row_ui(
    ui: &mut egui::Ui,
    palette: &Palette,
    state: &AppState,
    i: usize,
    indent: f32,
    name_w: f32,
    shape_w: f32,
    pairs: &[String],
    tx: &dyn UiCommandSender,
) {
    let r = &state.results[i];
    let row_h = theme::LIST_ROW_HEIGHT_PT;
    ui.horizontal(|ui| {
        ui.add_space(indent);
        let selected = state.selected == Some(i);
        let label = row_name(r, state.list.sort);
        let resp = ui
            .add_sized(
                [name_w, row_h],
                egui::Button::selectable(
                    selected,
                    egui::RichText::new(&label).font(egui::FontId::monospace(theme::LIST_FONT_PT)),
                ),
            )
            .on_hover_ui(|ui| {
                ui.label(r.label());
                ui.label(format!(
                    "{} · {} · shape {:?}",
                    r.step,
                    r.kind.label(),
                    r.shape
                ));
                ui.label(verdicts(r));
                if let Some(t) = triage_counts(r) {
                    ui.label(t);
                }
            });
        // Tests and screen readers find the row by its full label.
        let full = r.label();
        resp.widget_info(|| egui::WidgetInfo::selected(egui::Role::Button, true, selected, &full));
        if resp.clicked() {
            tx.send_ui(UiCommand::SelectCapture(i));
        }
        let states = pair_states(r);
        for p in pairs {
            match states.iter().find(|(n, _, _)| n == p) {
                Some((_, state, c)) => chip_ui(ui, palette, p, *state, *c),
                None => chip_ui(ui, palette, p, ChipState::None, None),
            }
        }
        ratio_bar_ui(ui, palette, r);
        ui.add_sized(
            [shape_w, row_h],
            egui::Label::new(
                egui::RichText::new(short_shape(&r.shape))
                    .font(egui::FontId::monospace(theme::LIST_FONT_PT))
                    .weak(),
            ),
        );
        if let Some(t) = r.triages().next().map(|(_, t)| &t.triage) {
            if t.rows_differing > 0 {
                let full = triage_counts(r).unwrap_or_default();
                let resp = ui.colored_label(
                    palette.triage(t.real, t.rows_differing),
                    format!("Δ{}/{}", t.rows_differing, t.rows),
                );
                resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &full));
                resp.on_hover_text(full);
            }
        }
        for mark in marks(r) {
            ui.colored_label(palette.fail_text, mark);
        }
        if let Some(t) = state
            .workbench
            .recheck
            .as_ref()
            .and_then(|rc| rc.diff.transition_of(&full))
        {
            super::workbench::transition_chip_ui(ui, palette, t);
        }
    });
}

/// A fold arrow and a title that both toggle (the arrow glyphs are in the monospace font); its
/// accessibility label says what a click does.
pub fn fold_toggle_ui(ui: &mut egui::Ui, open: bool, title: &str, strong: bool) -> egui::Response {
    let arrow = if open { "▾" } else { "▸" };
    let text = egui::RichText::new(title);
    let text = if strong { text.strong() } else { text };
    let a = ui.add(egui::Button::new(egui::RichText::new(arrow).monospace()).frame(false));
    let what = format!("{} {title}", if open { "Fold" } else { "Unfold" });
    a.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &what));
    let t = ui.add(egui::Label::new(text).sense(egui::Sense::click()));
    let resp = a | t;
    resp.on_hover_text(if open { "Fold" } else { "Unfold" })
}

/// One status chip: colour and text, its accessibility label the full verdict.
fn chip_ui(
    ui: &mut egui::Ui,
    palette: &Palette,
    pair: &str,
    state: ChipState,
    c: Option<&Comparison>,
) {
    let bg = state.color(palette);
    let size = egui::vec2(theme::CHIP_WIDTH_PT, theme::LIST_ROW_HEIGHT_PT - 4.0);
    let (rect, resp) = ui.allocate_exact_size(size, egui::Sense::hover());
    let full = format!("{pair}: {}", state.word());
    resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &full));
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 3.0, bg);
    painter.text(
        rect.center(),
        egui::Align2::CENTER_CENTER,
        state.short(),
        egui::FontId::proportional(theme::CHIP_FONT_PT),
        theme::text_on(bg),
    );
    resp.on_hover_text(match c {
        Some(c) => format!(
            "{full} ({}); max abs err {:.3e}, tol {:.3e}, ratio {:.3e}",
            c.reason, c.max_abs_err, c.tol, c.worst_ratio
        ),
        None => full,
    });
}

/// The error/tolerance bar: log scale, a tick at ratio 1.
fn ratio_bar_ui(ui: &mut egui::Ui, palette: &Palette, r: &CaptureResult) {
    let size = egui::vec2(theme::RATIO_BAR_WIDTH_PT, theme::LIST_ROW_HEIGHT_PT - 8.0);
    let (rect, resp) = ui.allocate_exact_size(size, egui::Sense::hover());
    let has = !r.comparisons().is_empty();
    let ratio = r.worst_ratio();
    let text = if !has {
        "not in golden".to_string()
    } else if ratio == 0.0 {
        "error/tolerance 0 (bit-exact)".to_string()
    } else {
        format!("error/tolerance {ratio:.2e}")
    };
    resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &text));
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 2.0, palette.bar_track);
    if let Some(f) = bar_fraction(ratio).filter(|_| has) {
        let fill =
            egui::Rect::from_min_size(rect.min, egui::vec2(rect.width() * f as f32, rect.height()));
        painter.rect_filled(fill, 2.0, palette.verdict(r.pass()));
    }
    let one = (theme::RATIO_BAR_DECADES_BELOW
        / (theme::RATIO_BAR_DECADES_BELOW + theme::RATIO_BAR_DECADES_ABOVE)) as f32;
    let x = rect.min.x + rect.width() * one;
    painter.line_segment(
        [
            egui::pos2(x, rect.min.y - 2.0),
            egui::pos2(x, rect.max.y + 2.0),
        ],
        egui::Stroke::new(1.5, palette.text),
    );
    resp.on_hover_text(text);
}
