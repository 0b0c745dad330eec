//! The watcher's clock, injected so the runtime loop can run under tokio's paused time.

use std::sync::Arc;
use std::time::Duration;

use crate::time::{MAX_WINDOW, Ts};

/// Wall-clock time for decisions; sleeping is always done with tokio timers.
pub trait Clock: Send + Sync {
    fn now(&self) -> Ts;

    /// Whether this clock is tokio's (paused in tests): every timer must then be tokio's too,
    /// so that injected time moves them all.
    fn follows_runtime(&self) -> bool {
        false
    }
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Ts {
        Ts::now()
    }
}

/// Wall time derived from tokio's clock: `base` plus the tokio time elapsed since creation.
/// Under `tokio::time::pause()` it advances only when the test (or auto-advance) moves time,
/// so minutes of idle windows pass instantly and deterministically.
pub struct TokioClock {
    base: Ts,
    origin: tokio::time::Instant,
}

impl TokioClock {
    pub fn new(base: Ts) -> Arc<TokioClock> {
        Arc::new(TokioClock {
            base,
            origin: tokio::time::Instant::now(),
        })
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Ts {
        self.base.plus(self.origin.elapsed())
    }

    fn follows_runtime(&self) -> bool {
        true
    }
}

/// How long to sleep from `now` until `due` (zero when past; never longer than the largest
/// supported window, so a far-future due time cannot overflow a timer).
pub fn until(now: Ts, due: Ts) -> Duration {
    due.duration_since(now).min(MAX_WINDOW)
}
