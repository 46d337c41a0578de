//! Weights on the device: uploaded once and cached by name (chunked on row boundaries above the
//! adapter's binding limit), except the routed experts, which are uploaded per use and released.

use super::{berr, invalid, GpuBackend};
use crate::gpu::exec::{Tensor, WeightTensor};
use crate::model::{BackendError, Step};
use std::sync::Arc;

impl GpuBackend {
    pub(super) fn host_w(
        &self,
        step: Step,
        name: &str,
        shape: &[usize],
    ) -> Result<Arc<Vec<f32>>, BackendError> {
        self.weights
            .expect(name, shape)
            .map_err(|source| BackendError::Weight { step, source })
    }

    /// A weight `[shape[0], rest]` on the device (cached; chunked above the binding limit).
    pub(super) fn w(
        &mut self,
        step: Step,
        name: &str,
        shape: &[usize],
    ) -> Result<WeightTensor, BackendError> {
        if let Some(w) = self.wcache.get(name) {
            return Ok(w.clone());
        }
        let data = self.host_w(step, name, shape)?;
        let bytes = data.len() * std::mem::size_of::<f32>();
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
        self.cache_weight(name, &t, bytes);
        Ok(t)
    }

    /// Keeps `t` in the weight cache within [`GpuBackend::weight_cache_budget_bytes`]: the
    /// oldest entries go first (their buffers are freed once no recorded work uses them); a
    /// tensor larger than the whole budget is used uncached.
    pub(super) fn cache_weight(&mut self, name: &str, t: &WeightTensor, bytes: usize) {
        let budget = self.weight_cache_budget_bytes;
        if bytes > budget {
            return;
        }
        while self.wcache_bytes + bytes > budget {
            let Some((old, old_bytes)) = self.wcache_order.pop_front() else {
                break;
            };
            if self.wcache.remove(&old).is_some() {
                self.wcache_bytes -= old_bytes;
            }
        }
        self.wcache.insert(name.to_string(), t.clone());
        self.wcache_order.push_back((name.to_string(), bytes));
        self.wcache_bytes += bytes;
    }

    /// Bytes the device weight cache holds now.
    pub fn weight_cache_bytes(&self) -> usize {
        self.wcache_bytes
    }

    /// Submit what is recorded and wait for the device, so buffers dropped since (streamed
    /// head chunks) are released before the next upload.
    pub(super) fn settle(&mut self) {
        self.gpu.flush();
        let _ = self
            .gpu
            .ctx
            .device
            .poll(wgpu::PollType::wait_indefinitely());
    }

    /// An uncached weight (routed experts: used once per step, then released).
    pub(super) fn w_once(
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
    pub(super) fn v(
        &mut self,
        step: Step,
        name: &str,
        shape: &[usize],
    ) -> Result<Tensor, BackendError> {
        let w = self.w(step, name, shape)?;
        w.single()
            .cloned()
            .ok_or_else(|| invalid(step, format!("{name} does not fit one binding")))
    }
}
