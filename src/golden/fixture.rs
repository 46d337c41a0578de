//! The typed `fixture` block of a golden: every ModelArgs field, the run settings and the
//! engram constants, built from the JSON tree and cross-checked so later code can index by them.

use super::json::{as_f64, as_i64, as_string, as_u64, as_usize, list_of, Fields, Json, Msg};
use super::parse::{TOP_FIXTURE, TOP_GOLDEN_LENS, TOP_WEIGHTS};
use super::schema::{EngramFixture, Fixture};

pub(super) fn build_fixture(value: &Json) -> Msg<Fixture> {
    let f = Fields::new(value, "fixture".to_string(), "key")?;
    let Json::Obj(members) = value else {
        return Err("fixture: expected an object".to_string());
    };
    let usizes = |key: &str| f.list_of(key, as_usize);
    let candidate_source_layer = match f.get("candidate_source_layer") {
        None => -1,
        Some(_) => f.i64("candidate_source_layer")?,
    };
    let fixture = Fixture {
        vocab_size: f.usize("vocab_size")?,
        dim: f.usize("dim")?,
        n_layers: f.usize("n_layers")?,
        n_heads: f.usize("n_heads")?,
        head_dim: f.usize("head_dim")?,
        rope_head_dim: f.usize("rope_head_dim")?,
        q_lora_rank: f.usize("q_lora_rank")?,
        o_lora_rank: f.usize("o_lora_rank")?,
        o_groups: f.usize("o_groups")?,
        moe_inter_dim: f.usize("moe_inter_dim")?,
        n_routed_experts: f.usize("n_routed_experts")?,
        n_shared_experts: f.usize("n_shared_experts")?,
        n_activated_experts: f.usize("n_activated_experts")?,
        score_func: f.string("score_func")?,
        route_scale: f.f64("route_scale")?,
        norm_topk_prob: f.bool("norm_topk_prob")?,
        swiglu_limit: f.f64("swiglu_limit")?,
        window_size: f.usize("window_size")?,
        compress_ratios: usizes("compress_ratios")?,
        kv_source_layers: usizes("kv_source_layers")?,
        index_source_layers: usizes("index_source_layers")?,
        candidate_source_layer,
        candidate_topk_blocks: f.usize("candidate_topk_blocks")?,
        candidate_block_size: f.usize("candidate_block_size")?,
        index_n_heads: f.usize("index_n_heads")?,
        index_head_dim: f.usize("index_head_dim")?,
        index_topk: f.usize("index_topk")?,
        hc_mult: f.usize("hc_mult")?,
        hc_sinkhorn_iters: f.usize("hc_sinkhorn_iters")?,
        hc_eps: f.f64("hc_eps")?,
        engram_layer_ids: usizes("engram_layer_ids")?,
        engram_max_ngram_size: f.usize("engram_max_ngram_size")?,
        engram_vocab_size: f.usize("engram_vocab_size")?,
        engram_n_heads: f.usize("engram_n_heads")?,
        engram_head_dim: f.usize("engram_head_dim")?,
        engram_pad_id: f.i64("engram_pad_id")?,
        engram_compressed_vocab_size: f.usize("engram_compressed_vocab_size")?,
        engram_num_embeddings: usizes("engram_num_embeddings")?,
        rope_theta: f.f64("rope_theta")?,
        compress_rope_theta: f.f64("compress_rope_theta")?,
        rope_factor: f.f64("rope_factor")?,
        original_seq_len: f.usize("original_seq_len")?,
        beta_fast: f.f64("beta_fast")?,
        beta_slow: f.f64("beta_slow")?,
        norm_eps: f.f64("norm_eps")?,
        gate_temp: f.f64("gate_temp")?,
        max_seq_len: f.usize("max_seq_len")?,
        batch: f.usize("batch")?,
        prefill_len: f.usize("prefill_len")?,
        regimes: f.list_of("regimes", as_string)?,
        lcg_probe: f.list_of("lcg_probe", as_u64)?,
        engram: None,
        raw: members
            .iter()
            .map(|(k, v)| (k.clone(), v.to_serde()))
            .collect(),
    };
    check_fixture(&f, &fixture)?;
    let engram = match f.get("engram") {
        None => None,
        Some(value) => Some(build_engram(value, &fixture)?),
    };
    Ok(Fixture { engram, ..fixture })
}

/// Cheap cross-checks between fixture fields, so later code can index by them.
fn check_fixture(f: &Fields<'_>, x: &Fixture) -> Msg<()> {
    if x.regimes.is_empty() {
        return Err(f.bad("regimes", "is empty (a golden needs at least one regime)"));
    }
    let mut seen = std::collections::HashSet::new();
    for r in &x.regimes {
        if r == TOP_FIXTURE || r == TOP_WEIGHTS || r == TOP_GOLDEN_LENS {
            return Err(f.bad("regimes", &format!("`{r}` cannot be a regime name")));
        }
        if !seen.insert(r.as_str()) {
            return Err(f.bad("regimes", &format!("lists `{r}` twice")));
        }
    }
    if x.compress_ratios.len() != x.n_layers {
        return Err(f.bad(
            "compress_ratios",
            &format!(
                "has {} entries but n_layers = {}",
                x.compress_ratios.len(),
                x.n_layers
            ),
        ));
    }
    for (key, layers) in [
        ("kv_source_layers", &x.kv_source_layers),
        ("index_source_layers", &x.index_source_layers),
        ("engram_layer_ids", &x.engram_layer_ids),
    ] {
        if let Some(bad) = layers.iter().find(|&&l| l >= x.n_layers) {
            return Err(f.bad(
                key,
                &format!("layer {bad} is not below n_layers = {}", x.n_layers),
            ));
        }
    }
    let c = x.candidate_source_layer;
    if c < -1 || (c >= 0 && c as u64 >= x.n_layers as u64) {
        return Err(f.bad(
            "candidate_source_layer",
            &format!(
                "{c} is neither -1 (none) nor a layer below n_layers = {}",
                x.n_layers
            ),
        ));
    }
    if x.engram_num_embeddings.len() != x.engram_layer_ids.len() {
        return Err(f.bad(
            "engram_num_embeddings",
            &format!(
                "has {} entries but engram_layer_ids has {}",
                x.engram_num_embeddings.len(),
                x.engram_layer_ids.len()
            ),
        ));
    }
    Ok(())
}

fn build_engram(value: &Json, fx: &Fixture) -> Msg<EngramFixture> {
    let f = Fields::new(value, "fixture.engram".to_string(), "key")?;
    let layer_ids = f.list_of("layer_ids", as_usize)?;
    let max_ngram_size = f.usize("max_ngram_size")?;
    let n_heads = f.usize("n_heads")?;
    let head_dim = f.usize("head_dim")?;
    let n_hash_cols = f.usize("n_hash_cols")?;
    let num_embeddings = f.list_of("num_embeddings", as_usize)?;
    let pad_id_compressed = f.i64("pad_id_compressed")?;
    let token_map = f.list_of("token_map", as_i64)?;
    let multipliers = f.list_of("multipliers", |v| list_of(v, &as_i64))?;
    let primes = f.list_of("primes", |v| list_of(v, &|w: &Json| list_of(w, &as_i64)))?;
    let offsets = f.list_of("offsets", |v| list_of(v, &as_i64))?;
    let scale_block = f.usize("scale_block")?;
    let scales = f.list_of("scales", |v| list_of(v, &as_f64))?;

    let same = |key: &str, ours: String, theirs: String, top: &str| -> Msg<()> {
        if ours == theirs {
            Ok(())
        } else {
            Err(f.bad(key, &format!("is {ours} but fixture.{top} is {theirs}")))
        }
    };
    same(
        "layer_ids",
        format!("{layer_ids:?}"),
        format!("{:?}", fx.engram_layer_ids),
        "engram_layer_ids",
    )?;
    same(
        "max_ngram_size",
        max_ngram_size.to_string(),
        fx.engram_max_ngram_size.to_string(),
        "engram_max_ngram_size",
    )?;
    same(
        "n_heads",
        n_heads.to_string(),
        fx.engram_n_heads.to_string(),
        "engram_n_heads",
    )?;
    same(
        "head_dim",
        head_dim.to_string(),
        fx.engram_head_dim.to_string(),
        "engram_head_dim",
    )?;
    same(
        "num_embeddings",
        format!("{num_embeddings:?}"),
        format!("{:?}", fx.engram_num_embeddings),
        "engram_num_embeddings",
    )?;
    if max_ngram_size < 2 {
        return Err(f.bad(
            "max_ngram_size",
            &format!("must be >= 2 (n-grams of size 2..), got {max_ngram_size}"),
        ));
    }
    if scale_block == 0 {
        return Err(f.bad("scale_block", "must be >= 1, got 0"));
    }
    // One E8M0 scale per `scale_block` values of a row: a row of `head_dim` values holds
    // `head_dim / scale_block` of them (1 in the tiny fixture, 8 in the real 256-wide rows).
    if head_dim % scale_block != 0 || head_dim == 0 {
        return Err(f.bad(
            "scale_block",
            &format!("{scale_block} does not divide head_dim = {head_dim} into whole blocks"),
        ));
    }
    let scales_per_row = head_dim / scale_block;
    let n_sizes = max_ngram_size - 1;
    if n_sizes.checked_mul(n_heads) != Some(n_hash_cols) {
        return Err(f.bad(
            "n_hash_cols",
            &format!("is {n_hash_cols} but (max_ngram_size - 1) * n_heads = {n_sizes} * {n_heads}"),
        ));
    }
    if token_map.len() != fx.engram_compressed_vocab_size {
        return Err(f.bad(
            "token_map",
            &format!(
                "has {} entries but engram_compressed_vocab_size = {}",
                token_map.len(),
                fx.engram_compressed_vocab_size
            ),
        ));
    }
    if let Ok(pad) = usize::try_from(fx.engram_pad_id) {
        if let Some(&mapped) = token_map.get(pad) {
            if mapped != pad_id_compressed {
                return Err(f.bad(
                    "pad_id_compressed",
                    &format!(
                        "is {pad_id_compressed} but token_map[engram_pad_id = {pad}] = {mapped}"
                    ),
                ));
            }
        }
    }
    let n_layers = layer_ids.len();
    let rows = |key: &str, len: usize| -> Msg<()> {
        if len == n_layers {
            Ok(())
        } else {
            Err(f.bad(
                key,
                &format!("has {len} rows but there are {n_layers} engram layers"),
            ))
        }
    };
    rows("multipliers", multipliers.len())?;
    rows("primes", primes.len())?;
    rows("offsets", offsets.len())?;
    rows("scales", scales.len())?;
    for l in 0..n_layers {
        if multipliers[l].len() != max_ngram_size {
            return Err(f.bad(
                "multipliers",
                &format!(
                    "[{l}] has {} entries, expected max_ngram_size = {max_ngram_size}",
                    multipliers[l].len()
                ),
            ));
        }
        if primes[l].len() != n_sizes {
            return Err(f.bad(
                "primes",
                &format!(
                    "[{l}] has {} entries, expected max_ngram_size - 1 = {n_sizes}",
                    primes[l].len()
                ),
            ));
        }
        let mut next_offset: i64 = 0;
        let mut flat = 0usize;
        for (g, heads) in primes[l].iter().enumerate() {
            if heads.len() != n_heads {
                return Err(f.bad(
                    "primes",
                    &format!(
                        "[{l}][{g}] has {} entries, expected n_heads = {n_heads}",
                        heads.len()
                    ),
                ));
            }
            for (h, &p) in heads.iter().enumerate() {
                if p <= 0 {
                    return Err(f.bad("primes", &format!("[{l}][{g}][{h}] = {p} is not positive")));
                }
                match offsets[l].get(flat) {
                    Some(&o) if o == next_offset => {}
                    Some(&o) => {
                        return Err(f.bad(
                            "offsets",
                            &format!("[{l}][{flat}] is {o}, expected the exclusive prefix sum {next_offset} of primes"),
                        ))
                    }
                    None => break,
                }
                flat += 1;
                next_offset = next_offset
                    .checked_add(p)
                    .ok_or_else(|| f.bad("primes", &format!("[{l}] sum overflows i64")))?;
            }
        }
        if offsets[l].len() != n_hash_cols {
            return Err(f.bad(
                "offsets",
                &format!(
                    "[{l}] has {} entries, expected n_hash_cols = {n_hash_cols}",
                    offsets[l].len()
                ),
            ));
        }
        if u64::try_from(next_offset).ok() != Some(num_embeddings[l] as u64) {
            return Err(f.bad(
                "num_embeddings",
                &format!(
                    "[{l}] is {} but the primes of layer {l} sum to {next_offset}",
                    num_embeddings[l]
                ),
            ));
        }
        let expected = num_embeddings[l].checked_mul(scales_per_row);
        if expected != Some(scales[l].len()) {
            return Err(f.bad(
                "scales",
                &format!(
                    "[{l}] has {} entries, expected num_embeddings[{l}] x head_dim / scale_block \
                     = {} x {head_dim} / {scale_block}",
                    scales[l].len(),
                    num_embeddings[l]
                ),
            ));
        }
        if let Some((r, s)) = scales[l]
            .iter()
            .enumerate()
            .find(|(_, &s)| !(s > 0.0 && s.is_finite() && s.to_bits() & ((1u64 << 52) - 1) == 0))
        {
            return Err(f.bad(
                "scales",
                &format!("[{l}][{r}] = {s} is not a positive power of two"),
            ));
        }
    }
    Ok(EngramFixture {
        layer_ids,
        max_ngram_size,
        n_heads,
        head_dim,
        n_hash_cols,
        num_embeddings,
        pad_id_compressed,
        token_map,
        multipliers,
        primes,
        offsets,
        scale_block,
        scales,
    })
}
