//! `kcap-watch daemon` with the real binary, beside a stand-in for the kcap CLI's session
//! watcher ([`support::kcap_standin`], written from the kcap CLI's code) and the fake kcap
//! server: two sessions, the daemon started before their sub-agents appear. Every child and
//! grandchild is shipped completely with one stop, the stand-ins never find a child without a
//! live watcher, one process runs per session, one session's teardown ends that session's
//! supervisor only, a killed supervisor is restarted and loses no line, a second daemon
//! exits 75, SIGTERM (Ctrl-Break on Windows) ends them all with 0 within 5 s; and the printed
//! service definitions are checked (`systemd-analyze verify` where installed, an XML parser
//! for the plist and the Task Scheduler XML).
//!
//! Run on Linux and, under Wine, on Windows: the daemon reads the stand-in's command line and
//! environment from the process itself on both (`kcap_watch::platform::proc_info`), and the
//! tests list a config directory's kcap-watch processes the same way. A test that has ended
//! its daemon gracefully on unix ends it on Windows as Task Scheduler's `schtasks /End` does,
//! with a kill ([`end_daemon`]); the graceful end is its own test there, which Wine cannot run
//! (no console control event reaches one process group).

use crate::support;
use support::bin::SpawnRetry;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;
use std::time::Instant;

use serde_json::Value;
use support::FakeKcap;
use support::bin::kcap_watch;
use support::bin::wait_for;
use support::harness::BIN;
use support::harness::{append_lines, turn};
use support::kcap_standin::{self, Standin};

const ROOT: &str = "019fa981-2dca-7a31-9c55-3b1f0e6d2a01";
const CHILD_A: &str = "019fa981-6ea2-7b02-8d11-5c2e9f7a4b02";
const CHILD_B: &str = "019fb1f2-6d40-7b19-9e35-4f8c2a1d6066";
const GRANDCHILD: &str = "019fb1c0-5a18-7e03-8b2d-7c41f9e6a033";

const WAIT: Duration = Duration::from_secs(30);

/// The body of the stand-in process ([`Standin::start`] runs this test binary with it).
#[test]
#[ignore = "the body of the kcap CLI stand-in process, not a test of its own"]
fn kcap_standin_process() {
    if std::env::var_os(kcap_standin::MARK).is_some() {
        kcap_standin::main();
    }
}

fn bare(id: &str) -> String {
    id.replace('-', "")
}

fn fixture(name: &str) -> String {
    fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/codex")
            .join(name),
    )
    .unwrap()
}

/// One session's ids: session 1 uses the fixtures' own, session 2 the same with `019f`
/// replaced by `029f` everywhere (distinct threads in the same Codex home).
#[derive(Clone, Copy)]
struct Ids {
    n: u8,
}

impl Ids {
    fn id(&self, id: &str) -> String {
        if self.n == 1 {
            id.to_owned()
        } else {
            id.replace("019f", "029f")
        }
    }
    fn root(&self) -> String {
        self.id(ROOT)
    }
    fn key(&self) -> String {
        bare(&self.root())
    }
    fn text(&self, text: &str) -> String {
        if self.n == 1 {
            text.to_owned()
        } else {
            text.replace("019f", "029f")
        }
    }
}

/// A descendant: its id and rollout.
struct Descendant {
    id: String,
    path: PathBuf,
    text: String,
}

struct World {
    tmp: tempfile::TempDir,
    home: PathBuf,
    config: PathBuf,
    server: FakeKcap,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("codex");
        fs::create_dir_all(home.join("sessions/2026/07/28")).unwrap();
        World {
            config: tmp.path().join("kcap"),
            home,
            tmp,
            server: FakeKcap::start(),
        }
    }

    fn day(&self) -> PathBuf {
        self.home.join("sessions/2026/07/28")
    }

    /// Writes session `ids`' own rollout and returns its path.
    fn session(&self, ids: Ids) -> PathBuf {
        let path = self
            .day()
            .join(format!("rollout-2026-07-28T22-13-45-{}.jsonl", ids.root()));
        fs::write(&path, ids.text(&fixture("parent-session.jsonl"))).unwrap();
        path
    }

    /// Children A and B of the session and B's child, each a two-turn child rollout.
    fn tree(&self, ids: Ids) -> Vec<Descendant> {
        let two_turns = fixture("child-two-turns.jsonl");
        let make = |own: &str, parent: &str, minute: u32| {
            let text = two_turns.replace(ROOT, parent).replace(CHILD_A, own);
            let own = ids.id(own);
            Descendant {
                path: self
                    .day()
                    .join(format!("rollout-2026-07-28T22-{minute:02}-05-{own}.jsonl")),
                text: ids.text(&text),
                id: own,
            }
        };
        vec![
            make(CHILD_A, ROOT, 14),
            make(CHILD_B, ROOT, 15),
            make(GRANDCHILD, CHILD_B, 16),
        ]
    }

    fn standin(&self, ids: Ids, rollout: &Path) -> Standin {
        Standin::start(
            &self.tmp.path().join(format!("standin-{}", ids.n)),
            &ids.key(),
            rollout,
            &self.server.url(),
            &self.config,
            &self.home,
        )
    }

    /// The daemon, with no KCAP_URL of its own: the server comes from the session watchers.
    fn daemon(&self, log: &str) -> Child {
        self.daemon_with(log, &[])
    }

    /// [`World::daemon`] with more variables set.
    fn daemon_with(&self, log: &str, env: &[(&str, &str)]) -> Child {
        self.daemon_with_flags(log, env, &[])
    }

    /// [`World::daemon_with`] and settings flags after `daemon` (passed on to supervisors).
    fn daemon_with_flags(&self, log: &str, env: &[(&str, &str)], flags: &[&str]) -> Child {
        let mut c = kcap_watch(&self.config);
        c.env_remove("CODEX_HOME")
            .env("KCAP_CODEX_SUBAGENT_IDLE_MINUTES", "0")
            .env("KCAP_WATCH_POLL_MS", "100")
            .env("KCAP_LOG_FORMAT", "json")
            .envs(env.iter().copied())
            .arg("daemon")
            .args(flags)
            .stdout(Stdio::null())
            .stderr(fs::File::create(self.tmp.path().join(log)).unwrap());
        // Its own process group on Windows, as Task Scheduler starts it: Ctrl-Break reaches it.
        kcap_watch::platform::signals::stoppable(&mut c);
        c.spawn_retrying().unwrap()
    }

    /// Waits until the stand-in of every session in `ids` has written its pid file.
    fn standins_started(&self, ids: &[Ids]) {
        let watchers = self.config.join("watchers");
        assert!(
            wait_for(WAIT, || ids
                .iter()
                .all(|i| watchers.join(format!("{}.pid", i.key())).exists())),
            "the stand-ins did not start"
        );
    }

    fn daemon_status(&self) -> Option<Value> {
        let text =
            fs::read_to_string(self.config.join("kcap-watch/status/daemon.daemon.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The supervisor of session `ids` once it runs its loop: the pid the daemon names for it,
    /// when the supervisor's own status file names that pid too (it is written once the
    /// supervisor has looked at the session's rollouts and watches them). A process just
    /// started is not yet watching (under Wine that takes a good part of a second), and the
    /// kcap CLI's next scan would find a child appearing meanwhile without a watcher.
    fn supervisor_ready(&self, ids: Ids) -> Option<u32> {
        let pid = self.supervisor_pid(ids)?;
        let own = self
            .config
            .join(format!("kcap-watch/status/{}.supervise.json", ids.key()));
        let status: Value = serde_json::from_slice(&fs::read(own).ok()?).ok()?;
        (status["pid"] == pid).then_some(pid)
    }

    /// The supervisor pid the daemon's status file names for session `ids`.
    fn supervisor_pid(&self, ids: Ids) -> Option<u32> {
        let status = self.daemon_status()?;
        status["sessions_taken"]
            .as_array()?
            .iter()
            .find(|t| t["session_id"] == ids.key())
            .and_then(|t| t["supervisor_pid"].as_u64())
            .map(|p| p as u32)
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for entry in fs::read_dir(self.tmp.path()).unwrap().flatten() {
            let p = entry.path();
            if p.extension().is_some_and(|e| e == "log") {
                out.push_str(&format!(
                    "== {}\n{}",
                    p.display(),
                    fs::read_to_string(&p).unwrap()
                ));
            }
        }
        if let Ok(entries) = fs::read_dir(self.config.join("logs")) {
            for entry in entries.flatten() {
                let p = entry.path();
                out.push_str(&format!(
                    "== {}\n{}",
                    p.display(),
                    fs::read_to_string(&p).unwrap_or_default()
                ));
            }
        }
        out
    }

    fn shipped_completely(&self, ids: Ids, d: &Descendant) -> bool {
        let on_disk = fs::read_to_string(&d.path).unwrap().lines().count();
        self.server.lines(&ids.key(), &bare(&d.id)).len() == on_disk
    }

    fn stops(&self, ids: Ids, d: &Descendant) -> usize {
        self.server
            .hooks("subagent-stop")
            .iter()
            .filter(|h| h["agent_id"] == bare(&d.id) && h["session_id"] == ids.key())
            .count()
    }
}

/// Writes `text` in two parts, the header first, returning how long after the header was
/// complete the key's pid file named a live process.
fn write_watched(path: &Path, text: &str, watchers: &Path, key: &str) -> Claim {
    let header_end = text.find('\n').unwrap() + 1;
    let cut = text[..text.len() / 2]
        .rfind('\n')
        .map_or(header_end, |i| i + 1)
        .max(header_end);
    let written = jiff::Timestamp::now();
    fs::write(path, &text[..cut]).unwrap();
    let started = Instant::now();
    let pid_file = watchers.join(format!("{key}.pid"));
    wait_for(Duration::from_secs(5), || pid_file.exists());
    let took = started.elapsed();
    let claimed = jiff::Timestamp::now();
    std::thread::sleep(Duration::from_millis(100));
    let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(&text.as_bytes()[cut..]).unwrap();
    Claim {
        key: key.to_owned(),
        written,
        claimed,
        took,
    }
}

/// When a child's key was claimed: from just before its header was written to just after its
/// pid file was seen.
#[derive(Debug)]
struct Claim {
    key: String,
    written: jiff::Timestamp,
    claimed: jiff::Timestamp,
    took: Duration,
}

/// The kcap CLI scans once a second, so a scan can land between a child's header being written
/// and its supervisor's claim (the claim takes milliseconds, up to a few hundred under Wine):
/// the kcap CLI would then start its own watcher for that child, which kcap-watch leaves alone.
/// That window is the only place a stand-in may find a key free: every key it found without a
/// watcher was found inside its own claim window, never after the claim.
fn assert_found_free_only_before_claims(stand: &Standin, claims: &[Claim]) {
    for (key, at) in stand.no_watcher_at() {
        let claim = claims
            .iter()
            .find(|c| c.key == key)
            .unwrap_or_else(|| panic!("{key} found free at {at}, never claimed: {claims:?}"));
        assert!(
            claim.written <= at && at <= claim.claimed,
            "{key} found free at {at}, outside its claim window: {claim:?}"
        );
    }
}

/// Processes running this very kcap-watch binary with `config` as their config directory
/// (other tests run theirs beside).
#[cfg(target_os = "linux")]
fn kcap_watch_processes(config: &Path) -> Vec<u32> {
    let mut want = b"KCAP_CONFIG_DIR=".to_vec();
    want.extend_from_slice(config.as_os_str().as_encoded_bytes());
    let bin = fs::canonicalize(BIN).unwrap();
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let ours = fs::read(entry.path().join("environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == want.as_slice()));
        if ours && fs::read_link(entry.path().join("exe")).is_ok_and(|e| e == bin) {
            let zombie = fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
                .unwrap_or(true);
            if !zombie {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Processes running this very kcap-watch binary with `config` as their config directory:
/// every process of the binary's file name (a snapshot of the system's processes), whose
/// environment, read as the daemon reads the kcap CLI's, names `config`.
#[cfg(windows)]
fn kcap_watch_processes(config: &Path) -> Vec<u32> {
    use windows_sys::Win32::Foundation::{CloseHandle, INVALID_HANDLE_VALUE};
    use windows_sys::Win32::System::Diagnostics::ToolHelp::{
        CreateToolhelp32Snapshot, PROCESSENTRY32W, Process32FirstW, Process32NextW,
        TH32CS_SNAPPROCESS,
    };
    let name = Path::new(BIN)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_lowercase();
    let config = config.to_string_lossy().into_owned();
    let mut pids = Vec::new();
    // SAFETY: plain Win32 calls; the entry's size is set as they require, and the snapshot
    // handle is closed once.
    unsafe {
        let snapshot = CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0);
        assert_ne!(snapshot, INVALID_HANDLE_VALUE, "no process snapshot");
        let mut entry: PROCESSENTRY32W = std::mem::zeroed();
        entry.dwSize = std::mem::size_of::<PROCESSENTRY32W>() as u32;
        let mut more = Process32FirstW(snapshot, &mut entry) != 0;
        while more {
            let len = entry.szExeFile.iter().position(|c| *c == 0).unwrap_or(0);
            let exe = String::from_utf16_lossy(&entry.szExeFile[..len]).to_lowercase();
            let pid = entry.th32ProcessID;
            if exe == name
                && kcap_watch::platform::process::alive(pid)
                && kcap_watch::platform::proc_info::read(pid)
                    .is_some_and(|l| l.var("KCAP_CONFIG_DIR") == Some(config.as_str()))
            {
                pids.push(pid);
            }
            more = Process32NextW(snapshot, &mut entry) != 0;
        }
        CloseHandle(snapshot);
    }
    pids
}

/// Whether `pid` runs (a zombie, exited but not yet waited for, does not).
#[cfg(target_os = "linux")]
fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| !s[i + 2..].starts_with('Z')))
        .unwrap_or(false)
}

/// Processes running this very kcap-watch binary with `config` as their config directory:
/// every process `ps` lists whose arguments and environment, read as the daemon reads the
/// kcap CLI's, name the binary and `config`.
#[cfg(target_os = "macos")]
fn kcap_watch_processes(config: &Path) -> Vec<u32> {
    let out = std::process::Command::new("ps")
        .args(["-axo", "pid="])
        .output()
        .unwrap();
    let bin = fs::canonicalize(BIN).unwrap();
    let config = config.to_string_lossy().into_owned();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .filter(|pid| {
            kcap_watch::platform::proc_info::read(*pid).is_some_and(|l| {
                l.var("KCAP_CONFIG_DIR") == Some(config.as_str())
                    && l.args
                        .first()
                        .is_some_and(|a| fs::canonicalize(a).is_ok_and(|a| a == bin))
            })
        })
        .collect()
}

/// Whether `pid` runs.
#[cfg(not(target_os = "linux"))]
fn alive(pid: u32) -> bool {
    kcap_watch::platform::process::alive(pid)
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Ends `pid` at once, as a crash would (SIGKILL; `TerminateProcess` on Windows).
fn kill(pid: u32) {
    kcap_watch::platform::detached::kill(pid);
}

/// SIGTERM (Ctrl-Break on Windows) to the daemon, which must end every supervisor and exit
/// 0 within 5 s, leaving no kcap-watch process of its config directory and no status file.
fn stop_daemon_gracefully(w: &World, daemon: &mut Child) {
    let begin = Instant::now();
    kcap_watch::platform::signals::request_stop(daemon.id()).expect("send the daemon SIGTERM");
    let st = wait_exit(daemon, Duration::from_secs(5)).expect("the daemon took over 5 s");
    assert_eq!(st.code(), Some(0), "{}", w.logs());
    assert!(begin.elapsed() < Duration::from_secs(5));
    assert!(
        wait_for(WAIT, || kcap_watch_processes(&w.config).is_empty()),
        "a supervisor outlived the daemon: {:?}",
        kcap_watch_processes(&w.config)
    );
    assert!(
        !w.config
            .join("kcap-watch/status/daemon.daemon.json")
            .exists(),
        "the status file stays after a clean exit"
    );
}

/// Ends a test's daemon: on unix gracefully, checked as [`stop_daemon_gracefully`] checks it.
/// On Windows as `schtasks /End` ends a task, with a kill, and then every supervisor of the
/// config directory (the graceful end, Ctrl-Break, is `the_daemon_ends_gracefully_...`'s:
/// Wine cannot deliver it, and this keeps the other scenarios running there).
fn end_daemon(w: &World, daemon: &mut Child) {
    if cfg!(unix) {
        return stop_daemon_gracefully(w, daemon);
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
    for pid in kcap_watch_processes(&w.config) {
        kill(pid);
    }
    assert!(
        wait_for(WAIT, || kcap_watch_processes(&w.config).is_empty()),
        "{:?}",
        kcap_watch_processes(&w.config)
    );
}

#[test]
fn two_sessions_under_the_kcap_cli_every_descendant_shipped_and_each_session_its_own_kill_unit() {
    let w = World::new();
    let (s1, s2) = (Ids { n: 1 }, Ids { n: 2 });
    let r1 = w.session(s1);
    let r2 = w.session(s2);
    let mut stand1 = w.standin(s1, &r1);
    let stand2 = w.standin(s2, &r2);
    let watchers = w.config.join("watchers");
    assert!(
        wait_for(WAIT, || watchers.join(format!("{}.pid", s1.key())).exists()
            && watchers.join(format!("{}.pid", s2.key())).exists()),
        "the stand-ins did not start"
    );
    let mut daemon = w.daemon("daemon-1.log");
    assert!(
        wait_for(WAIT, || w.supervisor_ready(s1).is_some()
            && w.supervisor_ready(s2).is_some()),
        "the daemon did not start a supervisor per session: {}",
        w.logs()
    );
    let sup1 = w.supervisor_pid(s1).unwrap();
    let sup2 = w.supervisor_pid(s2).unwrap();
    // Its server came from the stand-ins' environment: the daemon has none of its own.
    let status = w.daemon_status().unwrap();
    for t in status["sessions_taken"].as_array().unwrap() {
        assert_eq!(t["server"], w.server.url(), "{status}");
        assert_eq!(t["server_source"], "the session watcher's KCAP_URL");
    }

    // The sub-agents appear only now, both sessions interleaved.
    let trees = [(s1, w.tree(s1)), (s2, w.tree(s2))];
    let mut claims = Vec::new();
    for i in 0..3 {
        for (ids, tree) in &trees {
            let d = &tree[i];
            let key = format!("{}-{}", ids.key(), bare(&d.id));
            claims.push(write_watched(&d.path, &d.text, &watchers, &key));
        }
    }
    let took: Vec<Duration> = claims.iter().map(|c| c.took).collect();
    eprintln!("key claimed after the header, per descendant: {took:?}");
    assert!(
        w.server.wait_until(WAIT, |_| trees.iter().all(|(ids, t)| t
            .iter()
            .all(|d| w.shipped_completely(*ids, d) && w.stops(*ids, d) == 1))),
        "not every descendant was shipped completely and stopped: {}",
        w.logs()
    );
    // The stand-ins saw every direct child and always found its watcher alive.
    assert!(
        wait_for(WAIT, || stand1.ensured().len() == 2
            && stand2.ensured().len() == 2),
        "the stand-ins did not see every child: {:?} {:?}",
        stand1.ensured(),
        stand2.ensured()
    );
    assert_found_free_only_before_claims(&stand1, &claims);
    assert_found_free_only_before_claims(&stand2, &claims);
    // The daemon and one supervisor per session, nothing else.
    let mut procs = kcap_watch_processes(&w.config);
    procs.sort();
    let mut want = vec![daemon.id(), sup1, sup2];
    want.sort();
    assert_eq!(procs, want);

    // `status --json` names every descendant, held by kcap-watch supervise. Each supervisor
    // lists a newly claimed child in its status file within S3's 2 s pacing: wait for that.
    for (ids, tree) in &trees {
        let own_status = w
            .config
            .join(format!("kcap-watch/status/{}.supervise.json", ids.key()));
        let listed = || {
            let Ok(bytes) = std::fs::read(&own_status) else {
                return false;
            };
            let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
                return false;
            };
            tree.iter().all(|d| {
                let key = format!("{}-{}", ids.key(), bare(&d.id));
                v["keys"]
                    .as_array()
                    .is_some_and(|ks| ks.iter().any(|k| k["key"] == key))
            })
        };
        assert!(
            wait_for(WAIT, listed),
            "{} never listed every child",
            own_status.display()
        );
    }
    let out = support::bin::run(
        {
            let mut c = kcap_watch(&w.config);
            c.args(["status", "--json"]);
            c
        },
        WAIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", support::bin::stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["version"], 1);
    assert_eq!(report["daemon"]["running"], true);
    let keys: Vec<&Value> = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["keys"].as_array().unwrap())
        .collect();
    for (ids, tree) in &trees {
        for d in tree {
            let key = format!("{}-{}", ids.key(), bare(&d.id));
            let k = keys
                .iter()
                .find(|k| k["key"] == key)
                .unwrap_or_else(|| panic!("status names no {key}: {report:#}"));
            assert_eq!(k["verdict"], "alive", "{k:#}");
            assert_eq!(k["agent_id"], bare(&d.id));
            let sup = if ids.n == 1 { sup1 } else { sup2 };
            assert_eq!(k["pid"], sup, "{k:#}");
            assert_eq!(k["holder"], "kcap-watch supervise", "{k:#}");
        }
    }
    // Each session watcher is the kcap CLI's.
    let sess = keys.iter().find(|k| k["key"] == s1.key()).unwrap();
    assert_eq!(sess["holder"], "kcap CLI");
    assert_eq!(sess["rollout"], r1.display().to_string());

    // Session 1 ends: the kcap CLI's teardown ends its supervisor, and only that.
    let st = stand1
        .end_session(Duration::from_secs(15))
        .expect("the teardown took too long");
    assert!(st.success());
    assert!(
        stand1.log().contains("exited gracefully") && !stand1.log().contains("force-killed"),
        "{}",
        stand1.log()
    );
    assert!(wait_for(WAIT, || !alive(sup1)), "supervisor 1 still runs");
    assert!(alive(sup2), "supervisor 2 ended with session 1");
    assert!(daemon.try_wait().unwrap().is_none(), "the daemon ended");
    // A later turn of session 2's child is shipped.
    let b2 = &trees[1].1[1];
    append_lines(&b2.path, &turn(3));
    assert!(
        w.server.wait_until(WAIT, |_| w.shipped_completely(s2, b2)),
        "session 2's later turn was not shipped: {}",
        w.logs()
    );
    // The daemon does not restart a supervisor the kcap CLI ended (exit 0).
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(kcap_watch_processes(&w.config).len(), 2);

    // A supervisor killed with SIGKILL is restarted (10 s later, the session still watched)
    // and loses no line.
    kill(sup2);
    assert!(
        wait_for(Duration::from_secs(40), || w
            .supervisor_pid(s2)
            .is_some_and(|p| p != sup2 && alive(p))),
        "the killed supervisor was not restarted: {}",
        w.logs()
    );
    let sup2b = w.supervisor_pid(s2).unwrap();
    // Between the kill and the restart (S2.2: 10 s later) the children's keys name a dead
    // process, and a stand-in that looks then (a child that advanced just before the kill)
    // finds no watcher, as the kcap CLI would, and would start its own: that is the spec'd
    // window. Once the supervisor is back, no look finds a key free.
    assert!(
        wait_for(WAIT, || trees[1].1.iter().all(|d| {
            fs::read_to_string(watchers.join(format!("{}-{}.pid", s2.key(), bare(&d.id))))
                .is_ok_and(|t| t.lines().next() == Some(sup2b.to_string().as_str()))
        })),
        "the restarted supervisor did not take its children's keys back: {}",
        w.logs()
    );
    let seen_while_down = stand2.no_watcher().len();
    let a2 = &trees[1].1[0];
    append_lines(&a2.path, &turn(4));
    assert!(
        w.server.wait_until(WAIT, |_| trees[1]
            .1
            .iter()
            .all(|d| w.shipped_completely(s2, d))),
        "lines were lost across the restart: {}",
        w.logs()
    );
    assert_eq!(
        stand2.no_watcher().len(),
        seen_while_down,
        "{:?}",
        stand2.no_watcher()
    );
    let status = w.daemon_status().unwrap();
    let taken = status["sessions_taken"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["session_id"] == s2.key())
        .unwrap()
        .clone();
    assert_eq!(taken["restarts"], 1, "{taken}");

    // A second daemon for the same config directory exits 75.
    let mut second = w.daemon("daemon-2.log");
    assert_eq!(
        wait_exit(&mut second, WAIT).and_then(|s| s.code()),
        Some(75)
    );

    end_daemon(&w, &mut daemon);
}

/// SIGTERM (Ctrl-Break on Windows, where the daemon runs as a process group of its own, as
/// Task Scheduler starts it) ends the daemon with 0 within 5 s, and every supervisor with it.
#[test]
fn the_daemon_ends_gracefully_with_its_supervisors_within_5_s() {
    let w = World::new();
    let s1 = Ids { n: 1 };
    let r1 = w.session(s1);
    let _stand = w.standin(s1, &r1);
    w.standins_started(&[s1]);
    let mut daemon = w.daemon("daemon.log");
    assert!(
        wait_for(WAIT, || w.supervisor_pid(s1).is_some_and(alive)),
        "{}",
        w.logs()
    );
    stop_daemon_gracefully(&w, &mut daemon);
}

#[test]
fn a_session_the_kcap_cli_does_not_watch_is_never_supervised_and_one_without_a_server_is_skipped_saying_why()
 {
    let w = World::new();
    let s1 = Ids { n: 1 };
    let r1 = w.session(s1);
    // A session watcher without KCAP_URL, and no server anywhere else.
    let stand = Standin::start(
        &w.tmp.path().join("standin"),
        &s1.key(),
        &r1,
        "",
        &w.config,
        &w.home,
    );
    // A second session with a rollout but no watcher.
    let s2 = Ids { n: 2 };
    w.session(s2);
    let watchers = w.config.join("watchers");
    assert!(wait_for(WAIT, || watchers
        .join(format!("{}.pid", s1.key()))
        .exists()));
    let mut daemon = w.daemon("daemon.log");
    assert!(
        wait_for(WAIT, || w.daemon_status().is_some_and(|s| {
            !s["sessions_skipped"].as_array().unwrap().is_empty()
        })),
        "{}",
        w.logs()
    );
    let status = w.daemon_status().unwrap();
    assert_eq!(status["sessions_taken"], serde_json::json!([]));
    let skipped = &status["sessions_skipped"][0];
    assert_eq!(skipped["session_id"], s1.key());
    assert!(
        skipped["reason"].as_str().unwrap().contains("no server"),
        "{skipped}"
    );
    assert_eq!(kcap_watch_processes(&w.config), vec![daemon.id()]);
    // `status` shows it in its table too.
    let out = support::bin::run(
        {
            let mut c = kcap_watch(&w.config);
            c.arg("status");
            c
        },
        WAIT,
    );
    let text = support::bin::stdout(&out);
    assert!(text.contains("daemon: running"), "{text}");
    assert!(text.contains(&format!("skipped {}", s1.key())), "{text}");
    drop(stand);
    end_daemon(&w, &mut daemon);
}

/// Codex creates a session's rollout lazily, at its first persisted item, so the kcap CLI's
/// session watcher can start before the file exists (and, with `KCAP_WATCH_EXCLUDE` set, a
/// header still unwritten leaves the cwd unknown). Such a session is judged again until its
/// rollout says what it is: a session taken late still has every child shipped, and an
/// excluded one is never taken on the way.
#[test]
fn a_session_whose_rollout_appears_after_its_watcher_is_taken_once_it_does_and_never_before_its_cwd_is_known()
 {
    let w = World::new();
    let (s1, s2) = (Ids { n: 1 }, Ids { n: 2 });
    // Session 1: no rollout yet. Session 2: its file exists but its header is not written.
    let r1 = w
        .day()
        .join(format!("rollout-2026-07-28T22-13-45-{}.jsonl", s1.root()));
    let r2 = w
        .day()
        .join(format!("rollout-2026-07-28T22-13-45-{}.jsonl", s2.root()));
    fs::write(&r2, "").unwrap();
    let _stand1 = w.standin(s1, &r1);
    let _stand2 = w.standin(s2, &r2);
    let watchers = w.config.join("watchers");
    w.standins_started(&[s1, s2]);
    // Session 2's cwd (set below) is excluded; session 1's is not.
    let mut daemon = w.daemon_with(
        "daemon.log",
        &[("KCAP_WATCH_EXCLUDE", "/home/dev/secret/*")],
    );
    let reason = |ids: Ids| {
        w.daemon_status().and_then(|s| {
            s["sessions_skipped"]
                .as_array()?
                .iter()
                .find(|t| t["session_id"] == ids.key())
                .and_then(|t| t["reason"].as_str().map(str::to_owned))
        })
    };
    assert!(
        wait_for(WAIT, || reason(s1)
            .is_some_and(|r| r.contains("no rollout yet"))
            && reason(s2)
                .is_some_and(|r| r.contains("header is not written yet"))),
        "{:#}\n{}",
        w.daemon_status().unwrap_or_default(),
        w.logs()
    );
    assert_eq!(w.supervisor_pid(s2), None, "taken before its cwd was known");
    // Both files get their headers: session 1 is taken, session 2 is excluded for good.
    fs::write(&r1, s1.text(&fixture("parent-session.jsonl"))).unwrap();
    fs::write(
        &r2,
        s2.text(&fixture("parent-session.jsonl"))
            .replace("/home/dev/src/acme-api", "/home/dev/secret/vault"),
    )
    .unwrap();
    assert!(
        wait_for(WAIT, || w.supervisor_ready(s1).is_some()
            && reason(s2)
                .is_some_and(|r| r.contains("matches KCAP_WATCH_EXCLUDE"))),
        "{:#}\n{}",
        w.daemon_status().unwrap_or_default(),
        w.logs()
    );
    assert_eq!(reason(s1), None, "{:#}", w.daemon_status().unwrap());
    // Session 1's child is shipped by its supervisor; session 2's by nobody here (the kcap
    // CLI's own watcher would take it).
    let a1 = &w.tree(s1)[0];
    write_watched(
        &a1.path,
        &a1.text,
        &watchers,
        &format!("{}-{}", s1.key(), bare(&a1.id)),
    );
    let a2 = &w.tree(s2)[0];
    fs::write(&a2.path, &a2.text).unwrap();
    assert!(
        w.server.wait_until(WAIT, |_| w.shipped_completely(s1, a1)
            && w.stops(s1, a1) == 1),
        "{}",
        w.logs()
    );
    assert!(w.server.lines(&s2.key(), &bare(&a2.id)).is_empty());
    assert_eq!(w.supervisor_pid(s2), None);
    end_daemon(&w, &mut daemon);
}

/// The rollout named on the session watcher's command line is used only when its header names
/// that session: a command line (or a symbolic link) naming another session's file must not
/// decide which cwd `KCAP_WATCH_EXCLUDE` judges, nor where the session's children are looked
/// for.
#[test]
fn a_command_line_naming_another_sessions_rollout_is_not_taken_for_it() {
    let w = World::new();
    let (s1, s2) = (Ids { n: 1 }, Ids { n: 2 });
    // Session 1 runs in an excluded directory; session 2 does not.
    let r1 = w.session(s1);
    fs::write(
        &r1,
        s1.text(&fixture("parent-session.jsonl"))
            .replace("/home/dev/src/acme-api", "/home/dev/secret/vault"),
    )
    .unwrap();
    let r2 = w.session(s2);
    // Session 1's watcher names a link to session 2's file (on Windows, where an unprivileged
    // user makes no symbolic link, that file itself).
    #[cfg(unix)]
    let named = {
        let link = w.tmp.path().join("elsewhere.jsonl");
        std::os::unix::fs::symlink(&r2, &link).unwrap();
        link
    };
    #[cfg(windows)]
    let named = r2.clone();
    let _stand1 = w.standin(s1, &named);
    w.standins_started(&[s1]);
    let mut daemon = w.daemon_with(
        "daemon.log",
        &[("KCAP_WATCH_EXCLUDE", "/home/dev/secret/*")],
    );
    // The session is found under CODEX_HOME by its id instead, and excluded by its own cwd.
    assert!(
        wait_for(WAIT, || w.daemon_status().is_some_and(|s| {
            s["sessions_skipped"].as_array().is_some_and(|a| {
                a.iter().any(|t| {
                    t["session_id"] == s1.key()
                        && t["reason"]
                            .as_str()
                            .is_some_and(|r| r.contains("/home/dev/secret/vault"))
                })
            })
        })),
        "{:#}\n{}",
        w.daemon_status().unwrap_or_default(),
        w.logs()
    );
    let status = w.daemon_status().unwrap();
    assert_eq!(
        status["sessions_taken"],
        serde_json::json!([]),
        "{status:#}"
    );
    assert_eq!(kcap_watch_processes(&w.config), vec![daemon.id()]);
    end_daemon(&w, &mut daemon);
}

/// An installed copy of the binary (a hard link outside `target/`).
fn installed_binary(dir: &Path) -> PathBuf {
    copy_of_binary(&dir.join("bin"))
}

/// The binary, hard linked (or copied) into `bin_dir`.
fn copy_of_binary(bin_dir: &Path) -> PathBuf {
    fs::create_dir_all(bin_dir).unwrap();
    let dest = bin_dir.join(format!("kcap-watch{}", std::env::consts::EXE_SUFFIX));
    if fs::hard_link(BIN, &dest).is_err() {
        fs::copy(BIN, &dest).unwrap();
    }
    dest
}

fn print_service(exe: &Path, kind: &str, env: &[(&str, &str)]) -> std::process::Output {
    let mut c = std::process::Command::new(exe);
    c.env_clear();
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(["daemon", "--print-service", kind]);
    support::bin::run(c, WAIT)
}

#[test]
fn print_service_refuses_a_build_directory() {
    // A cargo target directory of its own, whatever CARGO_TARGET_DIR this suite was built in.
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("target");
    let exe = copy_of_binary(&target.join("debug"));
    fs::write(
        target.join("CACHEDIR.TAG"),
        "Signature: 8a477f597d28d172789f06886806bc55\n",
    )
    .unwrap();
    let mut c = std::process::Command::new(exe);
    c.env("KCAP_CONFIG_DIR", "/nonexistent-config");
    c.args(["daemon", "--print-service", "systemd"]);
    let out = support::bin::run(c, WAIT);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        support::bin::stderr(&out).contains("build directory"),
        "{}",
        support::bin::stderr(&out)
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn printed_service_definitions_are_valid_and_carry_no_secret() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = installed_binary(tmp.path());
    let env = [
        ("KCAP_URL", "https://kcap.example"),
        ("KCAP_CONFIG_DIR", "/home/dev/.config/kcap"),
        ("KCAP_TOKEN", "secret-token-value"),
        ("KCAP_CLIENT_SECRET", "secret-client-value"),
        ("HTTPS_PROXY", "http://proxy:3128"),
    ];
    let mut texts = Vec::new();
    let mut task_bytes = Vec::new();
    for kind in ["systemd", "launchd", "windows"] {
        let out = print_service(&exe, kind, &env);
        if kind == "windows" {
            task_bytes = out.stdout.clone();
        }
        assert_eq!(
            out.status.code(),
            Some(0),
            "{kind}: {}",
            support::bin::stderr(&out)
        );
        let text = support::bin::stdout(&out);
        // systemd's quoting doubles a backslash (a Windows path's separator).
        let named = match kind {
            "systemd" => exe.display().to_string().replace('\\', "\\\\"),
            _ => exe.display().to_string(),
        };
        assert!(text.contains(&named), "{kind} names {named}: {text}");
        assert!(text.contains("https://kcap.example"), "{kind}: {text}");
        assert!(!text.contains("secret-"), "{kind} carries a secret: {text}");
        texts.push(text);
    }
    // systemd: the unit verifies.
    let unit = &texts[0];
    assert!(unit.contains("RestartPreventExitStatus=2 75"), "{unit}");
    let unit_path = tmp.path().join("kcap-watch.service");
    fs::write(&unit_path, unit).unwrap();
    match std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit_path)
        .output()
    {
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            // Complaints about the machine (no running systemd, other units) are not the unit's.
            let about_ours: Vec<&str> = err
                .lines()
                .filter(|l| l.contains("kcap-watch.service") && !l.contains("Failed to"))
                .collect();
            assert!(about_ours.is_empty(), "systemd-analyze: {err}");
        }
        Err(e) => eprintln!("skipped systemd-analyze verify: {e}"),
    }
    // launchd and Task Scheduler: well-formed XML with the expected keys.
    let plist = parse_xml(&texts[1]);
    assert!(plist.contains(&"KeepAlive".to_string()), "{plist:?}");
    assert!(plist.contains(&"SuccessfulExit".to_string()));
    assert!(plist.contains(&"ThrottleInterval".to_string()));
    assert!(plist.contains(&"daemon".to_string()));
    // Task Scheduler refuses XML whose bytes are not in the encoding it declares.
    let task = parse_xml(&in_declared_encoding(&task_bytes));
    assert!(task.contains(&"daemon".to_string()), "{task:?}");
}

/// `xml` decoded in the encoding its declaration names (UTF-8 when it names none, as XML
/// says), failing when the bytes are not in it: a UTF-16 document must start with its byte
/// order mark, a UTF-8 one may not hold the NUL bytes of UTF-16 text.
fn in_declared_encoding(xml: &[u8]) -> String {
    let (utf16, body) = match xml {
        [0xFF, 0xFE, rest @ ..] => (true, rest),
        [0xEF, 0xBB, 0xBF, rest @ ..] => (false, rest),
        _ => (false, xml),
    };
    let text = if utf16 {
        assert!(body.len() % 2 == 0, "odd length for UTF-16");
        let units: Vec<u16> = body
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        String::from_utf16(&units).expect("valid UTF-16")
    } else {
        assert!(!body.contains(&0), "NUL bytes in what is read as UTF-8");
        String::from_utf8(body.to_vec()).expect("valid UTF-8")
    };
    let declaration = text.lines().next().unwrap_or_default();
    assert!(
        declaration.starts_with("<?xml "),
        "no XML declaration: {text}"
    );
    let declared = declaration
        .split("encoding=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("UTF-8")
        .to_ascii_uppercase();
    let actual = if utf16 { "UTF-16" } else { "UTF-8" };
    assert_eq!(declared, actual, "declares {declared}, written in {actual}");
    text
}

/// Parses `xml` strictly (every element closed, entities valid) and returns its text nodes.
fn parse_xml(xml: &str) -> Vec<String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let mut texts = Vec::new();
    let mut depth = 0i32;
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Start(_)) => depth += 1,
            Ok(quick_xml::events::Event::End(_)) => depth -= 1,
            Ok(quick_xml::events::Event::Text(t)) => {
                let t = t.unescape().expect("valid entities").trim().to_string();
                if !t.is_empty() {
                    texts.push(t);
                }
            }
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("not well-formed XML: {e}\n{xml}"),
        }
    }
    assert_eq!(depth, 0, "unclosed elements:\n{xml}");
    texts
}

/// S2.7: a child reaped by its supervisor keeps its key and is followed again when Codex
/// re-engages it, so the kcap CLI's session watcher (which re-ensures a watcher whenever the
/// child's rollout advances) never finds the key free and every later line is shipped.
#[test]
fn a_child_re_engaged_after_its_reap_is_shipped_in_full_and_its_key_never_free() {
    let w = World::new();
    let s1 = Ids { n: 1 };
    let r1 = w.session(s1);
    let stand = w.standin(s1, &r1);
    let watchers = w.config.join("watchers");
    w.standins_started(&[s1]);
    // The reap window in seconds: the daemon passes its flags on to the supervisor.
    let mut daemon = w.daemon_with_flags("daemon.log", &[], &["--reap-after", "3s"]);
    assert!(
        wait_for(WAIT, || w.supervisor_ready(s1).is_some()),
        "{}",
        w.logs()
    );
    let a = &w.tree(s1)[0];
    let key = format!("{}-{}", s1.key(), bare(&a.id));
    let claim = write_watched(&a.path, &a.text, &watchers, &key);
    assert!(w.server.wait_until(WAIT, |_| w.shipped_completely(s1, a)));
    // Past the reap (3 s without activity), then Codex re-engages the child.
    assert!(
        wait_for(WAIT, || w.logs().contains("idle_reap")),
        "the child was not reaped: {}",
        w.logs()
    );
    append_lines(&a.path, &turn(3));
    assert!(
        w.server.wait_until(WAIT, |_| w.shipped_completely(s1, a)),
        "the re-engaged child's lines were not shipped: {}",
        w.logs()
    );
    // The stand-in looked at least once after the growth and found the key held.
    std::thread::sleep(Duration::from_secs(2));
    assert_found_free_only_before_claims(&stand, &[claim]);
    end_daemon(&w, &mut daemon);
}

/// `supervise` of session `ids`'s rollout `rollout`, started by hand as an earlier daemon
/// would have; once its lock names it, unless another supervisor holds the lock (then it
/// exits 75 and is returned as it runs).
fn supervise_by_hand(w: &World, ids: Ids, rollout: &Path) -> Child {
    let mut c = kcap_watch(&w.config);
    c.env("CODEX_HOME", &w.home)
        .env("KCAP_URL", w.server.url())
        .arg("supervise")
        .arg(rollout)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let lock = w
        .config
        .join(format!("kcap-watch/supervise/{}.lock", ids.key()));
    let held = fs::read_to_string(&lock).ok();
    let child = c.spawn_retrying().unwrap();
    if held.is_none() {
        assert!(wait_for(WAIT, || fs::read_to_string(&lock)
            .is_ok_and(|t| t == child.id().to_string())));
    }
    child
}

#[test]
fn a_daemon_adopts_the_supervisor_already_running_and_a_second_supervisor_exits_75() {
    let w = World::new();
    let s1 = Ids { n: 1 };
    let r1 = w.session(s1);
    let _stand = w.standin(s1, &r1);
    // A supervisor left running by an earlier daemon.
    let mut first = supervise_by_hand(&w, s1, &r1);
    let mut second = supervise_by_hand(&w, s1, &r1);
    assert_eq!(
        wait_exit(&mut second, WAIT).and_then(|s| s.code()),
        Some(75)
    );

    let mut daemon = w.daemon("daemon.log");
    assert!(
        wait_for(WAIT, || w.daemon_status().is_some_and(
            |s| s["sessions_taken"][0]["supervisor"] == "adopted"
        )),
        "{}",
        w.logs()
    );
    assert_eq!(w.supervisor_pid(s1), Some(first.id()));
    let mut procs = kcap_watch_processes(&w.config);
    procs.sort();
    let mut want = vec![daemon.id(), first.id()];
    want.sort();
    assert_eq!(procs, want, "the daemon started a second supervisor");
    // Ending the daemon ends the adopted supervisor too (with SIGTERM on unix: it exits 0).
    // Its parent (this test) reaps it as soon as it ends, as init reaps one whose daemon died:
    // a zombie looks alive to the daemon, which then waited out its whole end budget.
    let reaper = std::thread::spawn(move || wait_exit(&mut first, WAIT));
    end_daemon(&w, &mut daemon);
    let st = reaper
        .join()
        .unwrap()
        .expect("the adopted supervisor outlived the daemon");
    if cfg!(unix) {
        assert_eq!(st.code(), Some(0));
    }
}

/// docs/behaviour.md, "The safety-net poll": the daemon's own poll (five times the
/// configured period) keeps its period while it has adopted a supervisor, whose end only a
/// poll can see (it is not the daemon's child), and stretches to four times once nothing but
/// notification's events can change what it knows.
#[cfg(target_os = "linux")]
#[test]
fn the_daemons_poll_stretches_once_idle_but_not_while_it_has_adopted_a_supervisor() {
    let w = World::new();
    let s1 = Ids { n: 1 };
    let r1 = w.session(s1);
    let _stand = w.standin(s1, &r1);
    let mut first = supervise_by_hand(&w, s1, &r1);
    let mut daemon = w.daemon("daemon.log");
    let poll_ms = || w.daemon_status().and_then(|s| s["poll_ms"].as_u64());
    assert!(
        wait_for(WAIT, || w.daemon_status().is_some_and(
            |s| s["sessions_taken"][0]["supervisor"] == "adopted"
        )),
        "{}",
        w.logs()
    );
    // Ten seconds of polls are the probation (100 ms configured: the daemon polls every
    // 500 ms); twelve with the supervisor adopted.
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(poll_ms(), Some(500), "an adopted supervisor is polled for");
    // It ends on purpose: the daemon lets the session rest, and has nothing left to poll for.
    kcap_watch::platform::signals::request_stop(first.id()).unwrap();
    assert_eq!(wait_exit(&mut first, WAIT).and_then(|s| s.code()), Some(0));
    assert!(
        wait_for(Duration::from_secs(30), || poll_ms() == Some(2000)),
        "the daemon's poll did not stretch: {:?}; {}",
        poll_ms(),
        w.logs()
    );
    end_daemon(&w, &mut daemon);
}

/// Every file under `dir` (recursively), as text: what a person could read on disk.
fn all_files_text(dir: &Path) -> String {
    let mut out = String::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.push_str(&all_files_text(&p));
        } else if let Ok(bytes) = fs::read(&p) {
            out.push_str(&format!("== {}\n", p.display()));
            out.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    out
}

fn status_output(config: &Path, json: bool) -> String {
    let mut c = kcap_watch(config);
    c.arg("status");
    if json {
        c.arg("--json");
    }
    support::bin::stdout(&support::bin::run(c, WAIT))
}

/// Issue 28 item 4 (the spec's T5.3): a `KCAP_URL` the kcap CLI's session watcher runs with,
/// carrying a userinfo password and a `?token=`, is shown nowhere in clear: not in the
/// daemon's log, its status file, any other file kcap-watch writes, nor `status` (text and
/// JSON), which show it with `[REDACTED]` in their place.
#[test]
fn a_url_secret_read_from_the_session_watcher_is_shown_nowhere() {
    let w = World::new();
    let s1 = Ids { n: 1 };
    let r1 = w.session(s1);
    let url = w
        .server
        .url()
        .replacen("://", "://kcapuser:UrlPw5ecret@", 1)
        + "/?token=UrlQueryT0ken&tenant=acme";
    let _stand = Standin::start(
        &w.tmp.path().join("standin"),
        &s1.key(),
        &r1,
        &url,
        &w.config,
        &w.home,
    );
    w.standins_started(&[s1]);
    let mut daemon = w.daemon("daemon.log");
    // Its supervisor refuses a URL with user info (exit 2): the session ends up skipped, with
    // the supervisor's error naming the URL. (Waited for as that end state, not as the moment
    // between its start and its refusal, which a slow machine may not show at all.)
    assert!(
        wait_for(WAIT, || w
            .logs()
            .contains("\"event\":\"supervisor_refused\"")
            && w.daemon_status().is_some_and(|s| s["sessions_skipped"]
                .as_array()
                .is_some_and(|a| a
                    .iter()
                    .any(|t| t["session_id"] == s1.key())))),
        "{}",
        w.logs()
    );
    let text = status_output(&w.config, false);
    let json = status_output(&w.config, true);
    let shown = format!(
        "{}\n{}\n== status\n{text}\n== status --json\n{json}",
        w.logs(),
        all_files_text(&w.config)
    );
    for secret in ["UrlPw5ecret", "UrlQueryT0ken"] {
        assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
    }
    assert!(
        text.contains("kcapuser:[REDACTED]@") && text.contains("token=[REDACTED]&tenant=acme"),
        "{text}"
    );
    assert!(json.contains("kcapuser:[REDACTED]@"), "{json}");
    end_daemon(&w, &mut daemon);
}

/// Issue 28 items 1 and 4: a printed service shows no URL's secret (`KCAP_URL`, a proxy), and
/// allows the open files thousands of children need (`LimitNOFILE`, launchd's
/// `SoftResourceLimits`).
#[test]
fn a_printed_service_shows_no_url_secret_and_allows_thousands_of_open_files() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = installed_binary(tmp.path());
    // A KCAP_URL with user info is one the daemon refuses (exit 2): no service is printed
    // for it, and the refusal shows no secret either.
    let url = [(
        "KCAP_URL",
        "https://svcuser:SvcPw5ecret@kcap.example/?api_key=SvcKey1",
    )];
    let out = print_service(&exe, "systemd", &url);
    assert_eq!(out.status.code(), Some(2), "{}", support::bin::stderr(&out));
    assert!(out.stdout.is_empty());
    let err = support::bin::stderr(&out);
    assert!(err.contains("svcuser:[REDACTED]@kcap.example"), "{err}");
    assert!(
        !err.contains("SvcPw5ecret") && !err.contains("SvcKey1"),
        "{err}"
    );
    let env = [
        ("KCAP_URL", "https://kcap.example"),
        ("HTTPS_PROXY", "http://proxyuser:ProxyPw5ecret@proxy:3128"),
    ];
    for kind in ["systemd", "launchd", "windows"] {
        let out = print_service(&exe, kind, &env);
        assert_eq!(out.status.code(), Some(0), "{}", support::bin::stderr(&out));
        let text = support::bin::stdout(&out);
        assert!(!text.contains("ProxyPw5ecret"), "{kind}: shown:\n{text}");
        assert!(
            text.contains("proxyuser:[REDACTED]@proxy:3128"),
            "{kind}: {text}"
        );
        match kind {
            "systemd" => {
                let limit = text
                    .lines()
                    .find_map(|l| l.strip_prefix("LimitNOFILE="))
                    .and_then(|v| v.parse::<u64>().ok());
                assert!(limit.is_some_and(|l| l >= 16_384), "{text}");
            }
            "launchd" => {
                let compact: String = text.split_whitespace().collect();
                assert!(
                    compact.contains(
                        "<key>SoftResourceLimits</key><dict><key>NumberOfFiles</key><integer>"
                    ),
                    "{text}"
                );
            }
            _ => {}
        }
    }
}

/// The daemon's JSON log records named `event`.
fn daemon_events(w: &World, log: &str, event: &str) -> Vec<Value> {
    fs::read_to_string(w.tmp.path().join(log))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["event"] == event)
        .collect()
}

fn taken_state(w: &World, ids: Ids) -> Option<String> {
    w.daemon_status()?["sessions_taken"]
        .as_array()?
        .iter()
        .find(|t| t["session_id"] == ids.key())
        .and_then(|t| t["supervisor"].as_str().map(str::to_owned))
}

/// Issue 28 item 2 (the spec's T3.1): a supervisor the daemon adopted, SIGKILLed with lines
/// unshipped, is a crash like one it started: restarted within the spec'd delay (10 s, then the
/// backoff), and its successor ships the remaining lines and the child's stop.
#[test]
fn an_adopted_supervisor_killed_with_lines_unshipped_is_restarted_and_its_lines_and_stop_delivered()
{
    let w = World::new();
    let s1 = Ids { n: 1 };
    let r1 = w.session(s1);
    let _stand = w.standin(s1, &r1);
    w.standins_started(&[s1]);
    // A supervisor left running by an earlier daemon.
    let mut first = {
        let mut c = kcap_watch(&w.config);
        c.env("CODEX_HOME", &w.home)
            .env("KCAP_URL", w.server.url())
            .env("KCAP_WATCH_POLL_MS", "100")
            .arg("supervise")
            .arg(&r1)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c.spawn_retrying().unwrap()
    };
    let lock = w
        .config
        .join(format!("kcap-watch/supervise/{}.lock", s1.key()));
    assert!(wait_for(WAIT, || fs::read_to_string(&lock)
        .is_ok_and(|t| t == first.id().to_string())));
    let mut daemon = w.daemon("daemon.log");
    assert!(
        wait_for(WAIT, || taken_state(&w, s1).as_deref() == Some("adopted")),
        "{}",
        w.logs()
    );
    // A child whose lines the server does not take yet.
    w.server
        .fail_always(Some("transcript"), support::Fault::Status(503));
    let a = &w.tree(s1)[0];
    fs::write(&a.path, &a.text).unwrap();
    assert!(
        w.server
            .wait_until(WAIT, |s| s.request_count("transcript") >= 1),
        "{}",
        w.logs()
    );
    kill(first.id());
    let _ = first.wait();
    let killed = Instant::now();
    w.server.clear_faults();
    assert!(
        wait_for(Duration::from_secs(40), || w
            .supervisor_pid(s1)
            .is_some_and(|p| p != first.id() && alive(p))),
        "the killed adopted supervisor was not restarted: {}",
        w.logs()
    );
    let restarted_after = killed.elapsed();
    assert!(
        restarted_after < Duration::from_secs(25),
        "{restarted_after:?}"
    );
    assert!(
        w.server
            .wait_until(WAIT, |_| w.shipped_completely(s1, a) && w.stops(s1, a) == 1),
        "the adopted supervisor's lines and stop were not delivered: {}",
        w.logs()
    );
    eprintln!("restarted {restarted_after:?} after the SIGKILL");
    end_daemon(&w, &mut daemon);
}

/// Issue 28 item 5 (the spec's T3.2, T3.4): a supervisor that refuses its configuration
/// (exit 2: here a `KCAP_URL` with user info) is started once, not again on every write of a
/// child; its own error is kept in `<config>/logs/kcap-watch-supervise-<key>.log`, shown by
/// `status` with the session listed as skipped, and said once in the daemon's log.
#[test]
fn a_supervisor_that_refuses_its_configuration_is_started_once_and_its_reason_shown() {
    let w = World::new();
    let s1 = Ids { n: 1 };
    let r1 = w.session(s1);
    let url = w.server.url().replacen("://", "://someone:Pw@", 1);
    let _stand = Standin::start(
        &w.tmp.path().join("standin"),
        &s1.key(),
        &r1,
        &url,
        &w.config,
        &w.home,
    );
    w.standins_started(&[s1]);
    let mut daemon = w.daemon("daemon.log");
    let skipped_reason = || {
        w.daemon_status().and_then(|s| {
            s["sessions_skipped"]
                .as_array()?
                .iter()
                .find(|t| t["session_id"] == s1.key())
                .and_then(|t| t["reason"].as_str().map(str::to_owned))
        })
    };
    assert!(
        wait_for(WAIT, || skipped_reason()
            .is_some_and(|r| r.contains("exit 2") && r.contains("user info"))),
        "{:?}\n{}",
        skipped_reason(),
        w.logs()
    );
    // The session's children write for a while: no supervisor is started for them.
    for d in w.tree(s1) {
        fs::write(&d.path, &d.text).unwrap();
        std::thread::sleep(Duration::from_millis(700));
        append_lines(&d.path, &turn(1));
    }
    std::thread::sleep(Duration::from_secs(2));
    let starts = daemon_events(&w, "daemon.log", "supervisor_started").len();
    assert_eq!(starts, 1, "{}", w.logs());
    assert_eq!(
        daemon_events(&w, "daemon.log", "supervisor_refused").len(),
        1,
        "{}",
        w.logs()
    );
    let own_log = w
        .config
        .join(format!("logs/kcap-watch-supervise-{}.log", s1.key()));
    let text = fs::read_to_string(&own_log).unwrap_or_default();
    assert!(text.contains("user info"), "{}: {text}", own_log.display());
    let status = status_output(&w.config, false);
    assert!(
        status.contains(&format!("skipped {}", s1.key())) && status.contains("exit 2"),
        "{status}"
    );
    assert_eq!(kcap_watch_processes(&w.config), vec![daemon.id()]);
    end_daemon(&w, &mut daemon);
}

/// Issue 28 item 5 (the spec's T3.3, T3.4): a supervisor that crashed 5 times within the hour
/// is given up until the hour has passed, whatever the session's children write meanwhile, and
/// `status` says so with the time it will be tried again.
#[test]
fn a_spent_restart_budget_is_not_restarted_by_childrens_writes_and_status_says_until_when() {
    let w = World::new();
    let s1 = Ids { n: 1 };
    let r1 = w.session(s1);
    let _stand = w.standin(s1, &r1);
    w.standins_started(&[s1]);
    // The restart waits lowered (10 s to settle, a backoff from 1 s: a minute in all).
    let mut daemon = w.daemon_with(
        "daemon.log",
        &[
            ("KCAP_DAEMON_RESTART_SETTLE_MS", "300"),
            ("KCAP_DAEMON_RESTART_BACKOFF_MS", "50"),
        ],
    );
    let mut last = None;
    // The first start and five restarts, each SIGKILLed once it runs.
    for round in 0..6 {
        assert!(
            wait_for(Duration::from_secs(40), || w
                .supervisor_ready(s1)
                .is_some_and(|p| Some(p) != last && alive(p))),
            "round {round}: no supervisor: {}",
            w.logs()
        );
        let pid = w.supervisor_ready(s1).unwrap();
        kill(pid);
        last = Some(pid);
    }
    assert!(
        wait_for(WAIT, || taken_state(&w, s1)
            .is_some_and(|s| s.starts_with("given up"))),
        "{:?}\n{}",
        taken_state(&w, s1),
        w.logs()
    );
    let state = taken_state(&w, s1).unwrap();
    let at = state
        .rsplit(' ')
        .next()
        .and_then(kcap_watch::time::Ts::parse_rfc3339)
        .expect("a retry time");
    let now = kcap_watch::time::Ts::now();
    assert!(
        at > now.plus(Duration::from_secs(50 * 60)),
        "tried again too soon: {state}"
    );
    // The children write: the session stays given up.
    for d in w.tree(s1) {
        fs::write(&d.path, &d.text).unwrap();
        std::thread::sleep(Duration::from_millis(700));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(w.supervisor_pid(s1), None, "{}", w.logs());
    assert_eq!(
        daemon_events(&w, "daemon.log", "supervisor_started").len(),
        6,
        "{}",
        w.logs()
    );
    let text = status_output(&w.config, false);
    assert!(
        text.contains("given up") && text.contains("tried again at"),
        "{text}"
    );
    end_daemon(&w, &mut daemon);
}
