//! The model as the backends see it: geometry (`ModelConfig`), parameters (`WeightSource`),
//! engram hash constants (`EngramTables`), the step-wise backend contract (`Step`,
//! `Capture`, `Backend`), and the graph math every backend shares (RoPE/YaRN tables, window
//! and compressed index rows, candidate block selection).

pub mod backend;
pub mod config;
pub mod engram;
pub mod gguf_export;
pub mod gguf_source;
pub mod hints;
pub mod layer_range;
pub mod memory;
pub mod params;
pub mod rope;
pub mod seed;
pub mod sparse;
pub mod stored;
pub mod synth_fill;
pub mod tokenizer;
pub mod weights;

pub use backend::{
    Backend, BackendError, Capture, CaptureDtype, CaptureValues, PinSizeError, Pins, SeedTensors,
    Step,
};
pub use config::{ConfigError, EngramConfig, ForwardError, LayerRole, ModelConfig, ScoreFunc};
pub use engram::EngramTables;
pub use gguf_source::{GgufModel, GgufModelError, GgufSource};
pub use layer_range::{LayerRange, LayerRangeError};
pub use weights::{FillerSource, WeightError, WeightSource};
