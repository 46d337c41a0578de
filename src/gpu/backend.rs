//! [`GpuBackend`]: the V4.1 forward on the GPU, step for step with the oracle and under the same
//! capture names. State (window rings, compressor partial groups, compressed-KV and index-key
//! caches, the shared slots as pointers to a layer's cache, stream and pre-mix) lives on the
//! device across regimes; only the n-gram hash history and the slot *pointers* live on the host.
//! Captures are copied out at capture time into mappable buffers and read back at the end of
//! the step.

use super::attn::{idx_concat, ring_write, sparse_attn, window_idx};
use super::compress::{self, Causal};
use super::exec::{Gpu, Pending, Tensor, WeightTensor};
use super::gemm::{gemm_into, linear, XView};
use super::hc::{hc_mixes, hc_post, hc_pre, MixConsts, Mixes};
use super::inject::{Injection, InjectionKind};
use super::quant::{quant, QuantMode};
use super::rope::{rope, Positions};
use super::rows::{
    add_round, bitflip, drop_first, expand, gather_rows, rmsnorm, scale_round, scatter_add,
};
use super::{engram, moe, GpuContext, GpuError};
use crate::model::rope::{RopeTable, RopeTables};
use crate::model::sparse::{index_topk_rows, select_candidate_blocks, visible_lens};
use crate::model::{
    Backend, BackendError, Capture, CaptureDtype, EngramTables, ModelConfig, Pins, SeedTensors,
    Step, WeightSource,
};
use crate::num::{torch_cpu_topk_order, torch_cpu_topk_set};
use std::collections::HashMap;
use std::sync::Arc;

mod isolate;

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

/// Largest integer an f32 carries exactly; device index tensors stay below it.
const F32_EXACT_INT: usize = 1 << 24;

/// A growable cache of fixed-width rows on the device (unwritten rows read as zero).
struct RowCache {
    width: usize,
    cap_rows: usize,
    t: Option<Tensor>,
}

impl RowCache {
    fn new(width: usize) -> RowCache {
        RowCache {
            width,
            cap_rows: 0,
            t: None,
        }
    }

    fn ensure(&mut self, gpu: &mut Gpu, rows: usize) -> Result<&Tensor, GpuError> {
        if self.t.is_none() || self.cap_rows < rows {
            let cap = rows.max(2 * self.cap_rows).max(1);
            let t = gpu.zeros("row cache", cap * self.width)?;
            if let Some(old) = &self.t {
                gpu.copy(old, 0, &t, 0, self.cap_rows * self.width)?;
            }
            self.t = Some(t);
            self.cap_rows = cap;
        }
        self.t
            .as_ref()
            .ok_or_else(|| super::guard("row cache", "unallocated"))
    }

    fn write(&mut self, gpu: &mut Gpu, start: usize, rows: &Tensor) -> Result<(), GpuError> {
        let n = rows.len / self.width.max(1);
        let t = self.ensure(gpu, start + n)?.clone();
        gpu.copy(rows, 0, &t, start * self.width, n * self.width)
    }
}

struct LayerState {
    win: Tensor,
    kv_state: Option<Tensor>,
    score_state: Option<Tensor>,
    compress_kv: RowCache,
    k_cache: RowCache,
}

#[derive(Default)]
struct Shared {
    compress_kv: Option<usize>,
    index_k: Option<usize>,
    topk_idxs: Option<(usize, usize, Tensor)>,
    candidates: Option<(usize, usize, Tensor)>,
}

enum Slot {
    Host(Capture),
    Device {
        name: String,
        shape: Vec<usize>,
        dtype: CaptureDtype,
        pending: Pending,
    },
}

/// The GPU backend.
pub struct GpuBackend {
    gpu: Gpu,
    cfg: ModelConfig,
    weights: Arc<dyn WeightSource>,
    engram: Option<EngramTables>,
    ropes: RopeTables,
    opts: GpuOptions,
    wcache: HashMap<String, WeightTensor>,
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
    /// Seconds spent in `run`, per step kind (reports).
    pub run_seconds: f64,
}

fn berr(step: Step) -> impl Fn(GpuError) -> BackendError {
    move |e| BackendError::Invalid {
        step: step.to_string(),
        msg: format!("gpu: {e}"),
    }
}

fn invalid(step: Step, msg: impl Into<String>) -> BackendError {
    BackendError::Invalid {
        step: step.to_string(),
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
        let mut gpu = Gpu::new(ctx);
        let ropes = RopeTables::new(&cfg);
        if cfg.hc_mult > super::hc::MAX_HC {
            return Err(super::guard(
                "hc_mix",
                format!("hc_mult {} > {}", cfg.hc_mult, super::hc::MAX_HC),
            ));
        }
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for l in 0..cfg.n_layers {
            let r = cfg.compress_ratios[l];
            let pooled = cfg.kv_source_layers.contains(&l) && r > 1;
            let hd = cfg.head_dim;
            layers.push(LayerState {
                win: gpu.zeros("window ring", cfg.window_size * hd)?,
                kv_state: if pooled {
                    Some(gpu.zeros("kv_state", r * hd)?)
                } else {
                    None
                },
                score_state: if pooled {
                    Some(gpu.upload("score_state", &vec![f32::NEG_INFINITY; r * hd])?)
                } else {
                    None
                },
                compress_kv: RowCache::new(hd),
                k_cache: RowCache::new(cfg.index_head_dim),
            });
        }
        gpu.flush();
        Ok(GpuBackend {
            gpu,
            cfg,
            weights,
            engram,
            ropes,
            opts,
            wcache: HashMap::new(),
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
            run_seconds: 0.0,
        })
    }

    /// The adapter this backend runs on.
    pub fn adapter(&self) -> &super::AdapterSummary {
        &self.gpu.ctx.adapter
    }

    /// Kernel dispatches so far.
    pub fn dispatch_count(&self) -> u64 {
        self.gpu.dispatch_count
    }

    fn s(&self) -> usize {
        self.ids.len()
    }

    fn rope_of(&self, l: usize) -> &RopeTable {
        self.ropes.for_layer(&self.cfg, l)
    }

    fn host_w(
        &self,
        step: Step,
        name: &str,
        shape: &[usize],
    ) -> Result<Arc<Vec<f32>>, BackendError> {
        self.weights
            .expect(name, shape)
            .map_err(|source| BackendError::Weight {
                step: step.to_string(),
                source,
            })
    }

    /// A weight `[shape[0], rest]` on the device (cached; chunked above the binding limit).
    fn w(&mut self, step: Step, name: &str, shape: &[usize]) -> Result<WeightTensor, BackendError> {
        if let Some(w) = self.wcache.get(name) {
            return Ok(w.clone());
        }
        let data = self.host_w(step, name, shape)?;
        let rows = shape.first().copied().unwrap_or(1);
        let cols: usize = shape.iter().skip(1).product::<usize>().max(1);
        let (rows, cols) = if shape.len() == 1 {
            (1, rows)
        } else {
            (rows, cols)
        };
        let t = self
            .gpu
            .upload_weight(name, &data, rows, cols)
            .map_err(berr(step))?;
        self.wcache.insert(name.to_string(), t.clone());
        Ok(t)
    }

    /// An uncached weight (routed experts: used once per step, then released).
    fn w_once(
        &mut self,
        step: Step,
        name: &str,
        shape: &[usize],
    ) -> Result<WeightTensor, BackendError> {
        let data = self.host_w(step, name, shape)?;
        self.gpu
            .upload_weight(name, &data, shape[0], shape[1])
            .map_err(berr(step))
    }

    /// A small weight as one tensor.
    fn v(&mut self, step: Step, name: &str, shape: &[usize]) -> Result<Tensor, BackendError> {
        let w = self.w(step, name, shape)?;
        w.single()
            .cloned()
            .ok_or_else(|| invalid(step, format!("{name} does not fit one binding")))
    }

    fn inject_is(&self, kind: InjectionKind, name: &str) -> bool {
        self.opts
            .inject
            .as_ref()
            .is_some_and(|i| i.kind == kind && i.capture == name)
    }

    /// Apply a capture-level injection to what the producing kernel wrote.
    fn perturb(
        &mut self,
        step: Step,
        name: &str,
        t: &Tensor,
        off: usize,
        n: usize,
        int: bool,
    ) -> Result<(), BackendError> {
        let Some(inj) = self.opts.inject.clone() else {
            return Ok(());
        };
        if inj.capture != name || n == 0 {
            return Ok(());
        }
        match inj.kind {
            InjectionKind::BitFlip => {
                // Floats: the top exponent bit; exact-integer f32s: the lowest exponent bit
                // (doubles or halves the index).
                let mask = if int { 1 << 23 } else { 1 << 30 };
                bitflip(&mut self.gpu, t, off, mask).map_err(berr(step))
            }
            InjectionKind::DroppedWorkgroup => {
                drop_first(&mut self.gpu, t, off, n).map_err(berr(step))
            }
            InjectionKind::StaleBuffer => {
                let stale = self
                    .previous
                    .get(name)
                    .filter(|v| v.len() == n)
                    .cloned()
                    .unwrap_or_else(|| vec![0.0; n]);
                self.gpu.write(t, off, &stale).map_err(berr(step))
            }
            InjectionKind::WindowOffByOne | InjectionKind::RopeSign => Ok(()),
        }
    }

    /// Capture `n` values of `t` from `off` now (after any injection at this capture).
    #[allow(clippy::too_many_arguments)]
    fn cap(
        &mut self,
        step: Step,
        name: String,
        shape: Vec<usize>,
        dtype: CaptureDtype,
        t: &Tensor,
        off: usize,
    ) -> Result<(), BackendError> {
        let n: usize = shape.iter().product();
        self.perturb(step, &name, t, off, n, dtype == CaptureDtype::Int)?;
        let pending = self.gpu.capture(t, off, n).map_err(berr(step))?;
        self.slots.push(Slot::Device {
            name,
            shape,
            dtype,
            pending,
        });
        Ok(())
    }

    fn cap_host(&mut self, c: Capture) {
        self.slots.push(Slot::Host(c));
    }

    fn finish(&mut self, step: Step, sink: &mut Vec<Capture>) -> Result<(), BackendError> {
        let slots = std::mem::take(&mut self.slots);
        let mut pendings = Vec::new();
        let mut metas = Vec::new();
        for s in slots {
            match s {
                Slot::Host(c) => metas.push(Ok(c)),
                Slot::Device {
                    name,
                    shape,
                    dtype,
                    pending,
                } => {
                    pendings.push(pending);
                    metas.push(Err((name, shape, dtype)));
                }
            }
        }
        let mut values = self.gpu.resolve(pendings).map_err(berr(step))?.into_iter();
        for m in metas {
            let c = match m {
                Ok(c) => c,
                Err((name, shape, dtype)) => {
                    let v = values.next().unwrap_or_default();
                    self.current.insert(name.clone(), v.clone());
                    if dtype == CaptureDtype::Int {
                        Capture::int(name, shape, v.iter().map(|&x| x as i64).collect())
                    } else {
                        Capture::f32(name, shape, dtype, v)
                    }
                }
            };
            sink.push(c);
        }
        Ok(())
    }

    fn step_engram_hash(&mut self, step: Step) -> Result<(), BackendError> {
        let s = self.s();
        self.cap_host(Capture::int("input_ids", vec![1, s], self.ids.clone()));
        let Some(ecfg) = self.cfg.engram.clone() else {
            self.hashes.clear();
            return Ok(());
        };
        let tables = self.engram.as_ref().ok_or_else(|| {
            invalid(
                step,
                "the config has engram layers but no engram tables were given",
            )
        })?;
        let n_eng = ecfg.layer_ids.len();
        let cols = ecfg.n_hash_cols();
        let hashes = tables
            .hash_chunk(&ecfg, &mut self.hash_cache, &self.ids, self.sp)
            .map_err(|e| invalid(step, e.0))?;
        self.cap_host(Capture::int(
            "engram_hashes",
            vec![1, s, n_eng, cols],
            hashes.clone(),
        ));
        self.hashes = hashes;
        Ok(())
    }

    fn step_embed(&mut self, step: Step) -> Result<(), BackendError> {
        let (s, d, hc) = (self.s(), self.cfg.dim, self.cfg.hc_mult);
        let e = crate::model::weights::embedding_rows(
            &self.cfg,
            self.weights.as_ref(),
            step,
            &self.ids,
        )?;
        let e = self.gpu.upload("embed", &e).map_err(berr(step))?;
        self.cap(
            step,
            "embed".into(),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &e,
            0,
        )?;
        let h = expand(&mut self.gpu, &e, s, hc).map_err(berr(step))?;
        let pm: Vec<f32> = (0..s * hc)
            .map(|i| if i % hc == 0 { 1.0 } else { 0.0 })
            .collect();
        self.pre_mix = Some(self.gpu.upload("pre_mix", &pm).map_err(berr(step))?);
        self.h = Some(h);
        Ok(())
    }

    fn stream(&self, step: Step) -> Result<Tensor, BackendError> {
        self.h
            .clone()
            .ok_or_else(|| invalid(step, "the stream is not initialised (run Embed first)"))
    }

    fn step_engram(&mut self, step: Step, l: usize) -> Result<(), BackendError> {
        let (s, d, hc) = (self.s(), self.cfg.dim, self.cfg.hc_mult);
        let ecfg = self
            .cfg
            .engram
            .clone()
            .ok_or_else(|| invalid(step, "no engram config"))?;
        let (li, ids) = ecfg
            .layer_hash_ids(l, s, &self.hashes)
            .map_err(|m| invalid(step, m))?;
        let cols = ecfg.n_hash_cols();
        let hd = ecfg.head_dim;
        let h = self.stream(step)?;
        self.cap(
            step,
            format!("L{l}.engram_in"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &h,
            0,
        )?;
        self.cap_host(Capture::int(
            format!("L{l}.engram_hash_ids"),
            vec![1, s, cols],
            ids.clone(),
        ));
        let (table, scales) = crate::model::engram::engram_table_rows(
            self.weights.as_ref(),
            step,
            &ecfg,
            l,
            li,
            &ids,
        )?;
        let pre = format!("layers.{l}.engram");
        let table = self.gpu.upload("engram rows", &table).map_err(berr(step))?;
        let scales = self
            .gpu
            .upload("engram scales", &scales)
            .map_err(berr(step))?;
        let emb = engram::engram_embed(&mut self.gpu, &table, &scales, s * cols, hd)
            .map_err(berr(step))?;
        self.cap(
            step,
            format!("L{l}.engram_embed"),
            vec![1, s, cols, hd],
            CaptureDtype::Bf16,
            &emb,
            0,
        )?;
        let kv_w = (hc + 1) * d;
        let wkv = self.w(step, &format!("{pre}.wkv.weight"), &[kv_w, cols * hd])?;
        let kv = linear(&mut self.gpu, &emb, s, &wkv, true).map_err(berr(step))?;
        self.cap(
            step,
            format!("L{l}.engram_kv"),
            vec![1, s, kv_w],
            CaptureDtype::Bf16,
            &kv,
            0,
        )?;
        let qw = self.v(step, &format!("{pre}.q_weight"), &[hc, d])?;
        let kw = self.v(step, &format!("{pre}.k_weight"), &[hc, d])?;
        let out = engram::engram_gate(
            &mut self.gpu,
            &h,
            &kv,
            &qw,
            &kw,
            s,
            hc,
            d,
            self.cfg.norm_eps,
        )
        .map_err(berr(step))?;
        self.cap(
            step,
            format!("L{l}.engram_out"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &out,
            0,
        )?;
        self.h = Some(out);
        Ok(())
    }

    fn mix_consts(&self) -> MixConsts {
        MixConsts {
            norm_eps: self.cfg.norm_eps,
            hc_eps: self.cfg.hc_eps,
            iters: self.cfg.hc_sinkhorn_iters,
        }
    }

    fn mixes(
        &mut self,
        step: Step,
        l: usize,
        site: &str,
        h: &Tensor,
    ) -> Result<Mixes, BackendError> {
        let (s, d, hc) = (self.s(), self.cfg.dim, self.cfg.hc_mult);
        let mix = self.cfg.mix_hc();
        let p = format!("layers.{l}");
        let fn_w = self.w(step, &format!("{p}.hc_{site}_fn"), &[mix, hc * d])?;
        let key = format!("{p}.hc_{site}_scale+base");
        let sb = match self.wcache.get(&key).and_then(|w| w.single().cloned()) {
            Some(t) => t,
            None => {
                let mut v = self
                    .host_w(step, &format!("{p}.hc_{site}_scale"), &[3])?
                    .to_vec();
                v.extend_from_slice(&self.host_w(step, &format!("{p}.hc_{site}_base"), &[mix])?);
                let w = self
                    .gpu
                    .upload_weight(&key, &v, 1, v.len())
                    .map_err(berr(step))?;
                self.wcache.insert(key, w.clone());
                w.single()
                    .cloned()
                    .ok_or_else(|| invalid(step, "scale/base chunked"))?
            }
        };
        let c = self.mix_consts();
        let m = hc_mixes(&mut self.gpu, h, s, hc, d, &fn_w, &sb, c).map_err(berr(step))?;
        let cap = |n: &str| format!("L{l}.{site}_{n}");
        self.cap(
            step,
            cap("pre"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &m.t,
            m.pre_off(),
        )?;
        self.cap(
            step,
            cap("post"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &m.t,
            m.post_off(),
        )?;
        self.cap(
            step,
            cap("comb"),
            vec![1, s, hc, hc],
            CaptureDtype::F32,
            &m.t,
            m.comb_off(),
        )?;
        Ok(m)
    }

    fn step_block(&mut self, step: Step, l: usize) -> Result<(), BackendError> {
        let (s, d, hc) = (self.s(), self.cfg.dim, self.cfg.hc_mult);
        let h = self.stream(step)?;
        if h.len != s * hc * d {
            return Err(invalid(
                step,
                "the stream is not initialised (run Embed first)",
            ));
        }
        let pre_mix = self
            .pre_mix
            .clone()
            .ok_or_else(|| invalid(step, "no pre-mix"))?;
        let p = format!("layers.{l}");
        let cap = |n: &str| format!("L{l}.{n}");
        self.cap(
            step,
            cap("h_in"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &h,
            0,
        )?;
        self.cap(
            step,
            cap("pre_mix_in"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &pre_mix,
            0,
        )?;
        let am = self.mixes(step, l, "attn", &h)?;
        let attn_norm = self.v(step, &format!("{p}.attn_norm.weight"), &[d])?;
        let eps = self.cfg.norm_eps;
        let collapsed = hc_pre(&mut self.gpu, &h, &pre_mix, 0, s, hc, d).map_err(berr(step))?;
        let a_in = rmsnorm(&mut self.gpu, &collapsed, s, &attn_norm, eps).map_err(berr(step))?;
        self.cap(
            step,
            cap("attn_in"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &a_in,
            0,
        )?;
        let a_out = self.attention(step, l, &a_in)?;
        self.cap(
            step,
            cap("attn_out"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &a_out,
            0,
        )?;
        let h1 = hc_post(&mut self.gpu, &a_out, &h, &am, d).map_err(berr(step))?;
        let fm = self.mixes(step, l, "ffn", &h1)?;
        let ffn_norm = self.v(step, &format!("{p}.ffn_norm.weight"), &[d])?;
        let collapsed =
            hc_pre(&mut self.gpu, &h1, &am.t, am.pre_off(), s, hc, d).map_err(berr(step))?;
        let f_in = rmsnorm(&mut self.gpu, &collapsed, s, &ffn_norm, eps).map_err(berr(step))?;
        self.cap(
            step,
            cap("ffn_in"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &f_in,
            0,
        )?;
        let f_out = self.moe(step, l, &f_in)?;
        self.cap(
            step,
            cap("ffn_out"),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &f_out,
            0,
        )?;
        let h2 = hc_post(&mut self.gpu, &f_out, &h1, &fm, d).map_err(berr(step))?;
        self.cap(
            step,
            cap("h_out"),
            vec![1, s, hc, d],
            CaptureDtype::Bf16,
            &h2,
            0,
        )?;
        let next_pre = self
            .gpu
            .slice("pre_mix", &fm.t, fm.pre_off(), s * hc)
            .map_err(berr(step))?;
        self.cap(
            step,
            cap("pre_mix_out"),
            vec![1, s, hc],
            CaptureDtype::F32,
            &next_pre,
            0,
        )?;
        self.h = Some(h2);
        self.pre_mix = Some(next_pre);
        if self.cfg.is_shared_capture_layer(l) {
            self.capture_shared(step, l)?;
        }
        Ok(())
    }

    fn capture_shared(&mut self, step: Step, l: usize) -> Result<(), BackendError> {
        let s = self.s();
        let ratio = self.cfg.compress_ratios[l].max(1);
        let used = (self.sp + s) / ratio;
        if let Some(owner) = self.shared.compress_kv {
            let c = &mut self.layers[owner].compress_kv;
            let w = c.width;
            let t = c.ensure(&mut self.gpu, used).map_err(berr(step))?.clone();
            self.cap(
                step,
                format!("shared.L{l}.compress_kv"),
                vec![1, used, w],
                CaptureDtype::Bf16,
                &t,
                0,
            )?;
        }
        if let Some(owner) = self.shared.index_k {
            let c = &mut self.layers[owner].k_cache;
            let w = c.width;
            let t = c.ensure(&mut self.gpu, used).map_err(berr(step))?.clone();
            self.cap(
                step,
                format!("shared.L{l}.index_k"),
                vec![1, used, w],
                CaptureDtype::Bf16,
                &t,
                0,
            )?;
        }
        if let Some((rows, k, t)) = self
            .shared
            .topk_idxs
            .as_ref()
            .map(|(r, k, t)| (*r, *k, t.clone()))
        {
            self.cap(
                step,
                format!("shared.L{l}.topk_idxs"),
                vec![1, rows, k],
                CaptureDtype::Int,
                &t,
                0,
            )?;
        }
        if let Some((rows, w, t)) = self
            .shared
            .candidates
            .as_ref()
            .map(|(r, w, t)| (*r, *w, t.clone()))
        {
            self.cap(
                step,
                format!("shared.L{l}.candidates"),
                vec![1, rows, w],
                CaptureDtype::Int,
                &t,
                0,
            )?;
        }
        Ok(())
    }

    fn attention(&mut self, step: Step, l: usize, x: &Tensor) -> Result<Tensor, BackendError> {
        let cfg = self.cfg.clone();
        let (s, d, nh, hd) = (self.s(), cfg.dim, cfg.n_heads, cfg.head_dim);
        let sp = self.sp;
        let p = format!("layers.{l}.attn");
        let role = cfg.role(l);
        let eps = cfg.norm_eps;
        let e = berr(step);
        let wq_a = self.w(step, &format!("{p}.wq_a.weight"), &[cfg.q_lora_rank, d])?;
        let q_norm = self.v(step, &format!("{p}.q_norm.weight"), &[cfg.q_lora_rank])?;
        let qa = linear(&mut self.gpu, x, s, &wq_a, true).map_err(&e)?;
        let qr = rmsnorm(&mut self.gpu, &qa, s, &q_norm, eps).map_err(&e)?;
        let wq_b = self.w(
            step,
            &format!("{p}.wq_b.weight"),
            &[nh * hd, cfg.q_lora_rank],
        )?;
        let q = linear(&mut self.gpu, &qr, s, &wq_b, true).map_err(&e)?;
        let wrong_sign = self.inject_is(InjectionKind::RopeSign, &format!("L{l}.sa_q"));
        let table = self.rope_of(l).clone();
        let per_token = Positions::per_token(sp, nh);
        rope(&mut self.gpu, &table, &q, s * nh, hd, per_token, wrong_sign).map_err(&e)?;
        self.cap(
            step,
            format!("L{l}.sa_q"),
            vec![1, s, nh, hd],
            CaptureDtype::Bf16,
            &q,
            0,
        )?;
        let wkv = self.w(step, &format!("{p}.wkv.weight"), &[hd, d])?;
        let kv_norm = self.v(step, &format!("{p}.kv_norm.weight"), &[hd])?;
        let kv0 = linear(&mut self.gpu, x, s, &wkv, true).map_err(&e)?;
        let kv = rmsnorm(&mut self.gpu, &kv0, s, &kv_norm, eps).map_err(&e)?;
        let tok = Positions::per_token(sp, 1);
        rope(&mut self.gpu, &table, &kv, s, hd, tok, false).map_err(&e)?;
        quant(&mut self.gpu, &kv, QuantMode::Fp8Block32).map_err(&e)?;
        let win = cfg.window_size;
        let ring = self.layers[l].win.clone();
        ring_write(&mut self.gpu, &kv, &ring, s, sp, win, hd).map_err(&e)?;
        let window_kv = if sp == 0 { kv } else { ring };
        let ww = if sp == 0 { s.min(win) } else { win };
        let offset = window_kv.len / hd;
        let (ckv, cw, cidx) = if role.ratio > 0 {
            let (ckv, cw, cidx) = self.compress_branch(step, l, x, &qr, offset)?;
            (Some(ckv), cw, cidx)
        } else {
            (None, 0, None)
        };
        let n_rows = offset + ckv.as_ref().map_or(0, |t| t.len / hd);
        if n_rows >= F32_EXACT_INT {
            return Err(invalid(
                step,
                "too many attention rows for exact f32 indices",
            ));
        }
        let kv_all = self.gpu.zeros("sa_kv", n_rows * hd).map_err(&e)?;
        self.gpu
            .copy(&window_kv, 0, &kv_all, 0, offset * hd)
            .map_err(&e)?;
        if let Some(c) = &ckv {
            self.gpu
                .copy(c, 0, &kv_all, offset * hd, c.len)
                .map_err(&e)?;
        }
        let w = ww + cw;
        let idx = self.gpu.zeros("sa_topk_idxs", s * w).map_err(&e)?;
        let off_by_one =
            self.inject_is(InjectionKind::WindowOffByOne, &format!("L{l}.sa_topk_idxs"));
        window_idx(&mut self.gpu, &idx, s, sp, win, ww, w, off_by_one).map_err(&e)?;
        if let Some(c) = &cidx {
            idx_concat(&mut self.gpu, c, &idx, s, ww, cw).map_err(&e)?;
        }
        self.cap(
            step,
            format!("L{l}.sa_kv"),
            vec![1, n_rows, hd],
            CaptureDtype::Bf16,
            &kv_all,
            0,
        )?;
        self.cap(
            step,
            format!("L{l}.sa_topk_idxs"),
            vec![1, s, w],
            CaptureDtype::Int,
            &idx,
            0,
        )?;
        let sink = self.v(step, &format!("{p}.attn_sink"), &[nh])?;
        let scale = (hd as f64).powf(-0.5) as f32;
        let o = sparse_attn(&mut self.gpu, &q, &kv_all, &sink, &idx, s, nh, hd, w, scale)
            .map_err(&e)?;
        self.cap(
            step,
            format!("L{l}.sa_o"),
            vec![1, s, nh, hd],
            CaptureDtype::Bf16,
            &o,
            0,
        )?;
        rope(&mut self.gpu, &table, &o, s * nh, hd, per_token, true).map_err(&e)?;
        let g = cfg.o_groups;
        let gd = nh * hd / g;
        let olr = cfg.o_lora_rank;
        let wo_a = self.w(step, &format!("{p}.wo_a.weight"), &[g * olr, gd])?;
        let u = self.gpu.zeros("wo_a", s * g * olr).map_err(&e)?;
        for gi in 0..g {
            let xv = XView {
                m: s,
                k: gd,
                ldx: nh * hd,
                x_off: gi * gd,
            };
            gemm_into(
                &mut self.gpu,
                &o,
                xv,
                &wo_a,
                gi * olr,
                olr,
                &u,
                g * olr,
                gi * olr,
                true,
            )
            .map_err(&e)?;
        }
        let wo_b = self.w(step, &format!("{p}.wo_b.weight"), &[d, g * olr])?;
        linear(&mut self.gpu, &u, s, &wo_b, true).map_err(&e)
    }

    /// Returns the compressed rows `[compress_len, hd]`, the compressed index width and the
    /// `[s, width]` compressed indices (None when the width is 0).
    fn compress_branch(
        &mut self,
        step: Step,
        l: usize,
        x: &Tensor,
        qr: &Tensor,
        offset: usize,
    ) -> Result<(Tensor, usize, Option<Tensor>), BackendError> {
        let cfg = self.cfg.clone();
        let role = cfg.role(l);
        let (s, hd, sp) = (self.s(), cfg.head_dim, self.sp);
        let r = role.ratio;
        let end = sp + s;
        let compress_len = end / r;
        let e = berr(step);
        let mut latent = None;
        if role.kv_source {
            latent = self.compressor(step, l, x)?;
            self.shared.compress_kv = Some(l);
        }
        let (cw, cidx) = if !role.index_source {
            let (rows, k, t) = self
                .shared
                .topk_idxs
                .as_ref()
                .map(|(r, k, t)| (*r, *k, t.clone()))
                .ok_or_else(|| invalid(step, "no index source has published top-k indices yet"))?;
            if rows != s {
                return Err(invalid(
                    step,
                    format!("shared top-k has {rows} rows, the chunk has {s}"),
                ));
            }
            (k, Some(t))
        } else {
            let (k, t) = if compress_len == 0 {
                (0, None)
            } else {
                let (k, t) = self.indexer(step, l, x, qr, latent.as_ref(), offset)?;
                match self.pins.topk_for(l, s, k).map_err(|m| invalid(step, m))? {
                    Some(p) => {
                        let f: Vec<f32> = p.iter().map(|&i| i as f32).collect();
                        (k, Some(self.gpu.upload("pinned topk", &f).map_err(&e)?))
                    }
                    None => (k, Some(t)),
                }
            };
            let stored = match &t {
                Some(t) => t.clone(),
                None => self.gpu.zeros("topk (empty)", 0).map_err(&e)?,
            };
            self.shared.topk_idxs = Some((s, k, stored));
            (k, t)
        };
        if let Some((lat, ng)) = latent {
            let pos = Positions::compressed(sp, r);
            let table = self.rope_of(l).clone();
            rope(&mut self.gpu, &table, &lat, ng, hd, pos, false).map_err(&e)?;
            quant(&mut self.gpu, &lat, QuantMode::Fp4E4m3Block16).map_err(&e)?;
            self.layers[l]
                .compress_kv
                .write(&mut self.gpu, sp / r, &lat)
                .map_err(&e)?;
        }
        let owner = self
            .shared
            .compress_kv
            .ok_or_else(|| invalid(step, "no kv source has published a compressed cache yet"))?;
        let cache = self.layers[owner]
            .compress_kv
            .ensure(&mut self.gpu, compress_len)
            .map_err(&e)?
            .clone();
        let ckv = self
            .gpu
            .slice("compress_kv head", &cache, 0, compress_len * hd)
            .map_err(&e)?;
        Ok((ckv, cw, cidx.filter(|_| cw > 0)))
    }

    fn compressor(
        &mut self,
        step: Step,
        l: usize,
        x: &Tensor,
    ) -> Result<Option<(Tensor, usize)>, BackendError> {
        let cfg = self.cfg.clone();
        let (s, d, hd, sp) = (self.s(), cfg.dim, cfg.head_dim, self.sp);
        let r = cfg.compress_ratios[l];
        let p = format!("layers.{l}.attn.compressor");
        let e = berr(step);
        let norm = self.v(step, &format!("{p}.norm.weight"), &[hd])?;
        let wkv = self.w(step, &format!("{p}.wkv.weight"), &[hd, d])?;
        if r == 1 {
            let k0 = linear(&mut self.gpu, x, s, &wkv, true).map_err(&e)?;
            return Ok(Some((
                rmsnorm(&mut self.gpu, &k0, s, &norm, cfg.norm_eps).map_err(&e)?,
                s,
            )));
        }
        let wgate = self.w(step, &format!("{p}.wgate.weight"), &[hd, d])?;
        let kv = linear(&mut self.gpu, x, s, &wkv, false).map_err(&e)?;
        let score = linear(&mut self.gpu, x, s, &wgate, false).map_err(&e)?;
        let (kv_state, score_state) = match (&self.layers[l].kv_state, &self.layers[l].score_state)
        {
            (Some(a), Some(b)) => (a.clone(), b.clone()),
            _ => {
                return Err(invalid(
                    step,
                    "pooling compressor without partial-group state",
                ))
            }
        };
        let (pooled, groups) = if sp == 0 {
            let rem = s % r;
            let cut = s - rem;
            if rem > 0 {
                self.gpu
                    .copy(&kv, cut * hd, &kv_state, 0, rem * hd)
                    .map_err(&e)?;
                self.gpu
                    .copy(&score, cut * hd, &score_state, 0, rem * hd)
                    .map_err(&e)?;
            }
            if s < r {
                return Ok(None);
            }
            (
                compress::pool(&mut self.gpu, &kv, &score, cut / r, r, hd).map_err(&e)?,
                cut / r,
            )
        } else {
            let slot = sp % r;
            self.gpu
                .copy(&kv, 0, &kv_state, slot * hd, hd)
                .map_err(&e)?;
            self.gpu
                .copy(&score, 0, &score_state, slot * hd, hd)
                .map_err(&e)?;
            if (sp + 1) % r != 0 {
                return Ok(None);
            }
            (
                compress::pool(&mut self.gpu, &kv_state, &score_state, 1, r, hd).map_err(&e)?,
                1,
            )
        };
        Ok(Some((
            rmsnorm(&mut self.gpu, &pooled, groups, &norm, cfg.norm_eps).map_err(&e)?,
            groups,
        )))
    }

    fn indexer(
        &mut self,
        step: Step,
        l: usize,
        x: &Tensor,
        qr: &Tensor,
        latent: Option<&(Tensor, usize)>,
        offset: usize,
    ) -> Result<(usize, Tensor), BackendError> {
        let cfg = self.cfg.clone();
        let role = cfg.role(l);
        let (s, d, hd, sp) = (self.s(), cfg.dim, cfg.head_dim, self.sp);
        let (ih, ihd, r) = (cfg.index_n_heads, cfg.index_head_dim, role.ratio);
        let end = sp + s;
        let p = format!("layers.{l}.attn.indexer");
        let e = berr(step);
        let table = self.rope_of(l).clone();
        if role.kv_source {
            if let Some((lat, ng)) = latent {
                let wk = self.w(step, &format!("{p}.wk.weight"), &[ihd, hd])?;
                let k_norm = self.v(step, &format!("{p}.k_norm.weight"), &[ihd])?;
                let k0 = linear(&mut self.gpu, lat, *ng, &wk, true).map_err(&e)?;
                let k = rmsnorm(&mut self.gpu, &k0, *ng, &k_norm, cfg.norm_eps).map_err(&e)?;
                let pos = Positions::compressed(sp, r);
                rope(&mut self.gpu, &table, &k, *ng, ihd, pos, false).map_err(&e)?;
                quant(&mut self.gpu, &k, QuantMode::Fp4E8m0Block32).map_err(&e)?;
                self.layers[l]
                    .k_cache
                    .write(&mut self.gpu, sp / r, &k)
                    .map_err(&e)?;
                self.shared.index_k = Some(l);
            }
        }
        let wq_b = self.w(
            step,
            &format!("{p}.wq_b.weight"),
            &[ih * ihd, cfg.q_lora_rank],
        )?;
        let q = linear(&mut self.gpu, qr, s, &wq_b, true).map_err(&e)?;
        let per_token = Positions::per_token(sp, ih);
        rope(&mut self.gpu, &table, &q, s * ih, ihd, per_token, false).map_err(&e)?;
        quant(&mut self.gpu, &q, QuantMode::Fp4E8m0Block32).map_err(&e)?;
        let t_vis = end / r;
        let owner = self
            .shared
            .index_k
            .ok_or_else(|| invalid(step, "no index keys have been published yet"))?;
        if self.layers[owner].k_cache.width != ihd {
            return Err(invalid(
                step,
                "index key width does not match index_head_dim",
            ));
        }
        let keys = self.layers[owner]
            .k_cache
            .ensure(&mut self.gpu, t_vis)
            .map_err(&e)?
            .clone();
        let wp = self.w(step, &format!("{p}.weights_proj.weight"), &[ih, d])?;
        let wscale = ((ihd as f64).powf(-0.5) * (ih as f64).powf(-0.5)) as f32;
        let w0 = linear(&mut self.gpu, x, s, &wp, true).map_err(&e)?;
        let wts = scale_round(&mut self.gpu, &w0, wscale).map_err(&e)?;
        let causal = Causal {
            prefill: sp == 0,
            r,
        };
        let score =
            compress::index_scores(&mut self.gpu, &q, &keys, &wts, s, t_vis, ih, ihd, causal)
                .map_err(&e)?;
        let clen = visible_lens(s, sp, r, t_vis);
        if role.candidate_source {
            let mask = if self.opts.reference_ties {
                let sc = self.gpu.read_all(&score).map_err(&e)?;
                let m = select_candidate_blocks(
                    &sc,
                    t_vis,
                    &clen,
                    cfg.candidate_topk_blocks,
                    cfg.candidate_block_size,
                );
                let mf: Vec<f32> = m.iter().map(|&b| b as u8 as f32).collect();
                self.gpu.upload("candidates", &mf).map_err(&e)?
            } else {
                let m = compress::candidate_blocks(
                    &mut self.gpu,
                    &score,
                    s,
                    t_vis,
                    causal,
                    cfg.candidate_topk_blocks,
                    cfg.candidate_block_size,
                )
                .map_err(&e)?;
                if self.opts.tie_audit {
                    let sc = self.gpu.read_all(&score).map_err(&e)?;
                    let mine = self.gpu.read_all(&m).map_err(&e)?;
                    let host = select_candidate_blocks(
                        &sc,
                        t_vis,
                        &clen,
                        cfg.candidate_topk_blocks,
                        cfg.candidate_block_size,
                    );
                    let rows = (0..s)
                        .filter(|&t| {
                            (0..t_vis).any(|p| (mine[t * t_vis + p] != 0.0) != host[t * t_vis + p])
                        })
                        .count();
                    self.cap_host(Capture::int(
                        format!("tieflip.L{l}.candidates"),
                        vec![1],
                        vec![rows as i64],
                    ));
                }
                m
            };
            self.shared.candidates = Some((s, t_vis, mask));
        } else if role.candidate_consumer {
            let (rows, w, m) = self
                .shared
                .candidates
                .as_ref()
                .map(|(r, w, m)| (*r, *w, m.clone()))
                .ok_or_else(|| invalid(step, "no candidate mask has been published yet"))?;
            if rows != s || w != t_vis {
                return Err(invalid(
                    step,
                    format!("candidate mask [{rows}, {w}] does not match scores [{s}, {t_vis}]"),
                ));
            }
            compress::cand_mask_apply(&mut self.gpu, &score, &m, s, t_vis).map_err(&e)?;
        }
        let k = cfg.index_topk.min(t_vis);
        if t_vis + offset >= F32_EXACT_INT {
            return Err(invalid(
                step,
                "compressed positions beyond exact f32 indices",
            ));
        }
        let idx = if self.opts.reference_ties {
            let sc = self.gpu.read_all(&score).map_err(&e)?;
            let v: Vec<f32> = index_topk_rows(&sc, t_vis, &clen, k, offset, torch_cpu_topk_set)
                .into_iter()
                .map(|i| i as f32)
                .collect();
            self.gpu.upload("topk", &v).map_err(&e)?
        } else {
            let t =
                compress::topk(&mut self.gpu, &score, s, t_vis, k, offset, causal).map_err(&e)?;
            if self.opts.tie_audit {
                let sc = self.gpu.read_all(&score).map_err(&e)?;
                let mine = self.gpu.read_all(&t).map_err(&e)?;
                let host = index_topk_rows(&sc, t_vis, &clen, k, offset, torch_cpu_topk_set);
                let rows = (0..s)
                    .filter(|&tt| (0..k).any(|j| host[tt * k + j] as f32 != mine[tt * k + j]))
                    .count() as i64;
                self.cap_host(Capture::int(
                    format!("tieflip.L{l}.topk_idxs"),
                    vec![1],
                    vec![rows],
                ));
            }
            t
        };
        Ok((k, idx))
    }

    fn moe(&mut self, step: Step, l: usize, x: &Tensor) -> Result<Tensor, BackendError> {
        let cfg = self.cfg.clone();
        let (d, ne, k, inter) = (
            cfg.dim,
            cfg.n_routed_experts,
            cfg.n_activated_experts,
            cfg.moe_inter_dim,
        );
        let s = self.s();
        let p = format!("layers.{l}.ffn");
        let e = berr(step);
        let gate_w = self.w(step, &format!("{p}.gate.weight"), &[ne, d])?;
        let bias = self.v(step, &format!("{p}.gate.bias"), &[ne])?;
        let logits = linear(&mut self.gpu, x, s, &gate_w, false).map_err(&e)?;
        let scores = moe::gate_scores(&mut self.gpu, &cfg, &logits, s).map_err(&e)?;
        let pinned = self
            .pins
            .moe_indices
            .get(&l)
            .filter(|v| v.len() == s * k)
            .map(|v| v.iter().map(|&i| i as f32).collect::<Vec<f32>>());
        let given = if pinned.is_some() {
            pinned
        } else if self.opts.reference_ties {
            let sc = self.gpu.read_all(&scores).map_err(&e)?;
            let b = self.host_w(step, &format!("{p}.gate.bias"), &[ne])?;
            let mut ids = Vec::with_capacity(s * k);
            for t in 0..s {
                let biased: Vec<f32> = sc[t * ne..(t + 1) * ne]
                    .iter()
                    .zip(b.iter())
                    .map(|(a, b)| a + b)
                    .collect();
                ids.extend(
                    torch_cpu_topk_order(&biased, k)
                        .into_iter()
                        .map(|i| i as f32),
                );
            }
            Some(ids)
        } else {
            None
        };
        let routing =
            moe::route(&mut self.gpu, &cfg, &scores, &bias, s, given.as_deref()).map_err(&e)?;
        if self.opts.tie_audit && given.is_none() {
            let sc = self.gpu.read_all(&scores).map_err(&e)?;
            let mine = self.gpu.read(&routing, s * k, s * k).map_err(&e)?;
            let b = self.host_w(step, &format!("{p}.gate.bias"), &[ne])?;
            let mut rows = 0i64;
            for t in 0..s {
                let biased: Vec<f32> = sc[t * ne..(t + 1) * ne]
                    .iter()
                    .zip(b.iter())
                    .map(|(a, b)| a + b)
                    .collect();
                let host: Vec<f32> = torch_cpu_topk_order(&biased, k)
                    .into_iter()
                    .map(|i| i as f32)
                    .collect();
                rows += (host[..] != mine[t * k..(t + 1) * k]) as i64;
            }
            self.cap_host(Capture::int(
                format!("tieflip.L{l}.moe_indices"),
                vec![1],
                vec![rows],
            ));
        }
        self.cap(
            step,
            format!("L{l}.moe_weights"),
            vec![s, k],
            CaptureDtype::F32,
            &routing,
            0,
        )?;
        self.cap(
            step,
            format!("L{l}.moe_indices"),
            vec![s, k],
            CaptureDtype::Int,
            &routing,
            s * k,
        )?;
        // The host needs the routing to pick expert weights (as a real engine's dispatcher does).
        let ids = self.gpu.read(&routing, s * k, s * k).map_err(&e)?;
        let y = self.gpu.zeros("moe y", s * d).map_err(&e)?;
        for ex in 0..ne {
            let mut toks = Vec::new();
            let mut slots = Vec::new();
            for t in 0..s {
                for j in 0..k {
                    if ids[t * k + j] == ex as f32 {
                        toks.push(t as f32);
                        slots.push((t * k + j) as f32);
                    }
                }
            }
            if toks.is_empty() {
                continue;
            }
            let n = toks.len();
            let tok_t = self.gpu.upload("expert rows", &toks).map_err(&e)?;
            let slot_t = self.gpu.upload("expert slots", &slots).map_err(&e)?;
            let xe = gather_rows(&mut self.gpu, x, d, &tok_t).map_err(&e)?;
            let we = gather_rows(&mut self.gpu, &routing, 1, &slot_t).map_err(&e)?;
            let ep = format!("{p}.experts.{ex}");
            let w1 = self.w_once(step, &format!("{ep}.w1.weight"), &[inter, d])?;
            let w3 = self.w_once(step, &format!("{ep}.w3.weight"), &[inter, d])?;
            let w2 = self.w_once(step, &format!("{ep}.w2.weight"), &[d, inter])?;
            let g = linear(&mut self.gpu, &xe, n, &w1, true).map_err(&e)?;
            let u = linear(&mut self.gpu, &xe, n, &w3, true).map_err(&e)?;
            let a = moe::swiglu(&mut self.gpu, &cfg, &g, &u, Some(&we), n).map_err(&e)?;
            let ye = linear(&mut self.gpu, &a, n, &w2, true).map_err(&e)?;
            scatter_add(&mut self.gpu, &ye, d, &tok_t, &y).map_err(&e)?;
            // Release this expert's weights once its work is submitted (real dims: ~140 MB each).
            self.gpu.flush();
        }
        let sp = format!("{p}.shared_experts");
        let w1 = self.w(step, &format!("{sp}.w1.weight"), &[inter, d])?;
        let w3 = self.w(step, &format!("{sp}.w3.weight"), &[inter, d])?;
        let w2 = self.w(step, &format!("{sp}.w2.weight"), &[d, inter])?;
        let g = linear(&mut self.gpu, x, s, &w1, true).map_err(&e)?;
        let u = linear(&mut self.gpu, x, s, &w3, true).map_err(&e)?;
        let a = moe::swiglu(&mut self.gpu, &cfg, &g, &u, None, s).map_err(&e)?;
        let ys = linear(&mut self.gpu, &a, s, &w2, true).map_err(&e)?;
        add_round(&mut self.gpu, &y, &ys).map_err(&e)
    }

    fn step_final(&mut self, step: Step) -> Result<(), BackendError> {
        let (s, d, hc, v) = (
            self.s(),
            self.cfg.dim,
            self.cfg.hc_mult,
            self.cfg.vocab_size,
        );
        let h = self.stream(step)?;
        if h.len != s * hc * d {
            return Err(invalid(step, "the stream is not initialised"));
        }
        let pre_mix = self
            .pre_mix
            .clone()
            .ok_or_else(|| invalid(step, "no pre-mix"))?;
        let e = berr(step);
        let hf = hc_pre(&mut self.gpu, &h, &pre_mix, 0, s, hc, d).map_err(&e)?;
        self.cap(
            step,
            "h_final".into(),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &hf,
            0,
        )?;
        let norm = self.v(step, "norm.weight", &[d])?;
        let head_in = rmsnorm(&mut self.gpu, &hf, s, &norm, self.cfg.norm_eps).map_err(&e)?;
        self.cap(
            step,
            "head_in".into(),
            vec![1, s, d],
            CaptureDtype::Bf16,
            &head_in,
            0,
        )?;
        let head = self.w(step, "head.weight", &[v, d])?;
        let logits = linear(&mut self.gpu, &head_in, s, &head, false).map_err(&e)?;
        self.cap(
            step,
            "logits_full".into(),
            vec![1, s, v],
            CaptureDtype::F32,
            &logits,
            0,
        )?;
        Ok(())
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> String {
        "gpu".into()
    }

    fn begin(&mut self, ids: &[i64], start_pos: usize) -> Result<(), BackendError> {
        self.cfg
            .check_forward(ids.len(), start_pos)
            .map_err(|msg| invalid(Step::EngramHash, msg))?;
        if !self.current.is_empty() {
            self.previous = std::mem::take(&mut self.current);
        }
        self.ids = ids.to_vec();
        self.sp = start_pos;
        self.hashes.clear();
        self.h = None;
        self.pre_mix = None;
        // Pins hold for one forward; `pin` after `begin` sets them.
        self.pins = Pins::default();
        Ok(())
    }

    fn steps(&self) -> Vec<Step> {
        self.cfg.steps()
    }

    fn run(&mut self, step: Step, sink: &mut Vec<Capture>) -> Result<(), BackendError> {
        let t0 = std::time::Instant::now();
        self.slots.clear();
        let r = match step {
            Step::EngramHash => self.step_engram_hash(step),
            Step::Embed => self.step_embed(step),
            Step::Engram(l) => self.step_engram(step, l),
            Step::Block(l) if l < self.cfg.n_layers => self.step_block(step, l),
            Step::Block(l) => Err(invalid(step, format!("layer {l} does not exist"))),
            Step::Final => self.step_final(step),
        };
        let r = r.and_then(|()| self.finish(step, sink));
        self.run_seconds += t0.elapsed().as_secs_f64();
        r
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
