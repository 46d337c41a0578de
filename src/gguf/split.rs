//! Split sets (llama.cpp `gguf-split`): `<prefix>-0000N-of-0000M.gguf`, 1-based in the name,
//! with `split.no` (0-based), `split.count` and `split.tensors.count` in every shard. A set opens
//! from any shard; a plain file is a set of one.

use super::error::{GgufError, Result};
use super::reader::{expert_rows, GgufFile, TensorInfo};
use super::value::MetaValue;
use regex::Regex;
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Metadata key: 0-based index of this shard.
pub const KEY_SPLIT_NO: &str = "split.no";
/// Metadata key: number of shards in the set.
pub const KEY_SPLIT_COUNT: &str = "split.count";
/// Metadata key: tensors in the whole set.
pub const KEY_SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// The parts of a shard file name: `prefix`, 1-based shard number, shard count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardName {
    /// Everything before `-0000N-of-0000M.gguf` (may include directories).
    pub prefix: String,
    /// 1-based shard number from the name.
    pub number: u32,
    /// Shard count from the name.
    pub count: u32,
}

fn shard_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^(.+)-([0-9]{5})-of-([0-9]{5})\.gguf$").expect("static regex is valid")
    })
}

/// Parses a shard file name (`Model-00002-of-00007.gguf`); `None` if it does not follow the
/// pattern.
pub fn parse_shard_name(path: &Path) -> Option<ShardName> {
    let s = path.to_str()?;
    let caps = shard_regex().captures(s)?;
    Some(ShardName {
        prefix: caps.get(1)?.as_str().to_string(),
        number: caps.get(2)?.as_str().parse().ok()?,
        count: caps.get(3)?.as_str().parse().ok()?,
    })
}

/// The path of 1-based shard `number` of a set of `count`.
pub fn shard_path(prefix: &str, number: u32, count: u32) -> PathBuf {
    PathBuf::from(format!("{prefix}-{number:05}-of-{count:05}.gguf"))
}

/// An open set of one or more shards. Metadata lives in shard 0; tensors are looked up across
/// all shards.
#[derive(Debug)]
pub struct GgufSet {
    shards: Vec<GgufFile>,
    tensor_index: HashMap<String, (usize, usize)>,
}

impl GgufSet {
    /// Opens the set that `path` belongs to and validates it: every shard present, `split.no`
    /// matching its position, `split.count` agreeing, tensor counts summing to
    /// `split.tensors.count`, tensor names unique across shards.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let shards = match parse_shard_name(path) {
            Some(name) => open_shards(path, &name)?,
            None => {
                let file = GgufFile::open(path)?;
                let count = split_key(&file, KEY_SPLIT_COUNT)?;
                if count.is_some_and(|c| c > 1) {
                    return Err(GgufError::Split {
                        path: path.to_path_buf(),
                        problem: format!(
                            "the file says split.count = {}, but its name does not follow \
                             <prefix>-0000N-of-0000M.gguf, so the other shards cannot be found",
                            count.unwrap_or(0)
                        ),
                    });
                }
                vec![file]
            }
        };
        validate_set(path, &shards)?;
        let mut tensor_index: HashMap<String, (usize, usize)> = HashMap::new();
        for (s, shard) in shards.iter().enumerate() {
            for (t, info) in shard.tensors().iter().enumerate() {
                if let Some(&(prev, _)) = tensor_index.get(&info.name) {
                    return Err(GgufError::DuplicateTensor {
                        path: shard.path().to_path_buf(),
                        name: info.name.clone(),
                        context: format!(
                            " across a split set; also in {}",
                            shards[prev].path().display()
                        ),
                    });
                }
                tensor_index.insert(info.name.clone(), (s, t));
            }
        }
        Ok(GgufSet {
            shards,
            tensor_index,
        })
    }

    /// One file alone as a one-shard set, without the split-set checks: for reporting on a
    /// shard whose siblings are absent (`gguf info`). Tensor names are unique within a file
    /// (the reader refuses duplicates), so the index is exact.
    pub fn single_file(path: impl AsRef<Path>) -> Result<Self> {
        let file = GgufFile::open(path.as_ref())?;
        let tensor_index = file
            .tensors()
            .iter()
            .enumerate()
            .map(|(t, info)| (info.name.clone(), (0, t)))
            .collect();
        Ok(GgufSet {
            shards: vec![file],
            tensor_index,
        })
    }

    /// The shards in order (one for a plain file).
    pub fn shards(&self) -> &[GgufFile] {
        &self.shards
    }

    /// Shard 0, which holds the model metadata.
    pub fn primary(&self) -> &GgufFile {
        &self.shards[0]
    }

    /// The path of shard 0.
    pub fn path(&self) -> &Path {
        self.primary().path()
    }

    /// A metadata value from shard 0.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.primary().get(key)
    }

    /// Total tensors across shards.
    pub fn tensor_count(&self) -> usize {
        self.tensor_index.len()
    }

    /// Every tensor with the shard it lives in, shard by shard in file order.
    pub fn tensors(&self) -> impl Iterator<Item = (&GgufFile, &TensorInfo)> {
        self.shards
            .iter()
            .flat_map(|s| s.tensors().iter().map(move |t| (s, t)))
    }

    /// The tensor called `name` and its shard.
    pub fn tensor(&self, name: &str) -> Option<(&GgufFile, &TensorInfo)> {
        self.tensor_index
            .get(name)
            .map(|&(s, t)| (&self.shards[s], &self.shards[s].tensors()[t]))
    }

    /// Like [`tensor`](Self::tensor) but a `NoSuchTensor` error when absent.
    pub fn require_tensor(&self, name: &str) -> Result<(&GgufFile, &TensorInfo)> {
        self.tensor(name).ok_or_else(|| GgufError::NoSuchTensor {
            path: self.path().to_path_buf(),
            name: name.to_string(),
        })
    }

    /// Dequantizes a whole tensor to f32.
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        self.require_tensor(name)?.0.tensor_f32(name)
    }

    /// Dequantizes rows `rows` of a tensor.
    pub fn tensor_rows_f32(&self, name: &str, rows: Range<u64>) -> Result<Vec<f32>> {
        self.require_tensor(name)?.0.tensor_rows_f32(name, rows)
    }

    /// Dequantizes expert `expert` of a merged 3-D expert tensor.
    pub fn expert_f32(&self, name: &str, expert: u64) -> Result<Vec<f32>> {
        self.require_tensor(name)?.0.expert_f32(name, expert)
    }

    /// Row range of expert `expert` (checked) in a merged 3-D expert tensor.
    pub fn expert_rows(&self, name: &str, expert: u64) -> Result<Range<u64>> {
        let (file, t) = self.require_tensor(name)?;
        expert_rows(file.path(), t, expert)
    }
}

/// Reads a split key as an integer (any integer type); `Ok(None)` when absent.
fn split_key(file: &GgufFile, key: &str) -> Result<Option<u64>> {
    file.get_u64(key)
}

fn open_shards(path: &Path, name: &ShardName) -> Result<Vec<GgufFile>> {
    if name.count == 0 || name.number == 0 || name.number > name.count {
        return Err(GgufError::Split {
            path: path.to_path_buf(),
            problem: format!(
                "file name says shard {} of {}; shards are numbered 1..={}",
                name.number, name.count, name.count
            ),
        });
    }
    let mut shards = Vec::with_capacity(name.count as usize);
    for number in 1..=name.count {
        let shard = shard_path(&name.prefix, number, name.count);
        if !shard.exists() {
            return Err(GgufError::Split {
                path: path.to_path_buf(),
                problem: format!(
                    "shard {number} of {} is missing: {} does not exist",
                    name.count,
                    shard.display()
                ),
            });
        }
        shards.push(GgufFile::open(&shard)?);
    }
    Ok(shards)
}

fn validate_set(path: &Path, shards: &[GgufFile]) -> Result<()> {
    let count = shards.len() as u64;
    let mut declared_total: Option<u64> = None;
    let mut actual_total = 0u64;
    for (i, shard) in shards.iter().enumerate() {
        let bad = |problem: String| GgufError::Split {
            path: shard.path().to_path_buf(),
            problem,
        };
        let no = split_key(shard, KEY_SPLIT_NO)?;
        let shard_count = split_key(shard, KEY_SPLIT_COUNT)?;
        let total = split_key(shard, KEY_SPLIT_TENSORS_COUNT)?;
        actual_total += shard.tensors().len() as u64;
        if count == 1 && no.is_none() && shard_count.is_none() && total.is_none() {
            continue; // a plain single file
        }
        match shard_count {
            Some(c) if c == count => {}
            Some(c) => {
                return Err(bad(format!(
                    "split.count is {c}, but the set has {count} shard(s)"
                )))
            }
            None => return Err(bad(format!("split.count is missing (expected {count})"))),
        }
        match no {
            Some(n) if n == i as u64 => {}
            Some(n) => {
                return Err(bad(format!(
                    "split.no is {n}, but this is shard {} (split.no is 0-based, expected {i})",
                    i + 1
                )))
            }
            None => return Err(bad(format!("split.no is missing (expected {i})"))),
        }
        match (total, declared_total) {
            (None, _) => {
                return Err(bad(
                    "split.tensors.count is missing (needed to detect a missing shard)".into(),
                ))
            }
            (Some(t), None) => declared_total = Some(t),
            (Some(t), Some(d)) if t != d => {
                return Err(bad(format!(
                    "split.tensors.count is {t}, but shard 1 says {d}"
                )))
            }
            _ => {}
        }
    }
    if let Some(declared) = declared_total {
        if declared != actual_total {
            return Err(GgufError::Split {
                path: path.to_path_buf(),
                problem: format!(
                    "split.tensors.count says {declared} tensors, but the {count} shard(s) hold {actual_total}"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_parse() {
        let n = parse_shard_name(Path::new("/m/DeepSeek-V4.1-Q2_K-00002-of-00007.gguf")).unwrap();
        assert_eq!(n.prefix, "/m/DeepSeek-V4.1-Q2_K");
        assert_eq!((n.number, n.count), (2, 7));
        assert_eq!(
            shard_path(&n.prefix, 7, 7),
            PathBuf::from("/m/DeepSeek-V4.1-Q2_K-00007-of-00007.gguf")
        );
        assert_eq!(parse_shard_name(Path::new("model.gguf")), None);
        assert_eq!(parse_shard_name(Path::new("m-0002-of-0007.gguf")), None);
    }
}
