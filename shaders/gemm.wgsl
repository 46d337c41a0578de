// GEMM family: y[i, y_off + o] = x[i, x_off .. x_off + k] · w[w_row_off + o, 0 .. k]^T for one
// chunk of weight rows (spec §6, §19.2). Exact products, pair accumulation, one rounding to f32
// and, for GEMM-bf16, one more to bf16. One thread per output element.

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
    var v = acc_f32(acc);
    if (P.round_bf16 != 0u) {
        v = bf16r(v);
    }
    y[i * P.ldy + P.y_off + o] = v;
}
