//! The step-wise backend contract shared by the CPU oracle and the GPU path
//! (architecture.md, "The core abstraction").

use std::fmt;

/// One step of a regime's forward. A regime runs `EngramHash`, `Embed`, then per layer
/// `Engram(l)` where the layer carries one and `Block(l)`, then `Final`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Step {
    EngramHash,
    Embed,
    Engram(usize),
    Block(usize),
    Final,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::EngramHash => write!(f, "EngramHash"),
            Step::Embed => write!(f, "Embed"),
            Step::Engram(l) => write!(f, "Engram({l})"),
            Step::Block(l) => write!(f, "Block({l})"),
            Step::Final => write!(f, "Final"),
        }
    }
}

impl Step {
    /// The steps of one regime for a graph with `n_layers` layers and the given engram layers.
    pub fn sequence(n_layers: usize, engram_layers: &[usize]) -> Vec<Step> {
        let mut steps = vec![Step::EngramHash, Step::Embed];
        for l in 0..n_layers {
            if engram_layers.contains(&l) {
                steps.push(Step::Engram(l));
            }
            steps.push(Step::Block(l));
        }
        steps.push(Step::Final);
        steps
    }

    /// The layer a step belongs to, if any.
    pub fn layer(&self) -> Option<usize> {
        match self {
            Step::Engram(l) | Step::Block(l) => Some(*l),
            _ => None,
        }
    }
}

/// How the reference stores a captured tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureDtype {
    Bf16,
    F32,
    Int,
}

/// Captured values: float tensors as f32 (bf16 ones hold bf16-representable values), integer
/// tensors (indices, hashes, masks) as i64.
#[derive(Debug, Clone, PartialEq)]
pub enum CaptureValues {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

impl CaptureValues {
    pub fn len(&self) -> usize {
        match self {
            CaptureValues::F32(v) => v.len(),
            CaptureValues::I64(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One tensor a backend emits under the golden's exact name and shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Capture {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: CaptureDtype,
    pub values: CaptureValues,
}

/// Prefix of diagnostic captures: tensors a backend exposes for triage (e.g. the index scores a
/// top-k ran on) that no golden holds and no comparison uses.
pub const DIAGNOSTIC_PREFIX: &str = "diag.";

impl Capture {
    /// A diagnostic capture (not compared, not written into goldens).
    pub fn is_diagnostic(&self) -> bool {
        self.name.starts_with(DIAGNOSTIC_PREFIX)
    }

    pub fn f32(
        name: impl Into<String>,
        shape: Vec<usize>,
        dtype: CaptureDtype,
        v: Vec<f32>,
    ) -> Capture {
        Capture {
            name: name.into(),
            shape,
            dtype,
            values: CaptureValues::F32(v),
        }
    }
    pub fn int(name: impl Into<String>, shape: Vec<usize>, v: Vec<i64>) -> Capture {
        Capture {
            name: name.into(),
            shape,
            dtype: CaptureDtype::Int,
            values: CaptureValues::I64(v),
        }
    }
}

/// A failed step, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{step}: weight: {source}")]
    Weight {
        step: Step,
        #[source]
        source: crate::model::WeightError,
    },
    #[error("{step}: {msg}")]
    Invalid { step: Step, msg: String },
    /// A pin of the wrong size for the selection it replaces.
    #[error("{step}: {source}")]
    Pin {
        step: Step,
        #[source]
        source: PinSizeError,
    },
    /// `begin` refused the regime's tokens.
    #[error("begin: {0}")]
    Forward(#[from] crate::model::config::ForwardError),
    /// Before any step ran: `begin` (the regime's tokens), seeding or pinning.
    #[error("{phase}: {msg}")]
    Setup { phase: &'static str, msg: String },
}

/// A pinned selection whose size is not the selection's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pinned top-k for layer {layer} has {got} values, expected {expected}")]
pub struct PinSizeError {
    pub layer: usize,
    pub got: usize,
    pub expected: usize,
}

impl BackendError {
    /// The step that failed; `None` for a set-up failure before the first step.
    pub fn step(&self) -> Option<Step> {
        match self {
            BackendError::Weight { step, .. }
            | BackendError::Invalid { step, .. }
            | BackendError::Pin { step, .. } => Some(*step),
            BackendError::Forward(_) | BackendError::Setup { .. } => None,
        }
    }
}

/// The reference's full tensors, used to reseed a step's inputs and persistent state in
/// isolated mode. `back` counts regimes before the current one (0 = the current regime); the
/// session fills this from the golden. A capture stored only as a sample is `None`.
pub trait SeedTensors {
    /// How many regimes ran before the current one.
    fn earlier_regimes(&self) -> usize;
    /// The start position of the regime `back` regimes ago.
    fn start_pos(&self, back: usize) -> Option<usize>;
    /// The whole float tensor of capture `name` in that regime.
    fn full_f32(&self, back: usize, name: &str) -> Option<Vec<f32>>;
    /// The whole integer tensor of capture `name` in that regime.
    fn full_i64(&self, back: usize, name: &str) -> Option<Vec<i64>>;
}

/// Selections forced into a backend for one forward (counterfactual pinning): per layer, the
/// MoE routing `[s, k]` and an index source's compressed top-k `[s, k]` (offset applied, as in
/// `shared.L*.topk_idxs`). Weights are still computed by the backend from its own scores.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pins {
    pub moe_indices: std::collections::HashMap<usize, Vec<i64>>,
    pub topk_idxs: std::collections::HashMap<usize, Vec<i64>>,
}

impl Pins {
    /// The pinned compressed top-k of layer `l` for `s` tokens of `k` picks, if any; a pin of
    /// another size is an error naming both sizes.
    pub fn topk_for(&self, l: usize, s: usize, k: usize) -> Result<Option<&[i64]>, PinSizeError> {
        match self.topk_idxs.get(&l) {
            Some(p) if p.len() != s * k => Err(PinSizeError {
                layer: l,
                got: p.len(),
                expected: s * k,
            }),
            Some(p) => Ok(Some(p)),
            None => Ok(None),
        }
    }
}

/// A backend that runs the V4.1 graph step by step with state persisting across regimes.
pub trait Backend {
    /// Short name for reports (`cpu`, `gpu`).
    fn name(&self) -> String;
    /// Start a regime: `ids` are this forward's tokens at `start_pos`.
    fn begin(&mut self, ids: &[i64], start_pos: usize) -> Result<(), BackendError>;
    /// The steps of the current regime, in order.
    fn steps(&self) -> Vec<Step>;
    /// Run one step and append its captures to `sink`.
    fn run(&mut self, step: Step, sink: &mut Vec<Capture>) -> Result<(), BackendError>;
    /// Force these selections for the current forward (after `begin`). Returns false when the
    /// backend cannot pin (the default).
    fn pin(&mut self, pins: &Pins) -> Result<bool, BackendError> {
        let _ = pins;
        Ok(false)
    }
    /// Overwrite the inputs and persistent state `step` reads with the reference's tensors
    /// (isolated mode). Returns the names of what could not be seeded and why.
    fn seed(
        &mut self,
        step: Step,
        reference: &dyn SeedTensors,
    ) -> Result<Vec<String>, BackendError>;
    /// The reference's selections for the next step (`--reference-ties` against a reference):
    /// a backend may resolve near ties the reference's way (see [`super::hints`]) and report
    /// each such row. Returns false when the backend takes no hints (the default).
    fn hint(&mut self, hints: &super::hints::SelectionHints) -> Result<bool, BackendError> {
        let _ = hints;
        Ok(false)
    }
}

/// A borrowed backend is a backend: the stepper can drive `&mut oracle` while the caller keeps
/// the concrete value (for its timings and counters afterwards).
impl<B: Backend + ?Sized> Backend for &mut B {
    fn name(&self) -> String {
        (**self).name()
    }
    fn begin(&mut self, ids: &[i64], start_pos: usize) -> Result<(), BackendError> {
        (**self).begin(ids, start_pos)
    }
    fn steps(&self) -> Vec<Step> {
        (**self).steps()
    }
    fn run(&mut self, step: Step, sink: &mut Vec<Capture>) -> Result<(), BackendError> {
        (**self).run(step, sink)
    }
    fn pin(&mut self, pins: &Pins) -> Result<bool, BackendError> {
        (**self).pin(pins)
    }
    fn seed(
        &mut self,
        step: Step,
        reference: &dyn SeedTensors,
    ) -> Result<Vec<String>, BackendError> {
        (**self).seed(step, reference)
    }
    fn hint(&mut self, hints: &super::hints::SelectionHints) -> Result<bool, BackendError> {
        (**self).hint(hints)
    }
}
