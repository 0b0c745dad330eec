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
use std::sync::Arc;
use std::time::Duration;

use crate::codex::lines::Line;
use crate::decide::Windows as DecisionWindows;
use crate::decide::{self, Ceiling, CeilingStep, Grant, Windows};
use crate::fold::{Pause, State};
use crate::key::{Identity, Role};
use crate::ship::TranscriptBatch;
use crate::ship::backoff::Backoff;
use crate::ship::outbox::ShipLine;
use crate::ship::protocol::{
    Failure, Hook, Lifecycle, SessionEndReason, Watermark, session_end_body, subagent_start_body,
    subagent_stop_body,
};
use crate::ship::redact::{Redactor, truncate_utf8};
use crate::telemetry::{Notice, Telemetry};
use crate::time::Ts;
use delivery::{Delivery, Heard, Shipped};
use ending::{End, Step};
use hooks::{Hooks, Outcome};

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

/// One request's progress: in flight, or when to try again.
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

    /// Sent now: in flight, no retry pending.
    fn sent(&mut self) {
        self.in_flight = true;
        self.retry_at = None;
    }

    /// Answered with a success: the next failure backs off from the start.
    fn succeeded(&mut self) {
        self.backoff.reset();
        self.retry_at = None;
    }

    /// When it waits to be tried again (`None`: in flight, or not waiting).
    fn wake(&self) -> Option<Ts> {
        self.retry_at.filter(|_| !self.in_flight)
    }
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

impl Source {
    /// Shipping goes on from line `to`: the cursor moves there before the next text.
    fn rewind(&mut self, to: u64) {
        self.fed_to = to;
        self.pending_rewind = true;
    }

    /// Where the shipping cursor must move, once.
    fn take_rewind(&mut self) -> Option<u64> {
        std::mem::take(&mut self.pending_rewind).then_some(self.fed_to)
    }
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
    /// Says `notice`, stamped `now`: a log line and the counters (see [`crate::telemetry`]).
    fn say(&mut self, notice: Notice, now: Ts) {
        self.telemetry.emit(notice, now);
    }

    /// Emits `notice` unless `condition` was said and has not cleared since.
    fn once(&mut self, condition: Once, notice: impl FnOnce() -> Notice, now: Ts) {
        if !self.said.contains(&condition) {
            self.said.push(condition);
            self.say(notice(), now);
        }
    }

    /// `condition` is over: the next occurrence is said again.
    fn clear(&mut self, condition: Once) {
        self.said.retain(|c| *c != condition);
    }
}

/// One child's pipeline: the fold and the decisions over it, and its parts. Its methods are
/// what coordinates the parts; what touches one part only is that part's.
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
            delivery: Delivery::new(),
            hooks: Hooks::default(),
            end: End::new(started),
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
        self.hooks.outcome(Lifecycle::SubagentStop).is_some()
    }

    /// A pipeline that follows a child again in the process that already stopped it
    /// (docs/behaviour.md S2.7): the stop stays latched, none is posted again.
    pub(crate) fn latch_stop(&mut self) {
        self.hooks.latch(Lifecycle::SubagentStop);
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
            self.hooks.stop_progress(),
            self.started,
            self.ceiling.as_ref(),
        )
    }

    /// What is due when, as of `now`: [`Pipeline::due`] with the lifetime ceiling moved by the
    /// pause credit earned by `now` (a running pipeline moves it at every event; `inspect`,
    /// which sends none, asks this).
    pub(crate) fn due_at(&self, now: Ts) -> decide::Due {
        let mut due = self.due();
        if let Some(mut c) = self.ceiling {
            extend_ceiling(&mut c, &self.state.pauses, now, |_| {});
            due.lifetime_ceiling = Some(c.deadline);
        }
        due
    }

    fn windows(&self) -> Windows {
        self.settings.windows_for(self.role)
    }

    /// When the pipeline next wants a [`Event::Tick`] (`None`: only events wake it).
    pub(crate) fn next_wake(&self, now: Ts) -> Option<Ts> {
        if self.end.done {
            return None;
        }
        let retry = self
            .identity
            .is_some()
            .then(|| self.delivery.next_retry())
            .flatten();
        let moves = match self.end.step() {
            None => {
                let due = self.due();
                let stop_actionable = !self.hooks.in_flight(Lifecycle::SubagentStop)
                    && self.identity.is_some()
                    && self.lines_through_turn_end();
                vec![
                    due.subagent_stop.filter(|_| stop_actionable),
                    due.idle_end,
                    due.stall_warning,
                    due.lifetime_ceiling,
                ]
            }
            Some(step) => {
                let stop = (step == Step::Lifecycle && self.stop_attempt_wanted())
                    .then(|| self.due().subagent_stop)
                    .flatten();
                vec![self.end.next_wake(now), stop]
            }
        };
        moves.into_iter().chain([retry]).flatten().min()
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
            Event::Text { lines, next } => {
                self.source.fed_to = self.source.fed_to.max(next);
                self.delivery
                    .take_text(lines, self.source.fed_to, &mut self.notices, now);
            }
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
            Event::LinesSpooled { refused, result } => {
                let session = session_id(self.identity.as_ref());
                if self.delivery.lines_spooled(
                    refused,
                    result,
                    now,
                    self.source.fed_to,
                    session,
                    &mut self.notices,
                ) {
                    self.end.last_progress = now;
                }
            }
            Event::HookSpooled { hook, result } => {
                self.on_hook_spooled(&hook, result, now);
                self.end.hook_spool_answered();
            }
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
        let resume = self.delivery.resume_at(watermark);
        self.source.rewind(resume);
    }

    fn on_watermark(&mut self, result: Result<Watermark, Failure>, now: Ts) {
        let first = self.delivery.watermark.is_none();
        match self
            .delivery
            .watermark_answered(result, now, &mut self.notices)
        {
            Heard::Failed => {}
            Heard::Kept => self.end.last_progress = now,
            Heard::ResumeAt(w) => {
                self.end.last_progress = now;
                self.resume_at(w);
                if first && w == Watermark::NotFound && self.role == Role::Child {
                    // No stream yet: the child's start goes first.
                    self.hooks.owe(self.start_hook());
                }
            }
        }
    }

    fn on_shipped(&mut self, result: Result<(), Failure>, now: Ts, out: &mut Vec<Action>) {
        let fed_to = self.source.fed_to;
        match self
            .delivery
            .shipped(result, now, fed_to, &mut self.notices)
        {
            Shipped::Confirmed => self.end.last_progress = now,
            // Set aside in `refused/` (it counts as handed over: the server will not take it,
            // a person or an import may).
            Shipped::Refused(line) => {
                if let Some(batch) = self.batch_of(std::slice::from_ref(&line)) {
                    out.push(Action::SpoolLines {
                        batch,
                        refused: true,
                    });
                }
            }
            Shipped::Waiting => {}
        }
    }

    fn batch_of(&self, lines: &[ShipLine]) -> Option<TranscriptBatch> {
        batch_of(self.identity.as_ref(), &self.vendor, lines)
    }

    /// The answer to a lifecycle request: acknowledged, or failed (tried again later, or
    /// spooled, as its route's policy says).
    fn on_posted(
        &mut self,
        hook: Hook,
        result: Result<(), Failure>,
        now: Ts,
        out: &mut Vec<Action>,
    ) {
        let kind = hook.kind();
        match result {
            Ok(()) => {
                self.hooks.posted(kind);
                self.notify(Notice::HookPosted { kind });
            }
            Err(failure) => {
                if let Failure::Unauthorized { .. } = failure {
                    self.delivery.token_refused = true;
                }
                let retry_in = self.retry_in(kind);
                self.notify(Notice::HookFailed {
                    kind,
                    failure,
                    retry_in,
                });
                if let Some(h) = self.hooks.failed(kind, retry_in.map(|d| now.plus(d))) {
                    out.push(Action::SpoolHook(h));
                }
            }
        }
    }

    /// After a failure, how long until `kind` is tried again (`None`: spooled instead).
    fn retry_in(&self, kind: Lifecycle) -> Option<Duration> {
        hooks::policy(kind)
            .retried
            .then_some(self.settings.stop_retry)
    }

    fn on_hook_spooled(&mut self, hook: &Hook, result: SpoolResult, now: Ts) {
        let kind = hook.kind();
        let route = hook.route();
        let session = self.session_id().to_owned();
        if result != SpoolResult::Written
            && let Some(d) = self.retry_in(kind)
        {
            // Tried again at the next attempt time (and at the end).
            self.hooks.retry_at(kind, Some(now.plus(d)));
        }
        match result {
            SpoolResult::Written => {
                self.notify(Notice::HookSpooled { route });
                self.hooks.spooled(kind);
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
        session_id(self.identity.as_ref())
    }

    /// Every line through the turn's end is stored by the server or written to the spool:
    /// only then may a lifecycle request go out (never ahead of its transcript).
    fn lines_through_turn_end(&self) -> bool {
        self.state
            .turn_end_line
            .is_none_or(|end| self.delivery.holds_through(end))
    }

    /// Every complete line folded is confirmed.
    fn all_confirmed(&self) -> bool {
        self.delivery.watermark.is_some()
            && self.delivery.outbox.is_idle()
            && self.source.fed_to >= self.source.folded_to
            && self.delivery.outbox.confirmed_to() >= self.source.folded_to.min(self.source.fed_to)
    }

    fn stop_attempt_wanted(&self) -> bool {
        self.role == Role::Child
            && !self.stop_posted()
            && !self.hooks.in_flight(Lifecycle::SubagentStop)
    }

    /// The key's fields a lifecycle body names: session, agent, agent type.
    fn key_fields(&self) -> (&str, &str, &str) {
        let id = self.identity.as_ref();
        (
            session_id(id),
            id.and_then(|i| i.agent_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_type.as_deref())
                .unwrap_or("subagent"),
        )
    }

    fn stop_hook(&self) -> Hook {
        let message = self.state.stop_message();
        let redacted = redactor().redact_text(&message);
        let (session, agent, agent_type) = self.key_fields();
        Hook::SubagentStop(subagent_stop_body(
            session,
            agent,
            agent_type,
            &self.path,
            truncate_utf8(&redacted, MAX_STOP_MESSAGE),
        ))
    }

    fn start_hook(&self) -> Hook {
        let (session, agent, agent_type) = self.key_fields();
        Hook::SubagentStart(subagent_start_body(session, agent, agent_type, &self.path))
    }

    fn session_end_hook(&self, why: SessionEndReason, now: Ts) -> Hook {
        let cwd = self.identity.as_ref().and_then(|i| i.cwd.as_deref());
        Hook::SessionEnd(session_end_body(
            self.session_id(),
            &self.path,
            cwd.unwrap_or(""),
            why,
            now,
        ))
    }

    /// The request owed on `kind`'s route at `now`, not yet handed over: the stop when it is
    /// due or owed at this exit (the decisions say), any other when it was made owed.
    fn owed(&self, kind: Lifecycle, now: Ts) -> Option<Hook> {
        match kind {
            Lifecycle::SubagentStop => self.stop_owed(now).then(|| self.stop_hook()),
            _ => self.hooks.owed(kind).cloned(),
        }
    }

    /// Posts `hook` (its answer comes back as [`Event::Posted`]).
    fn post(&mut self, hook: Hook, out: &mut Vec<Action>) {
        self.hooks.sent(hook.kind());
        self.delivery.reload_if_refused(out);
        out.push(Action::Post(hook));
    }

    /// A due stop: posted online (off the loop), spooled offline.
    fn attempt_stop(&mut self, out: &mut Vec<Action>) {
        let hook = self.stop_hook();
        if self.settings.online && !self.spooling() {
            self.post(hook, out);
        } else {
            out.push(Action::SpoolHook(hook));
            // Written or not, the answer comes back synchronously; a failed spool is retried
            // at the next attempt time.
            self.hooks.retry_at(Lifecycle::SubagentStop, None);
        }
    }

    fn spooling(&self) -> bool {
        !self.settings.online || self.end.step() == Some(Step::Spool)
    }

    fn begin_ending(&mut self, reason: ExitReason, now: Ts) {
        let session_end = match (&reason, self.role) {
            (ExitReason::IdleTimeout, Role::Session) => Some(SessionEndReason::IdleTimeout),
            (ExitReason::ParentExited, Role::Session) => Some(SessionEndReason::ParentExited),
            _ => None,
        };
        if !self.end.begin(reason, now) {
            return;
        }
        if let Some(why) = session_end
            && self.identity.is_some()
        {
            self.hooks.owe(self.session_end_hook(why, now));
        }
    }

    /// Moves everything that moves without waiting.
    fn step(&mut self, now: Ts, out: &mut Vec<Action>) {
        if let Some(line) = self.source.take_rewind() {
            out.push(Action::ReadFrom(line));
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
        if !self.end.is_ending() {
            self.decide(now, out);
        }
        if self.end.is_ending() {
            self.advance_ending(now, out);
            if self.end.done {
                return;
            }
        }
        self.requests(now, out);
        if self.delivery.trim_now() {
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
            && !self.hooks.in_flight(Lifecycle::SubagentStop)
            && self.identity.is_some()
            && self.lines_through_turn_end()
        {
            self.attempt_stop(out);
        }
        if let Some(c) = &mut self.ceiling {
            let (pauses, notices) = (&self.state.pauses, &mut self.notices);
            let fired = extend_ceiling(c, pauses, now, |g| {
                let pause = pauses
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
                let granted = Notice::PauseExtensionGranted {
                    grant: g.grant,
                    total_granted: g.total_granted,
                    remaining_cap: g.remaining_cap,
                    grant_count: g.grant_count,
                    pause,
                };
                notices.say(granted, now);
            });
            if fired {
                let message = c.exit_message(&self.state.pauses, now);
                self.notices.say(
                    Notice::LifetimeCeiling {
                        message: message.clone(),
                    },
                    now,
                );
                self.begin_ending(ExitReason::LifetimeCeiling(message), now);
                return;
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
        while let Some(step) = self.end.step() {
            let out_of_time = self.end.out_of_time(now);
            let next = match step {
                Step::WaitPartial if self.end.partial_settled(self.source.partial, now) => {
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
                    if self.end.take_post_turn() {
                        self.post_owed_hooks(now, out);
                    }
                    let pending = self.hooks.any_in_flight();
                    if !pending && !self.owes_at_end(now) {
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
                    let confirmed = self.all_confirmed();
                    if confirmed && !self.end.hooks_spooled() {
                        let handed = self.spool_owed_hooks(now, out);
                        self.end.spooling_hooks(handed);
                    }
                    // The end waits for the hook spool's answers: what is reported and logged
                    // is where the stop went, not that it was due.
                    if confirmed && self.end.hooks_spool_settled() {
                        self.finish(out);
                        return;
                    }
                    if self.end.past_hard_end(now) {
                        if !confirmed {
                            self.notify(Notice::ShutdownBudgetSpent {
                                session: self.session_id().to_owned(),
                                first_line: self.delivery.outbox.confirmed_to(),
                            });
                        }
                        self.finish(out);
                        return;
                    }
                    break;
                }
            };
            if next == Step::Spool {
                self.enter_spool(now, out);
            }
            self.end.set_step(next);
        }
    }

    /// From here on, whatever the server did not confirm goes to the spool; without a
    /// watermark everything does (resending is harmless, losing a line is not). Requests in
    /// flight are abandoned (their answers are ignored).
    fn enter_spool(&mut self, now: Ts, out: &mut Vec<Action>) {
        self.end.bound_spooling(now);
        if self.delivery.watermark.is_none() {
            self.resume_at(Watermark::Empty);
            self.source.pending_rewind = false;
            out.push(Action::ReadFrom(self.source.fed_to));
        } else {
            self.delivery.requeue_unconfirmed();
        }
        self.hooks.abandon_in_flight();
    }

    /// Whether a request the ending posts is still owed at `now`.
    fn owes_at_end(&self, now: Ts) -> bool {
        Lifecycle::ALL
            .into_iter()
            .any(|k| hooks::policy(k).at_end && self.owed(k, now).is_some())
    }

    /// Online, once every line is confirmed: the requests the ending posts (the stop due or
    /// owed at this exit, the session end), one attempt each within the budget.
    fn post_owed_hooks(&mut self, now: Ts, out: &mut Vec<Action>) {
        for kind in Lifecycle::ALL {
            if hooks::policy(kind).at_end
                && !self.hooks.in_flight(kind)
                && let Some(hook) = self.owed(kind, now)
            {
                self.post(hook, out);
            }
        }
    }

    /// `--once`, after delivering: every decision once at `now`.
    fn decide_once(&mut self, now: Ts) {
        let due = self.due();
        if due.stall_warning.is_some_and(|t| t <= now) {
            self.warn_stall(now);
        }
        if self.role == Role::Session && due.idle_end.is_some_and(|t| t <= now) {
            self.end.set_reason(ExitReason::IdleTimeout);
            self.hooks
                .owe(self.session_end_hook(SessionEndReason::IdleTimeout, now));
        }
    }

    /// Whether a stop is due now (or owed at this exit, R4.4) and not acknowledged: the one
    /// place the exit consults the lifecycle decisions.
    fn stop_owed(&self, now: Ts) -> bool {
        let end = match self.end.reason() {
            Some(ExitReason::IdleReap | ExitReason::IdleTimeout) => decide::WatcherEnd::Idle,
            Some(ExitReason::LifetimeCeiling(_)) => decide::WatcherEnd::LifetimeCeiling,
            Some(ExitReason::ParentExited) => decide::WatcherEnd::ParentExited,
            Some(ExitReason::Signal(_)) => decide::WatcherEnd::Signal,
            Some(ExitReason::OnceDone) | None => decide::WatcherEnd::OnceDone,
        };
        self.owed_at_exit(end, now).is_some()
    }

    /// At the very end: the owed requests the ending posts go to the hook spool, but never
    /// ahead of their lines where their route says so. Returns how many were handed over.
    fn spool_owed_hooks(&mut self, now: Ts, out: &mut Vec<Action>) -> usize {
        let mut handed = 0;
        for kind in Lifecycle::ALL {
            let policy = hooks::policy(kind);
            let Some(hook) = self.owed(kind, now).filter(|_| policy.at_end) else {
                continue;
            };
            if !policy.after_turn_end || self.lines_through_turn_end() {
                out.push(Action::SpoolHook(hook));
                handed += 1;
            } else {
                self.notify(Notice::StopNotSpooled {
                    session: self.session_id().to_owned(),
                });
            }
        }
        handed
    }

    fn finish(&mut self, out: &mut Vec<Action>) {
        self.delivery.flush_refused_log(&mut self.notices, self.now);
        let reason = self.end.reason().cloned().unwrap_or(ExitReason::OnceDone);
        self.notify(Notice::WatcherExiting {
            reason: reason.as_str(),
        });
        self.end.done = true;
        out.push(Action::Exit(reason));
    }

    /// Requests: the watermark, the requests the lines wait for (subagent-start), the next
    /// batch (or spool record).
    fn requests(&mut self, now: Ts, out: &mut Vec<Action>) {
        if self.identity.is_none() {
            return;
        }
        if self.settings.online && !self.spooling() {
            self.delivery.ask_watermark(now, out);
            for kind in Lifecycle::ALL {
                if hooks::policy(kind).before_lines
                    && !self.hooks.in_flight(kind)
                    && let Some(hook) = self.hooks.owed(kind).cloned()
                {
                    self.post(hook, out);
                }
            }
            if self.delivery.watermark.is_none()
                || self.delivery.recheck_watermark
                || self.hooks.holds_lines()
            {
                return;
            }
            let id = self.identity.as_ref();
            let agent = id.and_then(|i| i.agent_id.as_deref());
            self.delivery
                .send_next(now, session_id(id), agent, &self.vendor, out);
        } else {
            let (identity, vendor) = (self.identity.as_ref(), &self.vendor);
            self.delivery
                .spool_next(now, |lines| batch_of(identity, vendor, lines), out);
        }
    }

    /// Says what happened: a log line and the counters (see [`crate::telemetry`]).
    fn notify(&mut self, notice: Notice) {
        self.notices.say(notice, self.now);
    }

    /// The earliest decision due, by name (`inspect`'s names), while running.
    pub(crate) fn next_due(&self) -> Option<(&'static str, Ts)> {
        if self.end.done || self.end.is_ending() {
            return None;
        }
        let due = self.due();
        let stop = due.subagent_stop.filter(|_| !self.stop_posted());
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
            self.hooks.stop_progress(),
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
        self.end.is_ending()
    }

    /// What became of the stop, for `--once`'s summary.
    pub(crate) fn stop_summary(&self, now: Ts) -> Option<String> {
        match (self.role, self.hooks.outcome(Lifecycle::SubagentStop)) {
            (Role::Child, Some(Outcome::Posted)) => Some("posted".into()),
            (Role::Child, Some(Outcome::Spooled)) => Some("spooled".into()),
            (Role::Child, None) => Some(match self.due().subagent_stop {
                Some(t) if t <= now => "due, not delivered".into(),
                Some(t) => format!("not due until {t}"),
                None => format!("not due (turn {})", self.state.turn.as_str()),
            }),
            (Role::Session, _) => None,
        }
    }
}

/// Moves the lifetime ceiling by every grant of pause credit owed at `now` (`on_grant` hears
/// each); `true`: it fires. A grant takes all the credit not granted yet (or the rest of the
/// cap), so at one `now` a second step fires or waits: this ends after two grants at most.
fn extend_ceiling(
    c: &mut Ceiling,
    pauses: &[Pause],
    now: Ts,
    mut on_grant: impl FnMut(Grant),
) -> bool {
    loop {
        match c.step(pauses, now) {
            CeilingStep::NotYet(_) => return false,
            CeilingStep::Granted(g) => on_grant(g),
            CeilingStep::Fire => return true,
        }
    }
}

fn session_id(identity: Option<&Identity>) -> &str {
    identity.and_then(|i| i.session_id.as_deref()).unwrap_or("")
}

/// A spool record of `lines` under the key (`None`: no session id yet).
fn batch_of(
    identity: Option<&Identity>,
    vendor: &str,
    lines: &[ShipLine],
) -> Option<TranscriptBatch> {
    let id = identity?;
    Some(TranscriptBatch {
        session_id: id.session_id.clone()?,
        agent_id: id.agent_id.clone(),
        vendor: vendor.to_owned(),
        lines: lines.iter().map(ShipLine::text).collect(),
        line_numbers: lines.iter().map(|l| l.number).collect(),
    })
}

/// The shared redactor, compiled when the first line is shipped rather than when a pipeline is
/// made, and let go again after a quiet spell (the host's poll): an idle watcher (or a
/// supervisor of idle children) does not hold the compiled rules.
fn redactor() -> Arc<Redactor> {
    crate::ship::redact::global()
}

mod delivery;
mod ending;
mod hooks;

#[cfg(test)]
mod tests;
