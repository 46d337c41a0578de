//! The one backend builder: a model (config, engram tables, weights) from a golden's fixture and
//! filler weights or from a `deepseek41` GGUF, and the backends built on it (the CPU oracle, the
//! wgpu path). The CLI, the app and the self-test all build their backends here.

use super::{model_of, SessionError};
use crate::golden::Golden;
use crate::model::{EngramTables, FillerSource, GgufSource, ModelConfig, WeightSource};
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
        })
    }

    /// A `deepseek41` GGUF's metadata and weights (either dialect, any shard of a set); the
    /// file is mmapped, not read whole.
    pub fn from_gguf(path: &Path) -> Result<ModelParts, SessionError> {
        let (source, model) = GgufSource::open(path).map_err(|e| SessionError::Weights {
            path: path.display().to_string(),
            msg: e.to_string(),
        })?;
        Ok(ModelParts {
            cfg: model.cfg,
            tables: model.tables,
            origin: WeightsOrigin::Gguf {
                path: path.display().to_string(),
                describe: source.describe(),
            },
            weights: Arc::new(source),
        })
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
        Oracle::new(self.cfg.clone(), self.weights.clone(), self.tables.clone())
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
        crate::gpu::GpuBackend::new(
            ctx,
            self.cfg.clone(),
            self.weights.clone(),
            self.tables.clone(),
            opts,
        )
        .map_err(|e| fail(e.to_string()))
    }
}
