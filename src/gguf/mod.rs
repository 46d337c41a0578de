//! GGUF for deepseek41 files: a validating reader (memmap2 for the resident region, positioned
//! reads for engram tables), split sets, engram sidecars, the two deepseek41 dialects, tensor
//! name mapping, and dequantization of every block type the real files hold.

mod cursor;
pub mod deepseek41;
pub mod engram;
pub mod error;
pub mod ggml_type;
pub mod info;
pub mod names;
pub mod quant;
pub mod reader;
pub mod split;
pub mod synth;
pub mod value;
pub mod writer;

pub use deepseek41::{detect_dialect, Deepseek41Meta, Dialect, EngramMeta, EngramStorage};
pub use engram::{open_sidecar, EngramTables, Sidecar};
pub use error::{GgufError, Result};
pub use ggml_type::GgmlType;
pub use reader::{GgufFile, TensorInfo};
pub use split::GgufSet;
pub use value::{MetaArray, MetaEntry, MetaValue, ValueType};
pub use writer::{GgufValue, GgufWriter};
