//! The folded state of one rollout: what the watcher knows after reading its raw lines.
//!
//! Pure: [`State::apply`] takes one classified raw line and the time the watcher observed it.
//! Folding is idempotent under restart (a prefix then the rest equals the whole), which is
//! what lets a restarted watcher seed from disk and decide exactly as one that never stopped.
//! The fold always reads **raw** lines: the redacted copy shipped to the server can lack the
//! `call_id` (an oversize placeholder) that clears a pending call.

use std::time::Duration;

use crate::rollout::header::Identity;
use crate::rollout::{Kind, LineInfo, PayloadType, RateWindow};
use crate::time::Ts;

/// Pending calls kept at most; beyond it the newest are not tracked (a turn never has this
/// many calls in flight; the bound only keeps a hostile file from growing memory).
pub const MAX_PENDING: usize = 4096;

/// Pauses remembered at most (for credit and `inspect`); the oldest are forgotten first.
pub const MAX_PAUSES: usize = 256;

/// Slack added to a reported reset time: the provider's clock and ours differ a little.
pub const PAUSE_SLACK: Duration = Duration::from_secs(30);

/// The `codex_error_info` that parks a thread until its usage limit resets.
pub const USAGE_LIMIT: &str = "usage_limit_exceeded";

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
    pub fn as_str(self) -> &'static str {
        match self {
            Turn::None => "none",
            Turn::Open => "open",
            Turn::Completed => "completed",
            Turn::Aborted => "aborted",
        }
    }

    /// Completed or aborted: the turn has ended.
    pub fn is_ended(self) -> bool {
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

/// A usage-limit pause (`spec/lifecycle.md` section 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pause {
    /// When the `task_complete` with `usage_limit_exceeded` was observed.
    pub opened_at: Ts,
    /// The provider's reported reset (`resets_at`, without slack), when one was usable.
    pub resets_at: Option<Ts>,
    /// `resets_at + 30 s` when usable (later than `opened_at`); `None`: unknowable window.
    pub ends_at: Option<Ts>,
    /// When a line (a new turn, any `response_item`) closed it before its reported end.
    pub closed_at: Option<Ts>,
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
    pub fn as_str(self) -> &'static str {
        match self {
            PauseState::Open => "open",
            PauseState::Closed => "closed",
            PauseState::Expired => "expired",
            PauseState::Unknowable => "unknowable",
        }
    }
}

impl Pause {
    /// Whether the pause has a usable window (only those count for any decision).
    pub fn is_usable(&self) -> bool {
        self.ends_at.is_some()
    }

    /// When the pause stops parking the thread: its closing line, else its reported end.
    /// `None` for an unknowable window.
    pub fn released_at(&self) -> Option<Ts> {
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

/// The folded state (`spec/lifecycle.md` section 2).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct State {
    /// Identity from the first `session_meta`, once seen.
    pub identity: Option<Identity>,
    /// The first line has been folded (so a later `session_meta` is never the header).
    pub first_line_seen: bool,
    pub turn: Turn,
    pub turn_id: Option<String>,
    /// The line number of the last turn end (`task_complete` or `turn_aborted`).
    pub turn_end_line: Option<u64>,
    pub last_agent_message: Option<String>,
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
        self.last_activity = Some(at);
        self.stalled = false;
        let info = line.info;
        self.last_kind = Some((info.kind, info.payload_type, info.malformed));
        if info.malformed {
            self.counters.malformed += 1;
            return;
        }
        match info.kind {
            Kind::SessionMeta => {
                if first
                    && self.identity.is_none()
                    && let Some(meta) = &info.meta
                {
                    self.identity = Some(Identity::from_meta(meta));
                }
            }
            Kind::ResponseItem => self.apply_response_item(info, at),
            Kind::EventMsg => self.apply_event(line.number, info, at),
            _ => {}
        }
    }

    fn apply_response_item(&mut self, info: &LineInfo, at: Ts) {
        // Any model output means the thread works again: the turn is open (re-engagement
        // after a completed turn) and a usage-limit pause is over.
        self.turn = Turn::Open;
        self.close_pauses(at);
        let Some(call_id) = &info.call_id else {
            return;
        };
        if info.payload_type.is_call() {
            if self.pending.len() < MAX_PENDING
                && !self.pending.iter().any(|p| &p.call_id == call_id)
            {
                self.pending.push(PendingCall {
                    call_id: call_id.clone(),
                    name: info.name.clone(),
                    since: at,
                });
            }
        } else if info.payload_type.is_output() {
            // Whatever the output's type: a `local_shell_call` is answered by a
            // `function_call_output`.
            self.pending.retain(|p| &p.call_id != call_id);
        }
    }

    fn apply_event(&mut self, number: u64, info: &LineInfo, at: Ts) {
        match info.payload_type {
            PayloadType::TaskStarted => {
                self.turn = Turn::Open;
                self.turn_id = info.turn_id.clone();
                // A call never outlives its turn: whatever an interrupted turn (or a parent's
                // copied history) left unanswered cannot block anything later.
                self.pending.clear();
                self.close_pauses(at);
            }
            PayloadType::TaskComplete => {
                self.turn = Turn::Completed;
                if info.turn_id.is_some() {
                    self.turn_id = info.turn_id.clone();
                }
                self.turn_end_line = Some(number);
                self.last_agent_message = Some(info.last_agent_message.clone().unwrap_or_default());
                self.pending.clear();
                if info.codex_error_info.as_deref() == Some(USAGE_LIMIT) {
                    self.open_pause(at);
                }
            }
            PayloadType::TurnAborted => {
                self.turn = Turn::Aborted;
                if info.turn_id.is_some() {
                    self.turn_id = info.turn_id.clone();
                }
                self.turn_end_line = Some(number);
                self.pending.clear();
            }
            PayloadType::TokenCount => {
                self.last_rate_limits.clone_from(&info.rate_limits);
            }
            _ => {}
        }
    }

    /// Opens a pause at `at` whose end comes from the most recent `token_count` (section 5).
    fn open_pause(&mut self, at: Ts) {
        let resets_at = reported_reset(&self.last_rate_limits);
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
    pub fn pause_release(&self) -> Option<Ts> {
        self.pauses.iter().filter_map(Pause::released_at).max()
    }

    /// Whether a usable pause is open at `now`.
    pub fn pause_open_at(&self, now: Ts) -> bool {
        self.pauses
            .iter()
            .any(|p| p.state_at(now) == PauseState::Open)
    }

    /// The time idle and grace windows count from: the last line, or the close of the last
    /// pause when later (parked time is not idleness).
    pub fn quiet_since(&self) -> Option<Ts> {
        match (self.last_activity, self.pause_release()) {
            (Some(a), Some(p)) => Some(a.max(p)),
            (a, p) => a.or(p),
        }
    }
}

/// The reported reset of a usage limit: the latest `resets_at` among windows at
/// `used_percent >= 100`, else among all windows. `None` when no usable value exists.
pub fn reported_reset(windows: &[RateWindow]) -> Option<Ts> {
    let latest = |at_limit: bool| {
        windows
            .iter()
            .filter(|w| !at_limit || w.used_percent.is_some_and(|u| u >= 100.0))
            .filter_map(|w| w.resets_at.and_then(Ts::from_unix_secs_f64))
            .max()
    };
    let any_at_limit = windows
        .iter()
        .any(|w| w.used_percent.is_some_and(|u| u >= 100.0));
    if any_at_limit {
        latest(true)
    } else {
        latest(false)
    }
}
