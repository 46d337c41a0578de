//! An imported dump as a backend: it replays the captures an external engine recorded, regime
//! by regime and step by step, under the golden's names. It cannot be reseeded (an external
//! engine's run is over), so `seed` reports every input as not reseedable; localisation instead
//! feeds the oracle the dump's own step inputs.

use super::join::Joined;
use crate::model::{Backend, BackendError, Capture, SeedTensors, Step};

/// Which step of a regime emits a capture, by name (the session's `step_of_capture`).
pub type StepOf = fn(&str) -> Option<Step>;

/// A recorded run replayed as a backend.
pub struct ImportedBackend {
    label: String,
    joined: Joined,
    steps: Vec<Step>,
    step_of: StepOf,
    current: Option<usize>,
}

impl ImportedBackend {
    /// Replay `joined`; `steps` is the regime's step sequence (from the model config) and
    /// `step_of` says which step emits each capture.
    pub fn new(joined: Joined, steps: Vec<Step>, step_of: StepOf) -> ImportedBackend {
        let label = format!(
            "captures {}",
            joined
                .dump
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| joined.dump.display().to_string())
        );
        ImportedBackend {
            label,
            joined,
            steps,
            step_of,
            current: None,
        }
    }

    /// Replay `joined` over the step sequence of `cfg`'s graph.
    pub fn for_config(
        joined: Joined,
        cfg: &crate::model::ModelConfig,
        step_of: StepOf,
    ) -> ImportedBackend {
        let engram: Vec<usize> = cfg
            .engram
            .as_ref()
            .map(|e| e.layer_ids.clone())
            .unwrap_or_default();
        ImportedBackend::new(joined, Step::sequence(cfg.n_layers, &engram), step_of)
    }

    /// The joined dump it replays.
    pub fn joined(&self) -> &Joined {
        &self.joined
    }
}

impl Backend for ImportedBackend {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn begin(&mut self, ids: &[i64], start_pos: usize) -> Result<(), BackendError> {
        let fail = |msg: String| BackendError::Setup {
            phase: "begin",
            msg,
        };
        let ri = self
            .joined
            .regimes
            .iter()
            .position(|r| r.start_pos == start_pos && r.n_tokens == ids.len())
            .ok_or_else(|| {
                fail(format!(
                    "{}: no regime of {} tokens at position {start_pos}",
                    self.joined.dump.display(),
                    ids.len()
                ))
            })?;
        if let Some(c) = self.joined.regimes[ri].get("input_ids") {
            if let crate::model::CaptureValues::I64(v) = &c.capture.values {
                if v.as_slice() != ids {
                    return Err(fail(format!(
                        "{}: regime {}: the dump's input_ids {v:?} are not the run's {ids:?}",
                        self.joined.dump.display(),
                        self.joined.regimes[ri].name
                    )));
                }
            }
        }
        self.current = Some(ri);
        Ok(())
    }

    fn steps(&self) -> Vec<Step> {
        self.steps.clone()
    }

    fn run(&mut self, step: Step, sink: &mut Vec<Capture>) -> Result<(), BackendError> {
        let ri = self.current.ok_or_else(|| BackendError::Invalid {
            step,
            msg: "run before begin".into(),
        })?;
        let regime = &self.joined.regimes[ri];
        sink.extend(
            regime
                .captures
                .iter()
                .filter(|c| (self.step_of)(&c.capture.name) == Some(step))
                .map(|c| c.capture.clone()),
        );
        Ok(())
    }

    fn seed(
        &mut self,
        step: Step,
        _reference: &dyn SeedTensors,
    ) -> Result<Vec<String>, BackendError> {
        Ok(vec![format!(
            "every input of {step} (a recorded dump cannot be reseeded)"
        )])
    }
}
