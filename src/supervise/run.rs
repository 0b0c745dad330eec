//! The `supervise` dispatcher: one `select!` over every owned descendant's [`Child`].
//!
//! The per-child shell is `watch`'s own ([`crate::watch::Child`]): the same pipeline, file
//! reading, requests, spools and endings. What this loop adds is the many: discovery finds
//! descendants, [`Ownership`] decides which of them are ours, the one [`DirWatcher`] routes a
//! changed path to the child that follows it (or to discovery), request answers come back
//! tagged with the child's slot, and an error in one child (a rewritten file, an unreadable
//! rollout) ends that child only: its key is released and the others go on.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use super::discover::{CodexLayout, Discovery, Found, Header, ThreadFacts, read_header};
use super::ownership::{Claim, Ownership};
use super::wake::DirWatcher;
use crate::config::Settings;
use crate::error::{RolloutRewritten, UsageError};
use crate::files;
use crate::key::{Identity, Role, normalize_id};
use crate::pipeline::Event;
use crate::status_file::KeyStatus;
use crate::time::Ts;
use crate::watch::clock::{Clock, until};
use crate::watch::shutdown::Shutdown;
use crate::watch::status::StatusWriter;
use crate::watch::{Child, Done, ExitReason, Files, Hub, WatchOptions};

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

/// A running child and the key it owns.
struct Slot {
    key: String,
    child: Child,
}

/// A child whose pipeline ended by reap or at its lifetime ceiling (`revision-3.md` S2.7):
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
    // One supervisor per session (`revision-3.md` S2.2): a second exits 75, and the daemon
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
    let ownership = Ownership::start(&settings.watcher_dir).with_context(|| {
        format!(
            "failed to start owning keys in {}",
            settings.watcher_dir.display()
        )
    })?;
    let notifier = DirWatcher::start(settings.force_poll);
    if let Some(why) = notifier.polling_because() {
        info!(event = "polling", "{why}");
    }
    let (hub, rx) = Hub::new(settings, clock)?;
    let started = hub.clock.now();
    let mut status = StatusWriter::new(
        hub.settings.config_dir.clone(),
        crate::status_file::Writer::Supervise,
        hub.settings.server.clone(),
    );
    status.set_key(&session_id, &session_id);
    let mut sup = Supervisor {
        discovery: Discovery::new(layout, &root_thread),
        ownership,
        notifier,
        hub,
        rx,
        session_id,
        session_path,
        with_session: opts.with_session,
        parent_pid: opts.parent_pid,
        started,
        slots: BTreeMap::new(),
        held: BTreeMap::new(),
        members: HashMap::new(),
        done: HashSet::new(),
        next_slot: 0,
        ending: None,
        status,
    };
    let result = sup.run(shutdown).await;
    sup.status.remove();
    for (_, mut slot) in std::mem::take(&mut sup.slots) {
        slot.child.release();
    }
    sup.ownership.shutdown();
    result
}

struct Supervisor {
    discovery: Discovery,
    ownership: Ownership,
    notifier: DirWatcher,
    hub: Hub,
    rx: mpsc::Receiver<(u64, Done)>,
    /// The root session's id: every descendant's `session_id` (R8).
    session_id: String,
    session_path: PathBuf,
    with_session: bool,
    parent_pid: Option<u32>,
    started: Ts,
    slots: BTreeMap<u64, Slot>,
    /// Keys kept without a pipeline, by key (never counted as live for the idle end).
    held: BTreeMap<String, Held>,
    /// Every key found, by key (owned, waiting or done).
    members: HashMap<String, Member>,
    /// Keys whose child ended here: never started again by this process.
    done: HashSet<String>,
    next_slot: u64,
    /// Why the supervisor is ending (a signal or the parent's exit), once it is.
    ending: Option<Event>,
    status: StatusWriter,
}

impl Supervisor {
    async fn run(&mut self, shutdown: Shutdown) -> Result<()> {
        let mut signals = shutdown
            .arm()
            .context("failed to install a signal handler")?;
        // The parent as it is now: a pid the system later gives to another process counts as
        // the parent having exited.
        let parent = self
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
            self.want(&key);
        }
        self.scan();
        let mut poll = tokio::time::interval(self.hub.settings.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.reap_ended();
            if self.ending.is_some() && self.slots.is_empty() {
                info!(event = "supervisor_ended", "every child has ended");
                return Ok(());
            }
            let now = self.hub.clock.now();
            if self.ending.is_none() && self.is_idle(now) {
                info!(
                    event = "supervisor_ended",
                    reason = "idle",
                    "no child is live and the session has been idle for its window"
                );
                return Ok(());
            }
            let lines = self.key_statuses();
            self.status.update(lines, now);
            let next = self
                .slots
                .values()
                .filter_map(|s| s.child.next_wake(now))
                .chain(self.status.next_due())
                .min()
                .unwrap_or(now.plus(crate::time::MAX_WINDOW));
            let sleep = tokio::time::sleep(until(now, next));
            tokio::select! {
                _ = self.notifier.changed() => self.on_changes(),
                _ = poll.tick() => {
                    if self.ending.is_none() {
                        self.scan();
                        for key in self.ownership.recheck(self.hub.clock.now()) {
                            self.start_child(&key, false);
                        }
                        let held: Vec<String> = self.held.keys().cloned().collect();
                        for key in held {
                            self.check_held(&key);
                        }
                    }
                    let slots: Vec<u64> = self.slots.keys().copied().collect();
                    for slot in slots {
                        self.with_child(slot, |c, hub| {
                            c.on_file_change(hub)?;
                            c.dispatch(hub, Event::Tick)
                        });
                    }
                    if self.ending.is_none()
                        && let Some(parent) = &parent
                        && !parent.running()
                    {
                        let pid = parent.pid();
                        info!(event = "parent_exited", pid, "parent process {pid} exited");
                        self.end_all(Event::ParentExited);
                    }
                }
                Some((slot, done)) = self.rx.recv() => {
                    self.with_child(slot, |c, hub| c.dispatch(hub, done.into_event()));
                }
                _ = sleep => {
                    let now = self.hub.clock.now();
                    let due: Vec<u64> = self
                        .slots
                        .iter()
                        .filter(|(_, s)| s.child.next_wake(now).is_some_and(|t| t <= now))
                        .map(|(id, _)| *id)
                        .collect();
                    for slot in due {
                        self.with_child(slot, |c, hub| {
                            // A partial last line may have completed (the shutdown waits for it).
                            c.on_file_change(hub)?;
                            c.dispatch(hub, Event::Tick)
                        });
                    }
                }
                name = signals.recv() => self.end_all(Event::Signal(name)),
            }
        }
    }

    /// Tells every child the process is ending; each finishes as `watch` would (R3, R4.4).
    fn end_all(&mut self, event: Event) {
        let why = match &event {
            Event::Signal(name) => *name,
            _ => "parent_exited",
        };
        info!(
            event = "supervisor_ending",
            why,
            children = self.slots.len(),
            "ending every child ({why})"
        );
        let slots: Vec<u64> = self.slots.keys().copied().collect();
        for slot in slots {
            let event = match &event {
                Event::Signal(name) => Event::Signal(name),
                _ => Event::ParentExited,
            };
            self.with_child(slot, |c, hub| {
                // What was appended just before is part of what ends with it.
                c.on_file_change(hub)?;
                c.dispatch(hub, event)
            });
        }
        self.ending = Some(event);
    }

    /// Routes changed paths: a followed rollout wakes its child, anything else is discovery's.
    fn on_changes(&mut self) {
        let changes = self.notifier.take();
        if changes.failed {
            warn!(
                event = "polling",
                "file notification failed; relying on polling every {:?}",
                self.hub.settings.poll_interval
            );
        }
        let mut others = Vec::new();
        for path in changes.paths {
            let slot = self
                .slots
                .iter()
                .find(|(_, s)| s.child.path() == path)
                .map(|(id, _)| *id);
            if let Some(slot) = slot {
                self.with_child(slot, |c, hub| {
                    c.on_file_change(hub)?;
                    c.dispatch(hub, Event::Tick)
                });
                continue;
            }
            let held = self
                .held
                .keys()
                .find(|k| self.held_path(k).is_some_and(|p| p == path))
                .cloned();
            match held {
                Some(key) if self.ending.is_none() => self.check_held(&key),
                Some(_) => {}
                None => others.push(path),
            }
        }
        if self.ending.is_some() {
            return;
        }
        let mut found = self.discovery.on_paths(&others, SystemTime::now());
        if changes.rescan {
            found.extend(self.discovery.scan(SystemTime::now()));
        }
        self.on_found(found);
    }

    fn scan(&mut self) {
        let found = self.discovery.scan(SystemTime::now());
        self.on_found(found);
    }

    fn on_found(&mut self, found: Vec<Found>) {
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
                    self.want(&key);
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
        self.notifier.sync(&self.discovery.watch_dirs());
    }

    /// Tries to own `key`; starts its child when it is ours.
    fn want(&mut self, key: &str) {
        if self.done.contains(key) {
            return;
        }
        if self.held.contains_key(key) {
            self.check_held(key);
            return;
        }
        match self.ownership.want(key, self.hub.clock.now()) {
            Ok(Claim::Owned) => self.start_child(key, false),
            Ok(Claim::Held { pid }) => {
                info!(event = "child_held", key = %key, pid = pid.unwrap_or(0), "{key} is held by another live watcher; re-checking every poll");
            }
            Ok(Claim::Busy) => {}
            Err(e) => {
                warn!(event = "child_claim_failed", key = %key, error = %e, "failed to own {key}: {e}");
            }
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
    fn check_held(&mut self, key: &str) {
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
            self.ownership.release(key);
            return;
        }
        info!(event = "child_reengaged", key = %key, path = %path.display(), "{key} grew after its pipeline ended; following it again");
        self.start_child(key, stop_latched);
    }

    /// Starts following an owned key; `stop_latched`: this process already stopped the child.
    fn start_child(&mut self, key: &str, stop_latched: bool) {
        if !self.ownership.is_owned(key) || self.slots.values().any(|s| s.key == key) {
            return;
        }
        let Some(path) = self.held_path(key) else {
            self.ownership.release(key);
            return;
        };
        let Some(member) = self.members.get(key) else {
            self.ownership.release(key);
            return;
        };
        let opts = WatchOptions {
            rollout: path,
            session_id: Some(self.session_id.clone()),
            agent_id: member.agent_id.clone(),
            role: Some(if member.agent_id.is_some() {
                Role::Child
            } else {
                Role::Session
            }),
            parent_pid: None,
            cwd: None,
            vendor: "codex".to_string(),
            once: false,
        };
        let slot = self.next_slot;
        self.next_slot += 1;
        let started = Child::new(slot, opts, &self.hub, Files::Supervised).and_then(|mut c| {
            if stop_latched {
                c.latch_stop();
            }
            c.start(&self.hub)?;
            c.dispatch(&self.hub, Event::Tick)?;
            Ok(c)
        });
        match started {
            Ok(child) => {
                self.slots.insert(
                    slot,
                    Slot {
                        key: key.to_owned(),
                        child,
                    },
                );
            }
            Err(e) => self.child_failed(key, &e),
        }
    }

    /// Runs `f` on one child; an error ends that child only.
    fn with_child(&mut self, slot: u64, f: impl FnOnce(&mut Child, &Hub) -> Result<()>) {
        let Some(s) = self.slots.get_mut(&slot) else {
            // An answer for a child that already ended.
            return;
        };
        if let Err(e) = f(&mut s.child, &self.hub) {
            let key = s.key.clone();
            if let Some(mut s) = self.slots.remove(&slot) {
                s.child.release();
            }
            self.child_failed(&key, &e);
        }
    }

    fn child_failed(&mut self, key: &str, e: &anyhow::Error) {
        // A rewrite was logged as `rollout_rewritten` where it was found.
        if !e.chain().any(|c| c.is::<RolloutRewritten>()) {
            error!(event = "child_failed", key = %key, "child {key} ended: {e:#}");
        }
        self.done.insert(key.to_owned());
        self.ownership.release(key);
    }

    /// Releases the key of every child whose pipeline ended, except one reaped or at its
    /// ceiling: that key is held, its rollout watched for growth (S2.7).
    fn reap_ended(&mut self) {
        let ended: Vec<u64> = self
            .slots
            .iter()
            .filter(|(_, s)| s.child.exit.is_some())
            .map(|(id, _)| *id)
            .collect();
        for slot in ended {
            if let Some(mut s) = self.slots.remove(&slot) {
                let exit = s.child.exit.take();
                let reason = exit.as_ref().map(|r| r.as_str()).unwrap_or("");
                info!(event = "child_ended", key = %s.key, reason, "child {} ended ({reason})", s.key);
                s.child.release();
                let keep = self.ending.is_none()
                    && matches!(
                        exit,
                        Some(ExitReason::IdleReap | ExitReason::LifetimeCeiling(_))
                    );
                if keep {
                    info!(event = "child_kept", key = %s.key, "keeping {} and watching its rollout for more lines", s.key);
                    let held = Held {
                        len: s.child.bytes_read(),
                        stop_latched: s.child.stop_posted(),
                        status: s.child.key_status().map(|mut k| {
                            k.state = "held".to_owned();
                            k.next_due = None;
                            k
                        }),
                    };
                    self.held.insert(s.key.clone(), held);
                    // Lines written while the pipeline was ending are growth already.
                    self.check_held(&s.key);
                } else {
                    self.done.insert(s.key.clone());
                    self.ownership.release(&s.key);
                }
            }
        }
    }

    /// The status file's lines: every child followed, then every key held without a pipeline.
    fn key_statuses(&self) -> Vec<KeyStatus> {
        let mut lines: Vec<KeyStatus> = self
            .slots
            .values()
            .filter_map(|s| s.child.key_status())
            .collect();
        lines.extend(self.held.values().filter_map(|h| h.status.clone()));
        lines.sort_by(|a, b| a.key.cmp(&b.key));
        lines
    }

    /// No child runs or waits for another watcher, and the session's rollout has not changed
    /// for its idle window (counted from the supervisor's start at the earliest).
    fn is_idle(&self, now: Ts) -> bool {
        if !self.slots.is_empty() || self.ownership.waiting().next().is_some() {
            return false;
        }
        let changed = std::fs::metadata(&self.session_path)
            .and_then(|m| m.modified())
            .map(Ts::from_system)
            .unwrap_or(self.started);
        now >= changed.max(self.started).plus(self.hub.settings.idle_end)
    }
}
