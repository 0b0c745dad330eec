//! Line classification. PLACEHOLDER: a serde_json-based version that buffers the whole line;
//! to be replaced by the bounded streaming scanner.

use super::*;

/// Push-based classifier: feed a line's bytes in any number of chunks, then `finish`.
#[derive(Default)]
pub struct Classifier {
    buf: Vec<u8>,
}

impl Classifier {
    pub fn new() -> Classifier {
        Classifier::default()
    }

    /// Feeds the next bytes of the current line (never including its `\n`).
    pub fn feed(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Classifies the line fed so far and resets for the next line.
    pub fn finish(&mut self) -> LineInfo {
        let buf = std::mem::take(&mut self.buf);
        let mut b: &[u8] = &buf;
        if b.starts_with(b"\xEF\xBB\xBF") {
            b = &b[3..];
        }
        let v: serde_json::Value = match serde_json::from_slice(b) {
            Ok(v) => v,
            Err(_) => return LineInfo::malformed(),
        };
        let Some(obj) = v.as_object() else {
            return LineInfo::malformed();
        };
        let s = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_string);
        let mut info = LineInfo {
            kind: match obj.get("type").and_then(|t| t.as_str()) {
                Some("session_meta") => Kind::SessionMeta,
                Some("response_item") => Kind::ResponseItem,
                Some("event_msg") => Kind::EventMsg,
                Some("turn_context") => Kind::TurnContext,
                Some("compacted") => Kind::Compacted,
                _ => Kind::Other,
            },
            timestamp: obj
                .get("timestamp")
                .and_then(|t| t.as_str())
                .and_then(Ts::parse_rfc3339),
            ..LineInfo::default()
        };
        let Some(p) = obj.get("payload").and_then(|p| p.as_object()) else {
            return info;
        };
        info.payload_type_raw = s(p.get("type"));
        info.payload_type = match info.payload_type_raw.as_deref() {
            Some("task_started" | "turn_started") => PayloadType::TaskStarted,
            Some("task_complete" | "turn_complete") => PayloadType::TaskComplete,
            Some("turn_aborted") => PayloadType::TurnAborted,
            Some("token_count") => PayloadType::TokenCount,
            Some("function_call") => PayloadType::FunctionCall,
            Some("custom_tool_call") => PayloadType::CustomToolCall,
            Some("local_shell_call") => PayloadType::LocalShellCall,
            Some("tool_search_call") => PayloadType::ToolSearchCall,
            Some("function_call_output") => PayloadType::FunctionCallOutput,
            Some("custom_tool_call_output") => PayloadType::CustomToolCallOutput,
            Some("tool_search_output") => PayloadType::ToolSearchOutput,
            _ => PayloadType::Other,
        };
        info.call_id = s(p.get("call_id"));
        info.name = s(p.get("name"));
        info.turn_id = s(p.get("turn_id"));
        info.last_agent_message = match p.get("last_agent_message") {
            None => None,
            Some(serde_json::Value::String(m)) => Some(m.clone()),
            Some(_) => Some(String::new()),
        };
        info.codex_error_info = p
            .get("error")
            .and_then(|e| e.get("codex_error_info"))
            .and_then(|c| match c {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Object(o) => o.keys().next().cloned(),
                _ => None,
            });
        if let Some(rl) = p.get("rate_limits").and_then(|r| r.as_object()) {
            for w in rl.values().filter_map(|w| w.as_object()).take(8) {
                info.rate_limits.push(RateWindow {
                    used_percent: w.get("used_percent").and_then(|n| n.as_f64()),
                    resets_at: w.get("resets_at").and_then(|n| n.as_f64()),
                });
            }
        }
        if info.kind == Kind::SessionMeta {
            let sub = p.get("source").and_then(|s| s.get("subagent"));
            info.meta = Some(Box::new(SessionMetaInfo {
                id: s(p.get("id")),
                session_id: s(p.get("session_id")),
                parent_thread_id: s(p.get("parent_thread_id")),
                spawn_parent_thread_id: s(sub
                    .and_then(|s| s.get("thread_spawn"))
                    .and_then(|t| t.get("parent_thread_id"))),
                thread_source: s(p.get("thread_source")),
                has_subagent_source: sub.is_some(),
                agent_path: s(p.get("agent_path")),
                agent_nickname: s(p.get("agent_nickname")),
                agent_role: s(p.get("agent_role")),
                cwd: s(p.get("cwd")),
                cli_version: s(p.get("cli_version")),
                originator: s(p.get("originator")),
            }));
        }
        info
    }
}

/// Classifies one whole line.
pub fn classify(line: &[u8]) -> LineInfo {
    let mut c = Classifier::new();
    c.feed(line);
    c.finish()
}
