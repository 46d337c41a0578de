//! The rule-derived parameter list against the goldens' `weights_meta`, the filler source's
//! bits and memory policy, and a real-dims DeepSeek-V4.1-Flash block through the CPU oracle.

use golden_lens::golden::{Golden, StorageDtype, WeightKind};
use golden_lens::model::params::{block_macs, param_list};
use golden_lens::model::weights::{filler_element, FILLER_DEFAULT_CACHE_BYTES};
use golden_lens::model::{
    Backend, Capture, CaptureValues, EngramTables, FillerSource, ModelConfig, Step, WeightSource,
};
use golden_lens::oracle::Oracle;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

/// Relative bound on filler scales: the golden stores Python's `in_features ** -0.5` as a
/// shortest-repr f64 and we compute `powf(-0.5)`; both are libm `pow`, so they agree to an ulp
/// or two at most.
const SCALE_REL_TOL: f64 = 1e-12;

fn golden_path(file: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/golden/reference/")).join(file)
}

fn load(file: &str) -> Golden {
    let path = golden_path(file);
    Golden::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn param_list_equals_the_goldens_weights_meta() {
    for file in [
        "ds41_tiny_golden.v1.json",
        "ds41_tiny_golden.v2.json",
        "ds41_tiny_golden.v3.json",
    ] {
        let golden = load(file);
        let (cfg, _) = golden_lens::session::model_of(&golden).expect("config");
        let derived = param_list(&cfg).expect("the golden's geometry");
        let want = &golden.weights_meta;
        let names = |v: &[golden_lens::golden::WeightMeta]| -> Vec<String> {
            v.iter().map(|m| m.name.clone()).collect()
        };
        assert_eq!(names(&derived), names(want), "{file}: names or order");
        for (d, w) in derived.iter().zip(want) {
            assert_eq!(d.shape, w.shape, "{file}: {} shape", w.name);
            assert_eq!(d.n, w.n, "{file}: {} n", w.name);
            assert_eq!(d.dtype, w.dtype, "{file}: {} dtype", w.name);
            assert_eq!(d.kind, w.kind, "{file}: {} kind", w.name);
            assert_eq!(d.offset, w.offset, "{file}: {} offset", w.name);
            let rel = (d.scale - w.scale).abs() / w.scale.abs();
            assert!(
                rel <= SCALE_REL_TOL,
                "{file}: {} scale {} vs golden {} (rel {rel:e})",
                w.name,
                d.scale,
                w.scale
            );
        }
    }
}

#[test]
fn filler_tensors_and_rows_keep_the_filler_bits() {
    let golden = load("ds41_tiny_golden.v3.json");
    let src = FillerSource::new("v3", &golden.weights_meta);
    let mut seen_dtypes = BTreeSet::new();
    for meta in &golden.weights_meta {
        seen_dtypes.insert(format!("{:?}/{:?}", meta.kind, meta.dtype));
        let t = src.tensor(&meta.name).expect("tensor");
        assert_eq!(t.len(), meta.n, "{}", meta.name);
        for (i, v) in t.iter().enumerate() {
            assert_eq!(
                v.to_bits(),
                filler_element(meta, i as u64).to_bits(),
                "{}[{i}]",
                meta.name
            );
        }
        let n_rows = meta.shape[0];
        let width = meta.n / n_rows;
        let pick = [n_rows - 1, 0, n_rows / 2];
        let rows = src.rows(&meta.name, &pick).expect("rows");
        for (k, &r) in pick.iter().enumerate() {
            assert_eq!(
                rows[k * width..(k + 1) * width]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                t[r * width..(r + 1) * width]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                "{} row {r}",
                meta.name
            );
        }
    }
    // Every storage path was exercised: f32, bf16, fp8 e4m3 and e8m0.
    assert_eq!(
        seen_dtypes,
        ["E8m0/F8E8m0", "F32/Bf16", "F32/F32", "Fp8/F8E4m3"]
            .iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<_>>()
    );
    assert!(src.rows("embed.weight", &[64]).is_err(), "row past the end");
    // The tiny model fits the default budget: nothing was evicted.
    let stats = src.stats();
    assert_eq!(stats.evictions, 0);
    assert!(stats.cache_bytes <= FILLER_DEFAULT_CACHE_BYTES);
}

#[test]
fn the_cache_evicts_least_recently_used_within_its_budget() {
    let golden = load("ds41_tiny_golden.v3.json");
    let expert = |e: usize, w: usize| format!("layers.0.ffn.experts.{e}.w{w}.weight");
    // Each expert matrix is [24, 64] f32 = 6144 bytes; the budget holds exactly three.
    let bytes_per_matrix = 24 * 64 * 4;
    let src =
        FillerSource::new("v3", &golden.weights_meta).with_cache_budget_bytes(3 * bytes_per_matrix);
    let first = src.tensor(&expert(0, 1)).expect("tensor").to_vec();
    src.tensor(&expert(0, 2)).expect("tensor");
    src.tensor(&expert(0, 3)).expect("tensor");
    // Touch e0.w1 so e0.w2 is now the oldest; a fourth matrix evicts it.
    src.tensor(&expert(0, 1)).expect("tensor");
    src.tensor(&expert(1, 1)).expect("tensor");
    let s = src.stats();
    assert_eq!(s.tensors_generated, 4);
    assert_eq!(s.evictions, 1);
    assert_eq!(s.cache_bytes, 3 * bytes_per_matrix);
    // e0.w1 is still cached (no regeneration); e0.w2 was evicted (regenerated, same bits).
    src.tensor(&expert(0, 1)).expect("tensor");
    assert_eq!(src.stats().tensors_generated, 4);
    src.tensor(&expert(0, 2)).expect("tensor");
    assert_eq!(src.stats().tensors_generated, 5);
    // Cycle through more matrices than fit: buffers of evicted ones get reused.
    for e in 0..4 {
        for w in 1..=3 {
            src.tensor(&expert(e, w)).expect("tensor");
        }
    }
    let s = src.stats();
    assert!(s.buffers_recycled > 0, "{s:?}");
    assert!(s.peak_cache_bytes <= 3 * bytes_per_matrix, "{s:?}");
    let again = src.tensor(&expert(0, 1)).expect("tensor");
    assert_eq!(
        again.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        first.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    // Each name is listed once however often it was regenerated.
    assert_eq!(src.materialised_names().len(), 12);
    // A tensor larger than the budget is served but not cached.
    let big = FillerSource::new("v3", &golden.weights_meta).with_cache_budget_bytes(16);
    big.tensor(&expert(0, 1)).expect("tensor");
    assert_eq!(big.stats().cache_bytes, 0);
    // The whole-tensor cap refuses a table; rows still work.
    let capped = FillerSource::new("v3", &golden.weights_meta).with_max_tensor_elements(100);
    assert!(capped.tensor("embed.weight").is_err());
    assert_eq!(capped.rows("embed.weight", &[3]).expect("rows").len(), 64);
}

#[test]
fn the_real_config_is_valid_and_lists_the_real_parameters() {
    let cfg = ModelConfig::deepseek_v41_flash();
    cfg.validate().expect("valid");
    let e = cfg.engram.as_ref().expect("engram");
    // `derive` checks each layer's rows against the sum of its primes, so this proves the
    // spec's table sizes follow from the prime rule above engram_vocab_size.
    let tables = EngramTables::derive(e).expect("tables");
    assert_eq!(tables.primes[0][0][0], 16_000_057, "first prime above 16M");
    let list = param_list(&cfg).expect("the real geometry");
    let get = |n: &str| {
        list.iter()
            .find(|m| m.name == n)
            .unwrap_or_else(|| panic!("{n} missing"))
    };
    assert_eq!(get("embed.weight").shape, vec![129_280, 5120]);
    assert_eq!(get("head.weight").dtype, StorageDtype::F32);
    assert_eq!(get("layers.0.hc_attn_fn").shape, vec![24, 20480]);
    assert_eq!(get("layers.0.attn.wq_b.weight").shape, vec![32768, 1280]);
    assert_eq!(get("layers.0.attn.wo_a.weight").shape, vec![8192, 4096]);
    assert_eq!(get("layers.0.attn.wo_b.weight").shape, vec![5120, 8192]);
    assert_eq!(
        get("layers.2.attn.compressor.wgate.weight").dtype,
        StorageDtype::F32
    );
    assert_eq!(
        get("layers.20.attn.compressor.wkv.weight").dtype,
        StorageDtype::Bf16
    );
    assert_eq!(
        get("layers.20.attn.indexer.wk.weight").shape,
        vec![128, 512]
    );
    assert_eq!(
        get("layers.24.attn.indexer.wq_b.weight").shape,
        vec![4096, 1280]
    );
    assert_eq!(
        get("layers.39.ffn.experts.383.w2.weight").shape,
        vec![5120, 2304]
    );
    let table = get("layers.14.engram.embed.weight");
    assert_eq!(table.shape, vec![384_016_682, 256]);
    assert_eq!(table.kind, WeightKind::Fp8);
    assert_eq!(
        get("layers.14.engram.embed.scale").shape,
        vec![384_016_682, 8]
    );
    assert_eq!(get("layers.1.engram.wkv.weight").shape, vec![25600, 6144]);
    let has = |n: &str| list.iter().any(|m| m.name == n);
    assert!(!has("layers.20.attn.compressor.wgate.weight"), "ratio 1");
    assert!(!has("layers.24.attn.indexer.wk.weight"), "not a kv source");
    assert!(
        !has("layers.24.attn.compressor.wkv.weight"),
        "not a kv source"
    );
    assert!(!has("layers.1.attn.indexer.wq_b.weight"), "ratio 0");
    // The tiny model's 33 common entries per layer hold 4 experts x 3 matrices; the real
    // model has 384 experts.
    let layer_entries = |l: usize| {
        let p = format!("layers.{l}.");
        list.iter().filter(|m| m.name.starts_with(&p)).count()
    };
    let common = 33 - 3 * 4 + 3 * 384;
    assert_eq!(layer_entries(0), common);
    assert_eq!(layer_entries(1), common + 5, "engram");
    assert_eq!(
        layer_entries(2),
        common + 7,
        "compressor with wgate + indexer"
    );
    assert_eq!(
        layer_entries(14),
        common + 7 + 5,
        "kv+index source and engram"
    );
    assert_eq!(layer_entries(20), common + 6, "ratio-1 kv source");
    assert_eq!(layer_entries(24), common + 2, "index source only");
    assert_eq!(list.len(), 3 + (0..40).map(layer_entries).sum::<usize>());
}

#[test]
fn the_block_mac_count_adds_up() {
    let cfg = ModelConfig::deepseek_v41_flash();
    let m = block_macs(&cfg, 2, 16);
    // Routed experts: 16 tokens x 6 experts x 3 matrices of 2304 x 5120.
    assert_eq!(m.routed_experts, 16 * 6 * 3 * 2304 * 5120);
    assert_eq!(m.shared_expert, 16 * 3 * 2304 * 5120);
    assert_eq!(m.compressor, 16 * 5120 * 512 * 2);
    assert!(m.total() > m.routed_experts + m.shared_expert);
}

/// Tokens in the real-dims block test: the smallest prefill that completes one ratio-2
/// compressed group, so the Compressor emits a latent and the Indexer scores it.
const REAL_TOKENS: usize = 2;

#[test]
fn a_real_dims_block_runs_and_materialises_only_routed_experts() {
    let cfg = ModelConfig::deepseek_v41_flash();
    let layer = 2;
    let role = cfg.role(layer);
    assert!(role.kv_source && role.index_source && role.ratio == 2);
    let tables = cfg
        .engram
        .as_ref()
        .map(|e| EngramTables::derive(e).expect("tables"));
    let budget = 256usize << 20;
    let source = Arc::new(
        FillerSource::from_config("real dims", &cfg)
            .expect("the real geometry")
            .with_cache_budget_bytes(budget),
    );
    let weights: Arc<dyn WeightSource> = source.clone();
    let mut oracle = Oracle::new(cfg.clone(), weights, tables);
    let ids: Vec<i64> = vec![0, 98_765];
    assert_eq!(ids.len(), REAL_TOKENS);
    oracle.begin(&ids, 0).expect("begin");
    let mut caps: Vec<Capture> = Vec::new();
    for step in [Step::EngramHash, Step::Embed, Step::Block(layer)] {
        oracle.run(step, &mut caps).expect("step");
    }
    let cap = |n: &str| {
        caps.iter()
            .find(|c| c.name == n)
            .unwrap_or_else(|| panic!("capture {n} missing"))
    };
    let h_out = cap("L2.h_out");
    assert_eq!(h_out.shape, vec![1, REAL_TOKENS, 4, 5120]);
    match &h_out.values {
        CaptureValues::F32(v) => assert!(v.iter().all(|x| x.is_finite()), "h_out finite"),
        CaptureValues::I64(_) => panic!("h_out is a float capture"),
    }
    // The compressed branch ran: one latent published, attended through the index.
    assert_eq!(oracle.state().shared.compress_kv, Some(layer));
    assert_eq!(oracle.state().shared.index_k, Some(layer));
    assert_eq!(oracle.state().layers[layer].compress_kv.data.len(), 512);
    let window = REAL_TOKENS.min(cfg.window_size);
    assert_eq!(
        cap("L2.sa_topk_idxs").shape,
        vec![1, REAL_TOKENS, window + 1]
    );

    let routed: BTreeSet<i64> = match &cap("L2.moe_indices").values {
        CaptureValues::I64(v) => v.iter().copied().collect(),
        CaptureValues::F32(_) => panic!("moe_indices is an integer capture"),
    };
    assert!(routed.len() >= cfg.n_activated_experts);
    let materialised = source.materialised_names();
    let experts: BTreeSet<String> = materialised
        .iter()
        .filter(|n| n.contains(".ffn.experts."))
        .cloned()
        .collect();
    let want: BTreeSet<String> = routed
        .iter()
        .flat_map(|e| (1..=3).map(move |w| format!("layers.2.ffn.experts.{e}.w{w}.weight")))
        .collect();
    assert_eq!(experts, want, "exactly the routed experts' matrices");
    assert!(materialised
        .iter()
        .any(|n| n == "layers.2.ffn.shared_experts.w2.weight"));
    // Tables are read by rows, never built whole.
    assert!(!materialised.iter().any(|n| n == "embed.weight"));
    assert!(!materialised.iter().any(|n| n.contains("engram")));
    let stats = source.stats();
    assert!(stats.peak_cache_bytes <= budget, "{stats:?}");
    assert_eq!(stats.row_elements_generated, (REAL_TOKENS * 5120) as u64);
}
