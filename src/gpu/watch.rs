//! Watching a `--shaders DIR` while the app runs (the live re-check): file events from the
//! platform's watcher (`notify`: inotify, FSEvents, ReadDirectoryChangesW) make the directory be
//! read and validated again; a valid set that differs from the last good one names the families
//! whose pipelines must be rebuilt, an invalid one is reported (file, line, column) while the
//! last good set stays in force.

use super::shaders::{ShaderError, ShaderSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Quiet time after the last file event before the directory is read again: an editor's save
/// is several events (truncate, write, rename), and a half-written file must not be reported.
pub const SETTLE: Duration = Duration::from_millis(100);

/// What a reload of the watched directory found.
#[derive(Debug)]
pub enum ShaderEvent {
    /// The directory validates and differs from the last good set in `families` (empty when
    /// it only recovered from an error back to the last good text).
    Changed {
        set: Arc<ShaderSet>,
        families: Vec<&'static str>,
    },
    /// A file no longer parses, validates or keeps its interface; the last good set stays.
    Invalid(ShaderError),
}

/// The watcher could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("watching {}: {source}", dir.display())]
pub struct WatchError {
    pub dir: PathBuf,
    #[source]
    pub source: notify::Error,
}

/// A watched shader directory and the last set from it that validated.
pub struct ShaderWatch {
    dir: PathBuf,
    good: Arc<ShaderSet>,
    /// The error last reported, so one broken save is reported once.
    last_error: Option<String>,
    /// When the newest unhandled file event arrived.
    pending_since: Option<Instant>,
    events: mpsc::Receiver<()>,
    _watcher: notify::RecommendedWatcher,
}

impl std::fmt::Debug for ShaderWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShaderWatch")
            .field("dir", &self.dir)
            .field("last_error", &self.last_error)
            .finish_non_exhaustive()
    }
}

impl ShaderWatch {
    /// Watch `dir`, whose current good set is `good`; `wake` is called from the watcher's thread
    /// on every file event (the app requests a repaint, which then calls [`ShaderWatch::poll`]).
    pub fn new(
        dir: &Path,
        good: Arc<ShaderSet>,
        wake: impl Fn() + Send + 'static,
    ) -> Result<ShaderWatch, WatchError> {
        use notify::Watcher;
        let err = |source| WatchError {
            dir: dir.to_path_buf(),
            source,
        };
        let (tx, events) = mpsc::channel();
        let mut watcher = notify::recommended_watcher(move |e: notify::Result<notify::Event>| {
            // Reads and metadata-only events do not change what compiles.
            let relevant = e.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_)));
            if relevant && tx.send(()).is_ok() {
                wake();
            }
        })
        .map_err(err)?;
        watcher
            .watch(dir, notify::RecursiveMode::NonRecursive)
            .map_err(err)?;
        Ok(ShaderWatch {
            dir: dir.to_path_buf(),
            good,
            last_error: None,
            pending_since: None,
            events,
            _watcher: watcher,
        })
    }

    /// The watched directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last set that validated.
    pub fn good(&self) -> &Arc<ShaderSet> {
        &self.good
    }

    /// When files changed and have been quiet for [`SETTLE`]: read the directory again and say
    /// what that changed ([`ShaderWatch::reload`]). `None` when nothing happened, nothing
    /// changed, or the files are still settling (call again after [`SETTLE`]).
    pub fn poll(&mut self) -> Option<ShaderEvent> {
        while self.events.try_recv().is_ok() {
            self.pending_since = Some(Instant::now());
        }
        match self.pending_since {
            Some(t) if t.elapsed() >= SETTLE => {
                self.pending_since = None;
                self.reload()
            }
            _ => None,
        }
    }

    /// True while file events wait for [`SETTLE`] (the app keeps repainting until then).
    pub fn settling(&self) -> bool {
        self.pending_since.is_some()
    }

    /// Read and validate the directory now. A valid set that differs from the last good one
    /// (or ends an error) becomes the good set; an error is reported once per distinct error.
    pub fn reload(&mut self) -> Option<ShaderEvent> {
        match ShaderSet::from_dir(&self.dir) {
            Ok(set) => {
                let families = set.changed_families(&self.good);
                let recovered = self.last_error.take().is_some();
                if families.is_empty() && !recovered {
                    return None;
                }
                self.good = Arc::new(set);
                Some(ShaderEvent::Changed {
                    set: self.good.clone(),
                    families,
                })
            }
            Err(e) => {
                let msg = e.to_string();
                if self.last_error.as_deref() == Some(msg.as_str()) {
                    return None;
                }
                self.last_error = Some(msg);
                Some(ShaderEvent::Invalid(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long a test waits for the platform's watcher to report a write.
    const EVENT_WAIT: Duration = Duration::from_secs(10);

    fn wait_for(w: &mut ShaderWatch) -> ShaderEvent {
        let t0 = Instant::now();
        loop {
            if let Some(e) = w.poll() {
                return e;
            }
            assert!(t0.elapsed() < EVENT_WAIT, "no event from the watcher");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_break_then_a_fix_of_a_watched_file_are_seen_without_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        ShaderSet::export(dir.path()).expect("export");
        let good = Arc::new(ShaderSet::from_dir(dir.path()).expect("valid"));
        let mut w = ShaderWatch::new(dir.path(), good, || {}).expect("watch");
        assert!(w.poll().is_none(), "nothing changed yet");
        let rope = dir.path().join("rope.wgsl");
        let text = std::fs::read_to_string(&rope).expect("read");
        // Break: a syntax error, located in the file; the good set stays.
        let broken = text.replacen("let a = y[i];", "let a = y[i]) ;", 1);
        std::fs::write(&rope, &broken).expect("write");
        match wait_for(&mut w) {
            ShaderEvent::Invalid(e) => {
                let (file, _, _) = e.location().expect("located");
                assert_eq!(Path::new(file), rope.as_path(), "{e}");
            }
            e => panic!("expected an error: {e:?}"),
        }
        assert!(w.good().changed_families(&ShaderSet::embedded()).is_empty());
        // An arithmetic edit that validates: only the rope family changed.
        let edited = text.replacen(
            "let re = keep(a * c) - keep(b * s);",
            "let re = keep(a * c) + keep(b * s);",
            1,
        );
        std::fs::write(&rope, &edited).expect("write");
        match wait_for(&mut w) {
            ShaderEvent::Changed { families, set } => {
                assert_eq!(families, vec!["rope"]);
                assert_eq!(
                    set.file("rope").map(|f| f.text.as_str()),
                    Some(edited.as_str())
                );
            }
            e => panic!("expected a change: {e:?}"),
        }
        // The fix: back to the embedded text, again only rope.
        std::fs::write(&rope, &text).expect("write");
        match wait_for(&mut w) {
            ShaderEvent::Changed { families, .. } => assert_eq!(families, vec!["rope"]),
            e => panic!("expected a change: {e:?}"),
        }
        assert!(w.good().changed_families(&ShaderSet::embedded()).is_empty());
    }
}
