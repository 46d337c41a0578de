//! The executor: buffers, one explicit bind-group layout per kernel family, lazily built
//! pipelines, a command encoder that dispatches are recorded into, copies taken at capture time,
//! and read-backs. All device tensors are f32 arrays; integer tensors (indices, masks) are
//! carried as exact f32 integers (|v| < 2^24, checked where they are made).

mod family;
mod readback;
mod timing;

pub use family::{validate_family, Access, Family, FAMILIES};

use super::context::GpuContext;
use super::provenance::{CaptureProvenance, Dispatch, Ledger, WriteMap};
use super::shaders::{EntryInfo, ShaderSet};
use super::{guard, GpuError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use timing::Profiler;

/// A device tensor of `len` f32 values. Clones share the buffer and its `id`.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub buf: Arc<wgpu::Buffer>,
    pub len: usize,
    /// Unique per buffer for the life of the process (the provenance ledger's key).
    pub id: u64,
}

/// The next [`Tensor::id`].
static NEXT_TENSOR_ID: AtomicU64 = AtomicU64::new(1);

impl Tensor {
    /// Size in bytes of the values (not of the allocation, which is at least 4).
    pub fn bytes(&self) -> u64 {
        (self.len * 4) as u64
    }
}

/// A weight `[rows, cols]` split on row boundaries into chunks that each fit one storage
/// binding (lavapipe: 128 MiB), so real-dims tensors run on any adapter.
#[derive(Debug, Clone)]
pub struct WeightTensor {
    pub rows: usize,
    pub cols: usize,
    /// `(first row, row count, data)` per chunk.
    pub chunks: Vec<(usize, usize, Tensor)>,
    /// Whether some value has a nonzero low half in the GEMM's exact-product split (low 12
    /// mantissa bits set) or is not finite. False for bf16 weights, which lets the GEMM use its
    /// entry points without the low-half products (same bits). Set at upload; the chunks must
    /// not be overwritten with other values afterwards.
    pub low_halves: bool,
}

impl WeightTensor {
    /// The whole tensor when it is a single chunk.
    pub fn single(&self) -> Option<&Tensor> {
        match self.chunks.as_slice() {
            [(_, _, t)] => Some(t),
            _ => None,
        }
    }
}

/// A capture copy taken at capture time, resolved after the step's submission.
#[derive(Debug)]
pub struct Pending {
    staging: wgpu::Buffer,
    len: usize,
}

/// The executor over one context.
pub struct Gpu {
    pub ctx: GpuContext,
    /// The WGSL every pipeline is compiled from (embedded, or `--shaders DIR`).
    shaders: Arc<ShaderSet>,
    layouts: HashMap<&'static str, (wgpu::BindGroupLayout, wgpu::PipelineLayout)>,
    modules: HashMap<&'static str, wgpu::ShaderModule>,
    pipelines: HashMap<(&'static str, &'static str), wgpu::ComputePipeline>,
    encoder: Option<wgpu::CommandEncoder>,
    /// Dispatches recorded since the last submission (a big batch is submitted early).
    pending_dispatches: usize,
    /// Kernel dispatches since creation (reports).
    pub dispatch_count: u64,
    /// Dispatches since creation per kernel family (which steps use which kernels).
    pub family_dispatches: HashMap<&'static str, u64>,
    /// Largest chunk of a chunked weight, in bytes: the adapter's binding limit, or less when a
    /// test forces chunking on small tensors.
    pub max_chunk_bytes: u64,
    /// Who wrote each buffer since the regime began (kernel provenance); behind a lock so the
    /// `&self` uploads record too.
    ledger: Mutex<Ledger>,
    /// `(workgroup size, file, line)` per `(family, entry)` of the current shader set.
    entry_info: HashMap<(&'static str, &'static str), EntryInfo>,
    /// Per-dispatch timing, when profiling.
    profiler: Option<Profiler>,
}

/// Submit after this many recorded dispatches, so lavapipe never sees one enormous batch.
const MAX_DISPATCHES_PER_SUBMIT: usize = 256;

/// Workgroup size every 1-D/2-D kernel uses along x.
pub const WG: u32 = 64;

/// Largest workgroup count per dispatch dimension (WebGPU's default limit).
pub const MAX_GROUPS: u32 = 65535;

/// Workgroups for `n` lanes along x in groups of [`WG`].
pub fn groups_for(n: usize) -> u32 {
    n.div_ceil(WG as usize) as u32
}

/// `(x, y)` workgroup counts for a flat kernel that folds y into the index as
/// `gid.x + gid.y · 65535 · 64`.
pub fn flat_groups(n: usize) -> (u32, u32) {
    let g = n.div_ceil(WG as usize).max(1);
    let x = g.min(MAX_GROUPS as usize);
    let y = g.div_ceil(MAX_GROUPS as usize);
    (x as u32, y as u32)
}

impl Gpu {
    /// An executor on `ctx` with the embedded shaders.
    pub fn new(ctx: GpuContext) -> Gpu {
        Gpu::with_shaders(ctx, Arc::new(ShaderSet::embedded()))
    }

    /// An executor on `ctx` compiling its pipelines from `shaders` (validated by the caller:
    /// [`ShaderSet::from_dir`] validates).
    pub fn with_shaders(ctx: GpuContext, shaders: Arc<ShaderSet>) -> Gpu {
        let max_chunk_bytes = ctx.max_binding_bytes();
        Gpu {
            max_chunk_bytes,
            shaders,
            ledger: Mutex::new(Ledger::default()),
            entry_info: HashMap::new(),
            profiler: None,
            ctx,
            layouts: HashMap::new(),
            modules: HashMap::new(),
            pipelines: HashMap::new(),
            encoder: None,
            pending_dispatches: 0,
            dispatch_count: 0,
            family_dispatches: HashMap::new(),
        }
    }

    /// The shader set the pipelines come from.
    pub fn shaders(&self) -> &Arc<ShaderSet> {
        &self.shaders
    }

    /// Switch to `shaders`, dropping the modules and pipelines of the families whose source
    /// changed (the others are kept); returns those families.
    pub fn set_shaders(&mut self, shaders: Arc<ShaderSet>) -> Vec<&'static str> {
        let changed = shaders.changed_families(&self.shaders);
        for fam in &changed {
            self.modules.remove(fam);
            self.pipelines.retain(|(f, _), _| f != fam);
            self.entry_info.retain(|(f, _), _| f != fam);
        }
        self.shaders = shaders;
        changed
    }

    fn check_size(&self, what: &str, n: usize) -> Result<u64, GpuError> {
        let bytes = (n.max(1) * 4) as u64;
        let limit = self.ctx.max_binding_bytes();
        if bytes > limit {
            return Err(GpuError::TooLarge {
                what: what.to_string(),
                bytes,
                limit,
            });
        }
        Ok(bytes)
    }

    fn buffer(&self, what: &str, n: usize) -> Result<wgpu::Buffer, GpuError> {
        let size = self.check_size(what, n)?;
        Ok(self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size,
            // STORAGE: kernels read/write it; COPY_SRC: capture copies and read-backs;
            // COPY_DST: uploads and row copies into caches.
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }))
    }

    /// A zero-filled tensor (wgpu zero-initialises new buffers).
    pub fn zeros(&self, what: &str, n: usize) -> Result<Tensor, GpuError> {
        Ok(Tensor {
            buf: Arc::new(self.buffer(what, n)?),
            len: n,
            id: NEXT_TENSOR_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// A tensor holding `data`.
    pub fn upload(&self, what: &str, data: &[f32]) -> Result<Tensor, GpuError> {
        let t = self.zeros(what, data.len())?;
        if !data.is_empty() {
            self.ctx
                .queue
                .write_buffer(&t.buf, 0, bytemuck::cast_slice(data));
        }
        self.ledger().host(t.id, what, 0, data.len());
        Ok(t)
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Overwrite `data.len()` values of `t` starting at element `offset` (queue order: before
    /// the next submission's work, after the previous one's).
    pub fn write(&mut self, t: &Tensor, offset: usize, data: &[f32]) -> Result<(), GpuError> {
        self.write_labelled(t, offset, data, "host write")
    }

    /// [`Gpu::write`], named `what` in the provenance ledger.
    pub fn write_labelled(
        &mut self,
        t: &Tensor,
        offset: usize,
        data: &[f32],
        what: &str,
    ) -> Result<(), GpuError> {
        if offset + data.len() > t.len {
            return Err(guard(
                "write",
                format!("{}+{} > {}", offset, data.len(), t.len),
            ));
        }
        // Keep ordering with already recorded work: submit it first.
        self.flush();
        if !data.is_empty() {
            self.ctx
                .queue
                .write_buffer(&t.buf, (offset * 4) as u64, bytemuck::cast_slice(data));
            self.ledger().host(t.id, what, offset, data.len());
        }
        Ok(())
    }

    /// A weight `[rows, cols]` uploaded in chunks of whole rows that each fit one binding.
    pub fn upload_weight(
        &self,
        what: &str,
        data: &[f32],
        rows: usize,
        cols: usize,
    ) -> Result<WeightTensor, GpuError> {
        if rows * cols != data.len() || cols == 0 {
            return Err(guard(
                "upload_weight",
                format!("{what}: {} values for [{rows}, {cols}]", data.len()),
            ));
        }
        let max_rows =
            (self.max_chunk_bytes.min(self.ctx.max_binding_bytes()) / (cols as u64 * 4)) as usize;
        if max_rows == 0 {
            return Err(GpuError::TooLarge {
                what: format!("{what} (one row)"),
                bytes: cols as u64 * 4,
                limit: self.ctx.max_binding_bytes(),
            });
        }
        let mut chunks = Vec::new();
        let mut r0 = 0;
        while r0 < rows {
            let n = (rows - r0).min(max_rows);
            let t = self.upload(what, &data[r0 * cols..(r0 + n) * cols])?;
            chunks.push((r0, n, t));
            r0 += n;
        }
        let low_halves = data
            .iter()
            .any(|v| !v.is_finite() || v.to_bits() & 0xfff != 0);
        Ok(WeightTensor {
            rows,
            cols,
            chunks,
            low_halves,
        })
    }

    fn family_layout(
        &mut self,
        fam: &'static Family,
    ) -> &(wgpu::BindGroupLayout, wgpu::PipelineLayout) {
        let device = &self.ctx.device;
        self.layouts.entry(fam.name).or_insert_with(|| {
            let entries: Vec<wgpu::BindGroupLayoutEntry> = fam
                .bindings
                .iter()
                .enumerate()
                .map(|(i, a)| wgpu::BindGroupLayoutEntry {
                    binding: i as u32,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: match a {
                        Access::Uniform => wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Uniform,
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                        Access::Read | Access::ReadWrite => wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Storage {
                                read_only: *a == Access::Read,
                            },
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                    },
                    count: None,
                })
                .collect();
            let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(fam.name),
                entries: &entries,
            });
            let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(fam.name),
                bind_group_layouts: &[Some(&bgl)],
                immediate_size: 0,
            });
            (bgl, pl)
        })
    }

    fn pipeline(
        &mut self,
        fam: &'static Family,
        entry: &'static str,
    ) -> Result<wgpu::ComputePipeline, GpuError> {
        if let Some(p) = self.pipelines.get(&(fam.name, entry)) {
            return Ok(p.clone());
        }
        if !fam.entries.contains(&entry) {
            return Err(guard(fam.name, format!("no entry point `{entry}`")));
        }
        self.family_layout(fam);
        let device = self.ctx.device.clone();
        let module = match self.modules.get(fam.name) {
            Some(m) => m.clone(),
            None => {
                let src = self
                    .shaders
                    .full_source(fam.name)
                    .ok_or_else(|| guard(fam.name, "no such family in the shader set"))?;
                let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
                let m = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(fam.name),
                    source: wgpu::ShaderSource::Wgsl(src.into()),
                });
                if let Some(e) = pollster::block_on(scope.pop()) {
                    return Err(GpuError::Wgpu(format!("{}: {e}", fam.name)));
                }
                self.modules.insert(fam.name, m.clone());
                m
            }
        };
        let (_, pl) = &self.layouts[fam.name];
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let p = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: Some(pl),
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(GpuError::Wgpu(format!("{}::{entry}: {e}", fam.name)));
        }
        self.pipelines.insert((fam.name, entry), p.clone());
        if !self.entry_info.contains_key(&(fam.name, entry)) {
            if let Ok(infos) = self.shaders.entry_infos(fam.name) {
                for e in fam.entries {
                    if let Some(i) = infos.iter().find(|i| i.entry == *e) {
                        self.entry_info.insert((fam.name, *e), i.clone());
                    }
                }
            }
        }
        Ok(p)
    }

    fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        let device = &self.ctx.device;
        self.encoder.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("golden-lens step"),
            })
        })
    }

    /// Record one dispatch of `fam::entry` with `params` (the family's uniform struct) and the
    /// storage `bufs` (bindings 1..), over `groups` workgroups; `map` says which elements of
    /// its read-write binding it writes, by which invocation (kernel provenance).
    pub fn dispatch<P: bytemuck::Pod + std::fmt::Debug>(
        &mut self,
        fam: &'static Family,
        entry: &'static str,
        params: &P,
        bufs: &[&Tensor],
        groups: (u32, u32, u32),
        map: WriteMap,
    ) -> Result<(), GpuError> {
        self.dispatch_counted(fam, entry, params, bufs, groups, map, 0)
    }

    /// [`Gpu::dispatch`] stating the dispatch's floating-point operations (profiles).
    #[allow(clippy::too_many_arguments)] // dispatch's arguments plus the flop count
    pub fn dispatch_counted<P: bytemuck::Pod + std::fmt::Debug>(
        &mut self,
        fam: &'static Family,
        entry: &'static str,
        params: &P,
        bufs: &[&Tensor],
        groups: (u32, u32, u32),
        map: WriteMap,
        flops: u64,
    ) -> Result<(), GpuError> {
        if bufs.len() + 1 != fam.bindings.len() {
            return Err(guard(
                fam.name,
                format!(
                    "{entry}: {} buffers for {} storage bindings",
                    bufs.len(),
                    fam.bindings.len() - 1
                ),
            ));
        }
        self.ctx.check_health()?;
        let max = self.max_groups();
        if groups.0 > max || groups.1 > max || groups.2 > max {
            return Err(guard(
                fam.name,
                format!("{entry}: {groups:?} workgroups, the adapter allows {max} per dimension"),
            ));
        }
        if groups.0 == 0 || groups.1 == 0 || groups.2 == 0 {
            return Ok(());
        }
        let pipeline = self.pipeline(fam, entry)?;
        let params_bytes = bytemuck::bytes_of(params);
        let uniform = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("params"),
            size: params_bytes.len().max(16) as u64,
            // UNIFORM: binding 0; COPY_DST: filled by the queue write below.
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.ctx.queue.write_buffer(&uniform, 0, params_bytes);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: uniform.as_entire_binding(),
        }];
        for (i, b) in bufs.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource: b.buf.as_entire_binding(),
            });
        }
        let (bgl, _) = &self.layouts[fam.name];
        let bg = self
            .ctx
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(entry),
                layout: bgl,
                entries: &entries,
            });
        self.record_provenance(fam, entry, params, bufs, groups, map);
        let timed = self.profiler.is_some();
        let t0 = std::time::Instant::now();
        let slot = self.timestamp_slot();
        {
            let queries = self
                .profiler
                .as_ref()
                .and_then(|p| p.queries.as_ref())
                .zip(slot);
            let timestamp_writes = queries.map(|(q, k)| wgpu::ComputePassTimestampWrites {
                query_set: &q.set,
                beginning_of_pass_write_index: Some(2 * k),
                end_of_pass_write_index: Some(2 * k + 1),
            });
            let enc = self.encoder.get_or_insert_with(|| {
                self.ctx
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("golden-lens step"),
                    })
            });
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(entry),
                timestamp_writes,
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(groups.0, groups.1, groups.2);
        }
        self.dispatch_count += 1;
        *self.family_dispatches.entry(fam.name).or_default() += 1;
        self.pending_dispatches += 1;
        if timed {
            let bytes = bufs.iter().map(|b| b.bytes()).sum::<u64>() + params_bytes.len() as u64;
            self.time_dispatch(fam.name, entry, bytes, flops, t0);
        }
        if self.pending_dispatches >= MAX_DISPATCHES_PER_SUBMIT {
            self.flush();
        }
        Ok(())
    }

    /// Record `fam::entry`'s write into its read-write binding in the ledger.
    fn record_provenance<P: std::fmt::Debug>(
        &mut self,
        fam: &'static Family,
        entry: &'static str,
        params: &P,
        bufs: &[&Tensor],
        groups: (u32, u32, u32),
        map: WriteMap,
    ) {
        let Some(out) = fam
            .bindings
            .iter()
            .skip(1)
            .zip(bufs)
            .filter(|(a, _)| **a == Access::ReadWrite)
            .map(|(_, b)| b.id)
            .next_back()
        else {
            return;
        };
        let (workgroup_size, file, line) = match self.entry_info.get(&(fam.name, entry)) {
            Some(i) => (i.workgroup_size, i.file.clone(), i.line),
            None => ([WG, 1, 1], format!("shaders/{}.wgsl", fam.name), None),
        };
        let d = Arc::new(Dispatch {
            seq: self.dispatch_count,
            family: fam.name,
            entry,
            file,
            line,
            workgroup_size,
            groups: [groups.0, groups.1, groups.2],
            uniforms: format!("{params:?}"),
            map,
        });
        self.ledger().kernel(out, d);
    }

    /// Record a copy of `n` values from `src[src_off..]` to `dst[dst_off..]`.
    pub fn copy(
        &mut self,
        src: &Tensor,
        src_off: usize,
        dst: &Tensor,
        dst_off: usize,
        n: usize,
    ) -> Result<(), GpuError> {
        if src_off + n > src.len || dst_off + n > dst.len {
            return Err(guard(
                "copy",
                format!(
                    "{src_off}+{n} of {} into {dst_off}+{n} of {}",
                    src.len, dst.len
                ),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        self.ledger().copy(src.id, src_off, dst.id, dst_off, n);
        let (s, d) = (src.buf.clone(), dst.buf.clone());
        self.encoder().copy_buffer_to_buffer(
            &s,
            (src_off * 4) as u64,
            &d,
            (dst_off * 4) as u64,
            (n * 4) as u64,
        );
        Ok(())
    }

    /// A fresh tensor holding `n` values of `src` from `off` (a copy recorded now).
    pub fn slice(
        &mut self,
        what: &str,
        src: &Tensor,
        off: usize,
        n: usize,
    ) -> Result<Tensor, GpuError> {
        let t = self.zeros(what, n)?;
        self.copy(src, off, &t, 0, n)?;
        Ok(t)
    }

    /// Lose the device on purpose (`--inject device-lost@CAPTURE`): recorded as lost at once
    /// (wgpu reports a destroyed device's loss only at its next poll), then destroyed, so every
    /// later dispatch and read-back fails with [`GpuError::DeviceLost`].
    pub fn lose_device(&mut self, why: &str) {
        self.ctx.health.mark_lost(format!("Destroyed: {why}"));
        self.encoder = None;
        self.pending_dispatches = 0;
        self.ctx.device.destroy();
    }

    /// Submit everything recorded so far.
    pub fn flush(&mut self) {
        if let Some(enc) = self.encoder.take() {
            self.ctx.queue.submit([enc.finish()]);
        }
        self.pending_dispatches = 0;
        self.collect_timestamps();
    }

    /// Forget the provenance ledger (a new regime: buffers are rewritten from scratch).
    pub fn clear_provenance(&mut self) {
        self.ledger().clear();
    }

    /// The history of `n` values of `t` from `off` as it stands now (take it at capture time).
    pub fn provenance(&self, t: &Tensor, off: usize, n: usize) -> CaptureProvenance {
        self.ledger().snapshot(t.id, off, n)
    }
}
