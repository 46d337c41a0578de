// Shared helpers prepended to every kernel family (WGSL has no includes).
// bf16 is emulated on f32 bits with round-to-nearest-even (spec §21); wide dot products use
// exact products (operands split into 12-bit halves by masking the bits, so no FMA contraction
// can change them) accumulated as an unevaluated f32 pair (TwoSum), which mirrors the oracle's
// f64 accumulation to within about 2^-44 relative before the one rounding to f32.

const NEG_INF_BITS: u32 = 0xff800000u;
const POS_INF_BITS: u32 = 0x7f800000u;

fn neg_inf() -> f32 { return bitcast<f32>(NEG_INF_BITS); }
fn pos_inf() -> f32 { return bitcast<f32>(POS_INF_BITS); }
fn is_nan_f(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }

// f32 -> nearest bf16 (RNE on the bits), as the f32 it represents; NaN stays NaN (quiet).
fn bf16r(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return bitcast<f32>((b | 0x00400000u) & 0xffff0000u);
    }
    let r = b + 0x7fffu + ((b >> 16u) & 1u);
    return bitcast<f32>(r & 0xffff0000u);
}

// An opaque identity: OR-ing a runtime zero into the bits forces `x` to be materialised as a
// rounded f32, so a compiler cannot contract the product that made it into a later FMA.
// `opaque_zero()` is defined by every family as its uniform's `zero` field (always 0).
fn keep(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) | opaque_zero()); }

// Upper 12 significant bits of x (exact split: x = hi(x) + (x - hi(x)), both exact in f32).
fn hi12(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) & 0xfffff000u); }

// An unevaluated sum s.x + s.y.
// Every step is kept opaque: a compiler that treats float math as associative (Mesa's NIR
// does for inexact ops) would otherwise fold the error terms to zero.
fn two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = keep(a + b);
    let bb = keep(s - a);
    let err = keep(a - keep(s - bb)) + keep(b - bb);
    return vec2<f32>(s, keep(err));
}

// acc + v, keeping the pair normalised.
fn acc_add(acc: vec2<f32>, v: f32) -> vec2<f32> {
    let t = two_sum(acc.x, v);
    let lo = keep(t.y + acc.y);
    let s = keep(t.x + lo);
    return vec2<f32>(s, keep(lo - keep(s - t.x)));
}

// acc + a*b with the product made exact as a sum of four f32 products of 12-bit halves.
fn acc_fma(acc: vec2<f32>, a: f32, b: f32) -> vec2<f32> {
    let ah = hi12(a);
    let al = keep(a - ah);
    let bh = hi12(b);
    let bl = keep(b - bh);
    // bf16 operands have at most 8 significant bits, so their low halves are zero: skip the
    // zero products (adding an exact zero would not change the pair).
    var r = acc_add(acc, keep(ah * bh));
    if (bl != 0.0) {
        r = acc_add(r, keep(ah * bl));
    }
    if (al != 0.0) {
        r = acc_add(r, keep(al * bh));
        if (bl != 0.0) {
            r = acc_add(r, keep(al * bl));
        }
    }
    return r;
}

// Sum of two pairs.
fn acc_join(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    let r = acc_add(a, b.x);
    return acc_add(r, b.y);
}

// The pair rounded once to f32.
fn acc_f32(acc: vec2<f32>) -> f32 { return keep(acc.x + acc.y); }

fn sigmoid_f(x: f32) -> f32 { return 1.0 / (1.0 + exp(-x)); }
