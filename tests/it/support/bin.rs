//! Running the real `kcap-watch` binary from tests: a clean `KCAP_*` environment, a private
//! config dir per test, bounded waits.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary with every inherited `KCAP_*` variable removed and `KCAP_CONFIG_DIR` set.
pub fn kcap_watch(config_dir: &Path) -> Command {
    let mut c = super::harness::kcap_watch();
    c.env("KCAP_CONFIG_DIR", config_dir);
    c.env("KCAP_LOG", "info");
    c
}

/// Starting a process the way every test does: Wine now and then fails a process's creation
/// itself under load ("Internal error", 1359) before the program runs a line, so such a
/// failure is tried again, a few times, 100 ms apart. Nothing of the program has run, so the
/// retry tests the same thing; any other error is returned at once.
pub trait SpawnRetry {
    fn spawn_retrying(&mut self) -> std::io::Result<Child>;
}

impl SpawnRetry for Command {
    fn spawn_retrying(&mut self) -> std::io::Result<Child> {
        let mut tries = 0;
        loop {
            match self.spawn() {
                Err(e) if tries < 4 && e.raw_os_error() == Some(1359) => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                result => return result,
            }
        }
    }
}

/// Runs to completion, with a deadline (a hang fails the test instead of the suite).
pub fn run(mut cmd: Command, timeout: Duration) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd
        .spawn_retrying()
        .unwrap_or_else(|e| panic!("spawn kcap-watch: {e:?}"));
    wait_output(child, timeout)
}

pub fn wait_output(mut child: Child, timeout: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("collect output");
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            panic!(
                "kcap-watch did not exit within {timeout:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a spawned watcher to exit by itself.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> ExitStatus {
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

/// Sends a signal to a child process.
#[cfg(unix)]
pub fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

/// Polls `done` every 20 ms until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// Copies a fixture into `dir` (a fresh file: its mtime is now). Written anew rather than
/// with `fs::copy`, which on Windows keeps the source's modification time.
pub fn fixture_copy(name: &str, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/codex")
        .join(name);
    let dst = dir.join(name);
    std::fs::write(&dst, std::fs::read(&src).expect("read fixture")).expect("copy fixture");
    dst
}

/// The non-blank lines of a file, numbered physically (what a server must end up holding,
/// before redaction).
pub fn physical_lines(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let data = std::fs::read(path).expect("read rollout");
    let mut out = Vec::new();
    let complete = match data.iter().rposition(|b| *b == b'\n') {
        Some(i) => &data[..=i],
        None => &data[..0],
    };
    for (i, raw) in complete.split(|b| *b == b'\n').enumerate() {
        if i as u64 >= complete.iter().filter(|b| **b == b'\n').count() as u64 {
            break;
        }
        let mut line = raw;
        if i == 0 && line.starts_with(b"\xEF\xBB\xBF") {
            line = &line[3..];
        }
        if line.ends_with(b"\r") {
            line = &line[..line.len() - 1];
        }
        if line.iter().all(|b| matches!(b, b' ' | b'\t')) {
            continue;
        }
        out.push((i as u64, line.to_vec()));
    }
    out
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits (up to `timeout`) for a spawned process to exit and returns its status with its peak
/// resident memory in KiB, the last `VmHWM` read from `/proc` before it ended (sampled every
/// 5 ms). Not `ru_maxrss` from `wait4`: that counts the test process's own pages, shared with
/// the child between its fork and its exec.
#[cfg(target_os = "linux")]
pub fn wait_peak_rss(mut child: Child, timeout: Duration) -> (ExitStatus, u64) {
    let status_file = format!("/proc/{}/status", child.id());
    let start = Instant::now();
    let mut peak = 0;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status_file)
            && let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            return (status, peak);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            panic!("process {} did not exit within {timeout:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
