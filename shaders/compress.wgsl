// Compressed-branch family (spec §12): compressor pooling, indexer scores with the causal mask,
// the candidate-mask consumer, candidate blocks, and the per-row top-k selection.
// GPU top-k tie rule (documented, deterministic): a value precedes another iff it is NaN and the
// other is not, or it is larger, or it is equal and has the lower index; an element is selected
// iff fewer than k elements precede it. torch CPU's introselect breaks ties differently, which
// the session counts as tie flips; `--reference-ties` runs the selections on the host instead.

struct Params {
    s: u32,
    t_vis: u32,
    ih: u32,
    ihd: u32,
    r: u32,
    prefill: u32,
    k: u32,
    offset: u32,
    block: u32,
    hd: u32,
    groups: u32,
    zero: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

fn opaque_zero() -> u32 { return P.zero; }
// pool: kv [groups·r, hd]; index_scores: iq [s, ih, ihd]; topk/candidates: scores [s, t_vis].
@group(0) @binding(1) var<storage, read> a: array<f32>;
// pool: score [groups·r, hd]; index_scores: keys [t_vis, ihd]; cand_mask_apply: mask.
@group(0) @binding(2) var<storage, read> b: array<f32>;
// index_scores: weights [s, ih]; topk_compact: the selection flags [s, t_vis].
@group(0) @binding(3) var<storage, read> c: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const MAX_RATIO: u32 = 16u;

// latent[g, d] = bf16(Σ_m kv[g·r + m, d] · softmax_m(score[g·r + ·, d])), f32 throughout.
@compute @workgroup_size(64)
fn pool(@builtin(global_invocation_id) gid: vec3<u32>) {
    let d = gid.x;
    let g = gid.y;
    if (d >= P.hd || g >= P.groups) {
        return;
    }
    var sc: array<f32, MAX_RATIO>;
    var mx = neg_inf();
    for (var m = 0u; m < P.r; m = m + 1u) {
        sc[m] = b[(g * P.r + m) * P.hd + d];
        mx = max(mx, sc[m]);
    }
    var sum = 0.0;
    for (var m = 0u; m < P.r; m = m + 1u) {
        sc[m] = exp(sc[m] - mx);
        sum = sum + sc[m];
    }
    let inv = 1.0 / sum;
    var acc = 0.0;
    for (var m = 0u; m < P.r; m = m + 1u) {
        let pm = keep(sc[m] * inv);
        acc = acc + keep(a[(g * P.r + m) * P.hd + d] * pm);
    }
    out[g * P.hd + d] = bf16r(acc);
}

fn clen_of(t: u32) -> u32 {
    if (P.prefill != 0u) {
        return (t + 1u) / P.r;
    }
    return P.t_vis;
}

// score[t, p] = bf16(Σ_h bf16(relu(bf16(iq[t, h] · key[p])) · w[t, h])), then -inf for
// positions a prefill query cannot see yet (p ≥ (t + 1) / r).
@compute @workgroup_size(64)
fn index_scores(@builtin(global_invocation_id) gid: vec3<u32>) {
    let p = gid.x;
    let t = gid.y;
    if (p >= P.t_vis || t >= P.s) {
        return;
    }
    var total = vec2<f32>(0.0, 0.0);
    for (var h = 0u; h < P.ih; h = h + 1u) {
        var acc = vec2<f32>(0.0, 0.0);
        let qb = (t * P.ih + h) * P.ihd;
        for (var j = 0u; j < P.ihd; j = j + 1u) {
            acc = acc_fma(acc, a[qb + j], b[p * P.ihd + j]);
        }
        let dot = bf16r(acc_f32(acc));
        let v = bf16r(keep(max(dot, 0.0) * c[t * P.ih + h]));
        total = acc_add(total, v);
    }
    var sc = bf16r(acc_f32(total));
    if (p >= clen_of(t)) {
        sc = neg_inf();
    }
    out[t * P.t_vis + p] = sc;
}

// Candidate consumer: scores outside the published block mask become -inf.
@compute @workgroup_size(64)
fn cand_mask_apply(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * 65535u * 64u;
    if (i >= P.s * P.t_vis) {
        return;
    }
    if (b[i] == 0.0) {
        out[i] = neg_inf();
    }
}

fn precedes(va: f32, ia: u32, vb: f32, ib: u32) -> bool {
    let na = is_nan_f(va);
    let nb = is_nan_f(vb);
    if (na || nb) {
        return na && (!nb || ia < ib);
    }
    return va > vb || (va == vb && ia < ib);
}

// Block score of block `bi` in row t: max over its positions, +inf for the block holding the
// query's newest visible position.
fn block_score(t: u32, bi: u32) -> f32 {
    let cl = clen_of(t);
    if (cl > 0u && (cl - 1u) / P.block == bi) {
        return pos_inf();
    }
    var mx = neg_inf();
    let lo = bi * P.block;
    let hi = min(lo + P.block, P.t_vis);
    for (var p = lo; p < hi; p = p + 1u) {
        mx = max(mx, a[t * P.t_vis + p]);
    }
    return mx;
}

// select_candidate_blocks (spec §12.5) with the GPU tie rule: one lane per (row, block) writes
// that block's positions of the [s, t_vis] keep mask (1 / 0).
@compute @workgroup_size(64)
fn candidate_blocks(@builtin(global_invocation_id) gid: vec3<u32>) {
    let bi = gid.x;
    let t = gid.y;
    let nb = (P.t_vis + P.block - 1u) / P.block;
    if (bi >= nb || t >= P.s) {
        return;
    }
    let v = block_score(t, bi);
    var rank = 0u;
    for (var o = 0u; o < nb; o = o + 1u) {
        if (o != bi && precedes(block_score(t, o), o, v, bi)) {
            rank = rank + 1u;
        }
    }
    var keep_it = 0.0;
    if (rank < min(P.k, nb) && v > neg_inf()) {
        keep_it = 1.0;
    }
    let lo = bi * P.block;
    let hi = min(lo + P.block, P.t_vis);
    for (var p = lo; p < hi; p = p + 1u) {
        out[t * P.t_vis + p] = keep_it;
    }
}

// Top-k selection flags [s, t_vis]: 1 where fewer than k values of the row precede it.
@compute @workgroup_size(64)
fn topk_flags(@builtin(global_invocation_id) gid: vec3<u32>) {
    let p = gid.x;
    let t = gid.y;
    if (p >= P.t_vis || t >= P.s) {
        return;
    }
    let v = a[t * P.t_vis + p];
    var rank = 0u;
    for (var o = 0u; o < P.t_vis; o = o + 1u) {
        if (o != p && precedes(a[t * P.t_vis + o], o, v, p)) {
            rank = rank + 1u;
        }
    }
    var f = 0.0;
    if (rank < P.k) {
        f = 1.0;
    }
    out[t * P.t_vis + p] = f;
}

// The selected positions of each row in ascending order, mapped to p + offset when the query
// can see p and -1 otherwise: out [s, k].
@compute @workgroup_size(64)
fn topk_compact(@builtin(global_invocation_id) gid: vec3<u32>) {
    let p = gid.x;
    let t = gid.y;
    if (p >= P.t_vis || t >= P.s || c[t * P.t_vis + p] == 0.0) {
        return;
    }
    var slot = 0u;
    for (var o = 0u; o < p; o = o + 1u) {
        if (c[t * P.t_vis + o] != 0.0) {
            slot = slot + 1u;
        }
    }
    var v = -1.0;
    if (p < clen_of(t)) {
        v = f32(p + P.offset);
    }
    out[t * P.k + slot] = v;
}
