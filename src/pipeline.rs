//! One child's delivery and lifecycle as a value: `handle(event, now) -> actions`.
//!
//! A [`Pipeline`] owns everything one rollout needs (fold state, decisions, outbox, watermark,
//! confirmed position, stop latch, the ending phases) and touches no file, socket or clock:
//! the shell reads the file, performs the actions (requests, spool writes) and feeds what
//! happened back as events. Nothing here assumes one process per child, so a process can
//! host many pipelines, each routed by its key. Any sequence a bug report describes can be
//! replayed against it in a unit test with injected time.
//!
//! Positions, all line numbers: `folded_to` (complete lines folded), `fed_to` (lines the shell
//! handed over as text for shipping), and the outbox's confirmed position (stored by the
//! server or written to the spool). The watermark is the server's word on where to resume.

use std::path::PathBuf;
use std::time::Duration;

use tracing::{error, info, warn};

use crate::config::Settings;
use crate::decide::{self, Ceiling, CeilingStep, StopProgress, Windows};
use crate::fold::State;
use crate::rollout::header::{Identity, Role};
use crate::rollout::lines::Line;
use crate::ship::TranscriptBatch;
use crate::ship::backoff::Backoff;
use crate::ship::client::{
    Failure, Hook, SessionEndReason, Watermark, session_end_body, subagent_start_body,
    subagent_stop_body,
};
use crate::ship::outbox::{Outbox, Refusal, ShipLine};
use crate::ship::redact::{Redactor, truncate_utf8};
use crate::time::Ts;

/// After `401`/`403`, the token is re-read and the request tried again this much later.
pub(crate) const UNAUTHORIZED_RETRY: Duration = Duration::from_secs(60);

/// After a signal: wait at most this long for a partial last line to complete...
pub(crate) const PARTIAL_LINE_WAIT: Duration = Duration::from_secs(1);

/// ...ship until this long after the signal...
pub(crate) const SHIP_UNTIL: Duration = Duration::from_secs(3);

/// ...and be gone by this long after it, whatever is left (the kcap CLI kills a watcher 5 s
/// after SIGTERM).
pub(crate) const SHUTDOWN_BUDGET: Duration = Duration::from_secs(4);

/// `--once` ships as long as the server makes progress; after this long without an answer
/// that moved anything, it spools what is left.
pub(crate) const ONCE_STALL: Duration = Duration::from_secs(5);

/// Refused batches are halved at once this many times; further halvings wait the backoff, so a
/// server refusing everything is not sent one request per line at full speed.
const FREE_HALVINGS: u32 = 3;

/// The stop message is cut to this many bytes after redaction.
pub(crate) const MAX_STOP_MESSAGE: usize = 4 * 1024;

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

/// What happened, as the pipeline hears it.
#[derive(Debug)]
pub(crate) enum Event {
    /// New complete lines from the fold cursor (classified, no text), observed at `now`;
    /// `partial`: an unterminated last line is held. Sent after every read of the file.
    Folded {
        lines: Vec<Line>,
        partial: bool,
    },
    /// The watcher's identity is settled; shipping may begin. Offline, `offline_resume` is one
    /// past the highest line ever handed over for this key.
    Identified {
        identity: Identity,
        offline_resume: u64,
    },
    /// Lines with their raw text from the shipping cursor, up to (not including) `next`.
    Text {
        lines: Vec<Line>,
        next: u64,
    },
    /// Codex archived the rollout: later stop bodies and logs name its new path.
    Moved(PathBuf),
    Watermark(Result<Watermark, Failure>),
    Shipped {
        generation: u64,
        result: Result<(), Failure>,
    },
    Posted {
        hook: Hook,
        result: Result<(), Failure>,
    },
    LinesSpooled {
        refused: bool,
        result: SpoolResult,
    },
    HookSpooled {
        hook: Hook,
        result: SpoolResult,
    },
    /// A timer fired (or anything else woke the shell): decisions are re-evaluated.
    Tick,
    Signal(&'static str),
    ParentExited,
}

/// What a spool write achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SpoolResult {
    Written,
    /// Over the spool's cap: nothing written, the needs-import marker says so.
    OverCap,
    Failed(String),
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    AskWatermark,
    /// Post this `/hooks/transcript` body; answer with [`Event::Shipped`].
    Send {
        generation: u64,
        body: String,
    },
    /// Post this lifecycle request; answer with [`Event::Posted`].
    Post(Hook),
    /// Append this record to the transcript spool (`refused`: to the refused-lines file);
    /// answer with [`Event::LinesSpooled`] with the same `refused`.
    SpoolLines {
        batch: TranscriptBatch,
        /// The record holds a line the server refused (not the outbox's next batch): it goes
        /// to `refused/`, never to the transcript spool a replay would post it from again.
        refused: bool,
    },
    /// Append this request to the hook spool; answer with [`Event::HookSpooled`].
    SpoolHook(Hook),
    /// Move the shipping cursor to this line (the next [`Event::Text`] starts there).
    ReadFrom(u64),
    /// Re-read the token before the next request.
    ReloadToken,
    /// A large backlog drained: give freed memory back.
    TrimMemory,
    /// The server holds more lines than the file: it was rewritten (exit 3).
    Rewritten(&'static str),
    Exit(ExitReason),
}

/// One request kind's progress: in flight, or when to try again.
#[derive(Debug, Default)]
struct Request {
    in_flight: bool,
    retry_at: Option<Ts>,
    backoff: Backoff,
}

impl Request {
    /// No request made yet, retries paced at the settings' (test-only) retry scale.
    fn paced(settings: &Settings) -> Request {
        Request {
            backoff: Backoff::scaled(settings.retry_scale()),
            ..Request::default()
        }
    }

    fn ready(&self, now: Ts) -> bool {
        !self.in_flight && self.retry_at.is_none_or(|t| t <= now)
    }
}

/// Where the watcher is in ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// (signal) waiting for a partial last line to complete.
    WaitPartial,
    /// Shipping what is on disk.
    Ship,
    /// Lines are confirmed: posting the lifecycle requests the end calls for.
    Lifecycle,
    /// Out of time or server: spooling what is left, then the due requests.
    Spool,
}

#[derive(Debug)]
struct Ending {
    reason: ExitReason,
    began: Ts,
    step: Step,
    /// The stop and session end were posted once during the ending.
    posted: bool,
    /// Ship and post until then (`None`: `--once`, bounded by the server's progress).
    ship_until: Option<Ts>,
    /// Gone by then, whatever is left.
    hard_end: Option<Ts>,
}

/// One child's pipeline.
pub(crate) struct Pipeline {
    settings: Settings,
    vendor: String,
    path: PathBuf,
    online: bool,
    once: bool,
    started: Ts,
    /// The role before the identity is settled (command line), then the settled one.
    role: Role,
    identity: Option<Identity>,
    state: State,
    ceiling: Option<Ceiling>,
    file_seen: bool,
    folded_to: u64,
    partial: bool,
    fed_to: u64,
    /// Where shipping starts once known (`None`: waiting for the watermark).
    watermark: Option<Watermark>,
    outbox: Outbox,
    generation: u64,
    watermark_req: Request,
    ship_req: Request,
    /// After a delivery failure the watermark is read once more before the next batch.
    recheck_watermark: bool,
    failing_since: Option<Ts>,
    halvings: u32,
    /// Consecutive refused lines not yet logged: (first, last, status).
    refused: Option<(u64, u64, u16)>,
    unauthorized_logged: bool,
    wrong_path_logged: bool,
    token_refused: bool,
    start_needed: bool,
    start_in_flight: bool,
    stop: StopProgress,
    stop_in_flight: bool,
    session_end: Option<Hook>,
    session_end_in_flight: bool,
    spool_req: Request,
    spool_full_logged: bool,
    spool_failing_logged: bool,
    /// The last answer that moved anything (for `--once`'s stall bound).
    last_progress: Ts,
    trim_when_idle: bool,
    ending: Option<Ending>,
    done: bool,
    /// The shipping cursor must move to `fed_to` before the next text.
    pending_rewind: bool,
    stop_spooled: bool,
    pub(crate) lines_shipped: u64,
    pub(crate) lines_spooled: u64,
    /// Lines the server refused (set aside in `refused/`, or only counted past its cap).
    pub(crate) lines_refused: u64,
    refused_full_logged: bool,
}

impl Pipeline {
    /// A pipeline whose fold already holds `seeded` (`folded_to` complete lines).
    pub(crate) fn new(
        settings: Settings,
        vendor: String,
        path: PathBuf,
        role: Role,
        once: bool,
        started: Ts,
        seeded: Option<(State, u64, bool)>,
    ) -> Pipeline {
        let ceiling = settings
            .lifetime
            .map(|l| Ceiling::new(started, l, settings.max_pause_credit));
        let file_seen = seeded.is_some();
        let (state, folded_to, partial) = seeded.unwrap_or_else(|| (State::new(), 0, false));
        let (watermark_req, ship_req, spool_req) = (
            Request::paced(&settings),
            Request::paced(&settings),
            Request::paced(&settings),
        );
        Pipeline {
            online: settings.server.is_some(),
            settings,
            vendor,
            path,
            once,
            started,
            role,
            identity: None,
            state,
            ceiling,
            file_seen,
            folded_to,
            partial,
            fed_to: 0,
            watermark: None,
            outbox: Outbox::new(0),
            generation: 0,
            watermark_req,
            ship_req,
            recheck_watermark: false,
            failing_since: None,
            halvings: 0,
            refused: None,
            unauthorized_logged: false,
            wrong_path_logged: false,
            token_refused: false,
            start_needed: false,
            start_in_flight: false,
            stop: StopProgress::default(),
            stop_in_flight: false,
            session_end: None,
            session_end_in_flight: false,
            spool_req,
            spool_full_logged: false,
            spool_failing_logged: false,
            last_progress: started,
            trim_when_idle: false,
            ending: None,
            done: false,
            pending_rewind: false,
            stop_spooled: false,
            lines_shipped: 0,
            lines_spooled: 0,
            lines_refused: 0,
            refused_full_logged: false,
        }
    }

    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    pub(crate) fn identity(&self) -> Option<&Identity> {
        self.identity.as_ref()
    }

    pub(crate) fn role(&self) -> Role {
        self.role
    }

    pub(crate) fn watermark(&self) -> Option<Watermark> {
        self.watermark
    }

    /// The line the next [`Event::Text`] must start at, while the pipeline wants more text:
    /// shipping has a start, the outbox has room, and lines are folded that were not fed.
    pub(crate) fn wants_text(&self) -> bool {
        !self.done
            && self.identity.is_some()
            && self.watermark.is_some()
            && self.outbox.has_room()
            && self.fed_to < self.folded_to
    }

    /// Every due time this pipeline acts on, in one place (the decide functions' only caller).
    pub(crate) fn due(&self) -> decide::Due {
        decide::due_times(
            &self.state,
            self.role,
            &self.windows(),
            self.stop,
            self.started,
            self.ceiling.as_ref(),
        )
    }

    fn windows(&self) -> Windows {
        self.settings.windows_for(self.role)
    }

    /// When the pipeline next wants a [`Event::Tick`] (`None`: only events wake it).
    pub(crate) fn next_wake(&self, now: Ts) -> Option<Ts> {
        if self.done {
            return None;
        }
        let mut next: Option<Ts> = None;
        let mut at = |t: Option<Ts>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        if self.identity.is_some() {
            at(self
                .watermark_req
                .retry_at
                .filter(|_| !self.watermark_req.in_flight));
            at(self.ship_req.retry_at.filter(|_| !self.ship_req.in_flight));
            at(self.spool_req.retry_at);
        }
        match &self.ending {
            None => {
                let due = self.due();
                let stop_actionable = !self.stop_in_flight
                    && self.identity.is_some()
                    && self.lines_through_turn_end();
                at(due.subagent_stop.filter(|_| stop_actionable));
                at(due.idle_end);
                at(due.stall_warning);
                at(due.lifetime_ceiling);
            }
            Some(e) => {
                if e.step == Step::WaitPartial {
                    // The shell re-reads the file on each tick.
                    at(Some(
                        now.plus(Duration::from_millis(50))
                            .min(e.began.plus(PARTIAL_LINE_WAIT)),
                    ));
                }
                if e.step != Step::Spool {
                    at(e.ship_until);
                }
                at(e.hard_end);
                if e.ship_until.is_none() && e.step != Step::Spool {
                    at(Some(self.last_progress.plus(ONCE_STALL)));
                }
                if e.step == Step::Lifecycle && self.stop_attempt_wanted() {
                    at(self.due().subagent_stop);
                }
            }
        }
        next
    }

    /// Handles one event at `now`; the actions are to be performed in order.
    pub(crate) fn handle(&mut self, event: Event, now: Ts) -> Vec<Action> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        match event {
            Event::Folded { lines, partial } => {
                self.file_seen = true;
                self.partial = partial;
                for line in &lines {
                    if let Some(observed) = line.observed() {
                        self.state.apply(observed, now);
                    }
                    self.folded_to = line.number + 1;
                }
            }
            Event::Identified {
                identity,
                offline_resume,
            } => self.on_identified(identity, offline_resume),
            Event::Text { lines, next } => self.on_text(lines, next),
            Event::Moved(path) => {
                info!(event = "rollout_archived", path = %path.display(), "rollout archived by Codex; following it at {}", path.display());
                self.path = path;
            }
            Event::Watermark(result) => self.on_watermark(result, now),
            Event::Shipped { generation, result } => {
                if generation == self.generation {
                    self.on_shipped(result, now, &mut out);
                }
            }
            Event::Posted { hook, result } => self.on_posted(hook, result, now, &mut out),
            Event::LinesSpooled { refused, result } => self.on_lines_spooled(refused, result, now),
            Event::HookSpooled { hook, result } => self.on_hook_spooled(&hook, result, now),
            Event::Tick => {}
            Event::Signal(name) => self.begin_ending(ExitReason::Signal(name), now),
            Event::ParentExited => self.begin_ending(ExitReason::ParentExited, now),
        }
        self.step(now, &mut out);
        out
    }

    fn on_identified(&mut self, identity: Identity, offline_resume: u64) {
        self.role = identity.role;
        self.identity = Some(identity);
        if !self.online {
            let watermark = match offline_resume.checked_sub(1) {
                Some(n) => Watermark::Line(n),
                None => Watermark::Empty,
            };
            self.resume_at(watermark);
        }
    }

    /// Shipping (re)starts at the watermark's resume line.
    fn resume_at(&mut self, watermark: Watermark) {
        let resume = watermark.resume_line();
        self.watermark = Some(watermark);
        self.generation += 1;
        self.ship_req.in_flight = false;
        self.ship_req.retry_at = None;
        self.halvings = 0;
        self.outbox.rewind(resume);
        self.fed_to = resume;
        self.pending_rewind = true;
    }

    fn on_text(&mut self, lines: Vec<Line>, next: u64) {
        let confirmed = self.outbox.confirmed_to();
        for line in &lines {
            if line.number < confirmed || line.blank {
                continue;
            }
            let text = match &line.text {
                Some(t) if !line.oversize => redactor().redact_line(t),
                _ => crate::ship::redact::oversize_placeholder(line.len),
            };
            self.outbox.push(ShipLine::new(line.number, &text));
        }
        self.fed_to = self.fed_to.max(next);
        // Blank lines between shipped ones are confirmed with them.
        self.outbox.skip_to(self.fed_to);
    }

    fn on_watermark(&mut self, result: Result<Watermark, Failure>, now: Ts) {
        self.watermark_req.in_flight = false;
        match result {
            Ok(w) => {
                self.last_progress = now;
                self.watermark_req.backoff.reset();
                self.watermark_req.retry_at = None;
                let resume = w.resume_line();
                info!(
                    event = "watermark",
                    resume_line = resume,
                    "server watermark: resume at line {resume}"
                );
                let first = self.watermark.is_none();
                self.recheck_watermark = false;
                if first {
                    self.resume_at(w);
                    if w == Watermark::NotFound && self.role == Role::Child {
                        self.start_needed = true;
                    }
                } else if resume < self.outbox.confirmed_to() {
                    // The server lost lines it had acknowledged: resend from its resume line,
                    // once per healed failure (a server that skips trailing lines would
                    // otherwise make this loop forever).
                    warn!(
                        event = "watermark",
                        resume_line = resume,
                        acknowledged_to = self.outbox.confirmed_to(),
                        "server is behind what it acknowledged; resending from line {resume}"
                    );
                    self.resume_at(w);
                }
            }
            Err(f) => {
                let delay = self.failure_delay(&f, |p| &mut p.watermark_req);
                warn!(event = "ship_failed", what = "watermark", status = f.status(), error = %f, retry_in_ms = delay.as_millis() as u64, "failed to read the watermark: {f}; retrying in {delay:?}");
                self.watermark_req.retry_at = Some(now.plus(delay));
                if self.watermark.is_some() {
                    // The check before resending failed: no batch goes out until it answers.
                    self.recheck_watermark = true;
                }
            }
        }
    }

    /// The wait before retrying after `f`, with its one-time logs.
    fn failure_delay(
        &mut self,
        f: &Failure,
        req: impl Fn(&mut Pipeline) -> &mut Request,
    ) -> Duration {
        match f {
            Failure::Unauthorized { status, .. } => {
                if !self.unauthorized_logged {
                    // `f` says whether a token was refused or none was sent.
                    error!(
                        event = "ship_failed",
                        status, "{f}; keeping every line, re-reading the token every 60 s"
                    );
                    self.unauthorized_logged = true;
                }
                self.token_refused = true;
                self.settings.paced(UNAUTHORIZED_RETRY)
            }
            Failure::WrongPath { status, url } => {
                if !self.wrong_path_logged {
                    error!(event = "wrong_server_path", status, url = %url, "no kcap server answers at {url} (HTTP {status}): check the path in KCAP_URL; keeping every line and retrying");
                    self.wrong_path_logged = true;
                }
                req(self).backoff.next_delay(None)
            }
            Failure::Transient { retry_after, .. } => req(self).backoff.next_delay(*retry_after),
            Failure::Rejected { .. } => req(self).backoff.next_delay(None),
        }
    }

    fn on_shipped(&mut self, result: Result<(), Failure>, now: Ts, out: &mut Vec<Action>) {
        self.ship_req.in_flight = false;
        match result {
            Ok(()) => {
                self.last_progress = now;
                self.failing_since = None;
                self.unauthorized_logged = false;
                self.wrong_path_logged = false;
                self.ship_req.backoff.reset();
                self.ship_req.retry_at = None;
                self.halvings = 0;
                if let Some(b) = self.outbox.delivered() {
                    // A backlog leaves the allocator holding its peak; hand it back once the
                    // outbox drains (an idle watcher should stay small). `memory` trims once
                    // enough was shipped, counted over every child of the process.
                    crate::platform::memory::note_shipped(b.bytes());
                    self.trim_when_idle = true;
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
                self.outbox.skip_to(self.fed_to);
                self.flush_refused_log();
            }
            Err(Failure::Rejected {
                status,
                body_snippet,
            }) => match self.outbox.refused() {
                Some(Refusal::Split) => {
                    self.halvings += 1;
                    if self.halvings == 1 {
                        warn!(
                            event = "ship_failed",
                            status,
                            "the server refused a batch (HTTP {status}: {body_snippet}); halving it to find the lines it refuses"
                        );
                    }
                    if self.halvings > FREE_HALVINGS {
                        let delay = self.ship_req.backoff.next_delay(None);
                        self.ship_req.retry_at = Some(now.plus(delay));
                    }
                }
                Some(Refusal::Isolated(line)) => {
                    let n = line.number;
                    match self.refused {
                        Some((first, last, s)) if last + 1 == n || s == status && last < n => {
                            self.refused = Some((first, n, s));
                        }
                        _ => {
                            self.flush_refused_log();
                            self.refused = Some((n, n, status));
                        }
                    }
                    self.spool_refused(line, out);
                    if self.halvings >= FREE_HALVINGS {
                        let delay = self.ship_req.backoff.next_delay(None);
                        self.ship_req.retry_at = Some(now.plus(delay));
                    }
                }
                None => {}
            },
            Err(f) => {
                // Once per failure streak (never in a loop): the watermark is read again
                // before the next attempt.
                if self.failing_since.is_none() {
                    self.recheck_watermark = true;
                }
                self.failing_since.get_or_insert(now);
                let delay = self.failure_delay(&f, |p| &mut p.ship_req);
                if !matches!(f, Failure::Unauthorized { .. } | Failure::WrongPath { .. }) {
                    warn!(event = "ship_failed", status = f.status(), error = %f, retry_in_ms = delay.as_millis() as u64, "failed to ship lines: {f}; retrying in {delay:?}");
                }
                self.ship_req.retry_at = Some(now.plus(delay));
            }
        }
    }

    fn flush_refused_log(&mut self) {
        if let Some((first, last, status)) = self.refused.take() {
            // No line was delivered between `first` and `last`: the whole range was refused.
            let which = if first == last {
                format!("line {first}")
            } else {
                format!("lines {first}..={last}")
            };
            error!(
                event = "ship_failed",
                status,
                first,
                last,
                "the server refuses {which} (HTTP {status}); set aside in refused/ and going on"
            );
        }
    }

    /// A refused line is set aside in `refused/` (it counts as handed over: the server will not
    /// take it, a person or an import may).
    fn spool_refused(&mut self, line: ShipLine, out: &mut Vec<Action>) {
        if let Some(batch) = self.batch_of(std::slice::from_ref(&line)) {
            out.push(Action::SpoolLines {
                batch,
                refused: true,
            });
        }
    }

    fn batch_of(&self, lines: &[ShipLine]) -> Option<TranscriptBatch> {
        let id = self.identity.as_ref()?;
        Some(TranscriptBatch {
            session_id: id.session_id.clone()?,
            agent_id: id.agent_id.clone(),
            vendor: self.vendor.clone(),
            lines: lines.iter().map(ShipLine::text).collect(),
            line_numbers: lines.iter().map(|l| l.number).collect(),
        })
    }

    fn on_lines_spooled(&mut self, refused: bool, result: SpoolResult, now: Ts) {
        if refused {
            // A refused line's record (set aside in `refused/`, S4.1): the line is skipped
            // either way, already logged with its number; past the file's cap it is only
            // counted.
            self.lines_refused += 1;
            match result {
                SpoolResult::Written => {}
                SpoolResult::OverCap => {
                    if !self.refused_full_logged {
                        error!(
                            event = "refused_full",
                            "the refused-lines file of session {} is full (8 MiB); further refused lines are only counted",
                            self.session_id()
                        );
                        self.refused_full_logged = true;
                    }
                }
                SpoolResult::Failed(e) => {
                    error!(event = "spooled", "failed to set a refused line aside: {e}");
                }
            }
            return;
        }
        self.spool_req.in_flight = false;
        let session = self.session_id().to_owned();
        match result {
            SpoolResult::Written => {
                self.last_progress = now;
                self.spool_req.backoff.reset();
                self.spool_req.retry_at = None;
                self.spool_failing_logged = false;
                if let Some(b) = self.outbox.delivered() {
                    self.lines_spooled += b.lines.len() as u64;
                    info!(
                        event = "spooled",
                        first = b.first(),
                        last = b.last(),
                        count = b.lines.len(),
                        "spooled lines {}..={}",
                        b.first(),
                        b.last()
                    );
                }
                self.outbox.skip_to(self.fed_to);
            }
            SpoolResult::OverCap => {
                // The needs-import marker hands these lines to an import of the whole file.
                if let Some(b) = self.outbox.delivered()
                    && !self.spool_full_logged
                {
                    error!(event = "spooled", session = %session, first_line = b.first(), "transcript spool for session {session} is full (8 MiB); line {} and later were not kept (needs-import written)", b.first());
                    self.spool_full_logged = true;
                }
                self.outbox.skip_to(self.fed_to);
            }
            SpoolResult::Failed(e) => {
                let first = self.outbox.in_flight().map(|b| b.first()).unwrap_or(0);
                let delay = self.spool_req.backoff.next_delay(None);
                if !self.spool_failing_logged {
                    error!(event = "spool_failed", session = %session, first_line = first, retry_in_ms = delay.as_millis() as u64, "failed to spool lines of session {session}: {e}; line {first} and later are not kept yet, retrying in {delay:?}");
                    self.spool_failing_logged = true;
                }
                self.spool_req.retry_at = Some(now.plus(delay));
            }
        }
    }

    fn on_posted(
        &mut self,
        hook: Hook,
        result: Result<(), Failure>,
        now: Ts,
        out: &mut Vec<Action>,
    ) {
        match (&hook, result) {
            (Hook::SubagentStart(_), result) => {
                self.start_in_flight = false;
                self.start_needed = false;
                match result {
                    Ok(()) => info!(
                        event = "subagent_start_posted",
                        "posted subagent-start (no stream existed)"
                    ),
                    Err(f) => {
                        warn!(event = "subagent_start_failed", error = %f, "failed to post subagent-start: {f}; spooling it");
                        out.push(Action::SpoolHook(hook.clone()));
                    }
                }
            }
            (Hook::SubagentStop(_), Ok(())) => {
                self.stop_in_flight = false;
                self.stop.posted = true;
                info!(event = "subagent_stop_posted", "posted subagent-stop");
            }
            (Hook::SubagentStop(_), Err(f)) => {
                self.stop_in_flight = false;
                if let Failure::Unauthorized { .. } = f {
                    self.token_refused = true;
                }
                warn!(event = "subagent_stop_failed", status = f.status(), error = %f, "failed to post subagent-stop: {f}; retrying in {:?}", self.settings.stop_retry);
                self.stop.next_attempt = Some(now.plus(self.settings.stop_retry));
            }
            (Hook::SessionEnd(_), result) => {
                self.session_end_in_flight = false;
                match result {
                    Ok(()) => {
                        info!(event = "session_end_posted", "posted session-end");
                        self.session_end = None;
                    }
                    Err(f) => {
                        warn!(event = "session_end_failed", error = %f, "failed to post session-end: {f}; spooling it");
                        if let Some(h) = self.session_end.take() {
                            out.push(Action::SpoolHook(h));
                        }
                    }
                }
            }
        }
    }

    fn on_hook_spooled(&mut self, hook: &Hook, result: SpoolResult, now: Ts) {
        let route = hook.route();
        let session = self.session_id().to_owned();
        if let (Hook::SubagentStop(_), false) = (hook, result == SpoolResult::Written) {
            // Tried again at the next attempt time (and at the end).
            self.stop.next_attempt = Some(now.plus(self.settings.stop_retry));
        }
        match result {
            SpoolResult::Written => {
                info!(event = "spooled", route, "spooled {route} request");
                if let Hook::SubagentStop(_) = hook {
                    self.stop.posted = true;
                    self.stop_spooled = true;
                }
                if let Hook::SessionEnd(_) = hook {
                    self.session_end = None;
                }
            }
            SpoolResult::OverCap => {
                error!(
                    event = "spooled",
                    route, "hook spool is full; {route} request for session {session} not kept"
                );
            }
            SpoolResult::Failed(e) => {
                error!(
                    event = "spooled",
                    route, "failed to spool {route} request for session {session}: {e}"
                );
            }
        }
    }

    fn session_id(&self) -> &str {
        self.identity
            .as_ref()
            .and_then(|i| i.session_id.as_deref())
            .unwrap_or("")
    }

    /// Every line through the turn's end is stored by the server or written to the spool:
    /// only then may a lifecycle request go out (never ahead of its transcript).
    fn lines_through_turn_end(&self) -> bool {
        match self.state.turn_end_line {
            Some(end) => self.watermark.is_some() && self.outbox.confirmed_to() > end,
            None => true,
        }
    }

    /// Every complete line folded is confirmed.
    fn all_confirmed(&self) -> bool {
        self.watermark.is_some()
            && self.outbox.is_idle()
            && self.fed_to >= self.folded_to
            && self.outbox.confirmed_to() >= self.folded_to.min(self.fed_to)
    }

    fn stop_attempt_wanted(&self) -> bool {
        self.role == Role::Child && !self.stop.posted && !self.stop_in_flight
    }

    fn stop_hook(&self) -> Hook {
        let id = self.identity.as_ref();
        let message = self.state.stop_message();
        let redacted = redactor().redact_text(&message);
        Hook::SubagentStop(subagent_stop_body(
            id.and_then(|i| i.session_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_type.as_deref())
                .unwrap_or("subagent"),
            &self.path,
            truncate_utf8(&redacted, MAX_STOP_MESSAGE),
        ))
    }

    fn start_hook(&self) -> Hook {
        let id = self.identity.as_ref();
        Hook::SubagentStart(subagent_start_body(
            id.and_then(|i| i.session_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_type.as_deref())
                .unwrap_or("subagent"),
            &self.path,
        ))
    }

    /// A due stop: posted online (off the loop), spooled offline.
    fn attempt_stop(&mut self, out: &mut Vec<Action>) {
        let hook = self.stop_hook();
        if self.online && !self.spooling() {
            self.stop_in_flight = true;
            self.reload_if_refused(out);
            out.push(Action::Post(hook));
        } else {
            out.push(Action::SpoolHook(hook));
            // Written or not, the answer comes back synchronously; a failed spool is retried
            // at the next attempt time.
            self.stop.next_attempt = None;
        }
    }

    /// After a `401`/`403` the token is re-read right before the next request: re-read at the
    /// refusal, a token the kcap CLI refreshed during the minute's wait would be missed.
    fn reload_if_refused(&mut self, out: &mut Vec<Action>) {
        if std::mem::take(&mut self.token_refused) {
            out.push(Action::ReloadToken);
        }
    }

    fn spooling(&self) -> bool {
        !self.online || self.ending.as_ref().is_some_and(|e| e.step == Step::Spool)
    }

    fn begin_ending(&mut self, reason: ExitReason, now: Ts) {
        if let Some(e) = &mut self.ending {
            // A signal during `--once` bounds it like any shutdown.
            if matches!(reason, ExitReason::Signal(_)) && e.hard_end.is_none() {
                e.ship_until = Some(now.plus(SHIP_UNTIL));
                e.hard_end = Some(now.plus(SHUTDOWN_BUDGET));
            }
            return;
        }
        let signal = matches!(reason, ExitReason::Signal(_));
        if let (ExitReason::IdleTimeout | ExitReason::ParentExited, Role::Session) =
            (&reason, self.role)
            && self.identity.is_some()
        {
            let id = self.identity.as_ref();
            let why = if reason == ExitReason::IdleTimeout {
                SessionEndReason::IdleTimeout
            } else {
                SessionEndReason::ParentExited
            };
            self.session_end = Some(Hook::SessionEnd(session_end_body(
                self.session_id(),
                &self.path,
                id.and_then(|i| i.cwd.as_deref()).unwrap_or(""),
                why,
                now,
            )));
        }
        let once = reason == ExitReason::OnceDone;
        // `--once` is bounded by the server's progress from here on.
        self.last_progress = now;
        self.ending = Some(Ending {
            reason,
            began: now,
            step: if signal {
                Step::WaitPartial
            } else {
                Step::Ship
            },
            posted: false,
            ship_until: (!once).then(|| now.plus(SHIP_UNTIL)),
            hard_end: (!once).then(|| now.plus(SHUTDOWN_BUDGET)),
        });
    }

    /// Moves everything that moves without waiting.
    fn step(&mut self, now: Ts, out: &mut Vec<Action>) {
        if self.pending_rewind {
            self.pending_rewind = false;
            out.push(Action::ReadFrom(self.fed_to));
        }
        if let Some(Watermark::Line(n)) = self.watermark
            && self.online
            && self.file_seen
            && n.saturating_add(1) > self.folded_to
        {
            self.done = true;
            out.push(Action::Rewritten(
                "the server holds more lines than the file",
            ));
            return;
        }
        if self.ending.is_none() {
            self.decide(now, out);
        }
        if self.ending.is_some() {
            self.advance_ending(now, out);
            if self.done {
                return;
            }
        }
        self.requests(now, out);
        if self.outbox.is_idle() && std::mem::take(&mut self.trim_when_idle) {
            out.push(Action::TrimMemory);
        }
    }

    /// The lifecycle decisions while running.
    fn decide(&mut self, now: Ts, out: &mut Vec<Action>) {
        let due = self.due();
        if due.stall_warning.is_some_and(|t| t <= now) {
            self.warn_stall(now);
        }
        if due.subagent_stop.is_some_and(|t| t <= now)
            && !self.stop_in_flight
            && self.identity.is_some()
            && self.lines_through_turn_end()
        {
            self.attempt_stop(out);
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
                        info!(event = "pause_extension_granted", grant_ms = g.grant.as_millis() as u64, total_granted_ms = g.total_granted.as_millis() as u64, remaining_cap_ms = g.remaining_cap.as_millis() as u64, grant_count = g.grant_count, pause = %pause, "lifetime ceiling extended by {}ms of usage-limit pause credit", g.grant.as_millis());
                    }
                    CeilingStep::Fire => {
                        let msg = c.exit_message(&self.state.pauses, now);
                        info!(event = "lifetime_ceiling", "{msg}");
                        self.begin_ending(ExitReason::LifetimeCeiling(msg), now);
                        return;
                    }
                }
            }
        }
        if due.idle_end.is_some_and(|t| t <= now) {
            let reason = match self.role {
                Role::Child => ExitReason::IdleReap,
                Role::Session => ExitReason::IdleTimeout,
            };
            let quiet = now.duration_since(self.state.idle_since(self.started));
            info!(
                event = "idle_end",
                reason = reason.as_str(),
                idle_ms = quiet.as_millis() as u64,
                "no activity for {quiet:?}; ending"
            );
            self.begin_ending(reason, now);
        }
    }

    /// `--once`: the lines on disk are all folded; ship them, decide once, end.
    pub(crate) fn begin_once(&mut self, now: Ts) {
        self.begin_ending(ExitReason::OnceDone, now);
    }

    fn warn_stall(&mut self, now: Ts) {
        let silence = now.duration_since(self.state.last_activity.unwrap_or(self.started));
        let last_kind = self
            .state
            .last_kind
            .map(|(k, p, m)| format!("{k:?}/{p:?}{}", if m { " (malformed)" } else { "" }))
            .unwrap_or_else(|| "none".into());
        warn!(event = "stall_detected", turn_id = self.state.turn_id.as_deref().unwrap_or(""), silence_ms = silence.as_millis() as u64, last_line_kind = %last_kind, "turn {} has been silent for {:?} with no tool in flight (last line: {last_kind})", self.state.turn_id.as_deref().unwrap_or("?"), silence);
        self.state.stalled = true;
    }

    /// The ending's steps: wait for a partial line, ship, post, spool, exit.
    fn advance_ending(&mut self, now: Ts, out: &mut Vec<Action>) {
        if self.identity.is_none() {
            // Nothing to ship or post without a key.
            self.finish(out);
            return;
        }
        loop {
            let Some(e) = &self.ending else { return };
            let (began, step, hard_end) = (e.began, e.step, e.hard_end);
            let out_of_time = match e.ship_until {
                Some(t) => now >= t,
                None => now >= self.last_progress.plus(ONCE_STALL),
            };
            let next = match step {
                Step::WaitPartial if !self.partial || now >= began.plus(PARTIAL_LINE_WAIT) => {
                    Step::Ship
                }
                // Offline too: a spool that keeps failing must not hold the end forever.
                Step::WaitPartial | Step::Ship if out_of_time => Step::Spool,
                Step::WaitPartial => break,
                Step::Ship if self.all_confirmed() => {
                    if self.once {
                        self.decide_once(now);
                    }
                    Step::Lifecycle
                }
                Step::Ship => break,
                Step::Lifecycle if !self.online => Step::Spool,
                Step::Lifecycle => {
                    if !self.ending.as_ref().is_some_and(|e| e.posted) {
                        self.post_owed_hooks(now, out);
                    }
                    let pending = self.stop_in_flight || self.session_end_in_flight;
                    if !pending && !self.stop_owed(now) && self.session_end.is_none() {
                        self.finish(out);
                        return;
                    }
                    if !pending || out_of_time {
                        // Failed (or out of time): the spool step keeps what is owed.
                        Step::Spool
                    } else {
                        break;
                    }
                }
                Step::Spool => {
                    if self.all_confirmed() {
                        self.spool_owed_hooks(now, out);
                        self.finish(out);
                        return;
                    }
                    if hard_end.is_some_and(|t| now >= t) {
                        error!(event = "shutdown_budget_spent", session = %self.session_id(), first_line = self.outbox.confirmed_to(), "shutdown budget spent; lines from {} of session {} are not kept", self.outbox.confirmed_to(), self.session_id());
                        self.finish(out);
                        return;
                    }
                    break;
                }
            };
            if next == Step::Spool {
                self.enter_spool(now, out);
            }
            if let Some(e) = &mut self.ending {
                e.step = next;
            }
        }
    }

    /// From here on, whatever the server did not confirm goes to the spool; without a
    /// watermark everything does (resending is harmless, losing a line is not). Requests in
    /// flight are abandoned (their answers are ignored).
    fn enter_spool(&mut self, now: Ts, out: &mut Vec<Action>) {
        if let Some(e) = &mut self.ending
            && e.hard_end.is_none()
        {
            // `--once`: a spool that keeps failing does not keep it alive either.
            e.hard_end = Some(now.plus(SHUTDOWN_BUDGET - SHIP_UNTIL));
        }
        if self.watermark.is_none() {
            self.resume_at(Watermark::Empty);
            self.pending_rewind = false;
            out.push(Action::ReadFrom(self.fed_to));
        } else {
            let confirmed = self.outbox.confirmed_to();
            let unconfirmed = self.outbox.take_unconfirmed();
            self.outbox.rewind(confirmed);
            for l in unconfirmed {
                self.outbox.push(l);
            }
            self.generation += 1;
            self.ship_req = Request::default();
        }
        self.stop_in_flight = false;
        self.session_end_in_flight = false;
    }

    /// Online, once every line is confirmed: the stop (due, or owed at this exit) and the
    /// session end, one attempt each within the budget.
    fn post_owed_hooks(&mut self, now: Ts, out: &mut Vec<Action>) {
        if let Some(e) = &mut self.ending {
            e.posted = true;
        }
        if self.stop_owed(now) && !self.stop_in_flight {
            self.stop_in_flight = true;
            self.reload_if_refused(out);
            out.push(Action::Post(self.stop_hook()));
        }
        if let Some(h) = &self.session_end {
            self.session_end_in_flight = true;
            out.push(Action::Post(h.clone()));
        }
    }

    /// `--once`, after delivering: every decision once at `now`.
    fn decide_once(&mut self, now: Ts) {
        let due = self.due();
        if due.stall_warning.is_some_and(|t| t <= now) {
            self.warn_stall(now);
        }
        if self.role == Role::Session && due.idle_end.is_some_and(|t| t <= now) {
            if let Some(e) = &mut self.ending {
                e.reason = ExitReason::IdleTimeout;
            }
            self.session_end = Some(Hook::SessionEnd(session_end_body(
                self.session_id(),
                &self.path,
                self.identity
                    .as_ref()
                    .and_then(|i| i.cwd.as_deref())
                    .unwrap_or(""),
                SessionEndReason::IdleTimeout,
                now,
            )));
        }
    }

    /// Whether a stop is due now (or owed at this exit, R4.4) and not acknowledged: the one
    /// place the exit consults the lifecycle decisions.
    fn stop_owed(&self, now: Ts) -> bool {
        let end = match self.ending.as_ref().map(|e| &e.reason) {
            Some(ExitReason::IdleReap | ExitReason::IdleTimeout) => decide::WatcherEnd::Idle,
            Some(ExitReason::LifetimeCeiling(_)) => decide::WatcherEnd::LifetimeCeiling,
            Some(ExitReason::ParentExited) => decide::WatcherEnd::ParentExited,
            Some(ExitReason::Signal(_)) => decide::WatcherEnd::Signal,
            Some(ExitReason::OnceDone) | None => decide::WatcherEnd::OnceDone,
        };
        decide::stop_owed_at_exit(
            &self.state,
            self.role,
            self.windows().stop_grace,
            self.stop,
            end,
            now,
        )
        .is_some()
    }

    /// At the very end: the due stop and the session end go to the hook spool, but only when
    /// their lines are handed over (never a lifecycle request ahead of its transcript).
    fn spool_owed_hooks(&mut self, now: Ts, out: &mut Vec<Action>) {
        if self.stop_owed(now) {
            if self.lines_through_turn_end() {
                out.push(Action::SpoolHook(self.stop_hook()));
            } else {
                error!(event = "spooled", session = %self.session_id(), "the due subagent-stop is not spooled: the lines before it are not kept");
            }
        }
        if let Some(h) = self.session_end.clone() {
            out.push(Action::SpoolHook(h));
        }
    }

    fn finish(&mut self, out: &mut Vec<Action>) {
        self.flush_refused_log();
        let reason = self
            .ending
            .as_ref()
            .map(|e| e.reason.clone())
            .unwrap_or(ExitReason::OnceDone);
        info!(
            event = "watcher_exiting",
            reason = reason.as_str(),
            "watcher exiting ({})",
            reason.as_str()
        );
        self.done = true;
        out.push(Action::Exit(reason));
    }

    /// Requests: the watermark, subagent-start, the next batch (or spool record), lifecycle
    /// posts queued by the ending.
    fn requests(&mut self, now: Ts, out: &mut Vec<Action>) {
        if self.identity.is_none() {
            return;
        }
        let spooling = self.spooling();
        if self.online && !spooling {
            // After a failure, the check waits for the batch's own retry time.
            let wants_watermark = self.watermark.is_none()
                || (self.recheck_watermark && self.ship_req.retry_at.is_none_or(|t| t <= now));
            if wants_watermark && self.watermark_req.ready(now) {
                self.watermark_req.in_flight = true;
                self.watermark_req.retry_at = None;
                self.reload_if_refused(out);
                out.push(Action::AskWatermark);
            }
            if self.start_needed && !self.start_in_flight {
                self.start_in_flight = true;
                out.push(Action::Post(self.start_hook()));
            }
            if self.watermark.is_none() || self.recheck_watermark || self.start_needed {
                return;
            }
            if self.ship_req.ready(now) {
                let session = self.session_id().to_owned();
                let agent = self.agent_id().map(str::to_owned);
                let body = match self.outbox.in_flight() {
                    Some(b) => Some(b.body(&session, agent.as_deref(), &self.vendor)),
                    None => self
                        .outbox
                        .next_batch()
                        .map(|b| b.body(&session, agent.as_deref(), &self.vendor)),
                };
                if let Some(body) = body {
                    self.ship_req.in_flight = true;
                    self.ship_req.retry_at = None;
                    self.reload_if_refused(out);
                    out.push(Action::Send {
                        generation: self.generation,
                        body,
                    });
                }
            }
        } else if self.watermark.is_some() && self.spool_req.ready(now) {
            // Offline, and at the end: each line goes to the spool as soon as it is read. The
            // answer comes back synchronously, so one record at a time.
            let batch = match self.outbox.in_flight() {
                Some(b) => Some(b.lines.clone()),
                None => self.outbox.next_batch().map(|b| b.lines.clone()),
            };
            if let Some(lines) = batch
                && let Some(record) = self.batch_of(&lines)
            {
                self.spool_req.in_flight = true;
                self.spool_req.retry_at = None;
                out.push(Action::SpoolLines {
                    batch: record,
                    refused: false,
                });
            }
        }
    }

    fn agent_id(&self) -> Option<&str> {
        self.identity.as_ref().and_then(|i| i.agent_id.as_deref())
    }

    /// What became of the stop, for `--once`'s summary.
    pub(crate) fn stop_summary(&self, now: Ts) -> Option<String> {
        match (self.role, self.stop.posted) {
            (Role::Child, true) if !self.stop_spooled => Some("posted".into()),
            (Role::Child, true) => Some("spooled".into()),
            (Role::Child, false) => Some(match self.due().subagent_stop {
                Some(t) if t <= now => "due, not delivered".into(),
                Some(t) => format!("not due until {t}"),
                None => format!("not due (turn {})", self.state.turn.as_str()),
            }),
            (Role::Session, _) => None,
        }
    }
}

/// The shared redactor, compiled when the first line is shipped rather than when a pipeline is
/// made: an idle watcher (or a supervisor of idle children) never pays for the compiled rules.
fn redactor() -> &'static Redactor {
    crate::ship::redact::global()
}

#[cfg(test)]
mod tests {
    //! Each numbered case of issue 11 replayed against the pipeline with injected time: the
    //! driver below plays the shell (spool writes and cursor moves answered at once, requests
    //! left for the test to answer).

    use super::*;
    use crate::rollout::Classifier;
    use crate::rollout::lines::LineCursor;
    use crate::ship::LINE_LIMIT;
    use std::collections::VecDeque;

    fn meta() -> String {
        r#"{"type":"session_meta","payload":{"id":"019fa981-6ea2-7b02-8d11-5c2e9f7a4b02","session_id":"019fa981-2dca-7a31-9c55-3b1f0e6d2a01","thread_source":"subagent","agent_nickname":"Hypatia"}}"#.into()
    }

    fn ev(payload: &str) -> String {
        format!(r#"{{"type":"event_msg","payload":{payload}}}"#)
    }

    fn started() -> String {
        ev(r#"{"type":"task_started","turn_id":"t1"}"#)
    }

    fn complete() -> String {
        ev(r#"{"type":"task_complete","turn_id":"t1","last_agent_message":"done"}"#)
    }

    fn t0() -> Ts {
        Ts::parse_rfc3339("2026-07-28T10:00:00Z").unwrap()
    }

    /// The test's shell.
    struct Driver {
        p: Pipeline,
        now: Ts,
        file: Vec<u8>,
        fold: LineCursor,
        ship: LineCursor,
        /// Spool writes fail while set.
        spool_fails: bool,
        spooled_lines: Vec<u64>,
        spooled_hooks: Vec<&'static str>,
        /// Everything that happened, in order, as short labels.
        log: Vec<String>,
    }

    impl Driver {
        fn new(online: bool, once: bool, lines: &[String]) -> Driver {
            let mut settings = Settings::with_defaults(PathBuf::from("/nonexistent"));
            settings.server = online.then(|| "http://127.0.0.1:9".to_string());
            let p = Pipeline::new(
                settings,
                "codex".into(),
                PathBuf::from("/r/rollout.jsonl"),
                Role::Session,
                once,
                t0(),
                None,
            );
            let mut d = Driver {
                p,
                now: t0(),
                file: Vec::new(),
                fold: LineCursor::fold(0, 0, LINE_LIMIT, Classifier::without_timestamps()),
                ship: LineCursor::text(0, 0, LINE_LIMIT),
                spool_fails: false,
                spooled_lines: Vec::new(),
                spooled_hooks: Vec::new(),
                log: Vec::new(),
            };
            d.append(lines);
            d
        }

        fn at(&mut self, secs: f64) {
            self.now = t0().plus(Duration::from_millis((secs * 1000.0) as u64));
        }

        fn append(&mut self, lines: &[String]) -> Vec<Action> {
            for l in lines {
                self.file.extend_from_slice(l.as_bytes());
                self.file.push(b'\n');
            }
            let (got, _) = self.fold.read(&self.file[..], usize::MAX).unwrap();
            self.send(Event::Folded {
                lines: got,
                partial: false,
            })
        }

        fn identify(&mut self, offline_resume: u64) -> Vec<Action> {
            let identity = self.p.state().identity.clone().unwrap();
            self.send(Event::Identified {
                identity,
                offline_resume,
            })
        }

        /// Handles `event`, performs the synchronous actions (and feeds text), returns the
        /// requests and the exit.
        fn send(&mut self, event: Event) -> Vec<Action> {
            let mut queue = VecDeque::from([event]);
            let mut pending = Vec::new();
            loop {
                while let Some(e) = queue.pop_front() {
                    for a in self.p.handle(e, self.now) {
                        match a {
                            Action::SpoolLines { batch, refused } => {
                                let result = if self.spool_fails {
                                    self.log
                                        .push(format!("spool-failed {}", batch.line_numbers[0]));
                                    SpoolResult::Failed("No space left on device".into())
                                } else {
                                    self.log.push(format!(
                                        "spool {}..={}",
                                        batch.line_numbers[0],
                                        batch.line_numbers.last().unwrap()
                                    ));
                                    self.spooled_lines.extend(&batch.line_numbers);
                                    SpoolResult::Written
                                };
                                queue.push_back(Event::LinesSpooled { refused, result });
                            }
                            Action::SpoolHook(hook) => {
                                let result = if self.spool_fails {
                                    SpoolResult::Failed("No space left on device".into())
                                } else {
                                    self.log.push(format!("spool-hook {}", hook.route()));
                                    self.spooled_hooks.push(hook.route());
                                    SpoolResult::Written
                                };
                                queue.push_back(Event::HookSpooled { hook, result });
                            }
                            Action::ReadFrom(n) => {
                                self.ship = LineCursor::text(0, 0, LINE_LIMIT);
                                self.log.push(format!("read-from {n}"));
                            }
                            Action::ReloadToken | Action::TrimMemory => {}
                            other => {
                                self.log.push(label(&other));
                                pending.push(other);
                            }
                        }
                    }
                }
                if self.p.wants_text() && self.ship.line_start() < self.fold.line_start() {
                    let (lines, _) = self.ship.read(&self.file[..], 256).unwrap();
                    let next = self.ship.next_number();
                    queue.push_back(Event::Text { lines, next });
                } else {
                    return pending;
                }
            }
        }

        fn tick(&mut self, secs: f64) -> Vec<Action> {
            self.at(secs);
            self.send(Event::Tick)
        }

        fn index_of(&self, label: &str) -> Option<usize> {
            self.log.iter().position(|l| l.starts_with(label))
        }
    }

    fn label(a: &Action) -> String {
        match a {
            Action::AskWatermark => "ask-watermark".into(),
            Action::Send { body, .. } => {
                let v: serde_json::Value = serde_json::from_str(body).unwrap();
                let n = v["line_numbers"].as_array().unwrap();
                format!("send {}..={}", n[0], n[n.len() - 1])
            }
            Action::Post(h) => format!("post {}", h.route()),
            Action::Exit(r) => format!("exit {}", r.as_str()),
            Action::Rewritten(why) => format!("rewritten {why}"),
            other => format!("{other:?}"),
        }
    }

    fn sent(actions: &[Action]) -> Option<u64> {
        actions.iter().find_map(|a| match a {
            Action::Send { generation, .. } => Some(*generation),
            _ => None,
        })
    }

    fn exits(actions: &[Action]) -> bool {
        actions.iter().any(|a| matches!(a, Action::Exit(_)))
    }

    fn child_turn() -> Vec<String> {
        vec![meta(), started(), complete()]
    }

    /// Case 1: SIGTERM while the first watermark request is in flight. The answer is awaited
    /// within the budget, the transcript is shipped, nothing is spooled, and the stop (due)
    /// goes out only after the transcript.
    #[test]
    fn stopped_during_the_first_watermark_waits_for_it_then_ships_normally() {
        let mut d = Driver::new(true, false, &child_turn());
        assert!(d.identify(0).contains(&Action::AskWatermark));
        // Long after the turn ended: the stop is due at the first chance.
        d.at(600.0);
        let a = d.send(Event::Signal("SIGTERM"));
        assert!(a.is_empty(), "nothing before the watermark: {a:?}");
        d.at(600.3);
        let a = d.send(Event::Watermark(Ok(Watermark::Empty)));
        let generation = sent(&a).expect("the transcript goes out");
        assert_eq!(d.log.last().unwrap(), "send 0..=2");
        d.at(600.4);
        let a = d.send(Event::Shipped {
            generation,
            result: Ok(()),
        });
        assert!(
            a.iter()
                .any(|a| matches!(a, Action::Post(Hook::SubagentStop(_))))
        );
        d.at(600.5);
        let stop = d.p.stop_hook();
        let a = d.send(Event::Posted {
            hook: stop,
            result: Ok(()),
        });
        assert!(exits(&a));
        assert!(
            d.spooled_lines.is_empty() && d.spooled_hooks.is_empty(),
            "{:?}",
            d.log
        );
        assert!(d.index_of("send").unwrap() < d.index_of("post subagent-stop").unwrap());
    }

    /// Case 1, the parent already dead at start: the same (parent exit is not a signal, so no
    /// partial-line wait, but the same budget), and the stop it owes (R4.4) after the lines.
    #[test]
    fn a_dead_parent_at_start_still_ships_before_ending() {
        let mut d = Driver::new(true, false, &child_turn());
        d.identify(0);
        d.send(Event::ParentExited);
        let a = d.send(Event::Watermark(Ok(Watermark::Line(0))));
        let generation = sent(&a).unwrap();
        assert_eq!(d.log.last().unwrap(), "send 1..=2");
        let a = d.send(Event::Shipped {
            generation,
            result: Ok(()),
        });
        let stop = d.p.stop_hook();
        assert!(a.contains(&Action::Post(stop.clone())), "{:?}", d.log);
        let a = d.send(Event::Posted {
            hook: stop,
            result: Ok(()),
        });
        assert!(exits(&a), "{:?}", d.log);
        assert!(d.spooled_lines.is_empty() && d.spooled_hooks.is_empty());
    }

    /// Case 2: offline, a failed spool write confirms nothing, is retried with backoff, and
    /// the due stop is not spooled ahead of its lines.
    #[test]
    fn a_failed_spool_write_keeps_the_lines_and_holds_the_stop() {
        let mut d = Driver::new(false, false, &[]);
        d.spool_fails = true;
        d.append(&child_turn());
        d.identify(0);
        let attempts = |d: &Driver| d.log.iter().filter(|l| l.starts_with("spool")).count();
        assert_eq!(attempts(&d), 1, "{:?}", d.log);
        // Before the retry time nothing is tried again; the stop waits even when due.
        d.tick(0.1);
        assert_eq!(attempts(&d), 1, "{:?}", d.log);
        d.at(400.0);
        let retry = d.p.next_wake(d.now).unwrap();
        assert!(retry <= d.now);
        d.tick(400.0);
        assert_eq!(d.log.last().unwrap(), "spool-failed 0");
        assert!(d.spooled_hooks.is_empty());
        d.spool_fails = false;
        d.tick(500.0);
        assert_eq!(d.spooled_lines, vec![0, 1, 2]);
        assert_eq!(d.spooled_hooks, vec!["subagent-stop"]);
        assert!(d.index_of("spool 0..=2").unwrap() < d.index_of("spool-hook").unwrap());
    }

    /// Case 3: a due stop answered 500, then SIGTERM: it goes to the hook spool at exit.
    #[test]
    fn a_due_stop_that_failed_is_spooled_at_exit() {
        let mut d = Driver::new(true, false, &child_turn());
        d.identify(0);
        let a = d.send(Event::Watermark(Ok(Watermark::Line(2))));
        assert!(sent(&a).is_none());
        let a = d.tick(301.0);
        assert!(
            a.iter()
                .any(|a| matches!(a, Action::Post(Hook::SubagentStop(_))))
        );
        let stop = d.p.stop_hook();
        d.send(Event::Posted {
            hook: stop,
            result: Err(Failure::Transient {
                status: Some(500),
                retry_after: None,
                error: "HTTP 500".into(),
            }),
        });
        d.at(302.0);
        let a = d.send(Event::Signal("SIGTERM"));
        // One more attempt within the budget...
        assert!(
            a.iter()
                .any(|a| matches!(a, Action::Post(Hook::SubagentStop(_))))
        );
        // ...which hangs: at 3 s the stop is spooled and the watcher ends.
        let a = d.tick(305.0);
        assert!(exits(&a));
        assert_eq!(d.spooled_hooks, vec!["subagent-stop"]);
    }

    /// Case 3, idle reap after a failed stop: spooled too.
    #[test]
    fn a_due_stop_that_failed_is_spooled_at_idle_reap() {
        let mut d = Driver::new(true, false, &child_turn());
        d.identify(0);
        d.send(Event::Watermark(Ok(Watermark::Line(2))));
        d.tick(301.0);
        let stop = d.p.stop_hook();
        d.send(Event::Posted {
            hook: stop,
            result: Err(Failure::Transient {
                status: Some(500),
                retry_after: None,
                error: "HTTP 500".into(),
            }),
        });
        let reap = d.p.due().idle_end.unwrap();
        d.now = reap;
        let a = d.send(Event::Tick);
        let stop = d.p.stop_hook();
        assert!(a.contains(&Action::Post(stop.clone())), "{:?}", d.log);
        let a = d.send(Event::Posted {
            hook: stop,
            result: Err(Failure::Transient {
                status: Some(500),
                retry_after: None,
                error: "HTTP 500".into(),
            }),
        });
        assert!(exits(&a), "{:?}", d.log);
        assert_eq!(d.spooled_hooks, vec!["subagent-stop"]);
    }

    /// Case 4: `--once` offline on more than 2,048 lines spools them all and the due stop.
    #[test]
    fn once_offline_spools_every_line_and_the_due_stop() {
        let mut lines = vec![meta(), started()];
        lines.extend(
            (0..3000).map(|i| ev(&format!(r#"{{"type":"agent_message","message":"m{i}"}}"#))),
        );
        lines.push(complete());
        let mut d = Driver::new(false, true, &lines);
        d.at(600.0);
        d.identify(0);
        d.p.begin_once(d.now);
        let a = d.send(Event::Tick);
        assert!(exits(&a), "{:?}", d.log);
        assert_eq!(d.spooled_lines.len(), 3003);
        assert_eq!(d.spooled_hooks, vec!["subagent-stop"]);
    }

    /// Case 4: `--once` with the server unreachable spools the lines and the due stop and
    /// ends (exit 0), within seconds.
    #[test]
    fn once_with_an_unreachable_server_spools_and_ends() {
        let mut d = Driver::new(true, true, &child_turn());
        d.at(600.0);
        d.identify(0);
        d.p.begin_once(d.now);
        d.send(Event::Tick);
        let mut t = 600.0;
        let mut ended = false;
        while t < 620.0 && !ended {
            d.send(Event::Watermark(Err(Failure::Transient {
                status: None,
                retry_after: None,
                error: "failed to connect".into(),
            })));
            t =
                d.p.next_wake(d.now)
                    .map_or(t + 1.0, |w| w.duration_since(t0()).as_secs_f64());
            ended = exits(&d.tick(t));
        }
        assert!(ended, "{:?}", d.log);
        assert!(
            t <= 600.0 + ONCE_STALL.as_secs_f64() + 0.01,
            "took until {t}"
        );
        assert_eq!(d.spooled_lines, vec![0, 1, 2]);
        assert_eq!(d.spooled_hooks, vec!["subagent-stop"]);
    }

    /// Case 6: offline, the resume line handed over by the shell (spool or offline
    /// watermark) is where spooling starts.
    #[test]
    fn offline_resume_starts_after_what_was_handed_over() {
        let mut d = Driver::new(false, false, &child_turn());
        d.identify(2);
        assert_eq!(d.spooled_lines, vec![2]);
    }

    /// Case 7: a server refusing every batch is paced after the first few halvings.
    #[test]
    fn permanent_refusals_are_paced() {
        let lines: Vec<String> = (0..64)
            .map(|i| ev(&format!(r#"{{"type":"x{i}"}}"#)))
            .collect();
        let mut d = Driver::new(true, false, &[meta()]);
        d.identify(0);
        d.append(&lines);
        let mut a = d.send(Event::Watermark(Ok(Watermark::Empty)));
        let mut sends = 0;
        let mut immediate = 0;
        let start = d.now;
        while d.now < start.plus(Duration::from_secs(60)) {
            if let Some(generation) = sent(&a) {
                sends += 1;
                a = d.send(Event::Shipped {
                    generation,
                    result: Err(Failure::Rejected {
                        status: 400,
                        body_snippet: "bad".into(),
                    }),
                });
                if sent(&a).is_some() {
                    immediate += 1;
                }
            } else {
                let Some(next) = d.p.next_wake(d.now) else {
                    break;
                };
                d.now = next.max(d.now.plus(Duration::from_millis(1)));
                a = d.send(Event::Tick);
            }
        }
        assert!(
            immediate <= FREE_HALVINGS as usize + 1,
            "{immediate} unpaced retries"
        );
        assert!(sends < 40, "{sends} requests in a minute");
        assert!(!d.spooled_lines.is_empty(), "refused lines are spooled");
    }

    /// Case 7: `404` from the transcript route is a wrong URL: retried with backoff, the lines
    /// are kept (not split, not spooled as refused).
    #[test]
    fn a_wrong_server_path_is_retried_not_refused() {
        let mut d = Driver::new(true, false, &child_turn());
        d.identify(0);
        let a = d.send(Event::Watermark(Ok(Watermark::Empty)));
        let generation = sent(&a).unwrap();
        let a = d.send(Event::Shipped {
            generation,
            result: Err(Failure::WrongPath {
                status: 404,
                url: "http://h/kcap/hooks/transcript".into(),
            }),
        });
        assert!(sent(&a).is_none() && d.spooled_lines.is_empty());
        let wake = d.p.next_wake(d.now).unwrap();
        assert!(wake > d.now);
    }

    /// Case 8: SIGTERM with a hung server: everything unconfirmed is spooled and the watcher
    /// is gone within 4 s.
    #[test]
    fn shutdown_with_a_hung_server_spools_within_the_budget() {
        let mut d = Driver::new(true, false, &child_turn());
        d.identify(0);
        let a = d.send(Event::Watermark(Ok(Watermark::Empty)));
        assert!(sent(&a).is_some());
        d.at(10.0);
        d.send(Event::Signal("SIGTERM"));
        let mut t = 10.0;
        let mut ended = false;
        while !ended && t < 20.0 {
            t =
                d.p.next_wake(d.now)
                    .unwrap()
                    .duration_since(t0())
                    .as_secs_f64();
            ended = exits(&d.tick(t));
        }
        assert!(ended && t - 10.0 <= 4.0, "ended {ended} after {}", t - 10.0);
        assert_eq!(d.spooled_lines, vec![0, 1, 2]);
    }
}
