//! The app's panels, one file each: toolbar (files), run controls, banners, capture list,
//! overview plot, the detail area that hosts the views, and the Self-test and Localize windows.

pub mod banners;
pub mod capture_list;
pub mod detail;
pub mod determinism;
pub mod localize;
pub mod overview;
pub mod run_controls;
pub mod selftest;
pub mod toolbar;
