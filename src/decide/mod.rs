//! Pure decisions: given the folded state, the settings and `now`, when is each action due?
//!
//! Every function here returns the earliest time its decision becomes due if nothing else is
//! appended (`None`: it cannot become due). The running watcher sleeps until the earliest of
//! them; `inspect` prints them. One implementation serves both, so what `inspect` shows is
//! what the watcher acts on (docs/behaviour.md L4 and L5).

use std::time::Duration;

use crate::codex::header::Role;
use crate::fold::{Pause, State, Turn};
use crate::time::Ts;

/// A call pending this long no longer counts as in flight: no single Codex tool legitimately
/// runs longer (the opt-in sleep tool is capped at 12 h), so it was orphaned by a crash.
pub(crate) const ORPHANED_CALL_AGE: Duration = Duration::from_secs(12 * 3600);

/// A grant of pause credit is never smaller than this (unless the cap says otherwise).
pub(crate) const MIN_GRANT: Duration = Duration::from_secs(1);

const ONE_MS: Duration = Duration::from_millis(1);

/// When no call counts as in flight any more: when the newest pending call turns 12 h old.
/// `None` when nothing is pending.
pub(crate) fn calls_settle_at(state: &State) -> Option<Ts> {
    state
        .pending
        .iter()
        .map(|c| c.since)
        .max()
        .map(|since| since.plus(ORPHANED_CALL_AGE))
}

/// Whether this process still has a stop to post, and when it may next try.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StopProgress {
    /// A `2xx` was received: the stop latches for the life of the process.
    pub posted: bool,
    /// After a failure, the next attempt is not due before this time.
    pub next_attempt: Option<Ts>,
}

/// **4a. Subagent stop** (child role): the turn ended, nothing in flight, and `grace` has
/// passed (`>=`) since the last line. A usage-limit pause does not hold it (docs/behaviour.md
/// R4.2): Codex never resumes such a turn by itself, so it ends like any other, and the stop
/// carries Codex's message. Queued mail is not a line here (R4.3).
pub fn subagent_stop_due(
    state: &State,
    role: Role,
    grace: Duration,
    progress: StopProgress,
) -> Option<Ts> {
    if role != Role::Child || progress.posted || !state.turn.is_ended() {
        return None;
    }
    let mut due = state.last_activity?.plus(grace);
    if let Some(settle) = calls_settle_at(state) {
        due = due.max(settle);
    }
    if let Some(next) = progress.next_attempt {
        due = due.max(next);
    }
    Some(due)
}

/// **4b. Idle end** (a session's idle end, a child's reap): more than `window` (`>`) since
/// `max(last activity, close of the last pause, watcher start)` (docs/behaviour.md R4.5: a
/// watcher started on a file idle for hours still gets a full window), and no tool call in
/// flight. An open pause counts until its reported end, so it keeps this from firing.
pub fn idle_end_due(state: &State, window: Duration, watcher_start: Ts) -> Option<Ts> {
    let mut due = state.idle_since(watcher_start).plus(window).plus(ONE_MS);
    if let Some(settle) = calls_settle_at(state) {
        due = due.max(settle);
    }
    Some(due)
}

/// **4c. Stall warning**: a turn is open, nothing in flight, no warning yet for this silence,
/// and more than `window` (`>`) of silence. `None` window: disabled.
pub fn stall_due(state: &State, window: Option<Duration>) -> Option<Ts> {
    let window = window?;
    if state.turn != Turn::Open || state.stalled {
        return None;
    }
    let mut due = state.last_activity?.plus(window).plus(ONE_MS);
    if let Some(settle) = calls_settle_at(state) {
        due = due.max(settle);
    }
    Some(due)
}

/// The part of the usable pauses, each clamped to its own window, to its actual close and to
/// `now`, that falls inside `[started, now]`; overlapping pauses count once.
pub fn pause_credit(pauses: &[Pause], started: Ts, now: Ts) -> Duration {
    let mut spans: Vec<(Ts, Ts)> = pauses
        .iter()
        .filter_map(|p| {
            let lo = p.opened_at.max(started);
            let hi = p.released_at()?.min(now);
            (hi > lo).then_some((lo, hi))
        })
        .collect();
    spans.sort_unstable();
    let mut total: i64 = 0;
    let mut current: Option<(Ts, Ts)> = None;
    for (lo, hi) in spans {
        current = match current {
            Some((clo, chi)) if lo <= chi => Some((clo, chi.max(hi))),
            Some((clo, chi)) => {
                total = total.saturating_add(chi.since(clo));
                Some((lo, hi))
            }
            None => Some((lo, hi)),
        };
    }
    if let Some((clo, chi)) = current {
        total = total.saturating_add(chi.since(clo));
    }
    Duration::from_millis(u64::try_from(total).unwrap_or(0))
}

/// What the lifetime ceiling does at a given time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CeilingStep {
    /// Not reached yet; check again at this time.
    NotYet(Ts),
    /// The deadline was reached with uncredited pause time: it moved by `grant`.
    Granted(Grant),
    /// The watcher must end now.
    Fire,
}

/// One extension of the lifetime ceiling by pause credit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub grant: Duration,
    pub total_granted: Duration,
    pub remaining_cap: Duration,
    pub grant_count: u32,
    pub new_deadline: Ts,
}

/// **4d. Lifetime ceiling** with usage-limit pause credit (section 5): `started + lifetime`,
/// extended lazily at the deadline by credited pause time, up to `cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ceiling {
    pub started: Ts,
    pub base: Duration,
    pub cap: Duration,
    pub deadline: Ts,
    pub granted: Duration,
    pub grants: u32,
}

impl Ceiling {
    pub fn new(started: Ts, lifetime: Duration, cap: Duration) -> Ceiling {
        Ceiling {
            started,
            base: lifetime,
            cap,
            deadline: started.plus(lifetime),
            granted: Duration::ZERO,
            grants: 0,
        }
    }

    /// Advances the ceiling at `now`. New lines never move it; only pause credit does, and
    /// only when the deadline is reached. Call again after a grant: a late check can owe
    /// several steps.
    pub fn step(&mut self, pauses: &[Pause], now: Ts) -> CeilingStep {
        if now < self.deadline {
            return CeilingStep::NotYet(self.deadline);
        }
        let credit = pause_credit(pauses, self.started, now);
        let uncredited = credit.saturating_sub(self.granted);
        if self.granted >= self.cap || uncredited.is_zero() {
            return CeilingStep::Fire;
        }
        // The cap always wins over the 1 s floor.
        let grant = uncredited.max(MIN_GRANT).min(self.cap - self.granted);
        self.granted += grant;
        self.grants += 1;
        self.deadline = self.deadline.plus(grant);
        CeilingStep::Granted(Grant {
            grant,
            total_granted: self.granted,
            remaining_cap: self.cap - self.granted,
            grant_count: self.grants,
            new_deadline: self.deadline,
        })
    }

    /// The exit message when the ceiling fires at `now` (docs/behaviour.md L5).
    pub fn exit_message(&self, pauses: &[Pause], now: Ts) -> String {
        let last_usable = pauses
            .iter()
            .rev()
            .find(|p| p.released_at().is_some_and(|r| r > self.started));
        let Some(last) = last_usable else {
            return format!(
                "lifetime ceiling reached after {}ms",
                now.since(self.started).max(0)
            );
        };
        let exhausted = if self.granted >= self.cap {
            ", EXHAUSTED"
        } else {
            ""
        };
        let plural = if self.grants == 1 { "grant" } else { "grants" };
        let reset = last
            .resets_at
            .map_or_else(|| "unknown".to_string(), Ts::rfc3339);
        format!(
            "lifetime ceiling reached [base {}ms; pause credit {}ms across {} {plural} (cap {}ms{exhausted}); last pause: usage_limit_exceeded until {reset}]",
            self.base.as_millis(),
            self.granted.as_millis(),
            self.grants,
            self.cap.as_millis(),
        )
    }
}

/// The due times of every decision, as `inspect` shows them and the watcher acts on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Due {
    pub subagent_stop: Option<Ts>,
    pub idle_end: Option<Ts>,
    pub stall_warning: Option<Ts>,
    pub lifetime_ceiling: Option<Ts>,
}

/// The windows that apply to one watcher (already resolved for its role).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    pub stop_grace: Duration,
    /// The child's reap window or the session's idle window.
    pub idle: Duration,
    /// `None`: stall warnings disabled.
    pub stall: Option<Duration>,
}

/// All due times at once. `watcher_start` is when this watcher started (idle end counts from
/// it at the earliest).
pub fn due_times(
    state: &State,
    role: Role,
    windows: &Windows,
    stop: StopProgress,
    watcher_start: Ts,
    ceiling: Option<&Ceiling>,
) -> Due {
    Due {
        subagent_stop: subagent_stop_due(state, role, windows.stop_grace, stop),
        idle_end: idle_end_due(state, windows.idle, watcher_start),
        stall_warning: stall_due(state, windows.stall),
        lifetime_ceiling: ceiling.map(|c| c.deadline),
    }
}

/// Why a watcher is ending, as far as the stop it owes is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatcherEnd {
    /// Idle end: a child's reap (a session's idle end owes no stop).
    Idle,
    LifetimeCeiling,
    ParentExited,
    /// A signal: the kcap CLI's teardown owns the card, so only an already-due stop is kept.
    Signal,
    /// `--once` finished.
    OnceDone,
    /// The rollout was rewritten (exit 3): only an already-due stop is kept.
    Rewritten,
}

/// Why a stop is owed at exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwedBecause {
    /// The stop was due (its grace had passed) but not acknowledged (docs/behaviour.md R3).
    Due,
    /// The watcher is ending on reap, ceiling or parent exit and no card may keep spinning
    /// after it (R4.4), whether or not the turn ended (a Codex crash mid-turn ends none).
    WatcherEnding,
}

/// A stop the watcher must post (or spool, if it cannot) before it exits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwedStop {
    pub because: OwedBecause,
    /// The turn as the stop leaves it (`open` after a crash mid-turn).
    pub turn: Turn,
    /// `last_assistant_message` before redaction and the 4 KiB cut: the ended turn's message,
    /// else the last agent message seen, else empty ([`State::stop_message`]).
    pub last_assistant_message: String,
}

/// **R4.4 / R3: the stop owed when the watcher ends at `now`** (child role, none acknowledged
/// by this process). Owed when the watcher ends on idle reap, the lifetime ceiling or its
/// parent's exit, even if the turn never ended; for any other end, only when it was due by
/// `now` (the retry time of a failed attempt does not matter: the watcher will not retry).
/// The shell posts it after the transcript through its last line is confirmed or spooled,
/// and spools it when the post fails.
pub fn stop_owed_at_exit(
    state: &State,
    role: Role,
    grace: Duration,
    progress: StopProgress,
    end: WatcherEnd,
    now: Ts,
) -> Option<OwedStop> {
    if role != Role::Child || progress.posted {
        return None;
    }
    let due_by_now = subagent_stop_due(
        state,
        role,
        grace,
        StopProgress {
            posted: false,
            next_attempt: None,
        },
    )
    .is_some_and(|t| t <= now);
    let because = if due_by_now {
        OwedBecause::Due
    } else if matches!(
        end,
        WatcherEnd::Idle | WatcherEnd::LifetimeCeiling | WatcherEnd::ParentExited
    ) {
        OwedBecause::WatcherEnding
    } else {
        return None;
    };
    Some(OwedStop {
        because,
        turn: state.turn,
        last_assistant_message: state.stop_message(),
    })
}
