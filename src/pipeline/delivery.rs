//! Delivery, one part of a [`Pipeline`](super::Pipeline): the watermark, the outbox, the
//! confirmed position, the requests that move them, refusals, and what went to the spool
//! instead.
//!
//! Its methods touch this part only and say what happened through [`Notices`]; what must move
//! another part too (the source's cursor, the ending's last progress, the lifecycle requests)
//! they return, and the pipeline does it.

use std::time::Duration;

use super::{Action, FREE_HALVINGS, Notices, Once, Request, SpoolResult, UNAUTHORIZED_RETRY};
use crate::codex::lines::Line;
use crate::ship::TranscriptBatch;
use crate::ship::capture::{self, Loss};
use crate::ship::outbox::{Outbox, Refusal, ShipLine};
use crate::ship::protocol::{Failure, Watermark};
use crate::telemetry::Notice;
use crate::time::Ts;

/// Delivery's state (see the module).
pub(crate) struct Delivery {
    /// Where shipping starts once known (`None`: waiting for the watermark).
    pub(super) watermark: Option<Watermark>,
    pub(super) outbox: Outbox,
    pub(super) generation: u64,
    watermark_req: Request,
    ship_req: Request,
    /// After a delivery failure the watermark is read once more before the next batch.
    pub(super) recheck_watermark: bool,
    failing_since: Option<Ts>,
    halvings: u32,
    /// Consecutive refused lines not yet logged: (first, last, status).
    refused: Option<(u64, u64, u16)>,
    /// A `401`/`403` was heard: the token is re-read before the next request.
    pub(super) token_refused: bool,
    pub(crate) lines_shipped: u64,
    /// Lines the server refused (set aside in `refused/`, or only counted past its cap).
    pub(crate) lines_refused: u64,
    spool_req: Request,
    pub(crate) lines_spooled: u64,
    trim_when_idle: bool,
    /// Lines below this number had their capture loss said (a line taken again after a
    /// rewind is not counted twice).
    losses_said_to: u64,
}

/// What a watermark answer asks of the pipeline.
pub(super) enum Heard {
    /// No answer: retried later.
    Failed,
    /// An answer that moves nothing.
    Kept,
    /// Shipping (re)starts at this watermark's resume line.
    ResumeAt(Watermark),
}

/// What a transcript answer asks of the pipeline.
pub(super) enum Shipped {
    /// A `2xx`: the server made progress.
    Confirmed,
    /// The server refuses this line: it is set aside.
    Refused(ShipLine),
    /// Nothing to do but wait (a retry, a halving).
    Waiting,
}

impl Delivery {
    pub(super) fn new() -> Delivery {
        Delivery {
            watermark: None,
            outbox: Outbox::new(0),
            generation: 0,
            watermark_req: Request::default(),
            ship_req: Request::default(),
            recheck_watermark: false,
            failing_since: None,
            halvings: 0,
            refused: None,
            token_refused: false,
            lines_shipped: 0,
            lines_refused: 0,
            spool_req: Request::default(),
            lines_spooled: 0,
            trim_when_idle: false,
            losses_said_to: 0,
        }
    }

    /// Shipping (re)starts at the watermark's resume line, which is returned (the source
    /// moves its cursor there).
    pub(super) fn resume_at(&mut self, watermark: Watermark) -> u64 {
        let resume = watermark.resume_line();
        self.watermark = Some(watermark);
        self.generation += 1;
        self.ship_req.in_flight = false;
        self.ship_req.retry_at = None;
        self.halvings = 0;
        self.outbox.rewind(resume);
        resume
    }

    /// Lines with their text from the shipping cursor, redacted into the outbox; every line
    /// before `through` is handed over (blank lines between shipped ones are confirmed with
    /// them).
    /// A line that is lost (too long, not JSON, too long once redacted) goes out as the kcap
    /// CLI's marker at its own number, and is said once per line however often it is taken.
    pub(super) fn take_text(
        &mut self,
        lines: Vec<Line>,
        through: u64,
        notices: &mut Notices,
        now: Ts,
    ) {
        let confirmed = self.outbox.confirmed_to();
        // Taken once for the batch: each take marks the shared redactor used, under a lock.
        let redactor = super::redactor();
        for line in lines {
            if line.number < confirmed || line.blank {
                continue;
            }
            // The line's own buffer: a 4 MiB line without secrets is shipped without a copy.
            let captured = match line.text {
                Some(t) if !line.oversize => capture::capture_owned(t, &redactor),
                _ => Err(Loss::over_limit(line.len, line.units.unwrap_or(0))),
            };
            let text = captured.unwrap_or_else(|loss| {
                if line.number >= self.losses_said_to {
                    self.losses_said_to = line.number + 1;
                    notices.say(
                        Notice::CaptureLoss {
                            line: line.number,
                            loss,
                        },
                        now,
                    );
                }
                loss.marker()
            });
            self.outbox.push(ShipLine::new(line.number, &text));
        }
        self.outbox.skip_to(through);
    }

    /// Every line through `line` is stored by the server or written to the spool.
    pub(super) fn holds_through(&self, line: u64) -> bool {
        self.watermark.is_some() && self.outbox.confirmed_to() > line
    }

    /// When a request waits to be tried again (`None`: none does).
    pub(super) fn next_retry(&self) -> Option<Ts> {
        [&self.watermark_req, &self.ship_req, &self.spool_req]
            .into_iter()
            .filter_map(Request::wake)
            .min()
    }

    /// The watermark is asked when none is known, and after a failure once the batch's own
    /// retry time has come.
    pub(super) fn ask_watermark(&mut self, now: Ts, out: &mut Vec<Action>) {
        let wanted = self.watermark.is_none()
            || (self.recheck_watermark && self.ship_req.retry_at.is_none_or(|t| t <= now));
        if wanted && self.watermark_req.ready(now) {
            self.watermark_req.sent();
            self.reload_if_refused(out);
            out.push(Action::AskWatermark);
        }
    }

    pub(super) fn watermark_answered(
        &mut self,
        result: Result<Watermark, Failure>,
        now: Ts,
        notices: &mut Notices,
    ) -> Heard {
        self.watermark_req.in_flight = false;
        match result {
            Ok(w) => {
                self.watermark_req.succeeded();
                let resume = w.resume_line();
                notices.say(
                    Notice::Watermark {
                        resume_line: resume,
                    },
                    now,
                );
                let first = self.watermark.is_none();
                self.recheck_watermark = false;
                if first {
                    Heard::ResumeAt(w)
                } else if resume < self.outbox.confirmed_to() {
                    // The server lost lines it had acknowledged: resend from its resume line,
                    // once per healed failure (a server that skips trailing lines would
                    // otherwise make this loop forever).
                    let behind = Notice::WatermarkBehind {
                        resume_line: resume,
                        acknowledged_to: self.outbox.confirmed_to(),
                    };
                    notices.say(behind, now);
                    Heard::ResumeAt(w)
                } else {
                    Heard::Kept
                }
            }
            Err(f) => {
                let delay = self.failure_delay(&f, |d| &mut d.watermark_req, notices, now);
                notices.say(
                    Notice::WatermarkFailed {
                        failure: f,
                        retry_in: delay,
                    },
                    now,
                );
                self.watermark_req.retry_at = Some(now.plus(delay));
                if self.watermark.is_some() {
                    // The check before resending failed: no batch goes out until it answers.
                    self.recheck_watermark = true;
                }
                Heard::Failed
            }
        }
    }

    /// The wait before retrying after `f`, with its one-time logs.
    fn failure_delay(
        &mut self,
        f: &Failure,
        req: impl Fn(&mut Delivery) -> &mut Request,
        notices: &mut Notices,
        now: Ts,
    ) -> Duration {
        match f {
            Failure::Unauthorized { status, .. } => {
                // `f` says whether a token was refused or none was sent.
                let notice = || Notice::TokenRefused {
                    status: *status,
                    failure: f.clone(),
                };
                notices.once(Once::TokenRefused, notice, now);
                self.token_refused = true;
                UNAUTHORIZED_RETRY
            }
            Failure::WrongPath { status, url } => {
                let notice = || Notice::WrongServerPath {
                    status: *status,
                    url: url.clone(),
                };
                notices.once(Once::WrongServerPath, notice, now);
                req(self).backoff.next_delay(None)
            }
            Failure::Transient { retry_after, .. } => req(self).backoff.next_delay(*retry_after),
            Failure::Rejected { .. } => req(self).backoff.next_delay(None),
        }
    }

    /// The next batch (or the one to resend) goes out when its request is ready.
    pub(super) fn send_next(
        &mut self,
        now: Ts,
        session: &str,
        agent: Option<&str>,
        vendor: &str,
        out: &mut Vec<Action>,
    ) {
        if !self.ship_req.ready(now) {
            return;
        }
        let body = match self.outbox.in_flight() {
            Some(b) => Some(b.body(session, agent, vendor)),
            None => self
                .outbox
                .next_batch()
                .map(|b| b.body(session, agent, vendor)),
        };
        if let Some(body) = body {
            self.ship_req.sent();
            self.reload_if_refused(out);
            out.push(Action::Send {
                generation: self.generation,
                body,
            });
        }
    }

    /// The answer to the batch last sent; `fed_to`: lines handed over by the source.
    pub(super) fn shipped(
        &mut self,
        result: Result<(), Failure>,
        now: Ts,
        fed_to: u64,
        notices: &mut Notices,
    ) -> Shipped {
        self.ship_req.in_flight = false;
        match result {
            Ok(()) => {
                self.failing_since = None;
                notices.clear(Once::TokenRefused);
                notices.clear(Once::WrongServerPath);
                self.ship_req.succeeded();
                self.halvings = 0;
                if let Some(b) = self.outbox.delivered() {
                    // A backlog leaves the allocator holding its peak; hand it back once the
                    // outbox drains (an idle watcher should stay small). `memory` trims once
                    // enough was shipped, counted over every child of the process.
                    crate::platform::memory::note_shipped(b.bytes());
                    self.trim_when_idle = true;
                    self.lines_shipped += b.lines.len() as u64;
                    let shipped = Notice::BatchShipped {
                        first: b.first(),
                        last: b.last(),
                        count: b.lines.len(),
                        bytes: b.bytes(),
                    };
                    notices.say(shipped, now);
                }
                self.outbox.skip_to(fed_to);
                self.flush_refused_log(notices, now);
                Shipped::Confirmed
            }
            Err(Failure::Rejected {
                status,
                body_snippet,
            }) => match self.outbox.refused() {
                Some(Refusal::Split) => {
                    self.halvings += 1;
                    if self.halvings == 1 {
                        let refused = Notice::BatchRefused {
                            status,
                            body_snippet,
                        };
                        notices.say(refused, now);
                    }
                    if self.halvings > FREE_HALVINGS {
                        self.pace_refusals(now);
                    }
                    Shipped::Waiting
                }
                Some(Refusal::Isolated(line)) => {
                    let n = line.number;
                    notices.say(Notice::LineRefused { line: n, status }, now);
                    match self.refused {
                        Some((first, last, s)) if last + 1 == n || s == status && last < n => {
                            self.refused = Some((first, n, s));
                        }
                        _ => {
                            self.flush_refused_log(notices, now);
                            self.refused = Some((n, n, status));
                        }
                    }
                    if self.halvings >= FREE_HALVINGS {
                        self.pace_refusals(now);
                    }
                    Shipped::Refused(line)
                }
                None => Shipped::Waiting,
            },
            Err(f) => {
                // Once per failure streak (never in a loop): the watermark is read again
                // before the next attempt.
                if self.failing_since.is_none() {
                    self.recheck_watermark = true;
                }
                self.failing_since.get_or_insert(now);
                let delay = self.failure_delay(&f, |d| &mut d.ship_req, notices, now);
                if !matches!(f, Failure::Unauthorized { .. } | Failure::WrongPath { .. }) {
                    let failed = Notice::ShipFailed {
                        failure: f,
                        retry_in: delay,
                    };
                    notices.say(failed, now);
                }
                self.ship_req.retry_at = Some(now.plus(delay));
                Shipped::Waiting
            }
        }
    }

    /// Past the free halvings a refusal waits the backoff before the next attempt.
    fn pace_refusals(&mut self, now: Ts) {
        let delay = self.ship_req.backoff.next_delay(None);
        self.ship_req.retry_at = Some(now.plus(delay));
    }

    /// The run of refused lines not yet logged, as one line.
    pub(super) fn flush_refused_log(&mut self, notices: &mut Notices, now: Ts) {
        if let Some((first, last, status)) = self.refused.take() {
            notices.say(
                Notice::LinesRefused {
                    first,
                    last,
                    status,
                },
                now,
            );
        }
    }

    /// Offline, and at the end: each line goes to the spool as soon as it is read. The answer
    /// comes back synchronously, so one record at a time; `record` makes it (`None`: no key).
    pub(super) fn spool_next(
        &mut self,
        now: Ts,
        record: impl FnOnce(&[ShipLine]) -> Option<TranscriptBatch>,
        out: &mut Vec<Action>,
    ) {
        if self.watermark.is_none() || !self.spool_req.ready(now) {
            return;
        }
        let batch = match self.outbox.in_flight() {
            Some(b) => record(&b.lines),
            None => self.outbox.next_batch().and_then(|b| record(&b.lines)),
        };
        if let Some(batch) = batch {
            self.spool_req.sent();
            out.push(Action::SpoolLines {
                batch,
                refused: false,
            });
        }
    }

    /// The answer to a spool write; `true` when it kept the lines (progress). `fed_to`: lines
    /// handed over by the source; `session` names them in the logs.
    pub(super) fn lines_spooled(
        &mut self,
        refused: bool,
        result: SpoolResult,
        now: Ts,
        fed_to: u64,
        session: &str,
        notices: &mut Notices,
    ) -> bool {
        if refused {
            // A refused line's record (set aside in `refused/`, S4.1): the line is skipped
            // either way, already logged with its number; past the file's cap it is only
            // counted.
            self.lines_refused += 1;
            match result {
                SpoolResult::Written => {}
                SpoolResult::OverCap => {
                    let notice = || Notice::RefusedFull {
                        session: session.to_owned(),
                    };
                    notices.once(Once::RefusedFull, notice, now);
                }
                SpoolResult::Failed(error) => {
                    notices.say(Notice::RefusedLineNotSpooled { error }, now);
                }
            }
            return false;
        }
        self.spool_req.in_flight = false;
        match result {
            SpoolResult::Written => {
                self.spool_req.succeeded();
                notices.clear(Once::SpoolFailed);
                if let Some(b) = self.outbox.delivered() {
                    self.lines_spooled += b.lines.len() as u64;
                    let spooled = Notice::LinesSpooled {
                        first: b.first(),
                        last: b.last(),
                        count: b.lines.len(),
                    };
                    notices.say(spooled, now);
                }
                self.outbox.skip_to(fed_to);
                true
            }
            SpoolResult::OverCap => {
                // The needs-import marker hands these lines to an import of the whole file.
                if let Some(b) = self.outbox.delivered() {
                    let full = || Notice::TranscriptSpoolFull {
                        session: session.to_owned(),
                        first_line: b.first(),
                    };
                    notices.once(Once::TranscriptSpoolFull, full, now);
                }
                self.outbox.skip_to(fed_to);
                false
            }
            SpoolResult::Failed(e) => {
                let first = self.outbox.in_flight().map(|b| b.first()).unwrap_or(0);
                let delay = self.spool_req.backoff.next_delay(None);
                let failed = || Notice::SpoolFailed {
                    session: session.to_owned(),
                    first_line: first,
                    retry_in: delay,
                    error: e,
                };
                notices.once(Once::SpoolFailed, failed, now);
                self.spool_req.retry_at = Some(now.plus(delay));
                false
            }
        }
    }

    /// From here on whatever the server did not confirm goes to the spool: the unconfirmed
    /// lines are queued again and the batch in flight abandoned (its answer is ignored).
    pub(super) fn requeue_unconfirmed(&mut self) {
        let confirmed = self.outbox.confirmed_to();
        let unconfirmed = self.outbox.take_unconfirmed();
        self.outbox.rewind(confirmed);
        for l in unconfirmed {
            self.outbox.push(l);
        }
        self.generation += 1;
        self.ship_req = Request::default();
    }

    /// After a `401`/`403` the token is re-read right before the next request: re-read at the
    /// refusal, a token the kcap CLI refreshed during the minute's wait would be missed.
    pub(super) fn reload_if_refused(&mut self, out: &mut Vec<Action>) {
        if std::mem::take(&mut self.token_refused) {
            out.push(Action::ReloadToken);
        }
    }

    /// A large backlog drained: `true` once, when the outbox went idle after shipping.
    pub(super) fn trim_now(&mut self) -> bool {
        self.outbox.is_idle() && std::mem::take(&mut self.trim_when_idle)
    }
}
