//! The engram constants (spec §1.8) of either dialect: read, validated against the model and
//! the tables (embedded tensors or sidecars), and written.

use super::keys::ENGRAM;
use super::{Deepseek41Meta, Dialect, KeyReader, KeyWriter};
use crate::gguf::error::{GgufError, Result};
use crate::gguf::ggml_type::GgmlType;
use crate::gguf::quant::EngramEncoding;
use crate::gguf::reader::GgufFile;
use crate::gguf::split::GgufSet;
use serde::Serialize;

/// Where the engram rows live.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum EngramStorage {
    /// Tensors `blk.L.engram_embd.weight` inside the GGUF (set).
    Embedded,
    /// Raw sidecar files next to the GGUF (ishikawa fork), one per engram layer.
    External {
        /// Paths as written in the file (resolved later, only inside the GGUF's directory).
        paths: Vec<String>,
        /// Byte offset of row 0 in each sidecar.
        offsets: Vec<u64>,
        /// Expected sidecar sizes, when recorded.
        sizes: Option<Vec<u64>>,
    },
}

/// The engram constants (spec §1.8), validated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngramMeta {
    /// How rows are stored.
    pub encoding: EngramEncoding,
    /// Where rows are stored.
    pub storage: EngramStorage,
    /// Backbone layers with an engram block ([1, 14] in the real model).
    pub layer_ids: Vec<u64>,
    /// Hash heads per n-gram order (8).
    pub n_heads: u64,
    /// Values per row (256).
    pub head_dim: u64,
    /// Largest n-gram (4: 2-, 3- and 4-grams).
    pub max_ngram_size: u64,
    /// Size of the compressed token space.
    pub compressed_vocab_size: u64,
    /// Pad id, already in the compressed space.
    pub pad_id: u64,
    /// Token id -> compressed id, one entry per vocabulary token.
    pub token_map: Vec<u32>,
    /// Per layer, `(max_ngram_size − 1)·n_heads` primes, flattened layer-major.
    pub primes: Vec<u64>,
    /// Per layer, exclusive prefix sums of that layer's primes (same layout as `primes`).
    pub offsets: Vec<u64>,
    /// Per layer, `max_ngram_size` odd multipliers, flattened layer-major.
    pub multipliers: Vec<u64>,
    /// Rows per engram layer (= sum of that layer's primes).
    pub rows: Vec<u64>,
}

impl EngramMeta {
    /// Hash columns per layer: `(max_ngram_size − 1)·n_heads` (24 in the real model).
    pub fn columns_per_layer(&self) -> usize {
        ((self.max_ngram_size - 1) * self.n_heads) as usize
    }

    /// GGUF tensor name of the table of engram layer `layer_id`.
    pub fn table_name(layer_id: u64) -> String {
        format!("blk.{layer_id}.engram_embd.weight")
    }
}

/// Each layer's exclusive running sums of its primes (`columns` per layer): where each hash
/// column's rows start in the layer's table. Saturating, so a hostile file cannot overflow it
/// (the row-count check then refuses the file).
pub fn prime_offsets(primes: &[u64], columns: usize) -> Vec<u64> {
    primes
        .chunks(columns.max(1))
        .flat_map(|layer| {
            layer.iter().scan(0u64, |acc, &p| {
                let off = *acc;
                *acc = acc.saturating_add(p);
                Some(off)
            })
        })
        .collect()
}

pub(super) fn read(
    k: &KeyReader,
    set: &GgufSet,
    m: &Deepseek41Meta,
    warnings: &mut Vec<String>,
) -> Result<Option<EngramMeta>> {
    let Some(layer_ids) = k.opt_u64s(ENGRAM.layer_ids)? else {
        if m.dialect == Dialect::LlamaCpp
            && k.file
                .get(&format!("deepseek4.{}", ENGRAM.layer_ids))
                .is_some()
        {
            warnings.push(
                "engram constants are stored under deepseek4.* (an early conversion); \
                 run fix_gguf_engram_kv.py or treat the engram as missing"
                    .into(),
            );
        }
        return Ok(None);
    };
    let token_map_key = k.key(ENGRAM.token_map);
    let token_map_raw = k.u64s(ENGRAM.token_map)?;
    let token_map = token_map_raw
        .iter()
        .map(|&t| {
            u32::try_from(t).map_err(|_| {
                k.bad(
                    &token_map_key,
                    format!("entry {t} does not fit the compressed id space (u32)"),
                )
            })
        })
        .collect::<Result<Vec<u32>>>()?;
    let pad_id = k.u64(ENGRAM.pad_id)?;
    let primes = k.u64s(ENGRAM.primes)?;
    let multipliers = k.u64s(ENGRAM.multipliers)?;
    let n_layers = layer_ids.len();
    let ds4_encoding = match m.dialect {
        Dialect::Ds4 => {
            let name = k
                .opt_str(ENGRAM.encoding)?
                .ok_or_else(|| k.missing(k.key(ENGRAM.encoding)))?;
            Some(EngramEncoding::from_name(&name).ok_or_else(|| {
                k.bad(
                    &k.key(ENGRAM.encoding),
                    format!(
                        "{name:?}; expected e4m3_e8m0_32_row264 (or e4m3_e8m0_32_row{{33·hd/32}} \
                         for another head dim), q4_k_row144 or lloyd4_e5m3_32_r136"
                    ),
                )
            })?)
        }
        Dialect::LlamaCpp => None,
    };
    let (n_heads, head_dim, max_ngram_size) = match ds4_encoding {
        // ds4 stores no head count or n-gram size: they follow from the arrays
        // (`max_ngram_size` multipliers and `(max_ngram_size − 1)·n_heads` primes per layer),
        // the head dim from the encoding.
        Some(enc) => {
            let per_layer = |len: usize| {
                len.checked_div(n_layers)
                    .filter(|_| len % n_layers.max(1) == 0)
            };
            let ngram = per_layer(multipliers.len()).ok_or_else(|| {
                k.bad(
                    &k.key(ENGRAM.multipliers),
                    format!(
                        "{} multipliers do not split evenly over {n_layers} engram layers",
                        multipliers.len()
                    ),
                )
            })? as u64;
            let cols = per_layer(primes.len()).unwrap_or(0) as u64;
            let heads = cols.checked_div(ngram.saturating_sub(1)).unwrap_or(0);
            if heads == 0 || heads * (ngram.saturating_sub(1)) != cols {
                return Err(k.bad(
                    &k.key(ENGRAM.primes),
                    format!(
                        "{} primes cannot be {n_layers} layers x ({ngram} - 1) n-gram orders x heads",
                        primes.len()
                    ),
                ));
            }
            // ds4_engram.h hard-codes 8 heads and 4-grams for its 256-value rows: a file
            // whose arrays say otherwise is read by their geometry, with a warning.
            if enc.fixed_row_values() == Some(256) && (heads, ngram) != (8, 4) {
                warnings.push(format!(
                    "{}: {heads} heads and {ngram}-grams by the arrays; ds4_engram.h assumes 8 \
                     heads and 4-grams for 256-value rows",
                    k.key(ENGRAM.encoding)
                ));
            }
            (heads, enc.row_values(0), ngram)
        }
        None => (
            k.u64(ENGRAM.head_count)?,
            k.u64(ENGRAM.key_length)?,
            k.u64(ENGRAM.max_ngram_size)?,
        ),
    };
    if max_ngram_size < 2 || n_heads == 0 || n_heads > 1024 || max_ngram_size > 64 {
        return Err(k.bad(
            &k.key(ENGRAM.max_ngram_size),
            format!("{max_ngram_size}-grams with {n_heads} heads; expected at least 2-grams and 1..=1024 heads"),
        ));
    }
    let columns = ((max_ngram_size - 1) * n_heads) as usize;
    if primes.len() != n_layers * columns {
        return Err(k.bad(
            &k.key(ENGRAM.primes),
            format!(
                "{} primes; expected {n_layers} layers x {columns} columns = {}",
                primes.len(),
                n_layers * columns
            ),
        ));
    }
    let derived_offsets = prime_offsets(&primes, columns);
    let layer_sums: Vec<Option<u64>> = primes
        .chunks(columns.max(1))
        .map(|layer| layer.iter().try_fold(0u64, |a, &p| a.checked_add(p)))
        .collect();
    let offsets = match k.opt_u64s(ENGRAM.offsets)? {
        Some(stored) => {
            if stored != derived_offsets {
                return Err(k.bad(
                    &k.key(ENGRAM.offsets),
                    "offsets are not the per-layer running sums of the primes".into(),
                ));
            }
            stored
        }
        None => derived_offsets,
    };
    let rows = match k.opt_u64s(ENGRAM.rows)? {
        Some(r) => r,
        None => layer_sums
            .iter()
            .map(|s| s.ok_or_else(|| k.bad(&k.key(ENGRAM.primes), "prime sum overflows".into())))
            .collect::<Result<Vec<u64>>>()?,
    };
    let compressed_vocab_size = match k.opt_u64(ENGRAM.compressed_vocab_size)? {
        Some(v) => v,
        None => {
            let derived = token_map
                .iter()
                .copied()
                .max()
                .map_or(0, |x| u64::from(x) + 1);
            warnings.push(format!(
                "{} is absent (llama.cpp dialect): using max(token_map) + 1 = {derived}",
                k.key(ENGRAM.compressed_vocab_size)
            ));
            derived
        }
    };
    let storage = match k.opt_str(ENGRAM.storage)?.as_deref() {
        None | Some("embedded") => EngramStorage::Embedded,
        Some("external") => {
            let paths = k
                .opt_strings(ENGRAM.external_paths)?
                .ok_or_else(|| k.missing(k.key(ENGRAM.external_paths)))?;
            let offsets = k.u64s(ENGRAM.external_offsets)?;
            let sizes = k.opt_u64s(ENGRAM.sidecar_size)?;
            EngramStorage::External {
                paths,
                offsets,
                sizes,
            }
        }
        Some(other) => {
            return Err(k.bad(
                &k.key(ENGRAM.storage),
                format!("{other:?}; expected \"embedded\" or \"external\""),
            ))
        }
    };
    let encoding = match ds4_encoding {
        Some(enc) => enc,
        None => {
            let first = layer_ids.first().copied().unwrap_or(0);
            let name = EngramMeta::table_name(first);
            let (_, t) = set.require_tensor(&name)?;
            EngramEncoding::Ggml(t.ggml_type)
        }
    };
    Ok(Some(EngramMeta {
        encoding,
        storage,
        layer_ids,
        n_heads,
        head_dim,
        max_ngram_size,
        compressed_vocab_size,
        pad_id,
        token_map,
        primes,
        offsets,
        multipliers,
        rows,
    }))
}

/// ds4's `ds4_engram_layout_valid` checks plus shape checks of the tables.
pub(super) fn validate(file: &GgufFile, p: &str, e: &EngramMeta, m: &Deepseek41Meta) -> Result<()> {
    let bad = |suffix: &str, problem: String| GgufError::BadMeta {
        path: file.path().to_path_buf(),
        key: format!("{p}.{suffix}"),
        problem,
    };
    let n = e.layer_ids.len();
    if n == 0 {
        return Err(bad(ENGRAM.layer_ids, "no engram layers listed".into()));
    }
    // One pass with a set: the duplicate check stays linear however many layers a file lists.
    let mut seen = std::collections::HashSet::with_capacity(n);
    for &l in &e.layer_ids {
        if l >= m.n_layers {
            return Err(bad(
                ENGRAM.layer_ids,
                format!("layer {l} is not below {} layers", m.n_layers),
            ));
        }
        if !seen.insert(l) {
            return Err(bad(ENGRAM.layer_ids, format!("layer {l} is listed twice")));
        }
    }
    if e.head_dim == 0 || e.head_dim % 32 != 0 || e.head_dim > 1 << 20 {
        return Err(bad(
            ENGRAM.key_length,
            format!(
                "{} values per row; expected a positive multiple of 32 (one scale per 32)",
                e.head_dim
            ),
        ));
    }
    if let Some(v) = e.encoding.fixed_row_values().filter(|&v| v != e.head_dim) {
        return Err(bad(
            ENGRAM.key_length,
            format!(
                "{} values per row, but encoding {} holds {v}",
                e.head_dim,
                e.encoding.name()
            ),
        ));
    }
    if e.compressed_vocab_size == 0 {
        return Err(bad(ENGRAM.compressed_vocab_size, "must be positive".into()));
    }
    if let Some((i, &t)) = e
        .token_map
        .iter()
        .enumerate()
        .find(|(_, &t)| u64::from(t) >= e.compressed_vocab_size)
    {
        return Err(bad(
            ENGRAM.token_map,
            format!(
                "token {i} maps to {t}, not below compressed_vocab_size {}",
                e.compressed_vocab_size
            ),
        ));
    }
    if e.token_map.len() as u64 != m.vocab_size {
        return Err(bad(
            ENGRAM.token_map,
            format!(
                "{} entries for a vocabulary of {}",
                e.token_map.len(),
                m.vocab_size
            ),
        ));
    }
    if e.pad_id >= e.compressed_vocab_size {
        return Err(bad(
            ENGRAM.pad_id,
            format!(
                "{} is not below compressed_vocab_size {} (pad_id is already a compressed id)",
                e.pad_id, e.compressed_vocab_size
            ),
        ));
    }
    let per_layer = e.max_ngram_size as usize;
    if e.multipliers.len() != n * per_layer {
        return Err(bad(
            ENGRAM.multipliers,
            format!(
                "{} multipliers; expected {n} layers x {per_layer} = {}",
                e.multipliers.len(),
                n * per_layer
            ),
        ));
    }
    let bound = i64::MAX as u64 / e.compressed_vocab_size;
    for (i, &mult) in e.multipliers.iter().enumerate() {
        if mult % 2 == 0 {
            return Err(bad(
                ENGRAM.multipliers,
                format!("multiplier {i} = {mult} is even; expected odd"),
            ));
        }
        if mult > bound {
            return Err(bad(
                ENGRAM.multipliers,
                format!(
                    "multiplier {i} = {mult} exceeds INT64_MAX / compressed_vocab_size = {bound}, so the hash could overflow"
                ),
            ));
        }
    }
    if let Some((i, &prime)) = e.primes.iter().enumerate().find(|(_, &q)| q < 2) {
        return Err(bad(
            ENGRAM.primes,
            format!("prime {i} is {prime}; expected at least 2"),
        ));
    }
    if e.rows.len() != n {
        return Err(bad(
            ENGRAM.rows,
            format!("{} row counts for {n} engram layers", e.rows.len()),
        ));
    }
    let columns = e.columns_per_layer();
    for (l, (layer_primes, &rows)) in e.primes.chunks(columns).zip(&e.rows).enumerate() {
        let sum = layer_primes.iter().try_fold(0u64, |a, &q| a.checked_add(q));
        if sum != Some(rows) {
            return Err(bad(
                ENGRAM.rows,
                format!(
                    "engram layer {l} (block {}) has {rows} rows but its primes sum to {}",
                    e.layer_ids[l],
                    sum.map_or("an overflow".to_string(), |s| s.to_string())
                ),
            ));
        }
    }
    if let EngramStorage::External {
        paths,
        offsets,
        sizes,
    } = &e.storage
    {
        if paths.len() != n || offsets.len() != n || sizes.as_ref().is_some_and(|s| s.len() != n) {
            return Err(bad(
                ENGRAM.external_paths,
                format!(
                    "{} paths / {} offsets for {n} engram layers",
                    paths.len(),
                    offsets.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Checks each engram table against the constants: an embedded table is present with the
/// encoding's type and row width and `rows` rows; a sidecar is opened (inside the GGUF's
/// directory) and must hold `rows` rows from its offset. Either way every row count is backed
/// by bytes before anything is built from it.
pub fn validate_engram_tables(set: &GgufSet, e: &EngramMeta) -> Result<()> {
    if e.storage != EngramStorage::Embedded {
        return crate::gguf::engram::EngramTables::open(set, e).map(|_| ());
    }
    let (ggml_type, ne0) = e.encoding.tensor_layout_for(e.head_dim);
    for (&layer, &rows) in e.layer_ids.iter().zip(&e.rows) {
        let name = EngramMeta::table_name(layer);
        let (file, t) = set.require_tensor(&name)?;
        let want = [ne0, rows];
        if !ggml_type.is_dequantizable() && ggml_type != GgmlType::I8 {
            return Err(GgufError::NotDequantizable {
                path: file.path().to_path_buf(),
                tensor: name,
                ggml_type: ggml_type.name(),
            });
        }
        if t.ggml_type != ggml_type || t.dims != want {
            return Err(GgufError::BadRequest {
                path: file.path().to_path_buf(),
                tensor: name,
                problem: format!(
                    "engram table is {} {:?}; encoding {} needs {} {:?}",
                    t.ggml_type,
                    t.dims,
                    e.encoding.name(),
                    ggml_type,
                    want
                ),
            });
        }
    }
    Ok(())
}

/// Writes the engram constants as `dialect` stores them: ds4 the encoding name, rows and
/// compressed vocabulary with `UINT32` arrays; llama.cpp the head count, row width, n-gram
/// size, compressed vocabulary and prime offsets with `INT32` layer ids and token map and `UINT64` primes. The
/// sidecar keys follow when the rows live outside the GGUF.
pub(super) fn write(w: &mut KeyWriter, dialect: Dialect, e: &EngramMeta) -> Result<()> {
    let token_map: Vec<u64> = e.token_map.iter().map(|&t| u64::from(t)).collect();
    match dialect {
        Dialect::Ds4 => {
            w.string(ENGRAM.encoding, &e.encoding.name())?;
            w.u32s(ENGRAM.layer_ids, &e.layer_ids)?;
            w.u32s(ENGRAM.rows, &e.rows)?;
            w.u32(ENGRAM.compressed_vocab_size, e.compressed_vocab_size)?;
            w.u32(ENGRAM.pad_id, e.pad_id)?;
            w.u32s(ENGRAM.token_map, &token_map)?;
            w.u32s(ENGRAM.primes, &e.primes)?;
            w.u64s(ENGRAM.multipliers, &e.multipliers)?;
        }
        Dialect::LlamaCpp => {
            w.i32s(ENGRAM.layer_ids, &e.layer_ids)?;
            w.u32(ENGRAM.head_count, e.n_heads)?;
            w.u32(ENGRAM.key_length, e.head_dim)?;
            w.u32(ENGRAM.max_ngram_size, e.max_ngram_size)?;
            // Optional in the dialect (a reader derives it from the token map, with a
            // warning); written so the file states it.
            w.u32(ENGRAM.compressed_vocab_size, e.compressed_vocab_size)?;
            w.u32(ENGRAM.pad_id, e.pad_id)?;
            w.u64s(ENGRAM.multipliers, &e.multipliers)?;
            w.u64s(ENGRAM.primes, &e.primes)?;
            w.u64s(ENGRAM.offsets, &e.offsets)?;
            w.i32s(ENGRAM.token_map, &token_map)?;
        }
    }
    if let EngramStorage::External {
        paths,
        offsets,
        sizes,
    } = &e.storage
    {
        w.string(ENGRAM.storage, "external")?;
        w.put(
            ENGRAM.external_paths,
            crate::gguf::GgufValue::strings(paths),
        )?;
        w.u64s(ENGRAM.external_offsets, offsets)?;
        if let Some(sizes) = sizes {
            w.u64s(ENGRAM.sidecar_size, sizes)?;
        }
    }
    Ok(())
}
