//! Goldens in the Atlas `ds41_tiny_golden.json` schema: the strict loader and validation
//! (`schema`), capture names and kinds (`names`), the comparator and its tolerance policies
//! (`compare`, `policy`), and weight regeneration from `weights_meta` (`weights`).

pub mod compare;
pub mod names;
pub mod policy;
pub mod schema;
pub mod weights;

pub use schema::{
    CaptureData, EngramFixture, Fixture, Golden, GoldenCapture, GoldenError, Regime, StorageDtype,
    WeightKind, WeightMeta,
};
