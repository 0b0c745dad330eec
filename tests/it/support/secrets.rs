//! The secret shapes several redaction suites place in text: kcap's credential header names
//! and the vendor token prefixes the redactor must catch, and where a shipped line's text can
//! hide one.

use serde_json::{Value, json};

/// kcap's credential header names (`RedactionPatterns.cs`'s list plus R2.2's).
pub const HEADER_NAMES: &[&str] = &[
    "Authorization",
    "Proxy-Authorization",
    "Cookie",
    "Set-Cookie",
    "X-Api-Key",
    "X-Auth-Token",
    "X-Access-Token",
    "X-Amz-Security-Token",
    "X-Amz-Signature",
    "X-Goog-Api-Key",
    "Api-Key",
    "Private-Token",
    "Job-Token",
    "Deploy-Token",
    "X-Vault-Token",
    "X-Consul-Token",
    "X-Csrf-Token",
    "X-Xsrf-Token",
    "X-Hub-Signature",
    "X-Hub-Signature-256",
    "X-Slack-Signature",
    "Stripe-Signature",
    "X-Registry-Auth",
];

/// Vendor token prefixes: a prefix and 10 or more token characters is a secret wherever it
/// stands.
pub const VENDOR_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "ghr_",
    "github_pat_",
    "cfat_",
    "sk-",
    "sk-proj-",
    "sk-live_",
    "sk-test_",
    "sk_live_",
    "sk_test_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "pypi-",
    "npm_",
    "glpat-",
    "dckr_pat_",
    "dckr_oat_",
];

/// Every string in `value` (keys too), and every string inside strings that are JSON.
pub fn all_text(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
            if let Ok(inner) = serde_json::from_str::<Value>(s)
                && (inner.is_object() || inner.is_array())
            {
                all_text(&inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| all_text(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push_str(k);
                out.push('\n');
                all_text(v, out);
            }
        }
        _ => {}
    }
}

/// The placements of a piece of tool text in real rollouts, by name, in the order
/// [`placements`] gives them.
pub const PLACEMENTS: [&str; 6] = [
    "plain line",
    "function_call_output",
    "function_call arguments",
    "mcp_tool_call_end",
    "exec output",
    "function_call_output, JSON-escaped",
];

/// The placements of a piece of tool text in real rollouts: `(name, line)` for each of
/// [`PLACEMENTS`].
pub fn placements(text: &str) -> Vec<(&'static str, String)> {
    PLACEMENTS.iter().map(|p| (*p, place(p, text))).collect()
}

/// The line that holds `text` as the named one of [`PLACEMENTS`] puts it (a test that builds
/// lines of megabytes builds only the placement it needs).
pub fn place(placement: &str, text: &str) -> String {
    match placement {
        "plain line" => text.to_owned(),
        "function_call_output" => json!({"timestamp": "2026-07-28T16:14:05.115Z", "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "call_1", "output": text}})
        .to_string(),
        "function_call arguments" => {
            let arguments = json!({"command": ["bash", "-lc", text], "workdir": "/w"}).to_string();
            json!({"timestamp": "2026-07-28T16:14:05.115Z", "type": "response_item",
                "payload": {"type": "function_call", "name": "shell", "call_id": "call_2", "arguments": arguments}})
            .to_string()
        }
        "mcp_tool_call_end" => json!({"timestamp": "2026-07-28T16:14:05.115Z", "type": "event_msg",
            "payload": {"type": "mcp_tool_call_end", "call_id": "call_3", "invocation": {"server": "s", "tool": "t"},
                "result": {"Ok": {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}}}}})
        .to_string(),
        "exec output" => {
            let exec = json!({"output": text, "metadata": {"exit_code": 0, "duration_seconds": 0.1}})
                .to_string();
            json!({"type": "response_item",
                "payload": {"type": "function_call_output", "call_id": "call_4", "output": exec}})
            .to_string()
        }
        "function_call_output, JSON-escaped" => escaped_output_line(text),
        other => panic!("no placement {other:?}"),
    }
}

/// A `function_call_output` line whose output string writes every third character of `text`
/// as a `\u` escape (and every control character and quote as JSON must).
pub fn escaped_output_line(text: &str) -> String {
    let mut s = String::from(
        r#"{"type":"response_item","payload":{"type":"function_call_output","call_id":"call_5","output":""#,
    );
    for (i, c) in text.chars().enumerate() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 || i % 3 == 1 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    s.push_str("\\u");
                    for shift in [12, 8, 4, 0] {
                        s.push(char::from(HEX[usize::from((*unit >> shift) & 0xf)]));
                    }
                }
            }
            c => s.push(c),
        }
    }
    s.push_str("\"}}");
    s
}
