//! The shell around one child's [`Pipeline`]: one dispatcher in the style of cargo-nextest's
//! runner. `select!` turns what happened (file changes, request answers, timers, signals, the
//! parent's exit) into an event, the pipeline answers synchronously with actions, and the
//! shell performs them (spawned requests, spool writes) and feeds their outcomes back. There
//! are no sub-loops: `--once` and shutdown are phases of the pipeline, driven by this loop.
//!
//! Nothing slow runs on the loop: HTTP requests are spawned tasks that report back by
//! channel, and the heartbeat beats on its own thread, so a hung server or a huge line never
//! stalls file reading, timers or the heartbeat.

pub mod clock;

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::config::Settings;
use crate::error::{LockHeld, RolloutRewritten, UsageError};
use crate::files::{self, AcquireError, HEARTBEAT_EVERY, Heartbeat, WatcherFiles};
use crate::fold::seed::{LineTimes, seed};
use crate::pipeline::{Action, Event, Pipeline, SpoolResult};
use crate::rollout::Classifier;
use crate::rollout::header::{Identity, Role, normalize_id};
use crate::rollout::lines::LineCursor;
use crate::ship::LINE_LIMIT;
use crate::ship::auth::Credentials;
use crate::ship::client::{Deadlines, Failure, Hook, KcapClient, Watermark};
use crate::ship::spool::{self, SpoolOutcome};
use crate::tail::guard::{Guard, Seen};
use crate::tail::index::LineIndex;
use crate::tail::wake::{Mode, Wakeups};
use crate::time::Ts;
use clock::{Clock, until};

pub use crate::pipeline::ExitReason;

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

/// Answers of spawned request tasks.
enum Done {
    Watermark(Result<Watermark, Failure>),
    Shipped(u64, Result<(), Failure>),
    Posted(Hook, Result<(), Failure>),
}

/// The open rollout: the fold cursor, the shipping cursor and what guards against rewriting.
struct Tail {
    file: File,
    guard: Guard,
    fold: LineCursor,
    ship: LineCursor,
    index: LineIndex,
}

/// Runs a watcher until it ends as designed (or fails).
pub async fn run(
    opts: WatchOptions,
    settings: Settings,
    clock: Arc<dyn Clock>,
) -> Result<(ExitReason, Summary)> {
    let mut shell = Shell::new(opts, settings, clock)?;
    let result = shell.run().await;
    shell.release();
    let summary = shell.summary();
    result.map(|r| (r, summary))
}

struct Shell {
    opts: WatchOptions,
    settings: Settings,
    clock: Arc<dyn Clock>,
    path: PathBuf,
    tail: Option<Tail>,
    pipeline: Pipeline,
    /// Where the shipping cursor starts when the file is opened later.
    ship_from: u64,
    settled: bool,
    files: Option<WatcherFiles>,
    heartbeat: Option<Heartbeat>,
    client: Option<KcapClient>,
    tx: mpsc::Sender<Done>,
    rx: mpsc::Receiver<Done>,
    exit: Option<ExitReason>,
}

impl Shell {
    fn new(opts: WatchOptions, settings: Settings, clock: Arc<dyn Clock>) -> Result<Shell> {
        let started = clock.now();
        let path = std::path::absolute(&opts.rollout).with_context(|| {
            format!("failed to resolve rollout path {}", opts.rollout.display())
        })?;
        if let Ok(meta) = std::fs::metadata(&path) {
            crate::tail::require_regular_file(&path, &meta)?;
        }
        let client = match &settings.server {
            Some(url) => {
                let token = Credentials::from_settings(&settings, url);
                Some(KcapClient::new(url, token, Deadlines::default())?)
            }
            None => None,
        };
        let (tx, rx) = mpsc::channel(16);
        let tail = open_and_seed(&path, clock.now())?;
        let seeded = tail.as_ref().map(|(_, state)| state.clone());
        let role = match opts.role {
            Some(r) => r,
            None if opts.agent_id.is_some() => Role::Child,
            None => Role::Session,
        };
        let pipeline = Pipeline::new(
            settings.clone(),
            opts.vendor.clone(),
            path.clone(),
            role,
            opts.once,
            started,
            seeded,
        );
        Ok(Shell {
            opts,
            settings,
            clock,
            path,
            tail: tail.map(|(t, _)| t),
            pipeline,
            ship_from: 0,
            settled: false,
            files: None,
            heartbeat: None,
            client,
            tx,
            rx,
            exit: None,
        })
    }

    async fn run(&mut self) -> Result<ExitReason> {
        // First: settling the identity may already spool a large file offline, and a SIGTERM
        // meanwhile must end the watcher through the pipeline, not kill it.
        let mut sigterm = signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut sigint = signal(tokio::signal::unix::SignalKind::interrupt())?;
        let mut sighup = signal(tokio::signal::unix::SignalKind::hangup())?;
        let wake = Wakeups::start(&self.path, self.settings.force_poll);
        if let Mode::Poll(why) = wake.mode() {
            if self.settings.force_poll {
                info!(event = "polling", path = %self.path.display(), "{why}");
            } else {
                warn!(event = "polling", path = %self.path.display(), "{why}");
            }
        }
        self.settle_identity()?;
        let id = self.pipeline.identity();
        info!(
            event = "watcher_started",
            path = %self.path.display(),
            role = self.pipeline.role().as_str(),
            session_id = id.and_then(|i| i.session_id.as_deref()).unwrap_or(""),
            agent_id = id.and_then(|i| i.agent_id.as_deref()).unwrap_or(""),
            online = self.client.is_some(),
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
                return Err(UsageError(format!(
                    "rollout {} has no readable session_meta yet; pass SESSION_ID (and --agent-id for a child)",
                    self.path.display()
                ))
                .into());
            }
            self.pipeline.begin_once(self.clock.now());
        } else if self.tail.is_none() {
            info!(event = "waiting_for_file", path = %self.path.display(), "rollout does not exist yet; waiting for it");
        }
        let mut poll = tokio::time::interval(self.settings.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.dispatch(Event::Tick)?;
        loop {
            if let Some(reason) = self.exit.take() {
                return Ok(reason);
            }
            let now = self.clock.now();
            let next = self
                .pipeline
                .next_wake(now)
                .unwrap_or(now.plus(crate::time::MAX_WINDOW));
            let sleep = tokio::time::sleep(until(now, next));
            let event = tokio::select! {
                _ = wake.notified(), if !self.opts.once => {
                    if wake.take_failure() {
                        warn!(event = "polling", "file notification failed; relying on polling every {:?}", self.settings.poll_interval);
                    }
                    self.on_file_change()?;
                    Event::Tick
                }
                _ = poll.tick() => {
                    if !self.opts.once {
                        self.on_file_change()?;
                    }
                    match self.opts.parent_pid {
                        Some(pid) if !files::process_alive(pid) => {
                            info!(event = "parent_exited", pid, "parent process {pid} exited");
                            Event::ParentExited
                        }
                        _ => Event::Tick,
                    }
                }
                Some(done) = self.rx.recv() => match done {
                    Done::Watermark(result) => Event::Watermark(result),
                    Done::Shipped(generation, result) => Event::Shipped { generation, result },
                    Done::Posted(hook, result) => Event::Posted { hook, result },
                },
                _ = sleep => {
                    if !self.opts.once {
                        // A partial last line may have completed (the shutdown waits for it).
                        self.on_file_change()?;
                    }
                    Event::Tick
                }
                _ = sigterm.recv() => Event::Signal("SIGTERM"),
                _ = sigint.recv() => Event::Signal("SIGINT"),
                _ = sighup.recv() => Event::Signal("SIGHUP"),
            };
            if matches!(event, Event::Signal(_) | Event::ParentExited) && !self.opts.once {
                // What was appended just before the signal is part of what ends with it.
                self.on_file_change()?;
            }
            self.dispatch(event)?;
        }
    }

    /// Hands `event` to the pipeline and performs its actions, feeding their outcomes back,
    /// then feeds it text while it wants more.
    fn dispatch(&mut self, event: Event) -> Result<()> {
        let mut queue = VecDeque::from([event]);
        loop {
            while let Some(event) = queue.pop_front() {
                let actions = self.pipeline.handle(event, self.clock.now());
                for action in actions {
                    if let Some(outcome) = self.perform(action)? {
                        queue.push_back(outcome);
                    }
                }
            }
            match self.read_text()? {
                Some(text) => queue.push_back(text),
                None => return Ok(()),
            }
        }
    }

    /// The next lines for shipping, with their text, while the pipeline wants them.
    fn read_text(&mut self) -> Result<Option<Event>> {
        let Some(t) = &mut self.tail else {
            return Ok(None);
        };
        if !self.pipeline.wants_text() || t.ship.line_start() >= t.fold.line_start() {
            return Ok(None);
        }
        let (lines, _) = t
            .ship
            .read(&t.file, 256)
            .with_context(|| format!("failed to read rollout {}", self.path.display()))?;
        let next = t.ship.next_number();
        Ok(Some(Event::Text { lines, next }))
    }

    fn perform(&mut self, action: Action) -> Result<Option<Event>> {
        let now = self.clock.now();
        match action {
            Action::AskWatermark => {
                let (Some(client), Some(id)) = (self.client.clone(), self.pipeline.identity())
                else {
                    return Ok(None);
                };
                let session = id.session_id.clone().unwrap_or_default();
                let agent = id.agent_id.clone();
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let res = client.watermark(&session, agent.as_deref()).await;
                    let _ = tx.send(Done::Watermark(res)).await;
                });
            }
            Action::Send { generation, body } => {
                if let Some(client) = self.client.clone() {
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        let res = client.post_transcript(body).await;
                        let _ = tx.send(Done::Shipped(generation, res)).await;
                    });
                }
            }
            Action::Post(hook) => {
                if let Some(client) = self.client.clone() {
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        let res = client.post_lifecycle(&hook).await;
                        let _ = tx.send(Done::Posted(hook, res)).await;
                    });
                }
            }
            Action::SpoolLines { batch, refused } => {
                let result = match spool::append_transcript(&self.settings.config_dir, &batch, now)
                {
                    Ok(SpoolOutcome::Written { .. }) => {
                        if let Some(last) = batch.line_numbers.last()
                            && let Err(e) = crate::ship::handed_over::advance(
                                &self.settings.config_dir,
                                &batch.session_id,
                                batch.agent_id.as_deref(),
                                last + 1,
                            )
                        {
                            warn!(
                                event = "offline_watermark_failed",
                                "failed to record the offline watermark: {e}"
                            );
                        }
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
                    &self.settings.config_dir,
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
                if let Some(c) = &self.client {
                    c.reload_token(now);
                }
            }
            Action::TrimMemory => release_freed_memory(),
            Action::Rewritten(why) => return Err(self.rewritten(why)),
            Action::Exit(reason) => self.exit = Some(reason),
        }
        Ok(None)
    }

    /// Re-checks the file and folds what is new; settles the identity once the header is there.
    fn on_file_change(&mut self) -> Result<()> {
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
                self.path = path.clone();
                self.dispatch(Event::Moved(path))?;
            }
            Ok(Seen::Changed) => {}
        }
        loop {
            let Some(t) = &mut self.tail else {
                return Ok(());
            };
            let (lines, st) = t
                .fold
                .read(&t.file, 4096)
                .with_context(|| format!("failed to read rollout {}", self.path.display()))?;
            for line in &lines {
                t.index.record(line.number, line.start);
            }
            t.guard.remember(&t.file, t.fold.offset());
            let partial = t.fold.partial_bytes() > 0;
            self.dispatch(Event::Folded { lines, partial })?;
            if st.at_eof {
                break;
            }
        }
        self.settle_identity()
    }

    /// Determines the identity (header overridden by the command line) and, once the key is
    /// known, takes the lock, writes the process files and starts shipping.
    fn settle_identity(&mut self) -> Result<()> {
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
            return Ok(());
        }
        if id.role == Role::Session {
            id.agent_id = None;
        }
        self.settled = true;
        let (Some(session), agent) = (id.session_id.clone(), id.agent_id.clone()) else {
            return Ok(());
        };
        self.acquire_files(&session, agent.as_deref())?;
        let offline_resume = if self.client.is_none() {
            self.offline_resume(&session, agent.as_deref())
        } else {
            0
        };
        self.dispatch(Event::Identified {
            identity: id,
            offline_resume,
        })
    }

    /// Offline, shipping resumes one past the highest line ever handed over: in the spool now,
    /// or recorded when it was spooled or replayed.
    fn offline_resume(&self, session: &str, agent: Option<&str>) -> u64 {
        let config = &self.settings.config_dir;
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

    fn acquire_files(&mut self, session: &str, agent: Option<&str>) -> Result<()> {
        // Ids from the rollout's header name files too (R5): the kcap CLI's key rule, or exit 2.
        files::check_id("session id", session)?;
        if let Some(agent) = agent {
            files::check_id("agent id", agent)?;
        }
        let key = files::watcher_key(session, agent);
        match WatcherFiles::acquire(&self.settings.watcher_dir, &key, self.clock.now()) {
            Ok(f) => {
                self.heartbeat = Some(Heartbeat::spawn(
                    f.heartbeat_path().to_path_buf(),
                    HEARTBEAT_EVERY,
                ));
                self.files = Some(f);
                crate::logging::attach_file(&files::log_file_path(
                    &self.settings.config_dir,
                    session,
                    agent,
                ));
                Ok(())
            }
            Err(AcquireError::Held { key, holder_pid }) => Err(LockHeld { key, holder_pid }.into()),
            Err(e) => Err(anyhow::Error::new(e).context(format!(
                "failed to take the watcher lock in {}",
                self.settings.watcher_dir.display()
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

    fn release(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.stop();
        }
        if let Some(f) = self.files.take() {
            f.release();
        }
    }

    fn summary(&self) -> Summary {
        let id = self.pipeline.identity();
        let session = id.and_then(|i| i.session_id.clone());
        let config = &self.settings.config_dir;
        let hook_spool = session
            .as_deref()
            .map(|s| spool::hook_spool_path(config, s));
        let stop = self.pipeline.stop_summary(self.clock.now()).map(|s| {
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
            lines_shipped: self.pipeline.lines_shipped,
            lines_spooled: self.pipeline.lines_spooled,
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
fn open_and_seed(path: &Path, now: Ts) -> Result<Option<(Tail, Folded)>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(UsageError(format!("cannot read rollout {}: {e}", path.display())).into());
        }
    };
    let meta = file
        .metadata()
        .with_context(|| format!("failed to stat {}", path.display()))?;
    let mtime = meta.modified().map(Ts::from_system).unwrap_or(now).min(now);
    let t0 = std::time::Instant::now();
    let seeded = seed(&file, LineTimes::All(mtime), LINE_LIMIT)
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
        },
        folded,
    )))
}

fn signal(kind: tokio::signal::unix::SignalKind) -> Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(kind).context("failed to install a signal handler")
}

/// Returns freed heap memory to the system (glibc keeps it otherwise).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; no memory of ours is
    // touched, and it is safe to call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}
