//! The GGUF writer: round trips through golden-lens's reader and through gguf-py's GGUFReader,
//! and refuses to build files the reader would reject.

mod gguf_common;

use gguf_common::*;
use golden_lens::gguf::info::value_to_json;
use golden_lens::gguf::{GgmlType, GgufFile, GgufValue, GgufWriter, MetaValue, ValueType};
use serde_json::{json, Value};
use std::path::Path;
use tempfile::TempDir;

fn q8_0_block(d_bits: u16, q: i8) -> Vec<u8> {
    let mut b = d_bits.to_le_bytes().to_vec();
    b.extend(std::iter::repeat_n(q as u8, 32));
    b
}

/// A writer with every value type, a nested array, and float, int8, Q8_0 and 3-D tensors.
fn sample(alignment: u32) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add("general.architecture", GgufValue::string("deepseek41"))
        .unwrap();
    w.set_alignment(alignment).unwrap();
    for (k, v) in [
        ("t.u8", GgufValue::U8(200)),
        ("t.i8", GgufValue::I8(-100)),
        ("t.u16", GgufValue::U16(60000)),
        ("t.i16", GgufValue::I16(-30000)),
        ("t.u32", GgufValue::U32(4_000_000_000)),
        ("t.i32", GgufValue::I32(-2_000_000_000)),
        ("t.f32", GgufValue::F32(0.1)),
        ("t.bool", GgufValue::Bool(true)),
        ("t.str", GgufValue::string("héllo")),
        ("t.u64", GgufValue::U64(u64::MAX)),
        ("t.i64", GgufValue::I64(i64::MIN)),
        ("t.f64", GgufValue::F64(1.0 / 3.0)),
        ("t.arr_u64", GgufValue::u64s(&[3, 1 << 47])),
        ("t.arr_str", GgufValue::strings(&["a", "", "ü"])),
        ("t.arr_f32", GgufValue::f32s(&[0.5, -2.0])),
        (
            "t.nested",
            GgufValue::Array(
                ValueType::Array,
                vec![GgufValue::i32s(&[1, 2]), GgufValue::i32s(&[3])],
            ),
        ),
    ] {
        w.add(k, v).unwrap();
    }
    w.add_tensor(
        "f32.weight",
        &[3, 2],
        GgmlType::F32,
        f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
    )
    .unwrap();
    w.add_tensor(
        "i8.weight",
        &[5],
        GgmlType::I8,
        vec![0x80, 0xff, 0, 1, 0x7f],
    )
    .unwrap();
    let mut q = q8_0_block(0x3800, 2); // d = 0.5
    q.extend(q8_0_block(0x4000, -3)); // d = 2
    w.add_tensor("q8.weight", &[64], GgmlType::Q8_0, q).unwrap();
    let experts: Vec<f32> = (0..2 * 3 * 2).map(|i| i as f32).collect();
    w.add_tensor(
        "blk.0.ffn_gate_exps.weight",
        &[2, 3, 2],
        GgmlType::F32,
        f32_bytes(&experts),
    )
    .unwrap();
    w
}

fn expected_values(name: &str) -> Vec<f32> {
    match name {
        "f32.weight" => vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        "i8.weight" => vec![-128.0, -1.0, 0.0, 1.0, 127.0],
        "q8.weight" => [vec![1.0; 32], vec![-6.0; 32]].concat(),
        _ => (0..12).map(|i| i as f32).collect(),
    }
}

#[test]
fn round_trips_through_our_reader() {
    for alignment in [1u32, 32, 64, 16384] {
        let dir = TempDir::new().unwrap();
        let p = dir.path().join("w.gguf");
        sample(alignment).write(&p).unwrap();
        assert!(!dir.path().join("w.gguf.tmp").exists());
        let f = GgufFile::open(&p).unwrap();
        assert_eq!(f.alignment(), alignment as u64);
        assert_eq!(f.file_len() % alignment as u64, 0, "file end is padded");
        assert_eq!(f.data_offset() % alignment as u64, 0);
        let keys: Vec<&str> = f.metadata().iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys[..3],
            ["general.architecture", "general.alignment", "t.u8"]
        );
        let v = |k: &str| value_to_json(&f, f.get(k).unwrap(), None).unwrap();
        assert_eq!(v("t.u64"), json!(u64::MAX));
        assert_eq!(v("t.i64"), json!(i64::MIN));
        assert_eq!(v("t.f32"), json!(f64::from(0.1f32)));
        assert_eq!(v("t.arr_u64"), json!([3, 1u64 << 47]));
        assert_eq!(v("t.nested"), json!([[1, 2], [3]]));
        assert_eq!(v("t.arr_str"), json!(["a", "", "ü"]));
        assert!(matches!(f.get("t.bool"), Some(MetaValue::Bool(true))));
        let mut prev_end = f.data_offset();
        for t in f.tensors() {
            assert_eq!(t.offset % alignment as u64, 0);
            assert!(t.offset >= prev_end);
            prev_end = t.offset + t.n_bytes.unwrap();
            assert_eq!(
                f.tensor_f32(&t.name).unwrap(),
                expected_values(&t.name),
                "{}",
                t.name
            );
        }
        assert_eq!(
            f.expert_f32("blk.0.ffn_gate_exps.weight", 1).unwrap(),
            (6..12).map(|i| i as f32).collect::<Vec<_>>()
        );
    }
}

#[test]
fn refuses_what_the_reader_would_reject() {
    let mut w = GgufWriter::new();
    assert!(w.set_alignment(0).is_err());
    assert!(w.set_alignment(48).is_err());
    assert!(w.add("general.alignment", GgufValue::U64(32)).is_err());
    w.add("k", GgufValue::U8(1)).unwrap();
    assert!(w
        .add("k", GgufValue::U8(2))
        .unwrap_err()
        .to_string()
        .contains("duplicate metadata key"));
    let mixed = GgufValue::Array(ValueType::U32, vec![GgufValue::U32(1), GgufValue::U64(2)]);
    assert!(w
        .add("mixed", mixed)
        .unwrap_err()
        .to_string()
        .contains("holds a uint64 element"));
    let e = w
        .add_tensor("t", &[4], GgmlType::F32, vec![0; 15])
        .unwrap_err();
    assert!(e.to_string().contains("needs 16"), "{e}");
    assert!(w
        .add_tensor("q", &[16], GgmlType::Q8_0, vec![0; 17])
        .is_err());
    assert!(w
        .add_tensor("d", &[1, 1, 1, 1, 1], GgmlType::F32, vec![0; 4])
        .is_err());
    assert!(w
        .add_tensor(&"n".repeat(64), &[1], GgmlType::F32, vec![0; 4])
        .is_err());
    assert!(w
        .add_tensor("u", &[1], GgmlType::Unknown(99), vec![0; 4])
        .is_err());
    w.add_tensor("t", &[1], GgmlType::F32, vec![0; 4]).unwrap();
    assert!(w.add_tensor("t", &[1], GgmlType::F32, vec![0; 4]).is_err());
}

fn check_python_view(dir: &Path, alignment: u32, python: &Path) {
    let p = dir.join("w.gguf");
    sample(alignment).write(&p).unwrap();
    let out = dir.join("py");
    std::fs::create_dir(&out).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/read_gguf_file.py");
    let o = std::process::Command::new(python)
        .arg(script)
        .arg(&p)
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read: Value =
        serde_json::from_slice(&std::fs::read(out.join("read.json")).unwrap()).unwrap();
    let f = GgufFile::open(&p).unwrap();
    assert_eq!(read["alignment"], alignment);
    assert_eq!(read["data_offset"], f.data_offset());
    let meta = read["metadata"].as_array().unwrap();
    assert_eq!(meta.len(), f.metadata().len());
    for (entry, py) in f.metadata().iter().zip(meta) {
        assert_eq!(py["key"], entry.key.as_str());
        assert_eq!(py["type"], entry.value.value_type().name());
        if py["value"].is_null() {
            continue; // nested arrays: gguf-py parses but does not decode them
        }
        assert_eq!(
            py["value"],
            value_to_json(&f, &entry.value, None).unwrap(),
            "{}",
            entry.key
        );
    }
    let tensors = read["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), f.tensors().len());
    for (i, (t, py)) in f.tensors().iter().zip(tensors).enumerate() {
        assert_eq!(py["name"], t.name.as_str());
        assert_eq!(py["type_id"], t.ggml_type.id());
        assert_eq!(py["dims"], json!(t.dims));
        assert_eq!(py["offset"], t.offset);
        assert_eq!(py["n_bytes"], t.n_bytes.unwrap());
        assert_eq!(
            read_f32_file(&out.join(format!("t{i}.f32"))),
            expected_values(&t.name),
            "{}",
            t.name
        );
    }
}

#[test]
fn gguf_py_reads_our_files() {
    let Some(python) = python_with_gguf() else {
        return;
    };
    for alignment in [1u32, 32, 16384] {
        let dir = TempDir::new().unwrap();
        check_python_view(dir.path(), alignment, &python);
    }
}
