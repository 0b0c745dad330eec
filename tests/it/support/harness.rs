//! Running the real binary under test: one sandbox (temp dir, config root, rollout path) per
//! test, child processes whose stderr goes to a file (so a process killed with SIGKILL still
//! leaves its log behind), a heartbeat sampler, and the shipped form of a rollout's lines as
//! the server must end up holding them.
//!
//! Part of `support` (`use support::harness;`); its rollout lines come from the shared
//! builder, [`super::rollout`].
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kcap_watch::ship::capture;
use kcap_watch::ship::redact;
use kcap_watch::time::Ts;

use super::rollout;
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_kcap-watch");

/// The child's parent session and its own id, as Codex writes them (with dashes)...
pub const SESSION: &str = "0199a2b4-c0de-7000-a000-000000000001";
pub const AGENT: &str = "0199a2b4-c0de-7000-a000-0000000000c2";
/// ...and as the watcher sends them.
pub const SESSION_ND: &str = "0199a2b4c0de7000a000000000000001";
pub const AGENT_ND: &str = "0199a2b4c0de7000a0000000000000c2";

/// The watcher key (`<session>-<agent>`) of [`SESSION`]/[`AGENT`].
pub fn child_key() -> String {
    format!("{SESSION_ND}-{AGENT_ND}")
}

/// `kcap-watch` with no `KCAP_*` variable inherited from the test's environment.
pub fn kcap_watch() -> Command {
    let mut c = Command::new(BIN);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("KCAP_") {
            c.env_remove(k);
        }
    }
    c.stdin(Stdio::null());
    c
}

/// A temp dir holding the config root (not created: the watcher makes it) and the rollout.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub rollout: PathBuf,
    procs: Mutex<u32>,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("config");
        let rollout = dir.path().join("rollout.jsonl");
        Sandbox {
            dir,
            config,
            rollout,
            procs: Mutex::new(0),
        }
    }

    /// `kcap-watch <args>` rooted in this sandbox, logging JSON, polling every 50 ms.
    /// `server` is the `KCAP_URL` (offline when `None`).
    pub fn cmd(&self, server: Option<&str>) -> Command {
        let mut c = kcap_watch();
        c.env("KCAP_CONFIG_DIR", &self.config)
            .env("KCAP_LOG_FORMAT", "json")
            .env("KCAP_WATCH_POLL_MS", "50");
        if let Some(url) = server {
            c.env("KCAP_URL", url);
        }
        c
    }

    /// `kcap-watch watch <rollout> --stop-grace 0s <extra>`.
    pub fn watch(&self, server: Option<&str>, extra: &[&str]) -> Command {
        let mut c = self.cmd(server);
        c.arg("watch")
            .arg(&self.rollout)
            .args(["--stop-grace", "0s"]);
        c.args(extra);
        c
    }

    /// Starts `cmd`, its stdout and stderr going to files in the sandbox.
    pub fn spawn(&self, cmd: &mut Command) -> Proc {
        let n = {
            let mut n = self.procs.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        Proc::spawn(cmd, self.dir.path(), &format!("proc{n}"))
    }

    pub fn watchers_dir(&self) -> PathBuf {
        self.config.join("watchers")
    }

    pub fn heartbeat(&self, key: &str) -> PathBuf {
        self.watchers_dir().join(format!("{key}.heartbeat"))
    }

    /// Every `<config>/logs/*.log`, concatenated.
    pub fn log_files(&self) -> String {
        let mut out = String::new();
        if let Ok(entries) = std::fs::read_dir(self.config.join("logs")) {
            for e in entries.flatten() {
                out.push_str(&String::from_utf8_lossy(
                    &std::fs::read(e.path()).unwrap_or_default(),
                ));
            }
        }
        out
    }

    /// Appends to the rollout (creating it), as Codex does: one `write` per call, no buffer.
    pub fn append(&self, bytes: &[u8]) {
        append_bytes(&self.rollout, bytes);
    }

    pub fn append_lines<S: AsRef<str>>(&self, lines: &[S]) {
        append_lines(&self.rollout, lines);
    }

    /// The rollout's bytes.
    pub fn rollout_bytes(&self) -> Vec<u8> {
        std::fs::read(&self.rollout).unwrap_or_default()
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox::new()
    }
}

/// A running (or finished) `kcap-watch`; killed with SIGKILL when dropped.
pub struct Proc {
    child: Child,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
    status: Option<ExitStatus>,
    pub started_at: Instant,
    pub killed: bool,
}

impl Proc {
    pub fn spawn(cmd: &mut Command, dir: &Path, name: &str) -> Proc {
        let stdout_path = dir.join(format!("{name}.stdout"));
        let stderr_path = dir.join(format!("{name}.stderr"));
        // So that `terminate` can reach it on Windows too (its own process group).
        kcap_watch::platform::signals::stoppable(cmd);
        let mut attempt = 0;
        let child = loop {
            let out = File::create(&stdout_path).expect("stdout file");
            let err = File::create(&stderr_path).expect("stderr file");
            match cmd
                .stdout(Stdio::from(out))
                .stderr(Stdio::from(err))
                .spawn()
            {
                Ok(child) => break child,
                // Wine's process creation now and then fails with ERROR_INTERNAL_ERROR (1359)
                // before the program runs at all; a second try starts it. Nothing of
                // kcap-watch has run, so trying again tests the same thing.
                Err(e) if cfg!(windows) && e.raw_os_error() == Some(1359) && attempt < 4 => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("spawn kcap-watch: {e:?}"),
            }
        };
        Proc {
            child,
            stdout_path,
            stderr_path,
            status: None,
            started_at: Instant::now(),
            killed: false,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.stdout_path).unwrap_or_default()).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.stderr_path).unwrap_or_default()).into_owned()
    }

    /// The JSON log records on stderr (other lines, such as the final error, are skipped).
    pub fn events(&self) -> Vec<Value> {
        self.stderr()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }

    /// Records whose `fields.event` is `name`.
    pub fn events_named(&self, name: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["fields"]["event"] == name)
            .collect()
    }

    /// How long the process took, by its own log clock, from its first record to the first
    /// record named `event` (`None` when it logged none). Unlike a clock in the test, it does
    /// not count starting the process, which takes seconds under Wine on a loaded machine.
    pub fn logged_until(&self, event: &str) -> Option<Duration> {
        let at = |e: &Value| {
            e["timestamp"]
                .as_str()
                .and_then(kcap_watch::time::Ts::parse_rfc3339)
        };
        let events = self.events();
        let first = at(events.first()?)?;
        let then = events.iter().find(|e| e["fields"]["event"] == event)?;
        Some(at(then)?.duration_since(first))
    }

    pub fn has_event(&self, name: &str) -> bool {
        !self.events_named(name).is_empty()
    }

    /// Whether it logged `watcher_started` with its key known, i.e. it holds the lock.
    pub fn holds_lock(&self) -> bool {
        self.events_named("watcher_started").iter().any(|e| {
            e["fields"]["session_id"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        })
    }

    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    pub fn alive(&mut self) -> bool {
        self.try_status().is_none()
    }

    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_status() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the exit; a process still running after `timeout` is a hang: it is killed
    /// and the test fails with its stderr.
    pub fn wait_or_fail(&mut self, timeout: Duration, what: &str) -> ExitStatus {
        match self.wait_timeout(timeout) {
            Some(s) => s,
            None => {
                self.kill9();
                let _ = self.wait_timeout(Duration::from_secs(5));
                panic!(
                    "{what}: kcap-watch did not exit within {timeout:?} (hang); stderr:\n{}",
                    self.stderr()
                );
            }
        }
    }

    /// The exit code, waiting at most `timeout`.
    pub fn exit_code(&mut self, timeout: Duration, what: &str) -> i32 {
        let s = self.wait_or_fail(timeout, what);
        s.code().unwrap_or_else(|| {
            panic!(
                "{what}: kcap-watch ended by a signal ({s:?}); stderr:\n{}",
                self.stderr()
            )
        })
    }

    #[cfg(unix)]
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; it has not been reaped while `status` is None.
        if self.status.is_none() {
            unsafe {
                libc::kill(self.child.id() as libc::pid_t, sig);
            }
        }
    }

    /// SIGKILL, without waiting.
    pub fn kill9(&mut self) {
        self.killed = true;
        if self.status.is_none() {
            // SIGKILL on unix, TerminateProcess on Windows.
            let _ = self.child.kill();
        }
    }

    /// SIGTERM (Ctrl-Break on Windows), then the exit code (a graceful end is exit 0).
    pub fn terminate(&mut self, timeout: Duration) -> i32 {
        if self.status.is_none() {
            kcap_watch::platform::signals::request_stop(self.child.id())
                .expect("send kcap-watch SIGTERM (Ctrl-Break)");
        }
        self.exit_code(timeout, "after SIGTERM")
    }

    /// Peak resident memory (`VmHWM`) in KiB, while the process runs.
    #[cfg(target_os = "linux")]
    pub fn vm_hwm_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// No panic message, no Rust backtrace on stderr.
    pub fn assert_no_panic(&self) {
        let err = self.stderr();
        assert!(
            !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
            "kcap-watch panicked:\n{err}"
        );
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Appends `bytes` to the file at `path` (creating it), as Codex does: one `write` per call,
/// no buffer that could split it.
pub fn append_bytes(path: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the rollout for appending");
    f.write_all(bytes).expect("append to the rollout");
}

/// Appends each of `lines` with its `\n`, in one write.
pub fn append_lines<S: AsRef<str>>(path: &Path, lines: &[S]) {
    let mut text = String::new();
    for l in lines {
        text.push_str(l.as_ref());
        text.push('\n');
    }
    append_bytes(path, text.as_bytes());
}

/// Polls `done` every 10 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Samples a heartbeat file every 100 ms from its own thread and keeps the oldest age seen.
pub struct HeartbeatSampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<(Duration, usize)>>,
}

impl HeartbeatSampler {
    pub fn start(path: PathBuf) -> HeartbeatSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut oldest = Duration::ZERO;
            let mut samples = 0;
            while !flag.load(Ordering::Relaxed) {
                if let Some(age) = heartbeat_age(&path) {
                    samples += 1;
                    oldest = oldest.max(age);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (oldest, samples)
        });
        HeartbeatSampler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling (call while the watcher still runs): the oldest age seen and how many
    /// samples were taken.
    pub fn finish(mut self) -> (Duration, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or((Duration::MAX, 0))
    }

    /// Asserts the heartbeat was sampled at least `min_samples` times and never older than 15 s
    /// (docs/behaviour.md S5).
    pub fn assert_fresh(self, min_samples: usize) {
        let (oldest, samples) = self.finish();
        assert!(
            samples >= min_samples,
            "the heartbeat file was seen only {samples} times (want {min_samples})"
        );
        assert!(
            oldest <= Duration::from_secs(15),
            "the heartbeat was {oldest:?} old at one point (limit 15 s)"
        );
    }
}

impl Drop for HeartbeatSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How old the heartbeat in `path` is (`None` while the file is missing or unreadable).
pub fn heartbeat_age(path: &Path) -> Option<Duration> {
    let text = std::fs::read_to_string(path).ok()?;
    let beat = Ts::parse_rfc3339(text.trim())?;
    Some(Ts::now().duration_since(beat))
}

/// What the server must hold for a rollout: every non-blank complete line, by its physical
/// number, in its shipped form: redacted, or the capture-loss marker.
pub fn expected_lines(bytes: &[u8]) -> BTreeMap<u64, String> {
    let mut out = BTreeMap::new();
    let mut rest = bytes;
    let mut number = 0u64;
    while let Some(i) = rest.iter().position(|&b| b == b'\n') {
        let mut line = &rest[..i];
        rest = &rest[i + 1..];
        if number == 0 {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        line = line.strip_suffix(b"\r").unwrap_or(line);
        let blank = line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r'));
        if !blank {
            let text = capture::capture(line, &redact::global()).unwrap_or_else(|l| l.marker());
            out.insert(number, text);
        }
        number += 1;
    }
    out
}

/// A readable diff of what the server holds against what it should.
pub fn diff_lines(got: &BTreeMap<u64, String>, want: &BTreeMap<u64, String>) -> String {
    let mut out = String::new();
    let short = |s: &str| s.chars().take(120).collect::<String>();
    for (n, w) in want {
        match got.get(n) {
            None => out.push_str(&format!("missing line {n}: {}\n", short(w))),
            Some(g) if g != w => out.push_str(&format!(
                "line {n} differs:\n  got  {}\n  want {}\n",
                short(g),
                short(w)
            )),
            _ => {}
        }
    }
    for n in got.keys().filter(|n| !want.contains_key(n)) {
        out.push_str(&format!("unexpected line {n}: {}\n", short(&got[n])));
    }
    if out.len() > 4000 {
        out.truncate(4000);
        out.push_str("...\n");
    }
    out
}

// ---- rollout lines (the shared builder, stamped with the wall clock) --------------------------

/// A child's `session_meta` (current Codex layout) for [`SESSION`]/[`AGENT`].
pub fn child_meta() -> String {
    rollout::session_meta(&format!(
        r#"{{"id":"{AGENT}","session_id":"{SESSION}","parent_thread_id":"{SESSION}","thread_source":"subagent","agent_path":"/root/reliability","agent_nickname":"Hypatia","source":{{"subagent":{{"thread_spawn":{{"parent_thread_id":"{SESSION}","depth":1}}}}}},"cwd":"/home/dev/src/acme-api","cli_version":"0.145.0"}}"#
    ))
    .now()
}

/// A session's (parent's) `session_meta` for [`SESSION`].
pub fn session_meta() -> String {
    rollout::session_meta(&format!(
        r#"{{"id":"{SESSION}","cwd":"/home/dev/src/acme-api","cli_version":"0.145.0"}}"#
    ))
    .now()
}

pub fn now() -> String {
    Ts::now().rfc3339()
}

pub fn event(payload: &str) -> String {
    rollout::event(payload).now()
}

pub fn item(payload: &str) -> String {
    rollout::item(payload).now()
}

pub fn task_started(turn: &str) -> String {
    rollout::task_started(turn).now()
}

pub fn task_complete(turn: &str, message: &str) -> String {
    rollout::task_complete(turn, message).now()
}

pub fn call(id: &str, name: &str) -> String {
    rollout::call(id, name, r#"{"cmd":"ls"}"#).now()
}

pub fn output(id: &str, text: &str) -> String {
    rollout::output(id, text).now()
}

pub fn message(text: &str) -> String {
    rollout::message(text).now()
}

/// One whole turn: start, a call and its output, a message, completion.
pub fn turn(n: usize) -> Vec<String> {
    let t = format!("turn-{n}");
    let c = format!("call-{n}");
    vec![
        task_started(&t),
        call(&c, "exec_command"),
        output(
            &c,
            &format!("Process exited with code 0\nOutput:\nrun {n} ok\n"),
        ),
        message(&format!("turn {n} done")),
        task_complete(&t, &format!("turn {n} done")),
    ]
}

/// The `subagent-stop` bodies the server accepted for [`SESSION`]/[`AGENT`].
pub fn stops_for_child(hooks: &[Value]) -> usize {
    hooks
        .iter()
        .filter(|h| h["session_id"] == SESSION_ND && h["agent_id"] == AGENT_ND)
        .count()
}

/// A port on loopback with nothing listening (bound, then released).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a probe port");
    l.local_addr().expect("probe address").port()
}

/// A TCP forwarder on a fixed loopback port, so a test can make a server "come up" on the
/// port a watcher was given while nothing listened there (connection refused until then).
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    /// Listens on `127.0.0.1:port` and forwards every connection to `upstream`.
    pub fn start(port: u16, upstream: std::net::SocketAddr) -> Forwarder {
        let listener = (0..100)
            .find_map(|_| {
                std::net::TcpListener::bind(("127.0.0.1", port))
                    .map_err(|_| std::thread::sleep(Duration::from_millis(20)))
                    .ok()
            })
            .expect("bind the forwarder's port");
        listener.set_nonblocking(true).expect("non-blocking");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((down, _)) => {
                        let _ = down.set_nonblocking(false);
                        let Ok(up) = std::net::TcpStream::connect(upstream) else {
                            continue;
                        };
                        pipe(&down, &up);
                        pipe(&up, &down);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Forwarder {
            stop,
            thread: Some(thread),
        }
    }
}

fn pipe(from: &std::net::TcpStream, to: &std::net::TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The JSON records of a spool file (transcript, hook or refused), one a line; missing: none.
pub fn spool_records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Every `line_numbers` entry of transcript-format records, in order.
pub fn record_line_numbers(records: &[serde_json::Value]) -> Vec<u64> {
    records
        .iter()
        .flat_map(|r| {
            r["line_numbers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_u64().unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}
