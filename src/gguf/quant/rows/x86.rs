//! The explicit x86 row decoders (AVX2 + F16C), picked at run time by `dispatch_x86!` in
//! `rows.rs`: the same operations as the portable bodies there, in the same order, several lanes
//! at a time.

use super::{iq2xxs, kquants, legacy, mxfp4, u32_at, IQ2XXS_GRID_F32};
use std::arch::x86_64::*;

/// `KVALUES_DOUBLED` as a byte-shuffle table.
const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// MXFP4 blocks: nibbles looked up with `pshufb`, widened, converted and scaled, as
/// `d * f32::from(kvalue)` in the reference.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn mxfp4_avx2<const R: bool>(bytes: &[u8], out: &mut [f32]) {
    let table = _mm_loadu_si128(KVALUES.as_ptr().cast());
    let nib = _mm_set1_epi8(0x0f);
    for (b, o) in bytes
        .chunks_exact(mxfp4::BLOCK_BYTES)
        .zip(out.chunks_exact_mut(32))
    {
        let d = _mm256_set1_ps(mxfp4::e8m0_to_f32_half(b[0]));
        let src: &[u8; 16] = b[1..17].try_into().expect("a block holds 16 code bytes");
        // SAFETY: `src` is 16 readable bytes.
        let q = unsafe { _mm_loadu_si128(src.as_ptr().cast()) };
        let lo = _mm_shuffle_epi8(table, _mm_and_si128(q, nib));
        let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), nib));
        let dst: &mut [f32; 32] = o.try_into().expect("a block has 32 values");
        let p = dst.as_mut_ptr();
        for (i, v) in [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)]
            .into_iter()
            .enumerate()
        {
            let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
            // SAFETY: `p + 8i .. p + 8i + 8` lies inside the 32 values of `dst`.
            // A power of two times a small integer: never NaN.
            unsafe { store8::<R>(p.add(8 * i), _mm256_mul_ps(d, f), true) };
        }
    }
}

/// 16 bytes of `s` (which must hold at least 16).
#[target_feature(enable = "avx2")]
#[inline]
fn load16(s: &[u8]) -> __m128i {
    assert!(s.len() >= 16);
    // SAFETY: 16 readable bytes, checked just above.
    unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
}

/// Stores eight values at `p`, rounded to bf16 first when `R` (the rule of
/// `round_bf16_one`; `finite` promises no lane is NaN, which lets the rounding skip its NaN
/// branch: every decoder passes it per block from its scales).
///
/// # Safety
/// `p` must be valid for eight f32 writes.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn store8<const R: bool>(p: *mut f32, y: __m256, finite: bool) {
    let y = match (R, finite) {
        (false, _) => y,
        (true, true) => round8_finite(y),
        (true, false) => round8(y),
    };
    // SAFETY: the caller guarantees eight writable f32 at `p`.
    unsafe { _mm256_storeu_ps(p, y) }
}

/// `round_bf16_one` on eight bf16-representable lanes: only NaNs change (quiet bit set).
#[target_feature(enable = "avx2")]
#[inline]
fn quiet_nans(bits: __m256i) -> __m256i {
    let abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fff_ffff));
    let nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f80_0000));
    _mm256_or_si256(bits, _mm256_and_si256(nan, _mm256_set1_epi32(0x0040_0000)))
}

/// `round_bf16_one` on eight lanes known not to be NaN (infinities are fine): the NaN
/// branch is the only difference, so the bits are those of [`round8`].
#[target_feature(enable = "avx2")]
#[inline]
fn round8_finite(y: __m256) -> __m256 {
    let bits = _mm256_castps_si256(y);
    let lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    let up = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    _mm256_castsi256_ps(_mm256_and_si256(up, _mm256_set1_epi32(-0x1_0000)))
}

/// `round_bf16_one` on eight lanes.
#[target_feature(enable = "avx2")]
#[inline]
fn round8(y: __m256) -> __m256 {
    let bits = _mm256_castps_si256(y);
    let abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fff_ffff));
    let nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f80_0000));
    let lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    let bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
    let rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
    let quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x0040));
    let hi = _mm256_blendv_epi8(rounded, quiet, nan);
    _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16))
}

/// `dst[i] = scale · f32(q[i]) − min` for the 16 unsigned bytes of `q` (the reference's
/// `d·q − m`: one multiply, then one subtract).
#[target_feature(enable = "avx2")]
#[inline]
fn affine16_u8<const R: bool>(
    q: __m128i,
    scale: __m256,
    min: __m256,
    dst: &mut [f32],
    finite: bool,
) {
    assert!(dst.len() >= 16);
    for (i, v) in [q, _mm_srli_si128(q, 8)].into_iter().enumerate() {
        let f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
        let y = _mm256_sub_ps(_mm256_mul_ps(scale, f), min);
        // SAFETY: `dst` holds 16 values (checked above); this writes 8 at offset 8i.
        unsafe { store8::<R>(dst.as_mut_ptr().add(8 * i), y, finite) };
    }
}

/// `dst[i] = scale · f32(q[i])` for the 16 signed bytes of `q`.
#[target_feature(enable = "avx2")]
#[inline]
fn scale16_i8<const R: bool>(q: __m128i, scale: __m256, dst: &mut [f32], finite: bool) {
    assert!(dst.len() >= 16);
    for (i, v) in [q, _mm_srli_si128(q, 8)].into_iter().enumerate() {
        let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
        // SAFETY: as in `affine16_u8`.
        unsafe { store8::<R>(dst.as_mut_ptr().add(8 * i), _mm256_mul_ps(scale, f), finite) };
    }
}

/// Each byte of `v` shifted right by `n` bits (`n < 8`).
#[target_feature(enable = "avx2")]
#[inline]
fn srl8(v: __m128i, n: u32) -> __m128i {
    let mask = _mm_set1_epi8((0xffu8 >> n) as i8);
    _mm_and_si128(_mm_srl_epi16(v, _mm_cvtsi32_si128(n as i32)), mask)
}

/// Q8_0 blocks: `f32(q) · d`.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q8_0<const R: bool>(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(legacy::Q8_0_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(32))
    {
        let d = _mm256_set1_ps(f16_at(b, 0));
        let fin = f16_at(b, 0).is_finite();
        scale16_i8::<R>(load16(&b[2..18]), d, &mut o[..16], fin);
        scale16_i8::<R>(load16(&b[18..34]), d, &mut o[16..], fin);
    }
}

/// Q4_0 blocks: `d · (nibble − 8)`, low nibbles first.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q4_0<const R: bool>(bytes: &[u8], out: &mut [f32]) {
    let (nib, eight) = (_mm_set1_epi8(0x0f), _mm_set1_epi8(8));
    for (b, o) in bytes
        .chunks_exact(legacy::Q4_0_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(32))
    {
        let d = _mm256_set1_ps(f16_at(b, 0));
        let fin = f16_at(b, 0).is_finite();
        let q = load16(&b[2..18]);
        let lo = _mm_sub_epi8(_mm_and_si128(q, nib), eight);
        let hi = _mm_sub_epi8(srl8(q, 4), eight);
        scale16_i8::<R>(lo, d, &mut o[..16], fin);
        scale16_i8::<R>(hi, d, &mut o[16..], fin);
    }
}

/// Q2_K blocks (walk of `kquants::dequantize_q2_k_block`, 16 values per step).
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q2_k<const R: bool>(bytes: &[u8], out: &mut [f32]) {
    let three = _mm_set1_epi8(3);
    for (b, o) in bytes
        .chunks_exact(kquants::Q2_K_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let scales = &b[0..16];
        let qs = &b[16..80];
        let d = f16_at(b, 80);
        let dmin = f16_at(b, 82);
        let fin = d.is_finite() && dmin.is_finite();
        for h in 0..2 {
            for g2 in 0..2 {
                let q = load16(&qs[32 * h + 16 * g2..]);
                for s in 0..4 {
                    let sc = scales[8 * h + 2 * s + g2];
                    let dl = _mm256_set1_ps(d * f32::from(sc & 0x0f));
                    let ml = _mm256_set1_ps(dmin * f32::from(sc >> 4));
                    let v = _mm_and_si128(srl8(q, 2 * s as u32), three);
                    let at = 128 * h + 32 * s + 16 * g2;
                    affine16_u8::<R>(v, dl, ml, &mut o[at..at + 16], fin);
                }
            }
        }
    }
}

/// Q3_K blocks: Q2_K's walk for the low bits, `hmask` bit clear subtracts 4.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q3_k<const R: bool>(bytes: &[u8], out: &mut [f32]) {
    let (three, one) = (_mm_set1_epi8(3), _mm_set1_epi8(1));
    for (b, o) in bytes
        .chunks_exact(kquants::Q3_K_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let hmask = &b[0..32];
        let qs = &b[32..96];
        let scales = kquants::q3_k_scales(&b[96..108]);
        let d = f16_at(b, 108);
        let fin = d.is_finite();
        for h in 0..2 {
            for g2 in 0..2 {
                let q = load16(&qs[32 * h + 16 * g2..]);
                let m = load16(&hmask[16 * g2..]);
                for s in 0..4 {
                    let dl = _mm256_set1_ps(d * f32::from(scales[8 * h + 2 * s + g2]));
                    let low = _mm_and_si128(srl8(q, 2 * s as u32), three);
                    let clear = _mm_xor_si128(_mm_and_si128(srl8(m, (4 * h + s) as u32), one), one);
                    let v = _mm_sub_epi8(low, _mm_slli_epi16(clear, 2));
                    let at = 128 * h + 32 * s + 16 * g2;
                    scale16_i8::<R>(v, dl, &mut o[at..at + 16], fin);
                }
            }
        }
    }
}

/// Q4_K blocks: per 32-value group `d·sc·q − dmin·m` on nibbles.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q4_k<const R: bool>(bytes: &[u8], out: &mut [f32]) {
    q45_k::<false, R>(bytes, out)
}

/// Q5_K blocks: Q4_K plus bit `g` of `qh[l]` as the fifth bit.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q5_k<const R: bool>(bytes: &[u8], out: &mut [f32]) {
    q45_k::<true, R>(bytes, out)
}

/// Q4_K (`FIVE` false) and Q5_K (`FIVE` true, with `qh[32]` before `qs`).
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn q45_k<const FIVE: bool, const R: bool>(bytes: &[u8], out: &mut [f32]) {
    let (nib, one) = (_mm_set1_epi8(0x0f), _mm_set1_epi8(1));
    let (block_bytes, qs_at) = if FIVE {
        (kquants::Q5_K_BLOCK_BYTES, 48)
    } else {
        (kquants::Q4_K_BLOCK_BYTES, 16)
    };
    for (b, o) in bytes
        .chunks_exact(block_bytes)
        .zip(out.chunks_exact_mut(256))
    {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let fin = d.is_finite() && dmin.is_finite();
        let scales = &b[4..16];
        let qh = &b[16..48];
        let qs = &b[qs_at..qs_at + 128];
        for g in 0..8 {
            let (sc, m) = kquants::scale_min_k4(g, scales);
            let d1 = _mm256_set1_ps(d * f32::from(sc));
            let m1 = _mm256_set1_ps(dmin * f32::from(m));
            let (c, shift) = (g / 2, 4 * (g % 2) as u32);
            for half in 0..2 {
                let mut v = _mm_and_si128(srl8(load16(&qs[32 * c + 16 * half..]), shift), nib);
                if FIVE {
                    let hb = _mm_and_si128(srl8(load16(&qh[16 * half..]), g as u32), one);
                    v = _mm_or_si128(v, _mm_slli_epi16(hb, 4));
                }
                let at = 32 * g + 16 * half;
                affine16_u8::<R>(v, d1, m1, &mut o[at..at + 16], fin);
            }
        }
    }
}

/// Q6_K blocks: low nibble from `ql`, two high bits from `qh`, minus 32, times `d·sc`.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q6_k<const R: bool>(bytes: &[u8], out: &mut [f32]) {
    let (nib, three, bias) = (_mm_set1_epi8(0x0f), _mm_set1_epi8(3), _mm_set1_epi8(32));
    for (b, o) in bytes
        .chunks_exact(kquants::Q6_K_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let ql = &b[0..128];
        let qh = &b[128..192];
        let scales = &b[192..208];
        let d = f16_at(b, 208);
        let fin = d.is_finite();
        for h in 0..2 {
            for g2 in 0..2 {
                let hq = load16(&qh[32 * h + 16 * g2..]);
                for quarter in 0..4 {
                    let dsc = _mm256_set1_ps(d * f32::from(scales[8 * h + 2 * quarter + g2] as i8));
                    let l = load16(&ql[64 * h + 32 * (quarter % 2) + 16 * g2..]);
                    let low = _mm_and_si128(srl8(l, 4 * (quarter / 2) as u32), nib);
                    let high = _mm_and_si128(srl8(hq, 2 * quarter as u32), three);
                    let v = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), bias);
                    let at = 128 * h + 32 * quarter + 16 * g2;
                    scale16_i8::<R>(v, dsc, &mut o[at..at + 16], fin);
                }
            }
        }
    }
}

/// IQ2_XXS blocks: eight grid magnitudes from the f32 table, `(db · level) · ±1`.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn iq2_xxs<const R: bool>(bytes: &[u8], out: &mut [f32]) {
    let bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    let (plus, minus) = (_mm256_set1_ps(1.0), _mm256_set1_ps(-1.0));
    for (b, o) in bytes
        .chunks_exact(iq2xxs::BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let d = f16_at(b, 0);
        let fin = d.is_finite();
        for group in 0..8 {
            let base = 2 + 8 * group;
            let aux = u32_at(b, base + 4);
            let db = _mm256_set1_ps(d * (0.5 + (aux >> 28) as f32) * 0.25);
            for l in 0..4 {
                let grid = &IQ2XXS_GRID_F32[b[base + l] as usize];
                // SAFETY: a grid row is 8 f32.
                let level = unsafe { _mm256_loadu_ps(grid.as_ptr()) };
                let signs = _mm256_set1_epi32(i32::from(iq2xxs::sign_bits(aux >> (7 * l))));
                let neg = _mm256_cmpeq_epi32(_mm256_and_si256(signs, bits), bits);
                let sign = _mm256_blendv_ps(plus, minus, _mm256_castsi256_ps(neg));
                let at = 32 * group + 8 * l;
                let dst = &mut o[at..at + 8];
                let y = _mm256_mul_ps(_mm256_mul_ps(db, level), sign);
                // SAFETY: `dst` is 8 writable f32.
                unsafe { store8::<R>(dst.as_mut_ptr(), y, fin) };
            }
        }
    }
}

/// BF16 values widened eight at a time (the bits move to the upper half), the tail one by
/// one.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn bf16<const R: bool>(bytes: &[u8], out: &mut [f32]) {
    let n = out.len().min(bytes.len() / 2);
    let (mut src8, mut dst8) = (
        bytes[..2 * n].chunks_exact(16),
        out[..n].chunks_exact_mut(8),
    );
    for (s, d) in (&mut src8).zip(&mut dst8) {
        let wide = _mm256_slli_epi32(_mm256_cvtepu16_epi32(load16(s)), 16);
        // SAFETY: `d` is 8 writable f32.
        // bf16 values are already bf16: rounding only quiets NaNs.
        let y = if R { quiet_nans(wide) } else { wide };
        // SAFETY: `d` is 8 writable f32.
        unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), y) };
    }
    let tail = dst8.into_remainder();
    for (o, c) in tail.iter_mut().zip(src8.remainder().chunks_exact(2)) {
        *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
    }
    if R {
        tail.iter_mut().for_each(|x| *x = super::round_bf16_one(*x));
    }
}

/// The little-endian IEEE half at `offset` as f32, by `vcvtph2ps` (exact).
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn f16_at(bytes: &[u8], offset: usize) -> f32 {
    let h = u16::from_le_bytes([bytes[offset], bytes[offset + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// `round_bf16_one` on eight lanes at a time, the tail one by one.
#[target_feature(enable = "avx2")]
pub(super) fn round_bf16(v: &mut [f32]) {
    let mut chunks = v.chunks_exact_mut(8);
    for c in &mut chunks {
        // SAFETY: `c` is 8 readable and writable f32.
        unsafe { _mm256_storeu_ps(c.as_mut_ptr(), round8(_mm256_loadu_ps(c.as_ptr()))) };
    }
    for x in chunks.into_remainder() {
        *x = super::round_bf16_one(*x);
    }
}

/// IEEE halves widened sixteen at a time with AVX-512 (the same exact `vcvtph2ps` as
/// [`f16_f16c`], twice as wide, so a row decodes at the cache's speed rather than the
/// narrower path's), the tail by [`f16_f16c`].
#[target_feature(enable = "avx512f,avx2,f16c")]
pub(super) unsafe fn f16_avx512(bytes: &[u8], out: &mut [f32]) {
    let n = out.len().min(bytes.len() / 2);
    if n * 4 >= F16_STREAM_MIN_BYTES {
        // SAFETY: the caller's features are `f16_avx512_streaming`'s.
        return unsafe { f16_avx512_streaming(bytes, out) };
    }
    let wide = n / 16 * 16;
    for (s, d) in bytes[..2 * wide]
        .chunks_exact(32)
        .zip(out[..wide].chunks_exact_mut(16))
    {
        // SAFETY: `s` is 32 readable bytes and `d` 16 writable f32.
        unsafe {
            let h = _mm256_loadu_si256(s.as_ptr().cast());
            _mm512_storeu_ps(d.as_mut_ptr(), _mm512_cvtph_ps(h));
        }
    }
    // SAFETY: the caller's features include `f16_f16c`'s.
    unsafe { f16_f16c(&bytes[2 * wide..2 * n], &mut out[wide..n]) }
}

/// Outputs of at least this many bytes (beyond a core's L2) are written by
/// [`f16_avx512_streaming`]. F16 reads two bytes per value and writes four, so with ordinary
/// stores, which first read each output line into the cache, most of a large decode's memory
/// traffic is the output; the quantized types read far fewer bytes per value and gain little.
pub(super) const F16_STREAM_MIN_BYTES: usize = 4 << 20;

/// [`f16_avx512`] for outputs too large for the cache: the same conversions, written with
/// non-temporal stores from the first 64-byte-aligned value on (the values before it, and the
/// tail, by [`f16_f16c`]), then a store fence so the values are visible like ordinary stores.
#[target_feature(enable = "avx512f,avx2,f16c")]
pub(super) unsafe fn f16_avx512_streaming(bytes: &[u8], out: &mut [f32]) {
    let n = out.len().min(bytes.len() / 2);
    let head = out.as_ptr().align_offset(64).min(n);
    let wide = head + (n - head) / 16 * 16;
    // SAFETY: the caller's features include `f16_f16c`'s.
    unsafe { f16_f16c(&bytes[..2 * head], &mut out[..head]) };
    for (s, d) in bytes[2 * head..2 * wide]
        .chunks_exact(32)
        .zip(out[head..wide].chunks_exact_mut(16))
    {
        // SAFETY: `s` is 32 readable bytes, `d` 16 writable f32 starting 64-byte aligned
        // (`head` aligned the first, and each chunk is 64 bytes).
        unsafe {
            let h = _mm256_loadu_si256(s.as_ptr().cast());
            _mm512_stream_ps(d.as_mut_ptr(), _mm512_cvtph_ps(h));
        }
    }
    _mm_sfence();
    // SAFETY: as above.
    unsafe { f16_f16c(&bytes[2 * wide..2 * n], &mut out[wide..n]) }
}

/// IEEE halves widened eight at a time (`vcvtph2ps` is exact), the tail one by one.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn f16_f16c(bytes: &[u8], out: &mut [f32]) {
    let n = out.len().min(bytes.len() / 2);
    let (mut src8, mut dst8) = (
        bytes[..2 * n].chunks_exact(16),
        out[..n].chunks_exact_mut(8),
    );
    for (s, d) in (&mut src8).zip(&mut dst8) {
        // SAFETY: `s` is 16 readable bytes and `d` 8 writable f32.
        unsafe {
            let h = _mm_loadu_si128(s.as_ptr().cast());
            _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    for (o, c) in dst8
        .into_remainder()
        .iter_mut()
        .zip(src8.remainder().chunks_exact(2))
    {
        *o = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
    }
}
