//! Captures from other engines: readers for their dump files (safetensors, `.npy`/`.npz`, raw
//! binary with a TSV/JSON manifest, ds4's per-position files), name maps as data (TOML rules
//! from engine names to golden-lens capture names), the join of a dump with a golden's capture
//! list, and the joined dump as a [`Backend`](crate::model::Backend) that replays it.

pub mod backend;
pub mod dump;
pub mod error;
pub mod join;
pub mod map;
pub mod npy;
pub mod npz;
pub mod raw;
pub mod safetensors;
pub mod tensor;

pub use backend::ImportedBackend;
pub use dump::{Dump, Format};
pub use error::ImportError;
pub use join::{join, regimes_of, JoinOptions, Joined};
pub use map::NameMap;
pub use tensor::{DType, DumpTensor, TensorValues};

/// Open the dump at `path` and join it with `golden` through `map`.
pub fn import(
    path: &std::path::Path,
    map: &NameMap,
    golden: &crate::golden::Golden,
) -> Result<(Dump, Joined), ImportError> {
    let dump = Dump::open(path)?;
    let opts = JoinOptions {
        window_size: crate::model::ModelConfig::from_fixture(&golden.fixture)
            .ok()
            .map(|c| c.window_size),
    };
    let joined = join(path, &dump.tensors, map, &regimes_of(golden), opts)?;
    Ok((dump, joined))
}

/// The joined captures in canonical form (`{regime}/{capture}`, row-major, f32 or i64), the
/// tensors `captures convert` writes.
pub fn canonical_tensors(joined: &Joined) -> Vec<(String, Vec<usize>, TensorValues)> {
    joined
        .regimes
        .iter()
        .flat_map(|r| {
            r.captures.iter().map(move |c| {
                let values = c.capture.values.clone();
                (
                    format!("{}/{}", r.name, c.capture.name),
                    c.capture.shape.clone(),
                    values,
                )
            })
        })
        .collect()
}

/// The dump at `path`, joined with `golden` through `map`, as a backend whose regimes run the
/// golden's step sequence. `step_of` is the session's capture-to-step rule.
pub fn backend_for(
    path: &std::path::Path,
    map: &NameMap,
    golden: &crate::golden::Golden,
    step_of: backend::StepOf,
) -> Result<ImportedBackend, ImportError> {
    let cfg =
        crate::model::ModelConfig::from_fixture(&golden.fixture).map_err(|e| ImportError::Map {
            map: map.name.clone(),
            msg: format!("the golden's fixture gives no model config: {e}"),
        })?;
    let (_, joined) = import(path, map, golden)?;
    Ok(ImportedBackend::for_config(joined, &cfg, step_of))
}
