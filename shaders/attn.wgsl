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
    // sparse_attn: the first (token, head) row of this dispatch.
    row0: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
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

// Probabilities of the (token, head) row a workgroup owns: scores, then exp(score - max),
// then p (one per index column; the sink is only in the denominator).
var<workgroup> z: array<f32, MAX_COLS>;
var<workgroup> row_inv: f32;

// Row q.k score of index column c: the hd products in order d = 0 .. hd - 1, scaled once.
fn qk_score(t: u32, qb: u32, c: u32) -> f32 {
    let j = i32(idx[t * P.w + c]);
    if (j < 0 || u32(j) >= P.n_rows) {
        return neg_inf();
    }
    var acc = vec2<f32>(0.0, 0.0);
    let kb = u32(j) * P.hd;
    // Unrolled by 4 (same order of terms): fewer loop back-edges per invocation (below).
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
    return keep(acc_f32(acc) * P.scale);
}

// One workgroup per (token, head) row `row0 + workgroup_id.x` (the host splits the rows into
// dispatches of at most 65535 workgroups). Mesa's llvmpipe ends an invocation's loops after 65535
// back-edges in total, which one lane per row passed at hd 512 x a few hundred columns; here
// the invocations split the columns for q.k and the output dims for p.v, so one of them loops
// about (w / 64) · hd / 4 + 2w + (hd / 256) · w times (about 6,200 at hd 512 x 1023 columns).
// Every sum runs in the order the one-lane kernel used, so the bits are the same: each
// column's q.k over d in order, the max and the softmax sum over c in order by invocation 0,
// each output dim's p.v over c in order.
@compute @workgroup_size(64)
fn sparse_attn(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let th = P.row0 + wid.x;
    if (th >= P.s * P.n_heads) {
        return;
    }
    let t = th / P.n_heads;
    let hh = th % P.n_heads;
    let qb = th * P.hd;
    for (var c = lid.x; c < P.w; c = c + 64u) {
        z[c] = qk_score(t, qb, c);
    }
    workgroupBarrier();
    if (lid.x == 0u) {
        var mx = sink[hh];
        for (var c = 0u; c < P.w; c = c + 1u) {
            mx = max(mx, z[c]);
        }
        var sum = 0.0;
        for (var c = 0u; c < P.w; c = c + 1u) {
            z[c] = exp(z[c] - mx);
            sum = sum + z[c];
        }
        sum = sum + exp(sink[hh] - mx);
        row_inv = 1.0 / sum;
    }
    workgroupBarrier();
    let inv = row_inv;
    for (var c = lid.x; c < P.w; c = c + 64u) {
        var p = keep(z[c] * inv);
        if (is_nan_f(p)) {
            p = 0.0;
        }
        z[c] = p;
    }
    workgroupBarrier();
    // p·v in blocks of 256 dims: the invocation owns dims base + lid + 64k, k < 4, and reads
    // each column's index and probability once for the four (dims past hd read dim hd - 1,
    // inside kv; their sums are not written). Each dim's sum still runs over c in order.
    let last = P.hd - 1u;
    for (var base = 0u; base < P.hd; base = base + 256u) {
        let d0 = base + lid.x;
        let e0 = min(d0, last);
        let e1 = min(d0 + 64u, last);
        let e2 = min(d0 + 128u, last);
        let e3 = min(d0 + 192u, last);
        var a0 = vec2<f32>(0.0, 0.0);
        var a1 = vec2<f32>(0.0, 0.0);
        var a2 = vec2<f32>(0.0, 0.0);
        var a3 = vec2<f32>(0.0, 0.0);
        for (var c = 0u; c < P.w; c = c + 1u) {
            let j = i32(idx[t * P.w + c]);
            let p = z[c];
            if (j >= 0 && u32(j) < P.n_rows && p != 0.0) {
                let kb = u32(j) * P.hd;
                a0 = acc_fma(a0, p, kv[kb + e0]);
                a1 = acc_fma(a1, p, kv[kb + e1]);
                a2 = acc_fma(a2, p, kv[kb + e2]);
                a3 = acc_fma(a3, p, kv[kb + e3]);
            }
        }
        if (d0 < P.hd) {
            out[qb + d0] = bf16r(acc_f32(a0));
        }
        if (d0 + 64u < P.hd) {
            out[qb + d0 + 64u] = bf16r(acc_f32(a1));
        }
        if (d0 + 128u < P.hd) {
            out[qb + d0 + 128u] = bf16r(acc_f32(a2));
        }
        if (d0 + 192u < P.hd) {
            out[qb + d0 + 192u] = bf16r(acc_f32(a3));
        }
    }
}
