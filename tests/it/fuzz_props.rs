//! Fuzzing in CI: property tests with thousands of generated cases over the four entry points
//! that see untrusted bytes — line classification, the fold (and the decisions on it),
//! redaction and the tail reader. None may panic on any input, and each keeps its contract:
//!
//! - `Classifier` gives the same answer however a line is cut into chunks, calls a line
//!   malformed exactly when it is not a JSON object, and reads the fields the fold needs as a
//!   JSON parser would (decoy keys at other depths, escapes, field order).
//! - `State::apply` keeps its invariants on any sequence of lines; the decisions never panic.
//! - `Redactor::redact_line` never lets a listed secret shape through, keeps valid JSON valid,
//!   leaves text without secrets byte-for-byte alone, and ships only JSON or the loss marker.
//! - `LineReader` over a byte slice grown in random chunks (and restarted at random confirmed
//!   lines) emits exactly the complete lines, numbered and cut as a simple model says.
//!
//! Each property runs a fixed number of cases within a time budget (a debug build on two
//! shared cores); the counts actually run are printed (`--nocapture`). Environment:
//! `KCAP_FUZZ_SCALE` multiplies the case counts, `KCAP_FUZZ_SECS` sets the per-property budget
//! (default 20 s), `PROPTEST_RNG_SEED` fixes the seed. The same entry points have `cargo fuzz`
//! targets in `fuzz/` for long runs.

use std::cell::Cell;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use kcap_watch::codex::header::Role;
use kcap_watch::codex::lines::{Line, LineCursor};
use kcap_watch::codex::{Classifier, Kind, LineInfo, PayloadType, classify};
use kcap_watch::decide::{self, Ceiling, StopProgress, Windows};
use kcap_watch::fold::{MAX_PAUSES, MAX_PENDING, Observed, State};
use kcap_watch::ship::capture::{self, LossReason};
use kcap_watch::ship::redact;
use kcap_watch::tail::SizeLimit;
use kcap_watch::time::Ts;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseResult, TestRunner};
use serde_json::Value;

/// Runs `test` on `cases` inputs from the strategy `build` makes, or fewer when the time
/// budget runs out. It runs on its own thread with a large stack: proptest's value trees of
/// nested strategies need more than a test thread's 2 MiB in a debug build.
fn fuzz<S, B, T>(name: &'static str, cases: u32, build: B, test: T)
where
    S: Strategy,
    S::Value: Debug,
    B: FnOnce() -> S + Send + 'static,
    T: Fn(S::Value) -> TestCaseResult + Send + 'static,
{
    let scale: f64 = std::env::var("KCAP_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let budget = Duration::from_secs(
        std::env::var("KCAP_FUZZ_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    let cases = ((f64::from(cases) * scale) as u32).max(1);
    // A core for up to the whole budget: one property at a time, and none beside the other
    // CPU-heavy tests, or the budget would be spent waiting (see `support::serial`).
    let _serial = crate::support::serial();
    let run = move || {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            max_shrink_iters: 2_000,
            ..Config::default()
        });
        let started = Instant::now();
        let ran = Cell::new(0u32);
        let result = runner.run(&build(), |input| {
            if started.elapsed() > budget {
                return Ok(());
            }
            ran.set(ran.get() + 1);
            test(input)
        });
        eprintln!(
            "{name}: {} cases (of {cases}) in {:.1?}",
            ran.get(),
            started.elapsed()
        );
        result.map_err(|e| e.to_string())
    };
    let outcome = std::thread::Builder::new()
        .name(name.to_string())
        .stack_size(256 << 20)
        .spawn(run)
        .expect("start the fuzz thread")
        .join();
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(failure)) => panic!("{name}: {failure}"),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

// ---- line generators ------------------------------------------------------------------------

fn id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,40}"
}

/// Text with everything JSON must escape, non-ASCII and emoji.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,60}",
        "\\PC{0,30}",
        Just("line\nbreak \"quoted\" back\\slash\ttab é 😀 \u{1}\u{1f}".to_string()),
    ]
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A JSON value whose objects hold decoy keys (`type`, `call_id`, `payload`, `turn_id`):
/// only the envelope's and the payload's own keys may count.
fn junk() -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        any::<i32>().prop_map(|n| n.to_string()),
        (-1e6f64..1e6).prop_map(|f| format!("{f:e}")),
        text().prop_map(|t| json_str(&t)),
        id().prop_map(|t| json_str(&t)),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("type"),
                        Just("call_id"),
                        Just("payload"),
                        Just("turn_id"),
                        Just("x"),
                        Just("last_agent_message")
                    ],
                    inner
                ),
                0..4
            )
            .prop_map(|kv| {
                // Distinct keys: the first of each name wins here.
                let mut seen = Vec::new();
                let fields: Vec<String> = kv
                    .into_iter()
                    .filter(|(k, _)| {
                        let fresh = !seen.contains(k);
                        seen.push(*k);
                        fresh
                    })
                    .map(|(k, v)| format!("{}:{v}", json_str(k)))
                    .collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
    .boxed()
}

/// A string field's value: usually a string, sometimes another JSON type (then it reads as
/// absent), occasionally `null`.
fn str_field(s: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    prop_oneof![
        6 => s.prop_map(|s| json_str(&s)),
        1 => Just("null".to_string()),
        1 => any::<u16>().prop_map(|n| n.to_string()),
        1 => Just("{\"nested\":\"x\"}".to_string()),
    ]
}

fn kind() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("session_meta".to_string()),
        Just("response_item".to_string()),
        Just("event_msg".to_string()),
        Just("turn_context".to_string()),
        Just("compacted".to_string()),
        "[a-z_]{1,20}",
    ]
}

fn payload_type() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("task_started"),
        Just("turn_started"),
        Just("task_complete"),
        Just("turn_complete"),
        Just("turn_aborted"),
        Just("token_count"),
        Just("function_call"),
        Just("custom_tool_call"),
        Just("local_shell_call"),
        Just("function_call_output"),
        Just("custom_tool_call_output"),
        Just("message"),
        Just("agent_message"),
    ]
    .prop_map(str::to_string)
}

fn timestamp() -> impl Strategy<Value = String> {
    prop_oneof![
        (0i64..4_102_444_800_000).prop_map(|ms| json_str(&Ts::from_millis(ms).rfc3339())),
        "[0-9T:.Z-]{0,30}".prop_map(|s| json_str(&s)),
        Just("1785000000".to_string()),
    ]
}

/// A line as Codex writes it, with fields in any order (a big `arguments` before `call_id`),
/// optional fields missing, wrong types and decoys.
fn envelope() -> BoxedStrategy<String> {
    let payload = (
        str_field(payload_type()),
        prop::option::of(str_field(id())),
        prop::option::of(str_field(id())),
        prop::option::of(str_field(id())),
        prop::option::of(prop_oneof![
            text().prop_map(|t| json_str(&t)),
            Just("null".to_string())
        ]),
        prop::option::of((0usize..3000).prop_map(|n| json_str(&"a\"b\\".repeat(n / 4)))),
        prop::option::of(junk()),
    )
        .prop_flat_map(|(ty, call, name, turn, message, args, extra)| {
            let mut fields = vec![format!("\"type\":{ty}")];
            for (k, v) in [
                ("call_id", call),
                ("name", name),
                ("turn_id", turn),
                ("last_agent_message", message),
                ("arguments", args),
                ("extra", extra),
            ] {
                if let Some(v) = v {
                    fields.push(format!("{}:{v}", json_str(k)));
                }
            }
            Just(fields).prop_shuffle()
        })
        .prop_map(|fields| format!("{{{}}}", fields.join(",")));
    (
        str_field(kind()),
        timestamp(),
        prop_oneof![4 => payload, 1 => junk()],
        prop::option::of(junk()),
        prop::bool::ANY,
    )
        .prop_flat_map(|(kind, ts, payload, decoy, spaced)| {
            let mut fields = vec![
                format!("\"timestamp\":{ts}"),
                format!("\"type\":{kind}"),
                format!("\"payload\":{payload}"),
            ];
            if let Some(d) = decoy {
                fields.push(format!("\"call_id\":{d}"));
            }
            let sep = if spaced { ", " } else { "," };
            Just(fields)
                .prop_shuffle()
                .prop_map(move |f| format!("{{{}}}", f.join(sep)))
        })
        .boxed()
}

/// Lines of every sort: well-formed, broken by random edits, random bytes, with a BOM or a
/// trailing `\r`.
fn any_line() -> BoxedStrategy<Vec<u8>> {
    let edited = (
        envelope(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..4),
    )
        .prop_map(|(line, edits)| {
            let mut b = line.into_bytes();
            for (at, byte, op) in edits {
                let i = at.index(b.len() + 1);
                match op {
                    0 if i < b.len() => b[i] = byte,
                    1 => b.insert(i.min(b.len()), byte),
                    _ if i < b.len() => {
                        b.remove(i);
                    }
                    _ => {}
                }
            }
            b
        });
    let line = prop_oneof![
        5 => envelope().prop_map(String::into_bytes),
        3 => edited,
        2 => prop::collection::vec(any::<u8>(), 0..200),
        1 => Just(b"42".to_vec()),
        1 => Just(b" {} ".to_vec()),
    ];
    (line, 0u8..6)
        .prop_map(|(mut l, deco)| {
            l.retain(|&b| b != b'\n');
            if deco == 0 {
                l.splice(0..0, *b"\xEF\xBB\xBF");
            } else if deco == 1 {
                l.push(b'\r');
            }
            l
        })
        .boxed()
}

/// `line` cut at random places.
fn chunked(line: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(line.len() + 1)).collect();
    at.sort_unstable();
    let mut out = Vec::new();
    let mut prev = 0;
    for a in at.into_iter().chain([line.len()]) {
        out.push(line[prev..a].to_vec());
        prev = a;
    }
    out
}

// ---- classification -------------------------------------------------------------------------

/// The spec's definition: after removing a BOM and a trailing `\r`, not a JSON object.
/// `None` where serde_json refuses valid JSON grammar for its own limits (numbers beyond
/// `f64`, nesting deeper than 128, lone surrogate escapes): no verdict there.
fn reference_malformed(line: &[u8]) -> Option<bool> {
    let mut b = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    b = b.strip_suffix(b"\r").unwrap_or(b);
    match serde_json::from_slice::<Value>(b) {
        Ok(v) => Some(!v.is_object()),
        Err(e) => {
            let why = e.to_string();
            let limit = ["out of range", "recursion limit", "surrogate"]
                .iter()
                .any(|w| why.contains(w));
            (!limit).then_some(true)
        }
    }
}

#[test]
fn classifier_is_chunking_invariant_and_agrees_with_a_json_parser_on_malformed() {
    fuzz(
        "classify: chunks and malformed",
        // 5,000 (10,000 in round 1): `classify_props.rs` checks the same two properties
        // (`chunking_is_invisible`, `validity_matches_serde_json`) on structured JSON.
        5_000,
        || {
            (
                any_line(),
                prop::collection::vec(any::<prop::sample::Index>(), 0..8),
            )
        },
        |(line, cuts)| {
            let whole = classify(&line);
            let mut c = Classifier::new();
            for chunk in chunked(&line, &cuts) {
                c.feed(&chunk);
            }
            prop_assert_eq!(&c.finish(), &whole, "chunked differently: {:?}", cuts);
            // The classifier is reusable: a second line is classified afresh.
            c.feed(b"{}");
            prop_assert_eq!(c.finish(), classify(b"{}"));
            prop_assume!(reference_malformed(&line).is_some());
            prop_assert_eq!(
                Some(whole.malformed),
                reference_malformed(&line),
                "malformed disagrees for {:?}",
                String::from_utf8_lossy(&line)
            );
            Ok(())
        },
    );
}

fn kind_of(s: Option<&str>) -> Kind {
    match s {
        Some("session_meta") => Kind::SessionMeta,
        Some("response_item") => Kind::ResponseItem,
        Some("event_msg") => Kind::EventMsg,
        Some("turn_context") => Kind::TurnContext,
        Some("compacted") => Kind::Compacted,
        _ => Kind::Other,
    }
}

#[test]
fn classifier_reads_the_fields_a_json_parser_reads() {
    fuzz(
        "classify: fields",
        6_000,
        || {
            (
                envelope(),
                prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            )
        },
        |(line, cuts)| {
            let v: Value = serde_json::from_str(&line).expect("generated lines are JSON");
            let mut c = Classifier::new();
            for chunk in chunked(line.as_bytes(), &cuts) {
                c.feed(&chunk);
            }
            let info = c.finish();
            prop_assert!(!info.malformed);
            prop_assert_eq!(info.kind, kind_of(v["type"].as_str()));
            prop_assert_eq!(
                info.timestamp,
                v["timestamp"].as_str().and_then(Ts::parse_rfc3339)
            );
            let p = &v["payload"];
            let s = |k: &str| {
                if p.is_object() {
                    p[k].as_str().map(str::to_string)
                } else {
                    None
                }
            };
            prop_assert_eq!(info.payload_type_raw, s("type"));
            prop_assert_eq!(info.call_id, s("call_id"));
            prop_assert_eq!(info.turn_id, s("turn_id"));
            prop_assert_eq!(info.name, s("name"));
            match &p["last_agent_message"] {
                Value::String(m) if p.is_object() => {
                    prop_assert_eq!(info.last_agent_message.as_deref(), Some(m.as_str()))
                }
                Value::Null if p.get("last_agent_message").is_some() => {
                    prop_assert_eq!(info.last_agent_message.as_deref(), Some(""))
                }
                Value::Null => prop_assert_eq!(info.last_agent_message, None),
                _ => {}
            }
            Ok(())
        },
    );
}

// ---- the fold and the decisions ---------------------------------------------------------------

#[test]
fn the_fold_keeps_its_invariants_and_the_decisions_never_panic() {
    let time = || 0i64..253_402_300_799_000;
    let window = || {
        prop_oneof![
            Just(Duration::ZERO),
            (0u64..10_000).prop_map(Duration::from_secs),
            Just(kcap_watch::time::MAX_WINDOW)
        ]
    };
    fuzz(
        "fold and decide",
        1_500,
        move || {
            (
                prop::collection::vec((any_line(), time(), 0u8..20), 0..60),
                time(),
                (window(), window(), prop::option::of(window())),
                prop::option::of((window(), window())),
            )
        },
        |(lines, now, (grace, idle, stall), ceiling)| {
            let mut state = State::new();
            for (number, (line, at, flag)) in lines.iter().enumerate() {
                let info = classify(line);
                let blank = flag == &0;
                state.apply(
                    Observed {
                        number: number as u64,
                        raw_len: line.len() as u64 + 1,
                        blank,
                        oversize: flag == &1,
                        info: &info,
                    },
                    Ts::from_millis(*at),
                );
                prop_assert!(state.pending.len() <= MAX_PENDING);
                prop_assert!(state.pauses.len() <= MAX_PAUSES);
                if blank || info.malformed {
                    continue;
                }
                let turn_edge = info.kind == Kind::EventMsg
                    && matches!(
                        info.payload_type,
                        PayloadType::TaskStarted
                            | PayloadType::TaskComplete
                            | PayloadType::TurnAborted
                    );
                if turn_edge {
                    // A call never outlives its turn.
                    prop_assert!(state.pending.is_empty());
                }
                if info.kind == Kind::ResponseItem
                    && let Some(id) = &info.call_id
                {
                    let pending = state.pending.iter().any(|p| &p.call_id == id);
                    if info.payload_type.is_output() {
                        prop_assert!(!pending, "output left {id} pending");
                    }
                    if info.payload_type.is_call() {
                        prop_assert!(pending || state.pending.len() == MAX_PENDING);
                    }
                }
            }
            prop_assert_eq!(state.counters.lines, lines.len() as u64);
            prop_assert!(state.counters.blank + state.counters.malformed <= state.counters.lines);
            let now = Ts::from_millis(now);
            let windows = Windows {
                stop_grace: grace,
                idle,
                stall,
            };
            for role in [Role::Child, Role::Session] {
                let mut c = ceiling.map(|(life, cap)| Ceiling::new(now, life, cap));
                let due = decide::due_times(
                    &state,
                    role,
                    &windows,
                    StopProgress::default(),
                    now,
                    c.as_ref(),
                );
                if role == Role::Session {
                    prop_assert_eq!(due.subagent_stop, None);
                }
                if let Some(c) = &mut c {
                    for _ in 0..4 {
                        c.step(&state.pauses, now.plus(Duration::from_secs(3600)));
                    }
                    let _ = c.exit_message(&state.pauses, now);
                }
            }
            Ok(())
        },
    );
}

// ---- redaction --------------------------------------------------------------------------------

#[test]
fn capture_never_panics_and_ships_json_or_the_exact_marker() {
    fuzz(
        "capture: any bytes",
        5_000,
        || {
            prop_oneof![
                20 => prop::collection::vec(any::<u8>(), 0..400),
                20 => any_line(),
            ]
        },
        |line| {
            match capture::capture(&line, &redact::global()) {
                Ok(text) => {
                    // Only JSON ships, and it stays JSON. JSON by its grammar, as the kcap CLI
                    // reads it: `1E785000000` is a number there, though too large for an f64
                    // (a `Value` would refuse it).
                    let json = |t: &str| serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok();
                    let lossy = String::from_utf8_lossy(&line);
                    prop_assert!(json(&lossy), "{lossy}");
                    prop_assert!(json(&text), "{lossy} -> {text}");
                }
                Err(loss) => {
                    prop_assert_eq!(loss.reason, LossReason::MalformedInput);
                    let v: Value =
                        serde_json::from_str(&loss.marker()).expect("the marker is JSON");
                    prop_assert_eq!(&v["type"], "kcap_capture_loss");
                    prop_assert_eq!(&v["reason"], "malformed_input");
                    prop_assert_eq!(&v["input_utf8_bytes"], line.len() as u64);
                    let units = String::from_utf8_lossy(&line).encode_utf16().count() as u64;
                    prop_assert_eq!(&v["input_utf16_length"], units);
                }
            }
            Ok(())
        },
    );
}

/// Token characters for generated secrets (long enough for every rule's minimum).
fn token(len: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".to_vec(),
        ),
        len,
    )
    .prop_map(|v| String::from_utf8(v).unwrap())
}

/// A secret of a listed shape, as it would appear in text: (the text, the part that must go).
fn secret() -> impl Strategy<Value = (String, String)> {
    let prefixed = (
        prop::sample::select(crate::support::secrets::VENDOR_PREFIXES),
        token(24..40),
    )
        .prop_map(|(p, t)| (format!("{p}{t}"), t));
    let aws = (
        prop::sample::select(vec!["AKIA", "ASIA", "AROA"]),
        "[A-Z0-9]{16}",
    )
        .prop_map(|(p, t)| (format!("{p}{t}"), format!("{p}{t}")));
    let header = (
        prop::sample::select(vec![
            "Authorization: Bearer ",
            "authorization: Basic ",
            "Proxy-Authorization: Bearer ",
            "Cookie: session=",
            "Set-Cookie: id=",
            "X-Api-Key: ",
            "x-auth-token: ",
            "X-Amz-Security-Token: ",
            "X-Goog-Api-Key: ",
            "Private-Token: ",
            "X-Vault-Token: ",
            "Stripe-Signature: t=1,v1=",
        ]),
        token(24..40),
    )
        .prop_map(|(h, t)| (format!("{h}{t}"), t));
    let url = (
        prop::sample::select(vec![
            "token",
            "access_token",
            "api_key",
            "password",
            "secret",
        ]),
        token(20..32),
    )
        .prop_map(|(k, t)| {
            (
                format!("https://api.example.com/v1/items?page=2&{k}={t}"),
                t,
            )
        });
    let userinfo =
        token(20..32).prop_map(|t| (format!("postgres://admin:{t}@db.internal:5432/app"), t));
    let assignment = (
        prop::sample::select(vec![
            "GITHUB_TOKEN",
            "DB_PASSWORD",
            "api_key",
            "CLIENT_SECRET",
            "AWS_SECRET_ACCESS_KEY",
            "passwd",
            "MYSQL_PWD",
            "PRIVATE_KEY",
            "credentials",
            "ACCESS_KEY",
        ]),
        prop::sample::select(vec!["=", ": "]),
        token(20..32),
    )
        .prop_map(|(k, sep, t)| (format!("{k}{sep}{t}"), t));
    let labelled = (
        prop::sample::select(vec!["token ", "Token: "]),
        token(20..32),
    )
        .prop_map(|(l, t)| (format!("{l}{t}"), t));
    let connection = token(20..32).prop_map(|t| {
        (
            format!("Server=db;Database=app;User Id=sa;Password={t};"),
            t,
        )
    });
    let pem = prop::collection::vec(token(64..65), 2..4).prop_map(|body| {
        (
            format!(
                "-----BEGIN RSA PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY-----",
                body.join("\n")
            ),
            body[0].clone(),
        )
    });
    prop_oneof![
        prefixed, aws, header, url, userinfo, assignment, labelled, connection, pem
    ]
}

/// Words with no secret in them and no keyword the rules key on.
fn benign_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "build",
            "the",
            "tests",
            "ran",
            "ok",
            "café",
            "42",
            "3.14",
            "src/main.rs",
            "déjà",
            "vu",
            "🚀",
            "line",
            "fixed",
            "off-by-one",
            "in",
            "handler",
            "all",
            "green",
            "(done)",
        ]),
        0..12,
    )
    .prop_map(|w| w.join(" "))
}

#[test]
fn redaction_removes_every_listed_secret_shape_and_keeps_json_valid() {
    fuzz(
        "redact: secrets",
        10_000,
        || (secret(), benign_text(), benign_text(), 0u8..5),
        |((secret_text, must_go), before, after, place)| {
            let inner = format!("{before} {secret_text} {after}");
            let line = match place {
                // As Codex writes tool output: the secret inside a JSON string.
                0 => harness_output(&inner),
                1 => format!(
                    r#"{{"type":"response_item","payload":{{"type":"function_call","name":"exec_command","arguments":{},"call_id":"c1"}}}}"#,
                    json_str(&format!("{{\"cmd\":{}}}", json_str(&inner)))
                ),
                2 => format!(
                    r#"{{"type":"event_msg","payload":{{"type":"agent_message","message":{}}}}}"#,
                    json_str(&inner)
                ),
                // A JSON key naming a secret, its string value the token.
                3 => format!(
                    r#"{{"type":"event_msg","payload":{{"env":{{"client_secret":"{must_go}","api_token":"{must_go}","total_tokens":12846}}}}}}"#
                ),
                // Not JSON at all (a malformed line still ships, redacted); a line holds no
                // raw line break, so breaks are escaped as in JSON.
                _ => inner.replace('\n', "\\n"),
            };
            let out = redact::global().redact_line(line.as_bytes());
            prop_assert!(
                !out.contains(&must_go),
                "{must_go:?} survived redaction:\n{line}\n->\n{out}"
            );
            if place < 4 {
                let v: Result<Value, _> = serde_json::from_str(&out);
                prop_assert!(v.is_ok(), "redaction broke the JSON:\n{line}\n->\n{out}");
            }
            if place == 3 {
                // Numbers under token-ish keys (every token_count line) stay.
                prop_assert!(out.contains("\"total_tokens\":12846"), "{out}");
            }
            Ok(())
        },
    );
}

fn harness_output(text: &str) -> String {
    format!(
        r#"{{"timestamp":"2026-07-28T16:14:20.015Z","type":"response_item","payload":{{"type":"function_call_output","call_id":"call_1","output":{}}}}}"#,
        json_str(text)
    )
}

#[test]
fn redaction_leaves_lines_without_secrets_byte_for_byte_alone() {
    fuzz(
        "redact: no secret, no change",
        5_000,
        || (benign_text(), any::<u32>(), 0u8..3),
        |(text, n, shape)| {
            let line = match shape {
                0 => harness_output(&text),
                1 => format!(
                    r#"{{"type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{n},"total_tokens":{n}}}}},"rate_limits":{{"primary":{{"used_percent":41.0,"resets_at":1785265331}}}}}}}}"#
                ),
                _ => format!("  {text}\t{{not json {n}"),
            };
            let out = redact::global().redact_line(line.as_bytes()).into_owned();
            prop_assert_eq!(out, line);
            Ok(())
        },
    );
}

/// JSON documents of any shape with secrets in their strings and under secret-named keys:
/// the redacted text must parse.
fn json_doc() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        text().prop_map(|t| json_str(&t)),
        secret().prop_map(|(s, _)| json_str(&s)),
        (benign_text(), secret()).prop_map(|(b, (s, _))| json_str(&format!("{b}\n{s}\n{b}"))),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("password".to_string()),
                        Just("x_api_key".to_string()),
                        Just("token".to_string()),
                        Just("Authorization".to_string()),
                        "[a-z_]{1,12}",
                    ],
                    inner
                ),
                0..5
            )
            .prop_map(|kv| {
                let fields: Vec<String> = kv
                    .into_iter()
                    .map(|(k, v)| format!("{}:{v}", json_str(&k)))
                    .collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

#[test]
fn redaction_keeps_any_valid_json_valid() {
    fuzz("redact: json stays json", 5_000, json_doc, |doc| {
        let out = redact::global().redact_line(doc.as_bytes());
        prop_assert!(
            serde_json::from_str::<Value>(&out).is_ok(),
            "redaction broke the JSON:\n{doc}\n->\n{out}"
        );
        Ok(())
    });
}

// ---- the tail reader ----------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Piece {
    Line(Vec<u8>),
    Huge(usize),
    Blank(&'static str),
}

fn file() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        12 => any_line().prop_map(Piece::Line),
        3 => prop::sample::select(vec!["", " ", "\t ", "\r"]).prop_map(Piece::Blank),
        1 => prop_oneof![
            Just(LIMIT_BYTES - 1),
            Just(LIMIT_BYTES),
            Just(LIMIT_BYTES + 1),
            LIMIT_BYTES..LIMIT_BYTES * 6
        ]
        .prop_map(Piece::Huge),
    ];
    (
        prop::bool::ANY,
        prop::collection::vec(piece, 0..30),
        prop::collection::vec(any::<u8>(), 0..50),
    )
        .prop_map(|(bom, pieces, tail)| {
            let mut out = Vec::new();
            if bom {
                out.extend_from_slice(b"\xEF\xBB\xBF");
            }
            for p in pieces {
                match p {
                    Piece::Line(l) => out.extend(l),
                    Piece::Huge(n) => out.extend(std::iter::repeat_n(b'h', n)),
                    Piece::Blank(b) => out.extend_from_slice(b.as_bytes()),
                }
                out.push(b'\n');
            }
            // An unterminated last line: not a line yet.
            out.extend(tail.into_iter().filter(|&b| b != b'\n'));
            out
        })
}

/// The tail reader does the same whatever its limit: a small one keeps the huge lines of 500
/// cases small (the shipping limit itself is tested with real 4 MiB lines elsewhere).
const LIMIT_BYTES: usize = 4096;
const LIMIT: SizeLimit = SizeLimit::bytes(LIMIT_BYTES as u64);

/// What the reader must emit for `data`: every `\n`-terminated line.
fn model(data: &[u8]) -> Vec<Line> {
    let mut out = Vec::new();
    let mut start = 0;
    for (number, i) in data
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i)
        .enumerate()
    {
        let raw = &data[start..i];
        let mut t = raw;
        if number == 0 {
            t = t.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(t);
        }
        t = t.strip_suffix(b"\r").unwrap_or(t);
        let oversize = t.len() > LIMIT_BYTES;
        out.push(Line {
            number: number as u64,
            start: start as u64,
            end: i as u64 + 1,
            len: t.len() as u64,
            blank: t.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')),
            text: (!oversize).then(|| t.to_vec()),
            oversize,
            units: oversize.then(|| String::from_utf8_lossy(t).encode_utf16().count() as u64),
            info: Some(classify(raw)),
        });
        start = i + 1;
    }
    out
}

#[test]
fn the_tail_reader_emits_exactly_the_complete_lines_however_the_file_grows() {
    fuzz(
        "tail reader",
        // 500 (1,000 in round 1): `tail_model.rs` checks the reader against a model over
        // grow/truncate/restart sequences, and `fold_props.rs` folds a prefix then the rest.
        500,
        || {
            (
                file(),
                prop::collection::vec((1usize..9000, 1usize..6, prop::bool::weighted(0.1)), 1..40),
            )
        },
        |(data, steps)| {
            let want = model(&data);
            let mut got: Vec<Line> = Vec::new();
            let cursor = |offset, number| {
                LineCursor::text(offset, number, LIMIT).classified(Classifier::new())
            };
            let mut reader = cursor(0, 0);
            let mut visible: usize = 0;
            for (grow, max_lines, restart) in steps.iter().copied().chain([(usize::MAX, 7, false)])
            {
                visible = visible.saturating_add(grow).min(data.len());
                if restart && let Some(last) = got.last() {
                    // Resume after the last line emitted, as a restarted watcher resumes at a
                    // confirmed line.
                    reader = cursor(last.end, last.number + 1);
                }
                loop {
                    let (lines, st) = reader.read(&data[..visible], max_lines).unwrap();
                    got.extend(lines);
                    prop_assert!(
                        reader.retained_bytes()
                            <= 2 * (LIMIT_BYTES + 8) + kcap_watch::tail::reader::READ_CHUNK,
                        "reader holds {} bytes",
                        reader.retained_bytes()
                    );
                    if st.at_eof {
                        break;
                    }
                }
            }
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(g, w);
            }
            prop_assert_eq!(
                reader.partial_bytes() as usize,
                data.len() - want.last().map_or(0, |l| l.end as usize)
            );
            Ok(())
        },
    );
}

/// `LineInfo` of blank lines is still computed: the fold ignores it, but it must not panic.
#[test]
fn classify_of_tiny_inputs_is_stable() {
    for b in 0u8..=255 {
        let one = classify(&[b]);
        let mut c = Classifier::new();
        c.feed(&[]);
        c.feed(&[b]);
        c.feed(&[]);
        assert_eq!(c.finish(), one);
    }
    assert_eq!(classify(b""), LineInfo::malformed());
}
