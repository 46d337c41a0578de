//! The shipped goldens load, have the capture counts of spec §16.2, regenerate all 226 weights
//! within the Atlas bar, and hold the input ids of spec §20.

use golden_lens::golden::names::{capture_kind, CaptureKind};
use golden_lens::golden::weights::{verify_all, WEIGHT_CK_REL};
use golden_lens::golden::{CaptureData, Golden};
use golden_lens::num::fixed_raw;
use std::path::PathBuf;

fn reference(file: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/golden/reference/")).join(file)
}

fn load(version: &str) -> Golden {
    let path = reference(&format!("ds41_tiny_golden.{version}.json"));
    Golden::load(&path).unwrap_or_else(|e| panic!("{version} failed to load: {e}"))
}

fn counts(g: &Golden) -> Vec<(String, usize)> {
    g.regimes
        .iter()
        .map(|r| (r.name.clone(), r.captures.len()))
        .collect()
}

fn expected_counts(prefill: usize, decode: usize) -> Vec<(String, usize)> {
    vec![
        ("prefill12".to_string(), prefill),
        ("decode12".to_string(), decode),
        ("decode13".to_string(), decode),
    ]
}

#[test]
fn v3_and_v2_have_147_148_148_captures() {
    for version in ["v2", "v3", "v3-full"] {
        let g = load(version);
        assert_eq!(counts(&g), expected_counts(147, 148), "{version}");
        assert_eq!(g.capture_count(), 443, "{version}");
        assert!(g.fixture.engram.is_some(), "{version} has fixture.engram");
    }
}

#[test]
fn v1_has_431_captures_and_no_engram_block() {
    let g = load("v1");
    assert_eq!(counts(&g), expected_counts(143, 144));
    assert_eq!(g.capture_count(), 431);
    assert!(g.fixture.engram.is_none());
}

#[test]
fn fixture_geometry_and_capture_order() {
    let g = load("v3");
    let f = &g.fixture;
    assert_eq!(
        (f.vocab_size, f.dim, f.n_layers, f.hc_mult, f.batch),
        (64, 64, 6, 4, 1)
    );
    assert_eq!(f.compress_ratios, vec![0, 0, 2, 2, 1, 1]);
    assert_eq!(f.candidate_source_layer, 4);
    assert_eq!(f.beta_fast, 32.0);
    assert_eq!(f.raw.keys().next().map(String::as_str), Some("vocab_size"));
    assert!(f.raw.contains_key("torch"));
    let engram = f.engram.as_ref().expect("v3 has fixture.engram");
    assert_eq!(engram.num_embeddings, vec![462, 630]);
    assert_eq!(engram.offsets[1], vec![0, 97, 198, 301, 408, 517]);
    assert_eq!(engram.scales[1].len(), 630);
    let prefill = g.regime("prefill12").expect("prefill12");
    let names: Vec<&str> = prefill
        .captures
        .iter()
        .take(4)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["input_ids", "engram_hashes", "embed", "L0.h_in"]);
    assert_eq!(
        prefill.captures.last().map(|c| c.name.as_str()),
        Some("logits_full")
    );
    let shapes = [
        ("shared.L2.compress_kv", vec![1, 6, 32]),
        ("shared.L4.compress_kv", vec![1, 12, 32]),
        ("engram_hashes", vec![1, 12, 2, 6]),
        ("logits_full", vec![1, 12, 64]),
    ];
    for (name, shape) in shapes {
        assert_eq!(
            prefill.get(name).map(|c| c.shape.clone()),
            Some(shape),
            "{name}"
        );
    }
    assert_eq!(g.weights_meta.len(), 226);
    assert_eq!(g.weights_meta[0].name, "embed.weight");
    assert_eq!(g.weights_meta[225].name, "head.weight");
}

#[test]
fn v3_full_is_all_stride_one_and_v3_has_full_l0() {
    let g = load("v3-full");
    for r in &g.regimes {
        for c in &r.captures {
            assert_eq!(c.stride, 1, "{} {}", r.name, c.name);
            assert_eq!(c.sample_len(), c.n, "{} {}", r.name, c.name);
        }
    }
    let v3 = load("v3");
    let h_in = v3
        .regime("prefill12")
        .and_then(|r| r.get("L0.h_in"))
        .expect("L0.h_in");
    assert_eq!((h_in.stride, h_in.n), (1, 3072));
    assert_eq!(h_in.full_f32().map(|v| v.len()), Some(3072));
    let v2 = load("v2");
    let h_in = v2
        .regime("prefill12")
        .and_then(|r| r.get("L0.h_in"))
        .expect("L0.h_in");
    assert_eq!(h_in.stride, 257);
}

#[test]
fn capture_data_types_follow_the_catalogue() {
    for version in ["v1", "v2", "v3"] {
        let g = load(version);
        let (mut ints, mut others) = (0, 0);
        for r in &g.regimes {
            for c in &r.captures {
                let kind = capture_kind(&c.name);
                assert_ne!(
                    kind,
                    CaptureKind::Other,
                    "{version}: {} is catalogued",
                    c.name
                );
                assert_eq!(kind.is_int(), c.is_int(), "{version}: {}", c.name);
                if c.is_int() {
                    ints += 1;
                } else {
                    others += 1;
                }
            }
        }
        assert_eq!(ints, 65, "{version}");
        assert_eq!(ints + others, g.capture_count());
    }
}

#[test]
fn all_226_weights_regenerate_for_every_version() {
    for version in ["v1", "v2", "v3"] {
        let g = load(version);
        let checks = verify_all(&g);
        assert_eq!(checks.len(), 226, "{version}");
        let failed: Vec<_> = checks.iter().filter(|c| !c.ok).collect();
        assert!(failed.is_empty(), "{version}: {failed:?}");
        assert!(checks.iter().all(|c| c.rel_err <= WEIGHT_CK_REL));
    }
}

#[test]
fn lcg_probe_is_the_filler_stream() {
    let g = load("v3");
    assert_eq!(g.fixture.lcg_probe.len(), 8);
    for (i, &v) in g.fixture.lcg_probe.iter().enumerate() {
        assert_eq!(v, fixed_raw("probe", i as u64), "lcg_probe[{i}]");
    }
}

#[test]
fn input_ids_are_the_spec_20_values() {
    let expected: [(&str, &[i64]); 3] = [
        ("prefill12", &[2, 17, 47, 13, 32, 59, 39, 29, 42, 31, 36, 6]),
        ("decode12", &[27]),
        ("decode13", &[8]),
    ];
    for version in ["v1", "v2", "v3"] {
        let g = load(version);
        for (regime, ids) in expected {
            let capture = g
                .regime(regime)
                .and_then(|r| r.get("input_ids"))
                .expect("input_ids");
            assert_eq!(
                capture.data,
                CaptureData::Int(ids.to_vec()),
                "{version} {regime}"
            );
            assert_eq!(capture.shape, vec![1, ids.len()]);
        }
    }
}

/// The four reference goldens, as golden/reference/README.md lists them.
const REFERENCE_FILES: [&str; 4] = [
    "ds41_tiny_golden.v1.json",
    "ds41_tiny_golden.v2.json",
    "ds41_tiny_golden.v3.json",
    "ds41_tiny_golden.v3-full.json",
];

/// The copies in golden/reference are byte for byte the files whose sha256 the README records
/// (the provenance table is only worth something if the files are the ones it names).
#[test]
fn reference_goldens_match_their_recorded_sha256() {
    let readme =
        std::fs::read_to_string(reference("README.md")).expect("golden/reference/README.md");
    for file in REFERENCE_FILES {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{file}` |")))
            .unwrap_or_else(|| panic!("README.md has no row for {file}"));
        let recorded = row
            .split('`')
            .rfind(|s| s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit()))
            .unwrap_or_else(|| panic!("README.md row of {file} has no sha256: {row}"));
        let out = std::process::Command::new("sha256sum")
            .arg(reference(file))
            .output()
            .expect("sha256sum (coreutils) runs");
        assert!(out.status.success(), "sha256sum {file} failed");
        let actual = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            actual.split_whitespace().next(),
            Some(recorded),
            "{file} differs from the README's sha256"
        );
    }
}

/// The embedded default golden is DeepSeek's v3-full file, unchanged.
#[test]
fn the_embedded_default_is_the_v3_full_reference() {
    use golden_lens::golden::embedded::{default_golden, DEFAULT_GOLDEN_JSON};
    let file =
        std::fs::read_to_string(reference("ds41_tiny_golden.v3-full.json")).expect("v3-full");
    assert!(
        DEFAULT_GOLDEN_JSON == file,
        "the embedded text is not v3-full"
    );
    let g = default_golden().expect("embedded golden");
    assert_eq!(g.version(), golden_lens::golden::GoldenVersion::V3Full);
    assert_eq!(g.capture_count(), 443);
}
