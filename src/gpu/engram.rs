//! Engram (`shaders/engram.wgsl`, spec §9): dequantise the fetched fp8 rows with their e8m0
//! scales, and gate the shared value into every stream copy. Rows are fetched on the host by the
//! weight source (real tables are hundreds of GB; nothing reads a whole table).

use super::exec::{groups_for, Access, Family, Gpu, Tensor};
use super::provenance::WriteMap;
use super::{guard, GpuError};

/// `shaders/engram.wgsl`: uniform, a, b, q_weight, k_weight (read), out (read-write).
pub static FAMILY: Family = Family {
    name: "engram",
    source: include_str!("../../shaders/engram.wgsl"),
    entries: &["engram_embed", "engram_gate"],
    bindings: &[
        Access::Uniform,
        Access::Read,
        Access::Read,
        Access::Read,
        Access::Read,
        Access::ReadWrite,
    ],
};

/// The WGSL `Params` of `engram.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub rows: u32,
    pub width: u32,
    pub n_blocks: u32,
    pub s: u32,
    pub hc: u32,
    pub d: u32,
    pub eps: f32,
    pub inv_sqrt_d: f32,
    pub zero: u32,
    pub _pad: [u32; 3],
}

/// `bf16(table_row · scale)` for fetched rows `[rows, width]` and scales `[rows, width/32]`.
pub fn engram_embed(
    gpu: &mut Gpu,
    rows_t: &Tensor,
    scales: &Tensor,
    rows: usize,
    width: usize,
) -> Result<Tensor, GpuError> {
    let n_blocks = width.div_ceil(32);
    if rows_t.len != rows * width || scales.len != rows * n_blocks {
        return Err(guard("engram_embed", "shape"));
    }
    let out = gpu.zeros("engram_embed", rows * width)?;
    let d = gpu.zeros("unused", 1)?;
    let p = Params {
        rows: rows as u32,
        width: width as u32,
        n_blocks: n_blocks as u32,
        ..Default::default()
    };
    gpu.dispatch(
        &FAMILY,
        "engram_embed",
        &p,
        &[rows_t, scales, &d, &d, &out],
        (groups_for(width), rows as u32, 1),
        WriteMap::Grid {
            offset: 0,
            ld: width,
            width,
            rows,
            cols_per_thread: 1,
            rows_per_thread: 1,
        },
    )?;
    Ok(out)
}

/// The most loop back-edges one `engram_gate` invocation takes: lane 0 of a (token, stream)
/// workgroup runs two mean squares and the dot product over `d`, then its share of the row.
pub fn engram_gate_loop_count(d: usize) -> u64 {
    3 * (d as u64 + 1) + d.div_ceil(64) as u64 + 1
}

/// The gated stream `[s, hc, d]` from the stream, `kv [s, (hc+1)·d]` and the q/k weights.
#[allow(clippy::too_many_arguments)] // the reference's operands and constants
pub fn engram_gate(
    gpu: &mut Gpu,
    h: &Tensor,
    kv: &Tensor,
    qw: &Tensor,
    kw: &Tensor,
    s: usize,
    hc: usize,
    d: usize,
    eps: f32,
) -> Result<Tensor, GpuError> {
    if h.len != s * hc * d || kv.len != s * (hc + 1) * d || qw.len != hc * d || kw.len != hc * d {
        return Err(guard("engram_gate", "shape"));
    }
    let loops = engram_gate_loop_count(d);
    gpu.check_loops(&FAMILY, "engram_gate", loops, || format!("{d} dims"))?;
    let out = gpu.zeros("engram_out", s * hc * d)?;
    let p = Params {
        s: s as u32,
        hc: hc as u32,
        d: d as u32,
        eps,
        inv_sqrt_d: (d as f64).powf(-0.5) as f32,
        ..Default::default()
    };
    // Workgroup t · hc + c gates stream row (t, c); its invocations stride along d.
    let map = WriteMap::RowGroups {
        offset: 0,
        ld: d,
        width: d,
        rows: s * hc,
    };
    gpu.dispatch(
        &FAMILY,
        "engram_gate",
        &p,
        &[h, kv, qw, kw, &out],
        ((s * hc) as u32, 1, 1),
        map,
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn naga_validates_engram() {
        assert_eq!(super::super::exec::validate_family(&super::FAMILY), Ok(2));
    }
}
