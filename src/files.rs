//! Local state files: the per-key lock, pid/started/heartbeat files, log files, and the
//! private-mode, atomic-write helpers everything under `<config>` goes through.
//!
//! The kcap CLI's spawner reads these files from another process, so their formats are its
//! formats (docs/behaviour.md F): the pid file is `"<pid>\n<start token>"` with no trailing newline
//! (some of its readers split on `'\n'` and expect exactly two parts), and the time files hold a
//! bare RFC 3339 timestamp. Every file another process reads whole is replaced atomically, so a
//! reader never sees half a timestamp.
//!
//! **Nothing under `<config>` is a way in** (docs/behaviour.md R5). Every file created or
//! appended to there is opened with `O_NOFOLLOW` (and `O_EXCL` where it is new), so a symbolic
//! link planted at one of our paths is refused with an error naming it and nothing is written
//! through it. Atomic replacements refuse a symbolic link at the destination too: `rename(2)`
//! never writes through the link it replaces, so the check only has to name the problem, and a
//! link planted between the check and the rename is replaced, its target untouched. Ids that name
//! files are checked against the kcap CLI's key rule ([`check_id`]) before any path is built.
//!
//! Heartbeats get their own OS thread ([`Heartbeats`], one for every key the process holds)
//! rather than a task on the runtime: the spawner kills a watcher whose heartbeat is older than
//! 20 s, and a beat must never wait behind a hung request, a slow disk read or a huge line.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::time::Ts;

/// How often a held key's heartbeat is rewritten: the kcap CLI's spawner replaces a watcher
/// whose heartbeat is older than 20 s, and docs/behaviour.md S5 keeps it rewritten at least every
/// 10 s and never older than 15 s on disk (a beat is one atomic rename, so 10 s leaves 5 s for
/// a slow disk). Slower beats are what an idle watcher costs (round 2's 2 s was five times
/// this).
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);

/// The oldest a heartbeat may be on disk while its key is held (S5).
#[cfg(test)]
pub(crate) const HEARTBEAT_MAX_AGE: Duration = Duration::from_secs(15);

pub use crate::key::watcher_key;

/// Creates `path` and any missing parents, each new directory with mode 0700. Existing
/// directories keep their mode: the watcher does not take over directories it did not make
/// (`KCAP_WATCHER_DIR` may point at a shared place).
pub fn ensure_private_dir(path: &Path) -> io::Result<()> {
    create_private_dir(path)?;
    // The directories under `<config>` are ours: one replaced by a symbolic link would send
    // every file in it elsewhere.
    refuse_symlink(path)
}

/// [`ensure_private_dir`] without the symbolic-link check, for `<config>` itself, which the
/// user chooses (and may keep behind a link, as with any dotfiles setup).
fn create_private_dir(path: &Path) -> io::Result<()> {
    crate::platform::private_file::dir_builder()
        .create(path)
        .map_err(|e| with_context(e, format!("failed to create directory {}", path.display())))
}

/// Replaces `path` with `bytes` atomically: a temporary file (mode 0600) in the same directory,
/// written and flushed, then renamed over `path`. A concurrent reader sees the old content or
/// the new, never a mix.
///
/// No fsync: the readers are live processes on this machine (the spawner, a replay), and after
/// a power loss the pid, start token and heartbeat are meaningless anyway (the boot id changes).
/// Skipping it keeps a beat cheap on a slow disk.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let context = || format!("failed to write {}", path.display());
    let dir = parent_dir(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    crate::platform::private_file::restrict_temp_files(&mut builder);
    // On any error below the temporary file is removed when `tmp` drops.
    let mut tmp = builder
        .tempfile_in(dir)
        .map_err(|e| with_context(e, context()))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.flush())
        .map_err(|e| with_context(e, context()))?;
    // Checked after the temporary file is written, as close to the rename as possible; see the
    // module documentation for why the remaining window is harmless.
    refuse_symlink(path).map_err(|e| with_context(e, context()))?;
    crate::platform::replace::persist(tmp, path).map_err(|e| with_context(e, context()))?;
    Ok(())
}

/// An error naming `path` as a symbolic link this watcher will not follow or replace.
pub(crate) fn symlink_refused(path: &Path) -> io::Error {
    crate::platform::private_file::refused(path)
}

/// `Err` when `path` itself (not its directory) is a symbolic link; a missing path is fine.
pub(crate) fn refuse_symlink(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(symlink_refused(path)),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(with_context(
            e,
            format!("failed to inspect {}", path.display()),
        )),
    }
}

/// Opens `path` with `options` (which must come from [`private_options`]), refusing a
/// symbolic link at the path with an error that names it.
pub(crate) fn open_private(options: &OpenOptions, path: &Path) -> io::Result<File> {
    crate::platform::private_file::open(options, path)
}

/// Reads a small text file someone else may write (the kcap CLI's pid, started and heartbeat
/// files, a lock's pid): a link is followed, but a named pipe or device at the path is refused
/// without waiting for a writer, and more than `max` bytes is an error rather than memory.
pub(crate) fn read_small(path: &Path, max: u64) -> io::Result<String> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(file, max + 1), &mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} holds more than {max} bytes", path.display()),
        ));
    }
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Opens `path` for reading (following a link) only when it is a regular file: a named pipe
/// or device at the path is refused at once instead of blocking until some writer opens it.
pub(crate) fn open_regular(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    crate::platform::private_file::never_block_on_open(&mut options);
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(crate::platform::private_file::not_regular(path));
    }
    Ok(file)
}

/// The most a pid, started, heartbeat or lock file holds (a pid and a start token).
pub(crate) const SMALL_FILE_MAX: u64 = 4096;

/// Reads a whole file without following a symbolic link at `path`.
pub(crate) fn read_nofollow(path: &Path) -> io::Result<Vec<u8>> {
    let mut file = open_private(private_options().read(true), path)?;
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut file, &mut bytes)?;
    Ok(bytes)
}

/// The kcap CLI's rule for ids that name files (`HookSpool.cs`, `TranscriptSpool.cs`):
/// `[A-Za-z0-9_-]{1,64}`, checked after the dashes of a UUID are removed (the caller passes
/// the id as it will be used). Anything else could leave its directory or collide with the
/// kcap CLI's own names, so it is refused before any path is built: exit 2, naming it.
pub(crate) fn check_id(what: &str, id: &str) -> Result<(), crate::error::UsageError> {
    let ok = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(crate::error::UsageError(format!(
            "invalid {what} {id:?}: an id must be 1 to 64 of A-Z, a-z, 0-9, '_' and '-' (a UUID's dashes removed)"
        )))
    }
}

/// Checks that a state directory (`<config>` or `<watchers>`) can be used: it is a directory
/// (or, with `create`, can be made as one), owned by this user and writable. Anything else is
/// exit 2 naming it, before the watcher writes anything: a spawned watcher that cannot keep its
/// files would otherwise fail later, once per file.
pub(crate) fn check_state_dir(
    path: &Path,
    what: &str,
    create: bool,
) -> Result<(), crate::error::UsageError> {
    let unusable = |why: String| {
        crate::error::UsageError(format!("unusable {what} {}: {why}", path.display()))
    };
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
            create_private_dir(path).map_err(|e| unusable(e.to_string()))?;
            fs::metadata(path).map_err(|e| unusable(e.to_string()))?
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(unusable(e.to_string())),
    };
    if !meta.is_dir() {
        return Err(unusable("it is not a directory".into()));
    }
    match crate::platform::private_file::unusable_state_dir(path, &meta) {
        Some(why) => Err(unusable(why)),
        None => Ok(()),
    }
}

// The start token and liveness probe moved to `crate::platform`; these names stay for the
// callers that still use them from here.
pub use crate::platform::process::alive as process_alive;
pub use crate::platform::start_token::{for_pid as process_start_token, stat_starttime};

/// Why [`WatcherFiles::acquire`] failed.
#[derive(Debug)]
pub enum AcquireError {
    /// Another live watcher holds `<key>.lock`. The caller exits 75 (temporary failure).
    Held {
        key: String,
        /// From the pid file, when it names another process (the spawner may already have
        /// written *our* pid there before we found the lock taken, so our own pid is not
        /// reported).
        holder_pid: Option<u32>,
    },
    /// A key that is no file name, or a symbolic link at one of the watcher's paths: exit 2.
    Refused(crate::error::UsageError),
    Io(io::Error),
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::Held {
                key,
                holder_pid: Some(pid),
            } => write!(
                f,
                "another watcher (pid {pid}) is already running for {key}; not starting a second one"
            ),
            AcquireError::Held {
                key,
                holder_pid: None,
            } => write!(
                f,
                "another watcher is already running for {key}; not starting a second one"
            ),
            AcquireError::Refused(e) => write!(f, "{e}"),
            AcquireError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AcquireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // `main` maps `Refused` to exit 2 itself; its message is already in `Display`.
            AcquireError::Held { .. } | AcquireError::Refused(_) => None,
            AcquireError::Io(e) => Some(e),
        }
    }
}

/// This watcher's files under `<watchers>`, and the advisory lock that makes it the only
/// watcher for its key. The lock is held as long as this value lives.
#[derive(Debug)]
pub struct WatcherFiles {
    pid: u32,
    lock_path: PathBuf,
    pid_path: PathBuf,
    started_path: PathBuf,
    heartbeat_path: PathBuf,
    /// Holds the lock; closing it (on drop) releases it. [`WatcherFiles::release`] unlinks the
    /// lock file while still holding it; a watcher that opened the old file meanwhile notices,
    /// after locking, that the path no longer names it and starts over on a fresh file.
    lock: File,
}

/// Rounds of "lock, then find the path names another file" before giving up: each round means
/// the previous holder exited (and unlinked the lock file) in that very instant.
const LOCK_ROUNDS: usize = 16;

impl WatcherFiles {
    /// Takes the exclusive, non-blocking lock on `<watchers>/<key>.lock`, then writes
    /// `<key>.pid` (this pid and its start token), `<key>.started` and `<key>.heartbeat`
    /// (both `now`).
    ///
    /// A symbolic link at any of these paths (or the heartbeat's private files) is refused
    /// before anything is written ([`AcquireError::Refused`]); the opens themselves never follow
    /// one either, so a link planted after the check is refused too.
    pub fn acquire(watcher_dir: &Path, key: &str, now: Ts) -> Result<WatcherFiles, AcquireError> {
        check_file_key(key).map_err(AcquireError::Refused)?;
        ensure_private_dir(watcher_dir).map_err(|e| {
            if fs::symlink_metadata(watcher_dir).is_ok_and(|m| m.file_type().is_symlink()) {
                AcquireError::Refused(crate::error::UsageError(e.to_string()))
            } else {
                AcquireError::Io(e)
            }
        })?;

        let path = |suffix: &str| watcher_dir.join(format!("{key}{suffix}"));
        let lock_path = path(".lock");
        let pid_path = path(".pid");
        let started_path = path(".started");
        let heartbeat_path = path(".heartbeat");
        let mut ours = vec![&lock_path, &pid_path, &started_path, &heartbeat_path];
        let slots = heartbeat_slots(&heartbeat_path);
        ours.extend(slots.iter());
        for p in ours {
            refuse_symlink(p).map_err(|e| {
                AcquireError::Refused(crate::error::UsageError(format!(
                    "failed to take the watcher files of {key}: {e}"
                )))
            })?;
        }

        let pid = std::process::id();
        let mut rounds = 0;
        let lock = loop {
            rounds += 1;
            let lock = open_lock_file(&lock_path).map_err(|e| {
                let e = with_context(
                    e,
                    format!("failed to open lock file {}", lock_path.display()),
                );
                if is_refused(&lock_path) {
                    AcquireError::Refused(crate::error::UsageError(e.to_string()))
                } else {
                    AcquireError::Io(e)
                }
            })?;
            match lock.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => {
                    let holder_pid = read_pid_file(&pid_path).filter(|&p| p != pid);
                    return Err(AcquireError::Held {
                        key: key.to_owned(),
                        holder_pid,
                    });
                }
                Err(fs::TryLockError::Error(e)) => {
                    return Err(AcquireError::Io(with_context(
                        e,
                        format!("failed to lock {}", lock_path.display()),
                    )));
                }
            }
            // The previous holder unlinks the file on its way out: a lock on the unlinked inode
            // excludes nobody, so only a lock on the file the path still names counts.
            match names_file(&lock_path, &lock) {
                Ok(true) => break lock,
                Ok(false) if rounds < LOCK_ROUNDS => continue,
                Ok(false) => {
                    return Err(AcquireError::Io(io::Error::other(format!(
                        "failed to lock {}: the file kept being replaced",
                        lock_path.display()
                    ))));
                }
                Err(e) => {
                    return Err(AcquireError::Io(with_context(
                        e,
                        format!("failed to lock {}", lock_path.display()),
                    )));
                }
            }
        };

        // Only a holder of the lock writes the heartbeat's private files, and its clean exit
        // removes them: any found now were left by a holder that was killed (S4.6). Removed
        // before our own heartbeat creates them again, so a SIGKILL leaves nothing for ever.
        remove_stale_slots(key, &slots);

        let files = WatcherFiles {
            pid,
            lock_path,
            started_path,
            heartbeat_path,
            pid_path,
            lock,
        };
        // The spawner may have written the pid file already (same content when it spawned us
        // directly); it is replaced whole either way.
        let write = |p: &Path, bytes: &[u8]| {
            write_atomic(p, bytes).map_err(|e| {
                if is_refused(p) {
                    AcquireError::Refused(crate::error::UsageError(e.to_string()))
                } else {
                    AcquireError::Io(e)
                }
            })
        };
        write(&files.pid_path, pid_file_content(pid).as_bytes())?;
        write(&files.started_path, now.rfc3339().as_bytes())?;
        write(&files.heartbeat_path, now.rfc3339().as_bytes())?;
        Ok(files)
    }

    /// Writes `now` to the heartbeat file.
    pub fn beat(&self, now: Ts) -> io::Result<()> {
        write_atomic(&self.heartbeat_path, now.rfc3339().as_bytes())
    }

    pub fn heartbeat_path(&self) -> &Path {
        &self.heartbeat_path
    }

    pub fn pid_path(&self) -> &Path {
        &self.pid_path
    }

    pub fn lock_path(&self) -> &Path {
        &self.lock_path
    }

    /// Clean exit: removes the heartbeat's private files and the lock file (both only ever
    /// ours: the lock is still held), the pid, heartbeat and started files when the pid file
    /// still names this process, then releases the lock. Stop beating its heartbeat first ([`Heartbeats::remove`]),
    /// or it may write the heartbeat file again.
    ///
    /// The pid condition: the spawner writes a successor's pid (and its `.started`) before the
    /// successor gets the lock, and those are not ours to remove. The kcap CLI retires its own
    /// watchers' files the same way.
    pub fn release(self) {
        let mut remove = Vec::new();
        if read_pid_file(&self.pid_path) == Some(self.pid) {
            remove.extend([
                self.pid_path.clone(),
                self.heartbeat_path.clone(),
                self.started_path.clone(),
            ]);
        }
        // The lock and the heartbeat's private files only while the path still names the file
        // we locked (it always should; if someone removed it, a successor may own these names
        // now). The lock file last, while still held: a successor that opened it meanwhile
        // finds, once it gets the lock, that the path no longer names it, and starts over.
        if names_file(&self.lock_path, &self.lock).unwrap_or(false) {
            remove.extend(heartbeat_slots(&self.heartbeat_path));
            remove.push(self.lock_path.clone());
        }
        for path in &remove {
            if let Err(e) = fs::remove_file(path)
                && e.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(
                    event = "watcher_file_remove_failed",
                    path = %path.display(),
                    error = %e,
                    "failed to remove {}: {e}",
                    path.display()
                );
            }
        }
        // Dropping `self` closes the lock file, which releases the lock.
    }
}

/// Removes the heartbeat slots a killed holder of `key`'s lock left (the caller holds it now).
fn remove_stale_slots(key: &str, slots: &[PathBuf]) {
    let mut removed = 0;
    for slot in slots {
        match fs::remove_file(slot) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                event = "watcher_file_remove_failed",
                path = %slot.display(),
                error = %e,
                "failed to remove the stale heartbeat slot {}: {e}",
                slot.display()
            ),
        }
    }
    if removed > 0 {
        tracing::info!(
            event = "stale_heartbeat_removed",
            key,
            count = removed,
            "removed {removed} heartbeat slot(s) left by a killed watcher of {key}"
        );
    }
}

/// Opens the lock file: created exclusively when new, else opened as it is, never through a
/// symbolic link.
fn open_lock_file(path: &Path) -> io::Result<File> {
    loop {
        match open_private(
            private_options().read(true).write(true).create_new(true),
            path,
        ) {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        // `O_EXCL` also fails on a link, dangling or not: the plain open below refuses it.
        match open_private(private_options().read(true).write(true), path) {
            Ok(f) => return Ok(f),
            // Unlinked by its exiting holder between the two opens: create it after all.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Whether `path` (not followed) names the same file as the open `file`.
fn names_file(path: &Path, file: &File) -> io::Result<bool> {
    use crate::platform::file_id::FileId;
    match FileId::of_link_path(path) {
        Ok(now) => Ok(now == FileId::of_file(file)?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether a failed write to `path` was a refusal of a symbolic link there.
fn is_refused(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// `"<pid>\n<token>"`, or just the pid when no token can be computed: the kcap CLI's layout.
fn pid_file_content(pid: u32) -> String {
    match process_start_token(pid) {
        Some(token) => format!("{pid}\n{token}"),
        None => pid.to_string(),
    }
}

fn read_pid_file(path: &Path) -> Option<u32> {
    let text = read_small(path, SMALL_FILE_MAX).ok()?;
    text.lines().next()?.trim().parse().ok()
}

/// A key becomes a file name: each of its ids follows the kcap CLI's key rule ([`check_id`]),
/// so a key is `<session>` or `<session>-<agent>` of those characters, at most 129 long. Callers
/// check each id with [`check_id`] first, naming it; this is the last line of defence.
fn check_file_key(key: &str) -> Result<(), crate::error::UsageError> {
    let ok = (1..=129).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(crate::error::UsageError(format!(
            "invalid watcher key {key:?}: not a plain name of A-Z, a-z, 0-9, '_' and '-'"
        )))
    }
}

/// One thread beating the heartbeat of every key the process holds, every `every`, until
/// stopped: `watch` holds one key, `supervise` many, and both own keys the same way
/// (`crate::host::ownership`).
///
/// A thread rather than a runtime task, because nothing on the runtime may delay a beat: the
/// spawner replaces a watcher whose heartbeat is 20 s old (docs/behaviour.md F).
#[derive(Debug)]
pub struct Heartbeats {
    beats: Arc<Mutex<BTreeMap<String, Beating>>>,
    /// Wakes the thread to beat a key just added; dropped, it stops the thread.
    wake: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// One key's heartbeat file and whether the thread has beaten it yet.
#[derive(Debug)]
struct Beating {
    file: Beater,
    beaten: bool,
}

impl Heartbeats {
    /// Starts the thread (beating nothing until a key is added).
    pub fn start(every: Duration) -> io::Result<Heartbeats> {
        let beats: Arc<Mutex<BTreeMap<String, Beating>>> = Arc::default();
        let (tx, rx) = mpsc::channel::<()>();
        let thread_beats = beats.clone();
        let thread = std::thread::Builder::new()
            .name("kcap-heartbeats".to_owned())
            .spawn(move || beat_loop(&thread_beats, every, &rx))
            .map_err(|e| with_context(e, "failed to start the heartbeat thread".to_owned()))?;
        Ok(Heartbeats {
            beats,
            wake: Some(tx),
            thread: Some(thread),
        })
    }

    /// Beats `key`'s heartbeat at `path` now (on the thread) and then with every round.
    pub fn add(&self, key: &str, path: &Path) {
        self.lock().insert(
            key.to_owned(),
            Beating {
                file: Beater::new(path),
                beaten: false,
            },
        );
        if let Some(wake) = &self.wake {
            let _ = wake.send(());
        }
    }

    /// Stops beating `key`. Once this returns no beat writes its file again: the thread holds
    /// the same lock for a whole round, so a caller may remove the file right after.
    pub fn remove(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Stops the thread and waits for it (it never blocks for longer than one round).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        // Dropping the sender wakes the thread's `recv_timeout` at once.
        self.wake.take();
        if let Some(handle) = self.thread.take() {
            let _ = handle.join();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Beating>> {
        self.beats.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One heartbeat file beaten from its own [`Heartbeats`] thread until dropped (or
/// [`Heartbeat::stop`]): a process holding a single key outside the host (a test's stand-in
/// watcher).
#[derive(Debug)]
pub struct Heartbeat(Option<Heartbeats>);

impl Heartbeat {
    /// Writes the wall-clock time (RFC 3339 UTC) to `path` now and then every `every`.
    pub fn spawn(path: PathBuf, every: Duration) -> Heartbeat {
        match Heartbeats::start(every) {
            Ok(beats) => {
                beats.add("", &path);
                Heartbeat(Some(beats))
            }
            Err(e) => {
                // Only under resource exhaustion; the watcher still works, and the spawner's
                // staleness check will say so.
                tracing::error!(
                    event = "heartbeat_thread_failed",
                    error = %e,
                    "{e}"
                );
                Heartbeat(None)
            }
        }
    }

    /// Stops the thread and waits for it (it never blocks for longer than one write).
    pub fn stop(mut self) {
        if let Some(beats) = self.0.take() {
            beats.stop();
        }
    }
}

/// Beats every key each round, and a key just added at once; a failing key is logged once per
/// failure streak, not every beat.
fn beat_loop(beats: &Mutex<BTreeMap<String, Beating>>, every: Duration, wake: &mpsc::Receiver<()>) {
    let mut failing: HashSet<String> = HashSet::new();
    let mut round = true;
    let mut next_round = Instant::now();
    loop {
        {
            let mut beats = beats.lock().unwrap_or_else(PoisonError::into_inner);
            // One text for the round, and a path put into words only when a log line says it.
            let text = Ts::now().rfc3339();
            for (key, beating) in beats.iter_mut() {
                if !round && beating.beaten {
                    continue;
                }
                beating.beaten = true;
                // Said once per streak over every key: out of descriptors or disk, every
                // key fails at once.
                let beat = beating.file.beat(text.as_bytes());
                let path = beating.file.path.display();
                match beat {
                    Ok(()) => {
                        if failing.remove(key) && failing.is_empty() {
                            tracing::info!(event = "heartbeat_recovered", key = %key, path = %path, "heartbeat writes work again");
                        }
                    }
                    Err(e) => {
                        if failing.is_empty() {
                            tracing::warn!(event = "heartbeat_write_failed", key = %key, path = %path, error = %e, "{e}; retrying every second until it works");
                        }
                        failing.insert(key.clone());
                    }
                }
            }
            failing.retain(|k| beats.contains_key(k));
        }
        if round {
            // A failed beat is tried again within a second, not a whole period later: the
            // kcap CLI replaces a watcher whose heartbeat is 20 s old.
            let wait = if failing.is_empty() {
                every
            } else {
                every.min(Duration::from_secs(1))
            };
            // On the whole second before it is due, where every process's poll ticks (the
            // ticker's module comment): the round wakes the machine no more often than the
            // polls do, and never later than asked.
            next_round = Instant::now() + crate::platform::ticker::align_wait(wait);
        }
        match wake.recv_timeout(next_round.saturating_duration_since(Instant::now())) {
            Err(mpsc::RecvTimeoutError::Timeout) => round = true,
            // A key was added: beat the new ones, keeping the round's pace for the rest.
            Ok(()) => round = false,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// The private files a heartbeat takes turns with: `<heartbeat>-0`, `<heartbeat>-1`, and the
/// name a new link briefly has before it is renamed over the heartbeat.
pub fn heartbeat_slots(path: &Path) -> [PathBuf; 3] {
    let name = |suffix: &str| {
        let mut s = path.as_os_str().to_os_string();
        s.push(suffix);
        PathBuf::from(s)
    };
    [name("-0"), name("-1"), name("-new")]
}

/// Replaces the heartbeat atomically without freeing an inode on every beat, and without
/// keeping any descriptor open between beats.
///
/// A plain atomic write (temp file, rename) makes the file system evict the replaced inode,
/// which on ext4 is most of an idle watcher's CPU. Here private files, each kept linked under
/// its own name, take turns with the heartbeat, so readers still only ever see a whole file and
/// the replaced inode survives under a private name:
///
/// - where two names can be swapped in one step (Linux's `RENAME_EXCHANGE`), the one slot
///   `<heartbeat>-0` is opened, rewritten in place, closed and swapped with the heartbeat: the
///   slot then names the previous heartbeat's inode, rewritten by the next beat. Five system
///   calls a beat (the open, its check that the slot is a regular file, the write, the close,
///   the swap), and no link count moves;
/// - elsewhere, `<heartbeat>-0` and `<heartbeat>-1` alternate: the one not visible is
///   rewritten, linked under a temporary name and renamed over the heartbeat (six calls);
/// - where hard links do not work either, plain atomic writes take over.
///
/// Nothing stays open between beats: a held key costs one descriptor at rest (its lock), so a
/// supervisor holding thousands of keys stays inside the usual 1,024 open files, and on Windows
/// a reader that opens the heartbeat sharing reads only (as .NET's `File.ReadAllText` does)
/// never meets a handle of ours. Where a rename over the heartbeat fails even after the
/// retries (a file system or emulation that refuses to replace an existing file, a reader that
/// never lets go), the beat is written in place instead: every beat has the same length, so a
/// reader sees the old time or the new one.
#[derive(Debug)]
struct Beater {
    path: PathBuf,
    slots: [PathBuf; 3],
    next: usize,
    /// The length each slot was last cut to by this beater (`None`: not known).
    lengths: [Option<usize>; 2],
    /// The length of the file the heartbeat names, when it is one of this beater's slots
    /// (`None`: not known to be ours, e.g. the first beat's, written by the claim).
    shown: Option<usize>,
    /// Whether `<heartbeat>-0` is known to be this beater's own file: one found there may be
    /// left by a watcher killed mid-beat and still be a link of the heartbeat itself, which a
    /// rewrite would change in place.
    slot_ours: bool,
    /// Whether the slot is swapped with the heartbeat (until the file system says it cannot).
    swaps: bool,
    plain: bool,
    /// How a slot is renamed over the heartbeat (a test gives one that fails).
    rename: fn(&Path, &Path) -> io::Result<()>,
    /// How the slot and the heartbeat are swapped (a test gives one that fails).
    exchange: fn(&Path, &Path) -> io::Result<()>,
}

impl Beater {
    fn new(path: &Path) -> Beater {
        Beater {
            path: path.to_path_buf(),
            slots: heartbeat_slots(path),
            next: 0,
            lengths: [None; 2],
            shown: None,
            slot_ours: false,
            // Only Linux swaps two names in one step.
            swaps: cfg!(target_os = "linux"),
            plain: false,
            rename: crate::platform::replace::rename,
            exchange: crate::platform::replace::exchange,
        }
    }

    fn beat(&mut self, text: &[u8]) -> io::Result<()> {
        if self.plain {
            return write_atomic(&self.path, text).or_else(|e| self.in_place(text, e));
        }
        let beat = if self.swaps {
            self.beat_swapped(text)
        } else {
            self.beat_linked(text)
        };
        match beat {
            Ok(()) => Ok(()),
            // No descriptor or no space: the next beat tries the same way again (the thread
            // says so once per streak).
            Err(e) if out_of_resources(&e) => Err(e),
            Err(e) => {
                // A slot replaced by a symbolic link lands here too: refused, named, and the
                // heartbeat goes on with plain atomic writes.
                tracing::warn!(event = "heartbeat_plain", error = %e, "linked heartbeat failed ({e}); using plain atomic writes");
                self.plain = true;
                write_atomic(&self.path, text).or_else(|e| self.in_place(text, e))
            }
        }
    }

    /// Opens slot `k`, writes `text` at its start and closes it; the slot is cut only when
    /// `text` is not as long as what it last held (its first beat, or one that failed midway):
    /// every beat has the same length.
    fn write_slot(&mut self, k: usize, text: &[u8]) -> io::Result<()> {
        // Opened, written and closed within the beat (see the type's documentation).
        let file = open_private(
            private_options().write(true).create(true).truncate(false),
            &self.slots[k],
        )?;
        crate::platform::positional::write_all_at(&file, text, 0)?;
        if self.lengths[k] != Some(text.len()) {
            self.lengths[k] = None;
            file.set_len(text.len() as u64)?;
            self.lengths[k] = Some(text.len());
        }
        Ok(())
    }

    /// The slot rewritten and swapped with the heartbeat (see the type's documentation).
    fn beat_swapped(&mut self, text: &[u8]) -> io::Result<()> {
        if !self.slot_ours {
            match fs::remove_file(&self.slots[0]) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            self.lengths[0] = None;
            self.slot_ours = true;
        }
        self.write_slot(0, text)?;
        if self.shown.is_some() {
            match (self.exchange)(&self.slots[0], &self.path) {
                Ok(()) => {
                    // The slot now names the previous heartbeat, as long as that beat was.
                    self.lengths[0] = self.shown;
                    self.shown = Some(text.len());
                    return Ok(());
                }
                // The heartbeat is gone (removed by hand): the slot is renamed into its place.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) if out_of_resources(&e) => return Err(e),
                // Not to be had here: the two slots take turns instead, from now on.
                Err(_) => {
                    self.swaps = false;
                    return self.beat_linked(text);
                }
            }
        }
        // A heartbeat this beater did not write (the claim's, another process's, none) is
        // replaced, not swapped: its inode is not kept under the slot's name, so the files
        // taking turns from now on are the slot's, created private.
        if let Err(e) = (self.rename)(&self.slots[0], &self.path) {
            self.shown = None;
            return self.in_place(text, e);
        }
        self.lengths[0] = None;
        self.shown = Some(text.len());
        Ok(())
    }

    fn beat_linked(&mut self, text: &[u8]) -> io::Result<()> {
        let k = self.next;
        self.write_slot(k, text)?;
        let new = &self.slots[2];
        // The temporary name is normally free (each beat renames it away); one left by a beat
        // that failed between the link and the rename is removed, then linked again.
        match fs::hard_link(&self.slots[k], new) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                fs::remove_file(new)?;
                fs::hard_link(&self.slots[k], new)?;
            }
            other => other?,
        }
        if let Err(e) = (self.rename)(new, &self.path) {
            let _ = fs::remove_file(new);
            return self.in_place(text, e);
        }
        self.next = 1 - k;
        Ok(())
    }

    /// The fallback when no rename over the heartbeat works (`failed` says why): the heartbeat
    /// rewritten where it is, opened and closed within the beat. A symbolic link at the path is
    /// still refused.
    fn in_place(&self, text: &[u8], failed: io::Error) -> io::Result<()> {
        if is_refused(&self.path) {
            return Err(failed);
        }
        let file = open_private(
            private_options().write(true).create(true).truncate(false),
            &self.path,
        )
        .map_err(|_| failed)?;
        crate::platform::positional::write_all_at(&file, text, 0)?;
        file.set_len(text.len() as u64)
    }
}

/// Whether `e` says a resource ran out (open files, the disk, its quota) rather than that
/// something is wrong: such a failure ends when the resource returns, and is waited out.
pub(crate) fn out_of_resources(e: &io::Error) -> bool {
    let codes = crate::platform::open_files::exhausted_codes();
    if e.raw_os_error().is_some_and(|c| codes.contains(&c)) {
        return true;
    }
    // An error given context (`with_context`) keeps its kind but not its code; its text
    // still ends with the code.
    let text = e.to_string();
    if codes
        .iter()
        .any(|c| text.contains(&format!("(os error {c})")))
    {
        return true;
    }
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// `<config>/logs/<session_id>[-<agent_id>].log`.
pub fn log_file_path(config_dir: &Path, session_id: &str, agent_id: Option<&str>) -> PathBuf {
    config_dir
        .join("logs")
        .join(format!("{}.log", watcher_key(session_id, agent_id)))
}

/// Opens a log file for appending (mode 0600, its directory 0700 when created); a symbolic
/// link at the path is refused.
pub fn open_log_file(path: &Path) -> io::Result<File> {
    ensure_private_dir(parent_dir(path))
        .and_then(|()| open_private(private_options().append(true).create(true), path))
        .map_err(|e| with_context(e, format!("failed to open log file {}", path.display())))
}

/// Open options that create files readable by their owner only and never follow a symbolic
/// link at the path itself: every file under `<config>` is opened through these
/// ([`crate::platform::private_file`] says how, per platform). Open with [`open_private`] to
/// get an error that names the path.
pub(crate) fn private_options() -> OpenOptions {
    crate::platform::private_file::options()
}

/// The directory a file lives in (`.` for a bare name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// `"<context>: <cause>"`, keeping the error kind so callers can still match on it.
pub(crate) fn with_context(e: io::Error, context: String) -> io::Error {
    io::Error::new(e.kind(), format!("{context}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on another thread and fails the test if it has not returned within 20 s (it
    /// blocked, as opening a named pipe without a writer does).
    fn returns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(20))
            .expect("blocked on a named pipe")
    }

    /// A named pipe planted where kcap-watch or the kcap CLI keeps a file (a pid file, a
    /// lock, a status file, a spool) is refused at once: opening it for reading would wait for
    /// a writer forever, hanging the watcher, `status` or the daemon.
    #[test]
    fn a_named_pipe_at_a_files_path_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let key = "019fa9812dca7a319c553b1f0e6d2a01";
        for name in [format!("{key}.pid"), format!("{key}.lock"), "x.json".into()] {
            if !crate::platform::test_support::make_fifo(&dir.path().join(&name)) {
                return; // no named pipes at a path here
            }
        }
        let d = dir.path().to_path_buf();
        let e = returns(move || read_small(&d.join(format!("{key}.pid")), SMALL_FILE_MAX));
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let d = dir.path().to_path_buf();
        let e = returns(move || read_nofollow(&d.join("x.json")));
        assert!(e.unwrap_err().to_string().contains("not a regular file"));
        let d = dir.path().to_path_buf();
        assert!(!returns(move || ExclusiveLock::is_held(
            &d.join(format!("{key}.lock"))
        )));
        let d = dir.path().to_path_buf();
        let files = returns(move || crate::host::ownership::KeyFiles::read(&d, key));
        assert_eq!(files.pid_file, None);
    }

    /// A pid file is a pid and a start token: a huge one is refused, not read into memory.
    #[test]
    fn a_huge_small_file_is_refused_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pid");
        fs::write(&path, "1".repeat(SMALL_FILE_MAX as usize)).unwrap();
        assert!(read_small(&path, SMALL_FILE_MAX).is_ok());
        fs::write(&path, "1".repeat(SMALL_FILE_MAX as usize + 1)).unwrap();
        assert_eq!(
            read_small(&path, SMALL_FILE_MAX).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    /// One thread beats every key (docs/design.md, "One host"): a key taken while the thread sleeps out a long
    /// period is beaten at once, not at the next round (a fresh `watch`'s first beat replaces
    /// the heartbeat name a killed predecessor's slot still holds), and a removed key is never
    /// written again.
    #[test]
    fn a_key_added_to_a_sleeping_heartbeat_thread_is_beaten_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let beats = Heartbeats::start(Duration::from_secs(3600)).unwrap();
        let first = dir.path().join("a.heartbeat");
        let second = dir.path().join("b.heartbeat");
        let beaten = |p: &Path| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !p.exists() {
                assert!(Instant::now() < deadline, "{} never beaten", p.display());
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        beats.add("a", &first);
        beaten(&first);
        beats.add("b", &second);
        beaten(&second);
        beats.remove("a");
        fs::remove_file(&first).unwrap();
        beats.add("c", &dir.path().join("c.heartbeat"));
        beaten(&dir.path().join("c.heartbeat"));
        assert!(!first.exists(), "a removed key is not beaten again");
        beats.stop();
    }

    /// While a daemon or supervisor holds its lock, another process (`status`, a restarted
    /// daemon adopting the supervisor) reads the holder's pid from the file, and cannot take
    /// the lock itself. Windows refuses reads of locked bytes: this is what failed there.
    #[test]
    fn a_lock_holders_pid_is_readable_while_it_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = supervise_lock_path(dir.path(), "s1");
        let held = ExclusiveLock::try_take(&path)
            .unwrap()
            .expect("free at first");
        assert!(ExclusiveLock::is_held(&path));
        assert_eq!(ExclusiveLock::holder_pid(&path), Some(std::process::id()));
        assert!(ExclusiveLock::try_take(&path).unwrap().is_none());
        drop(held);
        assert!(!ExclusiveLock::is_held(&path));
        assert!(ExclusiveLock::try_take(&path).unwrap().is_some());
    }

    /// The descriptors of this process that name a file under `dir` (only asked where
    /// [`crate::platform::test_support::open_files_under`] can tell).
    fn open_under(dir: &Path) -> Vec<PathBuf> {
        crate::platform::test_support::open_files_under(dir).unwrap_or_default()
    }

    /// docs/behaviour.md T4.2: a held key costs its lock at rest and nothing more. A beat opens,
    /// writes and closes its slot, so no descriptor stays open between beats (three per key
    /// before: a supervisor of 400 children ran out under the usual 1,024), and on Windows a
    /// reader opening the heartbeat with read sharing only never meets a handle of ours.
    #[test]
    fn a_heartbeat_keeps_no_descriptor_open_between_beats() {
        let dir = tempfile::tempdir().unwrap();
        let dir = fs::canonicalize(dir.path()).unwrap();
        if crate::platform::test_support::open_files_under(&dir).is_none() {
            return; // open descriptors cannot be listed here
        }
        let path = dir.join("k.heartbeat");
        let mut beater = Beater::new(&path);
        for t in [
            "2026-12-01T10:00:00.000Z",
            "2026-12-01T10:00:10.000Z",
            "2026-12-01T10:00:20.000Z",
        ] {
            beater.beat(t.as_bytes()).unwrap();
            assert_eq!(fs::read_to_string(&path).unwrap(), t);
            assert_eq!(open_under(&dir), Vec::<PathBuf>::new());
        }
        assert!(!beater.plain, "the linked slots stay in use");
    }

    /// Where a rename over the heartbeat fails (a file system or Windows emulation that will
    /// not replace an existing file), the beat is written in place: the heartbeat stays fresh.
    #[test]
    fn a_heartbeat_whose_rename_fails_is_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let dir = fs::canonicalize(dir.path()).unwrap();
        if crate::platform::test_support::open_files_under(&dir).is_none() {
            return; // open descriptors cannot be listed here
        }
        let path = dir.join("k.heartbeat");
        let mut beater = Beater::new(&path);
        beater.swaps = false;
        beater.beat(b"2026-12-01T10:00:00.000Z").unwrap();
        beater.rename = |_, _| Err(io::Error::from(io::ErrorKind::PermissionDenied));
        beater.beat(b"2026-12-01T10:00:10.000Z").unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "2026-12-01T10:00:10.000Z"
        );
        assert_eq!(open_under(&dir), Vec::<PathBuf>::new());
    }

    /// A beat that failed between its link and its rename leaves the temporary name taken,
    /// and a slot may hold a longer text than a beat's (written by someone else): the next
    /// beats still land whole, and the temporary name does not stay.
    #[test]
    fn a_heartbeat_beats_through_a_leftover_link_and_a_longer_slot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.heartbeat");
        let slots = heartbeat_slots(&path);
        let mut beater = Beater::new(&path);
        beater.swaps = false;
        beater.beat(b"2026-12-01T10:00:00.000Z").unwrap();
        fs::write(&slots[2], "left by a beat that failed").unwrap();
        fs::write(&slots[1], "2026-12-01T09:59:59.999Z and more after it").unwrap();
        for t in [
            "2026-12-01T10:00:10.000Z",
            "2026-12-01T10:00:20.000Z",
            "2026-12-01T10:00:30.000Z",
        ] {
            beater.beat(t.as_bytes()).unwrap();
            assert_eq!(fs::read_to_string(&path).unwrap(), t);
            assert!(!slots[2].exists(), "the temporary name stayed");
        }
        assert!(!beater.plain, "the linked slots stay in use");
    }

    /// Where two names swap in one step (Linux), a beat rewrites the one slot and swaps it with
    /// the heartbeat: the heartbeat and the slot take turns between two private inodes, no
    /// second slot or temporary link is made, and the slot holds the previous beat.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_heartbeat_swaps_its_one_slot_with_the_heartbeat() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.heartbeat");
        // The claim's heartbeat, written by someone else: replaced, never kept as a slot.
        fs::write(&path, "2026-12-01T09:59:59.000Z").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        // Held open, so its inode number is not given to another file meanwhile.
        let claim = File::open(&path).unwrap();
        let claimed = claim.metadata().unwrap().ino();
        let slots = heartbeat_slots(&path);
        let mut beater = Beater::new(&path);
        let mut inodes = std::collections::BTreeSet::new();
        let mut previous = None;
        for t in [
            "2026-12-01T10:00:00.000Z",
            "2026-12-01T10:00:10.000Z",
            "2026-12-01T10:00:20.000Z",
            "2026-12-01T10:00:30.000Z",
        ] {
            beater.beat(t.as_bytes()).unwrap();
            assert_eq!(fs::read_to_string(&path).unwrap(), t);
            let meta = fs::metadata(&path).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
            assert_eq!(meta.nlink(), 1, "the heartbeat is no link of a slot");
            inodes.insert(meta.ino());
            if let Some(before) = previous {
                assert_eq!(fs::read_to_string(&slots[0]).unwrap(), before);
            }
            previous = Some(t);
            assert!(!slots[1].exists() && !slots[2].exists());
        }
        assert!(beater.swaps, "the slot is still swapped");
        assert!(!inodes.contains(&claimed), "the claim's file is not reused");
        assert_eq!(inodes.len(), 2, "two inodes take turns: {inodes:?}");
    }

    /// A slot found at the start may be a link of the heartbeat (left by a watcher killed in the
    /// middle of a linked beat): it is not rewritten, which would change the heartbeat in place
    /// under a reader.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_slot_found_linked_to_the_heartbeat_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.heartbeat");
        fs::write(&path, "2026-12-01T09:59:59.000Z").unwrap();
        let slots = heartbeat_slots(&path);
        fs::hard_link(&path, &slots[0]).unwrap();
        let reader = File::open(&path).unwrap();
        let mut beater = Beater::new(&path);
        beater.beat(b"2026-12-01T10:00:00.000Z").unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "2026-12-01T10:00:00.000Z"
        );
        let mut seen = String::new();
        io::Read::read_to_string(&mut &reader, &mut seen).unwrap();
        assert_eq!(seen, "2026-12-01T09:59:59.000Z", "the old file was written");
    }

    /// A heartbeat removed by hand comes back at the next beat, and where the file system
    /// cannot swap, the two slots take turns as before.
    #[test]
    fn a_heartbeat_survives_its_removal_and_a_file_system_that_cannot_swap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.heartbeat");
        let mut beater = Beater::new(&path);
        beater.beat(b"2026-12-01T10:00:00.000Z").unwrap();
        beater.beat(b"2026-12-01T10:00:10.000Z").unwrap();
        fs::remove_file(&path).unwrap();
        beater.beat(b"2026-12-01T10:00:20.000Z").unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "2026-12-01T10:00:20.000Z"
        );
        beater.exchange = |_, _| Err(io::Error::from_raw_os_error(22));
        for t in ["2026-12-01T10:00:30.000Z", "2026-12-01T10:00:40.000Z"] {
            beater.beat(t.as_bytes()).unwrap();
            assert_eq!(fs::read_to_string(&path).unwrap(), t);
        }
        assert!(!beater.swaps && !beater.plain, "the linked slots take over");
    }

    #[test]
    fn key_joins_session_and_agent_with_a_dash() {
        assert_eq!(watcher_key("s1", None), "s1");
        assert_eq!(watcher_key("s1", Some("a2")), "s1-a2");
    }

    #[test]
    fn keys_that_escape_the_directory_are_refused() {
        for bad in ["", ".", "..", "../x", "a/b", ".hidden", "a\0b"] {
            assert!(check_file_key(bad).is_err(), "{bad:?}");
        }
        assert!(check_file_key("0199a2b4c0de-0199ffff").is_ok());
    }
}

/// `<config>/kcap-watch/daemon.lock`: one daemon per config root (docs/behaviour.md S2.5).
pub fn daemon_lock_path(config_dir: &Path) -> PathBuf {
    config_dir.join("kcap-watch").join("daemon.lock")
}

/// `<config>/kcap-watch/supervise/<session>.lock`: one supervisor per session (S2.2).
pub fn supervise_lock_path(config_dir: &Path, session_id: &str) -> PathBuf {
    config_dir
        .join("kcap-watch")
        .join("supervise")
        .join(format!("{session_id}.lock"))
}

/// An exclusive advisory lock on one of kcap-watch's own lock files (the daemon's, a
/// session's supervisor's), held while this value lives. The file holds the holder's pid, so
/// `status` and a restarted daemon can name it. It is never unlinked by anyone: these files are
/// few (one per session) and unlinking a lock another process may be opening is the race
/// `WatcherFiles` goes to lengths to avoid.
#[derive(Debug)]
pub struct ExclusiveLock {
    _file: File,
}

impl ExclusiveLock {
    /// Takes the lock at `path` without waiting (its directories created 0700): `Ok(None)`
    /// when another process holds it.
    pub fn try_take(path: &Path) -> io::Result<Option<ExclusiveLock>> {
        ensure_private_dir(parent_dir(path))?;
        let mut file = open_private(private_options().read(true).write(true).create(true), path)
            .map_err(|e| with_context(e, format!("failed to open lock file {}", path.display())))?;
        // Not `File::try_lock`: on Windows that would lock the pid below against every reader.
        match crate::platform::lock::try_lock_exclusive(&file) {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Ok(None),
            Err(fs::TryLockError::Error(e)) => {
                return Err(with_context(
                    e,
                    format!("failed to lock {}", path.display()),
                ));
            }
        }
        // Best effort: the pid is for people and `status`, the lock itself is the truth.
        let _ = file
            .set_len(0)
            .and_then(|()| file.write_all(std::process::id().to_string().as_bytes()));
        Ok(Some(ExclusiveLock { _file: file }))
    }

    /// Whether some process holds the lock at `path` now (a missing file: no). Probes by
    /// taking it for an instant.
    pub fn is_held(path: &Path) -> bool {
        match open_private(private_options().read(true), path) {
            Ok(file) => match file.try_lock_shared() {
                Ok(()) => false,
                Err(fs::TryLockError::WouldBlock) => true,
                Err(fs::TryLockError::Error(_)) => false,
            },
            Err(_) => false,
        }
    }

    /// The pid the holder wrote into the file at `path`.
    pub fn holder_pid(path: &Path) -> Option<u32> {
        read_small(path, SMALL_FILE_MAX).ok()?.trim().parse().ok()
    }
}
