//! Hostile dump files: each gives a clear error naming the file and what is wrong, none panics,
//! and nothing a file merely claims is allocated (the 2^63 and 1 GB claims below would abort
//! the test process if they were).

mod import_common;
use golden_lens::import::{Dump, ImportError, NameMap, TensorValues};
use import_common::*;
use std::path::{Path, PathBuf};

/// Open `bytes` written as `name` in a scratch folder; the error text (the open must fail).
fn open_err(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let e = Dump::open(&path).expect_err("a hostile file must be refused");
    let text = e.to_string();
    assert!(text.contains(name), "the error names the file: {text}");
    text
}

/// A safetensors file from a header text and a buffer.
fn st(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A `.npy` with a hand-written version, header text and data.
fn npy(major: u8, header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = b"\x93NUMPY".to_vec();
    out.push(major);
    out.push(0);
    if major == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn safetensors_header_length_of_2_pow_63_is_refused_before_reading() {
    let d = scratch();
    let mut bytes = (1u64 << 63).to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let e = open_err(d.path(), "huge.safetensors", &bytes);
    assert!(e.contains("header length") && e.contains("limit"), "{e}");
}

#[test]
fn safetensors_header_past_the_end_and_short_files() {
    let d = scratch();
    let mut bytes = 1000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let e = open_err(d.path(), "cut.safetensors", &bytes);
    assert!(e.contains("only 2 follow"), "{e}");
    let e = open_err(d.path(), "tiny.safetensors", b"abc");
    assert!(e.contains("fewer than the 8-byte header length"), "{e}");
}

#[test]
fn safetensors_leading_whitespace_bad_json_and_duplicates() {
    let d = scratch();
    let e = open_err(d.path(), "ws.safetensors", &st(" {}", &[]));
    assert!(e.contains("leading whitespace"), "{e}");
    let e = open_err(d.path(), "json.safetensors", &st("{\"a\": ", &[]));
    assert!(e.contains("not a JSON object"), "{e}");
    let t = r#"{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
    let e = open_err(d.path(), "dup.safetensors", &st(t, &[0; 8]));
    assert!(e.contains("`x` appears twice"), "{e}");
}

#[test]
fn safetensors_unknown_dtype_is_named_with_its_tensor() {
    let d = scratch();
    let t = r#"{"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}}"#;
    let e = open_err(d.path(), "q.safetensors", &st(t, &[0; 2]));
    assert!(
        e.contains("tensor `w`") && e.contains("`Q4_K`") && e.contains("BF16"),
        "{e}"
    );
}

#[test]
fn safetensors_offsets_past_the_end_overlapping_or_overflowing() {
    let d = scratch();
    let t = r#"{"a":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}}"#;
    let e = open_err(d.path(), "past.safetensors", &st(t, &[0; 16]));
    assert!(e.contains("layout"), "{e}");
    let t = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    let e = open_err(d.path(), "overlap.safetensors", &st(t, &[0; 12]));
    assert!(e.contains("layout"), "{e}");
    let t = r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#;
    let e = open_err(d.path(), "overflow.safetensors", &st(t, &[0; 4]));
    assert!(e.contains("layout"), "{e}");
}

#[test]
fn npy_header_claim_of_1_gb_is_refused_before_reading() {
    let d = scratch();
    let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
    bytes.extend_from_slice(&(1u32 << 30).to_le_bytes());
    bytes.extend_from_slice(b"{'descr': '<f4'");
    let e = open_err(d.path(), "big.npy", &bytes);
    assert!(
        e.contains("1073741824 bytes claimed") && e.contains("limit"),
        "{e}"
    );
}

#[test]
fn npy_pickle_and_structured_dtypes_are_refused() {
    let d = scratch();
    let h = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }\n";
    let e = open_err(d.path(), "pickle.npy", &npy(1, h, &[0; 8]));
    assert!(e.contains("pickle"), "{e}");
    let h = "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }\n";
    let e = open_err(d.path(), "struct.npy", &npy(1, h, &[0; 4]));
    assert!(e.contains("structured"), "{e}");
}

#[test]
fn npy_shapes_that_overflow_or_do_not_fit_the_data() {
    let d = scratch();
    let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n";
    let e = open_err(d.path(), "ovf.npy", &npy(1, h, &[0; 4]));
    assert!(e.contains("overflows"), "{e}");
    let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551616,), }\n";
    let e = open_err(d.path(), "ovf64.npy", &npy(1, h, &[0; 4]));
    assert!(e.contains("64 bits"), "{e}");
    let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (100,), }\n";
    let e = open_err(d.path(), "short.npy", &npy(1, h, &[0; 40]));
    assert!(e.contains("needs 400 data bytes but 40 follow"), "{e}");
}

#[test]
fn npy_bad_magic_and_version() {
    let d = scratch();
    let e = open_err(d.path(), "magic.npy", b"\x93NUMPZ\x01\x00\x00\x00");
    assert!(e.contains("magic"), "{e}");
    let e = open_err(d.path(), "ver.npy", &npy(9, "{}", &[]));
    assert!(e.contains("9.0, expected 1.0, 2.0 or 3.0"), "{e}");
}

fn npz_of(dir: &Path, members: &[(&str, Vec<u8>)]) -> PathBuf {
    let path = dir.join("src.npz");
    let m: Vec<(String, Vec<u8>)> = members
        .iter()
        .map(|(n, b)| (n.to_string(), b.clone()))
        .collect();
    golden_lens::import::npz::write(&path, &m, false).unwrap();
    path
}

fn small_npy() -> Vec<u8> {
    golden_lens::session::export::npy_bytes(&[2], &TensorValues::F32(vec![1.0, 2.0]))
}

#[test]
fn npz_truncated_archive_is_refused() {
    let d = scratch();
    let bytes = std::fs::read(npz_of(d.path(), &[("a", small_npy())])).unwrap();
    let e = open_err(d.path(), "cut.npz", &bytes[..bytes.len() / 2]);
    assert!(e.contains("zip archive"), "{e}");
}

#[test]
fn npz_zip64_member_claiming_2_pow_62_bytes_is_refused() {
    use std::io::Write;
    let d = scratch();
    let path = d.path().join("z64.npz");
    let mut zw = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    zw.start_file("a.npy", opts).unwrap();
    zw.write_all(&small_npy()).unwrap();
    zw.finish().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    // Patch the central directory's ZIP64 extra field: uncompressed size -> 2^62.
    let cd = bytes
        .windows(4)
        .position(|w| w == b"PK\x01\x02")
        .expect("central directory");
    let name_len = u16::from_le_bytes([bytes[cd + 28], bytes[cd + 29]]) as usize;
    let extra_len = u16::from_le_bytes([bytes[cd + 30], bytes[cd + 31]]) as usize;
    let mut at = cd + 46 + name_len;
    let end = at + extra_len;
    let mut patched = false;
    while at + 4 <= end {
        let id = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let len = u16::from_le_bytes([bytes[at + 2], bytes[at + 3]]) as usize;
        if id == 1 {
            bytes[at + 4..at + 12].copy_from_slice(&(1u64 << 62).to_le_bytes());
            patched = true;
        }
        at += 4 + len;
    }
    assert!(patched, "the writer emitted a ZIP64 extra field");
    let e = open_err(d.path(), "z64-huge.npz", &bytes);
    assert!(
        e.contains("4611686018427387904") || e.contains("zip archive"),
        "{e}"
    );
}

#[test]
fn npz_members_must_be_npy_and_unique() {
    let d = scratch();
    let bytes = std::fs::read(npz_of(d.path(), &[("a", small_npy()), ("b", small_npy())])).unwrap();
    // Rename member b.npy to a.npy everywhere (same length).
    let mut dup = bytes.clone();
    for i in 0..dup.len().saturating_sub(5) {
        if &dup[i..i + 5] == b"b.npy" {
            dup[i] = b'a';
        }
    }
    let e = open_err(d.path(), "dup.npz", &dup);
    assert!(
        e.contains("appears twice") || e.contains("zip archive"),
        "{e}"
    );
    let mut txt = bytes;
    for i in 0..txt.len().saturating_sub(5) {
        if &txt[i..i + 5] == b"b.npy" {
            txt[i + 2..i + 5].copy_from_slice(b"txt");
        }
    }
    let e = open_err(d.path(), "txt.npz", &txt);
    assert!(e.contains("not a .npy member"), "{e}");
}

fn manifest_err(dir: &Path, manifest: &str) -> String {
    let path = dir.join("manifest.tsv");
    std::fs::write(&path, manifest).unwrap();
    let e = Dump::open(dir).expect_err("hostile manifest").to_string();
    assert!(e.contains("manifest.tsv") || e.contains(".bin"), "{e}");
    e
}

#[test]
fn manifest_paths_may_not_leave_the_folder() {
    let outer = scratch();
    let d = outer.path().join("dump");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(outer.path().join("secret.bin"), [0u8; 16]).unwrap();
    let e = manifest_err(&d, "name\tdtype\tdims\tfile\nx\tF32\t4\t../secret.bin\n");
    assert!(e.contains("leaves the manifest's folder"), "{e}");
    let e = manifest_err(&d, "name\tdtype\tdims\tfile\nx\tF32\t4\t/etc/passwd\n");
    assert!(e.contains("leaves the manifest's folder"), "{e}");
    std::os::unix::fs::symlink(outer.path().join("secret.bin"), d.join("link.bin")).unwrap();
    let e = manifest_err(&d, "name\tdtype\tdims\tfile\nx\tF32\t4\tlink.bin\n");
    assert!(e.contains("resolves outside"), "{e}");
}

#[test]
fn manifest_ranges_past_the_end_overlapping_or_overflowing() {
    let d = scratch();
    std::fs::write(d.path().join("x.bin"), [0u8; 16]).unwrap();
    let e = manifest_err(
        d.path(),
        "name\tdtype\tdims\tfile\toffset\nx\tF32\t4\tx.bin\t8\n",
    );
    assert!(e.contains("run past the end"), "{e}");
    let e = manifest_err(
        d.path(),
        "name\tdtype\tdims\tfile\toffset\na\tF32\t2\tx.bin\t0\nb\tF32\t2\tx.bin\t4\n",
    );
    assert!(e.contains("overlap tensor `a`"), "{e}");
    let e = manifest_err(
        d.path(),
        "name\tdtype\tdims\tfile\nx\tF32\t4294967296,4294967296\tx.bin\n",
    );
    assert!(e.contains("overflows"), "{e}");
    let e = manifest_err(d.path(), "name\tdtype\tdims\tfile\nx\tQ8_0\t4\tx.bin\n");
    assert!(e.contains("`Q8_0`"), "{e}");
}

#[test]
fn ds4_file_that_is_not_whole_f32s() {
    let d = scratch();
    std::fs::write(d.path().join("run_attn_out-0_pos0.bin"), [0u8; 6]).unwrap();
    let e = Dump::open(&d.path().join("run")).unwrap_err().to_string();
    assert!(
        e.contains("run_attn_out-0_pos0.bin") && e.contains("multiple of 4"),
        "{e}"
    );
    let e = Dump::open(&d.path().join("none")).unwrap_err().to_string();
    assert!(e.contains("no `none_NAME-IL_posPOS.bin`"), "{e}");
}

/// A canonical one-tensor safetensors dump holding `name` with `values` and `shape`.
fn one(dir: &Path, name: &str, shape: Vec<usize>, values: TensorValues) -> PathBuf {
    let path = dir.join("one.safetensors");
    golden_lens::import::safetensors::write(&path, &[(name.to_string(), shape, values)], &[])
        .unwrap();
    path
}

fn join_err(path: &Path) -> ImportError {
    let g = golden("v3");
    golden_lens::import::import(path, &NameMap::canonical(), &g).expect_err("misfit")
}

#[test]
fn fractional_floats_for_an_index_capture_are_refused() {
    let d = scratch();
    let mut v = vec![0.0f32; 96];
    v[5] = 2.5;
    let p = one(
        d.path(),
        "prefill12/L0.sa_topk_idxs",
        vec![1, 12, 8],
        TensorValues::F32(v),
    );
    let e = join_err(&p).to_string();
    assert!(
        e.contains("prefill12/L0.sa_topk_idxs") && e.contains("element 5 is 2.5"),
        "{e}"
    );
}

#[test]
fn integers_for_a_bf16_capture_and_wider_floats_are_told_apart() {
    let d = scratch();
    let p = one(
        d.path(),
        "decode12/embed",
        vec![1, 1, 64],
        TensorValues::I64(vec![1; 64]),
    );
    let e = join_err(&p).to_string();
    assert!(e.contains("integer data for a bf16 capture"), "{e}");
    // F32 data for a bf16 capture is fine.
    let p = one(
        d.path(),
        "decode12/embed",
        vec![1, 1, 64],
        TensorValues::F32(vec![0.5; 64]),
    );
    let g = golden("v3");
    assert!(golden_lens::import::import(&p, &NameMap::canonical(), &g).is_ok());
}

#[test]
fn a_shape_misfit_names_tensor_capture_and_both_shapes() {
    let d = scratch();
    let p = one(
        d.path(),
        "decode12/embed",
        vec![64, 1],
        TensorValues::F32(vec![0.5; 64]),
    );
    let _ = p;
    let p = one(
        d.path(),
        "prefill12/embed",
        vec![64, 12],
        TensorValues::F32(vec![0.5; 768]),
    );
    let e = join_err(&p).to_string();
    assert!(
        e.contains("one.safetensors")
            && e.contains("tensor `prefill12/embed`")
            && e.contains("[64, 12]")
            && e.contains("[1, 12, 64]"),
        "{e}"
    );
}

#[test]
fn bool_elements_other_than_0_or_1_are_refused_on_read() {
    let d = scratch();
    let t = r#"{"prefill12/shared.L4.candidates":{"dtype":"BOOL","shape":[1,12,12],"data_offsets":[0,144]}}"#;
    let mut data = vec![0u8; 144];
    data[7] = 2;
    let path = d.path().join("bool.safetensors");
    std::fs::write(&path, st(t, &data)).unwrap();
    let e = join_err(&path).to_string();
    assert!(e.contains("BOOL element 7 is 2"), "{e}");
}

#[test]
fn malformed_map_files_name_the_rule() {
    let e = NameMap::parse("m.toml", "[[rule]]\nmatch = '('\ncapture = 'x'\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("m.toml") && e.contains("rule 1") && e.contains("bad regex"),
        "{e}"
    );
    let e = NameMap::parse("m.toml", "rule = 3")
        .unwrap_err()
        .to_string();
    assert!(e.contains("m.toml"), "{e}");
    let e = NameMap::load("/nonexistent/map.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("neither a shipped map"), "{e}");
}
