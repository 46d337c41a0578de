//! golden-lens: find where a DeepSeek-V4.1-Flash implementation leaves the reference golden.
//! Module tree only; the map is `docs/architecture.md` in the shared folder beside the checkout.

pub mod gguf;
pub mod golden;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod import;
pub mod model;
pub mod num;
pub mod oracle;
pub mod session;
#[cfg(feature = "gui")]
pub mod ui;
