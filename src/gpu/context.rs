//! Adapter and device selection. Any Vulkan adapter will do: a real GPU, or lavapipe (Mesa's CPU
//! Vulkan) in CI. The device is requested with the adapter's own limits, so big tensors can use
//! what the hardware offers; tensors above its storage-binding limit are chunked by the caller.

use super::GpuError;

/// What the check prints about the adapter in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSummary {
    /// Adapter name (e.g. `llvmpipe (LLVM 19.1.7, 256 bits)` or `NVIDIA H200`).
    pub name: String,
    /// Backend (Vulkan).
    pub backend: String,
    /// Device type (CPU for lavapipe, discrete GPU, ...).
    pub device_type: String,
    /// Driver and driver info strings.
    pub driver: String,
    /// The largest storage-buffer binding, in bytes.
    pub max_storage_binding_bytes: u64,
    /// The largest buffer, in bytes.
    pub max_buffer_bytes: u64,
}

impl std::fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, {}, driver {}; max storage binding {} MiB)",
            self.name,
            self.backend,
            self.device_type,
            self.driver,
            self.max_storage_binding_bytes >> 20
        )
    }
}

/// A device and queue on one adapter, with the limits the kernels must respect.
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    pub adapter: AdapterSummary,
}

impl GpuContext {
    /// The first Vulkan adapter, preferring a discrete GPU over an integrated one over the CPU
    /// (lavapipe). `GOLDEN_LENS_ADAPTER`, when set, picks the first adapter whose name contains it.
    pub fn new() -> Result<GpuContext, GpuError> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN,
            ..wgpu::InstanceDescriptor::new_without_display_handle_from_env()
        });
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
        let wanted = std::env::var("GOLDEN_LENS_ADAPTER").ok();
        let rank = |t: wgpu::DeviceType| match t {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Cpu => 3,
            wgpu::DeviceType::Other => 4,
        };
        let adapter = adapters
            .into_iter()
            .filter(|a| {
                wanted
                    .as_deref()
                    .is_none_or(|w| a.get_info().name.contains(w))
            })
            .min_by_key(|a| rank(a.get_info().device_type))
            .ok_or_else(|| {
                GpuError::NoAdapter(match &wanted {
                    Some(w) => format!("none whose name contains {w:?}"),
                    None => "no Vulkan adapter".to_string(),
                })
            })?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let summary = AdapterSummary {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info)
                .trim()
                .to_string(),
            max_storage_binding_bytes: limits.max_storage_buffer_binding_size,
            max_buffer_bytes: limits.max_buffer_size,
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("golden-lens"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| GpuError::Device {
            adapter: summary.name.clone(),
            msg: e.to_string(),
        })?;
        Ok(GpuContext {
            device,
            queue,
            limits,
            adapter: summary,
        })
    }

    /// Bytes one storage binding may cover (the chunk size for big weights).
    pub fn max_binding_bytes(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
    }
}

/// The test-harness rule for GPU tests: a context when an adapter exists; otherwise `None` with a
/// printed notice, except under `CI=true`, where a missing adapter fails the test (CI installs
/// lavapipe, so its absence is a broken setup, not a reason to skip).
pub fn test_context(test: &str) -> Option<GpuContext> {
    match GpuContext::new() {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            if ci {
                panic!("{test}: CI=true and no GPU adapter: {e}");
            }
            eprintln!("SKIPPED {test}: no GPU adapter ({e}); install mesa-vulkan-drivers");
            None
        }
    }
}
