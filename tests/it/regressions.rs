//! Regression cases of defects found from outside (docs/behaviour.md S4.1, S4.6), each named after the defect an
//! outside review reproduced, with the real binary against the fake kcap server.
// Watchers here are ended with SIGTERM or SIGKILL and the watcher directory is checked as the
// kcap CLI's spawner sees it on unix (hard-link counts of the heartbeat slots): unix only.
#![cfg(unix)]

use crate::support;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use support::FakeKcap;
use support::harness::{
    self, AGENT_ND, SESSION_ND, Sandbox, child_meta, stops_for_child, task_complete, task_started,
    wait_until,
};

const W: Duration = Duration::from_secs(30);

fn records(path: &Path) -> Vec<Value> {
    harness::spool_records(path)
}

fn numbers(records: &[Value]) -> Vec<u64> {
    harness::record_line_numbers(records)
}

fn transcript_spool(sb: &Sandbox) -> PathBuf {
    sb.config
        .join(format!("transcript-spool/{SESSION_ND}.transcript.jsonl"))
}

fn hook_spool(sb: &Sandbox) -> PathBuf {
    sb.config.join(format!("spool/{SESSION_ND}.jsonl"))
}

fn refused_file(sb: &Sandbox) -> PathBuf {
    sb.config
        .join(format!("kcap-watch/refused/{SESSION_ND}.jsonl"))
}

/// A child of `1 + 1 + extra + 1` lines: header, turn start, `extra` messages, turn end.
fn child_rollout(sb: &Sandbox, extra: usize) {
    let mut lines = vec![child_meta(), task_started("t1")];
    for i in 0..extra {
        lines.push(harness::message(&format!("working {i}")));
    }
    lines.push(task_complete("t1", "done"));
    sb.append_lines(&lines);
}

/// How many `/hooks/transcript` requests carried line `n`.
fn posts_of_line(server: &FakeKcap, n: u64) -> usize {
    server
        .requests_to("transcript")
        .iter()
        .filter(|r| {
            r.json().is_some_and(|b| {
                b["line_numbers"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x.as_u64() == Some(n)))
            })
        })
        .count()
}

fn replay(sb: &Sandbox, server: &FakeKcap) -> String {
    let mut r = sb.spawn(sb.cmd(Some(&server.url())).arg("replay"));
    assert_eq!(r.exit_code(W, "replay"), 0, "{}", r.stderr());
    r.stdout()
}

/// Issue 20, item 1, exactly as reported: a 43-line child spooled offline (one record), one
/// line the server answers 400 for, `replay` twice. Before the fix the server ended with none
/// of the 42 good lines and no stop, and every replay posted the same record again.
#[test]
fn replay_strands_a_session_behind_one_refused_line() {
    let server = FakeKcap::start();
    let sb = Sandbox::new();
    child_rollout(&sb, 40);
    let mut p = sb.spawn(&mut sb.watch(None, &["--once"]));
    assert_eq!(p.exit_code(W, "offline --once"), 0, "{}", p.stderr());
    let spooled = records(&transcript_spool(&sb));
    assert_eq!(spooled.len(), 1, "one spool record");
    assert_eq!(numbers(&spooled), (0..43).collect::<Vec<_>>());

    server.refuse_line(20, 400);
    let first = replay(&sb, &server);
    let posts_after_first = posts_of_line(&server, 20);
    let second = replay(&sb, &server);

    let got: BTreeSet<u64> = server.lines(SESSION_ND, AGENT_ND).keys().copied().collect();
    let want: BTreeSet<u64> = (0..43).filter(|&n| n != 20).collect();
    assert_eq!(got, want, "the 42 good lines reach the server");
    assert_eq!(
        stops_for_child(&server.hooks("subagent-stop")),
        1,
        "the stop goes out after the lines, once"
    );
    assert_eq!(
        posts_of_line(&server, 20),
        posts_after_first,
        "the second replay does not post the refused line again"
    );
    assert!(records(&transcript_spool(&sb)).is_empty(), "nothing kept");
    assert!(records(&hook_spool(&sb)).is_empty(), "the stop is not kept");
    let refused = records(&refused_file(&sb));
    assert_eq!(numbers(&refused), vec![20], "{refused:?}");
    assert_eq!(refused[0]["agent_id"], AGENT_ND);
    assert_eq!(refused[0]["vendor"], "codex");
    assert_eq!(
        refused[0]["lines"][0].as_str().unwrap(),
        String::from_utf8_lossy(&sb.rollout_bytes())
            .lines()
            .nth(20)
            .unwrap(),
        "the refused line is kept as it was spooled"
    );
    assert!(first.contains("set aside 1 line"), "{first}");
    assert!(!second.contains("set aside"), "{second}");
}

/// The class: several refused lines with different 4xx answers, in one record and across
/// records, are each isolated and set aside in order; every other line and the stop are
/// delivered, and the records of a session (no agent) are handled the same way.
#[test]
fn replay_sets_every_refused_line_aside_and_delivers_the_rest() {
    let server = FakeKcap::start();
    let sb = Sandbox::new();
    child_rollout(&sb, 40);
    let mut p = sb.spawn(&mut sb.watch(None, &["--once"]));
    assert_eq!(p.exit_code(W, "first offline run"), 0, "{}", p.stderr());
    // The child re-engages: a second record of the same stream.
    sb.append_lines(&[
        task_started("t2"),
        harness::message("again"),
        task_complete("t2", "done again"),
    ]);
    let mut p = sb.spawn(&mut sb.watch(None, &["--once"]));
    assert_eq!(p.exit_code(W, "second offline run"), 0, "{}", p.stderr());
    assert!(records(&transcript_spool(&sb)).len() >= 2);

    for (line, status) in [(0, 422), (1, 413), (41, 400), (44, 409)] {
        server.refuse_line(line, status);
    }
    let out = replay(&sb, &server);
    let got: BTreeSet<u64> = server.lines(SESSION_ND, AGENT_ND).keys().copied().collect();
    let want: BTreeSet<u64> = (0..46).filter(|n| ![0, 1, 41, 44].contains(n)).collect();
    assert_eq!(got, want);
    assert_eq!(numbers(&records(&refused_file(&sb))), vec![0, 1, 41, 44]);
    assert!(records(&transcript_spool(&sb)).is_empty());
    assert!(stops_for_child(&server.hooks("subagent-stop")) >= 1);
    assert!(out.contains("set aside 4 line"), "{out}");
}

/// Issue 20, item 1, the watcher's half: a line the server refuses goes to `refused/`, never
/// to the transcript spool, where every `replay` would post it again (and hold the session's
/// lifecycle requests behind it).
#[test]
fn a_watcher_sets_a_refused_line_aside_instead_of_spooling_it_for_replay() {
    let server = FakeKcap::start();
    server.refuse_line(5, 400);
    let sb = Sandbox::new();
    child_rollout(&sb, 10);
    let mut p = sb.spawn(&mut sb.watch(Some(&server.url()), &[]));
    assert!(
        wait_until(W, || stops_for_child(&server.hooks("subagent-stop")) == 1),
        "{}",
        p.stderr()
    );
    assert_eq!(p.terminate(W), 0);
    assert_eq!(server.lines(SESSION_ND, AGENT_ND).len(), 12);
    assert_eq!(numbers(&records(&refused_file(&sb))), vec![5]);
    assert!(
        records(&transcript_spool(&sb)).is_empty(),
        "the refused line is not in the transcript spool"
    );
    let logged = p.events_named("ship_failed");
    assert!(
        logged
            .iter()
            .any(|e| e["fields"]["first"] == 5 && e["fields"]["last"] == 5),
        "logged with its number: {logged:?}"
    );
    let posts = posts_of_line(&server, 5);
    replay(&sb, &server);
    assert_eq!(
        posts_of_line(&server, 5),
        posts,
        "replay has nothing to post"
    );
}

/// Issue 20, item 6: a SIGKILLed watcher leaves its heartbeat slots behind; the next watcher
/// of the key removes them once it holds the lock (before the fix they stayed, and a watcher
/// that never came back left them for ever).
#[test]
fn heartbeat_slots_left_by_a_killed_watcher_stay_for_ever() {
    let sb = Sandbox::new();
    child_rollout(&sb, 2);
    let key = harness::child_key();
    let heartbeat = sb.heartbeat(&key);
    let slot = |i: usize| PathBuf::from(format!("{}-{i}", heartbeat.display()));
    let mut first = sb.spawn(&mut sb.watch(None, &[]));
    // The heartbeat has beaten at least once through its slots.
    assert!(wait_until(W, || slot(0).exists()), "{}", first.stderr());
    first.kill9();
    first.wait_or_fail(W, "SIGKILL");
    let lock = sb.watchers_dir().join(format!("{key}.lock"));
    assert!(lock.exists(), "SIGKILL leaves the lock file");
    // Keep the killed watcher's slot inodes alive under other names: a slot the successor
    // kept (and would reuse) instead of removing still has a second link.
    let kept: Vec<PathBuf> = (0..2)
        .filter(|&i| slot(i).exists())
        .map(|i| {
            let k = sb.dir.path().join(format!("kept-{i}"));
            std::fs::hard_link(slot(i), &k).unwrap();
            k
        })
        .collect();
    assert!(!kept.is_empty());

    let mut second = sb.spawn(&mut sb.watch(None, &[]));
    let pid_file = sb.watchers_dir().join(format!("{key}.pid"));
    let second_pid = second.pid().to_string();
    // The successor writes its pid file right after taking the lock (and the stale slots are
    // gone by then).
    assert!(
        wait_until(W, || std::fs::read_to_string(&pid_file)
            .is_ok_and(|t| t.lines().next() == Some(second_pid.as_str()))),
        "{}",
        second.stderr()
    );
    // One of the killed watcher's slots is also linked as `<key>.heartbeat` until the
    // successor's first beat replaces that name, which follows its pid file (it failed once
    // under load when read at the instant the pid file appeared): wait for that beat too.
    for k in &kept {
        assert!(
            wait_until(W, || std::fs::metadata(k).unwrap().nlink() == 1),
            "the killed watcher's slot {} is still linked in the watcher directory ({} links)",
            k.display(),
            std::fs::metadata(k).unwrap().nlink()
        );
    }
    assert_eq!(second.terminate(W), 0);
    for i in 0..2 {
        assert!(!slot(i).exists(), "a clean exit removes its slots");
    }
    assert!(
        !lock.exists(),
        "a clean exit removes the lock file it holds"
    );
}
