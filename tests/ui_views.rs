//! The views' data logic without a window: top-k cell classes (both, reference only, test only,
//! tie flip, unknown), window masks, HC sums, heatmap slicing and downsampling, error histogram.
#![cfg(feature = "gui")]

use golden_lens::ui::views::hc_mix::comb_sums;
use golden_lens::ui::views::heatmap::{downsample, slice, SliceSpec, Tensor, Texel};
use golden_lens::ui::views::topk::{classify_mask_row, classify_row, SetCell};
use golden_lens::ui::views::values::error_histogram;
use golden_lens::ui::views::window_mask::{build_mask, mask_differences, MaskCell};

/// Exact f64 arithmetic on a few rationals (a per-row agreement of 1 of 3).
const EXACT_F64_SLACK: f64 = 1e-12;

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
    assert!((r.agreement - 1.0 / 3.0).abs() < EXACT_F64_SLACK);
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
    let other = Tensor::full(vec![1, 1, 6], vec![2.0, 0.0, 1.0, -1.0, 9.0, 10.0]);
    assert_eq!(mask_differences(&m, &build_mask(&other, 4, 12)), 2);
}

#[test]
fn hc_sums_are_unknown_where_a_sample_is_missing() {
    let mut known = vec![true; 4];
    known[3] = false;
    let comb = Tensor {
        shape: vec![1, 1, 2, 2],
        values: vec![0.25, 0.75, 0.5, 0.0],
        known: Some(known),
    };
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
}

#[test]
fn downsample_keeps_outliers_and_nan() {
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
    let (rows, cols, texels) = downsample(&g, 256);
    assert_eq!((rows, cols), (1, 256));
    assert_eq!(texels[10 / 4], Texel::Value(50.0));
    assert!(matches!(texels[600 / 4], Texel::Value(v) if v.is_nan()));
    assert_eq!(texels[100], Texel::Value(0.1));
}

#[test]
fn error_histogram_bins_by_decade_over_known_positions() {
    let reference = Tensor {
        shape: vec![4],
        values: vec![1.0, 1.0, 1.0, 1.0],
        known: Some(vec![true, true, true, false]),
    };
    let test = Tensor::full(vec![4], vec![1.0, 1.002, f64::NAN, 5.0]);
    let (bins, compared) = error_histogram(&reference, &test);
    assert_eq!(compared, 3);
    let count_at = |d: i32| bins.iter().find(|b| b.0 == d).map_or(0, |b| b.1);
    assert_eq!(count_at(-12), 1, "exact match in the first bin");
    assert_eq!(count_at(-3), 1, "2e-3 error");
    assert_eq!(count_at(4), 1, "NaN in the last bin");
}
