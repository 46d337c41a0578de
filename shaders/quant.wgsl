// Quantiser round trips (spec §13), pure f32 bit manipulation, one lane per block:
// mode 0: fp8 e4m3 with a pow2-ceil (ue8m0) scale, block 32 (window KV);
// mode 1: fp4 e2m1 with an e8m0 pow2-ceil scale, block 32 (index q and k);
// mode 2: fp4 e2m1 with an e4m3 scale, block 16 (compressed KV latent).
// Scales divide (shim semantics), as the golden does.

struct Params {
    n_blocks: u32,
    block: u32,
    mode: u32,
    zero: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

fn opaque_zero() -> u32 { return P.zero; }
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

fn pow2_normal(e: i32) -> f32 { return bitcast<f32>(u32(e + 127) << 23u); }

// 2^ceil(log2 x) on the bits (exponent - 127, +1 iff the mantissa is non-zero).
fn pow2_ceil(x: f32) -> f32 {
    let bits = bitcast<u32>(x) & 0x7fffffffu;
    let ef = i32(bits >> 23u);
    let mant = bits & 0x7fffffu;
    if (ef == 0 && mant == 0u) {
        return 0.0;
    }
    var e = ef - 127;
    if (mant != 0u) {
        e = e + 1;
    }
    if (e > 127) {
        return pos_inf();
    }
    return pow2_normal(max(e, -126));
}

// f32 -> e4m3fn value (RNE, NaN code for magnitudes that round above 448), decoded back.
fn e4m3_round(x: f32) -> f32 {
    let a = abs(x);
    var m: f32;
    if (a < 0.015625) {
        m = round(a * 512.0) / 512.0;
    } else {
        var e = i32((bitcast<u32>(a) >> 23u) & 0xffu) - 127;
        if (e > 8) {
            return bitcast<f32>(0x7fc00000u);
        }
        var q = round(a * pow2_normal(3 - e));
        if (q == 16.0) {
            e = e + 1;
            q = 8.0;
        }
        if (e + 7 > 15 || (e + 7 == 15 && q == 15.0)) {
            return bitcast<f32>(0x7fc00000u);
        }
        m = q / 8.0 * pow2_normal(e);
    }
    if (x < 0.0 || bitcast<u32>(x) == 0x80000000u) {
        return -m;
    }
    return m;
}

// |v| rounded on the e2m1 grid {0, .5, 1, 1.5, 2, 3, 4, 6}, ties to the even code; sign kept.
fn e2m1_round(v: f32) -> f32 {
    let a = abs(v);
    var grid = array<f32, 8>(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0);
    var lo = 7u;
    if (!is_nan_f(a)) {
        lo = 0u;
        for (var i = 1u; i < 8u; i = i + 1u) {
            if (grid[i] <= a) {
                lo = i;
            }
        }
    }
    let hi = min(lo + 1u, 7u);
    let d_lo = a - grid[lo];
    let d_hi = grid[hi] - a;
    var pick = grid[lo];
    if (d_hi < d_lo || (d_hi == d_lo && (hi % 2u) == 0u && (lo % 2u) == 1u)) {
        pick = grid[hi];
    }
    if (v < 0.0 || bitcast<u32>(v) == 0x80000000u) {
        return -pick;
    }
    return pick;
}

fn clamp_min_keep_nan(x: f32, lo: f32) -> f32 {
    if (is_nan_f(x)) {
        return x;
    }
    return max(x, lo);
}

@compute @workgroup_size(64)
fn quant(@builtin(global_invocation_id) gid: vec3<u32>) {
    let b = gid.x + gid.y * 65535u * 64u;
    if (b >= P.n_blocks) {
        return;
    }
    let base = b * P.block;
    var amax = 0.0;
    for (var i = 0u; i < P.block; i = i + 1u) {
        amax = max(amax, abs(y[base + i]));
    }
    var s: f32;
    if (P.mode == 0u) {
        s = pow2_ceil(clamp_min_keep_nan(amax, 1e-4) / 448.0);
    } else if (P.mode == 1u) {
        s = pow2_ceil(clamp_min_keep_nan(amax, 6.0 * 1.1754943508222875e-38) / 6.0);
    } else {
        s = e4m3_round(clamp_min_keep_nan(amax, 6.0 * 0.001953125) / 6.0);
    }
    for (var i = 0u; i < P.block; i = i + 1u) {
        let v = y[base + i];
        var q: f32;
        if (P.mode == 0u) {
            q = e4m3_round(clamp(v / s, -448.0, 448.0));
        } else {
            q = e2m1_round(clamp(v / s, -6.0, 6.0));
        }
        y[base + i] = bf16r(keep(q * s));
    }
}
