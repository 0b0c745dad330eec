//! The kcap CLI's `SecretRedactor` as a test oracle: on a generated corpus of its
//! rules' inputs, nothing the oracle removes survives in what kcap-watch ships.
//!
//! Two versions of `src/Capacitor.Cli/SecretRedactor.cs` in kurrent-io/kcap-cli are read here
//! as regexes of their own (the regex crate has no look-around; where the C# uses it, the
//! effect is reproduced in code):
//!
//! - `07ef5ebf41c6d83f3f40b7770a47959857fd896b`: eleven regexes replaced in order over the raw
//!   line, escapes and all;
//! - `2dcdb9f86ae0fe0ef0a79e4facdab30b0345c333`: the line parsed as JSON, every string value
//!   under a secret-named key replaced whole, the others decoded and given the (widened)
//!   regexes; not JSON: the regexes over the line.
//!
//! For every removed value the check is that it does not appear in the shipped line nor in its
//! decoded text, and that no run of four or more letters and digits of it does either.

use regex::Regex;
use serde_json::{Value, json};

use kcap_watch::ship::redact::global;

const HEADERS: &str = "authorization|proxy-authorization|cookie|set-cookie|x-api-key|x-auth-token|x-access-token|x-amz-security-token|x-amz-signature|x-goog-api-key|api-key|private-token|job-token|deploy-token|x-vault-token|x-consul-token|x-csrf-token|x-xsrf-token|x-hub-signature(?:-256)?|x-slack-signature|stripe-signature|x-registry-auth";
const WORDS_V1: &str = "secret|token|password|passwd|pwd|api_key|apikey|private_key|credentials|client_secret|access_key|auth_token";
const WORDS_V2: &str = "secrets?|tokens?|passwords?|passwd|pwd|api[-_.]?keys?|private[-_.]?keys?|credentials?|client[-_.]?secrets?|access[-_.]?keys?|auth[-_.]?tokens?";

/// One oracle rule: its regex and the group holding what it removes.
struct OracleRule {
    re: Regex,
    group: usize,
    /// The C# `(?<![A-Za-z0-9])` before `sk-`.
    sk_lookbehind: bool,
}

struct Oracle {
    rules: Vec<OracleRule>,
    /// Version 2 only: the structural pass and its key-name test.
    secret_key: Option<Regex>,
}

fn r(pattern: &str, group: usize) -> OracleRule {
    OracleRule {
        re: Regex::new(pattern).unwrap(),
        group,
        sk_lookbehind: false,
    }
}

impl Oracle {
    fn new(v2: bool) -> Self {
        let words = if v2 { WORDS_V2 } else { WORDS_V1 };
        let env_words = if v2 {
            "SECRETS?|TOKENS?|PASSWORDS?|PASSWD|PWD|API_?KEYS?|PRIVATE_?KEYS?|CREDENTIALS?|CLIENT_?SECRETS?|ACCESS_?KEYS?|AUTH_?TOKENS?"
        } else {
            "SECRET|TOKEN|PASSWORD|PASSWD|PWD|API_KEY|APIKEY|PRIVATE_KEY|CREDENTIALS|CLIENT_SECRET|ACCESS_KEY|AUTH_TOKEN"
        };
        let json_end = if v2 {
            r#"((?:\\"|")|$)"#
        } else {
            r#"((?:\\"|"))"#
        };
        let rules = vec![
            r(
                r"(?s)-----BEGIN[A-Z\s]*PRIVATE KEY-----.*?-----END[A-Z\s]*PRIVATE KEY-----",
                0,
            ),
            r(
                "(?:AKIA|ASIA|AROA|AIDA|AIPA|AGPA|ANPA|ANVA|ASCA|APKA|ABIA|ACCA)[0-9A-Z]{16,128}",
                0,
            ),
            OracleRule {
                sk_lookbehind: true,
                ..r(
                    r"(?:ghp_|gho_|ghs_|github_pat_|cfat_|sk-(?:proj-|live_|test_)?|sk_live_|sk_test_|xoxb-|xoxp-|xoxa-|pypi-|npm_|glpat-|dckr_pat_|dckr_oat_)[A-Za-z0-9\-_]{10,}",
                    0,
                )
            },
            r(
                &format!(r#"(?i)((?:{HEADERS})(?:\\?")?\s*:\s*(?:\\?")?\s*)([^\r\n"\\]+)"#),
                2,
            ),
            r(
                r#"(?i)([?&](?:access_token|refresh_token|id_token|client_secret|signature|sig|x-amz-signature|awsaccesskeyid|api_key|apikey|api-key|token|password|secret|auth_token|sas)=)([^&\s"\\#]+)"#,
                2,
            ),
            r(r#"(?i)(https?://[^:/\s"\\@]+:)([^@\s"\\/]+)(@)"#, 2),
            r(
                &format!(
                    r#"(?i)((?:\\"|")(?:[^"\\]*(?:{words})[^"\\]*)(?:\\"|")[ \t]*:[ \t]*(?:\\"|"))([^"\\]+){json_end}"#
                ),
                2,
            ),
            r(
                &format!(r#"(?i)([A-Z_]*(?:{env_words})[A-Z_]*=)([^\s"\\]+)"#),
                2,
            ),
            r(
                &format!(r#"(?i)((?:{words})[\w.\-]*:[ \t]+)([^\s"\\]{{8,}})"#),
                2,
            ),
            r(
                &format!(r#"(?i)\b((?:{words})\b[ \t]+)([^\s"\\]{{16,}})"#),
                2,
            ),
            r(r#"(?i)((?:Password|Pwd)\s*=\s*)([^;"\\]+)(;|$)"#, 2),
        ];
        let secret_key =
            v2.then(|| Regex::new(&format!("(?i)(?:{HEADERS}|auth)$|(?:{WORDS_V2})")).unwrap());
        Oracle { rules, secret_key }
    }

    /// The oracle's pipeline over `text`: what it leaves and what it removed.
    fn pipeline(&self, text: &str, removed: &mut Vec<String>) -> String {
        let mut text = text.to_owned();
        for rule in &self.rules {
            let mut out = String::new();
            let mut copied = 0;
            for caps in rule.re.captures_iter(&text) {
                let m = caps.get(0).unwrap();
                if rule.sk_lookbehind
                    && m.as_str().starts_with("sk-")
                    && text[..m.start()]
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_ascii_alphanumeric())
                {
                    continue;
                }
                let g = caps.get(rule.group).unwrap();
                removed.push(g.as_str().to_owned());
                out.push_str(&text[copied..g.start()]);
                out.push_str("[REDACTED]");
                copied = g.end();
            }
            out.push_str(&text[copied..]);
            text = out;
        }
        text
    }

    /// What the oracle removes from one line.
    fn removed(&self, line: &str) -> Vec<String> {
        let mut removed = Vec::new();
        match (&self.secret_key, serde_json::from_str::<Value>(line)) {
            (Some(key), Ok(v)) => self.walk(key, &v, false, &mut removed),
            _ => {
                self.pipeline(line, &mut removed);
            }
        }
        removed
    }

    fn walk(&self, key: &Regex, v: &Value, secret: bool, removed: &mut Vec<String>) {
        match v {
            Value::String(s) if secret => removed.push(s.clone()),
            Value::String(s) => {
                self.pipeline(s, removed);
            }
            Value::Array(items) => items
                .iter()
                .for_each(|i| self.walk(key, i, secret, removed)),
            Value::Object(map) => {
                for (k, v) in map {
                    self.walk(key, v, secret || key.is_match(k), removed);
                }
            }
            _ => {}
        }
    }
}

/// A small deterministic generator (the corpus is the same on every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }

    /// A value of `len` characters: it starts with letters and digits (so it is never a count,
    /// code or a shell reference) and may hold the punctuation in `punct`.
    fn value(&mut self, len: usize, punct: &str) -> String {
        const ALNUM: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
        let punct = punct.as_bytes();
        let mut s = String::from("Q7");
        while s.len() < len {
            let roll = self.next() % 10;
            if roll == 0 && !punct.is_empty() {
                s.push(punct[(self.next() % punct.len() as u64) as usize] as char);
            } else {
                s.push(ALNUM[(self.next() % ALNUM.len() as u64) as usize] as char);
            }
        }
        s
    }
}

/// Inputs for every oracle rule, each as its value shape in the contexts its regex expects.
fn corpus() -> Vec<String> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = Vec::new();
    let headers = crate::support::secrets::HEADER_NAMES;
    let query_keys = [
        "access_token",
        "refresh_token",
        "id_token",
        "client_secret",
        "signature",
        "sig",
        "x-amz-signature",
        "AWSAccessKeyId",
        "api_key",
        "apikey",
        "api-key",
        "token",
        "password",
        "secret",
        "auth_token",
        "sas",
    ];
    let names = [
        "secret",
        "token",
        "password",
        "passwd",
        "pwd",
        "api_key",
        "apikey",
        "private_key",
        "credentials",
        "client_secret",
        "access_key",
        "auth_token",
        "db_password",
        "aws.secret.key",
        "client-secret",
        "apiKeys",
        "private-key",
        "access.key",
        "auth-token",
        "secrets",
    ];
    let env_names = [
        "SECRET",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "PASSWD",
        "PGPWD",
        "API_KEY",
        "OPENAI_APIKEY",
        "PRIVATE_KEY",
        "GOOGLE_CREDENTIALS",
        "CLIENT_SECRET",
        "AWS_ACCESS_KEY",
        "AUTH_TOKEN",
        "API_KEYS",
        "AUTH_TOKENS",
        "APIKEYS",
        "MY_SECRETS",
    ];
    let prefixes = crate::support::secrets::VENDOR_PREFIXES;
    let aws = [
        "AKIA", "ASIA", "AROA", "AIDA", "AIPA", "AGPA", "ANPA", "ANVA", "ASCA", "APKA", "ABIA",
        "ACCA",
    ];
    for round in 0..6 {
        out.push(format!(
            "key:\n-----BEGIN {}PRIVATE KEY-----\n{}\n{}\n-----END {}PRIVATE KEY-----\nok",
            ["RSA ", "EC ", "", "OPENSSH "][round % 4],
            rng.value(48, "+/"),
            rng.value(40, "+/="),
            ["RSA ", "EC ", "", "OPENSSH "][round % 4],
        ));
        for p in aws {
            let body: String = rng.value(16, "").to_ascii_uppercase();
            out.push(format!("aws id {p}{body} in use"));
        }
        for p in prefixes {
            out.push(format!("use {p}{} now", rng.value(24, "-_")));
        }
        for h in headers {
            let v = rng.value(20, " ;=,/+'()");
            out.push(format!("> {h}: {v}\r\n> Accept: */*"));
            out.push(format!(
                r#"headers: {{"{h}": "{}"}}"#,
                rng.value(18, " ;=,/")
            ));
        }
        for k in query_keys {
            out.push(format!(
                "GET https://api.example.com/v1/x?page=2&{k}={}&n=1 HTTP/1.1",
                rng.value(18, "%-._~'!$()*+,;:@/?")
            ));
        }
        out.push(format!(
            "git clone https://{}:{}@git.example.com/r.git",
            rng.value(6, ""),
            rng.value(16, "!$%^*()#?'&;=+,:~")
        ));
        for n in names {
            out.push(format!(
                r#"config {{"{n}": "{}"}} saved"#,
                rng.value(14, " ;|&()<>#?'/")
            ));
            out.push(format!("{n}: {}\nnext: 1", rng.value(14, ";|&()<>#?/=,.")));
        }
        for n in env_names {
            out.push(format!(
                "export {n}={} && ./run",
                rng.value(14, ";|()<>#?/=,.&!@%")
            ));
        }
        let label_words = [
            "secret",
            "token",
            "password",
            "passwd",
            "pwd",
            "api_key",
            "apikey",
            "private_key",
            "credentials",
            "client_secret",
            "access_key",
            "auth_token",
            "secrets",
            "tokens",
            "api-key",
            "private.keys",
            "credential",
            "client-secrets",
            "access.keys",
            "auth-tokens",
        ];
        let w = rng.pick(&label_words);
        out.push(format!(
            "hcloud:{w}  {} rest",
            rng.value(20, "!@#$%^&*()-_=+[]{};:',.<>/?|")
        ));
        out.push(format!(
            "Server=db.internal;User Id=app;{}={};Database=x",
            rng.pick(&["Password", "Pwd", "password", "PWD"]),
            rng.value(16, " !@#$%^&*()-_=+[]{}:',.<>/?|")
        ));
    }
    out
}

/// The placements each corpus input is shipped in: the line, a tool's output, JSON inside that
/// output (two levels deep too), an object key (a tool's JSON keyed by command lines or log
/// lines: the kcap CLI's line regexes read keys as they read values), an array's element, a
/// shell call's argv, an assistant message's text, and a line that is not JSON (a JSON
/// object followed by an escape's text, or indented).
fn placements(text: &str) -> Vec<String> {
    let exec = json!({"output": text, "metadata": {"exit_code": 0}}).to_string();
    let mut keyed = serde_json::Map::new();
    keyed.insert(text.to_owned(), json!({"count": 3}));
    let keyed = Value::Object(keyed);
    vec![
        text.to_owned(),
        json!({"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c", "output": text}}).to_string(),
        json!({"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c", "output": exec}}).to_string(),
        json!({"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c", "output": keyed.to_string()}}).to_string(),
        keyed.to_string(),
        json!({"a": [text, 1, null]}).to_string(),
        json!({"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c", "output": json!({"output": exec}).to_string()}}).to_string(),
        json!({"type": "response_item", "payload": {"type": "function_call", "name": "shell", "arguments": json!({"command": ["bash", "-lc", text]}).to_string()}}).to_string(),
        json!({"type": "response_item", "payload": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}}).to_string(),
        format!("{}\n", json!({"x": text})),
        format!("  {}", json!({"x": text})),
    ]
}

fn decoded_text(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
            if let Ok(inner) = serde_json::from_str::<Value>(s)
                && (inner.is_object() || inner.is_array())
            {
                decoded_text(&inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| decoded_text(i, out)),
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            out.push_str(k);
            out.push('\n');
            decoded_text(v, out);
        }),
        _ => {}
    }
}

fn alnum_runs(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|run| run.len() >= 4)
}

fn check(oracle: &Oracle, name: &str) {
    let mut failures = Vec::new();
    let corpus = corpus();
    let mut removed_total = 0;
    for input in &corpus {
        for line in placements(input) {
            let removed = oracle.removed(&line);
            let shipped = global().redact_line(line.as_bytes()).into_owned();
            let mut seen = shipped.clone();
            if let Ok(v) = serde_json::from_str::<Value>(&shipped) {
                decoded_text(&v, &mut seen);
            }
            for value in removed.iter().filter(|v| !v.contains("[REDACTED]")) {
                removed_total += 1;
                // A run also written outside the value (the key's own words) says nothing.
                let outside = line.replacen(value.as_str(), "", 1);
                let leaked = seen.contains(value.as_str())
                    || alnum_runs(value).any(|run| seen.contains(run) && !outside.contains(run));
                if leaked {
                    failures.push(format!(
                        "{name}: {value:?} survives:\n  {line}\n  => {shipped}"
                    ));
                }
            }
        }
    }
    assert!(
        removed_total > 500,
        "the corpus exercises the oracle ({removed_total})"
    );
    assert!(
        failures.is_empty(),
        "{} of {removed_total}:\n{}",
        failures.len(),
        failures
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn nothing_the_line_regex_oracle_removes_survives() {
    check(&Oracle::new(false), "07ef5ebf");
}

#[test]
fn nothing_the_structural_oracle_removes_survives() {
    check(&Oracle::new(true), "2dcdb9f8");
}
