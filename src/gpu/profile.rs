//! Per-kernel GPU time: every dispatch timed, by GPU timestamps around its compute pass where
//! the adapter has `TIMESTAMP_QUERY`, else by the host's wall clock around a submission that
//! holds that dispatch alone (said so in [`TimingSource`]); summed per kernel and per step, with
//! the bytes the dispatch bound and, for the GEMMs, its multiply-adds, so achieved GB/s and
//! GFLOP/s stand next to the time.

use std::collections::BTreeMap;
use std::fmt;

/// How dispatch times were taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimingSource {
    /// GPU timestamps written at the start and end of each dispatch's compute pass.
    GpuTimestamps,
    /// The host's clock around a submit-and-wait of each dispatch alone (includes submission
    /// and wake-up latency: an upper bound on the kernel's time).
    CpuWallClock,
}

impl fmt::Display for TimingSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimingSource::GpuTimestamps => "GPU timestamp queries",
            TimingSource::CpuWallClock => {
                "CPU wall clock per dispatch, each submitted and waited for alone (no GPU timestamps)"
            }
        })
    }
}

/// One timed dispatch.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchTime {
    pub family: &'static str,
    pub entry: &'static str,
    /// The step it ran in (`Block(3)`), as the backend labelled it.
    pub step: String,
    pub seconds: f64,
    /// Bytes of every buffer the dispatch bound (each read or written once: an estimate of its
    /// memory traffic).
    pub bytes: u64,
    /// Floating-point operations (2 per multiply-add) where the kernel states them (GEMMs).
    pub flops: u64,
}

/// Totals of one kernel entry point or one step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Totals {
    pub dispatches: u64,
    pub seconds: f64,
    pub bytes: u64,
    pub flops: u64,
}

impl Totals {
    fn add(&mut self, d: &DispatchTime) {
        self.dispatches += 1;
        self.seconds += d.seconds;
        self.bytes += d.bytes;
        self.flops += d.flops;
    }

    /// Achieved GB/s (bytes bound over time).
    pub fn gb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e9
        } else {
            0.0
        }
    }

    /// Achieved GFLOP/s (0 where no flops were stated).
    pub fn gflop_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.flops as f64 / self.seconds / 1e9
        } else {
            0.0
        }
    }
}

/// The timed dispatches of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub source: TimingSource,
    pub dispatches: Vec<DispatchTime>,
}

impl Profile {
    /// An empty profile timed by `source`.
    pub fn new(source: TimingSource) -> Profile {
        Profile {
            source,
            dispatches: Vec::new(),
        }
    }

    /// Totals per `family::entry`, the most time first.
    pub fn by_kernel(&self) -> Vec<(String, Totals)> {
        let mut m: BTreeMap<String, Totals> = BTreeMap::new();
        for d in &self.dispatches {
            m.entry(format!("{}::{}", d.family, d.entry))
                .or_default()
                .add(d);
        }
        let mut v: Vec<(String, Totals)> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
        v
    }

    /// Totals per kernel family, the most time first.
    pub fn by_family(&self) -> Vec<(&'static str, Totals)> {
        let mut m: BTreeMap<&'static str, Totals> = BTreeMap::new();
        for d in &self.dispatches {
            m.entry(d.family).or_default().add(d);
        }
        let mut v: Vec<(&'static str, Totals)> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
        v
    }

    /// Totals per step, in the order the steps first ran.
    pub fn by_step(&self) -> Vec<(String, Totals)> {
        let mut v: Vec<(String, Totals)> = Vec::new();
        for d in &self.dispatches {
            match v.iter_mut().find(|(s, _)| *s == d.step) {
                Some((_, t)) => t.add(d),
                None => {
                    let mut t = Totals::default();
                    t.add(d);
                    v.push((d.step.clone(), t));
                }
            }
        }
        v
    }

    /// Everything.
    pub fn total(&self) -> Totals {
        let mut t = Totals::default();
        for d in &self.dispatches {
            t.add(d);
        }
        t
    }

    /// The profile as JSON (`check --profile --json`).
    pub fn to_json(&self) -> serde_json::Value {
        let row = |name: &str, t: &Totals| {
            serde_json::json!({
                "name": name,
                "dispatches": t.dispatches,
                "seconds": t.seconds,
                "bytes": t.bytes,
                "flops": t.flops,
                "gb_per_s": t.gb_per_s(),
                "gflop_per_s": t.gflop_per_s(),
            })
        };
        serde_json::json!({
            "timing": self.source.to_string(),
            "total": row("total", &self.total()),
            "kernels": self.by_kernel().iter().map(|(n, t)| row(n, t)).collect::<Vec<_>>(),
            "families": self.by_family().iter().map(|(n, t)| row(n, t)).collect::<Vec<_>>(),
            "steps": self.by_step().iter().map(|(n, t)| row(n, t)).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rates are a few f64 sums and one division of exact decimal inputs: far inside 1e-9.
    const RATE_TOL: f64 = 1e-9;

    fn d(family: &'static str, entry: &'static str, step: &str, seconds: f64) -> DispatchTime {
        DispatchTime {
            family,
            entry,
            step: step.into(),
            seconds,
            bytes: 1_000_000,
            flops: 2_000_000,
        }
    }

    #[test]
    fn totals_group_by_kernel_family_and_step() {
        let mut p = Profile::new(TimingSource::CpuWallClock);
        p.dispatches = vec![
            d("gemm", "gemm_rows4", "Block(0)", 0.002),
            d("rows", "rmsnorm", "Block(0)", 0.001),
            d("gemm", "gemm", "Block(1)", 0.004),
        ];
        let k = p.by_kernel();
        assert_eq!(k[0].0, "gemm::gemm");
        let f = p.by_family();
        assert_eq!(f[0].0, "gemm");
        assert_eq!(f[0].1.dispatches, 2);
        let s = p.by_step();
        assert_eq!(
            s.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["Block(0)", "Block(1)"]
        );
        // 2 MB over 6 ms = 0.333 GB/s; 4 MFLOP over 6 ms = 0.667 GFLOP/s.
        assert!((f[0].1.gb_per_s() - 2.0 / 6.0).abs() < RATE_TOL);
        assert!((f[0].1.gflop_per_s() - 4.0 / 6.0).abs() < RATE_TOL);
        assert_eq!(p.total().dispatches, 3);
    }
}
