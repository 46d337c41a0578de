//! The default golden compiled into the binary: DeepSeek's own full-resolution v3 golden
//! (`golden/reference/ds41_tiny_golden.v3-full.json`, provenance in golden/reference/README.md),
//! so the app and `check` work with no file at hand and compare against the reference's outputs,
//! every element of every capture included.

use super::{Golden, GoldenError};
use std::path::Path;

/// The text of `golden/reference/ds41_tiny_golden.v3-full.json`.
pub const DEFAULT_GOLDEN_JSON: &str =
    include_str!("../../golden/reference/ds41_tiny_golden.v3-full.json");

/// The label the embedded golden carries in messages and reports.
pub const DEFAULT_GOLDEN_LABEL: &str = "<embedded golden/reference/ds41_tiny_golden.v3-full.json>";

/// Parse the embedded default golden.
pub fn default_golden() -> Result<Golden, GoldenError> {
    Golden::parse(DEFAULT_GOLDEN_JSON, Path::new(DEFAULT_GOLDEN_LABEL))
}
