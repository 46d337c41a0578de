// MoE family (spec §14): gate scores, routing (selection by score + bias, weights from the
// unbiased scores), and the SwiGLU activation with the asymmetric clamp and the routing weight.
// GPU routing tie rule: experts are taken in descending biased score, equal scores by lower
// expert id (torch's order agrees whenever the scores are distinct).

struct Params {
    s: u32,
    e: u32,
    k: u32,
    inter: u32,
    score_func: u32,
    given: u32,
    norm_topk: u32,
    zero: u32,
    gate_temp: f32,
    route_scale: f32,
    swiglu_limit: f32,
    weighted: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

fn opaque_zero() -> u32 { return P.zero; }
// gate_scores: logits [s, e]; route: scores [s, e]; swiglu: g [n, inter].
@group(0) @binding(1) var<storage, read> a: array<f32>;
// route: bias [e]; swiglu: u [n, inter].
@group(0) @binding(2) var<storage, read> b: array<f32>;
// swiglu: per-row routing weights [n].
@group(0) @binding(3) var<storage, read> c: array<f32>;
// gate_scores: scores [s, e]; route: weights [s, k] then indices [s, k]; swiglu: act [n, inter].
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const MAX_K: u32 = 64u;

fn log1p_f(u: f32) -> f32 {
    let w = 1.0 + u;
    if (w == 1.0) {
        return u;
    }
    return log(w) * (u / (w - 1.0));
}

// One lane per token: scores = f(logits / temp) with f = softmax | sigmoid | sqrt(softplus).
@compute @workgroup_size(64)
fn gate_scores(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x;
    if (t >= P.s) {
        return;
    }
    let base = t * P.e;
    if (P.score_func == 0u) {
        var mx = neg_inf();
        for (var i = 0u; i < P.e; i = i + 1u) {
            mx = max(mx, a[base + i] / P.gate_temp);
        }
        var sum = 0.0;
        for (var i = 0u; i < P.e; i = i + 1u) {
            let v = exp(a[base + i] / P.gate_temp - mx);
            out[base + i] = v;
            sum = sum + v;
        }
        let inv = 1.0 / sum;
        for (var i = 0u; i < P.e; i = i + 1u) {
            out[base + i] = out[base + i] * inv;
        }
    } else {
        for (var i = 0u; i < P.e; i = i + 1u) {
            let x = a[base + i] / P.gate_temp;
            if (P.score_func == 1u) {
                out[base + i] = sigmoid_f(x);
            } else {
                var sp = x;
                if (x <= 20.0) {
                    sp = log1p_f(exp(x));
                }
                out[base + i] = sqrt(sp);
            }
        }
    }
}

// One lane per token: the k experts (given in out[s·k ..] when `given`, else selected by
// score + bias) and their weights: unbiased scores, renormalised (+1e-20), times route_scale.
// Weights go to out[0 .. s·k], indices (exact f32) to out[s·k .. 2·s·k].
@compute @workgroup_size(64)
fn route(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x;
    if (t >= P.s) {
        return;
    }
    let base = t * P.e;
    let ib = P.s * P.k + t * P.k;
    var sel: array<u32, MAX_K>;
    for (var j = 0u; j < P.k; j = j + 1u) {
        if (P.given != 0u) {
            sel[j] = u32(out[ib + j]);
            continue;
        }
        var best = 0u;
        var best_v = neg_inf();
        var found = false;
        for (var i = 0u; i < P.e; i = i + 1u) {
            var taken = false;
            for (var q = 0u; q < j; q = q + 1u) {
                if (sel[q] == i) {
                    taken = true;
                }
            }
            if (taken) {
                continue;
            }
            let v = a[base + i] + b[i];
            if (!found || v > best_v || (is_nan_f(v) && !is_nan_f(best_v))) {
                best = i;
                best_v = v;
                found = true;
            }
        }
        sel[j] = best;
    }
    var sum = 0.0;
    for (var j = 0u; j < P.k; j = j + 1u) {
        sum = sum + a[base + sel[j]];
    }
    sum = sum + 1e-20;
    for (var j = 0u; j < P.k; j = j + 1u) {
        var w = a[base + sel[j]];
        if (P.norm_topk != 0u) {
            w = w / sum;
        }
        out[t * P.k + j] = keep(w * P.route_scale);
        out[ib + j] = f32(sel[j]);
    }
}

// act[r, i] = bf16(silu(min(g, lim)) · clamp(u, -lim, lim) · weight[r]) (no clamp when lim ≤ 0).
@compute @workgroup_size(64)
fn swiglu(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let r = gid.y;
    if (i >= P.inter || r >= P.s) {
        return;
    }
    var g = a[r * P.inter + i];
    var u = b[r * P.inter + i];
    let lim = P.swiglu_limit;
    if (lim > 0.0) {
        u = clamp(u, -lim, lim);
        g = min(g, lim);
    }
    let silu = g / (1.0 + exp(-g));
    var v = keep(silu * u);
    if (P.weighted != 0u) {
        v = keep(v * c[r]);
    }
    out[r * P.inter + i] = bf16r(v);
}
