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
//! Events are only hints. They are collected as a set of paths (a burst of appends to one
//! file is one entry) behind one coalesced wake-up; past [`MAX_EVENT_PATHS`] distinct paths
//! the set is dropped and a full scan is asked for instead, so memory stays bounded. The
//! safety-net poll covers anything notification misses.
//!
//! Opening a file or directory is no change: `notify` reports every `open(2)` in a watched
//! directory (inotify `IN_OPEN`), including the supervisor's own directory listings and
//! rollout reads, and treating those as changes fed a loop (a listing's open woke a
//! listing) that kept a core busy while every child was idle. Such access events are
//! dropped; only a close after writing is kept.
//!
//! The owner may also name which paths matter to it ([`Notifier::start_filtered`]); the rest
//! are dropped in the notification thread, before anyone is woken. On Linux that notifier
//! reads inotify itself ([`raw_inotify`]: a narrower mask, paced reads) instead of through
//! `notify`. The daemon watches the
//! kcap CLI's watcher directory for sessions' pid files, where every held key's heartbeat is
//! rewritten every 10 s (about ten a second with 10 sessions of 10 children): without the
//! filter, each woke its loop.

#[cfg(target_os = "linux")]
mod raw_inotify;

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::Notify;

/// How many paths one notification batch may name before a full scan is cheaper.
pub(crate) const MAX_EVENT_PATHS: usize = 4096;

/// What changed since the last [`Notifier::take`].
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Paths named by events, each once.
    pub paths: Vec<PathBuf>,
    /// Too many paths, or an event without paths: scan everything.
    pub rescan: bool,
    /// The notifier reported an error (warn once; the poll carries on).
    pub failed: bool,
}

#[derive(Debug, Default)]
struct Inbox {
    paths: HashSet<PathBuf>,
    rescan: bool,
    failed: bool,
}

/// An event that changes nothing: a file or directory opened, read or closed unwritten.
fn is_mere_access(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Access(a) if *a != AccessKind::Close(AccessMode::Write))
}

/// The host's one notifier.
pub(crate) struct Notifier {
    watcher: Option<notify::RecommendedWatcher>,
    /// The daemon's, on Linux: inotify read directly (see [`raw_inotify`]).
    #[cfg(target_os = "linux")]
    raw: Option<raw_inotify::RawInotify>,
    watched: BTreeSet<PathBuf>,
    inbox: Arc<Mutex<Inbox>>,
    wake: Arc<Notify>,
    /// Why there is no notification (forced polling, or the notifier could not start).
    polling_because: Option<String>,
}

impl Notifier {
    /// Starts the notifier, or polling only when `force_poll` is set or it cannot start.
    pub fn start(force_poll: bool) -> Notifier {
        let mut this = Notifier::bare();
        if force_poll {
            this.polling_because = Some("polling forced by KCAP_WATCH_FORCE_POLL".into());
            return this;
        }
        this.start_notify(|_| true);
        this
    }

    /// [`Notifier::start`], keeping only the paths `wanted` accepts: an event none of whose
    /// paths it accepts wakes nobody. An event without paths (a rescan) is always kept. On
    /// Linux this reads inotify directly, with a narrower mask and paced reads
    /// ([`raw_inotify`]): the daemon's watcher directory changes ten times a second.
    pub fn start_filtered(
        force_poll: bool,
        wanted: impl Fn(&Path) -> bool + Send + 'static,
    ) -> Notifier {
        let mut this = Notifier::bare();
        if force_poll {
            this.polling_because = Some("polling forced by KCAP_WATCH_FORCE_POLL".into());
            return this;
        }
        #[cfg(target_os = "linux")]
        {
            match raw_inotify::RawInotify::start(
                this.inbox.clone(),
                this.wake.clone(),
                Box::new(wanted),
            ) {
                Ok(raw) => this.raw = Some(raw),
                Err(e) => {
                    this.polling_because = Some(format!(
                        "file notification unavailable ({e}); polling instead"
                    ));
                }
            }
            this
        }
        #[cfg(not(target_os = "linux"))]
        {
            this.start_notify(wanted);
            this
        }
    }

    fn bare() -> Notifier {
        Notifier {
            watcher: None,
            #[cfg(target_os = "linux")]
            raw: None,
            watched: BTreeSet::new(),
            inbox: Arc::new(Mutex::new(Inbox::default())),
            wake: Arc::new(Notify::new()),
            polling_because: None,
        }
    }

    /// Starts `notify`'s watcher, keeping the paths `wanted` accepts.
    fn start_notify(&mut self, wanted: impl Fn(&Path) -> bool + Send + 'static) {
        let (inbox, wake) = (self.inbox.clone(), self.wake.clone());
        let handler = move |mut res: notify::Result<notify::Event>| {
            if let Ok(event) = &mut res {
                if is_mere_access(&event.kind) {
                    return;
                }
                if !event.paths.is_empty() {
                    event.paths.retain(|p| wanted(p));
                    if event.paths.is_empty() {
                        return;
                    }
                }
            }
            let mut inbox = inbox.lock().unwrap_or_else(PoisonError::into_inner);
            match res {
                Ok(event) if event.paths.is_empty() => inbox.rescan = true,
                Ok(event) => {
                    for path in event.paths {
                        if inbox.paths.len() >= MAX_EVENT_PATHS {
                            inbox.rescan = true;
                            inbox.paths.clear();
                            break;
                        }
                        inbox.paths.insert(path);
                    }
                }
                Err(_) => {
                    inbox.failed = true;
                    inbox.rescan = true;
                }
            }
            drop(inbox);
            wake.notify_one();
        };
        match notify::recommended_watcher(handler) {
            Ok(w) => self.watcher = Some(w),
            Err(e) => {
                self.polling_because = Some(format!(
                    "file notification unavailable ({e}); polling instead"
                ));
            }
        }
    }

    /// `Some(reason)` when only the poll notices changes.
    pub fn polling_because(&self) -> Option<&str> {
        self.polling_because.as_deref()
    }

    /// Watches exactly `dirs` (adding new ones, dropping ones no longer wanted). A directory
    /// that cannot be watched (not there yet) is tried again on the next call; the ones that
    /// failed this time are returned with why.
    pub fn sync(&mut self, dirs: &[PathBuf]) -> Vec<(PathBuf, String)> {
        let mut failed = Vec::new();
        #[cfg(target_os = "linux")]
        if let Some(raw) = self.raw.as_mut() {
            for dir in raw.take_lost() {
                self.watched.remove(&dir);
            }
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

    /// Watches `dir` with whichever backend runs (`None`: none, polling only).
    fn watch(&mut self, dir: &Path) -> Option<Result<(), String>> {
        #[cfg(target_os = "linux")]
        if let Some(raw) = self.raw.as_mut() {
            return Some(raw.watch(dir).map_err(|e| e.to_string()));
        }
        let watcher = self.watcher.as_mut()?;
        Some(
            watcher
                .watch(dir, RecursiveMode::NonRecursive)
                .map_err(|e| e.to_string()),
        )
    }

    fn unwatch(&mut self, dir: &Path) {
        #[cfg(target_os = "linux")]
        if let Some(raw) = self.raw.as_mut() {
            raw.unwatch(dir);
        }
        if let Some(watcher) = self.watcher.as_mut() {
            let _ = watcher.unwatch(dir);
        }
    }

    /// The directories watched now.
    #[cfg(test)]
    pub fn watched(&self) -> impl Iterator<Item = &PathBuf> {
        self.watched.iter()
    }

    /// Waits for the next batch of events (coalesced: many events, one wake-up).
    pub async fn changed(&self) {
        self.wake.notified().await;
    }

    /// Test helper: everything delivered until `last` is among the paths (one inotify queue
    /// delivers in order, so what was done before `last` was written has been delivered, or
    /// dropped), failing after 10 s; a batch that asks for a rescan fails too.
    #[cfg(test)]
    pub async fn paths_until(&self, last: &Path) -> BTreeSet<PathBuf> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut paths = BTreeSet::new();
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

    /// Takes what the events since the last call named.
    pub fn take(&self) -> Changes {
        let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = std::mem::take(&mut *inbox);
        Changes {
            paths: taken.paths.into_iter().collect(),
            rescan: taken.rescan,
            failed: taken.failed,
        }
    }
}
