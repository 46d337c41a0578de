//! Goldens in the Atlas `ds41_tiny_golden.json` schema: the typed golden and its entry points
//! (`schema`), the streaming loader (`parse`; `fixture` for the fixture block, `json` for the
//! small JSON tree and its typed accessors, `json_error` for error positions), capture names and
//! kinds (`names`), the comparator and its tolerance policies (`compare`, `policy`), and weight
//! regeneration from `weights_meta` (`weights`).

pub mod compare;
pub mod embedded;
mod fixture;
mod json;
mod json_error;
pub mod names;
mod parse;
pub mod policy;
pub mod schema;
pub mod weights;

pub use compare::{compare_full, compare_with_golden, Comparison, IndexAgreement, Values};
pub use names::{capture_kind, parse_capture_name, CaptureKind, CaptureName};
pub use parse::TOP_GOLDEN_LENS;
pub use policy::{policy_for, policy_for_capture, Policy};
pub use schema::{
    CaptureData, EngramFixture, Fixture, Golden, GoldenCapture, GoldenError, GoldenVersion, Regime,
    StorageDtype, WeightKind, WeightMeta,
};
pub use weights::{regenerate, verify_all, WeightCheck};
