//! The llama.cpp PR / ik_llama dialect (spec §1.3): llama.cpp's `LLM_KV_*` names under
//! `deepseek41.*`, with the fallbacks its loaders apply (and a warning for each).

use super::keys::{Stored, LLAMA};
use super::{Deepseek41Meta, Dialect, KeyReader, KeyWriter};
use crate::gguf::error::Result;
use crate::gguf::GgufValue;

/// ik_llama's fallback when `hyper_connection.sinkhorn_iterations` is absent (spec §1.3).
pub const LLAMA_DEFAULT_SINKHORN_ITERS: u64 = 3;

/// The released geometry's candidate prefilter, which loaders fall back to when a llama.cpp
/// file stores no candidate keys (the public GGUFs predate them): `topk_blocks` blocks of
/// `block_size`, the source being the first ratio-1 index source (layer 20).
pub const RELEASED_CANDIDATE_TOPK_BLOCKS: u64 = 2048;
/// See [`RELEASED_CANDIDATE_TOPK_BLOCKS`].
pub const RELEASED_CANDIDATE_BLOCK_SIZE: u64 = 8;

/// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_*` numbers and the scoring names they mean
/// (4 is the deepseek4 ports' `SQRT_SOFTPLUS`).
const GATING_FUNCS: [(u64, &str); 3] = [(1, "softmax"), (2, "sigmoid"), (4, "sqrtsoftplus")];

/// Prefix of the scoring name of a gating number this table does not know.
const OTHER_GATING: &str = "expert_gating_func=";

fn rope_keys() -> [&'static str; 4] {
    [
        LLAMA.rope_scaling_factor,
        LLAMA.rope_scaling_beta_fast,
        LLAMA.rope_scaling_beta_slow,
        LLAMA.rope_scaling_original,
    ]
}

/// Reads every llama.cpp hyper-parameter (the engram constants are read separately).
pub(super) fn read(k: &KeyReader, warnings: &mut Vec<String>) -> Result<Deepseek41Meta> {
    let mut m = Deepseek41Meta::empty(Dialect::LlamaCpp);
    k.scalars(LLAMA.scalars, &mut m)?;
    if let Some(v) = k.opt_u64(LLAMA.value_length)? {
        if v != m.head_dim {
            return Err(k.bad(
                &k.key(LLAMA.value_length),
                format!(
                    "{v} differs from attention.key_length {}; V4.1 shares one latent for K and V",
                    m.head_dim
                ),
            ));
        }
    }
    m.norm_topk_prob = k.opt_bool(LLAMA.expert_weights_norm)?;
    m.scoring_func = k.opt_u64(LLAMA.expert_gating_func)?.map(|g| {
        GATING_FUNCS
            .iter()
            .find(|(n, _)| *n == g)
            .map_or_else(|| format!("{OTHER_GATING}{g}"), |(_, s)| s.to_string())
    });
    m.compress_ratios = k.u64s(LLAMA.compress_ratios)?;
    read_candidate_keys(k, &mut m, warnings)?;
    m.hc_sinkhorn_iters = match k.opt_u64(LLAMA.sinkhorn_iterations)? {
        Some(v) => v,
        None => {
            warnings.push(format!(
                "{} is absent: ik_llama silently uses {LLAMA_DEFAULT_SINKHORN_ITERS}; the real model uses 20",
                k.key(LLAMA.sinkhorn_iterations)
            ));
            LLAMA_DEFAULT_SINKHORN_ITERS
        }
    };
    m.hc_eps = match k.opt_f64(LLAMA.hc_epsilon)? {
        Some(v) => v,
        None => {
            warnings.push(format!(
                "{} is absent: ik_llama silently uses the RMS norm epsilon ({:e}); the real model uses 1e-6",
                k.key(LLAMA.hc_epsilon),
                m.rms_norm_eps
            ));
            m.rms_norm_eps
        }
    };
    if let Some(limits) = k.opt_f64s(LLAMA.swiglu_clamp_exp)? {
        if let Some(&first) = limits.first() {
            if limits.iter().all(|&l| l == first) {
                m.swiglu_limit = Some(first);
            }
        }
        m.swiglu_limits_per_layer = limits;
    } else {
        warnings.push(format!(
            "{} is absent: a loader would run without the SwiGLU clamp (10.0 in the real model)",
            k.key(LLAMA.swiglu_clamp_exp)
        ));
    }
    m.rope_scaling = k.rope_scaling(rope_keys())?;
    m.vocab_size = match k.opt_u64(LLAMA.vocab_size)? {
        Some(v) => v,
        None => match k.file.get_array(super::keys::TOKENIZER_TOKENS)? {
            Some(arr) => arr.count,
            None => return Err(k.missing(k.key(LLAMA.vocab_size))),
        },
    };
    Ok(m)
}

/// Reads the three candidate keys (each under its spelling or one alias; a key and its alias
/// must not disagree), all three or none. With none, the released block count and size are
/// used with a warning, and the source layer is left to the model builder (the first ratio-1
/// index source, which needs the tensor table).
fn read_candidate_keys(
    k: &KeyReader,
    m: &mut Deepseek41Meta,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let mut values = [None; 3];
    for (slot, (key, aliases)) in values.iter_mut().zip(LLAMA.candidate) {
        let mut found: Option<(String, u64)> = None;
        for name in std::iter::once(key).chain(aliases.iter().copied()) {
            if let Some(v) = k.opt_u64(name)? {
                match &found {
                    Some((first, w)) if *w != v => {
                        return Err(k.bad(&k.key(name), format!("{v} disagrees with {first} = {w}")))
                    }
                    Some(_) => {}
                    None => found = Some((k.key(name), v)),
                }
            }
        }
        *slot = found.map(|(_, v)| v);
    }
    let [(source, _), (topk, _), (block, _)] = LLAMA.candidate;
    match values {
        [Some(s), Some(t), Some(b)] => {
            m.candidate_source_layer_id = Some(s);
            m.candidate_topk_blocks = Some(t);
            m.candidate_block_size = Some(b);
        }
        [None, None, None] => {
            warnings.push(format!(
                "no candidate-prefilter keys ({}, {}, {} or their aliases): falling back to the \
                 released geometry ({RELEASED_CANDIDATE_TOPK_BLOCKS} blocks of \
                 {RELEASED_CANDIDATE_BLOCK_SIZE}, source = the first ratio-1 index source), as \
                 the loaders that run V4.1 do",
                k.key(source),
                k.key(topk),
                k.key(block)
            ));
            m.candidate_topk_blocks = Some(RELEASED_CANDIDATE_TOPK_BLOCKS);
            m.candidate_block_size = Some(RELEASED_CANDIDATE_BLOCK_SIZE);
        }
        partial => {
            let missing: Vec<String> = partial
                .iter()
                .zip(LLAMA.candidate)
                .filter(|(v, _)| v.is_none())
                .map(|(_, (key, _))| k.key(key))
                .collect();
            return Err(k.bad(
                &missing[0],
                format!(
                    "the candidate prefilter needs all three keys or none; missing {}",
                    missing.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Writes every llama.cpp hyper-parameter of `m`: integers `UINT32`, floats `FLOAT32`, the
/// compression ratios `INT32`, the candidate keys (when the source layer is set) in the forks'
/// spelling, and the keys ik_llama would otherwise default (sinkhorn iterations, HC epsilon,
/// SwiGLU clamps) explicitly.
pub(super) fn write(w: &mut KeyWriter, m: &Deepseek41Meta) -> Result<()> {
    w.scalars(LLAMA.scalars, m)?;
    w.u32(LLAMA.value_length, m.head_dim)?;
    w.u32(LLAMA.vocab_size, m.vocab_size)?;
    if let Some(name) = &m.scoring_func {
        let gating = GATING_FUNCS
            .iter()
            .find(|(_, s)| s == name)
            .map(|(n, _)| *n)
            .or_else(|| name.strip_prefix(OTHER_GATING)?.parse().ok())
            .ok_or_else(|| {
                w.misfit(
                    LLAMA.expert_gating_func,
                    format!("scoring function {name:?} has no llama.cpp gating number"),
                )
            })?;
        w.u32(LLAMA.expert_gating_func, gating)?;
    }
    if let Some(b) = m.norm_topk_prob {
        w.put(LLAMA.expert_weights_norm, GgufValue::Bool(b))?;
    }
    w.u32(LLAMA.sinkhorn_iterations, m.hc_sinkhorn_iters)?;
    w.f32(LLAMA.hc_epsilon, m.hc_eps)?;
    let limits: Vec<f32> = match (&m.swiglu_limits_per_layer[..], m.swiglu_limit) {
        // One clamp for all layers: the per-layer array llama.cpp stores, one entry per
        // backbone layer (bounded by the compression ratios the meta also holds).
        ([], Some(limit)) => {
            let n = usize::try_from(m.n_layers).map_or(usize::MAX, |n| n);
            vec![limit as f32; n.min(m.compress_ratios.len())]
        }
        (per_layer, _) => per_layer.iter().map(|&l| l as f32).collect(),
    };
    if !limits.is_empty() {
        w.put(LLAMA.swiglu_clamp_exp, GgufValue::f32s(&limits))?;
    }
    w.i32s(LLAMA.compress_ratios, &m.compress_ratios)?;
    if let Some(source) = m.candidate_source_layer_id {
        let [(source_key, _), (topk_key, _), (block_key, _)] = LLAMA.candidate;
        let (Some(topk), Some(block)) = (m.candidate_topk_blocks, m.candidate_block_size) else {
            return Err(w.misfit(
                topk_key,
                "the candidate source layer is set but the block count or size is not".into(),
            ));
        };
        w.u32(source_key, source)?;
        w.u32(topk_key, topk)?;
        w.u32(block_key, block)?;
    }
    if let Some(r) = &m.rope_scaling {
        w.rope_scaling(r, rope_keys(), Stored::U32)?;
    }
    Ok(())
}
