//! Property tests of redaction v2 (docs/behaviour.md S1): on lines built from
//! secrets of every form, JSON escapes, nested JSON strings and noise, valid JSON in gives valid
//! JSON out, text outside redacted spans is unchanged, redacting twice equals redacting once,
//! and no input panics.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value, json};

use kcap_watch::ship::redact::global;

const REDACTED: &str = "[REDACTED]";

/// Pieces of tool text: secrets of the forms S1 lists, their names without values, code and
/// prose that must stay, escapes and JSON syntax.
const PIECES: &[&str] = &[
    "DB_PASSWORD=p@ss;w0rd|x ",
    "APP_SECRET=x(S) ",
    "api_key: Xk9v(Q2mLp7) ",
    "token ",
    "password ",
    "Authorization: Bearer abc.def-123\n",
    "Cookie: sid=ab'cd; t=1\n",
    "curl -u bob:pw1 ",
    "mysql -pPw2 ",
    "redis-cli -a Pw3 ",
    "sshpass -p Pw4 ",
    "--password Pw5 ",
    "-passout pass:Pw6 ",
    "sqlplus u/Pw7@db ",
    "htpasswd -b f u Pw8 ",
    "https://u:p#w@h/ ",
    "https://ghx0123456789abcdefXYZ7@github.com/ ",
    "?sig=abc&x=1 ",
    "AccountKey=Zm9v==; ",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n",
    "-----BEGIN PRIVATE KEY-----",
    "ghp_aBcDeFgHiJ0123456789 ",
    "sk-abcdefghij1234 ",
    "AKIAIOSFODNN7EXAMPLE ",
    "eyJhbGciOiJIUzI1.eyJzdWIiOiIx.SflKxwRJSMeKKF2 ",
    "map[Cookie:[a=b] X-Api-Key:[k]] ",
    "remainingTokens = MAX - used; ",
    "setFirstTokenReceived: boolean; ",
    "apiKey: profile.openai_api_key || \"\" ",
    "TOKEN=$VAR ",
    "\"gpt-tokenizer\": \"^2.1.0\" ",
    "[REDACTED]",
    "[REDACTED",
    "REDACTED]",
    "\\n",
    "\\\"",
    "\\u0026",
    "\\u00e9",
    "\\/",
    "\n",
    "\t",
    "\"",
    "'",
    "\\",
    " ",
    "=",
    ":",
    ";",
    "{",
    "}",
    "[",
    "]",
    ",",
    "é",
    "😀",
    "plain words ",
];

/// Whether `output` is `input` with some spans replaced by the marker.
fn is_in_place_edit(input: &str, output: &str) -> bool {
    let pieces: Vec<&str> = output.split(REDACTED).collect();
    if pieces.len() == 1 {
        return input == output;
    }
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if !input.starts_with(first)
        || input.len() < first.len() + last.len()
        || !input[first.len()..].ends_with(last)
    {
        return false;
    }
    let mut rest = &input[first.len()..input.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// A line holding `text` as a rollout does: plain, as tool output, as tool arguments (JSON in a
/// JSON string), or as an MCP structured result.
fn line(text: &str, shape: u8) -> String {
    match shape % 4 {
        0 => text.to_owned(),
        1 => json!({"type": "response_item", "payload": {"type": "function_call_output", "output": text}}).to_string(),
        2 => {
            let args = json!({"command": ["bash", "-lc", text]}).to_string();
            json!({"type": "response_item", "payload": {"type": "function_call", "arguments": args}}).to_string()
        }
        _ => json!({"type": "event_msg", "payload": {"type": "mcp_tool_call_end",
            "result": {"Ok": {"structuredContent": {"headers": [["Cookie", text]], "v": text}}}}})
        .to_string(),
    }
}

fn check(input: &str) -> Result<(), TestCaseError> {
    let out = global().redact_line(input.as_bytes());
    prop_assert!(
        is_in_place_edit(input, &out),
        "not an in-place edit:\n{input}\n=> {out}"
    );
    if serde_json::from_str::<Value>(input).is_ok() {
        prop_assert!(
            serde_json::from_str::<Value>(&out).is_ok(),
            "invalid JSON:\n{input}\n=> {out}"
        );
    }
    let again = global().redact_line(out.as_bytes());
    prop_assert_eq!(&again, &out, "redacting twice differs for {}", input);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(768))]

    #[test]
    fn valid_json_stays_valid_text_outside_spans_is_kept_and_twice_is_once(
        pieces in vec(select(PIECES), 0..40),
        shape in any::<u8>(),
    ) {
        check(&line(&pieces.concat(), shape))?;
    }

    #[test]
    fn raw_fragments_never_break_anything(pieces in vec(select(PIECES), 0..60)) {
        // Not always JSON: escapes and quotes as raw text, a truncated line.
        check(&pieces.concat())?;
        check(&format!(r#"{{"output":"{}"#, pieces.concat()))?;
    }

    /// A label's phrase whose quoted literal holds a secret before more words, then pairs
    /// after it: the marker is shorter than the secret, so the phrase reaches further in the
    /// redacted text than in the raw one, and a second pass must find nothing the first did
    /// not (docs/redaction.md, "Redacting twice").
    #[test]
    fn a_secret_inside_a_labels_phrase_settles_in_one_pass(
        label in select(&["token", "password", "Secret", "API key", "access key", "passphrase"][..]),
        quote in select(&["\"", "'"][..]),
        before in "[a-z]{0,12}( [a-z]{1,8}){0,2} ",
        secret in select(&[
            "eyJhbGciOiJIUzI1.eyJzdWIiOiIx.SflKxwRJSMeKKF2",
            "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
            "sk-abcdefghij1234abcdefghij1234abcd",
            "AKIAIOSFODNN7EXAMPLE",
        ][..]),
        after in "( [a-z]{1,8}){0,3}",
        tail in vec(select(&[
            "\"gpt-tokenizer\": \"^2.1.0\" ",
            "'v': Xk9vQ2mLp7RzAbCd9 ",
            ": Rt5vX9mK2pQ7wL3zN8bH6 ",
            "\"x\" ",
            "'y' ",
            ": ",
        ][..]), 0..6),
        shape in any::<u8>(),
    ) {
        let text = format!("{label} {quote}{before}{secret}{after}{quote}{}", tail.concat());
        check(&line(&text, shape))?;
    }

    #[test]
    fn any_bytes_never_panic(raw in vec(any::<u8>(), 0..4096)) {
        let out = global().redact_line(&raw).into_owned();
        let again = global().redact_line(out.as_bytes()).into_owned();
        prop_assert_eq!(again, out);
    }
}
