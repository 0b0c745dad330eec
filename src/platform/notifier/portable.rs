//! The `notify` crate's recommended watcher as a [`Backend`].
//!
//! Opening a file or directory is no change: `notify` reports every `open(2)` in a watched
//! directory (inotify `IN_OPEN`), including the supervisor's own directory listings and
//! rollout reads, and treating those as changes fed a loop (a listing's open woke a
//! listing) that kept a core busy while every child was idle. Such access events are
//! dropped here; only a close after writing is kept.

use std::path::Path;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};

use super::{Backend, Sink, Wanted};

/// An event that changes nothing: a file or directory opened, read or closed unwritten.
fn is_mere_access(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Access(a) if *a != AccessKind::Close(AccessMode::Write))
}

pub(super) struct NotifyBackend(notify::RecommendedWatcher);

impl NotifyBackend {
    pub(super) fn start(sink: Sink, wanted: Wanted) -> Result<NotifyBackend, String> {
        let handler = move |mut res: notify::Result<notify::Event>| {
            let Ok(event) = &mut res else {
                sink.fail();
                return;
            };
            if is_mere_access(&event.kind) {
                return;
            }
            if event.paths.is_empty() {
                sink.deliver([], true);
                return;
            }
            event.paths.retain(|p| wanted(p));
            if !event.paths.is_empty() {
                sink.deliver(std::mem::take(&mut event.paths), false);
            }
        };
        notify::recommended_watcher(handler)
            .map(NotifyBackend)
            .map_err(|e| e.to_string())
    }
}

impl Backend for NotifyBackend {
    fn watch(&mut self, dir: &Path) -> Result<(), String> {
        self.0
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(|e| e.to_string())
    }

    fn unwatch(&mut self, dir: &Path) {
        let _ = self.0.unwatch(dir);
    }
}
