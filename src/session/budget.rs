//! Error budgets: beside the Atlas bars, a per-capture bound derived from how the capture is
//! computed — its dtype, the length of the reduction that produced it and the magnitude of its
//! values — with the reason stated. Observed error over budget above 1 means more error than
//! that arithmetic can explain (a bug, not rounding).

use crate::golden::names::{capture_kind, parse_capture_name, CaptureKind};
use crate::model::ModelConfig;

/// Unit roundoff of f32 (2^-24).
pub const F32_UNIT_ROUNDOFF: f64 = 1.0 / 16_777_216.0;

/// A budget and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub abs: f64,
    pub reason: String,
}

/// One bf16 ulp at magnitude `m` (the spacing of bf16 numbers around it).
pub fn bf16_ulp(m: f64) -> f64 {
    if m <= 0.0 || !m.is_finite() {
        return 0.0;
    }
    2f64.powi(m.log2().floor() as i32 - 7)
}

/// `gamma_K = K·u / (1 − K·u)`: the classic bound on relative error of a K-term f32 sum.
pub fn gamma(k: usize) -> f64 {
    let ku = k as f64 * F32_UNIT_ROUNDOFF;
    ku / (1.0 - ku).max(f64::MIN_POSITIVE)
}

/// The reduction length of the operation that produces capture `base` (None: elementwise).
fn reduction_len(cfg: &ModelConfig, base: &str) -> Option<(usize, &'static str)> {
    Some(match base {
        "attn_pre" | "attn_post" | "attn_comb" | "ffn_pre" | "ffn_post" | "ffn_comb"
        | "pre_mix_out" => (cfg.hc_mult * cfg.dim, "hc mix projection over hc·dim"),
        "sa_q" => (cfg.q_lora_rank, "wq_b over q_lora_rank"),
        "sa_o" => (
            cfg.window_size + cfg.index_topk,
            "attention over the attended rows",
        ),
        "attn_out" => (
            cfg.o_groups * cfg.o_lora_rank,
            "wo_b over o_groups·o_lora_rank",
        ),
        "ffn_out" => (
            cfg.moe_inter_dim * (cfg.n_activated_experts + 1),
            "experts' w2 over moe_inter_dim, summed over routed + shared",
        ),
        "engram_kv" => (
            cfg.engram
                .as_ref()
                .map_or(1, |e| e.n_hash_cols() * e.head_dim),
            "engram wkv over hash columns·head_dim",
        ),
        "moe_weights" => (cfg.dim, "gate projection over dim"),
        "logits_full" => (cfg.dim, "head projection over dim"),
        "compress_kv" | "index_k" => (cfg.head_dim, "latent projections over head_dim"),
        _ => return None,
    })
}

/// The base name whose computation produced capture `parsed`: a block's `pre_mix_in` past block
/// 0 is the previous block's `pre_mix_out` (the same tensor handed on, spec §10.4), so it carries
/// that reduction's error and gets its budget; block 0's is the one-hot constant (elementwise).
fn produced_as(parsed: &crate::golden::names::CaptureName) -> &str {
    match (parsed.base.as_str(), parsed.layer) {
        ("pre_mix_in", Some(l)) if l > 0 => "pre_mix_out",
        (base, _) => base,
    }
}

/// The budget of capture `name` whose reference values reach `max_abs` in magnitude.
pub fn budget_for(cfg: &ModelConfig, name: &str, max_abs: f64) -> Budget {
    let parsed = parse_capture_name(name);
    let kind = capture_kind(name);
    let red = reduction_len(cfg, produced_as(&parsed));
    match (kind, red) {
        (k, _) if k.is_int() => Budget { abs: 0.0, reason: "integer capture: exact".into() },
        (CaptureKind::F32, Some((k, what))) => Budget {
            abs: gamma(k) * (k as f64).sqrt() * max_abs.max(f64::MIN_POSITIVE) * 4.0,
            reason: format!(
                "f32 result of a {k}-term reduction ({what}) and a few f32 ops after it: 4·gamma_{k}·sqrt({k})·max|y| (random-sign accumulation bound)"
            ),
        },
        (CaptureKind::F32, None) => Budget { abs: 4.0 * F32_UNIT_ROUNDOFF * max_abs, reason: "f32 elementwise: 4 f32 ulps of max|y|".into() },
        (_, Some((k, what))) => Budget {
            abs: bf16_ulp(max_abs) + gamma(k) * (k as f64).sqrt() * max_abs,
            reason: format!(
                "bf16 result of a {k}-term f32 reduction ({what}): half a bf16 ulp of rounding plus half for an order flip at the boundary (1 ulp of max|y|), plus gamma_{k}·sqrt({k})·max|y|"
            ),
        },
        _ if matches!(parsed.base.as_str(), "attn_in" | "ffn_in") => Budget {
            abs: 2.0 * bf16_ulp(max_abs),
            reason: format!(
                "bf16 collapse of the {}-copy stream by f32 pre-mix weights: the weights' own error can carry the sum across a rounding boundary, and each stream element carries a rounding of its own: two bf16 ulps of max|y|",
                cfg.hc_mult
            ),
        },
        _ => Budget { abs: bf16_ulp(max_abs), reason: "bf16 elementwise or norm: one bf16 ulp of max|y| (one rounding, boundary flips)".into() },
    }
}

/// The reference magnitude a capture's budget scales with: the largest |value| the golden holds
/// for it (its samples; all of it when the capture is stored whole).
pub fn reference_magnitude(golden: &crate::golden::GoldenCapture) -> f64 {
    golden
        .samples_f64()
        .iter()
        .fold(0f64, |m, v| m.max(v.abs()))
}

/// Observed error over budget: `max_abs_err / budget` (0 when both are 0, infinite when only
/// the budget is; NaN stays NaN, which is never within budget).
pub fn observed_over_budget(max_abs_err: f64, budget: f64) -> f64 {
    if budget > 0.0 {
        max_abs_err / budget
    } else if max_abs_err == 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

/// True when `observed_over_budget` is at most 1 (a NaN error is not within budget).
pub fn within_budget(ratio: f64) -> bool {
    ratio <= 1.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_and_gamma() {
        assert_eq!(bf16_ulp(1.0), 1.0 / 128.0);
        assert_eq!(bf16_ulp(1.5), 1.0 / 128.0);
        assert_eq!(bf16_ulp(0.3), 1.0 / 512.0);
        assert!((gamma(256) - 256.0 / 16_777_216.0).abs() < 1e-9);
    }

    #[test]
    fn a_handed_on_tensor_keeps_the_budget_of_the_step_that_computed_it() {
        let cfg = ModelConfig::deepseek_v41_flash();
        for m in [0.5, 1.25] {
            // L2.pre_mix_in is L1.pre_mix_out (= L1.ffn_pre): one budget, one reason.
            let out = budget_for(&cfg, "L1.pre_mix_out", m);
            assert_eq!(budget_for(&cfg, "L2.pre_mix_in", m), out);
            assert_eq!(budget_for(&cfg, "L1.ffn_pre", m), out);
            assert!(out.reason.contains("hc mix projection"), "{}", out.reason);
        }
        // Block 0's pre-mix is the one-hot constant: elementwise, far below the mix's budget.
        let first = budget_for(&cfg, "L0.pre_mix_in", 1.0);
        assert!(first.reason.contains("elementwise"), "{}", first.reason);
        assert!(first.abs < budget_for(&cfg, "L0.pre_mix_out", 1.0).abs / 100.0);
    }

    #[test]
    fn the_stream_collapse_allows_two_roundings() {
        let cfg = ModelConfig::deepseek_v41_flash();
        for name in ["L1.ffn_in", "L2.attn_in"] {
            let b = budget_for(&cfg, name, 3.95);
            assert_eq!(b.abs, 2.0 / 64.0, "{name}");
            assert!(b.reason.contains("pre-mix weights"), "{}", b.reason);
        }
        assert_eq!(budget_for(&cfg, "L1.h_out", 3.95).abs, 1.0 / 64.0);
    }

    #[test]
    fn observed_over_budget_edges() {
        assert_eq!(observed_over_budget(1.0, 4.0), 0.25);
        assert_eq!(observed_over_budget(0.0, 0.0), 0.0);
        assert_eq!(observed_over_budget(1.0, 0.0), f64::INFINITY);
        assert!(!within_budget(observed_over_budget(f64::NAN, 1.0)));
        assert!(within_budget(1.0) && !within_budget(1.0 + 1e-12));
    }
}
