//! The real binary as the kcap CLI runs it and as an attacker with write access to `<config>`
//! would find it (docs/behaviour.md R5, R6, R7):
//!
//! - spawned with stdin, stdout and stderr closed (both ways: pipes whose reading ends the
//!   spawner closed, as the kcap CLI does, and descriptors really closed), every exit path
//!   gives its documented code, never 134 (SIGABRT), and fatal errors are in the log file;
//! - a stdout closed by its reader (`inspect --json | head`) is success, quietly;
//! - an unusable config or watcher directory exits 2 naming it, once;
//! - a symbolic link at any path the watcher writes is refused and its target is unchanged;
//! - ids that would name files outside the kcap CLI's key rule exit 2 naming them;
//! - a newline in a rollout path cannot forge a log record;
//! - `replay` leaves other vendors' records exactly where they are and reports a
//!   needs-import marker as the kcap CLI's drain does.

// Run on Linux and, under Wine, on Windows. Unix only: the tests of descriptors really closed
// (libc), symbolic links planted in `<config>` (an unprivileged Windows user may not make
// them), file modes, a newline in a file name (not a valid Windows name) and SIGTERM.

use crate::support;
#[cfg(unix)]
use support::bin::SpawnRetry;

use std::fs;
#[cfg(unix)]
use std::os::fd::{FromRawFd, OwnedFd};
#[cfg(unix)]
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
#[cfg(unix)]
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
#[cfg(unix)]
use std::process::Stdio;
use std::process::{Command, ExitStatus};
use std::time::Duration;
#[cfg(unix)]
use std::time::Instant;

use serde_json::{Value, json};
use support::FakeKcap;
#[cfg(unix)]
use support::bin::wait_for;
use support::bin::{fixture_copy, kcap_watch, run, stderr, stdout};

const SESSION: &str = "019fa9812dca7a319c553b1f0e6d2a01";
const CHILD: &str = "019fa9816ea27b028d115c2e9f7a4b02";
const T: Duration = Duration::from_secs(60);

#[cfg(unix)]
fn child_key() -> String {
    format!("{SESSION}-{CHILD}")
}

#[cfg(unix)]
/// How the standard descriptors of the spawned binary are taken away.
#[derive(Clone, Copy, Debug)]
enum Closed {
    /// Pipes whose other ends the spawner closes right after the spawn (the kcap CLI's way).
    PipesClosedByTheSpawner,
    /// Descriptors 0, 1 and 2 closed before `exec`.
    Descriptors,
}

#[cfg(unix)]
/// Spawns `cmd` with its standard descriptors taken away and waits for its exit.
fn run_closed(mut cmd: Command, closed: Closed, timeout: Duration) -> ExitStatus {
    let mut child = match closed {
        Closed::PipesClosedByTheSpawner => {
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn_retrying()
                .expect("spawn kcap-watch");
            drop(child.stdin.take());
            drop(child.stdout.take());
            drop(child.stderr.take());
            child
        }
        Closed::Descriptors => {
            // SAFETY: between fork and exec only async-signal-safe calls (close) are made.
            unsafe {
                cmd.pre_exec(|| {
                    for fd in 0..3 {
                        libc::close(fd);
                    }
                    Ok(())
                });
            }
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn_retrying()
                .expect("spawn kcap-watch")
        }
    };
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            panic!("kcap-watch did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn code(st: ExitStatus) -> i32 {
    #[cfg(unix)]
    assert_ne!(
        st.signal(),
        Some(libc::SIGABRT),
        "aborted (SIGABRT): {st:?}"
    );
    st.code()
        .unwrap_or_else(|| panic!("ended by a signal: {st:?}"))
}

#[cfg(unix)]
fn log_text(config: &Path) -> String {
    let mut out = String::new();
    if let Ok(entries) = fs::read_dir(config.join("logs")) {
        for e in entries.flatten() {
            out.push_str(&String::from_utf8_lossy(&fs::read(e.path()).unwrap()));
        }
    }
    out
}

/// `watch <session> <rollout> --agent-id <child>`, as the kcap CLI spawns it.
fn spawned_watch(config: &Path, rollout: &Path, extra: &[&str]) -> Command {
    let mut cmd = kcap_watch(config);
    cmd.args(["watch", SESSION])
        .arg(rollout)
        .args([
            "--agent-id",
            CHILD,
            "--vendor",
            "codex",
            "--stop-grace",
            "0s",
        ])
        .args(extra);
    cmd
}

#[cfg(unix)]
#[test]
fn with_closed_stdio_every_exit_path_gives_its_code_and_fatal_errors_reach_the_log_file() {
    for closed in [Closed::PipesClosedByTheSpawner, Closed::Descriptors] {
        // 0: --once prints its summary to the closed stdout and logs to the closed stderr.
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
        let st = run_closed(spawned_watch(&config, &rollout, &["--once"]), closed, T);
        assert_eq!(code(st), 0, "{closed:?}: --once");
        assert!(
            log_text(&config).contains("seeded"),
            "{closed:?}: the log file has the run"
        );

        // 2: the rollout is a directory.
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        let not_a_file = dir.path().join("rollout-dir");
        fs::create_dir(&not_a_file).unwrap();
        let st = run_closed(spawned_watch(&config, &not_a_file, &["--once"]), closed, T);
        assert_eq!(code(st), 2, "{closed:?}: a directory as the rollout");
        let log = log_text(&config);
        assert!(
            log.contains("ERROR") && log.contains(&not_a_file.display().to_string()),
            "{closed:?}: the fatal error, naming the path, is in the log file:\n{log}"
        );

        // 75: another watcher holds the key's lock.
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
        let watchers = config.join("watchers");
        fs::create_dir_all(&watchers).unwrap();
        let lock = fs::File::create(watchers.join(format!("{}.lock", child_key()))).unwrap();
        lock.lock().unwrap();
        let st = run_closed(spawned_watch(&config, &rollout, &["--once"]), closed, T);
        assert_eq!(code(st), 75, "{closed:?}: lock held");
        let log = log_text(&config);
        assert!(
            log.contains("another watcher is already running"),
            "{closed:?}: the refusal is in the log file:\n{log}"
        );
        drop(lock);

        // 3: the rollout is rewritten under a running watcher.
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
        let heartbeat = config
            .join("watchers")
            .join(format!("{}.heartbeat", child_key()));
        let cmd = {
            let mut c = spawned_watch(&config, &rollout, &[]);
            c.env("KCAP_WATCH_POLL_MS", "50");
            c
        };
        let rollout2 = rollout.clone();
        let truncate = std::thread::spawn(move || {
            assert!(
                wait_for(T, || heartbeat.exists()),
                "the watcher never started"
            );
            fs::write(&rollout2, b"").unwrap();
        });
        let st = run_closed(cmd, closed, T);
        truncate.join().unwrap();
        assert_eq!(code(st), 3, "{closed:?}: rewritten");
        let log = log_text(&config);
        assert!(
            log.contains("was rewritten"),
            "{closed:?}: the rewrite is in the log file:\n{log}"
        );

        // 2 before any log file can exist: a bad id on the command line.
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = kcap_watch(&dir.path().join("config"));
        cmd.args(["watch", "../../x", "/nonexistent", "--agent-id", CHILD]);
        assert_eq!(code(run_closed(cmd, closed, T)), 2, "{closed:?}: bad id");
    }
}

#[cfg(unix)]
#[test]
fn a_signal_ends_a_watcher_with_closed_stdio_with_0() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
    let heartbeat = config
        .join("watchers")
        .join(format!("{}.heartbeat", child_key()));
    let mut child = spawned_watch(&config, &rollout, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_retrying()
        .unwrap();
    drop(child.stdin.take());
    drop(child.stdout.take());
    drop(child.stderr.take());
    assert!(
        wait_for(T, || heartbeat.exists()),
        "the watcher never started"
    );
    support::bin::signal(&child, libc::SIGTERM);
    let st = support::bin::wait_exit(&mut child, T);
    assert_eq!(code(st), 0);
    // A clean exit leaves no lock and none of the heartbeat's files behind.
    let left: Vec<_> = fs::read_dir(config.join("watchers"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[cfg(unix)]
/// A pipe whose reading end is already closed: every write to it fails with `EPIPE`.
fn broken_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just created and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

#[cfg(unix)]
#[test]
fn a_stdout_closed_by_its_reader_is_success_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
    let config = dir.path().join("config");
    for args in [
        vec!["inspect", "--json", rollout.to_str().unwrap()],
        vec!["inspect", rollout.to_str().unwrap()],
        vec!["completions", "bash"],
    ] {
        let mut cmd = kcap_watch(&config);
        cmd.args(&args).stdout(broken_pipe());
        let out = cmd.stderr(Stdio::piped()).output().unwrap();
        assert_eq!(code(out.status), 0, "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("Broken pipe") && !stderr(&out).contains("panicked"),
            "{args:?}: quietly: {}",
            stderr(&out)
        );
    }
    // The same through a real reader that stops after the first byte.
    let mut cmd = kcap_watch(&config);
    cmd.args(["inspect", "--json"]).arg(&rollout);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_retrying()
        .unwrap();
    let mut first = [0u8; 1];
    let mut pipe = child.stdout.take().unwrap();
    let _ = std::io::Read::read(&mut pipe, &mut first);
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
}

#[cfg(unix)]
#[test]
fn an_unusable_config_or_watcher_directory_exits_2_naming_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let rollout = fixture_copy("child-two-turns.jsonl", dir.path());

    let as_file = dir.path().join("config-file");
    fs::write(&as_file, "not a directory").unwrap();
    let read_only = dir.path().join("config-ro");
    fs::create_dir(&read_only).unwrap();
    fs::set_permissions(&read_only, fs::Permissions::from_mode(0o500)).unwrap();

    let mut cases: Vec<(&str, PathBuf, Option<PathBuf>)> = vec![
        ("config is a file", as_file.clone(), None),
        ("config is read-only", read_only.clone(), None),
        (
            "watcher dir is a file",
            dir.path().join("config-ok"),
            Some(as_file.clone()),
        ),
    ];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let foreign = dir.path().join("config-foreign");
        fs::create_dir(&foreign).unwrap();
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        cases.push(("config owned by another user", foreign, None));
    }
    for (what, config, watchers) in cases {
        let named = watchers.clone().unwrap_or_else(|| config.clone());
        for sub in ["watch", "replay"] {
            if sub == "replay" && watchers.is_some() {
                continue;
            }
            let mut cmd = kcap_watch(&config);
            if let Some(w) = &watchers {
                cmd.env("KCAP_WATCHER_DIR", w);
            }
            match sub {
                "watch" => {
                    cmd.args(["watch", "--once"]).arg(&rollout);
                }
                _ => {
                    cmd.env("KCAP_URL", "http://127.0.0.1:9").arg("replay");
                }
            }
            let out = run(cmd, T);
            let err = stderr(&out);
            assert_eq!(code(out.status), 2, "{what} ({sub}): {err}");
            assert_eq!(
                err.matches(&named.display().to_string()).count(),
                1,
                "{what} ({sub}): named exactly once:\n{err}"
            );
        }
    }
    assert_eq!(fs::read_to_string(&as_file).unwrap(), "not a directory");
}

#[cfg(unix)]
/// Every path under `<config>` a watcher and its spools write, for the child fixture.
fn written_paths(config: &Path) -> Vec<PathBuf> {
    let w = config.join("watchers");
    let k = child_key();
    vec![
        w.join(format!("{k}.lock")),
        w.join(format!("{k}.pid")),
        w.join(format!("{k}.started")),
        w.join(format!("{k}.heartbeat")),
        w.join(format!("{k}.heartbeat-0")),
        w.join(format!("{k}.heartbeat-1")),
        w.join(format!("{k}.heartbeat-new")),
        config.join("logs").join(format!("{k}.log")),
        config
            .join("transcript-spool")
            .join(format!("{SESSION}.transcript.jsonl")),
        config
            .join("transcript-spool")
            .join(format!("{SESSION}.needs-import")),
        config.join("spool").join(format!("{SESSION}.jsonl")),
    ]
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_at_any_path_the_watcher_writes_is_refused_and_its_target_is_unchanged() {
    let precious = "precious\n";
    let mut paths: Vec<PathBuf> = written_paths(Path::new("/C"));
    // The directories too.
    for d in ["watchers", "logs", "spool", "transcript-spool"] {
        paths.push(Path::new("/C").join(d));
    }
    // Each planted link is its own sandbox and its own --once run (some wait out their
    // spool budget): all run at once, each in its own thread; any failed assertion fails the test.
    std::thread::scope(|scope| {
        for planted in paths {
            scope.spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let config = dir.path().join("config");
                let at = config.join(planted.strip_prefix("/C").unwrap());
                let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
                let target = dir.path().join("target");
                let is_dir = at.extension().is_none() && !at.to_string_lossy().contains(SESSION);
                if is_dir {
                    fs::create_dir(&target).unwrap();
                    fs::write(target.join("keep"), precious).unwrap();
                } else {
                    fs::write(&target, precious).unwrap();
                }
                fs::create_dir_all(at.parent().unwrap()).unwrap();
                symlink(&target, &at).unwrap();
                // The transcript spool's marker is written only when the spool cannot be: make that so.
                if at.ends_with(format!("{SESSION}.needs-import")) {
                    symlink(&target, written_paths(&config)[8].clone()).unwrap();
                }

                let out = run(spawned_watch(&config, &rollout, &["--once"]), T);
                let all = format!("{}{}", stderr(&out), log_text(&config));
                let status = code(out.status);
                assert!(
                    all.contains(&format!("refusing to use {}", at.display())),
                    "{}: refused by name (exit {status}):\n{all}",
                    at.display()
                );
                assert!(
                    fs::symlink_metadata(&at).unwrap().file_type().is_symlink(),
                    "{}: the link itself is left",
                    at.display()
                );
                if is_dir {
                    let names: Vec<_> = fs::read_dir(&target).unwrap().flatten().collect();
                    assert_eq!(
                        names.len(),
                        1,
                        "{}: nothing created through it",
                        at.display()
                    );
                    assert_eq!(fs::read_to_string(target.join("keep")).unwrap(), precious);
                } else {
                    assert_eq!(
                        fs::read_to_string(&target).unwrap(),
                        precious,
                        "{}: target unchanged",
                        at.display()
                    );
                }
                // Links at the watcher's own files stop it before it writes anything.
                if at.starts_with(config.join("watchers")) {
                    assert_eq!(status, 2, "{}: {all}", at.display());
                }
            });
        }
    });
}

#[cfg(unix)]
#[test]
fn replay_refuses_a_symbolic_link_in_the_spools_and_posts_nothing_through_it() {
    let server = FakeKcap::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let secret = dir.path().join("secret.jsonl");
    let batch = json!({"session_id": SESSION, "agent_id": CHILD, "vendor": "codex",
        "lines": ["{\"x\":1}"], "line_numbers": [0]});
    fs::write(&secret, format!("{batch}\n")).unwrap();
    let live = written_paths(&config)[8].clone();
    fs::create_dir_all(live.parent().unwrap()).unwrap();
    symlink(&secret, &live).unwrap();

    let mut cmd = kcap_watch(&config);
    cmd.env("KCAP_URL", server.url()).arg("replay");
    let out = run(cmd, T);
    assert_eq!(code(out.status), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains(&live.display().to_string()));
    assert_eq!(server.request_count("transcript"), 0);
    assert_eq!(fs::read_to_string(&secret).unwrap(), format!("{batch}\n"));
    assert!(
        fs::symlink_metadata(&live)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn ids_that_could_name_files_elsewhere_exit_2_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
    let long = "a".repeat(65);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["watch", "../../x", "R", "--agent-id", CHILD],
            "../../x",
        ),
        (vec!["watch", SESSION, "R", "--agent-id", "a/b"], "a/b"),
        (vec!["watch", SESSION, "R", "--agent-id", "a.b"], "a.b"),
        (vec!["watch", &long, "R", "--agent-id", CHILD], &long),
        (vec!["replay", "--session-id", "../../etc/x"], "../../etc/x"),
        (vec!["replay", "--session-id", "a b"], "a b"),
    ];
    for (args, bad) in cases {
        let mut cmd = kcap_watch(&config);
        cmd.env("KCAP_URL", "http://127.0.0.1:9");
        for a in &args {
            if *a == "R" {
                cmd.arg(&rollout);
            } else {
                cmd.arg(a);
            }
        }
        let out = run(cmd, T);
        assert_eq!(code(out.status), 2, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{bad:?}")),
            "{args:?}: names {bad:?}: {}",
            stderr(&out)
        );
    }
    assert!(!dir.path().join("etc").exists());

    // An id from the rollout's own header.
    let evil = dir.path().join("evil.jsonl");
    let header = json!({"timestamp": "2026-07-28T16:14:05.115Z", "type": "session_meta",
        "payload": {"id": "../../../evil", "timestamp": "2026-07-28T16:14:05.115Z", "cwd": "/",
        "originator": "codex_cli_rs", "cli_version": "0.145.0"}});
    fs::write(&evil, format!("{header}\n")).unwrap();
    let mut cmd = kcap_watch(&config);
    cmd.args(["watch", "--once"]).arg(&evil);
    let out = run(cmd, T);
    assert_eq!(code(out.status), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("\"../../../evil\""),
        "{}",
        stderr(&out)
    );
    assert!(!dir.path().join("evil.log").exists());
}

#[cfg(unix)]
#[test]
fn a_newline_in_a_rollout_path_cannot_forge_a_log_record() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let forged = dir
        .path()
        .join("a\n2026-01-01T00:00:00.000000Z ERROR FORGED record.jsonl");
    fs::copy(fixture_copy("child-two-turns.jsonl", dir.path()), &forged).unwrap();
    let out = run(spawned_watch(&config, &forged, &["--once"]), T);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    for (what, text) in [("stderr", stderr(&out)), ("log file", log_text(&config))] {
        assert!(text.contains("FORGED"), "{what}: the path is logged");
        for line in text.lines() {
            assert!(
                !line.starts_with("2026-01-01T00:00:00.000000Z ERROR FORGED"),
                "{what}: a forged record: {line}"
            );
        }
    }
}

/// A transcript spool record, as the kcap CLI's `WatchCommand` writes one.
fn batch(session: &str, vendor: &str, first: u64) -> String {
    json!({"session_id": session, "agent_id": null, "vendor": vendor,
        "lines": [format!("{{\"n\":{first}}}")], "line_numbers": [first]})
    .to_string()
}

#[test]
fn replay_leaves_other_vendors_records_exactly_where_they_are() {
    let server = FakeKcap::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let tx = config.join("transcript-spool");
    let hooks = config.join("spool");
    fs::create_dir_all(&tx).unwrap();
    fs::create_dir_all(&hooks).unwrap();

    let claude = "5a1e0000000000000000000000000001";
    let cursor = "c0c0000000000000000000000000000a";
    let cursor_dead = "c0c0000000000000000000000000000b";
    let foreign: Vec<(PathBuf, String)> = vec![
        // Claude's transcript tail and its spooled session-end.
        (
            tx.join(format!("{claude}.transcript.jsonl")),
            format!(
                "{}\n{}\n",
                batch(claude, "claude", 0),
                batch(claude, "claude", 1)
            ),
        ),
        (
            hooks.join(format!("{claude}.jsonl")),
            format!(
                "{}\n",
                json!({"route": "session-end", "body": json!({"session_id": claude}).to_string()})
            ),
        ),
        // A Cursor session the kcap CLI quarantined, and a Cursor drain of a dead process.
        (
            tx.join(format!("{cursor}.transcript.jsonl")),
            format!("{}\n", batch(cursor, "cursor", 7)),
        ),
        (
            tx.join(format!("{cursor_dead}.99999999-1.transcript.draining")),
            format!("{}\n", batch(cursor_dead, "cursor", 3)),
        ),
    ];
    for (path, text) in &foreign {
        fs::write(path, text).unwrap();
    }
    let quarantine = config.join("cursor-quarantine");
    fs::create_dir_all(&quarantine).unwrap();
    fs::write(
        quarantine.join(format!("{cursor}.json")),
        r#"{"reason":"rewrite","at":"2026-07-28T16:14:05Z"}"#,
    )
    .unwrap();

    // A Codex session: our transcript batch, and a hook spool mixing the kcap CLI's own
    // session-start (no writer) with our subagent-stop.
    fs::write(
        tx.join(format!("{SESSION}.transcript.jsonl")),
        format!("{}\n", batch(SESSION, "codex", 0)),
    )
    .unwrap();
    let theirs = json!({"route": "session-start/codex",
        "body": json!({"session_id": SESSION}).to_string()})
    .to_string();
    let ours = json!({"route": "subagent-stop", "writer": "kcap-watch",
        "body": json!({"session_id": SESSION, "agent_id": CHILD}).to_string()})
    .to_string();
    let hook_spool = hooks.join(format!("{SESSION}.jsonl"));
    fs::write(&hook_spool, format!("{theirs}\n{ours}\n")).unwrap();

    for round in 0..2 {
        let mut cmd = kcap_watch(&config);
        cmd.env("KCAP_URL", server.url()).arg("replay");
        let out = run(cmd, T);
        assert_eq!(code(out.status), 0, "round {round}: {}", stderr(&out));
        for (path, text) in &foreign {
            assert_eq!(
                fs::read_to_string(path).unwrap_or_default(),
                *text,
                "round {round}: {} untouched",
                path.display()
            );
        }
        let posted: Vec<Value> = server
            .requests_to("transcript")
            .iter()
            .filter_map(|r| r.json())
            .collect();
        assert_eq!(
            posted.len(),
            1,
            "round {round}: only the Codex batch: {posted:?}"
        );
        assert_eq!(posted[0]["vendor"], "codex");
        assert_eq!(server.request_count("subagent-stop"), 1, "round {round}");
        assert_eq!(
            server.request_count("session-start/codex"),
            0,
            "round {round}"
        );
        assert_eq!(server.request_count("session-end"), 0, "round {round}");
        assert_eq!(
            fs::read_to_string(&hook_spool).unwrap(),
            format!("{theirs}\n"),
            "round {round}: the kcap CLI's record stays, ours is gone"
        );
        assert!(stdout(&out).contains("left 6 records"), "{}", stdout(&out));
    }
}

#[test]
fn replay_reports_a_needs_import_marker_as_the_kcap_cli_drain_does() {
    let server = FakeKcap::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let tx = config.join("transcript-spool");
    fs::create_dir_all(&tx).unwrap();
    let marker = tx.join(format!("{SESSION}.needs-import"));
    fs::write(
        &marker,
        "2026-07-28T16:14:05Z transcript spool reached its cap\n",
    )
    .unwrap();
    fs::write(
        tx.join(format!("{SESSION}.transcript.jsonl")),
        format!("{}\n", batch(SESSION, "codex", 0)),
    )
    .unwrap();

    // While lines cannot be delivered, the marker is not reported (lines come first).
    server.fail_always(Some("transcript"), support::Fault::Status(503));
    let mut cmd = kcap_watch(&config);
    cmd.env("KCAP_URL", server.url()).arg("replay");
    let out = run(cmd, T);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(server.request_count("session-needs-import"), 0);

    server.clear_faults();
    let mut cmd = kcap_watch(&config);
    cmd.env("KCAP_URL", server.url()).arg("replay");
    let out = run(cmd, T);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let reported = server.hooks("session-needs-import");
    assert_eq!(
        reported,
        vec![json!({"session_id": SESSION, "needs_import": true})]
    );
    // After the lines, as the kcap CLI orders it.
    let routes: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.route != "last-line")
        .map(|r| r.route)
        .collect();
    let last_transcript = routes.iter().rposition(|r| r == "transcript").unwrap();
    let needs = routes
        .iter()
        .position(|r| r == "session-needs-import")
        .unwrap();
    assert!(last_transcript < needs, "{routes:?}");
    assert!(marker.exists(), "the marker stays for `kcap import`");

    // A session with only a marker is found without --session-id.
    let other = "0199aaaa000070000000000000000002";
    fs::write(tx.join(format!("{other}.needs-import")), "x\n").unwrap();
    let mut cmd = kcap_watch(&config);
    cmd.env("KCAP_URL", server.url()).arg("replay");
    assert_eq!(code(run(cmd, T).status), 0);
    assert!(
        server
            .hooks("session-needs-import")
            .contains(&json!({"session_id": other, "needs_import": true}))
    );
}

#[test]
fn a_lock_file_left_by_a_clean_exit_is_gone_and_a_new_watcher_takes_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
    for _ in 0..2 {
        let out = run(spawned_watch(&config, &rollout, &["--once"]), T);
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
        let left: Vec<_> = fs::read_dir(config.join("watchers"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
    #[cfg(unix)]
    assert_eq!(
        fs::metadata(config.join("watchers")).unwrap().mode() & 0o777,
        0o700
    );
}

/// Every record reaches stderr and the log file once each, in both formats, and a fatal error
/// once on stderr (as `kcap-watch: ...`) with its record in the log file alone: the two
/// destinations share one formatted record when stderr has no colours.
#[cfg(unix)]
#[test]
fn each_record_reaches_stderr_and_the_log_file_once_and_a_fatal_one_the_file_alone() {
    for format in ["text", "json"] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        let rollout = fixture_copy("child-two-turns.jsonl", dir.path());
        let out = spawned_watch(&config, &rollout, &["--once"])
            .env("KCAP_LOG_FORMAT", format)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(code(out.status), 0, "{format}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let log = log_text(&config);
        for text in [&*stderr, &*log] {
            assert_eq!(
                text.lines().filter(|l| l.contains("seeded")).count(),
                1,
                "{format}: one `seeded` record:\n{text}"
            );
        }
        let seeded = |t: &str| t.lines().find(|l| l.contains("seeded")).map(str::to_owned);
        assert_eq!(seeded(&stderr), seeded(&log), "{format}: the same record");

        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        let not_a_file = dir.path().join("rollout-dir");
        fs::create_dir(&not_a_file).unwrap();
        let out = spawned_watch(&config, &not_a_file, &["--once"])
            .env("KCAP_LOG_FORMAT", format)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(code(out.status), 2, "{format}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let path = not_a_file.display().to_string();
        assert_eq!(
            stderr.matches(&*path).count(),
            1,
            "{format}: the error once on stderr:\n{stderr}"
        );
        assert!(stderr.contains("kcap-watch: "), "{stderr}");
        let log = log_text(&config);
        assert!(
            log.contains("fatal") && log.contains(&*path),
            "{format}: the fatal record in the log file:\n{log}"
        );
    }
}
