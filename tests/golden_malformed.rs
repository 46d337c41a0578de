//! Malformed goldens, built by mutating the v3 text in memory: each must be rejected with a
//! message that names the file and the offending field/capture, quickly, without a panic and
//! without allocating what the file merely claims.

use golden_lens::golden::{Golden, GoldenError};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Upper bound on one rejection. Parsing the 297 KB v3 text takes milliseconds; a loader that
/// allocated a claimed 10^15 elements, or looped over them, would blow far past this.
const MAX_REJECT_TIME: Duration = Duration::from_secs(2);

/// Label given to the mutated text; every message must start with it.
const SOURCE: &str = "mutated-v3.json";

fn v3_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/golden/reference/ds41_tiny_golden.v3.json"
        );
        std::fs::read_to_string(path).expect("v3 golden is readable")
    })
}

/// v3 with the first occurrence of `from` replaced by `to` (`from` must occur).
fn mutate(from: &str, to: &str) -> String {
    let text = v3_text();
    assert!(text.contains(from), "pattern {from:?} not in v3");
    text.replacen(from, to, 1)
}

/// Parse `text`, expect a rejection, and check the message names every item of `needles`.
fn rejects(text: &str, needles: &[&str]) -> String {
    let start = Instant::now();
    let result = Golden::parse(text, Path::new(SOURCE));
    let elapsed = start.elapsed();
    assert!(elapsed < MAX_REJECT_TIME, "took {elapsed:?}");
    let err = match result {
        Ok(_) => panic!("accepted a malformed golden (expected {needles:?})"),
        Err(err) => err,
    };
    assert!(matches!(err, GoldenError::Invalid { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("{SOURCE}: ")),
        "message does not name the file: {msg}"
    );
    for needle in needles {
        assert!(msg.contains(needle), "message lacks {needle:?}: {msg}");
    }
    msg
}

#[test]
fn unmutated_v3_parses() {
    let g = Golden::parse(v3_text(), Path::new(SOURCE)).expect("v3 parses");
    assert_eq!(g.capture_count(), 443);
}

#[test]
fn empty_file() {
    rejects("", &["empty"]);
    rejects("  \n", &["empty"]);
}

#[test]
fn truncated_file() {
    let text = v3_text();
    let msg = rejects(&text[..text.len() / 2], &["truncated", "line 1"]);
    // The position hint names where the file stopped (inside some regime's capture data).
    assert!(msg.contains("data"), "{msg}");
    rejects(&text[..text.len() - 1], &["truncated", "decode13"]);
}

#[test]
fn not_json() {
    rejects("golden? no", &["not valid JSON", "line 1, column 1"]);
}

#[test]
fn top_level_array() {
    rejects(
        "[1, 2, 3]",
        &["top level", "expected a JSON object", "a list of 3 values"],
    );
}

#[test]
fn fixture_of_wrong_type() {
    let text = mutate("{\"fixture\":{", "{\"fixture\":[1],\"x\":{");
    rejects(&text, &["fixture", "expected an object"]);
}

#[test]
fn wrong_type_for_shape() {
    let text = mutate(
        "\"input_ids\":{\"shape\":[1,12]",
        "\"input_ids\":{\"shape\":\"1x12\"",
    );
    rejects(
        &text,
        &["prefill12", "input_ids", "`shape`", "expected a list"],
    );
}

#[test]
fn negative_shape_entry() {
    let text = mutate(
        "\"input_ids\":{\"shape\":[1,12]",
        "\"input_ids\":{\"shape\":[-1,12]",
    );
    rejects(
        &text,
        &["input_ids", "`shape`", "element 0", "non-negative"],
    );
}

#[test]
fn missing_fixture_key() {
    let text = mutate("\"vocab_size\":64,", "");
    rejects(&text, &["fixture", "missing field `vocab_size`"]);
}

#[test]
fn missing_weights_meta() {
    let text = mutate("\"weights_meta\":", "\"weights_meta_renamed\":");
    rejects(&text, &["missing key `weights_meta`"]);
}

#[test]
fn n_mismatch_with_shape() {
    let text = mutate(
        "\"L0.attn_in\":{\"shape\":[1,12,64],\"n\":768",
        "\"L0.attn_in\":{\"shape\":[1,12,64],\"n\":767",
    );
    rejects(&text, &["prefill12", "L0.attn_in", "`n`", "767", "768"]);
}

#[test]
fn shape_overflow() {
    let text = mutate(
        "\"L0.attn_in\":{\"shape\":[1,12,64]",
        "\"L0.attn_in\":{\"shape\":[4294967296,4294967296,64]",
    );
    rejects(&text, &["L0.attn_in", "`shape`", "overflows"]);
}

#[test]
fn data_length_mismatch() {
    let text = mutate(
        "\"data\":[2,17,47,13,32,59,39,29,42,31,36,6]",
        "\"data\":[2,17,47,13,32,59,39,29,42,31,36]",
    );
    rejects(
        &text,
        &["prefill12", "input_ids", "`data`", "has 11 values", "= 12"],
    );
}

#[test]
fn nan_literal_in_data() {
    let text = mutate("\"L0.attn_in\":{\"shape\":[1,12,64],\"n\":768,\"stride\":1,\"ck\":3805.5208892822266,\"data\":[1.453125",
        "\"L0.attn_in\":{\"shape\":[1,12,64],\"n\":768,\"stride\":1,\"ck\":3805.5208892822266,\"data\":[NaN");
    rejects(
        &text,
        &[
            "`NaN`",
            "prefill12 / L0.attn_in / data[0]",
            "line 1, column",
            "byte",
        ],
    );
}

#[test]
fn infinity_literals() {
    let text = mutate("\"embed\":{\"shape\":[1,12,64],\"n\":768,\"stride\":67,\"ck\":1303.7015838623047,\"data\":[0.419921875,0.37890625",
        "\"embed\":{\"shape\":[1,12,64],\"n\":768,\"stride\":67,\"ck\":1303.7015838623047,\"data\":[0.419921875,-Infinity");
    rejects(&text, &["`-Infinity`", "prefill12 / embed / data[1]"]);
    let text = mutate("\"ck\":3805.5208892822266", "\"ck\":Infinity");
    rejects(&text, &["`Infinity`", "L0.attn_in / ck"]);
}

#[test]
fn stride_zero() {
    let text = mutate(
        "\"input_ids\":{\"shape\":[1,12],\"n\":12,\"stride\":1",
        "\"input_ids\":{\"shape\":[1,12],\"n\":12,\"stride\":0",
    );
    rejects(&text, &["input_ids", "`stride`", ">= 1"]);
}

#[test]
fn stride_not_an_integer() {
    let text = mutate(
        "\"input_ids\":{\"shape\":[1,12],\"n\":12,\"stride\":1",
        "\"input_ids\":{\"shape\":[1,12],\"n\":12,\"stride\":1.5",
    );
    rejects(
        &text,
        &["input_ids", "`stride`", "non-negative integer", "1.5"],
    );
}

#[test]
fn absurd_n_with_short_data() {
    let text = mutate(
        "\"input_ids\":{\"shape\":[1,12],\"n\":12",
        "\"input_ids\":{\"shape\":[1000000000000000,1],\"n\":1000000000000000",
    );
    rejects(
        &text,
        &["input_ids", "`data`", "has 12 values", "1000000000000000"],
    );
}

#[test]
fn unknown_regime_key() {
    let text = v3_text();
    let mutated = format!("{},\"decode14\":{{}}}}", &text[..text.len() - 1]);
    rejects(&mutated, &["unknown key `decode14`"]);
}

#[test]
fn listed_regime_missing() {
    let text = mutate(
        "\"regimes\":[\"prefill12\",\"decode12\",\"decode13\"]",
        "\"regimes\":[\"prefill12\",\"decode12\",\"decode13\",\"decode14\"]",
    );
    rejects(&text, &["regime `decode14`", "missing"]);
}

#[test]
fn duplicate_capture_name() {
    let text = mutate("\"L0.pre_mix_in\":", "\"L0.h_in\":");
    rejects(
        &text,
        &["regime `prefill12`", "duplicate capture name `L0.h_in`"],
    );
}

#[test]
fn duplicate_weight_name() {
    let text = mutate("\"layers.0.hc_ffn_fn\":", "\"layers.0.hc_attn_fn\":");
    rejects(
        &text,
        &["weights_meta", "duplicate parameter `layers.0.hc_attn_fn`"],
    );
}

#[test]
fn mixed_int_and_float_data() {
    let text = mutate("\"data\":[2,17,47", "\"data\":[2,17.5,47");
    rejects(
        &text,
        &["input_ids", "`data`", "mixes integers", "element 1"],
    );
}

#[test]
fn float_capture_holding_integers() {
    let text = mutate("\"data\":[1.0,0.0,0.0,0.0,1.0", "\"data\":[1,0,0,0,1");
    let text = text.replacen(",0.0,0.0,0.0,1.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0]", ",0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0,1,0,0,0]", 1);
    rejects(&text, &["L0.pre_mix_in", "`f32` capture must hold floats"]);
}

#[test]
fn data_element_not_a_number() {
    let text = mutate("\"data\":[2,17,47", "\"data\":[2,\"17\",47");
    rejects(
        &text,
        &["input_ids", "`data`", "element 1", "expected a number"],
    );
}

#[test]
fn bad_weight_kind() {
    let text = mutate("\"kind\":\"f32\"", "\"kind\":\"f16\"");
    rejects(&text, &["weights_meta `embed.weight`", "`kind`", "f16"]);
}

#[test]
fn bad_weight_dtype() {
    let text = mutate("\"dtype\":\"bfloat16\"", "\"dtype\":\"half\"");
    rejects(&text, &["weights_meta `embed.weight`", "`dtype`", "half"]);
}

#[test]
fn weight_n_mismatch() {
    let text = mutate(
        "\"embed.weight\":{\"shape\":[64,64],\"n\":4096",
        "\"embed.weight\":{\"shape\":[64,64],\"n\":4095",
    );
    rejects(&text, &["weights_meta `embed.weight`", "`n`", "4095"]);
}

#[test]
fn engram_multipliers_wrong_length() {
    let text = mutate(",114555519428547269]", "]");
    rejects(
        &text,
        &[
            "fixture.engram",
            "`multipliers`",
            "[0] has 3 entries",
            "max_ngram_size = 4",
        ],
    );
}

#[test]
fn engram_primes_wrong_length() {
    let text = mutate("[[[67,71],[73,79],[83,89]]", "[[[67,71],[73,79],[83]]");
    rejects(
        &text,
        &[
            "fixture.engram",
            "`primes`",
            "[0][2] has 1 entries",
            "n_heads = 2",
        ],
    );
}

#[test]
fn engram_offsets_wrong() {
    let text = mutate("[[0,67,138,211,290,373]", "[[0,67,138,211,290]");
    rejects(&text, &["fixture.engram", "`offsets`", "[0] has 5 entries"]);
    let text = mutate("[[0,67,138,211,290,373]", "[[0,67,139,211,290,373]");
    rejects(
        &text,
        &["fixture.engram", "`offsets`", "[0][2] is 139", "138"],
    );
}

#[test]
fn engram_scales_wrong_length() {
    let text = mutate("\"scales\":[[0.5,", "\"scales\":[[");
    rejects(
        &text,
        &["fixture.engram", "`scales`", "[0] has 461 entries", "462"],
    );
}

#[test]
fn engram_token_map_wrong_length() {
    let text = mutate("\"token_map\":[0,", "\"token_map\":[");
    rejects(
        &text,
        &[
            "fixture.engram",
            "`token_map`",
            "63 entries",
            "engram_compressed_vocab_size = 64",
        ],
    );
}

#[test]
fn compress_ratios_length_mismatch() {
    let text = mutate(
        "\"compress_ratios\":[0,0,2,2,1,1]",
        "\"compress_ratios\":[0,0,2,2,1]",
    );
    rejects(&text, &["fixture", "`compress_ratios`", "n_layers = 6"]);
}

#[test]
fn source_layer_out_of_range() {
    let text = mutate(
        "\"index_source_layers\":[2,4,5]",
        "\"index_source_layers\":[2,4,6]",
    );
    rejects(&text, &["`index_source_layers`", "layer 6"]);
    let text = mutate(
        "\"candidate_source_layer\":4",
        "\"candidate_source_layer\":-2",
    );
    rejects(&text, &["`candidate_source_layer`", "-2"]);
}

#[test]
fn unknown_capture_field() {
    let text = mutate(
        "\"input_ids\":{\"shape\":[1,12]",
        "\"input_ids\":{\"dtype\":\"int64\",\"shape\":[1,12]",
    );
    rejects(&text, &["input_ids", "unknown field `dtype`"]);
}

#[test]
fn candidate_source_layer_may_be_minus_one() {
    let text = mutate(
        "\"candidate_source_layer\":4",
        "\"candidate_source_layer\":-1",
    );
    let g = Golden::parse(&text, Path::new(SOURCE)).expect("-1 means no candidate source");
    assert_eq!(g.fixture.candidate_source_layer, -1);
}

#[test]
fn load_names_the_path_and_reports_missing_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("broken.json");
    std::fs::write(&path, "{\"fixture\":").expect("write");
    let msg = Golden::load(&path).expect_err("truncated").to_string();
    assert!(
        msg.starts_with(&path.display().to_string()) && msg.contains("truncated"),
        "{msg}"
    );
    let missing = dir.path().join("nope.json");
    let err = Golden::load(&missing).expect_err("missing file");
    assert!(matches!(err, GoldenError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("nope.json"));
    std::fs::write(&path, [0xffu8, 0xfe, b'{']).expect("write");
    let msg = Golden::load(&path).expect_err("not utf-8").to_string();
    assert!(msg.contains("not UTF-8"), "{msg}");
}

/// A fixture whose engram rows span several scale blocks (`engram_head_dim` 64 with
/// `scale_block` 32) holds `rows x 2` scales per layer, row r's two consecutive.
#[test]
fn engram_rows_with_several_scale_blocks() {
    let mut doc: serde_json::Value = serde_json::from_str(v3_text()).expect("json");
    doc["fixture"]["engram_head_dim"] = 64.into();
    doc["fixture"]["engram"]["head_dim"] = 64.into();
    let short = serde_json::to_string(&doc).expect("ser");
    let e = Golden::parse(&short, Path::new("wide.json"))
        .expect_err("one scale per row is too few")
        .to_string();
    assert!(
        e.contains("x head_dim / scale_block = 462 x 64 / 32"),
        "{e}"
    );
    let scales = doc["fixture"]["engram"]["scales"]
        .as_array_mut()
        .expect("scales");
    for layer in scales.iter_mut() {
        let doubled: Vec<serde_json::Value> = layer
            .as_array()
            .expect("layer")
            .iter()
            .flat_map(|s| [s.clone(), s.clone()])
            .collect();
        *layer = serde_json::Value::Array(doubled);
    }
    let wide = serde_json::to_string(&doc).expect("ser");
    let g = Golden::parse(&wide, Path::new("wide.json")).expect("two scales per row load");
    let e = g.fixture.engram.as_ref().expect("engram");
    assert_eq!(e.scales[0].len(), 2 * e.num_embeddings[0]);
    // head_dim not a multiple of scale_block is refused.
    doc["fixture"]["engram_head_dim"] = 48.into();
    doc["fixture"]["engram"]["head_dim"] = 48.into();
    let odd = serde_json::to_string(&doc).expect("ser");
    let e = Golden::parse(&odd, Path::new("odd.json"))
        .expect_err("48 is not whole blocks of 32")
        .to_string();
    assert!(e.contains("does not divide head_dim = 48"), "{e}");
}
