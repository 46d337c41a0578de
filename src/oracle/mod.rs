//! The CPU oracle: DeepSeek-V4.1's forward as a step-wise backend, rounding exactly where the
//! reference rounds (spec §6-§15), with state persisting across regimes.

pub mod attn;
mod entry;
pub mod faults;
pub mod gemm;
pub mod hc;
mod head;
mod isolate;
mod linear;
pub mod moe;
pub mod ops;
pub mod state;

use crate::model::rope::{RopeTable, RopeTables};
use crate::model::{
    Backend, BackendError, Capture, CaptureDtype, EngramTables, LayerRange, LayerRangeError,
    ModelConfig, SeedTensors, Step, WeightSource,
};
use crate::num::bf16_round;
use ops::{mean_sq, rmsnorm, rsqrt, sigmoid};
use state::{LayerState, PersistentState, RowCache, SharedSlots};
use std::sync::Arc;

pub use crate::model::Pins;

/// The CPU reference backend.
pub struct Oracle {
    cfg: ModelConfig,
    weights: Arc<dyn WeightSource>,
    engram: Option<EngramTables>,
    ropes: RopeTables,
    state: PersistentState,
    /// Current regime.
    ids: Vec<i64>,
    sp: usize,
    hashes: Vec<i64>,
    h: Vec<f32>,
    pre_mix: Vec<f32>,
    /// Pinned selections for this regime (empty unless pinning).
    pub pins: Pins,
    /// Faults planted on purpose (self-test, localisation tests); empty in normal use.
    pub faults: faults::FaultPlan,
    /// Emit diagnostic captures (`diag.*`: the scores each top-k ran on) for triage.
    pub diagnostics: bool,
    /// Diagnostic tensors of the current step (index scores) waiting to be emitted.
    pending_diag: Vec<Capture>,
    /// Blocks a forward runs (`--layers A-B`); `None` runs every block.
    layer_range: Option<LayerRange>,
    /// Largest row chunk of the LM head fetched at once, in f32 bytes (see
    /// [`crate::model::weights::ROW_CHUNK_BYTES`]); tests lower it to exercise the chunking.
    pub head_chunk_bytes: usize,
}

fn invalid(step: Step, msg: impl Into<String>) -> BackendError {
    BackendError::Invalid {
        step,
        msg: msg.into(),
    }
}

impl Oracle {
    /// A fresh oracle (empty caches) over `weights`.
    pub fn new(
        cfg: ModelConfig,
        weights: Arc<dyn WeightSource>,
        engram: Option<EngramTables>,
    ) -> Oracle {
        let ropes = RopeTables::new(&cfg);
        let state = Self::fresh_state(&cfg);
        Oracle {
            cfg,
            weights,
            engram,
            ropes,
            state,
            ids: Vec::new(),
            sp: 0,
            hashes: Vec::new(),
            h: Vec::new(),
            pre_mix: Vec::new(),
            pins: Pins::default(),
            faults: faults::FaultPlan::default(),
            diagnostics: false,
            pending_diag: Vec::new(),
            layer_range: None,
            head_chunk_bytes: crate::model::weights::ROW_CHUNK_BYTES,
        }
    }

    /// Restrict every forward to blocks `range` (then `Final` on the last one's output; see
    /// [`crate::model::layer_range`] for what the first block is handed), or run every block
    /// with `None`. Refused when a layer of the range reads a shared slot published before it.
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

    fn fresh_state(cfg: &ModelConfig) -> PersistentState {
        let layers = (0..cfg.n_layers)
            .map(|l| {
                let r = cfg.compress_ratios[l];
                let pooled = cfg.kv_source_layers.contains(&l) && r > 1;
                LayerState {
                    win: vec![0.0; cfg.window_size * cfg.head_dim],
                    kv_state: if pooled {
                        vec![0.0; r * cfg.head_dim]
                    } else {
                        Vec::new()
                    },
                    score_state: if pooled {
                        vec![f32::NEG_INFINITY; r * cfg.head_dim]
                    } else {
                        Vec::new()
                    },
                    compress_kv: RowCache::new(cfg.head_dim),
                    k_cache: RowCache::new(cfg.index_head_dim),
                }
            })
            .collect();
        PersistentState {
            layers,
            shared: SharedSlots::default(),
            hash_cache: Vec::new(),
        }
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Drop all persistent state (a new sequence).
    pub fn reset(&mut self) {
        self.state = Self::fresh_state(&self.cfg);
    }

    /// The persistent state (for inspection and tests).
    pub fn state(&self) -> &PersistentState {
        &self.state
    }

    fn s(&self) -> usize {
        self.ids.len()
    }

    fn w(&self, step: Step, name: &str, shape: &[usize]) -> Result<Arc<Vec<f32>>, BackendError> {
        self.weights
            .expect(name, shape)
            .map_err(|source| BackendError::Weight { step, source })
    }

    fn rope(&self, l: usize) -> &RopeTable {
        self.ropes.for_layer(&self.cfg, l)
    }

    fn step_block(
        &mut self,
        step: Step,
        l: usize,
        out: &mut Vec<Capture>,
    ) -> Result<(), BackendError> {
        let cfg = self.cfg.clone();
        let (s, d, hc) = (self.s(), cfg.dim, cfg.hc_mult);
        if self.h.len() != s * hc * d {
            return Err(invalid(
                step,
                "the stream is not initialised (run Embed first)",
            ));
        }
        let p = format!("layers.{l}");
        let cap = |n: &str| format!("L{l}.{n}");
        let mut taken = std::mem::take(&mut self.h);
        self.put_f32(
            out,
            cap("h_in"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &mut taken,
        );
        self.h = taken;
        let mut taken = std::mem::take(&mut self.pre_mix);
        self.put_f32(
            out,
            cap("pre_mix_in"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &mut taken,
        );
        self.pre_mix = taken;
        let mix = cfg.mix_hc();
        let hc_fn = |me: &Self, site: &str| -> Result<_, BackendError> {
            Ok((
                me.w(step, &format!("{p}.hc_{site}_fn"), &[mix, hc * d])?,
                me.w(step, &format!("{p}.hc_{site}_scale"), &[3])?,
                me.w(step, &format!("{p}.hc_{site}_base"), &[mix])?,
            ))
        };
        let (afn, ascale, abase) = hc_fn(self, "attn")?;
        let mut am = hc::hc_mixes(
            &self.h,
            hc,
            d,
            &afn,
            &ascale,
            &abase,
            cfg.norm_eps,
            cfg.hc_eps,
            cfg.hc_sinkhorn_iters,
        );
        self.put_f32(
            out,
            cap("attn_pre"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &mut am.pre,
        );
        self.put_f32(
            out,
            cap("attn_post"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &mut am.post,
        );
        self.put_f32(
            out,
            cap("attn_comb"),
            vec![1, s, hc, hc],
            CaptureDtype::F32,
            &mut am.comb,
        );
        let attn_norm = self.w(step, &format!("{p}.attn_norm.weight"), &[d])?;
        let mut a_in = rmsnorm(
            &hc::hc_pre(&self.h, &self.pre_mix, hc, d),
            &attn_norm,
            cfg.norm_eps,
        );
        self.put_f32(
            out,
            cap("attn_in"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &mut a_in,
        );
        let mut a_out = self.attention(step, l, &a_in, out)?;
        self.put_f32(
            out,
            cap("attn_out"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &mut a_out,
        );
        let h1 = hc::hc_post(&a_out, &self.h, &am.post, &am.comb, hc, d);
        let (ffn_fn, fscale, fbase) = hc_fn(self, "ffn")?;
        let mut fm = hc::hc_mixes(
            &h1,
            hc,
            d,
            &ffn_fn,
            &fscale,
            &fbase,
            cfg.norm_eps,
            cfg.hc_eps,
            cfg.hc_sinkhorn_iters,
        );
        self.put_f32(
            out,
            cap("ffn_pre"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &mut fm.pre,
        );
        self.put_f32(
            out,
            cap("ffn_post"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &mut fm.post,
        );
        self.put_f32(
            out,
            cap("ffn_comb"),
            vec![1, s, hc, hc],
            CaptureDtype::F32,
            &mut fm.comb,
        );
        let ffn_norm = self.w(step, &format!("{p}.ffn_norm.weight"), &[d])?;
        let mut f_in = rmsnorm(&hc::hc_pre(&h1, &am.pre, hc, d), &ffn_norm, cfg.norm_eps);
        self.put_f32(
            out,
            cap("ffn_in"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &mut f_in,
        );
        let mut f_out = self.moe(step, l, &f_in, out)?;
        self.put_f32(
            out,
            cap("ffn_out"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &mut f_out,
        );
        let mut h2 = hc::hc_post(&f_out, &h1, &fm.post, &fm.comb, hc, d);
        self.put_f32(
            out,
            cap("h_out"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &mut h2,
        );
        self.put_f32(
            out,
            cap("pre_mix_out"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &mut fm.pre,
        );
        self.h = h2;
        self.pre_mix = fm.pre;
        if cfg.is_shared_capture_layer(l) {
            self.capture_shared(l, out);
        }
        out.append(&mut self.pending_diag);
        Ok(())
    }

    fn capture_shared(&self, l: usize, out: &mut Vec<Capture>) {
        let s = self.s();
        let ratio = self.cfg.compress_ratios[l].max(1);
        let used = (self.sp + s) / ratio;
        let sh = &self.state.shared;
        if let Some(owner) = sh.compress_kv {
            let c = &self.state.layers[owner].compress_kv;
            out.push(Capture::f32(
                format!("shared.L{l}.compress_kv"),
                vec![1, used, c.width],
                CaptureDtype::Bf16,
                c.head(used),
            ));
        }
        if let Some(owner) = sh.index_k {
            let c = &self.state.layers[owner].k_cache;
            out.push(Capture::f32(
                format!("shared.L{l}.index_k"),
                vec![1, used, c.width],
                CaptureDtype::Bf16,
                c.head(used),
            ));
        }
        if let Some((rows, k, v)) = &sh.topk_idxs {
            out.push(Capture::int(
                format!("shared.L{l}.topk_idxs"),
                vec![1, *rows, *k],
                v.clone(),
            ));
        }
        if let Some((rows, w, m)) = &sh.candidates {
            out.push(Capture::int(
                format!("shared.L{l}.candidates"),
                vec![1, *rows, *w],
                m.iter().map(|&b| b as i64).collect(),
            ));
        }
    }

    fn moe(
        &mut self,
        step: Step,
        l: usize,
        x: &[f32],
        out: &mut Vec<Capture>,
    ) -> Result<Vec<f32>, BackendError> {
        let cfg = &self.cfg;
        let (d, e, k, inter) = (
            cfg.dim,
            cfg.n_routed_experts,
            cfg.n_activated_experts,
            cfg.moe_inter_dim,
        );
        let s = x.len() / d;
        let p = format!("layers.{l}.ffn");
        let gate_w = self.w(step, &format!("{p}.gate.weight"), &[e, d])?;
        let bias = self.w(step, &format!("{p}.gate.bias"), &[e])?;
        let scores = moe::gate_scores(cfg, x, &gate_w);
        let pinned = self
            .pins
            .moe_indices
            .get(&l)
            .filter(|v| v.len() == s * k)
            .map(|v| v.as_slice());
        let tie_fault = self.faults.structural(
            faults::FaultKind::TieOrder,
            &format!("L{l}.moe_indices"),
            self.sp,
        );
        let mut routing = moe::route(cfg, &scores, &bias, pinned, tie_fault);
        if self.diagnostics {
            out.push(Capture::f32(
                format!("diag.L{l}.gate_biased"),
                vec![s, e],
                CaptureDtype::F32,
                moe::biased_scores(cfg, &scores, &bias),
            ));
        }
        self.put_f32(
            out,
            format!("L{l}.moe_weights"),
            vec![s, k],
            CaptureDtype::F32,
            &mut routing.weights,
        );
        self.put_int(
            out,
            format!("L{l}.moe_indices"),
            vec![s, k],
            &mut routing.indices,
        );
        let ws = self.weights.clone();
        let mut y = vec![0f32; s * d];
        for ex in 0..e {
            let mut rows = Vec::new();
            let mut wts = Vec::new();
            for t in 0..s {
                for j in 0..k {
                    if routing.indices[t * k + j] == ex as i64 {
                        rows.push(t);
                        wts.push(routing.weights[t * k + j]);
                    }
                }
            }
            if rows.is_empty() {
                continue;
            }
            let xe: Vec<f32> = rows
                .iter()
                .flat_map(|&t| x[t * d..(t + 1) * d].to_vec())
                .collect();
            let ep = format!("{p}.experts.{ex}");
            let w1 = linear::linear(&*ws, step, &format!("{ep}.w1.weight"), [inter, d])?;
            let w2 = linear::linear(&*ws, step, &format!("{ep}.w2.weight"), [d, inter])?;
            let w3 = linear::linear(&*ws, step, &format!("{ep}.w3.weight"), [inter, d])?;
            let ye = moe::expert_rows(cfg, &xe, w1.rows(), w2.rows(), w3.rows(), Some(&wts));
            for (r, &t) in rows.iter().enumerate() {
                for i in 0..d {
                    y[t * d + i] += ye[r * d + i];
                }
            }
        }
        let sp = format!("{p}.shared_experts");
        let w1 = linear::linear(&*ws, step, &format!("{sp}.w1.weight"), [inter, d])?;
        let w2 = linear::linear(&*ws, step, &format!("{sp}.w2.weight"), [d, inter])?;
        let w3 = linear::linear(&*ws, step, &format!("{sp}.w3.weight"), [inter, d])?;
        let ys = moe::expert_rows(cfg, x, w1.rows(), w2.rows(), w3.rows(), None);
        Ok(y.iter().zip(&ys).map(|(a, b)| bf16_round(a + b)).collect())
    }
}

impl Backend for Oracle {
    fn name(&self) -> String {
        "cpu".into()
    }

    fn begin(&mut self, ids: &[i64], start_pos: usize) -> Result<(), BackendError> {
        self.cfg.check_forward(ids.len(), start_pos)?;
        self.ids = ids.to_vec();
        self.sp = start_pos;
        self.hashes.clear();
        self.h.clear();
        self.pre_mix.clear();
        // Pins hold for one forward; `pin` after `begin` sets them.
        self.pins = Pins::default();
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
        match step {
            Step::EngramHash => self.step_engram_hash(step, sink),
            Step::Embed => self.step_embed(step, sink),
            Step::Engram(l) => self.step_engram(step, l, sink),
            Step::Block(l) if l < self.cfg.n_layers => self.step_block(step, l, sink),
            Step::Block(l) => Err(invalid(step, format!("layer {l} does not exist"))),
            Step::Final => self.step_final(step, sink),
        }
    }

    fn pin(&mut self, pins: &Pins) -> Result<bool, BackendError> {
        self.pins = pins.clone();
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
