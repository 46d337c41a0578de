//! Capture names and kinds (spec §16.2, §16.3): which dtype a capture holds and how its name
//! splits into layer, shared-slot flag and base name. The comparator picks its policy from this.

use std::fmt;

/// What a capture holds, which decides how it is compared (spec §16.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaptureKind {
    /// A bf16 tensor carried as f32 (streams, projections, KV rows, norms).
    Bf16,
    /// A float32 tensor (hyper-connection mixes, `pre_mix_*`, `moe_weights`, `logits_full`).
    F32,
    /// Integer row indices where -1 means absent (`sa_topk_idxs`, `shared.*.topk_idxs`,
    /// `moe_indices`): compared exactly, plus per-row set agreement.
    Index,
    /// A 0/1 block mask stored as int32 (`shared.*.candidates`).
    Mask,
    /// Engram n-gram hash ids (`engram_hashes`, `L*.engram_hash_ids`).
    Hash,
    /// Token ids (`input_ids`).
    Ids,
    /// A name outside the catalogue; the comparator decides by the data type.
    Other,
}

impl CaptureKind {
    /// True for the kinds stored as JSON integers in a golden.
    pub fn is_int(self) -> bool {
        matches!(self, Self::Index | Self::Mask | Self::Hash | Self::Ids)
    }
    /// True for the kinds stored as JSON floats in a golden.
    pub fn is_float(self) -> bool {
        matches!(self, Self::Bf16 | Self::F32)
    }
    /// Short lowercase label for reports (`bf16`, `f32`, `index`, ...).
    pub fn label(self) -> &'static str {
        match self {
            Self::Bf16 => "bf16",
            Self::F32 => "f32",
            Self::Index => "index",
            Self::Mask => "mask",
            Self::Hash => "hash",
            Self::Ids => "ids",
            Self::Other => "other",
        }
    }
}

/// A capture name split into its parts: `L3.sa_q` -> layer 3, base `sa_q`;
/// `shared.L4.candidates` -> layer 4, shared, base `candidates`; `logits_full` -> no layer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CaptureName {
    /// The block (or shared-slot source layer) the capture belongs to, if any.
    pub layer: Option<usize>,
    /// True for the shared compressed-attention slots (`shared.L*.…`).
    pub shared: bool,
    /// The name without the `shared.` and `L<n>.` prefixes.
    pub base: String,
}

impl fmt::Display for CaptureName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shared {
            f.write_str("shared.")?;
        }
        if let Some(layer) = self.layer {
            write!(f, "L{layer}.")?;
        }
        f.write_str(&self.base)
    }
}

/// Split a capture name into layer, shared flag and base. Never fails: a name without a
/// well-formed `L<digits>.` prefix keeps everything (after `shared.`) in `base`.
pub fn parse_capture_name(name: &str) -> CaptureName {
    let (shared, rest) = match name.strip_prefix("shared.") {
        Some(rest) => (true, rest),
        None => (false, name),
    };
    if let Some(after_l) = rest.strip_prefix('L') {
        if let Some((digits, base)) = after_l.split_once('.') {
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && !base.is_empty()
            {
                if let Ok(layer) = digits.parse::<usize>() {
                    return CaptureName {
                        layer: Some(layer),
                        shared,
                        base: base.to_string(),
                    };
                }
            }
        }
    }
    CaptureName {
        layer: None,
        shared,
        base: rest.to_string(),
    }
}

/// The kind of a capture by name, from the catalogue in spec §16.3.
pub fn capture_kind(name: &str) -> CaptureKind {
    let parsed = parse_capture_name(name);
    let base = parsed.base.as_str();
    if parsed.shared {
        return match base {
            "compress_kv" | "index_k" => CaptureKind::Bf16,
            "topk_idxs" => CaptureKind::Index,
            "candidates" => CaptureKind::Mask,
            _ => CaptureKind::Other,
        };
    }
    match (parsed.layer.is_some(), base) {
        (false, "input_ids") => CaptureKind::Ids,
        (false, "engram_hashes") => CaptureKind::Hash,
        (false, "embed" | "h_final" | "head_in") => CaptureKind::Bf16,
        (false, "logits_full") => CaptureKind::F32,
        (true, "engram_hash_ids") => CaptureKind::Hash,
        (true, "sa_topk_idxs" | "moe_indices") => CaptureKind::Index,
        (
            true,
            "pre_mix_in" | "pre_mix_out" | "attn_pre" | "attn_post" | "attn_comb" | "ffn_pre"
            | "ffn_post" | "ffn_comb" | "moe_weights",
        ) => CaptureKind::F32,
        (
            true,
            "h_in" | "attn_in" | "sa_q" | "sa_kv" | "sa_o" | "attn_out" | "ffn_in" | "ffn_out"
            | "h_out" | "engram_in" | "engram_embed" | "engram_kv" | "engram_out",
        ) => CaptureKind::Bf16,
        _ => CaptureKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_layer_shared_and_plain_names() {
        let n = parse_capture_name("L3.sa_q");
        assert_eq!(
            (n.layer, n.shared, n.base.as_str()),
            (Some(3), false, "sa_q")
        );
        let n = parse_capture_name("shared.L4.candidates");
        assert_eq!(
            (n.layer, n.shared, n.base.as_str()),
            (Some(4), true, "candidates")
        );
        let n = parse_capture_name("logits_full");
        assert_eq!(
            (n.layer, n.shared, n.base.as_str()),
            (None, false, "logits_full")
        );
        let n = parse_capture_name("Lx.foo");
        assert_eq!((n.layer, n.base.as_str()), (None, "Lx.foo"));
        assert_eq!(
            parse_capture_name("shared.L2.index_k").to_string(),
            "shared.L2.index_k"
        );
    }

    #[test]
    fn kinds_follow_the_catalogue() {
        assert_eq!(capture_kind("input_ids"), CaptureKind::Ids);
        assert_eq!(capture_kind("engram_hashes"), CaptureKind::Hash);
        assert_eq!(capture_kind("L1.engram_hash_ids"), CaptureKind::Hash);
        assert_eq!(capture_kind("L0.sa_topk_idxs"), CaptureKind::Index);
        assert_eq!(capture_kind("shared.L5.topk_idxs"), CaptureKind::Index);
        assert_eq!(capture_kind("L2.moe_indices"), CaptureKind::Index);
        assert_eq!(capture_kind("shared.L4.candidates"), CaptureKind::Mask);
        assert_eq!(capture_kind("logits_full"), CaptureKind::F32);
        assert_eq!(capture_kind("L0.attn_comb"), CaptureKind::F32);
        assert_eq!(capture_kind("L5.pre_mix_out"), CaptureKind::F32);
        assert_eq!(capture_kind("L0.moe_weights"), CaptureKind::F32);
        assert_eq!(capture_kind("L0.attn_in"), CaptureKind::Bf16);
        assert_eq!(capture_kind("shared.L2.compress_kv"), CaptureKind::Bf16);
        assert_eq!(capture_kind("embed"), CaptureKind::Bf16);
        assert_eq!(capture_kind("L4.engram_kv"), CaptureKind::Bf16);
        assert_eq!(capture_kind("something_new"), CaptureKind::Other);
        assert_eq!(capture_kind("sa_q"), CaptureKind::Other);
    }
}
