//! `golden-lens gguf ...`: inspect deepseek41 GGUF files (single files or split sets), export
//! dequantized tensors as `.npy`, and write tiny deepseek41 files from a golden.
use anyhow::Context;
use clap::Subcommand;
use golden_lens::gguf::info::{build_report, InfoReport};
use golden_lens::gguf::{GgufError, GgufSet};
use serde_json::Value;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Strings longer than this are cut in the text view of `info` (the JSON keeps them whole).
const TEXT_STRING_PREVIEW_CHARS: usize = 96;

#[derive(Subcommand, Debug)]
pub enum GgufCmd {
    /// Print dialect, metadata, tensor table and census of a GGUF (any shard of a split set
    /// opens the whole set; a shard whose siblings are missing is shown alone). Any valid GGUF
    /// prints in full and exits 0, with a note when it is not a complete deepseek41 model;
    /// exits 1 only when the file is not valid GGUF.
    Info {
        path: PathBuf,
        /// Machine-readable output (serde_json) instead of text.
        #[arg(long)]
        json: bool,
        /// Exit 1 also when the file is not a complete, valid deepseek41 model.
        #[arg(long)]
        strict: bool,
    },
    /// Dequantize one tensor (or one expert slab of a merged 3-D expert tensor) to f32 and write
    /// it as a .npy v1.0 file, atomically (temp file + rename).
    Tensor {
        path: PathBuf,
        /// GGUF tensor name, e.g. `blk.3.attn_q_a.weight`.
        name: String,
        /// Expert index of a merged `[ne0, ne1, n_experts]` tensor.
        #[arg(long)]
        expert: Option<u64>,
        /// Output `.npy` path.
        #[arg(long)]
        npy: PathBuf,
    },
    /// Write a sparse file with the real antirez tensor plan and metadata geometry (1046 tensors,
    /// 16 KiB alignment, engram tables last); tensor data are holes, so it costs a few MB.
    Synth {
        /// `antirez-q2` (365,713,686,528-byte layout) or `antirez-q4`.
        #[arg(long, default_value = "antirez-q2")]
        layout: String,
        /// Output path.
        #[arg(long)]
        out: PathBuf,
        /// Give these layers (`A-B` or `N`) real data, quantized in each tensor's own type from
        /// the filler, with the token embedding, output norm and head; the rest stay holes.
        #[arg(long)]
        fill_layers: Option<String>,
        /// With --fill-layers: routed experts (the first N) filled in each expert tensor.
        #[arg(long, default_value_t = 0, requires = "fill_layers")]
        fill_experts: u64,
    },
    /// Write a tiny deepseek41 GGUF from a golden's fixture and filler weights.
    Export {
        /// The golden (default: the embedded v3-full reference golden).
        #[arg(long)]
        golden: Option<PathBuf>,
        /// Output path.
        #[arg(long)]
        out: PathBuf,
        /// `ds4` (antirez keys, FP8 engram rows, alignment 16384) or `llamacpp`.
        #[arg(long, value_enum, default_value = "ds4")]
        dialect: DialectArg,
        /// Per-tensor types: `SELECTOR=TYPE,...` (selectors: default, experts, shared, attn,
        /// compressor, indexer, router, hc, embed, head, engram_kv, engram_qk, vectors, engram,
        /// or a tensor-name glob; types: auto, f32, f16, bf16, q8_0, q4_0, q2_k..q6_k,
        /// iq2_xxs). `auto` = the reference's own precision (lossless).
        #[arg(long, default_value = "default=auto")]
        types: String,
        /// `general.alignment` (default: 16384 for ds4, 32 for llamacpp).
        #[arg(long)]
        alignment: Option<u32>,
    },
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialectArg {
    Ds4,
    Llamacpp,
}

pub fn run(cmd: GgufCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        GgufCmd::Info { path, json, strict } => info(&path, json, strict),
        GgufCmd::Tensor {
            path,
            name,
            expert,
            npy,
        } => tensor(&path, &name, expert, &npy),
        GgufCmd::Synth {
            layout,
            out,
            fill_layers,
            fill_experts,
        } => match fill_layers {
            Some(layers) => synth_filled(&layout, &out, &layers, fill_experts),
            None => synth(&layout, &out),
        },
        GgufCmd::Export {
            golden,
            out,
            dialect,
            types,
            alignment,
        } => export(golden.as_deref(), &out, dialect, &types, alignment),
    }
}

fn export(
    golden: Option<&Path>,
    out: &Path,
    dialect: DialectArg,
    types: &str,
    alignment: Option<u32>,
) -> anyhow::Result<ExitCode> {
    use golden_lens::gguf::Dialect;
    use golden_lens::model::gguf_export::{export_golden, ExportOptions, TypePlan};
    let golden = match golden {
        Some(p) => golden_lens::golden::Golden::load(p)?,
        None => golden_lens::golden::embedded::default_golden()?,
    };
    let mut opts = ExportOptions::new(match dialect {
        DialectArg::Ds4 => Dialect::Ds4,
        DialectArg::Llamacpp => Dialect::LlamaCpp,
    });
    opts.types = TypePlan::parse(types)?;
    if let Some(a) = alignment {
        opts.alignment = a;
    }
    let summary = export_golden(&golden, out, &opts)?;
    let mut census: std::collections::BTreeMap<String, usize> = Default::default();
    for t in &summary.tensors {
        *census.entry(t.ggml_type.name()).or_default() += 1;
    }
    println!(
        "wrote {} ({} dialect, {} tensors, {} bytes)",
        out.display(),
        opts.dialect.name(),
        summary.tensors.len(),
        summary.file_bytes
    );
    let census: Vec<String> = census.iter().map(|(t, n)| format!("{t} {n}")).collect();
    println!("types: {}", census.join(", "));
    if let Some(e) = &summary.engram_encoding {
        println!("engram tables: {e}");
    }
    let fallbacks: Vec<_> = summary
        .tensors
        .iter()
        .filter_map(|t| t.fallback.as_ref().map(|why| (t, why)))
        .collect();
    if let Some((first, why)) = fallbacks.first() {
        println!(
            "fallbacks: {} tensors kept their lossless type (e.g. {}: {why})",
            fallbacks.len(),
            first.name
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn info(path: &Path, json: bool, strict: bool) -> anyhow::Result<ExitCode> {
    // Not valid GGUF: say why and exit 1 (the one failure plain `info` reports).
    let not_gguf = |e: &dyn std::fmt::Display| {
        eprintln!("error: {e}");
        ExitCode::from(1)
    };
    let (set, shard_note) = match GgufSet::open(path) {
        Ok(set) => (set, None),
        // A shard of an incomplete set (or a file whose split keys do not match its name):
        // the file itself is valid GGUF, so show it alone.
        Err(e @ GgufError::Split { .. }) => match GgufSet::single_file(path) {
            Ok(set) => (set, Some(format!("shown alone, not as a split set: {e}"))),
            Err(alone) => return Ok(not_gguf(&alone)),
        },
        Err(e) => return Ok(not_gguf(&e)),
    };
    let mut report = match build_report(&set) {
        Ok(r) => r,
        Err(e) => return Ok(not_gguf(&e)),
    };
    report.notes.extend(shard_note);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_text(&report));
        for note in &report.notes {
            println!("note: {note}");
        }
    }
    Ok(if strict && !report.is_complete_deepseek41() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn short_value(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().count() > TEXT_STRING_PREVIEW_CHARS => {
            let head: String = s.chars().take(TEXT_STRING_PREVIEW_CHARS).collect();
            format!("{head:?}… ({} bytes)", s.len())
        }
        Value::Object(o) if o.contains_key("count") && o.contains_key("head") => {
            let head = o.get("head").map(|h| h.to_string()).unwrap_or_default();
            let count = o.get("count").map(|c| c.to_string()).unwrap_or_default();
            format!("{} … ({count} elements)", head.trim_end_matches(']'))
        }
        other => other.to_string(),
    }
}

fn render_text(r: &InfoReport) -> String {
    let mut s = String::new();
    for (i, sh) in r.shards.iter().enumerate() {
        let _ = writeln!(
            s,
            "shard {}/{}: {} ({} bytes, GGUF v{}, alignment {}, data at {}, {} tensors, {} bytes mapped)",
            i + 1,
            r.shards.len(),
            sh.path,
            sh.file_len,
            sh.version,
            sh.alignment,
            sh.data_offset,
            sh.tensor_count,
            sh.mapped_len
        );
    }
    let _ = writeln!(
        s,
        "dialect: {}",
        r.dialect
            .as_deref()
            .unwrap_or("unknown (not a deepseek41 file of a known dialect)")
    );
    match (&r.deepseek41, &r.deepseek41_error) {
        (_, Some(e)) => {
            let _ = writeln!(s, "deepseek41 metadata: INVALID: {e}");
        }
        (Some(m), None) => {
            let _ = writeln!(s, "deepseek41 metadata: valid");
            if let Some(e) = m.get("engram").filter(|e| !e.is_null()) {
                let _ = writeln!(
                    s,
                    "engram: encoding {}, layers {}, rows {}, compressed vocab {}, pad {} (constants validated)",
                    e["encoding"], e["layer_ids"], e["rows"], e["compressed_vocab_size"], e["pad_id"]
                );
            }
        }
        (None, None) => {}
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    let _ = writeln!(s, "\nmetadata ({} keys):", r.metadata.len());
    for m in &r.metadata {
        let _ = writeln!(
            s,
            "  {:<48} {:<16} {}",
            m.key,
            m.value_type,
            short_value(&m.value)
        );
    }
    let _ = writeln!(s, "\ntensors ({}):", r.tensors.len());
    let _ = writeln!(
        s,
        "  {:<40} {:<8} {:<28} {:>5} {:>16} {:>16}",
        "name", "type", "dims (ggml ne)", "shard", "offset", "bytes"
    );
    for t in &r.tensors {
        let dims = format!("{:?}", t.dims);
        let bytes = t
            .n_bytes
            .map_or_else(|| "unknown".to_string(), |b| b.to_string());
        let _ = writeln!(
            s,
            "  {:<40} {:<8} {:<28} {:>5} {:>16} {:>16}",
            t.name, t.ggml_type, dims, t.shard, t.offset, bytes
        );
    }
    let _ = writeln!(s, "\ncensus:");
    let _ = writeln!(
        s,
        "  {:<8} {:>6} {:>18} {:>18} {:>8}",
        "type", "count", "bytes", "elements", "bpw"
    );
    for c in &r.census {
        let bpw = c
            .bits_per_weight
            .map_or_else(|| "-".to_string(), |b| format!("{b:.4}"));
        let _ = writeln!(
            s,
            "  {:<8} {:>6} {:>18} {:>18} {:>8}",
            c.ggml_type, c.count, c.bytes, c.n_elements, bpw
        );
    }
    s
}

fn tensor(path: &Path, name: &str, expert: Option<u64>, npy: &Path) -> anyhow::Result<ExitCode> {
    let set = GgufSet::open(path)?;
    let (_, t) = set.require_tensor(name)?;
    // numpy shape is the reversed ggml ne order (row-major, ne0 fastest).
    let (values, shape): (Vec<f32>, Vec<u64>) = match expert {
        Some(e) => {
            let v = set.expert_f32(name, e)?;
            (v, vec![t.dims[1], t.dims[0]])
        }
        None => (
            set.tensor_f32(name)?,
            t.dims.iter().rev().copied().collect(),
        ),
    };
    write_npy_f32_atomic(npy, &shape, &values)
        .with_context(|| format!("writing {}", npy.display()))?;
    println!(
        "wrote {} ({}{}, {} values, shape {:?}, from {})",
        npy.display(),
        name,
        expert.map_or(String::new(), |e| format!(" expert {e}")),
        values.len(),
        shape,
        t.ggml_type
    );
    Ok(ExitCode::SUCCESS)
}

fn synth(layout: &str, out: &Path) -> anyhow::Result<ExitCode> {
    use golden_lens::gguf::synth::{write_sparse_layout, RealLayout};
    let layout = RealLayout::from_name(layout)
        .with_context(|| format!("--layout {layout}: expected antirez-q2 or antirez-q4"))?;
    let data_offset = write_sparse_layout(out, layout)?;
    let len = std::fs::metadata(out)?.len();
    println!(
        "wrote {} ({len} bytes apparent, data at {data_offset}; the real file: {} bytes, data at {})",
        out.display(),
        layout.real_file_len(),
        RealLayout::REAL_DATA_OFFSET
    );
    Ok(ExitCode::SUCCESS)
}

fn synth_filled(layout: &str, out: &Path, layers: &str, experts: u64) -> anyhow::Result<ExitCode> {
    use golden_lens::gguf::synth::RealLayout;
    use golden_lens::model::synth_fill::{write_filled_layout, FillPlan};
    let layout_kind = RealLayout::from_name(layout)
        .with_context(|| format!("--layout {layout}: expected antirez-q2 or antirez-q4"))?;
    let range = golden_lens::model::LayerRange::parse(layers)
        .with_context(|| format!("--fill-layers {layers}"))?;
    let started = std::time::Instant::now();
    let plan = FillPlan {
        layers: *range.start() as u64..=*range.end() as u64,
        experts,
        globals: true,
    };
    let r = write_filled_layout(out, layout_kind, &plan)
        .with_context(|| format!("writing {}", out.display()))?;
    println!(
        "wrote {} ({layout}, layers {layers} filled, {experts} routed experts each): {} bytes \
         apparent, {} bytes on disk ({:.2} GiB), {} bytes of tensor data in {} tensors, {} \
         tensors left as holes, data at {}, {:.1} s",
        out.display(),
        r.file_len,
        r.bytes_on_disk,
        r.bytes_on_disk as f64 / f64::from(1u32 << 30),
        r.bytes_written,
        r.tensors_filled,
        r.tensors_left_as_holes,
        r.data_offset,
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// The .npy v1.0 header for a little-endian f32 C-order array of `shape`, padded so the data
/// starts at a multiple of 64 bytes.
fn npy_header(shape: &[u64]) -> Vec<u8> {
    let dims = match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {dims}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((dict.len() as u16).to_le_bytes());
    out.extend(dict.as_bytes());
    out
}

/// Writes `values` as .npy to `<path>.tmp`, syncs it, then renames it over `path`, so a reader
/// never sees a half-written file.
fn write_npy_f32_atomic(path: &Path, shape: &[u64], values: &[f32]) -> anyhow::Result<()> {
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    let result = (|| -> anyhow::Result<()> {
        let file = std::fs::File::create(&tmp)?;
        let mut w = std::io::BufWriter::new(file);
        w.write_all(&npy_header(shape))?;
        for v in values {
            w.write_all(&v.to_le_bytes())?;
        }
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_aligned_and_well_formed() {
        for shape in [vec![], vec![5], vec![3, 4], vec![2, 3, 4, 5]] {
            let h = npy_header(&shape);
            assert_eq!(h.len() % 64, 0, "{shape:?}");
            assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
            assert_eq!(*h.last().unwrap(), b'\n');
        }
        let h = String::from_utf8(npy_header(&[7])[10..].to_vec()).unwrap();
        assert!(h.contains("'shape': (7,)"), "{h}");
    }
}
