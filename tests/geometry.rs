//! Nothing may assume the tiny geometry: the oracle runs other geometries from the same
//! reference rules (other prefill lengths, windows, layer counts, ratio patterns, source layers,
//! head/expert counts, dims, engram shapes), writes a full golden of each that the strict loader
//! accepts, holds every graph invariant, and checks against that golden in chained and isolated
//! mode (so isolation, ring seeding, pointer slots and compressor replay work off-geometry).
//!
//! These goldens are written by our own oracle, so checking them echoes the oracle: a regression
//! test of self-consistency (the loader, the invariants, isolation off the tiny geometry), not of
//! agreement with DeepSeek's reference. Only the tests that read `golden/reference/*` test that.

use golden_lens::golden::{EngramFixture, Golden};
use golden_lens::model::engram::derived_rows;
use golden_lens::model::params::param_list;
use golden_lens::model::{EngramConfig, ModelConfig};
use golden_lens::session::writer::{write_golden, FullCaptures};
use golden_lens::session::{self, CheckOptions, Mode};
use serde_json::json;
use std::path::{Path, PathBuf};

struct Geometry {
    name: &'static str,
    prefill_len: usize,
    window: usize,
    ratios: Vec<usize>,
    kv: Vec<usize>,
    index: Vec<usize>,
    candidate: i64,
    engram_layers: Vec<usize>,
    heads: usize,
    experts: (usize, usize),
    dim: usize,
}

fn v3() -> Golden {
    Golden::load(&PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/reference/ds41_tiny_golden.v3.json"
    )))
    .expect("v3")
}

/// A golden skeleton (fixture + rule-derived weights_meta, no captures) for `g`.
fn skeleton(base: &Golden, g: &Geometry) -> Golden {
    let mut out = base.clone();
    let f = &mut out.fixture;
    f.n_layers = g.ratios.len();
    f.prefill_len = g.prefill_len;
    f.window_size = g.window;
    f.compress_ratios = g.ratios.clone();
    f.kv_source_layers = g.kv.clone();
    f.index_source_layers = g.index.clone();
    f.candidate_source_layer = g.candidate;
    f.n_heads = g.heads;
    f.o_groups = 2;
    f.n_routed_experts = g.experts.0;
    f.n_activated_experts = g.experts.1;
    f.dim = g.dim;
    f.engram_layer_ids = g.engram_layers.clone();
    f.regimes = vec![
        format!("prefill{}", g.prefill_len),
        format!("decode{}", g.prefill_len),
        format!("decode{}", g.prefill_len + 1),
    ];
    let ecfg = EngramConfig {
        layer_ids: g.engram_layers.clone(),
        max_ngram_size: f.engram_max_ngram_size,
        n_heads: f.engram_n_heads,
        head_dim: f.engram_head_dim,
        vocab_size: f.engram_vocab_size,
        compressed_vocab_size: f.engram_compressed_vocab_size,
        pad_id: f.engram_pad_id,
        num_embeddings: vec![],
    };
    f.engram_num_embeddings = derived_rows(&ecfg).expect("derivable");
    f.engram = None::<EngramFixture>;
    let raw = &mut f.raw;
    raw.remove("engram");
    for (k, v) in [
        ("n_layers", json!(f.n_layers)),
        ("prefill_len", json!(f.prefill_len)),
        ("window_size", json!(f.window_size)),
        ("compress_ratios", json!(f.compress_ratios)),
        ("kv_source_layers", json!(f.kv_source_layers)),
        ("index_source_layers", json!(f.index_source_layers)),
        ("candidate_source_layer", json!(f.candidate_source_layer)),
        ("n_heads", json!(f.n_heads)),
        ("o_groups", json!(f.o_groups)),
        ("n_routed_experts", json!(f.n_routed_experts)),
        ("n_activated_experts", json!(f.n_activated_experts)),
        ("dim", json!(f.dim)),
        ("engram_layer_ids", json!(f.engram_layer_ids)),
        ("engram_num_embeddings", json!(f.engram_num_embeddings)),
        ("regimes", json!(f.regimes)),
    ] {
        raw.insert(k.into(), v);
    }
    let cfg = ModelConfig::from_fixture(&out.fixture).unwrap_or_else(|e| panic!("{}: {e}", g.name));
    out.weights_meta = param_list(&cfg).expect("a valid geometry");
    out.regimes.clear();
    out.source = PathBuf::from(format!("<geometry {}>", g.name));
    out
}

fn run_geometry(g: &Geometry) {
    let base = v3();
    let sk = skeleton(&base, g);
    let mut oracle = session::oracle_for(&sk).expect("oracle");
    let text = write_golden(&sk, &mut oracle, &FullCaptures::All)
        .unwrap_or_else(|e| panic!("{}: {e}", g.name));
    let written = Golden::parse(&text, Path::new(g.name)).unwrap_or_else(|e| {
        panic!(
            "{}: the strict loader rejects the written golden: {e}",
            g.name
        )
    });
    assert_eq!(written.regimes.len(), 3);
    let cfg = session::model_of(&written).expect("model").0;
    for mode in [Mode::Chained, Mode::Isolated] {
        let mut o = session::oracle_for(&written).expect("oracle");
        let opts = CheckOptions {
            mode,
            strict: true,
            invariants: Some(cfg.clone()),
            ..Default::default()
        };
        let r = session::run_check(&written, &mut o, &opts).expect("check");
        let fails: Vec<String> = r
            .rows
            .iter()
            .filter(|x| !x.cmp.pass)
            .map(|x| format!("{} {}", x.regime, x.name))
            .collect();
        assert!(fails.is_empty(), "{} {:?}: {fails:?}", g.name, mode);
        assert!(
            r.violations.is_empty(),
            "{} {:?}: {:?}",
            g.name,
            mode,
            r.violations
        );
        assert!(
            r.not_isolated.is_empty(),
            "{}: {:?}",
            g.name,
            r.not_isolated
        );
        assert!(r.missing.is_empty());
    }
}

#[test]
fn long_prefill_small_window_ratio_four_and_two_candidate_layers() {
    run_geometry(&Geometry {
        name: "p20-w4-r4",
        prefill_len: 20,
        window: 4,
        ratios: vec![0, 4, 4, 1, 1, 1, 0],
        kv: vec![1, 3],
        index: vec![1, 3, 5],
        candidate: 3,
        engram_layers: vec![2, 6],
        heads: 4,
        experts: (6, 3),
        dim: 64,
    });
}

#[test]
fn short_prefill_below_ratio_and_window_with_remainder_groups() {
    run_geometry(&Geometry {
        name: "p3-w8-r4",
        prefill_len: 3,
        window: 8,
        ratios: vec![4, 4, 0],
        kv: vec![0],
        index: vec![0],
        candidate: -1,
        engram_layers: vec![],
        heads: 2,
        experts: (3, 1),
        dim: 32,
    });
}

#[test]
fn no_compressed_layers_one_engram_layer() {
    run_geometry(&Geometry {
        name: "p7-w16-plain",
        prefill_len: 7,
        window: 16,
        ratios: vec![0, 0],
        kv: vec![],
        index: vec![],
        candidate: -1,
        engram_layers: vec![0],
        heads: 4,
        experts: (2, 2),
        dim: 64,
    });
}

#[test]
fn a_candidate_consumer_with_another_ratio_is_refused_by_the_config() {
    let base = v3();
    let mut f = base.fixture.clone();
    f.compress_ratios = vec![0, 0, 2, 2, 1, 2];
    let err = ModelConfig::from_fixture(&f)
        .expect_err("layer 5 (ratio 2) cannot consume layer 4's ratio-1 mask");
    assert!(err.to_string().contains("candidate_source_layer"), "{err}");
}
