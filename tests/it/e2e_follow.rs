//! Follow mode with the real binary, offline (the transcript spool is the output): appends
//! appear, a late file is picked up, a partial line becomes one line, a deleted file is read to
//! its end, forced polling works, and a rewritten file ends the watcher with exit code 3.
//! The watcher is ended as a user ends it: SIGTERM on unix, Ctrl-Break on Windows.

use crate::support;
use support::bin::SpawnRetry;
use support::harness::append_bytes as append;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use kcap_watch::platform::signals::{request_stop, stoppable};
use serde_json::Value;
use support::bin::{kcap_watch, wait_exit, wait_for, wait_output};
use support::rollout;

const SESSION: &str = "0199aaaa000070008000000000000001";
const W: Duration = Duration::from_secs(20);

fn meta() -> String {
    rollout::session_meta(r#"{"id":"0199aaaa-0000-7000-8000-000000000001","cwd":"/w"}"#)
        .at("10:00:00")
}

fn msg(i: usize) -> String {
    rollout::message(&format!("line {i}")).text()
}

struct Follow {
    child: Child,
    config: PathBuf,
    rollout: PathBuf,
    _dir: tempfile::TempDir,
}

fn start(extra: &[&str], create: bool) -> Follow {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let rollout = dir.path().join("sessions").join("rollout.jsonl");
    std::fs::create_dir_all(rollout.parent().unwrap()).unwrap();
    if create {
        append(&rollout, format!("{}\n", meta()).as_bytes());
    }
    let mut cmd = kcap_watch(&config);
    stoppable(&mut cmd);
    let child = cmd
        .args(["watch", SESSION])
        .arg(&rollout)
        .args(["--poll-interval", "100ms"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn_retrying()
        .unwrap();
    Follow {
        child,
        config,
        rollout,
        _dir: dir,
    }
}

impl Follow {
    /// Line numbers and texts in the transcript spool, in arrival order.
    fn spooled(&self) -> Vec<(u64, String)> {
        let path = self
            .config
            .join(format!("transcript-spool/{SESSION}.transcript.jsonl"));
        let Ok(text) = std::fs::read_to_string(path) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for rec in text.lines() {
            let v: Value = serde_json::from_str(rec).unwrap();
            for (n, l) in v["line_numbers"]
                .as_array()
                .unwrap()
                .iter()
                .zip(v["lines"].as_array().unwrap())
            {
                out.push((n.as_u64().unwrap(), l.as_str().unwrap().to_string()));
            }
        }
        out
    }

    /// SIGTERM (Ctrl-Break on Windows); returns stderr and the temp dir (kept alive for the
    /// caller's checks).
    fn stop_keep(self) -> (String, tempfile::TempDir) {
        request_stop(self.child.id()).expect("send the watcher SIGTERM (Ctrl-Break)");
        let out = wait_output(self.child, W);
        assert!(
            out.status.success(),
            "SIGTERM (Ctrl-Break) ends the watcher with 0"
        );
        (String::from_utf8_lossy(&out.stderr).into_owned(), self._dir)
    }

    fn stop(self) -> String {
        self.stop_keep().0
    }

    fn exit_code(&mut self) -> Option<i32> {
        wait_exit(&mut self.child, W).code()
    }
}

#[test]
fn appended_lines_appear_in_the_spool_in_order_with_physical_numbers() {
    let f = start(&[], true);
    assert!(wait_for(W, || f.spooled().len() == 1));
    append(&f.rollout, format!("{}\n\n{}\n", msg(1), msg(2)).as_bytes());
    assert!(wait_for(W, || f.spooled().len() == 3));
    let got = f.spooled();
    assert_eq!(
        got.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        vec![0, 1, 3]
    );
    assert_eq!(got[2].1, msg(2));
    f.stop();
}

#[test]
fn a_file_created_after_the_watcher_starts_is_picked_up() {
    let f = start(&[], false);
    std::thread::sleep(Duration::from_millis(300));
    append(&f.rollout, format!("{}\n{}\n", meta(), msg(1)).as_bytes());
    assert!(wait_for(W, || f.spooled().len() == 2), "{:?}", f.spooled());
    f.stop();
}

#[test]
fn a_partial_line_written_in_two_halves_becomes_exactly_one_line() {
    let f = start(&[], true);
    // The watcher follows the file before the half is written (on a loaded machine its start
    // alone can take longer than the wait below).
    assert!(wait_for(W, || f.spooled().len() == 1));
    let line = msg(7);
    let (a, b) = line.split_at(line.len() / 2);
    append(&f.rollout, a.as_bytes());
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(f.spooled().len(), 1, "a partial line is not a line");
    append(&f.rollout, format!("{b}\n").as_bytes());
    assert!(wait_for(W, || f.spooled().len() == 2));
    assert_eq!(f.spooled()[1], (1, line));
    f.stop();
}

#[test]
fn a_deleted_file_is_read_to_its_end_without_an_error() {
    let f = start(&[], true);
    assert!(wait_for(W, || f.spooled().len() == 1));
    // Written and removed before the watcher looks again: the open handle still has it.
    append(&f.rollout, format!("{}\n", msg(1)).as_bytes());
    std::fs::remove_file(&f.rollout).unwrap();
    assert!(wait_for(W, || f.spooled().len() == 2));
    let stderr = f.stop();
    assert!(!stderr.contains("ERROR"), "{stderr}");
}

#[test]
fn forced_polling_still_follows_the_file() {
    let f = start(&["--force-poll"], true);
    append(&f.rollout, format!("{}\n", msg(1)).as_bytes());
    assert!(wait_for(W, || f.spooled().len() == 2));
    let stderr = f.stop();
    assert!(stderr.contains("polling"), "says it polls: {stderr}");
}

#[test]
fn truncating_the_file_below_the_read_position_exits_3() {
    let mut f = start(&[], true);
    append(&f.rollout, format!("{}\n{}\n", msg(1), msg(2)).as_bytes());
    assert!(wait_for(W, || f.spooled().len() == 3));
    std::fs::write(&f.rollout, format!("{}\n", meta())).unwrap();
    assert_eq!(f.exit_code(), Some(3));
}

#[test]
fn replacing_the_first_line_exits_3() {
    let mut f = start(&[], true);
    assert!(wait_for(W, || f.spooled().len() == 1));
    let other = meta().replace("/w", "/other-cwd-that-is-longer");
    // Same length or longer: only the first-line check can notice.
    let mut text = format!("{other}\n");
    text.push_str(&format!("{}\n", msg(1)));
    let tmp = f.rollout.with_extension("tmp");
    std::fs::write(&tmp, &text).unwrap();
    // Rewrite in place (same inode), as a truncating editor would.
    let mut file = OpenOptions::new().write(true).open(&f.rollout).unwrap();
    file.write_all(text.as_bytes()).unwrap();
    drop(file);
    assert_eq!(f.exit_code(), Some(3));
}

#[test]
fn sigterm_spools_what_is_complete_and_removes_the_pid_file() {
    let f = start(&[], true);
    let pid = f.config.join(format!("watchers/{SESSION}.pid"));
    assert!(wait_for(W, || pid.exists()));
    append(&f.rollout, format!("{}\n", msg(1)).as_bytes());
    let config = f.config.clone();
    let (stderr, _dir) = f.stop_keep();
    assert!(!pid.exists(), "pid file removed at exit");
    assert!(stderr.contains("watcher_exiting"));
    let spool = std::fs::read_to_string(
        config.join(format!("transcript-spool/{SESSION}.transcript.jsonl")),
    )
    .unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert!(spool.contains("line 1"));
}

/// A rollout named with a doubled separator (as a user or a script may write it) is the same
/// file to the notifier: an appended line arrives by notification, before the next poll (60 s, the
/// longest allowed, past the 20 s wait).
#[test]
fn a_rollout_named_with_a_doubled_separator_is_followed_by_notification() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let sessions = dir.path().join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let rollout = sessions.join("rollout.jsonl");
    append(&rollout, format!("{}\n", meta()).as_bytes());
    let sep = std::path::MAIN_SEPARATOR;
    let named = PathBuf::from(format!("{}{sep}{sep}rollout.jsonl", sessions.display()));
    let mut cmd = kcap_watch(&config);
    stoppable(&mut cmd);
    let child = cmd
        .args(["watch", SESSION])
        .arg(&named)
        .args(["--poll-interval", "60s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn_retrying()
        .unwrap();
    let f = Follow {
        child,
        config,
        rollout,
        _dir: dir,
    };
    assert!(wait_for(W, || f.spooled().len() == 1));
    append(&f.rollout, format!("{}\n", msg(1)).as_bytes());
    assert!(
        wait_for(W, || f.spooled().len() == 2),
        "the appended line did not arrive before the 60 s poll"
    );
    // Ended by a kill, not Ctrl-Break: what is checked is the delivery, and the kill lets the
    // test run under Wine too (which cannot send Ctrl-Break to one process group).
    let mut f = f;
    f.child.kill().unwrap();
    f.child.wait().unwrap();
}
