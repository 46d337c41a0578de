//! The app runs a GGUF with no golden (issue 11 item 6): the test exports the tiny model as a
//! GGUF whose vocabulary is a small byte-level BPE, types a prompt, and runs it. The prompt's
//! ids and pieces show; the CPU oracle is the live reference; with a second backend beside it
//! the list shows its cross verdicts and a planted fault is the first divergence; alone, the
//! oracle's captures show with their invariants. Needs the `gui` feature.
#![cfg(feature = "gui")]

mod bpe_common;
mod gguf_common;
mod ui_common;

use egui_kittest::kittest::Queryable;
use golden_lens::oracle::faults::{Fault, FaultPlan};
use golden_lens::session::builder::ModelParts;
use golden_lens::session::controller::BoxedBackend;
use golden_lens::session::SessionError;
use golden_lens::ui::goldenless::PromptForm;
use golden_lens::ui::{AppOptions, UiCommand};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use ui_common::*;

/// The prompt the test types.
const PROMPT: &str = "the lens";
/// Its ids under [`vocabulary`]: BOS, `the`, `Ġlens` (merges applied in rank order).
const PROMPT_IDS: [i64; 3] = [0, 31, 35];
/// The decode steps after the prefill.
const DECODE: usize = 1;

/// A byte-level BPE vocabulary that fits the tiny model's 64 rows: three control tokens, the
/// letters, `Ġ` (the byte-level space), and the merges that build `the` and `Ġlens`.
fn vocabulary() -> (Vec<String>, Vec<String>, Vec<i32>) {
    let mut tokens: Vec<String> = ["<|begin_of_sentence|>", "<|end_of_sentence|>", "<|pad|>"]
        .map(String::from)
        .to_vec();
    tokens.extend(('a'..='z').map(String::from));
    tokens.push("Ġ".into());
    let merges = [
        ("t", "h"),
        ("th", "e"),
        ("Ġ", "l"),
        ("e", "n"),
        ("Ġl", "en"),
        ("Ġlen", "s"),
    ];
    tokens.extend(merges.iter().map(|(a, b)| format!("{a}{b}")));
    let types = (0..tokens.len())
        .map(|i| if i < 3 { 3 } else { 1 })
        .collect();
    let merges = merges.iter().map(|(a, b)| format!("{a} {b}")).collect();
    (tokens, merges, types)
}

/// The tiny model (the embedded golden's fixture and filler weights) as a GGUF whose
/// `tokenizer.ggml.*` keys hold [`vocabulary`], with BOS added.
fn tiny_gguf_with_vocabulary(dir: &Path) -> PathBuf {
    let (tokens, merges, token_type) = vocabulary();
    let v = bpe_common::Vocab {
        tokens,
        merges,
        token_type,
    };
    bpe_common::tiny_gguf_with_vocabulary(dir, "tiny-bpe.gguf", &v, true)
}

/// The planted fault's error on one element of its capture.
const PLANTED_ERROR: f32 = 0.125;

/// The oracle (the live reference) and a second oracle named `cpu-test` with `faults` planted.
fn with_test_backend(o: &mut AppOptions, faults: Vec<Fault>) {
    o.tokens_backends = Arc::new(move |gguf: &Path, layers| {
        let bad_range = |e: golden_lens::model::LayerRangeError| SessionError::build("cpu", e);
        let model = ModelParts::from_gguf(gguf)?;
        let mut reference = model.oracle_with_diagnostics();
        reference
            .set_layer_range(layers.clone())
            .map_err(bad_range)?;
        let mut test = model.oracle();
        test.set_layer_range(layers).map_err(bad_range)?;
        test.faults = FaultPlan::new(faults.clone());
        Ok(vec![
            Box::new(reference) as BoxedBackend,
            Box::new(Renamed {
                name: "cpu-test",
                inner: test,
            }) as BoxedBackend,
        ])
    });
}

/// Open the app on the GGUF, type the prompt, set the decode steps and run it to the end.
fn run_typed_prompt(
    options: AppOptions,
    gguf: PathBuf,
) -> egui_kittest::Harness<'static, golden_lens::ui::GoldenLensApp> {
    let mut o = options;
    o.show_frame_time = false;
    o.gguf = Some(gguf);
    let mut h = harness(o);
    wait_until(&mut h, "the GGUF", LOAD_TIMEOUT, |h| {
        h.state().weights_gguf().is_some() && h.state().state().gguf_summary.is_some()
    });
    h.get_by_label("Prompt:").focus();
    h.step();
    h.get_by_label("Prompt:").type_text(PROMPT);
    h.run_steps(2);
    assert_eq!(h.state().state().prompt.text, PROMPT, "the typed prompt");
    let form = PromptForm {
        decode: DECODE,
        ..h.state().state().prompt.clone()
    };
    h.state().push(UiCommand::SetPromptForm(form));
    h.run_steps(2);
    h.get_by_label("Run prompt").click();
    wait_until(&mut h, "the prompt run to finish", RUN_TIMEOUT, |h| {
        h.state().state().prompt_run.is_some() && h.state().progress().finished
    });
    h.run_steps(3);
    h
}

#[test]
fn a_typed_prompt_runs_on_a_gguf_with_no_golden_beside_a_test_backend() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = tiny_gguf_with_vocabulary(dir.path());
    let target = "L2.attn_out";
    let mut o = AppOptions::cpu_only();
    with_test_backend(
        &mut o,
        // An error of 0.125 on one element: far over the two-ulp bar at attn_out's magnitude
        // (its values are well under 1 here).
        vec![Fault::parse(&format!("perturb={PLANTED_ERROR}@{target}")).unwrap()],
    );
    let mut h = run_typed_prompt(o, gguf);

    let run = h
        .state()
        .state()
        .prompt_run
        .clone()
        .expect("the prompt run");
    assert_eq!(run.ids, PROMPT_IDS);
    assert_eq!(run.pieces, ["<|begin_of_sentence|>", "the", "Ġlens"]);
    h.get_by_label("Prompt ids: 3 tokens: 0 '<|begin_of_sentence|>' · 31 'the' · 35 'Ġlens'");
    h.get_by_label("No golden: the cpu oracle is the live reference");
    assert!(h.state().golden().is_none());
    assert_eq!(
        h.state().state().mode,
        golden_lens::session::Mode::Isolated,
        "a golden-less run is isolated by default, as on the command line"
    );

    // One prefill regime over the ids, then the greedy decode step; every capture compared
    // cpu-test against the live oracle.
    let results = h.state().results();
    let regimes: std::collections::BTreeSet<&str> =
        results.iter().map(|r| r.regime.as_str()).collect();
    assert_eq!(
        regimes,
        ["decode3", "prefill3"].into_iter().collect(),
        "prefill over 3 ids, 1 decode step"
    );
    assert!(results.iter().all(|r| r.per_backend.len() == 2
        && r.per_backend.iter().all(|b| b.vs_golden.is_none())
        && r.cross.len() == 1));
    // The planted fault is the first divergence; what ran before it is bit-exact.
    h.get_by_label_contains(&format!("First divergence: prefill3/{target}"));
    assert!(h
        .query_all_by_label_contains("cpu-test vs cpu: exact")
        .next()
        .is_some());
    select_capture(&mut h, &format!("prefill3/{target}"));
    h.run_steps(3);
    assert!(h
        .query_all_by_label_contains("cpu-test vs cpu: FAIL")
        .next()
        .is_some());
}

#[test]
fn the_oracle_alone_shows_its_captures_and_invariants() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = tiny_gguf_with_vocabulary(dir.path());
    let mut h = run_typed_prompt(AppOptions::cpu_only(), gguf);
    let n = h.state().results().len();
    assert!(n > 0, "the oracle's captures are listed");
    assert!(h
        .state()
        .results()
        .iter()
        .all(|r| r.per_backend.len() == 1 && r.cross.is_empty() && r.pass()));
    assert_eq!(
        h.state().violation_count(),
        0,
        "the oracle's invariants hold"
    );
    h.get_by_label_contains("0 violations in the backends' own captures");
    // A capture's values show with the live oracle as the reference.
    select_capture(&mut h, "prefill3/L0.attn_out");
    h.run_steps(3);
    h.get_by_label("Selected: prefill3/L0.attn_out");
    h.get_by_label_contains("cpu alone: the live reference");
}

#[test]
fn the_greedy_decode_text_and_the_step_times_show_after_a_prompt_run() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = tiny_gguf_with_vocabulary(dir.path());
    let h = run_typed_prompt(AppOptions::cpu_only(), gguf);
    let s = h.state().state();
    // One greedy token per regime: the prefill's is what the decode regime ran on.
    let greedy = s.greedy_tokens();
    assert_eq!(greedy.len(), 1 + DECODE, "one per regime");
    let decode_ids = h
        .state()
        .results()
        .iter()
        .find(|r| r.label() == "decode3/input_ids")
        .and_then(|r| r.capture_of(0))
        .expect("the decode regime's input ids");
    match &decode_ids.values {
        golden_lens::model::CaptureValues::I64(v) => assert_eq!(v.as_slice(), &greedy[..1]),
        other => panic!("integer ids expected: {other:?}"),
    }
    let run = s.prompt_run.clone().expect("the prompt run");
    let tok = run.tokenizer.as_ref().expect("the GGUF's vocabulary");
    let line = run.decode_line(&greedy);
    for id in &greedy {
        let piece = tok.0.piece(u32::try_from(*id).unwrap()).expect("a piece");
        assert!(line.contains(&format!("{id} '{piece}'")), "{line}");
    }
    assert!(line.contains("; text "), "{line}");
    h.get_by_label(&line);
    // Per-step seconds of every backend (one here), summed in the run panel's line.
    let steps_total = s.progress.steps_total;
    assert_eq!(s.step_log.len(), steps_total);
    assert!(s
        .step_log
        .iter()
        .all(|m| m.seconds.len() == 1 && m.seconds[0] >= 0.0));
    let sums = s.step_seconds_by_backend();
    assert_eq!(sums.len(), 1);
    assert_eq!(sums[0].0, "cpu");
    assert!(sums[0].1 > 0.0, "{sums:?}");
    let timing = s.step_seconds_line().expect("a timing line");
    assert!(
        timing.starts_with(&format!("Step time over {steps_total} steps: cpu ")),
        "{timing}"
    );
}
