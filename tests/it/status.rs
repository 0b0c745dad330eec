//! `kcap-watch status` with the real binary: an empty machine, a session held by the kcap CLI's
//! watcher (stand-in pid files naming a live process), kcap-watch's stale files listed and
//! removed by `--clean` only where their lock can be taken, and the spool backlog, refused
//! lines and needs-import marker of a session. The daemon and supervisor rows are covered by
//! `daemon::`.
//!
//! Run on Linux and, under Wine, on Windows; the tests that need file modes or symbolic links
//! are unix only (Windows has neither modes nor links an unprivileged user may make).

use crate::support;

use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::bin::{kcap_watch, run, stdout};

const SESSION: &str = "019fa9812dca7a319c553b1f0e6d2a01";
const CHILD: &str = "019fa9816ea27b028d115c2e9f7a4b02";

fn status(config: &Path, extra: &[&str]) -> (i32, Value) {
    let mut c = kcap_watch(config);
    c.args(["status", "--json"]).args(extra);
    let out = run(c, Duration::from_secs(20));
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    (out.status.code().unwrap(), v)
}

#[test]
fn an_empty_machine_is_an_empty_report() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, v) = status(&tmp.path().join("missing"), &[]);
    assert_eq!(code, 0);
    assert_eq!(v["version"], 1);
    assert_eq!(v["daemon"]["running"], false);
    assert_eq!(v["sessions"], serde_json::json!([]));
    assert_eq!(v["stale"], serde_json::json!([]));
    let mut c = kcap_watch(&tmp.path().join("missing"));
    c.arg("status");
    let text = stdout(&run(c, Duration::from_secs(20)));
    assert!(text.contains("daemon: not running"), "{text}");
}

/// Writes the kcap CLI's files for `key` naming process `pid` (its start token included).
fn kcap_cli_files(watchers: &Path, key: &str, pid: u32) {
    fs::create_dir_all(watchers).unwrap();
    let token = kcap_watch::files::process_start_token(pid).unwrap();
    fs::write(
        watchers.join(format!("{key}.pid")),
        format!("{pid}\n{token}"),
    )
    .unwrap();
    let now = kcap_watch::time::Ts::now().rfc3339();
    fs::write(watchers.join(format!("{key}.started")), &now).unwrap();
    fs::write(watchers.join(format!("{key}.heartbeat")), &now).unwrap();
}

#[test]
fn keys_the_kcap_cli_holds_are_named_with_pid_and_verdict_and_dead_ones_are_dead() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("kcap");
    let watchers = config.join("watchers");
    let holder = support::procs::Idle::start();
    let child_key = format!("{SESSION}-{CHILD}");
    kcap_cli_files(&watchers, &child_key, holder.id());
    // A session key whose watcher is gone.
    fs::write(watchers.join(format!("{SESSION}.pid")), "999999999\n").unwrap();
    let (code, v) = status(&config, &[]);
    assert_eq!(code, 0);
    let session = &v["sessions"][0];
    assert_eq!(session["session_id"], SESSION);
    let keys = session["keys"].as_array().unwrap();
    let child = keys.iter().find(|k| k["key"] == child_key).unwrap();
    assert_eq!(child["holder"], "kcap CLI");
    assert_eq!(child["pid"], holder.id());
    assert_eq!(child["verdict"], "alive");
    assert_eq!(child["agent_id"], CHILD);
    let own = keys.iter().find(|k| k["key"] == SESSION).unwrap();
    assert_eq!(own["verdict"], "dead");
    assert_eq!(own["holder"], Value::Null);
    holder.end();
}

/// Writes at `path` the status file of a `writer` whose process is gone.
fn write_gone_writers_status(path: &Path, writer: &str) {
    fs::write(
        path,
        serde_json::json!({
            "version": 1, "writer": writer, "pid": 999999999u32, "start_token": "lx:x:1",
            "updated_at": "2026-12-01T10:00:00Z", "kcap_watch_version": "0.1.0",
            "server": null, "session_id": SESSION, "keys": []
        })
        .to_string(),
    )
    .unwrap();
}

#[test]
fn stale_files_are_listed_and_clean_removes_only_those_whose_lock_it_can_take() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("kcap");
    let watchers = config.join("watchers");
    fs::create_dir_all(&watchers).unwrap();
    let dead = format!("{SESSION}-{CHILD}");
    let busy = format!("{SESSION}-0000000000000000000000000000000b");
    for key in [&dead, &busy] {
        fs::write(watchers.join(format!("{key}.lock")), "").unwrap();
        fs::write(watchers.join(format!("{key}.heartbeat-0")), "").unwrap();
    }
    // A live process holds the second key's lock.
    let held = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(watchers.join(format!("{busy}.lock")))
        .unwrap();
    held.try_lock().unwrap();
    // A status file of a writer that is gone.
    let status_dir = config.join("kcap-watch").join("status");
    fs::create_dir_all(&status_dir).unwrap();
    let stale_status = status_dir.join(format!("{dead}.watch.json"));
    write_gone_writers_status(&stale_status, "watch");
    let (code, v) = status(&config, &[]);
    assert_eq!(code, 0);
    let stale: Vec<String> = v["stale"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap().to_owned())
        .collect();
    let p = |name: String| watchers.join(name).display().to_string();
    assert!(stale.contains(&p(format!("{dead}.lock"))), "{stale:?}");
    assert!(
        stale.contains(&p(format!("{dead}.heartbeat-0"))),
        "{stale:?}"
    );
    assert!(
        stale.contains(&stale_status.display().to_string()),
        "{stale:?}"
    );
    assert!(
        !stale.contains(&p(format!("{busy}.lock"))),
        "a held lock is not stale"
    );
    assert!(!stale.contains(&p(format!("{busy}.heartbeat-0"))));

    let (code, v) = status(&config, &["--clean"]);
    assert_eq!(code, 0);
    assert!(!watchers.join(format!("{dead}.lock")).exists());
    assert!(!watchers.join(format!("{dead}.heartbeat-0")).exists());
    assert!(!stale_status.exists());
    assert_eq!(v["cleaned"].as_array().unwrap().len(), 3, "{v:#}");
    // Never a lock it cannot take, nor what that lock guards.
    assert!(watchers.join(format!("{busy}.lock")).exists());
    assert!(watchers.join(format!("{busy}.heartbeat-0")).exists());
    drop(held);
}

#[test]
fn spool_backlog_refused_lines_and_the_needs_import_marker_are_counted_per_session() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("kcap");
    let spool = config.join("transcript-spool");
    fs::create_dir_all(&spool).unwrap();
    fs::write(
        spool.join(format!("{SESSION}.transcript.jsonl")),
        "{\"a\":1}\n{\"b\":2}\n",
    )
    .unwrap();
    fs::write(spool.join(format!("{SESSION}.needs-import")), "x").unwrap();
    let refused = config.join("kcap-watch/refused");
    fs::create_dir_all(&refused).unwrap();
    fs::write(refused.join(format!("{SESSION}.jsonl")), "{\"r\":1}\n").unwrap();
    let (code, v) = status(&config, &[]);
    assert_eq!(code, 0);
    let s = &v["sessions"][0];
    assert_eq!(s["session_id"], SESSION);
    assert_eq!(s["transcript_spool_records"], 2);
    assert_eq!(s["transcript_spool_bytes"], 16);
    assert_eq!(s["refused_records"], 1);
    assert_eq!(s["needs_import"], true);
    let mut c = kcap_watch(&config);
    c.arg("status");
    let text = stdout(&run(c, Duration::from_secs(20)));
    assert!(text.contains(&format!("session {SESSION}")), "{text}");
    assert!(text.contains("spooled: 2 transcript records"), "{text}");
    assert!(text.contains("refused lines: 1"), "{text}");
    assert!(text.contains("needs `kcap import`"), "{text}");
}

#[cfg(unix)]
#[test]
fn an_unreadable_directory_is_exit_2() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("skipped: root reads any directory, so none can be made unreadable");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("kcap");
    let watchers = config.join("watchers");
    fs::create_dir_all(&watchers).unwrap();
    fs::set_permissions(&watchers, fs::Permissions::from_mode(0o000)).unwrap();
    let (code, v) = status(&config, &[]);
    fs::set_permissions(&watchers, fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(code, 2);
    assert_eq!(v["unreadable"].as_array().unwrap().len(), 1);
}

/// kcap-watch never writes its status files through a symbolic link, so `status` does not
/// read through one either: a link at `<config>/kcap-watch/status` is reported (exit 2) and
/// `--clean` removes nothing where it points.
#[cfg(unix)]
#[test]
fn a_symbolic_link_at_the_status_directory_is_not_followed_and_clean_removes_nothing_through_it() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("kcap");
    fs::create_dir_all(config.join("kcap-watch")).unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    // A file there that reads as a stale status file of a writer that is gone.
    let victim = elsewhere.join(format!("{SESSION}.supervise.json"));
    write_gone_writers_status(&victim, "supervise");
    std::os::unix::fs::symlink(&elsewhere, config.join("kcap-watch/status")).unwrap();
    let (code, v) = status(&config, &["--clean"]);
    assert_eq!(code, 2, "{v:#}");
    assert!(victim.exists(), "--clean removed a file through the link");
    assert_eq!(v["cleaned"], serde_json::json!([]));
    assert!(
        v["unreadable"][0]
            .as_str()
            .is_some_and(|u| u.contains("symbolic link")),
        "{v:#}"
    );
}

/// A spool reached through a symbolic link is not counted as the session's backlog.
#[cfg(unix)]
#[test]
fn a_spool_behind_a_symbolic_link_is_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("kcap");
    let spool = config.join("transcript-spool");
    fs::create_dir_all(&spool).unwrap();
    let elsewhere = tmp.path().join("big.jsonl");
    fs::write(&elsewhere, "{}\n".repeat(5)).unwrap();
    std::os::unix::fs::symlink(
        &elsewhere,
        spool.join(format!("{SESSION}.transcript.jsonl")),
    )
    .unwrap();
    fs::write(spool.join(format!("{SESSION}.needs-import")), "x").unwrap();
    let (code, v) = status(&config, &[]);
    assert_eq!(code, 0);
    assert_eq!(v["sessions"][0]["transcript_spool_records"], 0, "{v:#}");
}
