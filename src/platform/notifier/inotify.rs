//! inotify itself, below `notify`, on Linux: for every host (`watch`, `supervise`, the daemon).
//!
//! Measured costs took it there (docs/performance.md, "Per line"):
//!
//! - `notify` reads inotify on a thread of its own and hands each batch to the loop: two
//!   context switches (its wake-up, then the loop's) for every appended line, on top of the
//!   loop's own. Here the inotify descriptor is read by a task on the host's own runtime
//!   (`tokio`'s `AsyncFd`): an appended line wakes the loop once, directly.
//! - `notify` 8 watches for opens and closes without writing (`IN_OPEN`, `IN_CLOSE_NOWRITE`),
//!   so every directory listing and every reader woke it. The mask here has only the events
//!   that can mean a new, grown, replaced or removed file (`CREATE`, `MOVED_TO`, `MOVED_FROM`,
//!   `DELETE`, `CLOSE_WRITE`, `MODIFY`).
//! - The daemon watches the kcap CLI's watcher directory, where every held key's heartbeat is
//!   replaced every 10 s (about 19 events a second with 10 sessions of 10 children), nearly all
//!   dropped by its filter: its reader is a thread that pauses after each read
//!   ([`DAEMON_COALESCE`]), so a burst of heartbeats is one read and at most one wake-up of the
//!   loop. (On the loop itself every event woke the loop during the pause: 1,068 wake-ups a
//!   minute idle against 135 for an idle `watch`, in `benches/compare.sh`'s daemon scenario.)
//!   `watch` and `supervise` pause for nothing: a line is shipped as soon as it is seen.
//!
//! Outside a `tokio` runtime (no reactor to register with) the descriptor is read by a thread
//! as well. `notify` keeps its role on macOS and Windows.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use inotify::{EventMask, Events, Inotify, WatchDescriptor, WatchMask, Watches};

use super::{Backend, Sink, Wanted};

/// How long the daemon's reader waits after a read before the next: events of a burst (a
/// supervisor beating its keys) pile up and are read, filtered and delivered as one.
pub(super) const DAEMON_COALESCE: Duration = Duration::from_millis(200);

/// The kernel's queue is read in pieces of this size (a few hundred events each) by a task,
/// which reads again at once while more is queued.
const READ_BUFFER: usize = 16 * 1024;

/// The largest event the kernel queues: its header and a file name of `NAME_MAX` bytes with
/// its terminating zero.
const LARGEST_EVENT: usize = 16 + 255 + 1;

/// A read of at most this many events left room in [`READ_BUFFER`] for one more of any size,
/// so the kernel had no more queued when it copied them: the queue is empty without a second
/// read to find it so (one system call fewer for every line appended to a followed file).
const DRAINED_AT_MOST: usize = READ_BUFFER / LARGEST_EVENT - 1;

/// A paced thread reads this much at a time (a few thousand events), so that its pauses
/// never leave the kernel's queue to overflow into a rescan.
const PACED_READ_BUFFER: usize = 64 * 1024;

/// An inotify instance, read by a task on the runtime it was started in (or by a thread).
pub(super) struct RawInotify {
    watches: Watches,
    by_dir: HashMap<PathBuf, WatchDescriptor>,
    by_wd: Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>>,
    /// Directories whose watch the kernel dropped (the directory was removed or replaced):
    /// forgotten at the next `sync`, which watches them again once they are back.
    lost: Arc<Mutex<Vec<PathBuf>>>,
    closed: Arc<AtomicBool>,
    /// The reading task, ended with the backend.
    task: Option<tokio::task::JoinHandle<()>>,
}

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::DELETE
        | WatchMask::CLOSE_WRITE
        | WatchMask::MODIFY
}

/// What one read's events mean: the paths to deliver, and whether to rescan everything.
struct Reader {
    names: Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>>,
    dropped: Arc<Mutex<Vec<PathBuf>>>,
    wanted: Wanted,
    sink: Sink,
}

impl Reader {
    /// Delivers what `events` name (those `wanted` accepts), if anything.
    /// Delivers what one read found; how many events that was.
    fn deliver(&self, events: Events<'_>) -> usize {
        let mut paths = Vec::new();
        let mut rescan = false;
        let mut count = 0;
        {
            let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
            for event in events {
                count += 1;
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    rescan = true;
                    continue;
                }
                if event.mask.contains(EventMask::IGNORED) {
                    // Still named: not our unwatch, the directory went away.
                    if let Some(dir) = names.remove(&event.wd) {
                        self.dropped
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
                if (self.wanted)(&path) {
                    paths.push(path);
                }
            }
        }
        if rescan || !paths.is_empty() {
            self.sink.deliver(paths, rescan);
        }
        count
    }
}

impl RawInotify {
    /// Starts reading: events whose path `wanted` refuses are dropped as they are read, and
    /// the reader pauses `coalesce` after each read. Inside a `tokio` runtime and with no
    /// pause the reader is a task of the runtime, else a thread.
    pub(super) fn start(sink: Sink, wanted: Wanted, coalesce: Duration) -> io::Result<RawInotify> {
        // Non-blocking, close-on-exec.
        let inotify = Inotify::init()?;
        let watches = inotify.watches();
        let by_wd: Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>> = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let lost: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
        let reader = Reader {
            names: by_wd.clone(),
            dropped: lost.clone(),
            wanted,
            sink,
        };
        // A paced reader is a thread: a task's pause would not keep the loop asleep (the
        // runtime's poll returns for every event that arrives on a registered descriptor
        // meanwhile, task asleep or not), and a busy directory's events would wake it anyway.
        let runtime = tokio::runtime::Handle::try_current()
            .ok()
            .filter(|_| coalesce.is_zero());
        let task = match runtime {
            Some(runtime) => {
                let _entered = runtime.enter();
                // SAFETY: the `Inotify` owns its descriptor, which stays open while the
                // `AsyncFd` owns it (nothing here closes or replaces it).
                let fd = unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        inotify,
                        tokio::io::Interest::READABLE,
                    )?
                };
                Some(runtime.spawn(read_on_loop(fd, reader)))
            }
            None => {
                let done = closed.clone();
                std::thread::Builder::new()
                    .name("inotify".into())
                    .stack_size(128 * 1024)
                    .spawn(move || read_on_thread(inotify, reader, coalesce, done))?;
                None
            }
        };
        Ok(RawInotify {
            watches,
            by_dir: HashMap::new(),
            by_wd,
            lost,
            closed,
            task,
        })
    }
}

/// The reader as a task: woken by the runtime when the queue holds events, it reads what is
/// there at once (one wake-up for a burst) and delivers it.
async fn read_on_loop(mut fd: tokio::io::unix::AsyncFd<Inotify>, reader: Reader) {
    let mut buffer = vec![0u8; READ_BUFFER];
    loop {
        let mut ready = match fd.readable_mut().await {
            Ok(ready) => ready,
            Err(_) => {
                reader.sink.fail();
                return;
            }
        };
        let read = ready.try_io(|inotify| {
            inotify
                .get_mut()
                .read_events(&mut buffer)
                .map(|events| reader.deliver(events))
        });
        match read {
            // Nothing left to read: readiness was cleared, wait for the next.
            Err(_would_block) => continue,
            // Nothing left either: the edge-triggered registration reports the next event
            // queued, and one that came after this read makes a newer readiness, which this
            // clear leaves in place.
            Ok(Ok(count)) if count <= DRAINED_AT_MOST => ready.clear_ready(),
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(Err(_)) => {
                reader.sink.fail();
                return;
            }
        }
    }
}

/// The reader as a thread, outside a runtime: blocks on the queue.
fn read_on_thread(mut inotify: Inotify, reader: Reader, coalesce: Duration, done: Arc<AtomicBool>) {
    let mut buffer = vec![0u8; PACED_READ_BUFFER];
    loop {
        let events = match inotify.read_events_blocking(&mut buffer) {
            Ok(events) => events,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                reader.sink.fail();
                return;
            }
        };
        if done.load(Ordering::Acquire) {
            return;
        }
        reader.deliver(events);
        if !coalesce.is_zero() {
            std::thread::sleep(coalesce);
        }
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
    /// Ends the reader: a task is aborted; for a thread, removing the watches makes the
    /// kernel queue an `IGNORED` event for each, which wakes the blocked read, and the thread
    /// sees it is closed.
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
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
        let raw = RawInotify::start(sink.clone(), Box::new(|_| true), Duration::ZERO).unwrap();
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

    /// A read that leaves the queue empty ends the wait for readiness without a second read
    /// to find it empty: each change after one still wakes the reader, and a burst larger than
    /// one read's worth (events of the longest names) is read whole.
    #[tokio::test(flavor = "current_thread")]
    async fn every_change_is_read_whether_one_read_or_many_took_the_queue() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let (sink, mut raw) = started();
        raw.watch(&dir).unwrap();
        let rollout = dir.join("rollout.jsonl");
        let mut file = std::fs::File::create(&rollout).unwrap();
        sink.paths_until(&rollout).await;
        for round in 0..20 {
            std::io::Write::write_all(&mut file, b"{}\n").unwrap();
            let paths = sink.paths_until(&rollout).await;
            assert_eq!(paths.len(), 1, "round {round}: {paths:?}");
        }
        let names: Vec<PathBuf> = (0..300).map(|i| dir.join(format!("{i:0>250}"))).collect();
        for name in &names {
            std::fs::write(name, "{}").unwrap();
        }
        assert!(
            names.len() * LARGEST_EVENT > READ_BUFFER * 4,
            "a burst of several reads"
        );
        std::io::Write::write_all(&mut file, b"{}\n").unwrap();
        let paths = sink.paths_until(&rollout).await;
        let missing: Vec<_> = names.iter().filter(|n| !paths.contains(*n)).collect();
        assert!(missing.is_empty(), "{} of the burst unread", missing.len());
        std::io::Write::write_all(&mut file, b"{}\n").unwrap();
        sink.paths_until(&rollout).await;
        drop(raw);
    }

    /// A backend pausing `coalesce` that records which thread read each event it delivers,
    /// watching a fresh directory: (the backend, its sink, the readers' threads, the directory).
    fn recording(
        coalesce: Duration,
    ) -> (
        RawInotify,
        Sink,
        Arc<Mutex<Vec<std::thread::ThreadId>>>,
        tempfile::TempDir,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let readers: Arc<Mutex<Vec<std::thread::ThreadId>>> = Arc::default();
        let seen = readers.clone();
        let sink = Sink::default();
        let mut raw = RawInotify::start(
            sink.clone(),
            Box::new(move |_| {
                seen.lock().unwrap().push(std::thread::current().id());
                true
            }),
            coalesce,
        )
        .unwrap();
        raw.watch(tmp.path()).unwrap();
        (raw, sink, readers, tmp)
    }

    /// In a runtime, events are read on the runtime's own thread (the host's loop): an
    /// appended line wakes the loop once, with no thread hop before it.
    #[tokio::test(flavor = "current_thread")]
    async fn in_a_runtime_events_are_read_on_its_own_thread() {
        let (_raw, sink, readers, tmp) = recording(Duration::ZERO);
        let rollout = tmp.path().join("rollout.jsonl");
        let mut file = std::fs::File::create(&rollout).unwrap();
        for _ in 0..3 {
            std::io::Write::write_all(&mut file, b"{}\n").unwrap();
        }
        assert!(sink.paths_until(&rollout).await.contains(&rollout));
        let readers = readers.lock().unwrap();
        assert!(!readers.is_empty());
        assert!(
            readers.iter().all(|t| *t == std::thread::current().id()),
            "read on another thread"
        );
    }

    /// A paced reader (the daemon's) is a thread even in a runtime: events arriving during
    /// its pause must not wake the loop.
    #[tokio::test(flavor = "current_thread")]
    async fn a_paced_reader_is_a_thread_even_in_a_runtime() {
        let (raw, sink, readers, tmp) = recording(DAEMON_COALESCE);
        assert!(raw.task.is_none());
        let pid = tmp.path().join("s.pid");
        std::fs::write(&pid, "1").unwrap();
        assert!(sink.paths_until(&pid).await.contains(&pid));
        let readers = readers.lock().unwrap();
        assert!(!readers.is_empty());
        assert!(
            readers.iter().all(|t| *t != std::thread::current().id()),
            "a paced reader read on the loop's thread"
        );
    }

    /// Outside a runtime (nothing to register with) a thread reads, and changes still arrive.
    #[test]
    fn outside_a_runtime_a_thread_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let sink = Sink::default();
        let mut raw = RawInotify::start(sink.clone(), Box::new(|_| true), Duration::ZERO).unwrap();
        assert!(raw.task.is_none());
        raw.watch(&dir).unwrap();
        let rollout = dir.join("rollout.jsonl");
        std::fs::write(&rollout, "{}\n").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut paths = Vec::new();
        while !paths.contains(&rollout) && std::time::Instant::now() < deadline {
            paths.extend(sink.take().paths);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(paths.contains(&rollout), "{paths:?}");
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
