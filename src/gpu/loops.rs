//! Mesa's llvmpipe (lavapipe on Vulkan, llvmpipe on GL: the CPU adapters of CI and of every
//! machine without a GPU) ends an invocation's loops after [`LLVMPIPE_LOOP_CAP`] loop
//! back-edges in total, counted over every loop the invocation runs; the loops after that run
//! once and stop, so outputs come back zero or stale without any error. Each kernel module
//! states the most back-edges one invocation of an entry point takes at a shape (its own
//! dispatch math), and [`Gpu::check_loops`] refuses a shape above the cap on such an adapter
//! with a typed error instead of letting it return wrong numbers. Other adapters have no cap.

use super::exec::{Family, Gpu, MAX_GROUPS};
use super::GpuError;

/// Loop back-edges llvmpipe runs per invocation (gallivm's loop limiter,
/// `LP_MAX_TGSI_LOOP_ITERATIONS`); the limiter exits every loop once it reaches zero.
pub const LLVMPIPE_LOOP_CAP: u64 = 65_535;

impl Gpu {
    /// Whether this adapter is Mesa's llvmpipe, whose loop cap [`Gpu::check_loops`] enforces.
    pub fn loop_capped(&self) -> bool {
        self.ctx.adapter.is_llvmpipe()
    }

    /// Refuse `fam::entry` at a shape whose invocations take `back_edges` loop back-edges when
    /// that exceeds the adapter's per-invocation cap (llvmpipe only). `shape` names the shape
    /// for the message and is only built on refusal.
    pub fn check_loops(
        &self,
        fam: &'static Family,
        entry: &'static str,
        back_edges: u64,
        shape: impl FnOnce() -> String,
    ) -> Result<(), GpuError> {
        if back_edges < LLVMPIPE_LOOP_CAP || !self.loop_capped() {
            return Ok(());
        }
        Err(GpuError::LoopCap {
            kernel: fam.name,
            entry,
            shape: shape(),
            back_edges,
            cap: LLVMPIPE_LOOP_CAP,
            adapter: self.ctx.adapter.name.clone(),
        })
    }

    /// Workgroups one dispatch may have along a dimension on this adapter.
    pub fn max_groups(&self) -> u32 {
        MAX_GROUPS.min(self.ctx.adapter.limits.max_workgroups_per_dimension)
    }
}
