//! `kcap-watch supervise` with the real binary against the fake kcap server and a real
//! `CODEX_HOME`: descendants created while it runs (one in a new day directory, one in the
//! older header form) are each shipped completely under the root session's id and stopped
//! once; a child held by a live `watch` is left alone and taken over when that watch dies;
//! every owned key stays alive by the kcap CLI's rule; a SIGKILL and restart loses no line
//! and still posts every stop; a fault in one child affects that child only.
//!
//! Run on Linux and, under Wine, on Windows: the kcap CLI's liveness rule is written again
//! apart from the crate on Linux (its start token from `/proc`); elsewhere the token comes
//! from the crate. Where the kcap CLI would kill a watcher, the test kills it (SIGKILL,
//! TerminateProcess); a graceful end is SIGTERM on unix, Ctrl-Break on Windows.

use crate::support;
use support::bin::SpawnRetry;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use kcap_watch::platform::signals::{request_stop, stoppable};
use support::bin::{kcap_watch, wait_exit, wait_for};
use support::procs::Idle;
use support::rollout;
use support::{FakeKcap, Fault};

const ROOT: &str = "019fa981-2dca-7a31-9c55-3b1f0e6d2a01";
const CHILD_A: &str = "019fa981-6ea2-7b02-8d11-5c2e9f7a4b02";
const CHILD_B: &str = "019fb1f2-6d40-7b19-9e35-4f8c2a1d6066";
const GRANDCHILD: &str = "019fb1c0-5a18-7e03-8b2d-7c41f9e6a033";

const WAIT: Duration = Duration::from_secs(20);

fn bare(id: &str) -> String {
    id.replace('-', "")
}

fn key(agent: &str) -> String {
    format!("{}-{}", bare(ROOT), bare(agent))
}

struct Home {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    config: PathBuf,
    session: PathBuf,
    /// Something to name as `--parent-pid`; ending it ends the supervisor (dropped, it ends).
    parent: Option<Idle>,
}

fn fixture(name: &str, replace: &[(&str, &str)]) -> String {
    let mut text = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/codex")
            .join(name),
    )
    .unwrap();
    for (from, to) in replace {
        assert!(text.contains(from), "{name} lacks {from}");
        text = text.replace(from, to);
    }
    text
}

/// A descendant's rollout as the test places it: where, and its text.
struct Rollout {
    agent: &'static str,
    path: PathBuf,
    text: String,
}

impl Home {
    fn new() -> Home {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("codex");
        let config = tmp.path().join("kcap");
        let dir = home.join("sessions/2026/07/28");
        fs::create_dir_all(&dir).unwrap();
        let session = dir.join(format!("rollout-2026-07-28T22-13-45-{ROOT}.jsonl"));
        fs::write(&session, fixture("parent-session.jsonl", &[])).unwrap();
        let parent = Some(Idle::start());
        Home {
            _tmp: tmp,
            home,
            config,
            session,
            parent,
        }
    }

    /// Child A (current header form, today), child B (the next day's directory, created
    /// while the supervisor runs) and B's child in the older header form.
    fn tree(&self) -> Vec<Rollout> {
        let day = |d: &str| self.home.join("sessions/2026/07").join(d);
        vec![
            Rollout {
                agent: CHILD_A,
                path: day("28").join(format!("rollout-2026-07-28T22-14-05-{CHILD_A}.jsonl")),
                text: fixture("child-two-turns.jsonl", &[]),
            },
            Rollout {
                agent: CHILD_B,
                path: day("29").join(format!("rollout-2026-07-29T00-00-00-{CHILD_B}.jsonl")),
                text: fixture(
                    "child-current-shapes.jsonl",
                    &[("019fb1a0-0c41-7e52-9d3a-51f0c2a7e001", ROOT)],
                ),
            },
            Rollout {
                agent: GRANDCHILD,
                path: day("29").join(format!("rollout-2026-07-29T00-12-40-{GRANDCHILD}.jsonl")),
                text: fixture(
                    "child-crashed-mid-turn.jsonl",
                    &[("019fb1a0-0c41-7e52-9d3a-51f0c2a7e001", CHILD_B)],
                ),
            },
        ]
    }

    fn supervise(&self, server: &FakeKcap, extra: &[&str]) -> Child {
        self.supervise_with(server, extra, true)
    }

    /// As the daemon starts one: no parent to end with.
    #[cfg(target_os = "linux")]
    fn supervise_without_parent(&self, server: &FakeKcap, extra: &[&str]) -> Child {
        self.supervise_with(server, extra, false)
    }

    fn supervise_with(&self, server: &FakeKcap, extra: &[&str], parented: bool) -> Child {
        let mut c = kcap_watch(&self.config);
        c.env_remove("CODEX_HOME");
        c.arg("supervise")
            .arg(&self.session)
            .args(["--codex-home"])
            .arg(&self.home);
        c.args(["--server", &server.url()]);
        if parented {
            c.args(["--parent-pid", &self.parent_pid().to_string()]);
        }
        c.args(["--stop-grace", "0s"])
            .args(
                (!extra.contains(&"--reap-after"))
                    .then_some(["--reap-after", "30m"])
                    .into_iter()
                    .flatten(),
            )
            .args(["--poll-interval", "50ms", "--log-format", "json"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(self.next_log());
        stoppable(&mut c);
        c.spawn_retrying().unwrap()
    }

    /// A new stderr file for a supervisor run (a SIGKILLed run keeps its log).
    fn next_log(&self) -> fs::File {
        let dir = self.home.parent().unwrap();
        let n = fs::read_dir(dir).unwrap().count();
        fs::File::create(dir.join(format!("supervise-{n}.log"))).unwrap()
    }

    /// Every supervisor run's log, in order.
    fn logs(&self) -> String {
        let mut names: Vec<PathBuf> = fs::read_dir(self.home.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| fs::read_to_string(p).unwrap())
            .collect()
    }

    fn watchers(&self) -> PathBuf {
        self.config.join("watchers")
    }

    fn parent_pid(&self) -> u32 {
        self.parent.as_ref().map_or(0, Idle::id)
    }

    fn end_parent(&mut self) {
        if let Some(parent) = self.parent.take() {
            parent.end();
        }
    }
}

/// Writes `text` in two parts, the second a moment later: appended while it is watched.
fn write_in_parts(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let cut = text.len() / 2;
    let cut = text[..cut].rfind('\n').map_or(0, |i| i + 1);
    fs::write(path, &text[..cut]).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(&text.as_bytes()[cut..]).unwrap();
}

fn line_count(text: &str) -> usize {
    text.lines().count()
}

fn shipped_completely(server: &FakeKcap, r: &Rollout) -> bool {
    let lines = server.lines(&bare(ROOT), &bare(r.agent));
    lines.len() == line_count(&r.text)
}

fn stops_for(server: &FakeKcap, agent: &str) -> usize {
    server
        .hooks("subagent-stop")
        .iter()
        .filter(|h| h["agent_id"] == bare(agent) && h["session_id"] == bare(ROOT))
        .count()
}

/// The kcap CLI's `IsWatcherAlive`: the pid on line 1 runs, line 2 is its start token, and
/// past 30 s from `.started` (`grace`) the heartbeat is at most 20 s old. Returns the pid.
fn kcap_cli_alive(dir: &Path, key: &str, grace_secs: i64) -> Option<u32> {
    let read = |suffix: &str| fs::read_to_string(dir.join(format!("{key}.{suffix}"))).ok();
    let pid_file = read("pid")?;
    let mut lines = pid_file.split('\n');
    let pid: u32 = lines.next()?.trim().parse().ok()?;
    if lines.next().map(str::trim) != Some(start_token(pid)?.as_str()) {
        return None;
    }
    let now = jiff::Timestamp::now();
    let time = |suffix: &str| read(suffix).and_then(|t| t.trim().parse::<jiff::Timestamp>().ok());
    let started = time("started").unwrap_or(now);
    if (now - started).get_seconds() <= grace_secs {
        return Some(pid);
    }
    let beat = time("heartbeat")?;
    ((now - beat).get_milliseconds() <= 20_000).then_some(pid)
}

/// The start token the kcap CLI computes for `pid`, written again apart from the crate:
/// `lx:<boot_id>:<field 22 of /proc/<pid>/stat>`.
#[cfg(target_os = "linux")]
fn start_token(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 2..];
    let starttime = after_comm.split(' ').nth(19)?;
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(format!("lx:{}:{starttime}", boot.trim()))
}

/// The start token for `pid` where there is no `/proc` to derive it from apart from the
/// crate: the crate's (Windows: `tk:<creation time in .NET ticks>`), for a running pid only.
#[cfg(not(target_os = "linux"))]
fn start_token(pid: u32) -> Option<String> {
    kcap_watch::files::process_alive(pid)
        .then(|| kcap_watch::files::process_start_token(pid))
        .flatten()
}

#[test]
fn descendants_created_while_it_runs_are_shipped_completely_and_stopped_once() {
    let server = FakeKcap::start();
    let mut home = Home::new();
    let mut sup = home.supervise(&server, &[]);
    let tree = home.tree();
    // Created one by one while it runs; the 29th's directory does not exist before B.
    for r in &tree {
        write_in_parts(&r.path, &r.text);
    }
    assert!(
        server.wait_until(WAIT, |s| tree.iter().all(|r| shipped_completely(s, r))),
        "not every descendant was shipped completely: {}",
        home.logs()
    );
    // The kcap CLI's rule holds for every key, by the supervisor's pid, also without grace.
    let sup_pid = sup.id();
    let begin = Instant::now();
    while begin.elapsed() < Duration::from_millis(2500) {
        for r in &tree {
            assert_eq!(
                kcap_cli_alive(&home.watchers(), &key(r.agent), -1),
                Some(sup_pid),
                "{} not alive by the kcap CLI's rule",
                r.agent
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A later `watch` for an owned child finds it locked (exit 75).
    let mut w = kcap_watch(&home.config);
    w.args(["watch", &bare(ROOT)])
        .arg(&tree[0].path)
        .args(["--agent-id", &bare(CHILD_A)])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut w = w.spawn_retrying().unwrap();
    assert_eq!(wait_exit(&mut w, WAIT).code(), Some(75));

    home.end_parent();
    assert_eq!(wait_exit(&mut sup, WAIT).code(), Some(0));
    for r in &tree {
        assert!(shipped_completely(&server, r), "{} incomplete", r.agent);
        assert_eq!(
            stops_for(&server, r.agent),
            1,
            "{} not stopped once",
            r.agent
        );
        assert!(
            !home
                .watchers()
                .join(format!("{}.pid", key(r.agent)))
                .exists()
        );
        assert!(
            !home
                .watchers()
                .join(format!("{}.lock", key(r.agent)))
                .exists()
        );
    }
    // The session's own lines are the kcap CLI's session watcher's.
    assert!(server.lines(&bare(ROOT), "").is_empty());
    assert!(!server.stream_exists(&bare(ROOT), ""));
}

/// A `watch` of `a` started by hand, once it holds the key (its pid file written).
fn holding_watch(home: &Home, server: &FakeKcap, a: &Rollout) -> Child {
    let mut watch = kcap_watch(&home.config);
    watch
        .args(["watch", &bare(ROOT)])
        .arg(&a.path)
        .args(["--agent-id", &bare(CHILD_A), "--server", &server.url()])
        .args(["--stop-grace", "30m", "--poll-interval", "50ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let watch = watch.spawn_retrying().unwrap();
    let pid = watch.id();
    assert!(wait_for(WAIT, || kcap_cli_alive(
        &home.watchers(),
        &key(CHILD_A),
        30
    ) == Some(pid)));
    watch
}

#[test]
fn a_child_held_by_a_live_watch_is_left_alone_and_taken_over_when_it_dies() {
    let server = FakeKcap::start();
    let mut home = Home::new();
    let tree = home.tree();
    let a = &tree[0];
    fs::create_dir_all(a.path.parent().unwrap()).unwrap();
    let cut = a.text[..a.text.len() / 2].rfind('\n').unwrap() + 1;
    fs::write(&a.path, &a.text[..cut]).unwrap();
    let mut watch = holding_watch(&home, &server, a);
    let watch_pid = watch.id();

    let mut sup = home.supervise(&server, &[]);
    // The supervisor has found the child and left it to the live watcher (waited for as it
    // says so: a fixed pause may end before a process has even started, under Wine).
    assert!(
        wait_for(WAIT, || home.logs().contains("\"event\":\"child_held\"")),
        "{}",
        home.logs()
    );
    assert_eq!(
        kcap_cli_alive(&home.watchers(), &key(CHILD_A), 30),
        Some(watch_pid),
        "the supervisor took a key a live watch holds"
    );
    // As the kcap CLI's KillWatcher does once a watcher ignores its request to end.
    watch.kill().unwrap();
    let _ = watch.wait();
    let killed = Instant::now();
    // Taken over within 5 s, then the rest of the file (appended after the kill) shipped.
    assert!(wait_for(Duration::from_secs(5), || kcap_cli_alive(
        &home.watchers(),
        &key(CHILD_A),
        30
    ) == Some(sup.id())));
    assert!(killed.elapsed() < Duration::from_secs(5));
    let mut f = fs::OpenOptions::new().append(true).open(&a.path).unwrap();
    f.write_all(&a.text.as_bytes()[cut..]).unwrap();
    assert!(server.wait_until(WAIT, |s| shipped_completely(s, a)));
    home.end_parent();
    assert_eq!(wait_exit(&mut sup, WAIT).code(), Some(0));
    assert!(shipped_completely(&server, a));
    assert_eq!(stops_for(&server, CHILD_A), 1);
}

/// The safety-net poll's period a supervisor's status file gives.
#[cfg(target_os = "linux")]
fn supervisor_poll_ms(home: &Home) -> Option<u64> {
    let path = kcap_watch::status_file::status_path(
        &home.config,
        &bare(ROOT),
        kcap_watch::status_file::Writer::Supervise,
    );
    kcap_watch::status_file::read(&path).ok()??.poll_ms
}

/// docs/behaviour.md, "The safety-net poll": a supervisor (as the daemon starts one, with no
/// parent to watch) keeps the configured period while a key another watcher holds must be
/// looked at every poll, and stretches it to four times once nothing needs every poll and
/// notification has reported every change for ten seconds.
#[cfg(target_os = "linux")]
#[test]
fn a_supervisors_poll_stretches_once_idle_but_not_while_a_key_is_held_by_another_watcher() {
    let server = FakeKcap::start();
    let home = Home::new();
    let tree = home.tree();
    let a = &tree[0];
    fs::create_dir_all(a.path.parent().unwrap()).unwrap();
    fs::write(&a.path, &a.text).unwrap();
    let mut watch = holding_watch(&home, &server, a);
    let mut sup = home.supervise_without_parent(&server, &[]);
    assert!(
        wait_for(WAIT, || home.logs().contains("\"event\":\"child_held\"")),
        "{}",
        home.logs()
    );
    // Ten seconds of 50 ms polls is the probation; twelve with the key held.
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(
        supervisor_poll_ms(&home),
        Some(50),
        "a held key is looked at every configured poll"
    );
    watch.kill().unwrap();
    let _ = watch.wait();
    assert!(wait_for(WAIT, || kcap_cli_alive(
        &home.watchers(),
        &key(CHILD_A),
        30
    ) == Some(sup.id())));
    assert!(
        wait_for(Duration::from_secs(30), || supervisor_poll_ms(&home)
            == Some(200)),
        "the supervisor's poll did not stretch once idle: {:?}",
        supervisor_poll_ms(&home)
    );
    request_stop(sup.id()).expect("send the supervisor SIGTERM");
    assert_eq!(wait_exit(&mut sup, WAIT).code(), Some(0));
}

#[test]
fn sigkill_and_restart_loses_no_line_and_posts_every_stop() {
    let server = FakeKcap::start();
    let mut home = Home::new();
    let tree = home.tree();
    let cuts: Vec<usize> = tree
        .iter()
        .map(|r| r.text[..r.text.len() / 2].rfind('\n').unwrap() + 1)
        .collect();
    for (r, cut) in tree.iter().zip(&cuts) {
        fs::create_dir_all(r.path.parent().unwrap()).unwrap();
        fs::write(&r.path, &r.text[..*cut]).unwrap();
    }
    let mut sup = home.supervise(&server, &[]);
    assert!(
        server.wait_until(WAIT, |s| tree
            .iter()
            .zip(&cuts)
            .all(|(r, cut)| s.lines(&bare(ROOT), &bare(r.agent)).len()
                == line_count(&r.text[..*cut])))
    );
    sup.kill().unwrap();
    let _ = sup.wait();
    // Written while no one watches.
    for (r, cut) in tree.iter().zip(&cuts) {
        let mut f = fs::OpenOptions::new().append(true).open(&r.path).unwrap();
        f.write_all(&r.text.as_bytes()[*cut..]).unwrap();
    }
    let mut sup = home.supervise(&server, &[]);
    assert!(server.wait_until(WAIT, |s| tree.iter().all(|r| shipped_completely(s, r))));
    home.end_parent();
    assert_eq!(wait_exit(&mut sup, WAIT).code(), Some(0));
    for r in &tree {
        assert!(shipped_completely(&server, r));
        assert!(stops_for(&server, r.agent) >= 1, "{} has no stop", r.agent);
    }
}

#[test]
fn a_fault_in_one_child_affects_that_child_only() {
    let server = FakeKcap::start();
    let mut home = Home::new();
    let tree = home.tree();
    // B's stream refuses every line; the grandchild's file is rewritten under it.
    server.fail_always_for_agent("transcript", &bare(CHILD_B), Fault::Status(400));
    for r in &tree {
        fs::create_dir_all(r.path.parent().unwrap()).unwrap();
        fs::write(&r.path, &r.text).unwrap();
    }
    let mut sup = home.supervise(&server, &[]);
    let (a, g) = (&tree[0], &tree[2]);
    assert!(
        server.wait_until(WAIT, |s| shipped_completely(s, g)),
        "{}",
        home.logs()
    );
    let mut rewritten: Vec<&str> = g.text.lines().collect();
    rewritten.truncate(3);
    let rewritten = rewritten.join("\n") + "\n{\"rewritten\":true}\n";
    fs::write(home.watchers().join("../rewrite.tmp"), &rewritten).unwrap();
    fs::rename(home.watchers().join("../rewrite.tmp"), &g.path).unwrap();
    // The grandchild's key is released; A goes on: appended lines still arrive.
    assert!(wait_for(WAIT, || !home
        .watchers()
        .join(format!("{}.lock", key(GRANDCHILD)))
        .exists()));
    let more = rollout::event(r#"{"type":"agent_message","message":"still here"}"#).at("16:30:00");
    let mut f = fs::OpenOptions::new().append(true).open(&a.path).unwrap();
    writeln!(f, "{more}").unwrap();
    assert!(
        server.wait_until(WAIT, |s| s.lines(&bare(ROOT), &bare(CHILD_A)).len()
            == line_count(&a.text) + 1)
    );
    assert!(sup.try_wait().unwrap().is_none(), "the supervisor ended");
    assert!(server.lines(&bare(ROOT), &bare(CHILD_B)).is_empty());

    home.end_parent();
    assert_eq!(wait_exit(&mut sup, WAIT).code(), Some(0));
    let log = home.logs();
    assert!(log.contains("rollout_rewritten"), "{log}");
    assert_eq!(stops_for(&server, CHILD_A), 1);
    // B's refused lines were kept in the spool, not lost, and its stop went out or was
    // spooled behind them.
    let spooled = spooled_text(&home.config);
    assert!(
        spooled.contains(&bare(CHILD_B)),
        "B's refused lines were not spooled"
    );
    assert!(
        stops_for(&server, CHILD_B) == 1
            || spooled.contains("subagent-stop") && spooled.contains(&bare(CHILD_B)),
        "B's stop is lost: {}",
        home.logs()
    );
}

/// Every spool file's text under `config`.
fn spooled_text(config: &Path) -> String {
    let mut out = String::new();
    let mut dirs = vec![config.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                if !p.ends_with("watchers") {
                    dirs.push(p);
                }
            } else if p.to_string_lossy().contains("spool") {
                out.push_str(&fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    out
}

/// R3's shutdown budget holds for a supervisor too: SIGTERM with the server hanging on every
/// transcript batch ends every child within 4 s, every line is spooled (none lost, none
/// posted twice), and the owned keys' files are removed.
#[test]
fn sigterm_with_a_hung_server_spools_every_childs_lines_within_the_budget() {
    let server = FakeKcap::start();
    server.fail_always(Some("transcript"), Fault::Hang);
    let home = Home::new();
    let tree = home.tree();
    let mut sup = home.supervise(&server, &[]);
    for r in &tree[..2] {
        write_in_parts(&r.path, &r.text);
    }
    // Both children are owned (their pid files name the supervisor) and their first batch
    // is hanging at the server.
    assert!(
        wait_for(WAIT, || tree[..2].iter().all(|r| home
            .watchers()
            .join(format!("{}.pid", key(r.agent)))
            .exists())),
        "children never owned: {}",
        home.logs()
    );
    assert!(server.wait_until(WAIT, |s| s.request_count("transcript") >= 2));
    let signalled = Instant::now();
    request_stop(sup.id()).expect("send the supervisor SIGTERM (Ctrl-Break)");
    assert_eq!(wait_exit(&mut sup, WAIT).code(), Some(0), "{}", home.logs());
    assert!(
        signalled.elapsed() <= Duration::from_secs(4),
        "took {:?}",
        signalled.elapsed()
    );
    let spooled = spooled_text(&home.config);
    for r in &tree[..2] {
        let records: Vec<serde_json::Value> = spooled
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["agent_id"] == bare(r.agent))
            .collect();
        let mut numbers: Vec<u64> = records
            .iter()
            .flat_map(|v| v["line_numbers"].as_array().cloned().unwrap_or_default())
            .filter_map(|n| n.as_u64())
            .collect();
        numbers.sort_unstable();
        let want: Vec<u64> = (0..line_count(&r.text) as u64).collect();
        assert_eq!(numbers, want, "{} spooled lines:\n{}", r.agent, home.logs());
        assert!(
            !home
                .watchers()
                .join(format!("{}.pid", key(r.agent)))
                .exists()
        );
    }
}

/// docs/behaviour.md S2.7, a defect found from outside (reproduced 3 of 3 with a 4 s
/// reap): a child whose pipeline was reaped and that Codex then re-engages. Before the fix, the
/// supervisor released the key at the reap and never looked at the child again, so the lines
/// of the second turn were never shipped, spooled or logged. Now the key stays ours through
/// the reap (the kcap CLI's rule never finds it free, so the kcap CLI starts no watcher of its
/// own), the second turn is shipped in full from the server's watermark, and the stop, posted
/// after the first turn, stays latched.
#[test]
fn reengaged_child_after_reap_is_shipped_in_full() {
    let server = FakeKcap::start();
    let mut home = Home::new();
    let a = home.tree().swap_remove(0);
    // The first turn ends at its `task_complete` (line 21 of child-two-turns).
    let first_turn: String = a.text.lines().take(21).map(|l| format!("{l}\n")).collect();
    assert!(first_turn.trim_end().ends_with("}}") && first_turn.contains("task_complete"));
    fs::create_dir_all(a.path.parent().unwrap()).unwrap();
    fs::write(&a.path, &first_turn).unwrap();
    let mut sup = home.supervise(&server, &["--reap-after", "1s"]);
    let sup_pid = sup.id();
    assert!(
        server.wait_until(WAIT, |s| s.lines(&bare(ROOT), &bare(CHILD_A)).len() == 21
            && stops_for(s, CHILD_A) == 1),
        "the first turn was not shipped and stopped: {}",
        home.logs()
    );
    // The pipeline is reaped; the key is still the supervisor's, by the kcap CLI's rule.
    assert!(
        wait_for(WAIT, || home.logs().contains("\"child_ended\"")),
        "the child was never reaped: {}",
        home.logs()
    );
    let watchers = home.watchers();
    assert_eq!(
        kcap_cli_alive(&watchers, &key(CHILD_A), -1),
        Some(sup_pid),
        "the reaped child's key is free for the kcap CLI: {}",
        home.logs()
    );
    // The supervisor's status file (S3) says so: the key is held, its lines confirmed.
    let status_path = kcap_watch::status_file::status_path(
        &home.config,
        &bare(ROOT),
        kcap_watch::status_file::Writer::Supervise,
    );
    let held = |s: &kcap_watch::status_file::StatusFile| {
        s.keys
            .iter()
            .any(|k| k.key == key(CHILD_A) && k.state == "held" && k.lines_confirmed == 21)
    };
    assert!(
        wait_for(WAIT, || kcap_watch::status_file::read(&status_path)
            .ok()
            .flatten()
            .is_some_and(|s| held(&s) && s.pid == sup_pid)),
        "status file: {:?}",
        fs::read_to_string(&status_path)
    );
    // Codex re-engages the child: its second turn is appended.
    let mut f = fs::OpenOptions::new().append(true).open(&a.path).unwrap();
    f.write_all(&a.text.as_bytes()[first_turn.len()..]).unwrap();
    drop(f);
    let begin = Instant::now();
    while !shipped_completely(&server, &a) && begin.elapsed() < WAIT {
        assert_eq!(
            kcap_cli_alive(&watchers, &key(CHILD_A), -1),
            Some(sup_pid),
            "the key was free while the child was re-engaged"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        shipped_completely(&server, &a),
        "the re-engaged child's lines were not shipped: got {} of {}: {}",
        server.lines(&bare(ROOT), &bare(CHILD_A)).len(),
        line_count(&a.text),
        home.logs()
    );
    let log = home.logs();
    assert!(log.contains("\"child_kept\"") && log.contains("\"child_reengaged\""));
    home.end_parent();
    assert_eq!(wait_exit(&mut sup, WAIT).code(), Some(0));
    // Every line once, in order, and one stop for the process.
    let lines = server.lines(&bare(ROOT), &bare(CHILD_A));
    assert_eq!(lines.len(), line_count(&a.text));
    assert_eq!(stops_for(&server, CHILD_A), 1);
    assert!(!watchers.join(format!("{}.lock", key(CHILD_A))).exists());
    assert!(
        !status_path.exists(),
        "the status file outlived a clean exit"
    );
}
