//! The antirez/ds4 dialect (spec §1.2): HF `config.json` names under `deepseek41.*`.

use super::keys::{Stored, DS4};
use super::{Deepseek41Meta, Dialect, KeyReader, KeyWriter};
use crate::gguf::error::Result;

fn rope_keys() -> [&'static str; 4] {
    [
        DS4.rope_scaling_factor,
        DS4.rope_scaling_beta_fast,
        DS4.rope_scaling_beta_slow,
        DS4.rope_scaling_original,
    ]
}

/// Reads every ds4 hyper-parameter (the engram constants are read separately).
pub(super) fn read(k: &KeyReader) -> Result<Deepseek41Meta> {
    let mut m = Deepseek41Meta::empty(Dialect::Ds4);
    k.scalars(DS4.scalars, &mut m)?;
    m.scoring_func = k.opt_str(DS4.scoring_func)?;
    m.hidden_act = k.opt_str(DS4.hidden_act)?;
    m.topk_method = k.opt_str(DS4.topk_method)?;
    m.norm_topk_prob = k.opt_bool(DS4.norm_topk_prob)?;
    m.compress_ratios = k.u64s(DS4.compress_ratios)?;
    m.kv_source_layer_ids = Some(k.u64s(DS4.kv_source_layer_ids)?);
    m.index_source_layer_ids = Some(k.u64s(DS4.index_source_layer_ids)?);
    m.rope_scaling = k.rope_scaling(rope_keys())?;
    m.hf_config_json = k.opt_str(DS4.config)?;
    m.quantization = k.opt_str(DS4.quantization)?;
    m.calibration = k.opt_str(DS4.calibration)?;
    Ok(m)
}

/// Writes every ds4 hyper-parameter of `m` as the converter types them (integers `UINT32`,
/// floats `FLOAT32`, the layer lists `UINT32` arrays).
pub(super) fn write(w: &mut KeyWriter, m: &Deepseek41Meta) -> Result<()> {
    w.scalars(DS4.scalars, m)?;
    w.opt_string(DS4.scoring_func, &m.scoring_func)?;
    w.opt_string(DS4.hidden_act, &m.hidden_act)?;
    w.opt_string(DS4.topk_method, &m.topk_method)?;
    if let Some(b) = m.norm_topk_prob {
        w.put(DS4.norm_topk_prob, crate::gguf::GgufValue::Bool(b))?;
    }
    w.u32s(DS4.compress_ratios, &m.compress_ratios)?;
    for (key, ids) in [
        (DS4.kv_source_layer_ids, &m.kv_source_layer_ids),
        (DS4.index_source_layer_ids, &m.index_source_layer_ids),
    ] {
        let ids = ids
            .as_deref()
            .ok_or_else(|| w.misfit(key, "unset, but the ds4 dialect requires the list".into()))?;
        w.u32s(key, ids)?;
    }
    if let Some(r) = &m.rope_scaling {
        w.rope_scaling(r, rope_keys(), Stored::F32)?;
    }
    w.opt_string(DS4.config, &m.hf_config_json)?;
    w.opt_string(DS4.quantization, &m.quantization)?;
    w.opt_string(DS4.calibration, &m.calibration)?;
    Ok(())
}
