//! The wgpu compute path: the V4.1 forward in WGSL kernels, step for step with the CPU oracle and
//! under the same capture names (architecture.md, "GPU path"). One WGSL file per kernel family
//! in `shaders/`, one Rust module per family with its bind-group layout, uniform struct and
//! dispatch math; [`GpuBackend`] mirrors the oracle with its state kept on the device.

pub mod attn;
pub mod backend;
pub mod compress;
pub mod context;
pub mod engram;
pub mod exec;
pub mod gemm;
pub mod hc;
pub mod inject;
pub mod loops;
pub mod moe;
pub mod profile;
pub mod provenance;
pub mod quant;
pub mod rope;
pub mod rows;
pub mod settings;
pub mod shaders;
pub mod watch;

pub use backend::{GpuBackend, GpuOptions};
pub use context::{
    list_adapters, test_context, AdapterChoice, AdapterChoiceError, AdapterSummary, DeviceHealth,
    GpuContext, KernelLimits,
};
pub use exec::{Gpu, Tensor, WeightTensor};
pub use inject::{Injection, InjectionKind};
pub use shaders::{ShaderError, ShaderOrigin, ShaderSet};

/// Helpers every kernel family is compiled with (bf16 rounding, exact-product pair sums).
pub const COMMON_WGSL: &str = include_str!("../../shaders/common.wgsl");

/// Everything that can go wrong on the GPU path.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No adapter that runs our compute kernels matched the choice (`seen` lists the adapters
    /// that matched but cannot, with why).
    #[error(
        "no wgpu adapter with compute shaders for `{choice}`{}; install a GPU driver, or Mesa's \
         lavapipe (mesa-vulkan-drivers) or GL (libegl1, libegl-mesa0, libgl1-mesa-dri)",
        if seen.is_empty() { String::new() } else { format!(" (unsuitable: {})", seen.join("; ")) }
    )]
    NoAdapter { choice: String, seen: Vec<String> },
    /// The device was lost (driver reset, removal, or an injected loss) in the middle of a run.
    #[error("the GPU device on {adapter} was lost: {reason}")]
    DeviceLost { adapter: String, reason: String },
    /// The adapter refused a device with its own limits.
    #[error("could not create a device on {adapter}: {msg}")]
    Device { adapter: String, msg: String },
    /// A shape or size guard failed before a dispatch.
    #[error("{kernel}: {msg}")]
    Guard { kernel: &'static str, msg: String },
    /// A shape whose invocations would loop more often than the adapter runs (Mesa's llvmpipe:
    /// see [`loops`]), refused before it could return zeros.
    #[error(
        "{kernel}::{entry} at {shape}: {back_edges} loop iterations per invocation exceed the \
         {cap} that {adapter} runs (Mesa's llvmpipe stops an invocation's loops there and the \
         outputs would come back zero or stale); run it on a GPU adapter or a smaller shape"
    )]
    LoopCap {
        kernel: &'static str,
        entry: &'static str,
        shape: String,
        back_edges: u64,
        cap: u64,
        adapter: String,
    },
    /// A tensor exceeds what one buffer may hold on this adapter.
    #[error("{what}: {bytes} bytes exceed the adapter's limit of {limit} bytes per buffer")]
    TooLarge {
        what: String,
        bytes: u64,
        limit: u64,
    },
    /// wgpu reported a validation or out-of-memory error.
    #[error("wgpu: {0}")]
    Wgpu(String),
    /// A read-back failed.
    #[error("read-back: {0}")]
    Map(String),
}

/// A shape guard failure of `kernel`.
pub(crate) fn guard(kernel: &'static str, msg: impl Into<String>) -> GpuError {
    GpuError::Guard {
        kernel,
        msg: msg.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse and validate one kernel family (with the common prelude) through naga.
    fn validate(name: &str, src: &str) {
        let full = format!("{COMMON_WGSL}\n{src}");
        let module = wgpu::naga::front::wgsl::parse_str(&full)
            .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&full)));
        let mut v = wgpu::naga::valid::Validator::new(
            wgpu::naga::valid::ValidationFlags::all(),
            wgpu::naga::valid::Capabilities::default(),
        );
        let info = v
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&full)));
        assert!(
            !module.entry_points.is_empty(),
            "{name}: no entry points ({info:?})"
        );
    }

    #[test]
    fn every_shader_parses_and_validates() {
        for fam in exec::FAMILIES {
            validate(fam.name, fam.source);
            for entry in fam.entries {
                let full = format!("{COMMON_WGSL}\n{}", fam.source);
                let module = wgpu::naga::front::wgsl::parse_str(&full).expect("parsed above");
                assert!(
                    module.entry_points.iter().any(|e| e.name == *entry),
                    "{}: entry `{entry}` missing",
                    fam.name
                );
            }
        }
    }
}
