//! One conformance body per property, run for every backend (the CPU oracle and the wgpu path):
//! chained and isolated checks against DeepSeek's reference goldens, a fault confined to its step
//! when isolated and carried downstream when chained, and localisation naming the faulted step.
//! The oracle plants its fault (`oracle::faults`), the GPU injects it into the kernel
//! (`--inject`); the property and the assertions are the same code.

use golden_lens::golden::Golden;
use golden_lens::model::{Backend, Step};
use golden_lens::oracle::faults::{Fault, FaultPlan};
use golden_lens::session::localize::{localize_with, Judge, RecordedRun};
use golden_lens::session::{self, CheckOptions, Mode, SessionError};
use std::path::PathBuf;

/// The fault every property plants: one bit of one element of layer 2's attention output.
const FAULT: &str = "bitflip@L2.attn_out";
/// The step that emits it.
const FAULT_STEP: Step = Step::Block(2);
/// Captures of every regime of the v3 goldens (v1 lacks the v2 captures).
const V3_CAPTURES: usize = 443;

fn load(name: &str) -> Golden {
    let p = PathBuf::from(format!(
        "{}/golden/reference/{name}",
        env!("CARGO_MANIFEST_DIR")
    ));
    Golden::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Which backend a property runs on.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Oracle,
    #[cfg(feature = "gpu")]
    Gpu,
}

impl Kind {
    /// A fresh backend over the golden's weights, with [`FAULT`] when `faulty`; None when the
    /// backend cannot run here (no GPU adapter outside CI).
    fn build(self, g: &Golden, faulty: bool) -> Option<Box<dyn Backend>> {
        match self {
            Kind::Oracle => {
                let mut o = session::oracle_for(g).expect("oracle");
                if faulty {
                    o.faults = FaultPlan::new(vec![Fault::parse(FAULT).expect("fault")]);
                }
                Some(Box::new(o))
            }
            #[cfg(feature = "gpu")]
            Kind::Gpu => {
                golden_lens::gpu::test_context("conformance")?;
                let opts = golden_lens::gpu::GpuOptions {
                    reference_ties: true,
                    inject: faulty.then(|| FAULT.parse().expect("injection")),
                    tie_audit: false,
                };
                Some(Box::new(session::gpu_for(g, opts).expect("gpu backend")))
            }
        }
    }

    /// Whether a clean run of this backend is bit-exact with the oracle, so a step's inputs carry
    /// no error at all (the GPU's transcendentals move an ulp now and then: its inputs carry
    /// error within tolerance).
    fn bit_exact(self) -> bool {
        matches!(self, Kind::Oracle)
    }

    /// How localisation judges this backend: the oracle bit-exactly, the GPU by the backend
    /// policy against the oracle.
    fn judge(self) -> Judge {
        match self {
            Kind::Oracle => Judge::Strict,
            #[cfg(feature = "gpu")]
            Kind::Gpu => Judge::Gpu,
        }
    }
}

fn options(g: &Golden, mode: Mode) -> CheckOptions {
    CheckOptions {
        mode,
        invariants: Some(session::model_of(g).expect("config").0),
        ..CheckOptions::default()
    }
}

/// Chained on the sampled v3 and isolated on v3-full: every capture passes, nothing is missing,
/// no invariant breaks, and in isolated mode every step is reseeded.
fn passes_the_reference_goldens(kind: Kind) {
    for (name, mode) in [
        ("ds41_tiny_golden.v3.json", Mode::Chained),
        ("ds41_tiny_golden.v3-full.json", Mode::Isolated),
    ] {
        let g = load(name);
        let Some(mut b) = kind.build(&g, false) else {
            return;
        };
        let report = session::run_check(&g, b.as_mut(), &options(&g, mode)).expect("check");
        if let Some(f) = report.first_failure() {
            panic!(
                "{kind:?} {name}: first failure {} {}: {}",
                f.regime, f.name, f.cmp.reason
            );
        }
        assert!(
            report.missing.is_empty(),
            "{kind:?} {name}: {:?}",
            report.missing
        );
        assert!(report.violations.is_empty(), "{kind:?} {name}");
        assert!(
            report.not_isolated.is_empty(),
            "{kind:?} {name}: steps left chained {:?}",
            report.not_isolated
        );
        assert_eq!(report.summary().passed, V3_CAPTURES, "{kind:?} {name}");
    }
}

/// The fault is caught at its capture first in both modes; isolated, every failing capture is in
/// the faulted step; chained, the error is carried into later steps.
fn a_fault_stays_in_its_step_when_isolated(kind: Kind) {
    let g = load("ds41_tiny_golden.v3-full.json");
    let run = |mode| {
        let mut b = kind.build(&g, true)?;
        Some(session::run_check(&g, b.as_mut(), &options(&g, mode)).expect("check"))
    };
    let (Some(chained), Some(isolated)) = (run(Mode::Chained), run(Mode::Isolated)) else {
        return;
    };
    for r in [&chained, &isolated] {
        let first = r.first_failure().expect("the fault is caught");
        assert_eq!(
            (first.regime.as_str(), first.name.as_str(), first.step),
            ("prefill12", "L2.attn_out", FAULT_STEP),
            "{kind:?}"
        );
    }
    for r in isolated.rows.iter().filter(|r| !r.cmp.pass) {
        assert_eq!(
            r.step, FAULT_STEP,
            "{kind:?}: {} {} fails",
            r.regime, r.name
        );
    }
    assert!(
        chained
            .rows
            .iter()
            .any(|r| !r.cmp.pass && r.step != FAULT_STEP),
        "{kind:?}: chained mode carries the error downstream"
    );
}

/// Localisation against the oracle's recorded run names the faulted step first, handed inputs
/// within tolerance (exact ones, and so an infinite gain, for a bit-exact backend) while its own
/// output breaks the bar; without the fault there is no local divergence.
fn localize_names_the_faulted_step(kind: Kind) {
    let g = load("ds41_tiny_golden.v3.json");
    let mut reference = session::oracle_for(&g).expect("oracle");
    let recorded = RecordedRun::record(&g, &mut reference).expect("record");
    for faulty in [true, false] {
        if kind.build(&g, faulty).is_none() {
            return;
        }
        let mut make = || -> Result<Box<dyn Backend>, SessionError> {
            Ok(kind.build(&g, faulty).expect("backend"))
        };
        let l = localize_with(&g, &recorded, &mut make, kind.judge()).expect("localize");
        match l.first_local_divergence.map(|i| &l.steps[i]) {
            Some(e) if faulty => {
                assert_eq!((e.regime.as_str(), e.step), ("prefill12", FAULT_STEP));
                assert_eq!(e.worst_capture, "L2.attn_out", "{kind:?}");
                assert!(e.input_ratio <= 1.0, "{kind:?}: inputs within tolerance");
                assert!(
                    e.local_ratio > 1.0,
                    "{kind:?}: the step's own error breaks the bar"
                );
                if kind.bit_exact() {
                    assert_eq!(e.input_ratio, 0.0, "{kind:?}: exact inputs");
                    assert!(e.gain.is_infinite(), "{kind:?}");
                }
            }
            None if !faulty => {}
            other => panic!("{kind:?} faulty={faulty}: {other:?}"),
        }
    }
}

macro_rules! conformance {
    ($($property:ident),* $(,)?) => {
        mod oracle {
            $(#[test] fn $property() { super::$property(super::Kind::Oracle) })*
        }
        #[cfg(feature = "gpu")]
        mod gpu {
            $(#[test] fn $property() { super::$property(super::Kind::Gpu) })*
        }
    };
}

conformance!(
    passes_the_reference_goldens,
    a_fault_stays_in_its_step_when_isolated,
    localize_names_the_faulted_step,
);
