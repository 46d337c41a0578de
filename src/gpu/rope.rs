//! RoPE with YaRN and its inverse (`shaders/rope.wgsl`). The (cos, sin) table for the positions a
//! call needs is built on the host from the shared [`RopeTable`] (the reference's
//! `freqs_cis`: an f32 angle `pos · f_k`, its cos/sin rounded to f32), so the kernel's only
//! arithmetic is the complex product and the bf16 rounding.

use super::exec::{groups_for, Access, Family, Gpu, Tensor, MAX_GROUPS};
use super::provenance::WriteMap;
use super::{guard, GpuError};
use crate::model::rope::{compressed_row_pos, RopeTable};

/// `shaders/rope.wgsl`: uniform, table (read), y (read-write, rotated in place).
pub static FAMILY: Family = Family {
    name: "rope",
    source: include_str!("../../shaders/rope.wgsl"),
    entries: &["rope"],
    bindings: &[Access::Uniform, Access::Read, Access::ReadWrite],
};

/// The WGSL `Params` of `rope.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub rows: u32,
    pub width: u32,
    pub start: u32,
    pub half: u32,
    pub rows_per_pos: u32,
    pub pos_base: u32,
    pub pos_step: u32,
    pub inverse: u32,
    pub zero: u32,
    pub _pad: [u32; 3],
}

/// Which positions the rows of a call sit at: row r is at `first + (r / rows_per_pos) · step`.
#[derive(Debug, Clone, Copy)]
pub struct Positions {
    pub first: usize,
    pub step: usize,
    pub rows_per_pos: usize,
}

impl Positions {
    /// One position per token of a chunk at `start_pos`, `rows_per_pos` rows each (heads).
    pub fn per_token(start_pos: usize, rows_per_pos: usize) -> Positions {
        Positions {
            first: start_pos,
            step: 1,
            rows_per_pos,
        }
    }

    /// The compressed rows a chunk at `start_pos` completes with ratio `r`
    /// ([`compressed_row_pos`]): a prefill's at `0, r, 2r, ...`, a decode step's one row at the
    /// first position of its group.
    pub fn compressed(start_pos: usize, r: usize) -> Positions {
        Positions {
            first: compressed_row_pos(start_pos, r, 0),
            step: if start_pos == 0 { r } else { 0 },
            rows_per_pos: 1,
        }
    }
}

/// Rotate the last `2·table.half` values of each of `rows` rows (width `width`) of `y` in place,
/// by the conjugate when `inverse`.
pub fn rope(
    gpu: &mut Gpu,
    table: &RopeTable,
    y: &Tensor,
    rows: usize,
    width: usize,
    pos: Positions,
    inverse: bool,
) -> Result<(), GpuError> {
    let half = table.half;
    if 2 * half > width || rows * width > y.len {
        return Err(guard(
            "rope",
            format!("[{rows}, {width}] with rope dims {}", 2 * half),
        ));
    }
    if pos.rows_per_pos == 0 || rows > MAX_GROUPS as usize {
        return Err(guard("rope", "bad position layout or too many rows"));
    }
    if rows == 0 {
        return Ok(());
    }
    let n_pos = (rows - 1) / pos.rows_per_pos + 1;
    let mut cs = Vec::with_capacity(n_pos * half * 2);
    for i in 0..n_pos {
        let p = pos.first + i * pos.step;
        for k in 0..half {
            let (c, s) = table.cis(p, k);
            cs.push(c);
            cs.push(s);
        }
    }
    let t = gpu.upload("rope table", &cs)?;
    let p = Params {
        rows: rows as u32,
        width: width as u32,
        start: (width - 2 * half) as u32,
        half: half as u32,
        rows_per_pos: pos.rows_per_pos as u32,
        pos_base: 0,
        pos_step: 1,
        inverse: inverse as u32,
        ..Default::default()
    };
    // Thread (k, r) rotates the pair at columns start + 2k, start + 2k + 1 of row r.
    let map = WriteMap::Grid {
        offset: width - 2 * half,
        ld: width,
        width: 2 * half,
        rows,
        cols_per_thread: 2,
        rows_per_thread: 1,
    };
    gpu.dispatch(
        &FAMILY,
        "rope",
        &p,
        &[&t, y],
        (groups_for(half), rows as u32, 1),
        map,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn naga_validates_rope() {
        assert_eq!(super::super::exec::validate_family(&super::FAMILY), Ok(1));
    }
}
