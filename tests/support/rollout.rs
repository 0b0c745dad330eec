//! The one builder of rollout lines for every suite: each line as Codex writes it
//! (`{"timestamp":…,"type":…,"payload":…}`), untimed unless a suite asks for a time, so a
//! test states only what it is about and the shapes cannot drift apart between suites.
//!
//! ```ignore
//! let lines = [rollout::task_started("t1").text(), rollout::task_complete("t1", "done").at("10:00:00")];
//! ```

use kcap_watch::time::Ts;

/// The day every clock time given to [`Line::at`] falls on.
pub const DAY: &str = "2026-07-28";

/// One rollout line under construction.
#[derive(Clone, Debug)]
pub struct Line {
    kind: &'static str,
    payload: String,
}

impl Line {
    /// A line of `kind` (`session_meta`, `event_msg`, `response_item`, ...) whose payload is
    /// the JSON object `payload`.
    pub fn new(kind: &'static str, payload: impl Into<String>) -> Line {
        Line {
            kind,
            payload: payload.into(),
        }
    }

    /// The line without a `timestamp` field (the watcher falls back to the time it read it).
    pub fn text(&self) -> String {
        format!(r#"{{"type":"{}","payload":{}}}"#, self.kind, self.payload)
    }

    /// The line stamped at `hms` (`10:00:00` or `10:00:00.250`) on [`DAY`].
    pub fn at(&self, hms: &str) -> String {
        let hms = if hms.contains('.') {
            hms.to_string()
        } else {
            format!("{hms}.000")
        };
        self.stamped(&format!("{DAY}T{hms}Z"))
    }

    /// The line stamped at `ts`.
    pub fn at_ts(&self, ts: Ts) -> String {
        self.stamped(&ts.rfc3339())
    }

    /// The line stamped with the wall clock's time now.
    pub fn now(&self) -> String {
        self.at_ts(Ts::now())
    }

    fn stamped(&self, timestamp: &str) -> String {
        format!(
            r#"{{"timestamp":"{timestamp}","type":"{}","payload":{}}}"#,
            self.kind, self.payload
        )
    }
}

impl From<Line> for String {
    fn from(l: Line) -> String {
        l.text()
    }
}

/// A JSON string literal of `s`.
pub fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// `"0199a2b4c0de7000a000000000000001"` → `"0199a2b4-c0de-7000-a000-000000000001"`: the
/// dashed form Codex writes of the id the watcher sends without dashes.
pub fn dashed(id: &str) -> String {
    if id.contains('-') || id.len() != 32 {
        return id.to_string();
    }
    format!(
        "{}-{}-{}-{}-{}",
        &id[..8],
        &id[8..12],
        &id[12..16],
        &id[16..20],
        &id[20..]
    )
}

/// A session's (parent's) header: `payload` holds at least its `id`.
pub fn session_meta(payload: &str) -> Line {
    Line::new("session_meta", payload)
}

/// A sub-agent's header in the current Codex layout: its own `id`, its parent session, and
/// the role Codex gave it (`agent_path`'s last part becomes the stop's `agent_type`).
pub fn child_meta(agent: &str, session: &str, agent_path: &str, nickname: &str) -> Line {
    let (agent, session) = (dashed(agent), dashed(session));
    session_meta(&format!(
        r#"{{"id":"{agent}","session_id":"{session}","parent_thread_id":"{session}","thread_source":"subagent","agent_path":"{agent_path}","agent_nickname":"{nickname}"}}"#
    ))
}

pub fn event(payload: &str) -> Line {
    Line::new("event_msg", payload)
}

pub fn item(payload: &str) -> Line {
    Line::new("response_item", payload)
}

pub fn task_started(turn: &str) -> Line {
    event(&format!(r#"{{"type":"task_started","turn_id":"{turn}"}}"#))
}

pub fn task_complete(turn: &str, message: &str) -> Line {
    event(&format!(
        r#"{{"type":"task_complete","turn_id":"{turn}","last_agent_message":{}}}"#,
        quoted(message)
    ))
}

/// A turn that ended because the usage limit was hit (no last message).
pub fn usage_limit_complete(turn: &str) -> Line {
    event(&format!(
        r#"{{"type":"task_complete","turn_id":"{turn}","last_agent_message":null,"error":{{"codex_error_info":"usage_limit_exceeded"}}}}"#
    ))
}

pub fn turn_aborted(turn: &str) -> Line {
    event(&format!(
        r#"{{"type":"turn_aborted","turn_id":"{turn}","reason":"interrupted"}}"#
    ))
}

/// A `token_count` whose primary window is `used_percent` full and resets at `resets_at`.
pub fn token_count(used_percent: f64, resets_at: Ts) -> Line {
    event(&format!(
        r#"{{"type":"token_count","rate_limits":{{"primary":{{"used_percent":{used_percent:.1},"resets_at":{}}}}}}}"#,
        resets_at.as_millis() / 1000
    ))
}

pub fn reasoning(text: &str) -> Line {
    event(&format!(
        r#"{{"type":"agent_reasoning","text":{}}}"#,
        quoted(text)
    ))
}

/// A tool call; `arguments` is the JSON text of its arguments.
pub fn call(id: &str, name: &str, arguments: &str) -> Line {
    item(&format!(
        r#"{{"type":"function_call","name":"{name}","arguments":{},"call_id":"{id}"}}"#,
        quoted(arguments)
    ))
}

pub fn output(id: &str, text: &str) -> Line {
    item(&format!(
        r#"{{"type":"function_call_output","call_id":"{id}","output":{}}}"#,
        quoted(text)
    ))
}

pub fn message(text: &str) -> Line {
    item(&format!(
        r#"{{"type":"message","role":"assistant","content":[{{"type":"output_text","text":{}}}]}}"#,
        quoted(text)
    ))
}
