//! Localisation: where is the error *born*? For every step of a test backend this measures the
//! error it carries in (its input captures, chained run), the error of its outputs in the chained
//! run, and the error of its outputs when its inputs and state are reseeded from the reference
//! (isolated run): local error. The error gain is output over input error; the first step whose
//! local error breaks its tolerance is the first divergence, with its worst element located.
//! The reference is the oracle's full tensors (bit-exact with the golden), so this works on
//! sampled goldens too.

use super::lockstep::{StepBackend, StepOutcome, Stepper};
use super::reference::{RecordedRegime, RegimeTokens, SharedReference, TokensReference};
use super::results::CaptureResult;
use super::{model_of, regime_inputs, CheckOptions, Mode, SessionError};
use crate::golden::compare::compare_full;
use crate::golden::policy::{policy_against, policy_for_capture, Against};
use crate::golden::Golden;
use crate::model::{Backend, CaptureValues, Step};
use crate::oracle::faults::{Fault, FaultPlan};
use std::collections::HashMap;
use std::sync::Arc;

pub use super::reference::RecordedRun;

impl RecordedRun {
    /// Record `reference` (normally the oracle) over the golden's regimes: the stepper runs it as
    /// the live reference over the golden's tokens and keeps every full capture.
    pub fn record(
        golden: &Golden,
        reference: &mut dyn Backend,
    ) -> Result<RecordedRun, SessionError> {
        let config = model_of(golden)?.0;
        let inputs = regime_inputs(golden)?;
        let tokens = TokensReference {
            label: golden.source.display().to_string(),
            config: config.clone(),
            regimes: inputs
                .iter()
                .map(|(name, ids, _)| (name.clone(), RegimeTokens::Given(ids.clone())))
                .collect(),
        };
        let mut regimes: Vec<RecordedRegime> = inputs
            .into_iter()
            .map(|(name, ids, start_pos)| RecordedRegime {
                name,
                start_pos,
                ids,
                captures: HashMap::new(),
            })
            .collect();
        let mut stepper = Stepper::new(
            Arc::new(tokens),
            vec![Box::new(reference)],
            CheckOptions::default(),
        )?;
        while let Some(o) = stepper.next_step()? {
            let Some(regime) = regimes.get_mut(o.regime_index) else {
                continue;
            };
            for r in &o.results {
                if let Some(c) = r.capture_of(0) {
                    regime.captures.insert(c.name.clone(), c);
                }
            }
        }
        Ok(RecordedRun {
            regimes,
            config: Some(config),
            label: format!("{} (recorded reference run)", golden.source.display()),
        })
    }
}

/// Captures a step emits that are its *inputs* (the stream it was handed), not its outputs.
pub fn is_input_capture(name: &str) -> bool {
    name == "input_ids"
        || name.ends_with(".h_in")
        || name.ends_with(".pre_mix_in")
        || name.ends_with(".engram_in")
        || name.ends_with(".engram_hash_ids")
}

/// Error of one step.
#[derive(Debug, Clone)]
pub struct StepError {
    pub regime: String,
    pub step: Step,
    /// Worst error / Atlas-tolerance ratio of the step's input captures in the chained run.
    pub input_ratio: f64,
    /// Worst ratio of its outputs in the chained run (local + carried error).
    pub chained_ratio: f64,
    /// Worst ratio of its outputs with inputs and state reseeded from the reference.
    pub local_ratio: f64,
    /// The local error breaks the chosen policy (strict or Atlas).
    pub local_breaks: bool,
    /// `chained_ratio / input_ratio` (infinite when error appears from exact inputs, 0 when none).
    pub gain: f64,
    /// The first output capture that breaks its tolerance in the isolated run (else the worst),
    /// and where in it its worst element is.
    pub worst_capture: String,
    pub worst_location: String,
}

impl StepError {
    /// A step's `[input, chained, local]` ratios, whether the local error breaks the judge, and
    /// its worst local capture and element; the gain is chained over input error (infinite when
    /// error appears from exact inputs, 0 when there is none).
    pub(crate) fn measured(
        regime: String,
        step: Step,
        [input_ratio, chained_ratio, local_ratio]: [f64; 3],
        local_breaks: bool,
        worst_capture: String,
        worst_location: String,
    ) -> StepError {
        let gain = if input_ratio > 0.0 {
            chained_ratio / input_ratio
        } else if chained_ratio > 0.0 {
            f64::INFINITY
        } else {
            0.0
        };
        StepError {
            regime,
            step,
            input_ratio,
            chained_ratio,
            local_ratio,
            local_breaks,
            gain,
            worst_capture,
            worst_location,
        }
    }
}

/// The per-step table and the first local divergence.
#[derive(Debug, Clone)]
pub struct Localization {
    pub steps: Vec<StepError>,
    /// Index into `steps` of the first step whose local error breaks its tolerance.
    pub first_local_divergence: Option<usize>,
}

impl Localization {
    /// The table of `steps`, with the first step whose local error breaks its judge.
    pub(crate) fn of_steps(steps: Vec<StepError>) -> Localization {
        let first_local_divergence = steps.iter().position(|s| s.local_breaks);
        Localization {
            steps,
            first_local_divergence,
        }
    }
}

/// Name the axes of a capture's multi-index.
pub fn describe_location(name: &str, shape: &[usize], index: &[usize]) -> String {
    let base = name.rsplit('.').next().unwrap_or(name);
    let labels: &[&str] = match (base, shape.len()) {
        ("sa_q" | "sa_o", 4) => &["batch", "token", "head", "dim"],
        ("h_in" | "h_out" | "engram_in" | "engram_out", 4) => &["batch", "token", "copy", "dim"],
        ("attn_comb" | "ffn_comb", 4) => &["batch", "token", "residual copy", "output copy"],
        ("engram_embed", 4) => &["batch", "token", "hash column", "dim"],
        ("sa_kv", 3) => &["batch", "kv row", "dim"],
        ("sa_topk_idxs" | "topk_idxs" | "candidates", 3) => &["batch", "query", "slot"],
        ("moe_weights" | "moe_indices", 2) => &["token", "slot"],
        (_, 3) => &["batch", "token", "dim"],
        (_, 2) => &["token", "dim"],
        _ => &[],
    };
    index
        .iter()
        .enumerate()
        .filter(|(i, _)| labels.get(*i) != Some(&"batch"))
        .map(|(i, v)| format!("{} {v}", labels.get(i).copied().unwrap_or("axis")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which bar makes a step's local error a divergence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judge {
    /// bf16 captures bit-exact, f32 chains within `F32_TOL` (a test oracle with a planted fault).
    Strict,
    /// The Atlas bars.
    Atlas,
    /// The backend-against-oracle policy (`golden::policy::backend_policy_for_capture`): a GPU backend's
    /// ulp-level transcendental noise is not a divergence.
    Gpu,
}

impl Judge {
    fn from_strict(strict: bool) -> Judge {
        if strict {
            Judge::Strict
        } else {
            Judge::Atlas
        }
    }
}

/// `(ratio, breaks, worst multi-index)` of backend `side`'s tensor of a result against the
/// recorded reference's: the ratio is the worst error over the Atlas tolerance (finite and
/// comparable across steps, so the gain means something); `breaks` applies the chosen judge.
fn ratio_vs(
    reference: &RecordedRun,
    regime: usize,
    r: &CaptureResult,
    side: usize,
    judge: Judge,
) -> Option<(f64, bool, Vec<usize>)> {
    let rc = reference.get(regime, &r.name)?;
    let got = &r.per_backend.get(side)?.values;
    Some(ratio_against(&r.name, got, rc, judge))
}

/// `(ratio, breaks, worst multi-index)` of tensor `got` of capture `name` against the full
/// reference tensor `rc` (see [`ratio_vs`]); also what an imported dump's local error uses.
pub(crate) fn ratio_against(
    name: &str,
    got: &CaptureValues,
    rc: &crate::model::Capture,
    judge: Judge,
) -> (f64, bool, Vec<usize>) {
    let is_int = matches!(*got, CaptureValues::I64(_));
    let atlas = compare_full(
        got.into(),
        (&rc.values).into(),
        &rc.shape,
        &policy_for_capture(name, is_int),
    );
    let other = match judge {
        Judge::Atlas => None,
        Judge::Strict => Some(policy_against(Against::ReferenceStrict, name, is_int)),
        Judge::Gpu => Some(policy_against(Against::Backend, name, is_int)),
    };
    let breaks = match other {
        None => !atlas.pass,
        Some(p) => !compare_full(got.into(), (&rc.values).into(), &rc.shape, &p).pass,
    };
    // Integer captures are exact-or-not: their error/1e-12 ratio would swamp every float ratio,
    // so they count 1 when they differ (top-k triage explains them) and 0 otherwise.
    let raw = if is_int {
        if atlas.pass {
            0.0
        } else {
            1.0
        }
    } else if atlas.worst_ratio.is_nan() {
        f64::INFINITY
    } else {
        atlas.worst_ratio
    };
    // A capture that breaks the bar on its checksum, shape or a non-finite value, or only under the
    // strict policy, still shows a non-zero ratio.
    let ratio = if breaks && raw == 0.0 {
        f64::MIN_POSITIVE
    } else {
        raw
    };
    (ratio, breaks, atlas.max_abs_err_multi_index)
}

/// Localise the error of `test` against the reference run. `make_test` builds a fresh test
/// backend (it is run twice: chained and isolated).
pub fn localize(
    golden: &Golden,
    reference: &RecordedRun,
    make_test: &mut dyn FnMut() -> Result<Box<dyn Backend>, SessionError>,
    strict: bool,
) -> Result<Localization, SessionError> {
    localize_with(golden, reference, make_test, Judge::from_strict(strict))
}

/// A stepper of one backend against a recorded run.
fn stepper_on<'a>(
    reference: &SharedReference,
    backend: StepBackend<'a>,
    mode: Mode,
    pin_from: Option<usize>,
) -> Result<Stepper<'a>, SessionError> {
    let opts = CheckOptions {
        mode,
        pin_from,
        ..Default::default()
    };
    Stepper::new(reference.clone(), vec![backend], opts)
}

/// [`localize`] with an explicit judge (e.g. [`Judge::Gpu`] for a GPU test backend). Two
/// steppers run the test backend against the recorded run side by side, one chained and one
/// isolated (reseeded from the recording before every step).
pub fn localize_with(
    golden: &Golden,
    reference: &RecordedRun,
    make_test: &mut dyn FnMut() -> Result<Box<dyn Backend>, SessionError>,
    judge: Judge,
) -> Result<Localization, SessionError> {
    let _ = model_of(golden)?;
    let shared: SharedReference = Arc::new(reference.clone());
    let mut chained = stepper_on(&shared, make_test()?, Mode::Chained, None)?;
    let mut isolated = stepper_on(&shared, make_test()?, Mode::Isolated, None)?;
    localize_steppers(
        reference,
        &mut chained,
        &mut isolated,
        judge,
        &mut |_, i| {
            i.results
                .iter()
                .filter(|r| !is_input_capture(&r.name))
                .filter_map(|r| {
                    let (x, b, idx) = ratio_vs(reference, i.regime_index, r, 0, judge)?;
                    Some((r.name.clone(), r.shape.clone(), x, b, idx))
                })
                .collect()
        },
    )
}

/// One output capture's local error: name, shape, ratio, whether it breaks the judge, and the
/// multi-index of its worst element.
pub(crate) type LocalError = (String, Vec<usize>, f64, bool, Vec<usize>);

/// Drive a chained stepper (its first backend is the test backend, against `reference`) and a
/// local one side by side, step by step: the chained outcome gives each step's input and
/// chained error; `local_errors(chained, local)` gives its outputs' local errors, in execution
/// order. The capture a step names is the first that breaks its tolerance (where the error is
/// born), else the worst.
pub(crate) fn localize_steppers(
    reference: &RecordedRun,
    chained: &mut Stepper<'_>,
    local: &mut Stepper<'_>,
    judge: Judge,
    local_errors: &mut dyn FnMut(&StepOutcome, &StepOutcome) -> Vec<LocalError>,
) -> Result<Localization, SessionError> {
    let mut steps = Vec::new();
    let mut prev_chained = 0f64;
    let mut regime = None;
    while let Some(c) = chained.next_step()? {
        let Some(i) = local.next_step()? else {
            break;
        };
        if regime != Some(c.regime_index) {
            // A new forward: its first step is handed nothing but its tokens.
            regime = Some(c.regime_index);
            prev_chained = 0.0;
        }
        let ri = c.regime_index;
        let (mut input_ratio, mut chained_ratio, mut local_ratio) = (0f64, 0f64, 0f64);
        let (mut worst_capture, mut worst_location) = (String::new(), String::new());
        let mut has_inputs = false;
        for r in &c.results {
            if let Some((x, _, _)) = ratio_vs(reference, ri, r, 0, judge) {
                if is_input_capture(&r.name) {
                    has_inputs = true;
                    input_ratio = input_ratio.max(x);
                } else {
                    chained_ratio = chained_ratio.max(x);
                }
            }
        }
        if !has_inputs {
            // Final and the id steps emit no input capture: they are handed what the previous
            // step of this regime produced (nothing before the first step).
            input_ratio = prev_chained;
        }
        prev_chained = chained_ratio;
        let mut breaks = false;
        for (name, shape, x, b, idx) in local_errors(&c, &i) {
            if !breaks && (b || x > local_ratio) {
                worst_capture = name.clone();
                worst_location = describe_location(&name, &shape, &idx);
            }
            breaks |= b;
            local_ratio = local_ratio.max(x);
        }
        steps.push(StepError::measured(
            c.regime,
            c.step,
            [input_ratio, chained_ratio, local_ratio],
            breaks,
            worst_capture,
            worst_location,
        ));
    }
    Ok(Localization::of_steps(steps))
}

/// The localisation table as text (only steps with any error, plus the verdict line).
pub fn table(l: &Localization) -> String {
    let mut s = format!(
        "{:<10} {:<12} {:>10} {:>10} {:>10} {:>9}  worst local element\n",
        "regime", "step", "input", "chained", "local", "gain"
    );
    let shown = l.steps.iter().filter(|e| {
        e.input_ratio > 0.0 || e.chained_ratio > 0.0 || e.local_ratio > 0.0 || e.local_breaks
    });
    for e in shown {
        s.push_str(&format!(
            "{:<10} {:<12} {:>10.3e} {:>10.3e} {:>10.3e} {:>9.2}  {} {}\n",
            e.regime,
            e.step.to_string(),
            e.input_ratio,
            e.chained_ratio,
            e.local_ratio,
            e.gain,
            e.worst_capture,
            e.worst_location
        ));
    }
    match l.first_local_divergence.map(|i| &l.steps[i]) {
        Some(e) => s.push_str(&format!(
            "first local divergence: {} {} at {} ({}), local error {:.3e}x its Atlas tolerance\n",
            e.regime, e.step, e.worst_capture, e.worst_location, e.local_ratio
        )),
        None => s.push_str(
            "first local divergence: none (every step's local error is within tolerance)\n",
        ),
    }
    s
}

/// Counterfactual pinning: the test backend rerun chained with the reference's selections
/// (MoE routing, index top-k) pinned from one layer on, so a selection flip is told apart from
/// a compute bug downstream.
#[derive(Debug, Clone)]
pub struct Counterfactual {
    pub from_layer: usize,
    /// Worst chained ratio of the steps from `Block(from_layer)` on, without and with pinning.
    pub unpinned_ratio: f64,
    pub pinned_ratio: f64,
    /// Whether the test backend supports pinning at all.
    pub supported: bool,
    pub verdict: String,
}

/// The worst chained Atlas ratio of a fresh test backend's outputs from `Block(pin_from)` on
/// (and `Final` after it), pinned from `from_layer` when given; and whether it accepted the pins.
fn downstream_ratio(
    reference: &SharedReference,
    recorded: &RecordedRun,
    backend: StepBackend<'_>,
    from_layer: Option<usize>,
    pin_from: usize,
) -> Result<(f64, bool), SessionError> {
    let mut stepper = stepper_on(reference, backend, Mode::Chained, from_layer)?;
    let mut worst = 0f64;
    let mut downstream = false;
    let mut regime = usize::MAX;
    while let Some(o) = stepper.next_step()? {
        if o.regime_index != regime {
            regime = o.regime_index;
            downstream = false;
        }
        downstream |= matches!(o.step, Step::Block(l) if l >= pin_from)
            || (o.step == Step::Final && downstream);
        if !downstream {
            continue;
        }
        for r in o.results.iter().filter(|r| !is_input_capture(&r.name)) {
            if let Some((x, _, _)) = ratio_vs(recorded, o.regime_index, r, 0, Judge::Atlas) {
                worst = worst.max(x);
            }
        }
    }
    let supported = stepper.pin_supported().first().copied().unwrap_or(false);
    Ok((worst, supported))
}

/// Run the counterfactual from `from_layer`: fresh test backends without and with the reference
/// selections pinned for every layer from `from_layer` on.
pub fn counterfactual(
    golden: &Golden,
    reference: &RecordedRun,
    make_test: &mut dyn FnMut() -> Result<Box<dyn Backend>, SessionError>,
    from_layer: usize,
) -> Result<Counterfactual, SessionError> {
    let _ = model_of(golden)?;
    let shared: SharedReference = Arc::new(reference.clone());
    let (unpinned_ratio, _) = downstream_ratio(&shared, reference, make_test()?, None, from_layer)?;
    let (pinned_ratio, supported) = downstream_ratio(
        &shared,
        reference,
        make_test()?,
        Some(from_layer),
        from_layer,
    )?;
    let verdict = if !supported {
        "the test backend cannot pin selections".to_string()
    } else if unpinned_ratio <= 1.0 {
        format!("no divergence from layer {from_layer} on (worst {unpinned_ratio:.3}x tolerance)")
    } else if pinned_ratio <= 1.0 {
        format!(
            "selection flip: with the reference's selections pinned from layer {from_layer} the divergence ({unpinned_ratio:.3e}x) disappears ({pinned_ratio:.3}x)"
        )
    } else {
        format!(
            "compute: the divergence persists with the reference's selections pinned from layer {from_layer} ({unpinned_ratio:.3e}x -> {pinned_ratio:.3e}x)"
        )
    };
    Ok(Counterfactual {
        from_layer,
        unpinned_ratio,
        pinned_ratio,
        supported,
        verdict,
    })
}

/// What the app's localisation runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LocalizeRequest {
    /// Faults (`KIND@CAPTURE`, e.g. `bitflip@L2.attn_out`) to plant into a CPU oracle used as the
    /// test backend instead of the app's own; empty: the app's test backend.
    pub plant: Vec<String>,
    /// Judge local error with the Atlas bars instead of the strict (bf16 bit-exact) policies.
    pub atlas: bool,
    /// Also run the counterfactual with the reference's selections pinned from this layer on.
    pub pin_from: Option<usize>,
}

/// A finished localisation.
#[derive(Debug, Clone)]
pub struct LocalizeOutcome {
    /// What the reference and the test backend were (`cpu oracle`, `gpu`, `cpu oracle with …`).
    pub reference: String,
    pub test: String,
    pub localization: Localization,
    pub counterfactual: Option<Counterfactual>,
}

/// Localise the error of a test backend against the oracle over every regime of `golden` (the
/// app runs this on a worker thread). `factory` builds the app's backends, the oracle first:
/// without planted faults the test backend is the last one it builds (the GPU backend when the
/// app has one, else a second oracle, which localises nothing). With `request.plant`, reference
/// and test are CPU oracles on the golden's own weights, the test one with those faults.
pub fn run_localize(
    golden: &Golden,
    factory: &dyn Fn() -> Result<Vec<super::BoxedBackend>, SessionError>,
    request: &LocalizeRequest,
) -> Result<LocalizeOutcome, SessionError> {
    let faults: Vec<Fault> = request
        .plant
        .iter()
        .map(|p| {
            Fault::parse(p.trim()).ok_or_else(|| SessionError::BadFault {
                spec: p.to_string(),
            })
        })
        .collect::<Result<_, _>>()?;
    if let Some(layer) = request.pin_from {
        let n_layers = golden.fixture.n_layers;
        if layer >= n_layers {
            return Err(SessionError::PinLayer {
                layer,
                last: n_layers.saturating_sub(1),
            });
        }
    }
    let planted = !faults.is_empty();
    let (recorded, reference_name, other_backend) = if planted {
        let mut oracle = super::oracle_for(golden)?;
        let recorded = RecordedRun::record(golden, &mut oracle)?;
        (recorded, "cpu oracle".to_string(), false)
    } else {
        let mut backends = factory()?;
        let other = backends.len() > 1;
        let Some(first) = backends.first_mut() else {
            return Err(SessionError::NoBackend);
        };
        let name = first.name();
        let recorded = RecordedRun::record(golden, first.as_mut())?;
        (recorded, name, other)
    };
    // An oracle under test (planted faults, or the reference itself) is held to bit-exactness;
    // another backend (the GPU) to the backend policy against the oracle, as `check` and
    // `localize --backend gpu` do; "Atlas bars" overrides both.
    let judge = if request.atlas {
        Judge::Atlas
    } else if other_backend {
        Judge::Gpu
    } else {
        Judge::Strict
    };
    let mut test_name = String::new();
    let mut make = || -> Result<Box<dyn Backend>, SessionError> {
        if planted {
            let mut o = super::oracle_for(golden)?;
            o.faults = FaultPlan::new(faults.clone());
            test_name = format!("cpu oracle with {}", request.plant.join(", "));
            return Ok(Box::new(o));
        }
        let mut backends = factory()?;
        let Some(test) = backends.pop() else {
            return Err(SessionError::NoBackend);
        };
        test_name = if backends.is_empty() {
            format!("{} (the reference itself: no other backend)", test.name())
        } else {
            test.name()
        };
        Ok(test)
    };
    let localization = localize_with(golden, &recorded, &mut make, judge)?;
    let counterfactual = match request.pin_from {
        Some(layer) => Some(counterfactual(golden, &recorded, &mut make, layer)?),
        None => None,
    };
    Ok(LocalizeOutcome {
        reference: reference_name,
        test: test_name,
        localization,
        counterfactual,
    })
}
