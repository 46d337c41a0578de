//! Fuzz targets of golden-lens (see `targets`); the binaries in `fuzz_targets/` wrap them.

pub mod targets;
