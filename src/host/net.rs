//! The safety-net poll's period: the configured one, stretched while file notification is
//! known to report every change (docs/behaviour.md, "The safety-net poll").
//!
//! The poll (`KCAP_WATCH_POLL_MS`, 1 s by default) is what notices a change no event reported.
//! On Linux, inotify reports every write to a local file through the directory it is
//! watched in; what it cannot see (a write through a hard link in another directory, a writer
//! on another machine of a network file system, a followed path that is a symbolic link into
//! another directory) is what the net is for. Every poll of an idle process costs a wake-up
//! (about 0.2 ms of CPU for a supervisor of ten children: docs/performance.md), which ten
//! idle supervisors pay ten times a second.
//!
//! So the period stretches to [`stretched`] once notification has been relied on for ten
//! seconds: ten seconds of polls none of which found a change that no event had reported,
//! with nothing the membership must re-check at every poll and no followed file that
//! notification is known to miss. A poll that finds a change notification missed puts the
//! configured period back at once, and its file is known to be missed for ten minutes (or
//! until an event reports one of its changes): a file that notification does not see is
//! polled at the configured period while it changes, and at most its first change after ten
//! quiet minutes waits for the stretched one.

use std::time::Duration;

/// How much longer the stretched period is than the configured one.
const STRETCH: u32 = 4;
/// A stretched period is never longer than this, unless the configured one is.
const STRETCH_CAP: Duration = Duration::from_secs(10);
/// How long notification must report every change before the period stretches.
const PROBATION: Duration = Duration::from_secs(10);

/// The period the configured one stretches to: four times it, at most 10 s (never shorter
/// than the configured period).
pub(crate) fn stretched(configured: Duration) -> Duration {
    configured
        .saturating_mul(STRETCH)
        .min(STRETCH_CAP.max(configured))
}

/// The net's state across polls.
#[derive(Debug)]
pub(crate) struct SafetyNet {
    configured: Duration,
    /// Polls in a row that found nothing notification had missed, while it could be relied on.
    quiet: u32,
    /// How many such polls make the probation.
    needed: u32,
    /// The notifier reported a failure: it is never relied on again.
    failed: bool,
}

impl SafetyNet {
    pub(crate) fn new(configured: Duration) -> SafetyNet {
        let configured = configured.max(Duration::from_millis(1));
        // At least three polls, whatever the configured period.
        let needed = PROBATION
            .as_millis()
            .div_ceil(configured.as_millis())
            .max(3);
        SafetyNet {
            configured,
            quiet: 0,
            needed: u32::try_from(needed).unwrap_or(u32::MAX),
            failed: false,
        }
    }

    /// The period the next tick is to come after.
    pub(crate) fn period(&self) -> Duration {
        if self.quiet >= self.needed {
            stretched(self.configured)
        } else {
            self.configured
        }
    }

    /// Records a poll: `reliable` when notification could be relied on through it (working,
    /// watching every directory, nothing to re-check at every poll), `missed` when it found a
    /// change no event had reported.
    pub(crate) fn polled(&mut self, reliable: bool, missed: bool) {
        if reliable && !missed && !self.failed {
            self.quiet = self.quiet.saturating_add(1);
        } else {
            self.quiet = 0;
        }
    }

    /// A batch of the notifier's events: events were lost (`rescan`: the kernel's queue
    /// overflowed, or too many paths) or the notifier stopped (`failed`, for good): the
    /// configured period, and the probation starts again (never again after a failure).
    pub(crate) fn notified(&mut self, changes: &crate::platform::notifier::Changes) {
        if changes.failed || changes.rescan {
            self.quiet = 0;
        }
        self.failed |= changes.failed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn the_period_stretches_after_ten_seconds_of_quiet_polls_and_a_miss_puts_it_back() {
        let mut net = SafetyNet::new(SECOND);
        for _ in 0..9 {
            net.polled(true, false);
            assert_eq!(net.period(), SECOND, "not before ten seconds");
        }
        net.polled(true, false);
        assert_eq!(net.period(), 4 * SECOND);
        net.polled(true, false);
        assert_eq!(net.period(), 4 * SECOND);
        net.polled(true, true);
        assert_eq!(
            net.period(),
            SECOND,
            "a miss puts the configured period back"
        );
        for _ in 0..9 {
            net.polled(true, false);
        }
        assert_eq!(net.period(), SECOND, "and the ten seconds start again");
        net.polled(true, false);
        assert_eq!(net.period(), 4 * SECOND);
    }

    #[test]
    fn an_unreliable_poll_or_a_failure_starts_the_probation_again() {
        let mut net = SafetyNet::new(SECOND);
        for _ in 0..10 {
            net.polled(true, false);
        }
        assert_eq!(net.period(), 4 * SECOND);
        net.polled(false, false);
        assert_eq!(net.period(), SECOND);
        for _ in 0..10 {
            net.polled(true, false);
        }
        net.notified(&rescan());
        assert_eq!(net.period(), SECOND);
        for _ in 0..10 {
            net.polled(true, false);
        }
        assert_eq!(net.period(), 4 * SECOND, "a lost batch is not for good");
        net.notified(&failed());
        for _ in 0..100 {
            net.polled(true, false);
        }
        assert_eq!(net.period(), SECOND, "a failed notifier is");
    }

    fn rescan() -> crate::platform::notifier::Changes {
        crate::platform::notifier::Changes {
            rescan: true,
            ..Default::default()
        }
    }

    fn failed() -> crate::platform::notifier::Changes {
        crate::platform::notifier::Changes {
            rescan: true,
            failed: true,
            ..Default::default()
        }
    }

    #[test]
    fn the_stretch_is_four_times_at_most_ten_seconds_and_never_shorter() {
        assert_eq!(
            stretched(Duration::from_millis(10)),
            Duration::from_millis(40)
        );
        assert_eq!(stretched(SECOND), 4 * SECOND);
        assert_eq!(stretched(5 * SECOND), 10 * SECOND);
        assert_eq!(stretched(30 * SECOND), 30 * SECOND);
        // A long configured period: probation is still at least three polls.
        let mut net = SafetyNet::new(60 * SECOND);
        net.polled(true, false);
        net.polled(true, false);
        assert_eq!(net.period(), 60 * SECOND);
        net.polled(true, false);
        assert_eq!(net.period(), 60 * SECOND);
        // A short one: ten seconds of its polls.
        let mut net = SafetyNet::new(Duration::from_millis(10));
        for _ in 0..999 {
            net.polled(true, false);
        }
        assert_eq!(net.period(), Duration::from_millis(10));
        net.polled(true, false);
        assert_eq!(net.period(), Duration::from_millis(40));
    }
}
