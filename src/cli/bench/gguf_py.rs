//! gguf-py's `gguf.quants.dequantize` on the same blocks as the bench's decoders, run in the
//! test virtualenv's python: its throughput and whether its values equal ours bit for bit.

use super::{DequantRow, GGUF_PY_VERIFY_VALUES};
use anyhow::{bail, Context};
use golden_lens::gguf::quant::block_decoder;
use golden_lens::gguf::GgmlType;
use golden_lens::oracle::gemm::roofline::best_compute_seconds;
use serde_json::json;
use std::path::{Path, PathBuf};

/// A folder under the system temporary directory, removed when dropped.
pub(super) struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> anyhow::Result<ScratchDir> {
        let p = std::env::temp_dir().join(format!("golden-lens-bench-{}", std::process::id()));
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(ScratchDir(p))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The python to run gguf-py with, if any.
pub(super) fn find_python(arg: &Option<PathBuf>) -> Option<PathBuf> {
    if let Some(p) = arg {
        return Some(p.clone());
    }
    if let Some(p) = std::env::var_os("GOLDEN_LENS_PY") {
        return Some(PathBuf::from(p));
    }
    let venv = Path::new(".venv/bin/python");
    venv.exists().then(|| venv.to_path_buf())
}

/// Runs gguf-py on the first values of each type's blocks; fills in its GB/s, ours on one thread
/// over the same blocks (best of `reps`), and whether its values equal ours bit for bit.
pub(super) fn gguf_py_side(
    python: &Path,
    rows: &mut [DequantRow],
    blocks: &[Vec<u8>],
    values: usize,
    reps: usize,
) -> anyhow::Result<()> {
    let dir = ScratchDir::new()?;
    let mut manifest = Vec::new();
    for (row, b) in rows.iter().zip(blocks) {
        if matches!(row.ty, GgmlType::F32 | GgmlType::I8) {
            continue; // gguf-py has no decoder for these (F32 is a view, I8 unsupported)
        }
        let (bv, bb, _) = block_decoder(row.ty).context("decodable type")?;
        let n = values.min(b.len() / bb * bv);
        let path = dir.path().join(format!("{}.bin", row.ty.name()));
        std::fs::write(&path, &b[..n / bv * bb])
            .with_context(|| format!("writing {}", path.display()))?;
        manifest.push(json!({
            "type": row.ty.name(),
            "path": path,
            "values": n,
            "verify_values": GGUF_PY_VERIFY_VALUES.min(n),
            "verify_path": dir.path().join(format!("{}.f32", row.ty.name())),
        }));
    }
    let manifest_path = dir.path().join("manifest.json");
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest)?)?;
    let out_path = dir.path().join("out.json");
    let script = dir.path().join("gguf_py_dequant.py");
    std::fs::write(&script, include_str!("../../../benches/gguf_py_dequant.py"))?;
    let o = std::process::Command::new(python)
        .arg(&script)
        .arg(&manifest_path)
        .arg(&out_path)
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    if !o.status.success() {
        bail!(
            "{} {}: {}",
            python.display(),
            script.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let results: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_path)?)?;
    for (row, b) in rows.iter_mut().zip(blocks) {
        let Some(r) = results.get(row.ty.name()) else {
            continue;
        };
        let (Some(s), Some(n)) = (r["seconds"].as_f64(), r["values"].as_u64()) else {
            bail!(
                "gguf-py result for {} lacks seconds/values: {r}",
                row.ty.name()
            );
        };
        row.gguf_py_gbs = Some(n as f64 * 4.0 / s / 1e9);
        // Ours on exactly the blocks gguf-py decoded, on one thread as numpy runs.
        let (bv, bb, fast) = block_decoder(row.ty).context("decodable type")?;
        let n = usize::try_from(n)?;
        if n % bv != 0 || n / bv * bb > b.len() {
            bail!(
                "gguf-py decoded {n} values of {}, not whole blocks of ours",
                row.ty.name()
            );
        }
        // One untimed decode first maps the fresh buffer's pages, so the timed ones measure
        // the decoder (which the oracle runs into buffers it reuses), not page faults.
        let mut out = vec![0f32; n];
        fast(&b[..n / bv * bb], &mut out);
        let ours_s = best_compute_seconds(reps, 1, |_| fast(&b[..n / bv * bb], &mut out));
        row.same_blocks_gbs = Some(n as f64 * 4.0 / ours_s / 1e9);
        let theirs = std::fs::read(dir.path().join(format!("{}.f32", row.ty.name())))?;
        let nv = theirs.len() / 4;
        let mut ours = vec![0f32; nv.div_ceil(bv) * bv];
        fast(&b[..ours.len() / bv * bb], &mut ours);
        let same = theirs
            .chunks_exact(4)
            .zip(&ours)
            .all(|(t, o)| u32::from_le_bytes([t[0], t[1], t[2], t[3]]) == o.to_bits());
        row.gguf_py_bit_exact = Some(same);
    }
    Ok(())
}
