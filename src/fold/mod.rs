//! The folded state of one rollout: what the watcher knows after reading its raw lines.
//!
//! Pure: [`State::apply`] takes one classified raw line and the time the watcher observed it.
//! What a Codex line means (a turn's start or end, a call, a pause, mail) is Codex's module's
//! to say ([`crate::codex::observe`]); the fold keeps what follows from it.
//! Folding is idempotent under restart (a prefix then the rest equals the whole), which is
//! what lets a restarted watcher seed from disk and decide exactly as one that never stopped.
//! The fold always reads **raw** lines: the redacted copy shipped to the server can lack the
//! `call_id` (an oversize placeholder) that clears a pending call.

mod packed;
pub mod seed;

use std::collections::VecDeque;
use std::time::Duration;

use crate::codex::header::Identity;
use crate::codex::lines::Line;
use crate::codex::observe::{CallEdge, Observation, observe};
use crate::codex::{Kind, LineInfo, PayloadType, RateWindow};
use crate::time::Ts;

/// Pending calls kept at most; beyond it the newest are not tracked (a turn never has this
/// many calls in flight; the bound only keeps a hostile file from growing memory).
pub const MAX_PENDING: usize = 4096;

/// Pauses remembered at most (for credit and `inspect`); the oldest are forgotten first.
pub const MAX_PAUSES: usize = 256;

/// Slack added to a reported reset time: the provider's clock and ours differ a little.
pub(crate) const PAUSE_SLACK: Duration = Duration::from_secs(30);

/// Mail announcements remembered at most while waiting for their `agent_message`; beyond it
/// the oldest are forgotten (Codex writes each announcement right before its message).
pub(crate) const MAX_MAIL_ANNOUNCEMENTS: usize = 64;

/// Where the child's current (or last) turn stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Turn {
    #[default]
    None,
    Open,
    Completed,
    Aborted,
}

impl Turn {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Turn::None => "none",
            Turn::Open => "open",
            Turn::Completed => "completed",
            Turn::Aborted => "aborted",
        }
    }

    /// Completed or aborted: the turn has ended.
    pub(crate) fn is_ended(self) -> bool {
        matches!(self, Turn::Completed | Turn::Aborted)
    }
}

/// One tool call in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingCall {
    pub call_id: String,
    pub name: Option<String>,
    pub since: Ts,
}

/// Why a rate-limit window was taken as the one that parks the thread (docs/behaviour.md R4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingReason {
    /// One or more windows read `used_percent >= 100`; this one resets latest among them.
    AtLimit {
        /// How many windows were at 100 %.
        at_limit: usize,
    },
    /// No window read 100 % (a stale reading, such as the real 99 % five-hour window): the
    /// highest reading binds, the earliest reset breaking ties.
    HighestReading,
}

impl BindingReason {
    /// A short explanation for `inspect`.
    pub(crate) fn describe(self) -> String {
        match self {
            BindingReason::AtLimit { at_limit: 1 } => "the only window at 100%".to_string(),
            BindingReason::AtLimit { at_limit } => {
                format!("latest reset of the {at_limit} windows at 100%")
            }
            BindingReason::HighestReading => {
                "highest reading; no window at 100% (ties: earliest reset)".to_string()
            }
        }
    }
}

/// The rate-limit window that parks a thread, from the `token_count` before its usage-limit
/// `task_complete`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Binding {
    pub window: RateWindow,
    /// Its position among the line's windows (0-based), to name a window without a known key.
    pub position: usize,
    pub reason: BindingReason,
}

impl Binding {
    /// The window's reset, when a usable time.
    pub(crate) fn resets_at(&self) -> Option<Ts> {
        self.window.resets_at.and_then(Ts::from_unix_secs_f64)
    }

    /// The window's name: its key when known (`primary`), else `window <n>` (1-based).
    pub(crate) fn name(&self) -> String {
        self.window
            .name
            .map_or_else(|| format!("window {}", self.position + 1), str::to_string)
    }
}

/// A usage-limit pause (docs/behaviour.md L5).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pause {
    /// When the `task_complete` with `usage_limit_exceeded` was observed.
    pub opened_at: Ts,
    /// The provider's reported reset (`resets_at`, without slack), when one was usable.
    pub resets_at: Option<Ts>,
    /// `resets_at + 30 s` when usable (later than `opened_at`); `None`: unknowable window.
    pub ends_at: Option<Ts>,
    /// When a line (a new turn, any `response_item`) closed it before its reported end.
    pub closed_at: Option<Ts>,
    /// The window that supplied its end (for `inspect`), when any window was binding.
    pub binding: Option<Binding>,
}

/// What `inspect` shows of a pause at a given time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseState {
    Open,
    Closed,
    Expired,
    Unknowable,
}

impl PauseState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PauseState::Open => "open",
            PauseState::Closed => "closed",
            PauseState::Expired => "expired",
            PauseState::Unknowable => "unknowable",
        }
    }
}

impl Pause {
    /// When the pause stops parking the thread: its closing line, else its reported end.
    /// `None` for an unknowable window.
    pub(crate) fn released_at(&self) -> Option<Ts> {
        let end = self.ends_at?;
        Some(self.closed_at.map_or(end, |c| c.min(end)))
    }

    pub fn state_at(&self, now: Ts) -> PauseState {
        match (self.ends_at, self.closed_at) {
            (None, _) => PauseState::Unknowable,
            (Some(_), Some(_)) => PauseState::Closed,
            (Some(end), None) if now >= end => PauseState::Expired,
            _ => PauseState::Open,
        }
    }
}

/// Line counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Counters {
    /// Every `\n`-terminated line, blank and malformed ones included.
    pub lines: u64,
    pub blank: u64,
    pub malformed: u64,
    /// Lines over the 64 KiB redaction limit.
    pub oversize: u64,
    /// Lines of queued inter-agent mail (the `trigger_turn: false` announcement and its
    /// `agent_message`): shipped, but not activity (docs/behaviour.md R4.3).
    pub queued_mail: u64,
    /// Lines of the parent's history that Codex copied into a sub-agent's rollout before the
    /// child's own (S6): shipped, never folded.
    pub inherited: u64,
    /// Bytes of the complete lines, terminators (and a leading BOM) included.
    pub bytes: u64,
}

/// One complete physical line as the tail reader hands it to the fold.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// 0-based physical line number.
    pub number: u64,
    /// Bytes the line occupies in the file, terminator included.
    pub raw_len: u64,
    /// The line holds only whitespace.
    pub blank: bool,
    /// The line's text is over the redaction size limit.
    pub oversize: bool,
    /// Its classification (ignored for blank lines).
    pub info: &'a LineInfo,
}

impl Line {
    /// The line as the fold takes it; `None` when the cursor does not classify. Written here,
    /// beside [`Observed`], so that a line knows nothing of the fold that reads it.
    pub fn observed(&self) -> Option<Observed<'_>> {
        Some(Observed {
            number: self.number,
            raw_len: self.raw_len(),
            blank: self.blank,
            oversize: self.oversize,
            info: self.info.as_ref()?,
        })
    }
}

/// The folded state (docs/behaviour.md L2).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct State {
    /// Identity from the first `session_meta`, once seen.
    pub identity: Option<Identity>,
    /// The first line has been folded (so a later `session_meta` is never the header).
    pub first_line_seen: bool,
    /// The header's `subagent_history_start_ordinal`: lines whose `ordinal` is below it are
    /// the parent's history, copied (S6).
    pub history_start: Option<u64>,
    pub turn: Turn,
    pub turn_id: Option<String>,
    /// The line number of the last turn end (`task_complete` or `turn_aborted`).
    pub turn_end_line: Option<u64>,
    /// What the stop reports for the last ended turn: `task_complete.last_agent_message`
    /// (null → empty), or Codex's `error.message` for a usage-limit end (or any failed turn
    /// with no agent message).
    pub last_agent_message: Option<String>,
    /// The text of the last `event_msg` `agent_message`, whatever the turn: what a stop owed
    /// for a turn that never ended reports (docs/behaviour.md R4.4).
    pub last_agent_text: Option<String>,
    /// Announced inter-agent mail still waiting for its `agent_message`, oldest first: `true`
    /// when queued (`trigger_turn: false`), `false` when it triggers a turn.
    pub mail_announcements: VecDeque<bool>,
    /// Calls in flight, oldest first.
    pub pending: Vec<PendingCall>,
    pub last_activity: Option<Ts>,
    /// Kind of the last non-blank line, for the stall warning.
    pub last_kind: Option<(Kind, PayloadType, bool)>,
    /// Windows of the most recent `token_count` (empty when it had none).
    pub last_rate_limits: Vec<RateWindow>,
    /// Usage-limit pauses, oldest first.
    pub pauses: Vec<Pause>,
    /// A stall warning fired for the current silence (set by the runtime, cleared by a line).
    pub stalled: bool,
    pub counters: Counters,
}

impl State {
    pub fn new() -> State {
        State::default()
    }

    /// Folds one complete line observed at `at`.
    pub fn apply(&mut self, line: Observed<'_>, at: Ts) {
        let first = !self.first_line_seen;
        self.first_line_seen = true;
        self.counters.lines += 1;
        self.counters.bytes += line.raw_len;
        if line.oversize {
            self.counters.oversize += 1;
        }
        if line.blank {
            self.counters.blank += 1;
            return;
        }
        let info = line.info;
        if first {
            self.history_start = info.meta.as_ref().and_then(|m| m.history_start_ordinal);
        } else if let (Some(start), Some(ordinal)) = (self.history_start, info.ordinal)
            && ordinal < start
        {
            // The parent's turn, its spawning call still in flight, its token counts: none of
            // it is this child's. Folding it would show the parent's open turn in a child that
            // has not begun, hold its reap for the orphan rule and warn of a stall that is not
            // its own.
            self.counters.inherited += 1;
            return;
        }
        let observation = (!info.malformed).then(|| observe(info));
        if let Some(o) = &observation
            && self.is_queued_mail(o)
        {
            // Queued mail opens no turn, closes no pause and is not activity for any decision:
            // a finished child that receives mail is still finished.
            self.counters.queued_mail += 1;
            return;
        }
        self.last_activity = Some(at);
        self.stalled = false;
        self.last_kind = Some((info.kind, info.payload_type, info.malformed));
        let Some(observation) = observation else {
            self.counters.malformed += 1;
            return;
        };
        match observation {
            Observation::Header(meta) => {
                if first && self.identity.is_none() {
                    self.identity = Some(Identity::from_meta(meta));
                }
            }
            Observation::ModelOutput { call, .. } => self.apply_model_output(call, at),
            Observation::TurnStarted { turn_id } => {
                self.turn = Turn::Open;
                self.turn_id = turn_id.map(str::to_owned);
                // A call never outlives its turn: whatever an interrupted turn (or a parent's
                // copied history) left unanswered cannot block anything later.
                self.pending.clear();
                self.close_pauses(at);
            }
            Observation::TurnCompleted {
                turn_id,
                message,
                usage_limit,
            } => {
                self.end_turn(Turn::Completed, turn_id, line.number);
                self.last_agent_message = Some(message);
                if usage_limit {
                    self.open_pause(at);
                }
            }
            Observation::TurnAborted { turn_id } => {
                self.end_turn(Turn::Aborted, turn_id, line.number);
            }
            Observation::RateLimits(windows) => self.last_rate_limits = windows.to_vec(),
            Observation::AgentText(text) => {
                if let Some(text) = text {
                    self.last_agent_text = Some(text.to_owned());
                }
            }
            Observation::MailAnnounced { .. } | Observation::Activity => {}
        }
    }

    /// Whether the line is queued inter-agent mail (R4.3), remembering announcements: an
    /// announcement that triggers no turn queues the mail it announces, and the next mail is
    /// that one. An announcement that triggers a turn (or says nothing of it) is kept in line
    /// too, so each message is matched with its own announcement.
    fn is_queued_mail(&mut self, observation: &Observation<'_>) -> bool {
        match observation {
            Observation::MailAnnounced { queued } => {
                if self.mail_announcements.len() >= MAX_MAIL_ANNOUNCEMENTS {
                    self.mail_announcements.pop_front();
                }
                self.mail_announcements.push_back(*queued);
                *queued
            }
            Observation::ModelOutput { mail: true, .. } => {
                self.mail_announcements.pop_front() == Some(true)
            }
            _ => false,
        }
    }

    fn apply_model_output(&mut self, call: Option<CallEdge<'_>>, at: Ts) {
        // Any model output means the thread works again: the turn is open (re-engagement
        // after a completed turn) and a usage-limit pause is over.
        self.turn = Turn::Open;
        self.close_pauses(at);
        match call {
            Some(CallEdge::Started { call_id, name })
                if self.pending.len() < MAX_PENDING
                    && !self.pending.iter().any(|p| p.call_id == call_id) =>
            {
                self.pending.push(PendingCall {
                    call_id: call_id.to_owned(),
                    name: name.map(str::to_owned),
                    since: at,
                });
            }
            Some(CallEdge::Answered { call_id }) => self.pending.retain(|p| p.call_id != call_id),
            Some(CallEdge::Started { .. }) | None => {}
        }
    }

    /// A turn's end (completed or aborted) at line `number`; a turn id it names is the turn's.
    fn end_turn(&mut self, turn: Turn, turn_id: Option<&str>, number: u64) {
        self.turn = turn;
        if let Some(id) = turn_id {
            self.turn_id = Some(id.to_owned());
        }
        self.turn_end_line = Some(number);
        self.pending.clear();
    }

    /// Opens a pause at `at` whose end comes from the most recent `token_count` (section 5).
    fn open_pause(&mut self, at: Ts) {
        let binding = binding_window(&self.last_rate_limits);
        let resets_at = binding.and_then(|b| b.resets_at());
        let ends_at = resets_at
            .map(|r| r.plus(PAUSE_SLACK))
            .filter(|end| *end > at);
        if self.pauses.len() >= MAX_PAUSES {
            self.pauses.remove(0);
        }
        self.pauses.push(Pause {
            opened_at: at,
            resets_at: if ends_at.is_some() { resets_at } else { None },
            ends_at,
            closed_at: None,
            binding,
        });
    }

    /// A new turn or any `response_item` closes every pause still open at `at`.
    fn close_pauses(&mut self, at: Ts) {
        for p in self.pauses.iter_mut().rev() {
            match (p.ends_at, p.closed_at) {
                (Some(end), None) if at < end => p.closed_at = Some(at),
                // Pauses are closed in order; an earlier one cannot still be open.
                (_, Some(_)) => break,
                _ => {}
            }
        }
    }

    /// The most recent pause, usable or not (for `inspect`).
    pub fn last_pause(&self) -> Option<&Pause> {
        self.pauses.last()
    }

    /// The latest time any usable pause parks the thread until (its close or reported end).
    pub(crate) fn pause_release(&self) -> Option<Ts> {
        self.pauses.iter().filter_map(Pause::released_at).max()
    }

    /// Whether a usable pause is open at `now`.
    pub fn pause_open_at(&self, now: Ts) -> bool {
        self.pauses
            .iter()
            .any(|p| p.state_at(now) == PauseState::Open)
    }

    /// The last line, or the close of the last pause when later (parked time is not
    /// idleness). An open pause counts until its reported end.
    pub(crate) fn quiet_since(&self) -> Option<Ts> {
        match (self.last_activity, self.pause_release()) {
            (Some(a), Some(p)) => Some(a.max(p)),
            (a, p) => a.or(p),
        }
    }

    /// The time idle end and reap count from (docs/behaviour.md R4.5):
    /// `max(last activity, close of the last pause, watcher start)`, so a watcher started on a
    /// file that was idle for hours (a `codex resume` appends to the old file) gets a full
    /// window.
    pub(crate) fn idle_since(&self, watcher_start: Ts) -> Ts {
        self.quiet_since()
            .map_or(watcher_start, |q| q.max(watcher_start))
    }

    /// Which of the three [`State::idle_since`] takes, for `inspect` and logs.
    pub fn idle_since_source(&self, watcher_start: Ts) -> IdleSince {
        let since = self.idle_since(watcher_start);
        if self.last_activity == Some(since) {
            IdleSince::LastActivity
        } else if self.pause_release() == Some(since) {
            IdleSince::PauseClose
        } else {
            IdleSince::WatcherStart
        }
    }

    /// What a stop posted now would carry as `last_assistant_message`: the ended turn's
    /// message, else (a turn that never ended, R4.4) the last agent message seen, else empty.
    pub fn stop_message(&self) -> String {
        let message = if self.turn.is_ended() {
            self.last_agent_message.as_deref()
        } else {
            self.last_agent_text
                .as_deref()
                .or(self.last_agent_message.as_deref())
        };
        message.unwrap_or_default().to_string()
    }
}

/// The moment idle end and reap count from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleSince {
    LastActivity,
    PauseClose,
    WatcherStart,
}

impl IdleSince {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            IdleSince::LastActivity => "last activity",
            IdleSince::PauseClose => "close of the last pause",
            IdleSince::WatcherStart => "watcher start",
        }
    }
}

/// The window that parks the thread (docs/behaviour.md R4.1), from the windows of the most
/// recent `token_count` at or before the usage-limit `task_complete`: the windows at
/// `used_percent >= 100` bind, the latest reset among them winning; with none at 100, the
/// single window with the highest `used_percent` binds, the earliest reset breaking ties. A
/// stale 99 % five-hour window must not turn into a weekly reset days away. `None` when no
/// window has a `used_percent`.
pub fn binding_window(windows: &[RateWindow]) -> Option<Binding> {
    let reset = |w: &RateWindow| w.resets_at.and_then(Ts::from_unix_secs_f64);
    let read: Vec<(usize, &RateWindow, f64)> = windows
        .iter()
        .enumerate()
        .filter_map(|(i, w)| w.used_percent.filter(|u| u.is_finite()).map(|u| (i, w, u)))
        .collect();
    let at_limit = read.iter().filter(|(_, _, u)| *u >= 100.0).count();
    let (position, window) = if at_limit > 0 {
        // Latest usable reset among the windows at the limit; one without a reset only when
        // none has one.
        read.iter()
            .filter(|(_, _, u)| *u >= 100.0)
            .max_by_key(|(i, w, _)| (reset(w), std::cmp::Reverse(*i)))
            .map(|(i, w, _)| (*i, **w))?
    } else {
        // Highest reading; ties go to the earliest usable reset (a window with no reset last).
        read.iter()
            .max_by(|(ia, a, ua), (ib, b, ub)| {
                ua.total_cmp(ub)
                    .then_with(|| match (reset(a), reset(b)) {
                        (Some(x), Some(y)) => y.cmp(&x),
                        (Some(_), None) => std::cmp::Ordering::Greater,
                        (None, Some(_)) => std::cmp::Ordering::Less,
                        (None, None) => std::cmp::Ordering::Equal,
                    })
                    .then_with(|| ib.cmp(ia))
            })
            .map(|(i, w, _)| (*i, **w))?
    };
    Some(Binding {
        window,
        position,
        reason: if at_limit > 0 {
            BindingReason::AtLimit { at_limit }
        } else {
            BindingReason::HighestReading
        },
    })
}
