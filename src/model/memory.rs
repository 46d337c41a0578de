//! Peak anonymous memory of this process, sampled on a thread: `RssAnon` from
//! `/proc/self/status` (Linux). Anonymous pages are what the tool itself allocates (caches,
//! activations, device buffers of a CPU adapter); pages of a mapped GGUF are file-backed and
//! belong to the page cache, which the kernel reclaims at will, so they are not counted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Default sampling interval: short enough to catch a step's transient buffers (a real-dims
/// expert slab lives for tens of milliseconds), long enough to cost nothing.
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(20);

/// One reading of `/proc/self/status`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryReading {
    /// Resident anonymous memory (`RssAnon`).
    pub rss_anon_bytes: u64,
    /// Resident file-backed memory (`RssFile`: mapped files, e.g. the GGUF).
    pub rss_file_bytes: u64,
    /// The kernel's own high-water mark of the whole resident set (`VmHWM`), files included.
    pub peak_rss_bytes: u64,
}

/// Value in bytes of a `Name:   1234 kB` line of `/proc/self/status`.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let rest = line.get(key.len()..)?.strip_prefix(':')?;
    let mut parts = rest.split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => value.checked_mul(1024),
        _ => None,
    }
}

/// Parses the fields of [`MemoryReading`] out of a `/proc/<pid>/status` text; `None` when
/// `RssAnon` is absent (not Linux, or a kernel before 4.5).
pub fn parse_status(status: &str) -> Option<MemoryReading> {
    Some(MemoryReading {
        rss_anon_bytes: status_kib(status, "RssAnon")?,
        rss_file_bytes: status_kib(status, "RssFile").unwrap_or(0),
        peak_rss_bytes: status_kib(status, "VmHWM").unwrap_or(0),
    })
}

/// This process's memory now, if the platform reports it.
pub fn read_now() -> Option<MemoryReading> {
    parse_status(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// What a sampler saw between start and stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryReport {
    /// Largest `RssAnon` sampled.
    pub peak_rss_anon_bytes: u64,
    /// `RssAnon` at the start.
    pub start_rss_anon_bytes: u64,
    /// Largest `RssFile` sampled (mapped GGUF pages; informational).
    pub peak_rss_file_bytes: u64,
    /// Readings taken.
    pub samples: u64,
}

impl MemoryReport {
    /// `peak anon 1.23 GiB (file-backed 4.56 GiB, 812 samples)`.
    pub fn summary(&self) -> String {
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        format!(
            "peak anonymous memory {:.2} GiB (RssAnon; file-backed peak {:.2} GiB not counted; \
             {} samples)",
            gib(self.peak_rss_anon_bytes),
            gib(self.peak_rss_file_bytes),
            self.samples
        )
    }
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    peak_anon: AtomicU64,
    start_anon: AtomicU64,
    peak_file: AtomicU64,
    samples: AtomicU64,
}

impl Shared {
    fn sample(&self) -> bool {
        let Some(r) = read_now() else {
            return false;
        };
        self.peak_anon
            .fetch_max(r.rss_anon_bytes, Ordering::Relaxed);
        self.peak_file
            .fetch_max(r.rss_file_bytes, Ordering::Relaxed);
        self.samples.fetch_add(1, Ordering::Relaxed);
        true
    }

    fn report(&self) -> MemoryReport {
        MemoryReport {
            peak_rss_anon_bytes: self.peak_anon.load(Ordering::Relaxed),
            start_rss_anon_bytes: self.start_anon.load(Ordering::Relaxed),
            peak_rss_file_bytes: self.peak_file.load(Ordering::Relaxed),
            samples: self.samples.load(Ordering::Relaxed),
        }
    }
}

/// Samples `RssAnon` on a background thread until stopped (or dropped).
pub struct MemorySampler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl MemorySampler {
    /// Starts sampling every `interval`; `None` when the platform does not report `RssAnon`.
    pub fn start(interval: Duration) -> Option<MemorySampler> {
        let first = read_now()?;
        let shared = Arc::new(Shared::default());
        shared
            .start_anon
            .store(first.rss_anon_bytes, Ordering::Relaxed);
        shared.sample();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("rss-anon-sampler".into())
            .spawn(move || {
                while !s.stop.load(Ordering::Relaxed) {
                    if !s.sample() {
                        break;
                    }
                    std::thread::park_timeout(interval);
                }
            })
            .ok()?;
        Some(MemorySampler {
            shared,
            thread: Some(thread),
        })
    }

    /// What was seen so far (the sampler keeps running); takes one reading first.
    pub fn report(&self) -> MemoryReport {
        self.shared.sample();
        self.shared.report()
    }

    /// Stops the thread and returns the final report (one last reading included).
    pub fn stop(mut self) -> MemoryReport {
        self.halt();
        self.shared.sample();
        self.shared.report()
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for MemorySampler {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_lines() {
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nRssAnon:\t    1024 kB\nRssFile:\t 512 kB\n";
        assert_eq!(
            parse_status(status),
            Some(MemoryReading {
                rss_anon_bytes: 1024 * 1024,
                rss_file_bytes: 512 * 1024,
                peak_rss_bytes: 2048 * 1024,
            })
        );
        assert_eq!(parse_status("VmHWM: 1 kB\n"), None, "no RssAnon");
        assert_eq!(parse_status("RssAnon: 12 pages\n"), None, "unit not kB");
        assert_eq!(parse_status("RssAnonX: 12 kB\n"), None, "another key");
    }
}
