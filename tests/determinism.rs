//! The determinism check reports bitwise instability apart from error: the oracle is stable,
//! and a backend whose reduction order changes from run to run is caught.

use golden_lens::model::{Backend, BackendError, Capture, CaptureValues, SeedTensors, Step};
use golden_lens::oracle::Oracle;
use golden_lens::session::determinism::repeat_runs;
use golden_lens::session::{self, SessionError};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

#[test]
fn the_oracle_is_bitwise_stable_across_runs() {
    let g = golden_lens::golden::embedded::default_golden().expect("golden");
    let mut make =
        || -> Result<Box<dyn Backend>, SessionError> { Ok(Box::new(session::oracle_for(&g)?)) };
    let d = repeat_runs(&g, &mut make, 3).expect("runs");
    assert_eq!(d.runs, 3);
    assert_eq!(d.captures, 443);
    assert!(d.unstable.is_empty(), "{:?}", d.unstable);
}

/// The oracle, but every other run nudges `L2.attn_out`'s last bit, as an unordered reduction
/// would.
struct Flaky {
    inner: Oracle,
    run: u32,
}

impl Backend for Flaky {
    fn name(&self) -> String {
        "flaky".into()
    }
    fn begin(&mut self, ids: &[i64], start_pos: usize) -> Result<(), BackendError> {
        self.inner.begin(ids, start_pos)
    }
    fn steps(&self) -> Vec<Step> {
        self.inner.steps()
    }
    fn run(&mut self, step: Step, sink: &mut Vec<Capture>) -> Result<(), BackendError> {
        self.inner.run(step, sink)?;
        if self.run % 2 == 1 {
            for c in sink.iter_mut().filter(|c| c.name == "L2.attn_out") {
                if let CaptureValues::F32(v) = &mut c.values {
                    v[5] = f32::from_bits(v[5].to_bits() ^ 1);
                }
            }
        }
        Ok(())
    }
    fn seed(
        &mut self,
        step: Step,
        reference: &dyn SeedTensors,
    ) -> Result<Vec<String>, BackendError> {
        self.inner.seed(step, reference)
    }
}

#[test]
fn a_run_dependent_reduction_is_reported_as_unstable() {
    let g = golden_lens::golden::embedded::default_golden().expect("golden");
    let counter = Arc::new(AtomicU32::new(0));
    let mut make = || -> Result<Box<dyn Backend>, SessionError> {
        let run = counter.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(Flaky {
            inner: session::oracle_for(&g)?,
            run,
        }))
    };
    let d = repeat_runs(&g, &mut make, 4).expect("runs");
    assert_eq!(d.unstable.len(), 3, "one per regime: {:?}", d.unstable);
    for u in &d.unstable {
        assert_eq!(u.capture, "L2.attn_out");
        assert_eq!(u.runs_differing, 2, "runs 1 and 3 differ from run 0");
        assert_eq!((u.max_elements_differing, u.first_index), (1, 5));
    }
}

/// The wgpu path is bitwise stable run to run on the adapter at hand (lavapipe in CI).
#[cfg(feature = "gpu")]
#[test]
fn the_gpu_path_is_bitwise_stable_across_runs() {
    use golden_lens::gpu::{test_context, GpuBackend, GpuOptions};
    use golden_lens::model::{FillerSource, WeightSource};
    let g = golden_lens::golden::embedded::default_golden().expect("golden");
    if test_context("the_gpu_path_is_bitwise_stable_across_runs").is_none() {
        return;
    }
    let mut make = || -> Result<Box<dyn Backend>, SessionError> {
        let ctx = test_context("the_gpu_path_is_bitwise_stable_across_runs").expect("adapter");
        let (cfg, tables) = session::model_of(&g)?;
        let w: Arc<dyn WeightSource> = Arc::new(FillerSource::new("embedded", &g.weights_meta));
        let opts = GpuOptions {
            reference_ties: true,
            inject: None,
            tie_audit: false,
        };
        Ok(Box::new(
            GpuBackend::new(ctx, cfg, w, tables, opts).expect("gpu backend"),
        ))
    };
    let d = repeat_runs(&g, &mut make, 2).expect("runs");
    assert_eq!(d.captures, 443);
    assert!(d.unstable.is_empty(), "{:?}", d.unstable);
}
