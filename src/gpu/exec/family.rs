//! The kernel families: one WGSL file each, with its entry points and bind-group layout.

/// How a kernel family's binding is accessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Binding 0 of every family: the family's uniform struct.
    Uniform,
    /// A read-only storage buffer.
    Read,
    /// A read-write storage buffer.
    ReadWrite,
}

/// One WGSL file: its source, entry points and bind-group layout (binding i = `bindings[i]`).
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub source: &'static str,
    pub entries: &'static [&'static str],
    pub bindings: &'static [Access],
}

/// Every kernel family, for the naga tests and pipeline creation.
pub const FAMILIES: &[&Family] = &[
    &crate::gpu::gemm::FAMILY,
    &crate::gpu::rows::FAMILY,
    &crate::gpu::rope::FAMILY,
    &crate::gpu::quant::FAMILY,
    &crate::gpu::hc::FAMILY,
    &crate::gpu::engram::FAMILY,
    &crate::gpu::attn::FAMILY,
    &crate::gpu::compress::FAMILY,
    &crate::gpu::moe::FAMILY,
];

/// Parse, validate and interface-check an embedded family (with the common prelude) through
/// naga, without a GPU; returns the number of entry points.
pub fn validate_family(fam: &Family) -> Result<usize, String> {
    crate::gpu::shaders::ShaderSet::embedded()
        .validate_family(fam)
        .map_err(|e| e.rendered())
}
