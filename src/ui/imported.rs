//! An imported dump as the app's test side: the backends the app builds become the reference
//! oracle (the maker's first backend) and the dump's replay beside it, joined with whichever
//! golden the app has open.

use super::app::BackendMaker;
use crate::import::NameMap;
use crate::session::controller::BoxedBackend;
use std::path::PathBuf;
use std::sync::Arc;

/// `inner`'s oracle plus the dump at `dump` (through `map`) as the test backend.
pub fn with_captures(inner: BackendMaker, dump: PathBuf, map: NameMap) -> BackendMaker {
    Arc::new(move |golden, gguf| {
        let mut backends = inner(golden, gguf)?;
        backends.truncate(1);
        let imported =
            crate::import::backend_for(&dump, &map, golden, crate::session::step_of_capture)?;
        backends.push(Box::new(imported) as BoxedBackend);
        Ok(backends)
    })
}

/// True for a path the app opens as a dump rather than a golden: a safetensors, `.npy`, `.npz`
/// or TSV manifest file, or a folder (holding a manifest).
pub fn is_dump(path: &std::path::Path) -> bool {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    path.is_dir() || matches!(ext.as_deref(), Some("safetensors" | "npy" | "npz" | "tsv"))
}
