//! What a pipeline says happened, as typed notices (Vector's `FileSourceInternalEvents` is the
//! model), and the two things made of them: today's log lines and per-key counters.
//!
//! The pipeline never calls `tracing` itself: it emits a [`Notice`], and [`Telemetry::emit`]
//! hands it to both sinks in order. [`log`] writes the line the logs have always had for it
//! (the same `event` names, fields and texts: users and tests read them), and [`Counters`]
//! keeps what a status file shows and no log line answers later: lines the server confirmed,
//! lines refused, the last error with its event name and time.
//!
//! Several notices share one event name where the logs always did (`spooled` is also the name
//! of four spool failures, `ship_failed` of every failed request); the notice keeps them apart.

use std::path::PathBuf;
use std::time::Duration;

use tracing::{error, info, warn};

use crate::ship::capture::{Loss, LossCounts, LossReason};
use crate::ship::protocol::{Failure, Lifecycle};
use crate::time::Ts;

/// Something a pipeline did or met.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Notice {
    /// Codex archived the rollout; it is followed at `path`.
    RolloutArchived {
        path: PathBuf,
    },
    /// The server said where to resume.
    Watermark {
        resume_line: u64,
    },
    /// The server holds fewer lines than it acknowledged: they are sent again.
    WatermarkBehind {
        resume_line: u64,
        acknowledged_to: u64,
    },
    WatermarkFailed {
        failure: Failure,
        retry_in: Duration,
    },
    /// `401`/`403` (logged once per streak): every line is kept and the token re-read.
    TokenRefused {
        status: u16,
        failure: Failure,
    },
    /// `404`/`405` from the transcript route (logged once per streak).
    WrongServerPath {
        status: u16,
        url: String,
    },
    BatchShipped {
        first: u64,
        last: u64,
        count: usize,
        bytes: usize,
    },
    /// The first halving of a refused batch.
    BatchRefused {
        status: u16,
        body_snippet: String,
    },
    /// One line isolated as refused (counted; logged with its neighbours as [`LinesRefused`]).
    ///
    /// [`LinesRefused`]: Notice::LinesRefused
    LineRefused {
        line: u64,
        status: u16,
    },
    /// A run of refused lines, set aside in the spool.
    LinesRefused {
        first: u64,
        last: u64,
        status: u16,
    },
    ShipFailed {
        failure: Failure,
        retry_in: Duration,
    },
    RefusedLineNotSpooled {
        error: String,
    },
    /// The refused-lines file of the session is at its cap: further refused lines are counted.
    RefusedFull {
        session: String,
    },
    LinesSpooled {
        first: u64,
        last: u64,
        count: usize,
    },
    TranscriptSpoolFull {
        session: String,
        first_line: u64,
    },
    SpoolFailed {
        session: String,
        first_line: u64,
        retry_in: Duration,
        error: String,
    },
    /// The server acknowledged a lifecycle request.
    HookPosted {
        kind: Lifecycle,
    },
    /// A post of a lifecycle request failed: it is tried again in `retry_in`, or (`None`)
    /// spooled.
    HookFailed {
        kind: Lifecycle,
        failure: Failure,
        retry_in: Option<Duration>,
    },
    HookSpooled {
        route: &'static str,
    },
    HookSpoolFull {
        route: &'static str,
        session: String,
    },
    HookSpoolFailed {
        route: &'static str,
        session: String,
        error: String,
    },
    /// The due stop could not be spooled: the lines before it are not kept.
    StopNotSpooled {
        session: String,
    },
    PauseExtensionGranted {
        grant: Duration,
        total_granted: Duration,
        remaining_cap: Duration,
        grant_count: u32,
        pause: String,
    },
    LifetimeCeiling {
        message: String,
    },
    IdleEnd {
        reason: &'static str,
        idle: Duration,
    },
    StallDetected {
        turn_id: Option<String>,
        silence: Duration,
        last_kind: String,
    },
    ShutdownBudgetSpent {
        session: String,
        first_line: u64,
    },
    WatcherExiting {
        reason: &'static str,
    },
    /// A line ships as the kcap CLI's capture-loss marker (too long, not JSON, too long once
    /// redacted): counted by reason; the first of each reason is logged as a warning.
    CaptureLoss {
        line: u64,
        loss: Loss,
    },
}

impl Notice {
    /// The `event` field of its log line.
    pub(crate) fn event(&self) -> &'static str {
        match self {
            Notice::RolloutArchived { .. } => "rollout_archived",
            Notice::Watermark { .. } | Notice::WatermarkBehind { .. } => "watermark",
            Notice::WatermarkFailed { .. }
            | Notice::TokenRefused { .. }
            | Notice::BatchRefused { .. }
            | Notice::LineRefused { .. }
            | Notice::LinesRefused { .. }
            | Notice::ShipFailed { .. } => "ship_failed",
            Notice::WrongServerPath { .. } => "wrong_server_path",
            Notice::BatchShipped { .. } => "batch_shipped",
            Notice::RefusedLineNotSpooled { .. }
            | Notice::LinesSpooled { .. }
            | Notice::TranscriptSpoolFull { .. }
            | Notice::HookSpooled { .. }
            | Notice::HookSpoolFull { .. }
            | Notice::HookSpoolFailed { .. }
            | Notice::StopNotSpooled { .. } => "spooled",
            Notice::SpoolFailed { .. } => "spool_failed",
            Notice::RefusedFull { .. } => "refused_full",
            Notice::HookPosted { kind } => kind.posted_event(),
            Notice::HookFailed { kind, .. } => kind.failed_event(),
            Notice::PauseExtensionGranted { .. } => "pause_extension_granted",
            Notice::LifetimeCeiling { .. } => "lifetime_ceiling",
            Notice::IdleEnd { .. } => "idle_end",
            Notice::StallDetected { .. } => "stall_detected",
            Notice::ShutdownBudgetSpent { .. } => "shutdown_budget_spent",
            Notice::WatcherExiting { .. } => "watcher_exiting",
            Notice::CaptureLoss { .. } => "capture_loss",
        }
    }

    /// What went wrong, for a status file's last error (`None`: not an error).
    fn error_text(&self) -> Option<String> {
        Some(match self {
            Notice::WatermarkFailed { failure, .. } => {
                format!("failed to read the watermark: {failure}")
            }
            Notice::TokenRefused { failure, .. } => failure.to_string(),
            Notice::WrongServerPath { status, url } => {
                format!("no kcap server answers at {url} (HTTP {status})")
            }
            Notice::LineRefused { line, status } => {
                format!("the server refused line {line} (HTTP {status}); set aside")
            }
            Notice::ShipFailed { failure, .. } => format!("failed to ship lines: {failure}"),
            Notice::RefusedLineNotSpooled { error } => {
                format!("failed to set a refused line aside: {error}")
            }
            Notice::RefusedFull { .. } => {
                "the refused-lines file is full (8 MiB); further refused lines are only counted"
                    .into()
            }
            Notice::TranscriptSpoolFull { first_line, .. } => format!(
                "transcript spool is full (8 MiB); line {first_line} and later were not kept"
            ),
            Notice::SpoolFailed { error, .. } => format!("failed to spool lines: {error}"),
            Notice::HookFailed { kind, failure, .. } => {
                format!("failed to post {}: {failure}", kind.name())
            }
            Notice::HookSpoolFull { route, .. } => format!("hook spool is full; {route} not kept"),
            Notice::HookSpoolFailed { route, error, .. } => {
                format!("failed to spool {route} request: {error}")
            }
            Notice::StopNotSpooled { .. } => {
                "the due subagent-stop is not spooled: the lines before it are not kept".into()
            }
            Notice::ShutdownBudgetSpent { first_line, .. } => {
                format!("shutdown budget spent; lines from {first_line} are not kept")
            }
            _ => return None,
        })
    }
}

/// One error as a status file shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LastError {
    /// The event name of the log line that reported it (`ship_failed`, `spool_failed`, ...).
    pub event: &'static str,
    pub message: String,
    pub at: Ts,
}

/// Per-pipeline counters: the counters sink.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// One past the highest line the server acknowledged (watermark or a 2xx batch).
    pub server_confirmed: u64,
    /// Lines the server refused (each set aside, not lost).
    pub lines_refused: u64,
    /// Lines shipped as the capture-loss marker, by reason.
    pub losses: LossCounts,
    pub last_error: Option<LastError>,
}

impl Counters {
    pub(crate) fn apply(&mut self, notice: &Notice, at: Ts) {
        match notice {
            Notice::Watermark { resume_line } => {
                self.server_confirmed = self.server_confirmed.max(*resume_line);
            }
            Notice::WatermarkBehind { resume_line, .. } => {
                // The server lost lines: what it holds is what counts.
                self.server_confirmed = *resume_line;
            }
            Notice::BatchShipped { last, .. } => {
                self.server_confirmed = self.server_confirmed.max(last + 1);
            }
            Notice::LineRefused { .. } => self.lines_refused += 1,
            Notice::CaptureLoss { loss, .. } => self.losses.add(loss.reason),
            _ => {}
        }
        if let Some(message) = notice.error_text() {
            self.last_error = Some(LastError {
                event: notice.event(),
                message,
                at,
            });
        }
    }
}

/// Both sinks of one pipeline.
#[derive(Clone, Debug, Default)]
pub(crate) struct Telemetry {
    pub counters: Counters,
}

impl Telemetry {
    pub(crate) fn emit(&mut self, notice: Notice, at: Ts) {
        match &notice {
            // One warning per reason, the rest counted: a file of a million broken lines
            // must not become a million log lines.
            Notice::CaptureLoss { line, loss } => log_loss(*line, loss, self.counters.losses),
            Notice::WatcherExiting { .. } if self.counters.losses.total() > 0 => {
                let losses = self.counters.losses.describe();
                info!(
                    event = "capture_losses",
                    input_limit = self.counters.losses.input_limit,
                    malformed_input = self.counters.losses.malformed_input,
                    output_limit = self.counters.losses.output_limit,
                    "lines shipped as capture-loss markers by this watcher: {losses}"
                );
                log(&notice);
            }
            _ => log(&notice),
        }
        self.counters.apply(&notice, at);
    }
}

/// A capture loss, given the losses counted before it. Nothing of the line's text is logged.
fn log_loss(line: u64, loss: &Loss, before: LossCounts) {
    let reason = loss.reason.name();
    let (units, bytes) = (loss.utf16_length, loss.utf8_bytes);
    let why = match loss.reason {
        LossReason::InputLimit => "it is longer than the 4 MiB the kcap CLI ships",
        LossReason::MalformedInput => "it is not JSON, and such a line never leaves the machine",
        LossReason::OutputLimit => "its redacted form is longer than 4 MiB",
    };
    if before.get(loss.reason) == 0 {
        warn!(
            event = "capture_loss",
            line,
            reason,
            input_utf16_length = units,
            input_utf8_bytes = bytes,
            "line {line} ({bytes} bytes) ships as a capture-loss marker ({reason}): {why}; further {reason} losses are counted in `kcap-watch status` and at exit"
        );
    } else {
        tracing::debug!(
            event = "capture_loss",
            line,
            reason,
            input_utf16_length = units,
            input_utf8_bytes = bytes,
            "line {line} ({bytes} bytes) ships as a capture-loss marker ({reason})"
        );
    }
}

/// The log sink: the line each notice has always been logged as.
pub(crate) fn log(notice: &Notice) {
    let event = notice.event();
    match notice {
        Notice::RolloutArchived { path } => {
            info!(event, path = %path.display(), "rollout archived by Codex; following it at {}", path.display());
        }
        Notice::Watermark { resume_line } => {
            info!(
                event,
                resume_line, "server watermark: resume at line {resume_line}"
            );
        }
        Notice::WatermarkBehind {
            resume_line,
            acknowledged_to,
        } => warn!(
            event,
            resume_line,
            acknowledged_to,
            "server is behind what it acknowledged; resending from line {resume_line}"
        ),
        Notice::WatermarkFailed {
            failure: f,
            retry_in,
        } => {
            warn!(event, what = "watermark", status = f.status(), error = %f, retry_in_ms = retry_in.as_millis() as u64, "failed to read the watermark: {f}; retrying in {retry_in:?}");
        }
        Notice::TokenRefused { status, failure } => error!(
            event,
            status, "{failure}; keeping every line, re-reading the token every 60 s"
        ),
        Notice::WrongServerPath { status, url } => {
            error!(event, status, url = %url, "no kcap server answers at {url} (HTTP {status}): check the path in KCAP_URL; keeping every line and retrying");
        }
        Notice::BatchShipped {
            first,
            last,
            count,
            bytes,
        } => info!(
            event,
            first, last, count, bytes, "shipped lines {first}..={last}"
        ),
        Notice::BatchRefused {
            status,
            body_snippet,
        } => warn!(
            event,
            status,
            "the server refused a batch (HTTP {status}: {body_snippet}); halving it to find the lines it refuses"
        ),
        Notice::LineRefused { line, status } => {
            tracing::debug!(event, line, status, "the server refused line {line}");
        }
        Notice::LinesRefused {
            first,
            last,
            status,
        } => {
            // No line was delivered between `first` and `last`: the whole range was refused.
            let which = if first == last {
                format!("line {first}")
            } else {
                format!("lines {first}..={last}")
            };
            error!(
                event,
                status,
                first,
                last,
                "the server refuses {which} (HTTP {status}); set aside in refused/ and going on"
            );
        }
        Notice::ShipFailed {
            failure: f,
            retry_in,
        } => {
            warn!(event, status = f.status(), error = %f, retry_in_ms = retry_in.as_millis() as u64, "failed to ship lines: {f}; retrying in {retry_in:?}");
        }
        Notice::RefusedLineNotSpooled { error } => {
            error!(event, "failed to set a refused line aside: {error}");
        }
        Notice::RefusedFull { session } => error!(
            event,
            "the refused-lines file of session {session} is full (8 MiB); further refused lines are only counted"
        ),
        Notice::LinesSpooled { first, last, count } => {
            info!(event, first, last, count, "spooled lines {first}..={last}");
        }
        Notice::TranscriptSpoolFull {
            session,
            first_line,
        } => {
            error!(event, session = %session, first_line, "transcript spool for session {session} is full (8 MiB); line {first_line} and later were not kept (needs-import written)");
        }
        Notice::SpoolFailed {
            session,
            first_line,
            retry_in,
            error,
        } => {
            error!(event, session = %session, first_line, retry_in_ms = retry_in.as_millis() as u64, "failed to spool lines of session {session}: {error}; line {first_line} and later are not kept yet, retrying in {retry_in:?}");
        }
        Notice::HookPosted { kind } => {
            info!(event, "posted {}{}", kind.name(), kind.posted_because());
        }
        Notice::HookFailed {
            kind,
            failure: f,
            retry_in: Some(retry_in),
        } => {
            warn!(event, status = f.status(), error = %f, "failed to post {}: {f}; retrying in {retry_in:?}", kind.name());
        }
        Notice::HookFailed {
            kind,
            failure: f,
            retry_in: None,
        } => {
            warn!(event, error = %f, "failed to post {}: {f}; spooling it", kind.name());
        }
        Notice::HookSpooled { route } => info!(event, route, "spooled {route} request"),
        Notice::HookSpoolFull { route, session } => error!(
            event,
            route, "hook spool is full; {route} request for session {session} not kept"
        ),
        Notice::HookSpoolFailed {
            route,
            session,
            error,
        } => error!(
            event,
            route, "failed to spool {route} request for session {session}: {error}"
        ),
        Notice::StopNotSpooled { session } => {
            error!(event, session = %session, "the due subagent-stop is not spooled: the lines before it are not kept");
        }
        Notice::PauseExtensionGranted {
            grant,
            total_granted,
            remaining_cap,
            grant_count,
            pause,
        } => {
            info!(event, grant_ms = grant.as_millis() as u64, total_granted_ms = total_granted.as_millis() as u64, remaining_cap_ms = remaining_cap.as_millis() as u64, grant_count, pause = %pause, "lifetime ceiling extended by {}ms of usage-limit pause credit", grant.as_millis());
        }
        Notice::LifetimeCeiling { message } => info!(event, "{message}"),
        Notice::IdleEnd { reason, idle } => info!(
            event,
            reason,
            idle_ms = idle.as_millis() as u64,
            "no activity for {idle:?}; ending"
        ),
        Notice::StallDetected {
            turn_id,
            silence,
            last_kind,
        } => {
            warn!(event, turn_id = turn_id.as_deref().unwrap_or(""), silence_ms = silence.as_millis() as u64, last_line_kind = %last_kind, "turn {} has been silent for {:?} with no tool in flight (last line: {last_kind})", turn_id.as_deref().unwrap_or("?"), silence);
        }
        Notice::ShutdownBudgetSpent {
            session,
            first_line,
        } => {
            error!(event, session = %session, first_line, "shutdown budget spent; lines from {first_line} of session {session} are not kept");
        }
        Notice::WatcherExiting { reason } => {
            info!(event, reason, "watcher exiting ({reason})");
        }
        Notice::CaptureLoss { line, loss } => log_loss(*line, loss, LossCounts::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_follow_confirmations_refusals_and_the_latest_error() {
        let mut c = Counters::default();
        let t = Ts::now();
        c.apply(&Notice::Watermark { resume_line: 10 }, t);
        c.apply(
            &Notice::BatchShipped {
                first: 10,
                last: 19,
                count: 10,
                bytes: 100,
            },
            t,
        );
        assert_eq!(c.server_confirmed, 20);
        assert!(c.last_error.is_none());
        c.apply(
            &Notice::LineRefused {
                line: 20,
                status: 422,
            },
            t,
        );
        c.apply(
            &Notice::LineRefused {
                line: 21,
                status: 422,
            },
            t,
        );
        assert_eq!(c.lines_refused, 2);
        let later = t.plus(Duration::from_secs(1));
        c.apply(
            &Notice::ShipFailed {
                failure: Failure::Unauthorized {
                    status: 401,
                    token_sent: true,
                },
                retry_in: Duration::from_secs(60),
            },
            later,
        );
        let e = c.last_error.clone().unwrap();
        assert_eq!(e.event, "ship_failed");
        assert!(e.message.contains("HTTP 401"), "{}", e.message);
        assert_eq!(e.at, later);
        // A success is not an error: the last error stays until another one.
        c.apply(
            &Notice::HookPosted {
                kind: Lifecycle::SubagentStop,
            },
            later,
        );
        assert_eq!(c.last_error, Some(e));
        // The server losing lines moves the confirmed count back.
        c.apply(
            &Notice::WatermarkBehind {
                resume_line: 15,
                acknowledged_to: 22,
            },
            later,
        );
        assert_eq!(c.server_confirmed, 15);
    }

    #[test]
    fn every_event_name_is_one_the_logs_used_before() {
        // The names users, tests and the status file's `last_error.event` rely on.
        let known = [
            "rollout_archived",
            "watermark",
            "ship_failed",
            "wrong_server_path",
            "batch_shipped",
            "spooled",
            "spool_failed",
            "subagent_start_posted",
            "subagent_start_failed",
            "subagent_stop_posted",
            "subagent_stop_failed",
            "session_end_posted",
            "session_end_failed",
            "pause_extension_granted",
            "lifetime_ceiling",
            "idle_end",
            "stall_detected",
            "shutdown_budget_spent",
            "watcher_exiting",
            "capture_loss",
        ];
        let samples = [
            Notice::HookPosted {
                kind: Lifecycle::SubagentStop,
            },
            Notice::HookPosted {
                kind: Lifecycle::SessionEnd,
            },
            Notice::HookPosted {
                kind: Lifecycle::SubagentStart,
            },
            Notice::HookSpooled {
                route: "subagent-stop",
            },
            Notice::WatcherExiting { reason: "signal" },
            Notice::LifetimeCeiling {
                message: "x".into(),
            },
        ];
        for n in samples {
            assert!(known.contains(&n.event()), "{n:?}");
        }
        // Every lifecycle route's two events, whichever notice carries them.
        for kind in Lifecycle::ALL {
            for event in [kind.posted_event(), kind.failed_event()] {
                assert!(known.contains(&event), "{kind:?}: {event}");
            }
        }
    }
}
