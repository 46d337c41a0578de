//! Read-backs: capture copies recorded into the command stream at capture time, and their
//! mapping after the step's submission.

use super::{Gpu, Pending, Tensor};
use crate::gpu::{guard, GpuError};

impl Gpu {
    /// Record, at this point of the command stream, a copy of `n` values of `t` from `off` into
    /// a mappable buffer: the capture sees exactly what the producing kernel wrote, whatever
    /// later kernels do with `t`.
    pub fn capture(&mut self, t: &Tensor, off: usize, n: usize) -> Result<Pending, GpuError> {
        if off + n > t.len {
            return Err(guard("capture", format!("{off}+{n} > {}", t.len)));
        }
        let staging = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("capture"),
            size: (n.max(1) * 4) as u64,
            // MAP_READ: read back on the host; COPY_DST: filled by the recorded copy.
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        if n > 0 {
            let src = t.buf.clone();
            self.encoder().copy_buffer_to_buffer(
                &src,
                (off * 4) as u64,
                &staging,
                0,
                (n * 4) as u64,
            );
        }
        Ok(Pending { staging, len: n })
    }

    /// Submit and read back pending captures, in order.
    pub fn resolve(&mut self, pending: Vec<Pending>) -> Result<Vec<Vec<f32>>, GpuError> {
        self.flush();
        let (tx, rx) = std::sync::mpsc::channel();
        for (i, p) in pending.iter().enumerate() {
            if p.len == 0 {
                continue;
            }
            let tx = tx.clone();
            p.staging
                .slice(..)
                .map_async(wgpu::MapMode::Read, move |r| {
                    let _ = tx.send((i, r.is_ok()));
                });
        }
        drop(tx);
        let polled = self.ctx.device.poll(wgpu::PollType::wait_indefinitely());
        // A lost device fails the poll or the maps: say so rather than "could not be mapped".
        self.ctx.check_health()?;
        polled.map_err(|e| GpuError::Map(e.to_string()))?;
        let mut ok = vec![false; pending.len()];
        for (i, good) in rx.iter() {
            ok[i] = good;
        }
        let mut out = Vec::with_capacity(pending.len());
        for (i, p) in pending.into_iter().enumerate() {
            if p.len == 0 {
                out.push(Vec::new());
                continue;
            }
            if !ok[i] {
                return Err(GpuError::Map(format!("capture {i} could not be mapped")));
            }
            let view = p
                .staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| GpuError::Map(e.to_string()))?;
            let v: Vec<f32> = bytemuck::cast_slice::<u8, f32>(&view[..p.len * 4]).to_vec();
            drop(view);
            p.staging.unmap();
            out.push(v);
        }
        Ok(out)
    }

    /// Read `n` values of `t` from `off` now (submits recorded work first).
    pub fn read(&mut self, t: &Tensor, off: usize, n: usize) -> Result<Vec<f32>, GpuError> {
        let p = self.capture(t, off, n)?;
        let mut v = self.resolve(vec![p])?;
        Ok(v.pop().unwrap_or_default())
    }

    /// Read a whole tensor.
    pub fn read_all(&mut self, t: &Tensor) -> Result<Vec<f32>, GpuError> {
        self.read(t, 0, t.len)
    }
}
