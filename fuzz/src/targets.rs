//! The body of every fuzz target: one function per parser, taking the raw input. The
//! cargo-fuzz binaries in `fuzz_targets/` call these, and so does the stable replay test
//! (`tests/fuzz_replay.rs`, which includes this file), so a saved crash replays through exactly
//! the code that found it.
//!
//! A target returns normally on any input: parsers must answer bad input with an error. A panic
//! (including a failed assertion below, where a target checks a property) is a finding.

use golden_lens::gguf::ggml_type::GgmlType;
use golden_lens::gguf::info::build_report;
use golden_lens::gguf::quant::{
    block_decoder, dequantize, dequantize_engram_rows_with, dequantize_reference, EngramEncoding,
};
use golden_lens::gguf::{Deepseek41Meta, GgufFile, GgufSet, MetaValue};
use golden_lens::golden::Golden;
use golden_lens::import::{npy, npz, raw, safetensors, NameMap};
use golden_lens::model::params::param_list;
use golden_lens::model::{GgufSource, WeightSource};
use std::path::{Path, PathBuf};

/// The most values a target decodes from one input (the inputs are a few kB; this keeps one
/// execution cheap).
const MAX_VALUES: usize = 1 << 16;

/// Array entries a target reads back from one metadata array.
const ARRAY_PEEK: u64 = 64;

/// A target's body.
pub type Target = fn(&[u8]);

/// Every target, by name: what the fuzz binaries are called and the replay test's corpus
/// folders (`fuzz/corpus/NAME`, `fuzz/artifacts/NAME`, `tests/data/fuzz/crashes/NAME`).
pub const TARGETS: &[(&str, Target)] = &[
    ("golden_parse", golden_parse),
    ("gguf_file", gguf_file),
    ("gguf_model", gguf_model),
    ("dequant", dequant),
    ("engram_rows", engram_rows),
    ("import_dump", import_dump),
    ("name_map", name_map),
    #[cfg(feature = "gpu")]
    ("shader_set", shader_set),
];

/// A scratch file for the path-based readers, one per process and name (fuzzers run one
/// input at a time per process).
fn scratch(name: &str, data: &[u8]) -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("golden-lens-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let path = dir.join(name);
    std::fs::write(&path, data).ok()?;
    Some(path)
}

/// `Golden::parse` on UTF-8 input (the loader's only entry; `Golden::load` reads a file into a
/// string first), then the summary `golden info` prints.
pub fn golden_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(g) = Golden::parse(text, Path::new("fuzz.json")) {
        let _ = g.regimes.len();
        let _ = golden_lens::model::ModelConfig::from_fixture(&g.fixture);
    }
}

/// The GGUF reader: header, every metadata value (arrays peeked), every tensor's byte range;
/// then the split set, `gguf info`'s report and the deepseek41 dialect reader.
pub fn gguf_file(data: &[u8]) {
    let Some(path) = scratch("input.gguf", data) else {
        return;
    };
    if let Ok(f) = GgufFile::open(&path) {
        for entry in f.metadata() {
            if let MetaValue::Array(arr) = &entry.value {
                let _ = f.array_values(arr, Some(ARRAY_PEEK));
            }
        }
        for t in f.tensors() {
            let _ = (t.byte_range(), t.row_bytes(), t.n_rows());
        }
    }
    if let Ok(set) = GgufSet::open(&path) {
        let _ = build_report(&set);
        let _ = Deepseek41Meta::from_set(&set);
    }
}

/// Parameters whose first row `gguf_model` reads (the tiny models have a few hundred).
const PARAMS_READ: usize = 32;

/// A GGUF opened as a model (dialect, tensor table against the configuration, engram tables),
/// then the first row of the first parameters.
pub fn gguf_model(data: &[u8]) {
    let Some(path) = scratch("model.gguf", data) else {
        return;
    };
    let Ok((source, model)) = GgufSource::open(&path) else {
        return;
    };
    let Ok(params) = param_list(&model.cfg) else {
        return;
    };
    for p in params.iter().take(PARAMS_READ) {
        let row_values: usize = p.shape.iter().skip(1).product();
        if row_values <= MAX_VALUES {
            let _ = source.rows(&p.name, &[0]);
        }
    }
}

/// Every block type golden-lens decodes, on arbitrary block bytes: the first byte picks the
/// type, the rest are whole blocks. The fast decoders must give the reference's bits.
pub fn dequant(data: &[u8]) {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let types: Vec<GgmlType> = (0..64)
        .map(GgmlType::from_id)
        .filter(|&t| block_decoder(t).is_some())
        .collect();
    let ty = types[usize::from(pick) % types.len()];
    let Some((values, block_bytes)) = ty.block_layout() else {
        return;
    };
    let blocks = (bytes.len() / block_bytes).min(MAX_VALUES / values);
    let bytes = &bytes[..blocks * block_bytes];
    let mut fast = vec![0f32; blocks * values];
    let mut reference = vec![0f32; blocks * values];
    let a = dequantize(ty, bytes, &mut fast);
    let b = dequantize_reference(ty, bytes, &mut reference);
    assert_eq!(
        a.is_ok(),
        b.is_ok(),
        "{ty}: one decoder refused, the other did not"
    );
    for (i, (x, y)) in fast.iter().zip(&reference).enumerate() {
        assert!(
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
            "{ty} value {i}: fast {x:e} ({:#x}) vs reference {y:e} ({:#x})",
            x.to_bits(),
            y.to_bits()
        );
    }
}

/// The engram row decoders on arbitrary rows: the first byte picks the encoding, the second
/// the head dim (a multiple of 32), the rest are rows (a short tail is a refused input).
pub fn engram_rows(data: &[u8]) {
    let [pick, dim, rest @ ..] = data else {
        return;
    };
    let head_dim = 32 * (u32::from(*dim % 16) + 1);
    let encodings = [
        EngramEncoding::E4m3E8m0Row264,
        EngramEncoding::E4m3E8m0Row { values: head_dim },
        EngramEncoding::Q4KRow144,
        EngramEncoding::Lloyd4E5m3Row136,
        EngramEncoding::Ggml(GgmlType::F32),
        EngramEncoding::Ggml(GgmlType::Bf16),
        EngramEncoding::Ggml(GgmlType::Q8_0),
        EngramEncoding::Ggml(GgmlType::Q4K),
    ];
    let encoding = encodings[usize::from(*pick) % encodings.len()];
    let values = encoding.row_values(u64::from(head_dim)) as usize;
    let Some(row_bytes) = encoding.row_bytes_for(values as u64) else {
        return;
    };
    let rows = (rest.len() / row_bytes.max(1) as usize).min(MAX_VALUES / values.max(1));
    // The claimed row count is the input's, whole or not: a mismatch must be refused.
    let claimed = rows + usize::from(rest.len() % 7 == 0);
    let mut out = vec![0f32; claimed * values];
    let _ = dequantize_engram_rows_with(&encoding, values, rest, &mut out);
}

/// The capture-dump readers: the first byte picks safetensors, npy, npz or a manifest (TSV or
/// JSON) and the rest is the file.
pub fn import_dump(data: &[u8]) {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let name = [
        "dump.safetensors",
        "dump.npy",
        "dump.npz",
        "manifest.tsv",
        "manifest.json",
    ][usize::from(pick) % 5];
    let Some(path) = scratch(name, bytes) else {
        return;
    };
    let _ = match pick % 5 {
        0 => safetensors::read(&path),
        1 => npy::read(&path),
        2 => npz::read(&path),
        _ => raw::read_manifest(&path),
    };
}

/// The TOML name maps of `captures import`.
pub fn name_map(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = NameMap::parse("fuzz.toml", text);
    }
}

/// A user-supplied shader set (`--shaders DIR`) with one edited file: the first byte picks the
/// file (`common.wgsl` or one kernel family's), the rest is its text. The edited set goes
/// through the check `ShaderSet::from_dir` runs on every family ([`ShaderSet::validate_family`]:
/// naga parse + validate with the prelude, then the entry points, workgroup sizes, bindings and
/// uniform size against what the Rust side dispatches); no GPU device is created. Only the
/// edited family is checked (the others are the embedded ones, which validate), and a prelude
/// edit is checked against the family the pick byte's high part names, so one execution costs
/// two naga parses rather than eighteen. A refusal must name the file it is about.
#[cfg(feature = "gpu")]
pub fn shader_set(data: &[u8]) {
    let Some((set, family)) = shader_input_set(data) else {
        return;
    };
    if let Err(e) = set.validate_family(family) {
        let shown = e.rendered();
        assert!(shown.contains(".wgsl"), "the error names no file: {shown}");
    }
}

/// The edited set of a `shader_set` input and the family to check; `None` for an empty input or
/// one that is not UTF-8 (the loader reads files as text and refuses those with an I/O error).
#[cfg(feature = "gpu")]
pub fn shader_input_set(
    data: &[u8],
) -> Option<(
    golden_lens::gpu::ShaderSet,
    &'static golden_lens::gpu::exec::Family,
)> {
    use golden_lens::gpu::exec::FAMILIES;
    use golden_lens::gpu::{ShaderOrigin, ShaderSet};
    let (&pick, text) = data.split_first()?;
    let text = std::str::from_utf8(text).ok()?;
    let files = FAMILIES.len() + 1;
    let index = usize::from(pick) % files;
    let mut set = ShaderSet::embedded();
    let (file, family) = match index.checked_sub(1) {
        None => (
            &mut set.common,
            FAMILIES[usize::from(pick) / files % FAMILIES.len()],
        ),
        Some(f) => (&mut set.families[f], FAMILIES[f]),
    };
    file.text = text.to_string();
    file.origin = ShaderOrigin::File(PathBuf::from(format!("fuzz/{}.wgsl", file.family)));
    Some((set, family))
}
