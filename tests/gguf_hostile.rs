//! Hostile GGUF files: every malformed header field gives a clear `GgufError` naming what was
//! expected, never a panic and never an allocation of what the file merely claims.

mod gguf_common;

use gguf_common::*;
use golden_lens::gguf::split::GgufSet;
use golden_lens::gguf::{GgufError, GgufFile};
use tempfile::TempDir;

fn open_bytes(bytes: &[u8]) -> Result<GgufFile, GgufError> {
    let dir = TempDir::new().unwrap();
    let p = dir.path().join("t.gguf");
    std::fs::write(&p, bytes).unwrap();
    GgufFile::open(&p)
}

fn open_err(b: &Builder) -> GgufError {
    match open_bytes(&b.bytes()) {
        Ok(_) => panic!("expected an error for {b:?}"),
        Err(e) => e,
    }
}

fn assert_msg(e: &GgufError, needles: &[&str]) {
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "message {msg:?} lacks {n:?}");
    }
}

fn valid() -> Builder {
    Builder::new()
        .kv("general.architecture", s("deepseek41"))
        .kv("general.alignment", V::U32(32))
        .tensor(tensor(
            "a.weight",
            &[4],
            0,
            f32_bytes(&[1.0, 2.0, 3.0, 4.0]),
        ))
        .tensor(tensor("b.weight", &[8, 2], 0, f32_bytes(&[0.5; 16])))
}

#[test]
fn valid_baseline_opens() {
    let f = open_bytes(&valid().bytes()).unwrap();
    assert_eq!(f.tensors().len(), 2);
    assert_eq!(f.tensor_f32("a.weight").unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn bad_magic() {
    let mut b = valid();
    b.magic = *b"GGML";
    let e = open_err(&b);
    assert!(matches!(e, GgufError::BadMagic { .. }), "{e}");
    assert_msg(&e, &["expected magic bytes 47 47 55 46", "offset 0"]);
}

#[test]
fn empty_and_tiny_files() {
    let e = open_bytes(&[]).unwrap_err();
    assert!(matches!(e, GgufError::Truncated { .. }), "{e}");
    let e = open_bytes(b"GG").unwrap_err();
    assert!(matches!(e, GgufError::Truncated { .. }), "{e}");
    let e = open_bytes(b"XY").unwrap_err();
    assert!(matches!(e, GgufError::BadMagic { .. }), "{e}");
}

#[test]
fn truncated_header() {
    let mut b = valid();
    b.truncate_to = Some(12); // magic + version + half the tensor count
    let e = open_err(&b);
    assert!(matches!(e, GgufError::Truncated { offset: 8, .. }), "{e}");
    assert_msg(&e, &["tensor count", "needs 8 bytes", "4 remain"]);
}

#[test]
fn unsupported_versions() {
    let mut b = valid();
    b.version = 1;
    assert_msg(&open_err(&b), &["version 1", "expected 2 or 3", "v1"]);
    b.version = 3u32.swap_bytes();
    assert_msg(&open_err(&b), &["big-endian"]);
    b.version = 4;
    let e = open_err(&b);
    assert!(matches!(
        e,
        GgufError::UnsupportedVersion { version: 4, .. }
    ));
}

#[test]
fn version_2_is_read() {
    let mut b = valid();
    b.version = 2;
    let f = open_bytes(&b.bytes()).unwrap();
    assert_eq!(f.version(), 2);
}

#[test]
fn tensor_count_2_pow_60() {
    let mut b = valid();
    b.tensor_count = Some(1 << 60);
    let e = open_err(&b);
    assert!(
        matches!(e, GgufError::CountTooLarge { count, offset: 8, .. } if count == 1 << 60),
        "{e}"
    );
    assert_msg(&e, &["tensor count", "can hold at most"]);
}

#[test]
fn kv_count_huge() {
    let mut b = valid();
    b.kv_count = Some(u64::MAX);
    let e = open_err(&b);
    assert!(
        matches!(e, GgufError::CountTooLarge { offset: 16, .. }),
        "{e}"
    );
    assert_msg(&e, &["metadata key/value count"]);
}

#[test]
fn kv_count_slightly_too_large_is_truncation() {
    let mut b = valid();
    b.kv_count = Some(3); // there are 2, the third key reads the tensor infos as a key
    let e = open_err(&b);
    // Whatever the bytes decode to, it must be an error, never a panic.
    let _ = e.to_string();
}

#[test]
fn dims_product_overflows() {
    let b = valid().tensor(tensor("big", &[1 << 32, 1 << 32], 0, vec![]));
    let e = open_err(&b);
    assert!(matches!(e, GgufError::BadTensorInfo { .. }), "{e}");
    assert_msg(&e, &["\"big\"", "overflows"]);
}

#[test]
fn dim_above_i64_max() {
    let b = valid().tensor(tensor("neg", &[u64::MAX], 0, vec![]));
    assert_msg(&open_err(&b), &["signed 64-bit"]);
}

#[test]
fn n_dims_above_4() {
    let b = valid().tensor(tensor("five", &[1, 1, 1, 1, 1], 0, vec![0; 4]));
    let e = open_err(&b);
    assert_msg(&e, &["5 dimensions", "at most 4"]);
}

#[test]
fn n_dims_huge_is_rejected_before_reading_dims() {
    let mut b = valid();
    let mut raw = gguf_string("x");
    raw.extend(u32::MAX.to_le_bytes());
    // Replace the tensor list with one hand-made info.
    b.tensors.clear();
    b.tensor_count = Some(1);
    let mut bytes = b.bytes();
    bytes.truncate(bytes.len() - (bytes.len() % 32)); // drop padding, keep kvs
    let header_end = 24 + b.kvs.iter().map(|k| k.len()).sum::<usize>();
    bytes.truncate(header_end);
    bytes.extend(raw);
    bytes.extend([0u8; 64]);
    let e = open_bytes(&bytes).unwrap_err();
    assert_msg(&e, &["4294967295 dimensions"]);
}

#[test]
fn offset_past_end() {
    let mut t = tensor("far", &[4], 0, vec![]);
    t.offset = Some(1 << 40);
    let e = open_err(&valid().tensor(t));
    assert!(matches!(e, GgufError::TensorPastEnd { .. }), "{e}");
    assert_msg(&e, &["\"far\"", "past the end of the file"]);
}

#[test]
fn offset_overflowing_u64() {
    let mut t = tensor("wrap", &[4], 0, vec![]);
    t.offset = Some(u64::MAX - 31);
    let e = open_err(&valid().tensor(t));
    assert!(matches!(e, GgufError::TensorPastEnd { .. }), "{e}");
}

#[test]
fn tensor_data_cut_short() {
    let mut b = valid();
    let len = b.bytes().len();
    b.truncate_to = Some(len - 4);
    let e = open_err(&b);
    assert!(matches!(e, GgufError::TensorPastEnd { .. }), "{e}");
}

#[test]
fn misaligned_offset() {
    let mut t = tensor("mis", &[4], 0, f32_bytes(&[0.0; 4]));
    t.offset = Some(96 + 4);
    let e = open_err(&valid().tensor(t));
    assert!(
        matches!(
            e,
            GgufError::MisalignedTensor {
                relative_offset: 100,
                alignment: 32,
                ..
            }
        ),
        "{e}"
    );
    assert_msg(&e, &["not a multiple of general.alignment 32"]);
}

#[test]
fn overlapping_tensors() {
    let mut t = tensor("over", &[8], 0, f32_bytes(&[0.0; 8]));
    t.offset = Some(32); // b.weight occupies [32, 96)
    let e = open_err(&valid().tensor(t));
    assert!(matches!(e, GgufError::TensorOverlap { .. }), "{e}");
    assert_msg(&e, &["overlaps", "b.weight"]);
}

#[test]
fn unknown_size_tensor_starting_inside_another_is_an_overlap() {
    let mut t = tensor("unknown", &[8], 200, vec![]);
    t.offset = Some(0); // a.weight occupies [0, 16)
    let e = open_err(&valid().tensor(t));
    assert!(matches!(e, GgufError::TensorOverlap { .. }), "{e}");
}

#[test]
fn bad_alignment_zero_and_three_and_type() {
    for a in [0u32, 3, 48] {
        let b = Builder::new().kv("general.alignment", V::U32(a));
        let e = open_err(&b);
        assert!(matches!(e, GgufError::BadAlignment { .. }), "{e}");
        assert_msg(&e, &["power of two", &a.to_string()]);
    }
    let b = Builder::new().kv("general.alignment", V::U64(32));
    assert_msg(&open_err(&b), &["expected a u32", "uint64"]);
}

#[test]
fn key_string_length_beyond_file() {
    let mut raw = (1u64 << 40).to_le_bytes().to_vec();
    raw.extend(b"abc");
    let b = valid().raw_kv(raw);
    let e = open_err(&b);
    assert!(matches!(e, GgufError::Truncated { .. }), "{e}");
    assert_msg(&e, &["metadata key #2", "needs 1099511627776 bytes"]);
}

#[test]
fn value_string_length_beyond_file() {
    let mut raw = gguf_string("general.name");
    raw.extend(8u32.to_le_bytes());
    raw.extend(u64::MAX.to_le_bytes());
    let e = open_err(&valid().raw_kv(raw));
    assert_msg(&e, &["metadata value \"general.name\"", "truncated"]);
}

#[test]
fn array_count_beyond_file() {
    let mut raw = gguf_string("tokenizer.ggml.tokens");
    raw.extend(9u32.to_le_bytes());
    raw.extend(8u32.to_le_bytes());
    raw.extend((1u64 << 62).to_le_bytes());
    let e = open_err(&valid().raw_kv(raw));
    assert!(matches!(e, GgufError::CountTooLarge { .. }), "{e}");
    assert_msg(&e, &["array<string> length", "tokenizer.ggml.tokens"]);
}

#[test]
fn nested_array_bomb() {
    // An array of 3 arrays, each claiming 2^59 u64 elements: the first inner count is refused.
    let mut raw = gguf_string("bomb");
    raw.extend(9u32.to_le_bytes());
    raw.extend(9u32.to_le_bytes());
    raw.extend(3u64.to_le_bytes());
    for _ in 0..3 {
        raw.extend(10u32.to_le_bytes());
        raw.extend((1u64 << 59).to_le_bytes());
    }
    let e = open_err(&valid().raw_kv(raw));
    assert!(matches!(e, GgufError::CountTooLarge { .. }), "{e}");
    assert_msg(&e, &["bomb", "element 0", "array<uint64> length"]);
}

#[test]
fn arrays_nested_too_deep() {
    let mut v = V::Arr(4, vec![V::U32(1)]);
    for _ in 0..12 {
        v = V::Arr(9, vec![v]);
    }
    let e = open_err(&valid().kv("deep", v));
    assert!(matches!(e, GgufError::ArrayTooDeep { .. }), "{e}");
}

#[test]
fn unknown_value_type() {
    let mut raw = gguf_string("weird");
    raw.extend(13u32.to_le_bytes());
    raw.extend([0u8; 8]);
    let e = open_err(&valid().raw_kv(raw));
    assert!(
        matches!(e, GgufError::UnknownValueType { type_id: 13, .. }),
        "{e}"
    );
    assert_msg(&e, &["\"weird\"", "expected 0..=12"]);
}

#[test]
fn unknown_array_element_type() {
    let mut raw = gguf_string("weird_arr");
    raw.extend(9u32.to_le_bytes());
    raw.extend(99u32.to_le_bytes());
    raw.extend(1u64.to_le_bytes());
    let e = open_err(&valid().raw_kv(raw));
    assert!(
        matches!(e, GgufError::UnknownValueType { type_id: 99, .. }),
        "{e}"
    );
}

#[test]
fn bool_byte_must_be_0_or_1() {
    let e = open_err(&valid().raw_kv({
        let mut r = gguf_string("flag");
        r.extend(7u32.to_le_bytes());
        r.push(2);
        r
    }));
    assert_msg(&e, &["bool byte must be 0 or 1"]);
}

#[test]
fn invalid_utf8_key() {
    let mut raw = 2u64.to_le_bytes().to_vec();
    raw.extend([0xff, 0xfe]);
    raw.extend(4u32.to_le_bytes());
    raw.extend(1u32.to_le_bytes());
    let e = open_err(&valid().raw_kv(raw));
    assert!(matches!(e, GgufError::InvalidUtf8 { .. }), "{e}");
}

#[test]
fn duplicate_tensor_names() {
    let b = valid().tensor(tensor("a.weight", &[4], 0, f32_bytes(&[0.0; 4])));
    let e = open_err(&b);
    assert!(matches!(e, GgufError::DuplicateTensor { .. }), "{e}");
    assert_msg(&e, &["\"a.weight\"", "must be unique"]);
}

#[test]
fn duplicate_keys() {
    let b = valid().kv("general.architecture", s("llama"));
    let e = open_err(&b);
    assert!(matches!(e, GgufError::DuplicateKey { .. }), "{e}");
    assert_msg(&e, &["general.architecture"]);
}

#[test]
fn tensor_name_too_long() {
    let name = "n".repeat(64);
    let e = open_err(&valid().tensor(tensor(&name, &[4], 0, f32_bytes(&[0.0; 4]))));
    assert_msg(&e, &["64 bytes long", "at most 63"]);
}

#[test]
fn row_length_not_a_block_multiple() {
    let e = open_err(&valid().tensor(tensor("q", &[33], 8, vec![0; 34])));
    assert_msg(&e, &["ne0 = 33", "Q8_0 block size 32"]);
}

#[test]
fn unknown_tensor_type_is_listed_not_dequantized() {
    let f = open_bytes(
        &valid()
            .tensor(tensor("future", &[16], 77, vec![0; 16]))
            .bytes(),
    )
    .unwrap();
    let t = f.tensor("future").unwrap();
    assert_eq!(t.n_bytes, None);
    assert_eq!(t.ggml_type.id(), 77);
    let e = f.tensor_f32("future").unwrap_err();
    assert!(matches!(e, GgufError::NotDequantizable { .. }), "{e}");
    assert_msg(&e, &["type77"]);
    // A known type without a decoder is listed too.
    let f = open_bytes(
        &valid()
            .tensor(tensor("iq4", &[256], 23, vec![0; 136]))
            .bytes(),
    )
    .unwrap();
    assert!(f.tensor_f32("iq4").is_err());
}

#[test]
fn row_and_expert_requests_are_bounds_checked() {
    let f = open_bytes(&valid().bytes()).unwrap();
    assert_msg(
        &f.tensor_rows_f32("b.weight", 1..3).unwrap_err(),
        &["rows 1..3", "0..2"],
    );
    assert_msg(&f.expert_f32("b.weight", 0).unwrap_err(), &["3-D tensor"]);
    assert!(matches!(
        f.tensor_f32("nope").unwrap_err(),
        GgufError::NoSuchTensor { .. }
    ));
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error_not_a_panic() {
    let bytes = valid()
        .kv("tokens", arr_str(&["a", "bb", "ccc"]))
        .kv("nested", V::Arr(9, vec![arr_u32(&[1, 2]), arr_u32(&[3])]))
        .bytes();
    let dir = TempDir::new().unwrap();
    let p = dir.path().join("t.gguf");
    for n in 0..bytes.len() {
        std::fs::write(&p, &bytes[..n]).unwrap();
        assert!(GgufFile::open(&p).is_err(), "prefix of {n} bytes opened");
    }
}

#[test]
fn byte_flips_never_panic() {
    let bytes = valid()
        .kv("tokens", arr_str(&["a", "bb", "ccc"]))
        .kv("nested", V::Arr(9, vec![arr_u32(&[1, 2]), arr_u64(&[3])]))
        .bytes();
    let dir = TempDir::new().unwrap();
    let p = dir.path().join("t.gguf");
    let mut state = 0x1234_5678_9abc_def0u64;
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..3 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let i = (state % b.len() as u64) as usize;
            b[i] = (state >> 32) as u8;
        }
        std::fs::write(&p, &b).unwrap();
        if let Ok(f) = GgufFile::open(&p) {
            for t in f.tensors() {
                let _ = f.tensor_f32(&t.name);
            }
            for e in f.metadata() {
                if let golden_lens::gguf::MetaValue::Array(a) = &e.value {
                    let _ = f.array_values(a, None);
                }
            }
        }
    }
}

// ---- split sets -------------------------------------------------------------------------

fn shard(no: u16, count: u16, total: i32, tensors: &[&str]) -> Builder {
    let mut b = Builder::new()
        .kv("split.no", V::U16(no))
        .kv("split.count", V::U16(count))
        .kv("split.tensors.count", V::I32(total));
    for t in tensors {
        b = b.tensor(tensor(t, &[4], 0, f32_bytes(&[no as f32; 4])));
    }
    b
}

#[test]
fn split_set_opens_from_any_shard() {
    let dir = TempDir::new().unwrap();
    shard(0, 3, 4, &["a", "b"]).write(dir.path(), "m-00001-of-00003.gguf");
    shard(1, 3, 4, &["c"]).write(dir.path(), "m-00002-of-00003.gguf");
    shard(2, 3, 4, &["d"]).write(dir.path(), "m-00003-of-00003.gguf");
    for n in 1..=3 {
        let set = GgufSet::open(dir.path().join(format!("m-0000{n}-of-00003.gguf"))).unwrap();
        assert_eq!(set.shards().len(), 3);
        assert_eq!(set.tensor_count(), 4);
        assert_eq!(set.tensor_f32("d").unwrap(), vec![2.0; 4]);
    }
}

#[test]
fn split_set_missing_shard() {
    let dir = TempDir::new().unwrap();
    shard(0, 3, 3, &["a"]).write(dir.path(), "m-00001-of-00003.gguf");
    shard(2, 3, 3, &["c"]).write(dir.path(), "m-00003-of-00003.gguf");
    let e = GgufSet::open(dir.path().join("m-00003-of-00003.gguf")).unwrap_err();
    assert!(matches!(e, GgufError::Split { .. }), "{e}");
    assert_msg(&e, &["shard 2 of 3 is missing", "m-00002-of-00003.gguf"]);
}

#[test]
fn split_count_mismatch() {
    let dir = TempDir::new().unwrap();
    shard(0, 3, 2, &["a"]).write(dir.path(), "m-00001-of-00002.gguf");
    shard(1, 3, 2, &["b"]).write(dir.path(), "m-00002-of-00002.gguf");
    let e = GgufSet::open(dir.path().join("m-00001-of-00002.gguf")).unwrap_err();
    assert_msg(&e, &["split.count is 3", "2 shard(s)"]);
}

#[test]
fn split_tensor_count_sum_mismatch() {
    let dir = TempDir::new().unwrap();
    shard(0, 2, 5, &["a"]).write(dir.path(), "m-00001-of-00002.gguf");
    shard(1, 2, 5, &["b"]).write(dir.path(), "m-00002-of-00002.gguf");
    let e = GgufSet::open(dir.path().join("m-00001-of-00002.gguf")).unwrap_err();
    assert_msg(&e, &["split.tensors.count says 5", "hold 2"]);
}

#[test]
fn split_no_out_of_place() {
    let dir = TempDir::new().unwrap();
    shard(1, 2, 2, &["a"]).write(dir.path(), "m-00001-of-00002.gguf");
    shard(0, 2, 2, &["b"]).write(dir.path(), "m-00002-of-00002.gguf");
    let e = GgufSet::open(dir.path().join("m-00001-of-00002.gguf")).unwrap_err();
    assert_msg(&e, &["split.no is 1", "0-based", "expected 0"]);
}

#[test]
fn split_duplicate_tensor_across_shards() {
    let dir = TempDir::new().unwrap();
    shard(0, 2, 2, &["a"]).write(dir.path(), "m-00001-of-00002.gguf");
    shard(1, 2, 2, &["a"]).write(dir.path(), "m-00002-of-00002.gguf");
    let e = GgufSet::open(dir.path().join("m-00002-of-00002.gguf")).unwrap_err();
    assert!(matches!(e, GgufError::DuplicateTensor { .. }), "{e}");
    assert_msg(&e, &["across a split set"]);
}

#[test]
fn split_keys_in_a_file_without_a_shard_name() {
    let dir = TempDir::new().unwrap();
    let p = shard(0, 3, 3, &["a"]).write(dir.path(), "renamed.gguf");
    let e = GgufSet::open(p).unwrap_err();
    assert_msg(&e, &["split.count = 3", "cannot be found"]);
}

#[test]
fn split_shard_number_zero_in_name() {
    let dir = TempDir::new().unwrap();
    let p = shard(0, 1, 1, &["a"]).write(dir.path(), "m-00000-of-00001.gguf");
    assert_msg(&GgufSet::open(p).unwrap_err(), &["numbered 1..=1"]);
}
