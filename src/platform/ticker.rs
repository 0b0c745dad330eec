//! The safety-net poll's clock: a periodic tick that wakes an idle process once per period.
//!
//! tokio keeps its timers in a hierarchical wheel: a timer a second away sits in a slot of 64
//! milliseconds and is moved down a level when that slot comes, so the runtime wakes twice for
//! it, a few dozen milliseconds apart. For a watcher that does nothing else while idle, that
//! second wake-up was a third of its CPU (docs/performance.md, "The machine"). On Linux the
//! tick is a `timerfd` read through the runtime's own event loop, which the kernel wakes
//! exactly once per period; elsewhere, and wherever time is tokio's paused test clock, it is a
//! tokio interval.

use std::time::Duration;

/// A periodic tick whose first tick is at once (as a tokio interval's), and whose missed
/// ticks collapse into one (a late poll is followed by the next regular one, never a burst).
pub(crate) struct Ticker {
    inner: Inner,
}

enum Inner {
    Runtime(tokio::time::Interval),
    #[cfg(target_os = "linux")]
    Kernel(kernel::TimerFd),
}

impl Ticker {
    /// A tick every `period`. `kernel_time` asks for the kernel's timer where there is one;
    /// tests running on tokio's paused clock pass `false`, so their time stays injected.
    pub(crate) fn new(period: Duration, kernel_time: bool) -> Ticker {
        #[cfg(target_os = "linux")]
        if kernel_time {
            match kernel::TimerFd::new(period) {
                Ok(timer) => {
                    return Ticker {
                        inner: Inner::Kernel(timer),
                    };
                }
                Err(e) => tracing::debug!(
                    event = "timerfd_unavailable",
                    "no timerfd ({e}); the poll uses the runtime's timer"
                ),
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = kernel_time;
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ticker {
            inner: Inner::Runtime(interval),
        }
    }

    /// Waits for the next tick.
    pub(crate) async fn tick(&mut self) {
        match &mut self.inner {
            Inner::Runtime(interval) => {
                interval.tick().await;
            }
            #[cfg(target_os = "linux")]
            Inner::Kernel(timer) => timer.tick().await,
        }
    }

    /// Whether the kernel's timer drives the ticks.
    #[cfg(test)]
    fn is_kernel(&self) -> bool {
        !matches!(self.inner, Inner::Runtime(_))
    }
}

#[cfg(target_os = "linux")]
mod kernel {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;

    /// A `CLOCK_MONOTONIC` timerfd, non-blocking, registered with the runtime's reactor.
    pub(super) struct TimerFd {
        fd: AsyncFd<OwnedFd>,
        first: bool,
    }

    fn timespec(d: Duration) -> libc::timespec {
        libc::timespec {
            // A period is at most a minute (the poll interval's bound): no overflow.
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
        }
    }

    impl TimerFd {
        pub(super) fn new(period: Duration) -> io::Result<TimerFd> {
            // A zero period would disarm the timer; the poll interval is at least 10 ms.
            let period = period.max(Duration::from_millis(1));
            // SAFETY: plain system call with constant flags; the result is checked.
            let raw = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a descriptor just created and owned by nothing else.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            let spec = libc::itimerspec {
                it_interval: timespec(period),
                it_value: timespec(period),
            };
            // SAFETY: `fd` is a valid timerfd; `spec` is a valid itimerspec; the old value
            // is not asked for.
            let rc =
                unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: the `OwnedFd` owns the descriptor, which stays open while the `AsyncFd`
            // owns it (nothing here closes or replaces it).
            let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE)? };
            Ok(TimerFd { fd, first: true })
        }

        pub(super) async fn tick(&mut self) {
            if std::mem::take(&mut self.first) {
                return;
            }
            loop {
                let Ok(mut guard) = self.fd.readable().await else {
                    // The reactor is gone (the runtime is shutting down): nothing more ticks.
                    return std::future::pending().await;
                };
                let mut expirations = [0u8; 8];
                let read = guard.try_io(|fd| {
                    // SAFETY: reads at most 8 bytes into a buffer of 8.
                    let n = unsafe {
                        libc::read(
                            fd.as_raw_fd(),
                            expirations.as_mut_ptr().cast(),
                            expirations.len(),
                        )
                    };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(n)
                    }
                });
                match read {
                    // One read takes every expiration since the last: missed ticks are one.
                    // The timer is not readable again before its next expiration, so the
                    // readiness goes now rather than through a read that would block.
                    Ok(Ok(8)) => {
                        guard.clear_ready();
                        return;
                    }
                    // Would block (cleared readiness), or a read the kernel never returns for
                    // a timerfd: wait again.
                    Ok(_) | Err(_) => continue,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's timer where there is one: the first tick at once, then one per period,
    /// and the ticks missed while the process was busy are one tick, not a burst.
    #[tokio::test]
    async fn ticks_come_once_per_period_and_missed_ones_collapse() {
        let period = Duration::from_millis(40);
        let mut ticker = Ticker::new(period, true);
        assert_eq!(ticker.is_kernel(), cfg!(target_os = "linux"));
        let start = std::time::Instant::now();
        ticker.tick().await;
        assert!(start.elapsed() < period, "the first tick is at once");
        ticker.tick().await;
        assert!(
            start.elapsed() >= period / 2,
            "the second tick waits a period"
        );
        // Busy for ten periods, then counting ticks for two and a half: a burst of the missed
        // ones would give twelve; collapsed, one and then at most three regular ones.
        std::thread::sleep(period * 10);
        let window = std::time::Instant::now();
        let mut ticks = 0;
        while window.elapsed() < period * 5 / 2 {
            let left = (period * 5 / 2).saturating_sub(window.elapsed());
            if tokio::time::timeout(left, ticker.tick()).await.is_ok() {
                ticks += 1;
            }
        }
        assert!((1..=4).contains(&ticks), "{ticks} ticks after a busy spell");
    }

    /// Under tokio's paused clock the ticks follow it: minutes of polls pass at once.
    #[tokio::test(start_paused = true)]
    async fn a_ticker_on_the_paused_clock_follows_it() {
        let mut ticker = Ticker::new(Duration::from_secs(60), false);
        assert!(!ticker.is_kernel());
        let start = tokio::time::Instant::now();
        for _ in 0..4 {
            ticker.tick().await;
        }
        assert_eq!(start.elapsed(), Duration::from_secs(180));
    }
}
