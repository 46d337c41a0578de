//! Sparse real-layout synthesizer (spec §1.4-§1.6): the antirez Q2/Q4 tensor plan with the real
//! names, dims, types, order and 16 KiB alignment, and ds4-dialect metadata with the real
//! hyper-parameters and engram geometry. Tensor data are holes, so a 340 GB layout costs a few
//! MB of disk on a filesystem with sparse files. Lets the reader be tested on real geometry
//! (1046 tensors, engram tables past 150 GB) without downloading the model.

use super::deepseek41::{
    prime_offsets, Deepseek41Meta, Dialect, EngramMeta, EngramStorage, RopeScaling,
};
use super::error::Result;
use super::ggml_type::GgmlType;
use super::quant::EngramEncoding;
use super::writer::{GgufValue, GgufWriter};
use std::path::Path;

/// Which real file to imitate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RealLayout {
    /// `DeepSeek-V4.1-Flash-Q2.gguf`: IQ2_XXS gate/up, Q2_K down.
    AntirezQ2,
    /// `DeepSeek-V4.1-Flash-Q4.gguf`: Q4_K gate/up/down.
    AntirezQ4,
}

impl RealLayout {
    /// Parses `antirez-q2` / `antirez-q4`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "antirez-q2" => Some(Self::AntirezQ2),
            "antirez-q4" => Some(Self::AntirezQ4),
            _ => None,
        }
    }

    /// Size of the real file (spec §1.6; reproduced by this plan with the real 5,832,704-byte
    /// header, which this synthesizer does not copy).
    pub fn real_file_len(self) -> u64 {
        match self {
            Self::AntirezQ2 => 365_713_686_528,
            Self::AntirezQ4 => 518_596_067_328,
        }
    }

    /// Start of the data section in the real file.
    pub const REAL_DATA_OFFSET: u64 = 5_832_704;
}

/// The real model's geometry (spec §1.1).
pub mod real {
    /// Vocabulary size.
    pub const VOCAB: u64 = 129_280;
    /// Model width.
    pub const DIM: u64 = 5120;
    /// Backbone layers.
    pub const LAYERS: u64 = 40;
    /// Attention heads.
    pub const HEADS: u64 = 64;
    /// Head (and latent KV) width.
    pub const HEAD_DIM: u64 = 512;
    /// Low-rank q width.
    pub const Q_LORA: u64 = 1280;
    /// Per-group rank of the output projection.
    pub const O_LORA: u64 = 1024;
    /// Output projection groups.
    pub const O_GROUPS: u64 = 8;
    /// Routed experts.
    pub const EXPERTS: u64 = 384;
    /// Expert hidden width.
    pub const MOE_INTER: u64 = 2304;
    /// Hyper-connection copies.
    pub const HC: u64 = 4;
    /// Indexer heads.
    pub const INDEX_HEADS: u64 = 32;
    /// Indexer head width.
    pub const INDEX_HEAD_DIM: u64 = 128;
    /// Layers with a KV compressor (and indexer keys).
    pub const KV_SOURCE_LAYERS: [u64; 4] = [2, 8, 14, 20];
    /// Layers with an indexer query.
    pub const INDEX_SOURCE_LAYERS: [u64; 8] = [2, 8, 14, 20, 24, 28, 32, 36];
    /// Engram layers.
    pub const ENGRAM_LAYERS: [u64; 2] = [1, 14];
    /// Engram rows per layer (sum of that layer's 24 primes).
    pub const ENGRAM_ROWS: [u64; 2] = [384_006_168, 384_016_682];
    /// Compressed engram vocabulary.
    pub const ENGRAM_COMPRESSED_VOCAB: u64 = 99_092;
    /// Engram hash primes are the first unused primes above this.
    pub const ENGRAM_PRIME_FLOOR: u64 = 15_999_999;

    /// Compression ratio of layer `l`: `[0, 0] + [2]*18 + [1]*20`.
    pub fn compress_ratio(l: u64) -> u64 {
        match l {
            0 | 1 => 0,
            2..=19 => 2,
            _ => 1,
        }
    }
}

/// One tensor of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTensor {
    /// GGUF name.
    pub name: String,
    /// Dims in ggml `ne` order.
    pub dims: Vec<u64>,
    /// Stored type.
    pub ggml_type: GgmlType,
}

/// The tensor plan of the antirez converter: three globals, layers 0..39, the engram tables last.
pub fn antirez_plan(layout: RealLayout) -> Vec<PlannedTensor> {
    use real::*;
    use GgmlType::{F16, F32, I8, Q8_0};
    let (gate_up, down) = match layout {
        RealLayout::AntirezQ2 => (GgmlType::Iq2Xxs, GgmlType::Q2K),
        RealLayout::AntirezQ4 => (GgmlType::Q4K, GgmlType::Q4K),
    };
    let mut plan = Vec::with_capacity(1046);
    let mut push = |name: String, dims: &[u64], ggml_type: GgmlType| {
        plan.push(PlannedTensor {
            name,
            dims: dims.to_vec(),
            ggml_type,
        })
    };
    push("token_embd.weight".into(), &[DIM, VOCAB], F16);
    push("output_norm.weight".into(), &[DIM], F32);
    push("output.weight".into(), &[DIM, VOCAB], Q8_0);
    let hc_mix = HC * (HC + 2);
    for l in 0..LAYERS {
        let b = |s: &str| format!("blk.{l}.{s}");
        push(b("hc_attn_fn.weight"), &[HC * DIM, hc_mix], F16);
        push(b("hc_ffn_fn.weight"), &[HC * DIM, hc_mix], F16);
        push(b("hc_attn_base.weight"), &[hc_mix], F32);
        push(b("hc_ffn_base.weight"), &[hc_mix], F32);
        push(b("hc_attn_scale.weight"), &[3], F32);
        push(b("hc_ffn_scale.weight"), &[3], F32);
        push(b("attn_norm.weight"), &[DIM], F32);
        push(b("ffn_norm.weight"), &[DIM], F32);
        push(b("attn_sinks.weight"), &[HEADS], F32);
        push(b("attn_q_a.weight"), &[DIM, Q_LORA], Q8_0);
        push(b("attn_q_a_norm.weight"), &[Q_LORA], F32);
        push(b("attn_q_b.weight"), &[Q_LORA, HEADS * HEAD_DIM], Q8_0);
        push(b("attn_kv.weight"), &[DIM, HEAD_DIM], Q8_0);
        push(b("attn_kv_a_norm.weight"), &[HEAD_DIM], F32);
        let group_in = HEADS / O_GROUPS * HEAD_DIM;
        push(
            b("attn_output_a.weight"),
            &[group_in, O_GROUPS * O_LORA],
            Q8_0,
        );
        push(b("attn_output_b.weight"), &[O_GROUPS * O_LORA, DIM], Q8_0);
        if KV_SOURCE_LAYERS.contains(&l) {
            push(b("attn_compressor_kv.weight"), &[DIM, HEAD_DIM], F16);
            push(b("attn_compressor_norm.weight"), &[HEAD_DIM], F32);
            push(b("indexer.attn_k.weight"), &[HEAD_DIM, INDEX_HEAD_DIM], F16);
            push(b("indexer.k_norm.weight"), &[INDEX_HEAD_DIM], F32);
            if compress_ratio(l) > 1 {
                push(b("attn_compressor_gate.weight"), &[DIM, HEAD_DIM], F16);
            }
        }
        if INDEX_SOURCE_LAYERS.contains(&l) {
            push(
                b("indexer.attn_q_b.weight"),
                &[Q_LORA, INDEX_HEADS * INDEX_HEAD_DIM],
                F16,
            );
            push(b("indexer.proj.weight"), &[DIM, INDEX_HEADS], F16);
        }
        push(b("ffn_gate_inp.weight"), &[DIM, EXPERTS], F32);
        push(b("exp_probs_b.bias"), &[EXPERTS], F32);
        push(b("exp_probs_b_vl.bias"), &[EXPERTS], F32);
        push(b("ffn_gate_shexp.weight"), &[DIM, MOE_INTER], Q8_0);
        push(b("ffn_up_shexp.weight"), &[DIM, MOE_INTER], Q8_0);
        push(b("ffn_down_shexp.weight"), &[MOE_INTER, DIM], Q8_0);
        push(
            b("ffn_gate_exps.weight"),
            &[DIM, MOE_INTER, EXPERTS],
            gate_up,
        );
        push(b("ffn_up_exps.weight"), &[DIM, MOE_INTER, EXPERTS], gate_up);
        push(b("ffn_down_exps.weight"), &[MOE_INTER, DIM, EXPERTS], down);
        if ENGRAM_LAYERS.contains(&l) {
            push(b("engram_q_norm.weight"), &[DIM, HC], F32);
            push(b("engram_k_norm.weight"), &[DIM, HC], F32);
            push(b("engram_kv.weight"), &[24 * 256, (HC + 1) * DIM], F16);
        }
    }
    for (l, rows) in ENGRAM_LAYERS.iter().zip(ENGRAM_ROWS) {
        push(format!("blk.{l}.engram_embd.weight"), &[264, rows], I8);
    }
    plan
}

fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u64;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 1;
    }
    true
}

/// The engram hash primes of the real model: the first 48 primes above 15,999,999, 24 per
/// layer; each layer's sum is its row count.
pub fn real_engram_primes() -> Vec<u64> {
    let mut primes = Vec::with_capacity(48);
    let mut n = real::ENGRAM_PRIME_FLOOR;
    while primes.len() < 48 {
        n += 1;
        if is_prime(n) {
            primes.push(n);
        }
    }
    primes
}

/// Synthetic (not the real) multipliers: odd, below `INT64_MAX / compressed_vocab`, fixed.
fn synthetic_multipliers() -> Vec<u64> {
    let bound = i64::MAX as u64 / real::ENGRAM_COMPRESSED_VOCAB;
    (0..8u64)
        .map(|i| {
            let x = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (x % (bound / 2)) * 2 + 1
        })
        .collect()
}

/// ds4-dialect metadata with the real hyper-parameters (spec §1.2), written by the dialect's
/// own writer. Tokenizer strings, the token map and the multipliers are synthetic stand-ins
/// with the real counts and types.
pub fn antirez_metadata(w: &mut GgufWriter, layout: RealLayout) -> Result<()> {
    real_meta(layout).write(w)?;
    w.set_alignment(16384)?;
    let tokens: Vec<String> = (0..real::VOCAB).map(|i| format!("<t{i}>")).collect();
    w.add("tokenizer.ggml.model", GgufValue::string("gpt2"))?;
    w.add("tokenizer.ggml.pre", GgufValue::string("joyai-llm"))?;
    w.add("tokenizer.ggml.tokens", GgufValue::strings(&tokens))?;
    let types: Vec<i32> = (0..real::VOCAB)
        .map(|i| if i < 3 { 3 } else { 1 })
        .collect();
    w.add("tokenizer.ggml.token_type", GgufValue::i32s(&types))?;
    w.add("tokenizer.ggml.merges", GgufValue::strings(&["< t", "t 0"]))?;
    w.add("tokenizer.ggml.bos_token_id", GgufValue::U32(0))?;
    w.add("tokenizer.ggml.eos_token_id", GgufValue::U32(1))?;
    w.add("tokenizer.ggml.add_bos_token", GgufValue::Bool(true))?;
    w.add("tokenizer.ggml.add_eos_token", GgufValue::Bool(false))?;
    Ok(())
}

/// The real model's hyper-parameters and engram geometry as the ds4 converter stores them.
pub fn real_meta(layout: RealLayout) -> Deepseek41Meta {
    use real::*;
    let mut m = Deepseek41Meta::empty(Dialect::Ds4);
    m.name = Some("DeepSeek V4.1 Flash (golden-lens sparse layout)".into());
    m.vocab_size = VOCAB;
    m.hidden_size = DIM;
    m.moe_intermediate_size = MOE_INTER;
    m.n_layers = LAYERS;
    m.n_heads = HEADS;
    m.n_kv_heads = 1;
    m.head_dim = HEAD_DIM;
    m.rope_head_dim = 64;
    m.q_lora_rank = Q_LORA;
    m.o_lora_rank = O_LORA;
    m.o_groups = O_GROUPS;
    m.n_routed_experts = EXPERTS;
    m.n_shared_experts = 1;
    m.n_experts_per_tok = 6;
    m.max_position_embeddings = 1_048_576;
    m.sliding_window = 128;
    m.index_n_heads = INDEX_HEADS;
    m.index_head_dim = INDEX_HEAD_DIM;
    m.index_topk = 512;
    m.candidate_source_layer_id = Some(20);
    m.candidate_topk_blocks = Some(2048);
    m.candidate_block_size = Some(8);
    m.hc_mult = HC;
    m.hc_sinkhorn_iters = 20;
    m.rope_theta = 10_000.0;
    m.compress_rope_theta = 160_000.0;
    m.rms_norm_eps = f64::from(1e-20f32);
    m.hc_eps = f64::from(1e-6f32);
    m.swiglu_limit = Some(10.0);
    m.routed_scaling_factor = 1.5;
    m.scoring_func = Some("sqrtsoftplus".into());
    m.hidden_act = Some("silu".into());
    m.topk_method = Some("noaux_tc".into());
    m.norm_topk_prob = Some(true);
    m.compress_ratios = (0..LAYERS).map(compress_ratio).collect();
    m.kv_source_layer_ids = Some(KV_SOURCE_LAYERS.to_vec());
    m.index_source_layer_ids = Some(INDEX_SOURCE_LAYERS.to_vec());
    m.rope_scaling = Some(RopeScaling {
        factor: 16.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        original_max_position_embeddings: 65536.0,
    });
    m.hf_config_json = Some("{\"model_type\":\"deepseek_v41\",\"synthetic\":true}".into());
    m.quantization = Some(
        match layout {
            RealLayout::AntirezQ2 => "IQ2_XXS gate/up; Q2_K down; Q8_0 attention/shared/head",
            RealLayout::AntirezQ4 => "Q4_K gate/up/down; Q8_0 attention/shared/head",
        }
        .into(),
    );
    m.calibration = Some("none (synthetic)".into());
    let primes = real_engram_primes();
    let columns = primes.len() / ENGRAM_LAYERS.len();
    let offsets = prime_offsets(&primes, columns);
    m.engram = Some(EngramMeta {
        encoding: EngramEncoding::E4m3E8m0Row264,
        storage: EngramStorage::Embedded,
        layer_ids: ENGRAM_LAYERS.to_vec(),
        n_heads: 8,
        head_dim: 256,
        max_ngram_size: 4,
        compressed_vocab_size: ENGRAM_COMPRESSED_VOCAB,
        pad_id: 2,
        token_map: (0..VOCAB)
            .map(|t| (t % ENGRAM_COMPRESSED_VOCAB) as u32)
            .collect(),
        primes,
        offsets,
        multipliers: synthetic_multipliers(),
        rows: ENGRAM_ROWS.to_vec(),
    });
    m
}

/// Key of the padding string that brings the synthetic header (whose tokenizer strings are
/// shorter than the real ones) to the real file's data offset, so every tensor offset and the
/// file size equal the real file's.
pub const HEADER_PADDING_KEY: &str = "golden_lens.synth.header_padding";

fn sparse_writer(layout: RealLayout, padding: usize) -> Result<GgufWriter> {
    let mut w = GgufWriter::new();
    antirez_metadata(&mut w, layout)?;
    if padding > 0 {
        w.add(HEADER_PADDING_KEY, GgufValue::string(" ".repeat(padding)))?;
    }
    for t in antirez_plan(layout) {
        w.add_zero_tensor(&t.name, &t.dims, t.ggml_type)?;
    }
    Ok(w)
}

/// Writes the sparse layout to `path` (every tensor a hole), its header padded so the data
/// starts at the real file's offset (`REAL_DATA_OFFSET`). Returns the data offset.
pub fn write_sparse_layout(path: &Path, layout: RealLayout) -> Result<u64> {
    let mut w = sparse_writer(layout, 0)?;
    let unpadded = w.data_offset()?;
    if unpadded < RealLayout::REAL_DATA_OFFSET {
        // The data offset is a non-decreasing step function of the padding length: find the
        // shortest padding that reaches the real offset.
        let (mut lo, mut hi) = (
            1usize,
            (RealLayout::REAL_DATA_OFFSET - unpadded) as usize + 16_384,
        );
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if sparse_writer(layout, mid)?.data_offset()? < RealLayout::REAL_DATA_OFFSET {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        w = sparse_writer(layout, lo)?;
    }
    let data_offset = w.data_offset()?;
    w.write(path)?;
    Ok(data_offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_census_matches_the_real_files() {
        let plan = antirez_plan(RealLayout::AntirezQ2);
        assert_eq!(plan.len(), 1046);
        let count = |t: GgmlType| plan.iter().filter(|p| p.ggml_type == t).count();
        assert_eq!(count(GgmlType::F32), 493);
        assert_eq!(count(GgmlType::F16), 110);
        assert_eq!(count(GgmlType::Q8_0), 321);
        assert_eq!(count(GgmlType::Iq2Xxs), 80);
        assert_eq!(count(GgmlType::Q2K), 40);
        assert_eq!(count(GgmlType::I8), 2);
        let q4 = antirez_plan(RealLayout::AntirezQ4);
        assert_eq!(
            q4.iter().filter(|p| p.ggml_type == GgmlType::Q4K).count(),
            120
        );
    }

    #[test]
    fn real_primes_sum_to_the_real_rows() {
        let primes = real_engram_primes();
        assert_eq!(primes[0], 16_000_057);
        assert_eq!(primes[..24].iter().sum::<u64>(), real::ENGRAM_ROWS[0]);
        assert_eq!(primes[24..].iter().sum::<u64>(), real::ENGRAM_ROWS[1]);
    }

    #[test]
    fn plan_reproduces_the_real_offsets() {
        // With the real header (data at 5,832,704) the padded plan lands the engram tables and
        // the file end exactly where spec §1.6 says.
        let align = |x: u64| x.div_ceil(16384) * 16384;
        for layout in [RealLayout::AntirezQ2, RealLayout::AntirezQ4] {
            let mut offset = RealLayout::REAL_DATA_OFFSET;
            let mut engram_offsets = Vec::new();
            for t in antirez_plan(layout) {
                if t.name.ends_with("engram_embd.weight") {
                    engram_offsets.push(offset);
                }
                let n: u64 = t.dims.iter().product();
                let (bv, bb) = t.ggml_type.block_layout().unwrap();
                offset += align(n / bv as u64 * bb as u64);
            }
            assert_eq!(offset, layout.real_file_len(), "{layout:?}");
            if layout == RealLayout::AntirezQ2 {
                assert_eq!(engram_offsets, vec![162_955_640_832, 264_333_279_232]);
            }
        }
    }
}
