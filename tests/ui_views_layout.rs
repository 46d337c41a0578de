//! The views get the screen and answer on hover, on the tiny golden and at DeepSeek-V4.1 sizes
//! (synthetic captures): at 1280×800 and 1920×1080 every view's region is at least 60% of the
//! detail area's width and each Values panel is at least 300 points wide; the hover readout
//! equals the data model's numbers; a frame with a real-dims capture selected stays within one
//! 60 Hz frame and builds no texture once drawn. With `UPDATE_SCREENSHOTS=1` the real-dims tests
//! write the README's real-dims screenshots to `assets/`.
#![cfg(feature = "gui")]

use eframe::egui::{self, Role};
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use golden_lens::model::CaptureValues;
use golden_lens::ui::views::heatmap::unravel;
use golden_lens::ui::views::{values, ReferenceChoice};
use golden_lens::ui::{AppOptions, DetailView, GoldenLensApp, UiCommand};
use std::time::Instant;

mod ui_common;
use ui_common::*;

/// The bar: one frame at 60 Hz. Measured as the median over steady frames of the app's
/// own `ui` call (what the app adds to a frame; egui's tessellation and the GPU upload come on
/// top), in the test profile.
const FRAME_BUDGET_SECS: f64 = 1.0 / 60.0;
/// Steady frames measured per view.
const STEADY_FRAMES: usize = 30;
/// A view's region is at least this share of the detail area's width.
const VIEW_WIDTH_SHARE: f32 = 0.6;
/// Each Values panel is at least this wide (the bar).
const MIN_VALUES_PANEL_PT: f32 = 300.0;

fn options() -> AppOptions {
    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    o
}

/// The tiny golden run once, idle at `size`.
fn tiny_at(size: [f32; 2]) -> Harness<'static, GoldenLensApp> {
    let mut o = options();
    o.run_on_start = false;
    let mut h = harness_at(o, size);
    wait_ready(&mut h);
    run_all(&mut h);
    h
}

/// An idle app with the synthetic real-dims captures injected, GPU against CPU.
fn real_dims_app(size: [f32; 2]) -> Harness<'static, GoldenLensApp> {
    let mut o = options();
    o.run_on_start = false;
    let mut h = harness_at(o, size);
    // The worker's first report follows its `Cleared`, which would otherwise drop the
    // injected results.
    wait_ready(&mut h);
    h.state_mut().inject_results(real_dims_results());
    h.state_mut().handle(UiCommand::SetTestSide {
        backend: 1,
        reference: ReferenceChoice::FirstBackend,
    });
    h
}

fn select(h: &mut Harness<'static, GoldenLensApp>, label: &str, view: DetailView) {
    let i = h
        .state()
        .results()
        .iter()
        .position(|r| r.label() == label)
        .unwrap_or_else(|| panic!("{label} is not among the results"));
    h.state_mut().handle(UiCommand::SelectCapture(i));
    h.state_mut().handle(UiCommand::SetDetailView(view));
    h.run_steps(3);
}

fn assert_view_gets_the_room(h: &Harness<'static, GoldenLensApp>, view: DetailView, what: &str) {
    let probe = &h.state().caches().layout;
    let detail = probe.detail.expect("the detail area was laid out");
    let region = h
        .get_by_role_and_label(Role::Pane, view.region_label())
        .rect();
    assert!(
        region.width() >= VIEW_WIDTH_SHARE * detail.width(),
        "{what}: {} region {:.0} pt of a {:.0} pt detail area",
        view.title(),
        region.width(),
        detail.width()
    );
    assert!(!probe.panels.is_empty(), "{what}: the view drew no panel");
    if view == DetailView::Values {
        for label in [
            values::REFERENCE_PANEL,
            values::TEST_PANEL,
            values::DIFF_PANEL,
        ] {
            let r = h.get_by_role_and_label(Role::Image, label).rect();
            assert!(
                r.width() >= MIN_VALUES_PANEL_PT,
                "{what}: {label} is {:.0} pt wide",
                r.width()
            );
        }
    }
    for (label, r) in &probe.panels {
        assert!(
            r.width() >= VIEW_WIDTH_SHARE * detail.width()
                || r.width() >= MIN_VALUES_PANEL_PT
                || label.contains("comb"),
            "{what}: panel {label} is only {:.0} pt wide",
            r.width()
        );
    }
}

/// The tiny golden's captures the README shows, one per view.
const TINY_VIEWS: [(&str, DetailView); 5] = [
    ("prefill12/L0.attn_in", DetailView::Values),
    ("prefill12/shared.L4.topk_idxs", DetailView::TopK),
    ("decode12/L5.sa_topk_idxs", DetailView::WindowMask),
    ("prefill12/L2.attn_comb", DetailView::HcMix),
    ("prefill12/L0.moe_indices", DetailView::Moe),
];

#[test]
fn every_view_gets_the_room_at_1280x800_and_1920x1080() {
    for size in [SIZE_PT, LARGE_SIZE_PT] {
        let mut h = tiny_at(size);
        for (label, view) in TINY_VIEWS {
            select(&mut h, label, view);
            assert_view_gets_the_room(&h, view, &format!("{label} at {size:?}"));
        }
    }
    for size in [SIZE_PT, LARGE_SIZE_PT] {
        let mut h = real_dims_app(size);
        for (label, view) in REAL_VIEWS {
            select(&mut h, label, view);
            assert_view_gets_the_room(&h, view, &format!("{label} at {size:?}"));
        }
    }
}

/// Hover the middle of a Values panel and check the readout against the data model.
fn hover_values_panel(h: &mut Harness<'static, GoldenLensApp>, panel: &str, at: [f32; 2]) {
    let rect = h.get_by_role_and_label(Role::Image, panel).rect();
    let pos = rect.min + egui::vec2(at[0] * rect.width(), at[1] * rect.height());
    h.hover_at(pos);
    h.run_steps(2);
    let r = h.state().selected().expect("a selection").clone();
    let readout = h
        .state()
        .caches()
        .hover
        .clone()
        .expect("hovering a heatmap gives a readout");
    assert_eq!(readout.capture, r.label());
    // The multi-index is the flat index in the capture's shape, each axis named.
    let multi: Vec<usize> = readout.index.iter().map(|(_, i)| *i).collect();
    assert_eq!(multi, unravel(readout.flat_index, &r.shape));
    assert_eq!(readout.index.len(), r.shape.len());
    // Reference and test are the data model's numbers at that index.
    let at_backend = |b: usize| match &*r.per_backend[b].values {
        CaptureValues::F32(v) => f64::from(v[readout.flat_index]),
        CaptureValues::I64(v) => v[readout.flat_index] as f64,
    };
    let test_backend = r.per_backend.len() - 1;
    let test = readout.test.expect("the test side is known");
    assert!(test.to_bits() == at_backend(test_backend).to_bits());
    match readout.reference {
        Some(v) if r.regime == "realdims" => assert!(v.to_bits() == at_backend(0).to_bits()),
        Some(v) => {
            let g = h.state().golden().expect("golden").golden.clone();
            let gc = g.regimes[r.regime_index]
                .get(&r.name)
                .expect("the golden holds the capture");
            assert_eq!(readout.flat_index % gc.stride.max(1), 0);
            let sample = gc.samples_f64()[readout.flat_index / gc.stride.max(1)];
            assert!(v.to_bits() == sample.to_bits());
        }
        None => {
            // Only a sampled golden leaves a position unknown.
            let g = h.state().golden().expect("golden").golden.clone();
            let gc = g.regimes[r.regime_index].get(&r.name).expect("capture");
            assert_ne!(readout.flat_index % gc.stride.max(1), 0);
        }
    }
    // The readout line under the panels says the same, as text.
    h.get_by_label(&readout.text);
    assert!(readout
        .text
        .contains(&format!("(flat {})", readout.flat_index)));
    assert!(readout
        .text
        .contains(&golden_lens::ui::views::heatmap::fmt_value(test)));
}

#[test]
fn hover_readouts_equal_the_data_model() {
    let mut h = tiny_at(SIZE_PT);
    select(&mut h, "prefill12/L0.attn_in", DetailView::Values);
    for at in [[0.5, 0.5], [0.3, 0.7], [0.9, 0.2]] {
        hover_values_panel(&mut h, values::TEST_PANEL, at);
    }
    let mut h = real_dims_app(SIZE_PT);
    select(&mut h, "realdims/L0.sa_o", DetailView::Values);
    for at in [[0.5, 0.5], [0.95, 0.9]] {
        hover_values_panel(&mut h, values::DIFF_PANEL, at);
    }
}

/// The real-dims captures and the view each opens in.
const REAL_VIEWS: [(&str, DetailView); 5] = [
    ("realdims/L0.sa_o", DetailView::Values),
    ("realdims/L0.h_in", DetailView::Values),
    ("realdims/L0.moe_indices", DetailView::Moe),
    ("realdims/shared.L0.topk_idxs", DetailView::TopK),
    ("realdims/L0.sa_topk_idxs", DetailView::WindowMask),
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn frames_with_real_dims_captures_stay_within_one_60hz_frame() {
    let mut h = real_dims_app(SIZE_PT);
    let shots = std::env::var_os("UPDATE_SCREENSHOTS").is_some();
    for (label, view) in REAL_VIEWS {
        select(&mut h, label, view);
        h.remove_cursor();
        h.run_steps(2);
        let builds_before = h.state().caches().values.builds;
        let mut app_secs = Vec::new();
        let mut step_secs = Vec::new();
        for _ in 0..STEADY_FRAMES {
            let t = Instant::now();
            h.step();
            step_secs.push(t.elapsed().as_secs_f64());
            app_secs.push(*h.state().state().frame_secs.back().expect("a frame"));
        }
        let (app, step) = (median(app_secs), median(step_secs));
        println!(
            "{label} ({}): app ui median {:.2} ms, harness frame median {:.2} ms",
            view.title(),
            app * 1e3,
            step * 1e3
        );
        assert_eq!(
            h.state().caches().values.builds,
            builds_before,
            "{label}: steady frames rebuilt the view's model"
        );
        assert!(
            app < FRAME_BUDGET_SECS,
            "{label}: a frame takes {:.1} ms",
            app * 1e3
        );
        if shots {
            let name = label.replace("realdims/", "").replace('.', "_");
            let image = h.render().expect("render");
            let path = format!(
                "{}/assets/screenshot_realdims_{name}.png",
                env!("CARGO_MANIFEST_DIR")
            );
            image.save(&path).expect("write the screenshot");
            println!("wrote {path}");
        }
    }
}

/// The wheel zooms the three linked heatmaps around the pointer; "Fit" shows the whole slice.
#[test]
fn the_wheel_zooms_linked_heatmaps_and_fit_restores_them() {
    let mut h = real_dims_app(SIZE_PT);
    select(&mut h, "realdims/L0.sa_o", DetailView::Values);
    assert_eq!(h.state().caches().values.zoom.window, None);
    let rect = h
        .get_by_role_and_label(Role::Image, values::TEST_PANEL)
        .rect();
    h.hover_at(rect.center());
    h.step();
    h.event(egui::Event::MouseWheel {
        unit: egui::MouseWheelUnit::Point,
        delta: egui::vec2(0.0, ZOOM_IN_WHEEL_PT),
        phase: egui::TouchPhase::Move,
        source: egui::MouseWheelSource::Unknown,
        modifiers: egui::Modifiers::NONE,
    });
    h.run_steps(10);
    let w = h
        .state()
        .caches()
        .values
        .zoom
        .window
        .expect("the wheel zoomed in");
    // 64 heads × 512 dims at token 0: the window is narrower than the slice on both axes and
    // still holds the hovered point.
    assert!(w.width() < 512.0 && w.height() < 64.0, "{w:?}");
    assert!(w.x0 < 256.0 && w.x1 > 256.0, "{w:?}");
    // The wheel zoomed the raster, not the panel around it.
    h.get_by_role_and_label(Role::Button, "Fit").click();
    h.run_steps(2);
    assert_eq!(h.state().caches().values.zoom.window, None);
}

/// Scrolled points of the zoom test (positive: zoom in).
const ZOOM_IN_WHEEL_PT: f32 = 240.0;
