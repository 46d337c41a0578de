//! The writer and the reader share one key table: what [`Deepseek41Meta::write`] writes,
//! [`Deepseek41Meta::from_set`] reads back field for field, in both dialects.

use super::*;
use crate::gguf::ggml_type::GgmlType;
use crate::gguf::quant::EngramEncoding;

/// A small but complete model of `dialect`: two layers, one of them with an engram block of
/// `head_dim` values per row (several E8M0 scale blocks per row above 32).
fn tiny(dialect: Dialect, head_dim: u64) -> Deepseek41Meta {
    let mut m = Deepseek41Meta::empty(dialect);
    m.name = Some("round trip".into());
    m.vocab_size = 16;
    m.hidden_size = 64;
    m.n_layers = 2;
    m.n_heads = 4;
    m.n_kv_heads = 1;
    m.head_dim = 32;
    m.rope_head_dim = 8;
    m.q_lora_rank = 16;
    m.o_lora_rank = 16;
    m.o_groups = 2;
    m.n_routed_experts = 4;
    m.n_shared_experts = 1;
    m.n_experts_per_tok = 2;
    m.moe_intermediate_size = 32;
    m.max_position_embeddings = 4096;
    m.sliding_window = 8;
    m.index_n_heads = 2;
    m.index_head_dim = 16;
    m.index_topk = 4;
    m.candidate_source_layer_id = Some(1);
    m.candidate_topk_blocks = Some(4);
    m.candidate_block_size = Some(2);
    m.hc_mult = 2;
    m.hc_sinkhorn_iters = 20;
    // Values exact in f32, since both dialects store floats as FLOAT32.
    m.hc_eps = 0.5f32.powi(20).into();
    m.rms_norm_eps = 0.5f32.powi(17).into();
    m.swiglu_limit = Some(10.0);
    m.routed_scaling_factor = 1.5;
    m.rope_theta = 10_000.0;
    m.compress_rope_theta = 160_000.0;
    m.rope_scaling = Some(RopeScaling {
        factor: 16.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        original_max_position_embeddings: 64.0,
    });
    m.scoring_func = Some("sqrtsoftplus".into());
    m.norm_topk_prob = Some(true);
    m.compress_ratios = vec![1, 4];
    if dialect == Dialect::Ds4 {
        m.hidden_act = Some("silu".into());
        m.topk_method = Some("noaux_tc".into());
        m.kv_source_layer_ids = Some(vec![0, 1]);
        m.index_source_layer_ids = Some(vec![0, 1]);
        m.hf_config_json = Some("{\"model_type\":\"deepseek_v41\"}".into());
        m.quantization = Some("test".into());
    } else {
        m.swiglu_limits_per_layer = vec![10.0, 10.0];
    }
    // ds4 stores no head count or n-gram size; its 256-value rows mean 8 heads and 4-grams
    // (ds4_engram.h), so the table has that geometry: 3 orders x 8 heads = 24 primes.
    let primes: Vec<u64> = (2u64..)
        .filter(|&n| (2..n).all(|d| n % d != 0))
        .take(24)
        .collect();
    let offsets = prime_offsets(&primes, primes.len());
    let encoding = match dialect {
        Dialect::Ds4 => EngramEncoding::e4m3_with_values(head_dim as u32).expect("multiple of 32"),
        Dialect::LlamaCpp => EngramEncoding::Ggml(GgmlType::F32),
    };
    m.engram = Some(EngramMeta {
        encoding,
        storage: EngramStorage::Embedded,
        layer_ids: vec![1],
        n_heads: 8,
        head_dim,
        max_ngram_size: 4,
        compressed_vocab_size: 8,
        pad_id: 2,
        token_map: (0..16).map(|t| t % 8).collect(),
        offsets,
        rows: vec![primes.iter().sum()],
        primes,
        multipliers: vec![1, 3, 5, 7],
    });
    m
}

/// Writes `m` with its engram tables (holes of the right type and shape) and reads it back.
fn round_trip(m: &Deepseek41Meta) -> Deepseek41Meta {
    let mut w = GgufWriter::new();
    m.write(&mut w).expect("write");
    let e = m.engram.as_ref().expect("engram");
    let (ty, ne0) = e.encoding.tensor_layout_for(e.head_dim);
    for (&layer, &rows) in e.layer_ids.iter().zip(&e.rows) {
        w.add_zero_tensor(&EngramMeta::table_name(layer), &[ne0, rows], ty)
            .expect("table");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.gguf");
    w.write(&path).expect("write file");
    let set = GgufSet::open(&path).expect("open");
    Deepseek41Meta::from_set(&set).expect("read back")
}

#[test]
fn both_dialects_read_back_what_they_write() {
    for dialect in [Dialect::Ds4, Dialect::LlamaCpp] {
        for head_dim in [32, 64, 256] {
            let m = tiny(dialect, head_dim);
            let mut back = round_trip(&m);
            assert!(
                back.warnings.is_empty(),
                "{dialect:?}: unexpected warnings {:?}",
                back.warnings
            );
            back.warnings.clear();
            assert_eq!(back, m, "{dialect:?} head_dim {head_dim}");
        }
    }
}

#[test]
fn writer_refuses_a_required_field_left_unset() {
    let mut m = tiny(Dialect::Ds4, 64);
    m.candidate_source_layer_id = None;
    let err = m.write(&mut GgufWriter::new()).expect_err("unset");
    assert!(
        err.to_string()
            .contains("deepseek41.candidate_source_layer_id"),
        "{err}"
    );
}

#[test]
fn detector_uses_the_tables_keys() {
    for dialect in [Dialect::Ds4, Dialect::LlamaCpp] {
        let m = tiny(dialect, 32);
        assert_eq!(round_trip(&m).dialect, dialect);
    }
}
