//! Process-wide defaults for every GPU backend a run builds, set once by the command line from
//! `--adapter`, `--shaders` and `--profile` (the flag forms of `WGPU_BACKEND` and friends), so
//! `check`, `localize`, `selftest` and the app honour them wherever they build a backend.
//! Library callers that want something else pass an [`AdapterChoice`] to
//! [`GpuContext::with_choice`](super::GpuContext::with_choice) and call
//! [`GpuBackend::set_shaders`](super::GpuBackend::set_shaders) themselves.

use super::context::AdapterChoice;
use super::shaders::ShaderSet;
use std::sync::{Arc, PoisonError, RwLock};

/// The defaults.
#[derive(Debug, Clone, Default)]
pub struct GpuSettings {
    /// The adapter to open (`None`: the environment's choice, [`AdapterChoice::from_env`]).
    pub adapter: Option<AdapterChoice>,
    /// The WGSL to compile (`None`: the embedded set).
    pub shaders: Option<Arc<ShaderSet>>,
    /// Time every dispatch of every GPU backend from its creation.
    pub profile: bool,
}

static SETTINGS: RwLock<Option<GpuSettings>> = RwLock::new(None);

/// Replace the defaults.
pub fn configure(settings: GpuSettings) {
    *SETTINGS.write().unwrap_or_else(PoisonError::into_inner) = Some(settings);
}

/// The defaults in force.
pub fn current() -> GpuSettings {
    SETTINGS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_default()
}
