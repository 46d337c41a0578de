//! Real-dims forwards in pieces. `--layers A-B` in the backends: a range run's captures for its
//! layers equal the full run's (A = 0), `Final` runs on block B's output, a range starting later
//! hands its first block the embedding stream and leaves the state of skipped layers alone, and
//! ranges whose layers read a shared slot published before them are refused. One body per
//! property, run on the oracle and (when an adapter exists) the GPU backend. And `Final`
//! streams the LM head in row chunks: the logits do not change a bit whatever the chunk size,
//! and the head is never materialised as a whole tensor (the real one is 662M elements).

use golden_lens::golden::Golden;
use golden_lens::model::{
    Backend, Capture, CaptureValues, FillerSource, LayerRangeError, ModelConfig, Step, WeightSource,
};
use golden_lens::oracle::Oracle;
use golden_lens::session::{self, builder::ModelParts};
use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;

fn golden() -> Golden {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/reference/ds41_tiny_golden.v3.json"
    ));
    Golden::load(&p).expect("golden loads")
}

/// Captures of one regime by name.
type Regime = HashMap<String, Capture>;

/// Runs every regime of the golden through `backend`'s own step list.
fn run_regimes(backend: &mut dyn Backend, inputs: &[(String, Vec<i64>, usize)]) -> Vec<Regime> {
    inputs
        .iter()
        .map(|(_, ids, start)| {
            backend.begin(ids, *start).expect("begin");
            let mut caps = Vec::new();
            for step in backend.steps() {
                backend.run(step, &mut caps).expect("step");
            }
            caps.into_iter().map(|c| (c.name.clone(), c)).collect()
        })
        .collect()
}

/// Runs `steps` by hand (whatever the backend's own list says) for every regime.
fn run_steps(
    backend: &mut dyn Backend,
    inputs: &[(String, Vec<i64>, usize)],
    steps: &[Step],
) -> Vec<Regime> {
    inputs
        .iter()
        .map(|(_, ids, start)| {
            backend.begin(ids, *start).expect("begin");
            let mut caps = Vec::new();
            for &step in steps {
                backend.run(step, &mut caps).expect("step");
            }
            caps.into_iter().map(|c| (c.name.clone(), c)).collect()
        })
        .collect()
}

fn bits(c: &Capture) -> Vec<u64> {
    match &c.values {
        CaptureValues::F32(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
        CaptureValues::I64(v) => v.iter().map(|&x| x as u64).collect(),
    }
}

fn f32s(c: &Capture) -> &[f32] {
    match &c.values {
        CaptureValues::F32(v) => v,
        CaptureValues::I64(_) => panic!("{} is an integer capture", c.name),
    }
}

/// The layer a capture name belongs to (`L3.sa_q`, `shared.L4.candidates`, `diag.L2.x`).
fn capture_layer(name: &str) -> Option<usize> {
    let rest = name
        .trim_start_matches("diag.")
        .trim_start_matches("shared.");
    let num = rest.strip_prefix('L')?.split('.').next()?;
    num.parse().ok()
}

const FINAL_CAPTURES: [&str; 3] = ["h_final", "head_in", "logits_full"];

/// Makes a backend with the given range.
type Make = dyn FnMut(Option<RangeInclusive<usize>>) -> Box<dyn Backend>;

/// Range 0..=last against the full run: in the prefill every capture of EngramHash, Embed and
/// the range's layers is bit-identical; layers past the range emit nothing; `Final` is exactly
/// what running `Final` right after block `last` gives. In the decodes the shared-slot pointers
/// a full run carries over from the previous regime may name a layer past the range (the
/// reference's pointer semantics: layer 2 of a decode scores against the index keys layer 4
/// published last), so there the captures agree up to the first compressed layer and the rest
/// is checked against the same steps run by hand.
fn prefix_range_equals_full_run(label: &str, make: &mut Make, cfg: &ModelConfig, last: usize) {
    let inputs = session::regime_inputs(&golden()).expect("inputs");
    let full = run_regimes(make(None).as_mut(), &inputs);
    let mut ranged_backend = make(Some(0..=last));
    let range_steps = ranged_backend.steps();
    let ranged = run_regimes(ranged_backend.as_mut(), &inputs);
    let by_hand = run_steps(make(None).as_mut(), &inputs, &range_steps);
    assert_eq!(range_steps.last(), Some(&Step::Final), "{label}");
    assert!(
        range_steps
            .iter()
            .all(|s| s.layer().is_none_or(|l| l <= last)),
        "{label}: {range_steps:?}"
    );
    for (r, (f, g)) in full.iter().zip(&ranged).enumerate() {
        // Layers whose inputs cannot depend on a slot pointer from a later layer.
        let slot_free = |l: usize| (0..=l).all(|k| cfg.compress_ratios[k] == 0);
        let comparable = |l: usize| l <= last && (r == 0 || slot_free(l));
        let mut compared = 0;
        assert_eq!(g.len(), by_hand[r].len(), "{label} regime {r}");
        for (name, c) in g {
            assert_eq!(
                bits(c),
                bits(&by_hand[r][name]),
                "{label} regime {r}: {name}"
            );
            if FINAL_CAPTURES.contains(&name.as_str()) {
                continue;
            }
            if let Some(l) = capture_layer(name) {
                assert!(l <= last, "{label} regime {r}: {name} past the range");
                if !comparable(l) {
                    continue;
                }
            }
            let want = f
                .get(name)
                .unwrap_or_else(|| panic!("{label}: {name} absent"));
            assert_eq!(bits(c), bits(want), "{label} regime {r}: {name}");
            compared += 1;
        }
        // Every comparable capture of the full run came out of the range run too.
        let expected = f
            .keys()
            .filter(|n| !FINAL_CAPTURES.contains(&n.as_str()))
            .filter(|n| capture_layer(n).is_none_or(comparable))
            .count();
        assert_eq!(compared, expected, "{label} regime {r}");
        // Final ran on block `last`'s output, not the model's last block.
        let h_final = f32s(&g["h_final"]);
        let h_out = f32s(&g[&format!("L{last}.h_out")]);
        let pre = f32s(&g[&format!("L{last}.pre_mix_out")]);
        assert_eq!(h_final.len() * cfg.hc_mult, h_out.len(), "{label}");
        assert_ne!(
            bits(&g["logits_full"]),
            bits(&f["logits_full"]),
            "{label} regime {r}: the range's logits equal the full model's"
        );
        if label == "cpu" {
            let want = golden_lens::oracle::hc::hc_pre(h_out, pre, cfg.hc_mult, cfg.dim);
            assert_eq!(
                h_final.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{label} regime {r}: h_final is not the collapse of L{last}.h_out"
            );
        }
    }
}

/// A range starting at `first > 0`: only its steps run (no engram step of an earlier layer),
/// its first block is handed the embedding in every hyper-connection copy with pre-mix
/// `[1, 0, ...]`, and the output matches running those steps by hand on a full backend.
fn later_range_starts_from_the_embedding(
    label: &str,
    make: &mut Make,
    cfg: &ModelConfig,
    range: RangeInclusive<usize>,
) {
    let inputs = session::regime_inputs(&golden()).expect("inputs");
    let first = *range.start();
    let mut b = make(Some(range.clone()));
    let steps = b.steps();
    assert!(
        steps
            .iter()
            .all(|s| s.layer().is_none_or(|l| range.contains(&l))),
        "{label}: {steps:?}"
    );
    let ranged = run_regimes(b.as_mut(), &inputs);
    let by_hand = run_steps(make(None).as_mut(), &inputs, &steps);
    let (s0, d, hc) = (inputs[0].1.len(), cfg.dim, cfg.hc_mult);
    let embed = f32s(&ranged[0]["embed"]);
    // The first step of the range reads the stream: the engram step where the layer has one.
    let stream_in = if steps.contains(&Step::Engram(first)) {
        format!("L{first}.engram_in")
    } else {
        format!("L{first}.h_in")
    };
    let h_in = f32s(&ranged[0][&stream_in]);
    let pre_in = f32s(&ranged[0][&format!("L{first}.pre_mix_in")]);
    for t in 0..s0 {
        for c in 0..hc {
            assert_eq!(
                &h_in[(t * hc + c) * d..(t * hc + c + 1) * d],
                &embed[t * d..(t + 1) * d],
                "{label}: {stream_in} token {t} copy {c}"
            );
            let want = if c == 0 { 1.0 } else { 0.0 };
            assert_eq!(pre_in[t * hc + c], want, "{label}: pre-mix {t},{c}");
        }
    }
    for (r, (g, h)) in ranged.iter().zip(&by_hand).enumerate() {
        assert_eq!(g.len(), h.len(), "{label} regime {r}");
        for (name, c) in g {
            assert!(
                capture_layer(name).is_none_or(|l| range.contains(&l)),
                "{label}: {name} outside the range"
            );
            assert_eq!(bits(c), bits(&h[name]), "{label} regime {r}: {name}");
        }
    }
}

/// Tiny geometry: layer 3 reads layer 2's compressed cache and top-k; layer 5 reads layer 4's
/// compressed cache, keys and candidate mask. `set` sets a range on one backend.
fn refusals(
    label: &str,
    set: &mut dyn FnMut(Option<RangeInclusive<usize>>) -> Result<(), LayerRangeError>,
) {
    for (range, source) in [(3..=3, 2), (3..=5, 2), (5..=5, 4)] {
        match set(Some(range.clone())) {
            Err(LayerRangeError::MissingSource { source_layer, .. }) => {
                assert_eq!(source_layer, source, "{label} {range:?}")
            }
            other => panic!("{label} {range:?}: {other:?}"),
        }
    }
    assert!(
        matches!(set(Some(0..=6)), Err(LayerRangeError::OutsideModel { .. })),
        "{label}: past the model"
    );
    set(Some(4..=5)).expect("4-5 publishes its own slots");
    set(None).expect("none");
}

fn oracle_maker(
    parts: &ModelParts,
) -> impl FnMut(Option<RangeInclusive<usize>>) -> Box<dyn Backend> {
    let parts = parts.clone();
    move |range| {
        let mut o = parts.oracle();
        o.set_layer_range(range).expect("range");
        Box::new(o)
    }
}

#[test]
fn oracle_prefix_range_equals_the_full_run() {
    let parts = ModelParts::from_golden(&golden()).expect("parts");
    let cfg = parts.cfg.clone();
    prefix_range_equals_full_run("cpu", &mut oracle_maker(&parts), &cfg, 3);
    prefix_range_equals_full_run("cpu", &mut oracle_maker(&parts), &cfg, 1);
}

#[test]
fn oracle_later_range_starts_from_the_embedding_and_keeps_other_state() {
    let parts = ModelParts::from_golden(&golden()).expect("parts");
    let cfg = parts.cfg.clone();
    later_range_starts_from_the_embedding("cpu", &mut oracle_maker(&parts), &cfg, 2..=3);
    later_range_starts_from_the_embedding("cpu", &mut oracle_maker(&parts), &cfg, 4..=5);
    // The state of layers outside the range is what a fresh oracle holds.
    let inputs = session::regime_inputs(&golden()).expect("inputs");
    let mut o: Oracle = parts.oracle();
    let fresh = parts.oracle();
    o.set_layer_range(Some(2..=3)).expect("range");
    run_regimes(&mut o, &inputs);
    for l in 0..cfg.n_layers {
        let same = o.state().layers[l] == fresh.state().layers[l];
        assert_eq!(same, !(2..=3).contains(&l), "layer {l} state");
    }
    // A layer step outside the range is refused.
    o.begin(&inputs[0].1, 0).expect("begin");
    let mut sink = Vec::new();
    let e = o.run(Step::Block(4), &mut sink).unwrap_err();
    assert!(e.to_string().contains("outside the layer range 2-3"), "{e}");
    assert!(sink.is_empty());
}

#[test]
fn ranges_reading_unpublished_slots_are_refused() {
    let parts = ModelParts::from_golden(&golden()).expect("parts");
    let mut o = parts.oracle();
    refusals("cpu", &mut |r| o.set_layer_range(r));
    assert!(o.set_layer_range(Some(3..=3)).is_err());
    assert!(o.layer_range().is_none(), "a refused range leaves none set");
    o.set_layer_range(Some(4..=5))
        .expect("4-5 publishes its own slots");
    assert_eq!(
        o.layer_range().map(|r| r.to_string()).as_deref(),
        Some("4-5")
    );
    o.set_layer_range(None).expect("none");
    assert_eq!(o.steps(), parts.cfg.steps());
}

#[cfg(feature = "gpu")]
#[test]
fn gpu_ranges_behave_as_the_oracles() {
    use golden_lens::gpu::{test_context, GpuBackend, GpuOptions};
    const TEST: &str = "gpu_ranges_behave_as_the_oracles";
    if test_context(TEST).is_none() {
        return;
    }
    let parts = ModelParts::from_golden(&golden()).expect("parts");
    let cfg = parts.cfg.clone();
    let p = parts.clone();
    let mut make = move |range: Option<RangeInclusive<usize>>| -> Box<dyn Backend> {
        let parts = &p;
        let ctx = test_context(TEST).expect("adapter");
        let opts = GpuOptions {
            reference_ties: true,
            ..GpuOptions::default()
        };
        let mut g = GpuBackend::new(
            ctx,
            parts.cfg.clone(),
            parts.weights.clone(),
            parts.tables.clone(),
            opts,
        )
        .expect("gpu backend");
        g.set_layer_range(range).expect("range");
        Box::new(g)
    };
    prefix_range_equals_full_run("gpu", &mut make, &cfg, 3);
    later_range_starts_from_the_embedding("gpu", &mut make, &cfg, 2..=3);
    let ctx = test_context(TEST).expect("adapter");
    let mut g = GpuBackend::new(
        ctx,
        parts.cfg.clone(),
        parts.weights.clone(),
        parts.tables.clone(),
        GpuOptions::default(),
    )
    .expect("gpu backend");
    refusals("gpu", &mut |r| g.set_layer_range(r));
    assert_eq!(g.steps(), cfg.steps());
}

/// A chunk of three head rows of the tiny model (dim 64, f32): 64 rows in 22 uneven chunks.
const SMALL_CHUNK_BYTES: usize = 3 * 64 * 4;

/// Logits of every regime, as bits.
fn logits_bits(backend: &mut dyn Backend, g: &Golden) -> Vec<Vec<u32>> {
    session::regime_inputs(g)
        .expect("inputs")
        .iter()
        .map(|(_, ids, start)| {
            backend.begin(ids, *start).expect("begin");
            let mut caps: Vec<Capture> = Vec::new();
            for step in backend.steps() {
                backend.run(step, &mut caps).expect("step");
            }
            let c = caps
                .iter()
                .find(|c| c.name == "logits_full")
                .expect("logits");
            match &c.values {
                CaptureValues::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
                CaptureValues::I64(_) => panic!("integer logits"),
            }
        })
        .collect()
}

#[test]
fn oracle_head_chunks_keep_the_bits_and_never_materialise_the_head() {
    let g = golden();
    let filler = Arc::new(FillerSource::new("v3", &g.weights_meta));
    let (cfg, tables) = session::model_of(&g).expect("cfg");
    let weights: Arc<dyn WeightSource> = filler.clone();
    let mut whole = golden_lens::oracle::Oracle::new(cfg.clone(), weights.clone(), tables.clone());
    let mut chunked = golden_lens::oracle::Oracle::new(cfg, weights, tables);
    chunked.head_chunk_bytes = SMALL_CHUNK_BYTES;
    let a = logits_bits(&mut whole, &g);
    let b = logits_bits(&mut chunked, &g);
    assert_eq!(a.len(), 3);
    assert_eq!(a, b);
    assert!(
        !filler
            .materialised_names()
            .iter()
            .any(|n| n == "head.weight"),
        "the head was materialised whole"
    );
}

#[cfg(feature = "gpu")]
#[test]
fn gpu_head_chunks_keep_the_bits() {
    use golden_lens::gpu::{test_context, GpuOptions};
    const TEST: &str = "gpu_head_chunks_keep_the_bits";
    if test_context(TEST).is_none() {
        return;
    }
    let g = golden();
    let parts = ModelParts::from_golden(&g).expect("parts");
    let opts = GpuOptions {
        reference_ties: true,
        ..GpuOptions::default()
    };
    let mut whole = parts.gpu(opts.clone()).expect("gpu");
    let mut chunked = parts.gpu(opts).expect("gpu");
    chunked.head_chunk_bytes = SMALL_CHUNK_BYTES;
    // A cache too small for most weights: entries are evicted and re-uploaded, bits unchanged.
    chunked.weight_cache_budget_bytes = 64 * 64 * 4;
    assert_eq!(logits_bits(&mut whole, &g), logits_bits(&mut chunked, &g));
    assert!(chunked.weight_cache_bytes() <= 64 * 64 * 4);
}
