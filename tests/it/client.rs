//! The kcap client against the fake kcap server: what each server answer means for the
//! watcher, the exact hook bodies, and where the bearer token comes from.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kcap_watch::ship::TranscriptBatch;
use kcap_watch::ship::auth::{AuthConfig, Credentials, TokenOrigin};
use kcap_watch::ship::client::{
    Deadlines, Failure, KcapClient, ROUTE_SESSION_END, ROUTE_SUBAGENT_START, ROUTE_SUBAGENT_STOP,
    SessionEndReason, Watermark, session_end_body, subagent_start_body, subagent_stop_body,
};
use kcap_watch::time::Ts;
use serde_json::json;
use support::{FakeKcap, Fault};

const SESSION: &str = "0199a2b4c0de7000a000000000000001";
const CHILD: &str = "0199a2b4c0de7000a000000000000002";
const SECRET: &str = "kcap-test-token-0123456789";

/// Deadlines short enough that a hanging server costs a test well under a second.
fn short() -> Deadlines {
    Deadlines {
        watermark: Duration::from_millis(400),
        transcript: Duration::from_millis(400),
        hook: Duration::from_millis(400),
    }
}

/// Deadlines for a server that answers: a first request under Wine on a loaded machine took
/// longer than 400 ms and failed a test about something else.
fn roomy() -> Deadlines {
    Deadlines {
        watermark: Duration::from_secs(10),
        transcript: Duration::from_secs(10),
        hook: Duration::from_secs(10),
    }
}

/// A client of `fake` with [`short`] deadlines (tests of a hanging server).
fn client(fake: &FakeKcap, token: Option<&str>) -> KcapClient {
    client_with(fake, token, short())
}

fn client_with(fake: &FakeKcap, token: Option<&str>, deadlines: Deadlines) -> KcapClient {
    KcapClient::new(
        &fake.url(),
        Credentials::fixed(token.map(str::to_owned)),
        deadlines,
    )
    .unwrap()
}

fn batch(agent: Option<&str>, numbered: &[(u64, &str)]) -> String {
    serde_json::to_string(&TranscriptBatch {
        session_id: SESSION.into(),
        agent_id: agent.map(str::to_owned),
        vendor: "codex".into(),
        lines: numbered.iter().map(|(_, l)| (*l).to_owned()).collect(),
        line_numbers: numbered.iter().map(|(n, _)| *n).collect(),
    })
    .unwrap()
}

#[tokio::test]
async fn watermark_answers() {
    let fake = FakeKcap::start();
    let c = client_with(&fake, None, roomy());

    fake.store_lines(SESSION, "", [(0, "a"), (1, "b"), (41, "z")]);
    assert_eq!(c.watermark(SESSION, None).await, Ok(Watermark::Line(41)));
    assert_eq!(Watermark::Line(41).resume_line(), 42);

    assert_eq!(
        c.watermark(SESSION, Some(CHILD)).await,
        Ok(Watermark::NotFound)
    );
    fake.create_stream(SESSION, CHILD);
    assert_eq!(
        c.watermark(SESSION, Some(CHILD)).await,
        Ok(Watermark::Empty)
    );
    fake.answer_empty_with_null(true);
    assert_eq!(
        c.watermark(SESSION, Some(CHILD)).await,
        Ok(Watermark::Empty)
    );

    // The child's query names it; the session's does not carry agentId at all.
    let queries: Vec<Option<String>> = fake
        .requests_to("last-line")
        .into_iter()
        .map(|r| r.query)
        .collect();
    assert_eq!(queries[0], None);
    assert_eq!(
        queries[1].as_deref(),
        Some(format!("agentId={CHILD}").as_str())
    );
    assert_eq!(
        fake.requests_to("last-line")[0].path,
        format!("/api/sessions/{SESSION}/last-line")
    );
}

#[tokio::test]
async fn watermark_moves_backwards_when_the_server_loses_lines() {
    let fake = FakeKcap::start();
    let c = client_with(&fake, None, roomy());
    fake.store_lines(SESSION, "", [(0, "a"), (1, "b"), (2, "c")]);
    fake.lose_last_lines(SESSION, "", 2);
    assert_eq!(c.watermark(SESSION, None).await, Ok(Watermark::Line(0)));
    fake.lose_last_lines(SESSION, "", 1);
    assert_eq!(c.watermark(SESSION, None).await, Ok(Watermark::Empty));
}

#[tokio::test]
async fn watermark_failures_leave_it_unknown() {
    let fake = FakeKcap::start();
    let c = client_with(&fake, None, roomy());
    fake.store_lines(SESSION, "", [(0, "a")]);

    fake.fail_next_on("last-line", 1, Fault::Status(500));
    match c.watermark(SESSION, None).await {
        Err(Failure::Transient {
            status: Some(500), ..
        }) => {}
        other => panic!("{other:?}"),
    }

    fake.fail_next_on("last-line", 1, Fault::RetryAfter(9));
    let failure = c.watermark(SESSION, None).await.unwrap_err();
    assert_eq!(failure.retry_after(), Some(Duration::from_secs(9)));

    fake.fail_next_on("last-line", 1, Fault::Status(400));
    assert!(matches!(
        c.watermark(SESSION, None).await,
        Err(Failure::Rejected { status: 400, .. })
    ));

    fake.fail_next_on("last-line", 1, Fault::DropConnection { store: false });
    assert!(matches!(
        c.watermark(SESSION, None).await,
        Err(Failure::Transient { .. })
    ));

    fake.require_token(Some("right"));
    assert_eq!(
        c.watermark(SESSION, None).await,
        Err(Failure::Unauthorized {
            status: 401,
            token_sent: false
        })
    );
    fake.require_token(None);

    // The fault queue is used up: the server answers again.
    assert_eq!(c.watermark(SESSION, None).await, Ok(Watermark::Line(0)));
}

#[tokio::test]
async fn a_hanging_server_times_out_within_the_deadline() {
    let fake = FakeKcap::start();
    let c = client(&fake, None);
    fake.fail_always(None, Fault::Hang);

    let started = Instant::now();
    let failure = c.watermark(SESSION, None).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(failure, Failure::Transient { status: None, .. }),
        "{failure:?}"
    );
    assert!(
        failure.to_string().contains("no answer within"),
        "{failure}"
    );
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(2),
        "{took:?}"
    );

    let started = Instant::now();
    let outcome = c.post_transcript(batch(None, &[(0, "a")])).await;
    assert!(
        matches!(outcome, Err(Failure::Transient { status: None, .. })),
        "{outcome:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    // A slow answer inside the deadline is fine: one as slow as the deadline above, to a
    // client allowed 2 s (with 100 ms to spare under 400 ms, a loaded machine under Wine
    // missed it).
    fake.clear_faults();
    fake.fail_next(1, Fault::Delay(Duration::from_millis(400)));
    let patient = Duration::from_secs(2);
    let c = client_with(
        &fake,
        None,
        Deadlines {
            watermark: patient,
            transcript: patient,
            hook: patient,
        },
    );
    assert_eq!(c.post_transcript(batch(None, &[(0, "a")])).await, Ok(()));
}

#[tokio::test]
async fn the_default_deadlines_are_the_spec_values() {
    let d = Deadlines::default();
    assert_eq!(d.watermark, Duration::from_secs(10));
    assert_eq!(d.transcript, Duration::from_secs(30));
    assert_eq!(d.hook, Duration::from_secs(5));
}

#[tokio::test]
async fn a_delivered_batch_is_stored_and_sent_plainly() {
    let fake = FakeKcap::start();
    let c = client_with(&fake, None, roomy());
    let body = batch(Some(CHILD), &[(3, r#"{"type":"x"}"#), (5, "not json")]);
    assert_eq!(c.post_transcript(body.clone()).await, Ok(()));

    let stored = fake.lines(SESSION, CHILD);
    assert_eq!(stored.get(&3).map(String::as_str), Some(r#"{"type":"x"}"#));
    assert_eq!(stored.get(&5).map(String::as_str), Some("not json"));
    assert_eq!(
        c.watermark(SESSION, Some(CHILD)).await,
        Ok(Watermark::Line(5))
    );

    let req = &fake.requests_to("transcript")[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/hooks/transcript");
    assert_eq!(req.body, body);
    assert_eq!(
        req.header("content-length"),
        Some(body.len().to_string().as_str())
    );
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("content-encoding"), None);
    assert_eq!(req.authorization(), None, "no token, no header");
}

#[tokio::test]
async fn transient_answers_carry_what_the_retry_needs() {
    let fake = FakeKcap::start();
    let c = client_with(&fake, None, roomy());
    let body = batch(None, &[(0, "a")]);

    fake.fail_next_on("transcript", 1, Fault::RetryAfter(7));
    match c.post_transcript(body.clone()).await {
        Err(Failure::Transient {
            status: Some(429),
            retry_after: Some(d),
            ..
        }) => assert_eq!(d, Duration::from_secs(7)),
        other => panic!("{other:?}"),
    }
    for status in [408, 500, 502, 503] {
        fake.fail_next_on("transcript", 1, Fault::Status(status));
        match c.post_transcript(body.clone()).await {
            Err(Failure::Transient {
                status: Some(s),
                retry_after: None,
                error,
            }) => {
                assert_eq!(s, status);
                assert!(error.contains(&status.to_string()), "{error}");
            }
            other => panic!("{status}: {other:?}"),
        }
    }
    // A redirect is never followed (a POST would lose its body) and never drops the batch.
    fake.fail_next_on("transcript", 1, Fault::Status(301));
    assert!(matches!(
        c.post_transcript(body.clone()).await,
        Err(Failure::Transient {
            status: Some(301),
            ..
        })
    ));
    assert!(
        fake.lines(SESSION, "").is_empty(),
        "nothing stored by a failed post"
    );
    assert_eq!(c.post_transcript(body).await, Ok(()));
    assert_eq!(fake.lines(SESSION, "").len(), 1);
}

#[tokio::test]
async fn a_connection_cut_mid_answer_is_transient_even_after_a_200() {
    let fake = FakeKcap::start();
    let c = client_with(&fake, None, roomy());
    let body = batch(None, &[(0, "a"), (1, "b")]);

    fake.fail_next_on("transcript", 1, Fault::DropConnection { store: false });
    let outcome = c.post_transcript(body.clone()).await;
    match &outcome {
        Err(Failure::Transient {
            status: Some(200),
            error,
            ..
        }) => {
            assert!(error.contains("cut short"), "{error}")
        }
        other => panic!("{other:?}"),
    }
    assert!(fake.lines(SESSION, "").is_empty());

    // The server stored the batch but its answer was lost: still not "delivered" (the
    // watcher resends, which is harmless).
    fake.fail_next_on("transcript", 1, Fault::DropConnection { store: true });
    let outcome = c.post_transcript(body.clone()).await;
    assert!(
        matches!(outcome, Err(Failure::Transient { .. })),
        "{outcome:?}"
    );
    assert_eq!(fake.lines(SESSION, "").len(), 2);

    assert_eq!(c.post_transcript(body).await, Ok(()));
    assert_eq!(fake.request_count("transcript"), 3);
}

#[tokio::test]
async fn an_unreachable_server_is_transient() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let c = KcapClient::new(
        &format!("http://127.0.0.1:{port}"),
        Credentials::fixed(Some(SECRET.into())),
        short(),
    )
    .unwrap();
    let outcome = c.post_hook(ROUTE_SUBAGENT_STOP, "{}".into()).await;
    match &outcome {
        Err(Failure::Transient {
            status: None,
            error,
            ..
        }) => {
            assert!(
                error.starts_with("failed to post /hooks/subagent-stop"),
                "{error}"
            );
            assert!(!error.contains(SECRET));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn refused_and_unauthorized_posts() {
    let fake = FakeKcap::start();
    let c = client_with(&fake, None, roomy());

    // A malformed batch: lines and numbers differ in length.
    let bad = json!({"session_id": SESSION, "agent_id": null, "vendor": "codex",
                     "lines": ["a"], "line_numbers": [0, 1]})
    .to_string();
    match c.post_transcript(bad).await {
        Err(Failure::Rejected {
            status: 400,
            body_snippet,
        }) => {
            assert!(body_snippet.contains("differ in length"), "{body_snippet}")
        }
        other => panic!("{other:?}"),
    }

    // One line the server refuses: the whole batch holding it is refused, others pass.
    fake.refuse_line(7, 422);
    assert!(matches!(
        c.post_transcript(batch(None, &[(6, "a"), (7, "b")])).await,
        Err(Failure::Rejected { status: 422, .. })
    ));
    assert_eq!(c.post_transcript(batch(None, &[(6, "a")])).await, Ok(()));
    assert_eq!(
        fake.lines(SESSION, "").keys().copied().collect::<Vec<_>>(),
        vec![6]
    );

    fake.require_token(Some(SECRET));
    assert_eq!(
        c.post_transcript(batch(None, &[(8, "c")])).await,
        Err(Failure::Unauthorized {
            status: 401,
            token_sent: false
        })
    );
    fake.require_token(None);
    fake.fail_next(1, Fault::Status(403));
    assert_eq!(
        c.post_hook(ROUTE_SUBAGENT_STOP, "{}".into()).await,
        Err(Failure::Unauthorized {
            status: 403,
            token_sent: false
        })
    );
}

#[tokio::test]
async fn the_bearer_token_is_sent_and_never_shown() {
    let fake = FakeKcap::start();
    // Room for the answered requests (under Wine on a loaded machine the first took more than
    // 400 ms); the faults below, a hang among them, get the short deadlines.
    let answered = client_with(&fake, Some(SECRET), roomy());
    let c = client(&fake, Some(SECRET));
    fake.require_token(Some(SECRET));

    assert_eq!(
        answered.post_transcript(batch(None, &[(0, "a")])).await,
        Ok(())
    );
    assert_eq!(
        answered.watermark(SESSION, None).await,
        Ok(Watermark::Line(0))
    );
    for r in fake.requests() {
        assert_eq!(r.authorization(), Some(format!("Bearer {SECRET}").as_str()));
    }

    let mut shown = vec![format!("{c:?}"), format!("{answered:?}")];
    for fault in [
        Fault::Status(500),
        Fault::Status(400),
        Fault::Status(401),
        Fault::RetryAfter(1),
        Fault::DropConnection { store: false },
        Fault::Hang,
    ] {
        fake.clear_faults();
        fake.fail_always(None, fault);
        let outcome = c.post_hook(ROUTE_SUBAGENT_STOP, "{}".into()).await;
        assert_ne!(outcome, Ok(()));
        shown.push(format!("{} {outcome:?}", outcome.clone().unwrap_err()));
        let failure = c.watermark(SESSION, None).await.unwrap_err();
        shown.push(format!("{failure} {failure:?}"));
    }
    fake.clear_faults();
    fake.require_token(Some("another"));
    let outcome = c.post_transcript(batch(None, &[(1, "b")])).await;
    shown.push(format!("{} {outcome:?}", outcome.clone().unwrap_err()));
    for text in shown {
        assert!(!text.contains(SECRET), "token leaked into: {text}");
    }
}

#[tokio::test]
async fn a_refused_token_file_is_read_again_and_the_request_resent_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "old-token\n").unwrap();
    let fake = FakeKcap::start();
    fake.require_token(Some("new-token"));
    let source = Credentials::new(AuthConfig {
        token_file: Some(file.clone()),
        config_dir: dir.path().to_owned(),
        server_url: fake.url(),
        ..AuthConfig::default()
    });
    let c = KcapClient::new(&fake.url(), source, short()).unwrap();

    let body = batch(None, &[(0, "a")]);
    assert_eq!(
        c.post_transcript(body.clone()).await,
        Err(Failure::Unauthorized {
            status: 401,
            token_sent: true
        })
    );
    assert_eq!(
        fake.request_count("transcript"),
        1,
        "an unchanged file gives nothing to resend with"
    );
    std::fs::write(&file, "new-token").unwrap();
    // The 401 makes the file be read again, and the request goes once more at once.
    assert_eq!(c.post_transcript(body).await, Ok(()));
    assert_eq!(c.token_origin(), TokenOrigin::File(file));
    let sent: Vec<_> = fake
        .requests_to("transcript")
        .iter()
        .map(|r| r.authorization().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        sent,
        ["Bearer old-token", "Bearer old-token", "Bearer new-token"]
    );
}

#[tokio::test]
async fn a_trailing_slash_in_the_url_does_not_matter() {
    let fake = FakeKcap::start();
    let c = KcapClient::new(
        &format!("{}/", fake.url()),
        Credentials::fixed(None),
        roomy(),
    )
    .unwrap();
    assert_eq!(c.post_transcript(batch(None, &[(0, "a")])).await, Ok(()));
    assert_eq!(fake.requests()[0].path, "/hooks/transcript");
    assert!(KcapClient::new("ftp://example.com", Credentials::fixed(None), short()).is_err());
    assert!(KcapClient::new("not a url", Credentials::fixed(None), short()).is_err());
}

#[test]
fn the_fake_server_can_be_driven_from_sync_code() {
    let fake = FakeKcap::start();
    let url = fake.url();
    let poster = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Room for a first request under Wine on a loaded machine (400 ms was missed).
            let c = KcapClient::new(&url, Credentials::fixed(None), roomy()).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            c.post_transcript(batch(None, &[(0, "a")])).await
        })
    });
    // As long as the poster's own deadline: a loaded machine under Wine missed 5 s.
    assert!(fake.wait_until(Duration::from_secs(10), |k| k.lines(SESSION, "").len() == 1));
    assert_eq!(poster.join().unwrap(), Ok(()));
    assert!(
        !fake.wait_until(Duration::from_millis(30), |k| k.request_count("last-line")
            > 0)
    );
}

// ---- hook bodies ------------------------------------------------------------------------

#[test]
fn subagent_stop_body_is_the_spec_body() {
    let body = subagent_stop_body(
        SESSION,
        CHILD,
        "spec_quality",
        Path::new("/home/u/.codex/sessions/rollout-child.jsonl"),
        "All done: [REDACTED]",
    );
    assert_eq!(
        body,
        concat!(
            r#"{"hook_event_name":"subagent_stop","#,
            r#""session_id":"0199a2b4c0de7000a000000000000001","#,
            r#""agent_id":"0199a2b4c0de7000a000000000000002","#,
            r#""agent_type":"spec_quality","#,
            r#""transcript_path":"/home/u/.codex/sessions/rollout-child.jsonl","#,
            r#""agent_transcript_path":"/home/u/.codex/sessions/rollout-child.jsonl","#,
            r#""cwd":"","stop_hook_active":false,"#,
            r#""last_assistant_message":"All done: [REDACTED]"}"#
        )
    );
}

#[test]
fn subagent_start_body_is_the_spec_body() {
    let body = subagent_start_body(SESSION, CHILD, "subagent", Path::new("/r/child.jsonl"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v,
        json!({"hook_event_name": "subagent_start", "session_id": SESSION, "agent_id": CHILD,
               "agent_type": "subagent", "transcript_path": "/r/child.jsonl", "cwd": ""})
    );
}

#[test]
fn session_end_body_is_the_spec_body() {
    let at = Ts::parse_rfc3339("2026-07-28T16:19:11.250Z").unwrap();
    let idle = session_end_body(
        SESSION,
        Path::new("/r/s.jsonl"),
        "/work",
        SessionEndReason::IdleTimeout,
        at,
    );
    let v: serde_json::Value = serde_json::from_str(&idle).unwrap();
    assert_eq!(
        v,
        json!({"session_id": SESSION, "transcript_path": "/r/s.jsonl", "cwd": "/work",
               "hook_event_name": "session_end", "reason": "idle_timeout",
               "ended_at": "2026-07-28T16:19:11.250Z"})
    );
    let exited = session_end_body(
        SESSION,
        Path::new("/r/s.jsonl"),
        "",
        SessionEndReason::ParentExited,
        at,
    );
    assert!(exited.contains(r#""reason":"parent_exited""#), "{exited}");
}

#[tokio::test]
async fn hook_posts_reach_their_routes() {
    let fake = FakeKcap::start();
    let c = client_with(&fake, None, roomy());
    let path = PathBuf::from("/r/child.jsonl");

    // A hand-run child watcher: 404, then subagent-start creates the stream.
    assert_eq!(
        c.watermark(SESSION, Some(CHILD)).await,
        Ok(Watermark::NotFound)
    );
    let start = subagent_start_body(SESSION, CHILD, "subagent", &path);
    assert_eq!(c.post_hook(ROUTE_SUBAGENT_START, start).await, Ok(()));
    assert_eq!(
        c.watermark(SESSION, Some(CHILD)).await,
        Ok(Watermark::Empty)
    );

    let stop = subagent_stop_body(SESSION, CHILD, "subagent", &path, "");
    assert_eq!(c.post_hook(ROUTE_SUBAGENT_STOP, stop).await, Ok(()));
    let end = session_end_body(
        SESSION,
        &path,
        "",
        SessionEndReason::ParentExited,
        Ts::now(),
    );
    assert_eq!(c.post_hook(ROUTE_SESSION_END, end).await, Ok(()));

    assert_eq!(fake.hooks("subagent-start").len(), 1);
    // A refused post is seen by the server but not kept as a delivered hook.
    fake.fail_next_on(ROUTE_SUBAGENT_STOP, 1, Fault::Status(500));
    let stop = subagent_stop_body(SESSION, CHILD, "subagent", &path, "");
    assert!(matches!(
        c.post_hook(ROUTE_SUBAGENT_STOP, stop).await,
        Err(Failure::Transient { .. })
    ));
    assert_eq!(fake.request_count(ROUTE_SUBAGENT_STOP), 2);
    let stops = fake.hooks("subagent-stop");
    assert_eq!(stops.len(), 1);
    assert_eq!(stops[0]["stop_hook_active"], json!(false));
    assert_eq!(stops[0]["last_assistant_message"], json!(""));
    assert_eq!(
        fake.hooks("session-end/codex")[0]["reason"],
        json!("parent_exited")
    );
    assert_eq!(
        fake.requests_to("session-end/codex")[0].path,
        "/hooks/session-end/codex"
    );
}

// ---- token resolution -------------------------------------------------------------------

const URL: &str = "https://kcap.example.com";

fn write_store(path: &Path, token: &str, server_url: Option<&str>, expires_at: serde_json::Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut v =
        json!({"access_token": token, "refresh_token": "rt-secret", "expires_at": expires_at});
    if let Some(url) = server_url {
        v["server_url"] = json!(url);
    }
    std::fs::write(path, v.to_string()).unwrap();
}

fn source(config: &Path, env: Option<&str>, file: Option<PathBuf>, profile: &str) -> Credentials {
    Credentials::new(AuthConfig {
        env_token: env.map(str::to_owned),
        token_file: file,
        config_dir: config.to_owned(),
        profile: Some(profile.to_owned()).filter(|p| !p.is_empty()),
        server_url: URL.to_owned(),
        ..AuthConfig::default()
    })
}

async fn current(s: &Credentials, now: Ts) -> Option<String> {
    s.bearer(now).await.map(|t| t.expose().to_owned())
}

#[tokio::test]
async fn token_resolution_order() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path();
    let now = Ts::now();
    let later = json!(now.plus(Duration::from_secs(3600)).rfc3339());
    write_store(
        &config.join("tokens/default.json"),
        "store-default",
        Some(URL),
        later.clone(),
    );
    write_store(
        &config.join("tokens/work.json"),
        "store-work",
        None,
        later.clone(),
    );
    let file = config.join("token-file");
    std::fs::write(&file, "  from-file \n").unwrap();

    let s = source(config, Some("from-env"), Some(file.clone()), "");
    assert_eq!(current(&s, now).await.as_deref(), Some("from-env"));
    assert_eq!(s.origin(), TokenOrigin::Env);

    let s = source(config, None, Some(file.clone()), "");
    assert_eq!(current(&s, now).await.as_deref(), Some("from-file"));

    let s = source(config, None, None, "");
    assert_eq!(current(&s, now).await.as_deref(), Some("store-default"));
    assert_eq!(
        s.origin(),
        TokenOrigin::Store(config.join("tokens/default.json"))
    );

    let s = source(config, Some("  "), None, "work");
    assert_eq!(current(&s, now).await.as_deref(), Some("store-work"));

    // Older installs: one tokens.json, used only by the active profile (here `default`,
    // there is no config.json) and only when it has no file of its own.
    write_store(
        &config.join("tokens.json"),
        "legacy",
        Some(&format!("{URL}/")),
        later,
    );
    let s = source(config, None, None, "other");
    assert_eq!(current(&s, now).await, None, "not the legacy file's owner");
    assert_eq!(s.origin(), TokenOrigin::None);
    std::fs::remove_file(config.join("tokens/default.json")).unwrap();
    let s = source(config, None, None, "");
    assert_eq!(current(&s, now).await.as_deref(), Some("legacy"));
}

#[tokio::test]
async fn the_store_is_read_again_before_each_request_and_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path();
    let store = config.join("tokens/default.json");
    let now = Ts::parse_rfc3339("2026-07-28T16:00:00Z").unwrap();
    let s = source(config, None, None, "default");

    write_store(&store, "t", Some("https://other.example.com"), json!(null));
    assert_eq!(current(&s, now).await, None, "bound to another server");

    // Unix seconds and milliseconds both work.
    let in_an_hour_s = (now.as_millis() / 1000) + 3600;
    write_store(&store, "secs", Some(URL), json!(in_an_hour_s));
    assert_eq!(current(&s, now).await.as_deref(), Some("secs"));
    write_store(
        &store,
        "millis",
        Some("HTTPS://KCAP.example.com:443/"),
        json!(now.as_millis() + 3_600_000),
    );
    assert_eq!(current(&s, now).await.as_deref(), Some("millis"));

    // The CLI refreshed the store: the next request picks the new token up.
    write_store(&store, "refreshed", None, json!("2026-07-28T17:00:00Z"));
    assert_eq!(current(&s, now).await.as_deref(), Some("refreshed"));

    // Never printed, whatever its origin.
    assert!(!format!("{s:?}").contains("refreshed"));
    assert!(!format!("{s:?}").contains("rt-secret"));
}
