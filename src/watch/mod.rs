//! The runtime: one `tokio::select!` loop that wires the tail reader, the fold, the decisions
//! and the shipping pipeline together.
//!
//! Nothing slow runs on the loop: HTTP requests are spawned tasks that report back by
//! channel, and the heartbeat beats on its own thread, so a hung server or a huge line never
//! stalls file reading, timers or the heartbeat. The loop sleeps until the earliest due
//! decision, the next retry, a file-change wake-up, the safety-net poll or a signal; it never
//! polls decisions in a busy loop.

pub mod clock;
mod follow;
mod lifecycle;
mod shipping;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use crate::config::Settings;
use crate::decide::{self, Ceiling, CeilingStep, StopProgress, Windows};
use crate::error::{LockHeld, RolloutRewritten, UsageError};
use crate::files::{self, AcquireError, Heartbeat, WatcherFiles};
use crate::fold::State;
use crate::rollout::header::{Identity, Role, normalize_id};
use crate::ship::TranscriptBatch;
use crate::ship::auth::Credentials;
use crate::ship::backoff::Backoff;
use crate::ship::client::{
    Deadlines, KcapClient, Outcome, SessionEndReason, Watermark, session_end_body,
    subagent_start_body, subagent_stop_body,
};
use crate::ship::outbox::{Outbox, Refusal, ShipLine};
use crate::ship::redact::{Redactor, truncate_utf8};
use crate::ship::spool::{self, SpoolOutcome};
use crate::tail::index::LineIndex;
use crate::tail::reader::{LineReader, ReadAt};
use crate::tail::seed::{LineTimes, seed};
use crate::tail::wake::{Mode, Wakeups};
use crate::time::Ts;
use clock::{Clock, until};

/// The heartbeat file is rewritten this often (a spawner kills a watcher whose heartbeat is
/// older than 20 s).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);

/// After `401`/`403`, the token is re-read and the request tried again this much later.
pub const UNAUTHORIZED_RETRY: Duration = Duration::from_secs(60);

/// On a signal, wait at most this long for a partial last line to complete...
pub const PARTIAL_LINE_WAIT: Duration = Duration::from_secs(2);

/// ...and ship what is complete for at most this long before spooling the rest.
pub const SHUTDOWN_SHIP_BUDGET: Duration = Duration::from_secs(5);

/// `watch --once` delivers what is on disk for at most this long before spooling the rest.
pub const ONCE_SHIP_BUDGET: Duration = Duration::from_secs(30);

/// The stop message is cut to this many bytes after redaction.
pub const MAX_STOP_MESSAGE: usize = 4 * 1024;

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

/// Why the watcher ended (all exit 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitReason {
    IdleReap,
    IdleTimeout,
    LifetimeCeiling(String),
    ParentExited,
    Signal(&'static str),
    OnceDone,
}

impl ExitReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            ExitReason::IdleReap => "idle_reap",
            ExitReason::IdleTimeout => "idle_timeout",
            ExitReason::LifetimeCeiling(_) => "lifetime_ceiling",
            ExitReason::ParentExited => "parent_exited",
            ExitReason::Signal(_) => "signal",
            ExitReason::OnceDone => "once_done",
        }
    }
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

/// Completions of spawned request tasks.
enum Done {
    Watermark(Result<Watermark, crate::ship::client::Failure>),
    /// The outcome, tagged with the shipping generation it was sent in.
    Transcript(u64, Outcome),
    Stop(Outcome),
    Start(Outcome),
}

/// The open rollout and what guards against its rewriting.
struct Rollout {
    file: File,
    /// The first line's first bytes, once complete (a changed first line = a rewrite).
    first_line: Option<Vec<u8>>,
    ino: u64,
    /// Size and modification time at the last check: unchanged means nothing to read and
    /// nothing rewritten, so an idle safety-net tick costs one `fstat` and one `stat`.
    seen: Option<(u64, Option<std::time::SystemTime>)>,
}

const FIRST_LINE_PREFIX: usize = 4096;

/// Runs a watcher until it ends as designed (or fails).
pub async fn run(
    opts: WatchOptions,
    settings: Settings,
    clock: Arc<dyn Clock>,
) -> Result<(ExitReason, Summary)> {
    let mut w = Watcher::new(opts, settings, clock)?;
    let result = w.run().await;
    w.release();
    let summary = w.summary();
    result.map(|r| (r, summary))
}

struct Watcher {
    opts: WatchOptions,
    settings: Settings,
    clock: Arc<dyn Clock>,
    started: Ts,
    path: PathBuf,
    rollout: Option<Rollout>,
    reader: LineReader,
    state: State,
    index: LineIndex,
    identity: Option<Identity>,
    files: Option<WatcherFiles>,
    heartbeat: Option<Heartbeat>,
    client: Option<KcapClient>,
    redactor: &'static Redactor,
    tx: mpsc::Sender<Done>,
    rx: mpsc::Receiver<Done>,
    // Shipping.
    watermark: Option<Watermark>,
    watermark_in_flight: bool,
    watermark_retry_at: Option<Ts>,
    watermark_backoff: Backoff,
    /// After a delivery failure, the watermark is read once more before the next batch goes
    /// out (a server restored from a backup while it was down has lost what it acknowledged).
    recheck_watermark: bool,
    /// Bumped when shipping restarts from another line: answers to requests sent before
    /// are stale and ignored.
    ship_generation: u64,
    ship_reader: Option<LineReader>,
    outbox: Outbox,
    ship_retry_at: Option<Ts>,
    transcript_in_flight: bool,
    /// A large batch was delivered: give freed memory back once the outbox is idle.
    trim_when_idle: bool,
    ship_backoff: Backoff,
    failing_since: Option<Ts>,
    unauthorized_logged: bool,
    /// The server refused the token: re-read it right before the next request.
    token_refused: bool,
    start_posted: bool,
    // Lifecycle.
    stop: StopProgress,
    stop_in_flight: bool,
    ceiling: Option<Ceiling>,
    lines_shipped: u64,
    lines_spooled: u64,
    spool_full_logged: bool,
}

impl Watcher {
    fn new(opts: WatchOptions, settings: Settings, clock: Arc<dyn Clock>) -> Result<Watcher> {
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
        let ceiling = settings
            .lifetime
            .map(|l| Ceiling::new(started, l, settings.max_pause_credit));
        Ok(Watcher {
            opts,
            settings,
            clock,
            started,
            path,
            rollout: None,
            reader: LineReader::fold_only(0, 0, false),
            state: State::new(),
            index: LineIndex::new(),
            identity: None,
            files: None,
            heartbeat: None,
            client,
            redactor: crate::ship::redact::global(),
            tx,
            rx,
            watermark: None,
            watermark_in_flight: false,
            watermark_retry_at: None,
            watermark_backoff: Backoff::new(),
            recheck_watermark: false,
            ship_generation: 0,
            ship_reader: None,
            outbox: Outbox::new(0),
            ship_retry_at: None,
            transcript_in_flight: false,
            trim_when_idle: false,
            ship_backoff: Backoff::new(),
            failing_since: None,
            unauthorized_logged: false,
            token_refused: false,
            start_posted: false,
            stop: StopProgress::default(),
            stop_in_flight: false,
            ceiling,
            lines_shipped: 0,
            lines_spooled: 0,
            spool_full_logged: false,
        })
    }

    fn online(&self) -> bool {
        self.client.is_some()
    }

    fn role(&self) -> Role {
        if let Some(r) = self.opts.role {
            return r;
        }
        match &self.identity {
            Some(id) => id.role,
            None if self.opts.agent_id.is_some() => Role::Child,
            None => Role::Session,
        }
    }

    fn windows(&self) -> Windows {
        self.settings.windows_for(self.role())
    }

    fn session_id(&self) -> Option<&str> {
        self.identity.as_ref().and_then(|i| i.session_id.as_deref())
    }

    fn agent_id(&self) -> Option<&str> {
        self.identity.as_ref().and_then(|i| i.agent_id.as_deref())
    }

    async fn run(&mut self) -> Result<ExitReason> {
        let wake = Wakeups::start(&self.path, self.settings.force_poll);
        if let Mode::Poll(why) = wake.mode() {
            if self.settings.force_poll {
                info!(event = "polling", path = %self.path.display(), "{why}");
            } else {
                warn!(event = "polling", path = %self.path.display(), "{why}");
            }
        }
        self.open_and_seed()?;
        self.settle_identity()?;
        info!(
            event = "watcher_started",
            path = %self.path.display(),
            role = self.role().as_str(),
            session_id = self.session_id().unwrap_or(""),
            agent_id = self.agent_id().unwrap_or(""),
            online = self.online(),
            "watching {}",
            self.path.display()
        );
        if self.opts.once {
            return self.run_once().await;
        }
        let mut poll = tokio::time::interval(self.settings.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sigterm = signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut sigint = signal(tokio::signal::unix::SignalKind::interrupt())?;
        let mut sighup = signal(tokio::signal::unix::SignalKind::hangup())?;
        loop {
            self.pump().await?;
            if let Some(reason) = self.act_on_due().await? {
                return Ok(reason);
            }
            let next = self.next_due();
            let sleep = tokio::time::sleep(until(self.clock.now(), next));
            tokio::select! {
                _ = wake.notified() => {
                    if wake.take_failure() {
                        warn!(event = "polling", "file notification failed; relying on polling every {:?}", self.settings.poll_interval);
                    }
                    self.on_file_change()?;
                }
                _ = poll.tick() => {
                    self.on_file_change()?;
                    if let Some(pid) = self.opts.parent_pid
                        && !files::process_alive(pid)
                    {
                        info!(event = "parent_exited", pid, "parent process {pid} exited");
                        return self.finish(ExitReason::ParentExited, false).await;
                    }
                }
                Some(done) = self.rx.recv() => self.on_done(done),
                _ = sleep => {}
                _ = sigterm.recv() => return self.finish(ExitReason::Signal("SIGTERM"), true).await,
                _ = sigint.recv() => return self.finish(ExitReason::Signal("SIGINT"), true).await,
                _ = sighup.recv() => return self.finish(ExitReason::Signal("SIGHUP"), true).await,
            }
        }
    }

    /// `watch --once`: what is on disk is folded, shipped (or spooled), every decision is
    /// evaluated once at the current time, then the watcher exits.
    async fn run_once(&mut self) -> Result<ExitReason> {
        if self.rollout.is_none() {
            return Err(UsageError(format!(
                "cannot read rollout {}: no such file",
                self.path.display()
            ))
            .into());
        }
        if self.identity.is_none() {
            return Err(UsageError(format!(
                "rollout {} has no readable session_meta yet; pass SESSION_ID (and --agent-id for a child)",
                self.path.display()
            ))
            .into());
        }
        let deadline = self.clock.now().plus(ONCE_SHIP_BUDGET);
        // The watermark: ask until known, within the budget.
        while self.watermark.is_none() && self.online() {
            self.pump().await?;
            if self.watermark.is_some() {
                break;
            }
            if self.clock.now() >= deadline {
                anyhow::bail!(
                    "failed to read the watermark from the kcap server within {ONCE_SHIP_BUDGET:?}"
                );
            }
            let next = self.next_due().min(deadline);
            tokio::select! {
                Some(done) = self.rx.recv() => self.on_done(done),
                _ = tokio::time::sleep(until(self.clock.now(), next)) => {}
            }
        }
        self.deliver_until(deadline).await?;
        let now = self.clock.now();
        let due = self.due(now);
        if let Some(stall) = due.stall_warning
            && stall <= now
        {
            self.warn_stall(now);
        }
        let mut reason = ExitReason::OnceDone;
        if due.subagent_stop.is_some_and(|t| t <= now)
            && self.transcript_confirmed_through_turn_end()
        {
            self.post_stop_now().await;
        }
        if self.role() == Role::Session && due.idle_end.is_some_and(|t| t <= now) {
            reason = ExitReason::IdleTimeout;
            self.post_session_end(SessionEndReason::IdleTimeout).await;
        }
        self.spool_unconfirmed();
        Ok(reason)
    }

    fn on_done(&mut self, done: Done) {
        let now = self.clock.now();
        match done {
            Done::Watermark(res) => self.on_watermark(res, now),
            Done::Transcript(generation, out) => {
                if generation == self.ship_generation {
                    self.on_transcript(out, now);
                }
            }
            Done::Stop(out) => self.on_stop(out, now),
            Done::Start(out) => {
                self.start_posted = true;
                match out {
                    Outcome::Delivered => {
                        info!(
                            event = "subagent_start_posted",
                            "posted subagent-start (no stream existed)"
                        )
                    }
                    other => {
                        warn!(event = "subagent_start_failed", error = %other, "failed to post subagent-start: {other}; spooling it");
                        self.spool_hook("subagent-start", self.start_body());
                    }
                }
            }
        }
    }

    /// Ends the watcher: (on a signal) wait briefly for a partial line, ship what is complete
    /// within the budget, spool the rest, post session-end when the reason calls for it.
    async fn finish(&mut self, reason: ExitReason, signal: bool) -> Result<ExitReason> {
        if signal && self.reader.partial_bytes() > 0 {
            let until_t = self.clock.now().plus(PARTIAL_LINE_WAIT);
            while self.reader.partial_bytes() > 0 && self.clock.now() < until_t {
                tokio::time::sleep(Duration::from_millis(50)).await;
                self.read_new_lines()?;
            }
        }
        let deadline = self.clock.now().plus(SHUTDOWN_SHIP_BUDGET);
        self.deliver_until(deadline).await?;
        self.spool_unconfirmed();
        match (&reason, self.role()) {
            (ExitReason::IdleTimeout, Role::Session) => {
                self.post_session_end(SessionEndReason::IdleTimeout).await
            }
            (ExitReason::ParentExited, Role::Session) => {
                self.post_session_end(SessionEndReason::ParentExited).await
            }
            _ => {}
        }
        info!(
            event = "watcher_exiting",
            reason = reason.as_str(),
            "watcher exiting ({})",
            reason.as_str()
        );
        Ok(reason)
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
        let session = self.session_id().map(str::to_string);
        let config = &self.settings.config_dir;
        let hook_spool = session
            .as_deref()
            .map(|s| spool::hook_spool_path(config, s));
        let stop = match (self.role(), self.stop.posted) {
            (Role::Child, true) if self.online() => Some("posted".to_string()),
            (Role::Child, true) => Some(format!(
                "spooled to {}",
                hook_spool.as_deref().unwrap_or(Path::new("-")).display()
            )),
            (Role::Child, false) => Some(match self.due(self.clock.now()).subagent_stop {
                Some(t) => format!("not due until {t}"),
                None => format!("not due (turn {})", self.state.turn.as_str()),
            }),
            (Role::Session, _) => None,
        };
        Summary {
            session_id: session.clone(),
            agent_id: self.agent_id().map(str::to_string),
            role: self.identity.as_ref().map(|i| i.role.as_str()),
            lines_folded: self.state.counters.lines,
            resume_line: self.watermark.map(|w| w.resume_line()),
            lines_shipped: self.lines_shipped,
            lines_spooled: self.lines_spooled,
            transcript_spool: session
                .as_deref()
                .map(|s| spool::transcript_spool_path(config, s)),
            hook_spool,
            stop,
            turn: self.state.turn.as_str(),
        }
    }
}

fn signal(kind: tokio::signal::unix::SignalKind) -> Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(kind).context("failed to install a signal handler")
}
