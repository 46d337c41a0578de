//! The theme: every text token reads at WCAG AA (4.5:1) against every background it is drawn
//! on, in the dark and the light palette, including the colours egui itself draws text with;
//! chips and cell numbers pick black or white by luminance; the colour maps are perceptual (the
//! sequential map's lightness rises evenly, the diverging map is symmetric and lightest at 0).
#![cfg(feature = "gui")]

use golden_lens::ui::theme::{
    self, contrast_ratio, diverging, sequential, text_on, Oklab, ThemeChoice, MIN_TEXT_CONTRAST,
};

/// Lightness steps of the sequential map may differ by this much from the even step (the LUT
/// rounds to 8-bit sRGB and the gamut clip works on chroma only).
const LIGHTNESS_STEP_TOL: f64 = 0.01;
/// The diverging map's arms may differ in lightness by this much at equal distance from 0.
const SYMMETRY_TOL: f64 = 0.01;
/// Samples of each map checked.
const SAMPLES: usize = 64;

#[test]
fn every_text_token_meets_wcag_aa_in_both_themes() {
    for choice in [ThemeChoice::Dark, ThemeChoice::Light] {
        let p = choice.palette();
        let mut pairs = p.text_pairs();
        // What egui draws with: body text on panels, buttons in every state, selections.
        let v = p.visuals(choice == ThemeChoice::Dark);
        let w = &v.widgets;
        for (what, fg, bg) in [
            (
                "egui text on panel",
                w.noninteractive.fg_stroke.color,
                v.panel_fill,
            ),
            (
                "egui weak text on panel",
                v.weak_text_color.unwrap_or_default(),
                v.panel_fill,
            ),
            (
                "egui button",
                w.inactive.fg_stroke.color,
                w.inactive.weak_bg_fill,
            ),
            (
                "egui hovered button",
                w.hovered.fg_stroke.color,
                w.hovered.weak_bg_fill,
            ),
            (
                "egui pressed button",
                w.active.fg_stroke.color,
                w.active.weak_bg_fill,
            ),
            (
                "egui selected",
                v.selection.stroke.color,
                v.selection.bg_fill,
            ),
            (
                "egui text field",
                w.noninteractive.fg_stroke.color,
                v.extreme_bg_color,
            ),
            (
                "egui window",
                w.noninteractive.fg_stroke.color,
                v.window_fill,
            ),
        ] {
            pairs.push((what.to_string(), fg, bg));
        }
        for bg in p.chip_backgrounds() {
            pairs.push(("chip".into(), text_on(bg), bg));
        }
        let low: Vec<String> = pairs
            .iter()
            .filter_map(|(what, fg, bg)| {
                let c = contrast_ratio(*fg, *bg);
                (c < MIN_TEXT_CONTRAST).then(|| format!("{what}: {fg:?} on {bg:?}: {c:.2}"))
            })
            .collect();
        assert!(
            low.is_empty(),
            "{} theme, below AA:\n{}",
            p.name,
            low.join("\n")
        );
    }
}

#[test]
fn numbers_on_cells_read_on_every_map_colour() {
    for i in 0..SAMPLES {
        let t = i as f64 / (SAMPLES - 1) as f64;
        for bg in [sequential(t), diverging(2.0 * t - 1.0)] {
            assert!(
                contrast_ratio(text_on(bg), bg) >= MIN_TEXT_CONTRAST,
                "{bg:?}"
            );
        }
    }
}

#[test]
fn the_sequential_map_rises_evenly_in_lightness() {
    let l: Vec<f64> = (0..SAMPLES)
        .map(|i| Oklab::from_srgb(sequential(i as f64 / (SAMPLES - 1) as f64)).l)
        .collect();
    let step = (theme::SEQ_L[1] - theme::SEQ_L[0]) / (SAMPLES - 1) as f64;
    for w in l.windows(2) {
        assert!(
            (w[1] - w[0] - step).abs() < LIGHTNESS_STEP_TOL,
            "lightness steps {:.4} → {:.4}",
            w[0],
            w[1]
        );
    }
    assert!((l[0] - theme::SEQ_L[0]).abs() < LIGHTNESS_STEP_TOL);
    assert!((l[SAMPLES - 1] - theme::SEQ_L[1]).abs() < LIGHTNESS_STEP_TOL);
}

#[test]
fn the_diverging_map_is_symmetric_and_lightest_at_zero() {
    let l = |t: f64| Oklab::from_srgb(diverging(t)).l;
    let centre = l(0.0);
    for i in 1..SAMPLES {
        let t = i as f64 / (SAMPLES - 1) as f64;
        assert!((l(t) - l(-t)).abs() < SYMMETRY_TOL, "asymmetric at ±{t:.3}");
        assert!(l(t) < centre, "darker than the centre at {t:.3}");
    }
    // The arms have different hues: negative values are bluer, positive redder.
    let (neg, pos) = (diverging(-1.0), diverging(1.0));
    assert!(neg.b() > neg.r() && pos.r() > pos.b());
}

#[test]
fn oklab_round_trips_srgb() {
    for c in [
        theme::DARK.accent,
        theme::LIGHT.fail_text,
        theme::DARK.panel_bg,
    ] {
        let o = Oklab::from_srgb(c);
        let back = theme::lch_in_gamut(
            o.l,
            (o.a * o.a + o.b * o.b).sqrt(),
            o.b.atan2(o.a).to_degrees(),
        );
        for (a, b) in [(c.r(), back.r()), (c.g(), back.g()), (c.b(), back.b())] {
            assert!(a.abs_diff(b) <= 1, "{c:?} came back as {back:?}");
        }
    }
}
