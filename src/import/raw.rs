//! Headerless dumps: raw binary files described by a manifest (TSV or JSON), and antirez ds4's
//! `{prefix}_{name}-{il}_pos{pos}.{bin,i32}` per-position files. Every file a manifest names must
//! lie inside the manifest's folder (no absolute paths, no `..`, no symlink out), every range
//! must lie inside its file, and ranges of one file may not overlap.

use super::error::ImportError;
use super::tensor::{checked_count, map_file, Bytes, DType, DumpTensor, Endian, DTYPE_NAMES};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// How a manifest lists a tensor's dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DimOrder {
    /// Slowest dim first (NumPy, PyTorch, safetensors).
    RowMajor,
    /// ggml `ne` order: `ne0` (contiguous) first, the reverse of row-major.
    Ggml,
}

/// One manifest entry before its file is checked.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    file: String,
    dtype: DType,
    dims: Vec<usize>,
    order: DimOrder,
    offset: u64,
}

/// The largest manifest read (a manifest lists names and dims, never data).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

fn parse_order(path: &Path, what: &str, v: &str) -> Result<DimOrder, ImportError> {
    match v {
        "" | "row-major" | "C" => Ok(DimOrder::RowMajor),
        "ggml" | "ne" => Ok(DimOrder::Ggml),
        other => Err(ImportError::format(
            path,
            format!("{what}: order"),
            format!("`{other}`, expected row-major or ggml"),
        )),
    }
}

fn parse_dtype(path: &Path, name: &str, v: &str) -> Result<DType, ImportError> {
    DType::parse(v).ok_or_else(|| ImportError::UnsupportedDtype {
        path: path.to_path_buf(),
        tensor: name.to_string(),
        dtype: v.to_string(),
        expected: DTYPE_NAMES,
    })
}

fn parse_tsv(path: &Path, text: &str) -> Result<Vec<Entry>, ImportError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
    let (_, head) = lines
        .next()
        .ok_or_else(|| ImportError::format(path, "header row", "the manifest is empty"))?;
    let cols: Vec<&str> = head.split('\t').map(str::trim).collect();
    let col = |name: &str| cols.iter().position(|c| *c == name);
    let (Some(c_name), Some(c_dtype), Some(c_dims)) = (col("name"), col("dtype"), col("dims"))
    else {
        return Err(ImportError::format(
            path,
            "header row",
            "expected tab-separated columns name, dtype, dims (and optionally file, order, offset)",
        ));
    };
    let (c_file, c_order, c_offset) = (col("file"), col("order"), col("offset"));
    let mut out = Vec::new();
    for (i, line) in lines {
        let what = format!("line {}", i + 1);
        let f: Vec<&str> = line.split('\t').map(str::trim).collect();
        if f.len() != cols.len() {
            return Err(ImportError::format(
                path,
                what,
                format!("{} fields, the header has {}", f.len(), cols.len()),
            ));
        }
        let name = f[c_name].to_string();
        let dims = f[c_dims]
            .split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(|d| d.parse::<usize>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ImportError::format(path, format!("{what}: dims"), e.to_string()))?;
        let offset = match c_offset.map(|c| f[c]).filter(|s| !s.is_empty()) {
            Some(s) => s
                .parse::<u64>()
                .map_err(|e| ImportError::format(path, format!("{what}: offset"), e.to_string()))?,
            None => 0,
        };
        out.push(Entry {
            file: c_file
                .map(|c| f[c].to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| format!("{name}.bin")),
            dtype: parse_dtype(path, &name, f[c_dtype])?,
            dims,
            order: parse_order(path, &what, c_order.map(|c| f[c]).unwrap_or(""))?,
            offset,
            name,
        });
    }
    Ok(out)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonManifest {
    tensors: Vec<JsonEntry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    name: String,
    dtype: String,
    dims: Vec<usize>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    order: Option<String>,
    #[serde(default)]
    offset: u64,
}

fn parse_json(path: &Path, text: &str) -> Result<Vec<Entry>, ImportError> {
    let m: JsonManifest = serde_json::from_str(text)
        .map_err(|e| ImportError::format(path, "manifest", e.to_string()))?;
    m.tensors
        .into_iter()
        .map(|e| {
            Ok(Entry {
                file: e.file.unwrap_or_else(|| format!("{}.bin", e.name)),
                dtype: parse_dtype(path, &e.name, &e.dtype)?,
                order: parse_order(
                    path,
                    &format!("tensor `{}`", e.name),
                    e.order.as_deref().unwrap_or(""),
                )?,
                dims: e.dims,
                offset: e.offset,
                name: e.name,
            })
        })
        .collect()
}

/// `rel` resolved inside `root`, refusing anything that could leave it.
fn confined(manifest: &Path, root: &Path, name: &str, rel: &str) -> Result<PathBuf, ImportError> {
    let field = format!("tensor `{name}`: file");
    let p = Path::new(rel);
    if p.components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(ImportError::format(
            manifest,
            field,
            format!("`{rel}` leaves the manifest's folder (absolute or `..`)"),
        ));
    }
    let joined = root.join(p);
    let real = joined
        .canonicalize()
        .map_err(|e| ImportError::io(&joined, "resolve", e))?;
    let real_root = root
        .canonicalize()
        .map_err(|e| ImportError::io(root, "resolve", e))?;
    if !real.starts_with(&real_root) {
        return Err(ImportError::format(
            manifest,
            field,
            format!("`{rel}` resolves outside the manifest's folder (a symlink?)"),
        ));
    }
    Ok(real)
}

/// Read a raw dump through its manifest (`*.tsv` or `*.json`).
pub fn read_manifest(manifest: &Path) -> Result<Vec<DumpTensor>, ImportError> {
    let meta = std::fs::metadata(manifest).map_err(|e| ImportError::io(manifest, "stat", e))?;
    if meta.len() > MAX_MANIFEST_BYTES {
        return Err(ImportError::format(
            manifest,
            "manifest",
            format!(
                "{} bytes, more than the {MAX_MANIFEST_BYTES}-byte limit",
                meta.len()
            ),
        ));
    }
    let text =
        std::fs::read_to_string(manifest).map_err(|e| ImportError::io(manifest, "read", e))?;
    let entries = if manifest.extension().is_some_and(|e| e == "json") {
        parse_json(manifest, &text)?
    } else {
        parse_tsv(manifest, &text)?
    };
    let root = manifest.parent().unwrap_or(Path::new("."));
    let root = if root.as_os_str().is_empty() {
        Path::new(".")
    } else {
        root
    };
    let mut maps: HashMap<PathBuf, std::sync::Arc<memmap2::Mmap>> = HashMap::new();
    let mut ranges: HashMap<PathBuf, Vec<(u64, u64, String)>> = HashMap::new();
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::new();
    for e in entries {
        if !names.insert(e.name.clone()) {
            return Err(ImportError::Duplicate {
                path: manifest.to_path_buf(),
                tensor: e.name,
            });
        }
        let file = confined(manifest, root, &e.name, &e.file)?;
        let map = match maps.get(&file) {
            Some(m) => m.clone(),
            None => {
                let m = map_file(&file)?;
                maps.insert(file.clone(), m.clone());
                m
            }
        };
        let field = format!("tensor `{}`", e.name);
        let len = checked_count(&e.dims)
            .and_then(|n| n.checked_mul(e.dtype.size_bytes()))
            .ok_or_else(|| {
                ImportError::format(
                    manifest,
                    format!("{field}: dims"),
                    format!("{:?} overflows the element count", e.dims),
                )
            })?;
        let file_len = std::fs::metadata(&file)
            .map_err(|err| ImportError::io(&file, "stat", err))?
            .len();
        let end = e
            .offset
            .checked_add(len as u64)
            .filter(|&end| end <= file_len);
        let Some(end) = end else {
            return Err(ImportError::format(
                manifest,
                format!("{field}: offset"),
                format!(
                    "{} bytes at offset {} run past the end of {} ({file_len} bytes)",
                    len,
                    e.offset,
                    file.display()
                ),
            ));
        };
        let taken = ranges.entry(file.clone()).or_default();
        if let Some((_, _, other)) = taken
            .iter()
            .find(|(b, en, _)| e.offset < *en && *b < end && len > 0)
        {
            return Err(ImportError::format(
                manifest,
                format!("{field}: offset"),
                format!("its bytes overlap tensor `{other}` in {}", file.display()),
            ));
        }
        taken.push((e.offset, end, e.name.clone()));
        let shape = match e.order {
            DimOrder::RowMajor => e.dims.clone(),
            DimOrder::Ggml => e.dims.iter().rev().copied().collect(),
        };
        out.push(DumpTensor {
            name: e.name,
            dtype: e.dtype,
            endian: Endian::Little,
            shape: Some(shape),
            fortran_order: false,
            pos: None,
            file,
            bytes: Bytes::Mapped {
                map,
                offset: e.offset as usize,
                len,
            },
        });
    }
    Ok(out)
}

/// The files of a ds4 dump: `PREFIX` names `{PREFIX}_{name}-{il}_pos{pos}.{bin,i32}` files
/// (as `DS4_METAL_GRAPH_DUMP_PREFIX` does); each becomes a tensor `{name}-{il}` at `pos`, f32
/// for `.bin` and i32 for `.i32`, with no shape (it comes from the capture).
pub fn read_ds4(prefix: &Path) -> Result<Vec<DumpTensor>, ImportError> {
    let dir = match prefix.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let base = prefix
        .file_name()
        .map(|b| format!("{}_", b.to_string_lossy()))
        .unwrap_or_default();
    let re = regex::Regex::new(r"^(?P<name>[A-Za-z0-9_]+-\d+)_pos(?P<pos>\d+)\.(?P<ext>bin|i32)$")
        .map_err(|e| ImportError::format(prefix, "ds4 pattern", e.to_string()))?;
    let listing = std::fs::read_dir(dir).map_err(|e| ImportError::io(dir, "list", e))?;
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for entry in listing {
        let entry = entry.map_err(|e| ImportError::io(dir, "list", e))?;
        let fname = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = fname.strip_prefix(&base) else {
            continue;
        };
        let Some(c) = re.captures(rest) else {
            continue;
        };
        let path = entry.path();
        let pos: usize = c["pos"]
            .parse()
            .map_err(|_| ImportError::format(&path, "file name: pos", "does not fit in 64 bits"))?;
        let name = c["name"].to_string();
        if !seen.insert((name.clone(), pos)) {
            return Err(ImportError::Duplicate {
                path: path.clone(),
                tensor: format!("{name} at pos {pos}"),
            });
        }
        let dtype = if &c["ext"] == "bin" {
            DType::F32
        } else {
            DType::I32
        };
        let map = map_file(&path)?;
        let len = std::fs::metadata(&path)
            .map_err(|e| ImportError::io(&path, "stat", e))?
            .len() as usize;
        if len == 0 || len % 4 != 0 {
            return Err(ImportError::format(
                &path,
                "file length",
                format!(
                    "{len} bytes, expected a non-zero multiple of 4 ({})",
                    dtype.name()
                ),
            ));
        }
        out.push(DumpTensor {
            name,
            dtype,
            endian: Endian::Little,
            shape: None,
            fortran_order: false,
            pos: Some(pos),
            file: path,
            bytes: Bytes::Mapped {
                map,
                offset: 0,
                len,
            },
        });
    }
    if out.is_empty() {
        return Err(ImportError::format(
            prefix,
            "ds4 dump",
            format!(
                "no `{base}NAME-IL_posPOS.bin` or `.i32` files in {}",
                dir.display()
            ),
        ));
    }
    out.sort_by(|a, b| (a.name.as_str(), a.pos).cmp(&(b.name.as_str(), b.pos)));
    Ok(out)
}
