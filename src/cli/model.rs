//! The model a command runs on, built by the session's one backend builder
//! (`session::builder::ModelParts`): the golden's fixture and filler weights, or a `deepseek41`
//! GGUF's metadata and weights (`--gguf`), shared by every backend of the run.

use golden_lens::golden::Golden;
pub use golden_lens::session::builder::ModelParts;
use golden_lens::session::writer::{
    config_difference, engram_tables_hash, GgufIdentity, GgufRecording,
};
use golden_lens::session::{self};

/// The golden's model, or the GGUF's when one is given, printing which weights and whether the
/// GGUF's geometry differs from the golden's fixture. A golden recorded on a GGUF (`golden write
/// --gguf`) needs that GGUF: its config must match the GGUF's field for field, the file's header
/// and tensor table must hash as recorded, and its layer range is replayed.
pub fn open(golden: &Golden, gguf: Option<&std::path::Path>) -> anyhow::Result<ModelParts> {
    let recording = GgufRecording::of_golden(golden)?;
    let Some(path) = gguf else {
        if let Some(r) = &recording {
            anyhow::bail!(
                "{}: this golden records a run on the GGUF {} (its weights are not in the \
                 golden): give --gguf F",
                golden.source.display(),
                r.identity.path
            );
        }
        return Ok(ModelParts::open(golden, None)?);
    };
    let mut model = ModelParts::open(golden, Some(path))?;
    println!("weights: {}", model.describe());
    let recorded_cfg = golden_config(golden)?;
    let Some(rec) = recording else {
        if model.cfg != recorded_cfg {
            println!("note: the GGUF's model config differs from the golden's fixture");
        }
        return Ok(model);
    };
    if let Some((field, want, got)) = config_difference(&recorded_cfg, &model.cfg) {
        anyhow::bail!(
            "{}: fixture.{field} is {want} but {} has {got}: this golden was not recorded on \
             this model",
            golden.source.display(),
            path.display()
        );
    }
    let id = GgufIdentity::of(path)?;
    if id.header_fnv1a64 != rec.identity.header_fnv1a64 {
        anyhow::bail!(
            "{}: fixture.gguf.header_fnv1a64 is {} (recorded on {}) but {} hashes to {}: \
             another file (its metadata or tensor table differs)",
            golden.source.display(),
            rec.identity.header_fnv1a64,
            rec.identity.path,
            path.display(),
            id.header_fnv1a64
        );
    }
    let tables = model.tables.as_ref().map(engram_tables_hash);
    if tables != rec.engram_tables_fnv1a64 {
        anyhow::bail!(
            "{}: fixture.gguf.engram_tables_fnv1a64 is {:?} but the engram tables of {} hash to \
             {:?}",
            golden.source.display(),
            rec.engram_tables_fnv1a64,
            path.display(),
            tables
        );
    }
    if let Some(r) = &rec.layers {
        model.set_layers(Some(r.clone()))?;
        println!(
            "layers:  {}-{} (as recorded; then Final on block {}'s output)",
            r.start(),
            r.end(),
            r.end()
        );
    }
    Ok(model)
}

/// The graph config of a golden's fixture. A golden recorded on a GGUF holds no engram tables
/// (they are the GGUF's, checked by hash), so only its config is read; any other golden's
/// tables are validated (or derived) as well.
pub fn golden_config(golden: &Golden) -> anyhow::Result<golden_lens::model::ModelConfig> {
    if GgufRecording::of_golden(golden)?.is_some() {
        return Ok(golden_lens::model::ModelConfig::from_fixture(
            &golden.fixture,
        )?);
    }
    Ok(session::model_of(golden)?.0)
}
