//! The lifecycle requests, one part of a [`Pipeline`](super::Pipeline): `subagent-start`,
//! `subagent-stop` and `session-end` are each one [`Owed`] (the request owed, its
//! [`Request`] progress, how it was handed over), kept in one table indexed by route, and
//! the pipeline's policy for each route is one row of [`policy`].
//!
//! Adding a route is a [`Lifecycle`] row (its route and log names, in `ship::protocol`), a
//! row here, and the place in the pipeline that owes it; no new flag and no new branch.

use super::Request;
use crate::decide::StopProgress;
use crate::ship::protocol::{Hook, Lifecycle};
use crate::time::Ts;

/// What the pipeline does with one route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Policy {
    /// Posted as soon as it is owed, and no line is shipped until it is answered (the stream
    /// must exist before its lines).
    pub before_lines: bool,
    /// The ending posts it once every line is confirmed, and spools it when that fails.
    pub at_end: bool,
    /// Never handed over ahead of the lines through the turn's end.
    pub after_turn_end: bool,
    /// A failed post is tried again every `PipelineConfig::stop_retry`; otherwise it goes to
    /// the hook spool at once.
    pub retried: bool,
}

/// The policy of each route: one row per route.
pub(super) fn policy(kind: Lifecycle) -> Policy {
    match kind {
        Lifecycle::SubagentStart => Policy {
            before_lines: true,
            at_end: false,
            after_turn_end: false,
            retried: false,
        },
        Lifecycle::SubagentStop => Policy {
            before_lines: false,
            at_end: true,
            after_turn_end: true,
            retried: true,
        },
        Lifecycle::SessionEnd => Policy {
            before_lines: false,
            at_end: true,
            after_turn_end: false,
            retried: false,
        },
    }
}

/// How a lifecycle request was handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The server acknowledged it (`2xx`), or another pipeline of this process did.
    Posted,
    /// Written to the hook spool, for `replay` to post.
    Spooled,
}

/// One route's request.
#[derive(Debug, Default)]
struct Owed {
    /// The request owed, built when it became owed (a session end carries the time the
    /// watcher ended). The stop is owed by the decisions instead, and built at each attempt
    /// from the state then: this stays `None` for it.
    hook: Option<Hook>,
    progress: Request,
    outcome: Option<Outcome>,
}

/// Every route's request, indexed by [`Lifecycle::index`].
#[derive(Debug, Default)]
pub(super) struct Hooks {
    routes: [Owed; Lifecycle::ALL.len()],
}

impl Hooks {
    fn at(&self, kind: Lifecycle) -> &Owed {
        &self.routes[kind.index()]
    }

    fn at_mut(&mut self, kind: Lifecycle) -> &mut Owed {
        &mut self.routes[kind.index()]
    }

    /// `hook` is owed (replacing any owed before it on its route).
    pub(super) fn owe(&mut self, hook: Hook) {
        let kind = hook.kind();
        self.at_mut(kind).hook = Some(hook);
    }

    /// The request owed on `kind`'s route, until it is answered or spooled.
    pub(super) fn owed(&self, kind: Lifecycle) -> Option<&Hook> {
        self.at(kind).hook.as_ref()
    }

    pub(super) fn in_flight(&self, kind: Lifecycle) -> bool {
        self.at(kind).progress.in_flight
    }

    pub(super) fn any_in_flight(&self) -> bool {
        self.routes.iter().any(|o| o.progress.in_flight)
    }

    /// A request owed that holds the lines back (see [`Policy::before_lines`]).
    pub(super) fn holds_lines(&self) -> bool {
        Lifecycle::ALL
            .into_iter()
            .any(|k| policy(k).before_lines && self.owed(k).is_some())
    }

    pub(super) fn outcome(&self, kind: Lifecycle) -> Option<Outcome> {
        self.at(kind).outcome
    }

    /// The route counts as handed over for the life of the process (a stop another pipeline
    /// of this process posted).
    pub(super) fn latch(&mut self, kind: Lifecycle) {
        self.at_mut(kind).outcome = Some(Outcome::Posted);
    }

    /// A post of `kind` went out.
    pub(super) fn sent(&mut self, kind: Lifecycle) {
        self.at_mut(kind).progress.in_flight = true;
    }

    /// Not tried again before `at` (`None`: at the next chance).
    pub(super) fn retry_at(&mut self, kind: Lifecycle, at: Option<Ts>) {
        self.at_mut(kind).progress.retry_at = at;
    }

    /// The server acknowledged `kind`.
    pub(super) fn posted(&mut self, kind: Lifecycle) {
        let o = self.at_mut(kind);
        o.progress.in_flight = false;
        o.hook = None;
        o.outcome = Some(Outcome::Posted);
    }

    /// A post of `kind` failed: tried again at `retry_at`, or (`None`) given up, the owed
    /// request returned for the hook spool.
    pub(super) fn failed(&mut self, kind: Lifecycle, retry_at: Option<Ts>) -> Option<Hook> {
        let o = self.at_mut(kind);
        o.progress.in_flight = false;
        match retry_at {
            Some(_) => {
                o.progress.retry_at = retry_at;
                None
            }
            None => o.hook.take(),
        }
    }

    /// `kind` is written to the hook spool.
    pub(super) fn spooled(&mut self, kind: Lifecycle) {
        let o = self.at_mut(kind);
        o.hook = None;
        o.outcome = Some(Outcome::Spooled);
    }

    /// Requests in flight are abandoned (the ending spools what is owed instead).
    pub(super) fn abandon_in_flight(&mut self) {
        for o in &mut self.routes {
            o.progress.in_flight = false;
        }
    }

    /// The stop's progress as the decisions read it.
    pub(super) fn stop_progress(&self) -> StopProgress {
        let stop = self.at(Lifecycle::SubagentStop);
        StopProgress {
            posted: stop.outcome.is_some(),
            next_attempt: stop.progress.retry_at,
        }
    }
}
