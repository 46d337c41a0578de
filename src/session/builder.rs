//! The one backend builder: a model (config, engram tables, weights) from a golden's fixture and
//! filler weights or from a `deepseek41` GGUF, and the backends built on it (the CPU oracle, the
//! wgpu path). The CLI, the app and the self-test all build their backends here.

use super::{model_of, SessionError};
use crate::golden::Golden;
use crate::model::{
    EngramTables, FillerSource, GgufSource, LayerRange, LayerRangeError, ModelConfig, WeightSource,
};
use crate::oracle::Oracle;
use std::path::Path;
use std::sync::Arc;

/// Where a model's weights come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightsOrigin {
    /// Regenerated from a golden's `weights_meta` (the tiny model's filler).
    GoldenFiller { golden: String },
    /// A `deepseek41` GGUF, mmapped (its description: path, dialect, size).
    Gguf { path: String, describe: String },
}

/// Config, engram tables and weights that backends compute with.
#[derive(Clone)]
pub struct ModelParts {
    pub cfg: ModelConfig,
    pub tables: Option<EngramTables>,
    pub weights: Arc<dyn WeightSource>,
    pub origin: WeightsOrigin,
    /// Blocks every backend built here runs (`--layers A-B`); `None` runs them all.
    layers: Option<LayerRange>,
    /// Byte budget of the GPU backend's device weight cache (`--cache-gib`); `None` keeps the
    /// backend's default.
    pub gpu_cache_bytes: Option<usize>,
}

impl ModelParts {
    /// The golden's fixture and filler weights.
    pub fn from_golden(golden: &Golden) -> Result<ModelParts, SessionError> {
        let (cfg, tables) = model_of(golden)?;
        let label = golden.source.display().to_string();
        Ok(ModelParts {
            cfg,
            tables,
            weights: Arc::new(FillerSource::new(label.clone(), &golden.weights_meta)),
            origin: WeightsOrigin::GoldenFiller { golden: label },
            layers: None,
            gpu_cache_bytes: None,
        })
    }

    /// A `deepseek41` GGUF's metadata and weights (either dialect, any shard of a set); the
    /// file is mmapped, not read whole.
    pub fn from_gguf(path: &Path) -> Result<ModelParts, SessionError> {
        ModelParts::from_gguf_with_cache(path, None)
    }

    /// [`ModelParts::from_gguf`] with the dequantized-tensor cache bounded to `cache_bytes`
    /// (`--cache-gib`; `None` keeps [`crate::model::gguf_source::GGUF_DEFAULT_CACHE_BYTES`]).
    pub fn from_gguf_with_cache(
        path: &Path,
        cache_bytes: Option<usize>,
    ) -> Result<ModelParts, SessionError> {
        let (source, model) = GgufSource::open(path).map_err(|e| SessionError::Weights {
            path: path.display().to_string(),
            msg: e.to_string(),
        })?;
        let source = match cache_bytes {
            Some(b) => source.with_cache_budget_bytes(b),
            None => source,
        };
        Ok(ModelParts {
            cfg: model.cfg,
            tables: model.tables,
            origin: WeightsOrigin::Gguf {
                path: path.display().to_string(),
                describe: source.describe(),
            },
            weights: Arc::new(source),
            layers: None,
            gpu_cache_bytes: cache_bytes,
        })
    }

    /// Restrict every backend built from now on to blocks `range` (then `Final` on the last
    /// one's output), checked against this model's config; `None` runs every block.
    pub fn set_layers(
        &mut self,
        range: Option<std::ops::RangeInclusive<usize>>,
    ) -> Result<(), LayerRangeError> {
        self.layers = LayerRange::optional(&self.cfg, range)?;
        Ok(())
    }

    /// The blocks the backends run, when restricted.
    pub fn layers(&self) -> Option<&LayerRange> {
        self.layers.as_ref()
    }

    /// The GGUF's model when `gguf` is given (what `--gguf` and a GGUF opened in the app
    /// select), else the golden's.
    pub fn open(golden: &Golden, gguf: Option<&Path>) -> Result<ModelParts, SessionError> {
        match gguf {
            Some(path) => ModelParts::from_gguf(path),
            None => ModelParts::from_golden(golden),
        }
    }

    /// The GGUF path when the weights come from one.
    pub fn gguf_path(&self) -> Option<&str> {
        match &self.origin {
            WeightsOrigin::Gguf { path, .. } => Some(path),
            WeightsOrigin::GoldenFiller { .. } => None,
        }
    }

    /// One line saying which weights these are.
    pub fn describe(&self) -> String {
        match &self.origin {
            WeightsOrigin::GoldenFiller { golden } => format!("golden filler ({golden})"),
            WeightsOrigin::Gguf { describe, .. } => describe.clone(),
        }
    }

    /// A fresh CPU oracle over these weights.
    pub fn oracle(&self) -> Oracle {
        let mut o = Oracle::new(self.cfg.clone(), self.weights.clone(), self.tables.clone());
        o.set_checked_layer_range(self.layers);
        o
    }

    /// A fresh CPU oracle that emits its diagnostic scores (what top-k triage scores
    /// disagreements with).
    pub fn oracle_with_diagnostics(&self) -> Oracle {
        let mut o = self.oracle();
        o.diagnostics = true;
        o
    }

    /// A GPU backend over these weights on a fresh context (the best adapter found).
    #[cfg(feature = "gpu")]
    pub fn gpu(
        &self,
        opts: crate::gpu::GpuOptions,
    ) -> Result<crate::gpu::GpuBackend, SessionError> {
        let fail = |msg: String| SessionError::Build {
            backend: "gpu".into(),
            msg,
        };
        let ctx = crate::gpu::GpuContext::new().map_err(|e| fail(e.to_string()))?;
        let mut g = crate::gpu::GpuBackend::new(
            ctx,
            self.cfg.clone(),
            self.weights.clone(),
            self.tables.clone(),
            opts,
        )
        .map_err(|e| fail(e.to_string()))?;
        g.set_checked_layer_range(self.layers);
        if let Some(b) = self.gpu_cache_bytes {
            g.weight_cache_budget_bytes = b;
        }
        Ok(g)
    }
}
