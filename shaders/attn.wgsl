// Attention family (spec §11): the window ring write, window index rows, concatenation of the
// compressed indices, and sparse attention with sinks (shim semantics: exact f32 softmax over
// the gathered rows with the sink only in the denominator; rows are both key and value).
// Index tensors are carried as exact f32 integers (-1 = absent).

struct Params {
    s: u32,
    sp: u32,
    win: u32,
    hd: u32,
    n_heads: u32,
    w: u32,
    ww: u32,
    cw: u32,
    scale: f32,
    zero: u32,
    off_by_one: u32,
    n_rows: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

fn opaque_zero() -> u32 { return P.zero; }
// sparse_attn: q [s, heads, hd]; ring_write: kv [s, hd]; idx_concat: compressed idx [s, cw].
@group(0) @binding(1) var<storage, read> a: array<f32>;
// sparse_attn: kv_all [n_rows, hd]
@group(0) @binding(2) var<storage, read> kv: array<f32>;
// sparse_attn: sink [heads]
@group(0) @binding(3) var<storage, read> sink: array<f32>;
// sparse_attn: idx [s, w]
@group(0) @binding(4) var<storage, read> idx: array<f32>;
// sparse_attn: o [s, heads, hd]; ring_write: the ring [win, hd]; window_idx/idx_concat: idx [s, w].
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

const MAX_COLS: u32 = 1024u;

// Write this chunk's kv rows into the ring: slot (sp + t) % win for the last min(s, win) rows.
@compute @workgroup_size(64)
fn ring_write(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    let t = gid.y;
    if (j >= P.hd || t >= P.s) {
        return;
    }
    if (t + min(P.s, P.win) < P.s) {
        return;
    }
    let slot = (P.sp + t) % P.win;
    out[slot * P.hd + j] = a[t * P.hd + j];
}

// The window part (first ww columns) of every index row (spec §11.3): prefill rows
// j = max(0, t - win + 1) + c with j > t absent; decode: the ring oldest first with slots
// beyond the position absent. `off_by_one` is the fault injection (one row too early).
@compute @workgroup_size(64)
fn window_idx(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    let t = gid.y;
    if (c >= P.ww || t >= P.s) {
        return;
    }
    var j: i32;
    if (P.sp == 0u) {
        let first = i32(t + 1u) - i32(P.win);
        j = max(first, 0) + i32(c);
        if (j > i32(t)) {
            j = -1;
        }
    } else {
        let oldest = P.sp % P.win + 1u;
        j = i32((oldest + c) % P.win);
        if (j > i32(P.sp)) {
            j = -1;
        }
    }
    if (P.off_by_one != 0u && j >= 0) {
        j = j - 1;
    }
    out[t * P.w + c] = f32(j);
}

// Columns ww.. of every index row: the compressed indices (already offset).
@compute @workgroup_size(64)
fn idx_concat(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    let t = gid.y;
    if (c >= P.cw || t >= P.s) {
        return;
    }
    out[t * P.w + P.ww + c] = a[t * P.cw + c];
}

// acc + p_c * kv[j_c, d] for index column c when its row is present and p_c != 0.
fn pv_term(z: ptr<function, array<f32, MAX_COLS>>, acc: vec2<f32>, t: u32, c: u32, d: u32) -> vec2<f32> {
    let j = i32(idx[t * P.w + c]);
    if (j >= 0 && u32(j) < P.n_rows && (*z)[c] != 0.0) {
        return acc_fma(acc, (*z)[c], kv[u32(j) * P.hd + d]);
    }
    return acc;
}

// One lane per (token, head).
@compute @workgroup_size(64)
fn sparse_attn(@builtin(global_invocation_id) gid: vec3<u32>) {
    let th = gid.x;
    if (th >= P.s * P.n_heads) {
        return;
    }
    let t = th / P.n_heads;
    let hh = th % P.n_heads;
    let qb = th * P.hd;
    var z: array<f32, MAX_COLS>;
    var mx = sink[hh];
    for (var c = 0u; c < P.w; c = c + 1u) {
        let j = i32(idx[t * P.w + c]);
        if (j < 0 || u32(j) >= P.n_rows) {
            z[c] = neg_inf();
        } else {
            var acc = vec2<f32>(0.0, 0.0);
            let kb = u32(j) * P.hd;
            // Unrolled by 4 (same order of terms): llvmpipe ends any invocation's loops after
            // 65535 back-edges in total, which hd 512 x 128 columns would otherwise exceed.
            var d = 0u;
            for (; d + 4u <= P.hd; d = d + 4u) {
                acc = acc_fma(acc, a[qb + d], kv[kb + d]);
                acc = acc_fma(acc, a[qb + d + 1u], kv[kb + d + 1u]);
                acc = acc_fma(acc, a[qb + d + 2u], kv[kb + d + 2u]);
                acc = acc_fma(acc, a[qb + d + 3u], kv[kb + d + 3u]);
            }
            for (; d < P.hd; d = d + 1u) {
                acc = acc_fma(acc, a[qb + d], kv[kb + d]);
            }
            z[c] = keep(acc_f32(acc) * P.scale);
        }
        mx = max(mx, z[c]);
    }
    var sum = 0.0;
    for (var c = 0u; c < P.w; c = c + 1u) {
        z[c] = exp(z[c] - mx);
        sum = sum + z[c];
    }
    sum = sum + exp(sink[hh] - mx);
    let inv = 1.0 / sum;
    for (var c = 0u; c < P.w; c = c + 1u) {
        var p = keep(z[c] * inv);
        if (is_nan_f(p)) {
            p = 0.0;
        }
        z[c] = p;
    }
    for (var d = 0u; d < P.hd; d = d + 1u) {
        var acc = vec2<f32>(0.0, 0.0);
        // Unrolled by 4 like the scores (the llvmpipe back-edge budget).
        var c = 0u;
        for (; c + 4u <= P.w; c = c + 4u) {
            acc = pv_term(&z, acc, t, c, d);
            acc = pv_term(&z, acc, t, c + 1u, d);
            acc = pv_term(&z, acc, t, c + 2u, d);
            acc = pv_term(&z, acc, t, c + 3u, d);
        }
        for (; c < P.w; c = c + 1u) {
            acc = pv_term(&z, acc, t, c, d);
        }
        out[qb + d] = bf16r(acc_f32(acc));
    }
}
