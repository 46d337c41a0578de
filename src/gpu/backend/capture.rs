//! Capture copy-out: each capture is copied at capture time into a mappable buffer (after any
//! injection at that capture), and the step's captures are read back together at its end.

use super::{berr, GpuBackend};
use crate::gpu::exec::{Pending, Tensor};
use crate::gpu::inject::InjectionKind;
use crate::gpu::rows::{bitflip, drop_first};
use crate::model::{BackendError, Capture, CaptureDtype, Step};

/// One capture of the current step: computed on the host, or a pending device copy.
pub(super) enum Slot {
    Host(Capture),
    Device {
        name: String,
        shape: Vec<usize>,
        dtype: CaptureDtype,
        pending: Pending,
    },
}

impl GpuBackend {
    pub(super) fn inject_is(&self, kind: InjectionKind, name: &str) -> bool {
        self.opts
            .inject
            .as_ref()
            .is_some_and(|i| i.kind == kind && i.capture == name)
    }

    /// Apply a capture-level injection to what the producing kernel wrote.
    pub(super) fn perturb(
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
                self.gpu
                    .write_labelled(t, off, &stale, "stale-buffer injection")
                    .map_err(berr(step))
            }
            InjectionKind::DeviceLost => {
                self.gpu.lose_device(&format!("injected at {name}"));
                Ok(())
            }
            InjectionKind::WindowOffByOne | InjectionKind::RopeSign => Ok(()),
        }
    }

    /// Capture `n` values of `t` from `off` now (after any injection at this capture).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cap(
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
        let history = self.gpu.provenance(t, off, n);
        if let Some(m) = self.provenance.last_mut() {
            m.insert(name.clone(), history);
        }
        self.slots.push(Slot::Device {
            name,
            shape,
            dtype,
            pending,
        });
        Ok(())
    }

    pub(super) fn cap_host(&mut self, c: Capture) {
        self.slots.push(Slot::Host(c));
    }

    pub(super) fn finish(
        &mut self,
        step: Step,
        sink: &mut Vec<Capture>,
    ) -> Result<(), BackendError> {
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
}
