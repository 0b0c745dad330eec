//! The real binary shipping to the fake kcap server: complete delivery of a fixture with
//! redaction and the oversize placeholder, the watermark driving resume, offline spools and
//! replay, the per-key lock.

use crate::support;
use support::bin::SpawnRetry;

use std::time::Duration;

use serde_json::Value;
use support::bin::{fixture_copy, kcap_watch, physical_lines, run, stderr, stdout};
use support::{FakeKcap, Fault};

const SESSION: &str = "019fa9812dca7a319c553b1f0e6d2a01";
const CHILD: &str = "019fa9816ea27b028d115c2e9f7a4b02";
const T: Duration = Duration::from_secs(60);

#[test]
fn once_against_the_server_ships_the_child_fixture_completely_redacted() {
    let server = FakeKcap::start();
    let dir = tempfile::tempdir().unwrap();
    let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
    let mut cmd = kcap_watch(&dir.path().join("config"));
    cmd.env("KCAP_URL", server.url())
        .args(["watch", "--once", "--stop-grace", "0s"])
        .arg(&rollout);
    let out = run(cmd, T);
    assert!(out.status.success(), "{}", stderr(&out));

    let stored = server.lines(SESSION, CHILD);
    let expected = physical_lines(&rollout);
    assert_eq!(stored.len(), expected.len());
    assert_eq!(
        stored.keys().copied().collect::<Vec<_>>(),
        expected.iter().map(|(n, _)| *n).collect::<Vec<_>>()
    );
    // The 84 KB output ships whole (the kcap CLI ships JSON lines up to 4 MiB), not as a
    // marker, and so does every other line.
    assert!(stored.values().all(|l| !l.contains("kcap_capture_loss")));
    let big = &stored[&8];
    assert!(big.len() > 80_000, "{} bytes", big.len());
    assert_eq!(
        big.as_bytes(),
        &expected[8].1[..],
        "it holds no secret: unchanged"
    );
    // No raw secret leaves the process.
    let all: String = stored.values().cloned().collect();
    for secret in [
        "ghp_R4nd0mT0k3nV4lu3F0rT3st1ng00",
        "sk-proj-abcdefghijklmnop1234",
        "AKIAIOSFODNN7EXAMPLE",
    ] {
        assert!(!all.contains(secret), "{secret} was shipped");
    }
    // Every shipped line that was JSON is still JSON.
    for l in stored.values() {
        serde_json::from_str::<Value>(l).expect("redacted line stays valid JSON");
    }
    // No stream existed: subagent-start first, then exactly one stop with the spec payload.
    assert_eq!(server.hooks("subagent-start").len(), 1);
    let stops = server.hooks("subagent-stop");
    assert_eq!(stops.len(), 1);
    let stop = &stops[0];
    assert_eq!(stop["hook_event_name"], "subagent_stop");
    assert_eq!(stop["session_id"], SESSION);
    assert_eq!(stop["agent_id"], CHILD);
    assert_eq!(stop["agent_type"], "Hypatia");
    assert_eq!(stop["stop_hook_active"], false);
    assert_eq!(stop["cwd"], "");
    assert_eq!(stop["transcript_path"], rollout.display().to_string());
    assert_eq!(stop["agent_transcript_path"], rollout.display().to_string());
    assert_eq!(
        stop["last_assistant_message"],
        "Added tests::handler_regression; it fails before the fix and passes after."
    );
    assert!(
        stdout(&out).contains("shipped 36 lines"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn the_server_watermark_drives_resume() {
    let server = FakeKcap::start();
    let dir = tempfile::tempdir().unwrap();
    let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
    let lines = physical_lines(&rollout);
    let held: Vec<(u64, String)> = lines
        .iter()
        .take(20)
        .map(|(n, _)| (*n, "held".to_string()))
        .collect();
    server.store_lines(SESSION, CHILD, held.iter().map(|(n, s)| (*n, s.as_str())));
    let mut cmd = kcap_watch(&dir.path().join("config"));
    cmd.env("KCAP_URL", server.url())
        .args(["watch", "--once", "--stop-grace", "1h"])
        .arg(&rollout);
    let out = run(cmd, T);
    assert!(out.status.success(), "{}", stderr(&out));
    let posted: Vec<u64> = server
        .requests_to("transcript")
        .iter()
        .filter_map(|r| r.json())
        .flat_map(|b| {
            b["line_numbers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_u64().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(posted.first(), Some(&20), "resumes at watermark + 1");
    assert_eq!(posted.len(), lines.len() - 20);
    assert_eq!(
        server.lines(SESSION, CHILD)[&0],
        "held",
        "nothing before the resume line is resent"
    );
    assert!(
        server.hooks("subagent-start").is_empty(),
        "the stream existed"
    );
    assert!(server.hooks("subagent-stop").is_empty(), "grace not passed");
}

#[test]
fn a_watermark_beyond_the_file_means_it_was_rewritten_and_exits_3() {
    let server = FakeKcap::start();
    let dir = tempfile::tempdir().unwrap();
    let rollout = fixture_copy("child-legacy.jsonl", dir.path());
    // child-legacy: parent is only under thread_spawn; 4 lines on disk.
    let session = "019fa9812dca7a319c553b1f0e6d2a01";
    let agent = "019fa98211aa7c039e226d3fa08b5c03";
    server.store_lines(session, agent, [(10u64, "x")]);
    let mut cmd = kcap_watch(&dir.path().join("config"));
    cmd.env("KCAP_URL", server.url())
        .args(["watch", "--once"])
        .arg(&rollout);
    let out = run(cmd, T);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("rollout_rewritten"));
    assert_eq!(server.request_count("transcript"), 0, "ships nothing more");
}

#[test]
fn transient_failures_are_retried_until_every_line_is_delivered() {
    let server = FakeKcap::start();
    server.fail_next_on("transcript", 2, Fault::Status(503));
    server.fail_next_on("transcript", 1, Fault::RetryAfter(1));
    let dir = tempfile::tempdir().unwrap();
    let rollout = fixture_copy("parent-session.jsonl", dir.path());
    let mut cmd = kcap_watch(&dir.path().join("config"));
    cmd.env("KCAP_URL", server.url())
        .args(["watch", "--once"])
        .arg(&rollout);
    let out = run(cmd, T);
    assert!(out.status.success(), "{}", stderr(&out));
    let session = "019fa9812dca7a319c553b1f0e6d2a01";
    assert_eq!(
        server.lines(session, "").len(),
        physical_lines(&rollout).len()
    );
    assert!(stderr(&out).contains("ship_failed"));
}

#[test]
fn a_line_the_server_refuses_is_isolated_set_aside_and_the_rest_delivered() {
    let server = FakeKcap::start();
    server.refuse_line(7, 422);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let rollout = fixture_copy("parent-session.jsonl", dir.path());
    let mut cmd = kcap_watch(&config);
    cmd.env("KCAP_URL", server.url())
        .args(["watch", "--once"])
        .arg(&rollout);
    let out = run(cmd, T);
    assert!(out.status.success(), "{}", stderr(&out));
    let session = "019fa9812dca7a319c553b1f0e6d2a01";
    let stored = server.lines(session, "");
    assert!(!stored.contains_key(&7));
    assert_eq!(stored.len(), physical_lines(&rollout).len() - 1);
    assert!(stderr(&out).contains("line 7"), "the error names the line");
    // Set aside in refused/ (S4.1), not in the transcript spool a replay would post it from.
    let refused =
        std::fs::read_to_string(config.join(format!("kcap-watch/refused/{session}.jsonl")))
            .unwrap();
    let rec: Value = serde_json::from_str(refused.lines().next().unwrap()).unwrap();
    assert_eq!(rec["line_numbers"], serde_json::json!([7]));
    assert!(
        !config
            .join(format!("transcript-spool/{session}.transcript.jsonl"))
            .exists()
    );
}

#[test]
fn offline_once_spools_and_replay_delivers_then_replaying_again_is_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
    let mut cmd = kcap_watch(&config);
    cmd.args(["watch", "--once", "--stop-grace", "0s"])
        .arg(&rollout);
    let out = run(cmd, T);
    assert!(out.status.success(), "{}", stderr(&out));
    let spool = config
        .join("transcript-spool")
        .join(format!("{SESSION}.transcript.jsonl"));
    assert!(
        stdout(&out).contains(&spool.display().to_string()),
        "prints where the spool is"
    );
    assert!(config.join(format!("spool/{SESSION}.jsonl")).exists());

    // A second offline run resumes after the spooled lines: nothing is spooled twice.
    let size = std::fs::metadata(&spool).unwrap().len();
    let mut again = kcap_watch(&config);
    again.args(["watch", "--once"]).arg(&rollout);
    assert!(run(again, T).status.success());
    assert_eq!(std::fs::metadata(&spool).unwrap().len(), size);

    let server = FakeKcap::start();
    for _ in 0..2 {
        let mut replay = kcap_watch(&config);
        replay
            .env("KCAP_URL", server.url())
            .args(["replay", "--session-id", SESSION]);
        let out = run(replay, T);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert_eq!(
        server.lines(SESSION, CHILD).len(),
        physical_lines(&rollout).len()
    );
    assert_eq!(
        server.hooks("subagent-stop").len(),
        1,
        "the spooled stop is delivered once"
    );
    assert!(!spool.exists(), "a delivered spool is gone");
}

#[test]
fn a_second_watcher_for_the_same_key_exits_75() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
    let mut first = kcap_watch(&config)
        .args(["watch", "--poll-interval", "50ms"])
        .arg(&rollout)
        .stderr(std::process::Stdio::null())
        .spawn_retrying()
        .unwrap();
    let lock_held = support::bin::wait_for(Duration::from_secs(20), || {
        config
            .join(format!("watchers/{SESSION}-{CHILD}.pid"))
            .exists()
    });
    assert!(lock_held);
    let mut second = kcap_watch(&config);
    second.args(["watch", "--once"]).arg(&rollout);
    let out = run(second, T);
    let _ = first.kill();
    let _ = first.wait();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(stderr(&out).contains("already running"));
}
