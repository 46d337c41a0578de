//! Shared helpers of the import tests: the reference goldens, v3-full's own captures as dump
//! tensors, and a check of an imported dump against a golden through the session.
#![allow(dead_code)]

use golden_lens::golden::Golden;
use golden_lens::import::{self, Joined, NameMap, TensorValues};
use golden_lens::model::ModelConfig;
use golden_lens::session::{self, CheckOptions, Report};
use std::path::{Path, PathBuf};

/// A reference golden shipped in the repository (golden/reference/).
pub fn reference(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden/reference")
        .join(name)
}

pub fn golden(version: &str) -> Golden {
    Golden::load(&reference(&format!("ds41_tiny_golden.{version}.json"))).expect("golden loads")
}

/// One capture of a golden as a dump would hold it.
#[derive(Debug, Clone)]
pub struct Cap {
    pub regime: String,
    pub name: String,
    pub shape: Vec<usize>,
    pub values: TensorValues,
}

/// Every capture of a full golden (v3-full) with its whole tensor.
pub fn full_captures(g: &Golden) -> Vec<Cap> {
    let mut out = Vec::new();
    for r in &g.regimes {
        for c in &r.captures {
            let values = if c.is_int() {
                TensorValues::I64(c.full_i64().expect("full golden"))
            } else {
                TensorValues::F32(c.full_f32().expect("full golden"))
            };
            out.push(Cap {
                regime: r.name.clone(),
                name: c.name.clone(),
                shape: c.shape.clone(),
                values,
            });
        }
    }
    out
}

/// `caps` in canonical names.
pub fn canonical(caps: &[Cap]) -> Vec<(String, Vec<usize>, TensorValues)> {
    caps.iter()
        .map(|c| {
            (
                format!("{}/{}", c.regime, c.name),
                c.shape.clone(),
                c.values.clone(),
            )
        })
        .collect()
}

/// Join the dump at `path` with `g` through `map` (a shipped name or a file).
pub fn join(path: &Path, map: &str, g: &Golden) -> Joined {
    let map = NameMap::load(map).expect("map loads");
    import::import(path, &map, g).expect("dump imports").1
}

/// The imported dump checked against `g` as a backend (chained; invariants on).
pub fn check(joined: Joined, g: &Golden) -> Report {
    let cfg = ModelConfig::from_fixture(&g.fixture).expect("config");
    let mut backend = import::ImportedBackend::for_config(joined, &cfg, session::step_of_capture);
    let opts = CheckOptions {
        invariants: Some(cfg),
        ..CheckOptions::default()
    };
    session::run_check(g, &mut backend, &opts).expect("check runs")
}

/// A fresh scratch folder.
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Little-endian bytes of `values` as f32 (floats) or i32 (ints), as raw engine dumps hold them.
pub fn raw_bytes(values: &TensorValues) -> Vec<u8> {
    match values {
        TensorValues::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        TensorValues::I64(v) => v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
    }
}

/// The module call (`pass{N}/{module}.{output|input}{i}`) of DeepSeek's model.py that carries a
/// capture, where one does.
pub fn module_of(capture: &str) -> Option<String> {
    match capture {
        "embed" => return Some("embed.output0".into()),
        "h_final" => return Some("norm.input0".into()),
        "head_in" => return Some("norm.output0".into()),
        _ => {}
    }
    if let Some(rest) = capture.strip_prefix("shared.") {
        let (l, b) = rest.split_once('.')?;
        return (b == "topk_idxs").then(|| format!("layers.{}.attn.indexer.output0", &l[1..]));
    }
    let (l, base) = capture.split_once('.')?;
    let l = l.strip_prefix('L')?;
    let m = match base {
        "h_in" => "input0",
        "pre_mix_in" => "input2",
        "h_out" => "output0",
        "pre_mix_out" => "output1",
        "attn_in" => "attn_norm.output0",
        "attn_out" => "attn.output0",
        "ffn_in" => "ffn_norm.output0",
        "ffn_out" => "ffn.output0",
        "moe_weights" => "ffn.gate.output0",
        "moe_indices" => "ffn.gate.output1",
        "engram_in" => "engram.input0",
        "engram_out" => "engram.output0",
        "engram_embed" => "engram.embed.output0",
        "engram_kv" => "engram.wkv.output0",
        _ => return None,
    };
    Some(format!("layers.{l}.{m}"))
}
