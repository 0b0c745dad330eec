//! One child's shell: its open rollout, its pipeline, and the actions it performs (spawned
//! requests, spool writes, the shipping cursor). The host (`super`) drives every child
//! through [`Child::on_file_change`] and [`Child::dispatch`]; `watch` hosts one, `supervise`
//! one per owned descendant.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tracing::{info, warn};

use crate::codex::Classifier;
use crate::codex::lines::LineCursor;
use crate::error::{LockHeld, RolloutRewritten, UsageError};
use crate::files::{self, AcquireError};
use crate::fold::seed::{LineTimes, seed};
use crate::key::{Identity, MissingKey, Role, missing_key, normalize_id};
use crate::pipeline::{Action, Event, ExitReason, Pipeline, SpoolResult};
use crate::ship::LINE_LIMIT;
use crate::ship::protocol::Watermark;
use crate::ship::spool::{self, SpoolOutcome};
use crate::tail::guard::{Guard, Seen};
use crate::tail::index::LineIndex;
use crate::tail::recent::{Recent, Recording, Snapshot};
use crate::time::Ts;

use super::{Done, Hub};

/// What `watch` was asked to do.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    pub rollout: PathBuf,
    pub session_id: Option<String>,
    pub agent_id: Option<String>,
    pub role: Option<Role>,
    pub parent_pid: Option<u32>,
    pub cwd: Option<String>,
    pub vendor: String,
    pub once: bool,
}

impl WatchOptions {
    /// Following `rollout` with nothing else given: ids and role from its header, Codex, no
    /// parent to watch, not `--once`.
    pub fn following(rollout: PathBuf) -> WatchOptions {
        WatchOptions {
            rollout,
            session_id: None,
            agent_id: None,
            role: None,
            parent_pid: None,
            cwd: None,
            vendor: "codex".into(),
            once: false,
        }
    }
}

/// How long a file whose change only the safety-net poll found keeps the poll at its
/// configured period (see `super::net`), unless an event reports one of its changes sooner.
const MISSED_FOR: std::time::Duration = std::time::Duration::from_secs(600);

/// What the watcher did, for `--once`'s summary and the tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub session_id: Option<String>,
    pub agent_id: Option<String>,
    pub role: Option<&'static str>,
    pub lines_folded: u64,
    pub resume_line: Option<u64>,
    pub lines_shipped: u64,
    pub lines_spooled: u64,
    pub transcript_spool: Option<PathBuf>,
    pub hook_spool: Option<PathBuf>,
    /// What became of the child's stop (`None` for a session): posted, spooled (with the
    /// hook spool's path), or when it would be due.
    pub stop: Option<String>,
    pub turn: &'static str,
}

/// The open rollout: the fold cursor, the shipping cursor and what guards against rewriting.
struct Tail {
    file: File,
    guard: Guard,
    fold: LineCursor,
    ship: LineCursor,
    index: LineIndex,
    /// What the fold cursor read while the file change being handled is: the guard and the
    /// shipping cursor take those bytes from here instead of reading them again.
    recent: Recent,
}

/// Who takes the child's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Files {
    /// `watch`: the child takes its key ([`super::ownership::Ownership::take`]) once its
    /// header names it (exit 75 when another watcher holds it).
    Own,
    /// `supervise`: the membership owned the key before the child started.
    Supervised,
}

/// One child's shell state: its open rollout, its pipeline, and where shipping starts.
pub(crate) struct Child {
    /// The slot request answers are tagged with.
    slot: u64,
    opts: WatchOptions,
    path: PathBuf,
    /// `path` in its normal form ([`normal_form`]): what a changed path is matched against.
    route: PathBuf,
    tail: Option<Tail>,
    pipeline: Pipeline,
    /// Where the shipping cursor starts when the file is opened later.
    ship_from: u64,
    settled: bool,
    key_files: Files,
    /// Set when the pipeline asked to end.
    pub exit: Option<ExitReason>,
    /// The pipeline's next wake, as of its last event: the host asks every child at every
    /// turn of its loop, and with thousands of children recomputing each one's decisions
    /// there cost more than shipping. Only an event changes it (a later `now` only moves the
    /// ending's own wakes later), so it is recomputed after each.
    wake: Option<Ts>,
    /// The last status line built and what it was built from ([`Child::key_status`]).
    status_memo: std::cell::RefCell<Option<StatusMemo>>,
    /// The rollout's path is a symbolic link: writes to the file it names reach the directory
    /// that file is in, which notification may not watch (see [`Child::notified_reliably`]).
    through_link: bool,
    /// When the safety-net poll last found a change of the file that no event had reported
    /// (`None` once an event reports one again).
    missed_at: Option<Ts>,
    /// Run between the guard's check and the read (tests: what lands in that window).
    #[cfg(test)]
    after_check: Option<Box<dyn FnMut() + Send>>,
}

/// What a child's status line says, before it is formatted.
#[derive(Clone, PartialEq)]
struct StatusFigures {
    ending: bool,
    turn: &'static str,
    lines_on_disk: u64,
    counters: crate::telemetry::Counters,
    lines_spooled: u64,
    stop_posted: bool,
    next_due: Option<(&'static str, Ts)>,
}

struct StatusMemo {
    figures: StatusFigures,
    path: PathBuf,
    line: crate::status_file::KeyStatus,
    /// Counts the rebuilds: [`Child::status_version`].
    version: u64,
}

impl Child {
    pub(crate) fn new(slot: u64, opts: WatchOptions, hub: &Hub, key_files: Files) -> Result<Child> {
        let clock = &hub.clock;
        let started = clock.now();
        let path = std::path::absolute(&opts.rollout).with_context(|| {
            format!("failed to resolve rollout path {}", opts.rollout.display())
        })?;
        if let Ok(meta) = std::fs::metadata(&path) {
            crate::tail::require_regular_file(&path, &meta)?;
        }
        let through_link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink());
        let tail = open_and_seed(&path, clock.now())?;
        let seeded = tail.as_ref().map(|(_, state)| state.clone());
        let role = match opts.role {
            Some(r) => r,
            None if opts.agent_id.is_some() => Role::Child,
            None => Role::Session,
        };
        let pipeline = Pipeline::new(
            hub.pipeline_config,
            opts.vendor.clone(),
            path.clone(),
            role,
            opts.once,
            started,
            seeded,
        );
        Ok(Child {
            slot,
            opts,
            route: normal_form(&path),
            path,
            tail: tail.map(|(t, _)| t),
            pipeline,
            ship_from: 0,
            settled: false,
            key_files,
            exit: None,
            wake: None,
            status_memo: std::cell::RefCell::new(None),
            through_link,
            missed_at: None,
            #[cfg(test)]
            after_check: None,
        })
    }

    /// Whether the notification of the rollout's directory reports this child's changes, as
    /// of `now`: not when its path is a symbolic link (the file's own directory is not the
    /// one watched), nor for [`MISSED_FOR`] after the poll found a change no event had
    /// reported, unless an event has reported one since.
    pub(crate) fn notified_reliably(&self, now: Ts) -> bool {
        !self.through_link && self.missed_at.is_none_or(|at| now >= at.plus(MISSED_FOR))
    }

    /// The file held something new, found `by` an event, the poll or a due time.
    pub(crate) fn found_new(&mut self, by: super::FoundBy, now: Ts) {
        match by {
            super::FoundBy::Event => self.missed_at = None,
            super::FoundBy::Poll => self.missed_at = Some(now),
            super::FoundBy::Timer => {}
        }
    }

    /// How far the child has read its file, and whether it has one open: what a check that
    /// found something new moves.
    pub(crate) fn progress(&self) -> (bool, u64) {
        (self.tail.is_some(), self.bytes_read())
    }

    /// The rollout's current path (it changes when Codex archives it).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `path` is byte for byte this child's path in its normal form ([`normal_form`]):
    /// `true` means it names the child's file; a path not in its normal form may name it too
    /// and get `false`.
    pub(crate) fn follows(&self, path: &Path) -> bool {
        self.route.as_os_str() == path.as_os_str()
    }

    fn set_path(&mut self, path: PathBuf) {
        self.route = normal_form(&path);
        self.path = path;
    }

    /// The watcher key, once the identity is settled.
    pub(crate) fn key(&self) -> Option<String> {
        let id = self.pipeline.identity()?;
        Some(files::watcher_key(
            id.session_id.as_deref()?,
            id.agent_id.as_deref(),
        ))
    }

    /// This child's line of the status file (`None` before its key is known).
    pub(crate) fn key_status(&self) -> Option<crate::status_file::KeyStatus> {
        self.refresh_status()?;
        self.status_memo.borrow().as_ref().map(|m| m.line.clone())
    }

    /// A number that changes whenever this child's status line does (`None` before its key is
    /// known): the host compares these instead of building and comparing lines.
    pub(crate) fn status_version(&self) -> Option<u64> {
        self.refresh_status()?;
        self.status_memo.borrow().as_ref().map(|m| m.version)
    }

    /// Rebuilds the status line if what it says changed.
    ///
    /// The host looks at every child's line every second or two, and for an idle child it is
    /// the same line each time: building it (the key, the path shown, times as RFC 3339) was
    /// most of an idle supervisor's CPU. The figures it is built from are compared with the
    /// last build's instead, and the line kept while they are equal.
    fn refresh_status(&self) -> Option<()> {
        let id = self.pipeline.identity()?;
        let p = &self.pipeline;
        let figures = StatusFigures {
            ending: p.is_ending(),
            turn: p.state().turn.as_str(),
            lines_on_disk: p.lines_on_disk(),
            counters: p.notices.telemetry.counters.clone(),
            lines_spooled: p.delivery.lines_spooled,
            stop_posted: p.stop_posted(),
            next_due: p.next_due(),
        };
        let session_id = id.session_id.as_deref().unwrap_or("");
        if let Some(memo) = &*self.status_memo.borrow()
            && memo.figures == figures
            && memo.path == self.path
            && memo.line.session_id == session_id
            && memo.line.agent_id.as_deref() == id.agent_id.as_deref()
        {
            return Some(());
        }
        let key = self.key()?;
        let line = super::status::KeyFigures {
            key: &key,
            session_id,
            agent_id: id.agent_id.as_deref(),
            rollout: &self.path,
            state: if figures.ending {
                "ending"
            } else {
                "following"
            },
            turn: figures.turn,
            lines_on_disk: figures.lines_on_disk,
            counters: &figures.counters,
            lines_spooled: figures.lines_spooled,
            stop_posted: figures.stop_posted,
            next_due: figures.next_due,
        }
        .status();
        let mut memo = self.status_memo.borrow_mut();
        let version = memo.as_ref().map_or(0, |m| m.version + 1);
        *memo = Some(StatusMemo {
            figures,
            path: self.path.clone(),
            line,
            version,
        });
        Some(())
    }

    /// The child's stop latched in this pipeline (see [`Pipeline::latch_stop`]).
    pub(crate) fn stop_posted(&self) -> bool {
        self.pipeline.stop_posted()
    }

    pub(crate) fn latch_stop(&mut self) {
        self.pipeline.latch_stop();
        self.wake = None;
    }

    /// Bytes of the rollout read so far (complete lines and a held partial one): a file longer
    /// than this has grown since.
    pub(crate) fn bytes_read(&self) -> u64 {
        self.tail
            .as_ref()
            .map_or(0, |t| t.fold.offset() + t.fold.partial_bytes())
    }

    /// When this child next needs a [`Event::Tick`] (as of its last event; see
    /// [`Child::wake`]'s field).
    pub(crate) fn next_wake(&self) -> Option<Ts> {
        self.wake
    }

    /// Sets the next wake, and tells the hub where it moved.
    fn set_wake(&mut self, hub: &Hub, wake: Option<Ts>) {
        if wake != self.wake {
            hub.wake_moved(self.slot, self.wake, wake);
            self.wake = wake;
        }
    }

    /// Settles the identity (taking the key's files in `watch`), logs the start and checks
    /// what `--once` needs.
    pub(crate) fn start(&mut self, hub: &Hub) -> Result<()> {
        self.settle_identity(hub)?;
        let id = self.pipeline.identity();
        info!(
            event = "watcher_started",
            path = %self.path.display(),
            role = self.pipeline.role().as_str(),
            session_id = id.and_then(|i| i.session_id.as_deref()).unwrap_or(""),
            agent_id = id.and_then(|i| i.agent_id.as_deref()).unwrap_or(""),
            online = hub.client.is_some(),
            "watching {}",
            self.path.display()
        );
        if self.opts.once {
            if self.tail.is_none() {
                return Err(UsageError(format!(
                    "cannot read rollout {}: no such file",
                    self.path.display()
                ))
                .into());
            }
            if self.pipeline.identity().is_none() {
                let missing = self.missing_key().unwrap_or(MissingKey::NoHeader);
                return Err(UsageError(missing.message(&self.path)).into());
            }
            self.pipeline.begin_once(hub.clock.now());
            self.set_wake(hub, self.pipeline.next_wake(hub.clock.now()));
        } else if self.tail.is_none() {
            info!(event = "waiting_for_file", path = %self.path.display(), "rollout does not exist yet; waiting for it");
        }
        Ok(())
    }

    /// Hands `event` to the pipeline and performs its actions, feeding their outcomes back,
    /// then feeds it text while it wants more.
    pub(crate) fn dispatch(&mut self, hub: &Hub, event: Event) -> Result<()> {
        let mut queue = VecDeque::from([event]);
        loop {
            while let Some(event) = queue.pop_front() {
                let actions = self.pipeline.handle(event, hub.clock.now());
                for action in actions {
                    if let Some(outcome) = self.perform(hub, action)? {
                        queue.push_back(outcome);
                    }
                }
            }
            match self.read_text()? {
                Some(text) => queue.push_back(text),
                None => {
                    self.set_wake(hub, self.pipeline.next_wake(hub.clock.now()));
                    return Ok(());
                }
            }
        }
    }

    /// The next lines for shipping, with their text, while the pipeline wants them.
    fn read_text(&mut self) -> Result<Option<Event>> {
        let Some(t) = &mut self.tail else {
            return Ok(None);
        };
        // Never past the fold: a line is shipped only once the fold has read it, so the
        // rewrite guard (which checks the file up to the fold's position) covers every shipped
        // line. Reading to the end of the file instead shipped lines appended since the fold's
        // last read, and a truncation back to the fold's position then went unnoticed, with
        // lines on the server that the file no longer holds (docs/behaviour.md S4).
        let behind = t.fold.next_number().saturating_sub(t.ship.next_number());
        if !self.pipeline.wants_text() || behind == 0 {
            return Ok(None);
        }
        let from = t.ship.next_number();
        let file = Snapshot {
            file: &t.file,
            recent: &t.recent,
        };
        let (lines, _) = t
            .ship
            .read(&file, behind.min(256) as usize)
            .with_context(|| format!("failed to read rollout {}", self.path.display()))?;
        let next = t.ship.next_number();
        if next == from {
            // Not one line (blank ones count): the file holds fewer lines than the fold read,
            // it shrank since. The guard says so at the next check; an empty batch fed here
            // would be asked for again at once, for ever, and the loop would never get back to
            // that check.
            return Ok(None);
        }
        Ok(Some(Event::Text { lines, next }))
    }

    fn perform(&mut self, hub: &Hub, action: Action) -> Result<Option<Event>> {
        let now = hub.clock.now();
        let slot = self.slot;
        match action {
            Action::AskWatermark => {
                let (Some(client), Some(id)) = (hub.client.clone(), self.pipeline.identity())
                else {
                    return Ok(None);
                };
                let session = id.session_id.clone().unwrap_or_default();
                let agent = id.agent_id.clone();
                hub.spawn(slot, async move {
                    Done::Watermark(client.watermark(&session, agent.as_deref()).await)
                });
            }
            Action::Send { generation, body } => {
                if let Some(client) = hub.client.clone() {
                    hub.spawn(slot, async move {
                        Done::Shipped(generation, client.post_transcript(body).await)
                    });
                }
            }
            Action::Post(hook) => {
                if let Some(client) = hub.client.clone() {
                    hub.spawn(slot, async move {
                        let res = client.post_lifecycle(&hook).await;
                        Done::Posted(hook, res)
                    });
                }
            }
            Action::SpoolLines {
                batch,
                refused: true,
            } => {
                let result = match crate::ship::refused::set_aside(&hub.settings.config_dir, &batch)
                {
                    Ok(crate::ship::refused::SetAside::Written) => SpoolResult::Written,
                    Ok(crate::ship::refused::SetAside::OverCap) => SpoolResult::OverCap,
                    Err(e) => SpoolResult::Failed(e.to_string()),
                };
                return Ok(Some(Event::LinesSpooled {
                    refused: true,
                    result,
                }));
            }
            Action::SpoolLines { batch, refused } => {
                let result = match spool::append_transcript(&hub.settings.config_dir, &batch, now) {
                    Ok(SpoolOutcome::Written { .. }) => {
                        crate::ship::handed_over::advance_past(&hub.settings.config_dir, &batch);
                        SpoolResult::Written
                    }
                    Ok(SpoolOutcome::OverCap { .. }) => SpoolResult::OverCap,
                    Err(e) => SpoolResult::Failed(e.to_string()),
                };
                return Ok(Some(Event::LinesSpooled { refused, result }));
            }
            Action::SpoolHook(hook) => {
                let session = self
                    .pipeline
                    .identity()
                    .and_then(|i| i.session_id.clone())
                    .unwrap_or_default();
                let result = match spool::append_hook(
                    &hub.settings.config_dir,
                    &session,
                    hook.route(),
                    hook.body(),
                ) {
                    Ok(SpoolOutcome::Written { .. }) => SpoolResult::Written,
                    Ok(SpoolOutcome::OverCap { .. }) => SpoolResult::OverCap,
                    Err(e) => SpoolResult::Failed(e.to_string()),
                };
                return Ok(Some(Event::HookSpooled { hook, result }));
            }
            Action::ReadFrom(line) => {
                self.ship_from = line;
                if let Some(t) = &mut self.tail {
                    let (at, offset) = t.index.locate(line);
                    t.ship = LineCursor::text(offset, at, LINE_LIMIT);
                }
            }
            Action::ReloadToken => {
                if let Some(c) = &hub.client {
                    c.reload_token(now);
                }
            }
            Action::TrimMemory => crate::platform::memory::release_freed(),
            Action::Rewritten(why) => return Err(self.rewritten(why)),
            Action::Exit(reason) => {
                self.exit = Some(reason);
                hub.exited(self.slot);
            }
        }
        Ok(None)
    }

    /// Re-checks the file and folds what is new; settles the identity once the header is there.
    pub(crate) fn on_file_change(&mut self, hub: &Hub) -> Result<()> {
        if self.tail.is_none() {
            match std::fs::metadata(&self.path) {
                Ok(meta) => crate::tail::require_regular_file(&self.path, &meta)?,
                Err(_) => return Ok(()),
            }
            // The file appeared after the watcher started: its lines are new, observed now.
            let Ok(file) = File::open(&self.path) else {
                return Ok(());
            };
            info!(event = "file_appeared", path = %self.path.display(), "rollout appeared");
            let guard = Guard::new(&file)
                .with_context(|| format!("failed to stat {}", self.path.display()))?;
            let index = LineIndex::new();
            let (at, offset) = index.locate(self.ship_from);
            self.tail = Some(Tail {
                file,
                guard,
                fold: LineCursor::fold(0, 0, LINE_LIMIT, Classifier::without_timestamps()),
                ship: LineCursor::text(offset, at, LINE_LIMIT),
                index,
                recent: Recent::default(),
            });
        }
        let Some(t) = &mut self.tail else {
            return Ok(());
        };
        let seen = t.guard.check(&t.file, &self.path, t.fold.offset());
        match seen {
            Err(why) => return Err(self.rewritten(why)),
            Ok(Seen::Unchanged) => return Ok(()),
            Ok(Seen::Archived(path)) => {
                self.set_path(path.clone());
                self.dispatch(hub, Event::Moved(path))?;
            }
            Ok(Seen::Changed) => {}
        }
        #[cfg(test)]
        if let Some(between) = self.after_check.as_mut() {
            between();
        }
        loop {
            let Some(t) = &mut self.tail else {
                return Ok(());
            };
            t.recent.begin(t.fold.offset());
            let (lines, st) = t
                .fold
                .read(&Recording::new(&t.file, &mut t.recent), 4096)
                .with_context(|| format!("failed to read rollout {}", self.path.display()))?;
            for line in &lines {
                t.index.record(line.number, line.start);
            }
            // Lines read after an archive that landed since the check are folded under the
            // archive's path, so a stop they trigger names where the rollout is now.
            let moved = if lines.is_empty() {
                None
            } else {
                t.guard.archived_since(&self.path)
            };
            let file = Snapshot {
                file: &t.file,
                recent: &t.recent,
            };
            t.guard.remember(&file, t.fold.offset());
            let partial = t.fold.partial_bytes() > 0;
            let handled = match moved {
                Some(path) => {
                    self.set_path(path.clone());
                    self.dispatch(hub, Event::Moved(path))
                }
                None => Ok(()),
            }
            .and_then(|()| self.dispatch(hub, Event::Folded { lines, partial }));
            // Kept only while this change is handled: a read later (after an answer) goes to
            // the file, as it did before.
            if let Some(t) = &mut self.tail {
                t.recent.clear();
            }
            handled?;
            if st.at_eof {
                break;
            }
        }
        self.settle_identity(hub)
    }

    /// Determines the identity (header overridden by the command line) and, once the key is
    /// known, takes the lock, writes the process files and starts shipping.
    fn settle_identity(&mut self, hub: &Hub) -> Result<()> {
        if self.settled {
            return Ok(());
        }
        let header = self.pipeline.state().identity.clone();
        let header_known = header.is_some();
        let mut id = header.unwrap_or_else(Identity::unknown);
        if let Some(s) = &self.opts.session_id {
            id.session_id = Some(normalize_id(s));
        }
        if let Some(a) = &self.opts.agent_id {
            id.agent_id = Some(normalize_id(a));
        }
        if let Some(r) = self.opts.role {
            id.role = r;
        }
        if !header_known && self.opts.agent_id.is_some() && self.opts.role.is_none() {
            id.role = Role::Child;
        }
        if id.role == Role::Child && id.agent_type.is_none() {
            id.agent_type = Some("subagent".into());
        }
        if let Some(cwd) = &self.opts.cwd {
            id.cwd = Some(cwd.clone());
        }
        let complete = match id.role {
            Role::Child => id.session_id.is_some() && id.agent_id.is_some(),
            Role::Session => id.session_id.is_some(),
        };
        if !complete {
            // A header that can never name the key (a review child without a parent) is a
            // command-line error now, not a wait that lasts forever.
            return match self.missing_key() {
                Some(m) if !m.may_resolve_itself() => Err(UsageError(m.message(&self.path)).into()),
                _ => Ok(()),
            };
        }
        if id.role == Role::Session {
            id.agent_id = None;
        }
        self.settled = true;
        let (Some(session), agent) = (id.session_id.clone(), id.agent_id.clone()) else {
            return Ok(());
        };
        if self.key_files == Files::Own {
            self.acquire_files(hub, &session, agent.as_deref())?;
        }
        let offline_resume = if hub.client.is_none() {
            self.offline_resume(hub, &session, agent.as_deref())
        } else {
            0
        };
        self.dispatch(
            hub,
            Event::Identified {
                identity: id,
                offline_resume,
            },
        )
    }

    /// What keeps the key unknown: the header (its role overridden by `--role`) and the ids
    /// the command line gave.
    fn missing_key(&self) -> Option<MissingKey> {
        let mut header = self.pipeline.state().identity.clone();
        if let (Some(h), Some(r)) = (&mut header, self.opts.role) {
            h.role = r;
        }
        missing_key(
            header.as_ref(),
            self.opts.session_id.is_some(),
            self.opts.agent_id.is_some(),
        )
    }

    /// Offline, shipping resumes one past the highest line ever handed over: in the spool now,
    /// or recorded when it was spooled or replayed.
    fn offline_resume(&self, hub: &Hub, session: &str, agent: Option<&str>) -> u64 {
        let config = &hub.settings.config_dir;
        let spooled = match spool::highest_spooled_line(config, session, agent) {
            Ok(n) => n.map_or(0, |n| n + 1),
            Err(e) => {
                warn!(
                    event = "spool_unreadable",
                    "failed to read the transcript spool: {e}"
                );
                0
            }
        };
        let recorded = match crate::ship::handed_over::read(config, session, agent) {
            Ok(n) => n.unwrap_or(0),
            Err(e) => {
                warn!(
                    event = "offline_watermark_unreadable",
                    "failed to read the offline watermark: {e}"
                );
                0
            }
        };
        spooled.max(recorded)
    }

    fn acquire_files(&mut self, hub: &Hub, session: &str, agent: Option<&str>) -> Result<()> {
        // Ids from the rollout's header name files too (R5): the kcap CLI's key rule, or exit 2.
        files::check_id("session id", session)?;
        if let Some(agent) = agent {
            files::check_id("agent id", agent)?;
        }
        let key = files::watcher_key(session, agent);
        match hub.keys.take(&key, hub.clock.now()) {
            Ok(()) => {
                crate::logging::attach_file(&files::log_file_path(
                    &hub.settings.config_dir,
                    session,
                    agent,
                ));
                Ok(())
            }
            Err(AcquireError::Held { key, holder_pid }) => Err(LockHeld { key, holder_pid }.into()),
            Err(e) => Err(anyhow::Error::new(e).context(format!(
                "failed to take the watcher lock in {}",
                hub.settings.watcher_dir.display()
            ))),
        }
    }

    fn rewritten(&self, why: &'static str) -> anyhow::Error {
        let watermark = match self.pipeline.watermark() {
            Some(Watermark::Line(n)) => Some(n),
            _ => None,
        };
        let lines = self.pipeline.state().counters.lines;
        tracing::error!(
            event = "rollout_rewritten",
            path = %self.path.display(),
            watermark = watermark.map(|w| w as i64).unwrap_or(-1),
            lines,
            "rollout {} was rewritten ({why}); shipping nothing more",
            self.path.display()
        );
        RolloutRewritten {
            path: self.path.clone(),
            watermark,
            lines,
            why,
        }
        .into()
    }

    pub(crate) fn summary(&self, hub: &Hub) -> Summary {
        let id = self.pipeline.identity();
        let session = id.and_then(|i| i.session_id.clone());
        let config = &hub.settings.config_dir;
        let hook_spool = session
            .as_deref()
            .map(|s| spool::hook_spool_path(config, s));
        let stop = self.pipeline.stop_summary(hub.clock.now()).map(|s| {
            if s == "spooled" {
                format!(
                    "spooled to {}",
                    hook_spool.as_deref().unwrap_or(Path::new("-")).display()
                )
            } else {
                s
            }
        });
        let state = self.pipeline.state();
        Summary {
            session_id: session.clone(),
            agent_id: id.and_then(|i| i.agent_id.clone()),
            role: id.map(|i| i.role.as_str()),
            lines_folded: state.counters.lines,
            resume_line: self.pipeline.watermark().map(|w| w.resume_line()),
            lines_shipped: self.pipeline.delivery.lines_shipped,
            lines_spooled: self.pipeline.delivery.lines_spooled,
            transcript_spool: session
                .as_deref()
                .map(|s| spool::transcript_spool_path(config, s)),
            hook_spool,
            stop,
            turn: state.turn.as_str(),
        }
    }
}

/// What seeding folded: the state, the complete lines, whether a partial last line is held.
type Folded = (crate::fold::State, u64, bool);

/// Opens the rollout (if it exists) and folds every complete line on disk, observed at the
/// file's modification time (never later than now).
/// `path` spelled one way: its components joined by the platform's separator. Two paths are
/// equal (`Path`'s `==`, component by component: `s//r.jsonl` is `s/r.jsonl`) exactly when
/// their normal forms are equal byte for byte, which is a `memcmp`: matching a changed path
/// against every child's by components cost 37,000 instructions a line with 50 children
/// (docs/performance.md, "twenty-seventh pass").
pub(crate) fn normal_form(path: &Path) -> PathBuf {
    path.components().collect()
}

fn open_and_seed(path: &Path, now: Ts) -> Result<Option<(Tail, Folded)>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // No descriptor (or disk) left is no fault of the path: kept as an I/O error, so a
        // supervisor claims the child again once the resource returns.
        Err(e) if files::out_of_resources(&e) => {
            return Err(
                anyhow::Error::new(e).context(format!("failed to open rollout {}", path.display()))
            );
        }
        Err(e) => {
            return Err(UsageError(format!("cannot read rollout {}: {e}", path.display())).into());
        }
    };
    let meta = file
        .metadata()
        .with_context(|| format!("failed to stat {}", path.display()))?;
    let mtime = meta.modified().map(Ts::from_system).unwrap_or(now).min(now);
    let t0 = std::time::Instant::now();
    let seeded = seed(&file, meta.len(), LineTimes::All(mtime), LINE_LIMIT)
        .with_context(|| format!("failed to read rollout {}", path.display()))?;
    info!(
        event = "seeded",
        lines = seeded.state.counters.lines,
        bytes = seeded.state.counters.bytes,
        ms = t0.elapsed().as_millis() as u64,
        "seeded {} lines ({} bytes) from disk",
        seeded.state.counters.lines,
        seeded.state.counters.bytes
    );
    let mut guard =
        Guard::new(&file).with_context(|| format!("failed to stat {}", path.display()))?;
    guard.remember(&file, seeded.cursor.offset());
    let folded = (
        seeded.state,
        seeded.cursor.next_number(),
        seeded.cursor.partial_bytes() > 0,
    );
    Ok(Some((
        Tail {
            file,
            guard,
            fold: seeded.cursor,
            ship: LineCursor::text(0, 0, LINE_LIMIT),
            index: seeded.index,
            recent: Recent::default(),
        },
        folded,
    )))
}

#[cfg(test)]
mod tests;
