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

/// The dump the app replays as its test side, and the map it is read through.
#[derive(Debug, Clone)]
pub struct OpenedDump {
    pub path: PathBuf,
    pub map: NameMap,
}

/// Localize the open dump (what `localize --captures` does): every step of the oracle run on
/// the dump's own inputs and state, the dump's local error against it, judged like the GPU
/// path unless the Atlas bars are asked for. An external engine cannot be reseeded or pinned,
/// so there is no counterfactual.
pub fn localize_dump(
    golden: &crate::golden::Golden,
    gguf: Option<&std::path::Path>,
    dump: &OpenedDump,
    request: &crate::session::controller::LocalizeRequest,
) -> Result<crate::session::controller::LocalizeOutcome, String> {
    use crate::session::localize::Judge;
    let model =
        crate::session::builder::ModelParts::open(golden, gguf).map_err(|e| e.to_string())?;
    let full =
        crate::session::imported::recorded_from_full_golden(golden).map_err(|e| e.to_string())?;
    let (recorded, reference) = match full {
        Some(r) => (r, "the golden's full tensors"),
        None => (
            crate::session::RecordedRun::record(golden, &mut model.oracle())
                .map_err(|e| e.to_string())?,
            "cpu oracle (full tensors)",
        ),
    };
    let imported = crate::import::backend_for(
        &dump.path,
        &dump.map,
        golden,
        crate::session::step_of_capture,
    )
    .map_err(|e| e.to_string())?;
    let judge = if request.atlas {
        Judge::Atlas
    } else {
        Judge::Gpu
    };
    let (localization, _) = crate::session::imported::localize_imported(
        &recorded,
        imported,
        Box::new(model.oracle()),
        &model.cfg,
        judge,
    )
    .map_err(|e| e.to_string())?;
    Ok(crate::session::controller::LocalizeOutcome {
        reference: reference.to_string(),
        test: format!(
            "the dump {} (local error: against the oracle on the dump's own inputs)",
            dump.path.display()
        ),
        localization,
        counterfactual: None,
    })
}
