//! Measures what bounds the fused m = 1 kernels of `oracle::gemm::x86_direct` on this CPU:
//! how many vector instructions a cycle it issues beside the f64 FMAs, and what the step forms
//! the kernels use (and the ones they could use) cost per pair of steps. Register-only and
//! L1-resident loops, independent of the oracle's code, so that a kernel's instruction budget
//! can be worked out before it is written.
//!
//! `cargo run --release --example x86_issue_rates`
//!
//! Every figure is a time ratio measured in the run, so no clock frequency is assumed:
//! - **Issue**: the time of 8 independent zmm FMAs together with N other instructions, in units
//!   of the 8 FMAs alone (1.00 when the others issue for free beside them). On AMD Zen 4 this
//!   printed 1.00, 1.50, 2.00 for 8, 16, 24 zmm ANDs, 1.25-1.32 for 24 ymm ANDs and 2.00 for
//!   32 zmm ANDs alone: about two zmm instructions a cycle of any kind, of which one FMA, a ymm
//!   or xmm instruction counting half. Eight zmm loads (half of them line-split) beside eight
//!   ANDs added 0.41-0.47, eight `vbroadcastf64x4` 0.50: a load costs about half an
//!   instruction, a broadcast more.
//! - **Steps**: six pairs' two steps of eight f64 weights each (one FMA a step, six independent
//!   accumulators, as a fused kernel runs them), in units of the two FMAs alone: the budget a
//!   fused kernel at 33% of the f64 FMA peak has is 3.00, tables and codes included. On Zen 4
//!   (six runs): Q4_K's form (load, two-source permute, AND, shift) 1.94-1.99, Q2_K's and
//!   Q3_K's (the same with a single-source permute) 1.65-1.72, IQ2_XXS's (a shift and a
//!   zero-masked permute a step) 1.84-1.87, a load and a zero-masked permute a step 1.78-1.90,
//!   f64 tables by a load and a two-source qword permute a step 1.84-1.91, single-source
//!   1.78-1.95: no form is much cheaper than the ones the kernels use. Two forms that would
//!   spare Q4_K its 512-bit two-source permute cost more: the split by two in-lane unpacks
//!   against zero instead of the AND and the shift 2.17-2.24 (the shuffles queue with the
//!   permutes), and a row at a time in ymm (each row's own sixteen entries, a two-source ymm
//!   permute, three pairs at a time so that the tables and the twelve ymm accumulators fit the
//!   32 registers, the inputs loaded once per three pairs) 2.02-2.05.
//!
//! The loops start from zeroed accumulators and tables whose every weight is 1.0, and read a
//! page-aligned buffer: with the registers as earlier code left them and the buffer anywhere
//! on the stack, the same binary printed some forms bimodally from run to run (the ymm form
//! 1.58 or 2.0-2.2, the others steady; the register set-up alone did not steady it, the
//! page-aligned buffer with it did), so figures from before that change (the kernels' notes
//! up to 2026-12-07) spread wider.
//!
//! Without AVX-512 it says so and exits.

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    eprintln!("x86_issue_rates: x86-64 only");
}

#[cfg(target_arch = "x86_64")]
fn main() {
    if !is_x86_feature_detected!("avx512f") {
        eprintln!("x86_issue_rates: this CPU has no AVX-512F");
        return;
    }
    // SAFETY: AVX-512F is present (checked above).
    unsafe { x86::report() };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;
    use std::time::Instant;

    /// Iterations of a timed loop.
    const ITERS: u64 = 50_000;
    /// Timed runs of a loop; the least is kept.
    const RUNS: usize = 31;

    /// A 4 KiB buffer the step loops load their codes and inputs from, one page (so that no
    /// load crosses a page, wherever the stack lies).
    #[repr(align(4096))]
    struct Buf([u8; 4096]);

    /// One timed loop: `ITERS` iterations of `body`, which gets the iteration count and the
    /// buffer's address.
    type Body = unsafe fn(u64, *const u8);

    /// Defines a loop function `$name` running the AT&T template `$body` (one iteration) with
    /// every zmm register and k1 declared clobbered. The prologue leaves zeros in zmm0..11
    /// and zmm24..30 (the accumulators), in every dword of the table registers zmm12..23 the
    /// high word of 1.0 (so every weight a step looks up is 1.0 and every sum stays normal,
    /// whatever earlier code left in the registers), the high-dword mask in zmm31 and 0xaaaa
    /// in k1.
    macro_rules! timed_loop {
        ($name:ident, $body:expr) => {
            #[target_feature(enable = "avx512f")]
            unsafe fn $name(n: u64, buf: *const u8) {
                // SAFETY (the caller's): AVX-512F is present; the template reads only the
                // first 1088 bytes of `buf` (which holds 4096) and writes no memory.
                unsafe {
                    asm!(
                        "vpxord %zmm0, %zmm0, %zmm0",
                        "vpxord %zmm1, %zmm1, %zmm1",
                        "vpxord %zmm2, %zmm2, %zmm2",
                        "vpxord %zmm3, %zmm3, %zmm3",
                        "vpxord %zmm4, %zmm4, %zmm4",
                        "vpxord %zmm5, %zmm5, %zmm5",
                        "vpxord %zmm6, %zmm6, %zmm6",
                        "vpxord %zmm7, %zmm7, %zmm7",
                        "vpxord %zmm8, %zmm8, %zmm8",
                        "vpxord %zmm9, %zmm9, %zmm9",
                        "vpxord %zmm10, %zmm10, %zmm10",
                        "vpxord %zmm11, %zmm11, %zmm11",
                        "vpxord %zmm24, %zmm24, %zmm24",
                        "vpxord %zmm25, %zmm25, %zmm25",
                        "vpxord %zmm26, %zmm26, %zmm26",
                        "vpxord %zmm27, %zmm27, %zmm27",
                        "vpxord %zmm28, %zmm28, %zmm28",
                        "vpxord %zmm29, %zmm29, %zmm29",
                        "vpxord %zmm30, %zmm30, %zmm30",
                        "mov $0x3ff00000, {t:e}",
                        "vpbroadcastd {t:e}, %zmm12",
                        "vmovdqa64 %zmm12, %zmm13",
                        "vmovdqa64 %zmm12, %zmm14",
                        "vmovdqa64 %zmm12, %zmm15",
                        "vmovdqa64 %zmm12, %zmm16",
                        "vmovdqa64 %zmm12, %zmm17",
                        "vmovdqa64 %zmm12, %zmm18",
                        "vmovdqa64 %zmm12, %zmm19",
                        "vmovdqa64 %zmm12, %zmm20",
                        "vmovdqa64 %zmm12, %zmm21",
                        "vmovdqa64 %zmm12, %zmm22",
                        "vmovdqa64 %zmm12, %zmm23",
                        "vpternlogd $0xff, %zmm31, %zmm31, %zmm31",
                        "vpsllq $32, %zmm31, %zmm31",
                        "mov $0xaaaa, {t:e}",
                        "kmovw {t:e}, %k1",
                        "2:",
                        $body,
                        "dec {n}",
                        "jnz 2b",
                        n = inout(reg) n => _,
                        t = out(reg) _,
                        in("rsi") buf,
                        out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                        out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                        out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                        out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
                        out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm19") _,
                        out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _,
                        out("zmm24") _, out("zmm25") _, out("zmm26") _, out("zmm27") _,
                        out("zmm28") _, out("zmm29") _, out("zmm30") _, out("zmm31") _,
                        out("k1") _,
                        options(att_syntax, nostack, readonly),
                    )
                }
            }
        };
    }

    /// Eight independent FMAs (accumulators zmm24..31).
    macro_rules! fma8 {
        () => {
            concat!(
                "vfmadd231pd %zmm1, %zmm2, %zmm24\n",
                "vfmadd231pd %zmm1, %zmm2, %zmm25\n",
                "vfmadd231pd %zmm1, %zmm2, %zmm26\n",
                "vfmadd231pd %zmm1, %zmm2, %zmm27\n",
                "vfmadd231pd %zmm1, %zmm2, %zmm28\n",
                "vfmadd231pd %zmm1, %zmm2, %zmm29\n",
                "vfmadd231pd %zmm1, %zmm2, %zmm30\n",
                "vfmadd231pd %zmm1, %zmm2, %zmm31\n",
            )
        };
    }

    /// Eight independent ANDs of width `$w` (`zmm`, `ymm`) into registers 8..16 (or 16..24).
    macro_rules! and8 {
        ($w:literal, $a:literal) => {
            concat!(
                "vpandq %", $w, "1, %", $w, "2, %", $w, $a, "0\n", "vpandq %", $w, "1, %", $w,
                "2, %", $w, $a, "1\n", "vpandq %", $w, "1, %", $w, "2, %", $w, $a, "2\n",
                "vpandq %", $w, "1, %", $w, "2, %", $w, $a, "3\n", "vpandq %", $w, "1, %", $w,
                "2, %", $w, $a, "4\n", "vpandq %", $w, "1, %", $w, "2, %", $w, $a, "5\n",
                "vpandq %", $w, "1, %", $w, "2, %", $w, $a, "6\n", "vpandq %", $w, "1, %", $w,
                "2, %", $w, $a, "7\n",
            )
        };
    }

    /// One load, `$op` from `$off(%rsi)` into `$r`.
    macro_rules! load {
        ($op:literal, $off:literal, $r:literal) => {
            concat!($op, " ", $off, "(%rsi), %zmm", $r, "\n")
        };
    }

    /// Eight loads (`$op` `vmovdqu64` or `vbroadcastf64x4`) of the buffer into zmm8..16, the
    /// last four line-split.
    macro_rules! load8 {
        ($op:literal) => {
            concat!(
                load!($op, "0", "8"),
                load!($op, "64", "9"),
                load!($op, "128", "10"),
                load!($op, "192", "11"),
                load!($op, "257", "12"),
                load!($op, "321", "13"),
                load!($op, "385", "14"),
                load!($op, "449", "15"),
            )
        };
    }

    timed_loop!(fma_alone, fma8!());
    timed_loop!(
        fma_load8,
        concat!(fma8!(), load8!("vmovdqu64"), and8!("zmm", "2"))
    );
    timed_loop!(
        fma_bcast8,
        concat!(fma8!(), load8!("vbroadcastf64x4"), and8!("zmm", "2"))
    );
    timed_loop!(fma_and8, concat!(fma8!(), and8!("zmm", "1")));
    timed_loop!(
        fma_and16,
        concat!(fma8!(), and8!("zmm", "1"), and8!("zmm", "2"))
    );
    /// Twenty-four independent ANDs of width `$w` (registers 8..24, the first eight twice).
    macro_rules! and24 {
        ($w:literal) => {
            concat!(and8!($w, "1"), and8!($w, "2"), and8!($w, "1"))
        };
    }

    timed_loop!(fma_and24, concat!(fma8!(), and24!("zmm")));
    timed_loop!(fma_yand24, concat!(fma8!(), and24!("ymm")));
    timed_loop!(and32, concat!(and24!("zmm"), and8!("zmm", "2")));

    /// Six pairs' two steps in the form `$m`, which takes the pair's code offset into the
    /// buffer, its two table registers and its accumulator (and `$x`, if given); zmm24, zmm25
    /// are the steps' inputs (from the buffer, as the kernels broadcast them).
    macro_rules! six_pairs {
        ($m:ident $(, $x:expr)?) => {
            concat!(
                "vbroadcastf64x4 1024(%rsi), %zmm24\n",
                "vbroadcastf64x4 1056(%rsi), %zmm25\n",
                $m!("1", "12", "13", "0" $(, $x)?),
                $m!("65", "14", "15", "1" $(, $x)?),
                $m!("129", "16", "17", "2" $(, $x)?),
                $m!("193", "18", "19", "3" $(, $x)?),
                $m!("257", "20", "21", "4" $(, $x)?),
                $m!("321", "22", "23", "5" $(, $x)?),
            )
        };
    }

    /// The FMAs of a two-step form: step `2k` from zmm26, `2k + 1` from zmm27.
    macro_rules! two_fmas {
        ($acc:literal) => {
            concat!(
                "vfmadd231pd %zmm26, %zmm24, %zmm",
                $acc,
                "\n",
                "vfmadd231pd %zmm27, %zmm25, %zmm",
                $acc,
                "\n",
            )
        };
    }

    /// The FMAs alone.
    macro_rules! fmas_only {
        ($off:literal, $ta:literal, $tb:literal, $acc:literal) => {
            two_fmas!($acc)
        };
    }

    /// One load and a two-source permute into zmm28, split into zmm26, zmm27 by `$split`
    /// (two instructions), then the FMAs: with an AND and a shift, Q4_K's high-word form.
    macro_rules! two_source_then {
        ($off:literal, $ta:literal, $tb:literal, $acc:literal, $split:expr) => {
            concat!(
                "vmovdqu64 ",
                $off,
                "(%rsi), %zmm28\n",
                "vpermi2ps %zmm",
                $tb,
                ", %zmm",
                $ta,
                ", %zmm28\n",
                $split,
                two_fmas!($acc),
            )
        };
    }

    /// One row's two steps at half width: a ymm load of its codes, a two-source ymm permute of
    /// its own sixteen entries, AND, shift, two ymm FMAs into the row's accumulator.
    macro_rules! ymm_row {
        ($off:literal, $ta:literal, $tb:literal, $acc:literal) => {
            concat!(
                "vmovdqu64 ",
                $off,
                "(%rsi), %ymm28\n",
                "vpermi2ps %ymm",
                $tb,
                ", %ymm",
                $ta,
                ", %ymm28\n",
                "vpandd %ymm31, %ymm28, %ymm26\n",
                "vpsllq $32, %ymm28, %ymm27\n",
                "vfmadd231pd %ymm26, %ymm24, %ymm",
                $acc,
                "\n",
                "vfmadd231pd %ymm27, %ymm25, %ymm",
                $acc,
                "\n",
            )
        };
    }

    /// Three pairs' six rows ([`ymm_row`]) after their inputs' two ymm loads, into the
    /// accumulators `$a0..$a5`.
    macro_rules! three_pairs_ymm {
        ($a0:literal, $a1:literal, $a2:literal, $a3:literal, $a4:literal, $a5:literal) => {
            concat!(
                "vmovapd 1024(%rsi), %ymm24\n",
                "vmovapd 1056(%rsi), %ymm25\n",
                ymm_row!("1", "12", "13", $a0),
                ymm_row!("33", "14", "15", $a1),
                ymm_row!("65", "16", "17", $a2),
                ymm_row!("97", "18", "19", $a3),
                ymm_row!("129", "20", "21", $a4),
                ymm_row!("161", "22", "23", $a5),
            )
        };
    }

    /// Q2_K's and Q3_K's: one load, a single-source permute, split.
    macro_rules! one_source_split {
        ($off:literal, $ta:literal, $tb:literal, $acc:literal) => {
            concat!(
                "vmovdqu64 ",
                $off,
                "(%rsi), %zmm28\n",
                "vpermps %zmm",
                $ta,
                ", %zmm28, %zmm28\n",
                "vpandd %zmm31, %zmm28, %zmm26\n",
                "vpsllq $32, %zmm28, %zmm27\n",
                two_fmas!($acc),
            )
        };
    }

    /// IQ2_XXS's: a shift of the lane codes and a zero-masked single-source permute a step.
    macro_rules! shift_masked {
        ($off:literal, $ta:literal, $tb:literal, $acc:literal) => {
            concat!(
                "vpsrlq $8, %zmm",
                $tb,
                ", %zmm26\n",
                "vpermps %zmm",
                $ta,
                ", %zmm26, %zmm26{{%k1}}{{z}}\n",
                "vpsllq $8, %zmm",
                $tb,
                ", %zmm27\n",
                "vpermps %zmm",
                $ta,
                ", %zmm27, %zmm27{{%k1}}{{z}}\n",
                two_fmas!($acc),
            )
        };
    }

    /// A load and a zero-masked single-source permute a step.
    macro_rules! load_masked {
        ($off:literal, $ta:literal, $tb:literal, $acc:literal) => {
            concat!(
                "vmovdqu64 ",
                $off,
                "(%rsi), %zmm26\n",
                "vpermps %zmm",
                $ta,
                ", %zmm26, %zmm26{{%k1}}{{z}}\n",
                "vmovdqu64 ",
                $off,
                "+4(%rsi), %zmm27\n",
                "vpermps %zmm",
                $ta,
                ", %zmm27, %zmm27{{%k1}}{{z}}\n",
                two_fmas!($acc),
            )
        };
    }

    /// Tables of f64 weights (sixteen entries, two registers): a load and a two-source qword
    /// permute a step, no split.
    macro_rules! qword_two_source {
        ($off:literal, $ta:literal, $tb:literal, $acc:literal) => {
            concat!(
                "vmovdqu64 ",
                $off,
                "(%rsi), %zmm26\n",
                "vpermi2pd %zmm",
                $tb,
                ", %zmm",
                $ta,
                ", %zmm26\n",
                "vmovdqu64 ",
                $off,
                "+4(%rsi), %zmm27\n",
                "vpermi2pd %zmm",
                $tb,
                ", %zmm",
                $ta,
                ", %zmm27\n",
                two_fmas!($acc),
            )
        };
    }

    /// Eight-entry f64 tables: a load and a single-source qword permute a step.
    macro_rules! qword_one_source {
        ($off:literal, $ta:literal, $tb:literal, $acc:literal) => {
            concat!(
                "vmovdqu64 ",
                $off,
                "(%rsi), %zmm26\n",
                "vpermpd %zmm",
                $ta,
                ", %zmm26, %zmm26\n",
                "vmovdqu64 ",
                $off,
                "+4(%rsi), %zmm27\n",
                "vpermpd %zmm",
                $ta,
                ", %zmm27, %zmm27\n",
                two_fmas!($acc),
            )
        };
    }

    timed_loop!(steps_fmas, six_pairs!(fmas_only));
    timed_loop!(
        steps_q4k,
        six_pairs!(
            two_source_then,
            "vpandd %zmm31, %zmm28, %zmm26\nvpsllq $32, %zmm28, %zmm27\n"
        )
    );
    timed_loop!(steps_q3k, six_pairs!(one_source_split));
    // The same split by two in-lane unpacks against a zero register (zmm0).
    timed_loop!(
        steps_q4k_unpack,
        six_pairs!(
            two_source_then,
            "vunpcklps %zmm28, %zmm0, %zmm26\nvunpckhps %zmm28, %zmm0, %zmm27\n"
        )
    );
    timed_loop!(
        steps_q4k_ymm,
        concat!(
            three_pairs_ymm!("0", "1", "2", "3", "4", "5"),
            three_pairs_ymm!("6", "7", "8", "9", "10", "11"),
        )
    );
    timed_loop!(steps_iq2, six_pairs!(shift_masked));
    timed_loop!(steps_load_masked, six_pairs!(load_masked));
    timed_loop!(steps_qword2, six_pairs!(qword_two_source));
    timed_loop!(steps_qword1, six_pairs!(qword_one_source));

    /// The least time of `RUNS` runs of `f`, in seconds per iteration.
    ///
    /// # Safety
    /// AVX-512F must be present.
    unsafe fn best(f: Body, buf: &Buf) -> f64 {
        // SAFETY: the caller's feature; the loops read inside `buf`.
        unsafe { f(ITERS / 10, buf.0.as_ptr()) };
        (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                // SAFETY: as above.
                unsafe { f(ITERS, buf.0.as_ptr()) };
                t.elapsed().as_secs_f64() / ITERS as f64
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// Prints both tables.
    ///
    /// # Safety
    /// AVX-512F must be present.
    pub(super) unsafe fn report() {
        // Codes of 0..15 in every byte (valid indices for every permute), inputs 1.0.
        let mut buf = Buf([0; 4096]);
        for (i, b) in buf.0.iter_mut().enumerate() {
            *b = (i % 16) as u8;
        }
        for v in buf.0[1024..1088].chunks_mut(8) {
            v.copy_from_slice(&1.0f64.to_le_bytes());
        }
        // SAFETY (whole body): the caller's feature.
        unsafe {
            let unit = best(fma_alone, &buf);
            println!("issue beside 8 zmm FMAs (time of the 8 FMAs alone = 1.00):");
            for (label, f) in [
                ("+ 8 zmm AND", fma_and8 as Body),
                ("+ 16 zmm AND", fma_and16),
                ("+ 24 zmm AND", fma_and24),
                ("+ 24 ymm AND", fma_yand24),
                ("+ 8 zmm loads + 8 zmm AND", fma_load8),
                ("+ 8 broadcasts + 8 zmm AND", fma_bcast8),
                ("32 zmm AND alone", and32),
            ] {
                println!("  {label:<28} {:5.2}", best(f, &buf) / unit);
            }
            let unit = best(steps_fmas, &buf);
            println!(
                "two steps of six pairs (time of their 12 FMAs alone = 1.00; 33% of the f64 peak \
                 leaves 3.00 for everything):"
            );
            for (label, f) in [
                ("load, vpermi2ps, AND, shift", steps_q4k as Body),
                ("load, vpermi2ps, 2 unpacks", steps_q4k_unpack),
                ("ymm rows, 3 pairs at a time", steps_q4k_ymm),
                ("load, vpermps, AND, shift", steps_q3k),
                ("2 x (shift, vpermps{z})", steps_iq2),
                ("2 x (load, vpermps{z})", steps_load_masked),
                ("2 x (load, vpermi2pd)", steps_qword2),
                ("2 x (load, vpermpd)", steps_qword1),
            ] {
                println!("  {label:<28} {:5.2}", best(f, &buf) / unit);
            }
        }
    }
}
