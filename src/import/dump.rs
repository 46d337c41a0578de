//! Open a dump of any supported format: by extension, by magic bytes, a folder holding a
//! manifest, or a ds4 prefix.

use super::error::ImportError;
use super::tensor::DumpTensor;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The dump formats golden-lens reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Safetensors,
    Npy,
    Npz,
    /// Raw binary files described by a TSV or JSON manifest.
    Manifest,
    /// antirez ds4 `{prefix}_{name}-{il}_pos{pos}.{bin,i32}` files.
    Ds4,
}

impl Format {
    pub fn label(self) -> &'static str {
        match self {
            Format::Safetensors => "safetensors",
            Format::Npy => "npy",
            Format::Npz => "npz",
            Format::Manifest => "raw + manifest",
            Format::Ds4 => "ds4 per-position files",
        }
    }
}

/// An opened dump: its tensors in file order (data still in the file).
#[derive(Debug, Clone)]
pub struct Dump {
    pub path: PathBuf,
    pub format: Format,
    pub tensors: Vec<DumpTensor>,
}

/// The manifest names looked for in a dump folder.
pub const MANIFEST_NAMES: [&str; 2] = ["manifest.tsv", "manifest.json"];

fn sniff(path: &Path) -> Result<Format, ImportError> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("safetensors") => return Ok(Format::Safetensors),
        Some("npy") => return Ok(Format::Npy),
        Some("npz") => return Ok(Format::Npz),
        Some("tsv" | "json") => return Ok(Format::Manifest),
        _ => {}
    }
    let mut head = [0u8; 6];
    let mut f = std::fs::File::open(path).map_err(|e| ImportError::io(path, "open", e))?;
    let n = f
        .read(&mut head)
        .map_err(|e| ImportError::io(path, "read", e))?;
    Ok(match &head[..n] {
        [0x93, b'N', b'U', b'M', b'P', b'Y'] => Format::Npy,
        [b'P', b'K', 3, 4, ..] => Format::Npz,
        _ => Format::Safetensors,
    })
}

impl Dump {
    /// Open `path`: a `.safetensors`, `.npy` or `.npz` file, a manifest (`.tsv`/`.json`) or a
    /// folder holding `manifest.tsv`/`manifest.json`, or a ds4 prefix (`DIR/PREFIX`, naming
    /// `DIR/PREFIX_*_pos*.bin` files).
    pub fn open(path: &Path) -> Result<Dump, ImportError> {
        let (format, file) = if path.is_dir() {
            let m = MANIFEST_NAMES
                .iter()
                .map(|n| path.join(n))
                .find(|p| p.is_file())
                .ok_or_else(|| {
                    ImportError::format(
                        path,
                        "dump folder",
                        "holds no manifest.tsv or manifest.json (pass a file, or a ds4 prefix DIR/PREFIX)",
                    )
                })?;
            (Format::Manifest, m)
        } else if path.is_file() {
            (sniff(path)?, path.to_path_buf())
        } else {
            (Format::Ds4, path.to_path_buf())
        };
        let tensors = match format {
            Format::Safetensors => super::safetensors::read(&file)?,
            Format::Npy => super::npy::read(&file)?,
            Format::Npz => super::npz::read(&file)?,
            Format::Manifest => super::raw::read_manifest(&file)?,
            Format::Ds4 => super::raw::read_ds4(&file)?,
        };
        Ok(Dump {
            path: path.to_path_buf(),
            format,
            tensors,
        })
    }
}
