//! The one error type of the GGUF module. Every variant names the file and, where it applies,
//! the byte offset and the field that was being read, and says what was expected.

use std::path::PathBuf;

/// Everything that can go wrong while opening, validating or decoding a GGUF file (or a split
/// set, or an engram sidecar). Hostile files produce one of these, never a panic.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// An operating-system call on a file failed.
    #[error("{path}: cannot {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// The first four bytes are not `GGUF`.
    #[error("{path}: not a GGUF file: expected magic bytes 47 47 55 46 (\"GGUF\") at offset 0, found {found:02x?}")]
    BadMagic { path: PathBuf, found: Vec<u8> },

    /// The version field is not one this reader understands.
    #[error("{path}: unsupported GGUF version {version} at offset 4: expected 2 or 3{hint}")]
    UnsupportedVersion {
        path: PathBuf,
        version: u32,
        hint: &'static str,
    },

    /// The file ends before a field it announces.
    #[error("{path}: truncated: {field} at offset {offset} needs {needed} bytes, only {available} remain in the file")]
    Truncated {
        path: PathBuf,
        offset: u64,
        field: String,
        needed: u64,
        available: u64,
    },

    /// A count (tensors, keys, array elements) that the rest of the file cannot possibly hold.
    #[error("{path}: {field} at offset {offset} claims {count} entries, but the {remaining} remaining bytes can hold at most {max_count}")]
    CountTooLarge {
        path: PathBuf,
        offset: u64,
        field: String,
        count: u64,
        remaining: u64,
        max_count: u64,
    },

    /// A string (key, value or tensor name) is not UTF-8.
    #[error("{path}: {field} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        path: PathBuf,
        offset: u64,
        field: String,
    },

    /// A metadata value type id outside 0..=12.
    #[error(
        "{path}: {field} at offset {offset} has unknown value type {type_id} (expected 0..=12)"
    )]
    UnknownValueType {
        path: PathBuf,
        offset: u64,
        field: String,
        type_id: u32,
    },

    /// Arrays nested deeper than the reader accepts.
    #[error("{path}: {field} at offset {offset} nests arrays deeper than {max_depth} levels")]
    ArrayTooDeep {
        path: PathBuf,
        offset: u64,
        field: String,
        max_depth: usize,
    },

    /// The same metadata key appears twice.
    #[error("{path}: duplicate metadata key {key:?} at offset {offset} (keys must be unique)")]
    DuplicateKey {
        path: PathBuf,
        offset: u64,
        key: String,
    },

    /// `general.alignment` is not a power of two greater than zero, or not a u32.
    #[error("{path}: general.alignment at offset {offset}: expected a u32 power of two greater than 0, found {found}")]
    BadAlignment {
        path: PathBuf,
        offset: u64,
        found: String,
    },

    /// A tensor info that breaks a structural rule (rank, dims, name, block multiple).
    #[error("{path}: tensor {tensor:?} (info at offset {offset}): {problem}")]
    BadTensorInfo {
        path: PathBuf,
        offset: u64,
        tensor: String,
        problem: String,
    },

    /// A tensor's data offset is not a multiple of the file's alignment.
    #[error("{path}: tensor {tensor:?}: data offset {relative_offset} is not a multiple of general.alignment {alignment}")]
    MisalignedTensor {
        path: PathBuf,
        tensor: String,
        relative_offset: u64,
        alignment: u64,
    },

    /// A tensor's data reaches past the end of the file.
    #[error("{path}: tensor {tensor:?}: data [{start}, {end}) lies past the end of the file ({file_len} bytes)")]
    TensorPastEnd {
        path: PathBuf,
        tensor: String,
        start: u64,
        end: u64,
        file_len: u64,
    },

    /// Two tensors share bytes.
    #[error("{path}: tensor {tensor:?} data [{start}, {end}) overlaps tensor {other:?} data [{other_start}, {other_end})")]
    TensorOverlap {
        path: PathBuf,
        tensor: String,
        start: u64,
        end: u64,
        other: String,
        other_start: u64,
        other_end: u64,
    },

    /// Two tensors (in one file or across a split set) share a name.
    #[error("{path}: duplicate tensor name {name:?} (tensor names must be unique{context})")]
    DuplicateTensor {
        path: PathBuf,
        name: String,
        context: String,
    },

    /// A tensor that was asked for does not exist.
    #[error("{path}: no tensor named {name:?}")]
    NoSuchTensor { path: PathBuf, name: String },

    /// A request outside a tensor's bounds (rows, experts) or of the wrong shape.
    #[error("{path}: tensor {tensor:?}: {problem}")]
    BadRequest {
        path: PathBuf,
        tensor: String,
        problem: String,
    },

    /// A tensor type without a dequantizer (unknown id, or a known type not implemented).
    #[error("{path}: tensor {tensor:?}: type {ggml_type} cannot be dequantized by golden-lens")]
    NotDequantizable {
        path: PathBuf,
        tensor: String,
        ggml_type: String,
    },

    /// Block data whose length does not match the type's block size, or that holds invalid codes.
    #[error("{ggml_type} decode: {problem}")]
    Quant { ggml_type: String, problem: String },

    /// A metadata key is missing where a loader needs it.
    #[error("{path}: required metadata key {key:?} is missing{hint}")]
    MissingKey {
        path: PathBuf,
        key: String,
        hint: String,
    },

    /// A metadata key has the wrong value type.
    #[error("{path}: metadata key {key:?}: expected {expected}, found {found}")]
    MetaType {
        path: PathBuf,
        key: String,
        expected: String,
        found: String,
    },

    /// A metadata value that breaks a model invariant (engram constants, ranges, lengths).
    #[error("{path}: metadata key {key:?}: {problem}")]
    BadMeta {
        path: PathBuf,
        key: String,
        problem: String,
    },

    /// A split set that is incomplete or inconsistent.
    #[error("{path}: split set: {problem}")]
    Split { path: PathBuf, problem: String },

    /// An engram sidecar path that is unsafe or does not resolve.
    #[error("{path}: engram sidecar {sidecar:?}: {problem}")]
    Sidecar {
        path: PathBuf,
        sidecar: String,
        problem: String,
    },

    /// The file is not a deepseek41 GGUF of a dialect this reader knows.
    #[error("{path}: {problem}")]
    Dialect { path: PathBuf, problem: String },
}

/// Result alias for the GGUF module.
pub type Result<T> = std::result::Result<T, GgufError>;
