//! T5.1 through real processes: a supervisor the daemon starts is configured as the daemon
//! was, by the flags it was given and the `KCAP_*` variables it runs with. Linux only: the
//! kcap CLI stand-in and this test read `/proc`.

#![cfg(target_os = "linux")]

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support;
use support::FakeKcap;
use support::bin::SpawnRetry;
use support::bin::{kcap_watch, wait_for};
use support::kcap_standin::Standin;

const ROOT: &str = "019fa981-2dca-7a31-9c55-3b1f0e6d2a01";
const WAIT: Duration = Duration::from_secs(30);

/// The NUL-separated words of `/proc/<pid>/<file>`.
fn proc_words(pid: u32, file: &str) -> Vec<String> {
    fs::read(format!("/proc/{pid}/{file}"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect()
}

fn supervisor_pid(config: &Path) -> Option<u32> {
    let text = fs::read_to_string(config.join("kcap-watch/status/daemon.daemon.json")).ok()?;
    let status: serde_json::Value = serde_json::from_str(&text).ok()?;
    status["sessions_taken"]
        .as_array()?
        .iter()
        .find_map(|t| t["supervisor_pid"].as_u64())
        .map(|p| p as u32)
}

#[test]
fn a_supervisor_started_by_the_daemon_gets_the_daemons_flags_and_variables() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("codex");
    let day = home.join("sessions/2026/07/28");
    fs::create_dir_all(&day).unwrap();
    let config = tmp.path().join("kcap");
    let rollout = day.join(format!("rollout-2026-07-28T22-13-45-{ROOT}.jsonl"));
    let session = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/codex/parent-session.jsonl"),
    )
    .unwrap();
    fs::write(&rollout, session).unwrap();
    let server = FakeKcap::start();
    let key = ROOT.replace('-', "");
    let mut standin = Standin::start(
        &tmp.path().join("standin"),
        &key,
        &rollout,
        &server.url(),
        &config,
        &home,
    );
    assert!(
        wait_for(WAIT, || config.join(format!("watchers/{key}.pid")).exists()),
        "the stand-in did not start: {}",
        standin.log()
    );

    let mut daemon = kcap_watch(&config)
        .env_remove("CODEX_HOME")
        .env("KCAP_WATCH_POLL_MS", "100")
        .env("KCAP_CODEX_SUBAGENT_REAP_MINUTES", "7")
        .args(["daemon", "--stop-grace", "30s", "--max-pause-credit", "1h"])
        .stdout(Stdio::null())
        .stderr(fs::File::create(tmp.path().join("daemon.log")).unwrap())
        .spawn_retrying()
        .unwrap();
    let mut pid = None;
    let started = wait_for(WAIT, || {
        pid = supervisor_pid(&config);
        pid.is_some()
    });
    let logs = || fs::read_to_string(tmp.path().join("daemon.log")).unwrap_or_default();
    assert!(started, "no supervisor started: {}", logs());
    let pid = pid.unwrap();

    let argv = proc_words(pid, "cmdline");
    assert_eq!(
        argv.get(1).map(String::as_str),
        Some("supervise"),
        "{argv:?}"
    );
    for pair in [["--stop-grace", "30s"], ["--max-pause-credit", "1h"]] {
        assert!(
            argv.windows(2).any(|w| w == pair),
            "{pair:?} not in {argv:?}"
        );
    }
    let environ = proc_words(pid, "environ");
    for var in [
        "KCAP_CODEX_SUBAGENT_REAP_MINUTES=7",
        "KCAP_WATCH_POLL_MS=100",
        &format!("KCAP_URL={}", server.url()),
    ] {
        assert!(environ.iter().any(|e| e == var), "{var} not in {environ:?}");
    }

    standin.end_session(WAIT);
    // SAFETY: kill(2) with plain integers.
    unsafe {
        libc::kill(daemon.id() as i32, libc::SIGTERM);
    }
    let ended = wait_for(WAIT, || daemon.try_wait().ok().flatten().is_some());
    assert!(ended, "the daemon did not end: {}", logs());
}
