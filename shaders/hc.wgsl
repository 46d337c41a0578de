// Hyper-connection family (spec §10): the per-token mixes with Sinkhorn (from the GEMM-f32 of
// the stream with `fn`), hc_pre (collapse) and hc_post (expand). All f32, as the reference.

struct Params {
    s: u32,
    hc: u32,
    d: u32,
    iters: u32,
    norm_eps: f32,
    hc_eps: f32,
    zero: u32,
    pre_off: u32,
    post_off: u32,
    comb_off: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

fn opaque_zero() -> u32 { return P.zero; }
// The stream [s, hc, d] (hc_mix, hc_pre) or the residual (hc_post).
@group(0) @binding(1) var<storage, read> h: array<f32>;
// hc_mix: the raw mixes x·fn^T [s, mix]; hc_pre/hc_post: the coefficient buffer.
@group(0) @binding(2) var<storage, read> m: array<f32>;
// hc_mix: scale [3] then base [mix]; hc_post: the sublayer output x [s, d].
@group(0) @binding(3) var<storage, read> aux: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const MAX_HC: u32 = 8u;

// One lane per token: pre [s, hc] at pre_off, post [s, hc] at post_off, comb [s, hc, hc] at
// comb_off of `out`.
@compute @workgroup_size(64)
fn hc_mix(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x;
    if (t >= P.s) {
        return;
    }
    let hc = P.hc;
    let width = hc * P.d;
    let n_mix = (2u + hc) * hc;
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = 0u; j < width; j = j + 1u) {
        let v = h[t * width + j];
        acc = acc_add(acc, keep(v * v));
    }
    let n = f32(width);
    let r = 1.0 / sqrt(acc.x / n + acc.y / n + P.norm_eps);
    let base = 3u;
    for (var c = 0u; c < hc; c = c + 1u) {
        let mc = keep(m[t * n_mix + c] * r);
        out[P.pre_off + t * hc + c] = sigmoid_f(keep(mc * aux[0]) + aux[base + c]) + P.hc_eps;
        let mp = keep(m[t * n_mix + hc + c] * r);
        out[P.post_off + t * hc + c] = 2.0 * sigmoid_f(keep(mp * aux[1]) + aux[base + hc + c]);
    }
    var cm: array<f32, 64>;
    for (var i = 0u; i < hc * hc; i = i + 1u) {
        let mv = keep(m[t * n_mix + 2u * hc + i] * r);
        cm[i] = keep(mv * aux[2]) + aux[base + 2u * hc + i];
    }
    // Row softmax (max-subtracted, times the reciprocal of the sum), plus eps.
    for (var j = 0u; j < hc; j = j + 1u) {
        var mx = neg_inf();
        for (var k = 0u; k < hc; k = k + 1u) {
            mx = max(mx, cm[j * hc + k]);
        }
        var sum = 0.0;
        for (var k = 0u; k < hc; k = k + 1u) {
            let e = exp(cm[j * hc + k] - mx);
            cm[j * hc + k] = e;
            sum = sum + e;
        }
        let inv = 1.0 / sum;
        for (var k = 0u; k < hc; k = k + 1u) {
            cm[j * hc + k] = keep(cm[j * hc + k] * inv) + P.hc_eps;
        }
    }
    for (var it = 0u; it < P.iters; it = it + 1u) {
        if (it > 0u) {
            for (var j = 0u; j < hc; j = j + 1u) {
                var sum = 0.0;
                for (var k = 0u; k < hc; k = k + 1u) {
                    sum = sum + cm[j * hc + k];
                }
                sum = sum + P.hc_eps;
                for (var k = 0u; k < hc; k = k + 1u) {
                    cm[j * hc + k] = cm[j * hc + k] / sum;
                }
            }
        }
        for (var k = 0u; k < hc; k = k + 1u) {
            var sum = 0.0;
            for (var j = 0u; j < hc; j = j + 1u) {
                sum = sum + cm[j * hc + k];
            }
            sum = sum + P.hc_eps;
            for (var j = 0u; j < hc; j = j + 1u) {
                cm[j * hc + k] = cm[j * hc + k] / sum;
            }
        }
    }
    for (var i = 0u; i < hc * hc; i = i + 1u) {
        out[P.comb_off + t * hc * hc + i] = cm[i];
    }
}

// out[t, i] = bf16(Σ_c pre[t, c] · h[t, c, i]) with pre at m[pre_off ..].
@compute @workgroup_size(64)
fn hc_pre(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let t = gid.y;
    if (i >= P.d || t >= P.s) {
        return;
    }
    var acc = 0.0;
    for (var c = 0u; c < P.hc; c = c + 1u) {
        acc = acc + keep(m[P.pre_off + t * P.hc + c] * h[(t * P.hc + c) * P.d + i]);
    }
    out[t * P.d + i] = bf16r(acc);
}

// out[t, k, i] = bf16(post[t, k] · x[t, i] + Σ_j comb[t, j, k] · res[t, j, i]).
@compute @workgroup_size(64)
fn hc_post(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let tk = gid.y;
    if (i >= P.d || tk >= P.s * P.hc) {
        return;
    }
    let t = tk / P.hc;
    let k = tk % P.hc;
    var acc = 0.0;
    for (var j = 0u; j < P.hc; j = j + 1u) {
        acc = acc + keep(m[P.comb_off + (t * P.hc + j) * P.hc + k] * h[(t * P.hc + j) * P.d + i]);
    }
    let px = keep(m[P.post_off + t * P.hc + k] * aux[t * P.d + i]);
    out[(t * P.hc + k) * P.d + i] = bf16r(px + acc);
}
