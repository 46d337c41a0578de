//! Localisation: where is the error *born*? For every step of a test backend this measures the
//! error it carries in (its input captures, chained run), the error of its outputs in the chained
//! run, and the error of its outputs when its inputs and state are reseeded from the reference
//! (isolated run): local error. The error gain is output over input error; the first step whose
//! local error breaks its tolerance is the first divergence, with its worst element located.
//! The reference is the oracle's full tensors (bit-exact with the golden), so this works on
//! sampled goldens too.

use super::{model_of, regime_inputs, SessionError};
use crate::golden::compare::{compare_full, Values};
use crate::golden::policy::{policy_for_capture, strict_policy_for_capture};
use crate::golden::Golden;
use crate::model::{Backend, Capture, CaptureValues, SeedTensors, Step};
use std::collections::HashMap;

/// The oracle's full captures of every regime of a golden: the reference for localisation.
pub struct RecordedRun {
    /// Per regime: name, start position and captures by name.
    pub regimes: Vec<(String, usize, HashMap<String, Capture>)>,
}

impl RecordedRun {
    /// Record `reference` (normally the oracle) over the golden's regimes.
    pub fn record(
        golden: &Golden,
        reference: &mut dyn Backend,
    ) -> Result<RecordedRun, SessionError> {
        let mut regimes = Vec::new();
        for (name, ids, start) in regime_inputs(golden)? {
            let berr = |source| SessionError::Backend {
                regime: name.clone(),
                source: Box::new(source),
            };
            reference.begin(&ids, start).map_err(berr)?;
            let mut caps = HashMap::new();
            for step in reference.steps() {
                let mut out = Vec::new();
                reference.run(step, &mut out).map_err(berr)?;
                for c in out {
                    caps.insert(c.name.clone(), c);
                }
            }
            regimes.push((name, start, caps));
        }
        Ok(RecordedRun { regimes })
    }

    fn seeds(&self, current: usize) -> RecordedSeeds<'_> {
        RecordedSeeds { run: self, current }
    }
}

/// Seeds from a recorded run, as seen from regime `current`.
pub struct RecordedSeeds<'a> {
    run: &'a RecordedRun,
    current: usize,
}

impl RecordedSeeds<'_> {
    fn get(&self, back: usize, name: &str) -> Option<&Capture> {
        self.run
            .regimes
            .get(self.current.checked_sub(back)?)?
            .2
            .get(name)
    }
}

impl SeedTensors for RecordedSeeds<'_> {
    fn earlier_regimes(&self) -> usize {
        self.current
    }
    fn start_pos(&self, back: usize) -> Option<usize> {
        Some(self.run.regimes.get(self.current.checked_sub(back)?)?.1)
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

/// Captures a step emits that are its *inputs* (the stream it was handed), not its outputs.
pub fn is_step_input(name: &str) -> bool {
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

/// The per-step table and the first local divergence.
#[derive(Debug, Clone)]
pub struct Localization {
    pub steps: Vec<StepError>,
    /// Index into `steps` of the first step whose local error breaks its tolerance.
    pub first_local_divergence: Option<usize>,
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
    /// The GPU policy against the oracle (`multi::gpu_policy_for_capture`): a GPU backend's
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

/// `(ratio, breaks, worst multi-index)` of a capture against the reference's full tensor: the
/// ratio is the worst error over the Atlas tolerance (finite and comparable across steps, so the
/// gain means something); `breaks` applies the chosen judge.
fn ratio_vs(
    reference: &HashMap<String, Capture>,
    c: &Capture,
    judge: Judge,
) -> Option<(f64, bool, Vec<usize>)> {
    let r = reference.get(&c.name)?;
    let is_int = matches!(c.values, CaptureValues::I64(_));
    fn v(x: &CaptureValues) -> Values<'_> {
        match x {
            CaptureValues::F32(v) => Values::F32(v),
            CaptureValues::I64(v) => Values::I64(v),
        }
    }
    let atlas = compare_full(
        v(&c.values),
        v(&r.values),
        &r.shape,
        &policy_for_capture(&c.name, is_int),
    );
    let other = match judge {
        Judge::Atlas => None,
        Judge::Strict => Some(strict_policy_for_capture(&c.name, is_int)),
        Judge::Gpu => Some(super::multi::gpu_policy_for_capture(&c.name, is_int)),
    };
    let breaks = match other {
        None => !atlas.pass,
        Some(p) => !compare_full(v(&c.values), v(&r.values), &r.shape, &p).pass,
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
    Some((ratio, breaks, atlas.max_abs_err_multi_index))
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

/// [`localize`] with an explicit judge (e.g. [`Judge::Gpu`] for a GPU test backend).
pub fn localize_with(
    golden: &Golden,
    reference: &RecordedRun,
    make_test: &mut dyn FnMut() -> Result<Box<dyn Backend>, SessionError>,
    judge: Judge,
) -> Result<Localization, SessionError> {
    let _ = model_of(golden)?;
    let mut chained = make_test()?;
    let mut isolated = make_test()?;
    let mut steps = Vec::new();
    for (ri, (regime, start, refcaps)) in reference.regimes.iter().enumerate() {
        let ids = match refcaps.get("input_ids").map(|c| &c.values) {
            Some(CaptureValues::I64(v)) => v.clone(),
            _ => continue,
        };
        let berr = |source| SessionError::Backend {
            regime: regime.clone(),
            source: Box::new(source),
        };
        chained.begin(&ids, *start).map_err(berr)?;
        isolated.begin(&ids, *start).map_err(berr)?;
        let seeds = reference.seeds(ri);
        let mut prev_chained = 0f64;
        for step in chained.steps() {
            let mut c_out = Vec::new();
            chained.run(step, &mut c_out).map_err(berr)?;
            isolated.seed(step, &seeds).map_err(berr)?;
            let mut i_out = Vec::new();
            isolated.run(step, &mut i_out).map_err(berr)?;
            let (mut input_ratio, mut chained_ratio, mut local_ratio) = (0f64, 0f64, 0f64);
            let (mut worst_capture, mut worst_location) = (String::new(), String::new());
            let mut has_inputs = false;
            for c in c_out.iter().filter(|c| !c.is_diagnostic()) {
                if let Some((r, _, _)) = ratio_vs(refcaps, c, judge) {
                    if is_step_input(&c.name) {
                        has_inputs = true;
                        input_ratio = input_ratio.max(r);
                    } else {
                        chained_ratio = chained_ratio.max(r);
                    }
                }
            }
            if !has_inputs {
                // Final and the id steps emit no input capture: they are handed what the previous
                // step of this regime produced (nothing before the first step).
                input_ratio = prev_chained;
            }
            prev_chained = chained_ratio;
            // The step's local error is its worst output; the capture named is the first one (in
            // execution order) that breaks its tolerance, where the error is born, else the worst.
            let mut breaks = false;
            for c in i_out
                .iter()
                .filter(|c| !c.is_diagnostic() && !is_step_input(&c.name))
            {
                if let Some((r, b, idx)) = ratio_vs(refcaps, c, judge) {
                    if !breaks && (b || r > local_ratio) {
                        worst_capture = c.name.clone();
                        worst_location = describe_location(&c.name, &c.shape, &idx);
                    }
                    breaks |= b;
                    local_ratio = local_ratio.max(r);
                }
            }
            let gain = if input_ratio > 0.0 {
                chained_ratio / input_ratio
            } else if chained_ratio > 0.0 {
                f64::INFINITY
            } else {
                0.0
            };
            steps.push(StepError {
                regime: regime.clone(),
                step,
                input_ratio,
                chained_ratio,
                local_ratio,
                local_breaks: breaks,
                gain,
                worst_capture,
                worst_location,
            });
        }
    }
    let first_local_divergence = steps.iter().position(|s| s.local_breaks);
    Ok(Localization {
        steps,
        first_local_divergence,
    })
}

/// The localisation table as text (only steps with any error, plus the verdict line).
pub fn table(l: &Localization) -> String {
    let mut s = format!(
        "{:<10} {:<12} {:>10} {:>10} {:>10} {:>9}  worst local element\n",
        "regime", "step", "input", "chained", "local", "gain"
    );
    for e in l.steps.iter().filter(|e| {
        e.input_ratio > 0.0 || e.chained_ratio > 0.0 || e.local_ratio > 0.0 || e.local_breaks
    }) {
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

fn pins_for(
    regime: &HashMap<String, Capture>,
    cfg: &crate::model::ModelConfig,
    from_layer: usize,
) -> crate::model::Pins {
    let mut pins = crate::model::Pins::default();
    for l in from_layer..cfg.n_layers {
        if let Some(CaptureValues::I64(v)) =
            regime.get(&format!("L{l}.moe_indices")).map(|c| &c.values)
        {
            pins.moe_indices.insert(l, v.clone());
        }
        if cfg.index_source_layers.contains(&l) {
            if let Some(CaptureValues::I64(v)) = regime
                .get(&format!("shared.L{l}.topk_idxs"))
                .map(|c| &c.values)
            {
                pins.topk_idxs.insert(l, v.clone());
            }
        }
    }
    pins
}

fn downstream_ratio(
    reference: &RecordedRun,
    backend: &mut dyn Backend,
    cfg: &crate::model::ModelConfig,
    from_layer: Option<usize>,
    pin_from: usize,
) -> Result<(f64, bool), SessionError> {
    let mut worst = 0f64;
    let mut supported = true;
    for (regime, start, refcaps) in &reference.regimes {
        let ids = match refcaps.get("input_ids").map(|c| &c.values) {
            Some(CaptureValues::I64(v)) => v.clone(),
            _ => continue,
        };
        let berr = |source| SessionError::Backend {
            regime: regime.clone(),
            source: Box::new(source),
        };
        backend.begin(&ids, *start).map_err(berr)?;
        if let Some(l) = from_layer {
            supported &= backend.pin(&pins_for(refcaps, cfg, l)).map_err(berr)?;
        }
        let mut downstream = false;
        for step in backend.steps() {
            downstream |= matches!(step, Step::Block(l) if l >= pin_from)
                || (step == Step::Final && downstream);
            let mut out = Vec::new();
            backend.run(step, &mut out).map_err(berr)?;
            if !downstream {
                continue;
            }
            for c in out
                .iter()
                .filter(|c| !c.is_diagnostic() && !is_step_input(&c.name))
            {
                if let Some((r, _, _)) = ratio_vs(refcaps, c, Judge::Atlas) {
                    worst = worst.max(r);
                }
            }
        }
    }
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
    let cfg = model_of(golden)?.0;
    let (unpinned_ratio, _) =
        downstream_ratio(reference, make_test()?.as_mut(), &cfg, None, from_layer)?;
    let (pinned_ratio, supported) = downstream_ratio(
        reference,
        make_test()?.as_mut(),
        &cfg,
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
