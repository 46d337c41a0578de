//! A forward restricted to blocks `A..=B` (`--layers A-B`): debug one layer at real dims without
//! the other 39. The steps are `EngramHash`, `Embed`, then per layer in the range its `Engram`
//! step (where it carries one) and its `Block`, then `Final` on block B's output.
//!
//! What block A is handed: for A = 0 exactly what a full forward hands it. For A > 0 the stream
//! a full forward hands block 0 (the embedding in every hyper-connection copy, pre-mix
//! `[1, 0, …]`), because the blocks before A are not run; the captures of blocks A..=B then
//! differ from a full run's (they are a different forward), but are the same on every backend.
//! Persistent state (window rings, compressor groups, caches) of layers outside the range is
//! never touched.
//!
//! Shared slots: a consumer layer reads the compressed-KV cache, the index keys, the top-k or
//! the candidate mask that an earlier source layer published in the same forward. A range whose
//! layers read a slot published by a layer before A is refused, naming the layer to start from.
//! The slots are pointers that persist across regimes (spec §15): in a decode, a full run's
//! layer may read what a later layer published in the previous regime (layer 2 scoring against
//! layer 4's index keys in the tiny model); a range run cannot, so from the first compressed
//! layer on its decode captures are those of the range's own forward, not the full model's.

use super::{ModelConfig, Step};
use std::ops::RangeInclusive;

/// Why a layer range cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayerRangeError {
    #[error("layer range `{text}`: expected `A-B` with A <= B, or one layer `N`")]
    Syntax { text: String },
    #[error("layer range {first}-{last}: the model has layers 0-{max_layer}")]
    OutsideModel {
        first: usize,
        last: usize,
        max_layer: usize,
    },
    #[error(
        "layer range {first}-{last}: layer {layer} reads the {slot} that layer {source_layer} \
         publishes; start the range at {source_layer} or lower"
    )]
    MissingSource {
        first: usize,
        last: usize,
        layer: usize,
        slot: &'static str,
        source_layer: usize,
    },
    #[error("{step} is outside the layer range {first}-{last}")]
    StepOutside {
        step: Step,
        first: usize,
        last: usize,
    },
}

/// A validated range of blocks `first..=last` of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerRange {
    first: usize,
    last: usize,
}

/// The most recent layer before or at `l` (`inclusive`) or strictly before it in `layers`.
fn latest(layers: &[usize], l: usize, inclusive: bool) -> Option<usize> {
    layers
        .iter()
        .copied()
        .filter(|&s| if inclusive { s <= l } else { s < l })
        .max()
}

/// The shared slots layer `l`'s attention reads and the layer that publishes each in a full
/// forward (the oracle's pointer semantics, spec §12): `(slot, source layer)`; a layer that
/// publishes a slot itself does not list it.
pub fn slot_sources(cfg: &ModelConfig, l: usize) -> Vec<(&'static str, usize)> {
    let role = cfg.role(l);
    let mut out = Vec::new();
    if role.ratio == 0 {
        return out;
    }
    if !role.kv_source {
        if let Some(s) = latest(&cfg.kv_source_layers, l, false) {
            out.push(("compressed-KV cache", s));
        }
    }
    if role.index_source {
        // The indexer scores against the keys of the latest kv source (itself when it is one).
        if let Some(s) = latest(&cfg.kv_source_layers, l, true).filter(|&s| s != l) {
            out.push(("index keys", s));
        }
        if role.candidate_consumer {
            if let Some(c) = cfg.candidate_source_layer {
                out.push(("candidate mask", c));
            }
        }
    } else if let Some(s) = latest(&cfg.index_source_layers, l, false) {
        out.push(("index top-k", s));
    }
    out
}

impl LayerRange {
    /// Parses `A-B` or `N` (no validation against a model).
    pub fn parse(text: &str) -> Result<RangeInclusive<usize>, LayerRangeError> {
        let syntax = || LayerRangeError::Syntax {
            text: text.to_string(),
        };
        let num = |s: &str| s.trim().parse::<usize>().map_err(|_| syntax());
        let (a, b) = match text.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(text)?;
                (n, n)
            }
        };
        if a > b {
            return Err(syntax());
        }
        Ok(a..=b)
    }

    /// Blocks `range` of `cfg`, checked: inside the model, and every shared slot a layer of the
    /// range reads published by a layer of the range.
    pub fn new(cfg: &ModelConfig, range: RangeInclusive<usize>) -> Result<Self, LayerRangeError> {
        let (first, last) = (*range.start(), *range.end());
        if first > last || last >= cfg.n_layers {
            return Err(LayerRangeError::OutsideModel {
                first,
                last,
                max_layer: cfg.n_layers.saturating_sub(1),
            });
        }
        for layer in first..=last {
            if let Some((slot, source_layer)) = slot_sources(cfg, layer)
                .into_iter()
                .filter(|&(_, s)| s < first)
                .min_by_key(|&(_, s)| s)
            {
                return Err(LayerRangeError::MissingSource {
                    first,
                    last,
                    layer,
                    slot,
                    source_layer,
                });
            }
        }
        Ok(LayerRange { first, last })
    }

    /// [`LayerRange::new`] when a range is given; `None` (every block) otherwise.
    pub fn optional(
        cfg: &ModelConfig,
        range: Option<RangeInclusive<usize>>,
    ) -> Result<Option<Self>, LayerRangeError> {
        range.map(|r| LayerRange::new(cfg, r)).transpose()
    }

    /// The first block.
    pub fn first(&self) -> usize {
        self.first
    }

    /// The last block (`Final` runs on its output).
    pub fn last(&self) -> usize {
        self.last
    }

    /// Whether block `l` runs.
    pub fn contains(&self, l: usize) -> bool {
        (self.first..=self.last).contains(&l)
    }

    /// Whether the range is every layer of `cfg`.
    pub fn is_full(&self, cfg: &ModelConfig) -> bool {
        self.first == 0 && self.last + 1 == cfg.n_layers
    }

    /// The steps of one regime's forward over the range.
    pub fn steps(&self, cfg: &ModelConfig) -> Vec<Step> {
        cfg.steps()
            .into_iter()
            .filter(|s| s.layer().is_none_or(|l| self.contains(l)))
            .collect()
    }

    /// Refuses a layer step outside the range.
    pub fn check_step(&self, step: Step) -> Result<(), LayerRangeError> {
        match step.layer() {
            Some(l) if !self.contains(l) => Err(LayerRangeError::StepOutside {
                step,
                first: self.first,
                last: self.last,
            }),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for LayerRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// The steps of a backend's forward: the whole model, or the range.
pub fn steps_for(cfg: &ModelConfig, range: Option<&LayerRange>) -> Vec<Step> {
    match range {
        Some(r) => r.steps(cfg),
        None => cfg.steps(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real() -> ModelConfig {
        ModelConfig::deepseek_v41_flash()
    }

    #[test]
    fn parses_ranges_and_single_layers() {
        assert_eq!(LayerRange::parse("0-3"), Ok(0..=3));
        assert_eq!(LayerRange::parse("7"), Ok(7..=7));
        assert_eq!(LayerRange::parse(" 2 - 5 "), Ok(2..=5));
        for bad in ["", "3-1", "a-b", "1-", "-2", "1-2-3"] {
            assert!(
                matches!(LayerRange::parse(bad), Err(LayerRangeError::Syntax { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn real_geometry_sources() {
        let cfg = real();
        // Window layers and the first kv/index source stand alone.
        for r in [0..=0, 1..=1, 0..=3, 2..=2, 2..=7, 0..=39] {
            assert!(LayerRange::new(&cfg, r.clone()).is_ok(), "{r:?}");
        }
        // Layer 3 reads layer 2's compressed cache.
        let e = LayerRange::new(&cfg, 3..=3).unwrap_err();
        assert_eq!(
            e,
            LayerRangeError::MissingSource {
                first: 3,
                last: 3,
                layer: 3,
                slot: "compressed-KV cache",
                source_layer: 2
            }
        );
        assert!(e.to_string().contains("start the range at 2"), "{e}");
        // Layer 24 (index source, candidate consumer) needs layer 20's cache, keys and mask.
        let e = LayerRange::new(&cfg, 24..=24).unwrap_err();
        assert!(
            matches!(
                e,
                LayerRangeError::MissingSource {
                    source_layer: 20,
                    ..
                }
            ),
            "{e}"
        );
        assert!(LayerRange::new(&cfg, 20..=24).is_ok());
        // Outside the model.
        assert!(matches!(
            LayerRange::new(&cfg, 38..=40),
            Err(LayerRangeError::OutsideModel { max_layer: 39, .. })
        ));
    }

    #[test]
    fn steps_keep_the_range_and_its_engram_steps() {
        let cfg = real();
        let r = LayerRange::new(&cfg, 0..=3).unwrap();
        assert_eq!(
            r.steps(&cfg),
            vec![
                Step::EngramHash,
                Step::Embed,
                Step::Block(0),
                Step::Engram(1),
                Step::Block(1),
                Step::Block(2),
                Step::Block(3),
                Step::Final
            ]
        );
        let r = LayerRange::new(&cfg, 14..=14).unwrap();
        assert_eq!(
            r.steps(&cfg),
            vec![
                Step::EngramHash,
                Step::Embed,
                Step::Engram(14),
                Step::Block(14),
                Step::Final
            ]
        );
        assert!(r.check_step(Step::Block(13)).is_err());
        assert!(r.check_step(Step::Engram(14)).is_ok());
        assert!(r.check_step(Step::Final).is_ok());
        assert_eq!(steps_for(&cfg, None), cfg.steps());
        assert!(LayerRange::new(&cfg, 0..=39).unwrap().is_full(&cfg));
    }
}
