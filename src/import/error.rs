//! Every way an imported dump, a name map or the join of the two can be rejected. Messages name
//! the file, and where it applies the tensor, the capture and the field.

use std::path::{Path, PathBuf};

/// A rejected dump file, map file or mapping.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The file's bytes break its format (header, offsets, lengths, encoding).
    #[error("{}: {field}: {msg}", path.display())]
    Format {
        path: PathBuf,
        /// What was being read (`header length`, `tensor L0.h_in: data_offsets`, ...).
        field: String,
        msg: String,
    },
    /// A tensor's element type is one this importer does not read (reported by name).
    #[error("{}: tensor `{tensor}`: dtype `{dtype}` is not supported (expected one of {expected})", path.display())]
    UnsupportedDtype {
        path: PathBuf,
        tensor: String,
        dtype: String,
        expected: &'static str,
    },
    /// Two tensors of one file carry the same name.
    #[error("{}: tensor name `{tensor}` appears twice", path.display())]
    Duplicate { path: PathBuf, tensor: String },
    /// A name-map file (TOML) is malformed or one of its rules is.
    #[error("map {map}: {msg}")]
    Map { map: String, msg: String },
    /// A mapped tensor does not fit the capture it was mapped to.
    #[error("{}: tensor `{tensor}` -> capture `{regime}/{capture}`: {msg}", path.display())]
    Misfit {
        path: PathBuf,
        tensor: String,
        regime: String,
        capture: String,
        msg: String,
    },
    /// Two tensors were mapped to the same capture of the same regime.
    #[error("{}: tensors `{first}` and `{second}` both map to capture `{regime}/{capture}`", path.display())]
    Collision {
        path: PathBuf,
        first: String,
        second: String,
        regime: String,
        capture: String,
    },
}

impl ImportError {
    pub(crate) fn format(path: &Path, field: impl Into<String>, msg: impl Into<String>) -> Self {
        ImportError::Format {
            path: path.to_path_buf(),
            field: field.into(),
            msg: msg.into(),
        }
    }

    pub(crate) fn io(path: &Path, action: &'static str, source: std::io::Error) -> Self {
        ImportError::Io {
            path: path.to_path_buf(),
            action,
            source,
        }
    }
}
