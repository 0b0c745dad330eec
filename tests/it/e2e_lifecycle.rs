//! Lifecycle end to end: the real binary, the fake kcap server, short windows through flags.
//! One stop per child (even across re-engagement and a failing server), a restarted watcher
//! still posting it, session-end on idle, and a pending tool call holding off idle end.

use crate::support;
use support::bin::SpawnRetry;
use support::harness::append_lines as append;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use support::FakeKcap;
use support::Fault;
use support::bin::{kcap_watch, wait_exit, wait_output};
use support::lifecycle_table::{self, DAY, HEADER_AT};
use support::rollout;

const SESSION: &str = "019fa9812dca7a319c553b1f0e6d2a01";
const CHILD: &str = "019fa9816ea27b028d115c2e9f7a4b02";
const W: Duration = Duration::from_secs(30);

fn child_meta() -> String {
    rollout::child_meta(CHILD, SESSION, "/root/spec_quality", "Hypatia").at("10:00:00")
}

fn started() -> String {
    rollout::task_started("t1").text()
}

fn complete(msg: &str) -> String {
    rollout::task_complete("t1", msg).text()
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

    /// A copy of the parent-session fixture (a session rollout, freshly modified).
    fn session_fixture() -> Run {
        let run = Run::new(&[]);
        // Written anew, not `fs::copy`: on Windows a copy keeps the fixture's old mtime.
        std::fs::write(
            &run.rollout,
            std::fs::read(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/codex/parent-session.jsonl"),
            )
            .unwrap(),
        )
        .unwrap();
        run
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config")
    }

    fn spawn(&self, server: &FakeKcap, flags: &[&str], env: &[(&str, &str)]) -> Child {
        let mut cmd = kcap_watch(&self.config());
        cmd.env("KCAP_URL", server.url())
            .args(["watch"])
            .arg(&self.rollout)
            .args(["--poll-interval", "50ms"])
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn_retrying().unwrap()
    }
}

#[test]
fn a_completed_child_turn_gets_exactly_one_stop_even_after_re_engagement_then_reaps() {
    let server = FakeKcap::start();
    let run = Run::new(&[child_meta(), started()]);
    let child = run.spawn(&server, &["--stop-grace", "1s", "--reap-after", "4s"], &[]);
    append(&run.rollout, &[complete("first answer")]);
    assert!(server.wait_until(W, |s| s.hooks("subagent-stop").len() == 1));
    let stop = &server.hooks("subagent-stop")[0];
    assert_eq!(stop["agent_type"], "spec_quality");
    assert_eq!(stop["last_assistant_message"], "first answer");
    assert_eq!(stop["session_id"], SESSION);
    assert_eq!(stop["agent_id"], CHILD);
    // Every line up to the turn's end was stored before the stop.
    assert_eq!(server.lines(SESSION, CHILD).len(), 3);
    // Re-engagement and a second completion: no second stop.
    append(&run.rollout, &[started(), complete("second answer")]);
    let out = wait_output(child, W);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("idle_reap"), "{stderr}");
    assert_eq!(server.hooks("subagent-stop").len(), 1);
    assert_eq!(server.request_count("subagent-stop"), 1);
    assert_eq!(
        server.lines(SESSION, CHILD).len(),
        5,
        "everything shipped before exit"
    );
    assert!(
        server.hooks("session-end/codex").is_empty(),
        "a child never posts session-end"
    );
}

#[test]
fn a_server_failing_the_first_stop_attempts_still_gets_exactly_one_successful_stop() {
    let server = FakeKcap::start();
    server.fail_next_on("subagent-stop", 2, Fault::Status(503));
    let run = Run::new(&[child_meta(), started(), complete("done")]);
    let mut child = run.spawn(
        &server,
        &["--stop-grace", "0s"],
        &[("KCAP_WATCH_STOP_RETRY_MS", "200")],
    );
    assert!(server.wait_until(W, |s| s.hooks("subagent-stop").len() == 1));
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        server.request_count("subagent-stop"),
        3,
        "two failures, one success, then latched"
    );
    assert_eq!(server.hooks("subagent-stop").len(), 1);
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("subagent_stop_failed"));
}

#[test]
fn a_watcher_killed_after_the_turn_end_was_shipped_posts_the_stop_after_restart() {
    let server = FakeKcap::start();
    let run = Run::new(&[child_meta(), started(), complete("done")]);
    let mut first = run.spawn(&server, &["--stop-grace", "1h"], &[]);
    assert!(server.wait_until(W, |s| s.lines(SESSION, CHILD).len() == 3));
    let _ = first.kill(); // SIGKILL: no shutdown of any kind
    let _ = first.wait();
    assert!(server.hooks("subagent-stop").is_empty());
    let mut second = run.spawn(&server, &["--stop-grace", "1s"], &[]);
    assert!(server.wait_until(W, |s| s.hooks("subagent-stop").len() == 1));
    let _ = second.kill();
    let _ = second.wait();
    // The restarted watcher resumed from the watermark: nothing was shipped twice.
    let transcript_posts = server.requests_to("transcript");
    let resent: usize = transcript_posts
        .iter()
        .filter_map(|r| r.json())
        .map(|b| b["line_numbers"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(resent, 3);
}

#[test]
fn a_session_rollout_gets_session_end_idle_timeout() {
    let server = FakeKcap::start();
    let run = Run::session_fixture();
    let mut child = run.spawn(&server, &["--idle-end", "2s"], &[]);
    let status = wait_exit(&mut child, W);
    assert!(status.success());
    let ends = server.hooks("session-end/codex");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["reason"], "idle_timeout");
    assert_eq!(ends[0]["session_id"], SESSION);
    assert_eq!(ends[0]["cwd"], "/home/dev/src/acme-api");
    assert_eq!(ends[0]["hook_event_name"], "session_end");
    assert!(server.hooks("subagent-stop").is_empty());
}

#[test]
fn a_pending_wait_agent_call_prevents_idle_end() {
    let server = FakeKcap::start();
    let call = rollout::call("call-wait", "wait_agent", "{}").text();
    let run = Run::new(&[child_meta(), started(), call]);
    let mut child = run.spawn(&server, &["--reap-after", "1s", "--stop-grace", "0s"], &[]);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        child.try_wait().unwrap().is_none(),
        "a silent tool is not idleness"
    );
    let output = rollout::output("call-wait", "done").text();
    append(&run.rollout, &[output]);
    let status = wait_exit(&mut child, W);
    assert!(status.success());
    assert_eq!(server.lines(SESSION, CHILD).len(), 4);
    // The turn never ended, but a reaped child owes its stop (docs/behaviour.md R4.4): no card spins
    // after its watcher is gone.
    assert_eq!(server.hooks("subagent-stop").len(), 1);
}

#[test]
fn a_session_watcher_posts_session_end_parent_exited_when_its_parent_exits() {
    let server = FakeKcap::start();
    let run = Run::session_fixture();
    let parent = support::procs::Idle::start();
    let pid = parent.id().to_string();
    let mut child = run.spawn(&server, &["--parent-pid", &pid], &[]);
    // The parent exits once the watcher runs (has taken its key).
    let watchers = run.config().join("watchers");
    assert!(support::bin::wait_for(W, || {
        std::fs::read_dir(&watchers).is_ok_and(|mut d| d.next().is_some())
    }));
    parent.end();
    let status = wait_exit(&mut child, W);
    assert!(status.success());
    let ends = server.hooks("session-end/codex");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["reason"], "parent_exited");
    assert_eq!(
        server.lines(SESSION, "").len(),
        support::bin::physical_lines(&run.rollout).len(),
        "everything shipped before exit"
    );
}

/// A watcher the kcap CLI spawns may have a terminal as its ancestor: closing that terminal
/// (`SIGHUP`) must not end it, or its parent's exit would never be reported. It leaves the
/// terminal's session, logs a hangup that reaches it anyway, and ends when its parent does.
#[cfg(target_os = "linux")]
#[test]
fn a_spawned_watcher_survives_sighup_and_ends_when_its_parent_exits() {
    use std::io::BufRead;
    let server = FakeKcap::start();
    let run = Run::session_fixture();
    let mut parent = std::process::Command::new("sleep")
        .arg("600")
        .spawn_retrying()
        .unwrap();
    let pid = parent.id().to_string();
    let mut child = run.spawn(&server, &["--parent-pid", &pid], &[]);
    let (tx, log) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let wait_log = |needle: &str| {
        let deadline = std::time::Instant::now() + W;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match log.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(e) => panic!("no log line with {needle:?}: {e}"),
            }
        }
    };
    wait_log("watcher_started");
    // It left the terminal's session: its session id (field 6 of /proc/<pid>/stat) is its pid.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let session: u32 = after_name.split(' ').nth(3).unwrap().parse().unwrap();
    assert_eq!(session, child.id(), "setsid when spawned with --parent-pid");

    support::bin::signal(&child, libc::SIGHUP);
    wait_log("sighup_ignored");
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGHUP ended the watcher"
    );
    assert!(server.hooks("session-end/codex").is_empty());

    parent.kill().unwrap();
    parent.wait().unwrap();
    let status = wait_exit(&mut child, W);
    assert!(status.success(), "{status:?}");
    let ends = server.hooks("session-end/codex");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["reason"], "parent_exited");
}

// Unix only: the watcher is ended with SIGTERM, which Windows does not have.
#[test]
#[cfg(unix)]
fn sigterm_never_posts_session_end() {
    let server = FakeKcap::start();
    let run = Run::session_fixture();
    let child = run.spawn(&server, &[], &[]);
    assert!(server.wait_until(W, |s| !s.lines(SESSION, "").is_empty()));
    support::bin::signal(&child, libc::SIGTERM);
    let out = wait_output(child, W);
    assert!(out.status.success());
    assert!(server.hooks("session-end/codex").is_empty());
}

/// CPU time (user + system) a process has used, from `/proc/<pid>/stat`.
// Linux only: reads /proc/<pid>/stat.
#[cfg(target_os = "linux")]
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    // Fields 14 and 15 of stat (utime, stime) are at 11 and 12 after the comm.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

// Linux only: the CPU spent while waiting is read from /proc/<pid>/stat.
#[test]
#[cfg(target_os = "linux")]
fn a_due_stop_waiting_for_a_failing_server_does_not_spin() {
    let server = FakeKcap::start();
    server.fail_always(Some("transcript"), Fault::Status(500));
    let run = Run::new(&[child_meta(), started(), complete("done")]);
    let mut child = run.spawn(&server, &["--stop-grace", "0s"], &[]);
    assert!(server.wait_until(W, |s| s.request_count("transcript") >= 1));
    let before = cpu_time(child.id());
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_time(child.id()) - before;
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        used < Duration::from_millis(60),
        "used {used:?} of CPU in 3 s"
    );
    assert!(
        server.hooks("subagent-stop").is_empty(),
        "no stop before the transcript is stored"
    );
}

#[test]
fn scenario_6_end_to_end_an_oversize_output_ships_as_the_loss_marker_and_its_raw_line_clears_the_call()
 {
    let server = FakeKcap::start();
    let call = rollout::call("call-big", "exec_command", "{}").text();
    let output = rollout::output("call-big", &"y".repeat(4 << 20)).text();
    let run = Run::new(&[child_meta(), started(), call, output.clone()]);
    let mut child = run.spawn(&server, &["--reap-after", "2s"], &[]);
    // Had the marker (no call_id) been folded, the call would still be in flight and would
    // block the reap.
    let status = wait_exit(&mut child, W);
    assert!(status.success());
    let stored = server.lines(SESSION, CHILD);
    assert_eq!(stored.len(), 4);
    let marker: serde_json::Value = serde_json::from_str(&stored[&3]).unwrap();
    assert_eq!(marker["type"], "kcap_capture_loss");
    assert_eq!(marker["reason"], "input_limit");
    assert_eq!(marker["input_utf8_bytes"], output.len() as u64);
    assert_eq!(marker["input_utf16_length"], output.len() as u64);
}

// Unix only: the watcher is ended with SIGTERM, which Windows does not have.
#[test]
#[cfg(unix)]
fn a_silent_open_turn_gets_one_stall_warning_per_silence_and_the_watcher_keeps_running() {
    let server = FakeKcap::start();
    let run = Run::new(&[child_meta(), started()]);
    let mut child = run.spawn(&server, &["--stall-after", "1s"], &[]);
    std::thread::sleep(Duration::from_millis(2500));
    // The next line re-arms it; a second silence warns again.
    append(&run.rollout, &[rollout::reasoning("still here").text()]);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "a stall never ends the watcher"
    );
    support::bin::signal(&child, libc::SIGTERM);
    let out = wait_output(child, W);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("stall_detected").count(), 2, "{stderr}");
    assert!(stderr.contains("turn_id=\"t1\""), "{stderr}");
}

/// The table of section 8 through the real binary: `inspect --line-times --now` folds each
/// line at its own timestamp, so the due time is checked a second before it, at it, and (for
/// the rows owing nothing) an hour after the last line, with no real time passing.
#[test]
fn lifecycle_table_at_the_binary_level() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    for (i, sc) in lifecycle_table::scenarios().into_iter().enumerate() {
        let what = format!("scenario {} ({})", sc.section, sc.name);
        let path = dir.path().join(format!("rollout-{i}.jsonl"));
        let mut lines = vec![lifecycle_table::header().at(HEADER_AT)];
        lines.extend(sc.lines.iter().map(|(at, l)| l.at(at)));
        append(&path, &lines);
        let last = sc.lines.last().map_or(HEADER_AT, |l| l.0);
        let inspect = |now: kcap_watch::time::Ts| -> serde_json::Value {
            let out = wait_output(
                kcap_watch(&config)
                    .args(["inspect", "--json", "--line-times", "--now", &now.rfc3339()])
                    .arg(&path)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn_retrying()
                    .unwrap(),
                W,
            );
            assert!(
                out.status.success(),
                "{what}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice(&out.stdout).expect("one JSON object")
        };
        let checks = match sc.stop_due {
            Some(due) => vec![
                lifecycle_table::at(due).minus(Duration::from_secs(1)),
                lifecycle_table::at(due),
            ],
            None => vec![lifecycle_table::at(last).plus(Duration::from_secs(3600))],
        };
        for now in checks {
            let r = inspect(now);
            let want = sc
                .stop_due
                .map(|due| serde_json::Value::from(format!("{DAY}T{due}.000Z")))
                .unwrap_or(serde_json::Value::Null);
            assert_eq!(
                r["due"]["subagent_stop"],
                want,
                "{what}: stop due, seen at {}",
                now.rfc3339()
            );
            assert_eq!(
                r["pending_tools"].as_array().map_or(0, Vec::len),
                sc.pending_calls,
                "{what}: pending calls"
            );
        }
    }
}
