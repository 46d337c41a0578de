//! Opening files: goldens and GGUFs load on a worker thread, native dialogs run on their own
//! thread (without a desktop portal they fail with a message instead of hanging the UI), and
//! dropped files become open commands.

use super::commands::{FileKind, UiCommand, UiCommandSender};
use crate::golden::embedded::{default_golden, DEFAULT_GOLDEN_JSON, DEFAULT_GOLDEN_LABEL};
use crate::golden::Golden;
use crate::session::export::content_hash_hex;
use eframe::egui;
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::Arc;

/// A golden the app has open, with what provenance needs.
#[derive(Clone)]
pub struct LoadedGolden {
    pub golden: Arc<Golden>,
    /// The path, or the embedded golden's label.
    pub label: String,
    /// fnv1a64 of the file's bytes.
    pub hash_hex: String,
}

/// A GGUF whose header was read: its summary, and whether the backends can run on it.
pub struct OpenedGguf {
    pub path: PathBuf,
    pub summary: String,
    /// Ok when it is a valid `deepseek41` file (its weights and metadata can drive the
    /// backends); else why not, naming the file.
    pub runnable: Result<(), String>,
}

/// A finished background file job.
pub enum FileJob {
    Golden(Result<LoadedGolden, String>),
    Gguf(Result<OpenedGguf, String>),
    Picked(FileKind, PathBuf),
    DialogFailed(String),
    /// The self-test table of request `generation`, or why it could not run.
    Selftest {
        generation: u64,
        result: Result<Vec<crate::session::selftest::SelftestRow>, String>,
    },
    /// An export finished: what was written, or why not (naming the file).
    Exported(Result<String, String>),
    /// A determinism run of request `generation`, or why it could not run.
    Determinism {
        generation: u64,
        result: Result<crate::ui::panels::determinism::DeterminismOutcome, String>,
    },
    /// A localisation of run `generation`, or why it could not run.
    Localize {
        generation: u64,
        result: Result<crate::session::controller::LocalizeOutcome, String>,
    },
}

/// Run a localisation (the session's [`crate::session::controller::run_localize`]) over
/// `golden` with the app's backends on a worker thread and report a [`FileJob::Localize`].
pub fn run_localize_async(
    golden: Arc<Golden>,
    backends: crate::ui::app::BackendMaker,
    gguf: Option<PathBuf>,
    request: crate::session::controller::LocalizeRequest,
    generation: u64,
    tx: Sender<FileJob>,
    ctx: Option<egui::Context>,
) {
    spawn("localize", move || {
        let factory = || backends(&golden, gguf.as_deref());
        let result = crate::session::controller::run_localize(&golden, &factory, &request)
            .map_err(|e| e.to_string());
        let _ = tx.send(FileJob::Localize { generation, result });
        wake(&ctx);
    });
}

/// Run the app's test backend (the last one the maker builds) `runs` times from fresh state
/// on a worker thread and report a [`FileJob::Determinism`].
pub fn run_determinism_async(
    golden: Arc<Golden>,
    backends: crate::ui::app::BackendMaker,
    gguf: Option<PathBuf>,
    runs: usize,
    generation: u64,
    tx: Sender<FileJob>,
    ctx: Option<egui::Context>,
) {
    spawn("determinism", move || {
        use crate::model::Backend;
        use crate::session::SessionError;
        let name = std::cell::RefCell::new(String::new());
        let mut make = || -> Result<Box<dyn Backend>, SessionError> {
            let b = backends(&golden, gguf.as_deref())?
                .pop()
                .ok_or(SessionError::NoBackend)?;
            *name.borrow_mut() = b.name();
            Ok(b)
        };
        let result = crate::session::determinism::repeat_runs(&golden, &mut make, runs)
            .map(
                |report| crate::ui::panels::determinism::DeterminismOutcome {
                    backend: name.borrow().clone(),
                    report,
                },
            )
            .map_err(|e| e.to_string());
        let _ = tx.send(FileJob::Determinism { generation, result });
        wake(&ctx);
    });
}

/// Run the self-test (oracle fault plantings, and the GPU injections when `with_gpu`) on a
/// worker thread and report a [`FileJob::Selftest`].
pub fn run_selftest_async(
    golden: Arc<Golden>,
    with_gpu: bool,
    generation: u64,
    tx: Sender<FileJob>,
    ctx: Option<egui::Context>,
) {
    spawn("self-test", move || {
        use crate::session::selftest::{default_targets, run_oracle_selftest};
        let result = run_oracle_selftest(&golden, &default_targets()).map_err(|e| e.to_string());
        #[cfg(feature = "gpu")]
        let result = result.and_then(|mut rows| {
            if with_gpu {
                if let Some((_, gpu_rows)) = crate::session::selftest::run_gpu_selftest(&golden)
                    .map_err(|e| e.to_string())?
                {
                    rows.extend(gpu_rows);
                }
            }
            Ok(rows)
        });
        #[cfg(not(feature = "gpu"))]
        let _ = with_gpu;
        let _ = tx.send(FileJob::Selftest { generation, result });
        wake(&ctx);
    });
}

/// Write the failing captures JSON on a worker thread and report a [`FileJob::Exported`].
pub fn export_failing_async(
    path: PathBuf,
    golden: Arc<Golden>,
    failing: Vec<crate::session::controller::CaptureResult>,
    provenance: crate::session::export::Provenance,
    tx: Sender<FileJob>,
    ctx: Option<egui::Context>,
) {
    spawn("export", move || {
        let result =
            crate::session::export::write_failing_captures(&path, &golden, &failing, &provenance)
                .map(|n| format!("exported {n} failing captures to {}", path.display()))
                .map_err(|e| format!("export failed: {e}"));
        let _ = tx.send(FileJob::Exported(result));
        wake(&ctx);
    });
}

/// Write one capture as `.npy` on a worker thread and report a [`FileJob::Exported`].
pub fn export_npy_async(
    path: PathBuf,
    label: String,
    shape: Vec<usize>,
    values: Arc<crate::model::CaptureValues>,
    tx: Sender<FileJob>,
    ctx: Option<egui::Context>,
) {
    spawn("export", move || {
        let result = crate::session::export::write_npy(&path, &shape, &values)
            .map(|()| format!("exported {label} to {}", path.display()))
            .map_err(|e| format!("export .npy failed: {e}"));
        let _ = tx.send(FileJob::Exported(result));
        wake(&ctx);
    });
}

/// Errors writing a screenshot.
#[derive(Debug, thiserror::Error)]
pub enum ScreenshotError {
    #[error("{path}: the screenshot is {width}x{height} pixels but holds {pixels} pixels")]
    Size {
        path: String,
        width: usize,
        height: usize,
        pixels: usize,
    },
    #[error("{path}: cannot write the PNG: {source}")]
    Write {
        path: String,
        source: image::ImageError,
    },
}

/// Write an egui image as a PNG.
pub fn write_png(path: &std::path::Path, image: &egui::ColorImage) -> Result<(), ScreenshotError> {
    let [w, h] = image.size;
    let bytes: Vec<u8> = image.pixels.iter().flat_map(|c| c.to_array()).collect();
    let size_err = || ScreenshotError::Size {
        path: path.display().to_string(),
        width: w,
        height: h,
        pixels: image.pixels.len(),
    };
    let (wu, hu) = (
        u32::try_from(w).map_err(|_| size_err())?,
        u32::try_from(h).map_err(|_| size_err())?,
    );
    let buf = image::RgbaImage::from_raw(wu, hu, bytes).ok_or_else(size_err)?;
    buf.save_with_format(path, image::ImageFormat::Png)
        .map_err(|source| ScreenshotError::Write {
            path: path.display().to_string(),
            source,
        })
}

/// The embedded default golden as a loaded golden.
pub fn embedded_golden() -> Result<LoadedGolden, String> {
    let g = default_golden().map_err(|e| e.to_string())?;
    Ok(LoadedGolden {
        golden: Arc::new(g),
        label: DEFAULT_GOLDEN_LABEL.to_string(),
        hash_hex: content_hash_hex(DEFAULT_GOLDEN_JSON.as_bytes()),
    })
}

/// Read and validate a golden file (what the loader thread runs).
pub fn load_golden(path: &std::path::Path) -> Result<LoadedGolden, String> {
    let golden = Golden::load(path).map_err(|e| e.to_string())?;
    // Golden::load has checked the size and read the file; read it again for the hash.
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(LoadedGolden {
        golden: Arc::new(golden),
        label: path.display().to_string(),
        hash_hex: content_hash_hex(&bytes),
    })
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) {
    // Thread creation fails only when the OS is out of resources; the job then never reports,
    // which the UI shows as a load that does not finish.
    let _ = std::thread::Builder::new().name(name.into()).spawn(f);
}

fn wake(ctx: &Option<egui::Context>) {
    if let Some(c) = ctx {
        c.request_repaint();
    }
}

/// Load a golden on a worker thread and report a [`FileJob::Golden`].
pub fn load_golden_async(path: PathBuf, tx: Sender<FileJob>, ctx: Option<egui::Context>) {
    spawn("golden loader", move || {
        let _ = tx.send(FileJob::Golden(load_golden(&path)));
        wake(&ctx);
    });
}

/// A one-line summary of a GGUF (shards, dialect, tensor count) and whether the backends can run
/// on it, or why it could not be read.
pub fn open_gguf(path: &std::path::Path) -> Result<OpenedGguf, String> {
    let set = crate::gguf::GgufSet::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let report =
        crate::gguf::info::build_report(&set).map_err(|e| format!("{}: {e}", path.display()))?;
    let (dialect, runnable) = match (&report.dialect, &report.deepseek41_error) {
        (Some(d), _) => (format!("deepseek41 dialect {d}"), Ok(())),
        (None, Some(e)) => (
            format!("not a valid deepseek41 file: {e}"),
            Err(format!(
                "{}: not a valid deepseek41 file: {e}",
                path.display()
            )),
        ),
        (None, None) => (
            "no deepseek41 dialect".to_string(),
            Err(format!("{}: no deepseek41 dialect", path.display())),
        ),
    };
    let summary = format!(
        "GGUF {}: {} shard(s), {} tensors, {dialect}{}",
        path.display(),
        report.shards.len(),
        report.tensors.len(),
        if runnable.is_ok() {
            "; the backends run on its weights and metadata"
        } else {
            ""
        }
    );
    Ok(OpenedGguf {
        path: path.to_path_buf(),
        summary,
        runnable,
    })
}

/// Read a GGUF's header on a worker thread and report a [`FileJob::Gguf`].
pub fn load_gguf_async(path: PathBuf, tx: Sender<FileJob>, ctx: Option<egui::Context>) {
    spawn("gguf loader", move || {
        let _ = tx.send(FileJob::Gguf(open_gguf(&path)));
        wake(&ctx);
    });
}

/// Show a native dialog for `kind` on its own thread. Without a desktop portal (no D-Bus
/// session, no xdg-desktop-portal) rfd returns no file; the app then says so and points to the
/// path field.
pub fn pick_file_async(kind: FileKind, tx: Sender<FileJob>, ctx: Option<egui::Context>) {
    spawn("file dialog", move || {
        if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_none() {
            let _ = tx.send(FileJob::DialogFailed(
                "file dialog unavailable: no D-Bus session (the desktop portal is needed); type a \
                 path into the path field or drop a file on the window"
                    .into(),
            ));
            wake(&ctx);
            return;
        }
        let dialog = rfd::FileDialog::new();
        let picked = match kind {
            FileKind::Golden => dialog.add_filter("golden JSON", &["json"]).pick_file(),
            FileKind::Gguf => dialog.add_filter("GGUF", &["gguf"]).pick_file(),
            FileKind::ExportFailing => dialog.set_file_name("failing_captures.json").save_file(),
            FileKind::ExportNpy => dialog.set_file_name("capture.npy").save_file(),
        };
        let _ = tx.send(match picked {
            Some(p) => FileJob::Picked(kind, p),
            None => FileJob::DialogFailed(
                "file dialog closed without a file (or no desktop portal answered); the path \
                 field works without one"
                    .into(),
            ),
        });
        wake(&ctx);
    });
}

/// Turn files dropped on the window into open commands.
pub fn dropped_files_ui(ctx: &egui::Context, tx: &dyn UiCommandSender) {
    let dropped = ctx.input(|i| i.raw.dropped_files.clone());
    for f in dropped {
        let p = f.path();
        if !p.as_os_str().is_empty() {
            tx.send_ui(UiCommand::OpenPath(p.to_path_buf()));
        }
    }
}
