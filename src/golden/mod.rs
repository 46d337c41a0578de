//! Goldens in the Atlas `ds41_tiny_golden.json` schema: the strict loader and validation
//! (`schema`), capture names and kinds (`names`), the comparator and its tolerance policies
//! (`compare`, `policy`), and weight regeneration from `weights_meta` (`weights`).

pub mod compare;
pub mod embedded;
pub mod names;
pub mod policy;
pub mod schema;
pub mod weights;

pub use compare::{compare_full, compare_with_golden, Comparison, IndexAgreement, Values};
pub use names::{capture_kind, parse_capture_name, CaptureKind, CaptureName};
pub use policy::{policy_for, policy_for_capture, Policy};
pub use schema::{
    CaptureData, EngramFixture, Fixture, Golden, GoldenCapture, GoldenError, GoldenVersion, Regime,
    StorageDtype, WeightKind, WeightMeta,
};
pub use weights::{regenerate, verify_all, WeightCheck};
