//! Fast row decoders. Every block type's decoder exists twice: a portable one written for the
//! compiler to vectorize (inner loops of 16 or 32 lanes, scales hoisted), and an explicit
//! x86 one (AVX2 + F16C: bytes shifted and masked sixteen at a time, widened, converted,
//! scaled; MXFP4's E2M1 codes by byte shuffle; IQ2_XXS's grid from an f32 table), picked at run
//! time. Each performs exactly the operations of the per-block reference decoder in the same
//! order (the same multiplies and subtracts, unfused), so the bits are equal; a second entry
//! per type rounds the values to bf16 in registers (`num::bf16_round`'s rule) for parameters
//! the reference holds in bf16. `tests` checks every variant on random blocks of every type,
//! NaN and infinite scales included.

use super::{f16_at, iq2xxs, kquants, legacy, mxfp4, u32_at};
use std::sync::atomic::{AtomicU8, Ordering};

/// Defines `$name(bytes, out)`: `$body` compiled for AVX-512 and for AVX2 (+FMA, F16C) and
/// chosen by the CPU's features, else the baseline build.
macro_rules! dispatch {
    ($(#[$doc:meta])* $name:ident, $body:ident) => {
        $(#[$doc])*
        pub(super) fn $name(bytes: &[u8], out: &mut [f32]) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                unsafe fn wide(bytes: &[u8], out: &mut [f32]) {
                    $body(bytes, out)
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn narrow(bytes: &[u8], out: &mut [f32]) {
                    $body(bytes, out)
                }
                match simd_level() {
                    // SAFETY: the level says the CPU has every feature `wide` enables.
                    SimdLevel::Avx512 => return unsafe { wide(bytes, out) },
                    // SAFETY: as above, for `narrow`'s features.
                    SimdLevel::Avx2 => return unsafe { narrow(bytes, out) },
                    SimdLevel::Baseline => {}
                }
            }
            $body(bytes, out)
        }
    };
}

/// Defines `$name(bytes, out)` and `$rounded(bytes, out)` (the same values rounded to bf16, as
/// [`round_to_bf16_in_place`] would): the explicit x86 kernel `$avx2` where AVX2 (+F16C) is
/// present, else `$body` (the portable decoder).
macro_rules! dispatch_x86 {
    ($(#[$doc:meta])* $name:ident, $rounded:ident, $body:ident, $avx2:ident) => {
        $(#[$doc])*
        pub(super) fn $name(bytes: &[u8], out: &mut [f32]) {
            #[cfg(target_arch = "x86_64")]
            if simd_level() != SimdLevel::Baseline {
                // SAFETY: every non-baseline level has AVX2, FMA and F16C.
                return unsafe { x86::$avx2::<false>(bytes, out) };
            }
            $body(bytes, out)
        }

        /// The same decoder, values rounded to bf16.
        pub(super) fn $rounded(bytes: &[u8], out: &mut [f32]) {
            #[cfg(target_arch = "x86_64")]
            if simd_level() != SimdLevel::Baseline {
                // SAFETY: as above.
                return unsafe { x86::$avx2::<true>(bytes, out) };
            }
            $body(bytes, out);
            round_to_bf16_in_place(out);
        }
    };
}

/// Defines `$rounded`: `$name`, then [`round_to_bf16_in_place`] (types without a fused kernel).
macro_rules! then_round {
    ($rounded:ident, $name:ident) => {
        /// The decoder's values rounded to bf16.
        pub(super) fn $rounded(bytes: &[u8], out: &mut [f32]) {
            $name(bytes, out);
            round_to_bf16_in_place(out);
        }
    };
}

then_round!(f16_bf16, f16);
then_round!(f32_rows_bf16, f32_rows);
then_round!(i8_rows_bf16, i8_rows);

/// The instruction sets the decoders may use here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    Baseline = 0,
    Avx2 = 1,
    Avx512 = 2,
}

impl SimdLevel {
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Baseline => "baseline",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }
}

/// What this CPU offers the decoders (detected once).
pub fn detected_simd_level() -> SimdLevel {
    static DETECTED: AtomicU8 = AtomicU8::new(u8::MAX);
    match DETECTED.load(Ordering::Relaxed) {
        0 => SimdLevel::Baseline,
        1 => SimdLevel::Avx2,
        2 => SimdLevel::Avx512,
        _ => {
            let level = detect();
            DETECTED.store(level as u8, Ordering::Relaxed);
            level
        }
    }
}

fn detect() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let avx2 = has!("avx2") && has!("fma") && has!("f16c");
        if avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vl") {
            return SimdLevel::Avx512;
        }
        if avx2 {
            return SimdLevel::Avx2;
        }
    }
    SimdLevel::Baseline
}

/// Highest level the decoders may use (tests and benches lower it to run every variant).
static CAP: AtomicU8 = AtomicU8::new(u8::MAX);

/// Caps the decoders at `level` (`None`: whatever the CPU offers). Every level gives the same
/// bits; this exists so tests and `golden-lens bench` can run each variant.
pub fn cap_simd_level(level: Option<SimdLevel>) {
    CAP.store(level.map_or(u8::MAX, |l| l as u8), Ordering::Relaxed);
}

/// The level the decoders use now: the CPU's, lowered by [`cap_simd_level`].
pub fn simd_level() -> SimdLevel {
    let detected = detected_simd_level();
    match CAP.load(Ordering::Relaxed) {
        c if c >= detected as u8 => detected,
        0 => SimdLevel::Baseline,
        _ => SimdLevel::Avx2,
    }
}

#[inline(always)]
fn q8_0_body(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(legacy::Q8_0_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(32))
    {
        let d = f16_at(b, 0);
        for (o, &q) in o.iter_mut().zip(&b[2..34]) {
            *o = f32::from(q as i8) * d;
        }
    }
}
dispatch_x86!(
    /// Q8_0 rows (see `legacy::dequantize_q8_0_block`).
    q8_0,
    q8_0_bf16,
    q8_0_body,
    q8_0
);

#[inline(always)]
fn q4_0_body(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(legacy::Q4_0_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(32))
    {
        let d = f16_at(b, 0);
        let (lo, hi) = o.split_at_mut(16);
        for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&b[2..18]) {
            *l = d * f32::from((q & 0x0f) as i8 - 8);
            *h = d * f32::from((q >> 4) as i8 - 8);
        }
    }
}
dispatch_x86!(
    /// Q4_0 rows (see `legacy::dequantize_q4_0_block`).
    q4_0,
    q4_0_bf16,
    q4_0_body,
    q4_0
);

#[inline(always)]
fn q2_k_body(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(kquants::Q2_K_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let scales = &b[0..16];
        let qs = &b[16..80];
        let d = f16_at(b, 80);
        let dmin = f16_at(b, 82);
        for h in 0..2 {
            for s in 0..4 {
                for g2 in 0..2 {
                    let sc = scales[8 * h + 2 * s + g2];
                    let dl = d * f32::from(sc & 0x0f);
                    let ml = dmin * f32::from(sc >> 4);
                    let src = &qs[32 * h + 16 * g2..32 * h + 16 * g2 + 16];
                    let dst = &mut o[128 * h + 32 * s + 16 * g2..128 * h + 32 * s + 16 * g2 + 16];
                    for (y, &q) in dst.iter_mut().zip(src) {
                        *y = dl * f32::from((q >> (2 * s)) & 3) - ml;
                    }
                }
            }
        }
    }
}
dispatch_x86!(
    /// Q2_K rows (see `kquants::dequantize_q2_k_block`).
    q2_k,
    q2_k_bf16,
    q2_k_body,
    q2_k
);

#[inline(always)]
fn q3_k_body(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(kquants::Q3_K_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let hmask = &b[0..32];
        let qs = &b[32..96];
        let scales = kquants::q3_k_scales(&b[96..108]);
        let d = f16_at(b, 108);
        for h in 0..2 {
            for s in 0..4 {
                for g2 in 0..2 {
                    let dl = d * f32::from(scales[8 * h + 2 * s + g2]);
                    let (lo, hi) = (16 * g2, 16 * g2 + 16);
                    let src = &qs[32 * h + lo..32 * h + hi];
                    let dst = &mut o[128 * h + 32 * s + lo..128 * h + 32 * s + hi];
                    for ((y, &q), &m) in dst.iter_mut().zip(src).zip(&hmask[lo..hi]) {
                        let low = ((q >> (2 * s)) & 3) as i8;
                        let high_clear = ((m >> (4 * h + s)) & 1) ^ 1;
                        *y = dl * f32::from(low - 4 * high_clear as i8);
                    }
                }
            }
        }
    }
}
dispatch_x86!(
    /// Q3_K rows (see `kquants::dequantize_q3_k_block`).
    q3_k,
    q3_k_bf16,
    q3_k_body,
    q3_k
);

#[inline(always)]
fn q4_k_body(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(kquants::Q4_K_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let scales = &b[4..16];
        let qs = &b[16..144];
        for (g, dst) in o.chunks_exact_mut(32).enumerate() {
            let (sc, m) = kquants::scale_min_k4(g, scales);
            let d1 = d * f32::from(sc);
            let m1 = dmin * f32::from(m);
            let (c, shift) = (g / 2, 4 * (g % 2));
            for (y, &q) in dst.iter_mut().zip(&qs[32 * c..32 * c + 32]) {
                *y = d1 * f32::from((q >> shift) & 0x0f) - m1;
            }
        }
    }
}
dispatch_x86!(
    /// Q4_K rows (see `kquants::dequantize_q4_k_block`).
    q4_k,
    q4_k_bf16,
    q4_k_body,
    q4_k
);

#[inline(always)]
fn q5_k_body(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(kquants::Q5_K_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let scales = &b[4..16];
        let qh = &b[16..48];
        let qs = &b[48..176];
        for (g, dst) in o.chunks_exact_mut(32).enumerate() {
            let (sc, m) = kquants::scale_min_k4(g, scales);
            let d1 = d * f32::from(sc);
            let m1 = dmin * f32::from(m);
            let (c, shift) = (g / 2, 4 * (g % 2));
            for ((y, &q), &h) in dst.iter_mut().zip(&qs[32 * c..32 * c + 32]).zip(qh) {
                let v = ((q >> shift) & 0x0f) | (((h >> g) & 1) << 4);
                *y = d1 * f32::from(v) - m1;
            }
        }
    }
}
dispatch_x86!(
    /// Q5_K rows (see `kquants::dequantize_q5_k_block`).
    q5_k,
    q5_k_bf16,
    q5_k_body,
    q5_k
);

#[inline(always)]
fn q6_k_body(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(kquants::Q6_K_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let ql = &b[0..128];
        let qh = &b[128..192];
        let scales = &b[192..208];
        let d = f16_at(b, 208);
        for h in 0..2 {
            for quarter in 0..4 {
                for g2 in 0..2 {
                    let (lo, hi) = (16 * g2, 16 * g2 + 16);
                    let dsc = d * f32::from(scales[8 * h + 2 * quarter + g2] as i8);
                    let low_src = &ql[64 * h + 32 * (quarter % 2) + lo..][..16];
                    let high_src = &qh[32 * h + lo..32 * h + hi];
                    let base = 128 * h + 32 * quarter;
                    let dst = &mut o[base + lo..base + hi];
                    for ((y, &l), &hb) in dst.iter_mut().zip(low_src).zip(high_src) {
                        let low = (l >> (4 * (quarter / 2))) & 0x0f;
                        let high = (hb >> (2 * quarter)) & 3;
                        *y = dsc * f32::from((low | (high << 4)) as i8 - 32);
                    }
                }
            }
        }
    }
}
dispatch_x86!(
    /// Q6_K rows (see `kquants::dequantize_q6_k_block`).
    q6_k,
    q6_k_bf16,
    q6_k_body,
    q6_k
);

/// ggml's iq2xxs grid as f32 magnitudes, eight per entry.
static IQ2XXS_GRID_F32: [[f32; 8]; 256] = {
    let mut t = [[0f32; 8]; 256];
    let mut i = 0;
    while i < 256 {
        let mut j = 0;
        while j < 8 {
            t[i][j] = iq2xxs::GRID_LEVELS[((iq2xxs::GRID_2BIT[i] >> (2 * j)) & 3) as usize];
            j += 1;
        }
        i += 1;
    }
    t
};

#[inline(always)]
fn iq2_xxs_body(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(iq2xxs::BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let d = f16_at(b, 0);
        for (group, og) in o.chunks_exact_mut(32).enumerate() {
            let base = 2 + 8 * group;
            let aux = u32_at(b, base + 4);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
            for (l, dst) in og.chunks_exact_mut(8).enumerate() {
                let grid = &IQ2XXS_GRID_F32[b[base + l] as usize];
                let signs = iq2xxs::sign_bits(aux >> (7 * l));
                for (j, (y, &level)) in dst.iter_mut().zip(grid).enumerate() {
                    let sign = if signs & (1 << j) != 0 { -1.0 } else { 1.0 };
                    *y = db * level * sign;
                }
            }
        }
    }
}
dispatch_x86!(
    /// IQ2_XXS rows (see `iq2xxs::dequantize_block`).
    iq2_xxs,
    iq2_xxs_bf16,
    iq2_xxs_body,
    iq2_xxs
);

/// MXFP4 rows (see `mxfp4::dequantize_block`): the E2M1 lookup is a byte shuffle on x86.
pub(super) fn mxfp4(bytes: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd_level() != SimdLevel::Baseline {
        // SAFETY: AVX2 is present (every non-baseline level has it).
        return unsafe { x86::mxfp4_avx2::<false>(bytes, out) };
    }
    for (b, o) in bytes
        .chunks_exact(mxfp4::BLOCK_BYTES)
        .zip(out.chunks_exact_mut(32))
    {
        mxfp4::dequantize_block(b, o);
    }
}

/// [`mxfp4`] rounded to bf16.
pub(super) fn mxfp4_bf16(bytes: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd_level() != SimdLevel::Baseline {
        // SAFETY: AVX2 is present (every non-baseline level has it).
        return unsafe { x86::mxfp4_avx2::<true>(bytes, out) };
    }
    mxfp4(bytes, out);
    round_to_bf16_in_place(out);
}

/// F16 rows: F16C widening on x86, else the exact software conversion.
pub(super) fn f16(bytes: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd_level() != SimdLevel::Baseline {
        // SAFETY: F16C and AVX2 are present (every non-baseline level has them).
        return unsafe { x86::f16_f16c(bytes, out) };
    }
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
    }
}

#[inline(always)]
fn bf16_body(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
    }
}
dispatch_x86!(
    /// BF16 rows (the stored bits are the f32's upper half).
    bf16,
    bf16_bf16,
    bf16_body,
    bf16
);

#[inline(always)]
fn f32_body(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}
dispatch!(
    /// F32 rows (little-endian copies).
    f32_rows,
    f32_body
);

#[inline(always)]
fn i8_body(bytes: &[u8], out: &mut [f32]) {
    for (o, &b) in out.iter_mut().zip(bytes) {
        *o = f32::from(b as i8);
    }
}
dispatch!(
    /// I8 rows.
    i8_rows,
    i8_body
);

/// Asks the CPU to start loading `bytes` into the cache (x86 prefetch, one request per cache
/// line; nothing elsewhere). Kernels that read many rows a chunk at a time call it for the
/// next chunk of the row they just read: too many interleaved streams for the hardware
/// prefetcher to follow.
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch is a hint: it reads nothing architecturally and cannot fault, and
        // the address is inside `bytes`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// `num::bf16_round` over a slice (nearest even on the upper half; NaNs stay NaN with the quiet
/// bit set): what the GGUF source applies to parameters the reference holds in bf16.
pub fn round_to_bf16_in_place(v: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd_level() != SimdLevel::Baseline {
        // SAFETY: every non-baseline level has AVX2.
        return unsafe { x86::round_bf16(v) };
    }
    v.iter_mut().for_each(|x| *x = round_bf16_one(*x));
}

/// One value of [`round_to_bf16_in_place`], branch-free (the same rule as `num::bf16_bits`).
#[inline(always)]
fn round_bf16_one(x: f32) -> f32 {
    let bits = x.to_bits();
    let nan = (bits & 0x7fff_ffff) > 0x7f80_0000;
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let quiet = (bits >> 16) | 0x0040;
    f32::from_bits((if nan { quiet } else { rounded }) << 16)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
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
                        let clear =
                            _mm_xor_si128(_mm_and_si128(srl8(m, (4 * h + s) as u32), one), one);
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
                        let dsc =
                            _mm256_set1_ps(d * f32::from(scales[8 * h + 2 * quarter + g2] as i8));
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
}

#[cfg(test)]
mod tests {
    use super::super::{block_decoder, block_decoder_bf16, dequantize_reference};
    use super::{cap_simd_level, detected_simd_level, SimdLevel};
    use crate::gguf::GgmlType;

    /// A deterministic byte stream.
    fn bytes(len: usize, salt: u64) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (crate::num::splitmix64(i ^ salt.wrapping_mul(0x9e37)) >> 24) as u8)
            .collect()
    }

    #[test]
    fn slice_rounding_is_bf16_round_on_every_class_of_value() {
        let v: Vec<f32> = (0..1u32 << 16)
            .map(|i| f32::from_bits(i.wrapping_mul(0x9e37_79b9) ^ (i << 7)))
            .chain([
                f32::NAN,
                -f32::NAN,
                f32::INFINITY,
                f32::MIN,
                f32::MAX,
                0.0,
                -0.0,
            ])
            .chain([f32::from_bits(0x7f80_0001), f32::from_bits(0xffff_ffff)])
            .collect();
        let want: Vec<u32> = v
            .iter()
            .map(|&x| crate::num::bf16_round(x).to_bits())
            .collect();
        for level in [SimdLevel::Baseline, SimdLevel::Avx2] {
            if level > detected_simd_level() {
                continue;
            }
            cap_simd_level(Some(level));
            let mut got = v.clone();
            super::round_to_bf16_in_place(&mut got);
            cap_simd_level(None);
            let got: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "{}", level.name());
        }
    }

    #[test]
    fn fast_rows_equal_the_reference_block_decoders_bit_for_bit() {
        use GgmlType::*;
        for ty in [
            F32, F16, Bf16, I8, Q8_0, Q4_0, Q2K, Q3K, Q4K, Q5K, Q6K, Iq2Xxs, Mxfp4,
        ] {
            let (bv, bb, fast) = block_decoder(ty).expect("decoder");
            // Random bytes: scales take every f16 pattern, NaN and infinity included. An odd
            // block count exercises the f16 tail.
            let n_blocks = 4096 / bv.max(1) * 3 + 1;
            let src = bytes(n_blocks * bb, ty.id() as u64);
            let mut want = vec![0f32; n_blocks * bv];
            dequantize_reference(ty, &src, &mut want).expect("reference");
            let want_rounded: Vec<f32> = want.iter().map(|&v| crate::num::bf16_round(v)).collect();
            let rounded = block_decoder_bf16(ty).expect("rounding decoder");
            for (level, decode, want) in [SimdLevel::Baseline, SimdLevel::Avx2, SimdLevel::Avx512]
                .into_iter()
                .flat_map(|l| [(l, fast, &want), (l, rounded, &want_rounded)])
            {
                if level > detected_simd_level() {
                    continue;
                }
                cap_simd_level(Some(level));
                let mut got = vec![1f32; n_blocks * bv];
                decode(&src, &mut got);
                cap_simd_level(None);
                let differ = want
                    .iter()
                    .zip(&got)
                    .position(|(a, b)| a.to_bits() != b.to_bits());
                assert_eq!(
                    differ,
                    None,
                    "{} at {}: first differing value",
                    ty.name(),
                    level.name()
                );
            }
        }
    }
}
