//! Adapter and device selection on every wgpu backend: Vulkan (a real GPU, or lavapipe, Mesa's
//! CPU Vulkan), Metal, DX12 and GL (wgpu's `gles` backend: GL 4.3+ / GLES 3.1 compute, e.g.
//! Mesa's llvmpipe). The best adapter comes first (a discrete GPU over an integrated one over a
//! CPU rasteriser; within a kind, the native compute APIs before GL); an [`AdapterChoice`]
//! (`--adapter`, `WGPU_BACKEND`, `WGPU_ADAPTER_NAME`/`GOLDEN_LENS_ADAPTER`) narrows it. Only
//! adapters that run compute shaders with the storage bindings our kernels declare are
//! candidates. The device is requested with the adapter's own limits, so big tensors can use
//! what the hardware offers; tensors above its storage-binding limit are chunked by the caller.
//! The device's lost callback and uncaptured-error handler record into [`DeviceHealth`] instead
//! of panicking, so a lost device ends a run with [`GpuError::DeviceLost`].

use super::GpuError;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

/// The storage bindings (beyond the uniform) the widest kernel family declares: an adapter that
/// offers fewer per compute stage cannot run the forward.
pub const STORAGE_BINDINGS_NEEDED: u32 = 5;

/// Which adapter to run on: a set of backends and, optionally, a substring of the adapter's
/// name. Written `BACKEND`, `NAME` or `BACKEND:NAME` (`vulkan`, `gl:llvmpipe`, `H200`), with the
/// backend names wgpu's `WGPU_BACKEND` takes (vulkan/vk, gl/gles/opengl, metal/mtl, dx12/d3d12,
/// comma-separated for several); `auto` (or empty) is every backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterChoice {
    pub backends: wgpu::Backends,
    pub name_contains: Option<String>,
}

impl Default for AdapterChoice {
    fn default() -> Self {
        AdapterChoice {
            backends: native_backends(),
            name_contains: None,
        }
    }
}

/// The backends this build can open (wgpu's native ones).
fn native_backends() -> wgpu::Backends {
    wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12 | wgpu::Backends::GL
}

/// Why an adapter choice was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("adapter choice `{arg}`: {msg}")]
pub struct AdapterChoiceError {
    pub arg: String,
    pub msg: String,
}

/// `Some(backends)` when every comma-separated word of `s` names a backend.
fn parse_backends(s: &str) -> Option<wgpu::Backends> {
    let mut b = wgpu::Backends::empty();
    for word in s.split(',') {
        b |= match word.trim().to_ascii_lowercase().as_str() {
            "vulkan" | "vk" => wgpu::Backends::VULKAN,
            "gl" | "gles" | "opengl" => wgpu::Backends::GL,
            "metal" | "mtl" => wgpu::Backends::METAL,
            "dx12" | "d3d12" => wgpu::Backends::DX12,
            "auto" | "all" => native_backends(),
            _ => return None,
        };
    }
    Some(b)
}

impl FromStr for AdapterChoice {
    type Err = AdapterChoiceError;

    fn from_str(arg: &str) -> Result<AdapterChoice, AdapterChoiceError> {
        let arg_t = arg.trim();
        if arg_t.is_empty() {
            return Ok(AdapterChoice::default());
        }
        let (backends, name) = match arg_t.split_once(':') {
            Some((b, n)) => {
                let backends = parse_backends(b).ok_or_else(|| AdapterChoiceError {
                    arg: arg.to_string(),
                    msg: format!("unknown backend `{b}` (one of vulkan, gl, metal, dx12, auto)"),
                })?;
                (backends, Some(n))
            }
            None => match parse_backends(arg_t) {
                Some(b) => (b, None),
                None => (native_backends(), Some(arg_t)),
            },
        };
        let name_contains = name.map(str::trim).filter(|n| !n.is_empty());
        Ok(AdapterChoice {
            backends,
            name_contains: name_contains.map(str::to_string),
        })
    }
}

impl fmt::Display for AdapterChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = [
            (wgpu::Backends::VULKAN, "vulkan"),
            (wgpu::Backends::METAL, "metal"),
            (wgpu::Backends::DX12, "dx12"),
            (wgpu::Backends::GL, "gl"),
        ]
        .iter()
        .filter(|(b, _)| self.backends.contains(*b))
        .map(|(_, n)| *n)
        .collect();
        let backends = if self.backends.contains(native_backends()) {
            "auto".to_string()
        } else {
            names.join(",")
        };
        match &self.name_contains {
            Some(n) => write!(f, "{backends}:{n}"),
            None => f.write_str(&backends),
        }
    }
}

impl AdapterChoice {
    /// The choice the environment makes: `WGPU_BACKEND` (wgpu's own variable) for the backends,
    /// `GOLDEN_LENS_ADAPTER` or else `WGPU_ADAPTER_NAME` for a name substring.
    pub fn from_env() -> AdapterChoice {
        let backends = std::env::var("WGPU_BACKEND")
            .ok()
            .and_then(|v| parse_backends(&v))
            .unwrap_or_else(native_backends);
        let name_contains = ["GOLDEN_LENS_ADAPTER", "WGPU_ADAPTER_NAME"]
            .iter()
            .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()));
        AdapterChoice {
            backends,
            name_contains,
        }
    }

    /// This choice with the environment's filled in where this one leaves it open (a CLI flag
    /// wins over the environment).
    pub fn or_env(self) -> AdapterChoice {
        let env = AdapterChoice::from_env();
        AdapterChoice {
            backends: if self.backends.contains(native_backends()) {
                env.backends
            } else {
                self.backends
            },
            name_contains: self.name_contains.or(env.name_contains),
        }
    }
}

/// The adapter limits the kernels depend on, as queried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLimits {
    /// The largest storage-buffer binding, in bytes (weights are chunked to fit).
    pub max_storage_binding_bytes: u64,
    /// The largest buffer, in bytes.
    pub max_buffer_bytes: u64,
    /// Storage buffers one compute shader may bind.
    pub max_storage_buffers_per_stage: u32,
    /// Workgroup memory per workgroup, in bytes (the tiled GEMM stages 10 KiB slabs).
    pub max_workgroup_storage_bytes: u32,
    /// Invocations per workgroup.
    pub max_invocations_per_workgroup: u32,
    /// Workgroup size along x.
    pub max_workgroup_size_x: u32,
    /// Workgroups per dispatch dimension.
    pub max_workgroups_per_dimension: u32,
    /// Whether the device records GPU timestamps around compute passes.
    pub timestamps: bool,
}

impl KernelLimits {
    fn of(limits: &wgpu::Limits, timestamps: bool) -> KernelLimits {
        KernelLimits {
            max_storage_binding_bytes: limits.max_storage_buffer_binding_size,
            max_buffer_bytes: limits.max_buffer_size,
            max_storage_buffers_per_stage: limits.max_storage_buffers_per_shader_stage,
            max_workgroup_storage_bytes: limits.max_compute_workgroup_storage_size,
            max_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
            max_workgroup_size_x: limits.max_compute_workgroup_size_x,
            max_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
            timestamps,
        }
    }
}

/// What the check prints about the adapter in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSummary {
    /// Adapter name (e.g. `llvmpipe (LLVM 19.1.7, 256 bits)` or `NVIDIA H200`).
    pub name: String,
    /// Backend (`Vulkan`, `Metal`, `Dx12`, `Gl`).
    pub backend: String,
    /// Device type (CPU for lavapipe and llvmpipe, discrete GPU, ...).
    pub device_type: String,
    /// Driver and driver info strings.
    pub driver: String,
    /// The largest storage-buffer binding, in bytes.
    pub max_storage_binding_bytes: u64,
    /// The largest buffer, in bytes.
    pub max_buffer_bytes: u64,
    /// The limits the kernels were chosen and chunked by.
    pub limits: KernelLimits,
}

impl AdapterSummary {
    fn of(adapter: &wgpu::Adapter, timestamps: bool) -> AdapterSummary {
        let info = adapter.get_info();
        let limits = adapter.limits();
        AdapterSummary {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info)
                .trim()
                .to_string(),
            max_storage_binding_bytes: limits.max_storage_buffer_binding_size,
            max_buffer_bytes: limits.max_buffer_size,
            limits: KernelLimits::of(&limits, timestamps),
        }
    }

    /// Whether the adapter is Mesa's llvmpipe (lavapipe on Vulkan, llvmpipe on GL: both name
    /// the device `llvmpipe (LLVM …)`), whose per-invocation loop cap [`super::loops`] guards.
    pub fn is_llvmpipe(&self) -> bool {
        self.name.to_ascii_lowercase().contains("llvmpipe")
    }

    /// Whether the adapter is a CPU rasteriser (lavapipe, llvmpipe, SwiftShader, WARP).
    pub fn is_cpu(&self) -> bool {
        self.device_type == format!("{:?}", wgpu::DeviceType::Cpu)
    }
}

impl fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

/// What the device reported behind our back: a loss (its lost callback) and errors no error
/// scope caught (its uncaptured-error handler, which would otherwise panic).
#[derive(Debug, Default)]
pub struct DeviceHealth {
    lost: Mutex<Option<String>>,
    errors: Mutex<Vec<String>>,
}

impl DeviceHealth {
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Record a loss (the first reason is kept).
    pub fn mark_lost(&self, why: String) {
        Self::lock(&self.lost).get_or_insert(why);
    }

    /// The loss, if the device was lost.
    pub fn lost(&self) -> Option<String> {
        Self::lock(&self.lost).clone()
    }

    /// Take the uncaptured errors recorded so far.
    pub fn take_errors(&self) -> Vec<String> {
        std::mem::take(&mut *Self::lock(&self.errors))
    }

    /// `Err` when the device was lost or reported an uncaptured error.
    pub fn check(&self, adapter: &str) -> Result<(), GpuError> {
        if let Some(reason) = self.lost() {
            return Err(GpuError::DeviceLost {
                adapter: adapter.to_string(),
                reason,
            });
        }
        match self.take_errors().into_iter().next() {
            Some(e) => Err(GpuError::Wgpu(e)),
            None => Ok(()),
        }
    }
}

/// A device and queue on one adapter, with the limits the kernels must respect.
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    pub adapter: AdapterSummary,
    /// Features the device was created with (timestamp queries where the adapter has them).
    pub features: wgpu::Features,
    /// Loss and uncaptured errors, recorded by the device's callbacks.
    pub health: Arc<DeviceHealth>,
}

/// Rank of a device type: lower is better.
fn type_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    }
}

/// Rank of a backend within a device type: the native compute APIs before GL.
fn backend_rank(b: wgpu::Backend) -> u8 {
    match b {
        wgpu::Backend::Vulkan => 0,
        wgpu::Backend::Metal => 1,
        wgpu::Backend::Dx12 => 2,
        wgpu::Backend::Gl => 3,
        _ => 4,
    }
}

/// Why `adapter` cannot run the forward, or `None` when it can.
fn unsuitable(adapter: &wgpu::Adapter) -> Option<String> {
    let caps = adapter.get_downlevel_capabilities();
    if !caps.flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS) {
        return Some("no compute shaders".into());
    }
    let limits = adapter.limits();
    if limits.max_storage_buffers_per_shader_stage < STORAGE_BINDINGS_NEEDED {
        return Some(format!(
            "{} storage buffers per compute stage, the kernels bind {STORAGE_BINDINGS_NEEDED}",
            limits.max_storage_buffers_per_shader_stage
        ));
    }
    if limits.max_compute_invocations_per_workgroup < super::exec::WG
        || limits.max_compute_workgroup_size_x < super::exec::WG
    {
        return Some(format!(
            "workgroups of {} invocations, the kernels use {}",
            limits.max_compute_invocations_per_workgroup,
            super::exec::WG
        ));
    }
    None
}

/// Every adapter `choice` admits, best first, each with why it cannot run the kernels (`None`
/// when it can). Opening a GL adapter needs no display: wgpu uses EGL's surfaceless platform.
pub fn list_adapters(choice: &AdapterChoice) -> Vec<(AdapterSummary, Option<String>)> {
    let (_, adapters) = enumerate(choice);
    adapters
        .iter()
        .map(|a| (AdapterSummary::of(a, false), unsuitable(a)))
        .collect()
}

fn enumerate(choice: &AdapterChoice) -> (wgpu::Instance, Vec<wgpu::Adapter>) {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: choice.backends,
        ..wgpu::InstanceDescriptor::new_without_display_handle_from_env()
    });
    let mut adapters: Vec<wgpu::Adapter> =
        pollster::block_on(instance.enumerate_adapters(choice.backends))
            .into_iter()
            .filter(|a| {
                choice
                    .name_contains
                    .as_deref()
                    .is_none_or(|w| a.get_info().name.contains(w))
            })
            .collect();
    adapters.sort_by_key(|a| {
        let i = a.get_info();
        (type_rank(i.device_type), backend_rank(i.backend))
    });
    (instance, adapters)
}

impl GpuContext {
    /// The best adapter the run's choice admits: `--adapter` ([`super::settings`]) where the
    /// command line gave one, else the environment's ([`AdapterChoice::from_env`]).
    pub fn new() -> Result<GpuContext, GpuError> {
        let choice = super::settings::current()
            .adapter
            .map(AdapterChoice::or_env)
            .unwrap_or_else(AdapterChoice::from_env);
        GpuContext::with_choice(&choice)
    }

    /// The best adapter `choice` admits that can run the kernels, with a device on its own
    /// limits; a clear [`GpuError::NoAdapter`] naming what was seen when there is none.
    pub fn with_choice(choice: &AdapterChoice) -> Result<GpuContext, GpuError> {
        let (_instance, adapters) = enumerate(choice);
        let mut seen = Vec::new();
        let mut picked = None;
        for a in adapters {
            let i = a.get_info();
            match unsuitable(&a) {
                None => {
                    picked = Some(a);
                    break;
                }
                Some(why) => seen.push(format!("{} ({:?}): {why}", i.name, i.backend)),
            }
        }
        let adapter = picked.ok_or_else(|| GpuError::NoAdapter {
            choice: choice.to_string(),
            seen: seen.clone(),
        })?;
        let timestamps = adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let features = if timestamps {
            wgpu::Features::TIMESTAMP_QUERY
        } else {
            wgpu::Features::empty()
        };
        let summary = AdapterSummary::of(&adapter, timestamps);
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("golden-lens"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| GpuError::Device {
            adapter: summary.name.clone(),
            msg: e.to_string(),
        })?;
        let health = Arc::new(DeviceHealth::default());
        let h = health.clone();
        device.set_device_lost_callback(move |reason, msg| {
            h.mark_lost(format!("{reason:?}: {msg}"));
        });
        let h = health.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            h.errors
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(e.to_string());
        }));
        Ok(GpuContext {
            device,
            queue,
            limits,
            adapter: summary,
            features,
            health,
        })
    }

    /// Bytes one storage binding may cover (the chunk size for big weights).
    pub fn max_binding_bytes(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
    }

    /// `Err` once the device is lost or has reported an error no scope caught.
    pub fn check_health(&self) -> Result<(), GpuError> {
        self.health.check(&self.adapter.name)
    }
}

/// The test-harness rule for GPU tests: a context when an adapter exists; otherwise `None` with a
/// printed notice, except under `CI=true`, where a missing adapter fails the test (CI installs
/// lavapipe and Mesa's GL, so their absence is a broken setup, not a reason to skip). The
/// environment picks the adapter: `WGPU_BACKEND=gl` runs the GPU tests on GL.
pub fn test_context(test: &str) -> Option<GpuContext> {
    match GpuContext::new() {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            if ci {
                panic!("{test}: CI=true and no GPU adapter: {e}");
            }
            eprintln!("SKIPPED {test}: no GPU adapter ({e})");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapter_choices_parse_backends_names_and_both() {
        let c: AdapterChoice = "gl".parse().expect("gl");
        assert_eq!(c.backends, wgpu::Backends::GL);
        assert_eq!(c.name_contains, None);
        let c: AdapterChoice = "vulkan:llvmpipe".parse().expect("both");
        assert_eq!(c.backends, wgpu::Backends::VULKAN);
        assert_eq!(c.name_contains.as_deref(), Some("llvmpipe"));
        assert_eq!(c.to_string(), "vulkan:llvmpipe");
        let c: AdapterChoice = "H200".parse().expect("name");
        assert_eq!(c.backends, native_backends());
        assert_eq!(c.to_string(), "auto:H200");
        let c: AdapterChoice = "vk,gles".parse().expect("list");
        assert_eq!(c.backends, wgpu::Backends::VULKAN | wgpu::Backends::GL);
        assert!("warp:x".parse::<AdapterChoice>().is_err());
        assert_eq!(
            "".parse::<AdapterChoice>().expect("empty"),
            AdapterChoice::default()
        );
    }

    #[test]
    fn a_flag_wins_over_the_environment_only_where_it_says_something() {
        let flag: AdapterChoice = "gl".parse().expect("gl");
        assert_eq!(flag.clone().or_env().backends, wgpu::Backends::GL);
    }

    #[test]
    fn health_reports_a_loss_before_errors() {
        let h = DeviceHealth::default();
        assert!(h.check("a").is_ok());
        h.errors
            .lock()
            .expect("lock")
            .push("validation".to_string());
        h.mark_lost("Destroyed: injected".into());
        match h.check("a") {
            Err(GpuError::DeviceLost { adapter, reason }) => {
                assert_eq!(adapter, "a");
                assert!(reason.contains("injected"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}
