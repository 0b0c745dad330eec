//! The host's one change notifier, for one child or many.
//!
//! A single `notify` watcher (one inotify instance on Linux) watches, non-recursively, the
//! directories the host's membership names: for `watch`, the rollout's parent directory (the
//! file may not exist yet, and may be renamed or replaced); for `supervise`, the directories
//! discovery names (`crate::supervise::discover::Discovery::watch_dirs`: the date directories
//! from the session's day on, the directories new date directories appear in, and
//! `archived_sessions`); for the daemon, the session directories. Every followed rollout lives
//! in one of them, so the host routes each changed path to the pipeline that follows it, and
//! hands the rest to its membership (discovery).
//!
//! Events are only hints, collected by the backend (`crate::platform::notifier`: `notify`, or
//! inotify read directly for the daemon on Linux) as a set of paths behind one coalesced
//! wake-up, or a request for a full scan. The safety-net poll covers anything notification
//! misses, and is all there is when no backend could start or polling is forced.
//!
//! The owner may also name which paths matter to it ([`Notifier::start_filtered`]); the rest
//! are dropped in the notification thread, before anyone is woken. The daemon watches the
//! kcap CLI's watcher directory for sessions' pid files, where every held key's heartbeat is
//! rewritten every 10 s (about ten a second with 10 sessions of 10 children): without the
//! filter, each woke its loop.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::platform::notifier::{self as backends, Backend, Sink};

pub(crate) use crate::platform::notifier::Changes;

/// The host's one notifier.
pub(crate) struct Notifier {
    /// `None`: polling only (see [`Notifier::polling_because`]).
    backend: Option<Box<dyn Backend>>,
    watched: BTreeSet<PathBuf>,
    sink: Sink,
    /// Why there is no notification (forced polling, or the notifier could not start).
    polling_because: Option<String>,
    /// The last [`Notifier::sync`] left a directory unwatched.
    unwatched: bool,
}

impl Notifier {
    /// Starts the notifier, or polling only when `force_poll` is set or it cannot start.
    pub fn start(force_poll: bool) -> Notifier {
        Notifier::with(force_poll, |sink| {
            backends::recommended(sink, Box::new(|_| true))
        })
    }

    /// [`Notifier::start`], keeping only the paths `wanted` accepts: an event none of whose
    /// paths it accepts wakes nobody. An event without paths (a rescan) is always kept. Its
    /// backend is the one for a busy directory ([`backends::filtered`]: on Linux inotify read
    /// directly, with a narrower mask and paced reads): the daemon's watcher directory changes
    /// ten times a second.
    pub fn start_filtered(
        force_poll: bool,
        wanted: impl Fn(&Path) -> bool + Send + 'static,
    ) -> Notifier {
        Notifier::with(force_poll, |sink| {
            backends::filtered(sink, Box::new(wanted))
        })
    }

    fn with(
        force_poll: bool,
        start: impl FnOnce(&Sink) -> Result<Box<dyn Backend>, String>,
    ) -> Notifier {
        let sink = Sink::default();
        let (backend, polling_because) = if force_poll {
            (
                None,
                Some("polling forced by KCAP_WATCH_FORCE_POLL".to_string()),
            )
        } else {
            match start(&sink) {
                Ok(b) => (Some(b), None),
                Err(e) => (
                    None,
                    Some(format!(
                        "file notification unavailable ({e}); polling instead"
                    )),
                ),
            }
        };
        Notifier {
            backend,
            watched: BTreeSet::new(),
            sink,
            polling_because,
            unwatched: false,
        }
    }

    /// Whether every change to a file in the watched directories is reported: inotify (on
    /// Linux) running and watching every directory asked for. Elsewhere the platform's
    /// notification may report a file another process appends to only late (Windows updates
    /// a directory entry's size lazily), so it is never relied on there.
    /// A directory whose watch the system dropped (removed, replaced) is unwatched until a
    /// sync watches it again.
    pub fn reports_every_change(&mut self) -> bool {
        if let Some(backend) = self.backend.as_mut() {
            let lost = backend.take_lost();
            if !lost.is_empty() {
                for dir in &lost {
                    self.watched.remove(dir);
                }
                self.unwatched = true;
            }
        }
        cfg!(target_os = "linux") && self.backend.is_some() && !self.unwatched
    }

    /// `Some(reason)` when only the poll notices changes.
    pub fn polling_because(&self) -> Option<&str> {
        self.polling_because.as_deref()
    }

    /// Watches exactly `dirs` (adding new ones, dropping ones no longer wanted). A directory
    /// that cannot be watched (not there yet) is tried again on the next call; the ones that
    /// failed this time are returned with why.
    pub fn sync(&mut self, dirs: &[PathBuf]) -> Vec<(PathBuf, String)> {
        let failed = self.sync_dirs(dirs);
        self.unwatched = !failed.is_empty();
        failed
    }

    fn sync_dirs(&mut self, dirs: &[PathBuf]) -> Vec<(PathBuf, String)> {
        let mut failed = Vec::new();
        if let Some(backend) = self.backend.as_mut() {
            for dir in backend.take_lost() {
                self.watched.remove(&dir);
            }
        }
        // The usual case at every poll: the same few directories, all watched. Checked
        // without copying them into a set (both ways: `dirs` may name one twice), by their
        // bytes first (a path's equality compares component by component, which was a tenth
        // of an idle supervisor's instructions); a spelling that differs (`a//b`) is then
        // compared as a path.
        let same = |a: &PathBuf, b: &PathBuf| a.as_os_str() == b.as_os_str();
        if dirs.iter().all(|d| self.watched.iter().any(|w| same(d, w)))
            && self.watched.iter().all(|w| dirs.iter().any(|d| same(d, w)))
        {
            return failed;
        }
        if dirs.iter().all(|d| self.watched.contains(d))
            && self.watched.iter().all(|w| dirs.contains(w))
        {
            return failed;
        }
        let wanted: BTreeSet<PathBuf> = dirs.iter().cloned().collect();
        for gone in self
            .watched
            .difference(&wanted)
            .cloned()
            .collect::<Vec<_>>()
        {
            self.unwatch(&gone);
            self.watched.remove(&gone);
        }
        for dir in wanted
            .difference(&self.watched)
            .cloned()
            .collect::<Vec<_>>()
        {
            let Some(result) = self.watch(&dir) else {
                return failed;
            };
            match result {
                Ok(()) => {
                    self.watched.insert(dir);
                }
                Err(e) => {
                    tracing::debug!(event = "watch_dir_failed", dir = %dir.display(), error = %e, "cannot watch {} yet: {e}", dir.display());
                    failed.push((dir, e.to_string()));
                }
            }
        }
        failed
    }

    /// Watches `dir` with the backend (`None`: none, polling only).
    fn watch(&mut self, dir: &Path) -> Option<Result<(), String>> {
        Some(self.backend.as_mut()?.watch(dir))
    }

    fn unwatch(&mut self, dir: &Path) {
        if let Some(backend) = self.backend.as_mut() {
            backend.unwatch(dir);
        }
    }

    /// The directories watched now.
    #[cfg(test)]
    pub fn watched(&self) -> impl Iterator<Item = &PathBuf> {
        self.watched.iter()
    }

    /// Waits for the next batch of events (coalesced: many events, one wake-up).
    pub async fn changed(&self) {
        self.sink.changed().await;
    }

    /// Test helper: see [`Sink::paths_until`].
    #[cfg(test)]
    pub async fn paths_until(&self, last: &Path) -> BTreeSet<PathBuf> {
        self.sink.paths_until(last).await
    }

    /// Takes what the events since the last call named.
    pub fn take(&self) -> Changes {
        self.sink.take()
    }
}
