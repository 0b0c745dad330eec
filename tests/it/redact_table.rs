//! The redaction floor as a table (docs/behaviour.md R2): every rule of the kcap CLI's
//! `SecretRedactor.cs` and every form R2.2 adds, each written the ways a rollout carries it:
//!
//! - as plain text (a crash fragment, a decoded message);
//! - inside a JSON string, as Codex writes tool output (`"output": "..."`), and once more
//!   encoded, as the exec harness wraps it (`"output": "{\"output\":\"...\"}"`);
//! - as a JSON key and value, where the form has one.
//!
//! What a user of the kcap server would notice: a secret on the server, a line the server
//! cannot parse, or a line without secrets that changed.

use kcap_watch::ship::capture::{Loss, LossReason, MAX_RECORD_BYTES, capture, utf16_len};
use kcap_watch::ship::redact::global;
use serde_json::{Value, json};

/// One secret form: text holding it, and the parts of it that must never ship.
struct Row {
    name: &'static str,
    text: &'static str,
    secrets: &'static [&'static str],
}

const fn row(name: &'static str, text: &'static str, secrets: &'static [&'static str]) -> Row {
    Row {
        name,
        text,
        secrets,
    }
}

/// The rules of `SecretRedactor.cs`, in its order, with every name its lists hold.
const KCAP_RULES: &[Row] = &[
    row(
        "pem block",
        "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx1y2z3PemBody\n-----END RSA PRIVATE KEY-----\nok",
        &["MIIEowIBAAKCAQEAx1y2z3PemBody"],
    ),
    row(
        "aws access key id",
        "aws_access_key_id AKIAIOSFODNN7EXAMPLE",
        &["IOSFODNN7EXAMPLE"],
    ),
    row(
        "aws ASCA prefix",
        "principal ASCAJQABLZS4A3QDU576",
        &["JQABLZS4A3QDU576"],
    ),
    row(
        "aws 21-char unique id",
        "UserId: AIDAJQABLZS4A3QDU576Q done",
        &["JQABLZS4A3QDU576Q"],
    ),
    row(
        "ghp_",
        "push with ghp_aBcDeFgHiJkLmNoP1234",
        &["aBcDeFgHiJkLmNoP1234"],
    ),
    row(
        "gho_",
        "oauth gho_aBcDeFgHiJkLmNoP1235",
        &["aBcDeFgHiJkLmNoP1235"],
    ),
    row(
        "ghs_",
        "app ghs_aBcDeFgHiJkLmNoP1236",
        &["aBcDeFgHiJkLmNoP1236"],
    ),
    row(
        "github_pat_",
        "pat github_pat_11ABCDEFG0_aBcDeFgHiJ",
        &["11ABCDEFG0_aBcDeFgHiJ"],
    ),
    row(
        "cfat_",
        "cloudflare cfat_aBcDeFgHiJkLmNoP",
        &["aBcDeFgHiJkLmNoP"],
    ),
    row(
        "sk-",
        "openai sk-aBcDeFgHiJkLmNoP9876",
        &["aBcDeFgHiJkLmNoP9876"],
    ),
    row(
        "sk-proj-",
        "openai sk-proj-aBcDeFgHiJkLm5432",
        &["aBcDeFgHiJkLm5432"],
    ),
    row(
        "sk_live_",
        "stripe sk_live_aBcDeFgHiJkLm5431",
        &["aBcDeFgHiJkLm5431"],
    ),
    row(
        "sk_test_",
        "stripe sk_test_aBcDeFgHiJkLm5430",
        &["aBcDeFgHiJkLm5430"],
    ),
    row(
        "xoxb-",
        "slack xoxb-1234567890-aBcDeFgH",
        &["1234567890-aBcDeFgH"],
    ),
    row(
        "xoxp-",
        "slack xoxp-1234567891-aBcDeFgH",
        &["1234567891-aBcDeFgH"],
    ),
    row(
        "xoxa-",
        "slack xoxa-1234567892-aBcDeFgH",
        &["1234567892-aBcDeFgH"],
    ),
    row(
        "pypi-",
        "twine pypi-AgEIcHlwaS5vcmcCJGE",
        &["AgEIcHlwaS5vcmcCJGE"],
    ),
    row(
        "npm_",
        "npm npm_aBcDeFgHiJkLmNoP77",
        &["aBcDeFgHiJkLmNoP77"],
    ),
    row(
        "glpat-",
        "gitlab glpat-aBcDeFgHiJkLmNoP78",
        &["aBcDeFgHiJkLmNoP78"],
    ),
    row(
        "dckr_pat_",
        "docker dckr_pat_aBcDeFgHiJkLm79",
        &["aBcDeFgHiJkLm79"],
    ),
    row(
        "dckr_oat_",
        "docker dckr_oat_aBcDeFgHiJkLm80",
        &["aBcDeFgHiJkLm80"],
    ),
    // The query keys, each as kcap lists it.
    row(
        "query access_token",
        "GET https://x.io/cb?access_token=QkAccessTok1&page=2",
        &["QkAccessTok1"],
    ),
    row(
        "query refresh_token",
        "GET https://x.io/cb?refresh_token=QkRefreshTok2",
        &["QkRefreshTok2"],
    ),
    row(
        "query id_token",
        "GET https://x.io/cb?state=1&id_token=QkIdTok3",
        &["QkIdTok3"],
    ),
    row(
        "query client_secret",
        "POST https://x.io/t?client_secret=QkClientSec4",
        &["QkClientSec4"],
    ),
    row(
        "query signature",
        "https://cdn.x.io/a.png?signature=QkSignature5",
        &["QkSignature5"],
    ),
    row(
        "query sig",
        "https://acct.blob.core.windows.net/c/b?sv=2021&sig=QkSig6%3D",
        &["QkSig6"],
    ),
    row(
        "query x-amz-signature",
        "https://b.s3.amazonaws.com/k?X-Amz-Signature=QkAmzSig7",
        &["QkAmzSig7"],
    ),
    row(
        "query awsaccesskeyid",
        "https://b.s3.amazonaws.com/k?AWSAccessKeyId=QkAwsKeyId8&Expires=1",
        &["QkAwsKeyId8"],
    ),
    row(
        "query api_key",
        "https://x.io/v1?api_key=QkApiKey9",
        &["QkApiKey9"],
    ),
    row(
        "query apikey",
        "https://x.io/v1?apikey=QkApiKey10",
        &["QkApiKey10"],
    ),
    row(
        "query api-key",
        "https://x.io/v1?api-key=QkApiKey11",
        &["QkApiKey11"],
    ),
    row(
        "query token",
        "https://x.io/v1?token=QkToken12",
        &["QkToken12"],
    ),
    row(
        "query password",
        "https://x.io/login?user=a&password=QkPassword13",
        &["QkPassword13"],
    ),
    row(
        "query secret",
        "https://x.io/hook?secret=QkSecret14",
        &["QkSecret14"],
    ),
    row(
        "query auth_token",
        "https://x.io/v1?auth_token=QkAuthTok15",
        &["QkAuthTok15"],
    ),
    row(
        "query sas",
        "https://acct.blob.core.windows.net/c?sas=QkSasToken16&x=1",
        &["QkSasToken16"],
    ),
    row(
        "url userinfo",
        "git clone https://deploy:UiHunter2Pass@git.example.com/r.git",
        &["UiHunter2Pass"],
    ),
    // kcap's in-text JSON key rule: any value length, spaces included.
    row(
        "json key in text, short",
        r#"config: {"api_key": "abc"}"#,
        &["\"abc\""],
    ),
    row(
        "json key in text, spaces",
        r#"wrote {"db_password": "correct horse battery"} to disk"#,
        &["correct", "horse", "battery"],
    ),
    row(
        "json key in text, dotted",
        r#"{"client.secret": "JkDotted1", "n": 1} and more"#,
        &["JkDotted1"],
    ),
    // kcap's env-var rule: any value length.
    row(
        "env var, short value",
        "export PASSWORD=abc; echo ok",
        &["=abc"],
    ),
    row("env var OAUTH2_TOKEN", "OAUTH2_TOKEN=Ev2x run", &["Ev2x"]),
    row(
        "env var, punctuation",
        "DB_PASSWORD=p@ss,w0rd! ./run.sh",
        &["p@ss", "w0rd!"],
    ),
    // kcap's YAML rule: punctuation inside the value.
    row(
        "yaml key, punctuation",
        "client_secret: abc,def;ghi12\nother: 1",
        &["abc", "def;ghi12"],
    ),
    row(
        "yaml dotted key",
        "aws.secret.access.key: wJalrXUtnFEMI/K7MDENG/bPxRfiCY",
        &["wJalrXUtnFEMI"],
    ),
    // kcap's labelled rule: keyword, blanks, 16+ characters.
    row(
        "labelled password",
        "password p@ss!w0rd-Very-Long-1 for the db",
        &["p@ss!w0rd-Very-Long-1"],
    ),
    row(
        "labelled token, two blanks",
        "hcloud:token  9xKMAbcdefghij1234",
        &["9xKMAbcdefghij1234"],
    ),
    row(
        "labelled credentials",
        "credentials AbCdEfGhIjKlMnOp12",
        &["AbCdEfGhIjKlMnOp12"],
    ),
    row(
        "labelled pwd",
        "pwd Zq9!Zq9!Zq9!Zq9!Zq",
        &["Zq9!Zq9!Zq9!Zq9!Zq"],
    ),
    row(
        "labelled auth_token",
        "auth_token Lb4uthT0kenValue99",
        &["Lb4uthT0kenValue99"],
    ),
    row(
        "connection string, spaces in password",
        "Server=db;User Id=app;Password=my secret pass;Database=x",
        &["my secret pass", "secret pass"],
    ),
];

/// The forms R2.2 adds beyond the kcap CLI.
const BEYOND_KCAP: &[Row] = &[
    row(
        "query & written \\u0026",
        r#"{"next":"https://x.io/cb?a=1\u0026sig=GoEscapedSig123\u0026b=2"}"#,
        &["GoEscapedSig123"],
    ),
    row(
        "query secret with \\/ inside",
        r#"{"url":"https:\/\/x.io\/cb?token=abc\/SlashTail9"}"#,
        &["SlashTail9"],
    ),
    row(
        "assignment with \\/ inside",
        r"DB_PASSWORD=Sl4shHead\/InsideY\/Middle99",
        &["Sl4shHead", "InsideY", "Middle99"],
    ),
    row(
        "assignment with \\u00xx inside",
        r"api_key: caf\u00e9Secret99Long",
        &["Secret99Long"],
    ),
    row(
        "userinfo with escaped slashes",
        r#"{"remote":"https:\/\/bob:EscUserPw1@git.example.com\/r.git"}"#,
        &["EscUserPw1"],
    ),
    row(
        "digest authorization",
        r#"Authorization: Digest username="alice", realm="api", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", uri="/x", response="6629fae49393a05397450978507c4ef1""#,
        &[
            "dcd98b7102dd2f0e8b11d0f600bfb0c093",
            "6629fae49393a05397450978507c4ef1",
        ],
    ),
    row(
        "basic authorization",
        "curl -H 'Authorization: Basic YWxpY2U6czNjcjN0UGFzcw==' https://x.io",
        &["YWxpY2U6czNjcjN0UGFzcw"],
    ),
    row(
        "quoted cookie value",
        r#"Cookie: session="QuotedCookieVal123"; theme=dark"#,
        &["QuotedCookieVal123"],
    ),
    row(
        "quoted set-cookie value",
        r#"Set-Cookie: sid="QuotedSetCookie4"; Path=/; HttpOnly"#,
        &["QuotedSetCookie4"],
    ),
    row(
        "set-cookie as a JSON array, in text",
        r#"headers: {"set-cookie": ["sid=ArrCookie1; Path=/", "csrf=ArrCookie2; Path=/"]}"#,
        &["ArrCookie1", "ArrCookie2"],
    ),
    row(
        "HAR header pair, in text",
        r#"entries: [{"name": "Authorization", "value": "Bearer HarTok1"}, {"name": "Accept", "value": "*/*"}]"#,
        &["HarTok1"],
    ),
    row(
        "HAR cookie pair, in text",
        r#"[{"name": "cookie", "value": "sid=HarCookie2"}]"#,
        &["HarCookie2"],
    ),
    row(
        "python bytes repr of a header",
        r"{'Authorization': b'Bearer PyBytesTok1', 'Accept': b'*/*'}",
        &["PyBytesTok1"],
    ),
    row(
        "python bytes repr alone",
        r"sent b'Bearer PyBytesTok2' upstream",
        &["PyBytesTok2"],
    ),
    row(
        ".netrc block",
        "machine api.heroku.com\n  login me@example.com\n  password NetrcPass123\n",
        &["NetrcPass123"],
    ),
    row(
        ".netrc one line",
        "machine github.com login bob password NetrcOne9",
        &["NetrcOne9"],
    ),
    row(
        ".pgpass line",
        "db.internal:5432:appdb:app_user:PgPassSecret77\n",
        &["PgPassSecret77"],
    ),
    row(
        ".pgpass wildcards",
        "*:*:*:postgres:PgStarSecret88",
        &["PgStarSecret88"],
    ),
    row(
        "curl -u",
        "curl -u admin:CurlUserPass1 https://api.example.com/v1",
        &["CurlUserPass1"],
    ),
    row(
        "curl --user quoted",
        r#"curl -s --user "bob:CurlUserPass2" https://x.io"#,
        &["CurlUserPass2"],
    ),
    row(
        "mysql -p",
        "mysql -h db -u root -pMysqlSecret42 appdb",
        &["MysqlSecret42"],
    ),
    row(
        "mysqldump -p quoted",
        "mysqldump -u root -p'MysqlQuoted43' appdb > dump.sql",
        &["MysqlQuoted43"],
    ),
    row(
        "docker config auth, in text",
        r#"{"auths": {"ghcr.io": {"auth": "ZG9ja2VyOmRvY2tlclNlY3JldA=="}}}"#,
        &["ZG9ja2VyOmRvY2tlclNlY3JldA"],
    ),
    row(
        "jwt",
        "got id eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c back",
        &[
            "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
            "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        ],
    ),
    row(
        "slack webhook",
        "posting to https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/WhSlackSecret0123456789 now",
        &["WhSlackSecret0123456789", "B0BBBBBBB"],
    ),
    row(
        "discord webhook",
        "https://discord.com/api/webhooks/123456789012345678/WhDiscord-Secret_0123456789abcdef",
        &["WhDiscord-Secret_0123456789abcdef"],
    ),
];

/// JSON key/value forms: `(document, secrets)`.
fn json_pairs() -> Vec<(String, Vec<String>)> {
    let mut pairs = Vec::new();
    for name in crate::support::secrets::HEADER_NAMES {
        let secret = format!("HdrVal{}", name.replace('-', ""));
        pairs.push((
            json!({"request": {"headers": {*name: secret}}}).to_string(),
            vec![secret.clone()],
        ));
        // The header line inside a string, as curl -v prints it.
        pairs.push((
            json!({"output": format!("> GET / HTTP/1.1\r\n> {name}: {secret}\r\n> Accept: */*\r\n")})
                .to_string(),
            vec![secret.clone()],
        ));
        // The same as plain text.
        pairs.push((format!("{name}: {secret}"), vec![secret]));
    }
    for key in [
        "secret",
        "client_secrets",
        "token",
        "refresh_tokens",
        "password",
        "passwords",
        "passwd",
        "pwd",
        "api.key",
        "apiKeys",
        "private-key",
        "credential",
        "client.secret",
        "access_key",
        "auth_token",
        "auth",
        "X-Forwarded-Authorization",
    ] {
        let secret = format!("KeyVal{}", key.replace(['-', '.', '_'], ""));
        pairs.push((json!({"config": {key: secret}}).to_string(), vec![secret]));
    }
    let more: &[(Value, &[&str])] = &[
        (
            json!({"Set-Cookie": ["sid=ArrCookie3; Path=/", "csrf=ArrCookie4"]}),
            &["ArrCookie3", "ArrCookie4"],
        ),
        (
            json!({"log": {"entries": [{"request": {"headers": [
                {"name": "Accept", "value": "*/*"},
                {"name": "Authorization", "value": "Bearer HarTok3"},
                {"value": "sid=HarCookie4", "name": "Cookie"},
                {"name": "x-api-key", "value": "HarKey5"},
            ]}}]}}),
            &["HarTok3", "HarCookie4", "HarKey5"],
        ),
        (
            json!({"auths": {"https://index.hub.example/v1/": {"auth": "ZG9ja2VyOmh1YlNlY3JldA=="}}}),
            &["ZG9ja2VyOmh1YlNlY3JldA"],
        ),
        (
            json!({"ghp_aBcDeFgHiJkLmNoP4321": true, "n": 1}),
            &["aBcDeFgHiJkLmNoP4321"],
        ),
        (
            json!({"headers": {"Authorization": "Digest username=\"a\", response=\"6629fae49393a05397450978507c4ef2\""}}),
            &["6629fae49393a05397450978507c4ef2"],
        ),
        (
            json!({"Authorization": "Basic YWxpY2U6czNjcjN0UGFzcx=="}),
            &["YWxpY2U6czNjcjN0UGFzcx"],
        ),
    ];
    for (doc, secrets) in more {
        pairs.push((
            doc.to_string(),
            secrets.iter().map(|s| (*s).to_owned()).collect(),
        ));
    }
    pairs
}

/// Codex's tool output line around `text`.
fn tool_output_line(text: &str) -> String {
    json!({
        "timestamp": "2026-07-28T16:14:05.115Z",
        "type": "response_item",
        "payload": {"type": "function_call_output", "call_id": "call_Q2mY8e", "output": text},
    })
    .to_string()
}

/// The exec harness's form: the output is JSON written inside the JSON string.
fn exec_output_line(text: &str) -> String {
    let inner = json!({"output": text, "metadata": {"exit_code": 0, "duration_seconds": 0.4}});
    tool_output_line(&inner.to_string())
}

/// Checks one shipped form; returns a failure message.
fn check(form: &str, input: &str, secrets: &[String], must_parse: bool) -> Option<String> {
    let shipped = global().redact_line(input.as_bytes()).into_owned();
    let mut seen = shipped.clone();
    if must_parse {
        match serde_json::from_str::<Value>(&shipped) {
            Ok(v) => crate::support::secrets::all_text(&v, &mut seen),
            Err(e) => return Some(format!("{form}: invalid JSON shipped ({e}):\n  {shipped}")),
        }
    }
    secrets
        .iter()
        .find(|s| seen.contains(s.as_str()))
        .map(|s| format!("{form}: {s:?} shipped:\n  {input}\n  => {shipped}"))
}

fn check_row(name: &str, text: &str, secrets: &[String], failures: &mut Vec<String>) {
    let text_is_json = serde_json::from_str::<Value>(text).is_ok();
    let forms = [
        ("plain", text.to_owned(), text_is_json),
        ("in a JSON string", tool_output_line(text), true),
        ("in exec output", exec_output_line(text), true),
    ];
    for (form, input, must_parse) in forms {
        if let Some(failure) = check(&format!("{name} ({form})"), &input, secrets, must_parse) {
            failures.push(failure);
        }
    }
}

fn owned(secrets: &[&str]) -> Vec<String> {
    secrets.iter().map(|s| (*s).to_owned()).collect()
}

fn report(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} leaks:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_kcap_rule_is_redacted_in_every_form() {
    let mut failures = Vec::new();
    for r in KCAP_RULES {
        check_row(r.name, r.text, &owned(r.secrets), &mut failures);
    }
    report(&failures);
}

#[test]
fn every_kcap_header_and_key_is_redacted_as_json_and_as_text() {
    let mut failures = Vec::new();
    for (doc, secrets) in json_pairs() {
        check_row(&doc.clone(), &doc, &secrets, &mut failures);
    }
    report(&failures);
}

#[test]
fn everything_under_a_secret_key_goes_in_json() {
    // A rule on the structure: JSON written inside a string is text, and text has no
    // subtrees (the kcap CLI treats it the same way).
    let line = json!({"payload": {"credentials": {"user": "bob", "pass": ["SubtreeSecret1", {"k": "SubtreeSecret2"}], "port": 5432}, "n": 1}}).to_string();
    let shipped = global().redact_line(line.as_bytes());
    let value: Value = serde_json::from_str(&shipped).expect("valid JSON stays valid");
    assert_eq!(
        value,
        json!({"payload": {"credentials": {"user": "[REDACTED]", "pass": ["[REDACTED]", {"k": "[REDACTED]"}], "port": 5432}, "n": 1}})
    );
}

#[test]
fn every_form_beyond_kcap_is_redacted_in_every_form() {
    let mut failures = Vec::new();
    for r in BEYOND_KCAP {
        check_row(r.name, r.text, &owned(r.secrets), &mut failures);
    }
    report(&failures);
}

/// Tool output with the words the rules key on, and no secret.
const BENIGN_OUTPUTS: &[&str] = &[
    "Password must be at least 12 characters long.",
    "The API key is read from the environment; rotate it monthly.",
    "password reset emails are sent through SES",
    "Authorization header missing: 401 Unauthorized",
    "cookie consent banner: accepted",
    "fn parse_cookie_header(raw: &str) -> Vec<Cookie> {",
    "fn parse_token(input: &str) -> Result<Token, Error> {",
    "    let secret = load_secret(&path)?;",
    "    let token = read_token(path)?;",
    "The secret sauce is caching.",
    "the password is incorrect.",
    "token validation failed: expired",
    "Token counts: 1,843,021 input, 21,877 output",
    "usage: input_tokens=1843021 output_tokens=21877 total_tokens=1864898",
    "GET /api/v1/users?page=2&per_page=50 200 OK",
    "See https://docs.github.com/en/authentication/keeping-your-account-and-data-secure",
    "https://example.com/search?q=token+rotation&lang=en",
    "Listening on http://localhost:8080/ (press Ctrl+C to stop)",
    "Set the `password` field in config.toml (see docs/configuration.md).",
    "mysql -u root -p appdb",
    "git log --author=alice --since=2.weeks",
    "12:30:45 INFO starting worker 3 of 8",
    "test auth::tokens::refresh_rotates_the_refresh_token ... ok",
    "warning: unused variable: `credentials` --> src/auth/mod.rs:88:13",
    "curl -sS https://api.github.com/repos/rust-lang/rust | jq .stargazers_count",
    "docker login ghcr.io --username bob --password-stdin < token.txt",
    "Discord and Slack notifications are configured in settings.",
    "   Compiling jsonwebtoken v9.3.0",
    "secret_scanning: on, push_protection: on",
    "| header | value |\n|---|---|\n| Accept | */* |",
    "Ünïcödé: 日本語のテキスト — ok ✓ 😀",
];

#[test]
fn lines_without_secrets_are_unchanged_byte_for_byte() {
    let mut failures = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    for entry in std::fs::read_dir("fixtures/codex").expect("the fixtures directory") {
        let path = entry.expect("a fixture entry").path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            let text = std::fs::read_to_string(&path).expect("a readable fixture");
            // One fixture line holds secrets on purpose.
            lines.extend(
                text.lines()
                    .filter(|l| !l.contains("ghp_"))
                    .map(str::to_owned),
            );
        }
    }
    assert!(lines.len() > 50, "the fixtures hold real rollouts");
    let all = BENIGN_OUTPUTS.join("\n");
    for text in BENIGN_OUTPUTS.iter().copied().chain([all.as_str()]) {
        lines.push(text.to_owned());
        lines.push(tool_output_line(text));
        lines.push(exec_output_line(text));
    }
    for line in &lines {
        let shipped = global().redact_line(line.as_bytes());
        if shipped != *line {
            failures.push(format!("changed:\n  {line}\n  => {shipped}"));
        }
    }
    report(&failures);
}

/// The marker names the raw line's lengths as the kcap CLI measures them: .NET string length
/// (UTF-16 units: one for a character of up to three bytes, two above U+FFFF, one U+FFFD for
/// each invalid sequence) and bytes of UTF-8 as written.
#[test]
fn a_lost_lines_marker_counts_utf16_units_and_bytes() {
    let body = format!("{}{}", "日".repeat(1000), "😀".repeat(1000));
    let line = format!(r#"{{"o":"{body}" broken"#);
    let loss = capture(line.as_bytes(), &global()).unwrap_err();
    assert_eq!(loss.reason, LossReason::MalformedInput);
    assert_eq!(loss.utf8_bytes, line.len() as u64);
    assert_eq!(loss.utf16_length, line.encode_utf16().count() as u64);
    assert_eq!(loss.utf16_length, 3000 + 14);

    // Over the limit in bytes: three-byte characters make it well under in units.
    let over = json!({ "o": "日".repeat(MAX_RECORD_BYTES as usize / 3) }).to_string();
    assert!(over.len() as u64 > MAX_RECORD_BYTES);
    let loss = capture(over.as_bytes(), &global()).unwrap_err();
    assert_eq!(
        loss,
        Loss::over_limit(over.len() as u64, over.encode_utf16().count() as u64)
    );

    // Invalid bytes count as the one U+FFFD each becomes.
    assert_eq!(utf16_len(b"a\xffb\xe6\x97"), 4);
    assert_eq!(utf16_len("a😀é".as_bytes()), 4);
}
