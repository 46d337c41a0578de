//! The whole forward of a real-dims deepseek41 GGUF through the CPU oracle (every step: the
//! engram hash, embedding, engram layers, the 40 blocks and `Final`), printing wall time per step,
//! the weight bytes each step read, and peak anonymous memory. Made for the synthesized real
//! layout (`golden-lens gguf synth --layout antirez-q2 --out F`, a sparse file of zero weights):
//!
//! `cargo run --release --example realdims_forward -- F [tokens=16] [skip_final=0]`
//!
//! Zero weights give equal router scores, so every token picks the same six experts (the
//! torch-CPU tie order): the routed experts run as six 16-row GEMMs per layer, not up to 96
//! one-row ones. The arithmetic per expert row is the same either way.

use golden_lens::model::stored::StoredMatrix;
use golden_lens::model::{Backend, Capture, GgufSource, Step, WeightError, WeightSource};
use golden_lens::oracle::Oracle;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Counts the weight bytes handed to the oracle: stored blocks as their file bytes, f32
/// tensors and rows as 4 bytes per value.
struct Counting {
    inner: GgufSource,
    bytes: AtomicU64,
}

impl WeightSource for Counting {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.inner.shape(name)
    }
    fn tensor(&self, name: &str) -> Result<Arc<Vec<f32>>, WeightError> {
        let t = self.inner.tensor(name)?;
        self.bytes.fetch_add(4 * t.len() as u64, Ordering::Relaxed);
        Ok(t)
    }
    fn rows(&self, name: &str, rows: &[usize]) -> Result<Vec<f32>, WeightError> {
        let r = self.inner.rows(name, rows)?;
        self.bytes.fetch_add(4 * r.len() as u64, Ordering::Relaxed);
        Ok(r)
    }
    fn stored_matrix(&self, name: &str) -> Option<Result<StoredMatrix<'_>, WeightError>> {
        let m = self.inner.stored_matrix(name)?;
        if let Ok(m) = &m {
            self.bytes.fetch_add(m.byte_len() as u64, Ordering::Relaxed);
        }
        Some(m)
    }
}

/// CPU seconds (user + system) this process has used, from `/proc/self/stat` (clock ticks of
/// 1/100 s), if the kernel reports them.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// A `/proc/self/status` field in KiB (`VmHWM`, `RssAnon`), if the kernel reports it.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: realdims_forward GGUF [tokens=16] [skip_final=0]")?;
    let tokens: usize = args.get(2).map_or(Ok(16), |a| a.parse())?;
    let skip_final = args.get(3).is_some_and(|a| a == "1");
    let t0 = Instant::now();
    let (inner, model) = GgufSource::open(path)?;
    let cfg = model.cfg.clone();
    let counting = Arc::new(Counting {
        inner,
        bytes: AtomicU64::new(0),
    });
    let weights: Arc<dyn WeightSource> = counting.clone();
    println!(
        "{path}: {} layers, dim {}, {} experts of {}; opened in {:.2} s; rayon threads {}",
        cfg.n_layers,
        cfg.dim,
        cfg.n_routed_experts,
        cfg.moe_inter_dim,
        t0.elapsed().as_secs_f64(),
        rayon::current_num_threads()
    );
    let id_range = cfg.engram.as_ref().map_or(cfg.vocab_size, |e| {
        e.compressed_vocab_size.min(cfg.vocab_size)
    });
    let ids: Vec<i64> = (0..tokens as u64)
        .map(|t| golden_lens::num::fixed_int("input_ids", t, id_range as u64) as i64)
        .collect();
    let mut oracle = Oracle::new(cfg, weights, model.tables.clone());
    oracle.begin(&ids, 0)?;
    let mut total = 0f64;
    let mut blocks = 0f64;
    let cpu0 = cpu_seconds().unwrap_or(0.0);
    let mut cpu_blocks = 0f64;
    for step in oracle.steps() {
        if skip_final && step == Step::Final {
            println!("{:<12} skipped", step.to_string());
            continue;
        }
        let before = counting.bytes.load(Ordering::Relaxed);
        let mut sink: Vec<Capture> = Vec::new();
        let c = cpu_seconds().unwrap_or(0.0);
        let t = Instant::now();
        oracle.run(step, &mut sink)?;
        let dt = t.elapsed().as_secs_f64();
        let dc = cpu_seconds().unwrap_or(0.0) - c;
        total += dt;
        if matches!(step, Step::Block(_)) {
            blocks += dt;
            cpu_blocks += dc;
        }
        let read = counting.bytes.load(Ordering::Relaxed) - before;
        println!(
            "{:<12} wall {:>7.3} s  cpu {:>7.2} s  weights read {:>9.1} MB  RssAnon {:>6.2} GiB",
            step.to_string(),
            dt,
            dc,
            read as f64 / 1e6,
            status_kib("RssAnon:").unwrap_or(0) as f64 / (1u64 << 20) as f64
        );
    }
    println!(
        "total wall {:.2} s ({:.2} s in the blocks), cpu {:.2} s ({:.2} s in the blocks); weights read {:.2} GB; peak RSS (VmHWM, mapped file pages included) {:.2} GiB",
        total,
        blocks,
        cpu_seconds().unwrap_or(0.0) - cpu0,
        cpu_blocks,
        counting.bytes.load(Ordering::Relaxed) as f64 / 1e9,
        status_kib("VmHWM:").unwrap_or(0) as f64 / (1u64 << 20) as f64
    );
    Ok(())
}
