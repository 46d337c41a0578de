//! Tensor names: GGUF names of both deepseek41 dialects (spec §1.4) and the reference model's
//! parameter names (`layers.3.attn.wq_a.weight`, ds41-reference §4.3), mapped both ways.

use super::deepseek41::Dialect;

/// Whether `name` is an engram table (`blk.N.engram_embd.weight`): these are read by row with
/// positioned reads and never memory-mapped.
pub fn is_engram_table(name: &str) -> bool {
    name.ends_with("engram_embd.weight")
}

/// Reference suffix (after `layers.N.`) and GGUF suffix (after `blk.N.`) of the per-layer
/// tensors that are named the same in both dialects.
const LAYER_NAMES: &[(&str, &str)] = &[
    ("hc_attn_fn", "hc_attn_fn.weight"),
    ("hc_ffn_fn", "hc_ffn_fn.weight"),
    ("hc_attn_base", "hc_attn_base.weight"),
    ("hc_ffn_base", "hc_ffn_base.weight"),
    ("hc_attn_scale", "hc_attn_scale.weight"),
    ("hc_ffn_scale", "hc_ffn_scale.weight"),
    ("attn.attn_sink", "attn_sinks.weight"),
    ("attn.wq_a.weight", "attn_q_a.weight"),
    ("attn.q_norm.weight", "attn_q_a_norm.weight"),
    ("attn.wq_b.weight", "attn_q_b.weight"),
    ("attn.wkv.weight", "attn_kv.weight"),
    ("attn.kv_norm.weight", "attn_kv_a_norm.weight"),
    ("attn.wo_a.weight", "attn_output_a.weight"),
    ("attn.wo_b.weight", "attn_output_b.weight"),
    ("attn.compressor.wkv.weight", "attn_compressor_kv.weight"),
    (
        "attn.compressor.wgate.weight",
        "attn_compressor_gate.weight",
    ),
    ("attn.compressor.norm.weight", "attn_compressor_norm.weight"),
    ("attn.indexer.wq_b.weight", "indexer.attn_q_b.weight"),
    ("attn.indexer.weights_proj.weight", "indexer.proj.weight"),
    ("attn.indexer.wk.weight", "indexer.attn_k.weight"),
    ("attn.indexer.k_norm.weight", "indexer.k_norm.weight"),
    ("ffn.gate.weight", "ffn_gate_inp.weight"),
    ("ffn.gate.bias", "exp_probs_b.bias"),
    ("ffn.gate.bias_vl", "exp_probs_b_vl.bias"),
    ("ffn.shared_experts.w1.weight", "ffn_gate_shexp.weight"),
    ("ffn.shared_experts.w3.weight", "ffn_up_shexp.weight"),
    ("ffn.shared_experts.w2.weight", "ffn_down_shexp.weight"),
    ("attn_norm.weight", "attn_norm.weight"),
    ("ffn_norm.weight", "ffn_norm.weight"),
];

/// Engram projections whose GGUF names differ by dialect: (reference, ds4, llama.cpp).
const ENGRAM_NAMES: &[(&str, &str, &str)] = &[
    ("engram.q_weight", "engram_q_norm.weight", "engram_q.weight"),
    ("engram.k_weight", "engram_k_norm.weight", "engram_k.weight"),
    ("engram.wkv.weight", "engram_kv.weight", "engram_wkv.weight"),
];

/// Merged expert tensors: (reference projection, GGUF suffix). w1 = gate, w3 = up, w2 = down.
const EXPERT_NAMES: &[(&str, &str)] = &[
    ("w1", "ffn_gate_exps.weight"),
    ("w3", "ffn_up_exps.weight"),
    ("w2", "ffn_down_exps.weight"),
];

/// Global tensors: (reference, GGUF).
const GLOBAL_NAMES: &[(&str, &str)] = &[
    ("embed.weight", "token_embd.weight"),
    ("norm.weight", "output_norm.weight"),
    ("head.weight", "output.weight"),
];

/// Which part of a GGUF tensor a reference parameter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorPart {
    /// The whole tensor (or, with an expert index, one expert slab).
    Whole,
    /// The FP8 codes of an engram table (bytes 0..256 of each ds4 row).
    EngramCodes,
    /// The E8M0 scales of an engram table (bytes 256..264 of each ds4 row).
    EngramScales,
}

/// Where a reference parameter lives in a GGUF of a given dialect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufLocation {
    /// GGUF tensor name.
    pub tensor: String,
    /// Expert index inside a merged 3-D expert tensor.
    pub expert: Option<u64>,
    /// Which part of the tensor.
    pub part: TensorPart,
}

/// What a GGUF tensor is in the reference model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReferenceTarget {
    /// Exactly one reference parameter.
    Param(String),
    /// A merged expert tensor; expert `e` is `layers.{layer}.ffn.experts.{e}.{proj}.weight`.
    Experts { layer: u64, proj: &'static str },
    /// An engram table: `layers.{layer}.engram.embed.weight` (values) and, in the ds4 dialect,
    /// `layers.{layer}.engram.embed.scale` (scales) in one tensor.
    EngramTable { layer: u64 },
}

impl ReferenceTarget {
    /// The reference name of expert `expert` for an `Experts` target.
    pub fn expert_param(&self, expert: u64) -> Option<String> {
        match self {
            ReferenceTarget::Experts { layer, proj } => {
                Some(format!("layers.{layer}.ffn.experts.{expert}.{proj}.weight"))
            }
            _ => None,
        }
    }
}

/// Splits `prefix.N.rest` into (N, rest).
fn split_layer<'a>(name: &'a str, prefix: &str) -> Option<(u64, &'a str)> {
    let rest = name.strip_prefix(prefix)?.strip_prefix('.')?;
    let (num, tail) = rest.split_once('.')?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) || num.len() > 6 {
        return None;
    }
    Some((num.parse().ok()?, tail))
}

/// Maps a reference parameter name to its GGUF tensor in `dialect`, or `None` when the
/// parameter has no GGUF counterpart (e.g. the engram scales of the llama.cpp dialect, which
/// are folded into the re-quantized table).
pub fn reference_to_gguf(dialect: Dialect, reference: &str) -> Option<GgufLocation> {
    let whole = |tensor: String| GgufLocation {
        tensor,
        expert: None,
        part: TensorPart::Whole,
    };
    if let Some((_, g)) = GLOBAL_NAMES.iter().find(|(r, _)| *r == reference) {
        return Some(whole(g.to_string()));
    }
    let (layer, rest) = split_layer(reference, "layers")?;
    if let Some((_, g)) = LAYER_NAMES.iter().find(|(r, _)| *r == rest) {
        return Some(whole(format!("blk.{layer}.{g}")));
    }
    if let Some((_, ds4, llama)) = ENGRAM_NAMES.iter().find(|(r, _, _)| *r == rest) {
        let g = match dialect {
            Dialect::Ds4 => ds4,
            Dialect::LlamaCpp => llama,
        };
        return Some(whole(format!("blk.{layer}.{g}")));
    }
    let table = format!("blk.{layer}.engram_embd.weight");
    match (rest, dialect) {
        ("engram.embed.weight", Dialect::Ds4) => {
            return Some(GgufLocation {
                tensor: table,
                expert: None,
                part: TensorPart::EngramCodes,
            })
        }
        ("engram.embed.weight", Dialect::LlamaCpp) => return Some(whole(table)),
        ("engram.embed.scale", Dialect::Ds4) => {
            return Some(GgufLocation {
                tensor: table,
                expert: None,
                part: TensorPart::EngramScales,
            })
        }
        ("engram.embed.scale", Dialect::LlamaCpp) => return None,
        _ => {}
    }
    let expert_rest = rest.strip_prefix("ffn.experts.")?;
    let (e, tail) = expert_rest.split_once('.')?;
    if e.is_empty() || !e.bytes().all(|b| b.is_ascii_digit()) || e.len() > 6 {
        return None;
    }
    let expert: u64 = e.parse().ok()?;
    let proj = tail.strip_suffix(".weight")?;
    let (_, g) = EXPERT_NAMES.iter().find(|(p, _)| *p == proj)?;
    Some(GgufLocation {
        tensor: format!("blk.{layer}.{g}"),
        expert: Some(expert),
        part: TensorPart::Whole,
    })
}

/// Maps a GGUF tensor name of `dialect` to what it is in the reference model, or `None` for
/// tensors the reference does not have.
pub fn gguf_to_reference(dialect: Dialect, gguf: &str) -> Option<ReferenceTarget> {
    if let Some((r, _)) = GLOBAL_NAMES.iter().find(|(_, g)| *g == gguf) {
        return Some(ReferenceTarget::Param(r.to_string()));
    }
    let (layer, rest) = split_layer(gguf, "blk")?;
    if let Some((r, _)) = LAYER_NAMES.iter().find(|(_, g)| *g == rest) {
        return Some(ReferenceTarget::Param(format!("layers.{layer}.{r}")));
    }
    let engram = ENGRAM_NAMES.iter().find(|(_, ds4, llama)| match dialect {
        Dialect::Ds4 => *ds4 == rest,
        Dialect::LlamaCpp => *llama == rest,
    });
    if let Some((r, _, _)) = engram {
        return Some(ReferenceTarget::Param(format!("layers.{layer}.{r}")));
    }
    if rest == "engram_embd.weight" {
        return Some(ReferenceTarget::EngramTable { layer });
    }
    let (proj, _) = EXPERT_NAMES.iter().find(|(_, g)| *g == rest)?;
    Some(ReferenceTarget::Experts { layer, proj })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_names_map_both_ways() {
        for dialect in [Dialect::Ds4, Dialect::LlamaCpp] {
            for reference in [
                "embed.weight",
                "head.weight",
                "layers.3.attn.wq_a.weight",
                "layers.0.hc_attn_fn",
                "layers.2.attn.indexer.weights_proj.weight",
                "layers.14.engram.wkv.weight",
                "layers.1.engram.q_weight",
                "layers.39.ffn.gate.bias_vl",
            ] {
                let loc = reference_to_gguf(dialect, reference).unwrap();
                assert_eq!(loc.expert, None);
                assert_eq!(
                    gguf_to_reference(dialect, &loc.tensor),
                    Some(ReferenceTarget::Param(reference.to_string())),
                    "{reference} via {}",
                    loc.tensor
                );
            }
        }
        assert_eq!(
            reference_to_gguf(Dialect::Ds4, "layers.3.attn.wq_a.weight")
                .unwrap()
                .tensor,
            "blk.3.attn_q_a.weight"
        );
        assert_eq!(
            reference_to_gguf(Dialect::LlamaCpp, "layers.1.engram.wkv.weight")
                .unwrap()
                .tensor,
            "blk.1.engram_wkv.weight"
        );
        assert_eq!(
            reference_to_gguf(Dialect::Ds4, "layers.1.engram.wkv.weight")
                .unwrap()
                .tensor,
            "blk.1.engram_kv.weight"
        );
    }

    #[test]
    fn experts_and_engram_tables() {
        let loc = reference_to_gguf(Dialect::Ds4, "layers.7.ffn.experts.383.w2.weight").unwrap();
        assert_eq!(loc.tensor, "blk.7.ffn_down_exps.weight");
        assert_eq!(loc.expert, Some(383));
        let target = gguf_to_reference(Dialect::Ds4, "blk.7.ffn_down_exps.weight").unwrap();
        assert_eq!(
            target.expert_param(383).as_deref(),
            Some("layers.7.ffn.experts.383.w2.weight")
        );
        let scales = reference_to_gguf(Dialect::Ds4, "layers.14.engram.embed.scale").unwrap();
        assert_eq!(scales.part, TensorPart::EngramScales);
        assert_eq!(
            reference_to_gguf(Dialect::LlamaCpp, "layers.14.engram.embed.scale"),
            None
        );
        assert_eq!(
            gguf_to_reference(Dialect::LlamaCpp, "blk.14.engram_embd.weight"),
            Some(ReferenceTarget::EngramTable { layer: 14 })
        );
        // A ds4 engram name is not a llama.cpp name, and unknown names map to nothing.
        assert_eq!(
            gguf_to_reference(Dialect::LlamaCpp, "blk.1.engram_q_norm.weight"),
            None
        );
        assert_eq!(
            gguf_to_reference(Dialect::Ds4, "blk.x.attn_q_a.weight"),
            None
        );
        assert_eq!(
            reference_to_gguf(Dialect::Ds4, "layers.1.ffn.experts..w1.weight"),
            None
        );
        assert!(is_engram_table("blk.14.engram_embd.weight"));
        assert!(!is_engram_table("blk.14.engram_kv.weight"));
    }
}
