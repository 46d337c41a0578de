//! The comparator self-test: plant every fault kind at a known capture, run the check, and
//! require that the fault is caught and that the first failing capture is the planted one.
//! The verdict uses the strict policies (bf16 bit-exact, which the oracle meets); the table also
//! says whether the looser Atlas bars alone would have caught it.

use super::{run_check, CheckOptions, SessionError};
use crate::golden::Golden;
use crate::oracle::faults::{Fault, FaultKind, FaultPlan};

/// One planted fault and what the check made of it.
#[derive(Debug, Clone)]
pub struct SelftestRow {
    pub backend: String,
    /// The fault kind as its CLI name (`bitflip`, `perturb=0.01`, ...).
    pub kind: String,
    pub planted_at: String,
    /// The check failed at all under the strict policies (bf16 bit-exact).
    pub caught: bool,
    /// The check failed under the looser Atlas bars too.
    pub caught_by_atlas_bars: bool,
    /// `regime capture` of the first failing row.
    pub first_failure: Option<String>,
    /// Captures that failed in total (the planted one and what it carried downstream).
    pub failing_captures: usize,
    /// Caught, and the first failure is the planted capture in the first regime.
    pub ok: bool,
}

/// Where each kind is planted: spread over layers and sublayers so the table exercises the
/// attention, MoE, stream and index paths.
pub fn default_targets() -> Vec<Fault> {
    let at = |kind: FaultKind, capture: &str| Fault {
        kind,
        capture: capture.into(),
        regime_start: None,
        index: 0,
    };
    vec![
        at(FaultKind::BitFlip, "L3.attn_out"),
        at(FaultKind::Perturb(1e-2), "L2.sa_o"),
        at(FaultKind::DroppedWorkgroup, "L4.ffn_out"),
        at(FaultKind::StaleBuffer, "L1.h_out"),
        at(FaultKind::RopeSign, "L2.sa_q"),
        at(FaultKind::WindowOffByOne, "L0.sa_topk_idxs"),
        at(FaultKind::BitFlip, "L5.moe_indices"),
        at(FaultKind::Perturb(1e-3), "L0.attn_comb"),
    ]
}

/// Run the oracle with each fault planted and report what the check caught.
pub fn run_oracle_selftest(
    golden: &Golden,
    targets: &[Fault],
) -> Result<Vec<SelftestRow>, SessionError> {
    let model = super::builder::ModelParts::from_golden(golden)?;
    let first_regime = golden
        .regimes
        .first()
        .map(|r| r.name.clone())
        .unwrap_or_default();
    let mut rows = Vec::new();
    for fault in targets {
        let mut oracle = model.oracle();
        oracle.faults = FaultPlan::new(vec![fault.clone()]);
        let strict = CheckOptions {
            strict: true,
            ..Default::default()
        };
        let report = run_check(golden, &mut oracle, &strict)?;
        let mut atlas_oracle = model.oracle();
        atlas_oracle.faults = FaultPlan::new(vec![fault.clone()]);
        let caught_by_atlas_bars =
            !run_check(golden, &mut atlas_oracle, &CheckOptions::default())?.ok();
        let first = report.first_failure();
        let caught = !report.ok();
        let ok =
            caught && first.is_some_and(|f| f.name == fault.capture && f.regime == first_regime);
        rows.push(SelftestRow {
            backend: "cpu".into(),
            kind: fault.kind.to_string(),
            planted_at: fault.capture.clone(),
            caught,
            caught_by_atlas_bars,
            first_failure: first.map(|f| format!("{} {}", f.regime, f.name)),
            failing_captures: report.rows.iter().filter(|r| !r.cmp.pass).count(),
            ok,
        });
    }
    Ok(rows)
}

/// The self-test table as text.
pub fn table(rows: &[SelftestRow]) -> String {
    let mut s = format!(
        "{:<8} {:<20} {:<22} {:<7} {:<7} {:<32} {:>8}  result\n",
        "backend", "fault", "planted at", "strict", "atlas", "first failure", "failing"
    );
    for r in rows {
        s.push_str(&format!(
            "{:<8} {:<20} {:<22} {:<7} {:<7} {:<32} {:>8}  {}\n",
            r.backend,
            r.kind,
            r.planted_at,
            if r.caught { "yes" } else { "NO" },
            if r.caught_by_atlas_bars { "yes" } else { "no" },
            r.first_failure.as_deref().unwrap_or("-"),
            r.failing_captures,
            if r.ok { "ok" } else { "MISS" }
        ));
    }
    s
}

/// Where the GPU path injects each of its fault kinds (`--inject KIND@CAPTURE`).
pub const GPU_INJECTIONS: [&str; 5] = [
    "bitflip@L1.attn_in",
    "window-off-by-one@L0.sa_topk_idxs",
    "rope-sign@L2.sa_q",
    "dropped-workgroup@L3.ffn_in",
    "stale-buffer@L2.attn_out",
];

/// Run the wgpu path with each injection of `GPU_INJECTIONS` (selections on the host, as in
/// production, so only the injected kernel differs). GPU rows are judged by the Atlas bars and
/// their "first failure" column comes from that run. Returns the adapter and the rows, or None
/// when no adapter exists.
#[cfg(feature = "gpu")]
pub fn run_gpu_selftest(
    golden: &Golden,
) -> Result<Option<(String, Vec<SelftestRow>)>, SessionError> {
    use crate::gpu::{GpuContext, GpuOptions, Injection};
    let fail = |msg: String| SessionError::Build {
        backend: "gpu".into(),
        msg,
    };
    let adapter = match GpuContext::new() {
        Ok(ctx) => ctx.adapter.to_string(),
        Err(_) => return Ok(None),
    };
    let first_regime = golden
        .regimes
        .first()
        .map(|r| r.name.clone())
        .unwrap_or_default();
    let mut rows = Vec::new();
    for spec in GPU_INJECTIONS {
        let injection: Injection = spec.parse().map_err(|e| fail(format!("{spec}: {e}")))?;
        let run = |strict: bool| -> Result<super::Report, SessionError> {
            let opts = GpuOptions {
                reference_ties: true,
                inject: Some(injection.clone()),
                tie_audit: false,
            };
            let mut gpu = super::gpu_for(golden, opts)?;
            run_check(
                golden,
                &mut gpu,
                &CheckOptions {
                    strict,
                    ..Default::default()
                },
            )
        };
        // The GPU is not bit-exact (about one bf16 ulp on a few captures), so its verdict uses
        // the Atlas bars; the strict column still says whether bit-exactness would flag it.
        let caught = !run(true)?.ok();
        let report = run(false)?;
        let caught_by_atlas_bars = !report.ok();
        let (kind, capture) = spec.split_once('@').unwrap_or((spec, ""));
        let first = report.first_failure();
        rows.push(SelftestRow {
            backend: "gpu".into(),
            kind: kind.to_string(),
            planted_at: capture.to_string(),
            caught,
            caught_by_atlas_bars,
            first_failure: first.map(|f| format!("{} {}", f.regime, f.name)),
            failing_captures: report.rows.iter().filter(|r| !r.cmp.pass).count(),
            ok: caught_by_atlas_bars
                && first.is_some_and(|f| f.name == capture && f.regime == first_regime),
        });
    }
    Ok(Some((adapter, rows)))
}
