//! Determinism: run a backend N times over the same golden inputs and report, per capture, how
//! many runs differ *bitwise* from the first and in how many elements — apart from any error
//! against a reference. Non-deterministic reductions (atomics, racy workgroups, unordered
//! accumulation) show up here even when every run is within tolerance.

use super::reference::{RegimeTokens, TokensReference};
use super::{model_of, regime_inputs, CheckOptions, SessionError, Stepper};
use crate::golden::Golden;
use crate::model::{Backend, CaptureValues};
use std::collections::BTreeMap;
use std::sync::Arc;

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

/// Run fresh backends from `make` `runs` times (at least 2) through every regime of `golden`
/// (each run a stepper with the backend as the live reference over the golden's tokens: no
/// comparison is needed to see bits change).
pub fn repeat_runs(
    golden: &Golden,
    make: &mut dyn FnMut() -> Result<Box<dyn Backend>, SessionError>,
    runs: usize,
) -> Result<Determinism, SessionError> {
    let tokens = Arc::new(TokensReference {
        label: golden.source.display().to_string(),
        config: model_of(golden)?.0,
        regimes: regime_inputs(golden)?
            .into_iter()
            .map(|(name, ids, _)| (name, RegimeTokens::Given(ids)))
            .collect(),
    });
    let mut first: BTreeMap<(usize, String), Vec<u64>> = BTreeMap::new();
    let mut found: BTreeMap<(usize, String), Instability> = BTreeMap::new();
    for run in 0..runs.max(2) {
        let mut stepper = Stepper::new(tokens.clone(), vec![make()?], CheckOptions::default())?;
        while let Some(o) = stepper.next_step()? {
            for r in &o.results {
                let Some(side) = r.per_backend.first() else {
                    continue;
                };
                let key = (o.regime_index, r.name.clone());
                let now = bits(&side.values);
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
                    regime: o.regime.clone(),
                    capture: r.name.clone(),
                    runs_differing: 0,
                    max_elements_differing: 0,
                    first_index: diff[0],
                });
                e.runs_differing += 1;
                e.max_elements_differing = e.max_elements_differing.max(diff.len());
            }
        }
    }
    Ok(Determinism {
        runs: runs.max(2),
        captures: first.len(),
        unstable: found.into_values().collect(),
    })
}
