//! docs/behaviour.md R4 end to end: the real binary against the fake kcap server (or none), with
//! rollouts shaped as Codex 0.15x writes them. A usage limit at a stale 99 %, a child that
//! crashed mid-turn, a resumed session, and a sub-agent header that names no parent.

use crate::support;
use support::bin::SpawnRetry;
use support::harness::append_lines as append;

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::Value;
use support::FakeKcap;
use support::bin::run as run_to_end;
// SIGTERM: unix only.
#[cfg(unix)]
use support::bin::signal;
use support::bin::{kcap_watch, wait_exit, wait_output};
use support::rollout;

const SESSION: &str = "019fa9812dca7a319c553b1f0e6d2a01";
const CHILD: &str = "019fa9816ea27b028d115c2e9f7a4b02";
const W: Duration = Duration::from_secs(30);

fn child_meta() -> String {
    rollout::child_meta(CHILD, SESSION, "/root/migrator", "Hypatia").at("10:00:00")
}

fn session_meta() -> String {
    rollout::session_meta(
        r#"{"id":"019fa981-2dca-7a31-9c55-3b1f0e6d2a01","cwd":"/home/dev/src/acme-api","originator":"codex_exec","cli_version":"0.160.0"}"#,
    )
    .at("10:00:00")
}

fn ev(payload: &str) -> String {
    rollout::event(payload).text()
}

fn started(turn: &str) -> String {
    rollout::task_started(turn).text()
}

fn complete(turn: &str, msg: &str) -> String {
    rollout::task_complete(turn, msg).text()
}

/// A child that crashed mid-turn: a call answered, an agent message, then nothing.
fn crashed_child() -> Vec<String> {
    vec![
        child_meta(),
        started("t1"),
        rollout::call("c1", "exec_command", "{}").text(),
        rollout::output("c1", "ok").text(),
        ev(r#"{"type":"agent_message","message":"Halfway through the migration."}"#),
    ]
}

/// A process id that is certainly not running any more.
fn dead_pid() -> String {
    support::procs::exited_pid().to_string()
}

struct Run {
    dir: tempfile::TempDir,
    rollout: PathBuf,
}

impl Run {
    fn new(lines: &[String]) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let rollout = dir.path().join("rollout-child.jsonl");
        append(&rollout, lines);
        Run { dir, rollout }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config")
    }

    fn cmd(&self, url: Option<&str>, args: &[&str]) -> Command {
        let mut cmd = kcap_watch(&self.config());
        cmd.env("KCAP_LOG_FORMAT", "json").arg("watch");
        if let Some(url) = url {
            cmd.env("KCAP_URL", url);
        }
        cmd.arg(&self.rollout)
            .args(["--poll-interval", "50ms"])
            .args(args);
        cmd
    }

    fn spawn(&self, url: Option<&str>, args: &[&str]) -> Child {
        self.cmd(url, args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_retrying()
            .unwrap()
    }

    /// The hook spool's records of one route, their bodies parsed.
    fn spooled_hooks(&self, route: &str) -> Vec<Value> {
        let path = self.config().join(format!("spool/{SESSION}.jsonl"));
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["route"] == route)
            .map(|r| serde_json::from_str(r["body"].as_str().unwrap()).unwrap())
            .collect()
    }

    /// The line numbers in the transcript spool.
    fn spooled_line_numbers(&self) -> Vec<u64> {
        let dir = self.config().join("transcript-spool");
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            for rec in std::fs::read_to_string(e.path()).unwrap().lines() {
                let v: Value = serde_json::from_str(rec).unwrap();
                out.extend(
                    v["line_numbers"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|n| n.as_u64().unwrap()),
                );
            }
        }
        out.sort();
        out
    }
}

// Unix only: the watcher is ended with SIGTERM, which Windows does not have.
#[test]
#[cfg(unix)]
fn a_usage_limit_at_a_stale_99_percent_posts_the_stop_after_the_grace_with_codexs_message() {
    let server = FakeKcap::start();
    let now = kcap_watch::time::Ts::now();
    let five_hour = now.plus(Duration::from_secs(47 * 60)).as_millis() / 1000;
    let weekly = now.plus(Duration::from_secs(113 * 3600)).as_millis() / 1000;
    let secret = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZXYifQ.c2lnbmF0dXJlLXZhbHVlLWhlcmU";
    let message = format!(
        "You've hit your usage limit. Try again at 10:45 PM. token {secret} {}",
        "x".repeat(5000)
    );
    let run = Run::new(&[child_meta(), started("t1")]);
    let mut child = run.spawn(
        Some(&server.url()),
        &["--stop-grace", "1s", "--reap-after", "1s"],
    );
    let limit = [
        ev(&format!(
            r#"{{"type":"token_count","rate_limits":{{"limit_id":"codex","primary":{{"used_percent":99.0,"window_minutes":300,"resets_at":{five_hour}}},"secondary":{{"used_percent":62.0,"window_minutes":10080,"resets_at":{weekly}}},"plan_type":"plus"}}}}"#
        )),
        ev(&format!(
            r#"{{"type":"task_complete","turn_id":"t1","last_agent_message":null,"error":{{"message":{},"codex_error_info":"usage_limit_exceeded"}}}}"#,
            serde_json::to_string(&message).unwrap()
        )),
    ];
    // Append only once the watcher follows the file: lines it seeds at start are observed at
    // the file's modification time, which the kernel's coarse clock can put a few ms before
    // `appended`, and the grace check below must measure from a live observation.
    assert!(server.wait_until(W, |s| s.lines(SESSION, CHILD).len() == 2));
    let appended = Instant::now();
    append(&run.rollout, &limit);
    assert!(server.wait_until(W, |s| s.hooks("subagent-stop").len() == 1));
    assert!(
        appended.elapsed() >= Duration::from_secs(1),
        "the stop waits for the grace"
    );
    assert_eq!(
        server.lines(SESSION, CHILD).len(),
        4,
        "lines before the stop"
    );
    let stop = &server.hooks("subagent-stop")[0];
    let sent = stop["last_assistant_message"].as_str().unwrap();
    assert!(
        sent.starts_with("You've hit your usage limit. Try again at 10:45 PM."),
        "{sent}"
    );
    assert!(!sent.contains(secret), "redacted: {sent}");
    assert!(sent.len() <= 4096, "at most 4 KiB, got {}", sent.len());
    // The open pause keeps the 1 s reap away (it would end the watcher at once without it).
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "a pause holds the reap"
    );
    signal(&child, libc::SIGTERM);
    assert!(wait_exit(&mut child, W).success());
    assert_eq!(server.hooks("subagent-stop").len(), 1);
}

#[test]
fn a_crashed_child_with_the_server_down_spools_its_lines_then_its_stop_at_parent_exit() {
    let run = Run::new(&crashed_child());
    let down = format!("http://127.0.0.1:{}", support::harness::free_port());
    let pid = dead_pid();
    let out = wait_output(run.spawn(Some(&down), &["--parent-pid", &pid]), W);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("parent_exited"), "{stderr}");
    assert_eq!(run.spooled_line_numbers(), vec![0, 1, 2, 3, 4], "{stderr}");
    let stops = run.spooled_hooks("subagent-stop");
    assert_eq!(stops.len(), 1, "{stderr}");
    assert_eq!(stops[0]["agent_id"], CHILD);
    assert_eq!(
        stops[0]["last_assistant_message"],
        "Halfway through the migration."
    );
}

#[test]
fn a_crashed_childs_stop_is_never_spooled_ahead_of_its_lines() {
    let run = Run::new(&crashed_child());
    // The transcript spool cannot be written (a file where its directory goes).
    std::fs::create_dir_all(run.config()).unwrap();
    std::fs::write(run.config().join("transcript-spool"), b"").unwrap();
    let pid = dead_pid();
    let out = wait_output(run.spawn(None, &["--parent-pid", &pid]), W);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The failing spool does not hold the end: the watcher keeps trying until its 4 s
    // shutdown budget is spent and is gone then. Measured between its own log records
    // (parent seen gone, then its exit), not with the test's clock, which also counts
    // starting the process (seconds under Wine on a loaded machine); past the budget, only
    // scheduling.
    let records: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let at = |event: &str| {
        records
            .iter()
            .find(|v| v["fields"]["event"] == event)
            .and_then(|v| kcap_watch::time::Ts::parse_rfc3339(v["timestamp"].as_str()?))
            .unwrap_or_else(|| panic!("no {event} record: {stderr}"))
    };
    let ending = at("watcher_exiting").duration_since(at("parent_exited"));
    assert!(
        ending < Duration::from_secs(5),
        "the failing spool held the end for {ending:?}: {stderr}"
    );
    assert!(
        run.spooled_hooks("subagent-stop").is_empty(),
        "a stop whose lines are not kept is not spooled: {stderr}"
    );
    assert!(stderr.contains("not kept"), "{stderr}");
}

#[test]
fn a_crashed_child_gets_its_stop_posted_when_its_watcher_is_reaped() {
    let server = FakeKcap::start();
    let run = Run::new(&crashed_child());
    let out = wait_output(run.spawn(Some(&server.url()), &["--reap-after", "1s"]), W);
    assert!(out.status.success());
    let stops = server.hooks("subagent-stop");
    assert_eq!(stops.len(), 1);
    assert_eq!(
        stops[0]["last_assistant_message"],
        "Halfway through the migration."
    );
    assert_eq!(server.lines(SESSION, CHILD).len(), 5);
}

#[test]
fn a_resumed_session_idle_for_three_hours_ships_its_new_turn_and_gets_a_full_window() {
    let server = FakeKcap::start();
    let run = Run::new(&[
        session_meta(),
        started("t1"),
        complete("t1", "first answer"),
    ]);
    let three_hours_ago = std::time::SystemTime::now() - Duration::from_secs(3 * 3600);
    OpenOptions::new()
        .write(true)
        .open(&run.rollout)
        .unwrap()
        .set_modified(three_hours_ago)
        .unwrap();
    assert!(three_hours_ago > UNIX_EPOCH);
    let start = Instant::now();
    let mut watcher = run.spawn(Some(&server.url()), &["--idle-end", "3s"]);
    std::thread::sleep(Duration::from_millis(500));
    // `codex resume` appends the resumed turn to the old file.
    append(
        &run.rollout,
        &[started("t2"), complete("t2", "resumed answer")],
    );
    assert!(server.wait_until(W, |s| s.lines(SESSION, "").len() == 5));
    std::thread::sleep(Duration::from_millis(2000).saturating_sub(start.elapsed()));
    assert!(
        watcher.try_wait().unwrap().is_none(),
        "not ended within 2 s of its start"
    );
    assert!(wait_exit(&mut watcher, W).success());
    assert!(start.elapsed() >= Duration::from_secs(3));
    let ends = server.hooks("session-end/codex");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["reason"], "idle_timeout");
}

fn review_child() -> Run {
    let run = Run::new(&[]);
    // Written anew, not `fs::copy`: on Windows a copy keeps the fixture's old mtime.
    std::fs::write(
        &run.rollout,
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/codex/child-review-no-parent.jsonl"),
        )
        .unwrap(),
    )
    .unwrap();
    run
}

/// Every JSON log record's `role`, wherever it went (stderr and the log files).
fn roles_logged(stderr: &str, config: &Path) -> Vec<String> {
    let mut text = stderr.to_string();
    for e in std::fs::read_dir(config.join("logs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
    }
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            v.get("role")
                .or_else(|| v.get("fields").and_then(|f| f.get("role")))
                .and_then(|r| r.as_str().map(str::to_string))
        })
        .collect()
}

#[test]
fn a_review_child_without_a_parent_exits_2_with_its_own_message() {
    for once in [false, true] {
        let run = review_child();
        let cmd = run.cmd(None, if once { &["--once"] } else { &[] });
        let out = run_to_end(cmd, W);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "once={once}: {stderr}");
        assert!(
            stderr.contains("is a sub-agent (review) whose session_meta names no parent"),
            "once={once}: {stderr}"
        );
        assert!(stderr.contains("pass SESSION_ID"), "{stderr}");
        assert!(!stderr.contains("no readable session_meta"), "{stderr}");
        let roles = roles_logged(&stderr, &run.config());
        assert!(!roles.iter().any(|r| r == "session"), "{roles:?}");
    }
}

#[test]
fn a_review_child_with_both_ids_given_runs_as_a_child() {
    let run = review_child();
    let agent = "019fb1e4-1c07-7f88-a5d3-3a9e60c2b055";
    let mut cmd = kcap_watch(&run.config());
    cmd.env("KCAP_LOG_FORMAT", "json")
        .args(["watch", "--once", SESSION])
        .arg(&run.rollout)
        .args(["--agent-id", agent]);
    let out = run_to_end(cmd, W);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.starts_with(&format!("child {SESSION}/019fb1e41c077f88a5d33a9e60c2b055")),
        "{stdout}"
    );
    let roles = roles_logged(&stderr, &run.config());
    assert!(roles.iter().any(|r| r == "child"), "{roles:?} {stderr}");
    assert!(!roles.iter().any(|r| r == "session"), "{roles:?}");
}
