//! deepseek41 dialects: detection, typed metadata of both key sets, engram validation, engram
//! row reads (never mapped) and sidecar path safety.

mod gguf_common;

use gguf_common::*;
use golden_lens::gguf::quant::{dequantize_engram_rows, EngramEncoding};
use golden_lens::gguf::{
    detect_dialect, open_sidecar, Deepseek41Meta, Dialect, EngramStorage, EngramTables, GgufError,
    GgufSet,
};
use tempfile::TempDir;

fn open_set(b: &Builder) -> (TempDir, Result<GgufSet, GgufError>) {
    let dir = TempDir::new().unwrap();
    let p = b.write(dir.path(), "tiny.gguf");
    let set = GgufSet::open(p);
    (dir, set)
}

fn meta_of(b: &Builder) -> Result<Deepseek41Meta, GgufError> {
    let (_dir, set) = open_set(b);
    Deepseek41Meta::from_set(&set?)
}

fn meta_err(b: &Builder, needles: &[&str]) {
    let e = meta_of(b).expect_err("expected a metadata error");
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "{msg:?} lacks {n:?}");
    }
}

#[test]
fn ds4_file_reads_into_typed_meta() {
    let (_dir, set) = open_set(&ds4_builder(&ds4_kvs()));
    let set = set.unwrap();
    assert_eq!(detect_dialect(set.primary()).unwrap(), Dialect::Ds4);
    let m = Deepseek41Meta::from_set(&set).unwrap();
    assert_eq!(m.dialect, Dialect::Ds4);
    assert_eq!(m.name.as_deref(), Some("tiny ds4"));
    assert_eq!(
        (m.vocab_size, m.hidden_size, m.n_layers),
        (TINY_VOCAB, 64, 3)
    );
    assert_eq!(
        (m.n_heads, m.n_kv_heads, m.head_dim, m.rope_head_dim),
        (4, 1, 32, 8)
    );
    assert_eq!((m.q_lora_rank, m.o_lora_rank, m.o_groups), (16, 16, 2));
    assert_eq!(
        (m.n_routed_experts, m.n_shared_experts, m.n_experts_per_tok),
        (4, 1, 2)
    );
    assert_eq!(m.candidate_source_layer_id, Some(2));
    assert_eq!((m.hc_mult, m.hc_sinkhorn_iters), (4, 20));
    assert_eq!(m.rms_norm_eps, f64::from(1e-20f32));
    assert_eq!(m.swiglu_limit, Some(10.0));
    assert_eq!((m.rope_theta, m.compress_rope_theta), (10000.0, 160000.0));
    assert_eq!(m.rope_scaling.as_ref().unwrap().factor, 16.0);
    assert_eq!(m.compress_ratios, vec![0, 2, 1]);
    assert_eq!(m.kv_source_layer_ids, Some(vec![2]));
    assert_eq!(m.scoring_func.as_deref(), Some("sqrtsoftplus"));
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    let e = m.engram.as_ref().unwrap();
    assert_eq!(e.encoding, EngramEncoding::E4m3E8m0Row264);
    assert_eq!(e.storage, EngramStorage::Embedded);
    assert_eq!(e.layer_ids, vec![1]);
    assert_eq!((e.n_heads, e.head_dim, e.max_ngram_size), (8, 256, 4));
    assert_eq!(e.rows, vec![TINY_ROWS]);
    assert_eq!(e.primes, TINY_PRIMES.to_vec());
    assert_eq!(&e.offsets[..4], &[0, 2, 5, 10]); // exclusive running sums
    assert_eq!(e.multipliers, TINY_MULTIPLIERS.to_vec());
    assert_eq!(e.token_map.len(), TINY_VOCAB as usize);
}

#[test]
fn ds4_engram_rows_are_read_not_mapped() {
    let (_dir, set) = open_set(&ds4_builder(&ds4_kvs()));
    let set = set.unwrap();
    let file = set.primary();
    let (_, table) = set.tensor("blk.1.engram_embd.weight").unwrap();
    assert!(!file.is_mapped(table), "engram table must not be mapped");
    assert!(file.mapped_len() <= table.offset);
    let (_, embd) = set.tensor("token_embd.weight").unwrap();
    assert!(file.is_mapped(embd));

    let m = Deepseek41Meta::from_set(&set).unwrap();
    let tables = EngramTables::open(&set, m.engram.as_ref().unwrap()).unwrap();
    assert_eq!(tables.rows(1), Some(TINY_ROWS));
    for row in [0, 1, 500, TINY_ROWS - 1] {
        let got = tables.rows_f32(1, row..row + 1).unwrap();
        let mut want = vec![0f32; 256];
        dequantize_engram_rows(
            &EngramEncoding::E4m3E8m0Row264,
            &ds4_engram_row(row),
            &mut want,
        )
        .unwrap();
        assert_eq!(got, want, "row {row}");
        assert!(got.iter().any(|&v| v != 0.0));
    }
    let e = tables
        .rows_f32(1, TINY_ROWS - 1..TINY_ROWS + 1)
        .unwrap_err();
    assert!(e.to_string().contains("outside 0..963"), "{e}");
    assert!(tables.rows_f32(14, 0..1).is_err());
}

#[test]
fn llama_file_reads_with_warnings_for_defaults() {
    let (_dir, set) = open_set(&llama_builder(&llama_kvs()));
    let set = set.unwrap();
    let m = Deepseek41Meta::from_set(&set).unwrap();
    assert_eq!(m.dialect, Dialect::LlamaCpp);
    assert_eq!(m.vocab_size, TINY_VOCAB); // from tokenizer.ggml.tokens
    assert_eq!((m.n_layers, m.hidden_size, m.head_dim), (3, 64, 32));
    assert_eq!(m.compress_ratios, vec![0, 2, 1, 0, 0, 0]);
    assert_eq!(m.swiglu_limit, Some(10.0));
    assert_eq!(m.scoring_func.as_deref(), Some("expert_gating_func=3"));
    assert_eq!(m.hc_sinkhorn_iters, 3, "ik_llama's default, with a warning");
    assert_eq!(m.hc_eps, m.rms_norm_eps);
    let w = m.warnings.join("\n");
    assert!(w.contains("sinkhorn_iterations is absent"), "{w}");
    assert!(w.contains("hyper_connection.epsilon is absent"), "{w}");
    assert!(w.contains("compressed_vocab_size is absent"), "{w}");
    let e = m.engram.as_ref().unwrap();
    assert_eq!(
        e.encoding,
        EngramEncoding::Ggml(golden_lens::gguf::GgmlType::Q8_0)
    );
    assert_eq!(e.rows, vec![LLAMA_TINY_ROWS]);
    assert_eq!(e.compressed_vocab_size, 10);
    let tables = EngramTables::open(&set, e).unwrap();
    let row = tables.rows_f32(1, 3..4).unwrap();
    assert_eq!(row[0], 0.0); // 0.5 * ((3 + 0) % 7 - 3)
    assert_eq!(row[1], 0.5); // 0.5 * ((3 + 1) % 7 - 3)
    assert_eq!(
        row,
        set.tensor_rows_f32("blk.1.engram_embd.weight", 3..4)
            .unwrap()
    );
}

#[test]
fn dialect_detection_errors() {
    let both = ds4_kvs().set("deepseek41.block_count", V::U32(3));
    meta_err(&ds4_builder(&both), &["both dialects"]);
    let neither = Kvs::default().set("general.architecture", s("deepseek41"));
    meta_err(&neither.builder(), &["no deepseek41 hyper-parameters"]);
    let llama = ds4_kvs().set("general.architecture", s("llama"));
    meta_err(
        &ds4_builder(&llama),
        &["\"llama\"", "expected \"deepseek41\""],
    );
    let missing = ds4_kvs().remove("general.architecture");
    meta_err(&ds4_builder(&missing), &["general.architecture", "missing"]);
}

#[test]
fn missing_required_key_names_it() {
    let kvs = ds4_kvs()
        .remove("deepseek41.hidden_size")
        .set("deepseek41.engram.encoding", s("e4m3_e8m0_32_row264"));
    meta_err(
        &ds4_builder(&kvs),
        &["deepseek41.hidden_size", "missing", "ds4"],
    );
    let kvs = ds4_kvs().set("deepseek41.hc_mult", s("four"));
    meta_err(
        &ds4_builder(&kvs),
        &["deepseek41.hc_mult", "non-negative integer", "string"],
    );
}

#[test]
fn engram_validation_even_multiplier() {
    let kvs = ds4_kvs().set("deepseek41.engram.multipliers", arr_u64(&[3, 4, 7, 9]));
    meta_err(&ds4_builder(&kvs), &["multiplier 1 = 4 is even"]);
}

#[test]
fn engram_validation_multiplier_bound() {
    let too_big = (i64::MAX as u64 / TINY_COMPRESSED_VOCAB) | 1;
    let too_big = too_big + 2;
    let kvs = ds4_kvs().set(
        "deepseek41.engram.multipliers",
        arr_u64(&[3, 5, too_big, 9]),
    );
    meta_err(
        &ds4_builder(&kvs),
        &["exceeds INT64_MAX / compressed_vocab_size"],
    );
}

#[test]
fn engram_validation_rows_must_equal_sum_of_primes() {
    let kvs = ds4_kvs().set("deepseek41.engram.rows", arr_u32(&[TINY_ROWS as u32 + 1]));
    meta_err(&ds4_builder(&kvs), &["964 rows but its primes sum to 963"]);
}

#[test]
fn engram_validation_prime_count() {
    // ds4 stores no head count: the primes must split into (n-gram orders) x heads per layer
    // (4 multipliers: 3 orders), and then sum to each layer's rows.
    let kvs = ds4_kvs().set("deepseek41.engram.primes", arr_u32(&[2, 3, 5, 7]));
    meta_err(
        &ds4_builder(&kvs),
        &["4 primes cannot be 1 layers x (4 - 1) n-gram orders x heads"],
    );
    let kvs = ds4_kvs().set("deepseek41.engram.primes", arr_u32(&[2, 3, 5]));
    meta_err(
        &ds4_builder(&kvs),
        &["has 963 rows but its primes sum to 10"],
    );
}

#[test]
fn engram_validation_token_map_and_pad() {
    let mut map: Vec<u32> = (0..TINY_VOCAB as u32).map(|i| i % 10).collect();
    map[5] = 10;
    let kvs = ds4_kvs().set("deepseek41.engram.token_map", arr_u32(&map));
    meta_err(
        &ds4_builder(&kvs),
        &["token 5 maps to 10", "compressed_vocab_size 10"],
    );
    let kvs = ds4_kvs().set("deepseek41.engram.pad_id", V::U32(10));
    meta_err(
        &ds4_builder(&kvs),
        &["pad_id", "not below compressed_vocab_size"],
    );
    let kvs = ds4_kvs().set("deepseek41.engram.token_map", arr_u32(&[0, 1]));
    meta_err(&ds4_builder(&kvs), &["2 entries for a vocabulary of 16"]);
}

#[test]
fn engram_validation_layer_ids_and_encoding() {
    let kvs = ds4_kvs().set("deepseek41.engram.layer_ids", arr_u32(&[7]));
    meta_err(&ds4_builder(&kvs), &["layer 7 is not below 3 layers"]);
    let kvs = ds4_kvs().set("deepseek41.engram.encoding", s("fp8_magic"));
    meta_err(
        &ds4_builder(&kvs),
        &["\"fp8_magic\"", "expected e4m3_e8m0_32_row264"],
    );
}

#[test]
fn llama_offsets_must_be_running_sums() {
    let kvs = llama_kvs().set("deepseek41.engram.offsets", arr_u64(&[0, 6]));
    meta_err(&llama_builder(&kvs), &["running sums"]);
}

#[test]
fn engram_table_shape_must_match_the_encoding() {
    // lloyd4 rows are 136 bytes, but the table holds 264-byte rows.
    let kvs = ds4_kvs().set("deepseek41.engram.encoding", s("lloyd4_e5m3_32_r136"));
    meta_err(
        &ds4_builder(&kvs),
        &["engram table is I8 [264, 963]", "needs I8 [136, 963]"],
    );
}

#[test]
fn legacy_architecture_warns() {
    let mut kvs = Kvs::default();
    for (k, v) in ds4_kvs().0 {
        kvs = kvs.set(&k.replace("deepseek41.", "deepseek4."), v);
    }
    let kvs = kvs.set("general.architecture", s("deepseek4"));
    let m = meta_of(&ds4_builder(&kvs)).unwrap();
    assert_eq!(m.architecture, "deepseek4");
    assert!(m.warnings[0].contains("pre-2026-09-10"), "{:?}", m.warnings);
}

// ---- external q4_k_row144 sidecars ---------------------------------------------------------

fn external_kvs(paths: &[&str]) -> Kvs {
    ds4_kvs()
        .set("deepseek41.engram.encoding", s("q4_k_row144"))
        .set("deepseek41.engram.storage", s("external"))
        .set("deepseek41.engram.external_paths", arr_str(paths))
        .set("deepseek41.engram.external_offsets", arr_u64(&[16]))
}

/// A sidecar: 16 bytes of header then TINY_ROWS Q4_K rows, row r with d = 1, sc0 = 1, nibbles r % 16.
fn write_sidecar(path: &std::path::Path) {
    let mut b = vec![0u8; 16];
    for r in 0..TINY_ROWS {
        let mut row = vec![0u8; 144];
        row[0..2].copy_from_slice(&[0x00, 0x3c]); // d = 1.0
        row[4] = 1; // group 0 scale 1
        for q in &mut row[16..144] {
            *q = (r % 16) as u8 * 0x11;
        }
        b.extend(row);
    }
    std::fs::write(path, b).unwrap();
}

fn external_builder(kvs: &Kvs) -> Builder {
    kvs.builder().tensor(tensor(
        "output_norm.weight",
        &[64],
        0,
        f32_bytes(&[1.0; 64]),
    ))
}

#[test]
fn external_sidecar_inside_the_directory_reads() {
    let dir = TempDir::new().unwrap();
    std::fs::create_dir(dir.path().join("engram")).unwrap();
    write_sidecar(&dir.path().join("engram/engram-1.q4_k.bin"));
    let p =
        external_builder(&external_kvs(&["engram/engram-1.q4_k.bin"])).write(dir.path(), "m.gguf");
    let set = GgufSet::open(&p).unwrap();
    let m = Deepseek41Meta::from_set(&set).unwrap();
    let e = m.engram.as_ref().unwrap();
    assert!(matches!(e.storage, EngramStorage::External { .. }));
    let tables = EngramTables::open(&set, e).unwrap();
    let row = tables.rows_f32(1, 5..6).unwrap();
    assert_eq!(row[0], 5.0); // d * sc * q - dmin * m = 1 * 1 * 5
    assert_eq!(row[32], 0.0); // group 1 scale 0
}

fn sidecar_err(paths: &[&str], setup: impl Fn(&std::path::Path)) -> String {
    let dir = TempDir::new().unwrap();
    let inner = dir.path().join("model");
    std::fs::create_dir(&inner).unwrap();
    setup(dir.path());
    let p = external_builder(&external_kvs(paths)).write(&inner, "m.gguf");
    let set = GgufSet::open(&p).unwrap();
    // The metadata's validation opens every sidecar, so a bad one fails there.
    let e = Deepseek41Meta::from_set(&set).expect_err("sidecar must be refused");
    assert!(matches!(e, GgufError::Sidecar { .. }), "{e}");
    e.to_string()
}

#[test]
fn sidecar_parent_traversal_is_refused() {
    let msg = sidecar_err(&["../../etc/passwd"], |_| {});
    assert!(msg.contains("'..' is refused"), "{msg}");
}

#[test]
fn sidecar_absolute_path_is_refused() {
    let msg = sidecar_err(&["/etc/passwd"], |_| {});
    assert!(msg.contains("absolute paths are refused"), "{msg}");
}

#[test]
fn sidecar_symlink_leaving_the_directory_is_refused() {
    let msg = sidecar_err(&["escape.bin"], |root| {
        write_sidecar(&root.join("outside.bin"));
        std::os::unix::fs::symlink(root.join("outside.bin"), root.join("model/escape.bin"))
            .unwrap();
    });
    assert!(msg.contains("outside the GGUF's directory"), "{msg}");
}

#[test]
fn sidecar_missing_or_short_is_refused() {
    let msg = sidecar_err(&["nothere.bin"], |_| {});
    assert!(msg.contains("cannot open"), "{msg}");
    let msg = sidecar_err(&["short.bin"], |root| {
        std::fs::write(root.join("model/short.bin"), [0u8; 100]).unwrap();
    });
    assert!(msg.contains("cannot hold 963 rows of 144 bytes"), "{msg}");
}

#[test]
fn open_sidecar_accepts_dot_components() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("a.bin"), b"x").unwrap();
    let gguf = dir.path().join("m.gguf");
    let sidecar = open_sidecar(&gguf, "./a.bin").unwrap();
    assert!(sidecar.path.ends_with("a.bin"));
    assert_eq!(sidecar.len, 1);
    assert!(open_sidecar(&gguf, "").is_err());
}

/// A FIFO named as a sidecar is refused at once: the open does not block waiting for a writer.
#[test]
fn sidecar_fifo_is_refused_without_blocking() {
    let msg = sidecar_err(&["fifo.bin"], |root| {
        let fifo = root.join("model/fifo.bin");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(status.success(), "mkfifo {}", fifo.display());
    });
    assert!(msg.contains("not a regular file"), "{msg}");
}

/// A directory named as a sidecar is refused with the same message.
#[test]
fn sidecar_directory_is_refused() {
    let msg = sidecar_err(&["dir.bin"], |root| {
        std::fs::create_dir(root.join("model/dir.bin")).unwrap();
    });
    assert!(msg.contains("not a regular file"), "{msg}");
}

// ---- llama.cpp candidate-prefilter keys (spec §1.3) -----------------------------------------

fn llama_meta(kvs: &Kvs) -> Result<Deepseek41Meta, GgufError> {
    let (_dir, set) = open_set(&llama_builder(kvs));
    Deepseek41Meta::from_set(&set.unwrap())
}

fn with_candidate_keys(names: [&str; 3], values: [u32; 3]) -> Kvs {
    let mut kvs = llama_kvs();
    for (name, v) in names.iter().zip(values) {
        kvs = kvs.set(&format!("deepseek41.{name}"), V::U32(v));
    }
    kvs
}

#[test]
fn llama_candidate_keys_are_read_in_the_forks_spelling() {
    let names = [
        "attention.candidate_source_layer_id",
        "attention.candidate_topk_blocks",
        "attention.candidate_block_size",
    ];
    let m = llama_meta(&with_candidate_keys(names, [2, 16, 4])).unwrap();
    assert_eq!(
        (
            m.candidate_source_layer_id,
            m.candidate_topk_blocks,
            m.candidate_block_size
        ),
        (Some(2), Some(16), Some(4))
    );
    assert!(
        !m.warnings.join("\n").contains("candidate"),
        "{:?}",
        m.warnings
    );
}

#[test]
fn llama_candidate_key_aliases_are_read() {
    let aliases = [
        "attention.indexer.candidate_source_layer",
        "attention.indexer.candidate_top_k",
        "attention.indexer.candidate_block_size",
    ];
    let m = llama_meta(&with_candidate_keys(aliases, [2, 16, 4])).unwrap();
    assert_eq!(m.candidate_topk_blocks, Some(16));
    // golden-lens's earlier exports spelled the block count `candidate_top_k_blocks`.
    let ours = [
        "attention.indexer.candidate_source_layer",
        "attention.indexer.candidate_top_k_blocks",
        "attention.indexer.candidate_block_size",
    ];
    let m = llama_meta(&with_candidate_keys(ours, [2, 12, 4])).unwrap();
    assert_eq!(m.candidate_topk_blocks, Some(12));
}

#[test]
fn llama_without_candidate_keys_falls_back_to_the_released_geometry_with_a_warning() {
    let m = llama_meta(&llama_kvs()).unwrap();
    assert_eq!(
        m.candidate_source_layer_id, None,
        "left to the model builder"
    );
    assert_eq!(m.candidate_topk_blocks, Some(2048));
    assert_eq!(m.candidate_block_size, Some(8));
    let w = m.warnings.join("\n");
    assert!(w.contains("falling back to the released geometry"), "{w}");
    assert!(
        w.contains("deepseek41.attention.candidate_topk_blocks"),
        "{w}"
    );
}

#[test]
fn llama_candidate_keys_are_all_or_none_and_aliases_must_agree() {
    let kvs = llama_kvs().set("deepseek41.attention.candidate_topk_blocks", V::U32(16));
    let e = llama_meta(&kvs).unwrap_err().to_string();
    assert!(e.contains("all three keys or none"), "{e}");
    assert!(e.contains("candidate_source_layer_id"), "{e}");
    let kvs = with_candidate_keys(
        [
            "attention.candidate_source_layer_id",
            "attention.candidate_topk_blocks",
            "attention.candidate_block_size",
        ],
        [2, 16, 4],
    )
    .set("deepseek41.attention.indexer.candidate_top_k", V::U32(32));
    let e = llama_meta(&kvs).unwrap_err().to_string();
    assert!(e.contains("disagrees"), "{e}");
}
