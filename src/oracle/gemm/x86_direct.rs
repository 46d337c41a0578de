//! AVX-512 kernels that decode Q2_K, Q3_K, Q4_K, IQ2_XXS, MXFP4 and Q8_0 blocks straight into
//! the FMA operands, for blocks
//! of at most `MR` input rows (decode and short prefills), where a panel's weights are used once
//! per input row and preparing tables in memory (`lut`) would cost more than the FMAs.
//!
//! A chunk of a full panel (`NR` rows, one `KC` chunk of columns) goes pair of rows by pair of
//! rows, in registers:
//!
//! - **Tables.** Each group's values (`dl·q − ml` for Q2_K's four codes, `d·kvalue` for MXFP4's
//!   sixteen) are computed with the decoder's f32 operations in the decoder's order, sixteen at
//!   a time, rounded to bf16 where the matrix rounds (Q2_K; MXFP4's values are all exact in
//!   bf16, see [`mxfp4_tables`]) and widened to f64: the very values dequantize-then-widen
//!   gives, so the products and their order, and with them the bits, are those of the packed
//!   panel microkernel. Q2_K, Q3_K and IQ2_XXS build a sub-block's (a group's) tables of
//!   every pair just before its steps, so they stay in registers (a 512-bit store costs this
//!   machine more than a permute), and round two vectors at once laid out so that the bf16
//!   words' even and odd halves are the tables ([`bf16_even_odd`]). Q3_K and Q4_K keep theirs
//!   in f32, both rows' (and for Q3_K two groups') in the two sources of one 32-entry permute,
//!   and widen what a step pair looks up (or, see below, keep high words).
//! - **Codes.** One byte permute transposes a pair's code bytes so that each 64-bit lane holds
//!   its own column's codes for eight consecutive steps, one byte a step; a shift then brings a
//!   step's code to the bits the table permute reads, so a step costs one shift, the table
//!   permute(s) and the FMAs. Q3_K and Q4_K put two steps' codes in the 32-bit lanes instead
//!   ([`STEP_PAIR_TRANSPOSE`]), so one shift and one permute serve two steps. Q2_K keeps its
//!   pairs' step codes in memory and takes every odd step's by a load at a byte offset
//!   instead of a shift ([`StepCodes`]). On the high-word routes of Q2_K, Q3_K and Q4_K the
//!   step codes are rows in memory too, and one load and one unmasked permute serve two
//!   steps, their halves split by a shift and an AND ([`hi_split`]).
//!   IQ2_XXS
//!   looks its grid up in registers first: byte permutes over the 512-byte grid (four
//!   `vpermi2b` per row block) give each eight values' level indices, a bit-field shuffle
//!   (`vpmultishiftqb`) and a 128-byte permute their sign bits.
//!
//! - **Scaled lanes.** MXFP4's common case (every scale of a panel's chunk below
//!   [`MX_F32_FROM`]) multiplies by one shared table of kvalues and no scale at all: the fused
//!   kernel keeps each accumulator in units of its block's power-of-two scale for the block's
//!   steps and goes from one block's units into the next once a block. A power-of-two scaling
//!   commutes with every rounding while the values stay normal, which they do for f32 inputs
//!   and the GEMM's sums (the proof is at [`mx_scaled_chunk`]), so the bits are those of
//!   `acc + x·(d·kvalue)`.
//!
//! - **High words.** Q4_K, Q3_K and IQ2_XXS matrices that round to bf16 (with finite scales)
//!   keep their tables for the fused kernels as the high 32 bits of f64 weights ([`hi_words`]: a
//!   bf16's bits shifted into place, which is the weight times 2^−896, exactly), so one
//!   zero-masked 32-entry permute gives a step's eight f64 weights with no widening; their
//!   inputs come scaled by 2^448 ([`input_scale`]) and the lanes run in units of 2^−448 for
//!   the chunk, a power-of-two scaling that keeps every bit (the proof is at [`input_scale`]).
//!
//! Every accumulator is a pair of outputs' four lanes (the layout of `super::x86::avx512`) and
//! sees its steps in increasing order. The GEMM hands the fused kernels a whole panel at a
//! time ([`panel`]): checked once, and on the high-word route with the accumulators in
//! registers from its first chunk to its last. For more input rows the same decode writes each step's
//! weights to the packed panel instead ([`expand`]), which the panel microkernel then reads
//! once per block of `MR` rows. Q8_0 (`f32(q) · d`, no table) decodes sixteen values of a row
//! at a time and interleaves the pair's rows into step order.

use super::{KC, MR, NR, PANEL_STEP};
#[cfg(test)]
use crate::gguf::quant::rows::round_bf16_one;
use crate::gguf::quant::{iq2xxs, kquants, legacy, mxfp4, u16_at, u32_at};
use crate::gguf::GgmlType;
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// Pairs of rows in a panel.
const PAIRS: usize = NR / 2;
/// MXFP4 and Q8_0 values per block.
const MX_VALUES: usize = 32;
/// MXFP4: the first E8M0 exponent at which `d · kvalue` can overflow f32 (`2^125 · 12`), from
/// which on the tables are computed in f32 and widened rather than multiplied in f64.
const MX_F32_FROM: u8 = 253;

/// The block families with a direct kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DirectKind {
    Q2K,
    Q3K,
    Q4K,
    Iq2Xxs,
    Mxfp4,
    Q8_0,
}

impl DirectKind {
    /// The direct kernel of a GGML type, if it has one.
    pub(super) fn of(ty: GgmlType) -> Option<DirectKind> {
        Some(match ty {
            GgmlType::Q2K => DirectKind::Q2K,
            GgmlType::Q3K => DirectKind::Q3K,
            GgmlType::Q4K => DirectKind::Q4K,
            GgmlType::Iq2Xxs => DirectKind::Iq2Xxs,
            GgmlType::Mxfp4 => DirectKind::Mxfp4,
            GgmlType::Q8_0 => DirectKind::Q8_0,
            _ => return None,
        })
    }
}

/// Whether this CPU has every feature the direct kernels use (AVX-512 F, BW, DQ, VL, VBMI
/// and BF16, F16C).
pub(super) fn supported() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512dq")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vbmi")
        && is_x86_feature_detected!("avx512bf16")
        && is_x86_feature_detected!("f16c")
}

/// `lanes[r][q][j] += Σ_s x[r][4s + j] · w[q][4s + j]` for `mr ≤ MR` input rows over one chunk
/// of `NR` weight rows, `rows[q]` the row's blocks of the chunk (`kcl` columns: one Q2_K block,
/// or up to eight MXFP4 blocks), values rounded to bf16 first with `round_bf16`; `ahead` (bytes
/// needed later, the next panel's share) is prefetched to L2 a part at a time along the way, so
/// that no burst of prefetches waits on the memory system at once. `x` holds widened f32
/// values multiplied by [`input_scale`] (a power of two, 1 for most kinds) and `lanes` zero or
/// sums of such products times weights (as the GEMM makes them: the scaled lanes rely on it).
/// Panics if the CPU lacks a feature ([`supported`]) or an
/// operand is too short.
pub(super) fn chunk(
    kind: DirectKind,
    round_bf16: bool,
    rows: &[&[u8]; NR],
    (kcl, ahead): (usize, &[u8]),
    mr: usize,
    (x, x_stride): (&[f64], usize),
    lanes: &mut [f64],
) {
    assert!(
        (1..=MR).contains(&mr)
            && x.len() >= (mr - 1) * x_stride + kcl
            && lanes.len() >= mr * PANEL_STEP,
        "direct kernel operands too short"
    );
    run(
        kind,
        round_bf16,
        rows,
        (kcl, ahead),
        mr,
        (x.as_ptr(), x_stride),
        lanes.as_mut_ptr(),
    );
}

/// The packed panel (`wp[s][q][j]`, as `super::pack_panel` writes it) of one chunk of `NR`
/// weight rows, decoded in registers: for more input rows than [`chunk`] takes, where the
/// panel is read once per block of `MR` rows. Panics as [`chunk`] does.
pub(super) fn expand(
    kind: DirectKind,
    round_bf16: bool,
    rows: &[&[u8]; NR],
    kcl: usize,
    wp: &mut [f64],
) {
    assert!(
        kcl % 4 == 0 && wp.len() >= kcl / 4 * PANEL_STEP,
        "direct panel too short"
    );
    // No input rows: the kernels store each step's weights instead of multiplying them.
    run(
        kind,
        round_bf16,
        rows,
        (kcl, &[]),
        0,
        (std::ptr::null(), 0),
        wp.as_mut_ptr(),
    );
}

/// [`chunk`] over every chunk of a full panel of `NR` weight rows, `rows[q]` a row's blocks
/// of all `k` columns, with `ahead` the next panel's bytes (prefetched to L2 a chunk's share
/// at a time) and `x` the `mr` input rows chunk by chunk (chunk `kc0..kc0 + kcl` at
/// `kc0 · mr`, its rows `kcl` apart, as the GEMM lays them out), scaled as [`chunk`] says.
/// One call a panel: the operands are checked once, and where the whole panel takes the
/// high-word route (Q2_K, Q3_K, Q4_K and IQ2_XXS matrices that round to bf16, every scale of
/// the panel finite) the accumulators stay in registers and in the high words' units from
/// the first chunk to the last. Elsewhere chunk by chunk through [`chunk`]. The bits are
/// those of [`chunk`] chunk after chunk (a power-of-two scaling of the lanes, exact, is all
/// that moves). Panics as [`chunk`] does.
pub(super) fn panel(
    kind: DirectKind,
    round_bf16: bool,
    rows: &[&[u8]; NR],
    (k, ahead): (usize, &[u8]),
    mr: usize,
    x: &[f64],
    lanes: &mut [f64],
) {
    let (bv, bb) = block_shape(kind);
    assert!(
        (1..=MR).contains(&mr)
            && k % bv == 0
            && all_rows(rows, |r| r.len() == k / bv * bb)
            && x.len() >= mr * k
            && lanes.len() >= mr * PANEL_STEP,
        "direct panel operands too short"
    );
    let chunks = k.div_ceil(KC);
    let hi = round_bf16
        && match kind {
            // The scales' words, as `q2k_finite` and the others read them.
            DirectKind::Q2K => panel_finite::<{ kquants::Q2_K_BLOCK_BYTES }, 80>(rows, TWO_F16),
            DirectKind::Q3K => {
                panel_finite::<{ kquants::Q3_K_BLOCK_BYTES }, 106>(rows, 0x7c00 << 16)
            }
            DirectKind::Q4K => panel_finite::<{ kquants::Q4_K_BLOCK_BYTES }, 0>(rows, TWO_F16),
            DirectKind::Iq2Xxs => panel_finite::<{ iq2xxs::BLOCK_BYTES }, 0>(rows, 0x7c00),
            DirectKind::Mxfp4 | DirectKind::Q8_0 => false,
        };
    if hi {
        assert_supported();
        // Whole blocks of `KC` values (one a row a chunk): checked above.
        let p = PanelRows {
            rows,
            chunk_bytes: bb,
            chunks,
            ahead,
        };
        let (xp, lp) = (x.as_ptr(), lanes.as_mut_ptr());
        macro_rules! by_rows {
            ($f:ident) => {
                // SAFETY: the features were detected and the blocks, `x` and `lanes` checked
                // just above.
                unsafe {
                    match mr {
                        1 => $f::<1>(&p, xp, lp),
                        2 => $f::<2>(&p, xp, lp),
                        3 => $f::<3>(&p, xp, lp),
                        _ => $f::<MR>(&p, xp, lp),
                    }
                }
            };
        }
        match kind {
            DirectKind::Q2K => by_rows!(q2k_panel),
            DirectKind::Q3K => by_rows!(q3k_panel),
            DirectKind::Q4K => by_rows!(q4k_panel),
            _ => by_rows!(iq2_panel),
        }
        return;
    }
    for c in 0..chunks {
        let (kc0, kcl) = (c * KC, KC.min(k - c * KC));
        let (at, len) = (kc0 / bv * bb, kcl / bv * bb);
        let chunk_rows: [&[u8]; NR] = std::array::from_fn(|q| &rows[q][at..at + len]);
        chunk(
            kind,
            round_bf16,
            &chunk_rows,
            (kcl, ahead_share(ahead, chunks, c)),
            mr,
            (&x[kc0 * mr..], kcl),
            lanes,
        );
    }
}

/// Chunk `c`'s share of `ahead` (the next panel's bytes) when a panel of `chunks` chunks
/// prefetches it a share a chunk.
pub(super) fn ahead_share(ahead: &[u8], chunks: usize, c: usize) -> &[u8] {
    let share = ahead.len().div_ceil(chunks.max(1));
    let lo = (c * share).min(ahead.len());
    &ahead[lo..(lo + share).min(ahead.len())]
}

/// Panics unless [`supported`].
fn assert_supported() {
    assert!(
        supported(),
        "the direct kernels need AVX-512 F, BW, DQ, VL, VBMI and BF16 and F16C"
    );
}

/// Values and bytes of a block of `kind`.
fn block_shape(kind: DirectKind) -> (usize, usize) {
    match kind {
        DirectKind::Q2K => (KC, kquants::Q2_K_BLOCK_BYTES),
        DirectKind::Q3K => (KC, kquants::Q3_K_BLOCK_BYTES),
        DirectKind::Q4K => (KC, kquants::Q4_K_BLOCK_BYTES),
        DirectKind::Iq2Xxs => (KC, iq2xxs::BLOCK_BYTES),
        DirectKind::Mxfp4 => (MX_VALUES, mxfp4::BLOCK_BYTES),
        DirectKind::Q8_0 => (MX_VALUES, legacy::Q8_0_BLOCK_BYTES),
    }
}

/// The exponent fields of two f16 in a 32-bit word.
const TWO_F16: u32 = 0x7c00_7c00;

/// Whether in every block (`BB` bytes) of every row the f16 exponent fields `fields` (a mask
/// of the little-endian 32-bit word at byte `AT`) are not all ones: every scale they hold is
/// finite. Each field plus its lowest bit carries into the bit above it exactly when it is
/// all ones, so one OR of such sums over the panel says it (a call of `q2k_finite` and the
/// others a block, through a function pointer, took 6% of Q2_K's m = 1 time). Not inlined, so
/// that its loop stays out of the kernels' code (a check loop inlined into the Q8_0 kernel
/// once made LLVM keep its accumulators on the stack).
#[inline(never)]
fn panel_finite<const BB: usize, const AT: usize>(rows: &[&[u8]; NR], fields: u32) -> bool {
    // Each field's lowest bit, and the bit above each field.
    let low = fields & !(fields << 1);
    let mut carries = 0u32;
    for r in rows {
        for b in r.chunks_exact(BB) {
            carries |= (u32_at(b, AT) & fields) + low;
        }
    }
    carries & (fields + low) == 0
}

/// A panel's rows for the high-word panel kernels ([`panel`]): chunk `c` of every row is
/// bytes `c · chunk_bytes..` (one block of `KC` values); `ahead` the next panel's bytes.
struct PanelRows<'a> {
    rows: &'a [&'a [u8]; NR],
    chunk_bytes: usize,
    chunks: usize,
    ahead: &'a [u8],
}

impl<'a> PanelRows<'a> {
    /// Chunk `c`'s block of every row.
    #[inline(always)]
    fn chunk(&self, c: usize) -> [&'a [u8]; NR] {
        let (at, n) = (c * self.chunk_bytes, self.chunk_bytes);
        let mut out = [&self.rows[0][..0]; NR];
        for (o, r) in out.iter_mut().zip(self.rows) {
            *o = &r[at..at + n];
        }
        out
    }
}

/// A high-word panel kernel `$name::<R>` (with `$features`): the accumulators loaded and
/// brought into the high words' units (2^−448) once, then every chunk's steps `$steps` (a
/// function of `run`'s operands and the accumulators, which may name `R`), then back and
/// stored.
macro_rules! hi_panel_kernel {
    ($(#[$doc:meta])* $name:ident, $features:literal, $steps:expr) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize>(p: &PanelRows<'_>, x: *const f64, lanes: *mut f64) {
            // SAFETY: as the steps' (chunk `c`'s inputs at `c · KC · R`, `KC` apart).
            unsafe {
                let mut acc = load_lanes::<R>(lanes);
                hi_units::<R>(&mut acc, true);
                for c in 0..p.chunks {
                    let rows = p.chunk(c);
                    let ahead = ahead_share(p.ahead, p.chunks, c);
                    $steps(&rows, (KC, ahead), x.add(c * KC * R), KC, &mut acc, lanes);
                }
                hi_units::<R>(&mut acc, false);
                store_lanes(&acc, lanes);
            }
        }
    };
}

/// Checks the blocks and the features, then runs `kind`'s kernel for `mr` input rows (0: write
/// the packed panel to `out`; else accumulate into the lanes at `out`). The caller checked
/// `x` and `out` against `mr` and `kcl`.
fn run(
    kind: DirectKind,
    round_bf16: bool,
    rows: &[&[u8]; NR],
    (kcl, ahead): (usize, &[u8]),
    mr: usize,
    (xp, x_stride): (*const f64, usize),
    lp: *mut f64,
) {
    assert_supported();
    let (_, bb) = block_shape(kind);
    match kind {
        DirectKind::Q2K | DirectKind::Q3K | DirectKind::Q4K | DirectKind::Iq2Xxs => {
            assert!(
                kcl == KC && all_rows(rows, |r| r.len() == bb),
                "a K-quant or IQ2_XXS chunk is one block a row"
            )
        }
        DirectKind::Mxfp4 | DirectKind::Q8_0 => {
            assert!(
                kcl % MX_VALUES == 0
                    && kcl <= KC
                    && all_rows(rows, |r| r.len() == kcl / MX_VALUES * bb),
                "an MXFP4 or Q8_0 chunk is whole blocks"
            )
        }
    }
    macro_rules! by_rows {
        ($f:ident $(, $c:literal)?) => {
            // SAFETY: the features were detected and the blocks checked just above, `x` and
            // `out` by the caller.
            unsafe {
                match mr {
                    0 => $f::<0 $(, $c)?>(rows, (kcl, ahead), xp, x_stride, lp),
                    1 => $f::<1 $(, $c)?>(rows, (kcl, ahead), xp, x_stride, lp),
                    2 => $f::<2 $(, $c)?>(rows, (kcl, ahead), xp, x_stride, lp),
                    3 => $f::<3 $(, $c)?>(rows, (kcl, ahead), xp, x_stride, lp),
                    _ => $f::<MR $(, $c)?>(rows, (kcl, ahead), xp, x_stride, lp),
                }
            }
        };
    }
    match (kind, round_bf16) {
        (DirectKind::Q2K, true) => by_rows!(q2k, true),
        (DirectKind::Q2K, false) => by_rows!(q2k, false),
        (DirectKind::Q3K, true) => by_rows!(q3k, true),
        (DirectKind::Q3K, false) => by_rows!(q3k, false),
        (DirectKind::Q4K, true) => by_rows!(q4k, true),
        (DirectKind::Q4K, false) => by_rows!(q4k, false),
        (DirectKind::Iq2Xxs, true) => by_rows!(iq2, true),
        (DirectKind::Iq2Xxs, false) => by_rows!(iq2, false),
        (DirectKind::Mxfp4, _) => by_rows!(mx),
        (DirectKind::Q8_0, true) => by_rows!(q8, true),
        (DirectKind::Q8_0, false) => by_rows!(q8, false),
    }
}

/// Whether `f` holds for every row: a plain loop, where `Iterator::all`'s closure was left a
/// call a chunk (some 3% of a fused kernel's time).
#[inline(always)]
fn all_rows(rows: &[&[u8]; NR], f: impl Fn(&[u8]) -> bool) -> bool {
    let mut every = true;
    for r in rows {
        every &= f(r);
    }
    every
}

/// Part `i` of `n` of a chunk's `ahead` bytes, prefetched to L2 ([`chunk`]): a kernel calls it
/// at each of `n` points of its chunk.
/// Written out here, not a call of `rows::prefetch_to_l2`, so that no call can end up inside a
/// kernel's register-resident steps.
#[inline(always)]
fn prefetch_part(ahead: &[u8], i: usize, n: usize) {
    let len = ahead.len();
    for line in ahead[len * i / n..len * (i + 1) / n].chunks(64) {
        // SAFETY: a prefetch is a hint: it reads nothing architecturally and cannot fault, and
        // the address is inside `ahead`.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(line.as_ptr().cast()) };
    }
}

/// Loads sixteen `i32`s.
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn load_i32(v: &[i32; 16]) -> __m512i {
    // SAFETY: 64 readable bytes.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}

/// Loads sixty-four bytes.
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn load_u8(v: &[u8; 64]) -> __m512i {
    // SAFETY: 64 readable bytes.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}

/// The body of a kernel with a high-word route (Q2_K, Q3_K, Q4_K, IQ2_XXS, Q8_0) for `R`
/// rows and `ROUND`: the high-word route for fused rounded chunks whose every row passes
/// `$finite`, else the widened route, inside lanes scaled to the inputs' units
/// ([`input_scale`]) where the inputs came scaled. `$hi` and `$widened` are a chunk's steps
/// (functions of `run`'s operands and the accumulators, in the high words' units for `$hi`),
/// or with `try` in place of `$finite` whole chunks (functions of `run`'s operands, that load
/// and store the lanes themselves), `$hi` saying whether it took the chunk (true), else it
/// left the lanes as they were.
macro_rules! high_words_or_widened {
    (($kind:expr, try), ($rows:ident, $k:expr, $x:ident, $xs:ident, $lanes:ident), $hi:expr, $widened:expr) => {{
        if R == 0 || !ROUND {
            $widened($rows, $k, $x, $xs, $lanes);
        } else if !$hi($rows, $k, $x, $xs, $lanes) {
            let s = input_scale($kind, ROUND);
            scale_lanes_in_memory::<R>($lanes, s);
            $widened($rows, $k, $x, $xs, $lanes);
            scale_lanes_in_memory::<R>($lanes, 1.0 / s);
        }
    }};
    (($kind:expr, $finite:ident), ($rows:ident, $k:expr, $x:ident, $xs:ident, $lanes:ident), $hi:expr, $widened:expr) => {{
        let mut acc = load_lanes::<R>($lanes);
        if R == 0 || !ROUND {
            $widened($rows, $k, $x, $xs, &mut acc, $lanes);
        } else {
            // The lanes' units for the route: the high words' (2^−448), or the scaled inputs'
            // (2^448) for the widened route.
            let hi = all_rows($rows, $finite);
            let s = if hi {
                1.0 / input_scale($kind, ROUND)
            } else {
                input_scale($kind, ROUND)
            };
            scale_lanes::<R>(&mut acc, &[_mm512_set1_pd(s); PAIRS]);
            if hi {
                $hi($rows, $k, $x, $xs, &mut acc, $lanes);
            } else {
                $widened($rows, $k, $x, $xs, &mut acc, $lanes);
            }
            scale_lanes::<R>(&mut acc, &[_mm512_set1_pd(1.0 / s); PAIRS]);
        }
        store_lanes(&acc, $lanes);
    }};
}

/// A kernel `$name::<R, ROUND>` (with `$features`) that takes the high-word route `$hi` or
/// the widened one `$widened` (which may name the kernel's `R` and `ROUND`) by
/// [`high_words_or_widened!`].
macro_rules! high_words_or_widened_kernel {
    ($(#[$doc:meta])* $name:ident, $features:literal, ($kind:expr, $finite:tt), ($hi:expr, $widened:expr)) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize, const ROUND: bool>(
            rows: &[&[u8]; NR],
            (kcl, ahead): (usize, &[u8]),
            x: *const f64,
            x_stride: usize,
            lanes: *mut f64,
        ) {
            // SAFETY: as the callees'.
            unsafe {
                high_words_or_widened!(
                    ($kind, $finite),
                    (rows, (kcl, ahead), x, x_stride, lanes),
                    $hi,
                    $widened
                )
            }
        }
    };
}

/// Two vectors of table values rounded to bf16 with `ROUND` (else as they are), still as f32.
///
/// The rounding is `vcvtne2ps2bf16`: nearest even, a NaN quieted and truncated, exactly
/// `round_bf16_one` except that it flushes f32 subnormals to zero, and no Q2_K, Q3_K, Q4_K or
/// Q8_0 value is one: `d`, `dmin` are f16 (multiples of 2^−24), the scales and codes small
/// integers, so every product is an exact multiple of 2^−24 and so is the difference before it
/// rounds (Q2_K, Q4_K), which is thus 0 or at least 2^−24 in magnitude, far above f32's subnormals (below
/// 2^−126); NaN and infinity go through as `round_bf16_one` takes them (the tests cover both,
/// and an f16 subnormal scale).
///
/// # Safety
/// AVX-512 F, BW and BF16 must be present.
#[inline(always)]
unsafe fn round_pair<const ROUND: bool>(v0: __m512, v1: __m512) -> [__m512; 2] {
    if !ROUND {
        return [v0, v1];
    }
    // SAFETY (whole body): the features are present.
    unsafe {
        let words = bf16_words(v0, v1);
        [
            words_to_f32(words, &BF16_WORDS[0]),
            words_to_f32(words, &BF16_WORDS[1]),
        ]
    }
}

/// `v0`'s and `v1`'s values rounded to bf16 (`vcvtne2ps2bf16`, as [`round_pair`] describes),
/// as 32 words: `v0`'s in words 0..16, `v1`'s in 16..32.
///
/// # Safety
/// AVX-512 F and BF16 must be present.
#[inline(always)]
unsafe fn bf16_words(v0: __m512, v1: __m512) -> __m512i {
    // SAFETY: the features are present; a bf16 vector is 32 words.
    unsafe { std::mem::transmute(_mm512_cvtne2ps_pbh(v1, v0)) }
}

/// `v0`'s and `v1`'s values rounded to bf16 ([`bf16_words`]), as f32 split by lane parity:
/// `[even, odd]`, lane `j` of `even` being `v0`'s lane `2j` (`j < 8`) or `v1`'s lane
/// `2j − 16`, and of `odd` the lane after it. A 32-bit lane's low word is the even value and
/// its high word the odd one, so a shift and a mask do it (no word permute): the tables that
/// round lay their values out so that the halves are what they need.
///
/// # Safety
/// AVX-512 F, BW and BF16 must be present.
#[inline(always)]
unsafe fn bf16_even_odd(v0: __m512, v1: __m512) -> [__m512; 2] {
    // SAFETY (whole body): the features are present.
    unsafe {
        let words = bf16_words(v0, v1);
        let high = _mm512_set1_epi32(0xffff_0000_u32 as i32);
        [
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(words)),
            _mm512_castsi512_ps(_mm512_and_si512(words, high)),
        ]
    }
}

/// Two pairs' two f64 tables (eight entries each) from their table vectors `v` (Q2_K's two
/// groups, IQ2_XXS's two rows): unrounded, each vector's halves; with `ROUND`, vectors whose
/// values are interleaved (the even lanes the first table, the odd the second), rounded to
/// bf16 both at once by [`bf16_even_odd`].
///
/// # Safety
/// AVX-512 F, BW and BF16 must be present.
#[inline(always)]
unsafe fn two_pairs_tables<const ROUND: bool>(v: [__m512; 2]) -> [[__m512d; 2]; 2] {
    // SAFETY (whole body): the features are present.
    unsafe {
        if !ROUND {
            return [widen(v[0]), widen(v[1])];
        }
        let [even, odd] = bf16_even_odd(v[0], v[1]);
        let ([e0, e1], [o0, o1]) = (widen(even), widen(odd));
        [[e0, o0], [e1, o1]]
    }
}

/// Sixteen f32 from [`bf16_words`]'s words: lane `i` is word `idx[2i + 1]` in its high half
/// and word `idx[2i]` in its low half, where every even index is 32, the first word of the
/// permute's zero second source (one two-source permute; a zero-masked one compiled to a
/// permute and an AND).
///
/// # Safety
/// AVX-512 F and BW must be present.
#[inline(always)]
unsafe fn words_to_f32(words: __m512i, idx: &[i16; 32]) -> __m512 {
    // SAFETY: the features are present; `idx` is 64 readable bytes.
    unsafe {
        let idx = _mm512_loadu_si512(idx.as_ptr().cast());
        _mm512_castsi512_ps(_mm512_permutex2var_epi16(
            words,
            idx,
            _mm512_setzero_si512(),
        ))
    }
}

/// Both f64 halves of sixteen f32 lanes.
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn widen(v: __m512) -> [__m512d; 2] {
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    [
        _mm512_cvtps_pd(_mm512_castps512_ps256(v)),
        _mm512_cvtps_pd(hi),
    ]
}

/// [`widen`] through memory: each half's conversion reads it with a load, where taking the
/// high half from the register costs a shuffle on port 5, the port that Q2_K's table build
/// and the step permutes keep busiest (volatile, or the compiler turns it back into the
/// shuffle). Slower where the tables are on the critical path (the round trip adds latency).
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn widen_via_memory(v: __m512) -> [__m512d; 2] {
    let mut t = MaybeUninit::<__m512>::uninit();
    // SAFETY: `t` is 64 writable bytes, aligned for `__m512` and so for its `__m256` halves;
    // both halves are read after the write.
    unsafe {
        std::ptr::write_volatile(t.as_mut_ptr(), v);
        let h = t.as_ptr().cast::<__m256>();
        [
            _mm512_cvtps_pd(std::ptr::read_volatile(h)),
            _mm512_cvtps_pd(std::ptr::read_volatile(h.add(1))),
        ]
    }
}

/// The accumulators of `R` input rows' pairs, from `lanes` (`R·PANEL_STEP` values).
///
/// # Safety
/// AVX-512F must be present and `lanes` must hold `R·PANEL_STEP` values.
#[inline(always)]
unsafe fn load_lanes<const R: usize>(lanes: *const f64) -> [[__m512d; PAIRS]; R] {
    // SAFETY: value r·PANEL_STEP + 8z + 7 < R·PANEL_STEP.
    std::array::from_fn(|r| {
        std::array::from_fn(|z| unsafe { _mm512_loadu_pd(lanes.add(r * PANEL_STEP + 8 * z)) })
    })
}

/// Stores [`load_lanes`]'s accumulators back.
///
/// # Safety
/// As [`load_lanes`].
#[inline(always)]
unsafe fn store_lanes<const R: usize>(acc: &[[__m512d; PAIRS]; R], lanes: *mut f64) {
    for (r, row) in acc.iter().enumerate() {
        for (z, a) in row.iter().enumerate() {
            // SAFETY: as in `load_lanes`.
            unsafe { _mm512_storeu_pd(lanes.add(r * PANEL_STEP + 8 * z), *a) };
        }
    }
}

/// Pair `z`'s weights `w` at step `u`: into the packed panel at `out` with no input rows
/// (`R = 0`), else multiplied by each row's step values `xv` into its accumulator.
///
/// # Safety
/// AVX-512F must be present; for `R = 0`, `out` must hold `(u + 1)·PANEL_STEP` values.
#[inline(always)]
unsafe fn sink<const R: usize>(
    (u, z, w): (usize, usize, __m512d),
    xv: &[__m512d; R],
    acc: &mut [[__m512d; PAIRS]; R],
    out: *mut f64,
) {
    if R == 0 {
        // SAFETY: the caller's bound.
        unsafe { _mm512_storeu_pd(out.add(u * PANEL_STEP + 8 * z), w) };
    }
    for (row, x) in acc.iter_mut().zip(xv) {
        row[z] = _mm512_fmadd_pd(*x, w, row[z]);
    }
}

/// The 32 code bytes at `at` of two rows `a`, `b` in one register (`a`'s low, `b`'s high),
/// byte-permuted by `transpose` so each column's codes share a lane.
///
/// # Safety
/// AVX-512 F, BW and VBMI must be present; `a` and `b` must hold `at + 32` bytes.
#[inline(always)]
unsafe fn transposed_pair(a: &[u8], b: &[u8], at: usize, transpose: __m512i) -> __m512i {
    // SAFETY: the caller's bound.
    unsafe {
        let qa = _mm256_loadu_si256(a.as_ptr().add(at).cast());
        let qb = _mm256_loadu_si256(b.as_ptr().add(at).cast());
        let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qa), qb);
        _mm512_permutexvar_epi8(transpose, both)
    }
}

/// A pair's weights from two sixteen-entry f64 tables (`ta` the first row's, `tb` the
/// second's, each as two registers) at the code bits 0..4 of `idx`: the low four lanes from
/// `ta`, the high four from `tb`.
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn lookup_pair16(ta: [__m512d; 2], tb: [__m512d; 2], idx: __m512i) -> __m512d {
    _mm512_mask_blend_pd(
        0xf0,
        _mm512_permutex2var_pd(ta[0], idx, ta[1]),
        _mm512_permutex2var_pd(tb[0], idx, tb[1]),
    )
}

/// Step `u` of a kernel whose pairs look their weights up in two tables (eight entries of
/// each row, the row bit 3 of a code) of the step's group, `tabs`: each pair's codes `cs`
/// brought down by `SH` bits, one permute, then into [`sink`].
///
/// # Safety
/// AVX-512F must be present; `x` and `lanes` as [`x_step`] and [`sink`] require for step `u`.
#[inline(always)]
unsafe fn pair_table_step<const R: usize, const SH: u32>(
    (u, cs): (usize, &[__m512i; PAIRS]),
    tabs: &[[__m512d; 2]; PAIRS],
    (x, x_stride): (*const f64, usize),
    acc: &mut [[__m512d; PAIRS]; R],
    lanes: *mut f64,
) {
    // SAFETY: the caller's bounds.
    unsafe {
        let xv = x_step::<R>(x, x_stride, u);
        for (z, (c, [ta, tb])) in cs.iter().zip(tabs).enumerate() {
            let w = _mm512_permutex2var_pd(*ta, _mm512_srli_epi64::<SH>(*c), *tb);
            sink::<R>((u, z, w), &xv, acc, lanes);
        }
    }
}

/// The eight steps `u0..u0 + 8` of a sub-block through the caller's `step!($cs, u, shift)`:
/// step `t`'s code byte is brought down by `8t` bits (literal shifts, every step written out,
/// so nothing waits on a shift count).
macro_rules! eight_steps {
    ($step:ident, $cs:ident, $u0:expr) => {{
        let u0 = $u0;
        $step!($cs, u0, 0);
        $step!($cs, u0 + 1, 8);
        $step!($cs, u0 + 2, 16);
        $step!($cs, u0 + 3, 24);
        $step!($cs, u0 + 4, 32);
        $step!($cs, u0 + 5, 40);
        $step!($cs, u0 + 6, 48);
        $step!($cs, u0 + 7, 56);
    }};
}

/// One pair's step codes in memory, `N` rows of eight steps: on the widened route byte
/// `8l + t` of row `r` is lane `l`'s table index at step `8r + t` (on the high-word route the
/// steps are in the order [`Q2K_HI_TRANSPOSE`] gives), and a zeroed row follows the last. A
/// step's indices are a row brought down by `8t` bits, or the 64 bytes from byte `t` of the
/// row (the permutes read only a lane's low bits; the bytes above are later steps' or the next
/// row's): a load there costs a load port where a shift costs one of the vector ports the
/// permutes and FMAs share, and line-split loads are slow, so [`step_code!`] takes the odd
/// steps by load and the even ones by shift; the high-word route takes two steps by one load
/// ([`q2k_steps`]).
#[repr(C, align(64))]
struct StepCodes<const N: usize> {
    rows: [__m512i; N],
    seal: __m512i,
}

impl<const N: usize> StepCodes<N> {
    /// Writes row `r`.
    ///
    /// # Safety
    /// AVX-512F must be present.
    #[inline(always)]
    unsafe fn put(&mut self, r: usize, v: __m512i) {
        self.rows[r] = v;
    }

    /// Every row and the seal zeroed.
    ///
    /// # Safety
    /// AVX-512F must be present.
    #[inline(always)]
    unsafe fn zeroed() -> StepCodes<N> {
        StepCodes {
            rows: [_mm512_setzero_si512(); N],
            seal: _mm512_setzero_si512(),
        }
    }

    /// Writes the zeroed row after the last.
    ///
    /// # Safety
    /// AVX-512F must be present.
    #[inline(always)]
    unsafe fn seal(&mut self) {
        self.seal = _mm512_setzero_si512();
    }

    /// Row `r`'s first byte (`r < N`; the 128 bytes from it are initialised once every row
    /// and the seal are written).
    #[inline(always)]
    fn at(&self, r: usize) -> *const u8 {
        assert!(r < N);
        // In bounds: the struct holds N + 1 rows of 64 bytes.
        (self as *const Self).cast::<u8>().wrapping_add(64 * r)
    }
}

/// Step `t`'s table indices from row `r` of a [`StepCodes`] (`sh` = `8t`, as
/// `eight_steps!` passes it): see there.
macro_rules! step_code {
    ($sc:expr, $r:expr, $sh:literal) => {{
        let at = $sc.at($r);
        // Bytes at..at + 128 are the row and the next (or the seal); the caller is in an
        // unsafe block that vouches for the features.
        if $sh % 16 == 8 {
            _mm512_loadu_si512(at.add($sh / 8).cast())
        } else {
            _mm512_srli_epi64::<$sh>(_mm512_load_si512(at.cast()))
        }
    }};
}

/// The bits of each qword lane of `$v` from bit `$at` (a constant) on, brought to bit 32 (the
/// low bits of the high dword, which the high-word permutes read as their index): a shift by
/// the distance, left or right (a rotate would do both, but this machine runs a 512-bit rotate
/// at half a shift's rate). Both shift counts stay below 256 (the immediates' range) either
/// way. The caller is in an unsafe block that vouches for AVX-512F.
macro_rules! to_high_dword {
    ($at:expr, $v:expr) => {{
        const AT: u32 = $at;
        if AT >= 32 {
            _mm512_srli_epi64::<{ (AT + 224) % 256 }>($v)
        } else {
            _mm512_slli_epi64::<{ (256 + 32 - AT) % 256 }>($v)
        }
    }};
}

/// Each input row's four values of step `u`, in both halves of a register.
///
/// # Safety
/// AVX-512F must be present and `x` must hold `(R − 1)·x_stride + 4u + 4` values.
#[inline(always)]
unsafe fn x_step<const R: usize>(x: *const f64, x_stride: usize, u: usize) -> [__m512d; R] {
    // A loop, not `array::from_fn`: a closure has no target features, so the intrinsics in
    // it are inlined only once the closure is, which LLVM stopped doing in a large kernel
    // (MXFP4 then took 2.6x the time).
    let mut v = [_mm512_setzero_pd(); R];
    for (r, v) in v.iter_mut().enumerate() {
        // SAFETY: the caller's bound.
        *v = unsafe { _mm512_broadcast_f64x4(_mm256_loadu_pd(x.add(r * x_stride + 4 * u))) };
    }
    v
}

/// A pair's per-group values (sixteen groups of each row, `a` and `b`) by halves of the block:
/// `[a 8j.., b 8j..]` for `j = 0, 1`, so that a sub-block's lanes are a single-source permute
/// away.
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn block_halves(a: __m512, b: __m512) -> [__m512; 2] {
    [
        _mm512_shuffle_f32x4::<0x44>(a, b),
        _mm512_shuffle_f32x4::<0xee>(a, b),
    ]
}

/// Q2_K: for lane `i` of a pair's groups `2h, 2h + 1` (`h` = `sub % 4` of a sub-block), the
/// source lane in a half block's scales (`0..8` the first row's eight groups, `8..16` the
/// second's). Unrounded (`[0]`), the two tables one after the other: `[a 2h, b 2h, a 2h+1,
/// b 2h+1]`, four lanes each (one per code). Rounded (`[1]`), interleaved: lane `2e + g` is
/// entry `e` (`[a` codes `0..4, b` codes `0..4]`) of group `2h + g`, so that the bf16 words'
/// even and odd halves ([`q2k`]) are the two tables.
static Q2K_GROUP_LANES: [[[i32; 16]; 4]; 2] = {
    let mut t = [[[0i32; 16]; 4]; 2];
    let mut h = 0;
    while h < 4 {
        let mut i = 0;
        while i < 16 {
            let quarter = (i / 4) as i32;
            t[0][h][i] = 2 * h as i32 + quarter / 2 + 8 * (quarter % 2);
            let (e, g) = ((i / 2) as i32, (i % 2) as i32);
            t[1][h][i] = 2 * h as i32 + g + 8 * (e / 4);
            i += 1;
        }
        h += 1;
    }
    t
};

/// Q2_K's high-word tables: for lane `2e + k` of the vector of group `2h + g` (`h` = `sub % 4`
/// of a sub-block, `[h][g]`), the source lane in the two pairs' half-block scales (`0..16`
/// pair `k = 0`'s, `16..32` pair 1's; each `[a 8j.., b 8j..]`): entry `e` of the pair's table
/// (`[a` codes `0..4, b` codes `0..4]`), whose levels are [`q2k_levels`]' rounded ones.
static Q2K_HI_PAIR_LANES: [[[i32; 16]; 2]; 4] = {
    let mut t = [[[0i32; 16]; 2]; 4];
    let mut h = 0;
    while h < 4 {
        let mut g = 0;
        while g < 2 {
            let mut i = 0;
            while i < 16 {
                let (e, k) = (i / 2, i % 2);
                t[h][g][i] = (16 * k + 8 * (e / 4) + 2 * h + g) as i32;
                i += 1;
            }
            g += 1;
        }
        h += 1;
    }
    t
};

/// Q2_K: a pair's 32 `qs` bytes of each row (first row's in bytes 0..32) transposed so that
/// byte `8l + t` of lane `l` is the byte of its column `4t + l % 4` (row `l / 4`).
static Q2K_TRANSPOSE: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut l = 0;
    while l < 8 {
        let mut s = 0;
        while s < 8 {
            t[8 * l + s] = (32 * (l / 4) + 4 * s + l % 4) as u8;
            s += 1;
        }
        l += 1;
    }
    t
};

/// [`Q2K_TRANSPOSE`] for the high-word route: byte `8l + k` of lane `l` (`k < 4`) is the
/// byte of its column at step `2k`, byte `8l + 4 + k` at step `2k + 1`, so that a load from
/// byte `k` of a step-code row has step `2k`'s code in the low byte of each qword and step
/// `2k + 1`'s in byte 4 ([`q2k_steps`]).
static Q2K_HI_TRANSPOSE: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut l = 0;
    while l < 8 {
        let mut k = 0;
        while k < 4 {
            t[8 * l + k] = (32 * (l / 4) + 8 * k + l % 4) as u8;
            t[8 * l + 4 + k] = (32 * (l / 4) + 8 * k + 4 + l % 4) as u8;
            k += 1;
        }
        l += 1;
    }
    t
};

/// The codes' integers `[0, 1, 2, 3]` of [`Q2K_GROUP_LANES`]'s lanes as f32 (`ROUND`: its
/// interleaved layout), hidden from the optimiser (as `lut::code_values`: the tables multiply
/// by them at run time, as the decoder does).
#[inline(always)]
fn q2k_levels<const ROUND: bool>() -> [f32; 16] {
    std::hint::black_box(std::array::from_fn(|i| {
        if ROUND {
            (i / 2 % 4) as f32
        } else {
            (i % 4) as f32
        }
    }))
}

/// A pair of Q2_K row blocks' (`a`, `b`) per-group `dl = d · (sc & 15)` and `ml = dmin ·
/// (sc >> 4)` by halves of the block, as [`block_halves`] lays them out: `[dl 0, dl 1, ml 0,
/// ml 1]`, half `j` holding `a`'s groups `8j..8j + 8`, then `b`'s. Each half's sixteen scale
/// bytes are gathered from both rows before they are widened, and both rows' `d` and `dmin`
/// converted at once and spread by one permute each: four cross-lane instructions a pair,
/// where widening each row's sixteen, broadcasting its two scales and regrouping the halves
/// took ten. The products are the decoder's (`d · f32(sc & 15)`, rounded once), so the
/// values are.
///
/// # Safety
/// AVX-512F and F16C must be present; `a` and `b` must be whole Q2_K blocks.
#[inline(always)]
unsafe fn q2k_pair_scales(a: &[u8], b: &[u8]) -> [__m512; 4] {
    debug_assert!(a.len() == kquants::Q2_K_BLOCK_BYTES && b.len() == a.len());
    // SAFETY (whole body): a block is 84 bytes: the scales at 0..16, d and dmin at 80..84.
    unsafe {
        // [d a, dmin a, d b, dmin b].
        let dd = _mm_cvtph_ps(_mm_set_epi32(
            0,
            0,
            u32_at(b, 80) as i32,
            u32_at(a, 80) as i32,
        ));
        let dd = _mm512_castps128_ps512(dd);
        let d = _mm512_permutexvar_ps(load_i32(&Q2K_PAIR_SCALE_LANES[0]), dd);
        let dmin = _mm512_permutexvar_ps(load_i32(&Q2K_PAIR_SCALE_LANES[1]), dd);
        let mut out = [_mm512_setzero_ps(); 4];
        for j in 0..2 {
            let half = |r: &[u8]| _mm_loadl_epi64(r.as_ptr().add(8 * j).cast());
            let sc = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(half(a), half(b)));
            let lo = _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(0x0f)));
            let hi = _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(sc));
            out[j] = _mm512_mul_ps(d, lo);
            out[2 + j] = _mm512_mul_ps(dmin, hi);
        }
        out
    }
}

/// [`q2k_pair_scales`]' lanes of `d` (`[0]`: the first row's in lanes 0..8, the second's in
/// 8..16) and of `dmin` (`[1]`) in `[d a, dmin a, d b, dmin b]`.
static Q2K_PAIR_SCALE_LANES: [[i32; 16]; 2] = {
    let mut t = [[0i32; 16]; 2];
    let mut i = 0;
    while i < 16 {
        t[0][i] = 2 * (i / 8) as i32;
        t[1][i] = 2 * (i / 8) as i32 + 1;
        i += 1;
    }
    t
};

/// Q2_K chunk (one block a row): see the module docs.
///
/// # Safety
/// AVX-512 F, BW, VBMI, BF16 and F16C must be present; the operands as [`run`] describes
/// them (for `R = 0`, `lanes` is a packed panel of `kcl / 4` steps and `x` is not read).
///
/// With `HI` (`ROUND`, `R ≥ 1`, every `d` and `dmin` finite, the inputs scaled by
/// [`input_scale`]) each pair's two groups' tables are one table of sixteen high words
/// ([`hi_words`]; the group bit 3 of a code byte, set for a sub-block's steps 4..8), and the
/// lanes run in the inputs' units (2^−448) for the chunk. Two steps `2k`, `2k + 1` take one
/// load of their codes (from byte `k` of the step-code row, laid out by [`Q2K_HI_TRANSPOSE`]:
/// step `2k`'s code in the low dword of each qword, `2k + 1`'s in the high one) and one
/// unmasked single-source permute, whose low dwords shifted up are step `2k`'s eight f64
/// weights and whose high dwords, the low ones cleared, step `2k + 1`'s: a shift and an AND
/// instead of a second permute and a second load. On this machine (AMD Zen 4) the kernel was
/// bound by its loads (a 64-byte load across a line costs one and a half), the shift and the
/// AND go where the FMAs and permutes leave room (Q2_K m = 1 2304x5120, 1 thread in cache,
/// 103.4 -> 98.4 CPU ns per 1000 weights).
#[inline(always)]
unsafe fn q2k_steps<const R: usize, const ROUND: bool, const HI: bool>(
    rows: &[&[u8]; NR],
    (_kcl, ahead): (usize, &[u8]),
    x: *const f64,
    x_stride: usize,
    acc: &mut [[__m512d; PAIRS]; R],
    lanes: *mut f64,
) {
    // SAFETY (whole body): every block is 84 bytes (checked by `chunk`); `x` holds R rows of
    // 256 values `x_stride` apart and `lanes` R·PANEL_STEP values.
    unsafe {
        let levels = q2k_levels::<ROUND>();
        let levels = _mm512_loadu_ps(levels.as_ptr());
        let transpose = load_u8(if HI {
            &Q2K_HI_TRANSPOSE
        } else {
            &Q2K_TRANSPOSE
        });
        let three = _mm512_set1_epi8(3);
        // Bit 2 of every code byte of the pair's second row: its table entries are 4..8; with
        // `HI`, bit 3 of the bytes of steps 4..8 (bytes 2, 3, 6 and 7 of each qword, see
        // [`Q2K_HI_TRANSPOSE`]): the second group's entries are 8..16 of the one table (the
        // f64 permutes ignore the bit).
        let second = _mm512_mask_set1_epi64(_mm512_setzero_si512(), 0xf0, 0x0404_0404_0404_0404);
        let second = if HI {
            _mm512_or_si512(second, _mm512_set1_epi64(0x0808_0000_0808_0000))
        } else {
            second
        };
        // Each pair's step codes ([`StepCodes`]), first, so that their stores have reached the
        // cache when the steps load them: sub-block `s` of half `h` (bits `2s`, `2s + 1` of
        // each code byte) with the row and group bits, as row `4h + s`.
        let mut sc = MaybeUninit::<[StepCodes<8>; PAIRS]>::uninit();
        for z in 0..PAIRS {
            let row = |c: __m512i| _mm512_ternarylogic_epi64::<0xEA>(c, three, second);
            let sc = &mut (*sc.as_mut_ptr())[z];
            for half in 0..2 {
                let c = transposed_pair(rows[2 * z], rows[2 * z + 1], 16 + 32 * half, transpose);
                sc.put(4 * half, row(c));
                sc.put(4 * half + 1, row(_mm512_srli_epi64::<2>(c)));
                sc.put(4 * half + 2, row(_mm512_srli_epi64::<4>(c)));
                sc.put(4 * half + 3, row(_mm512_srli_epi64::<6>(c)));
            }
            sc.seal();
        }
        // Each pair's per-group scales by halves of the block ([`block_halves`]): `dl` (j = 0,
        // 1) and `ml` (2 + j), written in place (see the step codes).
        let mut ss = MaybeUninit::<[[__m512; 4]; PAIRS]>::uninit();
        for z in 0..PAIRS {
            (*ss.as_mut_ptr())[z] = q2k_pair_scales(rows[2 * z], rows[2 * z + 1]);
        }
        // Every scale half and step-code row was written above (borrowed where they are:
        // moving them out of the `MaybeUninit` copied kilobytes a chunk, a sixth of its time).
        let (ss, sc) = (ss.assume_init_ref(), sc.assume_init_ref());
        // Sub-block by sub-block (its two groups' tables of every pair, in registers: a
        // 512-bit store costs this machine twice a permute, and the tables of a whole block
        // did not fit), then its eight steps.
        let mut tabs = [[_mm512_setzero_pd(); 2]; PAIRS];
        let mut tabs_hi = [_mm512_setzero_ps(); PAIRS];
        macro_rules! step {
            ($sc:ident, $u:expr, $sh:literal) => {{
                let u = $u;
                let xv = x_step::<R>(x, x_stride, u);
                for z in 0..PAIRS {
                    let idx = step_code!($sc[z], u / 8, $sh);
                    let w = _mm512_permutexvar_pd(idx, tabs[z][$sh / 32]);
                    sink::<R>((u, z, w), &xv, acc, lanes);
                }
            }};
        }
        // Sub-block `sub`'s tables of every pair into `$tabs` (or `$tabs_hi`). The decoder's
        // `dl · q − ml` for groups 2sub, 2sub + 1 of pairs 2zz, 2zz + 1 (`dl · q` is exact in
        // f32, `dl = d · sc` having at most 15 significant bits and `q` two, so `fmsub` rounds
        // where the decoder's subtraction does).
        macro_rules! tables {
            ($sub:expr, $tabs:ident, $tabs_hi:ident) => {{
                let sub = $sub;
                if HI {
                    let sel = [
                        load_i32(&Q2K_HI_PAIR_LANES[sub % 4][0]),
                        load_i32(&Q2K_HI_PAIR_LANES[sub % 4][1]),
                    ];
                    for zz in 0..PAIRS / 2 {
                        // Group 2sub (`v[0]`) and 2sub + 1 (`v[1]`) of both pairs, the pairs'
                        // lanes interleaved: rounded together, the even words are the first
                        // pair's sixteen values and the odd words the second's, as high words
                        // with no shuffle.
                        let (s0, s1) = (&ss[2 * zz], &ss[2 * zz + 1]);
                        let mut v = [_mm512_setzero_ps(); 2];
                        for (g, v) in v.iter_mut().enumerate() {
                            let dl = _mm512_permutex2var_ps(s0[sub / 4], sel[g], s1[sub / 4]);
                            let ml =
                                _mm512_permutex2var_ps(s0[2 + sub / 4], sel[g], s1[2 + sub / 4]);
                            *v = _mm512_fmsub_ps(dl, levels, ml);
                        }
                        [$tabs_hi[2 * zz], $tabs_hi[2 * zz + 1]] =
                            hi_word_halves(bf16_words(v[0], v[1]));
                    }
                } else {
                    let sel = load_i32(&Q2K_GROUP_LANES[usize::from(ROUND)][sub % 4]);
                    for zz in 0..PAIRS / 2 {
                        let mut v = [_mm512_setzero_ps(); 2];
                        for (k, v) in v.iter_mut().enumerate() {
                            let s = &ss[2 * zz + k];
                            let dl = _mm512_permutexvar_ps(sel, s[sub / 4]);
                            let ml = _mm512_permutexvar_ps(sel, s[2 + sub / 4]);
                            *v = _mm512_fmsub_ps(dl, levels, ml);
                        }
                        [$tabs[2 * zz], $tabs[2 * zz + 1]] = two_pairs_tables::<ROUND>(v);
                    }
                }
            }};
        }
        // The next sub-block's tables are built before this one's steps, so that their chain
        // of permutes, roundings and shuffles runs while the steps do (built after them, it
        // waited for the steps ahead of it in the schedulers at every sub-block).
        tables!(0, tabs, tabs_hi);
        let (mut next, mut next_hi) = (tabs, tabs_hi);
        for sub in 0..8 {
            prefetch_part(ahead, sub, 8);
            if sub + 1 < 8 {
                tables!(sub + 1, next, next_hi);
            }
            if HI {
                // Steps 2k and 2k + 1 of every pair from one load and one permute.
                for k in 0..4 {
                    let u = 8 * sub + 2 * k;
                    let xv = [x_step::<R>(x, x_stride, u), x_step::<R>(x, x_stride, u + 1)];
                    for z in 0..PAIRS {
                        let idx = step_pair_codes(&sc[z], sub, k);
                        let [w0, w1] = hi_split(_mm512_permutexvar_ps(idx, tabs_hi[z]));
                        sink::<R>((u, z, w0), &xv[0], acc, lanes);
                        sink::<R>((u + 1, z, w1), &xv[1], acc, lanes);
                    }
                }
            } else {
                eight_steps!(step, sc, 8 * sub);
            }
            (tabs, tabs_hi) = (next, next_hi);
        }
    }
}

/// Whether a Q2_K block's `d` and `dmin` (bytes 80..84) are finite: then every value of the
/// block is a finite f32, an exact multiple of 2^−24 below 2^22.
#[inline(always)]
fn q2k_finite(b: &[u8]) -> bool {
    f16_finite(b, 80) && f16_finite(b, 82)
}

/// Whether the f16 at bytes `at..at + 2` of `b` is finite (its exponent field not all ones).
#[inline(always)]
fn f16_finite(b: &[u8], at: usize) -> bool {
    u16_at(b, at) & 0x7c00 != 0x7c00
}

high_words_or_widened_kernel!(
    /// Q2_K chunk: the fused kernels of bf16-rounded matrices keep high words (`q2k_steps`
    /// with `HI`) where every row's scales are finite (their inputs scaled by
    /// [`input_scale`]), else widen with the lanes in the inputs' units for the chunk; the
    /// packed panel and unrounded matrices widen.
    ///
    /// # Safety
    /// As [`q2k_steps`].
    q2k,
    "avx512f,avx512bw,avx512vbmi,avx512bf16,f16c",
    (DirectKind::Q2K, q2k_finite),
    (q2k_steps::<R, true, true>, q2k_steps::<R, ROUND, false>)
);

hi_panel_kernel!(
    /// A whole Q2_K panel on the high-word route ([`panel`]).
    ///
    /// # Safety
    /// As [`q2k`]'s high-word route, for every chunk of the panel.
    q2k_panel,
    "avx512f,avx512bw,avx512vbmi,avx512bf16,f16c",
    q2k_steps::<R, true, true>
);

/// Q3_K: for lane `i` of vector `v` of a pair's tables of sub-block `g2` (groups `2g2`,
/// `2g2 + 1`; `g2 % 4` indexes this), the source lane in a half block's `dl` (`0..8` the
/// first row's eight groups, `8..16` the second's). Unrounded (`[0]`), vector `v` is group
/// `2g2 + v`'s table: eight lanes of each row. Rounded (`[1]`), vector `v` is row `v`'s, lane
/// `2c + g` its code `c` in group `2g2 + g`, so that the bf16 words' even and odd halves
/// ([`q3k`]) are the two groups' tables.
static Q3K_GROUP_LANES: [[[[i32; 16]; 2]; 4]; 2] = {
    let mut t = [[[[0i32; 16]; 2]; 4]; 2];
    let mut g2 = 0;
    while g2 < 4 {
        let mut v = 0;
        while v < 2 {
            let mut i = 0;
            while i < 16 {
                t[0][g2][v][i] = (2 * g2 + v + 8 * (i / 8)) as i32;
                t[1][g2][v][i] = (2 * g2 + i % 2 + 8 * v) as i32;
                i += 1;
            }
            v += 1;
        }
        g2 += 1;
    }
    t
};

/// The code values `−4..4` of [`Q3K_GROUP_LANES`]'s lanes as f32 (a code is `low | high << 2`
/// and stands for `code − 4`; `ROUND`: its interleaved layout), hidden from the optimiser (as
/// [`q2k_levels`]).
#[inline(always)]
fn q3k_levels<const ROUND: bool>() -> [f32; 16] {
    std::hint::black_box(std::array::from_fn(|i| {
        let code = if ROUND { i / 2 } else { i };
        (code % 8) as f32 - 4.0
    }))
}

/// One Q3_K row block's per-group `dl = d · sc` (d by F16C): the sixteen 6-bit scales
/// unpacked in registers as `kquants::q3_k_scales` does (low nibbles of bytes 0..8, then their
/// high nibbles; two high bits from bytes 8..12, at `2·(i / 4)`; minus 32).
///
/// # Safety
/// AVX-512 F, BW and VL and F16C must be present; `b` must be a whole Q3_K block.
#[inline(always)]
unsafe fn q3k_scales(b: &[u8]) -> __m512 {
    debug_assert_eq!(b.len(), kquants::Q3_K_BLOCK_BYTES);
    // SAFETY (whole body): the scales are bytes 96..108 of the block, read by a masked load.
    unsafe {
        let s = _mm_maskz_loadu_epi8(0x0fff, b.as_ptr().add(96).cast());
        let nib = _mm_set1_epi8(0x0f);
        let rep = _mm_shuffle_epi8(
            s,
            _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7),
        );
        let low = _mm_mask_blend_epi8(
            0xff00,
            _mm_and_si128(rep, nib),
            _mm_and_si128(_mm_srli_epi16::<4>(rep), nib),
        );
        let hs = _mm_shuffle_epi8(
            s,
            _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11),
        );
        let mut high = hs;
        high = _mm_mask_blend_epi8(0x00f0, high, _mm_srli_epi16::<2>(hs));
        high = _mm_mask_blend_epi8(0x0f00, high, _mm_srli_epi16::<4>(hs));
        high = _mm_mask_blend_epi8(0xf000, high, _mm_srli_epi16::<6>(hs));
        let high = _mm_slli_epi16::<4>(_mm_and_si128(high, _mm_set1_epi8(3)));
        let sc = _mm_sub_epi8(_mm_or_si128(low, high), _mm_set1_epi8(32));
        let sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc));
        let d = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(u16_at(b, 108))));
        _mm512_mul_ps(_mm512_broadcastss_ps(d), sc)
    }
}

/// Q3_K sub-block `g2`'s tables of every pair from their `dl` halves (see [`q3k`]): the
/// decoder's `dl · q`, rounded to bf16 where the matrix rounds, two rows' values at once (the
/// words' even and odd halves are the two groups' tables).
///
/// # Safety
/// AVX-512 F, BW and BF16 must be present.
#[inline(always)]
unsafe fn q3k_sub_tables<const ROUND: bool>(
    halves: &[[__m512; 2]; PAIRS],
    g2: usize,
    levels: __m512,
) -> [[__m512; 2]; PAIRS] {
    // SAFETY (whole body): the features are present.
    unsafe {
        let mut t = [[_mm512_setzero_ps(); 2]; PAIRS];
        let sels = &Q3K_GROUP_LANES[usize::from(ROUND)][g2 % 4];
        let sels = [load_i32(&sels[0]), load_i32(&sels[1])];
        for (t, h) in t.iter_mut().zip(halves) {
            let mut v = [_mm512_setzero_ps(); 2];
            for (v, sel) in v.iter_mut().zip(sels) {
                *v = _mm512_mul_ps(_mm512_permutexvar_ps(sel, h[g2 / 4]), levels);
            }
            *t = if ROUND { bf16_even_odd(v[0], v[1]) } else { v };
        }
        t
    }
}

/// Q3_K chunk (one block a row): each pair's tables (per sub-block of 32 columns, `dl ·
/// (code − 4)` for the eight codes of both rows of its two groups: the two f32 sources of one
/// 32-entry permute, built just before the sub-block's steps by [`q3k_sub_tables`], so they
/// stay in registers), its code bytes (`qs` and `hmask`) transposed, then per sub-block the
/// codes with the row bit 3 and the group bit 4, and per two steps a shift, one permute and
/// the widening of its f32 values, the very f64 values a widened table holds. With `HI`
/// (`ROUND`, `R ≥ 1`, every `d` finite, the inputs scaled by [`input_scale`]) the tables are
/// high words ([`hi_words`]), the code bytes laid out as [`HI_STEP_TRANSPOSE`] does, a step is
/// one shift and one zero-masked permute with no widening, and the lanes run in the inputs'
/// units (2^−448) for the chunk.
///
/// # Safety
/// AVX-512 F, BW, VL, VBMI, BF16 and F16C must be present; the operands as [`run`] describes
/// them (for `R = 0`, `lanes` is a packed panel of `kcl / 4` steps and `x` is not read).
#[inline(always)]
unsafe fn q3k_steps<const R: usize, const ROUND: bool, const HI: bool>(
    rows: &[&[u8]; NR],
    (_kcl, ahead): (usize, &[u8]),
    x: *const f64,
    x_stride: usize,
    acc: &mut [[__m512d; PAIRS]; R],
    lanes: *mut f64,
) {
    // SAFETY (whole body): every block is 110 bytes (checked by `chunk`): hmask at 0..32, qs
    // at 32..96; `x` holds R rows of 256 values `x_stride` apart and `lanes` R·PANEL_STEP
    // values (or, with R = 0, 64 steps of a packed panel).
    unsafe {
        // The whole share first: split over the sub-blocks it made Q3_K's steps 1.3x as slow
        // (spilled registers, it seems), at the start it overlaps the code and scale setup.
        prefetch_part(ahead, 0, 1);
        let levels = q3k_levels::<ROUND>();
        let levels = _mm512_loadu_ps(levels.as_ptr());
        let transpose = load_u8(if HI {
            &HI_STEP_TRANSPOSE
        } else {
            &STEP_PAIR_TRANSPOSE
        });
        let load_pair =
            |z: usize, at: usize| transposed_pair(rows[2 * z], rows[2 * z + 1], at, transpose);
        // Each pair's per-group `dl` by halves of the block ([`block_halves`]), in place (see
        // `q2k`): a sub-block's tables are built from them just before its steps and stay in
        // registers.
        let mut halves = MaybeUninit::<[[__m512; 2]; PAIRS]>::uninit();
        for z in 0..PAIRS {
            let (dla, dlb) = (q3k_scales(rows[2 * z]), q3k_scales(rows[2 * z + 1]));
            (*halves.as_mut_ptr())[z] = block_halves(dla, dlb);
        }
        // Every half was written above.
        let halves = halves.assume_init_ref();
        let hmask: [__m512i; PAIRS] = std::array::from_fn(|z| load_pair(z, 0));
        let three = _mm512_set1_epi8(3);
        let four = _mm512_set1_epi8(4);
        // Bit 3 of every code byte of the pair's second row (dword lanes `i % 8 ≥ 4`, or with
        // `HI` qword lanes 4..8), bit 4 of bytes 2 and 3 of every dword (steps 4..8 of a
        // sub-block: its second group).
        let row_bit = if HI {
            _mm512_maskz_set1_epi64(0xf0, 0x0808_0808_0808_0808)
        } else {
            _mm512_maskz_set1_epi32(0xf0f0, 0x0808_0808)
        };
        let second = _mm512_or_si512(row_bit, _mm512_set1_epi32(0x1010_0000));
        // With `HI`, a sub-block's codes of every pair, a row each, for the steps' loads
        // ([`hi_split`]; zeroed first: a load reaches the seal).
        let mut rows_hi = StepCodes::<PAIRS>::zeroed();
        // Steps `2k`, `2k + 1` of sub-block `u0 / 8`: code byte `k` of each dword.
        macro_rules! two_steps {
            ($cs:ident, $t:ident, $u0:expr, $k:literal) => {{
                let u = $u0 + 2 * $k;
                let xv = [x_step::<R>(x, x_stride, u), x_step::<R>(x, x_stride, u + 1)];
                for z in 0..PAIRS {
                    let [ta, tb] = $t[z];
                    let [w0, w1] = if HI {
                        // Steps 0..4 of the sub-block are its first group's, 4..8 its
                        // second's: each group's sixteen entries are one single-source table.
                        let t = if $k < 2 { ta } else { tb };
                        // Step `2k`'s code in the high dwords, `2k + 1`'s in the low ones.
                        let idx = step_pair_codes(&rows_hi, z, $k);
                        let [w1, w0] = hi_split(_mm512_permutexvar_ps(idx, t));
                        [w0, w1]
                    } else {
                        let idx = _mm512_srli_epi32::<{ 8 * $k }>($cs[z]);
                        widen_via_memory(_mm512_permutex2var_ps(ta, idx, tb))
                    };
                    sink::<R>((u, z, w0), &xv[0], acc, lanes);
                    sink::<R>((u + 1, z, w1), &xv[1], acc, lanes);
                }
            }};
        }
        // Sub-block `s` of half `h`: the low bits (`2s`, `2s + 1` of `qs`) and the high bit
        // (`4h + s` of `hmask`, brought to bit 2 by `hm`) of each code byte, the row and
        // group bits.
        macro_rules! sub_block {
            ($qs:ident, $h:literal, $s:literal, $by:literal, $hm:expr) => {{
                let cs: [__m512i; PAIRS] = std::array::from_fn(|z| {
                    let low = _mm512_srli_epi64::<$by>($qs[z]);
                    let high = $hm(hmask[z]);
                    let high = _mm512_ternarylogic_epi64::<0xEA>(high, four, second);
                    _mm512_ternarylogic_epi64::<0xEA>(low, three, high)
                });
                if HI {
                    for (z, c) in cs.iter().enumerate() {
                        rows_hi.put(z, *c);
                    }
                }
                let mut t = q3k_sub_tables::<ROUND>(halves, 4 * $h + $s, levels);
                if HI {
                    for t in t.iter_mut() {
                        *t = [
                            hi_words(_mm512_castps_si512(t[0])),
                            hi_words(_mm512_castps_si512(t[1])),
                        ];
                    }
                }
                let u0 = 32 * $h + 8 * $s;
                two_steps!(cs, t, u0, 0);
                two_steps!(cs, t, u0, 1);
                two_steps!(cs, t, u0, 2);
                two_steps!(cs, t, u0, 3);
            }};
        }
        let qs0: [__m512i; PAIRS] = std::array::from_fn(|z| load_pair(z, 32));
        sub_block!(qs0, 0, 0, 0, |m| _mm512_slli_epi64::<2>(m));
        sub_block!(qs0, 0, 1, 2, |m| _mm512_slli_epi64::<1>(m));
        sub_block!(qs0, 0, 2, 4, |m| m);
        sub_block!(qs0, 0, 3, 6, |m| _mm512_srli_epi64::<1>(m));
        let qs1: [__m512i; PAIRS] = std::array::from_fn(|z| load_pair(z, 64));
        sub_block!(qs1, 1, 0, 0, |m| _mm512_srli_epi64::<2>(m));
        sub_block!(qs1, 1, 1, 2, |m| _mm512_srli_epi64::<3>(m));
        sub_block!(qs1, 1, 2, 4, |m| _mm512_srli_epi64::<4>(m));
        sub_block!(qs1, 1, 3, 6, |m| _mm512_srli_epi64::<5>(m));
    }
}

/// Whether a Q3_K block's `d` is finite: then every value of the block is a finite f32, an
/// exact multiple of 2^−24 below 2^23.
#[inline(always)]
fn q3k_finite(b: &[u8]) -> bool {
    f16_finite(b, 108)
}

high_words_or_widened_kernel!(
    /// Q3_K chunk: the fused kernels of bf16-rounded matrices keep high words (`q3k_steps` with
    /// `HI`) where every row's `d` is finite (their inputs scaled by [`input_scale`]; `dl·(q −
    /// 4)` is exact in f32, `dl = d·sc` having at most 17 significant bits and `q − 4` three,
    /// and at least 2^−24 where not zero), else widen with the lanes in the inputs' units for
    /// the chunk; the packed panel and unrounded matrices widen.
    ///
    /// # Safety
    /// AVX-512 F, BW, VL, VBMI, BF16 and F16C must be present; the operands as [`run`]
    /// describes them (for `R = 0`, `lanes` is a packed panel of `kcl / 4` steps and `x` is not
    /// read).
    q3k,
    "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,f16c",
    (DirectKind::Q3K, q3k_finite),
    (q3k_steps::<R, true, true>, q3k_steps::<R, ROUND, false>)
);

hi_panel_kernel!(
    /// A whole Q3_K panel on the high-word route ([`panel`]).
    ///
    /// # Safety
    /// As [`q3k`]'s high-word route, for every chunk of the panel.
    q3k_panel,
    "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,f16c",
    q3k_steps::<R, true, true>
);

/// IQ2_XXS: a grid entry's eight 2-bit level indices as bytes: `IQ2_GRID_BYTES[0]` the low
/// byte of every entry (values 0..4, two bits each), `[1]` the high byte (values 4..8).
static IQ2_GRID_BYTES: [[u8; 256]; 2] = {
    let mut t = [[0u8; 256]; 2];
    let mut i = 0;
    while i < 256 {
        let [lo, hi] = iq2xxs::GRID_2BIT[i].to_le_bytes();
        t[0][i] = lo;
        t[1][i] = hi;
        i += 1;
    }
    t
};

/// IQ2_XXS: a 7-bit sign code's eight sign bits (the eighth makes the count even, as the
/// decoder's `sign_bits`).
static IQ2_SIGNS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut c = 0;
    while c < 128 {
        t[c] = if (c as u32).count_ones() % 2 == 1 {
            c as u8 | 0x80
        } else {
            c as u8
        };
        c += 1;
    }
    t
};

/// IQ2_XXS: per group (one 8-byte qword: four grid indices, then `aux`), the bytes
/// `[i0, i0, i1, i1, i2, i2, i3, i3]` (`vpshufb` within each 128-bit lane).
static IQ2_INDEX_PAIRS: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        t[i] = ((i % 16) / 8 * 8 + (i % 8) / 2) as u8;
        i += 1;
    }
    t
};

/// IQ2_XXS: per group qword, byte `t` takes `aux >> 7·(t / 2)` (`vpmultishiftqb` bit offsets;
/// `aux` is the qword's high half).
static IQ2_SIGN_SHIFTS: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        t[i] = (32 + 7 * ((i % 8) / 2)) as u8;
        i += 1;
    }
    t
};

/// The magnitudes `8, 25, 43` of the three grid levels (entry 3 never occurs) for the codes
/// `0..4` (positive) and `4..8` (negative) of a pair's table vector, as f32, hidden from the
/// optimiser (as [`q2k_levels`]): lane `i` code `i % 8` (one row in each half), or with
/// `ROUND` code `i / 2` (the rows interleaved, lane `2c + r` row `r`'s code `c`).
#[inline(always)]
fn iq2_levels<const ROUND: bool>() -> [f32; 16] {
    std::hint::black_box(std::array::from_fn(|i| {
        let code = if ROUND { i / 2 } else { i };
        iq2xxs::GRID_LEVELS.get(code % 4).copied().unwrap_or(0.0)
    }))
}

/// One IQ2_XXS row block's level and sign bytes: `[e, f]` with, in the qword of group `g`,
/// byte `t` of `e` the grid byte of step `t` (the low or high byte of the entry of its eight
/// values `t / 2`: the level index of column `4t + j` at bits `2j`), and byte `t` of `f` the
/// signs of the same step at bits `0..4` (the sign byte of its eight values, shifted right by
/// 4 for the second four).
///
/// # Safety
/// AVX-512 F, BW and VBMI must be present; `b` must be a whole IQ2_XXS block.
#[inline(always)]
unsafe fn iq2_codes(b: &[u8]) -> [__m512i; 2] {
    debug_assert_eq!(b.len(), iq2xxs::BLOCK_BYTES);
    // SAFETY (whole body): a block is 66 bytes: the eight groups at 2..66; the statics hold 64,
    // 128 or 256 bytes.
    unsafe {
        let groups = _mm512_loadu_si512(b.as_ptr().add(2).cast());
        let at = |t: &[u8], i: usize| _mm512_loadu_si512(t.as_ptr().add(64 * i).cast());
        let idx = _mm512_shuffle_epi8(groups, load_u8(&IQ2_INDEX_PAIRS));
        // Entries 128..256 where bit 7 of the index is set.
        let upper = _mm512_movepi8_mask(idx);
        let byte = |t: &[u8; 256]| {
            let low = _mm512_permutex2var_epi8(at(t, 0), idx, at(t, 1));
            let high = _mm512_permutex2var_epi8(at(t, 2), idx, at(t, 3));
            _mm512_mask_blend_epi8(upper, low, high)
        };
        let odd = 0xaaaa_aaaa_aaaa_aaaa;
        let e = _mm512_mask_blend_epi8(odd, byte(&IQ2_GRID_BYTES[0]), byte(&IQ2_GRID_BYTES[1]));
        let codes = _mm512_multishift_epi64_epi8(load_u8(&IQ2_SIGN_SHIFTS), groups);
        let signs = _mm512_permutex2var_epi8(at(&IQ2_SIGNS, 0), codes, at(&IQ2_SIGNS, 1));
        let f = _mm512_mask_blend_epi8(odd, signs, _mm512_srli_epi16::<4>(signs));
        [e, f]
    }
}

/// One IQ2_XXS row block's `d` (F16C) and its eight groups' `db = d · (0.5 + ls) · 0.25`
/// in f32, as the decoder computes them, for two rows: lanes `0..8` the first's groups,
/// `8..16` the second's.
///
/// # Safety
/// AVX-512 F and DQ and F16C must be present; `a` and `b` must be whole IQ2_XXS blocks.
#[inline(always)]
unsafe fn iq2_scales(a: &[u8], b: &[u8]) -> __m512 {
    // SAFETY (whole body): the groups are bytes 2..66 of each block, `d` bytes 0..2.
    unsafe {
        let ls = |r: &[u8]| {
            let groups = _mm512_loadu_si512(r.as_ptr().add(2).cast());
            _mm512_cvtepu64_ps(_mm512_srli_epi64::<60>(groups))
        };
        let ls = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(ls(a)), ls(b));
        let d = |r: &[u8]| {
            let bits = u16_at(r, 0);
            _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
        };
        let d = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(d(a)), d(b));
        _mm512_mul_ps(
            _mm512_mul_ps(d, _mm512_add_ps(_mm512_set1_ps(0.5), ls)),
            _mm512_set1_ps(0.25),
        )
    }
}

/// Each pair's scales ([`iq2_scales`]) and both rows' level and sign bytes ([`iq2_codes`]),
/// written in place (not into zeroed arrays: see `q2k`).
///
/// # Safety
/// AVX-512 F, BW, DQ and VBMI and F16C must be present; every row a whole IQ2_XXS block.
#[inline(always)]
unsafe fn iq2_pairs(
    rows: &[&[u8]; NR],
    scales: &mut MaybeUninit<[__m512; PAIRS]>,
    codes: &mut MaybeUninit<[[[__m512i; 2]; 2]; PAIRS]>,
) {
    let (sp, cp) = (scales.as_mut_ptr(), codes.as_mut_ptr());
    // SAFETY: the caller's features and blocks; every element of both arrays is written.
    unsafe {
        for z in 0..PAIRS {
            let (a, b) = (rows[2 * z], rows[2 * z + 1]);
            (*sp)[z] = iq2_scales(a, b);
            (*cp)[z] = [iq2_codes(a), iq2_codes(b)];
        }
    }
}

/// Every pair's lane code bytes of group `g` from [`iq2_pairs`]'s `codes`: lane `l`'s level
/// bits `2j..2j + 2` of the grid byte, sign bit `j` of the nibble (`j = l mod 4`), the row bit
/// 3 (the pair's second row takes entries 8..16). A loop, not a closure (see `x_step`).
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn iq2_lane_codes(codes: &[[[__m512i; 2]; 2]; PAIRS], g: usize) -> [__m512i; PAIRS] {
    let level_shift = _mm512_set_epi64(6, 4, 2, 0, 6, 4, 2, 0);
    // Bit `j` of a lane's sign nibble (its column `4t + j`) to bit 2.
    let sign_rotate = _mm512_set_epi64(63, 0, 1, 2, 63, 0, 1, 2);
    let three = _mm512_set1_epi8(3);
    let seven = _mm512_set1_epi8(7);
    let second = _mm512_mask_set1_epi64(_mm512_setzero_si512(), 0xf0, 0x0808_0808_0808_0808);
    // Lanes 0..4 take the first row's qword `g`, 4..8 the second's.
    let pick = _mm512_mask_set1_epi64(_mm512_set1_epi64(g as i64), 0xf0, 8 + g as i64);
    let mut cs = [_mm512_setzero_si512(); PAIRS];
    for (z, c) in cs.iter_mut().enumerate() {
        let [[ea, fa], [eb, fb]] = codes[z];
        let e = _mm512_srlv_epi64(_mm512_permutex2var_epi64(ea, pick, eb), level_shift);
        let f = _mm512_rolv_epi64(_mm512_permutex2var_epi64(fa, pick, fb), sign_rotate);
        let l = _mm512_ternarylogic_epi64::<0xE4>(e, f, three);
        *c = _mm512_ternarylogic_epi64::<0xEA>(l, seven, second);
    }
    cs
}

/// IQ2_XXS chunk (one block a row): each pair's scales and its level and sign bytes
/// ([`iq2_codes`]), then per group every pair's table (`±db · level` for the eight codes
/// `level | sign << 2` of both rows, one permute's two tables, rounded to bf16 where the
/// matrix rounds; built just before the group's steps, so it stays in registers), the lanes'
/// code bytes (each lane's own two bits of level and sign bit, the row bit 3) and per
/// step a shift and one permute.
///
/// # Safety
/// AVX-512 F, BW, DQ, VBMI, BF16 and F16C must be present; the operands as [`run`] describes
/// them (for `R = 0`, `lanes` is a packed panel of `kcl / 4` steps and `x` is not read).
#[inline(always)]
unsafe fn iq2_widened<const R: usize, const ROUND: bool>(
    rows: &[&[u8]; NR],
    (_kcl, ahead): (usize, &[u8]),
    x: *const f64,
    x_stride: usize,
    acc: &mut [[__m512d; PAIRS]; R],
    lanes: *mut f64,
) {
    // SAFETY (whole body): every block is 66 bytes (checked by `run`); `x` holds R rows of
    // 256 values `x_stride` apart and `lanes` R·PANEL_STEP values (or, with R = 0, 64 steps
    // of a packed panel).
    unsafe {
        let levels = iq2_levels::<ROUND>();
        let levels = _mm512_loadu_ps(levels.as_ptr());
        // The lanes of the negative codes `4..8` of each row.
        let negative = if ROUND { 0xff00 } else { 0xf0f0 };
        // Lane `i` of a pair's table vector takes row `i % 2`'s scale (`ROUND`), or row
        // `i / 8`'s.
        let row_lanes = if ROUND { 0xaaaa } else { 0xff00 };
        // The tables are built group by group, just before the group's steps, in registers.
        let (mut scales, mut codes) = (MaybeUninit::uninit(), MaybeUninit::uninit());
        iq2_pairs(rows, &mut scales, &mut codes);
        // Every scale and code register was written.
        let (scales, codes) = (scales.assume_init_ref(), codes.assume_init_ref());
        let mut tabs = [[_mm512_setzero_pd(); 2]; PAIRS];
        macro_rules! step {
            ($cs:ident, $u:expr, $sh:literal) => {
                pair_table_step::<R, $sh>(($u, &$cs), &tabs, (x, x_stride), acc, lanes)
            };
        }
        for g in 0..8 {
            prefetch_part(ahead, g, 8);
            // Group `g`'s tables of every pair, two pairs at a time: the decoder's
            // `db · level`, negated for a set sign, rounded to bf16 where the matrix rounds
            // (both pairs at once: with the rows interleaved, the words' even and odd halves
            // are the rows' tables, no word permute).
            let sel = _mm512_mask_set1_epi32(_mm512_set1_epi32(g as i32), row_lanes, 8 + g as i32);
            for zz in 0..PAIRS / 2 {
                let mut v = [_mm512_setzero_ps(); 2];
                for (k, v) in v.iter_mut().enumerate() {
                    let mag = _mm512_mul_ps(_mm512_permutexvar_ps(sel, scales[2 * zz + k]), levels);
                    *v = iq2_negate(negative, mag);
                }
                [tabs[2 * zz], tabs[2 * zz + 1]] = two_pairs_tables::<ROUND>(v);
            }
            let cs = iq2_lane_codes(codes, g);
            eight_steps!(step, cs, 8 * g);
        }
    }
}

high_words_or_widened_kernel!(
    /// IQ2_XXS chunk: the fused kernels of bf16-rounded matrices through [`iq2_hi`] where every
    /// row's `d` is finite (their inputs scaled by [`input_scale`]), else [`iq2_widened`] with
    /// the lanes in the inputs' units for the chunk; the packed panel and unrounded matrices
    /// through [`iq2_widened`].
    ///
    /// # Safety
    /// AVX-512 F, BW, DQ, VBMI, BF16 and F16C must be present; the operands as [`run`]
    /// describes them (for `R = 0`, `lanes` is a packed panel of `kcl / 4` steps and `x` is not
    /// read).
    iq2,
    "avx512f,avx512bw,avx512dq,avx512vbmi,avx512bf16,f16c",
    (DirectKind::Iq2Xxs, iq2_finite),
    (iq2_hi::<R>, iq2_widened::<R, ROUND>)
);

hi_panel_kernel!(
    /// A whole IQ2_XXS panel on the high-word route ([`panel`]).
    ///
    /// # Safety
    /// As [`iq2`]'s high-word route, for every chunk of the panel.
    iq2_panel,
    "avx512f,avx512bw,avx512dq,avx512vbmi,avx512bf16,f16c",
    iq2_hi::<R>
);

/// Whether an IQ2_XXS block's `d` is finite (its exponent field not all ones): then every
/// value of the block is zero or a normal f32 within 2^−24..2^24 (`d` at least 2^−24 where
/// not zero, `(0.5 + ls) · 0.25` at least 1/8, a level at least 8; at most 65504 · 3.875 · 43).
#[inline(always)]
fn iq2_finite(b: &[u8]) -> bool {
    f16_finite(b, 0)
}

/// IQ2_XXS chunk of a bf16-rounded matrix with finite scales, for `R ≥ 1` inputs scaled by
/// [`input_scale`]: as [`iq2_widened`], but each pair's table is its sixteen values (both
/// rows' eight codes) as high words ([`hi_words`]), so a step's weights are one single-source
/// permute ([`hi_lookup16`]) with no widening, and the lanes run in units of 2^−448 for the
/// chunk.
///
/// # Safety
/// As [`iq2`], with `R ≥ 1` and every row's `d` finite ([`iq2_finite`]).
#[inline(always)]
unsafe fn iq2_hi<const R: usize>(
    rows: &[&[u8]; NR],
    (_kcl, ahead): (usize, &[u8]),
    x: *const f64,
    x_stride: usize,
    acc: &mut [[__m512d; PAIRS]; R],
    lanes: *mut f64,
) {
    // SAFETY (whole body): as [`iq2_widened`]'s.
    unsafe {
        let levels = iq2_levels::<true>();
        let levels = _mm512_loadu_ps(levels.as_ptr());
        let (mut scales, mut codes) = (MaybeUninit::uninit(), MaybeUninit::uninit());
        iq2_pairs(rows, &mut scales, &mut codes);
        // Every scale and code register was written.
        let (scales, codes) = (scales.assume_init_ref(), codes.assume_init_ref());
        let mut tabs = [_mm512_setzero_ps(); PAIRS];
        for g in 0..8 {
            prefetch_part(ahead, g, 8);
            // Two pairs' tables at a time, the rows interleaved (lane `2c + r`, as
            // `iq2_widened` lays them out to round): rounded together, the words' low halves
            // are the first rows' values and the high halves the second rows', as high words;
            // then each pair's sixteen (the first row's codes, then the second's) by one
            // 128-bit shuffle.
            let sel = _mm512_mask_set1_epi32(_mm512_set1_epi32(g as i32), 0xaaaa, 8 + g as i32);
            for zz in 0..PAIRS / 2 {
                let mut v = [_mm512_setzero_ps(); 2];
                for (k, v) in v.iter_mut().enumerate() {
                    let mag = _mm512_mul_ps(_mm512_permutexvar_ps(sel, scales[2 * zz + k]), levels);
                    *v = iq2_negate(0xff00, mag);
                }
                [tabs[2 * zz], tabs[2 * zz + 1]] = hi_tables_of_two_pairs(v);
            }
            let cs = iq2_lane_codes(codes, g);
            // Step `t`'s code byte (byte `t` of each qword) to bits 32..40.
            macro_rules! step {
                ($t:literal) => {{
                    let u = 8 * g + $t;
                    let xv = x_step::<R>(x, x_stride, u);
                    for z in 0..PAIRS {
                        let idx = to_high_dword!(8 * $t, cs[z]);
                        sink::<R>((u, z, hi_lookup16(idx, tabs[z])), &xv, acc, lanes);
                    }
                }};
            }
            step!(0);
            step!(1);
            step!(2);
            step!(3);
            step!(4);
            step!(5);
            step!(6);
            step!(7);
        }
    }
}

/// `v` with the lanes of `mask` negated as the decoder negates (`· −1` as a sign flip).
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn iq2_negate(mask: __mmask16, v: __m512) -> __m512 {
    let bits = _mm512_castps_si512(v);
    let sign = _mm512_set1_epi32(i32::MIN);
    _mm512_castsi512_ps(_mm512_mask_xor_epi32(bits, mask, bits, sign))
}

/// [`words_to_f32`]'s indices for [`round_pair`]: lane `i` of `r` is `v_r`'s value `i`
/// (word `16r + i`).
static BF16_WORDS: [[i16; 32]; 2] = {
    let mut t = [[32i16; 32]; 2];
    let mut r = 0;
    while r < 2 {
        let mut i = 0;
        while i < 16 {
            t[r][2 * i + 1] = (16 * r + i) as i16;
            i += 1;
        }
        r += 1;
    }
    t
};

/// The codes' integers `0..16` as f32, hidden from the optimiser (as [`q2k_levels`]).
#[inline(always)]
fn q4k_levels() -> [f32; 16] {
    std::hint::black_box(std::array::from_fn(|i| i as f32))
}

/// Two rows' sixteen-entry tables of one group (`d1·q − m1` in f32, each row's own `d1`,
/// `m1`), rounded to bf16 with `ROUND` ([`round_pair`]), still as f32: `[a 0..16, b 0..16]`,
/// the two sources of one 32-entry permute.
///
/// # Safety
/// AVX-512 F, BW and BF16 must be present.
#[inline(always)]
unsafe fn q4k_tables<const ROUND: bool>(
    levels: __m512,
    (d1a, m1a): (f32, f32),
    (d1b, m1b): (f32, f32),
) -> [__m512; 2] {
    let va = _mm512_sub_ps(
        _mm512_mul_ps(_mm512_set1_ps(d1a), levels),
        _mm512_set1_ps(m1a),
    );
    let vb = _mm512_sub_ps(
        _mm512_mul_ps(_mm512_set1_ps(d1b), levels),
        _mm512_set1_ps(m1b),
    );
    // SAFETY: the features are present.
    unsafe { round_pair::<ROUND>(va, vb) }
}

/// Q3_K and Q4_K: a pair's 32 code bytes of each row (the first row's in bytes 0..32)
/// transposed so that byte `k` of dword lane `i` is the code byte of step `2k + i / 8` in the
/// pair's lane `l = i % 8`: column `4t + l % 4` of row `l / 4`. A step pair's indices are
/// then a dword shift (and for Q4_K a mask) away, and its sixteen values one permute.
static STEP_PAIR_TRANSPOSE: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 16 {
        let l = i % 8;
        let mut k = 0;
        while k < 4 {
            let step = 2 * k + i / 8;
            t[4 * i + k] = (32 * (l / 4) + 4 * step + l % 4) as u8;
            k += 1;
        }
        i += 1;
    }
    t
};

/// Q4_K chunk (one block a row): per 32 columns (a group: the low or high nibbles of 32
/// bytes), each pair's two f32 tables (both rows' sixteen values), then the steps two at a
/// time: a shift and a mask bring both steps' nibbles and the row bit 4 into dword lanes, one
/// 32-entry permute gives both rows' weights of both steps in f32, and widening them gives the
/// very f64 values a widened table holds.
///
/// # Safety
/// AVX-512 F, BW, VL, VBMI, BF16 and F16C must be present; the operands as [`run`] describes
/// them (for `R = 0`, `lanes` is a packed panel of `kcl / 4` steps and `x` is not read).
#[inline(always)]
unsafe fn q4k_widened<const R: usize, const ROUND: bool>(
    rows: &[&[u8]; NR],
    (_kcl, ahead): (usize, &[u8]),
    x: *const f64,
    x_stride: usize,
    acc: &mut [[__m512d; PAIRS]; R],
    lanes: *mut f64,
) {
    // SAFETY (whole body): every block is 144 bytes (checked by `chunk`): qs at 16..144; `x`
    // holds R rows of 256 values `x_stride` apart and `lanes` R·PANEL_STEP values (or, with
    // R = 0, 64 steps of a packed panel).
    unsafe {
        let levels = q4k_levels();
        let levels = _mm512_loadu_ps(levels.as_ptr());
        let transpose = load_u8(&STEP_PAIR_TRANSPOSE);
        let (mut dp, mut mp) = ([[0f32; 16]; PAIRS], [[0f32; 16]; PAIRS]);
        q4k_scale_arrays(rows, &mut dp, &mut mp);
        let nibbles = _mm512_set1_epi8(0x0f);
        // Bit 4 of every code byte of the dword lanes of the pair's second row (`i % 8 ≥ 4`):
        // its table.
        let second = _mm512_maskz_set1_epi32(0xf0f0, 0x1010_1010);
        for c in 0..4 {
            let mut codes = [_mm512_setzero_si512(); PAIRS];
            for (z, cz) in codes.iter_mut().enumerate() {
                *cz = transposed_pair(rows[2 * z], rows[2 * z + 1], 16 + 32 * c, transpose);
            }
            for h in 0..2 {
                let g = 2 * c + h;
                prefetch_part(ahead, g, 8);
                let mut tabs = [[_mm512_setzero_ps(); 2]; PAIRS];
                for (z, t) in tabs.iter_mut().enumerate() {
                    let (d, m) = (&dp[z], &mp[z]);
                    *t = q4k_tables::<ROUND>(
                        levels,
                        (d[2 * g], m[2 * g]),
                        (d[2 * g + 1], m[2 * g + 1]),
                    );
                }
                // The group's nibble of every code byte with the row bit 4, once: a step
                // pair's indices are then byte `k` of each dword, brought down by a shift
                // (the permute reads bits 0..5 of a dword; the bytes above are later steps').
                let mut cs = [_mm512_setzero_si512(); PAIRS];
                for (cs, cz) in cs.iter_mut().zip(&codes) {
                    let nib = if h == 0 {
                        *cz
                    } else {
                        _mm512_srli_epi32::<4>(*cz)
                    };
                    *cs = _mm512_ternarylogic_epi32::<0xEA>(nib, nibbles, second);
                }
                // Steps `2k`, `2k + 1` of the group: their code bytes at byte `k` of each
                // dword, brought down by `$sh` = `8k`.
                macro_rules! two_steps {
                    ($k:literal, $sh:literal) => {{
                        let u = 16 * c + 8 * h + 2 * $k;
                        let xv = [x_step::<R>(x, x_stride, u), x_step::<R>(x, x_stride, u + 1)];
                        for z in 0..PAIRS {
                            let idx = _mm512_srli_epi32::<$sh>(cs[z]);
                            let [ta, tb] = tabs[z];
                            let [w0, w1] = widen_via_memory(_mm512_permutex2var_ps(ta, idx, tb));
                            sink::<R>((u, z, w0), &xv[0], acc, lanes);
                            sink::<R>((u + 1, z, w1), &xv[1], acc, lanes);
                        }
                    }};
                }
                two_steps!(0, 0);
                two_steps!(1, 8);
                two_steps!(2, 16);
                two_steps!(3, 24);
            }
        }
    }
}

/// The power of two (2^448) by which the fused kernels whose tables hold weights in
/// [`hi_words`] form take their inputs: see [`input_scale`].
const HI_INPUT_LOG2: i32 = 448;

/// What the fused kernel of `kind` (for `mr ≥ 1` input rows, [`chunk`]) takes its inputs
/// multiplied by: 2^448 for Q2_K, Q3_K, Q4_K, IQ2_XXS and Q8_0 matrices that round to bf16, whose tables hold each
/// weight `w` as the f64 `w · 2^−896` ([`hi_words`]), so that a product is `x·w · 2^−448` and
/// the lanes run in units of 2^−448 while the block is multiplied; 1 (the inputs as they are)
/// for the others.
///
/// Scaling by a power of two commutes with every rounding of a normal f64 result, and nothing
/// here leaves the normal range: an input is an f32 (at most 2^128 in magnitude, at least
/// 2^−149 where not zero), so a scaled one lies within 2^299..2^576; a weight (a bf16 of such a
/// block, rounded from an f32 that is zero or within 2^−24..2^27: an exact multiple of 2^−24
/// for the K-quants, see [`round_pair`], and for IQ2_XXS see [`iq2_finite`]) within
/// 2^−24..2^27, its table entry within 2^−920..2^−869; every product and
/// every sum of them is a multiple of 2^−180 (an f32 input's unit times a bf16 weight's, at
/// least 2^−24·2^−7), so a lane that is not zero is at least 2^−180 · 2^−448 = 2^−628, and at
/// most 2^128 · 2^27 · 2^20 (k) · 2^−448, far inside f64's normal range either way; zeros keep
/// their signs, and infinities and NaNs pass through multiplications by a power of two
/// unchanged. The bits are therefore those of the unscaled sums.
pub(super) fn input_scale(kind: DirectKind, round_bf16: bool) -> f64 {
    if round_bf16
        && matches!(
            kind,
            DirectKind::Q2K
                | DirectKind::Q3K
                | DirectKind::Q4K
                | DirectKind::Iq2Xxs
                | DirectKind::Q8_0
        )
    {
        2f64.powi(HI_INPUT_LOG2)
    } else {
        1.0
    }
}

/// A high-word kernel's accumulators into the inputs' units (2^−448: `into`) for its chunk,
/// or back.
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn hi_units<const R: usize>(acc: &mut [[__m512d; PAIRS]; R], into: bool) {
    let f = 2f64.powi(if into { -HI_INPUT_LOG2 } else { HI_INPUT_LOG2 });
    scale_lanes::<R>(acc, &[_mm512_set1_pd(f); PAIRS]);
}

/// Multiplies the `R·PANEL_STEP` lanes at `lanes` by `f` in place.
///
/// # Safety
/// AVX-512F must be present and `lanes` must hold `R·PANEL_STEP` values.
#[inline(always)]
unsafe fn scale_lanes_in_memory<const R: usize>(lanes: *mut f64, f: f64) {
    // SAFETY: the caller's bound.
    unsafe {
        let mut acc = load_lanes::<R>(lanes);
        scale_lanes::<R>(&mut acc, &[_mm512_set1_pd(f); PAIRS]);
        store_lanes(&acc, lanes);
    }
}

/// One zero-masked permute instruction `$insn {r}{k}{z}, {a}, {b}` on registers, `r` starting
/// as `$r` (the index or first table the instruction overwrites), or with `out` only written
/// (an instruction such as `vpermps` whose destination is no operand: zero-masked, its old
/// value is not read, so the register allocator may give it an operand's register, where an
/// input-output `r` made it copy the index into a register of its own before every step):
/// written as the instruction itself, where the intrinsics compiled to an unmasked permute
/// and an AND (one more vector instruction a step, and spilled registers). The caller is in an
/// unsafe block that vouches for the instruction's features.
macro_rules! zero_masked_permute {
    // The instruction itself, `$r` its destination operand given as `$dir` (`inout` or
    // `lateout`).
    (@asm $insn:literal, $dir:ident $r:ident, ($a:expr, $b:expr), $k:expr) => {
        // SAFETY (the caller's): a register-only instruction; it reads and writes no memory and
        // leaves the flags alone; it reads its operands before it writes `r`.
        std::arch::asm!(
            concat!($insn, " {r}{{{k}}}{{z}}, {a}, {b}"),
            r = $dir(zmm_reg) $r,
            a = in(zmm_reg) $a,
            b = in(zmm_reg) $b,
            k = in(kreg) $k,
            options(pure, nomem, nostack, preserves_flags),
        )
    };
    (out $insn:literal, ($a:expr, $b:expr), $k:expr) => {{
        let r: __m512i;
        zero_masked_permute!(@asm $insn, lateout r, ($a, $b), $k);
        _mm512_castsi512_pd(r)
    }};
    ($insn:literal, $r:expr, ($a:expr, $b:expr), $k:expr) => {{
        let mut r: __m512i = $r;
        zero_masked_permute!(@asm $insn, inout r, ($a, $b), $k);
        _mm512_castsi512_pd(r)
    }};
}

/// Tables of f64 weights held by their high 32 bits (the low 32 are zero): sixteen bf16
/// values (as the f32 bits of `F`, whose low 16 bits are zero), each as the high word of the
/// f64 `w · 2^−896`: the sign at bit 31, the bf16's own 8-bit exponent field as the low 8
/// bits of the f64's 11 (bits 20..28; bits 28..31 zero) and its 7 mantissa bits at 13..20,
/// that is `F` shifted right by 3 with the sign kept (an arithmetic shift, then a mask).
/// Exact for zeros (signed) and every normal value; a bf16 subnormal, infinity or NaN would
/// come out wrong, and the callers make sure none occurs (`input_scale` says why a product of
/// such a weight with a scaled input keeps the bits).
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn hi_words(f: __m512i) -> __m512 {
    _mm512_castsi512_ps(_mm512_and_si512(
        _mm512_srai_epi32::<3>(f),
        _mm512_set1_epi32(0x8fff_e000_u32 as i32),
    ))
}

/// [`bf16_words`]' words as two vectors of high words ([`hi_words`]): the low halves of
/// the 32-bit lanes (the even words) and the high halves (the odd ones).
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn hi_word_halves(words: __m512i) -> [__m512; 2] {
    [hi_words(_mm512_slli_epi32::<16>(words)), hi_words(words)]
}

/// Two pairs' sixteen-entry high-word tables from their table vectors `v` laid out to round
/// together (lane `2e + k` entry `e` of the pair's table half `k`, as [`bf16_even_odd`]
/// splits them): rounded at once, the even words are every pair's first eight entries and the
/// odd words its second eight, and one 128-bit shuffle a pair puts its sixteen together.
///
/// # Safety
/// AVX-512 F and BF16 must be present.
#[inline(always)]
unsafe fn hi_tables_of_two_pairs(v: [__m512; 2]) -> [__m512; 2] {
    // SAFETY: the features are present.
    unsafe {
        let [first, second] = hi_word_halves(bf16_words(v[0], v[1]));
        [
            _mm512_shuffle_f32x4::<0x44>(first, second),
            _mm512_shuffle_f32x4::<0xee>(first, second),
        ]
    }
}

/// Two steps' eight f64 weights each ([`hi_words`] form) from one unmasked permute of
/// high-word tables whose index held one step's codes in the low dword of each qword and the
/// other step's in the high dword: `[low, high]`, the low dwords shifted up and the high
/// dwords with the low ones cleared. One load of the codes (at a byte offset into a
/// [`StepCodes`] row), one permute, a shift and an AND where two steps took two shifts (or two
/// line-split loads) and two zero-masked permutes: on this machine (AMD Zen 4) the shifts and
/// the split loads, not the permutes, were what the step loops waited for.
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn hi_split(both: __m512) -> [__m512d; 2] {
    let both = _mm512_castps_si512(both);
    [
        _mm512_castsi512_pd(_mm512_slli_epi64::<32>(both)),
        _mm512_castsi512_pd(_mm512_and_si512(
            both,
            _mm512_set1_epi64(0xffff_ffff_0000_0000_u64 as i64),
        )),
    ]
}

/// Two steps' code indices from byte `k` of row `r` of `sc` (see [`hi_split`]).
///
/// # Safety
/// AVX-512F must be present; `k < 8` and every row and the seal of `sc` written.
#[inline(always)]
unsafe fn step_pair_codes<const N: usize>(sc: &StepCodes<N>, r: usize, k: usize) -> __m512i {
    debug_assert!(k < 8);
    // SAFETY: `at(r) + k .. + 64` lies within row `r` and the next (or the seal).
    unsafe { _mm512_loadu_si512(sc.at(r).add(k).cast()) }
}

/// Q3_K and Q4_K for the high-word kernels: a pair's 32 code bytes of each row (the first row's in bytes
/// 0..32) transposed so that qword lane `l` (column `4t + l % 4` of row `l / 4` at step `t`)
/// holds in byte `4 + k` of its high dword the code byte of step `2k` and in byte `k` of its
/// low dword that of step `2k + 1`: the 64 bytes from byte `k` of a row of such codes
/// ([`StepCodes`]) hold step `2k`'s index in each high dword and `2k + 1`'s in each low one
/// (the permutes read bits 0..5 of a dword; the bits above are later steps'), which one
/// unmasked permute looks up at once ([`hi_split`]).
static HI_STEP_TRANSPOSE: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut l = 0;
    while l < 8 {
        let mut k = 0;
        while k < 4 {
            let base = 32 * (l / 4) + 8 * k + l % 4;
            t[8 * l + 4 + k] = base as u8;
            t[8 * l + k] = (base + 4) as u8;
            k += 1;
        }
        l += 1;
    }
    t
};

/// The codes' integers for a pair's interleaved tables ([`q4k_hi`]): lane `i` of vector `h`
/// is code `8h + i / 2`.
static Q4K_HI_LEVELS: [[f32; 16]; 2] = {
    let mut t = [[0f32; 16]; 2];
    let mut i = 0;
    while i < 32 {
        t[i / 16][i % 16] = (i / 2) as f32;
        i += 1;
    }
    t
};

/// For a pair's Q4_K scale bytes (row `a`'s at 0..16 of a register, `b`'s at 16..32), the
/// bytes each lane `i = 2g + r` (group `g`, row `r`) unpacks its 6-bit scale from
/// ([`q4k_pair_scales`]): byte 0 the low bits' source (`q[g]`, or `q[g + 4]` for `g ≥ 4`),
/// byte 1 the top two bits' (`q[g − 4]`, `g ≥ 4`); `[1]` the same for the mins (`q[g + 4]`,
/// and `q[g]` for `g ≥ 4`).
static Q4K_SCALE_BYTES: [[u8; 64]; 2] = {
    let mut t = [[0u8; 64]; 2];
    let mut i = 0;
    while i < 16 {
        let (g, r) = (i / 2, i % 2);
        let base = 16 * r;
        if g < 4 {
            t[0][4 * i] = (base + g) as u8;
            t[1][4 * i] = (base + g + 4) as u8;
        } else {
            t[0][4 * i] = (base + g + 4) as u8;
            t[0][4 * i + 1] = (base + g - 4) as u8;
            t[1][4 * i] = (base + g + 4) as u8;
            t[1][4 * i + 1] = (base + g) as u8;
        }
        i += 1;
    }
    t
};

/// Both rows' `d1 = d · sc` and `m1 = dmin · m` of a Q4_K block pair (`d`, `dmin` by F16C),
/// lane `2g + r` row `r`'s group `g`, in f32 as the decoder computes them: the 6-bit scales
/// and mins unpacked as `kquants::scale_min_k4` does (groups 0..4: the low six bits of bytes
/// 0..4 and 4..8; groups 4..8: a nibble of bytes 8..12 and the top two bits of bytes 0..4 and
/// 4..8), sixteen lanes at once.
///
/// # Safety
/// AVX-512 F, BW, VBMI and F16C must be present; `a` and `b` must be whole Q4_K blocks.
#[inline(always)]
unsafe fn q4k_pair_scales(a: &[u8], b: &[u8]) -> (__m512, __m512) {
    debug_assert!(a.len() == kquants::Q4_K_BLOCK_BYTES && b.len() == a.len());
    // SAFETY (whole body): bytes 0..20 of each block are read; the statics hold 64 bytes.
    unsafe {
        let sa = _mm_loadu_si128(a.as_ptr().add(4).cast());
        let sb = _mm_loadu_si128(b.as_ptr().add(4).cast());
        let both = _mm512_inserti32x4::<1>(_mm512_castsi128_si512(sa), sb);
        let sc = _mm512_permutexvar_epi8(load_u8(&Q4K_SCALE_BYTES[0]), both);
        let mn = _mm512_permutexvar_epi8(load_u8(&Q4K_SCALE_BYTES[1]), both);
        // Groups 4..8 (lanes 8..16) take four low bits and the source's top two as bits 4, 5;
        // groups 0..4 six low bits.
        let low = _mm512_mask_set1_epi32(_mm512_set1_epi32(63), 0xff00, 15);
        let top = _mm512_maskz_set1_epi32(0xff00, 0x30);
        // A min of groups 4..8 is the high nibble of its byte.
        let shift = _mm512_maskz_set1_epi32(0xff00, 4);
        // No closures here: a closure has no target features (see `x_step`).
        let scf = _mm512_cvtepi32_ps(_mm512_ternarylogic_epi32::<0xF8>(
            _mm512_and_si512(sc, low),
            _mm512_srli_epi32::<10>(sc),
            top,
        ));
        let mf = _mm512_cvtepi32_ps(_mm512_ternarylogic_epi32::<0xF8>(
            _mm512_and_si512(_mm512_srlv_epi32(mn, shift), low),
            _mm512_srli_epi32::<10>(mn),
            top,
        ));
        let halves = _mm_set_epi32(0, 0, u32_at(b, 0) as i32, u32_at(a, 0) as i32);
        // [d_a, dmin_a, d_b, dmin_b].
        let dd = _mm512_castps128_ps512(_mm_cvtph_ps(halves));
        let d = _mm512_permutexvar_ps(_mm512_mask_set1_epi32(_mm512_set1_epi32(0), 0xaaaa, 2), dd);
        let dmin =
            _mm512_permutexvar_ps(_mm512_mask_set1_epi32(_mm512_set1_epi32(1), 0xaaaa, 3), dd);
        (_mm512_mul_ps(d, scf), _mm512_mul_ps(dmin, mf))
    }
}

/// Every pair's [`q4k_pair_scales`] into `dp` and `mp`: `d1` of group `g` at `2g` (the first
/// row) and `2g + 1`, and the same for `m1` (written in place: returning the arrays by value
/// cost Q4_K's fused kernel 3%).
///
/// # Safety
/// As [`q4k_pair_scales`], for every row.
#[inline(always)]
unsafe fn q4k_scale_arrays(
    rows: &[&[u8]; NR],
    dp: &mut [[f32; 16]; PAIRS],
    mp: &mut [[f32; 16]; PAIRS],
) {
    // SAFETY: the caller's bound; each array holds sixteen f32.
    unsafe {
        for z in 0..PAIRS {
            let (d, m) = q4k_pair_scales(rows[2 * z], rows[2 * z + 1]);
            _mm512_storeu_ps(dp[z].as_mut_ptr(), d);
            _mm512_storeu_ps(mp[z].as_mut_ptr(), m);
        }
    }
}

/// Whether a Q4_K block's `d` and `dmin` are finite (neither exponent field all ones): then
/// every value of the block is a finite f32, an exact multiple of 2^−24 below 2^27.
#[inline(always)]
fn q4k_finite(b: &[u8]) -> bool {
    f16_finite(b, 0) && f16_finite(b, 2)
}

high_words_or_widened_kernel!(
    /// Q4_K chunk: the fused kernels of bf16-rounded matrices through [`q4k_hi`] where every
    /// row's scales are finite (their inputs scaled by [`input_scale`]), else [`q4k_widened`]
    /// with the lanes in the inputs' units for the chunk; the packed panel and unrounded
    /// matrices through [`q4k_widened`].
    ///
    /// # Safety
    /// AVX-512 F, BW, VL, VBMI, BF16 and F16C must be present; the operands as [`run`]
    /// describes them (for `R = 0`, `lanes` is a packed panel of `kcl / 4` steps and `x` is not
    /// read).
    q4k,
    "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,f16c",
    (DirectKind::Q4K, q4k_finite),
    (q4k_hi::<R>, q4k_widened::<R, ROUND>)
);

hi_panel_kernel!(
    /// A whole Q4_K panel on the high-word route ([`panel`]).
    ///
    /// # Safety
    /// As [`q4k`]'s high-word route, for every chunk of the panel.
    q4k_panel,
    "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,f16c",
    q4k_hi::<R>
);

/// Q4_K chunk of a bf16-rounded matrix with finite scales, for `R ≥ 1` inputs scaled by
/// [`input_scale`]: per group, each pair's two tables of high words (both rows' sixteen
/// values `d1·q − m1`, computed with the rows interleaved so that the bf16 words' even and
/// odd halves are the two rows, [`hi_words`]), then per two steps one load of their codes,
/// one permute, a shift and an AND give the pair's eight f64 weights of each (scaled by
/// 2^−896, [`hi_split`]) with no widening, straight into the FMAs (Q4_K m = 1 2304x5120, 1
/// thread in cache, 114.4 -> 111.8 CPU ns per 1000 weights against two shifts and two
/// zero-masked permutes).
/// The lanes are scaled to the inputs' units (2^−448) once on the way in and back on the way
/// out.
///
/// `d1·q` is exact in f32 (`d1 = d·sc` has at most 17 significant bits, `q` four), so
/// `fmsub(d1, q, m1)` rounds once where the decoder's `d1·q − m1` rounds once: the same f32.
///
/// # Safety
/// As [`q4k`], with `R ≥ 1` and every row's scales finite ([`q4k_finite`]).
#[inline(always)]
unsafe fn q4k_hi<const R: usize>(
    rows: &[&[u8]; NR],
    (_kcl, ahead): (usize, &[u8]),
    x: *const f64,
    x_stride: usize,
    acc: &mut [[__m512d; PAIRS]; R],
    lanes: *mut f64,
) {
    // SAFETY (whole body): as [`q4k`]'s; the scale arrays hold sixteen f32 a pair.
    unsafe {
        let transpose = load_u8(&HI_STEP_TRANSPOSE);
        let levels = [
            _mm512_loadu_ps(Q4K_HI_LEVELS[0].as_ptr()),
            _mm512_loadu_ps(Q4K_HI_LEVELS[1].as_ptr()),
        ];
        // Each pair's `[d1 of row a, d1 of row b]` of group `g` at 2g, 2g + 1, and the same
        // for `m1`.
        let (mut dp, mut mp) = ([[0f32; 16]; PAIRS], [[0f32; 16]; PAIRS]);
        q4k_scale_arrays(rows, &mut dp, &mut mp);
        let nibbles = _mm512_set1_epi8(0x0f);
        // Bit 4 of every code byte of the pair's second row (qword lanes 4..8): its table.
        let second = _mm512_maskz_set1_epi64(0xf0, 0x1010_1010_1010_1010);
        // A group's codes of every pair, a row each, for the steps' loads ([`hi_split`];
        // zeroed first: a load reaches the seal).
        let mut rows_hi = StepCodes::<PAIRS>::zeroed();
        for c in 0..4 {
            let mut codes = [_mm512_setzero_si512(); PAIRS];
            for (z, cz) in codes.iter_mut().enumerate() {
                *cz = transposed_pair(rows[2 * z], rows[2 * z + 1], 16 + 32 * c, transpose);
            }
            for h in 0..2 {
                let g = 2 * c + h;
                prefetch_part(ahead, g, 8);
                let mut tabs = [[_mm512_setzero_ps(); 2]; PAIRS];
                for z in 0..PAIRS {
                    let d = _mm512_castpd_ps(_mm512_set1_pd(std::ptr::read_unaligned(
                        dp[z].as_ptr().add(2 * g).cast::<f64>(),
                    )));
                    let m = _mm512_castpd_ps(_mm512_set1_pd(std::ptr::read_unaligned(
                        mp[z].as_ptr().add(2 * g).cast::<f64>(),
                    )));
                    let words = bf16_words(
                        _mm512_fmsub_ps(d, levels[0], m),
                        _mm512_fmsub_ps(d, levels[1], m),
                    );
                    tabs[z] = hi_word_halves(words);
                    let nib = if h == 0 {
                        codes[z]
                    } else {
                        _mm512_srli_epi32::<4>(codes[z])
                    };
                    rows_hi.put(z, _mm512_ternarylogic_epi32::<0xEA>(nib, nibbles, second));
                }
                // Steps `2k` and `2k + 1` of the group.
                macro_rules! two_steps {
                    ($k:literal) => {{
                        let u = 8 * g + 2 * $k;
                        let xv = [x_step::<R>(x, x_stride, u), x_step::<R>(x, x_stride, u + 1)];
                        for z in 0..PAIRS {
                            let [ta, tb] = tabs[z];
                            // Step `2k`'s code in the high dwords, `2k + 1`'s in the low.
                            let idx = step_pair_codes(&rows_hi, z, $k);
                            let [w1, w0] = hi_split(_mm512_permutex2var_ps(ta, idx, tb));
                            sink::<R>((u, z, w0), &xv[0], acc, lanes);
                            sink::<R>((u + 1, z, w1), &xv[1], acc, lanes);
                        }
                    }};
                }
                two_steps!(0);
                two_steps!(1);
                two_steps!(2);
                two_steps!(3);
            }
        }
    }
}

/// MXFP4: for a pair of blocks (bytes 0..34 of each row, the first row's as bytes 0..64 of the
/// permute and the second's as 64..128), byte `8l + 4β + t` of lane `l` is the code byte of its
/// column `4t + l % 4` (low nibble) and `16 + 4t + l % 4` (high nibble) of block `β`.
static MX_TRANSPOSE: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut l = 0;
    while l < 8 {
        let mut beta = 0;
        while beta < 2 {
            let mut s = 0;
            while s < 4 {
                t[8 * l + 4 * beta + s] = (64 * (l / 4) + 17 * beta + 1 + 4 * s + l % 4) as u8;
                s += 1;
            }
            beta += 1;
        }
        l += 1;
    }
    t
};

/// MXFP4: for block `β` of a pair's two-block loads (the first row's as bytes 0..64 of the
/// permute, the second's as 64..128), the byte that lands in the low byte of each qword lane:
/// the block's exponent (byte `17β`) of the lane's row (lanes 0..4 the first).
static MX_SCALE_BYTES: [[u8; 64]; 2] = {
    let mut t = [[0u8; 64]; 2];
    let mut beta = 0;
    while beta < 2 {
        let mut l = 0;
        while l < 8 {
            t[beta][8 * l] = (64 * (l / 4) + 17 * beta) as u8;
            l += 1;
        }
        beta += 1;
    }
    t
};

/// The low byte of every qword (a byte mask).
const MX_QWORD_LOW: u64 = 0x0101_0101_0101_0101;

/// MXFP4's doubled kvalues as f64, the table entries 0..8 and 8..16.
static MX_KVALUES: [[f64; 8]; 2] = {
    let mut t = [[0f64; 8]; 2];
    let mut i = 0;
    while i < 16 {
        t[i / 8][i % 8] = mxfp4::KVALUES_DOUBLED[i] as f64;
        i += 1;
    }
    t
};

/// [`MX_KVALUES`] by their high 32 bits: a doubled kvalue is an integer of at most four bits,
/// so its f64's low 32 bits are zero and the high word is the whole value.
static MX_KVALUES_HI: [u32; 16] = {
    let mut t = [0u32; 16];
    let mut i = 0;
    while i < 16 {
        let v = MX_KVALUES[i / 8][i % 8];
        assert!(v.to_bits() as u32 == 0);
        t[i] = (v.to_bits() >> 32) as u32;
        i += 1;
    }
    t
};

/// Eight f64 weights from a sixteen-entry table of high words (`table`, as [`MX_KVALUES_HI`]),
/// each qword lane's index in bits 0..4 of its high dword: one single-source permute into the
/// odd dwords, the even ones zeroed (written as the one instruction: the intrinsic compiled
/// to an unmasked permute and an AND, one more vector instruction a step).
///
/// # Safety
/// AVX-512F must be present.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn hi_lookup16(idx: __m512i, table: __m512) -> __m512d {
    // SAFETY: AVX-512F, present per the caller.
    unsafe { zero_masked_permute!(out "vpermps", (idx, table), 0xaaaa_u16) }
}

/// One MXFP4 block's table, `d · kvalue` for the sixteen codes, widened to f64: the decoder's
/// f32 product. Below exponent [`MX_F32_FROM`] that product is exact (`d` is a power of two at
/// least 2^−128 and a kvalue at most 12 in magnitude, so it neither rounds nor overflows), so
/// it is the f64 product; from there on it is computed in f32 (where it may overflow to
/// infinity) and widened. Every such value has at most four significant bits and is thus
/// already a bf16 value: rounding it to bf16 changes nothing (`lut` tests this for every
/// exponent), so the table is the same whether the matrix rounds or not.
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn mxfp4_tables(e: u8) -> [__m512d; 2] {
    // SAFETY: the statics hold eight f64 each.
    unsafe {
        if e < MX_F32_FROM {
            let d = _mm512_set1_pd(mx_scale(e));
            [
                _mm512_mul_pd(d, _mm512_loadu_pd(MX_KVALUES[0].as_ptr())),
                _mm512_mul_pd(d, _mm512_loadu_pd(MX_KVALUES[1].as_ptr())),
            ]
        } else {
            let kv: [f32; 16] = std::array::from_fn(|i| f32::from(mxfp4::KVALUES_DOUBLED[i]));
            let d = _mm512_set1_ps(mxfp4::e8m0_to_f32_half(e));
            widen(_mm512_mul_ps(d, _mm512_loadu_ps(kv.as_ptr())))
        }
    }
}

/// An MXFP4 block's scale `d = 2^(e − 128)` (the decoder's half of the E8M0 value) as f64,
/// exact for every `e < MX_F32_FROM` (also where f32 would need a subnormal).
#[inline(always)]
fn mx_scale(e: u8) -> f64 {
    f64::from_bits((u64::from(e) + 895) << 52)
}

/// MXFP4: the sixteen steps of the blocks `b0`, `b0 + 1` (the first eight only where
/// `blocks` is 1), each pair's weights by the caller's `$weight!(z, beta, t, codes)` (pair
/// `z`'s transposed codes, whose step index [`mx_code_at!`] finds), and the caller's
/// `$between!(acc)` on the accumulators between the two blocks. Every step written out, so
/// every shift is a literal. The caller is in an unsafe block that vouches for the features,
/// `x` and `lanes`.
macro_rules! mx_steps {
    ($weight:ident, $between:ident, ($b0:expr, $blocks:expr), $codes:expr, ($x:expr, $x_stride:expr), $acc:expr, $lanes:expr) => {{
        let (b0, blocks, codes, acc): (usize, usize, &[__m512i; PAIRS], _) =
            ($b0, $blocks, &$codes, $acc);
        let (x, x_stride, lanes) = ($x, $x_stride, $lanes);
        macro_rules! step {
            ($beta:literal, $t:literal) => {{
                let u = 8 * (b0 + $beta) + $t;
                let xv = x_step::<R>(x, x_stride, u);
                for z in 0..PAIRS {
                    let w = $weight!(z, $beta, $t, codes[z]);
                    sink::<R>((u, z, w), &xv, acc, lanes);
                }
            }};
        }
        macro_rules! block {
            ($beta:literal) => {{
                step!($beta, 0);
                step!($beta, 1);
                step!($beta, 2);
                step!($beta, 3);
                step!($beta, 4);
                step!($beta, 5);
                step!($beta, 6);
                step!($beta, 7);
            }};
        }
        block!(0);
        if blocks == 2 {
            $between!(acc);
            block!(1);
        }
    }};
}

/// MXFP4: the bit at which step `t` of block `beta` finds its code in a pair's transposed
/// codes ([`MX_TRANSPOSE`]): the code byte at bits `8(4·beta + t mod 4)`, and for the block's
/// second half (t ≥ 4) its high nibble, 4 bits on.
macro_rules! mx_code_at {
    ($beta:literal, $t:literal) => {
        32 * $beta + 8 * ($t % 4) + 4 * ($t / 4)
    };
}

/// MXFP4: step `t` of block `beta`'s code in bits 0..4 of each qword lane (the f64 permutes'
/// index).
macro_rules! mx_low_index {
    ($beta:literal, $t:literal, $codes:expr) => {
        _mm512_srli_epi64::<{ mx_code_at!($beta, $t) }>($codes)
    };
}

/// Nothing between an MXFP4 group's two blocks (the kernels whose weights carry their scale).
macro_rules! mx_nothing_between {
    ($acc:expr) => {{
        let _ = &$acc;
    }};
}

/// `2^(bias + e − 1023)` in each qword lane, for integers `e` that make it a normal f64.
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn pow2(bias: i64, e: __m512i) -> __m512d {
    _mm512_castsi512_pd(_mm512_slli_epi64::<52>(_mm512_add_epi64(
        e,
        _mm512_set1_epi64(bias),
    )))
}

/// Every input row's accumulators of pair `z` times `f[z]`.
///
/// # Safety
/// AVX-512F must be present.
#[inline(always)]
unsafe fn scale_lanes<const R: usize>(acc: &mut [[__m512d; PAIRS]; R], f: &[__m512d; PAIRS]) {
    for row in acc.iter_mut() {
        for (a, f) in row.iter_mut().zip(f) {
            *a = _mm512_mul_pd(*a, *f);
        }
    }
}

/// MXFP4, blocks `b0`, `b0 + 1` where some scale is at least [`MX_F32_FROM`]: each row's own
/// tables ([`mxfp4_tables`]), two permutes and a blend a pair-step. `es` holds each row's two
/// exponents, `codes` each pair's transposed code bytes.
///
/// # Safety
/// AVX-512 F, BW and VBMI must be present; `x` and `lanes` as [`mx`] has them.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
#[inline(never)]
unsafe fn mx_own_tables<const R: usize>(
    (b0, blocks): (usize, usize),
    es: &[[u8; 2]; NR],
    codes: &[__m512i; PAIRS],
    (x, x_stride): (*const f64, usize),
    acc: &mut [[__m512d; PAIRS]; R],
    lanes: *mut f64,
) {
    // SAFETY (whole body): the features are present; `x` and `lanes` as the caller's.
    unsafe {
        // In place, not into zeroed arrays (see `q2k`); a missing second block's tables are
        // zeros (never read).
        let mut tabs = MaybeUninit::<[[[__m512d; 2]; 4]; PAIRS]>::uninit();
        let tp = tabs.as_mut_ptr();
        for (z, e) in es.chunks_exact(2).enumerate() {
            for (beta, (&ea, &eb)) in e[0].iter().zip(&e[1]).enumerate() {
                let [ta, tb] = if beta < blocks {
                    [mxfp4_tables(ea), mxfp4_tables(eb)]
                } else {
                    [[_mm512_setzero_pd(); 2]; 2]
                };
                (*tp)[z][2 * beta] = ta;
                (*tp)[z][2 * beta + 1] = tb;
            }
        }
        // Every table was written above.
        let tabs = tabs.assume_init_ref();
        macro_rules! looked_up {
            ($z:expr, $beta:literal, $t:literal, $codes:expr) => {
                lookup_pair16(
                    tabs[$z][2 * $beta],
                    tabs[$z][2 * $beta + 1],
                    mx_low_index!($beta, $t, $codes),
                )
            };
        }
        mx_steps!(
            looked_up,
            mx_nothing_between,
            (b0, blocks),
            *codes,
            (x, x_stride),
            acc,
            lanes
        );
    }
}

/// MXFP4: for a row's chunk as two 64-byte loads (the permute's two sources), the byte of
/// block `j`'s exponent (byte `17j`) at byte `2j` and again at `32 + 2j` (the low byte of
/// word `j` and `16 + j`), `j < 8`.
static MX_EXPONENT_BYTES: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut j = 0;
    while j < 8 {
        t[2 * j] = (17 * j) as u8;
        t[32 + 2 * j] = (17 * j) as u8;
        j += 1;
    }
    t
};

/// MXFP4: word `w` from word `w − 1` (within each row's words `0..16`, `16..32`).
static MX_PREVIOUS_WORD: [u16; 32] = {
    let mut t = [0u16; 32];
    let mut w = 1;
    while w < 32 {
        t[w] = (w - 1) as u16;
        w += 1;
    }
    t
};

/// MXFP4: for the lane scaling at block `j` ([`mx_lane_scalings`]), word `j` into the top word of
/// qwords 0..4 (the pair's first row) and word `16 + j` into those of qwords 4..8.
static MX_SCALING_WORDS: [[u16; 32]; 9] = {
    let mut t = [[0u16; 32]; 9];
    let mut j = 0;
    while j < 9 {
        let mut l = 0;
        while l < 8 {
            t[j][4 * l + 3] = (j + 16 * (l / 4)) as u16;
            l += 1;
        }
        j += 1;
    }
    t
};

/// MXFP4, the fused kernels' lane scalings over a chunk of `n ≤ 8` blocks of a pair's rows
/// `a`, `b` (as [`mx_scaled_chunk`] runs them), as words: word `j ≤ n` (row `a`; `16 + j` row
/// `b`) is `(p_j − c_j + 1023) << 4`, the f64 exponent field of `2^(p_j − c_j)` shifted into
/// its word, for `p_0 = 128` and `p_j = e_{j−1}` (the units the lanes are in before block
/// `j`), `c_j = e_j` and `c_n = 128` (back to `d = 1` after the last); `bias` is
/// [`mx_scaling_bias`]`(n)`. Also the exponents `c_j` (`j < n`, the other words zero), for the
/// caller to see whether one is at least [`MX_F32_FROM`] (then the scalings do not apply).
///
/// # Safety
/// AVX-512 F, BW and VBMI must be present; `a` and `b` must hold `n` blocks.
#[inline(always)]
unsafe fn mx_lane_scalings(a: &[u8], b: &[u8], n: usize, bias: __m512i) -> (__m512i, __m512i) {
    debug_assert!((1..=8).contains(&n) && a.len() >= 17 * n && b.len() >= 17 * n);
    let len = 17 * n;
    let lo: u64 = if len >= 64 { !0 } else { (1 << len) - 1 };
    // Bytes 64.. up to the end (at most 63 of them: the last exponent is byte 119).
    let hi: u64 = (1 << len.saturating_sub(64).min(63)) - 1;
    // Words `1..=n` of each row, and the low bytes of words `0..n`.
    let words = ((1u32 << n) - 1) << 1;
    let words = words | words << 16;
    let low_bytes = 0x5555u64 & ((1 << (2 * n)) - 1);
    // SAFETY (whole body): the masked loads read bytes 0..len of each row only (len ≤ 136);
    // the statics hold 64 bytes.
    unsafe {
        let sel = load_u8(&MX_EXPONENT_BYTES);
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let la = _mm512_maskz_loadu_epi8(lo, pa.cast());
        let ha = _mm512_maskz_loadu_epi8(hi, pa.add(64).cast());
        let lb = _mm512_maskz_loadu_epi8(lo, pb.cast());
        let hb = _mm512_maskz_loadu_epi8(hi, pb.add(64).cast());
        // `c_j` for `j < n` (0 at `n`: the 128 is in `bias`).
        let cur = _mm512_or_si512(
            _mm512_maskz_permutex2var_epi8(low_bytes, la, sel, ha),
            _mm512_maskz_permutex2var_epi8(low_bytes << 32, lb, sel, hb),
        );
        // `p_j` for `1 ≤ j ≤ n` (0 at `0`: the 128 is in `bias`).
        let prev = _mm512_maskz_permutexvar_epi16(
            words,
            _mm512_loadu_si512(MX_PREVIOUS_WORD.as_ptr().cast()),
            cur,
        );
        let field = _mm512_add_epi16(_mm512_sub_epi16(prev, cur), bias);
        (_mm512_slli_epi16::<4>(field), cur)
    }
}

/// [`mx_lane_scalings`]' bias for a chunk of `n` blocks: 1023 in every word, plus 128 at word
/// 0 of each row (`p_0`) and less 128 at word `n` (`c_n`).
///
/// # Safety
/// AVX-512 F and BW must be present.
#[inline(always)]
unsafe fn mx_scaling_bias(n: usize) -> __m512i {
    let base = _mm512_mask_set1_epi16(_mm512_set1_epi16(1023), 0x0001_0001, 1151);
    let at_n = (1u32 << n) | (1u32 << (16 + n));
    _mm512_mask_sub_epi16(base, at_n, base, _mm512_set1_epi16(128))
}

/// The lane scaling at block `j` from a pair's [`mx_lane_scalings`] words: `2^(p_j − c_j)` of
/// the first row in qwords 0..4, of the second in 4..8.
///
/// # Safety
/// AVX-512 F and BW must be present.
#[inline(always)]
unsafe fn mx_scaling(words: __m512i, j: usize) -> __m512d {
    // SAFETY: the features are present; the static holds 64 bytes a row.
    unsafe {
        let idx = _mm512_loadu_si512(MX_SCALING_WORDS[j].as_ptr().cast());
        _mm512_castsi512_pd(_mm512_maskz_permutexvar_epi16(0x8888_8888, idx, words))
    }
}

/// MXFP4 chunk of `n` blocks a row for `R ≥ 1` inputs where no exponent is at least
/// [`MX_F32_FROM`]: the accumulators carry the blocks' scales instead of every weight. A lane
/// runs in units of its block's `d` (`acc / d`), adds `x · kvalue` from the one shared table
/// (high words, [`MX_KVALUES_HI`]), and goes into the next block's units after the block:
/// each pair's scalings from one block's units into the next computed once a chunk
/// ([`mx_lane_scalings`]), one word permute and one multiply a block.
///
/// Scaling by a power of two commutes with every rounding that stays normal, and all of these
/// do: a nonzero exact sum of these products is a multiple of 2^−278 (x an f32, `d ≥ 2^−128`,
/// a doubled kvalue an integer) and below 2^277, and `1/d` is within 2^±128, so every value
/// stays within 2^±406, far inside f64's normal range (signed zeros, infinities and NaNs pass
/// a power-of-two scaling unchanged). So `acc/d + x·kvalue`, rounded, times `d` is `acc +
/// x·(d·kvalue)` rounded: the bits of the definition, with one multiply a block a pair and
/// input row instead of one a step.
///
/// # Safety
/// As [`mx`], with `R ≥ 1` and `scalings` every pair's [`mx_lane_scalings`].
#[inline(always)]
unsafe fn mx_scaled_chunk<const R: usize>(
    rows: &[&[u8]; NR],
    (n_blocks, ahead): (usize, &[u8]),
    scalings: &[__m512i; PAIRS],
    (x, x_stride): (*const f64, usize),
    lanes: *mut f64,
) {
    let bb = mxfp4::BLOCK_BYTES;
    // SAFETY (whole body): as [`mx`]'s.
    unsafe {
        let transpose = load_u8(&MX_TRANSPOSE);
        let kv_hi = _mm512_loadu_ps(MX_KVALUES_HI.as_ptr().cast());
        let mut acc = load_lanes::<R>(lanes);
        let mut f = [_mm512_setzero_pd(); PAIRS];
        for b0 in (0..n_blocks).step_by(2) {
            prefetch_part(ahead, b0 / 2, n_blocks.div_ceil(2));
            let blocks = 2.min(n_blocks - b0);
            let mask: u64 = (1u64 << (bb * blocks)) - 1;
            let mut codes = [_mm512_setzero_si512(); PAIRS];
            for (z, c) in codes.iter_mut().enumerate() {
                let a = _mm512_maskz_loadu_epi8(mask, rows[2 * z].as_ptr().add(bb * b0).cast());
                let b = _mm512_maskz_loadu_epi8(mask, rows[2 * z + 1].as_ptr().add(bb * b0).cast());
                *c = _mm512_permutex2var_epi8(a, transpose, b);
            }
            for (fz, s) in f.iter_mut().zip(scalings) {
                *fz = mx_scaling(*s, b0);
            }
            scale_lanes(&mut acc, &f);
            macro_rules! unscaled {
                ($z:expr, $beta:literal, $t:literal, $codes:expr) => {
                    hi_lookup16(to_high_dword!(mx_code_at!($beta, $t), $codes), kv_hi)
                };
            }
            macro_rules! next_block_units {
                ($acc:expr) => {{
                    for (fz, s) in f.iter_mut().zip(scalings) {
                        *fz = mx_scaling(*s, b0 + 1);
                    }
                    scale_lanes($acc, &f)
                }};
            }
            mx_steps!(
                unscaled,
                next_block_units,
                (b0, blocks),
                codes,
                (x, x_stride),
                &mut acc,
                lanes
            );
        }
        for (fz, s) in f.iter_mut().zip(scalings) {
            *fz = mx_scaling(*s, n_blocks);
        }
        scale_lanes(&mut acc, &f);
        store_lanes(&acc, lanes);
    }
}

/// MXFP4 chunk (`kcl / 32` blocks a row): see the module docs. The fused kernels of a chunk
/// whose every scale is below [`MX_F32_FROM`] (the rule in real weights) through
/// [`mx_scaled_chunk`]; else, and for the packed panel, two blocks a row at a time: where
/// every scale of those is below [`MX_F32_FROM`] the packed panel's weights are the one shared
/// kvalue table times the lanes' scales (one two-source permute a pair, not two and a blend),
/// else every step looks its codes up in the rows' own tables.
///
/// # Safety
/// AVX-512 F, BW and VBMI must be present; the operands as [`run`] describes
/// them (for `R = 0`, `lanes` is a packed panel of `kcl / 4` steps and `x` is not read).
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn mx<const R: usize>(
    rows: &[&[u8]; NR],
    (kcl, ahead): (usize, &[u8]),
    x: *const f64,
    x_stride: usize,
    lanes: *mut f64,
) {
    let n_blocks = kcl / MX_VALUES;
    let bb = mxfp4::BLOCK_BYTES;
    // SAFETY (whole body): every row holds `n_blocks` blocks (checked by `chunk`), read with
    // masked loads that stop at their end; `x` holds R rows of kcl values `x_stride` apart and
    // `lanes` R·PANEL_STEP values.
    unsafe {
        if R > 0 {
            // The common case first: no exponent of the chunk at `MX_F32_FROM` or above.
            let mut scalings = [_mm512_setzero_si512(); PAIRS];
            let mut most = _mm512_setzero_si512();
            let bias = mx_scaling_bias(n_blocks);
            for (z, s) in scalings.iter_mut().enumerate() {
                let (w, e) = mx_lane_scalings(rows[2 * z], rows[2 * z + 1], n_blocks, bias);
                *s = w;
                most = _mm512_max_epu16(most, e);
            }
            let from = _mm512_set1_epi16(i16::from(MX_F32_FROM));
            if _mm512_cmpge_epu16_mask(most, from) == 0 {
                let x = (x, x_stride);
                return mx_scaled_chunk::<R>(rows, (n_blocks, ahead), &scalings, x, lanes);
            }
        }
        let transpose = load_u8(&MX_TRANSPOSE);
        let mut acc = load_lanes::<R>(lanes);
        // The doubled kvalues as f64 (a table every block shares).
        let kv = [
            _mm512_loadu_pd(MX_KVALUES[0].as_ptr()),
            _mm512_loadu_pd(MX_KVALUES[1].as_ptr()),
        ];
        for b0 in (0..n_blocks).step_by(2) {
            prefetch_part(ahead, b0 / 2, n_blocks.div_ceil(2));
            let blocks = 2.min(n_blocks - b0);
            let mask: u64 = (1u64 << (bb * blocks)) - 1;
            // Each pair's blocks (first row's, second's) and transposed codes; whether any
            // scale (bytes 0 and 17) is at least `MX_F32_FROM`. Loops, not closures (see
            // `x_step`).
            let scale_bytes: u64 = if blocks == 2 { 1 | 1 << 17 } else { 1 };
            let big_from = _mm512_set1_epi8(MX_F32_FROM as i8);
            let mut loaded = [[_mm512_setzero_si512(); 2]; PAIRS];
            let mut codes = [_mm512_setzero_si512(); PAIRS];
            let mut big = 0u64;
            for z in 0..PAIRS {
                for (v, row) in loaded[z].iter_mut().zip(&rows[2 * z..2 * z + 2]) {
                    *v = _mm512_maskz_loadu_epi8(mask, row.as_ptr().add(bb * b0).cast());
                    big |= _mm512_mask_cmpge_epu8_mask(scale_bytes, *v, big_from);
                }
                codes[z] = _mm512_permutex2var_epi8(loaded[z][0], transpose, loaded[z][1]);
            }
            // The rare other case is a function of its own, so this one holds one step
            // sequence (inlined here, it measured 2% slower at m=1).
            if big == 0 && R == 0 {
                // The packed panel, every scale below `MX_F32_FROM`: a weight is `d · kvalue`
                // in f64, the same product `mxfp4_tables` stores, `d = 2^(e − 128)` exact
                // (`pow2`, as `mx_scale`): the one shared kvalue table and a multiply by the
                // lanes' `d`. Each lane's block exponent `e` (the first row's in lanes 0..4):
                // block β's exponent byte into the qwords of its row.
                let mut d = [[_mm512_setzero_pd(); 2]; PAIRS];
                for (dz, l) in d.iter_mut().zip(&loaded) {
                    for (beta, db) in dz.iter_mut().enumerate() {
                        let sel = _mm512_loadu_si512(MX_SCALE_BYTES[beta].as_ptr().cast());
                        let e = _mm512_maskz_permutex2var_epi8(MX_QWORD_LOW, l[0], sel, l[1]);
                        *db = pow2(895, e);
                    }
                }
                macro_rules! scaled {
                    ($z:expr, $beta:literal, $t:literal, $codes:expr) => {
                        _mm512_mul_pd(
                            d[$z][$beta],
                            _mm512_permutex2var_pd(kv[0], mx_low_index!($beta, $t, $codes), kv[1]),
                        )
                    };
                }
                mx_steps!(
                    scaled,
                    mx_nothing_between,
                    (b0, blocks),
                    codes,
                    (x, x_stride),
                    &mut acc,
                    lanes
                );
            } else {
                // The fused kernels of a chunk with some large scale ([`mx_scaled_chunk`]
                // takes the others), and the packed panel's blocks with one: each row's two
                // scales (a missing second block's as 0).
                let mut es = [[0u8; 2]; NR];
                for (e, row) in es.iter_mut().zip(rows) {
                    e[0] = row[bb * b0];
                    if blocks == 2 {
                        e[1] = row[bb * (b0 + 1)];
                    }
                }
                mx_own_tables::<R>((b0, blocks), &es, &codes, (x, x_stride), &mut acc, lanes);
            }
        }
        store_lanes(&acc, lanes);
    }
}

/// Q8_0: lanes of a pair's sixteen values of each row (the first row's `0..16`, the second's
/// `16..32`) in step order: `[a 4i.., b 4i.., a 4i+4.., b 4i+4..]` for `i = 0` and `i = 2`.
static Q8_PAIR_LANES: [[i32; 16]; 2] = {
    let mut t = [[0i32; 16]; 2];
    let mut h = 0;
    while h < 2 {
        let mut i = 0;
        while i < 16 {
            let quarter = i / 4;
            t[h][i] = (8 * h + 4 * (quarter / 2) + 16 * (quarter % 2) + i % 4) as i32;
            i += 1;
        }
        h += 1;
    }
    t
};

/// Q8_0: [`Q8_PAIR_LANES`] for the bf16 words of both rows (the first row's words `0..16`,
/// the second's `16..32`), as [`words_to_f32`] takes them.
static Q8_PAIR_WORDS: [[i16; 32]; 2] = {
    let mut t = [[32i16; 32]; 2];
    let mut h = 0;
    while h < 2 {
        let mut i = 0;
        while i < 16 {
            t[h][2 * i + 1] = Q8_PAIR_LANES[h][i] as i16;
            i += 1;
        }
        h += 1;
    }
    t
};

/// A Q8_0 block's 16 values from `at`: `f32(q) · d`.
///
/// # Safety
/// AVX-512 F and BW must be present and `at` must hold 16 bytes.
#[inline(always)]
unsafe fn q8_values(at: *const u8, d: __m512) -> __m512 {
    // SAFETY: 16 readable bytes.
    let q = unsafe { _mm512_cvtepi8_epi32(_mm_loadu_si128(at.cast())) };
    _mm512_mul_ps(_mm512_cvtepi32_ps(q), d)
}

/// A Q8_0 block's f16 scale, widened (F16C) and broadcast.
///
/// # Safety
/// AVX-512F and F16C must be present and `b` must hold 2 bytes.
#[inline(always)]
unsafe fn q8_scale(b: &[u8]) -> __m512 {
    let bits = u16_at(b, 0);
    _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// Q8_0 high words: for step `s` of a half block (`0..4`), the words of each qword lane `l`
/// (column `4s + l % 4` of row `l / 4`, the first row's bf16 word `4s + l`, the second's
/// `16 + 4s + l − 4`): word 2 the low half of its high dword (from the first source of the
/// permute, [`q8_body`]'s `lower`), word 3 the high half (from the second, `upper`); words 0
/// and 1 zeroed by the mask.
static Q8_HI_WORDS: [[i16; 32]; 4] = {
    let mut t = [[0i16; 32]; 4];
    let mut s = 0;
    while s < 4 {
        let mut l = 0;
        while l < 8 {
            let word = (4 * s + l % 4 + 16 * (l / 4)) as i16;
            t[s][4 * l + 2] = word;
            t[s][4 * l + 3] = 32 + word;
            l += 1;
        }
        s += 1;
    }
    t
};

/// A Q8_0 step's eight f64 weights (high words) from a half block's `lower` and `upper` word
/// halves ([`q8_body`]) by [`Q8_HI_WORDS`]' `idx`: one zero-masked two-source word permute,
/// written as the one instruction (the intrinsic compiled to a permute and an AND).
///
/// # Safety
/// AVX-512 F and BW must be present.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn q8_hi_step(lower: __m512i, idx: __m512i, upper: __m512i) -> __m512d {
    // SAFETY: AVX-512 BW, present per the caller.
    unsafe { zero_masked_permute!("vpermt2w", lower, (idx, upper), 0xcccc_cccc_u32) }
}

/// Q8_0 chunk (`kcl / 32` blocks a row): each pair's block decoded into its eight steps'
/// operands (sixteen values of each row at a time, interleaved into step order, widened), then
/// the FMAs; the pairs' chains are independent, so one pair's decode overlaps another's FMAs.
/// With `HI` (`ROUND`, `R ≥ 1`, the inputs scaled by [`input_scale`]) the rounded values
/// become high words ([`hi_words`]' form, built on the bf16 words: the high half of the high
/// dword is the word shifted right by 3 with its sign kept, the low half its three low bits
/// at the top), one word permute a step puts each step's eight into place with no widening,
/// and the lanes run in the inputs' units (2^−448) for the chunk. High words are exact only
/// for finite values: where a block's `d` is not (every value then infinite, NaN or zero
/// times infinity), the kernel returns false and leaves the lanes as they were; else true.
/// (Every value of a block with a finite `d` is zero or an f32 within 2^−24..2^23, an exact
/// multiple of 2^−24: `d` at least 2^−24 where not zero, `q` an integer up to 128 in
/// magnitude.)
///
/// # Safety
/// AVX-512 F, BW, BF16 and F16C must be present; the operands as [`run`] describes
/// them (for `R = 0`, `lanes` is a packed panel of `kcl / 4` steps and `x` is not read).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,f16c")]
unsafe fn q8_body<const R: usize, const ROUND: bool, const HI: bool>(
    rows: &[&[u8]; NR],
    (kcl, ahead): (usize, &[u8]),
    x: *const f64,
    x_stride: usize,
    lanes: *mut f64,
) -> bool {
    let bb = legacy::Q8_0_BLOCK_BYTES;
    // SAFETY (whole body): every row holds `kcl / 32` blocks (checked by `chunk`); `x` holds R
    // rows of kcl values `x_stride` apart and `lanes` R·PANEL_STEP values.
    unsafe {
        let sel = [load_i32(&Q8_PAIR_LANES[0]), load_i32(&Q8_PAIR_LANES[1])];
        // A loop, not a closure (see `x_step`).
        let mut hi_sel = [_mm512_setzero_si512(); 4];
        for (v, words) in hi_sel.iter_mut().zip(&Q8_HI_WORDS) {
            *v = _mm512_loadu_si512(words.as_ptr().cast());
        }
        let mut acc = load_lanes::<R>(lanes);
        if HI {
            hi_units::<R>(&mut acc, true);
        }
        let mut carries = 0u16;
        for blk in 0..kcl / MX_VALUES {
            prefetch_part(ahead, blk, kcl / MX_VALUES);
            // The block's eight steps of inputs, once for every pair (a broadcast from memory
            // costs about half an FMA).
            let mut xs = [[_mm512_setzero_pd(); R]; 8];
            for (t, xs) in xs.iter_mut().enumerate() {
                *xs = x_step::<R>(x, x_stride, 8 * blk + t);
            }
            for z in 0..PAIRS {
                let (a, b) = (&rows[2 * z][bb * blk..], &rows[2 * z + 1][bb * blk..]);
                let (da, db) = (q8_scale(a), q8_scale(b));
                if HI {
                    // An f16 exponent field plus one carries into bit 15 exactly when it is
                    // all ones (infinity or NaN).
                    for r in [a, b] {
                        carries |= (u16_at(r, 0) & 0x7c00) + 0x0400;
                    }
                }
                let mut w = [_mm512_setzero_pd(); 8];
                for half in 0..2 {
                    let va = q8_values(a.as_ptr().add(2 + 16 * half), da);
                    let vb = q8_values(b.as_ptr().add(2 + 16 * half), db);
                    // Rounded: one word permute both interleaves the rows and makes each bf16
                    // its f32 (where `round_pair` and then an interleave would take three).
                    let words = if ROUND {
                        bf16_words(va, vb)
                    } else {
                        _mm512_setzero_si512()
                    };
                    if HI {
                        let upper = _mm512_and_si512(
                            _mm512_srai_epi16::<3>(words),
                            _mm512_set1_epi16(0x8fff_u16 as i16),
                        );
                        let lower = _mm512_slli_epi16::<13>(words);
                        for (s, idx) in hi_sel.iter().enumerate() {
                            w[4 * half + s] = q8_hi_step(lower, *idx, upper);
                        }
                        continue;
                    }
                    for i in 0..2 {
                        let v = if ROUND {
                            words_to_f32(words, &Q8_PAIR_WORDS[i])
                        } else {
                            _mm512_permutex2var_ps(va, sel[i], vb)
                        };
                        let [lo, hi] = widen_via_memory(v);
                        w[4 * half + 2 * i] = lo;
                        w[4 * half + 2 * i + 1] = hi;
                    }
                }
                for (t, (wt, xs)) in w.iter().zip(&xs).enumerate() {
                    sink::<R>((8 * blk + t, z, *wt), xs, &mut acc, lanes);
                }
            }
        }
        if carries & 0x8000 != 0 {
            // A scale is not finite, so neither are some high words: the lanes as they were.
            return false;
        }
        if HI {
            hi_units::<R>(&mut acc, false);
        }
        store_lanes(&acc, lanes);
        true
    }
}

high_words_or_widened_kernel!(
    /// Q8_0 chunk: the fused kernels of bf16-rounded matrices keep high words (`q8_body` with
    /// `HI`, the inputs scaled by [`input_scale`]) unless a block's `d` is not finite, which
    /// that kernel finds on its way (a scalar check of each scale it reads, on integer pipes
    /// the vector work leaves idle, where checking every block's scale first took a tenth of
    /// the kernel's time) and then leaves the lanes as they were; then, as for the packed
    /// panel and unrounded matrices, the chunk widens (with the lanes in the inputs' units
    /// where they came scaled).
    ///
    /// # Safety
    /// As [`q8_body`].
    q8,
    "avx512f,avx512bw,avx512bf16,f16c",
    (DirectKind::Q8_0, try),
    (q8_body::<R, true, true>, q8_body::<R, ROUND, false>)
);

/// Whether rounding to bf16 leaves every MXFP4 table value unchanged (the premise of
/// [`mxfp4_tables`]), for exponent `e`.
#[cfg(test)]
pub(super) fn mxfp4_tables_are_bf16(e: u8) -> bool {
    let d = mxfp4::e8m0_to_f32_half(e);
    mxfp4::KVALUES_DOUBLED.iter().all(|&kv| {
        let v = d * f32::from(kv);
        round_bf16_one(v).to_bits() == v.to_bits()
    })
}
