//! Bad input, one test each: whatever the rollout, path or environment holds, the watcher
//! says what is wrong (a log record or an error naming the path or variable), exits with the
//! right code, never panics, never hangs (every wait is bounded, and a process still running
//! at its deadline fails the test), and loses no valid line.

// Some imports serve only the tests that need SIGTERM or /proc (unix, Linux).
#![cfg_attr(not(unix), allow(unused_imports))]

use crate::support;
#[cfg(target_os = "linux")]
use support::bin::SpawnRetry;

use support::harness;

use std::io::Write;
use std::time::{Duration, Instant};

use harness::{
    AGENT, AGENT_ND, Proc, SESSION, SESSION_ND, Sandbox, child_key, diff_lines, expected_lines,
    stops_for_child, wait_until,
};
use serde_json::Value;
use support::FakeKcap;

const ONCE: Duration = Duration::from_secs(60);

/// `watch --once` of the sandbox's rollout against `server`; returns the finished process.
fn once(sandbox: &Sandbox, server: &FakeKcap, extra: &[&str]) -> Proc {
    let mut p = sandbox.spawn(sandbox.watch(Some(&server.url()), &["--once"]).args(extra));
    p.wait_or_fail(ONCE, "watch --once");
    p.assert_no_panic();
    p
}

/// The server holds exactly the rollout's non-blank lines, in their shipped form.
fn assert_delivered(sandbox: &Sandbox, server: &FakeKcap, session: &str, agent: &str) {
    let want = expected_lines(&sandbox.rollout_bytes());
    let got = server.lines(session, agent);
    assert!(
        got == want,
        "delivered lines differ:\n{}",
        diff_lines(&got, &want)
    );
}

fn inspect(sandbox: &Sandbox) -> Value {
    let out = sandbox
        .cmd(None)
        .args(["inspect", "--json"])
        .arg(&sandbox.rollout)
        .output()
        .expect("run inspect");
    assert!(
        out.status.success(),
        "inspect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("inspect --json prints one object")
}

fn ok(p: &mut Proc) {
    let code = p.exit_code(ONCE, "watch");
    assert_eq!(code, 0, "exit {code}; stderr:\n{}", p.stderr());
}

/// The first turn of a child with `middle` between its start and its end.
fn child_with(middle: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in [harness::child_meta(), harness::task_started("t1")] {
        out.extend_from_slice(l.as_bytes());
        out.push(b'\n');
    }
    for l in middle {
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    out.extend_from_slice(harness::task_complete("t1", "done").as_bytes());
    out.push(b'\n');
    out
}

#[test]
fn malformed_json_lines_ship_verbatim_and_do_not_stop_the_fold() {
    let sandbox = Sandbox::new();
    let call = harness::call("c1", "exec_command");
    let output = harness::output("c1", "ok");
    sandbox.append(&child_with(&[
        br#"{"type":"response_item","payload":{"type":"function_call","#,
        b"not json at all",
        b"42",
        b"[1,2,3]",
        br#"{"type":"event_msg","payload":{"type":"task_complete"},}"#,
        br#""a string""#,
        b"}{",
        call.as_bytes(),
        output.as_bytes(),
    ]));
    let server = FakeKcap::start();
    let mut p = once(&sandbox, &server, &[]);
    ok(&mut p);
    assert_delivered(&sandbox, &server, SESSION_ND, AGENT_ND);
    // The fold went on past them: the turn completed and the stop was posted.
    assert_eq!(stops_for_child(&server.hooks("subagent-stop")), 1);
    assert!(p.stdout().contains("turn completed"), "{}", p.stdout());
    let report = inspect(&sandbox);
    assert_eq!(report["lines"]["malformed"], 7, "{report}");
    assert_eq!(report["turn"]["state"], "completed");
}

#[test]
fn invalid_utf8_ships_with_replacement_characters_and_is_counted_malformed() {
    let sandbox = Sandbox::new();
    sandbox.append(&child_with(&[
        b"{\"type\":\"event_msg\",\"payload\":{\"type\":\"agent_message\",\"message\":\"caf\xff\xfe\"}}",
        b"\xc3\x28 lone continuation \x80\x80",
    ]));
    let server = FakeKcap::start();
    let mut p = once(&sandbox, &server, &[]);
    ok(&mut p);
    assert_delivered(&sandbox, &server, SESSION_ND, AGENT_ND);
    let lines = server.lines(SESSION_ND, AGENT_ND);
    assert!(lines[&2].contains("caf\u{FFFD}\u{FFFD}"), "{}", lines[&2]);
    assert_eq!(stops_for_child(&server.hooks("subagent-stop")), 1);
    assert_eq!(inspect(&sandbox)["lines"]["malformed"], 2);
}

#[test]
fn nul_bytes_do_not_end_the_line_or_the_fold_and_raw_ones_ship_as_the_loss_marker() {
    let sandbox = Sandbox::new();
    sandbox.append(&child_with(&[
        b"{\"type\":\"event_msg\",\"payload\":{\"type\":\"agent_message\",\"message\":\"a\0b\"}}",
        b"\0\0\0\0",
        b"{\"type\":\"event_msg\",\"payload\":{\"type\":\"agent_message\",\"message\":\"a\\u0000b\"}}",
    ]));
    let server = FakeKcap::start();
    let mut p = once(&sandbox, &server, &[]);
    ok(&mut p);
    assert_delivered(&sandbox, &server, SESSION_ND, AGENT_ND);
    // Raw NULs are not JSON: those lines ship as the kcap CLI's marker (docs/capture.md).
    let lines = server.lines(SESSION_ND, AGENT_ND);
    assert_eq!(
        lines[&3],
        r#"{"type":"kcap_capture_loss","version":1,"reason":"malformed_input","input_utf16_length":4,"input_utf8_bytes":4}"#
    );
    assert!(
        lines[&2].contains(r#""reason":"malformed_input""#),
        "{}",
        lines[&2]
    );
    assert!(lines[&4].contains(r#"a\u0000b"#), "{}", lines[&4]);
    assert_eq!(stops_for_child(&server.hooks("subagent-stop")), 1);
    // A raw NUL inside a string is not JSON; the escaped one is.
    assert_eq!(inspect(&sandbox)["lines"]["malformed"], 2);
}

#[test]
fn a_byte_order_mark_is_dropped_from_line_zero_and_the_header_still_read() {
    let sandbox = Sandbox::new();
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend(child_with(&[]));
    sandbox.append(&bytes);
    let server = FakeKcap::start();
    let mut p = once(&sandbox, &server, &[]);
    ok(&mut p);
    // The ids came from the header behind the BOM.
    assert_delivered(&sandbox, &server, SESSION_ND, AGENT_ND);
    assert!(server.lines(SESSION_ND, AGENT_ND)[&0].starts_with('{'));
    assert_eq!(stops_for_child(&server.hooks("subagent-stop")), 1);
}

#[test]
fn crlf_line_ends_are_stripped_and_the_lines_understood() {
    let sandbox = Sandbox::new();
    let text = String::from_utf8(child_with(&[b"", b"  "])).unwrap();
    sandbox.append(text.replace('\n', "\r\n").as_bytes());
    let server = FakeKcap::start();
    let mut p = once(&sandbox, &server, &[]);
    ok(&mut p);
    assert_delivered(&sandbox, &server, SESSION_ND, AGENT_ND);
    let lines = server.lines(SESSION_ND, AGENT_ND);
    assert!(lines.values().all(|l| !l.contains('\r')));
    // Blank lines (2 and 3) are counted but not shipped; the turn end is still understood.
    assert_eq!(lines.keys().copied().collect::<Vec<_>>(), vec![0, 1, 4]);
    assert_eq!(stops_for_child(&server.hooks("subagent-stop")), 1);
    assert_eq!(inspect(&sandbox)["lines"]["malformed"], 0);
}

// Unix only: the waiting watcher is ended with SIGTERM, which Windows does not have.
#[test]
#[cfg(unix)]
fn an_empty_file_is_an_error_for_once_and_watched_until_lines_come() {
    let sandbox = Sandbox::new();
    sandbox.append(b"");
    let server = FakeKcap::start();
    let mut p = once(&sandbox, &server, &[]);
    assert_eq!(p.exit_code(ONCE, "--once on an empty file"), 2);
    assert!(
        p.stderr().contains("no readable session_meta")
            && p.stderr().contains(&*sandbox.rollout.to_string_lossy()),
        "{}",
        p.stderr()
    );
    // Spawned with its ids, a watcher takes its key at once and ships what comes.
    let mut w = sandbox.spawn(
        sandbox
            .cmd(Some(&server.url()))
            .args(["watch", SESSION])
            .arg(&sandbox.rollout)
            .args(["--agent-id", AGENT, "--stop-grace", "0s"]),
    );
    assert!(wait_until(Duration::from_secs(10), || sandbox
        .heartbeat(&child_key())
        .exists()));
    std::thread::sleep(Duration::from_millis(300));
    sandbox.append(&child_with(&[]));
    assert!(
        wait_until(Duration::from_secs(20), || stops_for_child(
            &server.hooks("subagent-stop")
        ) == 1),
        "{}",
        w.stderr()
    );
    assert_delivered(&sandbox, &server, SESSION_ND, AGENT_ND);
    ok_after_term(&mut w);
}

// SIGTERM: unix only.
#[cfg(unix)]
fn ok_after_term(p: &mut Proc) {
    assert_eq!(p.terminate(Duration::from_secs(15)), 0, "{}", p.stderr());
    p.assert_no_panic();
}

/// CPU time (user + system) the process has used so far.
// Linux only: reads /proc/<pid>/stat.
#[cfg(target_os = "linux")]
fn cpu_time(p: &Proc) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", p.pid())).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 after the name.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 1000 / 100)
}

// Linux only: the idle CPU cost is read from /proc/<pid>/stat.
#[test]
#[cfg(target_os = "linux")]
fn a_file_that_never_appears_is_waited_for_quietly_and_ends_on_sigterm() {
    let sandbox = Sandbox::new();
    let server = FakeKcap::start();
    let mut p = once(&sandbox, &server, &[]);
    assert_eq!(p.exit_code(ONCE, "--once on a missing file"), 2);
    assert!(p.stderr().contains("no such file"), "{}", p.stderr());

    let mut w = sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &[]));
    assert!(wait_until(Duration::from_secs(10), || w.has_event("waiting_for_file")));
    let before = cpu_time(&w);
    std::thread::sleep(Duration::from_secs(3));
    let spent = cpu_time(&w).saturating_sub(before);
    // Polling every 50 ms costs next to nothing; a busy loop would burn the whole 3 s.
    assert!(
        spent < Duration::from_millis(600),
        "{spent:?} of CPU while waiting"
    );
    assert!(w.alive());
    ok_after_term(&mut w);
    assert_eq!(server.requests().len(), 0, "nothing to ask without a key");
}

// Unix only: the watcher is ended with SIGTERM, which Windows does not have.
#[test]
#[cfg(unix)]
fn a_file_that_appears_late_is_read_from_its_first_line() {
    let sandbox = Sandbox::new();
    let server = FakeKcap::start();
    let mut w = sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &[]));
    assert!(wait_until(Duration::from_secs(10), || w.has_event("waiting_for_file")));
    sandbox.append(&child_with(&[]));
    assert!(
        wait_until(Duration::from_secs(20), || stops_for_child(
            &server.hooks("subagent-stop")
        ) == 1),
        "{}",
        w.stderr()
    );
    assert_delivered(&sandbox, &server, SESSION_ND, AGENT_ND);
    ok_after_term(&mut w);
}

// Unix only: deleting an open file (Windows refuses while it is open), then SIGTERM.
#[test]
#[cfg(unix)]
fn a_file_deleted_mid_run_is_read_to_its_end_through_the_open_handle() {
    let sandbox = Sandbox::new();
    let server = FakeKcap::start();
    // Codex keeps its file open: it may go on appending after the path is gone.
    let mut codex = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&sandbox.rollout)
        .unwrap();
    let mut all = Vec::new();
    let mut write = |bytes: &[u8]| {
        codex.write_all(bytes).unwrap();
        all.extend_from_slice(bytes);
    };
    let first = format!(
        "{}\n{}\n",
        harness::child_meta(),
        harness::task_started("t1")
    );
    write(first.as_bytes());
    let mut w = sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &[]));
    assert!(wait_until(Duration::from_secs(20), || server
        .lines(SESSION_ND, AGENT_ND)
        .len()
        == 2));
    std::fs::remove_file(&sandbox.rollout).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let rest = format!("{}\n", harness::turn(1).join("\n"));
    write(rest.as_bytes());
    let want = expected_lines(&all);
    assert!(
        wait_until(Duration::from_secs(20), || server
            .lines(SESSION_ND, AGENT_ND)
            == want),
        "lines written after the delete were lost:\n{}\n{}",
        diff_lines(&server.lines(SESSION_ND, AGENT_ND), &want),
        w.stderr()
    );
    assert!(w.alive(), "{}", w.stderr());
    ok_after_term(&mut w);
}

#[test]
fn a_file_replaced_by_another_mid_run_is_a_rewrite_exit_3() {
    let sandbox = Sandbox::new();
    let server = FakeKcap::start();
    sandbox.append_lines(&[harness::child_meta(), harness::task_started("t1")]);
    let mut w = sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &[]));
    assert!(wait_until(Duration::from_secs(20), || server
        .lines(SESSION_ND, AGENT_ND)
        .len()
        == 2));
    std::fs::remove_file(&sandbox.rollout).unwrap();
    sandbox.append_lines(&[harness::session_meta()]);
    let code = w.exit_code(Duration::from_secs(20), "after the rollout was replaced");
    assert_eq!(code, 3, "{}", w.stderr());
    let rewritten = w.events_named("rollout_rewritten");
    assert_eq!(rewritten.len(), 1, "{}", w.stderr());
    assert!(
        rewritten[0]["fields"]["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("rollout.jsonl"))
    );
    w.assert_no_panic();
}

#[test]
fn a_directory_as_the_rollout_exits_2_with_the_reason() {
    let sandbox = Sandbox::new();
    std::fs::create_dir(&sandbox.rollout).unwrap();
    for extra in [&["--once"][..], &[]] {
        let mut p = sandbox.spawn(&mut sandbox.watch(None, extra));
        assert_eq!(p.exit_code(ONCE, "watch a directory"), 2);
        assert!(
            p.stderr().contains("it is a directory")
                && p.stderr().contains(&*sandbox.rollout.to_string_lossy()),
            "{}",
            p.stderr()
        );
        p.assert_no_panic();
    }
}

// Unix only: named pipes (mkfifo) are a unix file type.
#[test]
#[cfg(unix)]
fn a_named_pipe_as_the_rollout_exits_2_instead_of_blocking() {
    let sandbox = Sandbox::new();
    let path = std::ffi::CString::new(sandbox.rollout.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    for extra in [&["--once"][..], &[]] {
        let mut p = sandbox.spawn(&mut sandbox.watch(None, extra));
        assert_eq!(p.exit_code(Duration::from_secs(10), "watch a FIFO"), 2);
        assert!(p.stderr().contains("not a regular file"), "{}", p.stderr());
    }
    let out = sandbox
        .cmd(None)
        .arg("inspect")
        .arg(&sandbox.rollout)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

// Unix only: file modes, and running the watcher as another user when the test is root.
#[test]
#[cfg(unix)]
fn an_unreadable_file_exits_2_with_the_reason() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let sandbox = Sandbox::new();
    sandbox.append(&child_with(&[]));
    std::fs::set_permissions(&sandbox.rollout, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads anything: run the watcher as `nobody` then.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        std::os::unix::fs::chown(sandbox.dir.path(), Some(65534), Some(65534)).unwrap();
    }
    for extra in [&["--once"][..], &[]] {
        let mut cmd = sandbox.watch(None, extra);
        if root {
            cmd.uid(65534).gid(65534);
        }
        let mut p = sandbox.spawn(&mut cmd);
        assert_eq!(p.exit_code(ONCE, "watch an unreadable file"), 2);
        assert!(
            p.stderr().contains("cannot read rollout")
                && p.stderr().contains("ermission denied")
                && p.stderr().contains(&*sandbox.rollout.to_string_lossy()),
            "{}",
            p.stderr()
        );
        p.assert_no_panic();
    }
}

// Linux only: peak memory is read from /proc/<pid>/status (VmHWM).
#[test]
#[cfg(target_os = "linux")]
fn a_single_200_mib_line_streams_through_in_bounded_memory() {
    // Both cores for seconds: one such test at a time (see `support::serial`).
    let _serial = support::serial();
    const SIZE: usize = 200 << 20;
    const LIMIT_KIB: u64 = 64 * 1024;
    let sandbox = Sandbox::new();
    sandbox.append_lines(&[
        harness::child_meta(),
        harness::task_started("t1"),
        harness::call("c-big", "exec_command"),
    ]);
    let server = FakeKcap::start();
    let mut w = sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &[]));
    assert!(wait_until(Duration::from_secs(20), || server
        .lines(SESSION_ND, AGENT_ND)
        .len()
        == 3));
    // Stream the line out in 1 MiB writes while the watcher runs; `call_id` comes after the
    // huge field, as Codex writes it.
    let head = format!(
        r#"{{"timestamp":"{}","type":"response_item","payload":{{"type":"function_call_output","output":""#,
        harness::now()
    );
    let tail = r#"","call_id":"c-big"}}"#;
    let fill = SIZE - head.len() - tail.len();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&sandbox.rollout)
        .unwrap();
    f.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    let mut left = fill;
    while left > 0 {
        let n = left.min(chunk.len());
        f.write_all(&chunk[..n]).unwrap();
        left -= n;
    }
    f.write_all(tail.as_bytes()).unwrap();
    f.write_all(b"\n").unwrap();
    f.write_all(format!("{}\n", harness::task_complete("t1", "done")).as_bytes())
        .unwrap();
    drop(f);
    let started = Instant::now();
    let done = wait_until(Duration::from_secs(180), || {
        server.lines(SESSION_ND, AGENT_ND).len() == 5 || !w.alive()
    });
    let peak = w.vm_hwm_kib();
    assert!(
        done && w.alive(),
        "the line after the 200 MiB one never arrived ({:?}):\n{}",
        started.elapsed(),
        w.stderr()
    );
    let lines = server.lines(SESSION_ND, AGENT_ND);
    let marker: Value = serde_json::from_str(&lines[&3]).unwrap();
    assert_eq!(marker["type"], "kcap_capture_loss");
    assert_eq!(marker["reason"], "input_limit");
    assert_eq!(marker["input_utf8_bytes"], SIZE as u64);
    // All ASCII: one UTF-16 unit a byte, counted while the line streamed past.
    assert_eq!(marker["input_utf16_length"], SIZE as u64);
    // The raw line's call_id still cleared the pending call, so the stop went out.
    assert!(wait_until(Duration::from_secs(10), || stops_for_child(
        &server.hooks("subagent-stop")
    ) == 1));
    let peak = peak.expect("VmHWM of the running watcher");
    assert!(
        peak < LIMIT_KIB,
        "peak resident memory {peak} KiB for a 200 MiB line (limit {LIMIT_KIB} KiB)"
    );
    ok_after_term(&mut w);
    eprintln!(
        "200 MiB line: peak RSS {peak} KiB, shipped {:?} after the write",
        started.elapsed()
    );
}

/// Lines of nearly 4 MiB ship whole (docs/capture.md), and shipping them holds each a small,
/// fixed number of times: eight of them (32 MiB of rollout) raise the peak resident memory of
/// `watch --once` over the same watcher's on a small rollout by at most five lines' worth.
/// What the watcher holds is bounded by the line, not by the rollout or a batch. (This is the
/// test build; the release build's absolute figures are in docs/performance.md.)
#[test]
#[cfg(target_os = "linux")]
fn once_over_a_rollout_of_4_mib_lines_ships_them_whole_in_memory_bounded_by_the_line() {
    let _serial = support::serial();
    const LINE_KIB: u64 = 4 * 1024;
    let peak_of = |lines: &[String]| {
        let sandbox = Sandbox::new();
        sandbox.append_lines(lines);
        let server = FakeKcap::start();
        let child = sandbox
            .watch(Some(&server.url()), &["--once"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn_retrying()
            .expect("spawn kcap-watch");
        let (status, peak) = support::bin::wait_peak_rss(child, Duration::from_secs(120));
        assert!(status.success(), "{status:?}");
        (peak, server.lines(SESSION_ND, AGENT_ND))
    };
    let mut lines = vec![harness::child_meta(), harness::task_started("t1")];
    let (idle, _) = peak_of(&lines);
    for i in 0..8 {
        let head = format!("ghp_R4nd0mT0k3nV4lu3F0rT3st1ng{i:02} ");
        let fill = (4 << 20) - 300 - head.len();
        lines.push(harness::output(
            &format!("c{i}"),
            &format!("{head}{}", "y".repeat(fill)),
        ));
    }
    lines.push(harness::task_complete("t1", "done"));
    let started = Instant::now();
    let (peak, stored) = peak_of(&lines);
    assert_eq!(stored.len(), lines.len());
    for (n, line) in lines.iter().enumerate().skip(2).take(8) {
        let shipped = &stored[&(n as u64)];
        assert!(!shipped.contains("ghp_"), "line {n} holds its token");
        assert!(!shipped.contains("kcap_capture_loss"), "line {n} was lost");
        assert_eq!(
            shipped.len() + 32,
            line.len() + "[REDACTED]".len(),
            "line {n}"
        );
    }
    let added = peak.saturating_sub(idle);
    assert!(
        added <= 5 * LINE_KIB,
        "shipping 4 MiB lines raised the peak from {idle} to {peak} KiB: {added} KiB, over 5 lines"
    );
    eprintln!(
        "8 lines of 4 MiB: peak RSS {peak} KiB ({idle} KiB on a small rollout), shipped in {:?}",
        started.elapsed()
    );
}

#[test]
fn a_million_blank_lines_are_counted_not_shipped_and_numbering_holds() {
    // Both cores for seconds: one such test at a time (see `support::serial`).
    let _serial = support::serial();
    let sandbox = Sandbox::new();
    let mut bytes = format!("{}\n", harness::child_meta()).into_bytes();
    for i in 0..1_000_000 {
        bytes.extend_from_slice(if i % 10 == 0 { b"   \n" } else { b"\n" });
    }
    bytes.extend(format!("{}\n", harness::task_started("t1")).bytes());
    bytes.extend(format!("{}\n", harness::task_complete("t1", "done")).bytes());
    sandbox.append(&bytes);
    let server = FakeKcap::start();
    let started = Instant::now();
    let mut p = once(&sandbox, &server, &[]);
    ok(&mut p);
    let lines = server.lines(SESSION_ND, AGENT_ND);
    assert_eq!(
        lines.keys().copied().collect::<Vec<_>>(),
        vec![0, 1_000_001, 1_000_002]
    );
    assert_delivered(&sandbox, &server, SESSION_ND, AGENT_ND);
    assert_eq!(stops_for_child(&server.hooks("subagent-stop")), 1);
    assert_eq!(inspect(&sandbox)["lines"]["blank"], 1_000_000);
    eprintln!("a million blank lines: {:?}", started.elapsed());
}

#[test]
fn a_session_meta_that_is_not_the_first_line_is_not_the_header() {
    let sandbox = Sandbox::new();
    // A fork's copied history can put another thread's session_meta after line 0.
    sandbox.append_lines(&[
        harness::task_started("t1"),
        harness::session_meta(),
        harness::task_complete("t1", "done"),
    ]);
    let server = FakeKcap::start();
    let mut p = once(&sandbox, &server, &[]);
    assert_eq!(p.exit_code(ONCE, "--once without a header"), 2);
    assert!(
        p.stderr().contains("no readable session_meta"),
        "{}",
        p.stderr()
    );
    assert_eq!(server.requests().len(), 0);
    // With ids on the command line it ships under them, not under the later meta's.
    let mut p = sandbox.spawn(
        sandbox
            .cmd(Some(&server.url()))
            .args(["watch", "--once", "--stop-grace", "0s", SESSION_ND])
            .arg(&sandbox.rollout)
            .args(["--agent-id", AGENT_ND]),
    );
    ok(&mut p);
    assert_delivered(&sandbox, &server, SESSION_ND, AGENT_ND);
    assert!(!server.stream_exists(SESSION_ND, ""));
    assert_eq!(stops_for_child(&server.hooks("subagent-stop")), 1);
}

// Unix only: the watchers are ended with SIGTERM, which Windows does not have.
#[test]
#[cfg(unix)]
fn ids_with_and_without_dashes_name_the_same_watcher_and_ship_without_dashes() {
    let sandbox = Sandbox::new();
    sandbox.append_lines(&[harness::child_meta(), harness::task_started("t1")]);
    let server = FakeKcap::start();
    let mut dashed = sandbox.spawn(
        sandbox
            .cmd(Some(&server.url()))
            .args(["watch", SESSION])
            .arg(&sandbox.rollout)
            .args(["--agent-id", AGENT]),
    );
    assert!(wait_until(Duration::from_secs(20), || server
        .lines(SESSION_ND, AGENT_ND)
        .len()
        == 2));
    let mut plain = sandbox.spawn(
        sandbox
            .cmd(Some(&server.url()))
            .args(["watch", SESSION_ND])
            .arg(&sandbox.rollout)
            .args(["--agent-id", AGENT_ND]),
    );
    assert_eq!(plain.exit_code(ONCE, "second watcher"), 75);
    assert!(
        plain
            .stderr()
            .contains("another watcher is already running"),
        "{}",
        plain.stderr()
    );
    let mut bare = sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &[]));
    assert_eq!(bare.exit_code(ONCE, "third watcher"), 75);
    ok_after_term(&mut dashed);
    for r in server.requests() {
        assert!(!r.path.contains(SESSION), "{}", r.path);
        if let Some(body) = r.json() {
            for field in ["session_id", "agent_id"] {
                assert!(
                    body[field].as_str().is_none_or(|id| !id.contains('-')),
                    "{} went out with dashes: {body}",
                    field
                );
            }
        }
    }
    assert_eq!(
        server.requests_to("last-line")[0].query.as_deref(),
        Some(&*format!("agentId={AGENT_ND}"))
    );
}

// Unix only: the watcher is ended with SIGTERM, which Windows does not have.
#[test]
#[cfg(unix)]
fn absurd_kcap_values_warn_by_name_and_the_watcher_still_works() {
    let sandbox = Sandbox::new();
    sandbox.append(&child_with(&[]));
    let server = FakeKcap::start();
    let absurd = [
        ("KCAP_CODEX_IDLE_MINUTES", "99999999999999999999999"),
        ("KCAP_CODEX_SUBAGENT_REAP_MINUTES", "-5"),
        ("KCAP_CODEX_SUBAGENT_IDLE_MINUTES", "1e3"),
        ("KCAP_CODEX_STALL_MINUTES", ""),
        ("KCAP_WATCHER_LIFETIME_HOURS", "18446744073709551616"),
        ("KCAP_MAX_PAUSE_CREDIT_MINUTES", "ten"),
        ("KCAP_WATCH_POLL_MS", "0"),
        ("KCAP_WATCH_FORCE_POLL", "maybe"),
        ("KCAP_LOG", "kcap_watch=[[["),
        ("KCAP_LOG_FORMAT", "json"),
        ("KCAP_PROFILE", "../../../etc/passwd"),
        ("KCAP_TOKEN", "\u{7f}\t "),
    ];
    // The stop grace stays 0 through its flag; everything else comes from the variables.
    let mut w = sandbox.spawn(
        sandbox
            .watch(Some(&server.url()), &[])
            .envs(absurd.iter().copied()),
    );
    assert!(
        wait_until(Duration::from_secs(20), || stops_for_child(
            &server.hooks("subagent-stop")
        ) == 1),
        "{}",
        w.stderr()
    );
    assert_delivered(&sandbox, &server, SESSION_ND, AGENT_ND);
    let err = w.stderr();
    for var in [
        "KCAP_CODEX_SUBAGENT_REAP_MINUTES",
        "KCAP_MAX_PAUSE_CREDIT_MINUTES",
        "KCAP_WATCH_POLL_MS",
        "KCAP_LOG",
        "KCAP_CODEX_IDLE_MINUTES",
        "KCAP_WATCHER_LIFETIME_HOURS",
    ] {
        assert!(err.contains(var), "no warning names {var}:\n{err}");
    }
    // Huge windows were clamped, not wrapped to tiny ones: the watcher did not end itself.
    std::thread::sleep(Duration::from_secs(2));
    assert!(w.alive(), "{err}");
    ok_after_term(&mut w);

    // The one variable that stops a watcher: a server URL it cannot use.
    for url in ["ftp://kcap.example.com", "not a url", "http://"] {
        let mut p = sandbox.spawn(&mut sandbox.watch(Some(url), &["--once"]));
        assert_eq!(p.exit_code(ONCE, "bad KCAP_URL"), 2, "{url}");
        assert!(p.stderr().contains("KCAP_URL"), "{}", p.stderr());
        p.assert_no_panic();
    }
}

/// Tool output a redactor could spend the square of its length on, 256 KiB of each: values
/// inside values (`token=token=…`, with colour codes or zero-width spaces between name and
/// `=`), a Secret manifest's `kind: Secret` line over and over, and letters without a blank
/// that hold keywords by chance. Each is shipped, redacted
/// as the redactor redacts it, and the run ends: at a few dozen bytes a step, a megabyte of
/// the first took a minute and the watcher shipped nothing meanwhile.
#[test]
fn lines_whose_values_hold_values_are_shipped_without_a_hang() {
    // A core for seconds in a debug build: one such test at a time (see `support::serial`).
    let _serial = support::serial();
    const SIZE: usize = 256 * 1024;
    let fill = |unit: &str| unit.repeat(SIZE / unit.len());
    let stride: String = (0..SIZE)
        .map(|i| char::from(b'a' + ((i * 7 + 3) % 26) as u8))
        .collect();
    let texts = [
        fill("token="),
        fill("token\u{1b}[0m="),
        fill("token\u{200b}="),
        fill("password: "),
        fill("kind: Secret\n"),
        format!(
            "GITHUB_TOKEN=ghp_{}\n{stride}",
            "Z9y8X7w6V5u4T3s2R1q0".repeat(2)
        ),
    ];
    let lines: Vec<String> = texts
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            let id = format!("c{i}");
            [harness::call(&id, "exec_command"), harness::output(&id, t)]
        })
        .collect();
    let middle: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
    let sandbox = Sandbox::new();
    sandbox.append(&child_with(&middle));
    // Offline: every line goes to the spool, however long the debug build takes to redact it
    // (with a server, a line redacted past the run's 4 s budget is spooled instead: the same
    // lines, in one place or the other).
    let mut p = sandbox.spawn(&mut sandbox.watch(None, &["--once"]));
    p.wait_or_fail(ONCE, "watch --once");
    p.assert_no_panic();
    ok(&mut p);
    let spool = sandbox
        .config
        .join(format!("transcript-spool/{SESSION_ND}.transcript.jsonl"));
    let records = harness::spool_records(&spool);
    let mut spooled = std::collections::BTreeMap::new();
    for r in &records {
        for (n, l) in r["line_numbers"]
            .as_array()
            .unwrap()
            .iter()
            .zip(r["lines"].as_array().unwrap())
        {
            spooled.insert(n.as_u64().unwrap(), l.as_str().unwrap().to_owned());
        }
    }
    let want = expected_lines(&sandbox.rollout_bytes());
    assert!(
        spooled == want,
        "spooled lines differ:\n{}",
        diff_lines(&spooled, &want)
    );
    assert!(
        spooled.values().all(|l| !l.contains("ghp_Z9y8")),
        "the token was spooled"
    );
}
