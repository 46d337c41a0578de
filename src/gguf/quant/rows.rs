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
    match simd_level() {
        // SAFETY: the level says the CPU has AVX-512 F, AVX2 and F16C.
        SimdLevel::Avx512 => return unsafe { x86::f16_avx512(bytes, out) },
        // SAFETY: F16C and AVX2 are present (every non-baseline level has them).
        SimdLevel::Avx2 => return unsafe { x86::f16_f16c(bytes, out) },
        SimdLevel::Baseline => {}
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

/// Asks the CPU to start loading `bytes` into every cache level (x86 prefetch, one request per
/// cache line; nothing elsewhere). Kernels that read many rows a chunk at a time call it for
/// the next chunk of the row they just read: too many interleaved streams for the hardware
/// prefetcher to follow.
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    prefetch_hint::<{ std::arch::x86_64::_MM_HINT_T0 }>(bytes);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// As [`prefetch`], but into the second-level cache and not the first: for bytes needed a
/// while from now (the GEMM's next panel), which in the first-level cache would evict what the
/// running kernel reads (a Q8_0 panel of 5120 columns is twice this machine's 32 KiB L1; with
/// the all-levels hint its m = 1 GEMM took about 1.1x as long from memory).
pub fn prefetch_to_l2(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    prefetch_hint::<{ std::arch::x86_64::_MM_HINT_T1 }>(bytes);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// One `HINT` prefetch per cache line of `bytes`.
#[cfg(target_arch = "x86_64")]
#[inline]
fn prefetch_hint<const HINT: i32>(bytes: &[u8]) {
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch is a hint: it reads nothing architecturally and cannot fault, and
        // the address is inside `bytes`.
        unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(line.as_ptr().cast()) };
    }
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
pub(crate) fn round_bf16_one(x: f32) -> f32 {
    let bits = x.to_bits();
    let nan = (bits & 0x7fff_ffff) > 0x7f80_0000;
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let quiet = (bits >> 16) | 0x0040;
    f32::from_bits((if nan { quiet } else { rounded }) << 16)
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;
