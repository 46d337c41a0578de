// GEMM family: y[i, y_off + o] = x[i, x_off .. x_off + k] · w[w_row_off + o, 0 .. k]^T for one
// chunk of weight rows (spec §6, §19.2). Exact products, pair accumulation, one rounding to f32
// and, for GEMM-bf16, one more to bf16.
//
// Entry points with the same arithmetic per output element (so the same bits):
// * `gemm`: one thread per output, x and w read from storage at every k step (the original
//   kernel; GEMV shapes, m <= 2, gain nothing from reuse across rows and stay per output).
// * `gemm_rows4`: one thread per column and four rows, registers only (small m; lavapipe).
// * `gemm_tiled`: a workgroup owns a 16 x 64 block of y; each k slab of 16 columns of x and w is
//   staged in workgroup memory (10 KiB), already split into the 12-bit halves the exact
//   products use, and each thread accumulates a 4 x 4 register tile.
// * `gemm_bw`, `gemm_rows4_bw`, `gemm_tiled_bw`: the same for a weight chunk the host found
//   free of low halves (`WeightTensor::low_halves`).
// Which one runs is `GemmKernel::for_shape` in src/gpu/gemm.rs.
// All run j = 0 .. k - 1 in order into one pair accumulator per output and apply the same
// zero-half skips as `acc_fma`, so an output's bits do not depend on the entry point.

struct Params {
    m: u32,
    k: u32,
    n: u32,
    ldx: u32,
    x_off: u32,
    ldy: u32,
    y_off: u32,
    w_row_off: u32,
    round_bf16: u32,
    zero: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

fn opaque_zero() -> u32 { return P.zero; }
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

// The final rounding(s) of one output.
fn gemm_out(acc: vec2<f32>) -> f32 {
    var v = acc_f32(acc);
    if (P.round_bf16 != 0u) {
        v = bf16r(v);
    }
    return v;
}

// `acc_fma(acc, a, b)` with a = ah + al and b = bh + bl already split: the same products in the
// same order, the same skips of zero low halves. `w_lo` is a literal at every call: false where
// the host knows every low half of w is zero (`bl != 0.0` could never hold), so the compiler
// drops those branches (lavapipe runs both sides of a branch under a mask, so a branch that is
// never taken still costs its whole body there).
fn acc_fma_split(acc: vec2<f32>, ah: f32, al: f32, bh: f32, bl: f32, w_lo: bool) -> vec2<f32> {
    var r = acc_add(acc, keep(ah * bh));
    if (w_lo && bl != 0.0) {
        r = acc_add(r, keep(ah * bl));
    }
    if (al != 0.0) {
        r = acc_add(r, keep(al * bh));
        if (w_lo && bl != 0.0) {
            r = acc_add(r, keep(al * bl));
        }
    }
    return r;
}

// `gemm` on split operands (`gemm_bw` passes w_lo = false).
fn gemm_per_output(gid: vec3<u32>, w_lo: bool) {
    let o = gid.x;
    let i = gid.y;
    if (o >= P.n || i >= P.m) {
        return;
    }
    let xb = i * P.ldx + P.x_off;
    let wb = (P.w_row_off + o) * P.k;
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = 0u; j < P.k; j = j + 1u) {
        let a = x[xb + j];
        let b = w[wb + j];
        let ah = hi12(a);
        let bh = hi12(b);
        acc = acc_fma_split(acc, ah, keep(a - ah), bh, keep(b - bh), w_lo);
    }
    y[i * P.ldy + P.y_off + o] = gemm_out(acc);
}

// The original kernel, kept verbatim: `acc_fma` is `acc_fma_split(.., true)`.
@compute @workgroup_size(64)
fn gemm(@builtin(global_invocation_id) gid: vec3<u32>) {
    let o = gid.x;
    let i = gid.y;
    if (o >= P.n || i >= P.m) {
        return;
    }
    let xb = i * P.ldx + P.x_off;
    let wb = (P.w_row_off + o) * P.k;
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = 0u; j < P.k; j = j + 1u) {
        acc = acc_fma(acc, x[xb + j], w[wb + j]);
    }
    y[i * P.ldy + P.y_off + o] = gemm_out(acc);
}

// `gemm` for a weight chunk without low halves (every value finite with its low 12 mantissa
// bits clear, e.g. bf16): the same bits, fewer instructions.
@compute @workgroup_size(64)
fn gemm_bw(@builtin(global_invocation_id) gid: vec3<u32>) {
    gemm_per_output(gid, false);
}

// ---- four rows per thread ----------------------------------------------------------------

// Thread (o, i0/4) accumulates column o of rows i0 .. i0 + 3: w[o, j] is read and split once per
// j for four outputs, x[i, j] is the same for all threads of a workgroup (a broadcast). No
// workgroup memory and no barriers: the small-m shape (a few tokens) on any adapter, and on a
// CPU adapter (lavapipe) the fastest entry point for every m > 2.
fn gemm_rows4_body(gid: vec3<u32>, w_lo: bool) {
    let o = gid.x;
    let i0 = gid.y * 4u;
    if (o >= P.n || i0 >= P.m) {
        return;
    }
    let wb = (P.w_row_off + o) * P.k;
    // Rows past m read row m - 1 (inside x; their outputs are not written).
    let last = P.m - 1u;
    let x0 = i0 * P.ldx + P.x_off;
    let x1 = min(i0 + 1u, last) * P.ldx + P.x_off;
    let x2 = min(i0 + 2u, last) * P.ldx + P.x_off;
    let x3 = min(i0 + 3u, last) * P.ldx + P.x_off;
    var c0 = vec2<f32>(0.0, 0.0);
    var c1 = vec2<f32>(0.0, 0.0);
    var c2 = vec2<f32>(0.0, 0.0);
    var c3 = vec2<f32>(0.0, 0.0);
    for (var j = 0u; j < P.k; j = j + 1u) {
        let b = w[wb + j];
        let bh = hi12(b);
        let bl = keep(b - bh);
        let a0 = x[x0 + j];
        let a1 = x[x1 + j];
        let a2 = x[x2 + j];
        let a3 = x[x3 + j];
        let h0 = hi12(a0);
        let h1 = hi12(a1);
        let h2 = hi12(a2);
        let h3 = hi12(a3);
        c0 = acc_fma_split(c0, h0, keep(a0 - h0), bh, bl, w_lo);
        c1 = acc_fma_split(c1, h1, keep(a1 - h1), bh, bl, w_lo);
        c2 = acc_fma_split(c2, h2, keep(a2 - h2), bh, bl, w_lo);
        c3 = acc_fma_split(c3, h3, keep(a3 - h3), bh, bl, w_lo);
    }
    let yo = P.y_off + o;
    y[i0 * P.ldy + yo] = gemm_out(c0);
    if (i0 + 1u < P.m) {
        y[(i0 + 1u) * P.ldy + yo] = gemm_out(c1);
    }
    if (i0 + 2u < P.m) {
        y[(i0 + 2u) * P.ldy + yo] = gemm_out(c2);
    }
    if (i0 + 3u < P.m) {
        y[(i0 + 3u) * P.ldy + yo] = gemm_out(c3);
    }
}

@compute @workgroup_size(64)
fn gemm_rows4(@builtin(global_invocation_id) gid: vec3<u32>) {
    gemm_rows4_body(gid, true);
}

// `gemm_rows4` for a weight chunk without low halves (see `gemm_bw`).
@compute @workgroup_size(64)
fn gemm_rows4_bw(@builtin(global_invocation_id) gid: vec3<u32>) {
    gemm_rows4_body(gid, false);
}

// ---- tiled ----------------------------------------------------------------------------------

// Threads of a workgroup: 16 along n (fastest) by 4 along m. Thread (tx, ty) owns rows
// ty + 4a and columns tx + 16b of the block, a, b = 0..3 (interleaved, so the threads of a row
// of the workgroup touch consecutive columns). The 4 x 4 register tile is written out as 16
// variables: an array indexed in a loop is not promoted to registers by every compiler.
const THREADS: u32 = 64u;
const TILE_M: u32 = 16u;
const TILE_N: u32 = 64u;
const TILE_K: u32 = 16u;

// Slabs, k-major: [TILE_K][TILE_M] and [TILE_K][TILE_N], as high and low 12-bit halves.
var<workgroup> xs_hi: array<f32, 256>;
var<workgroup> xs_lo: array<f32, 256>;
var<workgroup> ws_hi: array<f32, 1024>;
var<workgroup> ws_lo: array<f32, 1024>;

fn gemm_tiled_body(lid: vec3<u32>, li: u32, wid: vec3<u32>, w_lo: bool) {
    let n0 = wid.x * TILE_N;
    let m0 = wid.y * TILE_M;
    let tx = lid.x;
    let ty = lid.y;
    var c00 = vec2<f32>(0.0, 0.0); var c01 = vec2<f32>(0.0, 0.0); var c02 = vec2<f32>(0.0, 0.0); var c03 = vec2<f32>(0.0, 0.0);
    var c10 = vec2<f32>(0.0, 0.0); var c11 = vec2<f32>(0.0, 0.0); var c12 = vec2<f32>(0.0, 0.0); var c13 = vec2<f32>(0.0, 0.0);
    var c20 = vec2<f32>(0.0, 0.0); var c21 = vec2<f32>(0.0, 0.0); var c22 = vec2<f32>(0.0, 0.0); var c23 = vec2<f32>(0.0, 0.0);
    var c30 = vec2<f32>(0.0, 0.0); var c31 = vec2<f32>(0.0, 0.0); var c32 = vec2<f32>(0.0, 0.0); var c33 = vec2<f32>(0.0, 0.0);
    for (var j0 = 0u; j0 < P.k; j0 = j0 + TILE_K) {
        // Stage the slab: element (r, c) is row r, column j0 + c of the operand, 0 outside it
        // (never used: the k loop below stops at k, and outputs outside y are not written).
        for (var q = 0u; q < TILE_M * TILE_K / THREADS; q = q + 1u) {
            let e = li + THREADS * q;
            let r = e / TILE_K;
            let c = e % TILE_K;
            let i = m0 + r;
            let j = j0 + c;
            var v = 0.0;
            if (i < P.m && j < P.k) {
                v = x[i * P.ldx + P.x_off + j];
            }
            let h = hi12(v);
            xs_hi[c * TILE_M + r] = h;
            xs_lo[c * TILE_M + r] = keep(v - h);
        }
        for (var q = 0u; q < TILE_N * TILE_K / THREADS; q = q + 1u) {
            let e = li + THREADS * q;
            let r = e / TILE_K;
            let c = e % TILE_K;
            let o = n0 + r;
            let j = j0 + c;
            var v = 0.0;
            if (o < P.n && j < P.k) {
                v = w[(P.w_row_off + o) * P.k + j];
            }
            let h = hi12(v);
            ws_hi[c * TILE_N + r] = h;
            ws_lo[c * TILE_N + r] = keep(v - h);
        }
        workgroupBarrier();
        let kt = min(TILE_K, P.k - j0);
        for (var c = 0u; c < kt; c = c + 1u) {
            let xr = c * TILE_M + ty;
            let wr = c * TILE_N + tx;
            let ah0 = xs_hi[xr + 0u];
            let al0 = xs_lo[xr + 0u];
            let ah1 = xs_hi[xr + 4u];
            let al1 = xs_lo[xr + 4u];
            let ah2 = xs_hi[xr + 8u];
            let al2 = xs_lo[xr + 8u];
            let ah3 = xs_hi[xr + 12u];
            let al3 = xs_lo[xr + 12u];
            let bh0 = ws_hi[wr + 0u];
            let bl0 = ws_lo[wr + 0u];
            let bh1 = ws_hi[wr + 16u];
            let bl1 = ws_lo[wr + 16u];
            let bh2 = ws_hi[wr + 32u];
            let bl2 = ws_lo[wr + 32u];
            let bh3 = ws_hi[wr + 48u];
            let bl3 = ws_lo[wr + 48u];
            c00 = acc_fma_split(c00, ah0, al0, bh0, bl0, w_lo);
            c01 = acc_fma_split(c01, ah0, al0, bh1, bl1, w_lo);
            c02 = acc_fma_split(c02, ah0, al0, bh2, bl2, w_lo);
            c03 = acc_fma_split(c03, ah0, al0, bh3, bl3, w_lo);
            c10 = acc_fma_split(c10, ah1, al1, bh0, bl0, w_lo);
            c11 = acc_fma_split(c11, ah1, al1, bh1, bl1, w_lo);
            c12 = acc_fma_split(c12, ah1, al1, bh2, bl2, w_lo);
            c13 = acc_fma_split(c13, ah1, al1, bh3, bl3, w_lo);
            c20 = acc_fma_split(c20, ah2, al2, bh0, bl0, w_lo);
            c21 = acc_fma_split(c21, ah2, al2, bh1, bl1, w_lo);
            c22 = acc_fma_split(c22, ah2, al2, bh2, bl2, w_lo);
            c23 = acc_fma_split(c23, ah2, al2, bh3, bl3, w_lo);
            c30 = acc_fma_split(c30, ah3, al3, bh0, bl0, w_lo);
            c31 = acc_fma_split(c31, ah3, al3, bh1, bl1, w_lo);
            c32 = acc_fma_split(c32, ah3, al3, bh2, bl2, w_lo);
            c33 = acc_fma_split(c33, ah3, al3, bh3, bl3, w_lo);
        }
        workgroupBarrier();
    }
    gemm_store_row(m0 + ty + 0u, n0 + tx, c00, c01, c02, c03);
    gemm_store_row(m0 + ty + 4u, n0 + tx, c10, c11, c12, c13);
    gemm_store_row(m0 + ty + 8u, n0 + tx, c20, c21, c22, c23);
    gemm_store_row(m0 + ty + 12u, n0 + tx, c30, c31, c32, c33);
}

// Row i of a thread's register tile: columns o0 + 16b, b = 0..3, where inside y.
fn gemm_store_row(i: u32, o0: u32, v0: vec2<f32>, v1: vec2<f32>, v2: vec2<f32>, v3: vec2<f32>) {
    if (i >= P.m) {
        return;
    }
    let yb = i * P.ldy + P.y_off;
    if (o0 < P.n) {
        y[yb + o0] = gemm_out(v0);
    }
    if (o0 + 16u < P.n) {
        y[yb + o0 + 16u] = gemm_out(v1);
    }
    if (o0 + 32u < P.n) {
        y[yb + o0 + 32u] = gemm_out(v2);
    }
    if (o0 + 48u < P.n) {
        y[yb + o0 + 48u] = gemm_out(v3);
    }
}

@compute @workgroup_size(16, 4)
fn gemm_tiled(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    gemm_tiled_body(lid, li, wid, true);
}

// `gemm_tiled` for a weight chunk without low halves (see `gemm_bw`).
@compute @workgroup_size(16, 4)
fn gemm_tiled_bw(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    gemm_tiled_body(lid, li, wid, false);
}
