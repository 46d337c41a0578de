//! The model a command runs on, built by the session's one backend builder
//! (`session::builder::ModelParts`): the golden's fixture and filler weights, or a `deepseek41`
//! GGUF's metadata and weights (`--gguf`), shared by every backend of the run.

use golden_lens::golden::Golden;
pub use golden_lens::session::builder::ModelParts;
use golden_lens::session::{self};

/// The golden's model, or the GGUF's when one is given, printing which weights and whether the
/// GGUF's geometry differs from the golden's fixture.
pub fn open(golden: &Golden, gguf: Option<&std::path::Path>) -> anyhow::Result<ModelParts> {
    let model = ModelParts::open(golden, gguf)?;
    if gguf.is_some() {
        println!("weights: {}", model.describe());
        if model.cfg != session::model_of(golden)?.0 {
            println!("note: the GGUF's model config differs from the golden's fixture");
        }
    }
    Ok(model)
}
