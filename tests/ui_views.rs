//! The views' data logic without a window: top-k cell classes (both, reference only, test only,
//! tie flip, unknown), window masks, HC sums, slices and their default axes, fold by tile, the
//! colour scales, raster downsampling (outliers and NaN survive), the ulp histogram, the list's
//! rows (groups, folds, filters, ratio sort) and the view families.
#![cfg(feature = "gui")]

use eframe::egui::Color32;
use golden_lens::golden::compare::Comparison;
use golden_lens::golden::CaptureKind;
use golden_lens::model::CaptureValues;
use golden_lens::session::controller::{BackendCapture, CaptureResult};
use golden_lens::ui::commands::{DetailView, ListFilter, ListSort, VerdictFilter, ViewFamily};
use golden_lens::ui::panels::capture_list::{self, ListRow};
use golden_lens::ui::theme::{self, DARK};
use golden_lens::ui::views::hc_mix::comb_sums;
use golden_lens::ui::views::heatmap::{
    fold_grid, slice, unravel, ColorScale, Fold, GridSource, ScaleKind, SliceSpec, Tensor,
};
use golden_lens::ui::views::raster::{build_image, texel_cells, CellSource, Window};
use golden_lens::ui::views::topk::{classify_mask_row, classify_row, SetCell};
use golden_lens::ui::views::window_mask::{build_mask, infer_window, mask_differences, MaskCell};
use golden_lens::ui::views::{axis_names, panel_columns, ulp_bin, Sides, UlpHistogram};
use std::collections::HashSet;
use std::sync::Arc;

/// Agreement ratios are exact small fractions; compare them to this.
const RATIO_EPS: f64 = 1e-12;

fn no_tie(_: i64, _: i64) -> bool {
    false
}

#[test]
fn topk_cells_both_ref_only_test_only() {
    let r = classify_row(&[Some(3), Some(5), Some(-1)], &[5, 7, -1], &no_tie);
    assert_eq!(
        r.ref_cells,
        vec![SetCell::RefOnly, SetCell::Both, SetCell::Absent]
    );
    assert_eq!(
        r.test_cells,
        vec![SetCell::Both, SetCell::TestOnly, SetCell::Absent]
    );
    // {3,5} vs {5,7}: one shared of three.
    assert!((r.agreement - 1.0 / 3.0).abs() < RATIO_EPS);
}

#[test]
fn topk_tie_flip_when_scores_tie() {
    let tie = |a: i64, b: i64| (a, b) == (3, 7);
    let r = classify_row(&[Some(3), Some(5)], &[5, 7], &tie);
    assert_eq!(r.ref_cells, vec![SetCell::TieFlip, SetCell::Both]);
    assert_eq!(r.test_cells, vec![SetCell::Both, SetCell::TieFlip]);
}

#[test]
fn topk_sampled_reference_leaves_test_extras_unknown() {
    let r = classify_row(&[Some(1), None], &[1, 9], &no_tie);
    assert_eq!(r.ref_cells, vec![SetCell::Both, SetCell::Unknown]);
    assert_eq!(r.test_cells, vec![SetCell::Both, SetCell::Unknown]);
    assert_eq!(r.agreement, 1.0);
}

#[test]
fn mask_rows_compare_position_by_position() {
    let r = classify_mask_row(&[Some(1), Some(1), Some(0), None], &[1, 0, 1, 1]);
    assert_eq!(
        r.ref_cells,
        vec![
            SetCell::Both,
            SetCell::RefOnly,
            SetCell::TestOnly,
            SetCell::Unknown
        ]
    );
}

#[test]
fn window_mask_tells_window_from_compressed() {
    // One decode row: ring slots then two compressed picks at offset 8.
    let idx = Tensor::full(vec![1, 1, 6], vec![2.0, 0.0, 1.0, -1.0, 9.0, 11.0]);
    let m = build_mask(&idx, 4, 12);
    assert_eq!(m.rows, 1);
    assert_eq!(m.cells[0], MaskCell::Window);
    assert_eq!(m.cells[2], MaskCell::Window);
    assert_eq!(m.cells[3], MaskCell::Off);
    assert_eq!(m.cells[9], MaskCell::Compressed);
    assert_eq!(m.cells[11], MaskCell::Compressed);
    assert_eq!(m.absent_per_row, vec![1]);
    // The slot that picked each kv row is kept (the raster writes it on the cell).
    assert_eq!(m.slot[2], 0);
    assert_eq!(m.slot[11], 5);
    let other = Tensor::full(vec![1, 1, 6], vec![2.0, 0.0, 1.0, -1.0, 9.0, 10.0]);
    assert_eq!(mask_differences(&m, &build_mask(&other, 4, 12)), 2);
}

#[test]
fn the_window_part_is_read_from_the_indices_when_the_golden_is_silent() {
    // Two rows: a 4-slot ring (slot order, one -1) and 2 compressed picks offset by 4.
    let idx = Tensor::full(
        vec![1, 2, 6],
        vec![2.0, 0.0, 1.0, -1.0, 9.0, 11.0, 3.0, 1.0, 2.0, 0.0, 4.0, 7.0],
    );
    assert_eq!(infer_window(&idx), 4);
    // No compressed part: every slot is the window.
    let ring = Tensor::full(vec![1, 1, 3], vec![1.0, 2.0, 0.0]);
    assert_eq!(infer_window(&ring), 3);
}

#[test]
fn hc_sums_are_unknown_where_a_sample_is_missing() {
    let mut known = vec![true; 4];
    known[3] = false;
    let comb = Tensor::sampled(vec![1, 1, 2, 2], vec![0.25, 0.75, 0.5, 0.0], known);
    let (rows, cols) = comb_sums(&comb, 0, 2);
    assert_eq!(rows, vec![Some(1.0), None]);
    assert_eq!(cols, vec![Some(0.75), None]);
}

#[test]
fn slice_picks_axes_and_fixed_indices() {
    // shape [2, 3, 4], value = flat index.
    let t = Tensor::full(vec![2, 3, 4], (0..24).map(f64::from).collect());
    let spec = SliceSpec {
        row_axis: 0,
        col_axis: 2,
        fixed: vec![0, 1, 0],
    };
    let g = slice(&t, &spec);
    assert_eq!((g.rows, g.cols), (2, 4));
    assert_eq!(g.at(1, 3), Some(1.0 * 12.0 + 1.0 * 4.0 + 3.0));
    let flat = spec.flat_index(&t.shape, 1, 3);
    assert_eq!(flat, 19);
    assert_eq!(unravel(flat, &t.shape), vec![1, 1, 3]);
}

#[test]
fn the_default_slice_shows_the_two_largest_axes() {
    // Attention output: heads × dims at token 0.
    let s = SliceSpec::default_for(&[1, 16, 64, 512]);
    assert_eq!((s.row_axis, s.col_axis), (2, 3));
    // The stream: tokens × dims at hc 0.
    let s = SliceSpec::default_for(&[1, 16, 4, 5120]);
    assert_eq!((s.row_axis, s.col_axis), (1, 3));
    // Ties keep the later axes.
    let s = SliceSpec::default_for(&[1, 12, 64]);
    assert_eq!((s.row_axis, s.col_axis), (1, 2));
}

#[test]
fn axes_are_named_after_the_catalogue() {
    assert_eq!(
        axis_names("L3.sa_q", &[1, 12, 4, 32]),
        vec!["batch", "token", "head", "dim"]
    );
    assert_eq!(
        axis_names("L0.moe_indices", &[12, 2]),
        vec!["token", "slot"]
    );
    assert_eq!(
        axis_names("L0.attn_in", &[1, 12, 64]),
        vec!["batch", "token", "dim"]
    );
    // Unknown names fall back to numbered axes ending in token, dim.
    assert_eq!(
        axis_names("mystery", &[3, 5, 7]),
        vec!["axis 0", "token", "dim"]
    );
}

#[test]
fn fold_by_tile_gathers_tile_positions_and_tiles() {
    // 4 × 6 grid, tile 2 × 3; one error at (3, 5): the last cell of the last tile.
    let mut v = vec![0.0; 24];
    v[3 * 6 + 5] = -2.0;
    v[6 + 2] = 0.5;
    let g = slice(
        &Tensor::full(vec![4, 6], v),
        &SliceSpec::default_for(&[4, 6]),
    );
    let (within, counts) = fold_grid(&g, [2, 3], Fold::WithinTile);
    assert_eq!((within.rows, within.cols), (2, 3));
    assert_eq!(
        within.at(1, 2),
        Some(2.0),
        "largest |diff| at the tile's corner"
    );
    assert_eq!(within.at(0, 0), Some(0.0));
    assert_eq!(counts, vec![4; 6], "every position folds 4 tiles");
    let (per, counts) = fold_grid(&g, [2, 3], Fold::PerTile);
    assert_eq!((per.rows, per.cols), (2, 2));
    assert_eq!(per.at(1, 1), Some(2.0));
    assert_eq!(per.at(0, 0), Some(0.5));
    assert_eq!(counts, vec![6; 4]);
    // A partial tile (5 columns, tile 3) folds fewer cells.
    let g = slice(
        &Tensor::full(vec![1, 5], vec![0.0; 5]),
        &SliceSpec::default_for(&[1, 5]),
    );
    let (_, counts) = fold_grid(&g, [1, 3], Fold::PerTile);
    assert_eq!(counts, vec![3, 2]);
}

#[test]
fn colour_scales_are_linear_or_symmetric_log() {
    let g = slice(
        &Tensor::full(vec![1, 3], vec![-1.0, 1e-3, 1.0]),
        &SliceSpec::default_for(&[1, 3]),
    );
    let lin = ColorScale::diverging(&g, ScaleKind::Linear);
    assert_eq!(lin.position(1.0), 1.0);
    assert_eq!(lin.position(-1.0), -1.0);
    assert!(lin.position(1e-3).abs() < 2e-3);
    let log = ColorScale::diverging(&g, ScaleKind::Log);
    // On the log scale a thousandth still gets a visible share of the map.
    assert!(log.position(1e-3) > 0.05);
    assert!((log.untransform(log.transform(0.37)) - 0.37).abs() < RATIO_EPS);
    let seq = ColorScale::sequential(&[&g], ScaleKind::Linear);
    assert_eq!(seq.position(-1.0), 0.0);
    assert_eq!(seq.position(1.0), 1.0);
    assert_eq!(seq.color(f64::NAN, &DARK), DARK.cell_nan);
    assert_eq!(seq.color(f64::INFINITY, &DARK), DARK.cell_pos_inf);
}

#[test]
fn downsampled_rasters_keep_outliers_and_nan() {
    let t = Tensor::full(
        vec![1, 1024],
        (0..1024)
            .map(|i| match i {
                10 => 50.0,
                600 => f64::NAN,
                _ => 0.1,
            })
            .collect(),
    );
    let g = slice(&t, &SliceSpec::default_for(&t.shape));
    let scale = ColorScale::diverging(&g, ScaleKind::Linear);
    let src = GridSource {
        grid: &g,
        scale: &scale,
        palette: &DARK,
    };
    let image = build_image(&src, &(0..1), &(0..1024), 256, 1);
    assert_eq!(image.size, [256, 1]);
    assert_eq!(image.pixels[10 / 4], scale.color(50.0, &DARK));
    assert_eq!(image.pixels[600 / 4], DARK.cell_nan);
    assert_eq!(image.pixels[100], scale.color(0.1, &DARK));
    // Texels partition the cells: every cell in exactly one texel.
    let covered: usize = (0..256)
        .map(|t| texel_cells(&(0..1024), 256, t).len())
        .sum();
    assert_eq!(covered, 1024);
    let covered: usize = (0..7).map(|t| texel_cells(&(3..20), 7, t).len()).sum();
    assert_eq!(covered, 17);
}

#[test]
fn zoom_windows_stay_inside_the_raster() {
    let mut w = Window::full(10, 100);
    w.zoom_around(90.0, 5.0, [0.1, 0.5]);
    w.clamp_to(10, 100);
    assert!((w.width() - 10.0).abs() < RATIO_EPS);
    assert!(w.x1 <= 100.0 && w.x0 >= 0.0);
    w.x0 += 200.0;
    w.x1 += 200.0;
    w.clamp_to(10, 100);
    assert_eq!(w.x1, 100.0);
    let (rows, cols) = w.cells(10, 100);
    assert_eq!(cols, 90..100);
    assert!(rows.end <= 10);
}

#[test]
fn panels_wrap_instead_of_shrinking_below_300_points() {
    assert_eq!(panel_columns(3, 950.0).0, 3);
    let (cols, w) = panel_columns(3, 700.0);
    assert_eq!(cols, 2);
    assert!(w >= theme::MIN_PANEL_WIDTH_PT);
    let (cols, w) = panel_columns(3, 200.0);
    assert_eq!(cols, 1);
    assert!(w >= theme::MIN_PANEL_WIDTH_PT);
}

#[test]
fn ulp_bins_double_and_integer_captures_count_equal_elements() {
    assert_eq!(ulp_bin(0), 0);
    assert_eq!(ulp_bin(1), 1);
    assert_eq!(ulp_bin(2), 2);
    assert_eq!(ulp_bin(3), 3);
    assert_eq!(ulp_bin(4), 3);
    assert_eq!(ulp_bin(5), 4);
    assert_eq!(ulp_bin(u64::MAX - 1), ulp_bin(1 << 40));
    let one_ulp = f32::from_bits(1.0f32.to_bits() + 0x1_0000);
    let sides = Sides {
        reference: Tensor::full(vec![4], vec![1.0, 1.0, 1.0, 2.0]),
        test: Tensor::full(vec![4], vec![1.0, f64::from(one_ulp), f64::NAN, 2.0]),
        ref_name: "cpu".into(),
        test_name: "gpu".into(),
        note: None,
    };
    let h = UlpHistogram::build("x".into(), &sides, false);
    assert_eq!((h.compared, h.exact, h.nan_mismatch), (4, 2, 1));
    assert_eq!(h.bins[0].1, 2);
    assert_eq!(h.bins[1].1, 1);
    let h = UlpHistogram::build("x".into(), &sides, true);
    assert_eq!(h.bins, vec![("equal".into(), 2), ("differ".into(), 2)]);
}

fn cmp(pass: bool, ratio: f64) -> Comparison {
    let a = [1.0f32];
    let b = [1.0f32];
    let mut c = golden_lens::golden::compare::compare_full(
        golden_lens::golden::compare::Values::F32(&a),
        golden_lens::golden::compare::Values::F32(&b),
        &[1],
        &golden_lens::golden::policy::POLICY_BF16,
    );
    c.pass = pass;
    c.worst_ratio = ratio;
    c.bit_exact = ratio == 0.0;
    c
}

fn fake(order: usize, regime: &str, name: &str, pass: bool, ratio: f64) -> CaptureResult {
    CaptureResult {
        order,
        regime_index: 0,
        regime: regime.into(),
        step: golden_lens::model::Step::Block(0),
        name: name.into(),
        kind: golden_lens::golden::names::capture_kind(name),
        shape: vec![1],
        per_backend: vec![BackendCapture {
            backend: "cpu".into(),
            values: Arc::new(CaptureValues::F32(vec![0.0])),
            vs_golden: Some(cmp(pass, ratio)),
            triage: None,
            budget: None,
            violations: Vec::new(),
        }],
        cross: Vec::new(),
    }
}

#[test]
fn the_list_groups_folds_filters_and_sorts() {
    let results = vec![
        fake(0, "prefill12", "embed", true, 0.0),
        fake(1, "prefill12", "L0.attn_in", true, 0.5),
        fake(2, "prefill12", "L0.sa_topk_idxs", false, 3.0),
        fake(3, "prefill12", "L1.attn_in", true, 0.0),
        fake(4, "decode12", "L0.attn_in", false, 9.0),
    ];
    let f = ListFilter::default();
    let rows = capture_list::list_rows(&results, &f, &HashSet::new());
    let headers: Vec<(String, usize)> = rows
        .iter()
        .filter_map(|r| match r {
            ListRow::Header { title, level, .. } => Some((title.clone(), *level)),
            ListRow::Capture(_) => None,
        })
        .collect();
    assert_eq!(
        headers,
        vec![
            ("prefill12".into(), 0),
            ("model".into(), 1),
            ("layer 0".into(), 1),
            ("layer 1".into(), 1),
            ("decode12".into(), 0),
            ("layer 0".into(), 1),
        ]
    );
    // Folding a layer hides its captures; folding a regime hides its groups too.
    let mut folded = HashSet::new();
    folded.insert(capture_list::group_key(&results[1]));
    assert_eq!(
        capture_list::visible_captures(&results, &f, &folded),
        vec![0, 3, 4]
    );
    folded.insert(capture_list::regime_key(&results[0]));
    assert_eq!(
        capture_list::visible_captures(&results, &f, &folded),
        vec![4]
    );
    // Filters: name, kind, layer, verdict.
    let by = |f: ListFilter| capture_list::list_order(&results, &f);
    assert_eq!(
        by(ListFilter {
            name: "ATTN_IN".into(),
            ..Default::default()
        }),
        vec![1, 3, 4]
    );
    assert_eq!(
        by(ListFilter {
            kind: Some(CaptureKind::Index),
            ..Default::default()
        }),
        vec![2]
    );
    assert_eq!(
        by(ListFilter {
            layer: Some(Some(0)),
            ..Default::default()
        }),
        vec![1, 2, 4]
    );
    assert_eq!(
        by(ListFilter {
            layer: Some(None),
            ..Default::default()
        }),
        vec![0]
    );
    assert_eq!(
        by(ListFilter {
            verdict: VerdictFilter::Failing,
            ..Default::default()
        }),
        vec![2, 4]
    );
    assert_eq!(
        by(ListFilter {
            verdict: VerdictFilter::NotBitExact,
            ..Default::default()
        }),
        vec![1]
    );
    // Sorted by ratio: worst first, no headers.
    let sorted = ListFilter {
        sort: ListSort::RatioDescending,
        ..Default::default()
    };
    assert_eq!(by(sorted.clone()), vec![4, 2, 1, 0, 3]);
    assert!(capture_list::list_rows(&results, &sorted, &HashSet::new())
        .iter()
        .all(|r| matches!(r, ListRow::Capture(_))));
}

#[test]
fn the_list_bar_is_logarithmic_around_the_pass_bar() {
    let at_one = theme::RATIO_BAR_DECADES_BELOW
        / (theme::RATIO_BAR_DECADES_BELOW + theme::RATIO_BAR_DECADES_ABOVE);
    let f = |r: f64| capture_list::bar_fraction(r).expect("a bar");
    assert!((f(1.0) - at_one).abs() < RATIO_EPS);
    assert!(f(10.0) > f(1.0) && f(1.0) > f(1e-3));
    assert_eq!(capture_list::bar_fraction(0.0), None);
    assert_eq!(f(f64::INFINITY), 1.0);
    // Chips carry text, and black or white text by the chip's luminance.
    let state = capture_list::ChipState::of(Some(&cmp(false, 3.0)), false);
    assert_eq!(state.short(), "FAIL");
    let bg = state.color(&DARK);
    // A disagreement the test backend's tie rule explains is reported, not failed.
    assert_eq!(
        capture_list::ChipState::of(Some(&cmp(false, 3.0)), true).word(),
        "tie flip"
    );
    assert!(theme::contrast_ratio(theme::text_on(bg), bg) >= theme::MIN_TEXT_CONTRAST);
}

#[test]
fn each_family_opens_its_most_telling_view() {
    let of = |name: &str| ViewFamily::of(&fake(0, "p", name, true, 0.0)).default_view();
    assert_eq!(of("L3.sa_topk_idxs"), DetailView::WindowMask);
    assert_eq!(of("shared.L4.topk_idxs"), DetailView::TopK);
    assert_eq!(of("shared.L4.candidates"), DetailView::TopK);
    assert_eq!(of("L0.moe_weights"), DetailView::Moe);
    assert_eq!(of("L2.ffn_comb"), DetailView::HcMix);
    assert_eq!(of("L2.attn_in"), DetailView::Values);
}

#[test]
fn grid_sources_draw_no_sample_as_unknown() {
    let t = Tensor::sampled(vec![1, 2], vec![1.0, 0.0], vec![true, false]);
    let g = slice(&t, &SliceSpec::default_for(&t.shape));
    let scale = ColorScale::sequential(&[&g], ScaleKind::Linear);
    let src = GridSource {
        grid: &g,
        scale: &scale,
        palette: &DARK,
    };
    assert_eq!(src.block_color(0..1, 1..2), DARK.cell_unknown);
    assert_ne!(src.block_color(0..1, 0..1), Color32::TRANSPARENT);
    assert_eq!(src.cell_text(0, 1).as_deref(), Some("·"));
}
