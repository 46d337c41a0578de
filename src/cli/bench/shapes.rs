//! What `golden-lens bench` measures: the oracle's real-dims GEMM shapes, the expert weight
//! types, every decodable block type and the token counts.

use golden_lens::gguf::quant::block_decoder;
use golden_lens::gguf::GgmlType;

/// What a GEMM's weights are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Weights {
    /// f32 values in memory (the filler path, f32 parameters).
    F32,
    /// A file's blocks of this type (bf16 parameters, quantized experts).
    Stored(GgmlType),
}

impl Weights {
    pub(super) fn name(self) -> String {
        match self {
            Weights::F32 => "f32".into(),
            Weights::Stored(t) => t.name(),
        }
    }

    /// Bytes of an `n × k` weight.
    pub(super) fn bytes(self, n: usize, k: usize) -> usize {
        match self {
            Weights::F32 => n * k * 4,
            Weights::Stored(t) => {
                let (bv, bb, _) = block_decoder(t).expect("benchmarked types decode");
                n * k / bv * bb
            }
        }
    }
}

/// One real-dims GEMM of the oracle: `[m, k] × [n, k]^T`.
pub(super) struct Shape {
    pub(super) what: &'static str,
    pub(super) n: usize,
    pub(super) k: usize,
}

/// The dense projections of a V4.1-Flash block at real dims (dim 5120, 64 heads of 512, q rank
/// 1280, o rank 1024 in 8 groups, indexer 32 heads of 128).
pub(super) const ATTN_SHAPES: [Shape; 6] = [
    Shape {
        what: "attn.wq_a",
        n: 1280,
        k: 5120,
    },
    Shape {
        what: "attn.wq_b",
        n: 32768,
        k: 1280,
    },
    Shape {
        what: "attn.wkv",
        n: 512,
        k: 5120,
    },
    Shape {
        what: "attn.wo_a (group)",
        n: 1024,
        k: 4096,
    },
    Shape {
        what: "attn.wo_b",
        n: 5120,
        k: 8192,
    },
    Shape {
        what: "indexer.wq_b",
        n: 4096,
        k: 1280,
    },
];
/// f32 parameters: the ratio-r compressor and the router gate (upcast bf16).
pub(super) const F32_SHAPES: [Shape; 2] = [
    Shape {
        what: "compressor.wkv",
        n: 512,
        k: 5120,
    },
    Shape {
        what: "ffn.gate",
        n: 384,
        k: 5120,
    },
];
/// An expert's up and down projections (inter 2304).
pub(super) const EXPERT_SHAPES: [Shape; 2] = [
    Shape {
        what: "expert.w1/w3",
        n: 2304,
        k: 5120,
    },
    Shape {
        what: "expert.w2",
        n: 5120,
        k: 2304,
    },
];
/// The expert types the antirez layouts and llama.cpp quantizations use.
pub(super) const EXPERT_TYPES: [GgmlType; 6] = [
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Iq2Xxs,
    GgmlType::Mxfp4,
    GgmlType::Q8_0,
];
/// Every decodable type, for the dequantization table.
pub(super) const DEQUANT_TYPES: [GgmlType; 13] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Bf16,
    GgmlType::I8,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Iq2Xxs,
    GgmlType::Mxfp4,
];
/// Token counts: decode, a 16-token prefill, the largest prefill chunk.
pub(super) const TOKEN_COUNTS: [usize; 3] = [1, 16, 64];
