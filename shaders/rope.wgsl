// RoPE family (spec §6, §11.2): rotate the last 2·half values of each row by its position's
// (cos, sin) from a host-built table (the reference's freqs_cis), or by the conjugate for the
// inverse; real and imaginary parts are rounded to bf16 once each.

struct Params {
    rows: u32,
    width: u32,
    start: u32,
    half: u32,
    rows_per_pos: u32,
    pos_base: u32,
    pos_step: u32,
    inverse: u32,
    zero: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

fn opaque_zero() -> u32 { return P.zero; }
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn rope(@builtin(global_invocation_id) gid: vec3<u32>) {
    let k = gid.x;
    let r = gid.y;
    if (k >= P.half || r >= P.rows) {
        return;
    }
    let pos = P.pos_base + (r / P.rows_per_pos) * P.pos_step;
    let c = table[(pos * P.half + k) * 2u];
    var s = table[(pos * P.half + k) * 2u + 1u];
    if (P.inverse != 0u) {
        s = -s;
    }
    let i = r * P.width + P.start + 2u * k;
    let a = y[i];
    let b = y[i + 1u];
    let re = keep(a * c) - keep(b * s);
    let im = keep(a * s) + keep(b * c);
    y[i] = bf16r(re);
    y[i + 1u] = bf16r(im);
}
