//! The golden loader's memory stays proportional to what the golden holds: loading a 20 MB
//! golden (DeepSeek's v3-full regimes repeated twelve times) allocates at peak less than
//! [`MAX_PEAK_OVER_FILE`] times the file's size. Before the streaming loader the JSON tree cost
//! about 32 bytes per value (fuzz finding F9: 20x the file). A counting global allocator
//! measures the live heap; this file holds one test so nothing else allocates meanwhile.

use golden_lens::golden::Golden;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Peak heap while loading, as a multiple of the file's size. A golden's values take 8 bytes
/// each against 10 to 20 bytes of text for the reference's float reprs, so the loaded golden is
/// about the file's size; 3x is the bound the issue sets (and what a 20 MB golden may cost).
const MAX_PEAK_OVER_FILE: f64 = 3.0;

/// Size of the generated golden: the "20 MB golden".
const TARGET_BYTES: usize = 20 << 20;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to the system allocator with the same layout; the counters are
// plain atomics and never affect the allocation itself.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc`/`realloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            let live = LIVE.fetch_add(new_size, Ordering::Relaxed) + new_size;
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// DeepSeek's v3-full golden with its three regimes repeated until the file reaches
/// `TARGET_BYTES` (regime names suffixed, `fixture.regimes` listing them all).
fn big_golden() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/reference/ds41_tiny_golden.v3-full.json"
    );
    let text = std::fs::read_to_string(path).expect("v3-full");
    let doc: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&text).expect("json");
    let regimes: Vec<String> = doc["fixture"]["regimes"]
        .as_array()
        .expect("regimes")
        .iter()
        .map(|r| r.as_str().expect("name").to_string())
        .collect();
    let copies = TARGET_BYTES.div_ceil(text.len());
    let mut out = serde_json::Map::new();
    let mut fixture = doc["fixture"].clone();
    let mut names = Vec::new();
    for k in 0..copies {
        for r in &regimes {
            names.push(serde_json::Value::from(format!("{r}_{k}")));
        }
    }
    fixture["regimes"] = serde_json::Value::Array(names);
    out.insert("fixture".into(), fixture);
    out.insert("weights_meta".into(), doc["weights_meta"].clone());
    for k in 0..copies {
        for r in &regimes {
            out.insert(format!("{r}_{k}"), doc[r.as_str()].clone());
        }
    }
    serde_json::to_string(&out).expect("serialize")
}

#[test]
fn loading_a_20_mb_golden_peaks_below_three_times_its_size() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("big.json");
    let text = big_golden();
    std::fs::write(&path, &text).expect("write");
    let file_bytes = text.len();
    assert!(file_bytes >= TARGET_BYTES, "{file_bytes} bytes");
    drop(text);

    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let golden = Golden::load(&path).expect("the big golden loads");
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let ratio = peak as f64 / file_bytes as f64;
    eprintln!("loaded {file_bytes} bytes: heap peak {peak} bytes ({ratio:.2}x the file)");
    assert!(
        ratio < MAX_PEAK_OVER_FILE,
        "loading {file_bytes} bytes peaked at {peak} bytes ({ratio:.2}x)"
    );
    assert_eq!(golden.capture_count() % 443, 0);
    assert!(golden.regimes.len() >= 36);
}
