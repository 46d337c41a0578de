//! Engram tables at run time: rows read one range at a time with positioned reads (never mapped),
//! from embedded tensors or from sidecar files that must live inside the GGUF's directory.

use super::deepseek41::{EngramMeta, EngramStorage};
use super::error::{GgufError, Result};
use super::quant::{dequantize_engram_rows_with, EngramEncoding};
use super::split::GgufSet;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};

/// A sidecar file opened for reading, with the path it resolved to and its size.
#[derive(Debug)]
pub struct Sidecar {
    /// The canonical path of the file that was opened.
    pub path: PathBuf,
    /// The open file (read with positioned reads).
    pub file: File,
    /// Its size in bytes, from the open handle.
    pub len: u64,
}

/// Opens a sidecar named in a GGUF. Only relative paths without `..` are accepted. The file is
/// opened first (non-blocking, so a FIFO cannot hang the open), then what was opened is checked:
/// a regular file, inside the GGUF's own directory after following symlinks, and the very file
/// the checked path names (same device and inode), so no swap between check and use can
/// substitute another file.
pub fn open_sidecar(gguf_path: &Path, raw: &str) -> Result<Sidecar> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let err = |problem: String| GgufError::Sidecar {
        path: gguf_path.to_path_buf(),
        sidecar: raw.to_string(),
        problem,
    };
    if raw.is_empty() {
        return Err(err("empty path".into()));
    }
    let rel = Path::new(raw);
    if rel.is_absolute() {
        return Err(err(
            "absolute paths are refused; a sidecar must be named relative to the GGUF's directory"
                .into(),
        ));
    }
    for c in rel.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => {
                return Err(err(
                    "'..' is refused; a sidecar must live inside the GGUF's directory".into(),
                ))
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(err("rooted paths are refused".into()))
            }
        }
    }
    let dir = match gguf_path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| err(format!("cannot resolve the GGUF's directory: {e}")))?;
    let joined = dir.join(rel);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&joined)
        .map_err(|e| err(format!("cannot open {}: {e}", joined.display())))?;
    let opened = file
        .metadata()
        .map_err(|e| err(format!("cannot stat the opened file: {e}")))?;
    if !opened.is_file() {
        return Err(err(format!(
            "{} is not a regular file (a FIFO, device or directory cannot hold engram rows)",
            joined.display()
        )));
    }
    let resolved = joined
        .canonicalize()
        .map_err(|e| err(format!("cannot resolve {}: {e}", joined.display())))?;
    if !resolved.starts_with(&dir) {
        return Err(err(format!(
            "resolves to {}, outside the GGUF's directory {} (a symlink leaving the directory?)",
            resolved.display(),
            dir.display()
        )));
    }
    let named = std::fs::metadata(&resolved)
        .map_err(|e| err(format!("cannot stat {}: {e}", resolved.display())))?;
    if (named.dev(), named.ino()) != (opened.dev(), opened.ino()) {
        return Err(err(format!(
            "{} changed while it was being opened (the opened file is not the one the path \
             names now)",
            resolved.display()
        )));
    }
    Ok(Sidecar {
        path: resolved,
        file,
        len: opened.len(),
    })
}

enum RowSource {
    /// Rows inside shard `shard` starting at absolute `offset`.
    Embedded { shard: usize, offset: u64 },
    /// Rows inside a sidecar file starting at `offset`.
    External {
        path: PathBuf,
        file: File,
        offset: u64,
    },
}

struct LayerTable {
    layer_id: u64,
    rows: u64,
    source: RowSource,
}

/// Open engram tables of a deepseek41 set: one per engram layer.
pub struct EngramTables<'a> {
    set: &'a GgufSet,
    encoding: EngramEncoding,
    row_values: u64,
    bytes_per_row: u64,
    layers: Vec<LayerTable>,
}

impl<'a> EngramTables<'a> {
    /// Locates every table (embedded tensor or sidecar) and checks each holds `rows` rows.
    pub fn open(set: &'a GgufSet, meta: &EngramMeta) -> Result<Self> {
        let encoding = meta.encoding;
        let row_values = encoding.row_values(meta.head_dim);
        let bytes_per_row = encoding
            .row_bytes_for(row_values)
            .filter(|_| row_values > 0)
            .ok_or_else(|| GgufError::Quant {
                ggml_type: encoding.name(),
                problem: "row size unknown".into(),
            })?;
        let mut layers = Vec::with_capacity(meta.layer_ids.len());
        for (i, (&layer_id, &rows)) in meta.layer_ids.iter().zip(&meta.rows).enumerate() {
            let table_bytes = rows.checked_mul(bytes_per_row);
            let source = match &meta.storage {
                EngramStorage::Embedded => {
                    let name = EngramMeta::table_name(layer_id);
                    let (file, t) = set.require_tensor(&name)?;
                    if t.n_bytes != table_bytes {
                        return Err(GgufError::BadRequest {
                            path: file.path().to_path_buf(),
                            tensor: name,
                            problem: format!(
                                "{:?} bytes, but {rows} rows of {bytes_per_row} bytes are expected",
                                t.n_bytes
                            ),
                        });
                    }
                    let shard = set
                        .shards()
                        .iter()
                        .position(|s| std::ptr::eq(s, file))
                        .unwrap_or(0);
                    RowSource::Embedded {
                        shard,
                        offset: t.offset,
                    }
                }
                EngramStorage::External {
                    paths,
                    offsets,
                    sizes,
                } => {
                    let gguf = set.path();
                    let raw = paths.get(i).map(String::as_str).unwrap_or("");
                    let Sidecar { path, file, len } = open_sidecar(gguf, raw)?;
                    let sidecar_err = |problem: String| GgufError::Sidecar {
                        path: gguf.to_path_buf(),
                        sidecar: raw.to_string(),
                        problem,
                    };
                    let offset = offsets.get(i).copied().unwrap_or(0);
                    let end = table_bytes.and_then(|b| b.checked_add(offset));
                    if end.is_none_or(|e| e > len) {
                        return Err(sidecar_err(format!(
                            "{len} bytes cannot hold {rows} rows of {bytes_per_row} bytes from offset {offset}"
                        )));
                    }
                    if let Some(expected) = sizes.as_ref().and_then(|s| s.get(i)) {
                        if *expected != len {
                            return Err(sidecar_err(format!(
                                "{len} bytes, but deepseek41.engram.sidecar_size says {expected}"
                            )));
                        }
                    }
                    RowSource::External { path, file, offset }
                }
            };
            layers.push(LayerTable {
                layer_id,
                rows,
                source,
            });
        }
        Ok(EngramTables {
            set,
            encoding,
            row_values,
            bytes_per_row,
            layers,
        })
    }

    /// The row encoding.
    pub fn encoding(&self) -> EngramEncoding {
        self.encoding
    }

    /// Values per decoded row (the engram head dim).
    pub fn row_values(&self) -> u64 {
        self.row_values
    }

    /// Bytes per stored row.
    pub fn bytes_per_row(&self) -> u64 {
        self.bytes_per_row
    }

    /// Engram layer ids in table order.
    pub fn layer_ids(&self) -> Vec<u64> {
        self.layers.iter().map(|l| l.layer_id).collect()
    }

    /// Rows of the table of backbone layer `layer_id`.
    pub fn rows(&self, layer_id: u64) -> Option<u64> {
        self.layer(layer_id).map(|l| l.rows)
    }

    fn layer(&self, layer_id: u64) -> Option<&LayerTable> {
        self.layers.iter().find(|l| l.layer_id == layer_id)
    }

    /// The stored bytes of rows `rows` of layer `layer_id`, read with `read_exact_at`.
    pub fn row_bytes(&self, layer_id: u64, rows: Range<u64>) -> Result<Vec<u8>> {
        let table = self
            .layer(layer_id)
            .ok_or_else(|| GgufError::NoSuchTensor {
                path: self.set.path().to_path_buf(),
                name: EngramMeta::table_name(layer_id),
            })?;
        if rows.start > rows.end || rows.end > table.rows {
            return Err(GgufError::BadRequest {
                path: self.set.path().to_path_buf(),
                tensor: EngramMeta::table_name(layer_id),
                problem: format!(
                    "engram rows {}..{} are outside 0..{}",
                    rows.start, rows.end, table.rows
                ),
            });
        }
        // Bounded by the table size, which was checked against the file when opening.
        let start = rows.start * self.bytes_per_row;
        let len = (rows.end - rows.start) * self.bytes_per_row;
        match &table.source {
            RowSource::Embedded { shard, offset } => {
                self.set.shards()[*shard].pread(offset + start, len)
            }
            RowSource::External { path, file, offset } => {
                let mut buf = vec![0u8; len as usize];
                file.read_exact_at(&mut buf, offset + start)
                    .map_err(|source| GgufError::Io {
                        path: path.clone(),
                        action: "read engram rows",
                        source,
                    })?;
                Ok(buf)
            }
        }
    }

    /// Rows `rows` of layer `layer_id` decoded to f32 ([`row_values`](Self::row_values) values
    /// per row).
    pub fn rows_f32(&self, layer_id: u64, rows: Range<u64>) -> Result<Vec<f32>> {
        let n_rows = rows.end.saturating_sub(rows.start);
        let bytes = self.row_bytes(layer_id, rows)?;
        let mut out = vec![0f32; n_rows as usize * self.row_values as usize];
        dequantize_engram_rows_with(&self.encoding, self.row_values as usize, &bytes, &mut out)?;
        Ok(out)
    }
}
