//! A stand-in for the kcap CLI's Codex session watcher, written from its code
//! (`kurrent-io/kcap-cli`: `WatchCommand.ScanCodexSubagents`,
//! `WatcherManager.EnsureWatcherRunning`/`IsWatcherAlive`/`KillWatcher`,
//! `CodexSubagentTeardown`), as far as the daemon meets it:
//!
//! - it is a real process whose command line is `<exe> watch <session> <rollout> ...` and whose
//!   environment carries `KCAP_URL`, `KCAP_CONFIG_DIR` and `CODEX_HOME`, as the kcap CLI's
//!   spawner starts its session watcher (here the exe is the test binary, which runs only the
//!   ignored test `daemon::kcap_standin_process`: the extra words are test-name filters);
//! - it writes `<watchers>/<session>.pid` (`<pid>\n<start token>`), `.started` and, on every
//!   loop turn, `.heartbeat`;
//! - every second it scans `CODEX_HOME` for rollouts whose header names the session as
//!   parent (direct children only, as `CodexSubagentDiscovery` does), and for a new one or one
//!   whose mtime advanced (`ChildRolloutAdvanced`) posts `subagent-start` (new only) to the
//!   server, then ensures a watcher: alive by `IsWatcherAlive` (pid running; past 30 s from
//!   `.started`, heartbeat at most 20 s old) or, under `<key>.spawnlock` (skipped when
//!   contended) and checked again, it would spawn one: the stand-in records the key instead
//!   (`no-watcher.txt`, each key with the time), which the tests require to stay empty but
//!   for a look that lands before the supervisor's claim;
//! - when `<dir>/end` appears, its session ends: the teardown kills every child key it ensured
//!   as `KillWatcher` does (unix: SIGTERM to the pid in `<key>.pid`, up to 5 s for it to
//!   exit, then SIGKILL; Windows, which has no SIGTERM: the process killed at once, then up to
//!   5 s for it to exit; the pid, heartbeat and started files removed), removes its own files
//!   and exits.
//!
//! It runs wherever the suite does: on Windows its command line and environment are read by
//! the daemon from the process itself, as on Linux (`kcap_watch::platform::proc_info`).
#![allow(dead_code)]

use super::bin::SpawnRetry;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Set in the stand-in's environment: run as the stand-in.
pub const MARK: &str = "KCAP_STANDIN";
const DIR: &str = "KCAP_STANDIN_DIR";

/// A running stand-in (killed when dropped).
pub struct Standin {
    pub child: Child,
    pub dir: PathBuf,
    pub key: String,
}

impl Standin {
    /// Starts the stand-in for session `key` (32 hex digits) watching `rollout`.
    pub fn start(
        dir: &Path,
        key: &str,
        rollout: &Path,
        server: &str,
        config: &Path,
        codex_home: &Path,
    ) -> Standin {
        fs::create_dir_all(dir).unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .arg("watch")
            .arg(key)
            .arg(rollout)
            .args([
                "daemon::kcap_standin_process",
                "--exact",
                "--ignored",
                "--quiet",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(MARK, "1")
            .env(DIR, dir)
            .env("KCAP_URL", server)
            .env("KCAP_CONFIG_DIR", config)
            .env("CODEX_HOME", codex_home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("stderr.txt")).unwrap())
            .spawn_retrying()
            .unwrap();
        Standin {
            child,
            dir: dir.to_path_buf(),
            key: key.to_owned(),
        }
    }

    /// Child keys it found without a live watcher (each a line).
    pub fn no_watcher(&self) -> Vec<String> {
        fs::read_to_string(self.dir.join("no-watcher.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// [`Standin::no_watcher`] with when each was found.
    pub fn no_watcher_at(&self) -> Vec<(String, jiff::Timestamp)> {
        self.no_watcher()
            .iter()
            .map(|l| {
                let (key, at) = l.split_once(' ').expect("`<key> <time>`");
                (key.to_owned(), at.parse().expect("an RFC 3339 time"))
            })
            .collect()
    }

    /// Child keys it has ensured a watcher for.
    pub fn ensured(&self) -> BTreeSet<String> {
        fs::read_to_string(self.dir.join("ensured.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Ends its session: the teardown runs, then it exits. Returns once it has.
    pub fn end_session(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        fs::write(self.dir.join("end"), "").unwrap();
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// What its teardown logged.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("stderr.txt")).unwrap_or_default()
    }
}

impl Drop for Standin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stand-in's body (runs in the spawned process).
pub fn main() {
    let args: Vec<String> = std::env::args().collect();
    let at = args
        .iter()
        .position(|a| a == "watch")
        .expect("watch <session> <rollout>");
    let session = args[at + 1].clone();
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let server = std::env::var("KCAP_URL").unwrap();
    let config = PathBuf::from(std::env::var("KCAP_CONFIG_DIR").unwrap());
    let home = PathBuf::from(std::env::var("CODEX_HOME").unwrap());
    let watchers = config.join("watchers");
    fs::create_dir_all(&watchers).unwrap();
    let token = kcap_watch::files::process_start_token(std::process::id()).unwrap();
    write_atomic(
        &watchers.join(format!("{session}.pid")),
        &format!("{}\n{token}", std::process::id()),
    );
    write_atomic(&watchers.join(format!("{session}.started")), &now_text());
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut mtimes: HashMap<PathBuf, SystemTime> = HashMap::new();
    let mut spawned: BTreeSet<String> = BTreeSet::new();
    let mut next_scan = Instant::now();
    loop {
        if dir.join("end").exists() {
            teardown(&watchers, &spawned);
            for suffix in ["pid", "started", "heartbeat"] {
                let _ = fs::remove_file(watchers.join(format!("{session}.{suffix}")));
            }
            return;
        }
        if Instant::now() >= next_scan {
            write_atomic(&watchers.join(format!("{session}.heartbeat")), &now_text());
            for (path, child) in children(&home, &session) {
                let mtime = fs::metadata(&path).and_then(|m| m.modified()).ok();
                let advanced = mtime.is_some_and(|m| mtimes.insert(path.clone(), m) != Some(m));
                let is_new = seen.insert(path.clone());
                if !is_new && !advanced {
                    continue;
                }
                let key = format!("{session}-{child}");
                if is_new && !post_start(&server, &session, &child) {
                    seen.remove(&path);
                    continue;
                }
                ensure_watcher(&watchers, &key, &dir);
                if spawned.insert(key.clone()) {
                    append(&dir.join("ensured.txt"), &key);
                }
            }
            next_scan += Duration::from_secs(1);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn now_text() -> String {
    jiff::Timestamp::now().to_string()
}

/// Writes `path` whole through a temporary file. On Windows a rename over a file someone
/// is reading at that moment can be refused: tried again for up to a second (a heartbeat that
/// still fails is written at the next loop turn).
fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, text).unwrap();
    for _ in 0..50 {
        if fs::rename(&tmp, path).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = fs::remove_file(&tmp);
}

fn append(path: &Path, line: &str) {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

fn bare(id: &str) -> String {
    id.replace('-', "").to_ascii_lowercase()
}

/// Direct children of `session` under `home` (live and archived), by header.
fn children(home: &Path, session: &str) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let mut stack = vec![home.join("sessions"), home.join("archived_sessions")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("rollout-") && n.ends_with(".jsonl")
            }) {
                files.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for path in files {
        let Ok(f) = fs::File::open(&path) else {
            continue;
        };
        let mut first = String::new();
        if BufReader::new(f).read_line(&mut first).is_err() || !first.ends_with('\n') {
            // A header still being written is retried next scan.
            continue;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&first) else {
            continue;
        };
        let p = &v["payload"];
        let parent = p["parent_thread_id"]
            .as_str()
            .or_else(|| p["source"]["subagent"]["thread_spawn"]["parent_thread_id"].as_str());
        if let (Some(parent), Some(id)) = (parent, p["id"].as_str())
            && bare(parent) == session
        {
            out.push((path, bare(id)));
        }
    }
    out
}

/// `POST /hooks/subagent-start` over a plain HTTP/1.1 connection; true on a 2xx.
fn post_start(server: &str, session: &str, agent: &str) -> bool {
    let hostport = server.trim_start_matches("http://").trim_end_matches('/');
    let Ok(mut s) = std::net::TcpStream::connect(hostport) else {
        return false;
    };
    let body = serde_json::json!({
        "session_id": session,
        "agent_id": agent,
        "agent_type": "codex-subagent",
        "vendor": "codex",
    })
    .to_string();
    let req = format!(
        "POST /hooks/subagent-start HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.starts_with("HTTP/1.1 2")
}

/// `IsWatcherAlive`: the pid on line 1 runs, and past 30 s from `.started` the heartbeat is
/// at most 20 s old.
fn watcher_alive(watchers: &Path, key: &str) -> bool {
    let read = |suffix: &str| fs::read_to_string(watchers.join(format!("{key}.{suffix}"))).ok();
    let Some(pid) = read("pid").and_then(|t| t.lines().next()?.trim().parse::<u32>().ok()) else {
        return false;
    };
    if !runs(pid) {
        return false;
    }
    let now = jiff::Timestamp::now();
    let time = |suffix: &str| read(suffix).and_then(|t| t.trim().parse::<jiff::Timestamp>().ok());
    let started = time("started").unwrap_or(now);
    if (now - started).get_seconds() <= 30 {
        return true;
    }
    time("heartbeat").is_some_and(|beat| (now - beat).get_milliseconds() <= 20_000)
}

/// Whether `pid` runs, as .NET's `HasExited` answers it: a zombie has exited.
#[cfg(target_os = "linux")]
fn runs(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| !s[i + 2..].starts_with('Z')))
        .unwrap_or(false)
}

/// Whether `pid` runs (an exited process is not running on Windows, whoever holds it).
#[cfg(not(target_os = "linux"))]
fn runs(pid: u32) -> bool {
    kcap_watch::platform::process::alive(pid)
}

/// How `KillWatcher` first asks a watcher to end: SIGTERM on unix, where it spools before
/// exiting; Windows has none, and `Process.Kill` ends it at once.
fn ask_to_end(pid: u32) {
    if cfg!(unix) {
        let _ = kcap_watch::platform::detached::terminate(pid);
    } else {
        let _ = kcap_watch::platform::detached::kill(pid);
    }
}

/// `EnsureWatcherRunning`, recording instead of spawning.
fn ensure_watcher(watchers: &Path, key: &str, dir: &Path) {
    if watcher_alive(watchers, key) {
        return;
    }
    let Ok(lock) = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(watchers.join(format!("{key}.spawnlock")))
    else {
        return;
    };
    if lock.try_lock().is_err() {
        return;
    }
    if watcher_alive(watchers, key) {
        return;
    }
    append(
        &dir.join("no-watcher.txt"),
        &format!("{key} {}", now_text()),
    );
}

/// `CodexSubagentTeardown` → `KillWatchers`: every key at once, each as `KillWatcher`.
fn teardown(watchers: &Path, keys: &BTreeSet<String>) {
    let threads: Vec<_> = keys
        .iter()
        .map(|key| {
            let watchers = watchers.to_path_buf();
            let key = key.clone();
            std::thread::spawn(move || kill_watcher(&watchers, &key))
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

fn kill_watcher(watchers: &Path, key: &str) {
    let pid_path = watchers.join(format!("{key}.pid"));
    let remove_markers = || {
        let _ = fs::remove_file(watchers.join(format!("{key}.heartbeat")));
        let _ = fs::remove_file(watchers.join(format!("{key}.started")));
    };
    let Ok(text) = fs::read_to_string(&pid_path) else {
        remove_markers();
        return;
    };
    let mut lines = text.lines();
    if let Some(pid) = lines.next().and_then(|l| l.trim().parse::<u32>().ok()) {
        let token = lines.next().map(str::trim).unwrap_or("");
        let recycled = !token.is_empty()
            && kcap_watch::files::process_start_token(pid).is_some_and(|t| t != token);
        if !recycled {
            ask_to_end(pid);
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(5) && runs(pid) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if runs(pid) {
                eprintln!("{key}: force-killed {pid} after 5 s");
                let _ = kcap_watch::platform::detached::kill(pid);
            } else {
                eprintln!("{key}: {pid} exited gracefully");
            }
        }
    }
    let _ = fs::remove_file(&pid_path);
    remove_markers();
}
