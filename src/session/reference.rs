//! Reference sources: what the stepper compares every backend with. A golden (sampled or full) is
//! one; a recorded run of the oracle (full tensors, for localisation) is another; a list of tokens
//! with no recorded truth makes the first backend, the CPU oracle, the live reference (golden-less
//! runs on a real GGUF, and the golden writer). Imported dumps of other engines are one more
//! implementation; the stepper needs no change for any of them.

use super::SessionError;
use crate::golden::compare::{compare_full, compare_with_golden, Comparison, Values};
use crate::golden::policy::Policy;
use crate::golden::{Golden, GoldenCapture};
use crate::model::{Capture, CaptureValues, ModelConfig, Pins, SeedTensors};
use std::collections::HashMap;
use std::sync::Arc;

impl<'a> From<&'a CaptureValues> for Values<'a> {
    fn from(v: &'a CaptureValues) -> Values<'a> {
        match v {
            CaptureValues::F32(v) => Values::F32(v),
            CaptureValues::I64(v) => Values::I64(v),
        }
    }
}

/// A reference tensor as a source holds it.
#[derive(Debug, Clone, Copy)]
pub enum Expected<'a> {
    /// A golden capture: a strided sample plus the checksum of the whole tensor.
    Golden(&'a GoldenCapture),
    /// A whole tensor (a recorded run, an imported dump, a live reference backend).
    Full(&'a Capture),
}

impl Expected<'_> {
    /// Integer data (indices, masks, hashes, ids).
    pub fn is_int(&self) -> bool {
        match self {
            Expected::Golden(g) => g.is_int(),
            Expected::Full(c) => matches!(c.values, CaptureValues::I64(_)),
        }
    }

    /// The reference's shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            Expected::Golden(g) => &g.shape,
            Expected::Full(c) => &c.shape,
        }
    }

    /// The largest finite |value| the reference holds (its samples for a golden): the magnitude
    /// error budgets scale with.
    pub fn magnitude(&self) -> f64 {
        match self {
            Expected::Golden(g) => super::budget::reference_magnitude(g),
            Expected::Full(c) => match &c.values {
                CaptureValues::F32(v) => v
                    .iter()
                    .filter(|x| x.is_finite())
                    .fold(0f64, |m, x| m.max(f64::from(x.abs()))),
                CaptureValues::I64(v) => v.iter().fold(0f64, |m, &x| m.max((x as f64).abs())),
            },
        }
    }

    /// The whole integer tensor, when the reference holds it whole.
    pub fn full_i64(&self) -> Option<Vec<i64>> {
        match self {
            Expected::Golden(g) => g.full_i64(),
            Expected::Full(c) => match &c.values {
                CaptureValues::I64(v) => Some(v.clone()),
                CaptureValues::F32(_) => None,
            },
        }
    }

    /// The whole float tensor, when the reference holds it whole.
    pub fn full_f32(&self) -> Option<Vec<f32>> {
        match self {
            Expected::Golden(g) => (!g.is_int()).then(|| g.full_f32()).flatten(),
            Expected::Full(c) => match &c.values {
                CaptureValues::F32(v) => Some(v.clone()),
                CaptureValues::I64(_) => None,
            },
        }
    }

    /// Compare a backend's capture with this reference under `policy`.
    pub fn compare(&self, got: &Capture, policy: &Policy) -> Comparison {
        match self {
            Expected::Golden(g) => compare_with_golden((&got.values).into(), &got.shape, g, policy),
            Expected::Full(r) => {
                compare_full((&got.values).into(), (&r.values).into(), &r.shape, policy)
            }
        }
    }
}

/// What a reference source says about itself in reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReferenceKind {
    /// Recorded truth (a golden or a recorded run): every backend is compared with it.
    Recorded,
    /// No recorded truth: the first backend (the CPU oracle) is the reference, live.
    Live,
}

/// What the stepper compares with. Regime `i`'s tokens may depend on what the reference backend
/// produced in regime `i - 1` (greedy decoding of a golden-less run), so they are asked for one
/// regime at a time.
pub trait ReferenceSource: Send + Sync {
    /// Where the truth comes from, for reports (a golden's path, `cpu oracle (live)`).
    fn label(&self) -> String;
    /// Recorded truth, or the first backend live.
    fn kind(&self) -> ReferenceKind;
    /// The graph config the run computes with (invariants, triage, error budgets).
    fn config(&self) -> Option<&ModelConfig>;
    /// The regimes of the run, in order.
    fn regime_count(&self) -> usize;
    /// The name of regime `i` (`prefill12`, `decode13`, ...).
    fn regime_name(&self, i: usize) -> String;
    /// The tokens of regime `i`; `previous` holds the reference backend's captures of regime
    /// `i - 1` (for a next token chosen from its logits).
    fn regime_tokens(&self, i: usize, previous: &[Capture]) -> Result<Vec<i64>, SessionError>;
    /// The recorded reference tensor of capture `name` in regime `i` (None for a live source, or
    /// a capture the source does not hold).
    fn expected(&self, i: usize, name: &str) -> Option<Expected<'_>>;
    /// Every capture the source holds for regime `i` (what a backend must produce).
    fn expected_names(&self, i: usize) -> Vec<String>;
    /// Full tensors to reseed a backend from before each step of regime `i` in isolated mode
    /// (None when the source is live: the stepper then reseeds from the reference backend).
    fn seeds(&self, i: usize) -> Option<Box<dyn SeedTensors + '_>>;

    /// Selections to pin in regime `i` for every layer from `from_layer` on (counterfactual
    /// pinning): the reference's MoE routing and index sources' compressed top-k, where it holds
    /// them whole.
    fn pins(&self, i: usize, from_layer: usize) -> Pins {
        let mut pins = Pins::default();
        let Some(cfg) = self.config() else {
            return pins;
        };
        for l in from_layer..cfg.n_layers {
            if let Some(v) = self
                .expected(i, &format!("L{l}.moe_indices"))
                .and_then(|e| e.full_i64())
            {
                pins.moe_indices.insert(l, v);
            }
            if cfg.index_source_layers.contains(&l) {
                if let Some(v) = self
                    .expected(i, &format!("shared.L{l}.topk_idxs"))
                    .and_then(|e| e.full_i64())
                {
                    pins.topk_idxs.insert(l, v);
                }
            }
        }
        pins
    }
}

/// Shared handle on a reference source (the app's worker and the CLI both hold one).
pub type SharedReference = Arc<dyn ReferenceSource>;

/// A golden as the reference: its regimes, their `input_ids`, its captures and, in isolated mode,
/// its full captures as seeds.
pub struct GoldenReference {
    golden: Arc<Golden>,
    cfg: Option<ModelConfig>,
    /// Token ids and start position per regime (from the `input_ids` captures).
    inputs: Vec<(Vec<i64>, usize)>,
    /// Capture index per (regime, name): golden lookups are by name on every capture.
    index: Vec<HashMap<String, usize>>,
}

impl GoldenReference {
    /// The golden's regimes and captures; its fixture's config when it yields one.
    pub fn new(golden: Arc<Golden>) -> Result<GoldenReference, SessionError> {
        let inputs = super::regime_inputs(&golden)?
            .into_iter()
            .map(|(_, ids, start)| (ids, start))
            .collect();
        // The config alone: a golden recorded on a GGUF holds no engram tables to check.
        let cfg = ModelConfig::from_fixture(&golden.fixture).ok();
        let index = golden
            .regimes
            .iter()
            .map(|r| {
                r.captures
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.name.clone(), i))
                    .collect()
            })
            .collect();
        Ok(GoldenReference {
            golden,
            cfg,
            inputs,
            index,
        })
    }

    /// The golden behind this reference.
    pub fn golden(&self) -> &Arc<Golden> {
        &self.golden
    }

    fn capture(&self, i: usize, name: &str) -> Option<&GoldenCapture> {
        let at = *self.index.get(i)?.get(name)?;
        self.golden.regimes.get(i)?.captures.get(at)
    }
}

impl ReferenceSource for GoldenReference {
    fn label(&self) -> String {
        self.golden.source.display().to_string()
    }
    fn kind(&self) -> ReferenceKind {
        ReferenceKind::Recorded
    }
    fn config(&self) -> Option<&ModelConfig> {
        self.cfg.as_ref()
    }
    fn regime_count(&self) -> usize {
        self.golden.regimes.len()
    }
    fn regime_name(&self, i: usize) -> String {
        self.golden
            .regimes
            .get(i)
            .map(|r| r.name.clone())
            .unwrap_or_default()
    }
    fn regime_tokens(&self, i: usize, _previous: &[Capture]) -> Result<Vec<i64>, SessionError> {
        self.inputs
            .get(i)
            .map(|(ids, _)| ids.clone())
            .ok_or(SessionError::NoSuchRegime {
                index: i,
                count: self.inputs.len(),
            })
    }
    fn expected(&self, i: usize, name: &str) -> Option<Expected<'_>> {
        self.capture(i, name).map(Expected::Golden)
    }
    fn expected_names(&self, i: usize) -> Vec<String> {
        self.golden
            .regimes
            .get(i)
            .map(|r| r.captures.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default()
    }
    fn seeds(&self, i: usize) -> Option<Box<dyn SeedTensors + '_>> {
        let starts = self.inputs.iter().map(|(_, s)| *s).collect();
        Some(Box::new(super::GoldenSeeds::with_starts(
            &self.golden,
            i,
            starts,
        )))
    }
}

/// One regime of recorded full captures.
#[derive(Debug, Clone)]
pub struct RecordedRegime {
    pub name: String,
    pub start_pos: usize,
    pub ids: Vec<i64>,
    /// Every capture of the regime by name.
    pub captures: HashMap<String, Capture>,
}

/// Full captures of a run, regime by regime: the oracle's recorded run (the reference of
/// localisation, bit-exact with the golden, so it works on sampled goldens too), or the reference
/// backend's captures so far in a live run (what other backends are reseeded from).
#[derive(Debug, Clone, Default)]
pub struct RecordedRun {
    pub regimes: Vec<RecordedRegime>,
    /// The config the run computed with.
    pub config: Option<ModelConfig>,
    /// Where the recording came from.
    pub label: String,
}

impl RecordedRun {
    /// The capture `name` of regime `i`.
    pub fn get(&self, i: usize, name: &str) -> Option<&Capture> {
        self.regimes.get(i)?.captures.get(name)
    }

    /// Seeds as seen from regime `current`.
    pub fn seeds_at(&self, current: usize) -> RecordedSeeds<'_> {
        RecordedSeeds { run: self, current }
    }
}

impl ReferenceSource for RecordedRun {
    fn label(&self) -> String {
        self.label.clone()
    }
    fn kind(&self) -> ReferenceKind {
        ReferenceKind::Recorded
    }
    fn config(&self) -> Option<&ModelConfig> {
        self.config.as_ref()
    }
    fn regime_count(&self) -> usize {
        self.regimes.len()
    }
    fn regime_name(&self, i: usize) -> String {
        self.regimes
            .get(i)
            .map(|r| r.name.clone())
            .unwrap_or_default()
    }
    fn regime_tokens(&self, i: usize, _previous: &[Capture]) -> Result<Vec<i64>, SessionError> {
        self.regimes
            .get(i)
            .map(|r| r.ids.clone())
            .ok_or(SessionError::NoSuchRegime {
                index: i,
                count: self.regimes.len(),
            })
    }
    fn expected(&self, i: usize, name: &str) -> Option<Expected<'_>> {
        self.get(i, name).map(Expected::Full)
    }
    fn expected_names(&self, i: usize) -> Vec<String> {
        let mut names: Vec<String> = self
            .regimes
            .get(i)
            .map(|r| r.captures.keys().cloned().collect())
            .unwrap_or_default();
        names.sort();
        names
    }
    fn seeds(&self, i: usize) -> Option<Box<dyn SeedTensors + '_>> {
        Some(Box::new(self.seeds_at(i)))
    }
}

/// Seeds from a recorded run, as seen from regime `current`.
pub struct RecordedSeeds<'a> {
    run: &'a RecordedRun,
    current: usize,
}

impl RecordedSeeds<'_> {
    fn get(&self, back: usize, name: &str) -> Option<&Capture> {
        self.run.get(self.current.checked_sub(back)?, name)
    }
}

impl SeedTensors for RecordedSeeds<'_> {
    fn earlier_regimes(&self) -> usize {
        self.current
    }
    fn start_pos(&self, back: usize) -> Option<usize> {
        Some(
            self.run
                .regimes
                .get(self.current.checked_sub(back)?)?
                .start_pos,
        )
    }
    fn full_f32(&self, back: usize, name: &str) -> Option<Vec<f32>> {
        match &self.get(back, name)?.values {
            CaptureValues::F32(v) => Some(v.clone()),
            CaptureValues::I64(_) => None,
        }
    }
    fn full_i64(&self, back: usize, name: &str) -> Option<Vec<i64>> {
        match &self.get(back, name)?.values {
            CaptureValues::I64(v) => Some(v.clone()),
            CaptureValues::F32(_) => None,
        }
    }
}

/// How a regime of a golden-less run gets its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegimeTokens {
    /// These ids.
    Given(Vec<i64>),
    /// One token: the reference backend's greedy choice (argmax of its last `logits` row) after
    /// the previous regime.
    Greedy,
}

/// A run with no recorded truth: named regimes and their tokens; the first backend (the CPU
/// oracle) is the reference, live. Golden-less runs on a GGUF and the golden writer use it.
pub struct TokensReference {
    pub label: String,
    pub config: ModelConfig,
    pub regimes: Vec<(String, RegimeTokens)>,
}

impl TokensReference {
    /// A prefill regime over `prefill` then `decode` greedy decode steps, named as the goldens
    /// name them (`prefill{n}`, `decode{pos}`).
    pub fn prompt(
        label: String,
        config: ModelConfig,
        prefill: Vec<i64>,
        decode: usize,
    ) -> TokensReference {
        let n = prefill.len();
        let mut regimes = vec![(format!("prefill{n}"), RegimeTokens::Given(prefill))];
        for k in 0..decode {
            regimes.push((format!("decode{}", n + k), RegimeTokens::Greedy));
        }
        TokensReference {
            label,
            config,
            regimes,
        }
    }
}

/// The argmax of the last row of `logits_full` (the forward's last position, as the reference
/// `Transformer` returns it): the greedy next token. The lower index wins ties (torch's argmax
/// rule); None without a finite logit.
pub fn greedy_next_token(previous: &[Capture]) -> Option<i64> {
    let c = previous.iter().find(|c| c.name == "logits_full")?;
    let CaptureValues::F32(v) = &c.values else {
        return None;
    };
    let vocab = *c.shape.last()?;
    if vocab == 0 || v.len() < vocab {
        return None;
    }
    let row = &v[v.len() - vocab..];
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in row.iter().enumerate() {
        if x.is_finite() && best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    best.map(|(i, _)| i as i64)
}

impl ReferenceSource for TokensReference {
    fn label(&self) -> String {
        self.label.clone()
    }
    fn kind(&self) -> ReferenceKind {
        ReferenceKind::Live
    }
    fn config(&self) -> Option<&ModelConfig> {
        Some(&self.config)
    }
    fn regime_count(&self) -> usize {
        self.regimes.len()
    }
    fn regime_name(&self, i: usize) -> String {
        self.regimes.get(i).map(|r| r.0.clone()).unwrap_or_default()
    }
    fn regime_tokens(&self, i: usize, previous: &[Capture]) -> Result<Vec<i64>, SessionError> {
        match self.regimes.get(i).map(|r| &r.1) {
            Some(RegimeTokens::Given(ids)) => Ok(ids.clone()),
            Some(RegimeTokens::Greedy) => {
                greedy_next_token(previous).map(|t| vec![t]).ok_or_else(|| {
                    SessionError::NoNextToken {
                        regime: self.regime_name(i),
                    }
                })
            }
            None => Err(SessionError::NoSuchRegime {
                index: i,
                count: self.regimes.len(),
            }),
        }
    }
    fn expected(&self, _i: usize, _name: &str) -> Option<Expected<'_>> {
        None
    }
    fn expected_names(&self, _i: usize) -> Vec<String> {
        Vec::new()
    }
    fn seeds(&self, _i: usize) -> Option<Box<dyn SeedTensors + '_>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CaptureDtype;

    #[test]
    fn greedy_takes_the_last_row_and_the_lower_index_on_ties() {
        let logits = Capture::f32(
            "logits_full",
            vec![2, 4],
            CaptureDtype::F32,
            vec![9.0, 0.0, 0.0, 0.0, 1.0, 3.0, 3.0, f32::NAN],
        );
        assert_eq!(greedy_next_token(&[logits]), Some(1));
        assert_eq!(greedy_next_token(&[]), None);
    }
}
