//! The default golden compiled into the binary (`golden/ds41_tiny.json`, see golden/README.md),
//! so the app and `check` work with no file at hand.

use super::{Golden, GoldenError};
use std::path::Path;

/// The text of `golden/ds41_tiny.json`.
pub const DEFAULT_GOLDEN_JSON: &str = include_str!("../../golden/ds41_tiny.json");

/// The label the embedded golden carries in messages and reports.
pub const DEFAULT_GOLDEN_LABEL: &str = "<embedded golden/ds41_tiny.json>";

/// Parse the embedded default golden.
pub fn default_golden() -> Result<Golden, GoldenError> {
    Golden::parse(DEFAULT_GOLDEN_JSON, Path::new(DEFAULT_GOLDEN_LABEL))
}
