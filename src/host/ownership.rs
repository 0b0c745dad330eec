//! Owning keys: the one way the host holds a key, for `watch`'s one child and `supervise`'s
//! many (docs/behaviour.md R8 and F).
//!
//! `watch` takes its key with its lock alone ([`Ownership::take`]; held by another watcher, it
//! exits 75): the kcap CLI's spawner started it, holding the spawn lock meanwhile.
//!
//! The kcap CLI's spawner (`WatcherManager.EnsureWatcherRunning`) starts a watcher for a key
//! unless the one it knows is alive by its rule: the pid on line 1 of `<key>.pid` names a
//! running process and, once 30 s have passed since `<key>.started`, `<key>.heartbeat` is at
//! most 20 s old. Its reaper also compares line 2, the process start token, and treats a
//! different token as a recycled pid. It makes every spawn decision under an exclusive,
//! non-blocking lock on `<key>.spawnlock` (a `flock` on Linux), skipping when contended, and
//! never unlinks that file.
//!
//! The supervisor plays by the same rules for every child it owns: it takes
//! `<key>.spawnlock` while deciding, leaves a key alone when another live watcher (a `watch`
//! process or the kcap CLI's own) holds it, and otherwise takes `<key>.lock` and writes
//! `<key>.pid` (its own pid and start token), `<key>.started` and `<key>.heartbeat` exactly
//! as `watch` does ([`WatcherFiles`]), so the spawner sees a live watcher and starts none.
//! Keys left alone are re-checked on every poll ([`Ownership::recheck`]) and taken over once
//! their watcher is gone. One thread beats the heartbeat of every owned key every 10 s, on
//! its own, so nothing on the runtime can let one go stale (a stale heartbeat would make
//! the spawner SIGTERM the supervisor, and with it every child).

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::files::{
    AcquireError, Heartbeats, WatcherFiles, open_private, private_options, process_alive,
    process_start_token, with_context,
};
use crate::time::Ts;

/// Descriptors kept free for what is already held: a claim is deferred while fewer are left
/// than this, or an eighth of the limit when that is more. Heartbeats, shipping (up to eight
/// connections, the token store read before each request), spool, status and log writes of the
/// keys held each need one for a moment.
pub(crate) const DESCRIPTOR_RESERVE: u64 = 64;

/// Descriptors run short: what is held comes first (its heartbeats, shipping, spools each need
/// one for a moment), so nothing new is claimed until some are back. A key costs one at rest
/// (its lock) and one more while its rollout is followed. `Some`: the error a claim fails with.
fn descriptors_short() -> Option<io::Error> {
    let (spare, limit) = crate::platform::open_files::spare()?;
    (spare < DESCRIPTOR_RESERVE.max(limit / 8)).then(|| {
        io::Error::other(format!(
            "only {spare} open files left under the limit, kept for the keys already held \
             (os error {})",
            crate::platform::open_files::too_many_open_files()
        ))
    })
}

/// The kcap CLI's startup grace: a watcher younger than this is never stale.
pub(crate) const SPAWN_GRACE: Duration = Duration::from_secs(30);

/// The kcap CLI's staleness threshold for a heartbeat, after the grace.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(20);

/// The kcap CLI's judgement of the watcher a key's files name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No pid file, or no pid in it.
    Vacant,
    /// The pid names no running process.
    Dead { pid: u32 },
    /// The pid runs, but its start token differs: the OS reused the pid.
    Recycled { pid: u32 },
    /// The pid runs, but past the grace its heartbeat is missing or too old.
    Wedged { pid: u32 },
    /// A live watcher.
    Alive { pid: u32 },
}

/// What one process looks like from outside: whether it runs, and its start token.
pub(crate) struct Probe {
    pub alive: bool,
    pub token: Option<String>,
}

/// The kcap CLI's liveness rule as a pure function of the key's files and `now`.
///
/// `pid_file` is the pid file's text; `probe` looks at a pid. A token that cannot be
/// compared (absent on either side, or another scheme) is no evidence of recycling, as in
/// the kcap CLI ("ambiguity never kills").
pub(crate) fn judge(
    pid_file: Option<&str>,
    started: Option<Ts>,
    heartbeat: Option<Ts>,
    now: Ts,
    probe: impl FnOnce(u32) -> Probe,
) -> Verdict {
    let mut lines = pid_file.unwrap_or_default().lines();
    let Some(pid) = lines.next().and_then(|l| l.trim().parse::<u32>().ok()) else {
        return Verdict::Vacant;
    };
    let written_token = lines.next().map(str::trim).filter(|t| !t.is_empty());
    let seen = probe(pid);
    if !seen.alive {
        return Verdict::Dead { pid };
    }
    if let (Some(written), Some(actual)) = (written_token, seen.token.as_deref())
        && scheme(written).is_some()
        && scheme(written) == scheme(actual)
        && written != actual
    {
        return Verdict::Recycled { pid };
    }
    // A missing `.started` counts as "just started", as the kcap CLI does.
    let started = started.unwrap_or(now);
    if now.duration_since(started) > SPAWN_GRACE {
        let fresh = heartbeat.is_some_and(|beat| now.since(beat) <= STALE_AFTER.as_millis() as i64);
        if !fresh {
            return Verdict::Wedged { pid };
        }
    }
    Verdict::Alive { pid }
}

/// `lx` of `lx:<boot>:<start>`.
fn scheme(token: &str) -> Option<&str> {
    token
        .split_once(':')
        .map(|(s, _)| s)
        .filter(|s| !s.is_empty())
}

/// What a key's `.pid`, `.started` and `.heartbeat` say (each `None` when missing or
/// unreadable): the inputs of the kcap CLI's liveness rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeyFiles {
    pub pid_file: Option<String>,
    pub started: Option<Ts>,
    pub heartbeat: Option<Ts>,
}

impl KeyFiles {
    /// Reads `<dir>/<key>.{pid,started,heartbeat}`.
    pub fn read(dir: &Path, key: &str) -> KeyFiles {
        let read = |suffix: &str| {
            crate::files::read_small(
                &dir.join(format!("{key}.{suffix}")),
                crate::files::SMALL_FILE_MAX,
            )
            .ok()
        };
        let read_time = |suffix: &str| read(suffix).and_then(|t| Ts::parse_rfc3339(&t));
        KeyFiles {
            pid_file: read("pid"),
            started: read_time("started"),
            heartbeat: read_time("heartbeat"),
        }
    }

    /// The kcap CLI's verdict on these files at `now`, looking at the real process.
    pub fn judge(&self, now: Ts) -> Verdict {
        judge(
            self.pid_file.as_deref(),
            self.started,
            self.heartbeat,
            now,
            |pid| Probe {
                alive: process_alive(pid),
                token: process_start_token(pid),
            },
        )
    }
}

/// Judges the watcher `<dir>/<key>.*` names, looking at the real process.
pub(crate) fn judge_key(dir: &Path, key: &str, now: Ts) -> Verdict {
    KeyFiles::read(dir, key).judge(now)
}

/// The outcome of trying to own a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// This process owns the key: lock held, files written, heartbeat beaten.
    Owned,
    /// Another live watcher holds the key; re-checked by [`Ownership::recheck`].
    Held { pid: Option<u32> },
    /// The kcap CLI's spawner is deciding about this key right now (its spawn lock is
    /// taken); re-checked by [`Ownership::recheck`].
    Busy,
}

/// Every key this process owns or waits for, and the one heartbeat thread beating them.
///
/// Shared by every child of the host ([`super::Hub`]), so its methods take `&self`: `watch`'s
/// child takes its one key when its header names it ([`Ownership::take`]), `supervise` claims
/// each descendant's key beside the kcap CLI ([`Ownership::want`]).
pub(crate) struct Ownership {
    dir: PathBuf,
    keys: Mutex<Keys>,
    beats: Heartbeats,
}

#[derive(Default)]
struct Keys {
    owned: HashMap<String, WatcherFiles>,
    /// Keys held by another watcher (or mid-decision by the spawner), by key.
    waiting: BTreeMap<String, Claim>,
    /// Keys whose claim failed (a full disk, no descriptor left, a permission error), by key:
    /// tried again at every [`Ownership::recheck`], never dropped (the spec: a child whose
    /// claim failed is never silently dropped).
    failing: BTreeMap<String, ClaimFailure>,
}

/// A key whose claim keeps failing: how often, since when, and the last error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClaimFailure {
    pub attempts: u64,
    pub since: Ts,
    pub error: String,
}

impl Ownership {
    /// Starts the heartbeat thread over `<watchers>` (the directory is made when a key is
    /// taken), beating `every` (`HEARTBEAT_EVERY` unless a test lowers it).
    pub(crate) fn start_beating_every(
        watcher_dir: &Path,
        every: Duration,
    ) -> io::Result<Ownership> {
        Ok(Ownership {
            dir: watcher_dir.to_path_buf(),
            keys: Mutex::default(),
            beats: Heartbeats::start(every)?,
        })
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn is_owned(&self, key: &str) -> bool {
        self.keys().owned.contains_key(key)
    }

    /// Whether some key waits for another watcher to go, or for its claim to work.
    pub fn is_waiting(&self) -> bool {
        let keys = self.keys();
        !keys.waiting.is_empty() || !keys.failing.is_empty()
    }

    /// The keys whose claim is failing now, with why.
    pub fn failing(&self) -> Vec<(String, ClaimFailure)> {
        let keys = self.keys();
        keys.failing
            .iter()
            .map(|(k, f)| (k.clone(), f.clone()))
            .collect()
    }

    /// `key` could not be claimed or followed for `error` (a resource that ran out): it is
    /// tried again at every [`Ownership::recheck`]. The failure is logged once per streak of
    /// failures over every key, not per key or per attempt: running out of descriptors or
    /// disk fails every claim at once.
    pub fn failed(&self, key: &str, error: &str, now: Ts) {
        let mut keys = self.keys();
        let first_of_streak = keys.failing.is_empty();
        let f = keys
            .failing
            .entry(key.to_owned())
            .or_insert_with(|| ClaimFailure {
                attempts: 0,
                since: now,
                error: String::new(),
            });
        f.attempts += 1;
        f.error = error.to_owned();
        drop(keys);
        if first_of_streak {
            tracing::warn!(event = "child_claim_failed", key = %key, error = %error, "failed to own {key}: {error}; trying it (and any other key that fails) again at every poll");
        }
    }

    /// `key` is claimed: a failure streak ends when no key fails any more.
    fn recovered(&self, key: &str) {
        let mut keys = self.keys();
        if keys.failing.remove(key).is_some() && keys.failing.is_empty() {
            drop(keys);
            tracing::info!(event = "child_claim_recovered", key = %key, "claims work again");
        }
    }

    /// Takes `key` the way `watch` does: its lock or nothing (no spawn lock: the kcap CLI's
    /// spawner may hold it while it starts this very process), then its files and heartbeat.
    pub fn take(&self, key: &str, now: Ts) -> Result<(), AcquireError> {
        if self.is_owned(key) {
            return Ok(());
        }
        let files = WatcherFiles::acquire(&self.dir, key, now)?;
        self.hold(key, files);
        Ok(())
    }

    /// Tries to own `key` now, as the kcap CLI's spawner would decide. When another watcher
    /// holds it (or the spawner is deciding), the key is remembered and
    /// [`Ownership::recheck`] tries again.
    pub fn want(&self, key: &str, now: Ts) -> io::Result<Claim> {
        let claim = match self.claim(key, now) {
            Ok(claim) => claim,
            Err(e) => {
                self.failed(key, &e.to_string(), now);
                return Err(e);
            }
        };
        self.recovered(key);
        let mut keys = self.keys();
        if claim == Claim::Owned {
            keys.waiting.remove(key);
        } else {
            keys.waiting.insert(key.to_owned(), claim.clone());
        }
        Ok(claim)
    }

    /// Tries every waiting key again; returns the keys owned now. Call it every poll
    /// interval: a key whose watcher died is then taken over within one interval.
    #[cfg(test)]
    pub fn recheck(&self, now: Ts) -> Vec<String> {
        // Short of descriptors, every claim would fail the same way: none is tried (counting
        // the open descriptors once per key, for a thousand keys, was itself a busy loop).
        if descriptors_short().is_some() {
            return Vec::new();
        }
        let mut taken = Vec::new();
        for key in self.to_recheck() {
            // A failure is recorded (and said once per streak) by `want`.
            if let Ok(Claim::Owned) = self.want(&key, now) {
                taken.push(key);
            }
        }
        taken
    }

    /// The keys to try again: those another watcher holds, and those whose claim failed.
    /// Each is tried with [`Ownership::want`] (the supervisor starts each key's child before
    /// trying the next, so the descriptors a child costs count before the next claim).
    pub fn to_recheck(&self) -> Vec<String> {
        let keys = self.keys();
        keys.waiting
            .keys()
            .chain(keys.failing.keys())
            .cloned()
            .collect()
    }

    /// Descriptors are short: no claim would work now (see [`DESCRIPTOR_RESERVE`]).
    pub fn short_of_descriptors(&self) -> bool {
        descriptors_short().is_some()
    }

    /// Stops owning `key` (its pipeline ended): no more beats, then its pid, started and
    /// heartbeat files are removed and the lock released. Also forgets a waiting or failing
    /// key.
    pub fn release(&self, key: &str) {
        let files = {
            let mut keys = self.keys();
            keys.waiting.remove(key);
            keys.failing.remove(key);
            keys.owned.remove(key)
        };
        // Before the files go: no beat can recreate the heartbeat file after this.
        self.beats.remove(key);
        if let Some(files) = files {
            files.release();
        }
    }

    /// Releases every owned key and stops the heartbeat thread (`Drop` does both).
    #[cfg(test)]
    pub fn shutdown(self) {}

    /// Releases every owned key (the heartbeat thread goes on for keys taken later).
    pub fn release_all(&self) {
        let keys: Vec<String> = self.keys().owned.keys().cloned().collect();
        for key in keys {
            self.release(&key);
        }
        let mut keys = self.keys();
        keys.waiting.clear();
        keys.failing.clear();
    }

    fn hold(&self, key: &str, files: WatcherFiles) {
        self.beats.add(key, files.heartbeat_path());
        self.keys().owned.insert(key.to_owned(), files);
    }

    fn claim(&self, key: &str, now: Ts) -> io::Result<Claim> {
        if self.is_owned(key) {
            return Ok(Claim::Owned);
        }
        if let Some(e) = descriptors_short() {
            return Err(e);
        }
        let Some(_spawn_lock) = SpawnLock::try_take(&self.dir, key)? else {
            return Ok(Claim::Busy);
        };
        let own_pid = std::process::id();
        if let Verdict::Alive { pid } = judge_key(&self.dir, key, now)
            && pid != own_pid
        {
            return Ok(Claim::Held { pid: Some(pid) });
        }
        match WatcherFiles::acquire(&self.dir, key, now) {
            Ok(files) => {
                self.hold(key, files);
                tracing::info!(event = "child_owned", key = %key, "owning {key}");
                Ok(Claim::Owned)
            }
            // A watcher holding the lock is alive even when its heartbeat is late: it is the
            // kcap CLI's to reap, not ours.
            Err(AcquireError::Held { holder_pid, .. }) => Ok(Claim::Held { pid: holder_pid }),
            Err(AcquireError::Io(e)) => Err(e),
            // A bad key or a planted symlink: this child cannot be watched safely by anyone;
            // report it as an error for this key only (the others go on).
            Err(AcquireError::Refused(why)) => {
                Err(io::Error::new(io::ErrorKind::InvalidInput, why.to_string()))
            }
        }
        // `_spawn_lock` is released here, after the files are written: the spawner, once it
        // gets the lock, sees a live watcher.
    }
}

impl Drop for Ownership {
    fn drop(&mut self) {
        self.release_all();
    }
}

/// The kcap CLI's `<key>.spawnlock`, held while deciding about a key. The file is never
/// removed (unlinking a locked file would let the next taker lock a fresh inode).
struct SpawnLock(#[allow(dead_code)] File);

impl SpawnLock {
    /// `None` when another process holds it.
    fn try_take(dir: &Path, key: &str) -> io::Result<Option<SpawnLock>> {
        let path = dir.join(format!("{key}.spawnlock"));
        // A symlink here is refused, never followed (R5).
        let file = open_private(
            private_options().write(true).create(true).truncate(false),
            &path,
        )
        .map_err(|e| with_context(e, format!("failed to open {}", path.display())))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(SpawnLock(file))),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(with_context(
                e,
                format!("failed to lock {}", path.display()),
            )),
        }
    }
}
