//! Invariant checks on one backend's own captures, apart from any comparison: properties the
//! V4.1 graph guarantees whatever the weights, so a violation is a bug in that backend alone.

use crate::model::{Capture, CaptureValues, ModelConfig};

/// Sinkhorn rows and columns of `comb` sum to 1 within this (20 iterations with eps 1e-6 leave
/// about 1e-6 on the reference; the bar allows f32 reduction-order noise on top).
pub const SINKHORN_SUM_TOL: f32 = 1e-4;
/// Routed weights of a token sum to `route_scale` within this (f32 normalisation).
pub const ROUTE_SUM_TOL: f32 = 1e-5;

/// One violated invariant.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub capture: String,
    /// Flat index of the first offending element (or row start).
    pub index: usize,
    pub what: String,
}

/// Check every invariant that applies to `c`; `attended_rows` is the number of kv rows of the
/// layer's `sa_kv` when checking its `sa_topk_idxs`.
pub fn check_capture(
    cfg: &ModelConfig,
    c: &Capture,
    attended_rows: Option<usize>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let v = |index: usize, what: String| Violation {
        capture: c.name.clone(),
        index,
        what,
    };
    let base = c.name.rsplit('.').next().unwrap_or(&c.name);
    match &c.values {
        CaptureValues::F32(x) => {
            if let Some(i) = x.iter().position(|f| !f.is_finite()) {
                out.push(v(i, format!("non-finite value {}", x[i])));
                return out;
            }
            let hc = cfg.hc_mult;
            match base {
                "attn_comb" | "ffn_comb" => {
                    for (t, m) in x.chunks(hc * hc).enumerate() {
                        for j in 0..hc {
                            let row: f32 = m[j * hc..(j + 1) * hc].iter().sum();
                            let col: f32 = (0..hc).map(|k| m[k * hc + j]).sum();
                            if (row - 1.0).abs() > SINKHORN_SUM_TOL {
                                out.push(v(
                                    t * hc * hc + j * hc,
                                    format!("token {t}: comb row {j} sums to {row}"),
                                ));
                            }
                            if (col - 1.0).abs() > SINKHORN_SUM_TOL {
                                out.push(v(
                                    t * hc * hc + j,
                                    format!("token {t}: comb column {j} sums to {col}"),
                                ));
                            }
                        }
                        if let Some(k) = m.iter().position(|&e| e < 0.0) {
                            out.push(v(
                                t * hc * hc + k,
                                format!("token {t}: negative comb entry {}", m[k]),
                            ));
                        }
                    }
                }
                "attn_pre" | "ffn_pre" | "pre_mix_out" => {
                    let (lo, hi) = (cfg.hc_eps, 1.0 + cfg.hc_eps);
                    if let Some(i) = x.iter().position(|&p| p < lo || p > hi) {
                        out.push(v(
                            i,
                            format!("pre weight {} outside [{lo}, {hi}] (sigmoid + eps)", x[i]),
                        ));
                    }
                }
                "attn_post" | "ffn_post" => {
                    if let Some(i) = x.iter().position(|&p| !(0.0..=2.0).contains(&p)) {
                        out.push(v(
                            i,
                            format!("post weight {} outside [0, 2] (2·sigmoid)", x[i]),
                        ));
                    }
                }
                "moe_weights" => {
                    let k = cfg.n_activated_experts;
                    for (t, w) in x.chunks(k).enumerate() {
                        let sum: f32 = w.iter().sum();
                        if cfg.norm_topk_prob
                            && k > 1
                            && (sum - cfg.route_scale).abs()
                                > ROUTE_SUM_TOL * cfg.route_scale.max(1.0)
                        {
                            out.push(v(t * k, format!("token {t}: routing weights sum to {sum}, expected route_scale {}", cfg.route_scale)));
                        }
                        if let Some(j) = w.iter().position(|&e| e < 0.0) {
                            out.push(v(
                                t * k + j,
                                format!("token {t}: negative routing weight {}", w[j]),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        CaptureValues::I64(x) => match base {
            "sa_topk_idxs" => {
                if let Some(n) = attended_rows {
                    if let Some(i) = x.iter().position(|&j| j < -1 || j >= n as i64) {
                        out.push(v(i, format!("attended row {} outside [-1, {n})", x[i])));
                    }
                }
            }
            "moe_indices" => {
                let e = cfg.n_routed_experts as i64;
                if let Some(i) = x.iter().position(|&j| j < 0 || j >= e) {
                    out.push(v(i, format!("expert id {} outside [0, {e})", x[i])));
                }
                let k = cfg.n_activated_experts;
                for (t, row) in x.chunks(k).enumerate() {
                    let mut s = row.to_vec();
                    s.sort_unstable();
                    s.dedup();
                    if s.len() != row.len() {
                        out.push(v(
                            t * k,
                            format!("token {t}: an expert is routed twice {row:?}"),
                        ));
                    }
                }
            }
            "candidates" => {
                if let Some(i) = x.iter().position(|&b| b != 0 && b != 1) {
                    out.push(v(i, format!("mask value {} is not 0/1", x[i])));
                }
            }
            _ => {}
        },
    }
    out
}

/// Mask conformance of `L{l}.sa_topk_idxs` for a forward of `s` tokens at `start_pos`: the
/// window part must be exactly the window rows the reference attends (spec §11.3), and every
/// compressed index must name a visible compressed row (`offset <= i < offset + end/ratio`, and in
/// prefill a complete group: `i - offset < (t+1)/ratio`). Each leaked position is named.
pub fn check_attention_mask(
    cfg: &ModelConfig,
    layer: usize,
    start_pos: usize,
    c: &Capture,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let CaptureValues::I64(x) = &c.values else {
        return out;
    };
    let (s, width) = match c.shape.as_slice() {
        [1, s, w] => (*s, *w),
        _ => return out,
    };
    if s == 0 || x.len() != s * width {
        return out;
    }
    let win = cfg.window_size;
    let (ww, widx) = crate::oracle::attn::window_idxs(win, s, start_pos);
    if width < ww {
        out.push(Violation {
            capture: c.name.clone(),
            index: 0,
            what: format!("index rows have {width} columns, the window alone needs {ww}"),
        });
        return out;
    }
    let offset = if start_pos == 0 { s } else { win };
    let ratio = cfg.compress_ratios.get(layer).copied().unwrap_or(0);
    let end = start_pos + s;
    for t in 0..s {
        let row = &x[t * width..(t + 1) * width];
        let want = if start_pos == 0 {
            &widx[t * ww..(t + 1) * ww]
        } else {
            &widx[..]
        };
        let mut got_w: Vec<i64> = row[..ww].to_vec();
        let mut want_w: Vec<i64> = want.to_vec();
        got_w.sort_unstable();
        want_w.sort_unstable();
        if got_w != want_w {
            let leaked: Vec<i64> = got_w
                .iter()
                .copied()
                .filter(|j| *j >= 0 && !want_w.contains(j))
                .collect();
            out.push(Violation {
                capture: c.name.clone(),
                index: t * width,
                what: format!("query {t} (position {}): window part {got_w:?}, expected {want_w:?}; leaked rows {leaked:?}", start_pos + t),
            });
        }
        if ratio == 0 {
            continue;
        }
        let visible = if start_pos == 0 {
            (t + 1) / ratio
        } else {
            end / ratio
        };
        for (c_i, &i) in row[ww..].iter().enumerate() {
            if i < 0 {
                continue;
            }
            let p = i - offset as i64;
            if p < 0 || p >= visible as i64 {
                out.push(Violation {
                    capture: c.name.clone(),
                    index: t * width + ww + c_i,
                    what: format!("query {t} (position {}): compressed index {i} (position {p}) is not visible (visible: {visible})", start_pos + t),
                });
            }
        }
    }
    out
}

/// Check a step's captures (kv row counts are taken from the step's own `sa_kv`) for a forward
/// starting at `start_pos`.
pub fn check_step(cfg: &ModelConfig, start_pos: usize, caps: &[Capture]) -> Vec<Violation> {
    let mut out = Vec::new();
    for c in caps.iter().filter(|c| !c.is_diagnostic()) {
        if c.name.ends_with(".sa_topk_idxs") {
            let parsed = crate::golden::names::parse_capture_name(&c.name);
            if let (Some(l), false) = (parsed.layer, parsed.shared) {
                out.extend(check_attention_mask(cfg, l, start_pos, c));
            }
        }
        let rows = if c.name.ends_with(".sa_topk_idxs") {
            let kv_name = c.name.replace(".sa_topk_idxs", ".sa_kv");
            caps.iter()
                .find(|k| k.name == kv_name)
                .and_then(|k| k.shape.get(1).copied())
        } else {
            None
        };
        out.extend(check_capture(cfg, c, rows));
    }
    out
}
