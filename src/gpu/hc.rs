//! Hyper-connections (`shaders/hc.wgsl`, spec §10): mixes with Sinkhorn, `hc_pre`, `hc_post`.
//! The raw mixes `x · fn^T` come from the GEMM-f32 kernel; `hc_mix` applies the RMS, the
//! sigmoids and the Sinkhorn normalisation per token.

use super::exec::{groups_for, Access, Family, Gpu, Tensor, WeightTensor};
use super::gemm::linear;
use super::provenance::WriteMap;
use super::{guard, GpuError};

/// `shaders/hc.wgsl`: uniform, h (read), m (read), aux (read), out (read-write).
pub static FAMILY: Family = Family {
    name: "hc",
    source: include_str!("../../shaders/hc.wgsl"),
    entries: &["hc_mix", "hc_pre", "hc_post"],
    bindings: &[
        Access::Uniform,
        Access::Read,
        Access::Read,
        Access::Read,
        Access::ReadWrite,
    ],
};

/// The WGSL `Params` of `hc.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    pub s: u32,
    pub hc: u32,
    pub d: u32,
    pub iters: u32,
    pub norm_eps: f32,
    pub hc_eps: f32,
    pub zero: u32,
    pub pre_off: u32,
    pub post_off: u32,
    pub comb_off: u32,
    pub _pad: [u32; 2],
}

/// Largest hc the kernel's private Sinkhorn matrix holds (8×8).
pub const MAX_HC: usize = 8;

/// The mixes of `s` tokens in one tensor: pre `[s, hc]` at 0, post `[s, hc]` at `s·hc`, comb
/// `[s, hc, hc]` at `2·s·hc`.
#[derive(Debug, Clone)]
pub struct Mixes {
    pub t: Tensor,
    pub s: usize,
    pub hc: usize,
}

impl Mixes {
    pub fn pre_off(&self) -> usize {
        0
    }
    pub fn post_off(&self) -> usize {
        self.s * self.hc
    }
    pub fn comb_off(&self) -> usize {
        2 * self.s * self.hc
    }
}

/// Constants of `hc_mixes`.
#[derive(Debug, Clone, Copy)]
pub struct MixConsts {
    pub norm_eps: f32,
    pub hc_eps: f32,
    pub iters: usize,
}

/// The most loop back-edges one `hc_mix` lane (a token) takes: the mean square over `hc · d`
/// values, the mixes, the row softmax and `iters` Sinkhorn rounds over `hc x hc` values.
pub fn hc_mix_loop_count(hc: usize, d: usize, iters: usize) -> u64 {
    let (hc, width) = (hc as u64, (hc * d) as u64);
    let sinkhorn = iters as u64 * (2 * hc * (2 * hc + 2) + 2);
    width + 1 + 2 * (hc * hc + 1) + hc * (3 * hc + 4) + sinkhorn + 1
}

/// `hc_mixes(h, fn, scale, base)` for a stream `h [s, hc, d]`; `scale_base` holds scale `[3]`
/// followed by base `[mix]`.
#[allow(clippy::too_many_arguments)] // the reference's operands and constants
pub fn hc_mixes(
    gpu: &mut Gpu,
    h: &Tensor,
    s: usize,
    hc: usize,
    d: usize,
    fn_w: &WeightTensor,
    scale_base: &Tensor,
    c: MixConsts,
) -> Result<Mixes, GpuError> {
    let mix = (2 + hc) * hc;
    if hc > MAX_HC || h.len != s * hc * d || fn_w.rows != mix || fn_w.cols != hc * d {
        return Err(guard(
            "hc_mix",
            format!(
                "stream {} for [{s}, {hc}, {d}], fn [{}, {}]",
                h.len, fn_w.rows, fn_w.cols
            ),
        ));
    }
    if scale_base.len != 3 + mix {
        return Err(guard("hc_mix", "scale/base length"));
    }
    gpu.check_loops(&FAMILY, "hc_mix", hc_mix_loop_count(hc, d, c.iters), || {
        format!("{hc} streams x {d} dims, {} Sinkhorn iterations", c.iters)
    })?;
    let m = linear(gpu, h, s, fn_w, false)?;
    let out = gpu.zeros("mixes", s * (2 * hc + hc * hc))?;
    let p = Params {
        s: s as u32,
        hc: hc as u32,
        d: d as u32,
        iters: c.iters as u32,
        norm_eps: c.norm_eps,
        hc_eps: c.hc_eps,
        zero: 0,
        pre_off: 0,
        post_off: (s * hc) as u32,
        comb_off: (2 * s * hc) as u32,
        _pad: [0; 2],
    };
    // Thread t writes token t's pre, post and comb rows.
    let rows = |offset: usize, width: usize| WriteMap::RowThreads {
        offset,
        ld: width,
        width,
        rows: s,
        period: s,
    };
    let map = WriteMap::Regions(vec![
        rows(0, hc),
        rows(s * hc, hc),
        rows(2 * s * hc, hc * hc),
    ]);
    gpu.dispatch(
        &FAMILY,
        "hc_mix",
        &p,
        &[h, &m, scale_base, &out],
        (groups_for(s), 1, 1),
        map,
    )?;
    Ok(Mixes { t: out, s, hc })
}

/// `bf16(Σ_c pre[c] · h[c])` `[s, d]`, with `pre` at `pre_off` of `coef`.
pub fn hc_pre(
    gpu: &mut Gpu,
    h: &Tensor,
    coef: &Tensor,
    pre_off: usize,
    s: usize,
    hc: usize,
    d: usize,
) -> Result<Tensor, GpuError> {
    if h.len != s * hc * d || pre_off + s * hc > coef.len {
        return Err(guard("hc_pre", "shape"));
    }
    let out = gpu.zeros("hc_pre", s * d)?;
    let dummy = gpu.zeros("unused", 1)?;
    let p = Params {
        s: s as u32,
        hc: hc as u32,
        d: d as u32,
        pre_off: pre_off as u32,
        ..Default::default()
    };
    gpu.dispatch(
        &FAMILY,
        "hc_pre",
        &p,
        &[h, coef, &dummy, &out],
        (groups_for(d), s as u32, 1),
        WriteMap::Grid {
            offset: 0,
            ld: d,
            width: d,
            rows: s,
            cols_per_thread: 1,
            rows_per_thread: 1,
        },
    )?;
    Ok(out)
}

/// `bf16(post[k] · x + Σ_j comb[j][k] · res[j])` `[s, hc, d]`.
pub fn hc_post(
    gpu: &mut Gpu,
    x: &Tensor,
    res: &Tensor,
    mixes: &Mixes,
    d: usize,
) -> Result<Tensor, GpuError> {
    let (s, hc) = (mixes.s, mixes.hc);
    if x.len != s * d || res.len != s * hc * d {
        return Err(guard("hc_post", "shape"));
    }
    let out = gpu.zeros("hc_post", s * hc * d)?;
    let p = Params {
        s: s as u32,
        hc: hc as u32,
        d: d as u32,
        post_off: mixes.post_off() as u32,
        comb_off: mixes.comb_off() as u32,
        ..Default::default()
    };
    gpu.dispatch(
        &FAMILY,
        "hc_post",
        &p,
        &[res, &mixes.t, x, &out],
        (groups_for(d), (s * hc) as u32, 1),
        WriteMap::Grid {
            offset: 0,
            ld: d,
            width: d,
            rows: s * hc,
            cols_per_thread: 1,
            rows_per_thread: 1,
        },
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn naga_validates_hc() {
        assert_eq!(super::super::exec::validate_family(&super::FAMILY), Ok(3));
    }
}
