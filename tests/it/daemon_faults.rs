//! Issue 28: the daemon and `supervise` under load and faults, and what a user is told. Each
//! test is one class the outside review found (the stop's spool result dropped, a URL's secret
//! shown, descriptors spent per child ever held, ...), run with the real binary and real files.
// The tests read /proc, send signals or set rlimits on spawned processes: unix only (Windows is
// linted, not run; see the README's Platforms section).
#![cfg(unix)]

use crate::support;

use std::time::Duration;

use support::harness::{self, Sandbox, child_meta, free_port, task_complete, task_started};

const W: Duration = Duration::from_secs(20);

/// Item 7: `watch --once` against a server nobody answers spools the due stop, and reports
/// and logs where it went, not "due, not delivered".
#[test]
fn once_with_the_server_unreachable_reports_where_the_stop_was_spooled() {
    let sb = Sandbox::new();
    sb.append_lines(&[
        child_meta(),
        task_started("t1"),
        task_complete("t1", "done"),
    ]);
    let url = format!("http://127.0.0.1:{}", free_port());
    let mut p = sb.spawn(&mut sb.watch(Some(&url), &["--once"]));
    assert_eq!(p.exit_code(W, "--once"), 0, "{}", p.stderr());
    let hook_spool = sb
        .config
        .join(format!("spool/{}.jsonl", harness::SESSION_ND));
    let out = p.stdout();
    assert!(
        out.contains(&format!(
            "subagent-stop: spooled to {}",
            hook_spool.display()
        )),
        "{out}"
    );
    assert!(!out.contains("not delivered"), "{out}");
    let stop_spooled = p
        .events_named("spooled")
        .iter()
        .filter(|e| e["fields"]["route"] == "subagent-stop")
        .count();
    assert_eq!(
        stop_spooled,
        1,
        "the log says nothing of the spooled stop:\n{}",
        p.stderr()
    );
}

/// Item 7, the same path at a signal: with the server down, the stop spooled at SIGTERM is
/// logged as spooled (before, the ending was over before the spool's answer came back).
#[test]
fn a_stop_spooled_at_a_signal_with_the_server_down_is_logged_as_spooled() {
    let sb = Sandbox::new();
    sb.append_lines(&[
        child_meta(),
        task_started("t1"),
        task_complete("t1", "done"),
    ]);
    let url = format!("http://127.0.0.1:{}", free_port());
    let mut p = sb.spawn(&mut sb.watch(Some(&url), &[]));
    assert!(harness::wait_until(W, || p.has_event("ship_failed")));
    assert_eq!(p.terminate(W), 0, "{}", p.stderr());
    let routes: Vec<String> = harness::spool_records(
        &sb.config
            .join(format!("spool/{}.jsonl", harness::SESSION_ND)),
    )
    .iter()
    .map(|r| r["route"].as_str().unwrap_or("").to_owned())
    .collect();
    assert_eq!(routes, vec!["subagent-stop"], "{}", p.stderr());
    assert!(
        p.events_named("spooled")
            .iter()
            .any(|e| e["fields"]["route"] == "subagent-stop"),
        "the log says nothing of the spooled stop:\n{}",
        p.stderr()
    );
}
