//! The runtime: one `tokio::select!` loop that wires the tail reader, the fold, the decisions
//! and the shipping pipeline together.
//!
//! Nothing slow runs on the loop: HTTP requests are spawned tasks that report back by
//! channel, and the heartbeat beats on its own thread, so a hung server or a huge line never
//! stalls file reading, timers or the heartbeat. The loop sleeps until the earliest due
//! decision, the next retry, a file-change wake-up, the safety-net poll or a signal; it never
//! polls decisions in a busy loop.

pub mod clock;

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
use crate::ship::backoff::Backoff;
use crate::ship::client::{
    Deadlines, KcapClient, Outcome, SessionEndReason, Watermark, session_end_body,
    subagent_start_body, subagent_stop_body,
};
use crate::ship::outbox::{Outbox, Refusal, ShipLine};
use crate::ship::redact::{Redactor, truncate_utf8};
use crate::ship::spool::{self, SpoolOutcome};
use crate::ship::token::TokenSource;
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
    pub stop: Option<&'static str>,
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
            not_a_regular_file(&path, &meta)?;
        }
        let client = match &settings.server {
            Some(url) => {
                let token = TokenSource::new(
                    settings.token.as_ref().map(|t| t.expose().to_string()),
                    settings.token_file.clone(),
                    settings.config_dir.clone(),
                    settings.profile.clone(),
                    url.clone(),
                );
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
            reader: LineReader::fold_only(0, 0),
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

    fn open_and_seed(&mut self) -> Result<()> {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !self.opts.once {
                    info!(event = "waiting_for_file", path = %self.path.display(), "rollout does not exist yet; waiting for it");
                }
                return Ok(());
            }
            Err(e) => {
                return Err(UsageError(format!(
                    "cannot read rollout {}: {e}",
                    self.path.display()
                ))
                .into());
            }
        };
        let meta = file
            .metadata()
            .with_context(|| format!("failed to stat {}", self.path.display()))?;
        let now = self.clock.now();
        let mtime = meta.modified().map(Ts::from_system).unwrap_or(now).min(now);
        let t0 = std::time::Instant::now();
        let seeded = seed(&file, LineTimes::All(mtime), 0)
            .with_context(|| format!("failed to read rollout {}", self.path.display()))?;
        self.state = seeded.state;
        self.reader = seeded.reader;
        self.index = seeded.index;
        info!(
            event = "seeded",
            lines = self.state.counters.lines,
            bytes = self.state.counters.bytes,
            ms = t0.elapsed().as_millis() as u64,
            "seeded {} lines ({} bytes) from disk",
            self.state.counters.lines,
            self.state.counters.bytes
        );
        use std::os::unix::fs::MetadataExt;
        self.rollout = Some(Rollout {
            ino: meta.ino(),
            first_line: None,
            file,
        });
        self.remember_first_line();
        Ok(())
    }

    fn remember_first_line(&mut self) {
        let Some(r) = &mut self.rollout else { return };
        if r.first_line.is_some() || self.state.counters.lines == 0 {
            return;
        }
        let mut buf = vec![0; FIRST_LINE_PREFIX];
        if let Ok(n) = ReadAt::read_at(&r.file, &mut buf, 0) {
            let end = memchr::memchr(b'\n', &buf[..n]).unwrap_or(n);
            buf.truncate(end);
            r.first_line = Some(buf);
        }
    }

    /// Determines the identity (header overridden by the command line) and, once the key is
    /// known, takes the lock, writes the process files and starts shipping.
    fn settle_identity(&mut self) -> Result<()> {
        if self.files.is_some() || (self.opts.once && self.identity.is_some()) {
            return Ok(());
        }
        let mut id = self
            .state
            .identity
            .clone()
            .unwrap_or_else(Identity::unknown);
        let header_known = self.state.identity.is_some();
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
        self.identity = Some(id);
        self.acquire_files()?;
        self.begin_shipping();
        Ok(())
    }

    fn acquire_files(&mut self) -> Result<()> {
        let (Some(session), agent) = (
            self.session_id().map(str::to_string),
            self.agent_id().map(str::to_string),
        ) else {
            return Ok(());
        };
        let key = files::watcher_key(&session, agent.as_deref());
        match WatcherFiles::acquire(&self.settings.watcher_dir, &key, self.clock.now()) {
            Ok(f) => {
                self.heartbeat = Some(Heartbeat::spawn(
                    f.heartbeat_path().to_path_buf(),
                    HEARTBEAT_EVERY,
                ));
                self.files = Some(f);
                crate::logging::attach_file(&files::log_file_path(
                    &self.settings.config_dir,
                    &session,
                    agent.as_deref(),
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

    /// Offline the resume line comes from the spool; online the watermark is asked for.
    fn begin_shipping(&mut self) {
        if self.online() {
            self.watermark_retry_at = Some(self.clock.now());
            return;
        }
        let (Some(session), agent) = (
            self.session_id().map(str::to_string),
            self.agent_id().map(str::to_string),
        ) else {
            return;
        };
        let resume = match spool::highest_spooled_line(
            &self.settings.config_dir,
            &session,
            agent.as_deref(),
        ) {
            Ok(Some(n)) => n + 1,
            Ok(None) => 0,
            Err(e) => {
                warn!(
                    event = "spool_unreadable",
                    "failed to read the transcript spool: {e}; resuming at line 0"
                );
                0
            }
        };
        let watermark = match resume.checked_sub(1) {
            Some(n) => Watermark::Line(n),
            None => Watermark::Empty,
        };
        self.set_resume(watermark, resume);
    }

    fn set_resume(&mut self, watermark: Watermark, resume: u64) {
        self.watermark = Some(watermark);
        self.ship_generation += 1;
        self.transcript_in_flight = false;
        self.ship_retry_at = None;
        self.outbox.rewind(resume);
        let (line, offset) = self.index.locate(resume);
        self.ship_reader = Some(LineReader::new(offset, line, false));
    }

    /// Everything that moves without waiting: reading, shipping, the watermark.
    async fn pump(&mut self) -> Result<()> {
        self.check_rewrite_against_watermark()?;
        self.fill_outbox()?;
        let now = self.clock.now();
        self.maybe_ask_watermark(now);
        self.maybe_send_batch(now);
        Ok(())
    }

    fn on_file_change(&mut self) -> Result<()> {
        if self.rollout.is_none() {
            match std::fs::metadata(&self.path) {
                Ok(meta) => not_a_regular_file(&self.path, &meta)?,
                Err(_) => return Ok(()),
            }
            // The file appeared after the watcher started: its lines are new, observed now.
            let file = match File::open(&self.path) {
                Ok(f) => f,
                Err(_) => return Ok(()),
            };
            use std::os::unix::fs::MetadataExt;
            let ino = file.metadata().map(|m| m.ino()).unwrap_or(0);
            info!(event = "file_appeared", path = %self.path.display(), "rollout appeared");
            self.rollout = Some(Rollout {
                file,
                first_line: None,
                ino,
            });
        }
        self.check_rewritten()?;
        self.read_new_lines()?;
        self.remember_first_line();
        self.settle_identity()?;
        Ok(())
    }

    /// Folds every new complete line, observed now.
    fn read_new_lines(&mut self) -> Result<()> {
        let Some(r) = &self.rollout else {
            return Ok(());
        };
        let now = self.clock.now();
        let state = &mut self.state;
        let index = &mut self.index;
        loop {
            let st = self
                .reader
                .read(&r.file, 4096, &mut |line| {
                    index.record(line.number, line.start);
                    if let Some(observed) = line.observed() {
                        state.apply(observed, now);
                    }
                })
                .with_context(|| format!("failed to read rollout {}", self.path.display()))?;
            if st.at_eof {
                break;
            }
        }
        Ok(())
    }

    /// A file that shrinks below the read position, or whose first line changed, was
    /// rewritten. A file renamed away or deleted is read to its end through the open handle.
    fn check_rewritten(&mut self) -> Result<()> {
        let Some(r) = &self.rollout else {
            return Ok(());
        };
        let len = r.file.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
        if len < self.reader.offset() {
            return Err(self.rewritten("the file shrank below the read position"));
        }
        if let Some(first) = &r.first_line {
            let mut buf = vec![0; first.len() + 1];
            let n = ReadAt::read_at(&r.file, &mut buf, 0).unwrap_or(0);
            let same = n >= first.len() && buf[..first.len()] == first[..];
            if !same {
                return Err(self.rewritten("its first line changed"));
            }
        }
        // Replaced at its path by another file: a rewrite unless it starts the same way.
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::metadata(&self.path)
            && m.ino() != r.ino
            && let Ok(new) = File::open(&self.path)
        {
            let first = r.first_line.clone().unwrap_or_default();
            let mut buf = vec![0; first.len()];
            let n = ReadAt::read_at(&new, &mut buf, 0).unwrap_or(0);
            if n < first.len() || buf != first || m.len() < self.reader.offset() {
                return Err(self.rewritten("it was replaced by a different file"));
            }
            info!(event = "file_replaced", path = %self.path.display(), "rollout replaced by a copy with the same start; following the new file");
            if let Some(r) = &mut self.rollout {
                r.file = new;
                r.ino = m.ino();
            }
        }
        Ok(())
    }

    fn rewritten(&self, why: &'static str) -> anyhow::Error {
        let watermark = match self.watermark {
            Some(Watermark::Line(n)) => Some(n),
            _ => None,
        };
        error!(
            event = "rollout_rewritten",
            path = %self.path.display(),
            watermark = watermark.map(|w| w as i64).unwrap_or(-1),
            lines = self.state.counters.lines,
            "rollout {} was rewritten ({why}); shipping nothing more",
            self.path.display()
        );
        RolloutRewritten {
            path: self.path.clone(),
            watermark,
            lines: self.state.counters.lines,
            why,
        }
        .into()
    }

    fn check_rewrite_against_watermark(&mut self) -> Result<()> {
        if let Some(Watermark::Line(n)) = self.watermark
            && self.rollout.is_some()
            && n.saturating_add(1) > self.reader.next_number()
        {
            return Err(self.rewritten("the server holds more lines than the file"));
        }
        Ok(())
    }

    /// Reads lines from the shipping cursor into the outbox (offline: into the spool).
    fn fill_outbox(&mut self) -> Result<()> {
        let (Some(r), Some(ship)) = (&self.rollout, &mut self.ship_reader) else {
            return Ok(());
        };
        let resume = self.outbox.confirmed_to();
        let limit = self.reader.line_start();
        let mut fresh: Vec<ShipLine> = Vec::new();
        while ship.line_start() < limit && self.outbox.has_room() {
            let redactor = self.redactor;
            let outbox = &mut self.outbox;
            let st = ship
                .read(&r.file, 256, &mut |line| {
                    if line.number < resume || line.blank {
                        return;
                    }
                    let l = ship_line(redactor, &line);
                    fresh.push(l.clone());
                    outbox.push(l);
                })
                .with_context(|| format!("failed to read rollout {}", self.path.display()))?;
            if st.at_eof || st.lines == 0 {
                break;
            }
        }
        let next = ship.next_number();
        self.outbox.skip_to(next);
        if !self.online() && !fresh.is_empty() {
            // Offline: each line goes to the spool as soon as it is read.
            let lines = self.outbox.take_unconfirmed();
            self.spool_lines(lines);
            self.outbox.skip_to(next);
        }
        Ok(())
    }

    fn maybe_ask_watermark(&mut self, now: Ts) {
        if self.client.is_none() || self.watermark_in_flight {
            return;
        }
        let Some(at) = self.watermark_retry_at else {
            return;
        };
        if now < at {
            return;
        }
        let (Some(session), agent) = (
            self.session_id().map(str::to_string),
            self.agent_id().map(str::to_string),
        ) else {
            return;
        };
        let Some(client) = self.client_for_attempt(now) else {
            return;
        };
        self.watermark_retry_at = None;
        self.watermark_in_flight = true;
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let res = client.watermark(&session, agent.as_deref()).await;
            let _ = tx.send(Done::Watermark(res)).await;
        });
    }

    fn maybe_send_batch(&mut self, now: Ts) {
        if self.client.is_none() || self.watermark.is_none() || self.transcript_in_flight {
            return;
        }
        if self.role() == Role::Child
            && self.watermark == Some(Watermark::NotFound)
            && !self.start_posted
        {
            return;
        }
        if self.ship_retry_at.is_some_and(|at| now < at) {
            return;
        }
        if self.recheck_watermark {
            // Read before resending: once the healing batch is stored, the watermark is past
            // any lines the server lost meanwhile and the loss could no longer be seen.
            if !self.watermark_in_flight && self.watermark_retry_at.is_none() {
                self.watermark_retry_at = Some(now);
            }
            return;
        }
        self.ship_retry_at = None;
        let Some(session) = self.session_id().map(str::to_string) else {
            return;
        };
        let agent = self.agent_id().map(str::to_string);
        let batch = match self.outbox.in_flight() {
            Some(b) => b.clone(),
            None => match self.outbox.next_batch() {
                Some(b) => b.clone(),
                None => return,
            },
        };
        let body = batch.body(&session, agent.as_deref(), &self.opts.vendor);
        let Some(client) = self.client_for_attempt(now) else {
            return;
        };
        let tx = self.tx.clone();
        let generation = self.ship_generation;
        self.transcript_in_flight = true;
        tokio::spawn(async move {
            let out = client.post_transcript(body).await;
            let _ = tx.send(Done::Transcript(generation, out)).await;
        });
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

    fn on_watermark(&mut self, res: Result<Watermark, crate::ship::client::Failure>, now: Ts) {
        self.watermark_in_flight = false;
        match res {
            Ok(w) => {
                self.watermark_backoff.reset();
                let resume = w.resume_line();
                info!(
                    event = "watermark",
                    resume_line = resume,
                    "server watermark: resume at line {resume}"
                );
                let first = self.watermark.is_none();
                self.recheck_watermark = false;
                if first {
                    self.set_resume(w, resume);
                    if w == Watermark::NotFound && self.role() == Role::Child && !self.start_posted
                    {
                        self.post_start();
                    }
                } else if resume < self.outbox.confirmed_to() {
                    // The server lost lines it had acknowledged: resend from its resume line.
                    // This check runs once per healed failure, never in a loop (a server that
                    // skips trailing lines would otherwise make it loop forever).
                    warn!(
                        event = "watermark",
                        resume_line = resume,
                        acknowledged_to = self.outbox.confirmed_to(),
                        "server is behind what it acknowledged; resending from line {resume}"
                    );
                    self.set_resume(w, resume);
                }
            }
            Err(f) => {
                if let crate::ship::client::Failure::Unauthorized { status } = f {
                    self.log_unauthorized(status);
                    self.token_refused = true;
                    self.watermark_retry_at = Some(now.plus(UNAUTHORIZED_RETRY));
                } else {
                    let delay = self.watermark_backoff.next_delay(f.retry_after());
                    warn!(event = "ship_failed", what = "watermark", error = %f, retry_in_ms = delay.as_millis() as u64, "failed to read the watermark: {f}; retrying in {delay:?}");
                    self.watermark_retry_at = Some(now.plus(delay));
                }
                if self.watermark.is_some() {
                    // The check before resending failed: no batch goes out until it answers.
                    self.recheck_watermark = true;
                }
            }
        }
    }

    /// The client for the next request. After a `401`/`403` the token is re-read first, right
    /// before the retry: re-read at the refusal, a token the kcap CLI refreshed during the
    /// minute's wait would only be picked up a minute later still.
    fn client_for_attempt(&mut self, now: Ts) -> Option<KcapClient> {
        let client = self.client.clone()?;
        if std::mem::take(&mut self.token_refused) {
            client.reload_token(now);
        }
        Some(client)
    }

    fn log_unauthorized(&mut self, status: u16) {
        if !self.unauthorized_logged {
            error!(
                event = "ship_failed",
                status,
                "the kcap server refused the token (HTTP {status}); keeping every line, re-reading the token every 60 s"
            );
            self.unauthorized_logged = true;
        }
    }

    fn on_transcript(&mut self, out: Outcome, now: Ts) {
        self.transcript_in_flight = false;
        match out {
            Outcome::Delivered => {
                self.failing_since = None;
                self.unauthorized_logged = false;
                self.ship_backoff.reset();
                if let Some(b) = self.outbox.delivered() {
                    self.lines_shipped += b.lines.len() as u64;
                    info!(
                        event = "batch_shipped",
                        first = b.first(),
                        last = b.last(),
                        count = b.lines.len(),
                        bytes = b.bytes(),
                        "shipped lines {}..={}",
                        b.first(),
                        b.last()
                    );
                }
                if let Some(ship) = &self.ship_reader {
                    self.outbox.skip_to(ship.next_number());
                }
            }
            Outcome::Transient {
                status,
                retry_after,
                error,
            } => {
                // Once per failure streak (never in a loop): the watermark is read again
                // before the next attempt.
                if self.failing_since.is_none() {
                    self.recheck_watermark = true;
                }
                self.failing_since.get_or_insert(now);
                let delay = self.ship_backoff.next_delay(retry_after);
                warn!(event = "ship_failed", status = status.map(i64::from).unwrap_or(-1), error = %error, retry_in_ms = delay.as_millis() as u64, "failed to ship lines: {error}; retrying in {delay:?}");
                self.ship_retry_at = Some(now.plus(delay));
            }
            Outcome::Unauthorized { status } => {
                // Once per failure streak (never in a loop): the watermark is read again
                // before the next attempt.
                if self.failing_since.is_none() {
                    self.recheck_watermark = true;
                }
                self.failing_since.get_or_insert(now);
                self.log_unauthorized(status);
                self.token_refused = true;
                self.ship_retry_at = Some(now.plus(UNAUTHORIZED_RETRY));
            }
            Outcome::Rejected {
                status,
                body_snippet,
            } => match self.outbox.refused() {
                Some(Refusal::Split) => {
                    warn!(
                        event = "ship_failed",
                        status,
                        "the server refused a batch (HTTP {status}); halving it to find the line it refuses"
                    );
                }
                Some(Refusal::Isolated(line)) => {
                    error!(
                        event = "ship_failed",
                        status,
                        line = line.number,
                        "the server refuses line {} (HTTP {status}: {body_snippet}); spooling it and going on",
                        line.number
                    );
                    self.spool_lines(vec![line]);
                }
                None => {}
            },
        }
    }

    fn on_stop(&mut self, out: Outcome, now: Ts) {
        self.stop_in_flight = false;
        match out {
            Outcome::Delivered => {
                self.stop.posted = true;
                info!(event = "subagent_stop_posted", "posted subagent-stop");
            }
            other => {
                if let Outcome::Unauthorized { .. } = other {
                    self.token_refused = true;
                }
                let status = match &other {
                    Outcome::Transient { status, .. } => status.map(i64::from).unwrap_or(-1),
                    Outcome::Unauthorized { status } | Outcome::Rejected { status, .. } => {
                        i64::from(*status)
                    }
                    Outcome::Delivered => 200,
                };
                warn!(event = "subagent_stop_failed", status, error = %other, "failed to post subagent-stop: {other}; retrying in {:?}", self.settings.stop_retry);
                self.stop.next_attempt = Some(now.plus(self.settings.stop_retry));
            }
        }
    }

    fn due(&self, _now: Ts) -> decide::Due {
        decide::due_times(
            &self.state,
            self.role(),
            &self.windows(),
            self.stop,
            Some(self.started),
            self.ceiling.as_ref(),
        )
    }

    /// The earliest time anything is due: a decision, a retry, the watermark.
    ///
    /// Only times the loop can act on count: a stop waiting for its transcript to be
    /// acknowledged, or a request already in flight, is woken by the answer instead, so a due
    /// time in the past can never turn the loop into a busy loop.
    fn next_due(&self) -> Ts {
        let now = self.clock.now();
        let due = self.due(now);
        let mut next = now.plus(crate::time::MAX_WINDOW);
        let stop_actionable = !self.stop_in_flight
            && self.identity.is_some()
            && self.transcript_confirmed_through_turn_end();
        let candidates = [
            due.subagent_stop.filter(|_| stop_actionable),
            due.idle_end,
            due.stall_warning,
            due.lifetime_ceiling,
            self.ship_retry_at.filter(|_| !self.transcript_in_flight),
            self.watermark_retry_at
                .filter(|_| !self.watermark_in_flight && self.identity.is_some()),
        ];
        for t in candidates.into_iter().flatten() {
            next = next.min(t);
        }
        next
    }

    fn transcript_confirmed_through_turn_end(&self) -> bool {
        match self.state.turn_end_line {
            Some(end) => self.watermark.is_some() && self.outbox.confirmed_to() > end,
            None => true,
        }
    }

    /// Acts on every decision due now. Returns the exit reason when the watcher must end.
    async fn act_on_due(&mut self) -> Result<Option<ExitReason>> {
        let now = self.clock.now();
        let due = self.due(now);
        if due.stall_warning.is_some_and(|t| t <= now) {
            self.warn_stall(now);
        }
        if due.subagent_stop.is_some_and(|t| t <= now)
            && !self.stop_in_flight
            && self.identity.is_some()
            && self.transcript_confirmed_through_turn_end()
        {
            self.start_stop_attempt(now);
        }
        if let Some(c) = &mut self.ceiling {
            loop {
                match c.step(&self.state.pauses, now) {
                    CeilingStep::NotYet(_) => break,
                    CeilingStep::Granted(g) => {
                        let pause = self
                            .state
                            .pauses
                            .last()
                            .map(|p| {
                                format!(
                                    "usage_limit_exceeded opened {} until {}",
                                    p.opened_at,
                                    p.resets_at
                                        .map_or_else(|| "unknown".into(), |r| r.rfc3339())
                                )
                            })
                            .unwrap_or_default();
                        info!(
                            event = "pause_extension_granted",
                            grant_ms = g.grant.as_millis() as u64,
                            total_granted_ms = g.total_granted.as_millis() as u64,
                            remaining_cap_ms = g.remaining_cap.as_millis() as u64,
                            grant_count = g.grant_count,
                            pause = %pause,
                            "lifetime ceiling extended by {}ms of usage-limit pause credit",
                            g.grant.as_millis()
                        );
                    }
                    CeilingStep::Fire => {
                        let msg = c.exit_message(&self.state.pauses, now);
                        info!(event = "lifetime_ceiling", "{msg}");
                        return self
                            .finish(ExitReason::LifetimeCeiling(msg), false)
                            .await
                            .map(Some);
                    }
                }
            }
        }
        if due.idle_end.is_some_and(|t| t <= now) {
            let reason = match self.role() {
                Role::Child => ExitReason::IdleReap,
                Role::Session => ExitReason::IdleTimeout,
            };
            let quiet = now.duration_since(self.state.quiet_since().unwrap_or(self.started));
            info!(
                event = "idle_end",
                reason = reason.as_str(),
                idle_ms = quiet.as_millis() as u64,
                "no activity for {quiet:?}; ending"
            );
            return self.finish(reason, false).await.map(Some);
        }
        Ok(None)
    }

    fn warn_stall(&mut self, now: Ts) {
        let silence = now.duration_since(self.state.last_activity.unwrap_or(self.started));
        let last_kind = self
            .state
            .last_kind
            .map(|(k, p, m)| format!("{k:?}/{p:?}{}", if m { " (malformed)" } else { "" }))
            .unwrap_or_else(|| "none".into());
        warn!(
            event = "stall_detected",
            turn_id = self.state.turn_id.as_deref().unwrap_or(""),
            silence_ms = silence.as_millis() as u64,
            last_line_kind = %last_kind,
            "turn {} has been silent for {:?} with no tool in flight (last line: {last_kind})",
            self.state.turn_id.as_deref().unwrap_or("?"),
            silence
        );
        self.state.stalled = true;
    }

    fn stop_body(&self) -> String {
        let id = self.identity.as_ref();
        let message = self.state.last_agent_message.as_deref().unwrap_or("");
        let redacted = self.redactor.redact_text(message);
        subagent_stop_body(
            id.and_then(|i| i.session_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_type.as_deref())
                .unwrap_or("subagent"),
            &self.path,
            truncate_utf8(&redacted, MAX_STOP_MESSAGE),
        )
    }

    fn start_body(&self) -> String {
        let id = self.identity.as_ref();
        subagent_start_body(
            id.and_then(|i| i.session_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_type.as_deref())
                .unwrap_or("subagent"),
            &self.path,
        )
    }

    fn post_start(&mut self) {
        let Some(client) = self.client.clone() else {
            return;
        };
        let body = self.start_body();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let out = client.post_hook("subagent-start", body).await;
            let _ = tx.send(Done::Start(out)).await;
        });
    }

    /// One stop attempt, off the loop (online), or into the hook spool (offline).
    fn start_stop_attempt(&mut self, now: Ts) {
        let body = self.stop_body();
        match self.client_for_attempt(now) {
            Some(client) => {
                self.stop_in_flight = true;
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let out = client.post_hook("subagent-stop", body).await;
                    let _ = tx.send(Done::Stop(out)).await;
                });
            }
            None => {
                self.spool_hook("subagent-stop", body);
                self.stop.posted = true;
            }
        }
    }

    /// `--once`: one stop attempt, awaited (each attempt is bounded to 5 s by the client).
    async fn post_stop_now(&mut self) {
        self.start_stop_attempt(self.clock.now());
        while self.stop_in_flight {
            match self.rx.recv().await {
                Some(done) => self.on_done(done),
                None => break,
            }
        }
        if !self.stop.posted {
            self.spool_hook("subagent-stop", self.stop_body());
        }
    }

    async fn post_session_end(&mut self, reason: SessionEndReason) {
        // A watcher that never learned its session (no file, no ids) has nothing to end.
        let Some(id) = self.identity.clone() else {
            return;
        };
        let body = session_end_body(
            id.session_id.as_deref().unwrap_or(""),
            &self.path,
            id.cwd.as_deref().unwrap_or(""),
            reason,
            self.clock.now(),
        );
        match &self.client {
            Some(client) => match client.post_hook("session-end/codex", body.clone()).await {
                Outcome::Delivered => info!(event = "session_end_posted", "posted session-end"),
                other => {
                    warn!(event = "session_end_failed", error = %other, "failed to post session-end: {other}; spooling it");
                    self.spool_hook("session-end/codex", body);
                }
            },
            None => self.spool_hook("session-end/codex", body),
        }
    }

    fn spool_hook(&mut self, route: &str, body: String) {
        let Some(session) = self.session_id().map(str::to_string) else {
            return;
        };
        match spool::append_hook(&self.settings.config_dir, &session, route, &body) {
            Ok(SpoolOutcome::Written { path, .. }) => {
                info!(event = "spooled", route, path = %path.display(), "spooled {route} request to {}", path.display());
            }
            Ok(SpoolOutcome::OverCap { path, .. }) => {
                error!(event = "spooled", route, path = %path.display(), "hook spool {} is full; {route} request for session {session} not kept", path.display());
            }
            Err(e) => error!(
                event = "spooled",
                route, "failed to spool {route} request: {e}"
            ),
        }
    }

    /// Appends lines to the transcript spool in bounded records; they count as confirmed.
    fn spool_lines(&mut self, lines: Vec<ShipLine>) {
        let Some(session) = self.session_id().map(str::to_string) else {
            return;
        };
        let agent = self.agent_id().map(str::to_string);
        for chunk in lines.chunks(crate::ship::outbox::MAX_BATCH_LINES) {
            let Some(last) = chunk.last().map(|l| l.number) else {
                continue;
            };
            let batch = TranscriptBatch {
                session_id: session.clone(),
                agent_id: agent.clone(),
                vendor: self.opts.vendor.clone(),
                lines: chunk.iter().map(ShipLine::text).collect(),
                line_numbers: chunk.iter().map(|l| l.number).collect(),
            };
            match spool::append_transcript(&self.settings.config_dir, &batch, self.clock.now()) {
                Ok(SpoolOutcome::Written { path, .. }) => {
                    self.lines_spooled += chunk.len() as u64;
                    self.outbox.confirm_spooled(last);
                    info!(event = "spooled", first = chunk[0].number, last, count = chunk.len(), path = %path.display(), "spooled lines {}..={last}", chunk[0].number);
                }
                Ok(SpoolOutcome::OverCap { path, first_line }) => {
                    if !self.spool_full_logged {
                        error!(event = "spooled", session = %session, first_line = first_line.unwrap_or(chunk[0].number), path = %path.display(), "transcript spool for session {session} is full (8 MiB); line {} and later were not kept (needs-import written)", first_line.unwrap_or(chunk[0].number));
                        self.spool_full_logged = true;
                    }
                    return;
                }
                Err(e) => {
                    error!(
                        event = "spooled",
                        "failed to spool lines {}..={last}: {e}", chunk[0].number
                    );
                    return;
                }
            }
        }
    }

    /// Ships what it can until `deadline` (online), reading everything complete on disk.
    async fn deliver_until(&mut self, deadline: Ts) -> Result<()> {
        loop {
            self.read_new_lines()?;
            self.pump().await?;
            let all_read = self
                .ship_reader
                .as_ref()
                .is_none_or(|s| s.line_start() >= self.reader.line_start());
            if !self.online() || (self.outbox.is_idle() && all_read) {
                return Ok(());
            }
            let now = self.clock.now();
            if now >= deadline {
                return Ok(());
            }
            let next = self.next_due().min(deadline);
            tokio::select! {
                Some(done) = self.rx.recv() => self.on_done(done),
                _ = tokio::time::sleep(until(now, next)) => {}
            }
        }
    }

    /// Spools everything not confirmed: the outbox, then the rest of the file.
    fn spool_unconfirmed(&mut self) {
        if self.identity.is_none() {
            return;
        }
        if self.watermark.is_none() {
            // The server never said where to resume: spool everything (resending is harmless;
            // losing a line is not).
            self.set_resume(Watermark::Empty, 0);
        }
        let lines = self.outbox.take_unconfirmed();
        self.spool_lines(lines);
        let Some(file) = self.rollout.as_ref().and_then(|r| r.file.try_clone().ok()) else {
            return;
        };
        let Some(mut ship) = self.ship_reader.take() else {
            return;
        };
        let limit = self.reader.line_start();
        let redactor = self.redactor;
        while ship.line_start() < limit && !self.spool_full_logged {
            let resume = self.outbox.confirmed_to();
            let mut chunk = Vec::new();
            let read = ship.read(&file, crate::ship::outbox::MAX_BATCH_LINES, &mut |line| {
                if line.number < resume || line.blank {
                    return;
                }
                chunk.push(ship_line(redactor, &line));
            });
            let Ok(st) = read else { break };
            self.spool_lines(chunk);
            if st.at_eof || st.lines == 0 {
                break;
            }
        }
        self.ship_reader = Some(ship);
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
                .map(|s| spool::transcript_spool_path(&self.settings.config_dir, s)),
            hook_spool: session
                .as_deref()
                .map(|s| spool::hook_spool_path(&self.settings.config_dir, s)),
            stop: match (self.role(), self.stop.posted) {
                (Role::Child, true) if self.online() => Some("posted"),
                (Role::Child, true) => Some("spooled"),
                (Role::Child, false) => Some("not due"),
                _ => None,
            },
            turn: self.state.turn.as_str(),
        }
    }
}

/// The shipped form of a raw line: redacted, or the oversize placeholder.
fn ship_line(redactor: &Redactor, line: &crate::tail::Line) -> ShipLine {
    let text = match &line.text {
        Some(t) if !line.oversize => redactor.redact_line(t),
        _ => crate::ship::redact::oversize_placeholder(line.len),
    };
    ShipLine::new(line.number, &text)
}

/// A rollout must be a regular file: opening a named pipe would block until some writer
/// opened it (a hang before the heartbeat even starts), and nothing else can be tailed.
fn not_a_regular_file(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    if meta.is_file() {
        return Ok(());
    }
    let what = if meta.is_dir() {
        "it is a directory"
    } else {
        "it is not a regular file"
    };
    Err(UsageError(format!("cannot read rollout {}: {what}", path.display())).into())
}

fn signal(kind: tokio::signal::unix::SignalKind) -> Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(kind).context("failed to install a signal handler")
}

/// A path for the spool summary line.
pub fn display_path(p: &Path) -> String {
    p.display().to_string()
}
