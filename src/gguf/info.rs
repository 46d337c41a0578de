//! What `golden-lens gguf info` shows, as data: metadata (huge arrays truncated), the tensor
//! table, a census per type (count, bytes, bits per weight) and the deepseek41 view (dialect,
//! validation, warnings). Serializable so `--json` and the text view share one source.

use super::deepseek41::{detect_dialect, Deepseek41Meta};
use super::error::Result;
use super::reader::GgufFile;
use super::split::GgufSet;
use super::value::MetaValue;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Arrays longer than this are shown as their first elements plus a count.
pub const ARRAY_PREVIEW_LEN: u64 = 16;

/// Converts a metadata value to JSON. Arrays with more than `array_limit` elements become
/// `{"elem_type", "count", "head": [...]}`; `None` converts every element (nested arrays too).
/// Non-finite floats become the strings `"NaN"`, `"inf"`, `"-inf"`.
pub fn value_to_json(
    file: &GgufFile,
    value: &MetaValue,
    array_limit: Option<u64>,
) -> Result<Value> {
    Ok(match value {
        MetaValue::U8(v) => json!(v),
        MetaValue::I8(v) => json!(v),
        MetaValue::U16(v) => json!(v),
        MetaValue::I16(v) => json!(v),
        MetaValue::U32(v) => json!(v),
        MetaValue::I32(v) => json!(v),
        MetaValue::U64(v) => json!(v),
        MetaValue::I64(v) => json!(v),
        MetaValue::F32(v) => float_json(f64::from(*v)),
        MetaValue::F64(v) => float_json(*v),
        MetaValue::Bool(v) => json!(v),
        MetaValue::String(s) => json!(s),
        MetaValue::Array(arr) => {
            let truncated = array_limit.is_some_and(|l| arr.count > l);
            let items = file.array_values(arr, if truncated { array_limit } else { None })?;
            let values = items
                .iter()
                .map(|v| value_to_json(file, v, array_limit))
                .collect::<Result<Vec<_>>>()?;
            if truncated {
                json!({
                    "elem_type": arr.elem_type.name(),
                    "count": arr.count,
                    "head": values,
                })
            } else {
                Value::Array(values)
            }
        }
    })
}

fn float_json(v: f64) -> Value {
    if v.is_nan() {
        json!("NaN")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(v)
    }
}

/// One metadata row of the report.
#[derive(Clone, Debug, Serialize)]
pub struct MetaRow {
    /// Key.
    pub key: String,
    /// Value type (`uint32`, `array<string>`).
    pub value_type: String,
    /// Value, arrays truncated to [`ARRAY_PREVIEW_LEN`].
    pub value: Value,
}

/// One tensor row of the report.
#[derive(Clone, Debug, Serialize)]
pub struct TensorRow {
    /// Tensor name.
    pub name: String,
    /// GGML type name (`type<N>` for unknown ids).
    pub ggml_type: String,
    /// GGML type id.
    pub ggml_type_id: u32,
    /// Dims in ggml `ne` order.
    pub dims: Vec<u64>,
    /// Shard index (0 for a single file).
    pub shard: usize,
    /// Absolute offset in its shard.
    pub offset: u64,
    /// Data bytes (`None` when the type's size is unknown).
    pub n_bytes: Option<u64>,
    /// Element count.
    pub n_elements: u64,
}

/// Census of one GGML type.
#[derive(Clone, Debug, Serialize)]
pub struct CensusRow {
    /// GGML type name.
    pub ggml_type: String,
    /// Tensors of this type.
    pub count: u64,
    /// Their data bytes (tensors of unknown size count 0). Tensors never share a byte and lie
    /// inside their shard, so this fits u64.
    pub bytes: u64,
    /// Their elements, summed in u128: each tensor's count is below 2^63, but a file may
    /// list tensors of unknown type whose counts no data backs, and their sum must not wrap.
    pub n_elements: u128,
    /// `8 · bytes / elements`, when both are known and non-zero.
    pub bits_per_weight: Option<f64>,
}

/// One shard's container facts.
#[derive(Clone, Debug, Serialize)]
pub struct ShardRow {
    /// Path as opened.
    pub path: String,
    /// File size.
    pub file_len: u64,
    /// GGUF version.
    pub version: u32,
    /// Alignment in effect.
    pub alignment: u64,
    /// Start of the data section.
    pub data_offset: u64,
    /// Bytes memory-mapped (header + resident tensors; engram tables are excluded).
    pub mapped_len: u64,
    /// Tensor count.
    pub tensor_count: usize,
}

/// Everything `gguf info` reports.
#[derive(Clone, Debug, Serialize)]
pub struct InfoReport {
    /// Shards (one for a plain file).
    pub shards: Vec<ShardRow>,
    /// `general.architecture` of shard 0, when it is a string.
    pub architecture: Option<String>,
    /// deepseek41 dialect, when detected.
    pub dialect: Option<String>,
    /// Why no dialect was detected, or why the deepseek41 metadata did not validate.
    pub deepseek41_error: Option<String>,
    /// Typed deepseek41 metadata, when it parsed (engram arrays summarised).
    pub deepseek41: Option<Value>,
    /// Warnings a loader would otherwise swallow.
    pub warnings: Vec<String>,
    /// Why the file is not a complete deepseek41 model (empty when it is one): another
    /// architecture, metadata that does not validate, a vocabulary-only file, a lone shard.
    pub notes: Vec<String>,
    /// Metadata of shard 0 in file order.
    pub metadata: Vec<MetaRow>,
    /// Every tensor.
    pub tensors: Vec<TensorRow>,
    /// One row per GGML type present, plus a `total` row.
    pub census: Vec<CensusRow>,
}

impl InfoReport {
    /// Whether the set is a complete deepseek41 model: a dialect detected, its metadata valid,
    /// tensors present, and no note against it.
    pub fn is_complete_deepseek41(&self) -> bool {
        self.notes.is_empty()
    }

    /// Whether the file calls itself deepseek41 (or the legacy `deepseek4`), so that a failed
    /// validation is a real problem rather than "some other model".
    pub fn architecture_is_deepseek41(&self) -> bool {
        matches!(
            self.architecture.as_deref(),
            Some("deepseek41" | "deepseek4")
        )
    }
}

fn census_row(ggml_type: String, count: u64, bytes: u64, n_elements: u128) -> CensusRow {
    let bits_per_weight =
        (n_elements > 0 && bytes > 0).then(|| 8.0 * bytes as f64 / n_elements as f64);
    CensusRow {
        ggml_type,
        count,
        bytes,
        n_elements,
        bits_per_weight,
    }
}

/// Builds the report for an open set.
pub fn build_report(set: &GgufSet) -> Result<InfoReport> {
    let primary = set.primary();
    let shards = set
        .shards()
        .iter()
        .map(|f| ShardRow {
            path: f.path().display().to_string(),
            file_len: f.file_len(),
            version: f.version(),
            alignment: f.alignment(),
            data_offset: f.data_offset(),
            mapped_len: f.mapped_len(),
            tensor_count: f.tensors().len(),
        })
        .collect();
    let metadata = primary
        .metadata()
        .iter()
        .map(|e| {
            Ok(MetaRow {
                key: e.key.clone(),
                value_type: match &e.value {
                    MetaValue::Array(a) => format!("array<{}>", a.elem_type),
                    v => v.value_type().name().to_string(),
                },
                value: value_to_json(primary, &e.value, Some(ARRAY_PREVIEW_LEN))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut tensors = Vec::with_capacity(set.tensor_count());
    let mut by_type: BTreeMap<(u32, String), (u64, u64, u128)> = BTreeMap::new();
    for (shard, file) in set.shards().iter().enumerate() {
        for t in file.tensors() {
            tensors.push(TensorRow {
                name: t.name.clone(),
                ggml_type: t.ggml_type.name(),
                ggml_type_id: t.ggml_type.id(),
                dims: t.dims.clone(),
                shard,
                offset: t.offset,
                n_bytes: t.n_bytes,
                n_elements: t.n_elements,
            });
            let entry = by_type
                .entry((t.ggml_type.id(), t.ggml_type.name()))
                .or_default();
            // Counts are bounded by the tensor table and bytes by the file; saturating keeps
            // even a split set whose shards claim more than u64 from wrapping.
            entry.0 = entry.0.saturating_add(1);
            entry.1 = entry.1.saturating_add(t.n_bytes.unwrap_or(0));
            entry.2 = entry.2.saturating_add(u128::from(t.n_elements));
        }
    }
    let mut census: Vec<CensusRow> = by_type
        .into_iter()
        .map(|((_, name), (count, bytes, n))| census_row(name, count, bytes, n))
        .collect();
    let (count, bytes, n) = census.iter().fold((0u64, 0u64, 0u128), |acc, r| {
        (
            acc.0.saturating_add(r.count),
            acc.1.saturating_add(r.bytes),
            acc.2.saturating_add(r.n_elements),
        )
    });
    census.push(census_row("total".into(), count, bytes, n));

    let (dialect, deepseek41, deepseek41_error, warnings) = match detect_dialect(primary) {
        Err(e) => (None, None, Some(e.to_string()), Vec::new()),
        Ok(dialect) => match Deepseek41Meta::from_set(set) {
            Ok(meta) => {
                let warnings = meta.warnings.clone();
                (Some(dialect), Some(meta.summary_json()), None, warnings)
            }
            Err(e) => (Some(dialect), None, Some(e.to_string()), Vec::new()),
        },
    };
    let architecture = primary
        .get("general.architecture")
        .and_then(MetaValue::as_str)
        .map(str::to_string);
    let mut notes = Vec::new();
    match (&architecture, &dialect, &deepseek41_error) {
        (Some(a), _, _) if !matches!(a.as_str(), "deepseek41" | "deepseek4") => notes.push(
            format!("not a deepseek41 model: general.architecture is {a:?}; shown as a plain GGUF"),
        ),
        (None, _, _) => notes
            .push("no general.architecture: a valid GGUF, but not a deepseek41 model".to_string()),
        (_, _, Some(e)) => notes.push(format!("not a complete deepseek41 model: {e}")),
        _ => {}
    }
    if tensors.is_empty() {
        notes.push("no tensors: a vocabulary-only (metadata-only) file".to_string());
    }
    Ok(InfoReport {
        shards,
        architecture,
        dialect: dialect.map(|d| d.name().to_string()),
        deepseek41_error,
        deepseek41,
        warnings,
        notes,
        metadata,
        tensors,
        census,
    })
}
