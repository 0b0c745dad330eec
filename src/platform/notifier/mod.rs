//! Change notification: the backends behind one trait, picked in one place (as `notify`'s
//! `RecommendedWatcher` picks its own).
//!
//! - `inotify` (Linux): inotify read directly, by a task on the host's own runtime, with a
//!   mask of the events that can mean a change (see its module for the measured reasons);
//! - `portable`: the `notify` crate (FSEvents or kqueue on macOS, `ReadDirectoryChangesW` on
//!   Windows) everywhere else.
//!
//! A backend only delivers: it puts the changed paths (or a request to rescan everything)
//! into a [`Sink`] and wakes its reader. What is watched and what a change means are the
//! host's (`crate::host::notifier`); with no backend at all the host polls.

#[cfg(target_os = "linux")]
mod inotify;
#[cfg(not(target_os = "linux"))]
mod portable;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// How many paths one notification batch may name before a full scan is cheaper.
pub(crate) const MAX_EVENT_PATHS: usize = 4096;

/// A filter on changed paths, run in the notification thread: a path it refuses wakes nobody.
pub(crate) type Wanted = Box<dyn Fn(&Path) -> bool + Send>;

/// A running backend: watches directories, non-recursively. `Sync`: the host that owns it is
/// held across awaits by tasks that may move between threads.
pub(crate) trait Backend: Send + Sync {
    fn watch(&mut self, dir: &Path) -> Result<(), String>;
    fn unwatch(&mut self, dir: &Path);
    /// The directories whose watch the system dropped since the last call (removed or
    /// replaced), forgotten by the backend: the host watches them again once they are back.
    fn take_lost(&mut self) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// The backend for most uses (`watch`, `supervise`): every change delivered as soon as it is
/// read.
pub(crate) fn recommended(sink: &Sink, wanted: Wanted) -> Result<Box<dyn Backend>, String> {
    #[cfg(target_os = "linux")]
    {
        inotify::RawInotify::start(sink.clone(), wanted, std::time::Duration::ZERO)
            .map(|b| Box::new(b) as Box<dyn Backend>)
            .map_err(|e| e.to_string())
    }
    #[cfg(not(target_os = "linux"))]
    {
        portable::NotifyBackend::start(sink.clone(), wanted)
            .map(|b| Box::new(b) as Box<dyn Backend>)
    }
}

/// The backend for a busy directory with a filter (the daemon's watcher directory): on Linux
/// its reads are paced, so a burst is one delivery; elsewhere [`recommended`].
pub(crate) fn filtered(sink: &Sink, wanted: Wanted) -> Result<Box<dyn Backend>, String> {
    #[cfg(target_os = "linux")]
    {
        inotify::RawInotify::start(sink.clone(), wanted, inotify::DAEMON_COALESCE)
            .map(|b| Box::new(b) as Box<dyn Backend>)
            .map_err(|e| e.to_string())
    }
    #[cfg(not(target_os = "linux"))]
    {
        recommended(sink, wanted)
    }
}

/// What changed since the last [`Sink::take`].
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Paths named by events, each once.
    pub paths: Vec<PathBuf>,
    /// Too many paths, or an event without paths: scan everything.
    pub rescan: bool,
    /// The backend reported an error (warn once; the poll carries on).
    pub failed: bool,
}

#[derive(Debug, Default)]
struct Inbox {
    paths: HashSet<PathBuf>,
    rescan: bool,
    failed: bool,
}

/// Where a backend's thread delivers and its reader waits: a set of paths (a burst of appends
/// to one file is one entry) behind one coalesced wake-up; past [`MAX_EVENT_PATHS`] distinct
/// paths the set is dropped and a full scan asked for instead, so memory stays bounded.
#[derive(Clone, Default)]
pub(crate) struct Sink {
    inbox: Arc<Mutex<Inbox>>,
    wake: Arc<Notify>,
}

impl Sink {
    /// Adds `paths` (and a rescan when `rescan`), then wakes the reader.
    pub(crate) fn deliver(&self, paths: impl IntoIterator<Item = PathBuf>, rescan: bool) {
        let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        inbox.rescan |= rescan;
        for path in paths {
            if inbox.paths.len() >= MAX_EVENT_PATHS {
                inbox.rescan = true;
                inbox.paths.clear();
                break;
            }
            inbox.paths.insert(path);
        }
        drop(inbox);
        self.wake.notify_one();
    }

    /// The backend failed: a rescan, and a failure to report, then the reader is woken.
    pub(crate) fn fail(&self) {
        let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        inbox.failed = true;
        inbox.rescan = true;
        drop(inbox);
        self.wake.notify_one();
    }

    /// Waits for the next batch (coalesced: many events, one wake-up).
    pub(crate) async fn changed(&self) {
        self.wake.notified().await;
    }

    /// Takes what was delivered since the last call.
    pub(crate) fn take(&self) -> Changes {
        let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = std::mem::take(&mut *inbox);
        Changes {
            paths: taken.paths.into_iter().collect(),
            rescan: taken.rescan,
            failed: taken.failed,
        }
    }

    /// Test helper: everything delivered until `last` is among the paths (one queue delivers
    /// in order, so what was done before `last` was written has been delivered, or dropped),
    /// failing after 10 s; a batch that asks for a rescan fails too.
    #[cfg(test)]
    pub(crate) async fn paths_until(&self, last: &Path) -> std::collections::BTreeSet<PathBuf> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut paths = std::collections::BTreeSet::new();
        while !paths.contains(last) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(
                tokio::time::timeout(left, self.changed()).await.is_ok(),
                "no notification for {}",
                last.display()
            );
            let changes = self.take();
            assert!(!changes.rescan, "a rescan was asked for");
            paths.extend(changes.paths);
        }
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_many_paths_become_one_rescan() {
        let sink = Sink::default();
        sink.deliver(
            (0..MAX_EVENT_PATHS + 1).map(|i| PathBuf::from(format!("/d/{i}"))),
            false,
        );
        let changes = sink.take();
        assert!(changes.rescan);
        assert!(changes.paths.len() < MAX_EVENT_PATHS);
        assert_eq!(sink.take(), Changes::default());
    }
}
