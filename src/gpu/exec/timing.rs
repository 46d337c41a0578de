//! Per-dispatch timing for profiles: GPU timestamp queries written around each compute pass
//! where the device has them, else the host clock around each dispatch submitted alone.

use super::{Gpu, MAX_DISPATCHES_PER_SUBMIT};
use crate::gpu::profile::{DispatchTime, Profile, TimingSource};

/// Timing state while profiling.
pub(super) struct Profiler {
    profile: Profile,
    /// The step label dispatches are filed under.
    step: String,
    /// Timestamp queries (two per dispatch) when the device has them.
    pub(super) queries: Option<Timestamps>,
    /// Dispatches recorded into the current submission, waiting for their timestamps.
    waiting: Vec<DispatchTime>,
}

/// A timestamp query set and the buffers its results travel through.
pub(super) struct Timestamps {
    pub(super) set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    period_ns: f32,
}

impl Gpu {
    /// Start timing every dispatch (`check --profile`): GPU timestamps where the device has
    /// them, the host clock around each dispatch submitted alone otherwise.
    pub fn start_profiling(&mut self) {
        self.start_profiling_with(TimingSource::GpuTimestamps);
    }

    /// [`Gpu::start_profiling`] preferring `source` (GPU timestamps fall back to the wall clock
    /// where the device has none).
    pub fn start_profiling_with(&mut self, source: TimingSource) {
        self.flush();
        let device = &self.ctx.device;
        let queries = (source == TimingSource::GpuTimestamps
            && self.ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY))
        .then(|| {
            let n = 2 * MAX_DISPATCHES_PER_SUBMIT as u32;
            let bytes = u64::from(n) * 8;
            Timestamps {
                set: device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("dispatch timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: n,
                }),
                resolve: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("timestamps"),
                    size: bytes,
                    // QUERY_RESOLVE: resolve_query_set's target; COPY_SRC: to the readback.
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                }),
                readback: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("timestamps readback"),
                    size: bytes,
                    // MAP_READ: read on the host; COPY_DST: filled from the resolve buffer.
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
                period_ns: self.ctx.queue.get_timestamp_period(),
            }
        });
        let source = if queries.is_some() {
            TimingSource::GpuTimestamps
        } else {
            TimingSource::CpuWallClock
        };
        self.profiler = Some(Profiler {
            profile: Profile::new(source),
            step: String::new(),
            queries,
            waiting: Vec::new(),
        });
    }

    /// File the following dispatches under `step` (profiles).
    pub fn set_profile_step(&mut self, step: &str) {
        if let Some(p) = &mut self.profiler {
            p.step = step.to_string();
        }
    }

    /// The profile so far, when profiling (submits and resolves pending timestamps first).
    pub fn profile(&mut self) -> Option<Profile> {
        self.flush();
        self.profiler.as_ref().map(|p| p.profile.clone())
    }

    /// The timestamp pair index of the next dispatch in this submission.
    pub(super) fn timestamp_slot(&self) -> Option<u32> {
        let p = self.profiler.as_ref()?;
        p.queries.as_ref()?;
        Some(p.waiting.len() as u32)
    }

    pub(super) fn time_dispatch(
        &mut self,
        family: &'static str,
        entry: &'static str,
        bytes: u64,
        flops: u64,
        t0: std::time::Instant,
    ) {
        let Some(p) = &mut self.profiler else {
            return;
        };
        let d = DispatchTime {
            family,
            entry,
            step: p.step.clone(),
            seconds: 0.0,
            bytes,
            flops,
        };
        if p.queries.is_some() {
            p.waiting.push(d);
            return;
        }
        p.waiting.push(d);
        // No timestamps: this dispatch alone, submitted and waited for.
        self.flush();
        let _ = self.ctx.device.poll(wgpu::PollType::wait_indefinitely());
        if let Some(p) = &mut self.profiler {
            if let Some(mut d) = p.waiting.pop() {
                d.seconds = t0.elapsed().as_secs_f64();
                p.profile.dispatches.push(d);
            }
        }
    }

    /// After a submission: read the timestamps of its dispatches into the profile.
    pub(super) fn collect_timestamps(&mut self) {
        let Some(p) = &mut self.profiler else {
            return;
        };
        let Some(q) = &p.queries else {
            return;
        };
        if p.waiting.is_empty() {
            return;
        }
        let n = p.waiting.len() as u64;
        let mut enc = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("timestamps"),
            });
        enc.resolve_query_set(&q.set, 0..(2 * n) as u32, &q.resolve, 0);
        enc.copy_buffer_to_buffer(&q.resolve, 0, &q.readback, 0, 16 * n);
        self.ctx.queue.submit([enc.finish()]);
        let slice = q.readback.slice(..16 * n);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r.is_ok());
        });
        let _ = self.ctx.device.poll(wgpu::PollType::wait_indefinitely());
        let waiting = std::mem::take(&mut p.waiting);
        if rx.recv().unwrap_or(false) {
            if let Ok(view) = slice.get_mapped_range() {
                let ticks: Vec<u64> = bytemuck::cast_slice::<u8, u64>(&view).to_vec();
                drop(view);
                for (i, mut d) in waiting.into_iter().enumerate() {
                    let (a, b) = (ticks[2 * i], ticks[2 * i + 1]);
                    d.seconds = b.saturating_sub(a) as f64 * f64::from(q.period_ns) * 1e-9;
                    p.profile.dispatches.push(d);
                }
            }
            q.readback.unmap();
        }
    }
}
