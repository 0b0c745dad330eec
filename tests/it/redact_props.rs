//! Property tests of redaction: what a user of the kcap server would notice is a secret on
//! the server, a line the server cannot parse, or a line whose non-secret text changed.

use kcap_watch::ship::redact::global;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value, json};

const REDACTED: &str = "[REDACTED]";

/// A generated secret: its text, and the random parts that must never be shipped.
#[derive(Clone, Debug)]
struct Secret {
    text: String,
    bodies: Vec<String>,
}

/// Random token characters, long enough to be unique in a line. It starts with a letter, so it
/// is never an all-digit count.
fn body(min: usize, max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[A-Za-z][A-Za-z0-9]{{{},{}}}", min - 1, max - 1))
        .expect("valid body regex")
}

fn one(text: String, body: String) -> Secret {
    Secret {
        text,
        bodies: vec![body],
    }
}

fn vendor_token() -> impl Strategy<Value = Secret> {
    let prefixes = crate::support::secrets::VENDOR_PREFIXES;
    prop_oneof![
        (select(prefixes), body(10, 40)).prop_map(|(p, b)| one(format!("{p}{b}"), b)),
        body(35, 35).prop_map(|b| one(format!("AIza{b}"), b)),
    ]
}

fn aws_key_id() -> impl Strategy<Value = Secret> {
    let prefixes = vec![
        "AKIA", "ASIA", "AROA", "AIDA", "AGPA", "ANPA", "ANVA", "AIPA",
    ];
    let id = proptest::string::string_regex("[A-Z0-9]{16}").expect("valid id regex");
    (select(prefixes), id).prop_map(|(p, id)| one(format!("{p}{id}"), id))
}

fn pem_block() -> impl Strategy<Value = Secret> {
    let kinds = vec!["", "RSA ", "EC ", "OPENSSH ", "ENCRYPTED ", "DSA "];
    let line = proptest::string::string_regex("[A-Za-z0-9+/]{20,64}").expect("valid line regex");
    (select(kinds), vec(line, 1..5)).prop_map(|(kind, lines)| Secret {
        text: format!(
            "-----BEGIN {kind}PRIVATE KEY-----\n{}\n-----END {kind}PRIVATE KEY-----",
            lines.join("\n")
        ),
        bodies: lines,
    })
}

fn header_value() -> impl Strategy<Value = Secret> {
    let names = vec![
        "Authorization",
        "authorization",
        "Proxy-Authorization",
        "Cookie",
        "Set-Cookie",
        "X-Api-Key",
        "x-api-key",
        "X-Auth-Token",
        "X-Amz-Security-Token",
        "X-Goog-Api-Key",
        "Private-Token",
        "X-Vault-Token",
        "Stripe-Signature",
    ];
    let schemes = vec!["", "Bearer ", "Basic ", "token "];
    (select(names), select(schemes), body(16, 40))
        .prop_map(|(name, scheme, b)| one(format!("{name}: {scheme}{b}"), b))
}

fn url_secret() -> impl Strategy<Value = Secret> {
    let params = vec![
        "token",
        "access_token",
        "api_key",
        "apikey",
        "key",
        "sig",
        "signature",
        "password",
        "secret",
        "client_secret",
        "X-Amz-Signature",
        "X-Amz-Credential",
        "X-Amz-Security-Token",
    ];
    prop_oneof![
        (body(3, 8), body(10, 24)).prop_map(|(user, b)| one(
            format!("https://{user}:{b}@git.example.com/team/repo.git"),
            b
        )),
        (select(params), body(10, 24), any::<bool>()).prop_map(|(param, b, more)| one(
            format!(
                "https://api.example.com/v1/items?page=2&{param}={b}{}",
                if more { "&sort=asc" } else { "" }
            ),
            b
        )),
    ]
}

fn assignment() -> impl Strategy<Value = Secret> {
    let names = vec![
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "db_password",
        "AWS_SECRET_ACCESS_KEY",
        "api_key",
        "apiKey",
        "PRIVATE_KEY",
        "client_secret",
        "APP_CREDENTIALS",
        "passwd",
        "access_key",
    ];
    let separators = vec![
        ("=", ""),
        (": ", ""),
        (" = ", ""),
        ("=\"", "\""),
        ("='", "'"),
        (": \"", "\""),
    ];
    (select(names), select(separators), body(8, 24))
        .prop_map(|(name, (open, close), b)| one(format!("{name}{open}{b}{close}"), b))
}

fn labelled() -> impl Strategy<Value = Secret> {
    let labels = vec![
        "token ",
        "Token: ",
        "the secret is ",
        "password is ",
        "api key ",
        "Bearer ",
        "passphrase: ",
    ];
    (select(labels), body(16, 32)).prop_map(|(label, b)| one(format!("{label}{b}"), b))
}

fn connection_string() -> impl Strategy<Value = Secret> {
    (select(vec!["Password", "password", "Pwd"]), body(10, 16)).prop_map(|(key, b)| {
        one(
            format!("Server=db.internal;Database=app;User Id=app;{key}={b};"),
            b,
        )
    })
}

fn secret() -> impl Strategy<Value = Secret> {
    prop_oneof![
        vendor_token(),
        aws_key_id(),
        pem_block(),
        header_value(),
        url_secret(),
        assignment(),
        labelled(),
        connection_string(),
    ]
}

/// Text around a secret, such as shell output: words that no rule matches.
fn words() -> impl Strategy<Value = String> {
    let words = vec![
        "Compiling",
        "cargo",
        "build",
        "ok",
        "src/main.rs:12:5",
        "línea",
        "日本語",
        "😀",
        "x",
        "42",
        "-rw-r--r--",
        "{",
        "}",
        "[1/3]",
    ];
    vec(select(words), 0..5).prop_map(|w| w.join(" "))
}

/// `left`, a secret and `right`, separated as shell output, code or logs do it.
fn text_with_secret() -> impl Strategy<Value = (String, Secret)> {
    let before = vec![" ", "\n", "\t", "(", "\"", "'", ", ", "\r\n", "$ "];
    let after = vec![" ", "\n", "\r\n", "\"", "'", ")", ", ", ";"];
    (words(), select(before), secret(), select(after), words()).prop_map(
        |(left, before, secret, after, right)| {
            (
                format!("{left}{before}{}{after}{right}", secret.text),
                secret,
            )
        },
    )
}

/// Lines of ordinary output around the secret, some holding trigger words that match no rule,
/// so that long tool output is covered too.
fn padded((text, secret): (String, Secret), before: usize, after: usize) -> (String, Secret) {
    const OUTPUT: &[&str] = &[
        "   Compiling serde v1.0.219\n",
        "    let total = usage.input_tokens + usage.output_tokens;\n",
        "see https://docs.example.com/api/reference.html\n",
        "drwxr-xr-x  5 dev dev  4096 Jul 28 16:14 src\n",
        "fn parse_cookie_header(raw: &str) -> Vec<Cookie> {\n",
    ];
    let lines = |n: usize, offset: usize| -> String {
        (0..n)
            .map(|i| OUTPUT[(i + offset) % OUTPUT.len()])
            .collect()
    };
    (
        format!("{}{text}{}", lines(before, 0), lines(after, 3)),
        secret,
    )
}

/// How the text sits in a rollout line.
fn rollout_line(text: &str, shape: u8) -> String {
    let payload = match shape % 3 {
        0 => json!({"type": "function_call_output", "call_id": "call_Q2mY8e", "output": text}),
        // Tool arguments are JSON written inside a JSON string.
        1 => json!({
            "type": "function_call",
            "name": "shell",
            "arguments": json!({"command": ["bash", "-lc", text], "timeout_ms": 10000}).to_string(),
            "call_id": "call_Q2mY8e",
        }),
        _ => json!({"type": "agent_message", "message": text}),
    };
    json!({"timestamp": "2026-07-28T16:14:05.115Z", "type": "response_item", "payload": payload})
        .to_string()
}

/// Whether `output` is `input` with some spans replaced by `[REDACTED]`: the pieces between
/// the markers appear in `input`, in order, the first at the start and the last at the end.
fn is_in_place_edit(input: &str, output: &str) -> bool {
    let pieces: Vec<&str> = output.split(REDACTED).collect();
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if pieces.len() == 1 {
        return input == output;
    }
    if !input.starts_with(first) || !input[first.len()..].ends_with(last) {
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

fn assert_no_body(output: &str, secret: &Secret) -> Result<(), TestCaseError> {
    for body in &secret.bodies {
        prop_assert!(
            !output.contains(body.as_str()),
            "{body} shipped in {output}"
        );
    }
    Ok(())
}

fn parses(text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(std::env::var("KCAP_REDACT_PROPS_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(512)))]

    /// (a) A secret anywhere in a rollout line's strings never reaches the server, and the
    /// rest of the line is shipped byte for byte.
    #[test]
    fn secrets_in_json_lines_are_never_shipped(
        (text, secret) in text_with_secret(),
        shape in any::<u8>(),
        before in 0usize..60,
        after in 0usize..60,
    ) {
        let (text, secret) = padded((text, secret), before, after);
        let line = rollout_line(&text, shape);
        let shipped = global().redact_line(line.as_bytes());
        assert_no_body(&shipped, &secret)?;
        prop_assert!(parses(&shipped), "invalid JSON shipped: {shipped}");
        prop_assert!(is_in_place_edit(&line, &shipped), "{line}\n=> {shipped}");
    }

    /// (a) The same for lines that are not JSON: a crash fragment, or raw text.
    #[test]
    fn secrets_in_other_lines_are_never_shipped(
        (text, secret) in text_with_secret(),
        shape in any::<u8>(),
        cut in 1usize..3,
    ) {
        let line = rollout_line(&text, shape);
        let fragment = &line[..line.len() - cut];
        let shipped = global().redact_line(fragment.as_bytes());
        assert_no_body(&shipped, &secret)?;
        prop_assert!(is_in_place_edit(fragment, &shipped), "{fragment}\n=> {shipped}");

        let shipped = global().redact_line(text.as_bytes());
        assert_no_body(&shipped, &secret)?;
        prop_assert!(is_in_place_edit(&text, &shipped), "{text}\n=> {shipped}");
    }

    /// (b) Valid JSON stays valid JSON with the same structure: same keys, the same
    /// non-secret values, `[REDACTED]` for string values of secret keys, and no secret.
    #[test]
    fn json_keeps_its_structure(
        (value, bodies) in json_object(),
        pretty in any::<bool>(),
    ) {
        let line = if pretty {
            // Whitespace between tokens, on one line (newlines in strings are escaped).
            serde_json::to_string_pretty(&value).expect("serialisable").replace('\n', " ")
        } else {
            value.to_string()
        };
        let shipped = global().redact_line(line.as_bytes());
        let parsed: Value = serde_json::from_str(&shipped)
            .map_err(|e| TestCaseError::fail(format!("{e}: {shipped}")))?;
        // A string redacted under a secret's key is a secret wherever else the line holds
        // it: its copies may go too.
        let mut copied = Vec::new();
        strings_under_secret_keys(&value, false, &mut copied);
        let found = Found { bodies: &bodies, copied: &copied };
        same_structure(&value, &parsed, None, &found)?;
        for body in &bodies {
            prop_assert!(!shipped.contains(body.as_str()), "{body} shipped in {shipped}");
        }
        prop_assert!(is_in_place_edit(&line, &shipped), "{line}\n=> {shipped}");
    }

    /// (b) Escapes of every kind next to secrets never break a string: raw JSON string
    /// content assembled from escapes, triggers and secret shapes.
    #[test]
    fn escapes_next_to_secrets_stay_valid(fragments in vec(select(RAW_FRAGMENTS), 0..200)) {
        let content = fragments.concat();
        let line = format!(r#"{{"output":"{content}","api_key":"{content}","n":[1,"{content}"]}}"#);
        prop_assert!(parses(&line), "generator made invalid JSON: {line}");
        let shipped = global().redact_line(line.as_bytes());
        let parsed: Value = serde_json::from_str(&shipped)
            .map_err(|e| TestCaseError::fail(format!("{e}: {line}\n=> {shipped}")))?;
        let keys: Vec<&String> = parsed.as_object().map(|o| o.keys().collect()).unwrap_or_default();
        prop_assert_eq!(keys, vec!["api_key", "n", "output"]);
        prop_assert_eq!(&parsed["n"][0], &json!(1));
        if !content.is_empty() {
            let value: Value = serde_json::from_str(&line).expect("checked above");
            if value["api_key"].as_str().is_some_and(starts_as_code_path) {
                // S1.2, as in the structure property: a path (`AKIA::token `) is code, kept
                // but for what a rule of shape finds in it (a private key's marker, ...).
                let kept = parsed["api_key"] == value["api_key"];
                let shaped = parsed["api_key"].as_str().is_some_and(|v| v.contains(REDACTED));
                prop_assert!(kept || shaped, "{line}\n=> {shipped}");
            } else {
                prop_assert_eq!(&parsed["api_key"], &json!(REDACTED));
            }
        }
        prop_assert!(is_in_place_edit(&line, &shipped));
    }

    /// (c) Any bytes: no panic, a valid JSON input stays valid.
    #[test]
    fn arbitrary_bytes_never_panic(raw in vec(any::<u8>(), 0..2048)) {
        let shipped = global().redact_line(&raw);
        if serde_json::from_slice::<Value>(&raw).is_ok() {
            prop_assert!(parses(&shipped));
        }
    }

    /// (c) Near-JSON built from the pieces the rules look for: no panic, valid stays valid.
    #[test]
    fn near_json_never_panics(fragments in vec(select(NEAR_JSON_FRAGMENTS), 0..60)) {
        let line = fragments.concat();
        let shipped = global().redact_line(line.as_bytes());
        if parses(&line) {
            prop_assert!(parses(&shipped), "{line}\n=> {shipped}");
        }
        let _ = global().redact_text(&line);
    }
}

/// Pieces of raw JSON string content (each valid on its own): escapes, triggers, secrets.
const RAW_FRAGMENTS: &[&str] = &[
    r"\n",
    r"\r\n",
    r#"\""#,
    r"\\",
    r"\u00e9",
    r"\ud83d\ude00",
    r"\t",
    r"\/",
    r"\u0000",
    "a",
    " ",
    "é",
    "😀",
    "token ",
    "Authorization: ",
    "Bearer ",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "ghp_",
    "sk-",
    "password=",
    "password: ",
    "db_password: ",
    "?key=",
    "&sig=",
    "https://u:",
    "@",
    "AKIA",
    "ABCDEFGHIJ0123456789",
    "abcdefghij",
    "=",
    ":",
    ";",
    "'",
    "Pwd=",
    "secret is ",
    "x-api-key: ",
    "Cookie: ",
];

/// Pieces of JSON syntax and of secrets, assembled into anything from valid JSON to noise.
const NEAR_JSON_FRAGMENTS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    r"\u",
    r"\ud83d",
    r"\ude00",
    "\"api_key\"",
    "\"token\":",
    "\"x\"",
    "1",
    "null",
    " ",
    "\n",
    "\u{FEFF}",
    "\u{0}",
    "token abcdefghijklmnop1234",
    "-----BEGIN PRIVATE KEY-----",
    "-----END PRIVATE KEY-----",
    "ghp_abcdefghij1234",
    "sk-abcdefghij1234",
    "Authorization: Bearer x",
    "https://u:p@h",
    "?token=abc",
    "PASSWORD=hunter2hunter2",
    "AKIAABCDEFGHIJKLMNOP",
    "é",
];

/// Keys of the generated objects; the second list names secrets.
const PLAIN_KEYS: &[&str] = &[
    "id",
    "type",
    "payload",
    "cmd",
    "output",
    "items",
    "línea",
    "a b",
    "quote\"d",
    "back\\slash",
    "turn_id",
];
const SECRET_KEYS: &[&str] = &[
    "api_key",
    "db_password",
    "auth_token",
    "client_secret",
    "Authorization",
    "input_tokens",
    "max_tokens",
    "credentials",
];

/// Plain string values: text no rule matches, with characters JSON must escape.
fn plain_text() -> impl Strategy<Value = String> {
    let pieces = vec![
        "alpha",
        "build",
        "ok",
        " ",
        "\"",
        "\\",
        "\n",
        "\t",
        "\r",
        "\u{1}",
        "\u{7f}",
        "é",
        "日本",
        "😀",
        "src/main.rs",
        "{",
        "}",
        ":",
        ",",
        "x=1",
        "42",
    ];
    vec(select(pieces), 0..8).prop_map(|p| p.concat())
}

/// A leaf value and the secret bodies it holds.
fn leaf() -> impl Strategy<Value = (Value, Vec<String>)> {
    prop_oneof![
        4 => plain_text().prop_map(|s| (Value::String(s), vec![])),
        2 => (plain_text(), secret(), plain_text()).prop_map(|(a, secret, b)| {
            (Value::String(format!("{a} {} {b}", secret.text)), secret.bodies)
        }),
        1 => any::<i64>().prop_map(|n| (json!(n), vec![])),
        1 => (0u32..1_000_000).prop_map(|n| (json!(f64::from(n) / 8.0), vec![])),
        1 => any::<bool>().prop_map(|b| (json!(b), vec![])),
        1 => Just((Value::Null, vec![])),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(PLAIN_KEYS).prop_map(str::to_owned),
        1 => select(SECRET_KEYS).prop_map(str::to_owned),
    ]
}

fn object_of(entries: Vec<(String, (Value, Vec<String>))>) -> (Value, Vec<String>) {
    let mut map = Map::new();
    let mut bodies = Vec::new();
    for (key, (value, held)) in entries {
        map.insert(key, value);
        bodies.extend(held);
    }
    (Value::Object(map), bodies)
}

fn json_object() -> impl Strategy<Value = (Value, Vec<String>)> {
    let tree = leaf().prop_recursive(3, 32, 5, |inner| {
        prop_oneof![
            vec((key(), inner.clone()), 0..5).prop_map(object_of),
            vec(inner, 0..5).prop_map(|items| {
                let mut bodies = Vec::new();
                let values = items
                    .into_iter()
                    .map(|(value, held)| {
                        bodies.extend(held);
                        value
                    })
                    .collect();
                (Value::Array(values), bodies)
            }),
        ]
    });
    vec((key(), tree), 1..6).prop_map(object_of)
}

/// Every string of eight characters or more held under a secret's key (anywhere in its value).
fn strings_under_secret_keys(value: &Value, under: bool, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                strings_under_secret_keys(v, under || SECRET_KEYS.contains(&key.as_str()), out);
            }
        }
        Value::Array(items) => {
            for v in items {
                strings_under_secret_keys(v, under, out);
            }
        }
        // What the oracle keeps under a secret's key (code, a template, a count) is no secret.
        Value::String(s)
            if under
                && s.chars().count() >= 8
                && !starts_as_code_path(s)
                && !is_template_reference(s)
                && !s.bytes().all(|c| c.is_ascii_digit()) =>
        {
            out.push(s.clone())
        }
        _ => {}
    }
}

/// What a string must lose to ship: a generated secret's body anywhere in it (its rule finds
/// it), and a copy of a string redacted under a secret's key where it stands as a word.
struct Found<'a> {
    bodies: &'a [String],
    copied: &'a [String],
}

impl Found<'_> {
    fn held_by(&self, text: &str) -> bool {
        self.bodies.iter().any(|body| text.contains(body.as_str()))
            || self.copied.iter().any(|copy| holds_copy(text, copy))
    }
}

/// Whether `text` holds a copy of `secret`. A secret of letters alone is a word, and a copy of
/// it glued to a letter or digit (`postgres` in `postgresql`) is a piece of another word, not
/// the secret, unless what comes before is a percent escape (`%3D`), which reads as `=`; any
/// other secret is a copy wherever it occurs.
fn holds_copy(text: &str, secret: &str) -> bool {
    if !secret.bytes().all(|c| c.is_ascii_alphabetic()) {
        return text.contains(secret);
    }
    let (t, s) = (text.as_bytes(), secret.as_bytes());
    let word = |c: u8| c.is_ascii_alphanumeric();
    (0..t.len().saturating_sub(s.len()) + 1)
        .filter(|&i| t[i..].starts_with(s))
        .any(|i| {
            let end = i + s.len();
            let percent = i >= 3 && t[i - 3] == b'%' && t[i - 2].is_ascii_hexdigit();
            let glued_before = i > 0 && word(t[i - 1]) && word(s[0]) && !percent;
            let glued_after = end < t.len() && word(t[end]) && word(s[s.len() - 1]);
            !glued_before && !glued_after
        })
}

/// `shipped` has `original`'s shape; strings are unchanged unless they held a secret or are
/// under a secret key (its value, or anywhere in the object or array it holds, as the kcap CLI
/// redacts).
fn same_structure(
    original: &Value,
    shipped: &Value,
    under_secret_key: Option<&str>,
    bodies: &Found<'_>,
) -> Result<(), TestCaseError> {
    match (original, shipped) {
        (Value::Object(a), Value::Object(b)) => {
            prop_assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
            for (key, value) in a {
                let secret = under_secret_key
                    .or(SECRET_KEYS.contains(&key.as_str()).then_some(key.as_str()));
                same_structure(value, &b[key], secret, bodies)?;
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            prop_assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(b) {
                same_structure(x, y, under_secret_key, bodies)?;
            }
        }
        (Value::String(a), Value::String(b)) => {
            // Revision 3 (S1.5): a token count written as a string stays.
            let count = under_secret_key.is_some_and(|k| k.ends_with("tokens"))
                && a.bytes().all(|c| c.is_ascii_digit());
            if under_secret_key.is_some() && a.is_empty() {
                prop_assert_eq!(a, b);
            } else if under_secret_key.is_some()
                && !count
                && (starts_as_code_path(a) || is_template_reference(a))
            {
                // S1.2: an attribute path (`profile.api_key`, `alpha::alpha`) is code, not a
                // value, even under a secret's key, and a template reference (`{{ .Values.x }}`)
                // stands for one; a secret of a known shape in either still goes.
                if bodies.held_by(a) {
                    prop_assert!(b.contains(REDACTED), "{a:?} => {b:?}");
                } else {
                    prop_assert_eq!(a, b);
                }
            } else if under_secret_key.is_some() && !count {
                prop_assert_eq!(b, REDACTED);
            } else if bodies.held_by(a) {
                prop_assert!(b.contains(REDACTED), "{a:?} => {b:?}");
            } else {
                prop_assert_eq!(a, b);
            }
        }
        (a, b) => prop_assert_eq!(a, b),
    }
    Ok(())
}

/// Whether `value` starts with an attribute path of two words or more (`alpha::alpha`,
/// `Config.API_KEY`) that ends the value or a word of it: code by S1.2, kept under a secret's
/// key (docs/redaction.md, "Value extent").
fn starts_as_code_path(value: &str) -> bool {
    static PATH: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        let seg = r"(?:[a-z_][a-z0-9_]*|[A-Z][A-Z0-9_]*|[A-Z][a-z]{2,}(?:[A-Z][a-z]+)*[0-9]*)";
        regex::Regex::new(&format!(r"^&?{seg}(?:(?:\.|::|->){seg})+[?;,)!]*(?:$|\s)")).unwrap()
    });
    PATH.is_match(value)
}

/// Whether `value` is a template reference (`{{ secrets.API_KEY }}`, `{{ .Values.password }}`):
/// what a template puts in place of a value, kept under a secret's key (docs/redaction.md).
fn is_template_reference(value: &str) -> bool {
    value.len() > 4 && value.starts_with("{{") && value.ends_with("}}")
}

/// The case the structure property found on Windows: a template reference under a secret's
/// key stays, but a token of a known shape written inside it is still redacted.
#[test]
fn a_template_reference_under_a_secret_key_stays_but_a_token_in_it_goes() {
    for kept in [
        r#"{"api_key":"{{ secrets.API_KEY }}"}"#,
        r#"{"password":["{{ .Values.db.password }}"]}"#,
    ] {
        assert_eq!(global().redact_line(kept.as_bytes()), kept);
    }
    let token = format!("ghp_{}", "aA00aAaA0A".repeat(4));
    for line in [
        r#"{"api_key":["{{ ghp_AA00aAaA0A }}"]}"#.to_owned(),
        format!(r#"{{"api_key":"{{{{ {token} }}}}"}}"#),
        format!(r#"{{"client_secret":"{{{{{token}}}}}"}}"#),
    ] {
        let shipped = global().redact_line(line.as_bytes());
        assert!(shipped.contains(REDACTED), "{line} => {shipped}");
        assert!(!shipped.contains("A00aAaA0A"), "{line} => {shipped}");
        assert!(parses(&shipped), "{shipped}");
    }
}

/// The case the structure property found: a path under a secret's key is code and stays,
/// a word there is a value and goes.
#[test]
fn a_code_path_under_a_secret_key_stays_and_a_word_goes() {
    let kept = r#"{"id":[{"api_key":"alpha::alpha"}]}"#;
    assert_eq!(global().redact_line(kept.as_bytes()), kept);
    assert_eq!(
        global().redact_line(br#"{"id":[{"api_key":"alpha"}]}"#),
        r#"{"id":[{"api_key":"[REDACTED]"}]}"#
    );
}

/// The case the structure property found on Windows: a value kept as code under a secret's
/// key (`alpha::alpha ...`) shipped a provider token that followed the path, which anywhere
/// else is redacted by its shape.
#[test]
fn a_token_after_a_code_path_under_a_secret_key_is_still_redacted() {
    let token = format!("ghp_{}", "aAaaA0aaaA".repeat(4));
    for (line, kept) in [
        (
            format!(r#"{{"api_key":[{{"id":"alpha::alpha {token} "}}]}}"#),
            r#"{"api_key":[{"id":"alpha::alpha "#,
        ),
        (
            r#"{"api_key":"alpha::alpha ghp_aAaaA0aaaA "}"#.to_owned(),
            r#"{"api_key":"alpha::alpha "#,
        ),
        (
            format!(r#"{{"token":"Config.TOKEN {token}"}}"#),
            r#"{"token":"Config.TOKEN "#,
        ),
    ] {
        let shipped = global().redact_line(line.as_bytes());
        assert!(shipped.starts_with(kept), "{line} => {shipped}");
        assert!(shipped.contains(REDACTED), "{line} => {shipped}");
        assert!(!shipped.contains("aAaaA0aaaA"), "{line} => {shipped}");
    }
}

/// The case the escapes property found: the same rule for a path of a secret's shape
/// (`AKIA::token` is a path, not an AWS key), with escapes around it or not.
#[test]
fn a_code_path_under_a_secret_key_stays_whatever_prefix_it_starts_with() {
    for kept in [
        r#"{"api_key":"AKIA::token "}"#,
        r#"{"output":"AKIA::token \n","api_key":"AKIA::token \n"}"#,
    ] {
        assert_eq!(global().redact_line(kept.as_bytes()), kept);
    }
    assert_eq!(
        global().redact_line(br#"{"api_key":"AKIA token "}"#),
        r#"{"api_key":"[REDACTED]"}"#
    );
}

#[test]
fn double_encoded_tool_arguments() {
    let line = rollout_line(
        "curl -H 'Authorization: Bearer abc123def456' https://x.io/?token=zz9&a=1",
        1,
    );
    let shipped = global().redact_line(line.as_bytes());
    assert!(shipped.contains(r"Authorization: [REDACTED]'"), "{shipped}");
    assert!(shipped.contains("?token=[REDACTED]&a=1"), "{shipped}");
    assert!(parses(&shipped));
}
