//! Faults planted into the oracle on purpose, so the comparator, the localisation report and
//! the self-test can prove they catch each kind and name the capture where it was planted.
//! A fault changes the tensor the graph goes on computing with (not just the emitted copy), so
//! it propagates downstream exactly as a kernel bug would.

use crate::model::{Capture, CaptureDtype};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

/// What a planted fault does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FaultKind {
    /// Flip the top mantissa bit of one element (floats) or add one (integers).
    BitFlip,
    /// Add a constant to one element.
    Perturb(f32),
    /// Zero a block of 64 consecutive elements, as a dropped workgroup leaves it.
    DroppedWorkgroup,
    /// Reuse this capture's values from the previous regime (a stale buffer), where the
    /// shape matches; zeros otherwise.
    StaleBuffer,
    /// Rotate the queries of the capture's layer the wrong way (structural; plant at `sa_q`).
    RopeSign,
    /// Shift every valid window index by one (structural; plant at `sa_topk_idxs`).
    WindowOffByOne,
    /// Break top-k ties by the lowest index instead of torch's introselect order (structural;
    /// plant at `sa_topk_idxs` or `moe_indices`): what a GPU top-k with its own tie rule does.
    /// Differences it causes are tie flips, not compute bugs, so it is not in `ALL`.
    TieOrder,
}

impl FaultKind {
    /// Every kind, for the self-test.
    pub const ALL: [FaultKind; 6] = [
        FaultKind::BitFlip,
        FaultKind::Perturb(1e-2),
        FaultKind::DroppedWorkgroup,
        FaultKind::StaleBuffer,
        FaultKind::RopeSign,
        FaultKind::WindowOffByOne,
    ];

    /// Parse `bitflip`, `perturb` (or `perturb=0.01`), `dropped-workgroup`, `stale-buffer`,
    /// `rope-sign`, `window-off-by-one`.
    pub fn parse(s: &str) -> Option<FaultKind> {
        let (name, arg) = s.split_once('=').map_or((s, None), |(a, b)| (a, Some(b)));
        Some(match name {
            "bitflip" | "bit-flip" => FaultKind::BitFlip,
            "perturb" => FaultKind::Perturb(arg.map_or(Some(1e-2), |a| a.parse().ok())?),
            "dropped-workgroup" => FaultKind::DroppedWorkgroup,
            "stale-buffer" => FaultKind::StaleBuffer,
            "rope-sign" => FaultKind::RopeSign,
            "window-off-by-one" => FaultKind::WindowOffByOne,
            "tie-order" => FaultKind::TieOrder,
            _ => return None,
        })
    }

    /// The capture a structural fault must be planted at in layer `l`, or None for kinds that
    /// apply to any capture.
    pub fn natural_capture(&self, l: usize) -> Option<String> {
        match self {
            FaultKind::RopeSign => Some(format!("L{l}.sa_q")),
            FaultKind::WindowOffByOne => Some(format!("L{l}.sa_topk_idxs")),
            _ => None,
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultKind::BitFlip => write!(f, "bitflip"),
            FaultKind::Perturb(d) => write!(f, "perturb={d}"),
            FaultKind::DroppedWorkgroup => write!(f, "dropped-workgroup"),
            FaultKind::StaleBuffer => write!(f, "stale-buffer"),
            FaultKind::RopeSign => write!(f, "rope-sign"),
            FaultKind::WindowOffByOne => write!(f, "window-off-by-one"),
            FaultKind::TieOrder => write!(f, "tie-order"),
        }
    }
}

/// One planted fault: a kind at a capture (e.g. `L3.attn_out`), optionally in one regime only,
/// at flat element `index` (for the single-element kinds).
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub kind: FaultKind,
    pub capture: String,
    pub regime_start: Option<usize>,
    pub index: usize,
}

impl Fault {
    /// Parse `KIND@CAPTURE`.
    pub fn parse(spec: &str) -> Option<Fault> {
        let (k, c) = spec.split_once('@')?;
        Some(Fault {
            kind: FaultKind::parse(k)?,
            capture: c.to_string(),
            regime_start: None,
            index: 0,
        })
    }
}

/// The top `k` of `values` with ties broken by the lowest index (NaN first): the tie rule a
/// simple GPU selection has, used by the `TieOrder` fault.
pub fn lowest_index_topk(values: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (values[a], values[b]);
        match (x.is_nan(), y.is_nan()) {
            (true, false) => std::cmp::Ordering::Less,
            (false, true) => std::cmp::Ordering::Greater,
            _ => y.partial_cmp(&x).unwrap_or(std::cmp::Ordering::Equal),
        }
        .then(a.cmp(&b))
    });
    order.truncate(k.min(values.len()));
    order
}

/// The faults planted in one oracle, plus the memory the stale-buffer kind needs.
#[derive(Debug, Default)]
pub struct FaultPlan {
    pub faults: Vec<Fault>,
    previous: RefCell<HashMap<String, Vec<f32>>>,
}

impl FaultPlan {
    pub fn new(faults: Vec<Fault>) -> FaultPlan {
        FaultPlan {
            faults,
            previous: RefCell::new(HashMap::new()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }

    fn active<'a>(
        &'a self,
        name: &'a str,
        start_pos: usize,
    ) -> impl Iterator<Item = &'a Fault> + 'a {
        self.faults
            .iter()
            .filter(move |f| f.capture == name && f.regime_start.is_none_or(|s| s == start_pos))
    }

    /// A structural fault of `kind` is planted at `name` for this forward.
    pub fn structural(&self, kind: FaultKind, name: &str, start_pos: usize) -> bool {
        self.active(name, start_pos).any(|f| f.kind == kind)
    }

    /// Apply the element faults planted at `name` to a float tensor.
    pub fn apply_f32(&self, name: &str, start_pos: usize, v: &mut [f32]) {
        if self.faults.is_empty() {
            return;
        }
        for f in self.active(name, start_pos) {
            let i = f.index.min(v.len().saturating_sub(1));
            match f.kind {
                FaultKind::BitFlip if !v.is_empty() => {
                    v[i] = f32::from_bits(v[i].to_bits() ^ 0x0040_0000)
                }
                FaultKind::Perturb(d) if !v.is_empty() => v[i] += d,
                FaultKind::DroppedWorkgroup => {
                    let start = (i / 64) * 64;
                    let end = (start + 64).min(v.len());
                    v[start..end].iter_mut().for_each(|x| *x = 0.0);
                }
                FaultKind::StaleBuffer => {
                    let prev = self.previous.borrow().get(name).cloned();
                    match prev {
                        Some(p) if p.len() == v.len() => v.copy_from_slice(&p),
                        _ => v.iter_mut().for_each(|x| *x = 0.0),
                    }
                }
                _ => {}
            }
        }
        if self
            .faults
            .iter()
            .any(|f| f.kind == FaultKind::StaleBuffer && f.capture == name)
        {
            self.previous
                .borrow_mut()
                .insert(name.to_string(), v.to_vec());
        }
    }

    /// Apply the element faults planted at `name` to an integer tensor.
    pub fn apply_i64(&self, name: &str, start_pos: usize, v: &mut [i64]) {
        if self.faults.is_empty() {
            return;
        }
        for f in self.active(name, start_pos) {
            let i = f.index.min(v.len().saturating_sub(1));
            match f.kind {
                FaultKind::BitFlip | FaultKind::Perturb(_) if !v.is_empty() => v[i] += 1,
                FaultKind::DroppedWorkgroup => {
                    let start = (i / 64) * 64;
                    let end = (start + 64).min(v.len());
                    v[start..end].iter_mut().for_each(|x| *x = 0);
                }
                FaultKind::StaleBuffer => v.iter_mut().for_each(|x| *x = 0),
                _ => {}
            }
        }
    }
}

impl super::Oracle {
    /// Apply planted faults to `v`, then emit it as capture `name`.
    pub(super) fn put_f32(
        &self,
        out: &mut Vec<Capture>,
        name: impl Into<String>,
        shape: Vec<usize>,
        dtype: CaptureDtype,
        v: &mut [f32],
    ) {
        let name = name.into();
        self.faults.apply_f32(&name, self.sp, v);
        out.push(Capture::f32(name, shape, dtype, v.to_vec()));
    }

    /// Apply planted faults to `v`, then emit it as integer capture `name`.
    pub(super) fn put_int(
        &self,
        out: &mut Vec<Capture>,
        name: impl Into<String>,
        shape: Vec<usize>,
        v: &mut [i64],
    ) {
        let name = name.into();
        self.faults.apply_i64(&name, self.sp, v);
        out.push(Capture::int(name, shape, v.to_vec()));
    }
}
