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

use crate::decide::Windows as DecisionWindows;
use crate::decide::{self, Ceiling, CeilingStep, StopProgress, Windows};
use crate::fold::State;
use crate::key::{Identity, Role};
use crate::rollout::lines::Line;
use crate::ship::TranscriptBatch;
use crate::ship::backoff::Backoff;
use crate::ship::outbox::{Outbox, Refusal, ShipLine};
use crate::ship::protocol::{
    Failure, Hook, SessionEndReason, Watermark, session_end_body, subagent_start_body,
    subagent_stop_body,
};
use crate::ship::redact::{Redactor, truncate_utf8};
use crate::telemetry::{Notice, Telemetry};
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

/// What a pipeline needs of the settings, and nothing else: no server address, no token, no
/// paths. The host builds it once from the settings (`crate::host::pipeline_config`) and
/// every child's pipeline gets a copy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PipelineConfig {
    /// A server is configured: lines are shipped, else spooled.
    pub online: bool,
    pub child: DecisionWindows,
    pub session: DecisionWindows,
    pub lifetime: Option<Duration>,
    pub max_pause_credit: Duration,
    pub stop_retry: Duration,
}

impl PipelineConfig {
    fn windows_for(&self, role: Role) -> DecisionWindows {
        match role {
            Role::Child => self.child,
            Role::Session => self.session,
        }
    }
}

/// One request kind's progress: in flight, or when to try again.
#[derive(Debug, Default)]
struct Request {
    in_flight: bool,
    retry_at: Option<Ts>,
    backoff: Backoff,
}

impl Request {
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

/// Where the file's lines are: folded, fed to shipping, and whether a partial line is held.
struct Source {
    file_seen: bool,
    folded_to: u64,
    partial: bool,
    fed_to: u64,
    /// The shipping cursor must move to `fed_to` before the next text.
    pending_rewind: bool,
}

/// Delivery: the watermark, the outbox, the confirmed position, the requests that move them,
/// refusals, and what went to the spool instead.
pub(crate) struct Delivery {
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
    token_refused: bool,
    pub(crate) lines_shipped: u64,
    /// Lines the server refused (set aside in `refused/`, or only counted past its cap).
    pub(crate) lines_refused: u64,
    spool_req: Request,
    pub(crate) lines_spooled: u64,
    trim_when_idle: bool,
}

/// The lifecycle requests: the child's start and stop, the session's end.
struct Hooks {
    start_needed: bool,
    start_in_flight: bool,
    stop: StopProgress,
    stop_in_flight: bool,
    session_end: Option<Hook>,
    session_end_in_flight: bool,
    stop_spooled: bool,
}

/// The shutdown phases, once begun, and what bounds `--once`.
struct End {
    ending: Option<Ending>,
    done: bool,
    /// The last answer that moved anything (for `--once`'s stall bound).
    last_progress: Ts,
}

/// A condition said once per streak, not on every retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Once {
    TokenRefused,
    WrongServerPath,
    TranscriptSpoolFull,
    SpoolFailed,
    RefusedFull,
}

/// What the pipeline says about itself: notices for the log and the counters, and which
/// repeated conditions were already said.
pub(crate) struct Notices {
    /// Conditions said and not cleared since.
    said: Vec<Once>,
    /// Where notices go: the log lines and the status file's counters.
    pub(crate) telemetry: Telemetry,
}

impl Notices {
    /// Emits `notice` unless `condition` was said and has not cleared since.
    fn once(&mut self, condition: Once, notice: impl FnOnce() -> Notice, now: Ts) {
        if !self.said.contains(&condition) {
            self.said.push(condition);
            self.telemetry.emit(notice(), now);
        }
    }

    /// `condition` is over: the next occurrence is said again.
    fn clear(&mut self, condition: Once) {
        self.said.retain(|c| *c != condition);
    }
}

/// One child's pipeline: the fold and the decisions over it, and its parts.
pub(crate) struct Pipeline {
    settings: PipelineConfig,
    vendor: String,
    path: PathBuf,
    once: bool,
    started: Ts,
    /// The role before the identity is settled (command line), then the settled one.
    role: Role,
    identity: Option<Identity>,
    state: State,
    ceiling: Option<Ceiling>,
    source: Source,
    pub(crate) delivery: Delivery,
    hooks: Hooks,
    end: End,
    pub(crate) notices: Notices,
    /// The `now` of the event being handled (notices are stamped with it).
    now: Ts,
}

impl Pipeline {
    /// A pipeline whose fold already holds `seeded` (`folded_to` complete lines).
    pub(crate) fn new(
        settings: PipelineConfig,
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
        Pipeline {
            settings,
            vendor,
            path,
            once,
            started,
            role,
            identity: None,
            state,
            ceiling,
            source: Source {
                file_seen,
                folded_to,
                partial,
                fed_to: 0,
                pending_rewind: false,
            },
            delivery: Delivery {
                watermark: None,
                outbox: Outbox::new(0),
                generation: 0,
                watermark_req: Request::default(),
                ship_req: Request::default(),
                recheck_watermark: false,
                failing_since: None,
                halvings: 0,
                refused: None,
                token_refused: false,
                lines_shipped: 0,
                lines_refused: 0,
                spool_req: Request::default(),
                lines_spooled: 0,
                trim_when_idle: false,
            },
            hooks: Hooks {
                start_needed: false,
                start_in_flight: false,
                stop: StopProgress::default(),
                stop_in_flight: false,
                session_end: None,
                session_end_in_flight: false,
                stop_spooled: false,
            },
            end: End {
                ending: None,
                done: false,
                last_progress: started,
            },
            notices: Notices {
                said: Vec::new(),
                telemetry: Telemetry::default(),
            },
            now: started,
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
        self.delivery.watermark
    }

    /// The child's stop was acknowledged (or spooled): it latches for the process.
    pub(crate) fn stop_posted(&self) -> bool {
        self.hooks.stop.posted
    }

    /// A pipeline that follows a child again in the process that already stopped it
    /// (`revision-3.md` S2.7): the stop stays latched, none is posted again.
    pub(crate) fn latch_stop(&mut self) {
        self.hooks.stop.posted = true;
    }

    /// The line the next [`Event::Text`] must start at, while the pipeline wants more text:
    /// shipping has a start, the outbox has room, and lines are folded that were not fed.
    pub(crate) fn wants_text(&self) -> bool {
        !self.end.done
            && self.identity.is_some()
            && self.delivery.watermark.is_some()
            && self.delivery.outbox.has_room()
            && self.source.fed_to < self.source.folded_to
    }

    /// Every due time this pipeline acts on, in one place (the decide functions' only caller).
    pub(crate) fn due(&self) -> decide::Due {
        decide::due_times(
            &self.state,
            self.role,
            &self.windows(),
            self.hooks.stop,
            self.started,
            self.ceiling.as_ref(),
        )
    }

    fn windows(&self) -> Windows {
        self.settings.windows_for(self.role)
    }

    /// When the pipeline next wants a [`Event::Tick`] (`None`: only events wake it).
    pub(crate) fn next_wake(&self, now: Ts) -> Option<Ts> {
        if self.end.done {
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
                .delivery
                .watermark_req
                .retry_at
                .filter(|_| !self.delivery.watermark_req.in_flight));
            at(self
                .delivery
                .ship_req
                .retry_at
                .filter(|_| !self.delivery.ship_req.in_flight));
            at(self.delivery.spool_req.retry_at);
        }
        match &self.end.ending {
            None => {
                let due = self.due();
                let stop_actionable = !self.hooks.stop_in_flight
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
                    at(Some(self.end.last_progress.plus(ONCE_STALL)));
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
        self.now = now;
        let mut out = Vec::new();
        if self.end.done {
            return out;
        }
        match event {
            Event::Folded { lines, partial } => {
                self.source.file_seen = true;
                self.source.partial = partial;
                for line in &lines {
                    if let Some(observed) = line.observed() {
                        self.state.apply(observed, now);
                    }
                    self.source.folded_to = line.number + 1;
                }
            }
            Event::Identified {
                identity,
                offline_resume,
            } => self.on_identified(identity, offline_resume),
            Event::Text { lines, next } => self.on_text(lines, next),
            Event::Moved(path) => {
                self.notify(Notice::RolloutArchived { path: path.clone() });
                self.path = path;
            }
            Event::Watermark(result) => self.on_watermark(result, now),
            Event::Shipped { generation, result } => {
                if generation == self.delivery.generation {
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
        if !self.settings.online {
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
        self.delivery.watermark = Some(watermark);
        self.delivery.generation += 1;
        self.delivery.ship_req.in_flight = false;
        self.delivery.ship_req.retry_at = None;
        self.delivery.halvings = 0;
        self.delivery.outbox.rewind(resume);
        self.source.fed_to = resume;
        self.source.pending_rewind = true;
    }

    fn on_text(&mut self, lines: Vec<Line>, next: u64) {
        let confirmed = self.delivery.outbox.confirmed_to();
        for line in &lines {
            if line.number < confirmed || line.blank {
                continue;
            }
            let text = match &line.text {
                Some(t) if !line.oversize => redactor().redact_line(t),
                _ => crate::ship::redact::oversize_placeholder(line.len),
            };
            self.delivery.outbox.push(ShipLine::new(line.number, &text));
        }
        self.source.fed_to = self.source.fed_to.max(next);
        // Blank lines between shipped ones are confirmed with them.
        self.delivery.outbox.skip_to(self.source.fed_to);
    }

    fn on_watermark(&mut self, result: Result<Watermark, Failure>, now: Ts) {
        self.delivery.watermark_req.in_flight = false;
        match result {
            Ok(w) => {
                self.end.last_progress = now;
                self.delivery.watermark_req.backoff.reset();
                self.delivery.watermark_req.retry_at = None;
                let resume = w.resume_line();
                self.notify(Notice::Watermark {
                    resume_line: resume,
                });
                let first = self.delivery.watermark.is_none();
                self.delivery.recheck_watermark = false;
                if first {
                    self.resume_at(w);
                    if w == Watermark::NotFound && self.role == Role::Child {
                        self.hooks.start_needed = true;
                    }
                } else if resume < self.delivery.outbox.confirmed_to() {
                    // The server lost lines it had acknowledged: resend from its resume line,
                    // once per healed failure (a server that skips trailing lines would
                    // otherwise make this loop forever).
                    self.notify(Notice::WatermarkBehind {
                        resume_line: resume,
                        acknowledged_to: self.delivery.outbox.confirmed_to(),
                    });
                    self.resume_at(w);
                }
            }
            Err(f) => {
                let delay = self.failure_delay(&f, |p| &mut p.delivery.watermark_req);
                self.notify(Notice::WatermarkFailed {
                    failure: f,
                    retry_in: delay,
                });
                self.delivery.watermark_req.retry_at = Some(now.plus(delay));
                if self.delivery.watermark.is_some() {
                    // The check before resending failed: no batch goes out until it answers.
                    self.delivery.recheck_watermark = true;
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
                // `f` says whether a token was refused or none was sent.
                let notice = || Notice::TokenRefused {
                    status: *status,
                    failure: f.clone(),
                };
                self.notices.once(Once::TokenRefused, notice, self.now);
                self.delivery.token_refused = true;
                UNAUTHORIZED_RETRY
            }
            Failure::WrongPath { status, url } => {
                let notice = || Notice::WrongServerPath {
                    status: *status,
                    url: url.clone(),
                };
                self.notices.once(Once::WrongServerPath, notice, self.now);
                req(self).backoff.next_delay(None)
            }
            Failure::Transient { retry_after, .. } => req(self).backoff.next_delay(*retry_after),
            Failure::Rejected { .. } => req(self).backoff.next_delay(None),
        }
    }

    fn on_shipped(&mut self, result: Result<(), Failure>, now: Ts, out: &mut Vec<Action>) {
        self.delivery.ship_req.in_flight = false;
        match result {
            Ok(()) => {
                self.end.last_progress = now;
                self.delivery.failing_since = None;
                self.notices.clear(Once::TokenRefused);
                self.notices.clear(Once::WrongServerPath);
                self.delivery.ship_req.backoff.reset();
                self.delivery.ship_req.retry_at = None;
                self.delivery.halvings = 0;
                if let Some(b) = self.delivery.outbox.delivered() {
                    // A backlog leaves the allocator holding its peak; hand it back once the
                    // outbox drains (an idle watcher should stay small). `memory` trims once
                    // enough was shipped, counted over every child of the process.
                    crate::platform::memory::note_shipped(b.bytes());
                    self.delivery.trim_when_idle = true;
                    self.delivery.lines_shipped += b.lines.len() as u64;
                    let shipped = Notice::BatchShipped {
                        first: b.first(),
                        last: b.last(),
                        count: b.lines.len(),
                        bytes: b.bytes(),
                    };
                    self.notify(shipped);
                }
                self.delivery.outbox.skip_to(self.source.fed_to);
                self.flush_refused_log();
            }
            Err(Failure::Rejected {
                status,
                body_snippet,
            }) => match self.delivery.outbox.refused() {
                Some(Refusal::Split) => {
                    self.delivery.halvings += 1;
                    if self.delivery.halvings == 1 {
                        self.notify(Notice::BatchRefused {
                            status,
                            body_snippet,
                        });
                    }
                    if self.delivery.halvings > FREE_HALVINGS {
                        let delay = self.delivery.ship_req.backoff.next_delay(None);
                        self.delivery.ship_req.retry_at = Some(now.plus(delay));
                    }
                }
                Some(Refusal::Isolated(line)) => {
                    let n = line.number;
                    self.notify(Notice::LineRefused { line: n, status });
                    match self.delivery.refused {
                        Some((first, last, s)) if last + 1 == n || s == status && last < n => {
                            self.delivery.refused = Some((first, n, s));
                        }
                        _ => {
                            self.flush_refused_log();
                            self.delivery.refused = Some((n, n, status));
                        }
                    }
                    self.spool_refused(line, out);
                    if self.delivery.halvings >= FREE_HALVINGS {
                        let delay = self.delivery.ship_req.backoff.next_delay(None);
                        self.delivery.ship_req.retry_at = Some(now.plus(delay));
                    }
                }
                None => {}
            },
            Err(f) => {
                // Once per failure streak (never in a loop): the watermark is read again
                // before the next attempt.
                if self.delivery.failing_since.is_none() {
                    self.delivery.recheck_watermark = true;
                }
                self.delivery.failing_since.get_or_insert(now);
                let delay = self.failure_delay(&f, |p| &mut p.delivery.ship_req);
                if !matches!(f, Failure::Unauthorized { .. } | Failure::WrongPath { .. }) {
                    self.notify(Notice::ShipFailed {
                        failure: f,
                        retry_in: delay,
                    });
                }
                self.delivery.ship_req.retry_at = Some(now.plus(delay));
            }
        }
    }

    fn flush_refused_log(&mut self) {
        if let Some((first, last, status)) = self.delivery.refused.take() {
            self.notify(Notice::LinesRefused {
                first,
                last,
                status,
            });
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
            self.delivery.lines_refused += 1;
            match result {
                SpoolResult::Written => {}
                SpoolResult::OverCap => {
                    let session = self.session_id().to_owned();
                    let notice = || Notice::RefusedFull { session };
                    self.notices.once(Once::RefusedFull, notice, self.now);
                }
                SpoolResult::Failed(error) => {
                    self.notify(Notice::RefusedLineNotSpooled { error });
                }
            }
            return;
        }
        self.delivery.spool_req.in_flight = false;
        let session = self.session_id().to_owned();
        match result {
            SpoolResult::Written => {
                self.end.last_progress = now;
                self.delivery.spool_req.backoff.reset();
                self.delivery.spool_req.retry_at = None;
                self.notices.clear(Once::SpoolFailed);
                if let Some(b) = self.delivery.outbox.delivered() {
                    self.delivery.lines_spooled += b.lines.len() as u64;
                    let spooled = Notice::LinesSpooled {
                        first: b.first(),
                        last: b.last(),
                        count: b.lines.len(),
                    };
                    self.notify(spooled);
                }
                self.delivery.outbox.skip_to(self.source.fed_to);
            }
            SpoolResult::OverCap => {
                // The needs-import marker hands these lines to an import of the whole file.
                if let Some(b) = self.delivery.outbox.delivered() {
                    let full = || Notice::TranscriptSpoolFull {
                        session,
                        first_line: b.first(),
                    };
                    self.notices.once(Once::TranscriptSpoolFull, full, self.now);
                }
                self.delivery.outbox.skip_to(self.source.fed_to);
            }
            SpoolResult::Failed(e) => {
                let first = self
                    .delivery
                    .outbox
                    .in_flight()
                    .map(|b| b.first())
                    .unwrap_or(0);
                let delay = self.delivery.spool_req.backoff.next_delay(None);
                let failed = || Notice::SpoolFailed {
                    session,
                    first_line: first,
                    retry_in: delay,
                    error: e,
                };
                self.notices.once(Once::SpoolFailed, failed, self.now);
                self.delivery.spool_req.retry_at = Some(now.plus(delay));
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
                self.hooks.start_in_flight = false;
                self.hooks.start_needed = false;
                match result {
                    Ok(()) => self.notify(Notice::SubagentStartPosted),
                    Err(failure) => {
                        self.notify(Notice::SubagentStartFailed { failure });
                        out.push(Action::SpoolHook(hook.clone()));
                    }
                }
            }
            (Hook::SubagentStop(_), Ok(())) => {
                self.hooks.stop_in_flight = false;
                self.hooks.stop.posted = true;
                self.notify(Notice::SubagentStopPosted);
            }
            (Hook::SubagentStop(_), Err(f)) => {
                self.hooks.stop_in_flight = false;
                if let Failure::Unauthorized { .. } = f {
                    self.delivery.token_refused = true;
                }
                let retry_in = self.settings.stop_retry;
                self.notify(Notice::SubagentStopFailed {
                    failure: f,
                    retry_in,
                });
                self.hooks.stop.next_attempt = Some(now.plus(self.settings.stop_retry));
            }
            (Hook::SessionEnd(_), result) => {
                self.hooks.session_end_in_flight = false;
                match result {
                    Ok(()) => {
                        self.notify(Notice::SessionEndPosted);
                        self.hooks.session_end = None;
                    }
                    Err(failure) => {
                        self.notify(Notice::SessionEndFailed { failure });
                        if let Some(h) = self.hooks.session_end.take() {
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
            self.hooks.stop.next_attempt = Some(now.plus(self.settings.stop_retry));
        }
        match result {
            SpoolResult::Written => {
                self.notify(Notice::HookSpooled { route });
                if let Hook::SubagentStop(_) = hook {
                    self.hooks.stop.posted = true;
                    self.hooks.stop_spooled = true;
                }
                if let Hook::SessionEnd(_) = hook {
                    self.hooks.session_end = None;
                }
            }
            SpoolResult::OverCap => self.notify(Notice::HookSpoolFull { route, session }),
            SpoolResult::Failed(error) => self.notify(Notice::HookSpoolFailed {
                route,
                session,
                error,
            }),
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
            Some(end) => {
                self.delivery.watermark.is_some() && self.delivery.outbox.confirmed_to() > end
            }
            None => true,
        }
    }

    /// Every complete line folded is confirmed.
    fn all_confirmed(&self) -> bool {
        self.delivery.watermark.is_some()
            && self.delivery.outbox.is_idle()
            && self.source.fed_to >= self.source.folded_to
            && self.delivery.outbox.confirmed_to() >= self.source.folded_to.min(self.source.fed_to)
    }

    fn stop_attempt_wanted(&self) -> bool {
        self.role == Role::Child && !self.hooks.stop.posted && !self.hooks.stop_in_flight
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
        if self.settings.online && !self.spooling() {
            self.hooks.stop_in_flight = true;
            self.reload_if_refused(out);
            out.push(Action::Post(hook));
        } else {
            out.push(Action::SpoolHook(hook));
            // Written or not, the answer comes back synchronously; a failed spool is retried
            // at the next attempt time.
            self.hooks.stop.next_attempt = None;
        }
    }

    /// After a `401`/`403` the token is re-read right before the next request: re-read at the
    /// refusal, a token the kcap CLI refreshed during the minute's wait would be missed.
    fn reload_if_refused(&mut self, out: &mut Vec<Action>) {
        if std::mem::take(&mut self.delivery.token_refused) {
            out.push(Action::ReloadToken);
        }
    }

    fn spooling(&self) -> bool {
        !self.settings.online
            || self
                .end
                .ending
                .as_ref()
                .is_some_and(|e| e.step == Step::Spool)
    }

    fn begin_ending(&mut self, reason: ExitReason, now: Ts) {
        if let Some(e) = &mut self.end.ending {
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
            self.hooks.session_end = Some(Hook::SessionEnd(session_end_body(
                self.session_id(),
                &self.path,
                id.and_then(|i| i.cwd.as_deref()).unwrap_or(""),
                why,
                now,
            )));
        }
        let once = reason == ExitReason::OnceDone;
        // `--once` is bounded by the server's progress from here on.
        self.end.last_progress = now;
        self.end.ending = Some(Ending {
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
        if self.source.pending_rewind {
            self.source.pending_rewind = false;
            out.push(Action::ReadFrom(self.source.fed_to));
        }
        if let Some(Watermark::Line(n)) = self.delivery.watermark
            && self.settings.online
            && self.source.file_seen
            && n.saturating_add(1) > self.source.folded_to
        {
            self.end.done = true;
            out.push(Action::Rewritten(
                "the server holds more lines than the file",
            ));
            return;
        }
        if self.end.ending.is_none() {
            self.decide(now, out);
        }
        if self.end.ending.is_some() {
            self.advance_ending(now, out);
            if self.end.done {
                return;
            }
        }
        self.requests(now, out);
        if self.delivery.outbox.is_idle() && std::mem::take(&mut self.delivery.trim_when_idle) {
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
            && !self.hooks.stop_in_flight
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
                        self.notices.telemetry.emit(
                            Notice::PauseExtensionGranted {
                                grant: g.grant,
                                total_granted: g.total_granted,
                                remaining_cap: g.remaining_cap,
                                grant_count: g.grant_count,
                                pause,
                            },
                            now,
                        );
                    }
                    CeilingStep::Fire => {
                        let msg = c.exit_message(&self.state.pauses, now);
                        self.notices.telemetry.emit(
                            Notice::LifetimeCeiling {
                                message: msg.clone(),
                            },
                            now,
                        );
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
            self.notify(Notice::IdleEnd {
                reason: reason.as_str(),
                idle: quiet,
            });
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
        self.notify(Notice::StallDetected {
            turn_id: self.state.turn_id.clone(),
            silence,
            last_kind,
        });
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
            let Some(e) = &self.end.ending else { return };
            let (began, step, hard_end) = (e.began, e.step, e.hard_end);
            let out_of_time = match e.ship_until {
                Some(t) => now >= t,
                None => now >= self.end.last_progress.plus(ONCE_STALL),
            };
            let next = match step {
                Step::WaitPartial
                    if !self.source.partial || now >= began.plus(PARTIAL_LINE_WAIT) =>
                {
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
                Step::Lifecycle if !self.settings.online => Step::Spool,
                Step::Lifecycle => {
                    if !self.end.ending.as_ref().is_some_and(|e| e.posted) {
                        self.post_owed_hooks(now, out);
                    }
                    let pending = self.hooks.stop_in_flight || self.hooks.session_end_in_flight;
                    if !pending && !self.stop_owed(now) && self.hooks.session_end.is_none() {
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
                        self.notify(Notice::ShutdownBudgetSpent {
                            session: self.session_id().to_owned(),
                            first_line: self.delivery.outbox.confirmed_to(),
                        });
                        self.finish(out);
                        return;
                    }
                    break;
                }
            };
            if next == Step::Spool {
                self.enter_spool(now, out);
            }
            if let Some(e) = &mut self.end.ending {
                e.step = next;
            }
        }
    }

    /// From here on, whatever the server did not confirm goes to the spool; without a
    /// watermark everything does (resending is harmless, losing a line is not). Requests in
    /// flight are abandoned (their answers are ignored).
    fn enter_spool(&mut self, now: Ts, out: &mut Vec<Action>) {
        if let Some(e) = &mut self.end.ending
            && e.hard_end.is_none()
        {
            // `--once`: a spool that keeps failing does not keep it alive either.
            e.hard_end = Some(now.plus(SHUTDOWN_BUDGET - SHIP_UNTIL));
        }
        if self.delivery.watermark.is_none() {
            self.resume_at(Watermark::Empty);
            self.source.pending_rewind = false;
            out.push(Action::ReadFrom(self.source.fed_to));
        } else {
            let confirmed = self.delivery.outbox.confirmed_to();
            let unconfirmed = self.delivery.outbox.take_unconfirmed();
            self.delivery.outbox.rewind(confirmed);
            for l in unconfirmed {
                self.delivery.outbox.push(l);
            }
            self.delivery.generation += 1;
            self.delivery.ship_req = Request::default();
        }
        self.hooks.stop_in_flight = false;
        self.hooks.session_end_in_flight = false;
    }

    /// Online, once every line is confirmed: the stop (due, or owed at this exit) and the
    /// session end, one attempt each within the budget.
    fn post_owed_hooks(&mut self, now: Ts, out: &mut Vec<Action>) {
        if let Some(e) = &mut self.end.ending {
            e.posted = true;
        }
        if self.stop_owed(now) && !self.hooks.stop_in_flight {
            self.hooks.stop_in_flight = true;
            self.reload_if_refused(out);
            out.push(Action::Post(self.stop_hook()));
        }
        if let Some(h) = &self.hooks.session_end {
            self.hooks.session_end_in_flight = true;
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
            if let Some(e) = &mut self.end.ending {
                e.reason = ExitReason::IdleTimeout;
            }
            self.hooks.session_end = Some(Hook::SessionEnd(session_end_body(
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
        let end = match self.end.ending.as_ref().map(|e| &e.reason) {
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
            self.hooks.stop,
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
                self.notify(Notice::StopNotSpooled {
                    session: self.session_id().to_owned(),
                });
            }
        }
        if let Some(h) = self.hooks.session_end.clone() {
            out.push(Action::SpoolHook(h));
        }
    }

    fn finish(&mut self, out: &mut Vec<Action>) {
        self.flush_refused_log();
        let reason = self
            .end
            .ending
            .as_ref()
            .map(|e| e.reason.clone())
            .unwrap_or(ExitReason::OnceDone);
        self.notify(Notice::WatcherExiting {
            reason: reason.as_str(),
        });
        self.end.done = true;
        out.push(Action::Exit(reason));
    }

    /// Requests: the watermark, subagent-start, the next batch (or spool record), lifecycle
    /// posts queued by the ending.
    fn requests(&mut self, now: Ts, out: &mut Vec<Action>) {
        if self.identity.is_none() {
            return;
        }
        let spooling = self.spooling();
        if self.settings.online && !spooling {
            // After a failure, the check waits for the batch's own retry time.
            let wants_watermark = self.delivery.watermark.is_none()
                || (self.delivery.recheck_watermark
                    && self.delivery.ship_req.retry_at.is_none_or(|t| t <= now));
            if wants_watermark && self.delivery.watermark_req.ready(now) {
                self.delivery.watermark_req.in_flight = true;
                self.delivery.watermark_req.retry_at = None;
                self.reload_if_refused(out);
                out.push(Action::AskWatermark);
            }
            if self.hooks.start_needed && !self.hooks.start_in_flight {
                self.hooks.start_in_flight = true;
                out.push(Action::Post(self.start_hook()));
            }
            if self.delivery.watermark.is_none()
                || self.delivery.recheck_watermark
                || self.hooks.start_needed
            {
                return;
            }
            if self.delivery.ship_req.ready(now) {
                let session = self.session_id().to_owned();
                let agent = self.agent_id().map(str::to_owned);
                let body = match self.delivery.outbox.in_flight() {
                    Some(b) => Some(b.body(&session, agent.as_deref(), &self.vendor)),
                    None => self
                        .delivery
                        .outbox
                        .next_batch()
                        .map(|b| b.body(&session, agent.as_deref(), &self.vendor)),
                };
                if let Some(body) = body {
                    self.delivery.ship_req.in_flight = true;
                    self.delivery.ship_req.retry_at = None;
                    self.reload_if_refused(out);
                    out.push(Action::Send {
                        generation: self.delivery.generation,
                        body,
                    });
                }
            }
        } else if self.delivery.watermark.is_some() && self.delivery.spool_req.ready(now) {
            // Offline, and at the end: each line goes to the spool as soon as it is read. The
            // answer comes back synchronously, so one record at a time.
            let batch = match self.delivery.outbox.in_flight() {
                Some(b) => Some(b.lines.clone()),
                None => self.delivery.outbox.next_batch().map(|b| b.lines.clone()),
            };
            if let Some(lines) = batch
                && let Some(record) = self.batch_of(&lines)
            {
                self.delivery.spool_req.in_flight = true;
                self.delivery.spool_req.retry_at = None;
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

    /// Says what happened: a log line and the counters (see [`crate::telemetry`]).
    fn notify(&mut self, notice: Notice) {
        self.notices.telemetry.emit(notice, self.now);
    }

    /// The earliest decision due, by name (`inspect`'s names), while running.
    pub(crate) fn next_due(&self) -> Option<(&'static str, Ts)> {
        if self.end.done || self.end.ending.is_some() {
            return None;
        }
        let due = self.due();
        let stop = due.subagent_stop.filter(|_| !self.hooks.stop.posted);
        [
            ("subagent_stop", stop),
            ("idle_end", due.idle_end),
            ("stall_warning", due.stall_warning),
            ("lifetime_ceiling", due.lifetime_ceiling),
        ]
        .into_iter()
        .filter_map(|(name, at)| at.map(|t| (name, t)))
        .min_by_key(|(_, t)| *t)
    }

    /// The stop this pipeline would owe if it ended now as `end` (what `inspect` shows).
    pub(crate) fn owed_at_exit(
        &self,
        end: decide::WatcherEnd,
        now: Ts,
    ) -> Option<decide::OwedStop> {
        decide::stop_owed_at_exit(
            &self.state,
            self.role,
            self.windows().stop_grace,
            self.hooks.stop,
            end,
            now,
        )
    }

    /// Complete lines folded from the file.
    pub(crate) fn lines_on_disk(&self) -> u64 {
        self.source.folded_to
    }

    /// The pipeline is ending (a signal, the parent's exit, a reap...).
    pub(crate) fn is_ending(&self) -> bool {
        self.end.ending.is_some()
    }

    /// What became of the stop, for `--once`'s summary.
    pub(crate) fn stop_summary(&self, now: Ts) -> Option<String> {
        match (self.role, self.hooks.stop.posted) {
            (Role::Child, true) if !self.hooks.stop_spooled => Some("posted".into()),
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
mod tests;
