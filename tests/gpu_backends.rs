//! The GPU path's adapter handling on whatever backend the environment picks (`WGPU_BACKEND=gl`
//! runs this file on GL): the adapter choice is honoured and reported, a choice no adapter meets
//! is a clear typed error, and a device lost in the middle of a run ends the GPU backend's run
//! with a typed error instead of a panic.
#![cfg(feature = "gpu")]

use golden_lens::golden::Golden;
use golden_lens::gpu::profile::TimingSource;
use golden_lens::gpu::{
    test_context, AdapterChoice, GpuBackend, GpuContext, GpuError, GpuOptions, Injection,
};
use golden_lens::model::{Backend, BackendError, FillerSource, Step, WeightSource};
use golden_lens::session;
use std::path::PathBuf;
use std::sync::Arc;

/// The writer's regression golden shipped in the repository (tiny dims: fast on lavapipe/llvmpipe).
fn golden() -> Golden {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/ds41_tiny.json"
    ));
    Golden::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn backend(ctx: GpuContext, g: &Golden, opts: GpuOptions) -> GpuBackend {
    let (cfg, tables) = session::model_of(g).expect("config");
    let weights: Arc<dyn WeightSource> = Arc::new(FillerSource::new("tiny", &g.weights_meta));
    GpuBackend::new(ctx, cfg, weights, tables, opts).expect("gpu backend")
}

/// Begin the golden's first regime on `gpu`.
fn begin_first_regime(gpu: &mut GpuBackend, g: &Golden) {
    let (_, ids, sp) = session::regime_inputs(g)
        .expect("regimes")
        .into_iter()
        .next()
        .expect("one regime");
    gpu.begin(&ids, sp).expect("begin");
}

#[test]
fn the_adapter_reports_the_backend_the_environment_asked_for() {
    let Some(ctx) = test_context("adapter_backend") else {
        return;
    };
    eprintln!("adapter: {} limits {:?}", ctx.adapter, ctx.adapter.limits);
    let choice = AdapterChoice::from_env();
    let want = [
        (wgpu::Backends::VULKAN, "Vulkan"),
        (wgpu::Backends::GL, "Gl"),
        (wgpu::Backends::METAL, "Metal"),
        (wgpu::Backends::DX12, "Dx12"),
    ];
    let allowed: Vec<&str> = want
        .iter()
        .filter(|(b, _)| choice.backends.contains(*b))
        .map(|(_, n)| *n)
        .collect();
    assert!(
        allowed.contains(&ctx.adapter.backend.as_str()),
        "{} not in {allowed:?}",
        ctx.adapter.backend
    );
    assert!(ctx.adapter.limits.max_storage_buffers_per_stage >= 5);
    assert!(ctx.adapter.to_string().contains(&ctx.adapter.backend));
}

#[test]
fn a_choice_no_adapter_meets_is_a_typed_error_naming_the_choice() {
    let choice: AdapterChoice = "auto:no-such-adapter-anywhere".parse().expect("parses");
    match GpuContext::with_choice(&choice) {
        Err(GpuError::NoAdapter { choice, .. }) => {
            assert_eq!(choice, "auto:no-such-adapter-anywhere")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(ctx) => panic!("matched {}", ctx.adapter),
    }
    #[cfg(target_os = "linux")]
    {
        let metal: AdapterChoice = "metal".parse().expect("parses");
        let e = GpuContext::with_choice(&metal)
            .err()
            .expect("no Metal on Linux");
        assert!(e.to_string().contains("`metal`"), "{e}");
    }
}

#[test]
fn a_lost_device_ends_the_run_with_a_typed_error_and_no_panic() {
    let Some(ctx) = test_context("device_lost") else {
        return;
    };
    let g = golden();
    let inj: Injection = "device-lost@L0.attn_in".parse().expect("injection");
    let mut gpu = backend(
        ctx,
        &g,
        GpuOptions {
            reference_ties: true,
            inject: Some(inj),
            ..Default::default()
        },
    );
    begin_first_regime(&mut gpu, &g);
    let mut sink = Vec::new();
    let mut failed_at = None;
    for step in gpu.steps() {
        match gpu.run(step, &mut sink) {
            Ok(()) => {}
            Err(e) => {
                failed_at = Some((step, e));
                break;
            }
        }
    }
    let (step, e) = failed_at.expect("the lost device fails a step");
    assert_eq!(step, Step::Block(0), "{e}");
    let BackendError::Invalid { msg, .. } = &e else {
        panic!("{e}")
    };
    assert!(
        msg.contains("was lost") && msg.contains("L0.attn_in"),
        "{msg}"
    );
    assert!(
        sink.iter().all(|c| !c.name.starts_with("L0.")),
        "no L0 capture survives"
    );
    assert!(gpu.device_lost().is_some());
    // Every later step fails the same way, still without a panic.
    let again = gpu.run(Step::Final, &mut sink).expect_err("still lost");
    assert!(again.to_string().contains("was lost"), "{again}");
}

#[test]
fn profiling_times_every_dispatch_and_files_it_under_its_step() {
    for source in [TimingSource::GpuTimestamps, TimingSource::CpuWallClock] {
        profile_one_regime(source);
    }
}

fn profile_one_regime(source: TimingSource) {
    let Some(ctx) = test_context("profile") else {
        return;
    };
    let timestamps = ctx.adapter.limits.timestamps;
    let g = golden();
    let mut gpu = backend(ctx, &g, GpuOptions::default());
    gpu.start_profiling_with(source);
    begin_first_regime(&mut gpu, &g);
    let mut sink = Vec::new();
    let steps = gpu.steps();
    for &step in &steps {
        gpu.run(step, &mut sink).expect("step");
    }
    let p = gpu.profile().expect("profiling");
    eprintln!("timing: {}", p.source);
    let want = if timestamps {
        source
    } else {
        TimingSource::CpuWallClock
    };
    assert_eq!(p.source, want);
    assert_eq!(p.dispatches.len() as u64, gpu.dispatch_count());
    assert!(p.total().seconds > 0.0);
    let kernels = p.by_kernel();
    assert!(kernels
        .iter()
        .any(|(k, t)| k.starts_with("gemm::") && t.flops > 0));
    // Every step that dispatched is listed, in run order.
    let by_step: Vec<String> = p.by_step().into_iter().map(|(s, _)| s).collect();
    let ran: Vec<String> = steps.iter().map(|s| s.to_string()).collect();
    assert!(by_step.iter().all(|s| ran.contains(s)), "{by_step:?}");
    assert!(
        by_step.iter().any(|s| s.starts_with("Block")),
        "{by_step:?}"
    );
}
