//! Property tests of the streaming classifier against a serde_json oracle: the same bytes in
//! any chunking give the same answer, generated rollout-like lines give the fields a
//! `serde_json::Value` reading gives, and any bytes are malformed exactly when serde_json
//! rejects them (or they are not an object).

use kcap_watch::codex::{
    Classifier, KNOWN_WINDOWS, Kind, LineInfo, MAX_MESSAGE_FIELD, MAX_SHORT_FIELD, PayloadType,
    RateWindow, SessionMetaInfo, classify,
};
use kcap_watch::time::Ts;
use proptest::prelude::*;
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// The oracle: the original serde_json-based classifier, which buffers the whole line.

fn strip_bom(line: &[u8]) -> &[u8] {
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

/// Cuts to `limit` bytes on a character boundary, as `LineInfo` documents.
fn cut(s: &str, limit: usize) -> String {
    let mut end = s.len().min(limit);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The classification of a `serde_json::Value` reading of the line. `rate_limits` come in the
/// map's sorted key order (compare them sorted).
fn reference_classify(line: &[u8]) -> LineInfo {
    let v: Value = match serde_json::from_slice(strip_bom(line)) {
        Ok(v) => v,
        Err(_) => return LineInfo::malformed(),
    };
    let Some(obj) = v.as_object() else {
        return LineInfo::malformed();
    };
    let s = |v: Option<&Value>| v.and_then(|v| v.as_str()).map(|s| cut(s, MAX_SHORT_FIELD));
    let mut info = LineInfo {
        kind: match obj.get("type").and_then(|t| t.as_str()) {
            Some("session_meta") => Kind::SessionMeta,
            Some("response_item") => Kind::ResponseItem,
            Some("event_msg") => Kind::EventMsg,
            Some("turn_context") => Kind::TurnContext,
            Some("compacted") => Kind::Compacted,
            Some("inter_agent_communication_metadata") => Kind::InterAgentMetadata,
            _ => Kind::Other,
        },
        // A timestamp longer than a short field is never read (a cut one could mislead).
        timestamp: obj
            .get("timestamp")
            .and_then(|t| t.as_str())
            .filter(|t| t.len() <= MAX_SHORT_FIELD)
            .and_then(Ts::parse_rfc3339),
        ordinal: obj
            .get("ordinal")
            .and_then(Value::as_f64)
            .and_then(whole_number),
        ..LineInfo::default()
    };
    let Some(p) = obj.get("payload").and_then(|p| p.as_object()) else {
        return info;
    };
    let raw_type = p.get("type").and_then(|t| t.as_str());
    info.payload_type_raw = raw_type.map(|t| cut(t, MAX_SHORT_FIELD));
    info.payload_type = match raw_type {
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
        Some("agent_message") => PayloadType::AgentMessage,
        _ => PayloadType::Other,
    };
    info.call_id = s(p.get("call_id"));
    info.name = s(p.get("name"));
    info.turn_id = s(p.get("turn_id"));
    info.last_agent_message = match p.get("last_agent_message") {
        None => None,
        Some(Value::String(m)) => Some(cut(m, MAX_MESSAGE_FIELD)),
        Some(_) => Some(String::new()),
    };
    let long = |v: Option<&Value>| {
        v.and_then(|v| v.as_str())
            .map(|s| cut(s, MAX_MESSAGE_FIELD))
    };
    info.error_message = long(p.get("error").and_then(|e| e.get("message")));
    info.message = long(p.get("message"));
    info.trigger_turn = p.get("trigger_turn").and_then(Value::as_bool);
    info.codex_error_info = p
        .get("error")
        .and_then(|e| e.get("codex_error_info"))
        .and_then(|c| match c {
            Value::String(s) => Some(cut(s, MAX_SHORT_FIELD)),
            Value::Object(o) => o.keys().next().map(|k| cut(k, MAX_SHORT_FIELD)),
            _ => None,
        });
    if let Some(rl) = p.get("rate_limits").and_then(|r| r.as_object()) {
        for (name, w) in rl
            .iter()
            .filter_map(|(k, w)| w.as_object().map(|w| (k, w)))
            .take(8)
        {
            info.rate_limits.push(RateWindow {
                name: KNOWN_WINDOWS.into_iter().find(|n| n == name),
                used_percent: w.get("used_percent").and_then(|n| n.as_f64()),
                window_minutes: w.get("window_minutes").and_then(|n| n.as_f64()),
                resets_at: w.get("resets_at").and_then(|n| n.as_f64()),
            });
        }
    }
    if info.kind == Kind::SessionMeta {
        let sub = p.get("source").and_then(|s| s.get("subagent"));
        let spawn = sub.and_then(|s| s.get("thread_spawn"));
        // The string form names the kind; of the object forms `thread_spawn` wins over `other`.
        let subagent_kind = match sub {
            Some(Value::String(k)) => Some(cut(k, MAX_SHORT_FIELD)),
            Some(Value::Object(o)) if o.contains_key("thread_spawn") => Some("thread_spawn".into()),
            Some(Value::Object(o)) if o.contains_key("other") => Some("other".into()),
            _ => None,
        };
        info.meta = Some(Box::new(SessionMetaInfo {
            id: s(p.get("id")),
            session_id: s(p.get("session_id")),
            parent_thread_id: s(p.get("parent_thread_id")),
            spawn_parent_thread_id: s(spawn.and_then(|t| t.get("parent_thread_id"))),
            thread_source: s(p.get("thread_source")),
            has_subagent_source: sub.is_some(),
            subagent_kind,
            spawn_agent_path: s(spawn.and_then(|t| t.get("agent_path"))),
            spawn_agent_nickname: s(spawn.and_then(|t| t.get("agent_nickname"))),
            agent_path: s(p.get("agent_path")),
            agent_nickname: s(p.get("agent_nickname")),
            agent_role: s(p.get("agent_role")),
            cwd: s(p.get("cwd")),
            cli_version: s(p.get("cli_version")),
            originator: s(p.get("originator")),
            history_start_ordinal: p
                .get("subagent_history_start_ordinal")
                .and_then(Value::as_f64)
                .and_then(whole_number),
        }));
    }
    info
}

/// An ordinal as the scanner keeps it: a whole number from 0 to 2^53.
fn whole_number(v: f64) -> Option<u64> {
    (v.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(&v)).then_some(v as u64)
}

/// `rate_limits` in a canonical order, for comparing document order with sorted-key order.
fn sorted_windows(mut info: LineInfo) -> LineInfo {
    let key = |w: &RateWindow| {
        (
            w.name,
            w.used_percent.map(f64::to_bits),
            w.window_minutes.map(f64::to_bits),
            w.resets_at.map(f64::to_bits),
        )
    };
    info.rate_limits.sort_by_key(key);
    info
}

fn serde_accepts(line: &[u8]) -> bool {
    serde_json::from_slice::<Value>(strip_bom(line)).is_ok_and(|v| v.is_object())
}

/// An upper bound of the nesting depth (brackets inside strings count too).
fn max_nesting(line: &[u8]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for &b in line {
        match b {
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

fn classify_in_chunks(line: &[u8], cuts: &[usize]) -> LineInfo {
    let mut c = Classifier::new();
    let mut points: Vec<usize> = cuts.iter().map(|p| p % (line.len() + 1)).collect();
    points.sort_unstable();
    let mut start = 0;
    for p in points {
        c.feed(&line[start..p]);
        start = p;
    }
    c.feed(&line[start..]);
    c.finish()
}

// ---------------------------------------------------------------------------------------------
// Generated rollout-like lines, rendered with random escapes and whitespace.

#[derive(Clone, Debug)]
enum J {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

/// A small deterministic generator for rendering choices, seeded by proptest.
struct Choices(u64);

impl Choices {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

fn hex4(out: &mut Vec<u8>, unit: u16, c: &mut Choices) {
    let s = if c.one_in(2) {
        format!("\\u{unit:04x}")
    } else {
        format!("\\u{unit:04X}")
    };
    out.extend_from_slice(s.as_bytes());
}

fn render_str(s: &str, out: &mut Vec<u8>, c: &mut Choices) {
    out.push(b'"');
    for ch in s.chars() {
        let short = match ch {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\t' => Some("\\t"),
            '\r' => Some("\\r"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '/' if c.one_in(3) => Some("\\/"),
            _ => None,
        };
        let must_escape = (ch as u32) < 0x20 || ch == '"' || ch == '\\';
        if must_escape || c.one_in(12) {
            match short {
                Some(e) if !c.one_in(3) => out.extend_from_slice(e.as_bytes()),
                _ => {
                    let mut units = [0u16; 2];
                    for u in ch.encode_utf16(&mut units) {
                        hex4(out, *u, c);
                    }
                }
            }
        } else {
            let mut buf = [0; 4];
            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        }
    }
    out.push(b'"');
}

fn ws(out: &mut Vec<u8>, c: &mut Choices) {
    if c.one_in(6) {
        let pick = [" ", "\t", "\r", "  ", " \r\t"];
        out.extend_from_slice(pick[(c.next() % pick.len() as u64) as usize].as_bytes());
    }
}

fn render(j: &J, out: &mut Vec<u8>, c: &mut Choices) {
    match j {
        J::Null => out.extend_from_slice(b"null"),
        J::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        J::Num(n) => out.extend_from_slice(n.as_bytes()),
        J::Str(s) => render_str(s, out, c),
        J::Arr(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                ws(out, c);
                render(item, out, c);
                ws(out, c);
            }
            out.push(b']');
        }
        J::Obj(members) => {
            out.push(b'{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                ws(out, c);
                render_str(k, out, c);
                ws(out, c);
                out.push(b':');
                ws(out, c);
                render(v, out, c);
                ws(out, c);
            }
            out.push(b'}');
        }
    }
}

fn render_line(j: &J, seed: u64, bom: bool, crlf: bool) -> Vec<u8> {
    let mut c = Choices(seed | 1);
    let mut out = Vec::new();
    if bom {
        out.extend_from_slice(b"\xEF\xBB\xBF");
    }
    ws(&mut out, &mut c);
    render(j, &mut out, &mut c);
    ws(&mut out, &mut c);
    if crlf {
        out.push(b'\r');
    }
    out
}

fn numbers() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (0.0f64..200.0).prop_map(|f| f.to_string()),
        (1.7e9f64..1.8e9).prop_map(|f| format!("{f:e}")),
        prop::sample::select(vec![
            "0",
            "-0",
            "100",
            "100.0",
            "1e2",
            "1E+2",
            "-1.5e-3",
            "0.0",
            "1785265331",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775809",
            "123456789012345678901234567890",
            "1.7976931348623157e308",
            "1e308",
            "4.9e-324",
            "1e-400",
            "0e999999999999",
            "12345678901234567890.12345678901234567890e-5",
            "0.00000000000000000000000000000000000000000001",
        ])
        .prop_map(str::to_string),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "session_meta", "response_item", "event_msg", "turn_context", "compacted",
            "world_state", "task_started", "turn_started", "task_complete", "turn_complete",
            "turn_aborted", "token_count", "function_call", "custom_tool_call",
            "local_shell_call", "tool_search_call", "function_call_output",
            "custom_tool_call_output", "tool_search_output", "agent_message", "subagent",
            "inter_agent_communication_metadata", "token_usage_record", "review",
            "memory_consolidation", "thread_settings_applied", "sub_agent_activity",
            "usage_limit_exceeded", "2026-07-28T16:14:05.115Z", "2026-07-28T18:19:11.250+02:00",
            " 2026-07-28T16:14:05Z ", "2026-13-45T99:00:00Z", "call_Ab12", "019fa981-2dca-7c3e",
            "", "h\u{e9}llo w\u{f6}rld \u{1F600}", "\"quoted\" \\ back/slash",
            "line\nbreak\ttab\u{0}nul\u{1f}\u{7f}", "\u{2028}\u{FEFF}\u{10FFFF}",
        ])
        .prop_map(str::to_string),
        3 => prop::collection::vec(any::<char>(), 0..12).prop_map(|v| v.into_iter().collect()),
        1 => (1usize..4, prop::sample::select(vec!["x", "\u{e9}", "\u{20AC}", "\u{1F600}", "\\\""]))
            .prop_map(|(n, unit)| unit.repeat(n * 200)),
        1 => Just("\u{e9}\"".repeat(MAX_MESSAGE_FIELD / 2)),
    ]
}

fn key_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "type",
            "payload",
            "timestamp",
            "id",
            "name",
            "error",
            "message",
            "source",
            "subagent",
            "thread_spawn",
            "parent_thread_id",
            "used_percent",
            "resets_at",
            "window_minutes",
            "trigger_turn",
            "other",
            "agent_path",
            "agent_nickname",
        ])
        .prop_map(str::to_string),
        prop::collection::vec(any::<char>(), 0..8).prop_map(|v| v.into_iter().collect()),
    ]
}

fn junk() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        numbers().prop_map(J::Num),
        text().prop_map(J::Str),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(J::Arr),
            prop::collection::vec((key_text(), inner), 0..4).prop_map(J::Obj),
        ]
    })
}

/// Mostly a string, sometimes anything.
fn str_or_junk() -> impl Strategy<Value = J> {
    prop_oneof![5 => text().prop_map(J::Str), 1 => junk()]
}

fn member(
    key: &'static str,
    value: impl Strategy<Value = J>,
) -> impl Strategy<Value = (String, J)> {
    value.prop_map(move |v| (key.to_string(), v))
}

fn window() -> impl Strategy<Value = J> {
    let m = prop_oneof![
        member(
            "used_percent",
            prop_oneof![4 => numbers().prop_map(J::Num), 1 => junk()]
        ),
        member(
            "resets_at",
            prop_oneof![4 => numbers().prop_map(J::Num), 1 => junk()]
        ),
        member("window_minutes", numbers().prop_map(J::Num)),
        (key_text(), junk()),
    ];
    prop_oneof![
        4 => prop::collection::vec(m, 0..5).prop_map(J::Obj),
        1 => junk(),
    ]
}

fn rate_limits() -> impl Strategy<Value = J> {
    // At most 8 members, so that at most 8 distinct windows exist (the oracle keeps the first
    // 8 in key order, the scanner the first 8 in document order).
    let key = prop::sample::select(vec![
        "primary",
        "secondary",
        "limit_id",
        "credits",
        "rate_limit_reached_type",
        "tertiary",
        "pr\u{e9}mium",
    ]);
    prop_oneof![
        5 => prop::collection::vec((key, window()), 0..8)
            .prop_map(|ms| J::Obj(ms.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        1 => junk(),
    ]
}

fn error() -> impl Strategy<Value = J> {
    let info = prop_oneof![
        3 => text().prop_map(J::Str),
        // The object form has one key (the oracle's map sorts keys, the scanner reads the
        // first in the document).
        2 => (key_text(), junk()).prop_map(|(k, v)| J::Obj(vec![(k, v)])),
        1 => Just(J::Obj(vec![])),
        1 => junk().prop_filter("objects with several keys", |j| !matches!(j, J::Obj(m) if m.len() > 1)),
    ];
    let m = prop_oneof![
        member("message", str_or_junk()),
        member("codex_error_info", info),
        (key_text(), junk()),
    ];
    prop_oneof![4 => prop::collection::vec(m, 0..4).prop_map(J::Obj), 1 => junk()]
}

fn source() -> impl Strategy<Value = J> {
    let spawn = prop::collection::vec(
        prop_oneof![
            member("parent_thread_id", str_or_junk()),
            member("depth", numbers().prop_map(J::Num)),
            member("agent_path", str_or_junk()),
            member("agent_nickname", str_or_junk()),
        ],
        0..3,
    )
    .prop_map(J::Obj);
    let sub = prop_oneof![
        3 => prop::collection::vec(
            prop_oneof![
                member("thread_spawn", prop_oneof![3 => spawn, 1 => junk()]),
                member("other", str_or_junk()),
                (key_text(), junk())
            ],
            0..3
        )
        .prop_map(J::Obj),
        1 => Just(J::Null),
        1 => text().prop_map(J::Str),
        1 => junk(),
    ];
    prop_oneof![
        4 => prop::collection::vec(prop_oneof![3 => member("subagent", sub), 1 => (key_text(), junk())], 0..3)
            .prop_map(J::Obj),
        1 => junk(),
    ]
}

fn payload() -> impl Strategy<Value = J> {
    let string_key = prop::sample::select(vec![
        "type",
        "call_id",
        "name",
        "turn_id",
        "id",
        "session_id",
        "parent_thread_id",
        "thread_source",
        "agent_path",
        "agent_nickname",
        "agent_role",
        "cwd",
        "cli_version",
        "originator",
        "arguments",
        "output",
    ]);
    let m = prop_oneof![
        8 => (string_key, str_or_junk()).prop_map(|(k, v)| (k.to_string(), v)),
        2 => member("last_agent_message", prop_oneof![3 => text().prop_map(J::Str), 1 => Just(J::Null), 1 => junk()]),
        2 => member("error", error()),
        2 => member("rate_limits", rate_limits()),
        2 => member("source", source()),
        1 => member("message", str_or_junk()),
        1 => member("trigger_turn", prop_oneof![3 => any::<bool>().prop_map(J::Bool), 1 => junk()]),
        1 => member("subagent_history_start_ordinal", prop_oneof![3 => numbers().prop_map(J::Num), 1 => Just(J::Null), 1 => junk()]),
        2 => (key_text(), junk()),
    ];
    prop_oneof![6 => prop::collection::vec(m, 0..10).prop_map(J::Obj), 1 => junk()]
}

fn envelope() -> impl Strategy<Value = J> {
    let m = prop_oneof![
        2 => member("timestamp", str_or_junk()),
        2 => member("type", str_or_junk()),
        3 => member("payload", payload()),
        1 => member("ordinal", numbers().prop_map(J::Num)),
        1 => (key_text(), junk()),
    ];
    prop::collection::vec(m, 0..6).prop_map(J::Obj)
}

/// A rendered rollout-like line: valid JSON object, maybe with a BOM and a trailing `\r`.
fn line() -> impl Strategy<Value = Vec<u8>> {
    (
        envelope(),
        any::<u64>(),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(j, seed, bom, crlf)| render_line(&j, seed, bom, crlf))
}

#[derive(Clone, Debug)]
enum Edit {
    Set(usize, u8),
    Insert(usize, u8),
    Remove(usize, usize),
    Truncate(usize),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let byte = prop_oneof![
        prop::sample::select(
            b"{}[]\",:\\/u0123456789abcdefABCDEF-+.eE \t\r\ntrue null false\x00\x1f\x7f\x80\xbf\xc3\xe2\xed\xf0\xf4\xf5\xff"
                .to_vec()
        ),
        any::<u8>(),
    ];
    let edit = prop_oneof![
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Edit::Set(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Edit::Insert(i, b)),
        (any::<usize>(), 1usize..4).prop_map(|(i, n)| Edit::Remove(i, n)),
        any::<usize>().prop_map(Edit::Truncate),
    ];
    prop::collection::vec(edit, 1..4)
}

fn apply(mut line: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let len = line.len();
        match *e {
            Edit::Set(i, b) if len > 0 => line[i % len] = b,
            Edit::Insert(i, b) => line.insert(i % (len + 1), b),
            Edit::Remove(i, n) if len > 0 => {
                let at = i % len;
                line.drain(at..(at + n).min(len));
            }
            Edit::Truncate(i) => line.truncate(i % (len + 1)),
            _ => {}
        }
    }
    line
}

/// A line that is one mutation away from valid, or a valid one.
fn mutated_line() -> impl Strategy<Value = Vec<u8>> {
    (line(), prop::option::weighted(0.8, edits())).prop_map(|(l, e)| match e {
        Some(e) => apply(l, &e),
        None => l,
    })
}

/// Number grammar fuzz: a value made of number-ish characters.
fn number_ish_line() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(b"0123456789-+.eE0019".to_vec()), 1..30).prop_map(
        |v| {
            let mut l = br#"{"payload":{"rate_limits":{"p":{"used_percent":"#.to_vec();
            l.extend_from_slice(&v);
            l.extend_from_slice(b"}}}}");
            l
        },
    )
}

/// Escape fuzz: a string value made of escape fragments, surrogate halves included.
fn escape_ish_line() -> impl Strategy<Value = Vec<u8>> {
    let token = prop::sample::select(vec![
        "\\ud83d",
        "\\uDE00",
        "\\udbff",
        "\\udfff",
        "\\u00e9",
        "\\u0000",
        "\\u",
        "\\n",
        "\\/",
        "\\",
        "\\\\",
        "u",
        "d8",
        "DC",
        "0",
        "x",
        "\\\"",
        "\u{e9}",
        "\u{1F600}",
        "\t",
    ]);
    prop::collection::vec(token, 0..8).prop_map(|v| {
        let mut l = br#"{"payload":{"name":""#.to_vec();
        l.extend_from_slice(v.concat().as_bytes());
        l.extend_from_slice(br#""}}"#);
        l
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    /// (a) Chunking never changes the answer, and a reused classifier forgets the last line.
    #[test]
    fn chunking_is_invisible(
        l in mutated_line(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
        previous in mutated_line(),
    ) {
        let whole = classify(&l);
        prop_assert_eq!(&classify_in_chunks(&l, &cuts), &whole);
        let mut c = Classifier::new();
        c.feed(&previous);
        c.finish();
        for b in &l {
            c.feed(std::slice::from_ref(b));
        }
        prop_assert_eq!(c.finish(), whole);
    }

    /// (b) Generated rollout lines give the same fields as the serde_json oracle.
    #[test]
    fn fields_match_the_oracle(l in line()) {
        prop_assert!(serde_accepts(&l));
        let got = classify(&l);
        prop_assert!(!got.malformed);
        prop_assert_eq!(sorted_windows(got), sorted_windows(reference_classify(&l)));
    }

    /// (c) Malformed exactly when serde_json rejects the bytes or they are not an object.
    #[test]
    fn validity_matches_serde_json(l in prop_oneof![
        3 => mutated_line(),
        1 => number_ish_line(),
        1 => escape_ish_line(),
        1 => prop::collection::vec(
            prop::sample::select(b"{}[]\",:\\u0123456789-.eE tfalsnu\xc3\xa9\x00".to_vec()), 0..24),
    ]) {
        prop_assume!(max_nesting(&l) < 127);
        let got = classify(&l);
        prop_assert_eq!(got.malformed, !serde_accepts(&l), "{:?}", String::from_utf8_lossy(&l));
        if !got.malformed {
            prop_assert_eq!(sorted_windows(got), sorted_windows(reference_classify(&l)));
        }
    }

    /// (d) Arbitrary bytes, in arbitrary chunks, never panic.
    #[test]
    fn never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let whole = classify(&bytes);
        prop_assert_eq!(classify_in_chunks(&bytes, &cuts), whole);
    }
}
