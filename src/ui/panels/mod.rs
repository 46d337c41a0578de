//! The app's panels, one file each: toolbar (files), run controls, banners, capture list,
//! overview plot, and the detail area that hosts the views.

pub mod banners;
pub mod capture_list;
pub mod detail;
pub mod overview;
pub mod run_controls;
pub mod selftest;
pub mod toolbar;
