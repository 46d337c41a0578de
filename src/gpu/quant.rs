//! Quantiser round trips (`shaders/quant.wgsl`, spec §13): fp8 e4m3 with pow2 block-32 scales
//! (window KV), fp4 e2m1 with e8m0 block-32 scales (index q/k) and with e4m3 block-16 scales
//! (compressed latent), each in place on whole blocks.

use super::exec::{flat_groups, Access, Family, Gpu, Tensor};
use super::provenance::WriteMap;
use super::{guard, GpuError};

/// `shaders/quant.wgsl`: uniform, y (read-write).
pub static FAMILY: Family = Family {
    name: "quant",
    source: include_str!("../../shaders/quant.wgsl"),
    entries: &["quant"],
    bindings: &[Access::Uniform, Access::ReadWrite],
};

/// The WGSL `Params` of `quant.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub n_blocks: u32,
    pub block: u32,
    pub mode: u32,
    pub zero: u32,
}

/// Which round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantMode {
    /// fp8 e4m3, ue8m0 (pow2-ceil) scale, block 32.
    Fp8Block32,
    /// fp4 e2m1, e8m0 scale, block 32.
    Fp4E8m0Block32,
    /// fp4 e2m1, e4m3 scale, block 16.
    Fp4E4m3Block16,
}

impl QuantMode {
    /// Block length of the mode.
    pub fn block(self) -> usize {
        match self {
            QuantMode::Fp4E4m3Block16 => 16,
            _ => 32,
        }
    }
}

/// Round-trip all of `y` in place (its length must be a whole number of blocks).
pub fn quant(gpu: &mut Gpu, y: &Tensor, mode: QuantMode) -> Result<(), GpuError> {
    let block = mode.block();
    if y.len % block != 0 {
        return Err(guard(
            "quant",
            format!("{} values are not whole blocks of {block}", y.len),
        ));
    }
    let n_blocks = y.len / block;
    let p = Params {
        n_blocks: n_blocks as u32,
        block: block as u32,
        mode: match mode {
            QuantMode::Fp8Block32 => 0,
            QuantMode::Fp4E8m0Block32 => 1,
            QuantMode::Fp4E4m3Block16 => 2,
        },
        zero: 0,
    };
    let (gx, gy) = flat_groups(n_blocks);
    // One thread per block.
    let map = WriteMap::Flat {
        offset: 0,
        len: y.len,
        per_thread: block,
    };
    gpu.dispatch(&FAMILY, "quant", &p, &[y], (gx, gy, 1), map)
}

#[cfg(test)]
mod tests {
    #[test]
    fn naga_validates_quant() {
        assert_eq!(super::super::exec::validate_family(&super::FAMILY), Ok(1));
    }
}
