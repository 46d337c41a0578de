//! The app with an imported dump as the test side (what `gui --captures D` opens): v3-full's own
//! captures, replayed beside the oracle, pass every capture of the embedded golden; with one
//! capture perturbed, the app names it as the first divergence. Needs the `gui` feature.
#![cfg(feature = "gui")]

mod import_common;
mod ui_common;
use egui_kittest::kittest::Queryable;
use golden_lens::import::{NameMap, TensorValues};
use golden_lens::ui::AppOptions;
use import_common::*;
use ui_common::*;

/// The perturbation planted in the second test: 2% on one capture.
const PERTURB_FACTOR: f32 = 1.02;

fn options_with_dump(path: std::path::PathBuf) -> AppOptions {
    let mut o = AppOptions::cpu_only();
    o.show_frame_time = false;
    o.backends = golden_lens::ui::imported::with_captures(o.backends, path, NameMap::canonical());
    o
}

fn dump(dir: &std::path::Path, perturb: Option<&str>) -> std::path::PathBuf {
    let mut tensors = canonical(&full_captures(&golden("v3-full")));
    for (n, _, v) in tensors.iter_mut() {
        if Some(n.as_str()) == perturb {
            if let TensorValues::F32(x) = v {
                x.iter_mut().for_each(|e| *e *= PERTURB_FACTOR);
            }
        }
    }
    let path = dir.join("engine.safetensors");
    golden_lens::import::safetensors::write(&path, &tensors, &[]).unwrap();
    path
}

#[test]
fn an_imported_dump_runs_beside_the_oracle_and_passes() {
    let dir = scratch();
    let mut h = harness(options_with_dump(dump(dir.path(), None)));
    wait_until(&mut h, "the embedded golden", LOAD_TIMEOUT, |h| {
        h.query_by_label_contains("Golden: <embedded").is_some()
    });
    run_all(&mut h);
    let total = golden_lens::golden::embedded::default_golden()
        .unwrap()
        .capture_count();
    h.get_by_label(&format!("{total} passed, 0 failed"));
    h.get_by_label("No divergence so far");
    // Both sides are there: the oracle and the dump's replay (the list's chips say `exact`
    // for a bit-exact pass).
    assert_passes(&h, "captures engine.safetensors vs golden");
    assert_passes(&h, "cpu vs golden");
}

#[test]
fn a_perturbed_capture_of_the_dump_is_the_first_divergence() {
    let dir = scratch();
    let target = "prefill12/L2.attn_out";
    let mut h = harness(options_with_dump(dump(dir.path(), Some(target))));
    wait_until(&mut h, "the embedded golden", LOAD_TIMEOUT, |h| {
        h.query_by_label_contains("Golden: <embedded").is_some()
    });
    run_all(&mut h);
    h.get_by_label_contains(&format!("First divergence: {target}"));
}

#[test]
fn a_dump_opened_through_the_path_field_becomes_the_test_side() {
    let dir = scratch();
    let path = dump(dir.path(), None);
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
        h.state()
            .notice()
            .is_some_and(|n| n.contains("the test side replays"))
    });
    run_all(&mut h);
    assert_passes(&h, "captures engine.safetensors vs golden");
}

/// Some capture-list chip of `pair` says it passes (`pass`, or `exact` when bit-exact) and none
/// says it fails.
fn assert_passes(h: &egui_kittest::Harness<'static, golden_lens::ui::GoldenLensApp>, pair: &str) {
    let passing = h
        .query_all_by_label_contains(&format!("{pair}: pass"))
        .chain(h.query_all_by_label_contains(&format!("{pair}: exact")))
        .count();
    assert!(passing > 0, "no chip of {pair} passes");
    assert!(
        h.query_all_by_label_contains(&format!("{pair}: FAIL"))
            .next()
            .is_none(),
        "a chip of {pair} fails"
    );
}
