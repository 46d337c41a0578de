//! Quantized weights multiplied through per-group lookup tables, without an f32 copy.
//!
//! In the expert types of the real layouts (Q2_K, Q3_K, Q4_K, IQ2_XXS, MXFP4) every value of a
//! group (16 or 32 values sharing their scales) is one of at most 16 numbers: the decoder's
//! `d·sc·q − dmin·m` (or `db·level·sign`, `d·kvalue`) for each code `q`. A chunk of a panel's
//! rows is therefore prepared as one code byte per value and, per group, the table of those
//! numbers, computed with exactly the decoder's operations in its order, rounded to bf16 where
//! the matrix rounds, and widened to f64. Looking a code up in its table gives the very f64 the
//! dequantize-then-widen path gives, so the GEMM's products and their order, and with them the
//! bits, are unchanged. On AVX-512 the lookup is one permute per eight weights, done in
//! registers right before the FMA (`x86_lut`); elsewhere the tables fill the packed panel.

use super::{KC, NR, PANEL_STEP};
use crate::gguf::quant::rows::round_bf16_one;
use crate::gguf::quant::{f16_at, iq2xxs, kquants, mxfp4, u32_at};
use crate::gguf::GgmlType;
use crate::model::stored::StoredMatrix;

/// Steps (four columns each) in a chunk.
pub(super) const STEPS: usize = KC / 4;
/// Pairs of rows in a panel (one 512-bit register holds a pair's four lanes each).
pub(super) const PAIRS: usize = NR / 2;
/// Code bytes per pair and step: the first row's four, then the second's.
const PAIR_CODES: usize = 8;

/// A block family decoded through tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LutKind {
    Q2K,
    Q3K,
    Q4K,
    Iq2Xxs,
    Mxfp4,
}

impl LutKind {
    /// The kind of a GGML type, if it decodes through tables.
    pub(super) fn of(ty: GgmlType) -> Option<LutKind> {
        Some(match ty {
            GgmlType::Q2K => LutKind::Q2K,
            GgmlType::Q3K => LutKind::Q3K,
            GgmlType::Q4K => LutKind::Q4K,
            GgmlType::Iq2Xxs => LutKind::Iq2Xxs,
            GgmlType::Mxfp4 => LutKind::Mxfp4,
            _ => return None,
        })
    }

    /// Entries per group table (a power of two).
    pub(super) const fn entries(self) -> usize {
        match self {
            LutKind::Q2K => 4,
            LutKind::Q3K | LutKind::Iq2Xxs => 8,
            LutKind::Q4K | LutKind::Mxfp4 => 16,
        }
    }

    /// Values per group (one table).
    pub(super) const fn group(self) -> usize {
        match self {
            LutKind::Q2K | LutKind::Q3K => 16,
            LutKind::Q4K | LutKind::Iq2Xxs | LutKind::Mxfp4 => 32,
        }
    }

    /// `(values, bytes)` of one block.
    const fn block(self) -> (usize, usize) {
        match self {
            LutKind::Q2K => (256, kquants::Q2_K_BLOCK_BYTES),
            LutKind::Q3K => (256, kquants::Q3_K_BLOCK_BYTES),
            LutKind::Q4K => (256, kquants::Q4_K_BLOCK_BYTES),
            LutKind::Iq2Xxs => (256, iq2xxs::BLOCK_BYTES),
            LutKind::Mxfp4 => (32, mxfp4::BLOCK_BYTES),
        }
    }

    /// f64 table values per row of a chunk.
    pub(super) const fn tab_stride(self) -> usize {
        KC / self.group() * self.entries()
    }
}

/// One chunk (at most `KC` columns) of a panel's `NR` rows, as codes and tables.
pub(super) struct LutTile {
    pub(super) kind: LutKind,
    round_bf16: bool,
    /// `codes[z][s][0..8]`: pair `z`'s codes at step `s`, row `2z` then row `2z + 1`; where a
    /// table has at most 8 entries the second row's codes are offset by the table size, so
    /// one permute over both rows' tables picks each lane's entry.
    pub(super) codes: Vec<u8>,
    /// `tabs[q][g][e]`: row `q`'s value for code `e` in group `g` of the chunk.
    pub(super) tabs: Vec<f64>,
}

impl LutTile {
    pub(super) fn new(kind: LutKind, round_bf16: bool) -> LutTile {
        LutTile {
            kind,
            round_bf16,
            codes: vec![0; PAIRS * STEPS * PAIR_CODES],
            tabs: vec![0.0; NR * kind.tab_stride()],
        }
    }

    /// Prepares columns `kc0..kc0 + kcl` of rows `row0..row0 + live` of `sm` (rows past `live`
    /// get all-zero tables: zero weights).
    pub(super) fn prepare(
        &mut self,
        sm: &StoredMatrix<'_>,
        (row0, live): (usize, usize),
        (kc0, kcl): (usize, usize),
    ) {
        assert!(live <= NR && kcl <= KC && kcl % self.kind.group() == 0);
        #[cfg(target_arch = "x86_64")]
        {
            use crate::gguf::quant::rows::{simd_level, SimdLevel};
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
            unsafe fn wide(
                t: &mut LutTile,
                sm: &StoredMatrix<'_>,
                r: (usize, usize),
                c: (usize, usize),
            ) {
                t.prepare_body(sm, r, c)
            }
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn narrow(
                t: &mut LutTile,
                sm: &StoredMatrix<'_>,
                r: (usize, usize),
                c: (usize, usize),
            ) {
                t.prepare_body(sm, r, c)
            }
            match simd_level() {
                // SAFETY: the level says the CPU has every feature `wide` enables.
                SimdLevel::Avx512 => return unsafe { wide(self, sm, (row0, live), (kc0, kcl)) },
                // SAFETY: as above, for `narrow`'s features.
                SimdLevel::Avx2 => return unsafe { narrow(self, sm, (row0, live), (kc0, kcl)) },
                SimdLevel::Baseline => {}
            }
        }
        self.prepare_body(sm, (row0, live), (kc0, kcl))
    }

    #[inline(always)]
    fn prepare_body(&mut self, sm: &StoredMatrix<'_>, rows: (usize, usize), cols: (usize, usize)) {
        if self.round_bf16 {
            self.prepare_rows::<true>(sm, rows, cols)
        } else {
            self.prepare_rows::<false>(sm, rows, cols)
        }
    }

    /// Pair by pair: each row's codes and f32 tables block by block, the tables rounded (with
    /// `ROUND`) and widened, then the pair's codes interleaved step by step.
    #[inline(always)]
    fn prepare_rows<const ROUND: bool>(
        &mut self,
        sm: &StoredMatrix<'_>,
        (row0, live): (usize, usize),
        (kc0, kcl): (usize, usize),
    ) {
        let kind = self.kind;
        let (bv, bb) = kind.block();
        let stride = kind.tab_stride();
        let offset = if kind.entries() <= 8 {
            kind.entries() as u8
        } else {
            0
        };
        let n_tab = kcl / kind.group() * kind.entries();
        let per_block = bv / kind.group() * kind.entries();
        let mut codes = [[0u8; KC]; 2];
        let mut tab = [0f32; KC];
        for z in 0..PAIRS {
            for (half, codes) in codes.iter_mut().enumerate() {
                let q = 2 * z + half;
                let tabs = &mut self.tabs[q * stride..(q + 1) * stride];
                if q >= live {
                    tabs.fill(0.0);
                    codes.fill(0);
                    continue;
                }
                let bytes = sm.blocks(row0 + q, kc0, kcl);
                for (i, b) in bytes.chunks_exact(bb).enumerate() {
                    let c = &mut codes[i * bv..(i + 1) * bv];
                    let t = &mut tab[i * per_block..(i + 1) * per_block];
                    match kind {
                        LutKind::Q2K => q2_k(b, c, t),
                        LutKind::Q3K => q3_k(b, c, t),
                        LutKind::Q4K => q4_k(b, c, t),
                        LutKind::Iq2Xxs => iq2_xxs(b, c, t),
                        LutKind::Mxfp4 => mxfp4_block(b, c, t),
                    }
                }
                for (d, &v) in tabs.iter_mut().zip(&tab[..n_tab]) {
                    let v = if ROUND { round_bf16_one(v) } else { v };
                    *d = f64::from(v);
                }
                if half == 1 && offset != 0 {
                    codes[..kcl].iter_mut().for_each(|c| *c += offset);
                }
            }
            let pair = &mut self.codes[z * STEPS * PAIR_CODES..(z + 1) * STEPS * PAIR_CODES];
            interleave(&mut pair[..2 * kcl], &codes[0][..kcl], &codes[1][..kcl]);
        }
    }

    /// The f64 weight of row `q` at chunk column `col` (the definition the kernels follow).
    fn weight(&self, q: usize, col: usize) -> f64 {
        let kind = self.kind;
        let (z, half, s, j) = (q / 2, q % 2, col / 4, col % 4);
        let code = self.codes[(z * STEPS + s) * PAIR_CODES + 4 * half + j];
        let e = usize::from(code) & (kind.entries() - 1);
        self.tabs[q * kind.tab_stride() + col / kind.group() * kind.entries() + e]
    }

    /// The packed panel of the prepared chunk: `wp[s][q][j]` for its `steps` steps.
    pub(super) fn expand(&self, path: super::KernelPath, wp: &mut [f64], steps: usize) {
        assert!(steps <= STEPS && wp.len() >= steps * PANEL_STEP);
        #[cfg(target_arch = "x86_64")]
        if path == super::KernelPath::Avx512 {
            return super::x86_lut::expand(self, wp, steps);
        }
        let _ = path;
        for s in 0..steps {
            for q in 0..NR {
                for j in 0..4 {
                    wp[s * PANEL_STEP + 4 * q + j] = self.weight(q, 4 * s + j);
                }
            }
        }
    }

    /// `lanes[r][q][j] += Σ_s x[r][4s + j] · w[q][4s + j]` over the prepared chunk, the
    /// definition of the fused kernels (the portable path's tests compare against it).
    #[cfg(test)]
    pub(super) fn fma_reference(
        &self,
        mr: usize,
        (x, x_stride): (&[f64], usize),
        steps: usize,
        lanes: &mut [f64],
    ) {
        for r in 0..mr {
            for q in 0..NR {
                for j in 0..4 {
                    let acc = &mut lanes[r * PANEL_STEP + 4 * q + j];
                    for s in 0..steps {
                        *acc += x[r * x_stride + 4 * s + j] * self.weight(q, 4 * s + j);
                    }
                }
            }
        }
    }
}

/// `dst` = `a` and `b` interleaved four bytes at a time (`a[0..4], b[0..4], a[4..8], …`):
/// sixty-four bytes of each per two permutes on AVX-512, the rest four at a time.
fn interleave(dst: &mut [u8], a: &[u8], b: &[u8]) {
    assert!(a.len() == b.len() && dst.len() == 2 * a.len() && a.len() % 4 == 0);
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if super::KernelPath::Avx512.is_supported() {
        done = a.len() - a.len() % 64;
        // SAFETY: AVX-512F was detected just above; the lengths were checked at the top.
        unsafe { super::x86_lut::interleave64(&mut dst[..2 * done], &a[..done], &b[..done]) };
    }
    for ((d, x), y) in dst[2 * done..]
        .chunks_exact_mut(8)
        .zip(a[done..].chunks_exact(4))
        .zip(b[done..].chunks_exact(4))
    {
        d[..4].copy_from_slice(x);
        d[4..].copy_from_slice(y);
    }
}

/// The codes' integers `first, first + 1, …` as f32, hidden from the optimiser: the tables must
/// multiply by them at run time, as the decoders do (folding `x · 1` or `x · −1` would change
/// a NaN's sign or payload).
#[inline(always)]
fn code_values<const N: usize>(first: i8) -> [f32; N] {
    std::hint::black_box(std::array::from_fn(|i| f32::from(first + i as i8)))
}

/// Q2_K (see `kquants::dequantize_q2_k_block`): 16 groups of 16, table `dl·q − ml`, q < 4.
#[inline(always)]
fn q2_k(b: &[u8], codes: &mut [u8], tab: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    let levels = code_values::<4>(0);
    for g in 0..16 {
        let sc = scales[g];
        let dl = d * f32::from(sc & 0x0f);
        let ml = dmin * f32::from(sc >> 4);
        for (t, &c) in tab[4 * g..4 * g + 4].iter_mut().zip(&levels) {
            *t = dl * c - ml;
        }
    }
    for h in 0..2 {
        for s in 0..4 {
            let dst = &mut codes[128 * h + 32 * s..128 * h + 32 * s + 32];
            for (y, &q) in dst.iter_mut().zip(&qs[32 * h..32 * h + 32]) {
                *y = (q >> (2 * s)) & 3;
            }
        }
    }
}

/// Q3_K (see `kquants::dequantize_q3_k_block`): code `low | high << 2` stands for `code − 4`.
#[inline(always)]
fn q3_k(b: &[u8], codes: &mut [u8], tab: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let scales = kquants::q3_k_scales(&b[96..108]);
    let d = f16_at(b, 108);
    let levels = code_values::<8>(-4);
    for (g, &sc) in scales.iter().enumerate() {
        let dl = d * f32::from(sc);
        for (t, &c) in tab[8 * g..8 * g + 8].iter_mut().zip(&levels) {
            *t = dl * c;
        }
    }
    for h in 0..2 {
        for s in 0..4 {
            let dst = &mut codes[128 * h + 32 * s..128 * h + 32 * s + 32];
            for ((y, &q), &m) in dst.iter_mut().zip(&qs[32 * h..32 * h + 32]).zip(hmask) {
                *y = ((q >> (2 * s)) & 3) | (((m >> (4 * h + s)) & 1) << 2);
            }
        }
    }
}

/// Q4_K (see `kquants::dequantize_q4_k_block`): 8 groups of 32, table `d1·q − m1`, q < 16.
#[inline(always)]
fn q4_k(b: &[u8], codes: &mut [u8], tab: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    let levels = code_values::<16>(0);
    for g in 0..8 {
        let (sc, m) = kquants::scale_min_k4(g, scales);
        let d1 = d * f32::from(sc);
        let m1 = dmin * f32::from(m);
        for (t, &c) in tab[16 * g..16 * g + 16].iter_mut().zip(&levels) {
            *t = d1 * c - m1;
        }
        let (c, shift) = (g / 2, 4 * (g % 2));
        for (y, &q) in codes[32 * g..32 * g + 32]
            .iter_mut()
            .zip(&qs[32 * c..32 * c + 32])
        {
            *y = (q >> shift) & 0x0f;
        }
    }
}

/// IQ2_XXS (see `iq2xxs::dequantize_block`): code `level | sign << 2`, value
/// `±(db · level)` (level index 3 never occurs).
#[inline(always)]
fn iq2_xxs(b: &[u8], codes: &mut [u8], tab: &mut [f32]) {
    let d = f16_at(b, 0);
    for group in 0..8 {
        let base = 2 + 8 * group;
        let aux = u32_at(b, base + 4);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
        let t = &mut tab[8 * group..8 * group + 8];
        for (lv, &level) in iq2xxs::GRID_LEVELS.iter().enumerate() {
            // The decoders' `· ±1` compiles to a sign flip (a NaN's sign flips too).
            t[lv] = db * level;
            t[4 + lv] = -(db * level);
        }
        t[3] = 0.0;
        t[7] = 0.0;
        for l in 0..4 {
            let grid = IQ2XXS_LEVEL_CODES[usize::from(b[base + l])];
            let signs = IQ2XXS_SIGN_CODES[((aux >> (7 * l)) & 0x7f) as usize];
            let at = 32 * group + 8 * l;
            codes[at..at + 8].copy_from_slice(&(grid | signs).to_le_bytes());
        }
    }
}

/// IQ2_XXS grid entry -> its eight level indices, one byte each.
static IQ2XXS_LEVEL_CODES: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut j = 0;
        while j < 8 {
            t[i] |= (((iq2xxs::GRID_2BIT[i] >> (2 * j)) & 3) as u64) << (8 * j);
            j += 1;
        }
        i += 1;
    }
    t
};

/// IQ2_XXS 7-bit sign code -> bit 2 of each of the eight bytes set where the value is
/// negative (the eighth sign makes the count even, as `iq2xxs::sign_bits`).
static IQ2XXS_SIGN_CODES: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut c = 0;
    while c < 128 {
        let signs = if (c as u32).count_ones() % 2 == 1 {
            c | 0x80
        } else {
            c
        };
        let mut j = 0;
        while j < 8 {
            t[c] |= (((signs >> j) & 1) as u64) << (8 * j + 2);
            j += 1;
        }
        c += 1;
    }
    t
};

/// MXFP4 (see `mxfp4::dequantize_block`): one group of 32, table `d · kvalue`.
#[inline(always)]
fn mxfp4_block(b: &[u8], codes: &mut [u8], tab: &mut [f32]) {
    let d = mxfp4::e8m0_to_f32_half(b[0]);
    for (t, &kv) in tab[..16].iter_mut().zip(&mxfp4::KVALUES_DOUBLED) {
        *t = d * f32::from(kv);
    }
    for (j, &q) in b[1..17].iter().enumerate() {
        codes[j] = q & 0x0f;
        codes[j + 16] = q >> 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::quant::sample::random_blocks;
    use std::borrow::Cow;

    const KINDS: [GgmlType; 5] = [
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Iq2Xxs,
        GgmlType::Mxfp4,
    ];

    /// A matrix of `rows × cols` random blocks of `ty`, with some scales set to NaN and
    /// infinity (MXFP4's E8M0 scale has neither).
    fn matrix(ty: GgmlType, rows: usize, cols: usize, round: bool) -> StoredMatrix<'static> {
        let (bv, bb, _) = crate::gguf::quant::block_decoder(ty).expect("decodable");
        let mut bytes = random_blocks(ty, rows * cols / bv, 3).expect("blocks");
        let scale_at = match ty {
            GgmlType::Q2K => Some(80),
            GgmlType::Q3K => Some(108),
            GgmlType::Q4K | GgmlType::Iq2Xxs | GgmlType::Q8_0 => Some(0),
            _ => None,
        };
        if let Some(at) = scale_at {
            // f16 NaN with a payload, then +inf, in two blocks.
            bytes[at..at + 2].copy_from_slice(&0x7e01u16.to_le_bytes());
            bytes[bb + at..bb + at + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
        }
        StoredMatrix::new("w", ty, rows, cols, Cow::Owned(bytes), round).expect("valid")
    }

    #[test]
    fn tables_give_the_decoders_values() {
        for ty in KINDS {
            let kind = LutKind::of(ty).expect("table kind");
            for round in [false, true] {
                let (rows, cols) = (NR, 2 * KC);
                let sm = matrix(ty, rows, cols, round);
                let mut tile = LutTile::new(kind, round);
                for kc0 in (0..cols).step_by(KC) {
                    tile.prepare(&sm, (0, rows), (kc0, KC));
                    for q in 0..rows {
                        let mut want = vec![0f32; KC];
                        sm.decode(q, kc0, &mut want);
                        for (col, w) in want.iter().enumerate() {
                            assert_eq!(
                                tile.weight(q, col).to_bits(),
                                f64::from(*w).to_bits(),
                                "{} round {round} row {q} col {}",
                                ty.name(),
                                kc0 + col
                            );
                        }
                    }
                }
                // Rows past `live` are zero weights.
                tile.prepare(&sm, (0, 3), (0, KC));
                assert!((3 * KC..NR * KC).all(|i| tile.weight(i / KC, i % KC) == 0.0));
            }
        }
    }

    #[test]
    fn every_path_expands_and_fuses_like_the_definition() {
        let x: Vec<f64> = (0..MR_ROWS * KC)
            .map(|i| f64::from(crate::num::bf16_round((i as f32 * 0.37).sin())))
            .collect();
        for ty in KINDS {
            let kind = LutKind::of(ty).expect("table kind");
            let sm = matrix(ty, NR, KC, true);
            let mut tile = LutTile::new(kind, true);
            tile.prepare(&sm, (0, NR), (0, KC));
            for path in super::super::supported_paths() {
                let mut wp = vec![0f64; STEPS * PANEL_STEP];
                tile.expand(path, &mut wp, STEPS);
                for s in 0..STEPS {
                    for q in 0..NR {
                        for j in 0..4 {
                            let (got, want) =
                                (wp[s * PANEL_STEP + 4 * q + j], tile.weight(q, 4 * s + j));
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{} {}",
                                ty.name(),
                                path.name()
                            );
                        }
                    }
                }
            }
            #[cfg(target_arch = "x86_64")]
            if super::super::KernelPath::Avx512.is_supported() {
                for mr in 1..=MR_ROWS {
                    let mut want = vec![0.5f64; mr * PANEL_STEP];
                    let mut got = want.clone();
                    tile.fma_reference(mr, (&x, KC), STEPS, &mut want);
                    super::super::x86_lut::fused_rows(&tile, mr, (&x, KC), STEPS, &mut got);
                    let same = want
                        .iter()
                        .zip(&got)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{} fused with {mr} rows", ty.name());
                }
            }
        }
    }

    /// Input rows of the fused kernels.
    const MR_ROWS: usize = super::super::MR;

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn mxfp4_tables_are_already_bf16_for_every_exponent() {
        assert!((0..=255u8).all(super::super::x86_direct::mxfp4_tables_are_bf16));
    }

    /// The definition of a direct kernel's chunk: `lanes[r][q][j] += x[r][4s + j] · w[q][4s + j]`
    /// for `mr` input rows (`KC` apart in `x`) and the `NR` rows of `w` (`kcl` values each),
    /// step by step in increasing `s`.
    fn add_definition(lanes: &mut [f64], mr: usize, x: &[f64], (w, kcl): (&[f32], usize)) {
        for r in 0..mr {
            for q in 0..NR {
                for j in 0..4 {
                    let acc = &mut lanes[r * PANEL_STEP + 4 * q + j];
                    for s in 0..kcl / 4 {
                        *acc += x[r * KC + 4 * s + j] * f64::from(w[q * kcl + 4 * s + j]);
                    }
                }
            }
        }
    }

    /// The direct kernels against the definition (the decoder's values, widened, summed lane
    /// by lane in increasing step; the packed panel of those values): the K-quants, IQ2_XXS
    /// and Q8_0 with NaN (quiet and signalling), infinite, zero and subnormal scales, MXFP4 over every E8M0 exponent (the f64 and the f32 table
    /// routes), MXFP4 and Q8_0 also in ragged chunks, with and without bf16 rounding, for 1 to
    /// `MR` input rows.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn direct_kernels_match_the_definition() {
        use super::super::x86_direct::{chunk, expand, input_scale, supported, DirectKind};
        if !supported() {
            return;
        }
        let x: Vec<f64> = (0..MR_ROWS * KC)
            .map(|i| f64::from(crate::num::bf16_round((i as f32 * 0.37).sin() * 3.0)))
            .collect();
        for ty in [
            GgmlType::Q2K,
            GgmlType::Q3K,
            GgmlType::Q4K,
            GgmlType::Iq2Xxs,
            GgmlType::Mxfp4,
            GgmlType::Q8_0,
        ] {
            let dk = DirectKind::of(ty).expect("direct kind");
            let (_, bb, _) = crate::gguf::quant::block_decoder(ty).expect("decodable");
            for round in [false, true] {
                // 8 chunks of NR rows.
                let cols = 8 * KC;
                let sm = matrix(ty, NR, cols, round);
                let mut all: Vec<u8> = (0..NR)
                    .flat_map(|q| sm.blocks(q, 0, cols).to_vec())
                    .collect();
                let mut put = |block: usize, at: usize, v: u16| {
                    all[block * bb + at..block * bb + at + 2].copy_from_slice(&v.to_le_bytes())
                };
                match ty {
                    GgmlType::Mxfp4 => {}
                    // Past `matrix`'s NaN and infinity: a signalling NaN, a negative NaN,
                    // signed zeros, an f16 subnormal.
                    _ => {
                        let (d, d2) = match ty {
                            GgmlType::Q2K => (80, 82),
                            GgmlType::Q3K => (108, 108),
                            GgmlType::Q4K => (0, 2),
                            _ => (0, 0),
                        };
                        put(2, d, 0x7c01);
                        put(3, d2, 0xfe00);
                        put(4, d, 0x0000);
                        put(5, d2, 0x8000);
                        put(6, d, 0x0001);
                    }
                }
                if ty == GgmlType::Mxfp4 {
                    // Block i's exponent runs through every value, in every row position.
                    for (i, b) in all.chunks_exact_mut(bb).enumerate() {
                        b[0] = (i * 7 % 256) as u8;
                    }
                }
                let sm =
                    StoredMatrix::new("w", ty, NR, cols, Cow::Owned(all), round).expect("valid");
                let kcls: &[usize] = match dk {
                    DirectKind::Q2K | DirectKind::Q3K | DirectKind::Q4K | DirectKind::Iq2Xxs => {
                        &[KC]
                    }
                    _ => &[KC, 32, 96, 224],
                };
                for kc0 in (0..cols).step_by(KC) {
                    for &kcl in kcls {
                        let mut w = vec![0f32; NR * kcl];
                        for (q, row) in w.chunks_exact_mut(kcl).enumerate() {
                            sm.decode(q, kc0, row);
                        }
                        let rows: [&[u8]; NR] = std::array::from_fn(|q| sm.blocks(q, kc0, kcl));
                        let mut wp = vec![0f64; kcl / 4 * PANEL_STEP];
                        expand(dk, round, &rows, kcl, &mut wp);
                        let panel_ok = (0..kcl / 4).all(|s| {
                            (0..NR * 4).all(|qj| {
                                let want = f64::from(w[qj / 4 * kcl + 4 * s + qj % 4]);
                                wp[s * PANEL_STEP + qj].to_bits() == want.to_bits()
                            })
                        });
                        assert!(
                            panel_ok,
                            "{} round {round} chunk {kc0} kcl {kcl} panel",
                            ty.name()
                        );
                        let scale = input_scale(dk, round);
                        let xs: Vec<f64> = x.iter().map(|v| v * scale).collect();
                        for mr in 1..=MR_ROWS {
                            let mut want = vec![0.5f64; mr * PANEL_STEP];
                            let mut got = want.clone();
                            add_definition(&mut want, mr, &x, (&w, kcl));
                            chunk(dk, round, &rows, (kcl, &[]), mr, (&xs, KC), &mut got);
                            let same = want
                                .iter()
                                .zip(&got)
                                .all(|(a, b)| a.to_bits() == b.to_bits());
                            assert!(
                                same,
                                "{} round {round} chunk {kc0} kcl {kcl} rows {mr}",
                                ty.name()
                            );
                        }
                    }
                }
            }
        }
    }

    /// Inputs at the edges of f32's range, `MR_ROWS` rows of `KC`: row 0 f32's largest and
    /// smallest (subnormal) magnitudes, row 1 zeros, row 2 infinities and a NaN among ordinary
    /// values, row 3 magnitudes from 2^−100 to 2^100 that round at every step; signs mixed.
    fn extreme_inputs() -> Vec<f64> {
        (0..MR_ROWS * KC)
            .map(|i| {
                let (r, c) = (i / KC, i % KC);
                let sign = if (c / 4) % 3 == 0 { -1.0 } else { 1.0 };
                let v = match r {
                    0 => match c % 4 {
                        0 => f32::MAX,
                        1 => f32::from_bits(1 + (c as u32 % 5)),
                        2 => f32::MAX / 3.0,
                        _ => f32::MIN_POSITIVE / 7.0,
                    },
                    1 => 0.0,
                    2 => match (c % 4, c / 4) {
                        (0, 5) => f32::INFINITY,
                        (1, 9) => f32::NAN,
                        (2, 3) | (2, 40) => f32::NEG_INFINITY,
                        _ => (c as f32 * 0.61).cos(),
                    },
                    _ => (c as f32 * 0.37).sin() * 2f32.powi((c as i32 * 37) % 200 - 100),
                };
                f64::from(sign * v)
            })
            .collect()
    }

    /// Q4_K's high-word kernel (bf16-rounded matrices with finite scales: the inputs scaled by
    /// 2^448, the weights held as `w · 2^−896`) against the definition at the edges of its
    /// range: [`extreme_inputs`], lanes starting at signed zeros and 1e30, zero, negative-zero,
    /// f16-subnormal and largest-f16 scales and mins, and a row of infinite scales beside finite
    /// ones in one chunk (the widened route, its lanes in the inputs' units), 1 to `MR` rows.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn q4k_high_words_keep_the_bits_at_the_extremes() {
        high_words_at_the_extremes(GgmlType::Q4K, |b, (d, m)| {
            b[0..2].copy_from_slice(&d.to_le_bytes());
            b[2..4].copy_from_slice(&m.to_le_bytes());
        });
    }

    /// As [`q4k_high_words_keep_the_bits_at_the_extremes`], for Q3_K's `d` (the same edges).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn q3k_high_words_keep_the_bits_at_the_extremes() {
        high_words_at_the_extremes(GgmlType::Q3K, |b, (d, _)| {
            b[108..110].copy_from_slice(&d.to_le_bytes());
        });
    }

    /// As [`q4k_high_words_keep_the_bits_at_the_extremes`], for Q8_0's `d` (every block of a
    /// chunk).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn q8_0_high_words_keep_the_bits_at_the_extremes() {
        high_words_at_the_extremes(GgmlType::Q8_0, |b, (d, _)| {
            b[0..2].copy_from_slice(&d.to_le_bytes());
        });
    }

    /// As [`q4k_high_words_keep_the_bits_at_the_extremes`], for Q2_K's `d` and `dmin`.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn q2k_high_words_keep_the_bits_at_the_extremes() {
        high_words_at_the_extremes(GgmlType::Q2K, |b, (d, m)| {
            b[80..82].copy_from_slice(&d.to_le_bytes());
            b[82..84].copy_from_slice(&m.to_le_bytes());
        });
    }

    /// As [`q4k_high_words_keep_the_bits_at_the_extremes`], for IQ2_XXS's `d` (the same edges).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn iq2xxs_high_words_keep_the_bits_at_the_extremes() {
        high_words_at_the_extremes(GgmlType::Iq2Xxs, |b, (d, _)| {
            b[0..2].copy_from_slice(&d.to_le_bytes());
        });
    }

    /// The high-word kernel of `ty` against the definition, chunk `c > 0`'s every block given
    /// the f16 scale pair `(d, dmin)` number `c − 1` by `put`, and one row of chunk 5 an
    /// infinite `d` in its last block.
    #[cfg(target_arch = "x86_64")]
    fn high_words_at_the_extremes(ty: GgmlType, put: fn(&mut [u8], (u16, u16))) {
        use super::super::x86_direct::{chunk, input_scale, panel, supported, DirectKind};
        if !supported() {
            return;
        }
        let x = extreme_inputs();
        let dk = DirectKind::of(ty).expect("direct kind");
        let scale = input_scale(dk, true);
        assert_eq!(scale, 2f64.powi(448));
        let xs: Vec<f64> = x.iter().map(|v| v * scale).collect();
        let (bv, bb, _) = crate::gguf::quant::block_decoder(ty).expect("decodable");
        let cols = 6 * KC;
        let mut all = random_blocks(ty, NR * cols / bv, 5).expect("blocks");
        assert_eq!(all.len(), NR * cols / bv * bb);
        // (d, dmin) of chunk c's rows: chunk 0 as drawn, then the edges.
        let edges: [(u16, u16); 5] = [
            (0x7bff, 0x7bff),
            (0x0001, 0x8001),
            (0x0000, 0x3c00),
            (0x8000, 0x0000),
            (0xfbff, 0x0400),
        ];
        for (i, b) in all.chunks_exact_mut(bb).enumerate() {
            // Row q, chunk c (blocks of `bv` values, `cols / bv` a row).
            let (q, c) = (i / (cols / bv), i % (cols / bv) * bv / KC);
            if c == 0 {
                continue;
            }
            let (d, m) = edges[c - 1];
            // Row 7's last block of chunk 5 (its only one for the K-quants) infinite, the
            // blocks before it finite: a chunk's every block decides its route.
            let last = (i % (cols / bv) * bv) % KC == KC - bv;
            let (d, m) = if c == 5 && q == 7 && last {
                (0x7c00, m)
            } else {
                (d, m)
            };
            put(b, (d, m));
        }
        let sm = StoredMatrix::new("w", ty, NR, cols, Cow::Owned(all), true).expect("valid");
        let init = [0.0, -0.0, 0.5, 1e30];
        for kc0 in (0..cols).step_by(KC) {
            let mut w = vec![0f32; NR * KC];
            for (q, row) in w.chunks_exact_mut(KC).enumerate() {
                sm.decode(q, kc0, row);
            }
            let rows: [&[u8]; NR] = std::array::from_fn(|q| sm.blocks(q, kc0, KC));
            for mr in 1..=MR_ROWS {
                let mut want: Vec<f64> =
                    (0..mr * PANEL_STEP).map(|i| init[i / PANEL_STEP]).collect();
                let mut got = want.clone();
                add_definition(&mut want, mr, &x, (&w, KC));
                chunk(dk, true, &rows, (KC, &[]), mr, (&xs, KC), &mut got);
                for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{} chunk {kc0} rows {mr} lane {i}: {a:e} vs {b:e}",
                        ty.name()
                    );
                }
            }
        }
        // Whole panels: the first five chunks (every scale finite: for the K-quants and
        // IQ2_XXS the lanes stay in the high words' units from the first chunk to the last)
        // and all six (one infinite scale: chunk by chunk, each on its own route), the next
        // panel's bytes to prefetch, each chunk's inputs as the GEMM lays them out.
        for chunks in [5, 6] {
            let cols = chunks * KC;
            let rows: [&[u8]; NR] = std::array::from_fn(|q| sm.blocks(q, 0, cols));
            for mr in 1..=MR_ROWS {
                let mut want: Vec<f64> =
                    (0..mr * PANEL_STEP).map(|i| init[i / PANEL_STEP]).collect();
                let mut got = want.clone();
                let mut xp = Vec::with_capacity(mr * cols);
                for kc0 in (0..cols).step_by(KC) {
                    let mut w = vec![0f32; NR * KC];
                    for (q, row) in w.chunks_exact_mut(KC).enumerate() {
                        sm.decode(q, kc0, row);
                    }
                    add_definition(&mut want, mr, &x, (&w, KC));
                    xp.extend_from_slice(&xs[..mr * KC]);
                }
                panel(dk, true, &rows, (cols, rows[3]), mr, &xp, &mut got);
                for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{} panel of {chunks} chunks rows {mr} lane {i}: {a:e} vs {b:e}",
                        ty.name()
                    );
                }
            }
        }
    }

    /// MXFP4's scaled accumulators (every scale below `MX_F32_FROM`, the lanes in units of the
    /// block's scale) against the definition at the edges of their range: exponents 0 and 252
    /// side by side in both orders and everything between, inputs at f32's largest and
    /// smallest (subnormal) magnitudes, signed zeros into a negative-zero lane, infinities and
    /// a NaN, magnitudes from 2^−100 to 2^100 that round at every step, whole and ragged
    /// chunks, 1 to `MR` input rows; and the same with some blocks' exponents at 253..256
    /// (the rows' own tables) amid the others, so that chunks go from scaled lanes to plain
    /// ones and back.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn mxfp4_scaled_lanes_keep_the_bits_at_the_extremes() {
        use super::super::x86_direct::{chunk, supported, DirectKind};
        if !supported() {
            return;
        }
        let x = extreme_inputs();
        let init = [0.0, -0.0, 0.5, 1e30];
        let ty = GgmlType::Mxfp4;
        let dk = DirectKind::of(ty).expect("direct kind");
        let (_, bb, _) = crate::gguf::quant::block_decoder(ty).expect("decodable");
        let cols = 8 * KC;
        for (round, big) in [(false, false), (true, false), (false, true), (true, true)] {
            let base = matrix(ty, NR, cols, round);
            let mut all: Vec<u8> = (0..NR)
                .flat_map(|q| base.blocks(q, 0, cols).to_vec())
                .collect();
            for (i, b) in all.chunks_exact_mut(bb).enumerate() {
                b[0] = match i % 6 {
                    _ if big && i % 23 == 9 => 253 + (i % 3) as u8,
                    0 | 3 => 0,
                    1 | 2 => 252,
                    _ => (i * 7 % 253) as u8,
                };
            }
            let sm = StoredMatrix::new("w", ty, NR, cols, Cow::Owned(all), round).expect("valid");
            for kc0 in (0..cols).step_by(KC) {
                for kcl in [KC, 32, 96, 224] {
                    let mut w = vec![0f32; NR * kcl];
                    for (q, row) in w.chunks_exact_mut(kcl).enumerate() {
                        sm.decode(q, kc0, row);
                    }
                    let rows: [&[u8]; NR] = std::array::from_fn(|q| sm.blocks(q, kc0, kcl));
                    for mr in 1..=MR_ROWS {
                        let mut want: Vec<f64> =
                            (0..mr * PANEL_STEP).map(|i| init[i / PANEL_STEP]).collect();
                        let mut got = want.clone();
                        add_definition(&mut want, mr, &x, (&w, kcl));
                        chunk(dk, round, &rows, (kcl, &[]), mr, (&x, KC), &mut got);
                        for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                            assert_eq!(
                                a.to_bits(),
                                b.to_bits(),
                                "round {round} big {big} chunk {kc0} kcl {kcl} rows {mr} lane {i}: {a:e} vs {b:e}"
                            );
                        }
                    }
                }
            }
        }
    }
}
