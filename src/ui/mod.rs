//! The desktop app (feature `gui`): an eframe window over the session. Panels draw from
//! read-only state and send commands; one handler applies them; backends run on the session's
//! worker thread.

pub mod app;
pub mod commands;
pub mod files;
pub mod goldenless;
pub mod handler;
pub mod imported;
pub mod panels;
pub mod state;
pub mod theme;
pub mod views;
pub mod workbench;

pub use app::{AppOptions, AppState, GoldenLensApp, GpuStatus};
pub use commands::{DetailView, FileKind, UiCommand, UiCommandSender};

/// Initial window size in points.
pub const WINDOW_SIZE_PT: [f32; 2] = theme::WINDOW_SIZE_PT;

/// Open the window (at `size`, or the remembered size) and run until it closes.
pub fn run_native(options: AppOptions, size: Option<[f32; 2]>) -> anyhow::Result<()> {
    let mut viewport = eframe::egui::ViewportBuilder::default()
        .with_title("golden-lens")
        .with_inner_size(size.unwrap_or(WINDOW_SIZE_PT))
        .with_drag_and_drop(true);
    if size.is_some() {
        // An explicit size (screenshots) must not be resized by the window manager.
        viewport = viewport.with_resizable(false);
    }
    // A fresh start (screenshots) reads and writes a storage file of its own, so neither the
    // remembered panel splits nor the remembered files apply, and the user's are left alone.
    let fresh_path = options.fresh.then(|| {
        std::env::temp_dir().join(format!("golden-lens-fresh-{}.ron", std::process::id()))
    });
    let native = eframe::NativeOptions {
        viewport,
        // A fixed-size window (screenshots) does not restore the remembered size.
        persist_window: size.is_none(),
        persistence_path: fresh_path.clone(),
        ..Default::default()
    };
    let result = eframe::run_native(
        "golden-lens",
        native,
        Box::new(move |cc| Ok(Box::new(GoldenLensApp::from_creation(cc, options)))),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"));
    if let Some(p) = fresh_path {
        // Only this process wrote it; a failure to remove it leaves a small file in temp.
        let _ = std::fs::remove_file(p);
    }
    result
}
