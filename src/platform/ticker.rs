//! The safety-net poll's clock: a periodic tick that wakes an idle process once per period.
//!
//! tokio keeps its timers in a hierarchical wheel: a timer a second away sits in a slot of 64
//! milliseconds and is moved down a level when that slot comes, so the runtime wakes twice for
//! it, a few dozen milliseconds apart. For a watcher that does nothing else while idle, that
//! second wake-up was a third of its CPU (docs/performance.md, "The machine"). On Linux the
//! tick is a `timerfd` read through the runtime's own event loop, which the kernel wakes
//! exactly once per period; elsewhere, and wherever time is tokio's paused test clock, it is a
//! tokio interval.
//!
//! The kernel's ticks fall on whole multiples of the period on the monotonic clock, which every
//! process of the machine shares: the daemon's supervisors, each polling once a second, wake
//! in the same instant rather than at ten scattered ones, so the machine wakes once a second
//! for all of them and the code they share is still in the processor's caches for the
//! second one on (docs/performance.md, "the idle machine"). [`align_wait`] puts other
//! periodic work (the heartbeat rounds) on the same instants.

use std::time::Duration;

/// A periodic tick whose first tick is at once (as a tokio interval's), and whose missed
/// ticks collapse into one (a late poll is followed by the next regular one, never a burst).
pub(crate) struct Ticker {
    inner: Inner,
    period: Duration,
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
                        period,
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
            period,
        }
    }

    /// Ticks every `period` from now on, the next tick a period away at most (on the kernel's
    /// timer: on the next whole multiple of the new period at least half a period away, as
    /// [`Ticker::new`] places them). Nothing changes when `period` is the one it has; `true`
    /// when it was another (on the kernel's timer, a failure to re-arm keeps the old ticks).
    pub(crate) fn set_period(&mut self, period: Duration) -> bool {
        if period == self.period {
            return false;
        }
        self.period = period;
        tracing::debug!(
            event = "poll_period",
            "the safety-net poll now runs every {period:?}"
        );
        match &mut self.inner {
            Inner::Runtime(interval) => {
                let mut next =
                    tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                next.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                *interval = next;
            }
            #[cfg(target_os = "linux")]
            Inner::Kernel(timer) => {
                if let Err(e) = timer.arm(period) {
                    tracing::debug!(
                        event = "timerfd_unavailable",
                        "the poll's timer keeps its period ({e})"
                    );
                }
            }
        }
        true
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

    /// When the kernel's timer next expires, on the monotonic clock.
    #[cfg(all(test, target_os = "linux"))]
    fn next_expiry(&self) -> Option<Duration> {
        match &self.inner {
            Inner::Kernel(timer) => timer.next_expiry(),
            Inner::Runtime(_) => None,
        }
    }
}

/// `wait`, shortened by less than a second to end on the last whole second of the monotonic
/// clock before its end, where the kernel's ticks of a whole-second period fall: a thread that
/// sleeps out the result wakes with the process's poll, and with every other kcap-watch
/// process's. Never longer than asked: a heartbeat is rewritten at least every 10 s
/// (docs/behaviour.md S5), and a loop that waits a whole number of seconds from a whole second
/// keeps its period. Unchanged where there is no such clock to read (the ticks are not aligned
/// there either), and when it is shorter than a second (a sub-second period is not cut to
/// nothing).
pub(crate) fn align_wait(wait: Duration) -> Duration {
    #[cfg(target_os = "linux")]
    if wait >= Duration::from_secs(1)
        && let Some(now) = kernel::monotonic_now()
    {
        let second = Duration::from_secs(1);
        let later = kernel::to_next_multiple(now + wait, second);
        // `now + wait` is past a whole second by `second - later` (or on one, `later` zero),
        // which is less than `wait`: no underflow.
        return if later.is_zero() {
            wait
        } else {
            wait - (second - later)
        };
    }
    wait
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

    /// The monotonic clock's reading (what `Instant` and the timerfd count), `None` if it
    /// cannot be read.
    pub(super) fn monotonic_now() -> Option<Duration> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write; the result is checked.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        if rc != 0 {
            return None;
        }
        Some(Duration::new(
            u64::try_from(ts.tv_sec).ok()?,
            u32::try_from(ts.tv_nsec).ok()?,
        ))
    }

    /// How long from `t` to the next whole multiple of `period` (zero if `t` is one).
    pub(super) fn to_next_multiple(t: Duration, period: Duration) -> Duration {
        let period_ns = period.as_nanos().max(1);
        let rest = t.as_nanos() % period_ns;
        if rest == 0 {
            Duration::ZERO
        } else {
            // Less than `period`, which is at most a minute: fits in a u64 of nanoseconds.
            Duration::from_nanos((period_ns - rest) as u64)
        }
    }

    fn timespec(d: Duration) -> libc::timespec {
        libc::timespec {
            // A period is at most a minute (the poll interval's bound), and a reading of the
            // monotonic clock is the time since boot: no overflow.
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
        }
    }

    /// Arms `fd` to expire every `period`, on whole multiples of it (module comment), the
    /// first at least half a period away.
    fn set(fd: &OwnedFd, period: Duration) -> io::Result<()> {
        let (first, flags) = match monotonic_now() {
            Some(now) => {
                let soon = now + period / 2;
                (
                    soon + to_next_multiple(soon, period),
                    libc::TFD_TIMER_ABSTIME,
                )
            }
            None => (period, 0),
        };
        let spec = libc::itimerspec {
            it_interval: timespec(period),
            it_value: timespec(first),
        };
        // SAFETY: `fd` is a valid timerfd; `spec` is a valid itimerspec; the old value is not
        // asked for.
        let rc =
            unsafe { libc::timerfd_settime(fd.as_raw_fd(), flags, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
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
            set(&fd, period)?;
            // SAFETY: the `OwnedFd` owns the descriptor, which stays open while the `AsyncFd`
            // owns it (nothing here closes or replaces it).
            let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE)? };
            Ok(TimerFd { fd, first: true })
        }

        /// Ticks every `period` from now on (the expirations counted so far are dropped).
        pub(super) fn arm(&mut self, period: Duration) -> io::Result<()> {
            set(self.fd.get_ref(), period.max(Duration::from_millis(1)))
        }

        #[cfg(test)]
        pub(super) fn next_expiry(&self) -> Option<Duration> {
            let mut spec = libc::itimerspec {
                it_interval: timespec(Duration::ZERO),
                it_value: timespec(Duration::ZERO),
            };
            // SAFETY: `fd` is a valid timerfd; `spec` is a valid itimerspec to write.
            let rc = unsafe { libc::timerfd_gettime(self.fd.get_ref().as_raw_fd(), &mut spec) };
            if rc != 0 {
                return None;
            }
            let left = Duration::new(
                u64::try_from(spec.it_value.tv_sec).ok()?,
                u32::try_from(spec.it_value.tv_nsec).ok()?,
            );
            Some(monotonic_now()? + left)
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

    /// Distance from `t` to the nearest whole multiple of `period`.
    #[cfg(target_os = "linux")]
    fn off_multiple(t: Duration, period: Duration) -> Duration {
        let rest = Duration::from_nanos((t.as_nanos() % period.as_nanos()) as u64);
        rest.min(period - rest)
    }

    /// Every process's ticks fall on the same instants: whole multiples of the period on the
    /// monotonic clock the machine shares, wherever in a period the ticker was made, and the
    /// first of them at least half a period after the one given at once.
    #[cfg(target_os = "linux")]
    #[test]
    fn kernel_ticks_fall_on_whole_multiples_of_the_period() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let period = Duration::from_secs(1);
            for _ in 0..5 {
                let made = kernel::monotonic_now().unwrap();
                let ticker = Ticker::new(period, true);
                let next = ticker.next_expiry().unwrap();
                // Reading the timer and the clock takes microseconds; a descheduled test
                // thread may take milliseconds more.
                assert!(
                    off_multiple(next, period) < Duration::from_millis(20),
                    "next tick at {next:?}, not on a whole second"
                );
                assert!(next >= made + period / 2 - Duration::from_millis(20));
                assert!(next <= made + period * 3 / 2 + Duration::from_millis(20));
            }
        });
    }

    /// A new period takes over at once: the next tick on a whole multiple of it, at least
    /// half of it and at most one and a half of it away; going back to a shorter period, the
    /// next tick is no later than that period asks.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_new_period_places_the_next_tick_on_its_own_multiples() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let slack = Duration::from_millis(20);
            let mut ticker = Ticker::new(Duration::from_secs(1), true);
            for period in [Duration::from_secs(4), Duration::from_secs(1)] {
                let set = kernel::monotonic_now().unwrap();
                ticker.set_period(period);
                let next = ticker.next_expiry().unwrap();
                assert!(off_multiple(next, period) < slack, "{period:?}: {next:?}");
                assert!(next + slack >= set + period / 2, "{period:?}");
                assert!(next <= set + period * 3 / 2 + slack, "{period:?}");
            }
        });
    }

    /// On the paused clock a new period counts from when it is set.
    #[tokio::test(start_paused = true)]
    async fn a_new_period_on_the_paused_clock_counts_from_now() {
        let mut ticker = Ticker::new(Duration::from_secs(1), false);
        ticker.tick().await;
        ticker.tick().await;
        let set = tokio::time::Instant::now();
        ticker.set_period(Duration::from_secs(4));
        ticker.tick().await;
        assert_eq!(set.elapsed(), Duration::from_secs(4));
        ticker.tick().await;
        assert_eq!(set.elapsed(), Duration::from_secs(8));
    }

    /// A heartbeat round's wait ends on a whole second of the same clock, never later than
    /// asked and less than a second sooner.
    #[test]
    fn an_aligned_wait_ends_on_a_whole_second() {
        for wait in [
            Duration::from_secs(1),
            Duration::from_millis(2500),
            Duration::from_secs(10),
        ] {
            let aligned = align_wait(wait);
            assert!(aligned <= wait, "{aligned:?}");
            assert!(aligned + Duration::from_secs(1) > wait, "{aligned:?}");
            #[cfg(target_os = "linux")]
            {
                let end = kernel::monotonic_now().unwrap() + aligned;
                assert!(
                    off_multiple(end, Duration::from_secs(1)) < Duration::from_millis(20),
                    "{wait:?} aligned to {aligned:?} ends off a whole second"
                );
            }
        }
        // A sub-second period stays one.
        for wait in [
            Duration::ZERO,
            Duration::from_millis(10),
            Duration::from_millis(999),
        ] {
            assert_eq!(align_wait(wait), wait);
        }
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
