// Engram family (spec §9): dequantisation of the fetched fp8 table rows with their e8m0 row
// scales, and the per-(token, copy) gate that adds the shared value into every stream copy.
// The n-gram hash (64-bit integer arithmetic) stays on the host.

struct Params {
    rows: u32,
    width: u32,
    n_blocks: u32,
    s: u32,
    hc: u32,
    d: u32,
    eps: f32,
    inv_sqrt_d: f32,
    zero: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

fn opaque_zero() -> u32 { return P.zero; }
// engram_embed: the fetched table rows [rows, width]; engram_gate: the stream [s, hc, d].
@group(0) @binding(1) var<storage, read> a: array<f32>;
// engram_embed: the row scales [rows, n_blocks]; engram_gate: kv [s, (hc + 1) d].
@group(0) @binding(2) var<storage, read> b: array<f32>;
// engram_gate: q_weight [hc, d]
@group(0) @binding(3) var<storage, read> qw: array<f32>;
// engram_gate: k_weight [hc, d]
@group(0) @binding(4) var<storage, read> kw: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

// out[r, j] = bf16(table[r, j] · scale[r, j / 32]).
@compute @workgroup_size(64)
fn engram_embed(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    let r = gid.y;
    if (j >= P.width || r >= P.rows) {
        return;
    }
    out[r * P.width + j] = bf16r(a[r * P.width + j] * b[r * P.n_blocks + j / 32u]);
}

fn mean_sq_row(is_kv: bool, base: u32) -> f32 {
    var acc = vec2<f32>(0.0, 0.0);
    for (var i = 0u; i < P.d; i = i + 1u) {
        var v: f32;
        if (is_kv) {
            v = b[base + i];
        } else {
            v = a[base + i];
        }
        acc = acc_add(acc, keep(v * v));
    }
    let n = f32(P.d);
    return acc.x / n + acc.y / n;
}

// One workgroup per (token, copy): lane 0 forms the gate, every lane writes its outputs.
var<workgroup> gate_wg: f32;

@compute @workgroup_size(64)
fn engram_gate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = wid.x / P.hc;
    let c = wid.x % P.hc;
    let kv_w = (P.hc + 1u) * P.d;
    let hb = (t * P.hc + c) * P.d;
    let kb = t * kv_w + c * P.d;
    if (lid.x == 0u) {
        let rstd = (1.0 / sqrt(mean_sq_row(false, hb) + P.eps)) * (1.0 / sqrt(mean_sq_row(true, kb) + P.eps));
        var acc = vec2<f32>(0.0, 0.0);
        for (var i = 0u; i < P.d; i = i + 1u) {
            let wgt = keep(qw[c * P.d + i] * kw[c * P.d + i]);
            let p = keep(keep(a[hb + i] * wgt) * b[kb + i]);
            acc = acc_add(acc, p);
        }
        let dot = keep(keep(acc_f32(acc) * rstd) * P.inv_sqrt_d);
        let mag = sqrt(max(abs(dot), 1e-6));
        var sgn = mag;
        if (dot < 0.0 || bitcast<u32>(dot) == 0x80000000u) {
            sgn = -mag;
        }
        gate_wg = sigmoid_f(sgn);
    }
    workgroupBarrier();
    let g = gate_wg;
    let vb = t * kv_w + P.hc * P.d;
    for (var i = lid.x; i < P.d; i = i + 64u) {
        out[hb + i] = bf16r(a[hb + i] + keep(g * b[vb + i]));
    }
}
