//! The model a command runs on: the golden's fixture and filler weights, or a `deepseek41`
//! GGUF's metadata and weights (`--gguf`), shared by every backend of the run.

use golden_lens::golden::Golden;
use golden_lens::model::{EngramTables, FillerSource, GgufSource, ModelConfig, WeightSource};
use golden_lens::session;
use std::sync::Arc;

/// Config, engram tables and weights of one run.
pub struct ModelParts {
    pub cfg: ModelConfig,
    pub tables: Option<EngramTables>,
    pub weights: Arc<dyn WeightSource>,
}

impl ModelParts {
    /// The golden's model, or the GGUF's when one is given (printing which weights and whether
    /// the GGUF's geometry differs from the golden's fixture).
    pub fn open(golden: &Golden, gguf: Option<&std::path::Path>) -> anyhow::Result<ModelParts> {
        let Some(path) = gguf else {
            let (cfg, tables) = session::model_of(golden)?;
            return Ok(ModelParts {
                cfg,
                tables,
                weights: Arc::new(FillerSource::new(
                    golden.source.display().to_string(),
                    &golden.weights_meta,
                )),
            });
        };
        let (source, model) = GgufSource::open(path)?;
        println!("weights: {}", source.describe());
        if model.cfg != session::model_of(golden)?.0 {
            println!("note: the GGUF's model config differs from the golden's fixture");
        }
        Ok(ModelParts {
            cfg: model.cfg,
            tables: model.tables,
            weights: Arc::new(source),
        })
    }

    /// A fresh CPU oracle over these weights.
    pub fn oracle(&self) -> golden_lens::oracle::Oracle {
        golden_lens::oracle::Oracle::new(
            self.cfg.clone(),
            self.weights.clone(),
            self.tables.clone(),
        )
    }

    /// A GPU backend over these weights on a fresh context.
    #[cfg(feature = "gpu")]
    pub fn gpu(
        &self,
        opts: golden_lens::gpu::GpuOptions,
    ) -> anyhow::Result<golden_lens::gpu::GpuBackend> {
        let ctx = golden_lens::gpu::GpuContext::new()?;
        Ok(golden_lens::gpu::GpuBackend::new(
            ctx,
            self.cfg.clone(),
            self.weights.clone(),
            self.tables.clone(),
            opts,
        )?)
    }
}
