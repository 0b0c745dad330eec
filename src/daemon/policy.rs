//! The daemon's restart rule for a session's supervisor (docs/behaviour.md S2.2), as a pure
//! function of how it ended, what the daemon did, and `now`.
//!
//! Exit 0 (a signal, the idle end), 2 (usage), 3 (rewritten) and 75 (another supervisor holds
//! the session) are how a supervisor ends on purpose: never restarted. Exit 2 is a
//! configuration the supervisor refuses: never tried again for that configuration. Exit 1 or
//! a death by a signal the daemon did not send is a crash: restarted after a backoff of 1 s
//! doubling to 60 s, at most 5 times an hour, and only once the session is seen still watched
//! 10 s after the crash (the kcap CLI's teardown, which may be what killed it, ends within its
//! 8 s). With the hour's restarts spent, the session is given up until the oldest of them is
//! an hour old, whatever its children write meanwhile.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Ts;

/// Restarts allowed in any hour.
pub(crate) const MAX_PER_HOUR: usize = 5;
const HOUR: Duration = Duration::from_secs(3600);
/// The backoff doubles up to this many times its first step (1 s to 60 s).
const MAX_BACKOFF_STEPS: u32 = 60;

/// The waits of the restart rule (settings `KCAP_DAEMON_RESTART_SETTLE_MS` and
/// `KCAP_DAEMON_RESTART_BACKOFF_MS`, hidden: only tests lower them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartTiming {
    /// How long after a crash the daemon looks whether the session is still watched.
    pub settle: Duration,
    /// The first backoff, doubling up to [`MAX_BACKOFF_STEPS`] times it.
    pub first_backoff: Duration,
}

impl Default for RestartTiming {
    fn default() -> RestartTiming {
        RestartTiming {
            settle: Duration::from_secs(10),
            first_backoff: Duration::from_secs(1),
        }
    }
}

/// How a supervisor process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    Code(i32),
    /// Killed by a signal (Unix); `sent` when the daemon sent one to it.
    Signal {
        sent: bool,
    },
}

/// What to do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Leave the session without a supervisor until a descendant appears or grows.
    Rest,
    /// The supervisor refused its configuration (exit 2): not tried again for it.
    Refuse,
    /// Another supervisor holds the session: adopt it.
    Adopt,
    /// Look again at this time; start a new supervisor then if the session is still watched.
    RestartAt(Ts),
    /// A crash, but this hour's restarts are used up: tried again at this time at the
    /// earliest.
    GiveUp(Ts),
}

/// The restarts of one session, for the hourly cap and the backoff.
#[derive(Clone, Debug, Default)]
pub(crate) struct Restarts {
    recent: VecDeque<Ts>,
    /// Restarts since the daemon took the session (for `status`).
    pub total: u32,
    timing: RestartTiming,
}

impl Restarts {
    /// No restart yet, with these waits.
    pub fn new(timing: RestartTiming) -> Restarts {
        Restarts {
            timing,
            ..Restarts::default()
        }
    }

    /// The decision for a supervisor that `ended` at `now`. `sent_signal`: the daemon had
    /// asked it to end.
    pub fn on_end(&mut self, ended: Ended, sent_signal: bool, now: Ts) -> Next {
        let crashed = match ended {
            _ if sent_signal => false,
            Ended::Code(75) => return Next::Adopt,
            Ended::Code(2) => return Next::Refuse,
            Ended::Code(0 | 3) => false,
            Ended::Code(_) => true,
            Ended::Signal { sent } => !sent,
        };
        if !crashed {
            return Next::Rest;
        }
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= HOUR)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= MAX_PER_HOUR
            && let Some(oldest) = self.recent.front()
        {
            return Next::GiveUp(oldest.plus(HOUR).max(now.plus(self.timing.settle)));
        }
        let doublings = u32::try_from(self.recent.len()).unwrap_or(u32::MAX).min(6);
        let first = self.timing.first_backoff;
        let backoff = first
            .saturating_mul(1 << doublings)
            .min(first.saturating_mul(MAX_BACKOFF_STEPS));
        Next::RestartAt(now.plus(self.timing.settle.max(backoff)))
    }

    /// Records a restart made at `now`.
    pub fn restarted(&mut self, now: Ts) {
        self.recent.push_back(now);
        self.total += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> Ts {
        Ts::parse_rfc3339("2026-12-01T10:00:00Z")
            .unwrap()
            .plus(Duration::from_secs(secs))
    }

    #[test]
    fn ends_on_purpose_are_never_restarted() {
        let mut r = Restarts::default();
        for code in [0, 3] {
            assert_eq!(r.on_end(Ended::Code(code), false, t(0)), Next::Rest);
        }
        assert_eq!(r.on_end(Ended::Code(2), false, t(0)), Next::Refuse);
        assert_eq!(r.on_end(Ended::Code(75), false, t(0)), Next::Adopt);
        assert_eq!(
            r.on_end(Ended::Signal { sent: true }, false, t(0)),
            Next::Rest
        );
        // Whatever the code, a supervisor the daemon asked to end ended on purpose.
        assert_eq!(r.on_end(Ended::Code(1), true, t(0)), Next::Rest);
    }

    #[test]
    fn a_crash_is_restarted_once_settled_with_a_doubling_backoff_five_times_an_hour() {
        let mut r = Restarts::default();
        let mut now = 0;
        for _ in 0..5 {
            let next = r.on_end(Ended::Signal { sent: false }, false, t(now));
            let Next::RestartAt(at) = next else {
                panic!("{next:?}")
            };
            // 1, 2, 4, 8, 16 s: all under the 10 s settle but the last.
            assert!(at >= t(now + 10));
            now = at.duration_since(t(0)).as_secs();
            r.restarted(t(now));
        }
        // Given up until the first of the five restarts is an hour old.
        let first = t(0).plus(RestartTiming::default().settle);
        assert_eq!(
            r.on_end(Ended::Code(1), false, t(now)),
            Next::GiveUp(first.plus(HOUR))
        );
        assert_eq!(r.total, 5);
        // An hour after the first restart, one more is allowed.
        let later = 3600 + 11;
        assert!(matches!(
            r.on_end(Ended::Code(1), false, t(later)),
            Next::RestartAt(_)
        ));
    }

    #[test]
    fn lowered_waits_spend_the_hours_restarts_in_a_second() {
        let mut r = Restarts::new(RestartTiming {
            settle: Duration::from_millis(100),
            first_backoff: Duration::from_millis(10),
        });
        let start = t(0);
        let mut now = start;
        for _ in 0..5 {
            let Next::RestartAt(at) = r.on_end(Ended::Code(1), false, now) else {
                panic!("not restarted")
            };
            now = at;
            r.restarted(now);
        }
        assert!(now.duration_since(start) <= Duration::from_secs(1));
        // The hourly cap is not a wait to lower: given up until the first restart's hour.
        assert!(matches!(
            r.on_end(Ended::Code(1), false, now),
            Next::GiveUp(until) if until.duration_since(start) >= Duration::from_secs(3600)
        ));
    }

    #[test]
    fn the_backoff_doubles_to_sixty_seconds() {
        let mut r = Restarts::default();
        for i in 0..4 {
            r.restarted(t(i));
        }
        // The fifth: 16 s after four restarts.
        assert_eq!(
            r.on_end(Ended::Code(1), false, t(100)),
            Next::RestartAt(t(116))
        );
    }
}
