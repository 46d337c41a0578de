//! This machine's limits, measured: the FMA peak (a register-only microkernel on every rayon
//! thread at once, in f32 and in f64, the width the oracle's exact reduction needs) and memory
//! bandwidth (a parallel copy, and a parallel read-only stream). `golden-lens bench` divides
//! every kernel's throughput by these.

use super::KernelPath;
use rayon::prelude::*;
use std::time::Instant;

/// CPU time the calling thread has run so far, in ns (`CLOCK_THREAD_CPUTIME_ID`: a thread's
/// own clock is exact at the moment it reads it), or `None` where the clock is unavailable.
fn thread_cpu_ns() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc != 0 {
            return None;
        }
        let secs = u64::try_from(ts.tv_sec).ok()?;
        let nanos = u64::try_from(ts.tv_nsec).ok()?;
        secs.checked_mul(1_000_000_000)?.checked_add(nanos)
    }
    #[cfg(not(unix))]
    None
}

/// CPU time, in ns, of the calling thread and of every rayon worker, each clock read by its own
/// thread (`rayon::broadcast`), or `None` where a clock is unavailable. The process clock
/// (`CLOCK_PROCESS_CPUTIME_ID`) is not enough: it adds a running thread other than the caller
/// only up to that thread's last scheduler tick, so it can leave out all of another thread's
/// part of a sub-millisecond run and report the run up to twice as fast as it was.
pub fn threads_cpu_ns() -> Option<u64> {
    let workers = rayon::broadcast(|_| thread_cpu_ns())
        .into_iter()
        .try_fold(0u64, |sum, t| sum.checked_add(t?))?;
    if rayon::current_thread_index().is_some() {
        // The caller is one of the workers the broadcast already read.
        return Some(workers);
    }
    workers.checked_add(thread_cpu_ns()?)
}

/// Seconds a run took on the CPUs it used: the process's CPU time divided by the threads that
/// were busy, capped by the wall time. On a machine shared with other tenants this leaves out
/// the time slices they took (which wall time counts), so limits and kernels are compared on
/// the same footing; where CPU time is unavailable it is the wall time.
pub fn compute_seconds(busy_threads: usize, f: impl FnOnce()) -> f64 {
    let c0 = threads_cpu_ns();
    let t0 = Instant::now();
    f();
    let wall = t0.elapsed().as_secs_f64();
    match (c0, threads_cpu_ns()) {
        // A clock that did not move means a run too short for it: the wall time then.
        (Some(a), Some(b)) if b > a => wall.min((b - a) as f64 * 1e-9 / busy_threads.max(1) as f64),
        _ => wall,
    }
}

/// The least [`compute_seconds`] of `reps` runs of `f(rep)` on `busy_threads` threads.
pub fn best_compute_seconds(reps: usize, busy_threads: usize, mut f: impl FnMut(usize)) -> f64 {
    (0..reps.max(1))
        .map(|r| compute_seconds(busy_threads, || f(r)))
        .fold(f64::INFINITY, f64::min)
        .max(f64::MIN_POSITIVE)
}

/// The [`compute_seconds`] of every run [`repeat_compute_seconds`] made, in increasing order;
/// [`Repeated::merge`] pools runs made at different times.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Repeated {
    times: Vec<f64>,
}

impl Repeated {
    /// The least run (infinite where there was none).
    pub fn best(&self) -> f64 {
        self.times.first().copied().unwrap_or(f64::INFINITY)
    }

    /// The median run (infinite where there was none).
    pub fn median(&self) -> f64 {
        let (n, mid) = (self.times.len(), self.times.len() / 2);
        match n {
            0 => f64::INFINITY,
            _ if n % 2 == 1 => self.times[mid],
            _ => 0.5 * (self.times[mid - 1] + self.times[mid]),
        }
    }

    /// How many runs there were.
    pub fn reps(&self) -> usize {
        self.times.len()
    }

    /// Both sets of runs as one.
    pub fn merge(&mut self, other: Repeated) {
        self.times.extend(other.times);
        self.times.sort_by(f64::total_cmp);
    }
}

/// [`compute_seconds`] of runs of `f(rep)`, `rep` counting from `first`: at least `min_reps`
/// runs, then more until the runs have taken `min_seconds` of wall time, at most `max_reps`
/// in all (`max_reps` below `min_reps` is read as `min_reps`). A sub-millisecond kernel on a
/// shared machine needs many runs before one of them is not interrupted, so a fixed handful
/// of repetitions reads it slower than it is; a time budget gives every shape the same chance.
pub fn repeat_compute_seconds(
    (min_reps, min_seconds, max_reps): (usize, f64, usize),
    busy_threads: usize,
    first: usize,
    mut f: impl FnMut(usize),
) -> Repeated {
    let (min_reps, max_reps) = (min_reps.max(1), max_reps.max(min_reps.max(1)));
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < min_reps
        || (times.len() < max_reps && start.elapsed().as_secs_f64() < min_seconds)
    {
        let r = first + times.len();
        times.push(compute_seconds(busy_threads, || f(r)).max(f64::MIN_POSITIVE));
    }
    times.sort_by(f64::total_cmp);
    Repeated { times }
}

/// Independent accumulators in the peak kernels: more than FMA latency × FMA ports, and few
/// enough to stay in registers with AVX2's sixteen.
pub(super) const PEAK_CHAINS: usize = 12;

/// Element type of a peak measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    F32,
    F64,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        }
    }
}

/// FLOPs (2 per lane per FMA) one call of the peak kernel does with `iters` iterations.
fn peak_flops(path: KernelPath, precision: Precision, iters: u64) -> f64 {
    let bits = match path {
        KernelPath::Avx512 => 512,
        KernelPath::Avx2 => 256,
        KernelPath::Neon => 128,
        KernelPath::Portable => 64,
    };
    let lanes = match precision {
        Precision::F32 => bits / 32,
        Precision::F64 => bits / 64,
    };
    // The portable kernel runs scalar chains of one lane each.
    let lanes = if path == KernelPath::Portable {
        1
    } else {
        lanes
    };
    2.0 * lanes as f64 * PEAK_CHAINS as f64 * iters as f64
}

/// Runs the register-only FMA kernel of `path` for `iters` iterations; returns a value that
/// depends on every accumulator (so the work cannot be dropped).
fn peak_kernel(path: KernelPath, precision: Precision, iters: u64) -> f64 {
    assert!(path.is_supported(), "path {} not supported", path.name());
    match (path, precision) {
        #[cfg(target_arch = "x86_64")]
        (KernelPath::Avx512 | KernelPath::Avx2, _) => super::x86::peak(
            path == KernelPath::Avx512,
            precision == Precision::F64,
            iters,
        ),
        (_, Precision::F64) => {
            let mut a = [1.0f64; PEAK_CHAINS];
            let (b, c) = (std::hint::black_box(0.999_999), std::hint::black_box(1e-6));
            for _ in 0..iters {
                for v in a.iter_mut() {
                    *v = v.mul_add(b, c);
                }
            }
            a.iter().sum()
        }
        (_, Precision::F32) => {
            let mut a = [1.0f32; PEAK_CHAINS];
            let (b, c) = (
                std::hint::black_box(0.999_9f32),
                std::hint::black_box(1e-4f32),
            );
            for _ in 0..iters {
                for v in a.iter_mut() {
                    *v = v.mul_add(b, c);
                }
            }
            f64::from(a.iter().sum::<f32>())
        }
    }
}

/// Peak FMA GFLOP/s of `path` in `precision` with every rayon thread of the current pool
/// running the kernel at once: the best of `reps` runs of about `seconds` each, timed by
/// [`compute_seconds`].
pub fn fma_peak_gflops(path: KernelPath, precision: Precision, seconds: f64, reps: usize) -> f64 {
    // Calibrate the iteration count on one thread.
    let mut iters = 1u64 << 16;
    loop {
        let t = Instant::now();
        std::hint::black_box(peak_kernel(path, precision, iters));
        let dt = t.elapsed().as_secs_f64();
        if dt > seconds / 4.0 || iters > 1 << 34 {
            iters = ((iters as f64) * seconds / dt.max(1e-9)).max(1.0) as u64;
            break;
        }
        iters *= 4;
    }
    let threads = rayon::current_num_threads();
    let seconds = best_compute_seconds(reps, threads, |_| {
        std::hint::black_box(rayon::broadcast(|_| peak_kernel(path, precision, iters)));
    });
    peak_flops(path, precision, iters) * threads as f64 / seconds / 1e9
}

/// Memory bandwidth, GB/s (1e9 bytes per second), best of `reps` timed by [`compute_seconds`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bandwidth {
    /// Bytes copied per second by a parallel `copy_from_slice` (each byte read once and written
    /// once).
    pub memcpy_gbs: f64,
    /// Bytes read per second by a parallel sum over the buffer (what a GEMM's weight stream
    /// needs).
    pub read_gbs: f64,
}

/// Chunk of the bandwidth buffers per rayon task.
const BANDWIDTH_CHUNK: usize = 1 << 20;

/// Measures [`Bandwidth`] on buffers of `bytes` (choose several times the last-level cache).
pub fn bandwidth(bytes: usize, reps: usize) -> Bandwidth {
    let n = bytes / 8;
    let src: Vec<u64> = (0..n as u64).collect();
    let mut dst = vec![0u64; n];
    let threads = rayon::current_num_threads();
    let copy_best = best_compute_seconds(reps, threads, |_| {
        dst.par_chunks_mut(BANDWIDTH_CHUNK / 8)
            .zip(src.par_chunks(BANDWIDTH_CHUNK / 8))
            .for_each(|(d, s)| d.copy_from_slice(s));
        std::hint::black_box(&dst);
    });
    let read_best = best_compute_seconds(reps, threads, |_| {
        let sum: u64 = src
            .par_chunks(BANDWIDTH_CHUNK / 8)
            .map(|c| c.iter().fold(0u64, |a, &v| a.wrapping_add(v)))
            .reduce(|| 0, u64::wrapping_add);
        std::hint::black_box(sum);
    });
    let b = (n * 8) as f64;
    Bandwidth {
        memcpy_gbs: b / copy_best / 1e9,
        read_gbs: b / read_best / 1e9,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_and_bandwidth_are_positive_and_finite() {
        for path in super::super::supported_paths() {
            for p in [Precision::F32, Precision::F64] {
                let g = fma_peak_gflops(path, p, 0.002, 1);
                assert!(
                    g.is_finite() && g > 0.0,
                    "{} {}: {g}",
                    path.name(),
                    p.name()
                );
            }
        }
        let b = bandwidth(1 << 20, 1);
        assert!(b.memcpy_gbs > 0.0 && b.read_gbs > 0.0, "{b:?}");
    }

    #[test]
    fn repetitions_run_their_minimum_then_fill_the_time_budget_up_to_the_cap() {
        // No budget: exactly the minimum, reps numbered from `first`.
        let mut seen = Vec::new();
        let r = repeat_compute_seconds((3, 0.0, 100), 1, 5, |i| seen.push(i));
        assert_eq!((r.reps(), seen), (3, vec![5, 6, 7]));
        // A budget the minimum cannot fill: more runs, never past the cap.
        let r = repeat_compute_seconds((2, 10.0, 7), 1, 0, |_| spin());
        assert_eq!(r.reps(), 7);
        // A budget of 20 ms over runs of about 2 ms of CPU each: well past the minimum, and
        // at least the budget's worth of wall time.
        let t = Instant::now();
        let mut r = repeat_compute_seconds((1, 0.02, 1000), 1, 0, |_| spin());
        assert!(t.elapsed().as_secs_f64() >= 0.02 && r.reps() >= 2, "{r:?}");
        assert!(r.reps() < 1000, "{r:?}");
        // Best at most median, both at least the CPU each run burns.
        let floor = SPIN_NS as f64 * 1e-9;
        assert!(r.best() <= r.median() && r.best() >= 0.9 * floor, "{r:?}");
        // Merged runs: the counts add, the best is the least of both.
        let (n, best) = (r.reps(), r.best());
        r.merge(repeat_compute_seconds((2, 0.0, 2), 1, 0, |_| ()));
        assert_eq!(r.reps(), n + 2);
        assert!(r.best() < best && r.best() <= r.median(), "{r:?}");
        assert_eq!(Repeated::default().best(), f64::INFINITY);
    }

    /// CPU time each of two parallel tasks burns, measured on its own thread's clock.
    const SPIN_NS: u64 = 2_000_000;

    /// Burns `SPIN_NS` of this thread's CPU time.
    fn spin() {
        let start = thread_cpu_ns().expect("thread clock");
        while thread_cpu_ns().expect("thread clock") - start < SPIN_NS {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_short_parallel_run_counts_every_threads_cpu_time() {
        // Two tasks each burn SPIN_NS of CPU inside the measured window, so the CPU time over
        // two busy threads is at least SPIN_NS, and so is the wall time (one task alone ran
        // that long): a clock that left out either thread's share (the worker's, or the
        // caller's, which runs one task itself from inside the pool) reports less. (The
        // process clock passes this test only because `spin` reads its thread's clock, which
        // brings that thread's time up to date; a kernel that does not read it is undercounted
        // until its next scheduler tick.)
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("a pool of two threads");
        for _ in 0..20 {
            let s = pool.install(|| {
                compute_seconds(2, || {
                    rayon::join(spin, spin);
                })
            });
            assert!(
                s >= SPIN_NS as f64 * 1e-9,
                "a run of two {SPIN_NS} ns tasks measured {s} s"
            );
        }
    }
}
