//! Retry pacing for transient delivery failures (`408`, `429`, `5xx`, transport errors).
//!
//! The watcher never gives up on a transient failure (docs/behaviour.md A2): a kcap
//! server that is down for an hour must get every line once it is back. So the policy has no
//! attempt limit; it only spreads the retries out. The runtime loop runs each request as a
//! spawned task and schedules the retry itself, which is why this is a small stateful
//! object handing out the next delay rather than a `Retryable` wrapper around a future.
//!
//! Full jitter: backon's exponential policy gives the envelope `d = min(30 s, 250 ms × 2ⁿ)`
//! and each delay is drawn uniformly from `[250 ms, d]`. (backon's own jitter only adds a
//! random share on top of `d`, a delay in `[d, 2d)`, which keeps watchers that failed together
//! closer in step.) Many watchers that failed together, say at a server restart, come back
//! spread over the whole window.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// The first retry waits at least this long.
pub(crate) const MIN_DELAY: Duration = Duration::from_millis(250);

/// No computed delay is longer than this (a server's `Retry-After` may ask for more).
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(30);

/// A server's `Retry-After` is honoured up to this long; a larger (or absurd) value is
/// clamped so a misconfigured proxy cannot park the watcher for a day.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(5 * 60);

/// The delay before each retry of one failing request (or one failing stream of requests);
/// [`Backoff::reset`] after a success.
#[derive(Debug)]
pub(crate) struct Backoff {
    builder: ExponentialBuilder,
    steps: ExponentialBackoff,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        let builder = ExponentialBuilder::new()
            .with_factor(2.0)
            .with_min_delay(MIN_DELAY)
            .with_max_delay(MAX_DELAY)
            .without_max_times();
        Backoff {
            builder,
            steps: builder.build(),
        }
    }

    /// The time to wait before the next attempt. `retry_after` is the server's `Retry-After`
    /// (already parsed); the longer of it and the computed delay wins, so the watcher never
    /// comes back sooner than the server asked.
    pub(crate) fn next_delay(&mut self, retry_after: Option<Duration>) -> Duration {
        // `without_max_times` makes the iterator endless; MAX_DELAY covers the impossible end.
        let envelope = self
            .steps
            .next()
            .unwrap_or(MAX_DELAY)
            .clamp(MIN_DELAY, MAX_DELAY);
        let spread = u64::try_from((envelope - MIN_DELAY).as_millis()).unwrap_or(0);
        let computed = MIN_DELAY + Duration::from_millis(fastrand::u64(0..=spread));
        match retry_after {
            Some(asked) => computed.max(asked.min(MAX_RETRY_AFTER)),
            None => computed,
        }
    }

    /// Starts over from the smallest delay (after a request succeeded).
    pub(crate) fn reset(&mut self) {
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
            assert_eq!(d, MIN_DELAY);
        }
    }

    #[test]
    fn a_retry_after_longer_than_the_computed_delay_wins() {
        let mut b = Backoff::new();
        assert_eq!(b.next_delay(None), MIN_DELAY);
        assert_eq!(
            b.next_delay(Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn delays_grow_but_never_exceed_the_cap() {
        let mut b = Backoff::new();
        let delays: Vec<Duration> = (0..200).map(|_| b.next_delay(None)).collect();
        assert!(delays.iter().all(|d| *d <= MAX_DELAY && *d >= MIN_DELAY));
        // Full jitter: once the envelope is at the cap, delays cover the whole window.
        assert!(
            delays[20..].iter().any(|d| *d < MAX_DELAY / 4),
            "{delays:?}"
        );
        assert!(
            delays[20..].iter().any(|d| *d > MAX_DELAY * 3 / 4),
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
        let late: Vec<Duration> = (0..50).map(|_| b.next_delay(None)).collect();
        assert!(late.iter().any(|d| *d > 4 * MIN_DELAY), "{late:?}");
        b.reset();
        let d = b.next_delay(None);
        assert_eq!(
            d, MIN_DELAY,
            "the first retry after a reset waits the minimum"
        );
    }
}
