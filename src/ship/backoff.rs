//! Retry pacing for transient delivery failures (`408`, `429`, `5xx`, transport errors).
//!
//! The watcher never gives up on a transient failure (`spec/server-api.md` section 2): a kcap
//! server that is down for an hour must get every line once it is back. So the policy has no
//! attempt limit; it only spreads the retries out. The runtime loop runs each request as a
//! spawned task and schedules the retry itself, which is why this is a small stateful
//! object handing out the next delay rather than a `Retryable` wrapper around a future.
//!
//! The delays come from backon's exponential policy with jitter. backon's jitter adds a
//! uniform random share of the current step on top of it (a delay in `[d, 2d)`), so the
//! step is capped at half of [`MAX_DELAY`] to keep every jittered delay within it: many
//! watchers that failed together (a server restart) then come back spread over the window
//! instead of in lockstep.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// The first retry waits at least this long.
pub const MIN_DELAY: Duration = Duration::from_millis(250);

/// No computed delay is longer than this (a server's `Retry-After` may ask for more).
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// A server's `Retry-After` is honoured up to this long; a larger (or absurd) value is
/// clamped so a misconfigured proxy cannot park the watcher for a day.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(5 * 60);

/// The delay before each retry of one failing request (or one failing stream of requests);
/// [`Backoff::reset`] after a success.
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    steps: ExponentialBackoff,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

impl Backoff {
    pub fn new() -> Backoff {
        let builder = ExponentialBuilder::new()
            .with_jitter()
            .with_factor(2.0)
            .with_min_delay(MIN_DELAY)
            // Jitter adds up to one more step, see the module docs.
            .with_max_delay(MAX_DELAY / 2)
            .without_max_times();
        Backoff {
            builder,
            steps: builder.build(),
        }
    }

    /// The time to wait before the next attempt. `retry_after` is the server's `Retry-After`
    /// (already parsed); the longer of it and the computed delay wins, so the watcher never
    /// comes back sooner than the server asked.
    pub fn next_delay(&mut self, retry_after: Option<Duration>) -> Duration {
        // `without_max_times` makes the iterator endless; MAX_DELAY covers the impossible end.
        let computed = self.steps.next().unwrap_or(MAX_DELAY).min(MAX_DELAY);
        match retry_after {
            Some(asked) => computed.max(asked.min(MAX_RETRY_AFTER)),
            None => computed,
        }
    }

    /// Starts over from the smallest delay (after a request succeeded).
    pub fn reset(&mut self) {
        self.steps = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_delay_is_small() {
        for _ in 0..50 {
            let d = Backoff::new().next_delay(None);
            assert!(d >= MIN_DELAY && d < 2 * MIN_DELAY, "{d:?}");
        }
    }

    #[test]
    fn delays_grow_but_never_exceed_the_cap() {
        let mut b = Backoff::new();
        let delays: Vec<Duration> = (0..200).map(|_| b.next_delay(None)).collect();
        assert!(delays.iter().all(|d| *d <= MAX_DELAY && *d >= MIN_DELAY));
        // After enough failures the delay sits in the upper half of the window.
        assert!(
            delays[20..].iter().all(|d| *d >= MAX_DELAY / 2),
            "{delays:?}"
        );
        // Jitter: not every late delay is the same.
        let first = delays[100];
        assert!(delays[100..].iter().any(|d| *d != first));
    }

    #[test]
    fn two_watchers_do_not_retry_in_lockstep() {
        let mut a = Backoff::new();
        let mut b = Backoff::new();
        let a: Vec<Duration> = (0..10).map(|_| a.next_delay(None)).collect();
        let b: Vec<Duration> = (0..10).map(|_| b.next_delay(None)).collect();
        assert_ne!(a, b, "jitter must be seeded per instance");
    }

    #[test]
    fn unlimited_attempts() {
        let mut b = Backoff::new();
        for _ in 0..10_000 {
            assert!(b.next_delay(None) <= MAX_DELAY);
        }
    }

    #[test]
    fn retry_after_wins_when_longer_and_is_capped() {
        let mut b = Backoff::new();
        assert_eq!(
            b.next_delay(Some(Duration::from_secs(120))),
            Duration::from_secs(120)
        );
        assert_eq!(
            b.next_delay(Some(Duration::from_secs(86_400))),
            MAX_RETRY_AFTER
        );
        // A tiny Retry-After does not make the watcher retry sooner than the backoff says.
        let mut fresh = Backoff::new();
        let d = fresh.next_delay(Some(Duration::ZERO));
        assert!(d >= MIN_DELAY, "{d:?}");
    }

    #[test]
    fn reset_starts_over_from_small_delays() {
        let mut b = Backoff::new();
        for _ in 0..30 {
            b.next_delay(None);
        }
        assert!(b.next_delay(None) >= MAX_DELAY / 2);
        b.reset();
        let d = b.next_delay(None);
        assert!(d < 2 * MIN_DELAY, "{d:?}");
    }
}
