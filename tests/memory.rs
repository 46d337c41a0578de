//! The RssAnon sampler: a buffer the process allocates and touches raises the sampled peak by
//! its size; pages of a mapped file read end to end do not (they are file-backed).

use golden_lens::model::memory::{read_now, MemorySampler};
use std::io::Write;
use std::time::Duration;

/// Bytes allocated or mapped by the test: large against the noise of a test process (other
/// threads' stacks, the allocator's arenas), small enough for any CI machine.
const PROBE_BYTES: usize = 96 << 20;

/// Part of the probe the sampler must see: the allocator may return a few pages early, and a
/// sample lands between other threads' allocations.
const SEEN_FRACTION: f64 = 0.9;

/// How much anonymous memory reading a mapped file may add (page tables, the reader's own
/// buffers): a small fraction of the probe.
const MAPPED_SLACK_FRACTION: f64 = 0.25;

const INTERVAL: Duration = Duration::from_millis(5);

#[test]
fn the_sampler_counts_anonymous_pages_and_not_mapped_files() {
    let Some(start) = read_now() else {
        eprintln!("SKIPPED: /proc/self/status has no RssAnon on this platform");
        return;
    };
    assert!(start.rss_anon_bytes > 0);

    // A mapped file read end to end: file-backed pages.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("probe.bin");
    let mut f = std::fs::File::create(&path).expect("create");
    let chunk = vec![7u8; 1 << 20];
    for _ in 0..PROBE_BYTES >> 20 {
        f.write_all(&chunk).expect("write");
    }
    f.sync_all().expect("sync");
    drop(f);
    let sampler = MemorySampler::start(INTERVAL).expect("sampler");
    let file = std::fs::File::open(&path).expect("open");
    // SAFETY: the file is private to this test's temporary directory and not modified while
    // mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.expect("map");
    let sum: u64 = map.iter().step_by(4096).map(|&b| u64::from(b)).sum();
    assert_eq!(sum, 7 * (PROBE_BYTES / 4096) as u64);
    std::thread::sleep(INTERVAL * 4);
    let mapped = sampler.stop();
    let grew = mapped
        .peak_rss_anon_bytes
        .saturating_sub(mapped.start_rss_anon_bytes);
    assert!(
        (grew as f64) < MAPPED_SLACK_FRACTION * PROBE_BYTES as f64,
        "reading a mapped file grew RssAnon by {grew} bytes: {mapped:?}"
    );
    assert!(mapped.peak_rss_file_bytes >= (SEEN_FRACTION * PROBE_BYTES as f64) as u64);
    drop(map);

    // An anonymous buffer, touched page by page, then freed.
    let sampler = MemorySampler::start(INTERVAL).expect("sampler");
    let mut buf = vec![0u8; PROBE_BYTES];
    for i in (0..buf.len()).step_by(4096) {
        buf[i] = 1;
    }
    std::thread::sleep(INTERVAL * 4);
    let touched: usize = buf.iter().step_by(4096).map(|&b| b as usize).sum();
    assert_eq!(touched, PROBE_BYTES / 4096);
    drop(buf);
    let report = sampler.stop();
    assert!(report.samples >= 2, "{report:?}");
    let grew = report
        .peak_rss_anon_bytes
        .saturating_sub(report.start_rss_anon_bytes);
    assert!(
        grew as f64 >= SEEN_FRACTION * PROBE_BYTES as f64,
        "a touched {PROBE_BYTES}-byte buffer raised the sampled peak by only {grew}: {report:?}"
    );
    assert!(report.summary().contains("peak anonymous memory"));
}
