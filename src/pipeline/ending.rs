//! The ending, one part of a [`Pipeline`](super::Pipeline): the shutdown phases once begun
//! (wait for a partial line, ship, post the lifecycle requests, spool), their time bounds, and
//! what bounds `--once`. Which step comes next is the pipeline's to say (it reads every part);
//! this part keeps where the ending is and when it must move on.

use std::time::Duration;

use super::{ExitReason, ONCE_STALL, PARTIAL_LINE_WAIT, SHIP_UNTIL, SHUTDOWN_BUDGET};
use crate::time::Ts;

/// Where the watcher is in ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// (signal) waiting for a partial last line to complete.
    WaitPartial,
    /// Shipping what is on disk.
    Ship,
    /// Lines are confirmed: posting the lifecycle requests the end calls for.
    Lifecycle,
    /// Out of time or server: spooling what is left, then the due requests.
    Spool,
}

#[derive(Debug)]
struct Ending {
    reason: ExitReason,
    began: Ts,
    step: Step,
    /// The lifecycle requests were posted once during the ending.
    posted: bool,
    /// The owed lifecycle requests were handed to the hook spool, and this many answers are
    /// still to come (`None`: not spooled yet). The ending waits for them, so what `--once`
    /// reports and logs is the spool's result, not "due, not delivered".
    hooks_spooling: Option<usize>,
    /// Ship and post until then (`None`: `--once`, bounded by the server's progress).
    ship_until: Option<Ts>,
    /// Gone by then, whatever is left.
    hard_end: Option<Ts>,
}

/// The ending's state (see the module).
pub(super) struct End {
    ending: Option<Ending>,
    /// The pipeline has exited (or found its file rewritten): it handles nothing more.
    pub(super) done: bool,
    /// The last answer that moved anything (for `--once`'s stall bound).
    pub(super) last_progress: Ts,
}

impl End {
    pub(super) fn new(started: Ts) -> End {
        End {
            ending: None,
            done: false,
            last_progress: started,
        }
    }

    pub(super) fn is_ending(&self) -> bool {
        self.ending.is_some()
    }

    pub(super) fn reason(&self) -> Option<&ExitReason> {
        self.ending.as_ref().map(|e| &e.reason)
    }

    /// The ending's reason is now `reason` (`--once` that found its session idle).
    pub(super) fn set_reason(&mut self, reason: ExitReason) {
        if let Some(e) = &mut self.ending {
            e.reason = reason;
        }
    }

    pub(super) fn step(&self) -> Option<Step> {
        self.ending.as_ref().map(|e| e.step)
    }

    pub(super) fn set_step(&mut self, step: Step) {
        if let Some(e) = &mut self.ending {
            e.step = step;
        }
    }

    /// Begins ending for `reason` at `now`; `false` when already ending (a signal during
    /// `--once` then bounds it like any shutdown).
    pub(super) fn begin(&mut self, reason: ExitReason, now: Ts) -> bool {
        let signal = matches!(reason, ExitReason::Signal(_));
        if let Some(e) = &mut self.ending {
            if signal && e.hard_end.is_none() {
                e.ship_until = Some(now.plus(SHIP_UNTIL));
                e.hard_end = Some(now.plus(SHUTDOWN_BUDGET));
            }
            return false;
        }
        let once = reason == ExitReason::OnceDone;
        // `--once` is bounded by the server's progress from here on.
        self.last_progress = now;
        self.ending = Some(Ending {
            reason,
            began: now,
            step: if signal {
                Step::WaitPartial
            } else {
                Step::Ship
            },
            posted: false,
            hooks_spooling: None,
            ship_until: (!once).then(|| now.plus(SHIP_UNTIL)),
            hard_end: (!once).then(|| now.plus(SHUTDOWN_BUDGET)),
        });
        true
    }

    /// The wait for a partial last line is over (`partial`: one is still held).
    pub(super) fn partial_settled(&self, partial: bool, now: Ts) -> bool {
        !partial
            || self
                .ending
                .as_ref()
                .is_some_and(|e| now >= e.began.plus(PARTIAL_LINE_WAIT))
    }

    /// Shipping and posting are out of time: past the signal's bound, or `--once` without
    /// progress for [`ONCE_STALL`].
    pub(super) fn out_of_time(&self, now: Ts) -> bool {
        match self.ending.as_ref().map(|e| e.ship_until) {
            Some(Some(t)) => now >= t,
            Some(None) => now >= self.last_progress.plus(ONCE_STALL),
            None => false,
        }
    }

    /// Past the hard end: gone, whatever is left.
    pub(super) fn past_hard_end(&self, now: Ts) -> bool {
        self.ending
            .as_ref()
            .and_then(|e| e.hard_end)
            .is_some_and(|t| now >= t)
    }

    /// The lifecycle requests are posted once per ending: `true` the first time.
    pub(super) fn take_post_turn(&mut self) -> bool {
        self.ending
            .as_mut()
            .is_some_and(|e| !std::mem::replace(&mut e.posted, true))
    }

    /// Whether the owed requests were handed to the hook spool during this ending.
    pub(super) fn hooks_spooled(&self) -> bool {
        self.ending
            .as_ref()
            .is_some_and(|e| e.hooks_spooling.is_some())
    }

    /// `count` owed requests were handed to the hook spool; their answers are awaited.
    pub(super) fn spooling_hooks(&mut self, count: usize) {
        if let Some(e) = &mut self.ending {
            e.hooks_spooling = Some(count);
        }
    }

    /// One hook spool write answered.
    pub(super) fn hook_spool_answered(&mut self) {
        if let Some(Some(n)) = self.ending.as_mut().map(|e| e.hooks_spooling.as_mut()) {
            *n = n.saturating_sub(1);
        }
    }

    /// Every hook spool write of the ending has answered.
    pub(super) fn hooks_spool_settled(&self) -> bool {
        self.ending
            .as_ref()
            .is_some_and(|e| e.hooks_spooling == Some(0))
    }

    /// Spooling begins: `--once` gets a hard end too, so a spool that keeps failing does not
    /// keep it alive either.
    pub(super) fn bound_spooling(&mut self, now: Ts) {
        if let Some(e) = &mut self.ending
            && e.hard_end.is_none()
        {
            e.hard_end = Some(now.plus(SHUTDOWN_BUDGET - SHIP_UNTIL));
        }
    }

    /// When the ending must look again (`None`: not ending, or only events move it).
    pub(super) fn next_wake(&self, now: Ts) -> Option<Ts> {
        let e = self.ending.as_ref()?;
        let partial = (e.step == Step::WaitPartial).then(|| {
            // The shell re-reads the file on each tick.
            now.plus(Duration::from_millis(50))
                .min(e.began.plus(PARTIAL_LINE_WAIT))
        });
        let shipping = e.step != Step::Spool;
        let stall =
            (e.ship_until.is_none() && shipping).then(|| self.last_progress.plus(ONCE_STALL));
        [
            partial,
            e.ship_until.filter(|_| shipping),
            e.hard_end,
            stall,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}
