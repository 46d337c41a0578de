//! Runs a backend over a golden's regimes step by step (chained or isolated), compares every
//! capture with the golden, and builds the report the CLI prints and the app shows.

pub mod budget;
pub mod controller;
pub mod determinism;
pub mod export;
pub mod invariants;
pub mod localize;
pub mod multi;
pub mod report;
pub mod selftest;
pub mod triage;
pub mod writer;

use crate::golden::compare::{compare_with_golden, Values};
use crate::golden::names::capture_kind;
use crate::golden::policy::{policy_for_capture, strict_policy_for_capture};
use crate::golden::Golden;
use crate::model::{
    Backend, Capture, CaptureValues, EngramTables, FillerSource, ModelConfig, SeedTensors, Step,
    WeightSource,
};
use crate::oracle::Oracle;
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
    /// Check the backend's own captures against the graph's invariants under this config.
    pub invariants: Option<ModelConfig>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            mode: Mode::Chained,
            only: None,
            stop_after_regime: None,
            strict: false,
            invariants: None,
        }
    }
}

/// Problems that stop a check before or while it runs.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{source_path}: {msg}")]
    Golden { source_path: String, msg: String },
    #[error(transparent)]
    Config(#[from] crate::model::ConfigError),
    #[error(transparent)]
    Engram(#[from] crate::model::engram::EngramError),
    #[error("regime {regime}: {source}")]
    Backend {
        regime: String,
        #[source]
        source: Box<crate::model::BackendError>,
    },
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

/// The model a run computes with: a `deepseek41` GGUF's metadata and weights when `gguf` is
/// given (what `--gguf` and a GGUF opened in the app select), else the golden's fixture and
/// filler weights. The GGUF is mmapped, not read whole.
pub fn run_model(golden: &Golden, gguf: Option<&std::path::Path>) -> Result<RunModel, String> {
    match gguf {
        Some(path) => {
            let (source, model) = crate::model::GgufSource::open(path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Ok((model.cfg, model.tables, Arc::new(source)))
        }
        None => {
            let (cfg, tables) = model_of(golden).map_err(|e| e.to_string())?;
            let weights =
                FillerSource::new(golden.source.display().to_string(), &golden.weights_meta);
            Ok((cfg, tables, Arc::new(weights)))
        }
    }
}

/// A CPU oracle over [`run_model`]: the GGUF's weights when given, else the golden's filler.
pub fn oracle_on(golden: &Golden, gguf: Option<&std::path::Path>) -> Result<Oracle, String> {
    let (cfg, tables, weights) = run_model(golden, gguf)?;
    Ok(Oracle::new(cfg, weights, tables))
}

/// A CPU oracle over the golden's filler weights.
pub fn oracle_for(golden: &Golden) -> Result<Oracle, SessionError> {
    let (cfg, tables) = model_of(golden)?;
    let weights: Arc<dyn WeightSource> = Arc::new(FillerSource::new(
        golden.source.display().to_string(),
        &golden.weights_meta,
    ));
    Ok(Oracle::new(cfg, weights, tables))
}

/// A GPU backend over the golden's filler weights on a fresh context (the first adapter found).
#[cfg(feature = "gpu")]
pub fn gpu_for(
    golden: &Golden,
    opts: crate::gpu::GpuOptions,
) -> Result<crate::gpu::GpuBackend, SessionError> {
    use crate::gpu::{GpuBackend, GpuContext};
    let fail = |msg: String| SessionError::Backend {
        regime: "-".into(),
        source: Box::new(crate::model::BackendError::Invalid {
            step: "gpu".into(),
            msg,
        }),
    };
    let ctx = GpuContext::new().map_err(|e| fail(e.to_string()))?;
    let (cfg, tables) = model_of(golden)?;
    let weights: Arc<dyn WeightSource> = Arc::new(FillerSource::new(
        golden.source.display().to_string(),
        &golden.weights_meta,
    ));
    GpuBackend::new(ctx, cfg, weights, tables, opts).map_err(|e| fail(e.to_string()))
}

/// Token ids and start position of every regime, from the golden's `input_ids` captures.
pub fn regime_inputs(golden: &Golden) -> Result<Vec<(String, Vec<i64>, usize)>, SessionError> {
    let mut pos = 0usize;
    let mut out = Vec::new();
    for r in &golden.regimes {
        let ids = r
            .get("input_ids")
            .and_then(|c| c.full_i64())
            .ok_or_else(|| SessionError::Golden {
                source_path: golden.source.display().to_string(),
                msg: format!(
                    "regime {}: `input_ids` must be a full integer capture",
                    r.name
                ),
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
        Ok(GoldenSeeds {
            golden,
            current,
            starts,
        })
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

/// Run `backend` over every regime of `golden` and compare each capture.
pub fn run_check(
    golden: &Golden,
    backend: &mut dyn Backend,
    opts: &CheckOptions,
) -> Result<Report, SessionError> {
    let inputs = regime_inputs(golden)?;
    let starts: Vec<usize> = inputs.iter().map(|(_, _, p)| *p).collect();
    let mut report = Report::new(golden, &backend.name(), opts.mode);
    for (ri, (regime_name, ids, start)) in inputs.iter().enumerate() {
        let regime = &golden.regimes[ri];
        let berr = |source: crate::model::BackendError| SessionError::Backend {
            regime: regime_name.clone(),
            source: Box::new(source),
        };
        backend.begin(ids, *start).map_err(berr)?;
        let mut produced = std::collections::HashSet::new();
        for step in backend.steps() {
            if opts.mode == Mode::Isolated {
                let seeds = GoldenSeeds {
                    golden,
                    current: ri,
                    starts: starts.clone(),
                };
                let missing = backend.seed(step, &seeds).map_err(berr)?;
                if !missing.is_empty() {
                    report.not_isolated.push(StepIsolation {
                        regime: regime_name.clone(),
                        step,
                        missing,
                    });
                }
            }
            let mut caps: Vec<Capture> = Vec::new();
            backend.run(step, &mut caps).map_err(berr)?;
            if let Some(cfg) = &opts.invariants {
                for v in invariants::check_step(cfg, *start, &caps) {
                    report.violations.push((regime_name.clone(), v));
                }
            }
            for cap in caps {
                if cap.is_diagnostic() {
                    continue;
                }
                produced.insert(cap.name.clone());
                if let Some(re) = &opts.only {
                    if !re.is_match(&cap.name) {
                        continue;
                    }
                }
                match regime.get(&cap.name) {
                    Some(g) => {
                        let policy = if opts.strict {
                            strict_policy_for_capture(&cap.name, g.is_int())
                        } else {
                            policy_for_capture(&cap.name, g.is_int())
                        };
                        let values = match &cap.values {
                            CaptureValues::F32(v) => Values::F32(v),
                            CaptureValues::I64(v) => Values::I64(v),
                        };
                        let cmp = compare_with_golden(values, &cap.shape, g, &policy);
                        let max_abs = budget::reference_magnitude(g);
                        report
                            .reference_max_abs
                            .insert((regime_name.clone(), cap.name.clone()), max_abs);
                        report.rows.push(CaptureRow {
                            regime: regime_name.clone(),
                            step,
                            name: cap.name.clone(),
                            kind: capture_kind(&cap.name),
                            shape: cap.shape.clone(),
                            cmp,
                        });
                    }
                    None => report.extra.push((regime_name.clone(), cap.name.clone())),
                }
            }
        }
        for c in &regime.captures {
            let wanted = opts.only.as_ref().is_none_or(|re| re.is_match(&c.name));
            if wanted && !produced.contains(&c.name) {
                report.missing.push((regime_name.clone(), c.name.clone()));
            }
        }
        if opts.stop_after_regime.as_deref() == Some(regime_name.as_str()) {
            break;
        }
    }
    Ok(report)
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
