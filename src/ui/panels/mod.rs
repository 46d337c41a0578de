//! The app's panels, one file each: toolbar (files), run controls, banners, capture list,
//! overview strip, metrics table, the detail area that hosts the views, and the Self-test,
//! Localize and Determinism windows. Each takes `&mut Ui`, the read-only app state and a
//! command sender.

pub mod banners;
pub mod capture_list;
pub mod capture_rows;
pub mod detail;
pub mod determinism;
pub mod localize;
pub mod metrics;
pub mod overview;
#[cfg(feature = "gpu")]
pub mod profile;
pub mod run_controls;
pub mod selftest;
pub mod toolbar;
pub mod workbench;
