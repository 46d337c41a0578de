//! The oracle's GEMM, `y[m, n] = x[m, k] · w[n, k]^T`: cache-blocked, SIMD microkernels chosen at
//! run time (AVX-512, AVX2 + FMA, NEON, or portable Rust), rayon over blocks of outputs, and
//! weights either as f32 values or as the file's own blocks ([`StoredMatrix`], never a whole f32
//! copy of the matrix: a panel's rows are decoded into a small buffer; on AVX-512 the expert
//! types Q2_K, Q3_K, Q4_K, IQ2_XXS, MXFP4 and Q8_0 are decoded block by block in registers
//! straight into the FMAs or the packed panel, see `x86_direct`; every table type elsewhere
//! goes chunk by chunk through per-group lookup tables, see `lut`).
//!
//! # The reduction order
//!
//! Every output element is reduced in this one order, whatever the kernel path, the SIMD width,
//! the blocking or the thread count; it is the order of [`super::ops::dot_f64`]:
//!
//! 1. `k4 = k − k mod 4`. Lane `j` (`0..4`) sums in f64, starting from +0, the products
//!    `x[4i + j] · w[4i + j]` for `i = 0, 1, …, k4/4 − 1`, in increasing `i`.
//! 2. `tail` sums the products of columns `k4..k` in increasing order, in f64 from +0.
//! 3. `y = f32(((lane0 + lane1) + (lane2 + lane3)) + tail)`, then rounded to bf16 (nearest even)
//!    for GEMM-bf16.
//!
//! A product of two f32 values is exact in f64 (24 + 24 significand bits, exponents far inside
//! the f64 range), so a fused multiply-add `fma(x, w, acc)` rounds once, exactly as
//! `acc + x·w` does: the FMA kernels and the portable multiply-then-add give the same bits.
//! Blocking the columns into chunks only pauses each lane's running sum (kept in f64 between
//! chunks), and splitting the outputs over threads never splits one output, so neither changes
//! a bit. `tests/oracle_kernels.rs` runs the tiny goldens through every supported path and 1, 2
//! and 16 threads and requires identical reports.

mod lut;
#[cfg(target_arch = "aarch64")]
mod neon;
mod path;
pub mod roofline;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_direct;
#[cfg(target_arch = "x86_64")]
mod x86_lut;

pub use path::{
    active_path, best_path, kernel_path_note, set_kernel_path, supported_paths, KernelPath,
    UnsupportedPath, ALL_PATHS, KERNEL_ENV,
};

use crate::model::stored::StoredMatrix;
use crate::num::bf16_round;
use rayon::prelude::*;
use std::ops::Range;

/// Outputs per packed weight panel: six 512-bit registers of two outputs' four lanes each.
pub const NR: usize = 12;
/// Input rows per microkernel call.
pub const MR: usize = 4;
/// Columns per packed chunk: a multiple of every GGML block size (32 and 256), and 12 outputs
/// × 256 columns of f64 = 24 KiB, half an L1 data cache.
pub const KC: usize = 256;
/// f64 values per packed step of a panel (NR outputs × 4 lanes).
const PANEL_STEP: usize = NR * 4;
/// Outputs per rayon task with `m` input rows: 4 panels for at most `MR` rows (a task
/// streams its weights once; many tasks keep the threads balanced), 16 for more, so that a
/// chunk of inputs brought into L2 serves 16 panels (see [`Job::passes`]).
const fn task_width(m: usize) -> usize {
    if m <= MR {
        4 * NR
    } else {
        16 * NR
    }
}
/// Input rows per pass over a task's weights (bounds the lane buffer to 64 × 48 × 4 f64).
const MC: usize = 64;
/// Below this many multiply-adds a GEMM runs on the calling thread.
const PAR_MIN_MACS: usize = 1 << 16;

/// The weight operand of a GEMM: `n` rows of `k` values.
#[derive(Clone, Copy)]
pub enum WeightRows<'a> {
    /// Row-major f32 values (already in their stored precision).
    F32(&'a [f32]),
    /// A matrix in its file's encoding, decoded chunk by chunk.
    Stored(&'a StoredMatrix<'a>),
}

impl WeightRows<'_> {
    /// Whether the operand is `n × k`.
    fn has_shape(&self, n: usize, k: usize) -> bool {
        match self {
            WeightRows::F32(w) => n.checked_mul(k) == Some(w.len()),
            WeightRows::Stored(s) => s.rows() == n && s.cols() == k,
        }
    }

    /// Rows of `k` values the operand holds (`None` when its length is not a whole number of
    /// rows).
    fn n_rows(&self, k: usize) -> Option<usize> {
        match self {
            WeightRows::F32(w) if k == 0 => w.is_empty().then_some(0),
            WeightRows::F32(w) => (w.len() % k == 0).then_some(w.len() / k),
            WeightRows::Stored(s) => (s.cols() == k).then_some(s.rows()),
        }
    }
}

/// `y[m, n] = x[m, k] · w[n, k]^T` in the reduction order of the module docs, f32 output, or
/// bf16-rounded output with `round_bf16`. Panics if the operand lengths disagree with `m`, `k`
/// and `n` (a caller bug: shapes are checked where parameters are fetched).
pub fn gemm(
    x: &[f32],
    m: usize,
    k: usize,
    w: WeightRows<'_>,
    n: usize,
    round_bf16: bool,
) -> Vec<f32> {
    gemm_on(active_path(), x, m, k, w, n, round_bf16)
}

/// [`gemm`] against weight rows `rows` only: `y[m, rows.len()]` (one group of a grouped
/// projection). Panics if `w` has fewer rows.
pub fn gemm_range(
    x: &[f32],
    m: usize,
    k: usize,
    w: WeightRows<'_>,
    rows: Range<usize>,
    round_bf16: bool,
) -> Vec<f32> {
    let total = w.n_rows(k);
    assert!(
        rows.start <= rows.end && total.is_some_and(|t| rows.end <= t),
        "gemm rows {rows:?} outside a weight of {total:?} rows of {k}"
    );
    run_job(active_path(), x, m, k, w, rows, round_bf16)
}

/// [`gemm`] on a given kernel path (benches and the path-identity tests). Panics if the path is
/// not supported on this CPU.
pub fn gemm_on(
    path: KernelPath,
    x: &[f32],
    m: usize,
    k: usize,
    w: WeightRows<'_>,
    n: usize,
    round_bf16: bool,
) -> Vec<f32> {
    assert!(w.has_shape(n, k), "gemm weight disagrees with k {k}, n {n}");
    run_job(path, x, m, k, w, 0..n, round_bf16)
}

/// Runs one GEMM: packs the inputs, splits the outputs into tasks, gathers their blocks.
fn run_job(
    path: KernelPath,
    x: &[f32],
    m: usize,
    k: usize,
    w: WeightRows<'_>,
    rows: Range<usize>,
    round_bf16: bool,
) -> Vec<f32> {
    assert!(
        m.checked_mul(k) == Some(x.len()),
        "gemm input of {} values is not m {m} x k {k}",
        x.len()
    );
    let n = rows.len();
    assert!(
        path.is_supported(),
        "kernel path {} is not supported here",
        path.name()
    );
    let mut y = vec![0f32; m * n];
    if m == 0 || n == 0 {
        return y;
    }
    let k4 = k - k % 4;
    // The inputs once in f64 (exact), chunk-major: chunk c (columns c·KC..) holds every row's
    // values contiguously, so a microkernel's rows sit one chunk apart rather than a whole
    // (power-of-two) row apart, which would map them onto the same L1 sets.
    let mut xp: Vec<f64> = Vec::with_capacity(m * k4);
    for kc0 in (0..k4).step_by(KC) {
        let kcl = KC.min(k4 - kc0);
        for i in 0..m {
            xp.extend(
                x[i * k + kc0..i * k + kc0 + kcl]
                    .iter()
                    .map(|&v| f64::from(v)),
            );
        }
    }
    let xs = fused_inputs(path, w, m, &xp);
    let job = Job {
        path,
        x,
        xp: &xp,
        xf: if xs.is_empty() { &xp } else { &xs },
        m,
        k,
        k4,
        w,
        row0: rows.start,
        n,
        nb: task_width(m),
        round_bf16,
    };
    let n_blocks = n.div_ceil(job.nb);
    let blocks: Vec<Vec<f32>> = if m.saturating_mul(n).saturating_mul(k) < PAR_MIN_MACS {
        (0..n_blocks).map(|b| job.block(b)).collect()
    } else {
        (0..n_blocks)
            .into_par_iter()
            .map(|b| job.block(b))
            .collect()
    };
    for (b, blk) in blocks.iter().enumerate() {
        let lo = b * job.nb;
        let width = blk.len() / m;
        for i in 0..m {
            y[i * n + lo..i * n + lo + width].copy_from_slice(&blk[i * width..(i + 1) * width]);
        }
    }
    y
}

/// The inputs `xp` scaled by what the fused direct kernel of `w` takes them in
/// (`x86_direct::input_scale`) where that is not 1 and the GEMM runs fused kernels (AVX-512,
/// at most `MR` rows), else nothing.
fn fused_inputs(path: KernelPath, w: WeightRows<'_>, m: usize, xp: &[f64]) -> Vec<f64> {
    #[cfg(target_arch = "x86_64")]
    if let WeightRows::Stored(sm) = w {
        if let Some(kind) = x86_direct::DirectKind::of(sm.ggml_type()) {
            let s = x86_direct::input_scale(kind, sm.rounds_to_bf16());
            if m <= MR && s != 1.0 && path == KernelPath::Avx512 && x86_direct::supported() {
                return xp.iter().map(|v| v * s).collect();
            }
        }
    }
    let _ = (path, w, m, xp);
    Vec::new()
}

/// One GEMM's operands, shared by its tasks.
struct Job<'a> {
    path: KernelPath,
    x: &'a [f32],
    xp: &'a [f64],
    /// The inputs of the fused direct kernels: `xp`, or `xp` scaled where the kernel takes
    /// them scaled (`fused_inputs`).
    xf: &'a [f64],
    m: usize,
    k: usize,
    k4: usize,
    w: WeightRows<'a>,
    /// Weight row of output 0.
    row0: usize,
    n: usize,
    /// Outputs per task: [`task_width`] of `m`.
    nb: usize,
    round_bf16: bool,
}

impl Job<'_> {
    /// Outputs `b·nb .. (b+1)·nb` of every row, row-major `[m, width]`: the task's panels of
    /// 12 weight rows (decoded once, when stored as blocks in a type without a direct or table
    /// kernel), each chunk packed and multiplied against the inputs in the order of
    /// [`Job::passes`].
    fn block(&self, b: usize) -> Vec<f32> {
        let (m, k, k4) = (self.m, self.k, self.k4);
        let o0 = b * self.nb;
        let width = self.nb.min(self.n - o0);
        if let WeightRows::Stored(sm) = self.w {
            #[cfg(target_arch = "x86_64")]
            if let Some(kind) = x86_direct::DirectKind::of(sm.ggml_type()) {
                if self.path == KernelPath::Avx512 && x86_direct::supported() {
                    return self.block_direct(b, sm, kind);
                }
            }
            if let Some(kind) = lut::LutKind::of(sm.ggml_type()) {
                return self.block_lut(b, sm, kind);
            }
        }
        let mut out = vec![0f32; m * width];
        let mut wp = vec![0f64; KC / 4 * PANEL_STEP];
        // BF16 blocks widen straight from the file's bytes where the path has kernels for
        // them (whole steps only: a tail is summed from f32 rows).
        let bf16 = match self.w {
            WeightRows::Stored(sm) if has_rows_kernel(self.path) && k4 == k => {
                sm.bf16_rows(self.row0..self.row0 + self.n)
            }
            _ => None,
        };
        let np = width.div_ceil(NR);
        // Every panel's rows decoded at once: the passes may visit the panels chunk by chunk.
        let mut decoded = Vec::new();
        if let (WeightRows::Stored(sm), None) = (self.w, bf16) {
            decoded = vec![0f32; width * k];
            for (q, row) in decoded.chunks_exact_mut(k.max(1)).enumerate() {
                sm.decode(self.row0 + o0 + q, 0, row);
            }
        }
        let live_of = |p: usize| NR.min(self.n - o0 - p * NR);
        let panels: Vec<Panel<'_>> = (0..np)
            .map(|p| {
                let (first, live) = (o0 + p * NR, live_of(p));
                match (self.w, bf16) {
                    (_, Some(bytes)) => Panel::Bf16(
                        bytes[first * 2 * k..(first + live) * 2 * k]
                            .chunks_exact(2 * k)
                            .collect(),
                    ),
                    (WeightRows::F32(w), None) => Panel::F32(
                        (0..live)
                            .map(|q| &w[(self.row0 + first + q) * k..][..k])
                            .collect(),
                    ),
                    (WeightRows::Stored(_), None) => Panel::F32(
                        decoded[p * NR * k..]
                            .chunks_exact(k.max(1))
                            .take(live)
                            .collect(),
                    ),
                }
            })
            .collect();
        // A block of at most MR input rows reads a packed panel once, so where the path has
        // a kernel that widens weights in registers it takes a full panel's rows as they
        // lie, `k` values apart in every operand.
        let direct = |p: usize| {
            let first = o0 + p * NR;
            (has_rows_kernel(self.path) && m <= MR && live_of(p) == NR).then(|| {
                match (self.w, bf16) {
                    (_, Some(bytes)) => RowsAt::Bf16(&bytes[first * 2 * k..(first + NR) * 2 * k]),
                    (WeightRows::F32(w), None) => {
                        RowsAt::F32(&w[(self.row0 + first) * k..][..NR * k])
                    }
                    (WeightRows::Stored(_), None) => RowsAt::F32(&decoded[p * NR * k..][..NR * k]),
                }
            })
        };
        let mut lanes = vec![0f64; self.lanes_len(np)];
        self.passes(
            np,
            &mut lanes,
            |p, (mc0, n_rows), (kc0, kcl), lanes| {
                let steps = kcl / 4;
                if let Some(panel) = direct(p) {
                    // m <= MR: the one block of rows, from row 0.
                    let x = (&self.xp[kc0 * m..], kcl);
                    let w = (panel.from(kc0), k);
                    microkernel_rows(self.path, n_rows, x, w, steps, lanes);
                    return;
                }
                let wp = &mut wp[..steps * PANEL_STEP];
                pack_panel(self.path, &panels[p], (kc0, kcl), wp, steps);
                self.packed_rows((mc0, n_rows), (kc0, kcl), wp, steps, lanes);
            },
            |p, (mc0, n_rows), lanes| {
                let tail = |r: usize, q: usize| {
                    let mut tail = 0f64;
                    if let Panel::F32(rows) = &panels[p] {
                        let xr = &self.x[(mc0 + r) * k + k4..(mc0 + r + 1) * k];
                        for (a, b) in xr.iter().zip(&rows[q][k4..]) {
                            tail += f64::from(*a) * f64::from(*b);
                        }
                    }
                    tail
                };
                self.finish(lanes, (mc0, n_rows), (p, live_of(p)), width, &mut out, tail);
            },
        );
        out
    }

    /// Lane values [`Job::passes`] needs for `np` panels.
    fn lanes_len(&self, np: usize) -> usize {
        let panels = if self.m > MR { np } else { 1 };
        panels * MC.min(self.m) * PANEL_STEP
    }

    /// The order of a task's work over its `np` panels, its blocks of at most `MC` input rows
    /// and its `KC` chunks of columns: `chunk(p, (mc0, n_rows), (kc0, kcl), lanes)` adds panel
    /// `p`'s columns `kc0..kc0 + kcl` against input rows `mc0..mc0 + n_rows` into their lanes,
    /// and once every chunk has, `done(p, (mc0, n_rows), lanes)` sums and rounds them.
    ///
    /// With at most `MR` input rows (a few KiB of inputs), panel by panel, so that each
    /// panel's weights are read once, front to back. With more, chunk by chunk over every
    /// panel, each panel's lanes kept: a chunk of `MC` rows' inputs is 128 KiB and stays in L2
    /// while every panel of the task uses it, where a whole row of them (2.5 MiB for `k` 5120)
    /// would come from L3 once for every panel. Either order adds each lane's products in
    /// increasing column order, which is all the bits depend on.
    fn passes(
        &self,
        np: usize,
        lanes: &mut [f64],
        mut chunk: impl FnMut(usize, (usize, usize), (usize, usize), &mut [f64]),
        mut done: impl FnMut(usize, (usize, usize), &[f64]),
    ) {
        let (m, k4) = (self.m, self.k4);
        let chunks = || (0..k4).step_by(KC).map(move |kc0| (kc0, KC.min(k4 - kc0)));
        if m <= MR {
            for p in 0..np {
                let lanes = &mut lanes[..m * PANEL_STEP];
                lanes.fill(0.0);
                for cols in chunks() {
                    chunk(p, (0, m), cols, lanes);
                }
                done(p, (0, m), lanes);
            }
            return;
        }
        for mc0 in (0..m).step_by(MC) {
            let n_rows = MC.min(m - mc0);
            let per = n_rows * PANEL_STEP;
            let lanes = &mut lanes[..np * per];
            lanes.fill(0.0);
            for cols in chunks() {
                for (p, lanes) in lanes.chunks_exact_mut(per).enumerate() {
                    chunk(p, (mc0, n_rows), cols, lanes);
                }
            }
            for (p, lanes) in lanes.chunks_exact(per).enumerate() {
                done(p, (mc0, n_rows), lanes);
            }
        }
    }

    /// Lanes summed in the fixed tree, then the tail (`tail(r, q)` of input row `mc0 + r` and
    /// panel row `q`), then the rounding: outputs `p·NR + q` (`q < live`) of input rows
    /// `mc0..mc0 + n_rows` into the task's block `out` (`width` outputs a row).
    fn finish(
        &self,
        lanes: &[f64],
        (mc0, n_rows): (usize, usize),
        (p, live): (usize, usize),
        width: usize,
        out: &mut [f32],
        tail: impl Fn(usize, usize) -> f64,
    ) {
        for q in 0..live {
            let oo = p * NR + q;
            for r in 0..n_rows {
                let l = &lanes[r * PANEL_STEP + 4 * q..][..4];
                let v = (((l[0] + l[1]) + (l[2] + l[3])) + tail(r, q)) as f32;
                out[(mc0 + r) * width + oo] = if self.round_bf16 { bf16_round(v) } else { v };
            }
        }
    }

    /// One k-chunk of the packed panel `wp` against input rows `mc0..mc0 + n_rows`, `MR` rows
    /// at a time, into their `lanes` (shared by the decoded and the table-decoded blocks).
    #[inline]
    fn packed_rows(
        &self,
        (mc0, n_rows): (usize, usize),
        (kc0, kcl): (usize, usize),
        wp: &[f64],
        steps: usize,
        lanes: &mut [f64],
    ) {
        for r0 in (0..n_rows).step_by(MR) {
            let mr = MR.min(n_rows - r0);
            let xs = &self.xp[kc0 * self.m + (mc0 + r0) * kcl..];
            microkernel(
                self.path,
                mr,
                xs,
                kcl,
                wp,
                steps,
                &mut lanes[r0 * PANEL_STEP..],
            );
        }
    }

    /// The loop of the stored-block paths, in the order of [`Job::passes`]:
    /// `chunk((first, live), (mc0, n_rows), (kc0, kcl), lanes, wp)` adds panel rows
    /// `first..first + live`'s columns `kc0..kc0 + kcl` against input rows
    /// `mc0..mc0 + n_rows` into their `lanes` (`wp`: a packed panel's room, empty with
    /// `fused`), then the lanes are summed and rounded into the outputs. A whole number of
    /// blocks makes `k` whole steps: no tail.
    fn by_chunks(
        &self,
        b: usize,
        fused: bool,
        mut chunk: impl FnMut((usize, usize), (usize, usize), (usize, usize), &mut [f64], &mut [f64]),
    ) -> Vec<f32> {
        let m = self.m;
        assert_eq!(self.k4, self.k, "stored blocks make whole steps");
        let o0 = b * self.nb;
        let width = self.nb.min(self.n - o0);
        let mut out = vec![0f32; m * width];
        let mut wp = if fused {
            Vec::new()
        } else {
            vec![0f64; KC / 4 * PANEL_STEP]
        };
        let np = width.div_ceil(NR);
        let panel = |p: usize| (o0 + p * NR, NR.min(self.n - o0 - p * NR));
        let mut lanes = vec![0f64; self.lanes_len(np)];
        self.passes(
            np,
            &mut lanes,
            |p, rows_in, cols, lanes| chunk(panel(p), rows_in, cols, lanes, &mut wp),
            |p, rows_in, lanes| {
                let live = panel(p).1;
                self.finish(lanes, rows_in, (p, live), width, &mut out, |_, _| 0.0);
            },
        );
        out
    }

    /// [`Job::by_chunks`] for at most `MR` input rows whose kernel takes a whole panel:
    /// `panel((first, live), lanes)` adds panel rows `first..first + live`'s every column
    /// against the input rows into their zeroed `lanes`, then they are summed and rounded into
    /// the outputs.
    #[cfg(target_arch = "x86_64")]
    fn by_panels(&self, b: usize, mut panel: impl FnMut((usize, usize), &mut [f64])) -> Vec<f32> {
        let m = self.m;
        assert!(
            m <= MR && self.k4 == self.k,
            "a few input rows, whole steps"
        );
        let o0 = b * self.nb;
        let width = self.nb.min(self.n - o0);
        let mut out = vec![0f32; m * width];
        let mut lanes = vec![0f64; m * PANEL_STEP];
        for p in 0..width.div_ceil(NR) {
            let live = NR.min(self.n - o0 - p * NR);
            lanes.fill(0.0);
            panel((o0 + p * NR, live), &mut lanes);
            self.finish(&lanes, (0, m), (p, live), width, &mut out, |_, _| 0.0);
        }
        out
    }

    /// [`Job::block`] over a matrix whose blocks have a direct kernel (`x86_direct`): chunk by
    /// chunk, the panel's blocks decoded in registers, straight into the FMAs for at most `MR`
    /// input rows, else into the packed panel the microkernel reads. A ragged last panel
    /// repeats its last row in the missing slots (outputs never written).
    #[cfg(target_arch = "x86_64")]
    fn block_direct(
        &self,
        b: usize,
        sm: &StoredMatrix<'_>,
        kind: x86_direct::DirectKind,
    ) -> Vec<f32> {
        let (m, k, round) = (self.m, self.k, sm.rounds_to_bf16());
        let fused = m <= MR;
        let (bv, bb, _) =
            crate::gguf::quant::block_decoder(sm.ggml_type()).expect("direct types decode");
        let row_bytes = k / bv * bb;
        let n_chunks = k.div_ceil(KC);
        let rows_of = |first: usize, count: usize| {
            sm.rows_bytes(self.row0 + first..self.row0 + first + count)
                .expect("panel rows inside the matrix")
        };
        // The next panel's bytes (contiguous: rows follow each other), a chunk's share at a
        // time, so they arrive while this panel is multiplied. Software prefetch: a panel
        // reads a dozen rows a chunk at a time, too many interleaved streams for the hardware
        // prefetcher. The fused kernels spread each share over their steps.
        let next_panel = |first: usize| {
            let next = self.row0 + first + NR;
            if next < sm.rows() {
                rows_of(first + NR, NR.min(sm.rows() - next))
            } else {
                &[]
            }
        };
        if fused {
            // m <= MR: a whole panel a call, the one block of rows (from row 0) scaled where
            // the kernel wants.
            return self.by_panels(b, |(first, live), lanes| {
                let panel = rows_of(first, live);
                let rows: [&[u8]; NR] =
                    std::array::from_fn(|q| &panel[q.min(live - 1) * row_bytes..][..row_bytes]);
                let ahead = next_panel(first);
                x86_direct::panel(kind, round, &rows, (k, ahead), m, self.xf, lanes);
            });
        }
        self.by_chunks(b, false, |(first, live), rows_in, (kc0, kcl), lanes, wp| {
            let panel = rows_of(first, live);
            let (at, len) = (kc0 / bv * bb, kcl / bv * bb);
            let rows: [&[u8]; NR] = std::array::from_fn(|q| {
                let row = &panel[q.min(live - 1) * row_bytes..][..row_bytes];
                &row[at..at + len]
            });
            let ahead = if rows_in.0 == 0 {
                x86_direct::ahead_share(next_panel(first), n_chunks, kc0 / KC)
            } else {
                &[]
            };
            crate::gguf::quant::rows::prefetch_to_l2(ahead);
            let steps = kcl / 4;
            let wp = &mut wp[..steps * PANEL_STEP];
            x86_direct::expand(kind, round, &rows, kcl, wp);
            self.packed_rows(rows_in, (kc0, kcl), wp, steps, lanes);
        })
    }

    /// [`Job::block`] for a matrix of table-decoded blocks ([`lut`]): chunk by chunk, the
    /// panel's codes and tables, then on AVX-512 with at most `MR` input rows the fused
    /// kernel (weights looked up in registers), else the packed panel and the microkernel.
    fn block_lut(&self, b: usize, sm: &StoredMatrix<'_>, kind: lut::LutKind) -> Vec<f32> {
        let m = self.m;
        let mut tile = lut::LutTile::new(kind, sm.rounds_to_bf16());
        let fused = cfg!(target_arch = "x86_64") && self.path == KernelPath::Avx512 && m <= MR;
        self.by_chunks(b, fused, |(first, live), rows_in, (kc0, kcl), lanes, wp| {
            let steps = kcl / 4;
            tile.prepare(sm, (self.row0 + first, live), (kc0, kcl));
            #[cfg(target_arch = "x86_64")]
            if fused {
                // m <= MR: the one block of rows, from row 0.
                let x = (&self.xp[kc0 * m..], kcl);
                return x86_lut::fused_rows(&tile, rows_in.1, x, steps, lanes);
            }
            let wp = &mut wp[..steps * PANEL_STEP];
            tile.expand(self.path, wp, steps);
            self.packed_rows(rows_in, (kc0, kcl), wp, steps, lanes);
        })
    }
}

/// One panel's weight rows, one slice per live row (fewer than `NR` at a ragged end).
enum Panel<'a> {
    /// f32 values.
    F32(Vec<&'a [f32]>),
    /// A BF16 matrix's bit patterns, two bytes per value (only where `k` is whole steps).
    Bf16(Vec<&'a [u8]>),
}

/// A full panel's `NR` weight rows as they lie, `k` values apart.
#[derive(Clone, Copy)]
enum RowsAt<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u8]),
}

impl<'a> RowsAt<'a> {
    /// The same rows from value `col` on.
    fn from(self, col: usize) -> RowsAt<'a> {
        match self {
            RowsAt::F32(w) => RowsAt::F32(&w[col..]),
            RowsAt::Bf16(w) => RowsAt::Bf16(&w[2 * col..]),
        }
    }

    /// Values the operand holds.
    fn values(self) -> usize {
        match self {
            RowsAt::F32(w) => w.len(),
            RowsAt::Bf16(w) => w.len() / 2,
        }
    }

    /// Value `i` widened to f64.
    fn value(self, i: usize) -> f64 {
        match self {
            RowsAt::F32(w) => f64::from(w[i]),
            RowsAt::Bf16(w) => f64::from(bf16_bits_to_f32(w[2 * i], w[2 * i + 1])),
        }
    }
}

/// A little-endian bf16 bit pattern as f32 (exact).
fn bf16_bits_to_f32(lo: u8, hi: u8) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([lo, hi])) << 16)
}

/// One chunk's panel: columns `kc0..kc0 + kcl` of row `q` into slot `q`, zeros for the slots
/// of a ragged `n` that have no row; two rows per 512-bit conversion on the AVX-512 path.
fn pack_panel(
    path: KernelPath,
    rows: &Panel<'_>,
    (kc0, kcl): (usize, usize),
    wp: &mut [f64],
    steps: usize,
) {
    assert!(
        kcl == 4 * steps && wp.len() >= steps * PANEL_STEP,
        "panel operands disagree"
    );
    let rows = match rows {
        Panel::F32(rows) => rows,
        Panel::Bf16(rows) => return pack_panel_bf16(path, rows, (kc0, kcl), wp, steps),
    };
    assert!(rows.len() <= NR, "a panel of {} rows", rows.len());
    let mut q = 0;
    while q < NR {
        #[cfg(target_arch = "x86_64")]
        if path == KernelPath::Avx512 && q + 1 < rows.len() {
            let (a, b) = (&rows[q][kc0..kc0 + kcl], &rows[q + 1][kc0..kc0 + kcl]);
            // `run_job` checked that the path is supported; `q` is even here.
            x86::pack_pair_avx512::<false>(as_bytes(a), as_bytes(b), wp, q, steps);
            q += 2;
            continue;
        }
        match rows.get(q) {
            Some(row) => pack_row(path, &row[kc0..kc0 + kcl], wp, q, steps),
            // Outputs past the end of a ragged `n`: zero weights.
            None => (0..steps).for_each(|s| wp[s * PANEL_STEP + 4 * q..][..4].fill(0.0)),
        }
        q += 1;
    }
}

/// [`pack_panel`] for BF16 rows (two bytes a value).
fn pack_panel_bf16(
    path: KernelPath,
    rows: &[&[u8]],
    (kc0, kcl): (usize, usize),
    wp: &mut [f64],
    steps: usize,
) {
    assert!(
        rows.len() <= NR && rows.iter().all(|r| r.len() >= 2 * (kc0 + kcl)),
        "bf16 panel rows too short"
    );
    let mut q = 0;
    while q < NR {
        #[cfg(target_arch = "x86_64")]
        if path == KernelPath::Avx512 && q + 1 < rows.len() {
            let (a, b) = (&rows[q][2 * kc0..], &rows[q + 1][2 * kc0..]);
            // `run_job` checked that the path is supported; `q` is even here.
            x86::pack_pair_avx512::<true>(a, b, wp, q, steps);
            q += 2;
            continue;
        }
        let _ = path;
        for s in 0..steps {
            let d = &mut wp[s * PANEL_STEP + 4 * q..][..4];
            for (j, v) in d.iter_mut().enumerate() {
                *v = rows.get(q).map_or(0.0, |row| {
                    let i = 2 * (kc0 + 4 * s + j);
                    f64::from(bf16_bits_to_f32(row[i], row[i + 1]))
                });
            }
        }
        q += 1;
    }
}

/// An f32 slice's bytes.
fn as_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: any initialised f32 is four initialised bytes; u8 has alignment 1, and the
    // length is the slice's size in bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

/// Whether `path` has microkernels that read weight rows directly ([`microkernel_rows`],
/// BF16 panels).
fn has_rows_kernel(path: KernelPath) -> bool {
    cfg!(target_arch = "x86_64") && path == KernelPath::Avx512
}

/// [`microkernel`] with the weights as `NR` rows `w_stride` values apart instead of a packed
/// panel: `lanes[r][q][j] += Σ_s x[r][4s + j] · f64(w[q][4s + j])`, the same products summed in
/// the same order. Checks every slice bound once, then runs the path's kernel.
fn microkernel_rows(
    path: KernelPath,
    mr: usize,
    (x, x_stride): (&[f64], usize),
    (w, w_stride): (RowsAt<'_>, usize),
    steps: usize,
    lanes: &mut [f64],
) {
    assert!(
        (1..=MR).contains(&mr)
            && x.len() >= (mr - 1) * x_stride + 4 * steps
            && w.values() >= (NR - 1) * w_stride + 4 * steps
            && lanes.len() >= mr * PANEL_STEP,
        "row microkernel operands too short"
    );
    #[cfg(target_arch = "x86_64")]
    if path == KernelPath::Avx512 {
        assert!(path.is_supported(), "kernel path avx512 not supported");
        macro_rules! by_rows {
            ($bf16:literal, $wp:expr) => {{
                let (xp, lp) = (x.as_ptr(), lanes.as_mut_ptr());
                let wp: *const u8 = $wp;
                // SAFETY: AVX-512F was detected just above, and the assert at the top of this
                // function checked exactly the bounds the kernel's contract asks for.
                unsafe {
                    match mr {
                        1 => x86::avx512_rows::<1, $bf16>(xp, x_stride, wp, w_stride, steps, lp),
                        2 => x86::avx512_rows::<2, $bf16>(xp, x_stride, wp, w_stride, steps, lp),
                        3 => x86::avx512_rows::<3, $bf16>(xp, x_stride, wp, w_stride, steps, lp),
                        _ => x86::avx512_rows::<MR, $bf16>(xp, x_stride, wp, w_stride, steps, lp),
                    }
                }
            }};
        }
        match w {
            RowsAt::F32(v) => by_rows!(false, v.as_ptr().cast()),
            RowsAt::Bf16(v) => by_rows!(true, v.as_ptr()),
        }
        return;
    }
    let _ = path;
    // Any other path: the definition, lane by lane in increasing step.
    for r in 0..mr {
        for q in 0..NR {
            for j in 0..4 {
                let acc = &mut lanes[r * PANEL_STEP + 4 * q + j];
                for s in 0..steps {
                    *acc += x[r * x_stride + 4 * s + j] * w.value(q * w_stride + 4 * s + j);
                }
            }
        }
    }
}

/// `wp[s][q][j] = f64(src[4s + j])` for `s < steps`: one weight row into its panel slot.
fn pack_row(path: KernelPath, src: &[f32], wp: &mut [f64], q: usize, steps: usize) {
    assert!(
        q < NR && src.len() >= 4 * steps && wp.len() >= steps * PANEL_STEP,
        "pack operands too short"
    );
    #[cfg(target_arch = "x86_64")]
    if matches!(path, KernelPath::Avx2 | KernelPath::Avx512) && KernelPath::Avx2.is_supported() {
        return x86::pack_row_avx2(src, wp, q, steps);
    }
    let _ = path;
    for (s, c) in src[..4 * steps].chunks_exact(4).enumerate() {
        let d = &mut wp[s * PANEL_STEP + 4 * q..][..4];
        d[0] = f64::from(c[0]);
        d[1] = f64::from(c[1]);
        d[2] = f64::from(c[2]);
        d[3] = f64::from(c[3]);
    }
}

/// `lanes[r][q][j] += Σ_s x[r][4s + j] · wp[s][q][j]` for `r < mr` rows (row stride `x_stride`
/// in `x`, `PANEL_STEP` in `lanes`), `q < NR`, `j < 4`, `s < steps` in increasing order, on the
/// chosen path. Checks every slice bound once, then runs the path's kernel.
fn microkernel(
    path: KernelPath,
    mr: usize,
    x: &[f64],
    x_stride: usize,
    wp: &[f64],
    steps: usize,
    lanes: &mut [f64],
) {
    assert!(
        (1..=MR).contains(&mr)
            && x.len() >= (mr - 1) * x_stride + 4 * steps
            && wp.len() >= steps * PANEL_STEP
            && lanes.len() >= mr * PANEL_STEP,
        "microkernel operands too short"
    );
    // The SIMD kernels are monomorphised on the row count.
    #[allow(unused_macros)] // no SIMD kernel on some targets
    macro_rules! by_rows {
        ($($kernel:ident)::+) => {{
            assert!(path.is_supported(), "kernel path {} not supported", path.name());
            let (xp, wpp, lp) = (x.as_ptr(), wp.as_ptr(), lanes.as_mut_ptr());
            // SAFETY: the path's features were detected just above, and the assert at the top
            // of this function checked exactly the bounds the kernels' contract asks for.
            unsafe {
                match mr {
                    1 => $($kernel)::+::<1>(xp, x_stride, wpp, steps, lp),
                    2 => $($kernel)::+::<2>(xp, x_stride, wpp, steps, lp),
                    3 => $($kernel)::+::<3>(xp, x_stride, wpp, steps, lp),
                    _ => $($kernel)::+::<MR>(xp, x_stride, wpp, steps, lp),
                }
            }
        }};
    }
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 => by_rows!(x86::avx512),
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 => by_rows!(x86::avx2),
        #[cfg(target_arch = "aarch64")]
        KernelPath::Neon => by_rows!(neon::neon),
        _ => tile_portable(mr, x, x_stride, wp, steps, lanes),
    }
}

/// The portable microkernel: the reduction order written out in plain Rust.
fn tile_portable(
    mr: usize,
    x: &[f64],
    x_stride: usize,
    wp: &[f64],
    steps: usize,
    lanes: &mut [f64],
) {
    for r in 0..mr {
        let xr = &x[r * x_stride..r * x_stride + 4 * steps];
        let acc = &mut lanes[r * PANEL_STEP..(r + 1) * PANEL_STEP];
        for (xv, wv) in xr.chunks_exact(4).zip(wp.chunks_exact(PANEL_STEP)) {
            for (a, w) in acc.chunks_exact_mut(4).zip(wv.chunks_exact(4)) {
                a[0] += xv[0] * w[0];
                a[1] += xv[1] * w[1];
                a[2] += xv[2] * w[2];
                a[3] += xv[3] * w[3];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::ops::dot_f64;

    /// Inputs with awkward values: mixed signs, full f32 mantissas over some forty binades (so
    /// that products round when summed, and a sum's bits depend on its order), exact zeros,
    /// negative zeros.
    fn data(len: usize, salt: usize) -> Vec<f32> {
        (0..len)
            .map(|i| {
                let h = (i.wrapping_mul(2654435761) ^ salt.wrapping_mul(40503)) % 10007;
                match h % 13 {
                    0 => 0.0,
                    1 => -0.0,
                    _ => (h as f32 - 5003.0) / 97.3 * 2f32.powi((h % 41) as i32 - 20),
                }
            })
            .collect()
    }

    /// Large products in every row's first eight columns, cancelled exactly `k / 2` columns
    /// later: each lane's products in between are added to a large partial sum, so that how
    /// they round, and with it the output's bits, depends on the order of the additions (with
    /// [`data`] alone a reordered sum rounds to the same f32 almost always).
    fn cancel_late(x: &mut [f32], w: &mut [f32], k: usize) {
        for row in w.chunks_exact_mut(k) {
            for c in 0..8 {
                row[c] *= 2f32.powi(30);
                row[c + k / 2] = -row[c];
            }
        }
        for row in x.chunks_exact_mut(k) {
            for c in 0..8 {
                row[c + k / 2] = row[c];
            }
        }
    }

    #[test]
    fn every_path_reproduces_the_defining_dot_product() {
        // Ragged m (not a multiple of MR), n (not a multiple of NR or NB), k (a tail, and more
        // than one KC chunk); m of at most MR.
        for &(m, k, n) in &[
            (1, 7, 3),
            (5, 515, 61),
            (9, 1030, 50),
            (70, 12, 13),
            // More than MR rows, two blocks of MC rows, and more outputs than a task holds
            // (a ragged last task and panel): the chunk-outer order over a task's panels.
            (70, 1030, 205),
            // At most MR rows against whole panels: the row kernels.
            (1, 515, 30),
            (2, 12, 24),
            (4, 1030, 25),
        ] {
            let (mut x, mut w) = (data(m * k, 1), data(n * k, 2));
            if k >= 32 {
                cancel_late(&mut x, &mut w, k);
            }
            let want: Vec<u32> = (0..m * n)
                .map(|idx| dot_f64(&x[idx / n * k..][..k], &w[idx % n * k..][..k]).to_bits())
                .collect();
            for path in supported_paths() {
                let got = gemm_on(path, &x, m, k, WeightRows::F32(&w), n, false);
                let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "path {} m {m} k {k} n {n}", path.name());
            }
        }
    }

    #[test]
    fn empty_shapes_give_empty_or_zero_outputs() {
        assert!(gemm(&[], 0, 4, WeightRows::F32(&[0.0; 8]), 2, false).is_empty());
        assert_eq!(gemm(&[], 3, 0, WeightRows::F32(&[]), 2, true), vec![0.0; 6]);
    }
}
