//! The kcap API as data (docs/behaviour.md A1-A5): routes, the hook bodies, the watermark, the
//! failure kinds a request can end in, and how the answers' bodies and headers read. No
//! socket here: the pipeline speaks this vocabulary, and the HTTP transport
//! ([`super::client`]) carries it. Keeping them apart lets the pure core depend on the
//! protocol without depending on the client (and so on TLS, proxies and tokens).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::time::Ts;

/// Route of transcript batches, under `/hooks/`.
pub(crate) const ROUTE_TRANSCRIPT: &str = "transcript";
/// Route of the child's stop, under `/hooks/` (also the `route` of hook spool records).
pub const ROUTE_SUBAGENT_STOP: &str = "subagent-stop";
/// Route of the child's start, under `/hooks/`.
pub const ROUTE_SUBAGENT_START: &str = "subagent-start";
/// Route of a session's end, under `/hooks/`.
pub const ROUTE_SESSION_END: &str = "session-end/codex";

/// The server's answer to "where do I resume?".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watermark {
    /// The highest line number the server stored.
    Line(u64),
    /// The stream exists but holds no line (`204`, or `200` with a `null` number).
    Empty,
    /// No such stream (`404`): a child watcher posts `subagent-start` before shipping.
    NotFound,
}

impl Watermark {
    /// The first line to ship: `N + 1`, or 0 with no watermark.
    pub fn resume_line(self) -> u64 {
        match self {
            Watermark::Line(n) => n.saturating_add(1),
            Watermark::Empty | Watermark::NotFound => 0,
        }
    }
}

/// Why a request did not succeed, sorted by what the caller does next. One type for every
/// request: the watermark query, transcript batches and lifecycle hooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// `408`, `429`, `5xx`, a redirect, a transport error, a timeout or an unreadable `200`:
    /// send the same request again after a backoff (no sooner than `retry_after`).
    Transient {
        status: Option<u16>,
        retry_after: Option<Duration>,
        error: String,
    },
    /// `401`/`403`: keep everything, re-read the token, try again in a minute. `token_sent`:
    /// whether the request carried a token (a refusal of none is no verdict on a token).
    Unauthorized { status: u16, token_sent: bool },
    /// `404`/`405` from `/hooks/transcript`: no kcap server answers at this path, so
    /// `KCAP_URL` names the wrong place. Retried with backoff like a transient failure (the
    /// operator can fix the setting), never treated as a refusal of the lines.
    WrongPath { status: u16, url: String },
    /// Any other 4xx: the server refuses this request as it is.
    Rejected { status: u16, body_snippet: String },
}

impl Failure {
    /// The server's `Retry-After`, when it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Failure::Transient { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl Failure {
    /// The HTTP status, or -1 for a transport error (for log fields).
    pub(crate) fn status(&self) -> i64 {
        match self {
            Failure::Transient { status, .. } => status.map(i64::from).unwrap_or(-1),
            Failure::Unauthorized { status, .. }
            | Failure::WrongPath { status, .. }
            | Failure::Rejected { status, .. } => i64::from(*status),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Transient { error, .. } => f.write_str(error),
            Failure::Unauthorized {
                status,
                token_sent: true,
            } => write!(f, "the kcap server refused the token (HTTP {status})"),
            Failure::Unauthorized {
                status,
                token_sent: false,
            } => write!(
                f,
                "the kcap server answered HTTP {status} to a request sent without a token (no \
                 usable KCAP_TOKEN, KCAP_TOKEN_FILE, machine credential or kcap login for it)"
            ),
            Failure::WrongPath { status, url } => write!(
                f,
                "no kcap server answers at {url} (HTTP {status}): KCAP_URL names the wrong path"
            ),
            Failure::Rejected {
                status,
                body_snippet,
            } => write!(
                f,
                "the server rejected the request (HTTP {status}): {body_snippet}"
            ),
        }
    }
}

impl std::error::Error for Failure {}

/// The `200` body of the watermark query: `{"last_line_number": N}` or `null`. Anything else
/// (a missing key, a string, a negative number, not an object, not JSON) is described by its
/// shape, never taken for "no lines", which would resend the whole transcript.
pub(crate) fn parse_last_line(bytes: &[u8]) -> Result<Watermark, String> {
    let value: serde_json::Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(_) if bytes.iter().all(u8::is_ascii_whitespace) => return Err("an empty body".into()),
        Err(_) => return Err(format!("not JSON, {} bytes", bytes.len())),
    };
    let Some(object) = value.as_object() else {
        return Err(format!("a JSON {}", json_kind(&value)));
    };
    match object.get("last_line_number") {
        Some(serde_json::Value::Null) => Ok(Watermark::Empty),
        Some(n) => n.as_u64().map(Watermark::Line).ok_or_else(|| {
            format!(
                "an object whose last_line_number is {}",
                match n {
                    serde_json::Value::Number(_) => "not a whole non-negative number".to_owned(),
                    other => format!("a {}", json_kind(other)),
                }
            )
        }),
        None => {
            let mut keys: Vec<&str> = object.keys().map(String::as_str).take(8).collect();
            keys.sort_unstable();
            Err(format!(
                "an object without last_line_number, keys [{}]",
                keys.join(", ")
            ))
        }
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// A lifecycle route: one row of everything the crate knows of it besides its body (its route
/// under `/hooks/`, the name and the `event`s its log lines carry). The pipeline's policy for
/// each (when it is sent, what a failure does) is `pipeline::hooks`'s table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    SubagentStart,
    SubagentStop,
    SessionEnd,
}

impl Lifecycle {
    /// Every route, in the order of [`Lifecycle::index`].
    pub(crate) const ALL: [Lifecycle; 3] = [
        Lifecycle::SubagentStart,
        Lifecycle::SubagentStop,
        Lifecycle::SessionEnd,
    ];

    /// Its place in [`Lifecycle::ALL`] (a table of per-route state is indexed by it).
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn route(self) -> &'static str {
        match self {
            Lifecycle::SubagentStart => ROUTE_SUBAGENT_START,
            Lifecycle::SubagentStop => ROUTE_SUBAGENT_STOP,
            Lifecycle::SessionEnd => ROUTE_SESSION_END,
        }
    }

    /// How log lines and errors name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Lifecycle::SubagentStart => "subagent-start",
            Lifecycle::SubagentStop => "subagent-stop",
            Lifecycle::SessionEnd => "session-end",
        }
    }

    /// The `event` of the log line saying the server acknowledged it.
    pub(crate) fn posted_event(self) -> &'static str {
        match self {
            Lifecycle::SubagentStart => "subagent_start_posted",
            Lifecycle::SubagentStop => "subagent_stop_posted",
            Lifecycle::SessionEnd => "session_end_posted",
        }
    }

    /// The `event` of the log line saying a post of it failed.
    pub(crate) fn failed_event(self) -> &'static str {
        match self {
            Lifecycle::SubagentStart => "subagent_start_failed",
            Lifecycle::SubagentStop => "subagent_stop_failed",
            Lifecycle::SessionEnd => "session_end_failed",
        }
    }

    /// Why it was posted, when its log line says (` (...)`, or empty).
    pub(crate) fn posted_because(self) -> &'static str {
        match self {
            Lifecycle::SubagentStart => " (no stream existed)",
            Lifecycle::SubagentStop | Lifecycle::SessionEnd => "",
        }
    }
}

/// A lifecycle request: its route under `/hooks/` and its JSON body, built once (a stop spooled
/// at exit is byte for byte the one that was posted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Hook {
    SubagentStart(String),
    SubagentStop(String),
    SessionEnd(String),
}

impl Hook {
    pub(crate) fn kind(&self) -> Lifecycle {
        match self {
            Hook::SubagentStart(_) => Lifecycle::SubagentStart,
            Hook::SubagentStop(_) => Lifecycle::SubagentStop,
            Hook::SessionEnd(_) => Lifecycle::SessionEnd,
        }
    }

    pub(crate) fn route(&self) -> &'static str {
        self.kind().route()
    }

    pub(crate) fn body(&self) -> &str {
        match self {
            Hook::SubagentStart(b) | Hook::SubagentStop(b) | Hook::SessionEnd(b) => b,
        }
    }
}

/// `Retry-After` as a delay: delta seconds, or an HTTP date (`now` turns it into a delay; a
/// date in the past means "now"). `None` when unreadable.
pub(crate) fn parse_retry_after(value: &str, now: Ts) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // More digits than a u64 holds is still "a very long time".
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    // IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) is RFC 2822 syntax.
    static PARSER: jiff::fmt::rfc2822::DateTimeParser = jiff::fmt::rfc2822::DateTimeParser::new();
    let at = PARSER.parse_timestamp(value).ok()?;
    Some(Ts(at.as_millisecond()).duration_since(now))
}

/// Why a session watcher posts `session-end` (docs/behaviour.md L4b).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionEndReason {
    IdleTimeout,
    ParentExited,
}

#[derive(Serialize)]
struct SubagentStop<'a> {
    hook_event_name: &'static str,
    session_id: &'a str,
    agent_id: &'a str,
    agent_type: &'a str,
    transcript_path: &'a str,
    agent_transcript_path: &'a str,
    cwd: &'static str,
    stop_hook_active: bool,
    last_assistant_message: &'a str,
}

#[derive(Serialize)]
struct SubagentStart<'a> {
    hook_event_name: &'static str,
    session_id: &'a str,
    agent_id: &'a str,
    agent_type: &'a str,
    transcript_path: &'a str,
    cwd: &'static str,
}

#[derive(Serialize)]
struct SessionEnd<'a> {
    session_id: &'a str,
    transcript_path: &'a str,
    cwd: &'a str,
    hook_event_name: &'static str,
    reason: SessionEndReason,
    ended_at: String,
}

fn to_json<T: Serialize>(value: &T) -> String {
    // These bodies are structs of strings, bools and a unit enum: serde_json cannot fail on
    // them (it only fails on non-string map keys or a failing custom Serialize).
    serde_json::to_string(value).expect("a hook body always serialises")
}

/// The `subagent-stop` body (docs/behaviour.md A3). `last_assistant_message` must
/// already be redacted and cut to 4 KiB (or be empty).
pub fn subagent_stop_body(
    session_id: &str,
    agent_id: &str,
    agent_type: &str,
    transcript_path: &Path,
    last_assistant_message: &str,
) -> String {
    let path = transcript_path.to_string_lossy();
    to_json(&SubagentStop {
        hook_event_name: "subagent_stop",
        session_id,
        agent_id,
        agent_type,
        transcript_path: &path,
        agent_transcript_path: &path,
        cwd: "",
        stop_hook_active: false,
        last_assistant_message,
    })
}

/// The `subagent-start` body (docs/behaviour.md A3), posted when the child's
/// watermark answered `404`.
pub fn subagent_start_body(
    session_id: &str,
    agent_id: &str,
    agent_type: &str,
    transcript_path: &Path,
) -> String {
    to_json(&SubagentStart {
        hook_event_name: "subagent_start",
        session_id,
        agent_id,
        agent_type,
        transcript_path: &transcript_path.to_string_lossy(),
        cwd: "",
    })
}

/// The `session-end/codex` body (docs/behaviour.md A4).
pub fn session_end_body(
    session_id: &str,
    transcript_path: &Path,
    cwd: &str,
    reason: SessionEndReason,
    ended_at: Ts,
) -> String {
    to_json(&SessionEnd {
        session_id,
        transcript_path: &transcript_path.to_string_lossy(),
        cwd,
        hook_event_name: "session_end",
        reason,
        ended_at: ended_at.rfc3339(),
    })
}
