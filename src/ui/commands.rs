//! Everything the UI can ask for, as data. Panels get a [`UiCommandSender`] and read-only state;
//! they send these, and `GoldenLensApp::handle` is the one place that applies them (Rerun's
//! `UICommandSender` habit), so behaviour is testable without clicks and no panel writes app
//! state behind the handler's back.

use crate::golden::names::{parse_capture_name, CaptureKind};
use crate::session::controller::{CaptureResult, LocalizeRequest, Request};
use crate::ui::theme::ThemeChoice;
use crate::ui::views::heatmap::SliceSpec;
use crate::ui::views::{HeatmapOptions, ReferenceChoice, TopkLayout};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};

/// Which file a dialog or path field is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A golden JSON to open.
    Golden,
    /// A deepseek41 GGUF to open.
    Gguf,
    /// Another engine's dump to replay as the test side.
    Captures,
    /// Where to write the failing-captures JSON.
    ExportFailing,
    /// Where to write the selected capture as `.npy`.
    ExportNpy,
}

/// The detail view shown for the selected capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// The label of the view's region (tests find the region by it).
    pub fn region_label(self) -> &'static str {
        match self {
            DetailView::Values => "Values view",
            DetailView::TopK => "Top-k agreement view",
            DetailView::WindowMask => "Window mask view",
            DetailView::HcMix => "HC mixes view",
            DetailView::Moe => "MoE routing view",
        }
    }
    /// The name `--view` takes.
    pub fn key(self) -> &'static str {
        match self {
            DetailView::Values => "values",
            DetailView::TopK => "topk",
            DetailView::WindowMask => "mask",
            DetailView::HcMix => "hc",
            DetailView::Moe => "moe",
        }
    }
    /// The view named `key` (see [`Self::key`]).
    pub fn from_key(key: &str) -> Option<DetailView> {
        DetailView::ALL.into_iter().find(|v| v.key() == key)
    }
}

/// Captures that open the same view by default; the view last chosen for a family is
/// remembered and opened for the next capture of that family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViewFamily {
    /// `sa_topk_idxs`: the window mask it implies.
    AttentionIndices,
    /// Other index and mask captures (`shared.*.topk_idxs`, `candidates`).
    Indices,
    /// `moe_*`: routing.
    Routing,
    /// Hyper-connection mixes (`attn_pre/post/comb`, `ffn_pre/post/comb`).
    Mixes,
    /// Everything else: values.
    Values,
}

impl ViewFamily {
    /// Every family (persistence order).
    pub const ALL: [ViewFamily; 5] = [
        ViewFamily::AttentionIndices,
        ViewFamily::Indices,
        ViewFamily::Routing,
        ViewFamily::Mixes,
        ViewFamily::Values,
    ];
    /// The family of a capture.
    pub fn of(r: &CaptureResult) -> ViewFamily {
        let base = parse_capture_name(&r.name).base;
        if base == "sa_topk_idxs" {
            ViewFamily::AttentionIndices
        } else if base.starts_with("moe_") {
            ViewFamily::Routing
        } else if [
            "attn_pre",
            "attn_post",
            "attn_comb",
            "ffn_pre",
            "ffn_post",
            "ffn_comb",
        ]
        .contains(&base.as_str())
        {
            ViewFamily::Mixes
        } else if matches!(r.kind, CaptureKind::Index | CaptureKind::Mask) {
            ViewFamily::Indices
        } else {
            ViewFamily::Values
        }
    }
    /// The most telling view of the family.
    pub fn default_view(self) -> DetailView {
        match self {
            ViewFamily::AttentionIndices => DetailView::WindowMask,
            ViewFamily::Indices => DetailView::TopK,
            ViewFamily::Routing => DetailView::Moe,
            ViewFamily::Mixes => DetailView::HcMix,
            ViewFamily::Values => DetailView::Values,
        }
    }
    /// Stable name (persistence).
    pub fn key(self) -> &'static str {
        match self {
            ViewFamily::AttentionIndices => "attention_indices",
            ViewFamily::Indices => "indices",
            ViewFamily::Routing => "routing",
            ViewFamily::Mixes => "mixes",
            ViewFamily::Values => "values",
        }
    }
}

/// Which failing captures the list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum VerdictFilter {
    #[default]
    All,
    Failing,
    Passing,
    /// Passing but not bit-exact against some reference.
    NotBitExact,
}

impl VerdictFilter {
    pub const ALL: [VerdictFilter; 4] = [
        VerdictFilter::All,
        VerdictFilter::Failing,
        VerdictFilter::Passing,
        VerdictFilter::NotBitExact,
    ];
    pub fn label(self) -> &'static str {
        match self {
            VerdictFilter::All => "any",
            VerdictFilter::Failing => "failing",
            VerdictFilter::Passing => "passing",
            VerdictFilter::NotBitExact => "not bit-exact",
        }
    }
}

/// How the list is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum ListSort {
    /// Execution order, grouped by regime and layer.
    #[default]
    Execution,
    /// Worst error/tolerance first (no groups).
    RatioDescending,
}

impl ListSort {
    pub fn label(self) -> &'static str {
        match self {
            ListSort::Execution => "execution",
            ListSort::RatioDescending => "worst ratio",
        }
    }
}

/// The capture list's filters and order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only captures whose `regime/name` contains this text (case-insensitive).
    pub name: String,
    /// Only captures of this kind.
    pub kind: Option<CaptureKind>,
    /// Only captures of this layer (`Some(None)`: captures without a layer).
    pub layer: Option<Option<usize>>,
    pub verdict: VerdictFilter,
    pub sort: ListSort,
}

/// A foldable region of the main window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    Overview,
    Metrics,
}

/// A background job the app can run (each shows a progress bar while it runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobKind {
    Localize,
    Selftest,
    Determinism,
    Export,
}

impl JobKind {
    pub fn label(self) -> &'static str {
        match self {
            JobKind::Localize => "Localize",
            JobKind::Selftest => "Self-test",
            JobKind::Determinism => "Determinism",
            JobKind::Export => "Export",
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
    /// The prompt row's fields changed.
    SetPromptForm(crate::ui::goldenless::PromptForm),
    /// Run the prompt row on the open GGUF with no golden: the CPU oracle is the live
    /// reference (tokenized on a worker thread, then a new session).
    RunPrompt,
    /// Show a native file dialog (on its own thread; without a desktop portal it reports an error).
    PickFile(FileKind),
    /// The text of the toolbar's path field.
    SetPathField(String),
    /// Pass a run request to the session worker.
    Run(Request),
    /// Stop the running request after its current step.
    Cancel,
    /// The layer "Run to layer" runs to.
    SetRunToLayer(usize),
    /// Select a capture by its index in execution order.
    SelectCapture(usize),
    /// Select the next (`forward`) or previous failing capture in the list's order.
    SelectFailing { forward: bool },
    /// Move the selection this many rows in the list (arrow keys).
    MoveSelection(isize),
    /// Show another detail view (remembered for the selected capture's family).
    SetDetailView(DetailView),
    /// Filter or sort the capture list.
    SetListFilter(ListFilter),
    /// Fold or unfold a group of the list (its key, see `capture_list::group_key`).
    ToggleGroup(String),
    /// Show or hide the overview or the metrics table.
    SetRegionOpen { region: Region, open: bool },
    /// Write the failing captures JSON here (off the UI thread).
    ExportFailing(PathBuf),
    /// Write the selected capture (test side) as `.npy` here (off the UI thread).
    ExportSelectedNpy(PathBuf),
    /// Choose the views' test backend (index into the capture's backends) and reference side.
    SetTestSide {
        backend: usize,
        reference: ReferenceChoice,
    },
    /// The slice the Values view shows for captures named `name`.
    SetSlice { name: String, spec: SliceSpec },
    /// Colour scale, fold by tile and the other heatmap settings.
    SetHeatmapOptions(HeatmapOptions),
    /// Token shown by the HC view.
    SetHcToken(usize),
    /// Positions raster or slot grid in the top-k view.
    SetTopkLayout(TopkLayout),
    /// Remove the error message at this index.
    DismissError(usize),
    /// Run the comparator self-test (every fault kind planted) off the UI thread.
    RunSelftest,
    /// Hide the self-test window.
    CloseSelftest,
    /// Run the test backend this many times off the UI thread and list bitwise instability
    /// (opens the Determinism window).
    RunDeterminism(usize),
    /// The number of runs the Determinism window offers.
    SetDeterminismRuns(usize),
    /// Show the Determinism window without running.
    OpenDeterminism,
    /// Hide the Determinism window.
    CloseDeterminism,
    /// Show the Localize window (running a localisation when it has no result yet).
    OpenLocalize,
    /// The Localize window's settings.
    SetLocalizeSettings(crate::ui::panels::localize::LocalizeSettings),
    /// Run a localisation off the UI thread (replacing the window's result when it finishes).
    RunLocalize(LocalizeRequest),
    /// Hide the Localize window.
    CloseLocalize,
    /// Stop waiting for a background job: its result is dropped when it arrives.
    CancelJob(JobKind),
    /// Select a capture by its `regime/name` label; when it has not run yet, run until it has
    /// and select it then.
    SelectCaptureLabel(String),
    /// Run the backends on the golden's filler weights again instead of an opened GGUF's.
    UseGoldenWeights,
    /// Switch between the dark and the light theme.
    SetTheme(ThemeChoice),
    /// Watch this shader directory (kernel workbench): every save that validates re-checks
    /// the run from the first step using a changed kernel.
    WatchShaders(PathBuf),
    /// The text of the workbench's shader directory field.
    SetShadersField(String),
    /// Show or hide a workbench window.
    SetWorkbenchWindow { window: WorkbenchWindow, open: bool },
    /// The step the Profile window narrows to (None: every step).
    SetProfileStep(Option<String>),
}

/// The kernel workbench's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkbenchWindow {
    /// The last re-check's verdict changes.
    Recheck,
    /// Per-kernel GPU times.
    Profile,
}

/// What panels send commands through (Rerun's `UICommandSender`): they never get the app.
pub trait UiCommandSender {
    fn send_ui(&self, command: UiCommand);
}

/// The app's command queue: a channel drained once per frame by the handler.
#[derive(Clone)]
pub struct CommandSender(Sender<UiCommand>);

impl UiCommandSender for CommandSender {
    fn send_ui(&self, command: UiCommand) {
        // The receiver lives as long as the app; a send fails only while the app is dropped.
        let _ = self.0.send(command);
    }
}

/// A sender and the receiver the app drains.
pub fn command_channel() -> (CommandSender, Receiver<UiCommand>) {
    let (tx, rx) = std::sync::mpsc::channel();
    (CommandSender(tx), rx)
}
