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

#[cfg(test)]
mod tests {
    use super::LLVMPIPE_LOOP_CAP;
    use crate::gpu::gemm::GemmKernel;
    use crate::gpu::{attn, compress, engram, hc, moe, rows};
    use crate::model::ModelConfig;

    /// The audit: every entry point with a data-dependent loop, at the released geometry's
    /// shapes (the widest GEMM depth is the hc mixes' hc · dim; a prefill's index row is the
    /// window plus index_topk compressed positions, and the kernel takes up to `MAX_COLS`).
    #[test]
    fn every_kernel_stays_under_the_llvmpipe_loop_cap_at_real_dims() {
        let cfg = ModelConfig::deepseek_v41_flash();
        let engram = cfg
            .engram
            .as_ref()
            .expect("the released config has engram layers");
        let prefill_cols = cfg.window_size + cfg.index_topk;
        let group_depth = cfg.n_heads * cfg.head_dim / cfg.o_groups;
        let depths = [
            cfg.dim,
            cfg.q_lora_rank,
            group_depth,
            cfg.o_groups * cfg.o_lora_rank,
            cfg.moe_inter_dim,
            cfg.hc_mult * cfg.dim,
            engram.n_heads * engram.head_dim,
        ];
        let mut counts = vec![
            (
                "sparse_attn, prefill",
                attn::sparse_attn_loop_count(cfg.head_dim, prefill_cols),
            ),
            (
                "sparse_attn, MAX_COLS",
                attn::sparse_attn_loop_count(cfg.head_dim, attn::MAX_COLS),
            ),
            ("rmsnorm", rows::rmsnorm_loop_count(cfg.hc_mult * cfg.dim)),
            (
                "hc_mix",
                hc::hc_mix_loop_count(cfg.hc_mult, cfg.dim, cfg.hc_sinkhorn_iters),
            ),
            ("engram_gate", engram::engram_gate_loop_count(cfg.dim)),
            (
                "index_scores",
                compress::index_scores_loop_count(cfg.index_n_heads, cfg.index_head_dim),
            ),
            (
                "gate_scores",
                moe::gate_scores_loop_count(cfg.n_routed_experts),
            ),
            (
                "route",
                moe::route_loop_count(cfg.n_routed_experts, cfg.n_activated_experts),
            ),
        ];
        for k in depths {
            counts.push(("gemm, gemm_rows4", GemmKernel::Rows4.loop_count(k)));
            counts.push((
                "gemm_tiled (GPU adapters only)",
                GemmKernel::Tiled.loop_count(k),
            ));
        }
        for (entry, n) in counts {
            assert!(n < LLVMPIPE_LOOP_CAP, "{entry}: {n} back-edges");
        }
    }

    /// Before the split, one lane per (token, head) looped hd/4 + 1 times per column for q·k
    /// and w/4 + 1 times per dim for p·v: past the cap from about 250 columns at hd 512. The
    /// workgroup kernel stays an order of magnitude below it at every column count it takes.
    #[test]
    fn sparse_attention_loops_stay_far_below_the_cap_at_every_column_count() {
        let one_lane = |hd: u64, w: u64| w * (hd / 4 + 1) + 3 * w + hd * (w / 4 + 1);
        assert!(one_lane(512, 640) > LLVMPIPE_LOOP_CAP);
        for w in [1, 128, 640, attn::MAX_COLS] {
            assert!(
                attn::sparse_attn_loop_count(512, w) < LLVMPIPE_LOOP_CAP / 10,
                "w {w}"
            );
        }
    }

    /// The selections' lanes loop once per visible position: the cap bounds them (a real-dims
    /// context of 2^20 tokens has more compressed positions than that), so they are refused
    /// there rather than fixed (t_vis² comparisons per row would take hours on llvmpipe anyway).
    #[test]
    fn selections_over_more_positions_than_the_cap_are_refused() {
        assert!(compress::topk_loop_count(65_533) < LLVMPIPE_LOOP_CAP);
        assert!(compress::topk_loop_count(65_534) >= LLVMPIPE_LOOP_CAP);
        assert!(compress::candidate_blocks_loop_count(50_000, 8) < LLVMPIPE_LOOP_CAP);
        assert!(compress::candidate_blocks_loop_count(60_000, 8) >= LLVMPIPE_LOOP_CAP);
    }
}
