//! The desktop app (feature `gui`): an eframe window over the session. Panels draw from state and
//! push commands; one handler applies them; backends run on the session's worker thread.

pub mod app;
pub mod commands;
pub mod files;
pub mod imported;
pub mod panels;
pub mod theme;
pub mod views;

pub use app::{AppOptions, GoldenLensApp, GpuStatus};
pub use commands::{DetailView, FileKind, UiCommand};

/// Initial window size in points.
pub const WINDOW_SIZE_PT: [f32; 2] = [1600.0, 1000.0];

/// Open the window and run until it closes.
pub fn run_native(options: AppOptions) -> anyhow::Result<()> {
    let native = eframe::NativeOptions {
        viewport: eframe::egui::ViewportBuilder::default()
            .with_title("golden-lens")
            .with_inner_size(WINDOW_SIZE_PT)
            .with_drag_and_drop(true),
        ..Default::default()
    };
    eframe::run_native(
        "golden-lens",
        native,
        Box::new(move |cc| Ok(Box::new(GoldenLensApp::new(&cc.egui_ctx, options)))),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}
