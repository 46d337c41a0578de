//! A dump opened in the app (issue 17 item 5) through the path field becomes the test side, and
//! the app's Localize window localizes that dump on its own inputs (what `localize --captures`
//! does): with one capture perturbed by 2%, the first local divergence is that capture's step,
//! with no input error. Needs the `gui` feature.
#![cfg(feature = "gui")]

mod import_common;
mod ui_common;

use egui_kittest::kittest::Queryable;
use golden_lens::import::TensorValues;
use golden_lens::model::Step;
use golden_lens::session::controller::LocalizeRequest;
use golden_lens::ui::{AppOptions, UiCommand};
use import_common::*;
use ui_common::*;

/// The perturbation planted in the dump: 2% on one capture.
const PERTURB_FACTOR: f32 = 1.02;

#[test]
fn localize_in_the_app_finds_the_perturbed_capture_of_an_opened_dump() {
    let dir = scratch();
    let regime = "prefill12";
    let target = "L2.attn_out";
    let mut tensors = canonical(&full_captures(&golden("v3-full")));
    let name = format!("{regime}/{target}");
    for (n, _, v) in tensors.iter_mut() {
        if *n == name {
            if let TensorValues::F32(x) = v {
                x.iter_mut().for_each(|e| *e *= PERTURB_FACTOR);
            }
        }
    }
    let path = dir.path().join("engine.safetensors");
    golden_lens::import::safetensors::write(&path, &tensors, &[]).unwrap();

    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    let mut h = harness(o);
    wait_until(&mut h, "the embedded golden", LOAD_TIMEOUT, |h| {
        h.query_by_label_contains("Golden: <embedded").is_some()
    });
    h.get_by_label("Path:").focus();
    h.step();
    h.get_by_label("Path:").type_text(path.to_str().unwrap());
    h.step();
    h.get_by_label("Open path").click();
    wait_until(&mut h, "the dump to open", LOAD_TIMEOUT, |h| {
        h.state().state().dump.is_some()
    });
    h.state().push(UiCommand::RunLocalize(LocalizeRequest {
        plant: Vec::new(),
        atlas: false,
        pin_from: None,
    }));
    wait_until(&mut h, "the localisation", RUN_TIMEOUT, |h| {
        h.state().localize_state().result.is_some()
    });
    let outcome = match &h.state().localize_state().result {
        Some(Ok(o)) => o.clone(),
        other => panic!("localize failed: {other:?}"),
    };
    assert!(
        outcome.test.contains("engine.safetensors"),
        "{}",
        outcome.test
    );
    let l = &outcome.localization;
    let first = l
        .first_local_divergence
        .map(|i| &l.steps[i])
        .expect("a local divergence");
    assert_eq!(
        (first.regime.as_str(), first.step),
        (regime, Step::Block(2)),
        "the perturbed capture's step"
    );
    assert_eq!(
        first.input_ratio, 0.0,
        "the dump's own inputs: no input error"
    );
    assert_eq!(first.worst_capture, target);
    h.run_steps(3);
    // The window says what it localized.
    assert!(h
        .query_all_by_label_contains("test: the dump")
        .any(|n| format!("{n:?}").contains("engine.safetensors")));
}
