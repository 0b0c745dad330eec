//! `supervise`: the host (`crate::host`) with a membership discovered from a session's tree.
//!
//! The per-child shell is the host's own ([`Child`]): the same pipeline, file reading,
//! requests, spools and endings as `watch`. What this membership adds is the many: discovery
//! finds descendants, the hub's key ownership decides which of them are ours (the kcap CLI's
//! rule, beside its spawner), the host routes a changed path to the child that follows it and
//! hands the rest to discovery, and an error in one child (a rewritten file, an unreadable
//! rollout) ends that child only: its key is released and the others go on. A child reaped
//! or at its lifetime ceiling keeps its key, and is followed again when its rollout grows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result};
use tracing::{error, info, warn};

use super::discover::{Discovery, Found, ThreadFacts};
use crate::codex::layout::{CodexLayout, Header, read_header};
use crate::config::Settings;
use crate::error::{RolloutRewritten, UsageError};
use crate::files;
use crate::host::child::{Child, Files, WatchOptions};
use crate::host::clock::Clock;
use crate::host::ownership::{Claim, ClaimFailure};
use crate::host::shutdown::Shutdown;
use crate::host::{Ending, Host, Membership};
use crate::key::{Identity, Role, normalize_id};
use crate::pipeline::{Event, ExitReason};
use crate::status_file::{KeyStatus, LastError};
use crate::time::Ts;

/// What `supervise` was asked to do.
#[derive(Clone, Debug)]
pub struct SuperviseOptions {
    /// The session's own rollout.
    pub rollout: PathBuf,
    /// The session id every descendant ships under [default: the rollout header's].
    pub session_id: Option<String>,
    /// Also ship the session's own lines (the kcap CLI's session watcher owns them otherwise).
    pub with_session: bool,
    pub parent_pid: Option<u32>,
}

/// A descendant the supervisor knows: its key's owner may be us or another watcher.
struct Member {
    agent_id: Option<String>,
    path: PathBuf,
}

/// A child whose pipeline ended by reap or at its lifetime ceiling (docs/behaviour.md S2.7):
/// its key stays ours (lock, pid, heartbeat), so the kcap CLI starts no watcher of its own,
/// and a fresh pipeline follows it again once its rollout grows (Codex re-engaged it).
struct Held {
    /// The rollout's length when its pipeline ended: longer is growth, shorter a rewrite.
    len: u64,
    /// The stop was acknowledged: it stays latched for the process.
    stop_latched: bool,
    /// Its status-file line as the pipeline left it.
    status: Option<KeyStatus>,
}

/// Runs the supervisor until the parent exits (children end as on parent exit), a signal
/// ends it, or no child is live and the session has been idle for its window.
pub async fn run(opts: SuperviseOptions, settings: Settings, clock: Arc<dyn Clock>) -> Result<()> {
    run_until(opts, settings, clock, Shutdown::Signals).await
}

/// [`run`] with the shutdown passed in: a test ends the supervisor through a channel.
pub async fn run_until(
    opts: SuperviseOptions,
    settings: Settings,
    clock: Arc<dyn Clock>,
    shutdown: Shutdown,
) -> Result<()> {
    let session_path = std::path::absolute(&opts.rollout)
        .with_context(|| format!("failed to resolve rollout path {}", opts.rollout.display()))?;
    let no_header = || {
        UsageError(format!(
            "{} has no readable session_meta first line: cannot tell whose sub-agents to supervise",
            session_path.display()
        ))
    };
    let meta = match read_header(&session_path) {
        Ok(Header::Meta(meta)) => meta,
        Ok(_) => return Err(no_header().into()),
        Err(e) => {
            return Err(UsageError(format!(
                "cannot read rollout {}: {e}",
                session_path.display()
            ))
            .into());
        }
    };
    let root_thread = ThreadFacts::from_meta(&meta).ok_or_else(no_header)?.id;
    let session_id = match &opts.session_id {
        Some(s) => normalize_id(s),
        None => Identity::from_meta(&meta)
            .session_id
            .unwrap_or_else(|| root_thread.clone()),
    };
    files::check_id("session id", &session_id)?;
    // One supervisor per session (docs/behaviour.md S2.2): a second exits 75, and the daemon
    // adopts the one holding this lock instead of starting another.
    let lock_path = files::supervise_lock_path(&settings.config_dir, &session_id);
    let _session_lock = files::ExclusiveLock::try_take(&lock_path)
        .with_context(|| format!("failed to take the supervisor lock of {session_id}"))?
        .ok_or_else(|| crate::error::LockHeld {
            key: format!("supervise {session_id}"),
            holder_pid: files::ExclusiveLock::holder_pid(&lock_path),
        })?;
    let layout = CodexLayout::for_session(&session_path, settings.codex_home.as_deref())
        .map_err(UsageError)?;
    crate::logging::attach_file(&files::log_file_path(
        &settings.config_dir,
        &session_id,
        Some("supervisor"),
    ));
    // The directory spawn locks are taken in, before any key is wanted.
    files::ensure_private_dir(&settings.watcher_dir).with_context(|| {
        format!(
            "failed to start owning keys in {}",
            settings.watcher_dir.display()
        )
    })?;
    // The parent as it is now: a pid the system later gives to another process counts as
    // the parent having exited.
    let parent = opts
        .parent_pid
        .map(crate::platform::process::Incarnation::observe);
    if parent.is_some() {
        // Closing the terminal the session was started from must not end the supervisor
        // (the parent decides when it ends).
        if let Err(e) = crate::platform::signals::detach_from_terminal() {
            warn!(
                event = "detach_failed",
                "failed to leave the terminal's session: {e}"
            );
        }
    }
    let mut host = Host::new(settings, clock, crate::status_file::Writer::Supervise, true)?;
    let started = host.hub.clock.now();
    host.status.set_key(&session_id, &session_id);
    let mut tree = Tree {
        discovery: Discovery::new(layout, &root_thread),
        session_id,
        session_path,
        with_session: opts.with_session,
        started,
        keys: BTreeMap::new(),
        held: BTreeMap::new(),
        members: HashMap::new(),
        done: HashSet::new(),
        to_claim: std::collections::VecDeque::new(),
        continuations: BTreeMap::new(),
    };
    let result = host.run(&mut tree, shutdown, parent).await;
    if result.is_ok() {
        host.close();
    } else {
        // An end on purpose removes the status file; a failure leaves it, so a daemon that
        // adopted this supervisor (and cannot see its exit code) restarts it as a crash.
        host.hub.keys.release_all();
    }
    result
}

/// The session's tree as the host's membership.
struct Tree {
    discovery: Discovery,
    /// The root session's id: every descendant's `session_id` (R8).
    session_id: String,
    session_path: PathBuf,
    with_session: bool,
    started: Ts,
    /// The key each running child owns, by slot.
    keys: BTreeMap<u64, String>,
    /// Keys kept without a pipeline, by key (never counted as live for the idle end).
    held: BTreeMap<String, Held>,
    /// Every key found, by key (owned, waiting or done).
    members: HashMap<String, Member>,
    /// Keys whose child ended here: never started again by this process.
    done: HashSet<String>,
    /// Keys found and not claimed yet, claimed [`CLAIMS_PER_TURN`] at a time so that a
    /// thousand found at once do not hold up the shipping of those already claimed.
    to_claim: std::collections::VecDeque<String>,
    /// Second rollouts of a followed thread, by key: named in the status file, not followed.
    continuations: BTreeMap<String, Vec<PathBuf>>,
}

/// How many found keys one turn of the loop claims (each claim writes a few files).
const CLAIMS_PER_TURN: usize = 16;

impl Membership for Tree {
    type End = ();

    fn start(&mut self, host: &mut Host) -> Result<()> {
        if let Some(why) = host.notifier.polling_because() {
            info!(event = "polling", "{why}");
        }
        info!(
            event = "supervisor_started",
            path = %self.session_path.display(),
            session_id = %self.session_id,
            with_session = self.with_session,
            "supervising the sub-agents of {}",
            self.session_path.display()
        );
        if self.with_session {
            let key = files::watcher_key(&self.session_id, None);
            self.members.insert(
                key.clone(),
                Member {
                    agent_id: None,
                    path: self.session_path.clone(),
                },
            );
            self.want(host, &key);
        }
        self.scan(host);
        Ok(())
    }

    fn settle(&mut self, host: &mut Host, now: Ts) -> Result<Option<()>> {
        self.reap_ended(host);
        if host.ending.is_none() {
            for _ in 0..CLAIMS_PER_TURN {
                let Some(key) = self.to_claim.pop_front() else {
                    break;
                };
                self.want(host, &key);
            }
        }
        if host.ending.is_some() && host.children.is_empty() {
            info!(event = "supervisor_ended", "every child has ended");
            return Ok(Some(()));
        }
        if host.ending.is_none() && self.is_idle(host, now) {
            info!(
                event = "supervisor_ended",
                reason = "idle",
                "no child is live and the session has been idle for its window"
            );
            return Ok(Some(()));
        }
        Ok(None)
    }

    fn next_wake(&self, now: Ts) -> Option<Ts> {
        (!self.to_claim.is_empty()).then_some(now)
    }

    /// The children's status versions, while they are all the lines say (no key held
    /// without a pipeline, none failing, no continuation named).
    fn status_signature(&mut self, host: &mut Host) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        if !self.held.is_empty()
            || !self.continuations.is_empty()
            || !host.hub.keys.failing().is_empty()
        {
            return None;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (slot, c) in &host.children {
            (slot, c.status_version()).hash(&mut h);
        }
        Some(h.finish())
    }

    /// Every child followed, then every key held without a pipeline.
    fn status(&mut self, host: &mut Host) -> Option<Vec<KeyStatus>> {
        let mut lines: Vec<KeyStatus> = host
            .children
            .values()
            .filter_map(|c| c.key_status())
            .collect();
        lines.extend(self.held.values().filter_map(|h| h.status.clone()));
        lines.extend(
            host.hub
                .keys
                .failing()
                .into_iter()
                .map(|(key, f)| self.claim_failed_status(&key, &f)),
        );
        for line in &mut lines {
            if let Some(paths) = self.continuations.get(&line.key) {
                line.continuations = paths.iter().map(|p| p.display().to_string()).collect();
            }
        }
        lines.sort_by(|a, b| a.key.cmp(&b.key));
        Some(lines)
    }

    /// A held key's rollout may have grown; anything else is discovery's.
    fn on_other_paths(&mut self, host: &mut Host, paths: Vec<PathBuf>, rescan: bool) -> Result<()> {
        let mut others = Vec::new();
        for path in paths {
            let held = self
                .held
                .keys()
                .find(|k| self.held_path(k).is_some_and(|p| p == path))
                .cloned();
            match held {
                Some(key) => self.check_held(host, &key),
                None => others.push(path),
            }
        }
        let mut found = self.discovery.on_paths(&others, SystemTime::now());
        if rescan {
            found.extend(self.discovery.scan(SystemTime::now()));
        }
        self.on_found(host, found);
        Ok(())
    }

    fn needs_every_poll(&self, host: &Host) -> bool {
        // Keys held by another watcher or failing to be claimed are looked at every poll
        // (docs/behaviour.md R2.3), and a child waiting to be claimed is due at once.
        !self.held.is_empty() || !self.to_claim.is_empty() || host.hub.keys.is_waiting()
    }

    fn on_poll(&mut self, host: &mut Host) -> bool {
        let found = self.scan(host);
        // One key at a time, its child started before the next is claimed: a claim and its
        // child's rollout cost two descriptors, and both count before the next claim.
        let now = host.hub.clock.now();
        for key in host.hub.keys.to_recheck() {
            if host.hub.keys.short_of_descriptors() {
                break;
            }
            if let Ok(Claim::Owned) = host.hub.keys.want(&key, now) {
                self.start_child(host, &key, false);
            }
        }
        let held: Vec<String> = self.held.keys().cloned().collect();
        for key in held {
            self.check_held(host, &key);
        }
        found
    }

    fn on_ending(&mut self, host: &Host, why: Ending) {
        let why = why.as_str();
        info!(
            event = "supervisor_ending",
            why,
            children = host.children.len(),
            "ending every child ({why})"
        );
    }

    fn child_failed(
        &mut self,
        host: &mut Host,
        slot: u64,
        _child: Child,
        error: anyhow::Error,
    ) -> Result<()> {
        if let Some(key) = self.keys.remove(&slot) {
            self.key_failed(host, &key, &error);
        }
        Ok(())
    }
}

impl Tree {
    /// Scans for what discovery has not found yet; `true` when the scan found something.
    fn scan(&mut self, host: &mut Host) -> bool {
        let found = self.discovery.scan(SystemTime::now());
        let any = !found.is_empty();
        self.on_found(host, found);
        any
    }

    fn on_found(&mut self, host: &mut Host, found: Vec<Found>) {
        for f in found {
            match f {
                Found::Joined {
                    thread_id,
                    parent_id,
                    path,
                    ..
                } => {
                    let key = files::watcher_key(&self.session_id, Some(&thread_id));
                    info!(event = "child_found", key = %key, parent_id = %parent_id, path = %path.display(), "found sub-agent {thread_id}");
                    self.members.insert(
                        key.clone(),
                        Member {
                            agent_id: Some(thread_id),
                            path,
                        },
                    );
                    self.to_claim.push_back(key);
                }
                Found::Continuation { thread_id, path } => {
                    let key = files::watcher_key(&self.session_id, Some(&thread_id));
                    let paths = self.continuations.entry(key).or_default();
                    if !paths.contains(&path) {
                        paths.push(path);
                    }
                }
                // The child's own guard follows the open file across the rename (R3).
                Found::Moved { thread_id, to, .. } => {
                    let key = files::watcher_key(&self.session_id, Some(&thread_id));
                    if let Some(m) = self.members.get_mut(&key) {
                        m.path = to;
                    }
                }
            }
        }
        host.notifier.sync(&self.discovery.watch_dirs());
    }

    /// Tries to own `key`; starts its child when it is ours.
    fn want(&mut self, host: &mut Host, key: &str) {
        if self.done.contains(key) {
            return;
        }
        if self.held.contains_key(key) {
            self.check_held(host, key);
            return;
        }
        match host.hub.keys.want(key, host.hub.clock.now()) {
            Ok(Claim::Owned) => self.start_child(host, key, false),
            Ok(Claim::Held { pid }) => {
                info!(event = "child_held", key = %key, pid = pid.unwrap_or(0), "{key} is held by another live watcher; re-checking every poll");
            }
            Ok(Claim::Busy) => {}
            // Recorded, said once per streak and tried again at every poll by the ownership.
            Err(_) => {}
        }
    }

    /// The status line of a key whose claim keeps failing.
    fn claim_failed_status(&self, key: &str, f: &ClaimFailure) -> KeyStatus {
        let (session_id, agent_id) = match key.split_once('-') {
            Some((s, a)) => (s.to_owned(), Some(a.to_owned())),
            None => (key.to_owned(), None),
        };
        KeyStatus {
            key: key.to_owned(),
            session_id,
            agent_id,
            rollout: self
                .held_path(key)
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            state: crate::status::CLAIM_FAILED.to_owned(),
            turn: "none".to_owned(),
            lines_on_disk: 0,
            lines_confirmed: 0,
            lines_spooled: 0,
            lines_refused: 0,
            lines_lost: Default::default(),
            stop_posted: false,
            next_due: None,
            last_error: Some(LastError {
                event: "child_claim_failed".to_owned(),
                message: f.error.clone(),
                at: f.since.rfc3339(),
            }),
            claim_failures: f.attempts,
            continuations: Vec::new(),
        }
    }

    /// The rollout a known key follows now (taken over or re-engaged later, it may have been
    /// archived meanwhile).
    fn held_path(&self, key: &str) -> Option<PathBuf> {
        let member = self.members.get(key)?;
        Some(
            member
                .agent_id
                .as_deref()
                .and_then(|id| self.discovery.path_of(id))
                .unwrap_or(&member.path)
                .to_path_buf(),
        )
    }

    /// A held key's rollout grew: a fresh pipeline follows it, seeded from the file and
    /// resuming at the server's watermark, its stop still latched when it was posted. Shorter
    /// than when its pipeline ended: the file was rewritten, and the key is released as
    /// `watch` exits 3 on a rewrite.
    fn check_held(&mut self, host: &mut Host, key: &str) {
        let (Some(held), Some(path)) = (self.held.get(key), self.held_path(key)) else {
            return;
        };
        let Ok(len) = std::fs::metadata(&path).map(|m| m.len()) else {
            // Gone for now (Codex may be renaming it): the next poll looks again.
            return;
        };
        if len == held.len {
            return;
        }
        let (was, stop_latched) = (held.len, held.stop_latched);
        self.held.remove(key);
        if len < was {
            error!(
                event = "rollout_rewritten",
                key = %key,
                path = %path.display(),
                "rollout {} was rewritten (shorter than when its pipeline ended); releasing {key}",
                path.display()
            );
            self.done.insert(key.to_owned());
            host.hub.keys.release(key);
            return;
        }
        info!(event = "child_reengaged", key = %key, path = %path.display(), "{key} grew after its pipeline ended; following it again");
        self.start_child(host, key, stop_latched);
    }

    /// Starts following an owned key; `stop_latched`: this process already stopped the child.
    fn start_child(&mut self, host: &mut Host, key: &str, stop_latched: bool) {
        if !host.hub.keys.is_owned(key) || self.keys.values().any(|k| k == key) {
            return;
        }
        let (Some(path), Some(member)) = (self.held_path(key), self.members.get(key)) else {
            host.hub.keys.release(key);
            return;
        };
        let opts = WatchOptions {
            session_id: Some(self.session_id.clone()),
            agent_id: member.agent_id.clone(),
            role: Some(if member.agent_id.is_some() {
                Role::Child
            } else {
                Role::Session
            }),
            ..WatchOptions::following(path)
        };
        let slot = host.next_slot();
        let started = Child::new(slot, opts, &host.hub, Files::Supervised).and_then(|mut c| {
            if stop_latched {
                c.latch_stop();
            }
            c.start(&host.hub)?;
            c.dispatch(&host.hub, Event::Tick)?;
            Ok(c)
        });
        match started {
            Ok(child) => {
                host.children.insert(slot, child);
                self.keys.insert(slot, key.to_owned());
            }
            Err(e) => self.key_failed(host, key, &e),
        }
    }

    fn key_failed(&mut self, host: &mut Host, key: &str, e: &anyhow::Error) {
        // Out of descriptors or disk: not this child's fault. Its key goes back (freeing its
        // lock's descriptor) and is claimed again at a later poll, from the server's
        // watermark: nothing of it is dropped.
        let exhausted = e
            .chain()
            .filter_map(|c| c.downcast_ref::<std::io::Error>())
            .any(files::out_of_resources);
        if exhausted {
            host.hub.keys.release(key);
            host.hub
                .keys
                .failed(key, &format!("{e:#}"), host.hub.clock.now());
            return;
        }
        // A rewrite was logged as `rollout_rewritten` where it was found.
        if !e.chain().any(|c| c.is::<RolloutRewritten>()) {
            error!(event = "child_failed", key = %key, "child {key} ended: {e:#}");
        }
        self.done.insert(key.to_owned());
        host.hub.keys.release(key);
    }

    /// Releases the key of every child whose pipeline ended, except one reaped or at its
    /// ceiling: that key is held, its rollout watched for growth (S2.7).
    fn reap_ended(&mut self, host: &mut Host) {
        // The children that asked to end, as the hub heard it: not a scan of every child at
        // every turn of the loop.
        let mut ended = host.hub.take_exited();
        ended.retain(|slot| host.children.get(slot).is_some_and(|c| c.exit.is_some()));
        ended.sort_unstable();
        ended.dedup();
        for slot in ended {
            let (Some(mut child), Some(key)) =
                (host.children.remove(&slot), self.keys.remove(&slot))
            else {
                continue;
            };
            let exit = child.exit.take();
            let reason = exit.as_ref().map(|r| r.as_str()).unwrap_or("");
            info!(event = "child_ended", key = %key, reason, "child {key} ended ({reason})");
            let keep = host.ending.is_none()
                && matches!(
                    exit,
                    Some(ExitReason::IdleReap | ExitReason::LifetimeCeiling(_))
                );
            if keep {
                info!(event = "child_kept", key = %key, "keeping {key} and watching its rollout for more lines");
                let held = Held {
                    len: child.bytes_read(),
                    stop_latched: child.stop_posted(),
                    status: child.key_status().map(|mut k| {
                        k.state = "held".to_owned();
                        k.next_due = None;
                        k
                    }),
                };
                self.held.insert(key.clone(), held);
                // Lines written while the pipeline was ending are growth already.
                self.check_held(host, &key);
            } else {
                self.done.insert(key.clone());
                host.hub.keys.release(&key);
            }
        }
    }

    /// No child runs or waits for another watcher, and the session's rollout has not changed
    /// for its idle window (counted from the supervisor's start at the earliest).
    fn is_idle(&self, host: &Host, now: Ts) -> bool {
        if !host.children.is_empty() || host.hub.keys.is_waiting() || !self.to_claim.is_empty() {
            return false;
        }
        let changed = std::fs::metadata(&self.session_path)
            .and_then(|m| m.modified())
            .map(Ts::from_system)
            .unwrap_or(self.started);
        now >= changed.max(self.started).plus(host.hub.settings.idle_end)
    }
}
