//! Determinism: run a backend N times over the same golden inputs and report, per capture, how
//! many runs differ *bitwise* from the first and in how many elements — apart from any error
//! against a reference. Non-deterministic reductions (atomics, racy workgroups, unordered
//! accumulation) show up here even when every run is within tolerance.

use super::{regime_inputs, SessionError};
use crate::golden::Golden;
use crate::model::{Backend, CaptureValues};
use std::collections::BTreeMap;

/// A capture whose bits changed between runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Instability {
    pub regime: String,
    pub capture: String,
    /// Runs (after the first) whose bits differ from the first run's.
    pub runs_differing: usize,
    /// The largest number of differing elements in one run.
    pub max_elements_differing: usize,
    /// Flat index of the first differing element seen.
    pub first_index: usize,
}

/// The determinism report of `runs` runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Determinism {
    pub runs: usize,
    pub captures: usize,
    pub unstable: Vec<Instability>,
}

fn bits(v: &CaptureValues) -> Vec<u64> {
    match v {
        CaptureValues::F32(x) => x.iter().map(|f| f.to_bits() as u64).collect(),
        CaptureValues::I64(x) => x.iter().map(|&i| i as u64).collect(),
    }
}

/// Run fresh backends from `make` `runs` times (at least 2) through every regime of `golden`.
pub fn repeat_runs(
    golden: &Golden,
    make: &mut dyn FnMut() -> Result<Box<dyn Backend>, SessionError>,
    runs: usize,
) -> Result<Determinism, SessionError> {
    let inputs = regime_inputs(golden)?;
    let mut first: BTreeMap<(usize, String), Vec<u64>> = BTreeMap::new();
    let mut found: BTreeMap<(usize, String), Instability> = BTreeMap::new();
    for run in 0..runs.max(2) {
        let mut b = make()?;
        for (ri, (regime, ids, start)) in inputs.iter().enumerate() {
            let berr = |source| SessionError::Backend {
                regime: regime.clone(),
                source: Box::new(source),
            };
            b.begin(ids, *start).map_err(berr)?;
            for step in b.steps() {
                let mut out = Vec::new();
                b.run(step, &mut out).map_err(berr)?;
                for c in out {
                    let key = (ri, c.name.clone());
                    let now = bits(&c.values);
                    if run == 0 {
                        first.insert(key, now);
                        continue;
                    }
                    let Some(base) = first.get(&key) else {
                        continue;
                    };
                    let diff: Vec<usize> = (0..base.len().max(now.len()))
                        .filter(|&i| base.get(i) != now.get(i))
                        .collect();
                    if diff.is_empty() {
                        continue;
                    }
                    let e = found.entry(key).or_insert_with(|| Instability {
                        regime: regime.clone(),
                        capture: c.name.clone(),
                        runs_differing: 0,
                        max_elements_differing: 0,
                        first_index: diff[0],
                    });
                    e.runs_differing += 1;
                    e.max_elements_differing = e.max_elements_differing.max(diff.len());
                }
            }
        }
    }
    Ok(Determinism {
        runs: runs.max(2),
        captures: first.len(),
        unstable: found.into_values().collect(),
    })
}
