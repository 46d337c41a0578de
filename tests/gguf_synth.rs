//! The reader on real geometry: a sparse file with the antirez Q2 plan (1046 tensors, 16 KiB
//! alignment, 340 GB apparent size, engram tables past 150 GB) opens, validates, maps only the
//! resident region, and serves expert slabs and engram rows.

mod gguf_common;

use golden_lens::gguf::info::build_report;
use golden_lens::gguf::synth::{real, write_sparse_layout, RealLayout};
use golden_lens::gguf::{Deepseek41Meta, EngramTables, GgufSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use tempfile::TempDir;

/// Allocated bytes a sparse layout may use (header + token arrays are a few MB).
const MAX_ALLOCATED_BYTES: u64 = 64 << 20;

/// Whether files in `dir` can be sparse (otherwise a 340 GB layout would really be written).
fn supports_sparse_files(dir: &Path) -> bool {
    let probe = dir.join("probe");
    let ok = std::fs::File::create(&probe)
        .and_then(|f| f.set_len(1 << 30))
        .and_then(|_| std::fs::metadata(&probe))
        .is_ok_and(|m| m.blocks() * 512 < 1 << 20);
    let _ = std::fs::remove_file(&probe);
    ok
}

#[test]
fn real_layout_opens_validates_and_serves_rows() {
    let dir = TempDir::new().unwrap();
    if !supports_sparse_files(dir.path()) {
        eprintln!(
            "notice: skipping: {} has no sparse files",
            dir.path().display()
        );
        return;
    }
    let path = dir.path().join("DeepSeek-V4.1-Flash-Q2.sparse.gguf");
    let data_offset = write_sparse_layout(&path, RealLayout::AntirezQ2).unwrap();
    let disk = std::fs::metadata(&path).unwrap();
    assert!(
        disk.blocks() * 512 < MAX_ALLOCATED_BYTES,
        "{} bytes allocated",
        disk.blocks() * 512
    );

    let set = GgufSet::open(&path).unwrap();
    let f = set.primary();
    assert_eq!(f.alignment(), 16384);
    assert_eq!(f.data_offset(), data_offset);
    assert_eq!(f.tensors().len(), 1046);
    // Relative to the data section, every offset equals the real file's.
    let real_start = RealLayout::REAL_DATA_OFFSET;
    // The header is padded to the real data offset: the file has the real size and offsets.
    assert_eq!(data_offset, real_start);
    assert_eq!(f.file_len(), 365_713_686_528);
    assert_eq!(
        f.file_len() - data_offset,
        RealLayout::AntirezQ2.real_file_len() - real_start
    );
    let (_, e1) = set.tensor("blk.1.engram_embd.weight").unwrap();
    let (_, e14) = set.tensor("blk.14.engram_embd.weight").unwrap();
    assert_eq!(e1.offset - data_offset, 162_955_640_832 - real_start);
    assert_eq!(e14.offset - data_offset, 264_333_279_232 - real_start);
    // Only the resident region is mapped.
    assert!(f.mapped_len() <= e1.offset);
    assert!(!f.is_mapped(e1) && !f.is_mapped(e14));

    let meta = Deepseek41Meta::from_set(&set).unwrap();
    assert!(meta.warnings.is_empty(), "{:?}", meta.warnings);
    assert_eq!(meta.n_layers, real::LAYERS);
    let engram = meta.engram.as_ref().unwrap();
    assert_eq!(engram.rows, real::ENGRAM_ROWS.to_vec());
    assert_eq!(engram.token_map.len() as u64, real::VOCAB);

    // An expert slab of the merged IQ2_XXS gate tensor: 2304 rows of 5120, all-zero blocks.
    let slab = set.expert_f32("blk.39.ffn_gate_exps.weight", 383).unwrap();
    assert_eq!(slab.len() as u64, real::MOE_INTER * real::DIM);
    assert!(slab.iter().all(|&v| v == 0.0));
    assert!(set.expert_f32("blk.39.ffn_gate_exps.weight", 384).is_err());
    let down = set.expert_f32("blk.0.ffn_down_exps.weight", 0).unwrap();
    assert_eq!(down.len() as u64, real::MOE_INTER * real::DIM);

    // Engram rows at the very end of the 340 GB file, read with pread.
    let tables = EngramTables::open(&set, engram).unwrap();
    let last = real::ENGRAM_ROWS[1] - 1;
    let rows = tables.rows_f32(14, last - 1..last + 1).unwrap();
    assert_eq!(rows.len(), 512);
    assert!(rows.iter().all(|&v| v == 0.0));

    let report = build_report(&set).unwrap();
    let total = report.census.last().unwrap();
    assert_eq!(total.count, 1046);
    let i8_row = report.census.iter().find(|c| c.ggml_type == "I8").unwrap();
    assert_eq!(
        i8_row.bytes,
        264 * (real::ENGRAM_ROWS[0] + real::ENGRAM_ROWS[1])
    );
}
