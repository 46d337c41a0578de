//! Another engine's imported dump in the session: the golden scoped to the captures the dump
//! holds (so `check --captures` compares what the engine recorded and lists the rest instead of
//! failing on it), and localisation of an engine that cannot be reseeded: the oracle is fed the
//! dump's own step inputs (and persistent state) and the engine's outputs are compared with what
//! the oracle makes of them, step by step.

use super::localize::RecordedRun;
use super::localize::{is_input_capture, localize_steppers, ratio_against, Judge, Localization};
use super::reference::{Expected, ReferenceKind, ReferenceSource, SharedReference};
use super::{CheckOptions, Mode, SessionError, Stepper};
use crate::import::{ImportedBackend, Joined};
use crate::model::{Backend, Capture, ModelConfig, SeedTensors};
use std::collections::HashSet;
use std::sync::Arc;

/// A reference whose captures are only those an imported dump holds, regime by regime; every
/// other answer is the inner reference's.
pub struct ScopedReference {
    inner: SharedReference,
    names: Vec<HashSet<String>>,
}

impl ScopedReference {
    /// `inner` scoped to the captures of `joined`.
    pub fn new(inner: SharedReference, joined: &Joined) -> ScopedReference {
        let names = joined
            .regimes
            .iter()
            .map(|r| r.captures.iter().map(|c| c.capture.name.clone()).collect())
            .collect();
        ScopedReference { inner, names }
    }
}

impl ReferenceSource for ScopedReference {
    fn label(&self) -> String {
        self.inner.label()
    }
    fn kind(&self) -> ReferenceKind {
        self.inner.kind()
    }
    fn config(&self) -> Option<&ModelConfig> {
        self.inner.config()
    }
    fn regime_count(&self) -> usize {
        self.inner.regime_count()
    }
    fn regime_name(&self, i: usize) -> String {
        self.inner.regime_name(i)
    }
    fn regime_tokens(&self, i: usize, previous: &[Capture]) -> Result<Vec<i64>, SessionError> {
        self.inner.regime_tokens(i, previous)
    }
    fn expected(&self, i: usize, name: &str) -> Option<Expected<'_>> {
        self.inner.expected(i, name)
    }
    fn expected_names(&self, i: usize) -> Vec<String> {
        let keep = self.names.get(i);
        self.inner
            .expected_names(i)
            .into_iter()
            .filter(|n| keep.is_some_and(|k| k.contains(n)))
            .collect()
    }
    fn seeds(&self, i: usize) -> Option<Box<dyn SeedTensors + '_>> {
        self.inner.seeds(i)
    }
}

/// Where one regime's step inputs came from when the oracle was fed the dump's.
#[derive(Debug, Clone, Default)]
pub struct SeedProvenance {
    pub regime: String,
    /// Input captures taken from the dump.
    pub from_dump: Vec<String>,
    /// Input captures the dump lacks, rebuilt from a graph identity over its own captures
    /// (`L3.h_in` is `L2.h_out`), with the capture used.
    pub derived: Vec<(String, String)>,
    /// Input captures neither the dump nor an identity gives: taken from the reference.
    pub from_reference: Vec<String>,
}

/// The dump's own capture that equals input `name` by the graph's wiring, if any: a block's
/// stream is the previous block's output (or, on an engram layer, the engram's output), its
/// pre-mix the previous block's, and an engram's input the previous block's output.
fn identity_source(name: &str, cfg: &ModelConfig) -> Option<String> {
    let parsed = crate::golden::names::parse_capture_name(name);
    let l = parsed.layer?;
    let engram_layer = cfg
        .engram
        .as_ref()
        .is_some_and(|e| e.layer_ids.contains(&l));
    match parsed.base.as_str() {
        "h_in" if engram_layer => Some(format!("L{l}.engram_out")),
        "h_in" | "engram_in" if l > 0 => Some(format!("L{}.h_out", l - 1)),
        "pre_mix_in" if l > 0 => Some(format!("L{}.pre_mix_out", l - 1)),
        _ => None,
    }
}

/// The recorded reference run with the dump's captures laid over it (and the inputs the
/// identities give), so an oracle reseeded from it in isolated mode runs on the engine's own
/// step inputs and state; with where each regime's inputs came from.
pub fn dump_seeded_run(
    recorded: &RecordedRun,
    joined: &Joined,
    cfg: &ModelConfig,
) -> (RecordedRun, Vec<SeedProvenance>) {
    let mut run = recorded.clone();
    run.label = format!(
        "{} with the inputs of {}",
        recorded.label,
        joined.dump.display()
    );
    let mut provenance = Vec::new();
    for (ri, regime) in run.regimes.iter_mut().enumerate() {
        let dump = joined.regimes.get(ri);
        let mut p = SeedProvenance {
            regime: regime.name.clone(),
            ..SeedProvenance::default()
        };
        let mut inputs: Vec<String> = regime
            .captures
            .keys()
            .filter(|n| is_input_capture(n) && n.as_str() != "input_ids")
            .cloned()
            .collect();
        inputs.sort();
        if let Some(d) = dump {
            for c in &d.captures {
                regime
                    .captures
                    .insert(c.capture.name.clone(), c.capture.clone());
            }
        }
        for name in inputs {
            if dump.is_some_and(|d| d.get(&name).is_some()) {
                p.from_dump.push(name);
                continue;
            }
            let via = identity_source(&name, cfg)
                .and_then(|src| dump.and_then(|d| d.get(&src)).map(|c| (src, c)));
            match via {
                Some((src, c)) => {
                    let mut cap = c.capture.clone();
                    cap.name = name.clone();
                    regime.captures.insert(name.clone(), cap);
                    p.derived.push((name, src));
                }
                None => p.from_reference.push(name),
            }
        }
        provenance.push(p);
    }
    (run, provenance)
}

/// Localise an imported dump: per step, the error of the inputs the engine was handed and of its
/// outputs against the recorded reference (chained), and its *local* error: its outputs against
/// the oracle run on the engine's own inputs and state (`oracle` is reseeded before every step
/// from [`dump_seeded_run`]). `judge` decides which local error is a divergence.
pub fn localize_imported(
    recorded: &RecordedRun,
    imported: ImportedBackend,
    oracle: Box<dyn Backend + '_>,
    cfg: &ModelConfig,
    judge: Judge,
) -> Result<(Localization, Vec<SeedProvenance>), SessionError> {
    let (seeded, provenance) = dump_seeded_run(recorded, imported.joined(), cfg);
    let reference: SharedReference = Arc::new(recorded.clone());
    let seeded: SharedReference = Arc::new(seeded);
    let opts = |mode| CheckOptions {
        mode,
        ..CheckOptions::default()
    };
    let mut chained = Stepper::new(reference, vec![Box::new(imported)], opts(Mode::Chained))?;
    let mut local = Stepper::new(seeded, vec![oracle], opts(Mode::Isolated))?;
    let l = localize_steppers(recorded, &mut chained, &mut local, judge, &mut |c, o| {
        // The engine's outputs against the oracle's on the engine's own inputs.
        c.results
            .iter()
            .filter(|r| !is_input_capture(&r.name))
            .filter_map(|r| {
                let got = r.capture_of(0)?;
                let oc = o.results.iter().find(|x| x.name == r.name)?.capture_of(0)?;
                let (x, b, idx) = ratio_against(&r.name, &got.values, &oc, judge);
                Some((r.name.clone(), r.shape.clone(), x, b, idx))
            })
            .collect()
    })?;
    Ok((l, provenance))
}

/// A golden whose every capture is stored whole (v3-full) as a recorded run: the reference of an
/// imported dump's localisation, so a dump of the reference itself has exactly zero input and
/// chained error. `None` when any capture is only sampled.
pub fn recorded_from_full_golden(
    golden: &crate::golden::Golden,
) -> Result<Option<RecordedRun>, SessionError> {
    use super::reference::RecordedRegime;
    use crate::golden::names::{capture_kind, CaptureKind};
    use crate::model::{CaptureDtype, CaptureValues};
    let inputs = super::regime_inputs(golden)?;
    let mut regimes = Vec::new();
    for (r, (name, ids, start_pos)) in golden.regimes.iter().zip(inputs) {
        let mut captures = std::collections::HashMap::new();
        for c in &r.captures {
            let (values, dtype) = if c.is_int() {
                match c.full_i64() {
                    Some(v) => (CaptureValues::I64(v), CaptureDtype::Int),
                    None => return Ok(None),
                }
            } else {
                match c.full_f32() {
                    Some(v) => (
                        CaptureValues::F32(v),
                        match capture_kind(&c.name) {
                            CaptureKind::F32 => CaptureDtype::F32,
                            _ => CaptureDtype::Bf16,
                        },
                    ),
                    None => return Ok(None),
                }
            };
            captures.insert(
                c.name.clone(),
                Capture {
                    name: c.name.clone(),
                    shape: c.shape.clone(),
                    dtype,
                    values,
                },
            );
        }
        regimes.push(RecordedRegime {
            name,
            start_pos,
            ids,
            captures,
        });
    }
    Ok(Some(RecordedRun {
        regimes,
        config: super::model_of(golden).ok().map(|m| m.0),
        label: format!("{} (full captures)", golden.source.display()),
    }))
}
