//! Issue 28: the daemon and `supervise` under load and faults, and what a user is told. Each
//! test is one class the outside review found (the stop's spool result dropped, a URL's secret
//! shown, descriptors spent per child ever held, ...), run with the real binary and real files.
//
// Run on Linux and, under Wine, on Windows; the tests of open-file limits and a full disk set
// rlimits, count descriptors in /proc or mount a tmpfs, and are Linux only.

use crate::support;
use support::bin::SpawnRetry;

use std::time::Duration;

use support::FakeKcap;
use support::harness::{self, Sandbox, child_meta, free_port, task_complete, task_started};

const W: Duration = Duration::from_secs(20);

/// Item 7: `watch --once` against a server nobody answers spools the due stop, and reports
/// and logs where it went, not "due, not delivered".
#[test]
fn once_with_the_server_unreachable_reports_where_the_stop_was_spooled() {
    let sb = Sandbox::new();
    sb.append_lines(&[
        child_meta(),
        task_started("t1"),
        task_complete("t1", "done"),
    ]);
    let url = format!("http://127.0.0.1:{}", free_port());
    let mut p = sb.spawn(&mut sb.watch(Some(&url), &["--once"]));
    assert_eq!(p.exit_code(W, "--once"), 0, "{}", p.stderr());
    let hook_spool = sb
        .config
        .join("spool")
        .join(format!("{}.jsonl", harness::SESSION_ND));
    let out = p.stdout();
    assert!(
        out.contains(&format!(
            "subagent-stop: spooled to {}",
            hook_spool.display()
        )),
        "{out}"
    );
    assert!(!out.contains("not delivered"), "{out}");
    let stop_spooled = p
        .events_named("spooled")
        .iter()
        .filter(|e| e["fields"]["route"] == "subagent-stop")
        .count();
    assert_eq!(
        stop_spooled,
        1,
        "the log says nothing of the spooled stop:\n{}",
        p.stderr()
    );
}

/// Item 7, the same path at a signal: with the server down, the stop spooled at SIGTERM is
/// logged as spooled (before, the ending was over before the spool's answer came back).
#[test]
fn a_stop_spooled_at_a_signal_with_the_server_down_is_logged_as_spooled() {
    let sb = Sandbox::new();
    sb.append_lines(&[
        child_meta(),
        task_started("t1"),
        task_complete("t1", "done"),
    ]);
    let url = format!("http://127.0.0.1:{}", free_port());
    let mut p = sb.spawn(&mut sb.watch(Some(&url), &[]));
    assert!(harness::wait_until(W, || p.has_event("ship_failed")));
    assert_eq!(p.terminate(W), 0, "{}", p.stderr());
    let routes: Vec<String> = harness::spool_records(
        &sb.config
            .join(format!("spool/{}.jsonl", harness::SESSION_ND)),
    )
    .iter()
    .map(|r| r["route"].as_str().unwrap_or("").to_owned())
    .collect();
    assert_eq!(routes, vec!["subagent-stop"], "{}", p.stderr());
    assert!(
        p.events_named("spooled")
            .iter()
            .any(|e| e["fields"]["route"] == "subagent-stop"),
        "the log says nothing of the spooled stop:\n{}",
        p.stderr()
    );
}

// ---- item 1: thousands of children under the usual open-file limit ---------------------------

/// A Codex home with one session (the fixtures' ids) and `n` children, each one completed turn
/// (4 lines), all written before the supervisor starts.
struct Many {
    _tmp: tempfile::TempDir,
    home: std::path::PathBuf,
    config: std::path::PathBuf,
    session: std::path::PathBuf,
    children: Vec<(String, std::path::PathBuf)>,
}

const ROOT: &str = "019fa981-2dca-7a31-9c55-3b1f0e6d2a01";

/// The open-file limit the many-children tests start the supervisor under, and how many
/// children they give it: the limit scaled down from the usual 1,024 (and the children from
/// the 2,000 of the full-size scenario, docs/behaviour.md T4) keeps the ratio, so the supervisor still cannot hold the
/// children without raising its soft limit (each once cost three descriptors, and even at one
/// each they exceed it) or, under a hard limit as low, without listing some as claim failed,
/// while the test ships a quarter of the lines. `KCAP_TEST_CHILDREN` sets another count, to
/// measure.
#[cfg(target_os = "linux")]
const LIMIT: u64 = 256;
#[cfg(target_os = "linux")]
fn children() -> usize {
    std::env::var("KCAP_TEST_CHILDREN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500)
}

/// The heartbeat period the many-children tests run with (`KCAP_WATCH_HEARTBEAT_MS`), so that
/// several beats of every held key pass in seconds; a heartbeat may be this plus the 5 s of
/// slack kcap-watch promises old (docs/behaviour.md S5: 10 s beats, never older than 15 s).
const BEAT: Duration = Duration::from_secs(1);
#[cfg(target_os = "linux")]
const MAX_AGE: Duration = Duration::from_secs(6);

impl Many {
    fn new(n: usize) -> Many {
        // On a memory file system where there is one: the test is about descriptors, and on
        // the CI machine's busy ext4 creating a file took 6.5 ms (a claim creates about seven).
        let shm = std::path::Path::new("/dev/shm");
        let tmp = if cfg!(target_os = "linux") && shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let home = tmp.path().join("codex");
        // Joined part by part: the paths the tests expect in output are the ones kcap-watch
        // finds, with the platform's separator throughout.
        let day = home.join("sessions").join("2026").join("07").join("28");
        std::fs::create_dir_all(&day).unwrap();
        let session = day.join(format!("rollout-2026-07-28T22-13-45-{ROOT}.jsonl"));
        harness::append_lines(
            &session,
            &[support::rollout::session_meta(&format!(
                r#"{{"id":"{ROOT}","cwd":"/home/dev/src/acme-api","cli_version":"0.145.0"}}"#
            ))
            .now()],
        );
        let mut children = Vec::new();
        for i in 0..n {
            let id = format!("019fa981-6ea2-7b02-8d11-{i:012x}");
            let meta = support::rollout::session_meta(&format!(
                r#"{{"id":"{id}","session_id":"{ROOT}","parent_thread_id":"{ROOT}","thread_source":"subagent","agent_path":"/root/w{i}","agent_nickname":"W{i}","source":{{"subagent":{{"thread_spawn":{{"parent_thread_id":"{ROOT}","depth":1}}}}}},"cwd":"/home/dev/src/acme-api","cli_version":"0.145.0"}}"#
            ))
            .now();
            let path = day.join(format!("rollout-2026-07-28T22-14-05-{id}.jsonl"));
            harness::append_lines(
                &path,
                &[
                    meta,
                    task_started("t1"),
                    harness::message(&format!("worker {i} done")),
                    task_complete("t1", "done"),
                ],
            );
            children.push((id.replace('-', ""), path));
        }
        Many {
            config: tmp.path().join("kcap"),
            home,
            session,
            children,
            _tmp: tmp,
        }
    }

    /// `supervise` of the session with its open-file limit set to `soft`/`hard` in the child
    /// process before it runs (the test process keeps its own).
    fn supervise(
        &self,
        server: &str,
        soft: u64,
        hard: Option<u64>,
        extra: &[&str],
    ) -> std::process::Child {
        #[cfg(unix)]
        use std::os::unix::process::CommandExt;
        // Windows has no per-process open-file limit to set.
        #[cfg(not(unix))]
        let _ = (soft, hard);
        let mut c = support::bin::kcap_watch(&self.config);
        c.env_remove("CODEX_HOME")
            .arg("supervise")
            .arg(&self.session)
            .arg("--codex-home")
            .arg(&self.home)
            .args(["--server", server, "--stop-grace", "0s"])
            .args(["--log-format", "json"])
            .env("KCAP_WATCH_HEARTBEAT_MS", BEAT.as_millis().to_string())
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(self._tmp.path().join("supervise.log")).unwrap());
        #[cfg(unix)]
        // SAFETY: only async-signal-safe calls (getrlimit, setrlimit) between fork and exec.
        unsafe {
            c.pre_exec(move || {
                let mut lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
                lim.rlim_cur = soft as libc::rlim_t;
                if let Some(h) = hard {
                    lim.rlim_max = h as libc::rlim_t;
                }
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        c.spawn_retrying().unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._tmp.path().join("supervise.log")).unwrap_or_default()
    }

    fn events(&self, name: &str) -> usize {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["fields"]["event"] == name)
            .count()
    }

    fn watchers(&self) -> std::path::PathBuf {
        self.config.join("watchers")
    }

    /// Children whose 4 lines and stop the server holds.
    #[cfg(target_os = "linux")]
    fn complete(&self, server: &FakeKcap) -> usize {
        let root = ROOT.replace('-', "");
        let stops: std::collections::HashSet<String> = server
            .hooks("subagent-stop")
            .iter()
            .filter_map(|h| h["agent_id"].as_str().map(str::to_owned))
            .collect();
        self.children
            .iter()
            .filter(|(id, _)| stops.contains(id) && server.lines(&root, id).len() == 4)
            .count()
    }

    /// The oldest heartbeat among the keys `pid` holds by its pid file (and how many it holds).
    #[cfg(target_os = "linux")]
    fn oldest_heartbeat(&self, pid: u32) -> (Option<Duration>, usize) {
        let root = ROOT.replace('-', "");
        let mut oldest = None;
        let mut held = 0;
        for (id, _) in &self.children {
            let key = format!("{root}-{id}");
            let pid_file = std::fs::read_to_string(self.watchers().join(format!("{key}.pid")));
            if !pid_file.is_ok_and(|t| t.lines().next() == Some(pid.to_string().as_str())) {
                continue;
            }
            held += 1;
            let path = self.watchers().join(format!("{key}.heartbeat"));
            // A key being claimed has its pid file a moment before its first beat (which the
            // beat thread writes at once): looked at again a beat period later, a held key's
            // heartbeat must be there and fresh.
            let age = harness::heartbeat_age(&path)
                .or_else(|| {
                    std::thread::sleep(BEAT);
                    harness::heartbeat_age(&path)
                })
                .unwrap_or(Duration::MAX);
            oldest = Some(oldest.map_or(age, |o: Duration| o.max(age)));
        }
        (oldest, held)
    }
}

/// A spawned process killed when dropped: a failed assertion must not leave a supervisor
/// retrying against a server that is gone (it would load the machine for the tests after).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(target_os = "linux")]
fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Item 1 (the spec's T4.1-T4.2): one supervisor with twice as many children as its soft
/// open-file limit (500 under 256, scaled down from 2,000 under the usual 1,024; the hard limit
/// above it, as systemd's services get), each a completed turn, ships every line and stop
/// within 60 s, with every heartbeat it holds fresh throughout. Before, each held key kept
/// three descriptors (its lock and two heartbeat slots) and nothing raised the soft limit: it
/// shipped nothing.
#[cfg(target_os = "linux")]
#[test]
fn twice_its_soft_open_file_limit_in_children_all_ship_within_60_s_with_fresh_heartbeats() {
    // Not one of the CPU-heavy tests (`support::serial`): 500 children ship in about a second
    // of CPU.
    let n = children();
    let many = Many::new(n);
    let server = FakeKcap::start();
    let begin = std::time::Instant::now();
    let mut sup = KillOnDrop(many.supervise(&server.url(), LIMIT, None, &[]));
    let sup = &mut sup.0;
    let mut oldest = Duration::ZERO;
    let mut looked = std::time::Instant::now();
    // Looked at sparingly: the test shares the machine's cores with the supervisor.
    while begin.elapsed() < Duration::from_secs(60) && server.hooks("subagent-stop").len() < n {
        if looked.elapsed() >= BEAT * 2 {
            looked = std::time::Instant::now();
            if let (Some(age), _) = many.oldest_heartbeat(sup.id()) {
                oldest = oldest.max(age);
            }
        }
        assert!(sup.try_wait().unwrap().is_none(), "{}", many.log());
        std::thread::sleep(Duration::from_millis(250));
    }
    let took = begin.elapsed();
    let shipped = many.complete(&server);
    let descriptors = open_descriptors(sup.id());
    // Every heartbeat stays fresh for a while longer, past a few beats.
    for _ in 0..6 {
        std::thread::sleep(BEAT / 2);
        let (age, held) = many.oldest_heartbeat(sup.id());
        assert_eq!(held, n);
        oldest = oldest.max(age.unwrap_or(Duration::MAX));
    }
    eprintln!(
        "{shipped} of {n} children shipped in {took:?}; {descriptors} descriptors open; oldest heartbeat {oldest:?}"
    );
    assert_eq!(
        shipped,
        n,
        "{}",
        many.log()
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(oldest < MAX_AGE, "a heartbeat was {oldest:?} old");
    support::bin::signal(sup, libc::SIGTERM);
    let _ = support::bin::wait_exit(sup, Duration::from_secs(30));
}

/// Item 1 (the spec's T4.3): with the hard limit also at that soft limit (256 for 500
/// children, scaled down from 1,024 for 2,000) the supervisor ships what it can hold and claims
/// nothing it cannot serve: the keys it could not claim are listed as `claim failed` in its
/// status (never silently dropped, and free for the kcap CLI meanwhile), the shortage is logged
/// once, not per key or per line, and every heartbeat it holds stays fresh. As descriptors free
/// up (a reaped child keeps its key's lock but closes its rollout), it claims more by itself,
/// each shipped in full.
#[cfg(target_os = "linux")]
#[test]
fn under_a_hard_open_file_limit_it_ships_what_it_can_hold_lists_the_rest_and_claims_more_as_descriptors_free_up()
 {
    let n = children();
    let many = Many::new(n);
    let server = FakeKcap::start();
    let mut guard =
        KillOnDrop(many.supervise(&server.url(), LIMIT, Some(LIMIT), &["--reap-after", "3s"]));
    let sup = &mut guard.0;
    let status_path = many.config.join(format!(
        "kcap-watch/status/{}.supervise.json",
        ROOT.replace('-', "")
    ));
    let claim_failed = || {
        std::fs::read(&status_path)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .map_or(0, |v| {
                v["keys"].as_array().map_or(0, |ks| {
                    ks.iter().filter(|k| k["state"] == "claim failed").count()
                })
            })
    };
    // Every key it holds is shipped and stopped, and the rest are listed as waiting.
    let settled_above = |floor: usize, held: &mut usize| {
        harness::wait_until(Duration::from_secs(90), || {
            *held = many.oldest_heartbeat(sup.id()).1;
            *held > floor
                && server.hooks("subagent-stop").len() >= *held
                && *held + claim_failed() == n
        })
    };
    let tail = || {
        many.log()
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut first = 0;
    assert!(settled_above(0, &mut first), "{}", tail());
    let (oldest, _) = many.oldest_heartbeat(sup.id());
    let descriptors = open_descriptors(sup.id());
    eprintln!(
        "hard limit {LIMIT}: holds {first} of {n} keys, {} listed as claim failed, {descriptors} descriptors open, oldest heartbeat {oldest:?}",
        claim_failed()
    );
    assert!(first < n, "it held every key under a hard limit of 1024");
    assert!(oldest.is_some_and(|a| a < MAX_AGE), "{oldest:?}");
    // Reaped children free their rollouts' descriptors: more keys are claimed and shipped.
    let mut later = 0;
    assert!(settled_above(first, &mut later), "{}", tail());
    let (oldest, _) = many.oldest_heartbeat(sup.id());
    eprintln!(
        "then holds {later} keys, {} listed as claim failed, {} descriptors open, oldest heartbeat {oldest:?}",
        claim_failed(),
        open_descriptors(sup.id())
    );
    assert!(oldest.is_some_and(|a| a < MAX_AGE), "{oldest:?}");
    assert!(sup.try_wait().unwrap().is_none(), "{}", tail());
    assert_eq!(
        many.events("child_claim_failed"),
        1,
        "the shortage is said once"
    );
    let warnings = many
        .log()
        .lines()
        .filter(|l| l.contains("\"level\":\"WARN\"") || l.contains("\"level\":\"ERROR\""))
        .count();
    assert!(
        warnings < 20,
        "{warnings} warnings: the log floods\n{}",
        tail()
    );
    assert_eq!(many.complete(&server), later);
    support::bin::signal(sup, libc::SIGTERM);
    let _ = support::bin::wait_exit(sup, Duration::from_secs(30));
}

// ---- item 3: a claim that fails is retried ------------------------------------------------------

/// A small tmpfs mounted for the test (unmounted when dropped); `None` where mounting is not
/// permitted.
#[cfg(target_os = "linux")]
struct SmallDisk {
    path: std::path::PathBuf,
}

#[cfg(target_os = "linux")]
impl SmallDisk {
    fn mount(path: &std::path::Path, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(path).ok()?;
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk {
            path: path.to_path_buf(),
        })
    }

    /// Fills it: one file written until the disk is full.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let filler = self.path.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
        filler
    }
}

#[cfg(target_os = "linux")]
impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

/// Item 3 (the spec's T3.5): a child whose claim fails on a full disk (a 512 KiB tmpfs as the
/// config directory, filled) is listed as `claim failed`, tried again at every poll with the
/// failure logged once, and claimed once space returns: every line and its stop are
/// delivered. Before, a failed claim was forgotten: nothing of the child was ever shipped.
#[cfg(target_os = "linux")]
#[test]
fn a_claim_that_fails_on_a_full_disk_is_retried_until_it_works_and_nothing_is_lost() {
    let many = Many::new(0);
    let Some(disk) = SmallDisk::mount(&many.config, "512k") else {
        eprintln!("skipped: mounting a tmpfs is not permitted here");
        return;
    };
    let server = FakeKcap::start();
    let mut guard = KillOnDrop(many.supervise(&server.url(), 4096, None, &[]));
    let sup = &mut guard.0;
    let root = ROOT.replace('-', "");
    // The supervisor has started (its lock and log files are created) before the disk fills.
    assert!(harness::wait_until(W, || many
        .log()
        .contains("supervisor_started")));
    let filler = disk.fill();
    // A child appears: its claim cannot write the key's files.
    let id = "019fa981-6ea2-7b02-8d11-00000000f011";
    let path = many.home.join(format!(
        "sessions/2026/07/28/rollout-2026-07-28T22-20-00-{id}.jsonl"
    ));
    let mut lines = vec![support::rollout::session_meta(&format!(
        r#"{{"id":"{id}","session_id":"{ROOT}","parent_thread_id":"{ROOT}","thread_source":"subagent","agent_path":"/root/d","agent_nickname":"D","source":{{"subagent":{{"thread_spawn":{{"parent_thread_id":"{ROOT}","depth":1}}}}}},"cwd":"/home/dev/src/acme-api","cli_version":"0.145.0"}}"#
    ))
    .now()];
    lines.extend(harness::turn(1));
    lines.extend(harness::turn(2));
    lines.extend(harness::turn(3));
    harness::append_lines(&path, &lines);
    let agent = id.replace('-', "");
    assert!(
        harness::wait_until(W, || many.events("child_claim_failed") >= 1),
        "{}",
        many.log()
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(server.lines(&root, &agent).is_empty());
    assert_eq!(many.events("child_claim_failed"), 1, "said once per streak");
    // Space returns.
    std::fs::remove_file(&filler).unwrap();
    assert!(
        server.wait_until(W, |s| s.lines(&root, &agent).len() == lines.len()
            && s.hooks("subagent-stop")
                .iter()
                .any(|h| h["agent_id"] == agent)),
        "{}",
        many.log()
    );
    assert_eq!(many.events("child_claim_recovered"), 1);
    support::bin::signal(sup, libc::SIGTERM);
    let _ = support::bin::wait_exit(sup, Duration::from_secs(30));
}

// ---- item 6: a second file of a followed thread ---------------------------------------------

/// Item 6 (the spec's T4.5): a second rollout of a thread already followed (a continuation
/// segment with a later timestamp, a retained copy `rollout-...-<thread id>_<suffix>.jsonl`) is
/// never taken for a new child, and is named in a warning and in `status`. Before, it was
/// ignored with a debug line only.
#[test]
fn a_second_file_of_a_followed_thread_is_named_in_a_warning_and_in_status_and_never_a_new_child() {
    let many = Many::new(1);
    let server = FakeKcap::start();
    let guard = KillOnDrop(many.supervise(&server.url(), 4096, None, &[]));
    assert!(
        server.wait_until(W, |s| s.hooks("subagent-stop").len() == 1),
        "{}",
        many.log()
    );
    let (agent, path) = &many.children[0];
    let header = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();
    let dashed = support::rollout::dashed(agent);
    let day = path.parent().unwrap();
    let segment = day.join(format!("rollout-2026-07-28T23-40-00-{dashed}.jsonl"));
    let copy = day.join(format!(
        "rollout-2026-07-28T22-14-05-{dashed}_retained.jsonl"
    ));
    for second in [&segment, &copy] {
        harness::append_lines(second, &[header.clone(), task_started("t9")]);
    }
    assert!(
        harness::wait_until(W, || many.events("rollout_continuation") == 2),
        "{}",
        many.log()
    );
    let mut c = support::bin::kcap_watch(&many.config);
    c.arg("status");
    let text = support::bin::stdout(&support::bin::run(c, W));
    assert!(
        harness::wait_until(W, || {
            let mut c = support::bin::kcap_watch(&many.config);
            c.arg("status");
            let text = support::bin::stdout(&support::bin::run(c, W));
            [&segment, &copy]
                .iter()
                .all(|p| text.contains(&format!("continuation not followed: {}", p.display())))
        }),
        "{text}"
    );
    // Still one child: the same lines and one stop, no second key.
    std::thread::sleep(Duration::from_secs(2));
    let root = ROOT.replace('-', "");
    assert_eq!(server.lines(&root, agent).len(), 4);
    assert_eq!(server.hooks("subagent-stop").len(), 1);
    assert_eq!(server.hooks("subagent-start").len(), 1);
    let pid_files = std::fs::read_dir(many.watchers())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pid"))
        .count();
    assert_eq!(pid_files, 1);
    drop(guard);
}
