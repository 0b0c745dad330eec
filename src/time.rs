//! Wall-clock time as plain integers, so the pure core can do saturating arithmetic.
//!
//! Every decision in the watcher is a function of `now`, passed in. Keeping time as
//! milliseconds since the Unix epoch (rather than `SystemTime` or a calendar type) makes that
//! arithmetic total: adding a configured window of any size saturates instead of panicking
//! or wrapping (`KCAP_CODEX_IDLE_MINUTES=99999999999` must not become a tiny window).

use std::fmt;
use std::time::Duration;

/// Largest window the watcher supports: 100 years. Configured values above it are clamped
/// (never wrapped), and timers never sleep longer than this.
pub const MAX_WINDOW: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A point in wall-clock time: milliseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ts(pub i64);

impl Ts {
    /// The current wall-clock time.
    pub fn now() -> Ts {
        Ts::from_system(std::time::SystemTime::now())
    }

    /// Converts a `SystemTime` (for example a file's modification time).
    pub(crate) fn from_system(t: std::time::SystemTime) -> Ts {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Ts(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => Ts(-i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX)),
        }
    }

    pub fn from_millis(ms: i64) -> Ts {
        Ts(ms)
    }

    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + d`, saturating at the representable range.
    pub fn plus(self, d: Duration) -> Ts {
        Ts(self.0.saturating_add(dur_ms(d)))
    }

    /// `self - d`, saturating at the representable range.
    pub fn minus(self, d: Duration) -> Ts {
        Ts(self.0.saturating_sub(dur_ms(d)))
    }

    /// Milliseconds from `earlier` to `self` (negative when `earlier` is later).
    pub fn since(self, earlier: Ts) -> i64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn duration_since(self, earlier: Ts) -> Duration {
        Duration::from_millis(u64::try_from(self.since(earlier)).unwrap_or(0))
    }

    /// Parses an RFC 3339 timestamp (`2026-07-28T16:14:05.115Z`, offsets accepted).
    pub fn parse_rfc3339(s: &str) -> Option<Ts> {
        let t: jiff::Timestamp = s.trim().parse().ok()?;
        Some(Ts(t.as_millisecond()))
    }

    /// Unix seconds (possibly fractional, as in `resets_at`) to a time; `None` when the value
    /// is not a finite positive number within range.
    pub(crate) fn from_unix_secs_f64(secs: f64) -> Option<Ts> {
        if !secs.is_finite() || secs <= 0.0 || secs > 1.0e13 {
            return None;
        }
        Some(Ts((secs * 1000.0).round() as i64))
    }

    /// RFC 3339 in UTC with millisecond precision, e.g. `2026-07-28T16:19:11.250Z`.
    pub fn rfc3339(self) -> String {
        match jiff::Timestamp::from_millisecond(self.0) {
            Ok(t) => format!("{t:.3}"),
            // Outside jiff's range (years -9999..=9999): only reachable with absurd inputs,
            // shown as raw milliseconds rather than failing.
            Err(_) => format!("@{}ms", self.0),
        }
    }
}

impl fmt::Debug for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rfc3339())
    }
}

impl fmt::Display for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rfc3339())
    }
}

/// A duration in whole milliseconds, saturating at `i64::MAX`.
pub(crate) fn dur_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Clamps a configured window to [`MAX_WINDOW`].
pub fn clamp_window(d: Duration) -> Duration {
    d.min(MAX_WINDOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_with_millis() {
        let t = Ts::parse_rfc3339("2026-07-28T16:19:11.250Z").unwrap();
        assert_eq!(t.rfc3339(), "2026-07-28T16:19:11.250Z");
        assert_eq!(Ts::parse_rfc3339("2026-07-28T18:19:11.250+02:00"), Some(t));
    }

    #[test]
    fn huge_additions_saturate_instead_of_wrapping() {
        let t = Ts::from_millis(1_000);
        assert_eq!(t.plus(Duration::MAX), Ts(i64::MAX));
        assert!(t.plus(MAX_WINDOW) > t);
        assert_eq!(Ts(i64::MIN).minus(Duration::from_secs(1)), Ts(i64::MIN));
    }

    #[test]
    fn resets_at_must_be_finite_and_positive() {
        assert_eq!(Ts::from_unix_secs_f64(f64::NAN), None);
        assert_eq!(Ts::from_unix_secs_f64(-5.0), None);
        assert_eq!(Ts::from_unix_secs_f64(0.0), None);
        assert_eq!(
            Ts::from_unix_secs_f64(1785265331.0),
            Some(Ts(1_785_265_331_000))
        );
    }
}
