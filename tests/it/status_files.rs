//! The status files of docs/behaviour.md S3, written by the real binary: a running `watch`
//! keeps `<config>/kcap-watch/status/<key>.watch.json` with its figures (lines on disk,
//! confirmed by the server, the stop) and removes it when it ends cleanly. The `supervise`
//! side (`<session>.supervise.json`, one line per child, `held` after a reap) is checked in
//! `supervise::reengaged_child_after_reap_is_shipped_in_full`.

// Unix only: each test asks for a clean exit with SIGTERM, which Windows does not have.
#![cfg(unix)]

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kcap_watch::status_file::{self, StatusFile, Writer};
use support::FakeKcap;
use support::harness::{
    self, AGENT_ND, SESSION_ND, Sandbox, child_key, child_meta, task_complete, task_started,
    wait_until,
};

const W: Duration = Duration::from_secs(20);

fn status_of(config: &Path, key: &str, writer: Writer) -> Option<StatusFile> {
    status_file::read(&status_file::status_path(config, key, writer))
        .ok()
        .flatten()
}

fn status_dir_entries(config: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(status_file::status_dir(config))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

#[test]
fn watch_keeps_its_status_file_while_it_runs_and_removes_it_at_a_clean_exit() {
    let server = FakeKcap::start();
    let sb = Sandbox::new();
    let lines = [
        child_meta(),
        task_started("t1"),
        harness::message("working"),
        task_complete("t1", "done"),
    ];
    sb.append_lines(&lines);
    let mut p = sb.spawn(&mut sb.watch(Some(&server.url()), &[]));
    // Within the 2 s pacing of a change: every line confirmed and the stop posted.
    let settled = wait_until(W, || {
        status_of(&sb.config, &child_key(), Writer::Watch).is_some_and(|s| {
            s.keys.len() == 1 && s.keys[0].lines_confirmed == 4 && s.keys[0].stop_posted
        })
    });
    let status = status_of(&sb.config, &child_key(), Writer::Watch);
    assert!(
        settled,
        "status file never settled: {status:?}\n{}",
        p.stderr()
    );
    let s = status.unwrap();
    assert_eq!(s.pid, p.pid());
    assert!(s.writer_alive(), "a live writer's file reads as stale");
    assert_eq!(s.server.as_deref(), Some(server.url().as_str()));
    assert_eq!(s.session_id, SESSION_ND);
    let k = &s.keys[0];
    assert_eq!(k.key, child_key());
    assert_eq!(k.agent_id.as_deref(), Some(AGENT_ND));
    assert_eq!(
        (k.state.as_str(), k.turn.as_str(), k.lines_on_disk),
        ("following", "completed", 4)
    );
    assert_eq!((k.lines_spooled, k.lines_refused), (0, 0));
    assert!(k.last_error.is_none(), "{:?}", k.last_error);
    // The child's reap is the next decision.
    assert_eq!(
        k.next_due.as_ref().map(|d| d.decision.as_str()),
        Some("idle_end")
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let path = status_file::status_path(&sb.config, &child_key(), Writer::Watch);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    assert_eq!(p.terminate(W), 0, "{}", p.stderr());
    assert!(
        status_dir_entries(&sb.config).is_empty(),
        "left behind: {:?}",
        status_dir_entries(&sb.config)
    );
}

#[test]
fn a_failing_server_is_the_status_files_last_error() {
    let server = FakeKcap::start();
    server.fail_always(Some("transcript"), support::Fault::Status(503));
    let sb = Sandbox::new();
    sb.append_lines(&[child_meta(), task_started("t1")]);
    let mut p = sb.spawn(&mut sb.watch(Some(&server.url()), &[]));
    let failed = wait_until(W, || {
        status_of(&sb.config, &child_key(), Writer::Watch).is_some_and(|s| {
            s.keys
                .first()
                .and_then(|k| k.last_error.as_ref())
                .is_some_and(|e| e.event == "ship_failed" && e.message.contains("503"))
        })
    });
    assert!(
        failed,
        "{:?}\n{}",
        status_of(&sb.config, &child_key(), Writer::Watch),
        p.stderr()
    );
    let s = status_of(&sb.config, &child_key(), Writer::Watch).unwrap();
    assert_eq!(s.keys[0].lines_confirmed, 0);
    assert_eq!(s.keys[0].lines_on_disk, 2);
    assert_eq!(p.terminate(W), 0, "{}", p.stderr());
    assert!(status_of(&sb.config, &child_key(), Writer::Watch).is_none());
}
