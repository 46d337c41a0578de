//! Everything the UI can ask for, as data. Panels push these; `GoldenLensApp::handle` is the one
//! place that applies them (Rerun's `UICommand` habit), so behaviour is testable without clicks.

use crate::session::controller::{LocalizeRequest, Request};
use std::path::PathBuf;

/// Which file a dialog or path field is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A golden JSON to open.
    Golden,
    /// A deepseek41 GGUF to open.
    Gguf,
    /// Where to write the failing-captures JSON.
    ExportFailing,
    /// Where to write the selected capture as `.npy`.
    ExportNpy,
}

/// The detail view shown for the selected capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailView {
    Values,
    TopK,
    WindowMask,
    HcMix,
    Moe,
}

impl DetailView {
    /// Every view, in tab order.
    pub const ALL: [DetailView; 5] = [
        DetailView::Values,
        DetailView::TopK,
        DetailView::WindowMask,
        DetailView::HcMix,
        DetailView::Moe,
    ];
    /// The tab's text (also its accessibility label).
    pub fn title(self) -> &'static str {
        match self {
            DetailView::Values => "Values",
            DetailView::TopK => "Top-k agreement",
            DetailView::WindowMask => "Window mask",
            DetailView::HcMix => "HC mixes",
            DetailView::Moe => "MoE routing",
        }
    }
}

/// One thing the user asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum UiCommand {
    /// Load a golden from a path (off the UI thread) and start a session on it.
    OpenGolden(PathBuf),
    /// Go back to the golden compiled into the binary.
    OpenEmbeddedGolden,
    /// Read a GGUF's header and show what it holds.
    OpenGguf(PathBuf),
    /// Open a file at a path, deciding golden or GGUF by its extension (drag and drop, path field).
    OpenPath(PathBuf),
    /// Replay another engine's dump as the test side beside the oracle (through the app's map).
    OpenCaptures(PathBuf),
    /// Show a native file dialog (on its own thread; without a desktop portal it reports an error).
    PickFile(FileKind),
    /// Pass a run request to the session worker.
    Run(Request),
    /// Stop the running request after its current step.
    Cancel,
    /// Select a capture by its index in execution order.
    SelectCapture(usize),
    /// Show another detail view.
    SetDetailView(DetailView),
    /// Write the failing captures JSON here.
    ExportFailing(PathBuf),
    /// Write the selected capture (test side) as `.npy` here.
    ExportSelectedNpy(PathBuf),
    /// Choose the views' test backend (index into the capture's backends) and reference side.
    SetTestSide {
        backend: usize,
        reference: crate::ui::views::ReferenceChoice,
    },
    /// Remove the error message at this index.
    DismissError(usize),
    /// Run the comparator self-test (every fault kind planted) off the UI thread.
    RunSelftest,
    /// Hide the self-test window.
    CloseSelftest,
    /// Run the test backend this many times off the UI thread and list bitwise instability
    /// (opens the Determinism window).
    RunDeterminism(usize),
    /// Show the Determinism window without running.
    OpenDeterminism,
    /// Hide the Determinism window.
    CloseDeterminism,
    /// Show the Localize window (running a localisation when it has no result yet).
    OpenLocalize,
    /// Run a localisation off the UI thread (replacing the window's result when it finishes).
    RunLocalize(LocalizeRequest),
    /// Hide the Localize window.
    CloseLocalize,
    /// Select a capture by its `regime/name` label; when it has not run yet, run until it has
    /// and select it then.
    SelectCaptureLabel(String),
    /// Run the backends on the golden's filler weights again instead of an opened GGUF's.
    UseGoldenWeights,
}
