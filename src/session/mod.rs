//! The session layer: one stepper (`lockstep`) runs a reference source (`reference`: a golden, a
//! recorded run, or tokens with the oracle as the live reference) and any list of backends in
//! lockstep, step by step (chained or isolated), and yields typed results (`results`); the CLI's
//! reports (`report`, `multi`, collected by `run`), localisation, the self-test, determinism, the
//! golden writer and the app's worker (`controller`) all drive it.

pub mod budget;
pub mod builder;
pub mod controller;
pub mod determinism;
pub mod export;
pub mod imported;
pub mod invariants;
pub mod localize;
pub mod lockstep;
pub mod multi;
pub mod reference;
pub mod report;
pub mod rerun;
pub mod results;
pub mod run;
pub mod selftest;
pub mod triage;
pub mod writer;

use crate::golden::Golden;
use crate::model::{EngramTables, ModelConfig, SeedTensors, Step, WeightSource};
use crate::oracle::Oracle;
pub use lockstep::{BoxedBackend, NearTiesResolved, StepBackend, StepOutcome, Stepper};
pub use reference::{GoldenReference, RecordedRun, ReferenceSource, SharedReference};
pub use report::{CaptureRow, Report, StepIsolation};
use std::sync::Arc;

/// How each step's inputs are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Each backend carries its own state: errors accumulate along the graph.
    Chained,
    /// Before every step, inputs and persistent state are reseeded from the reference.
    Isolated,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Chained => "chained",
            Mode::Isolated => "isolated",
        }
    }
}

/// What to run and compare.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    pub mode: Mode,
    /// Compare only captures whose name matches.
    pub only: Option<regex::Regex>,
    /// Stop after this regime.
    pub stop_after_regime: Option<String>,
    /// Use the strict policies (bf16 bit-exact) instead of the Atlas bars.
    pub strict: bool,
    /// Check the backends' own captures against the graph's invariants under this config.
    pub invariants: Option<ModelConfig>,
    /// Pin the reference's selections (MoE routing, index top-k) into the backends for every
    /// layer from this one on (counterfactual pinning).
    pub pin_from: Option<usize>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            mode: Mode::Chained,
            only: None,
            stop_after_regime: None,
            strict: false,
            invariants: None,
            pin_from: None,
        }
    }
}

/// Problems that stop a run before or while it runs.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A golden regime without a whole `input_ids` capture: nothing to run it on.
    #[error("{source_path}: regime {regime}: `input_ids` must be a full integer capture")]
    InputIds { source_path: String, regime: String },
    /// A fixture the golden writer cannot run.
    #[error("{source_path}: {field}: {msg}")]
    Fixture {
        source_path: String,
        field: String,
        msg: String,
    },
    #[error(transparent)]
    Config(#[from] crate::model::ConfigError),
    #[error(transparent)]
    Engram(#[from] crate::model::engram::EngramError),
    /// A backend failed a step.
    #[error("regime {regime}, backend {backend}: {source}")]
    Backend {
        regime: String,
        backend: String,
        #[source]
        source: Box<crate::model::BackendError>,
    },
    /// A run was asked for with no backend to run.
    #[error("no backend to run")]
    NoBackend,
    /// A backend could not be built (no adapter, a GGUF that does not open, ...).
    #[error("building the {backend} backend: {msg}")]
    Build { backend: String, msg: String },
    /// A regime index past the end of the reference.
    #[error("regime {index}: the reference has {count} regimes")]
    NoSuchRegime { index: usize, count: usize },
    /// A greedy decode regime after a regime whose reference produced no finite logit.
    #[error("regime {regime}: no finite `logits_full` value to choose the next token from")]
    NoNextToken { regime: String },
    /// A planted fault that does not parse.
    #[error(
        "planted fault `{spec}`: expected KIND@CAPTURE (kinds: bitflip, perturb[=d], \
         dropped-workgroup, stale-buffer, rope-sign, window-off-by-one, tie-order), e.g. \
         bitflip@L2.attn_out"
    )]
    BadFault { spec: String },
    /// Pinning from a layer the model does not have.
    #[error("pin from layer {layer}: the model has layers 0..={last}")]
    PinLayer { layer: usize, last: usize },
    /// The weights of a run could not be opened.
    #[error("{path}: {msg}")]
    Weights { path: String, msg: String },
    #[error(transparent)]
    Import(Box<crate::import::ImportError>),
}

impl From<crate::import::ImportError> for SessionError {
    fn from(e: crate::import::ImportError) -> SessionError {
        SessionError::Import(Box::new(e))
    }
}

impl SessionError {
    /// A backend that could not be built, with the builder's own error.
    pub fn build(backend: &str, e: impl std::fmt::Display) -> SessionError {
        SessionError::Build {
            backend: backend.to_string(),
            msg: e.to_string(),
        }
    }
}

/// The model config and engram tables of a golden's fixture (tables derived when the fixture
/// has none, as in v1).
pub fn model_of(golden: &Golden) -> Result<(ModelConfig, Option<EngramTables>), SessionError> {
    let cfg = ModelConfig::from_fixture(&golden.fixture)?;
    let tables = match (&cfg.engram, &golden.fixture.engram) {
        (None, _) => None,
        (Some(e), Some(fx)) => Some(EngramTables::from_fixture(e, fx)?),
        (Some(e), None) => Some(EngramTables::derive(e)?),
    };
    Ok((cfg, tables))
}

/// Config, engram tables and weights a run computes with.
pub type RunModel = (ModelConfig, Option<EngramTables>, Arc<dyn WeightSource>);

/// The model a run computes with ([`builder::ModelParts::open`]) as a tuple.
pub fn run_model(
    golden: &Golden,
    gguf: Option<&std::path::Path>,
) -> Result<RunModel, SessionError> {
    let m = builder::ModelParts::open(golden, gguf)?;
    Ok((m.cfg, m.tables, m.weights))
}

/// A CPU oracle over the GGUF's weights when given, else the golden's filler.
pub fn oracle_on(golden: &Golden, gguf: Option<&std::path::Path>) -> Result<Oracle, SessionError> {
    Ok(builder::ModelParts::open(golden, gguf)?.oracle())
}

/// A CPU oracle over the golden's filler weights.
pub fn oracle_for(golden: &Golden) -> Result<Oracle, SessionError> {
    Ok(builder::ModelParts::from_golden(golden)?.oracle())
}

/// A GPU backend over the golden's filler weights on a fresh context (the best adapter found).
#[cfg(feature = "gpu")]
pub fn gpu_for(
    golden: &Golden,
    opts: crate::gpu::GpuOptions,
) -> Result<crate::gpu::GpuBackend, SessionError> {
    builder::ModelParts::from_golden(golden)?.gpu(opts)
}

/// Token ids and start position of every regime, from the golden's `input_ids` captures.
pub fn regime_inputs(golden: &Golden) -> Result<Vec<(String, Vec<i64>, usize)>, SessionError> {
    let mut pos = 0usize;
    let mut out = Vec::new();
    for r in &golden.regimes {
        let ids = r
            .get("input_ids")
            .and_then(|c| c.full_i64())
            .ok_or_else(|| SessionError::InputIds {
                source_path: golden.source.display().to_string(),
                regime: r.name.clone(),
            })?;
        out.push((r.name.clone(), ids.clone(), pos));
        pos += ids.len();
    }
    Ok(out)
}

/// The golden's full captures, as seen from regime `current` (isolated mode's seed source).
pub struct GoldenSeeds<'a> {
    golden: &'a Golden,
    current: usize,
    starts: Vec<usize>,
}

impl<'a> GoldenSeeds<'a> {
    /// Seeds for regime index `current` of `golden`.
    pub fn new(golden: &'a Golden, current: usize) -> Result<GoldenSeeds<'a>, SessionError> {
        let starts = regime_inputs(golden)?.iter().map(|(_, _, p)| *p).collect();
        Ok(GoldenSeeds::with_starts(golden, current, starts))
    }

    /// Seeds for regime `current` of `golden` whose regimes start at `starts`.
    pub fn with_starts(golden: &'a Golden, current: usize, starts: Vec<usize>) -> GoldenSeeds<'a> {
        GoldenSeeds {
            golden,
            current,
            starts,
        }
    }

    fn capture(&self, back: usize, name: &str) -> Option<&crate::golden::GoldenCapture> {
        let idx = self.current.checked_sub(back)?;
        self.golden.regimes.get(idx)?.get(name)
    }
}

impl SeedTensors for GoldenSeeds<'_> {
    fn earlier_regimes(&self) -> usize {
        self.current
    }
    fn start_pos(&self, back: usize) -> Option<usize> {
        self.starts.get(self.current.checked_sub(back)?).copied()
    }
    fn full_f32(&self, back: usize, name: &str) -> Option<Vec<f32>> {
        self.capture(back, name)
            .filter(|c| !c.is_int())
            .and_then(|c| c.full_f32())
    }
    fn full_i64(&self, back: usize, name: &str) -> Option<Vec<i64>> {
        self.capture(back, name).and_then(|c| c.full_i64())
    }
}

/// A golden as a shared reference source.
pub fn golden_reference(golden: &Golden) -> Result<SharedReference, SessionError> {
    Ok(Arc::new(GoldenReference::new(Arc::new(golden.clone()))?))
}

/// Run `backend` over every regime of `golden` and compare each capture (a stepper over one
/// backend).
pub fn run_check(
    golden: &Golden,
    backend: &mut dyn crate::model::Backend,
    opts: &CheckOptions,
) -> Result<Report, SessionError> {
    let mut stepper = Stepper::new(
        golden_reference(golden)?,
        vec![Box::new(backend)],
        opts.clone(),
    )?;
    Ok(run::RunRecord::collect(&mut stepper, run::KeepValues::Failing)?.report(0))
}

/// Run `backends` in lockstep over every regime of `golden` (the first is the reference of the
/// cross comparisons, normally the CPU oracle).
pub fn run_lockstep(
    golden: &Golden,
    backends: Vec<StepBackend<'_>>,
    opts: &CheckOptions,
) -> Result<multi::MultiReport, SessionError> {
    let mut stepper = Stepper::new(golden_reference(golden)?, backends, opts.clone())?;
    Ok(run::RunRecord::collect(&mut stepper, run::KeepValues::Failing)?.multi())
}

/// The step of the regime sequence that emits capture `name` (for reports on goldens alone).
pub fn step_of_capture(name: &str) -> Option<Step> {
    let parsed = crate::golden::names::parse_capture_name(name);
    match (parsed.layer, parsed.shared, parsed.base.as_str()) {
        (None, _, "input_ids" | "engram_hashes") => Some(Step::EngramHash),
        (None, _, "embed") => Some(Step::Embed),
        (None, _, _) => Some(Step::Final),
        (Some(l), false, b) if b.starts_with("engram_") => Some(Step::Engram(l)),
        (Some(l), _, _) => Some(Step::Block(l)),
    }
}
