// Row-wise family: RMSNorm (spec §6), row gather, stream expansion, bf16 scaling, f32 add with
// rounding, and the fault-injection perturbations used by `--inject`.

struct Params {
    rows: u32,
    width: u32,
    ldx: u32,
    x_off: u32,
    ldy: u32,
    y_off: u32,
    copies: u32,
    zero: u32,
    eps: f32,
    scale: f32,
    mask: u32,
    count: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

fn opaque_zero() -> u32 { return P.zero; }
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> idx: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

var<workgroup> row_scale: f32;

// One workgroup per row: the mean of squares is summed in one fixed order by lane 0 (f32
// squares, pair accumulation as the oracle's f64 sum), then every lane writes bf16(w · (x · r)).
@compute @workgroup_size(64)
fn rmsnorm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = wid.x;
    let xb = r * P.ldx + P.x_off;
    if (lid.x == 0u) {
        var acc = vec2<f32>(0.0, 0.0);
        for (var j = 0u; j < P.width; j = j + 1u) {
            let v = x[xb + j];
            acc = acc_add(acc, keep(v * v));
        }
        let n = f32(P.width);
        let mean = acc.x / n + acc.y / n;
        row_scale = 1.0 / sqrt(mean + P.eps);
    }
    workgroupBarrier();
    let rs = row_scale;
    for (var j = lid.x; j < P.width; j = j + 64u) {
        let t = keep(x[xb + j] * rs);
        y[r * P.ldy + P.y_off + j] = bf16r(w[j] * t);
    }
}

// y[r, :] = x[idx[r], :] (indices carried as exact f32 integers).
@compute @workgroup_size(64)
fn gather_rows(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    let r = gid.y;
    if (j >= P.width || r >= P.rows) {
        return;
    }
    let src = u32(idx[r]);
    y[r * P.ldy + P.y_off + j] = x[src * P.ldx + P.x_off + j];
}

// The embedding repeated into `copies` identical stream copies: y[r, c, :] = x[r, :].
@compute @workgroup_size(64)
fn expand(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    let r = gid.y;
    if (j >= P.width || r >= P.rows) {
        return;
    }
    for (var c = 0u; c < P.copies; c = c + 1u) {
        y[(r * P.copies + c) * P.width + j] = x[r * P.width + j];
    }
}

// y = bf16(x · scale), elementwise over `count` values (a bf16 tensor times a Python float).
@compute @workgroup_size(64)
fn scale_round(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * 65535u * 64u;
    if (i >= P.count) {
        return;
    }
    y[i] = bf16r(x[i] * P.scale);
}

// y = bf16(x + w), elementwise (routed sum plus shared expert, in f32, one rounding).
@compute @workgroup_size(64)
fn add_round(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * 65535u * 64u;
    if (i >= P.count) {
        return;
    }
    y[i] = bf16r(x[i] + w[i]);
}

// y[idx[r], :] += x[r, :] (rows are distinct within one dispatch, so no two lanes collide).
@compute @workgroup_size(64)
fn scatter_add(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    let r = gid.y;
    if (j >= P.width || r >= P.rows) {
        return;
    }
    let dst = u32(idx[r]);
    y[dst * P.width + j] = y[dst * P.width + j] + x[r * P.width + j];
}

// Fault injection, bit flip: y[count] ^= mask (an exponent bit for floats).
@compute @workgroup_size(1)
fn bitflip() {
    y[P.count] = bitcast<f32>(bitcast<u32>(y[P.count]) ^ P.mask);
}

// Fault injection, dropped workgroup: the first `count` outputs are left as a zero-initialised
// buffer would hold them.
@compute @workgroup_size(64)
fn drop_first(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < P.count) {
        y[P.y_off + gid.x] = 0.0;
    }
}
