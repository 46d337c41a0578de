//! [`GpuBackend`]: the V4.1 forward on the GPU, step for step with the oracle and under the same
//! capture names. State (window rings, compressor partial groups, compressed-KV and index-key
//! caches, the shared slots as pointers to a layer's cache, stream and pre-mix) lives on the
//! device across regimes; only the n-gram hash history and the slot *pointers* live on the host.
//! Captures are copied out at capture time into mappable buffers and read back at the end of
//! the step. One file per concern, side by side with `oracle/`: `state` (device state),
//! `weights` (the weight cache), `capture` (copy-out), `embed`, `block`, `attn`, `compress`,
//! `moe` and `head` (the final norm and LM head); isolated mode in `isolate`.

use super::exec::{Gpu, Tensor, WeightTensor};
use super::inject::Injection;
use super::profile::{Profile, TimingSource};
use super::provenance::CaptureProvenance;
use super::shaders::ShaderSet;
use super::{GpuContext, GpuError};
use crate::model::rope::{RopeTable, RopeTables};
use crate::model::{
    Backend, BackendError, Capture, EngramTables, LayerRange, LayerRangeError, ModelConfig, Pins,
    SeedTensors, Step, WeightSource,
};
use capture::Slot;
use state::{LayerState, Shared};
use std::collections::HashMap;
use std::sync::Arc;

mod attn;
mod block;
mod capture;
mod compress;
mod embed;
mod head;
mod isolate;
mod moe;
mod state;
mod weights;

/// How the GPU backend runs.
#[derive(Debug, Clone, Default)]
pub struct GpuOptions {
    /// Run the top-k selections (indexer, candidate blocks, MoE routing) on the host with the
    /// torch-CPU rule instead of the GPU's tie rule, as production ports do.
    pub reference_ties: bool,
    /// A fault to inject on purpose (self-test of the comparison).
    pub inject: Option<Injection>,
    /// With GPU selections: also run the torch-CPU rule on the same scores on the host and emit
    /// `tieflip.<capture>` audit captures (rows where the two rules chose differently), so a
    /// lockstep session can tell tie flips from real mismatches.
    pub tie_audit: bool,
}

/// Default byte budget of the device weight cache (1 GiB): every weight of the tiny model, one
/// real-dims layer's attention and shared expert; on a CPU adapter (lavapipe) device buffers
/// are process memory, so more would count against the run's memory bound.
pub const GPU_DEFAULT_WEIGHT_CACHE_BYTES: usize = 1 << 30;

/// Largest integer an f32 carries exactly; device index tensors stay below it.
const F32_EXACT_INT: usize = 1 << 24;

/// The GPU backend.
pub struct GpuBackend {
    gpu: Gpu,
    cfg: ModelConfig,
    weights: Arc<dyn WeightSource>,
    engram: Option<EngramTables>,
    ropes: RopeTables,
    opts: GpuOptions,
    wcache: HashMap<String, WeightTensor>,
    /// Cached names in insertion order with their f32 bytes (eviction order).
    wcache_order: std::collections::VecDeque<(String, usize)>,
    wcache_bytes: usize,
    /// Byte budget of the device weight cache (non-expert weights uploaded once and reused
    /// across steps). At real dims the non-expert weights of 40 layers are ~26 GB as f32, so the
    /// cache holds what fits and re-uploads the rest.
    pub weight_cache_budget_bytes: usize,
    layers: Vec<LayerState>,
    shared: Shared,
    hash_cache: Vec<i64>,
    ids: Vec<i64>,
    sp: usize,
    hashes: Vec<i64>,
    h: Option<Tensor>,
    pre_mix: Option<Tensor>,
    slots: Vec<Slot>,
    /// The previous regime's captures (for the stale-buffer injection).
    previous: HashMap<String, Vec<f32>>,
    current: HashMap<String, Vec<f32>>,
    /// Selections forced for the current forward (counterfactual pinning).
    pins: Pins,
    /// The reference's selections for the next step (near ties, `--reference-ties`).
    hints: crate::model::hints::SelectionHints,
    /// The dispatches behind each capture, per forward since creation (kernel provenance).
    provenance: Vec<HashMap<String, CaptureProvenance>>,
    /// Seconds spent in `run`, per step kind (reports).
    pub run_seconds: f64,
    /// The kernel families each step dispatched, over every forward so far.
    kernel_use: std::collections::BTreeMap<Step, std::collections::BTreeSet<&'static str>>,
    /// Blocks a forward runs (`--layers A-B`); `None` runs every block.
    layer_range: Option<LayerRange>,
    /// Largest row chunk of the LM head uploaded at once, in f32 bytes (see
    /// [`crate::model::weights::ROW_CHUNK_BYTES`]); tests lower it to exercise the chunking.
    pub head_chunk_bytes: usize,
}

fn berr(step: Step) -> impl Fn(GpuError) -> BackendError {
    move |e| BackendError::Invalid {
        step,
        msg: format!("gpu: {e}"),
    }
}

fn invalid(step: Step, msg: impl Into<String>) -> BackendError {
    BackendError::Invalid {
        step,
        msg: msg.into(),
    }
}

impl GpuBackend {
    /// A GPU backend on `ctx` with fresh (zero) state.
    pub fn new(
        ctx: GpuContext,
        cfg: ModelConfig,
        weights: Arc<dyn WeightSource>,
        engram: Option<EngramTables>,
        opts: GpuOptions,
    ) -> Result<GpuBackend, GpuError> {
        let defaults = super::settings::current();
        let mut gpu = match defaults.shaders {
            Some(set) => Gpu::with_shaders(ctx, set),
            None => Gpu::new(ctx),
        };
        if defaults.profile {
            gpu.start_profiling();
        }
        let ropes = RopeTables::new(&cfg);
        if cfg.hc_mult > super::hc::MAX_HC {
            return Err(super::guard(
                "hc_mix",
                format!("hc_mult {} > {}", cfg.hc_mult, super::hc::MAX_HC),
            ));
        }
        let layers = (0..cfg.n_layers)
            .map(|l| LayerState::fresh(&gpu, &cfg, l))
            .collect::<Result<Vec<_>, _>>()?;
        gpu.flush();
        Ok(GpuBackend {
            gpu,
            cfg,
            weights,
            engram,
            ropes,
            opts,
            wcache: HashMap::new(),
            wcache_order: std::collections::VecDeque::new(),
            wcache_bytes: 0,
            weight_cache_budget_bytes: GPU_DEFAULT_WEIGHT_CACHE_BYTES,
            layers,
            shared: Shared::default(),
            hash_cache: Vec::new(),
            ids: Vec::new(),
            sp: 0,
            hashes: Vec::new(),
            h: None,
            pre_mix: None,
            slots: Vec::new(),
            previous: HashMap::new(),
            current: HashMap::new(),
            pins: Pins::default(),
            hints: Default::default(),
            provenance: Vec::new(),
            run_seconds: 0.0,
            kernel_use: Default::default(),
            layer_range: None,
            head_chunk_bytes: crate::model::weights::ROW_CHUNK_BYTES,
        })
    }

    /// Restrict every forward to blocks `range` exactly as the oracle's `set_layer_range` does
    /// (same steps, same first-block input; see [`crate::model::layer_range`]), or run every
    /// block with `None`.
    pub fn set_layer_range(
        &mut self,
        range: Option<std::ops::RangeInclusive<usize>>,
    ) -> Result<(), LayerRangeError> {
        self.layer_range = LayerRange::optional(&self.cfg, range)?;
        Ok(())
    }

    /// Set a range already checked against this backend's config ([`LayerRange::new`] on the
    /// same [`ModelConfig`], as `session::builder::ModelParts::set_layers` does), or none.
    pub fn set_checked_layer_range(&mut self, range: Option<LayerRange>) {
        self.layer_range = range;
    }

    /// The blocks a forward runs, when restricted.
    pub fn layer_range(&self) -> Option<&LayerRange> {
        self.layer_range.as_ref()
    }

    /// The adapter this backend runs on.
    pub fn adapter(&self) -> &super::AdapterSummary {
        &self.gpu.ctx.adapter
    }

    /// Compile the kernels from `shaders` from now on (`--shaders DIR`, a live reload): the
    /// pipelines of the families whose source changed are rebuilt on next use, the rest kept.
    /// Returns the changed families. Persistent state is untouched; the caller reruns.
    pub fn set_shaders(&mut self, shaders: Arc<ShaderSet>) -> Vec<&'static str> {
        self.gpu.set_shaders(shaders)
    }

    /// The shader set the kernels are compiled from.
    pub fn shaders(&self) -> &Arc<ShaderSet> {
        self.gpu.shaders()
    }

    /// The dispatches that produced capture `name` of the current forward, and for each of its
    /// elements the kernel, workgroup and invocation that wrote it.
    pub fn provenance(&self, name: &str) -> Option<&CaptureProvenance> {
        self.provenance.last().and_then(|m| m.get(name))
    }

    /// [`GpuBackend::provenance`] in forward `forward` (0 = the first `begin` since creation).
    pub fn provenance_in(&self, forward: usize, name: &str) -> Option<&CaptureProvenance> {
        self.provenance.get(forward).and_then(|m| m.get(name))
    }

    /// The kernel families `step` dispatched in the forwards run so far.
    pub fn kernels_of(&self, step: Step) -> Vec<&'static str> {
        self.kernel_use
            .get(&step)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The first step, in forward order, that dispatched one of `families` in the forwards run
    /// so far: a re-check after an edit of those kernels can keep every result before it.
    /// `None` when no step used them (or nothing has run yet).
    pub fn first_step_using(&self, families: &[&str]) -> Option<Step> {
        self.steps().into_iter().find(|s| {
            self.kernel_use
                .get(s)
                .is_some_and(|used| used.iter().any(|f| families.contains(f)))
        })
    }

    /// Time every dispatch from now on (`check --profile`).
    pub fn start_profiling(&mut self) {
        self.gpu.start_profiling();
    }

    /// [`GpuBackend::start_profiling`] preferring `source` (the wall clock on request).
    pub fn start_profiling_with(&mut self, source: TimingSource) {
        self.gpu.start_profiling_with(source);
    }

    /// The per-dispatch times so far, when profiling.
    pub fn profile(&mut self) -> Option<Profile> {
        self.gpu.profile()
    }

    /// Why the device was lost, once it has been (every later step fails with
    /// [`GpuError::DeviceLost`]).
    pub fn device_lost(&self) -> Option<String> {
        self.gpu.ctx.health.lost()
    }

    /// Kernel dispatches so far.
    pub fn dispatch_count(&self) -> u64 {
        self.gpu.dispatch_count
    }

    pub(super) fn s(&self) -> usize {
        self.ids.len()
    }

    pub(super) fn rope_of(&self, l: usize) -> &RopeTable {
        self.ropes.for_layer(&self.cfg, l)
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> String {
        "gpu".into()
    }

    fn begin(&mut self, ids: &[i64], start_pos: usize) -> Result<(), BackendError> {
        self.cfg.check_forward(ids.len(), start_pos)?;
        if !self.current.is_empty() {
            self.previous = std::mem::take(&mut self.current);
        }
        self.ids = ids.to_vec();
        self.sp = start_pos;
        self.provenance.push(HashMap::new());
        self.gpu.clear_provenance();
        self.hashes.clear();
        self.h = None;
        self.pre_mix = None;
        // Pins hold for one forward; `pin` after `begin` sets them.
        self.pins = Pins::default();
        self.hints = Default::default();
        Ok(())
    }

    fn steps(&self) -> Vec<Step> {
        crate::model::layer_range::steps_for(&self.cfg, self.layer_range.as_ref())
    }

    fn run(&mut self, step: Step, sink: &mut Vec<Capture>) -> Result<(), BackendError> {
        if let Some(r) = &self.layer_range {
            r.check_step(step)
                .map_err(|e| invalid(step, e.to_string()))?;
        }
        let t0 = std::time::Instant::now();
        self.slots.clear();
        self.gpu.set_profile_step(&step.to_string());
        let before = self.gpu.family_dispatches.clone();
        let r = match step {
            Step::EngramHash => self.step_engram_hash(step),
            Step::Embed => self.step_embed(step),
            Step::Engram(l) => self.step_engram(step, l),
            Step::Block(l) if l < self.cfg.n_layers => self.step_block(step, l),
            Step::Block(l) => Err(invalid(step, format!("layer {l} does not exist"))),
            Step::Final => self.step_final(step),
        };
        let r = r.and_then(|()| self.finish(step, sink));
        // Hints hold for the one step they were given for.
        self.hints = Default::default();
        self.run_seconds += t0.elapsed().as_secs_f64();
        let used = self.kernel_use.entry(step).or_default();
        for (fam, n) in &self.gpu.family_dispatches {
            if before.get(fam) != Some(n) {
                used.insert(fam);
            }
        }
        r
    }

    fn pin(&mut self, pins: &Pins) -> Result<bool, BackendError> {
        self.pins = pins.clone();
        Ok(true)
    }

    /// Taken only under `reference_ties`, where the routing is chosen on the host.
    fn hint(&mut self, hints: &crate::model::hints::SelectionHints) -> Result<bool, BackendError> {
        if !self.opts.reference_ties {
            return Ok(false);
        }
        self.hints = hints.clone();
        Ok(true)
    }

    fn seed(
        &mut self,
        step: Step,
        reference: &dyn SeedTensors,
    ) -> Result<Vec<String>, BackendError> {
        self.seed_step(step, reference)
    }
}
