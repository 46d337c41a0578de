//! Per shipped map, a dump written in that engine's convention from v3-full's own captures:
//! every mapped capture passes against v3, every golden capture the convention never names is
//! listed as missing, skipped and unmapped tensors are listed, and top-k rows written in another
//! order are compared as sets.

mod import_common;
use golden_lens::import::{Joined, TensorValues};
use golden_lens::session::Report;
use import_common::*;
use std::collections::HashMap;

/// The number of layers of the tiny fixture (ds4 writes it as the global nodes' `il`).
const TINY_LAYERS: usize = 6;

/// Reverse each row of `v` (rows of `width`): a top-k output in another order.
fn reversed_rows(v: &TensorValues, width: usize) -> TensorValues {
    match v {
        TensorValues::I64(x) => TensorValues::I64(
            x.chunks(width)
                .flat_map(|r| r.iter().rev().copied().collect::<Vec<_>>())
                .collect(),
        ),
        TensorValues::F32(x) => TensorValues::F32(
            x.chunks(width)
                .flat_map(|r| r.iter().rev().copied().collect::<Vec<_>>())
                .collect(),
        ),
    }
}

/// Every row the check compared passed, and what it missed is exactly the join's missing list.
fn assert_mapped_all_pass(report: &Report, joined_mapped: usize, joined_missing: usize) {
    assert_eq!(report.rows.len(), joined_mapped);
    let failing: Vec<_> = report
        .rows
        .iter()
        .filter(|r| !r.cmp.pass)
        .map(|r| format!("{} {}", r.regime, r.name))
        .collect();
    assert!(failing.is_empty(), "{failing:?}");
    assert_eq!(report.missing.len(), joined_missing);
}

/// The ggml node (with layer suffix) a capture is dumped under, if the deepseek41 graph has one.
fn ggml_node(capture: &str) -> Option<String> {
    let (layer, base) = match capture.strip_prefix("shared.") {
        Some(rest) => {
            let (l, b) = rest.split_once('.')?;
            return (b == "candidates" && l == "L4").then(|| "candidate_mask-4".to_string());
        }
        None => match capture.split_once('.') {
            Some((l, b)) if l.starts_with('L') => (Some(&l[1..]), b),
            _ => (None, capture),
        },
    };
    let node = match (layer, base) {
        (Some("0"), "h_in") => return Some("hc_init".into()),
        (Some("0"), "pre_mix_in") => return Some("hc_pre_init".into()),
        (None, "h_final") => return Some("hc_out".into()),
        (None, "head_in") => return Some("result_norm".into()),
        (None, "logits_full") => return Some("result_output".into()),
        (Some(_), "engram_embed") => "engram_embd",
        (Some(_), "engram_kv") => "engram_kv",
        (Some(_), "engram_out") => "engram_out",
        (Some(_), "attn_in") => "attn_norm",
        (Some(_), "attn_out") => "attn_out",
        (Some(_), "ffn_in") => "ffn_norm",
        (Some(_), "moe_indices") => "ffn_moe_topk",
        (Some(_), "moe_weights") => "ffn_moe_weights_scaled",
        (Some(_), "ffn_out") => "ffn_out",
        (Some(_), "h_out") => "l_last",
        _ => return None,
    };
    Some(format!("{node}-{}", layer?))
}

#[test]
fn ggml_raw_dump_with_a_ne_order_manifest() {
    let full = golden("v3-full");
    let v3 = golden("v3");
    let regimes: Vec<String> = full.regimes.iter().map(|r| r.name.clone()).collect();
    let dir = scratch();
    let mut manifest = String::from("name\tdtype\tdims\tfile\torder\n");
    let mut expected = 0;
    for c in full_captures(&full) {
        let Some(node) = ggml_node(&c.name) else {
            continue;
        };
        let occurrence = regimes.iter().position(|r| *r == c.regime).unwrap();
        let name = format!("{node}.{occurrence}");
        let width = *c.shape.last().unwrap();
        let (values, dtype) = match c.name.as_str() {
            // ggml's top-k order is not guaranteed: write the experts reversed, weights alike.
            n if n.ends_with("moe_indices") || n.ends_with("moe_weights") => {
                let v = reversed_rows(&c.values, width);
                let d = if n.ends_with("indices") { "I32" } else { "F32" };
                (v, d)
            }
            // The candidate mask as ggml adds it: 0 kept, -inf dropped.
            n if n.ends_with("candidates") => match &c.values {
                TensorValues::I64(v) => (
                    TensorValues::F32(
                        v.iter()
                            .map(|&x| if x == 1 { 0.0 } else { f32::NEG_INFINITY })
                            .collect(),
                    ),
                    "F32",
                ),
                _ => unreachable!(),
            },
            _ => (c.values.clone(), "F32"),
        };
        // ne order, and engram_embd flattened to [key_len * n_cols, n_tokens] as ggml has it.
        let mut ne: Vec<usize> = c.shape.iter().rev().copied().collect();
        if node.starts_with("engram_embd") {
            ne = vec![ne[0] * ne[1], ne[2]];
        }
        let file = format!("{name}.{}", if dtype == "I32" { "i32" } else { "f32" });
        std::fs::write(dir.path().join(&file), raw_bytes(&values)).unwrap();
        let dims: Vec<String> = ne.iter().map(|d| d.to_string()).collect();
        manifest += &format!("{name}\t{dtype}\t{}\t{file}\tggml\n", dims.join(","));
        expected += 1;
    }
    // Nodes with no golden counterpart: one skipped by rule, one no rule knows.
    std::fs::write(dir.path().join("hc_attn_pre-0.0.f32"), [0u8; 4 * 64 * 12]).unwrap();
    manifest += "hc_attn_pre-0.0\tF32\t64,12\thc_attn_pre-0.0.f32\tggml\n";
    std::fs::write(dir.path().join("my_probe-3.0.f32"), [0u8; 4]).unwrap();
    manifest += "my_probe-3.0\tF32\t1\tmy_probe-3.0.f32\tggml\n";
    std::fs::write(dir.path().join("manifest.tsv"), manifest).unwrap();

    let joined = join(dir.path(), "ggml", &v3);
    assert_eq!(joined.mapped(), expected);
    assert_eq!(joined.skipped.len(), 1);
    assert_eq!(joined.unmapped, vec!["my_probe-3.0".to_string()]);
    // Every moe row was written reversed and put back as a set; the weights moved with it.
    let moe = joined.regimes[0].get("L0.moe_indices").unwrap();
    assert_eq!(moe.rows_reordered, 12);
    let (mapped, missing) = (joined.mapped(), joined.missing.len());
    assert!(missing > 0 && missing + mapped == 443);
    assert_mapped_all_pass(&check(joined, &v3), mapped, missing);
}

/// The ds4 node a capture is dumped under (llama.cpp-style names).
fn ds4_node(capture: &str) -> Option<String> {
    match capture {
        "head_in" => return Some(format!("result_norm-{TINY_LAYERS}")),
        "logits_full" => return Some(format!("result_output-{TINY_LAYERS}")),
        _ => {}
    }
    let (l, base) = capture.split_once('.')?;
    let layer = l.strip_prefix('L')?;
    let node = match base {
        "attn_in" => "attn_norm",
        "attn_out" => "attn_out",
        "ffn_in" => "ffn_norm",
        "moe_indices" => "ffn_moe_topk",
        "moe_weights" => "ffn_moe_weights_scaled",
        "ffn_out" => "ffn_out",
        "h_out" => "l_last",
        _ => return None,
    };
    Some(format!("{node}-{layer}"))
}

#[test]
fn ds4_per_position_files_concatenate_into_regimes() {
    let full = golden("v3-full");
    let v3 = golden("v3");
    let starts: HashMap<&str, usize> =
        [("prefill12", 0), ("decode12", 12), ("decode13", 13)].into();
    let dir = scratch();
    let prefix = dir.path().join("metal_run");
    let mut expected = 0;
    for c in full_captures(&full) {
        let Some(node) = ds4_node(&c.name) else {
            continue;
        };
        let start = starts[c.regime.as_str()];
        let n_tokens = if c.regime == "prefill12" { 12 } else { 1 };
        let values = if c.name.ends_with("moe_indices") || c.name.ends_with("moe_weights") {
            reversed_rows(&c.values, 2)
        } else {
            c.values.clone()
        };
        let bytes = raw_bytes(&values);
        let ext = if matches!(values, TensorValues::I64(_)) {
            "i32"
        } else {
            "bin"
        };
        // One file per token position, as a decode-by-decode dump writes them.
        let row = bytes.len() / n_tokens;
        for t in 0..n_tokens {
            let file = format!("{}_{node}_pos{}.{ext}", prefix.display(), start + t);
            std::fs::write(file, &bytes[t * row..(t + 1) * row]).unwrap();
        }
        expected += 1;
    }
    std::fs::write(
        format!("{}_indexer_scores-2_pos12.bin", prefix.display()),
        [0u8; 8],
    )
    .unwrap();
    let joined = join(&prefix, "ds4", &v3);
    assert_eq!(joined.mapped(), expected);
    assert_eq!(joined.skipped.len(), 1);
    let logits = joined.regimes[0].get("logits_full").unwrap();
    assert_eq!(
        logits.tensors.len(),
        12,
        "prefill logits from 12 position files"
    );
    let (mapped, missing) = (joined.mapped(), joined.missing.len());
    assert_mapped_all_pass(&check(joined, &v3), mapped, missing);
}

#[test]
fn deepseek_reference_forward_hook_dump() {
    let full = golden("v3-full");
    let v3 = golden("v3");
    let regimes: Vec<String> = full.regimes.iter().map(|r| r.name.clone()).collect();
    let mut tensors = Vec::new();
    for c in full_captures(&full) {
        let Some(m) = module_of(&c.name) else {
            continue;
        };
        let pass = regimes.iter().position(|r| *r == c.regime).unwrap();
        tensors.push((
            format!("pass{pass}/model.{m}"),
            c.shape.clone(),
            c.values.clone(),
        ));
    }
    tensors.push((
        "pass0/model.layers.0.attn.wq_a.output0".into(),
        vec![1],
        TensorValues::F32(vec![0.0]),
    ));
    let dir = scratch();
    let path = dir.path().join("hooks.safetensors");
    golden_lens::import::safetensors::write(&path, &tensors, &[]).unwrap();
    let joined: Joined = join(&path, "deepseek-ref", &v3);
    assert_eq!(joined.mapped(), tensors.len() - 1);
    assert_eq!(joined.skipped.len(), 1);
    let (mapped, missing) = (joined.mapped(), joined.missing.len());
    assert_mapped_all_pass(&check(joined, &v3), mapped, missing);
}

#[test]
fn canonical_map_is_what_convert_writes() {
    // A ds4-style dump converted to canonical safetensors reads back with the canonical map
    // to the same captures.
    let full = golden("v3-full");
    let v3 = golden("v3");
    let dir = scratch();
    let prefix = dir.path().join("run");
    for c in full_captures(&full)
        .iter()
        .filter(|c| c.regime == "decode13")
    {
        if let Some(node) = ds4_node(&c.name) {
            let ext = if matches!(c.values, TensorValues::I64(_)) {
                "i32"
            } else {
                "bin"
            };
            std::fs::write(
                format!("{}_{node}_pos13.{ext}", prefix.display()),
                raw_bytes(&c.values),
            )
            .unwrap();
        }
    }
    let joined = join(&prefix, "ds4", &v3);
    let out = dir.path().join("canon.safetensors");
    golden_lens::import::safetensors::write(
        &out,
        &golden_lens::import::canonical_tensors(&joined),
        &[],
    )
    .unwrap();
    let back = join(&out, "canonical", &v3);
    assert_eq!(back.mapped(), joined.mapped());
    for (a, b) in joined.regimes.iter().zip(&back.regimes) {
        for (x, y) in a.captures.iter().zip(&b.captures) {
            assert_eq!(x.capture, y.capture);
        }
    }
}
