//! The daemon's notifier on Linux: inotify itself, below `notify`, for one measured cost.
//!
//! The daemon watches the watcher directory, where every held key's heartbeat is replaced
//! every 10 s: with 10 sessions of 10 children, `notify`'s thread woke about 19 times a second
//! to read those events (and to drop them in the filter), which made the idle daemon cost twice
//! an idle `watch` (docs/behaviour.md S2.4 asks for no more than one). `notify` 8 cannot narrow
//! its inotify mask nor pace its reads, so here:
//!
//! - the mask has only the events that can mean a new, grown, replaced or removed file
//!   (`CREATE`, `MOVED_TO`, `MOVED_FROM`, `DELETE`, `CLOSE_WRITE`, `MODIFY`): no `OPEN`, no
//!   `ATTRIB`, nothing for reads;
//! - after each read the thread pauses [`COALESCE`], so a burst of heartbeats is one read and
//!   at most one wake-up of the loop instead of one each.
//!
//! `notify` keeps its role everywhere else (`watch` and `supervise` on every platform, the
//! daemon on macOS and Windows); docs/performance.md says why this one path goes below it.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};

use super::{Backend, Sink, Wanted};

/// How long the reading thread waits after a read before the next: events of a burst (a
/// supervisor beating its keys) pile up and are read, filtered and delivered as one.
pub(super) const COALESCE: Duration = Duration::from_millis(200);

/// An inotify instance read by its own thread.
pub(super) struct RawInotify {
    watches: Watches,
    by_dir: HashMap<PathBuf, WatchDescriptor>,
    by_wd: Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>>,
    /// Directories whose watch the kernel dropped (the directory was removed or replaced):
    /// forgotten at the next `sync`, which watches them again once they are back.
    lost: Arc<Mutex<Vec<PathBuf>>>,
    closed: Arc<AtomicBool>,
}

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::DELETE
        | WatchMask::CLOSE_WRITE
        | WatchMask::MODIFY
}

impl RawInotify {
    /// Starts the reading thread; events whose path `wanted` refuses are dropped there.
    pub(super) fn start(sink: Sink, wanted: Wanted) -> io::Result<RawInotify> {
        let mut inotify = Inotify::init()?;
        let watches = inotify.watches();
        let by_wd: Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>> = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let lost: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
        let (names, done, dropped) = (by_wd.clone(), closed.clone(), lost.clone());
        std::thread::Builder::new()
            .name("inotify".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                let mut buffer = vec![0u8; 64 * 1024];
                loop {
                    let events = match inotify.read_events_blocking(&mut buffer) {
                        Ok(events) => events,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(_) => {
                            sink.fail();
                            return;
                        }
                    };
                    if done.load(Ordering::Acquire) {
                        return;
                    }
                    let mut paths = Vec::new();
                    let mut rescan = false;
                    {
                        let mut names = names.lock().unwrap_or_else(PoisonError::into_inner);
                        for event in events {
                            if event.mask.contains(EventMask::Q_OVERFLOW) {
                                rescan = true;
                                continue;
                            }
                            if event.mask.contains(EventMask::IGNORED) {
                                // Still named: not our unwatch, the directory went away.
                                if let Some(dir) = names.remove(&event.wd) {
                                    dropped
                                        .lock()
                                        .unwrap_or_else(PoisonError::into_inner)
                                        .push(dir);
                                    rescan = true;
                                }
                                continue;
                            }
                            let Some(dir) = names.get(&event.wd) else {
                                continue;
                            };
                            let path = match event.name {
                                Some(name) => dir.join(name),
                                None => dir.clone(),
                            };
                            if wanted(&path) {
                                paths.push(path);
                            }
                        }
                    }
                    if rescan || !paths.is_empty() {
                        sink.deliver(paths, rescan);
                    }
                    std::thread::sleep(COALESCE);
                }
            })?;
        Ok(RawInotify {
            watches,
            by_dir: HashMap::new(),
            by_wd,
            lost,
            closed,
        })
    }
}

impl Backend for RawInotify {
    /// The directories whose watch was dropped since the last call, forgotten here.
    fn take_lost(&mut self) -> Vec<PathBuf> {
        let lost = std::mem::take(&mut *self.lost.lock().unwrap_or_else(PoisonError::into_inner));
        for dir in &lost {
            self.by_dir.remove(dir);
        }
        lost
    }

    fn watch(&mut self, dir: &Path) -> Result<(), String> {
        let wd = self
            .watches
            .add(dir, mask() | WatchMask::ONLYDIR)
            .map_err(|e| e.to_string())?;
        self.by_wd
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(wd.clone(), dir.to_path_buf());
        self.by_dir.insert(dir.to_path_buf(), wd);
        Ok(())
    }

    fn unwatch(&mut self, dir: &Path) {
        if let Some(wd) = self.by_dir.remove(dir) {
            self.by_wd
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&wd);
            let _ = self.watches.remove(wd);
        }
    }
}

impl Drop for RawInotify {
    /// Ends the reading thread: removing the watches makes the kernel queue an `IGNORED`
    /// event for each, which wakes the blocked read, and the thread sees it is closed.
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        let dirs: Vec<PathBuf> = self.by_dir.keys().cloned().collect();
        for dir in &dirs {
            self.unwatch(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn started() -> (Sink, RawInotify) {
        let sink = Sink::default();
        let raw = RawInotify::start(sink.clone(), Box::new(|_| true)).unwrap();
        (sink, raw)
    }

    /// Reading a file is no change: with `notify` every open in the watched directory (every
    /// status reader, every other process listing it) was an event the thread woke for. The
    /// directory's own removal and re-creation of a file still are.
    #[tokio::test(flavor = "current_thread")]
    async fn reads_are_not_events_and_writes_renames_and_removals_are() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let read_me = dir.join("read.pid");
        let removed = dir.join("gone.pid");
        let renamed = dir.join("renamed.pid");
        std::fs::write(&read_me, "1").unwrap();
        std::fs::write(&removed, "1").unwrap();
        let (sink, mut raw) = started();
        raw.watch(&dir).unwrap();

        for _ in 0..3 {
            let mut text = String::new();
            std::fs::File::open(&read_me)
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            let _ = std::fs::read_dir(&dir).unwrap().count();
        }
        std::fs::remove_file(&removed).unwrap();
        crate::files::write_atomic(&renamed, b"1").unwrap();
        // One queue delivers in order: once the last write is in, the rest was delivered.
        let last = dir.join("last.pid");
        std::fs::write(&last, "1").unwrap();
        let paths = sink.paths_until(&last).await;
        assert!(!paths.contains(&read_me), "a read was an event: {paths:?}");
        assert!(paths.contains(&removed), "{paths:?}");
        assert!(paths.contains(&renamed), "{paths:?}");
        drop(raw);
    }

    /// A watched directory removed and made again (the kcap CLI's watcher directory, say) is
    /// reported lost (with a rescan) and can be watched again: the kernel dropped the old
    /// watch with the directory.
    #[tokio::test(flavor = "current_thread")]
    async fn a_directory_removed_and_made_again_is_watched_again() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("watchers");
        std::fs::create_dir_all(&dir).unwrap();
        let (sink, mut raw) = started();
        raw.watch(&dir).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        // The removal is seen (a rescan), then the directory is back.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !sink.take().rescan {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(
                tokio::time::timeout(left, sink.changed()).await.is_ok(),
                "the removal was not seen"
            );
        }
        assert_eq!(raw.take_lost(), vec![dir.clone()]);
        std::fs::create_dir_all(&dir).unwrap();
        raw.watch(&dir).unwrap();
        let pid = dir.join("s.pid");
        std::fs::write(&pid, "1").unwrap();
        assert!(sink.paths_until(&pid).await.contains(&pid));
    }
}
