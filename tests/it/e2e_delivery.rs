//! Delivery v2 with the real binary (docs/behaviour.md R3): every numbered case that lost or misplaced
//! data, each against the fake kcap server or offline, asserting what a user would see on the
//! server and in the spools.
// Every test here ends the watcher with SIGTERM (or reads /proc): unix only. Windows is
// linted, not run (see the README's Platforms section).
#![cfg(unix)]

use crate::support;

use support::harness;

use std::path::Path;
use std::time::{Duration, Instant};

use harness::{
    AGENT_ND, SESSION_ND, Sandbox, child_meta, expected_lines, free_port, session_meta,
    task_complete, task_started, turn, wait_until,
};
use serde_json::Value;
use support::{FakeKcap, Fault};

const W: Duration = Duration::from_secs(20);

fn records(path: &Path) -> Vec<Value> {
    harness::spool_records(path)
}

fn spooled_numbers(sb: &Sandbox) -> Vec<u64> {
    let path = sb
        .config
        .join(format!("transcript-spool/{SESSION_ND}.transcript.jsonl"));
    harness::record_line_numbers(&records(&path))
}

fn hook_routes(sb: &Sandbox) -> Vec<String> {
    records(&sb.config.join(format!("spool/{SESSION_ND}.jsonl")))
        .iter()
        .map(|r| r["route"].as_str().unwrap_or("").to_string())
        .collect()
}

fn child_rollout(sb: &Sandbox, extra_lines: usize) {
    let mut lines = vec![child_meta(), task_started("t1")];
    for i in 0..extra_lines {
        lines.push(harness::message(&format!("working {i}")));
    }
    lines.push(task_complete("t1", "done"));
    sb.append_lines(&lines);
}

/// Case 1: SIGTERM while the first watermark request is in flight: the whole transcript
/// reaches the server, nothing is spooled.
#[test]
fn sigterm_during_the_first_watermark_still_ships_the_transcript() {
    let server = FakeKcap::start();
    server.fail_next_on("last-line", 1, Fault::Delay(Duration::from_millis(1200)));
    let sb = Sandbox::new();
    let mut lines = vec![session_meta()];
    lines.extend(turn(3));
    sb.append_lines(&lines);
    let mut p = sb.spawn(&mut sb.watch(Some(&server.url()), &[]));
    assert!(wait_until(W, || server.request_count("last-line") >= 1));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(p.terminate(W), 0, "{}", p.stderr());
    let want = expected_lines(&sb.rollout_bytes());
    assert_eq!(
        server.lines(SESSION_ND, "").len(),
        want.len(),
        "{}",
        p.stderr()
    );
    assert!(spooled_numbers(&sb).is_empty());
    assert!(server.hooks("session-end/codex").is_empty());
}

/// Case 3: a due stop the server answers with 500, then SIGTERM: it is in the hook spool.
#[test]
fn a_due_stop_not_delivered_is_spooled_at_exit() {
    let server = FakeKcap::start();
    server.fail_always(Some("subagent-stop"), Fault::Status(500));
    let sb = Sandbox::new();
    child_rollout(&sb, 1);
    let mut p = sb.spawn(&mut sb.watch(Some(&server.url()), &[]));
    assert!(wait_until(W, || server.request_count("subagent-stop") >= 1));
    assert_eq!(p.terminate(W), 0);
    assert_eq!(hook_routes(&sb), vec!["subagent-stop"], "{}", p.stderr());
    assert_eq!(server.lines(SESSION_ND, AGENT_ND).len(), 4);
}

/// Case 4: `--once` offline on a child rollout of more than 2,048 lines spools every line and
/// the due stop.
#[test]
fn once_offline_on_a_long_child_spools_every_line_and_the_stop() {
    let sb = Sandbox::new();
    child_rollout(&sb, 2100);
    let mut p = sb.spawn(&mut sb.watch(None, &["--once"]));
    assert_eq!(p.exit_code(W, "--once"), 0, "{}", p.stderr());
    assert_eq!(spooled_numbers(&sb).len(), 2103);
    assert_eq!(hook_routes(&sb), vec!["subagent-stop"], "{}", p.stdout());
}

/// Case 4: `--once` with the server unreachable spools lines and stop and exits 0, quickly:
/// once its 5 s without progress have passed, not after retrying for longer.
#[test]
fn once_with_the_server_unreachable_spools_and_exits_0() {
    let sb = Sandbox::new();
    child_rollout(&sb, 2);
    let url = format!("http://127.0.0.1:{}", free_port());
    let mut p = sb.spawn(&mut sb.watch(Some(&url), &["--once"]));
    assert_eq!(p.exit_code(W, "--once"), 0, "{}", p.stderr());
    // By its own log clock (process start-up, seconds under Wine, is not the behaviour):
    // the 5 s stall and a few seconds for what runs around it.
    let took = p
        .logged_until("watcher_exiting")
        .expect("a watcher_exiting record");
    assert!(took < Duration::from_secs(8), "{took:?}: {}", p.stderr());
    assert_eq!(spooled_numbers(&sb), vec![0, 1, 2, 3, 4]);
    assert_eq!(hook_routes(&sb), vec!["subagent-stop"]);
}

/// Case 5: a file replaced at its path by one with the same first line is a rewrite (exit 3),
/// not followed from the old offset.
#[test]
fn a_replacement_with_the_same_first_line_exits_3() {
    let sb = Sandbox::new();
    let meta = session_meta();
    sb.append_lines(&[meta.clone(), task_started("t1")]);
    let mut p = sb.spawn(&mut sb.watch(None, &[]));
    assert!(wait_until(W, || spooled_numbers(&sb).len() == 2));
    let copy = sb.dir.path().join("copy.jsonl");
    std::fs::write(
        &copy,
        format!(
            "{meta}\n{}\n{}\n",
            task_started("t9"),
            task_complete("t9", "x")
        ),
    )
    .unwrap();
    std::fs::rename(&copy, &sb.rollout).unwrap();
    assert_eq!(p.exit_code(W, "after the replacement"), 3, "{}", p.stderr());
    assert!(p.has_event("rollout_rewritten"));
}

/// Case 6: after `replay` delivered the spool, the next offline run spools nothing again.
#[test]
fn an_offline_run_after_replay_does_not_spool_the_file_again() {
    let server = FakeKcap::start();
    let sb = Sandbox::new();
    let mut lines = vec![session_meta()];
    lines.extend(turn(2));
    sb.append_lines(&lines);
    let mut p = sb.spawn(&mut sb.watch(None, &["--once"]));
    assert_eq!(p.exit_code(W, "first offline run"), 0);
    let n = spooled_numbers(&sb).len();
    assert!(n > 0);
    let mut r = sb.spawn(sb.cmd(Some(&server.url())).arg("replay"));
    assert_eq!(r.exit_code(W, "replay"), 0, "{}", r.stderr());
    assert_eq!(server.lines(SESSION_ND, "").len(), n);
    assert!(spooled_numbers(&sb).is_empty());
    let mut p = sb.spawn(&mut sb.watch(None, &["--once"]));
    assert_eq!(p.exit_code(W, "second offline run"), 0);
    assert!(
        spooled_numbers(&sb).is_empty(),
        "{:?}",
        spooled_numbers(&sb)
    );
}

/// Case 7: a server answering every batch with 400 is not stormed, and the refusals are
/// logged per range, not per line.
#[test]
fn a_server_refusing_everything_is_paced() {
    let server = FakeKcap::start();
    server.fail_always(Some("transcript"), Fault::Status(400));
    let sb = Sandbox::new();
    let mut lines = vec![session_meta()];
    lines.extend((0..200).map(|i| harness::message(&format!("m{i}"))));
    sb.append_lines(&lines);
    let mut p = sb.spawn(&mut sb.watch(Some(&server.url()), &[]));
    std::thread::sleep(Duration::from_secs(3));
    let sent = server.request_count("transcript");
    assert_eq!(p.terminate(W), 0);
    assert!(sent < 40, "{sent} transcript requests in 3 s");
    let errors = p
        .events_named("ship_failed")
        .iter()
        .filter(|e| e["level"] == "ERROR")
        .count();
    assert!(errors < sent, "{errors} error records for {sent} requests");
}

/// Case 7: `404` from /hooks/transcript names the URL once and backs off.
#[test]
fn a_wrong_kcap_url_path_is_named_once_and_backed_off() {
    let server = FakeKcap::start();
    server.fail_always(Some("transcript"), Fault::Status(404));
    let sb = Sandbox::new();
    sb.append_lines(&[session_meta(), task_started("t1")]);
    let mut p = sb.spawn(&mut sb.watch(Some(&server.url()), &[]));
    std::thread::sleep(Duration::from_secs(2));
    let sent = server.request_count("transcript");
    assert_eq!(p.terminate(W), 0);
    assert!(sent < 10, "{sent} requests");
    let named = p.events_named("wrong_server_path");
    assert_eq!(named.len(), 1, "{}", p.stderr());
    assert!(p.stderr().contains("/hooks/transcript"));
    // Kept, not dropped: spooled at exit.
    assert_eq!(spooled_numbers(&sb), vec![0, 1]);
}

/// Case 8: SIGTERM with a hung server: gone within 4 s, every unconfirmed line spooled.
#[test]
fn shutdown_with_a_hung_server_takes_at_most_4_s() {
    let server = FakeKcap::start();
    server.fail_always(Some("transcript"), Fault::Hang);
    let sb = Sandbox::new();
    let mut lines = vec![session_meta()];
    lines.extend(turn(2));
    sb.append_lines(&lines);
    let mut p = sb.spawn(&mut sb.watch(Some(&server.url()), &[]));
    assert!(wait_until(W, || server.request_count("transcript") >= 1));
    let t = Instant::now();
    assert_eq!(p.terminate(W), 0);
    let took = t.elapsed();
    eprintln!("shutdown took {took:?}");
    assert!(took <= Duration::from_secs(4), "shutdown took {took:?}");
    let want = expected_lines(&sb.rollout_bytes()).len();
    assert_eq!(spooled_numbers(&sb).len(), want);
}

/// Case 2: offline, a spool write that fails (here the spool path is a directory) keeps the
/// lines unconfirmed, names the session and first line, holds the stop back, and is retried
/// until it works.
#[test]
fn a_failing_spool_write_is_retried_and_the_stop_waits_for_its_lines() {
    let sb = Sandbox::new();
    let spool = sb
        .config
        .join(format!("transcript-spool/{SESSION_ND}.transcript.jsonl"));
    std::fs::create_dir_all(&spool).unwrap();
    child_rollout(&sb, 1);
    let mut p = sb.spawn(&mut sb.watch(None, &[]));
    assert!(wait_until(W, || p.has_event("spool_failed")));
    std::thread::sleep(Duration::from_millis(500));
    let failed = &p.events_named("spool_failed")[0];
    let text = failed.to_string();
    assert!(
        text.contains(SESSION_ND) && text.contains("line 0"),
        "{text}"
    );
    assert!(
        hook_routes(&sb).is_empty(),
        "the stop went ahead of its lines"
    );
    std::fs::remove_dir(&spool).unwrap();
    assert!(
        wait_until(W, || spooled_numbers(&sb) == vec![0, 1, 2, 3]),
        "{}",
        p.stderr()
    );
    assert!(wait_until(W, || hook_routes(&sb) == vec!["subagent-stop"]));
    assert_eq!(p.terminate(W), 0);
}

/// R3, the other side of case 5: Codex's own archive (a rename of the same file from
/// `<CODEX_HOME>/sessions/...` into `<CODEX_HOME>/archived_sessions/`) is not a rewrite. The
/// watcher keeps following the open file, ships what is appended afterwards and names the new
/// path in the stop it sends later.
#[test]
fn codexs_archive_rename_is_followed_not_taken_for_a_rewrite() {
    let mut sb = Sandbox::new();
    let day = sb.dir.path().join("codex/sessions/2026/07/28");
    std::fs::create_dir_all(&day).unwrap();
    std::fs::create_dir_all(sb.dir.path().join("codex/archived_sessions")).unwrap();
    sb.rollout = day.join("rollout-2026-07-28T10-00-00-child.jsonl");
    sb.append_lines(&[child_meta(), task_started("t1")]);
    let mut p = sb.spawn(&mut sb.watch(None, &[]));
    assert!(
        wait_until(W, || spooled_numbers(&sb).len() == 2),
        "{}",
        p.stderr()
    );

    let archived = sb
        .dir
        .path()
        .join("codex/archived_sessions/rollout-2026-07-28T10-00-00-child.jsonl");
    std::fs::rename(&sb.rollout, &archived).unwrap();
    sb.rollout = archived.clone();
    sb.append_lines(&[
        harness::message("after the archive"),
        task_complete("t1", "done"),
    ]);

    assert!(
        wait_until(W, || hook_routes(&sb)
            .contains(&"subagent-stop".to_string())),
        "no stop after the archive:\n{}",
        p.stderr()
    );
    assert_eq!(spooled_numbers(&sb), vec![0, 1, 2, 3], "{}", p.stderr());
    assert!(p.alive(), "the archive ended the watcher:\n{}", p.stderr());
    assert!(p.has_event("rollout_archived"), "{}", p.stderr());
    assert!(!p.has_event("rollout_rewritten"));
    let stop = records(&sb.config.join(format!("spool/{SESSION_ND}.jsonl")))
        .into_iter()
        .find(|r| r["route"] == "subagent-stop")
        .unwrap();
    let body: Value = serde_json::from_str(stop["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        body["agent_transcript_path"].as_str(),
        Some(archived.to_str().unwrap()),
        "the stop names the new path"
    );
    assert_eq!(p.terminate(W), 0);
}
