//! Local state files and the two spools, against real files in a temporary directory.
// Unix only: file modes (0600/0700), symbolic links, flock between processes and process
// liveness by pid are what these tests check; Windows is linted, not run here (README,
// "Platforms").
#![cfg(unix)]

use crate::support;

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kcap_watch::files::{
    AcquireError, Heartbeat, WatcherFiles, ensure_private_dir, log_file_path, open_log_file,
    process_start_token, watcher_key, write_atomic,
};
use kcap_watch::ship::TranscriptBatch;
use kcap_watch::ship::spool::{
    self, HOOK_SPOOL_CAP, HookRecord, SpoolOutcome, TRANSCRIPT_SPOOL_CAP, append_hook,
    append_transcript, claim, claim_orphans, highest_spooled_line, hook_spool_path,
    needs_import_path, scan_spooled_lines, transcript_spool_path,
};
use kcap_watch::time::Ts;

const SESSION: &str = "0199a2b4c0de7000a000000000000001";
const CHILD: &str = "0199a2b4c0de7000a000000000000002";
const NOW: Ts = Ts(1_785_265_331_000);

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn batch(agent: Option<&str>, numbers: &[u64]) -> TranscriptBatch {
    TranscriptBatch {
        session_id: SESSION.to_owned(),
        agent_id: agent.map(str::to_owned),
        vendor: "codex".to_owned(),
        lines: numbers
            .iter()
            .map(|n| format!("{{\"line\":{n}}}"))
            .collect(),
        line_numbers: numbers.to_vec(),
    }
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

// ---------------------------------------------------------------- lock and watcher files

#[test]
fn a_second_watcher_for_the_same_key_is_refused_while_the_first_lives() {
    let dir = tempfile::tempdir().unwrap();
    let watchers = dir.path().join("watchers");
    let key = watcher_key(SESSION, Some(CHILD));

    let first = WatcherFiles::acquire(&watchers, &key, NOW).unwrap();
    match WatcherFiles::acquire(&watchers, &key, NOW) {
        Err(AcquireError::Held {
            key: held,
            holder_pid,
        }) => {
            assert_eq!(held, key);
            // The pid file names this very process, which is not "another" holder.
            assert_eq!(holder_pid, None);
        }
        other => panic!("expected Held, got {other:?}"),
    }
    // Another key is independent.
    let other = WatcherFiles::acquire(&watchers, SESSION, NOW).unwrap();

    drop(first);
    // Free once the holder is gone. A process another test forks at this moment shares the
    // lock's open file until it execs (`flock` belongs to the open file, not the descriptor):
    // that is the holder gone a few milliseconds later, not a lock left behind.
    let mut again = None;
    support::bin::wait_for(Duration::from_secs(5), || {
        again = Some(WatcherFiles::acquire(&watchers, &key, NOW));
        again.as_ref().is_some_and(Result::is_ok)
    });
    assert!(
        again.as_ref().is_some_and(Result::is_ok),
        "the lock is free once the holder is gone: {again:?}"
    );
    drop(other);
}

/// Run in a child process by `the_lock_holds_across_processes`: tries the lock and reports.
#[test]
fn lock_probe_child() {
    let Ok(dir) = std::env::var("KCAP_TEST_LOCK_PROBE_DIR") else {
        return;
    };
    match WatcherFiles::acquire(Path::new(&dir), SESSION, NOW) {
        Ok(files) => {
            println!("PROBE:acquired");
            files.release();
        }
        Err(AcquireError::Held { holder_pid, .. }) => println!("PROBE:held:{holder_pid:?}"),
        Err(e) => println!("PROBE:error:{e}"),
    }
}

fn probe_from_another_process(dir: &Path) -> String {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "files_spool::lock_probe_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KCAP_TEST_LOCK_PROBE_DIR", dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|l| l.split_once("PROBE:"))
        .and_then(|(_, report)| report.split_whitespace().next())
        .unwrap_or_else(|| panic!("probe printed nothing: {stdout}"))
        .to_owned()
}

#[test]
fn the_lock_holds_across_processes_and_names_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let files = WatcherFiles::acquire(dir.path(), SESSION, NOW).unwrap();
    assert_eq!(
        probe_from_another_process(dir.path()),
        format!("held:Some({})", std::process::id())
    );
    files.release();
    assert_eq!(probe_from_another_process(dir.path()), "acquired");
}

#[test]
fn pid_file_holds_the_pid_and_the_kcap_start_token() {
    let dir = tempfile::tempdir().unwrap();
    // The spawner may have written its own version first: it is replaced.
    fs::write(dir.path().join(format!("{SESSION}.pid")), "1\nstale").unwrap();
    let files = WatcherFiles::acquire(dir.path(), SESSION, NOW).unwrap();

    let pid = std::process::id();
    let content = fs::read_to_string(files.pid_path()).unwrap();
    let (first, token) = content.split_once('\n').expect("two lines");
    assert_eq!(first, pid.to_string());
    assert!(!token.ends_with('\n'), "no trailing newline: {content:?}");

    // `lx:<boot id as in the kernel file>:<decimal starttime>`.
    let parts: Vec<&str> = token.split(':').collect();
    assert_eq!(parts.len(), 3, "{token}");
    assert_eq!(parts[0], "lx");
    assert_eq!(parts[1].len(), 36, "{token}");
    assert!(parts[2].bytes().all(|b| b.is_ascii_digit()), "{token}");
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(parts[1], boot.trim());

    // The same value the kcap CLI derives: field 22 counted after the last `)`.
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let starttime = after_comm.split(' ').nth(19).unwrap();
    assert_eq!(token, format!("lx:{}:{starttime}", boot.trim()));
    assert_eq!(process_start_token(pid).as_deref(), Some(token));
}

#[test]
fn a_missing_process_has_no_start_token() {
    // Above any real pid_max.
    assert_eq!(process_start_token(i32::MAX as u32), None);
}

#[test]
fn watcher_files_are_private_and_hold_rfc3339_times() {
    let dir = tempfile::tempdir().unwrap();
    let watchers = dir.path().join("a/watchers");
    let files = WatcherFiles::acquire(&watchers, SESSION, NOW).unwrap();

    assert_eq!(mode(&watchers), 0o700);
    assert_eq!(mode(&dir.path().join("a")), 0o700);
    for ext in ["lock", "pid", "started", "heartbeat"] {
        let path = watchers.join(format!("{SESSION}.{ext}"));
        assert_eq!(mode(&path), 0o600, "{ext}");
    }
    let started = fs::read_to_string(watchers.join(format!("{SESSION}.started"))).unwrap();
    assert_eq!(started, "2026-07-28T19:02:11.000Z");
    assert_eq!(fs::read_to_string(files.heartbeat_path()).unwrap(), started);

    files.beat(NOW.plus(Duration::from_secs(2))).unwrap();
    assert_eq!(
        fs::read_to_string(files.heartbeat_path()).unwrap(),
        "2026-07-28T19:02:13.000Z"
    );
}

#[test]
fn release_removes_our_files_but_keeps_a_successors() {
    let dir = tempfile::tempdir().unwrap();
    let files = WatcherFiles::acquire(dir.path(), SESSION, NOW).unwrap();
    files.release();
    // The lock file goes too (R5): it was ours, and still locked when unlinked.
    assert_eq!(file_names(dir.path()), Vec::<String>::new());

    // The spawner already wrote a successor's pid and start time: those stay.
    let files = WatcherFiles::acquire(dir.path(), SESSION, NOW).unwrap();
    fs::write(files.pid_path(), "4194303\nlx:x:1").unwrap();
    files.release();
    assert_eq!(
        fs::read_to_string(dir.path().join(format!("{SESSION}.pid"))).unwrap(),
        "4194303\nlx:x:1"
    );
    assert!(dir.path().join(format!("{SESSION}.started")).exists());
}

#[test]
fn a_lock_held_on_a_file_no_longer_at_the_path_excludes_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let first = WatcherFiles::acquire(dir.path(), SESSION, NOW).unwrap();
    let lock = first.lock_path().to_path_buf();
    // The first holder's file is unlinked under it (as its own release does on the way out):
    // the next watcher locks a fresh file at the path and checks that the path names it.
    fs::remove_file(&lock).unwrap();
    let second = WatcherFiles::acquire(dir.path(), SESSION, NOW).unwrap();
    assert!(lock.exists());
    // And the old holder's release does not remove the successor's lock file.
    first.release();
    assert!(lock.exists(), "the successor's lock file stays");
    let third = WatcherFiles::acquire(dir.path(), SESSION, NOW);
    assert!(matches!(third, Err(AcquireError::Held { .. })), "{third:?}");
    second.release();
}

#[test]
fn a_symbolic_link_at_a_watcher_file_is_refused_and_its_target_kept() {
    for ext in [
        "lock",
        "pid",
        "started",
        "heartbeat",
        "heartbeat-0",
        "heartbeat-1",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        fs::write(&target, "precious").unwrap();
        let watchers = dir.path().join("w");
        fs::create_dir(&watchers).unwrap();
        let at = watchers.join(format!("{SESSION}.{ext}"));
        std::os::unix::fs::symlink(&target, &at).unwrap();
        let err = WatcherFiles::acquire(&watchers, SESSION, NOW).unwrap_err();
        assert!(matches!(err, AcquireError::Refused(_)), "{ext}: {err:?}");
        assert!(err.to_string().contains(&at.display().to_string()), "{err}");
        assert_eq!(fs::read_to_string(&target).unwrap(), "precious", "{ext}");
    }
}

#[test]
fn spools_and_atomic_writes_refuse_a_symbolic_link_and_write_nothing_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let target = dir.path().join("target");
    fs::write(&target, "precious").unwrap();
    let paths = [
        transcript_spool_path(&config, SESSION),
        hook_spool_path(&config, SESSION),
    ];
    for p in &paths {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&target, p).unwrap();
    }
    let err = append_transcript(&config, &batch(None, &[0]), NOW).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    let err = append_hook(&config, SESSION, "subagent-stop", "{}").unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(spool::claim(&paths[0], std::process::id()).is_err());
    let atomic = dir.path().join("atomic");
    std::os::unix::fs::symlink(&target, &atomic).unwrap();
    let err = write_atomic(&atomic, b"x").unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(fs::read_to_string(&target).unwrap(), "precious");
    for p in paths.iter().chain([&atomic]) {
        assert!(fs::symlink_metadata(p).unwrap().file_type().is_symlink());
    }
}

#[test]
fn write_atomic_replaces_whole_and_leaves_no_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state");
    for i in 0..20 {
        write_atomic(&path, format!("value {i}").as_bytes()).unwrap();
    }
    assert_eq!(fs::read_to_string(&path).unwrap(), "value 19");
    assert_eq!(mode(&path), 0o600);
    assert_eq!(file_names(dir.path()), vec!["state".to_owned()]);

    let err = write_atomic(&dir.path().join("missing/state"), b"x").unwrap_err();
    assert!(err.to_string().starts_with("failed to write"), "{err}");
    assert_eq!(file_names(dir.path()), vec!["state".to_owned()]);
}

#[test]
fn existing_directories_keep_their_mode() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o755)).unwrap();
    ensure_private_dir(&shared.join("mine")).unwrap();
    assert_eq!(mode(&shared), 0o755);
    assert_eq!(mode(&shared.join("mine")), 0o700);
}

// ---------------------------------------------------------------- heartbeat thread

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn heartbeat_thread_keeps_beating_until_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.heartbeat");
    fs::write(&path, "1970-01-01T00:00:00.000Z").unwrap();

    let heartbeat = Heartbeat::spawn(path.clone(), Duration::from_millis(20));
    let read = || Ts::parse_rfc3339(&fs::read_to_string(&path).unwrap_or_default());
    wait_until("the first beat", || read().is_some_and(|t| t > Ts(0)));
    let first = read().unwrap();
    assert!(
        Ts::now().since(first).abs() < 60_000,
        "wall-clock time: {first}"
    );
    wait_until("a later beat", || read().is_some_and(|t| t > first));
    assert_eq!(mode(&path), 0o600);

    drop(heartbeat);
    fs::remove_file(&path).unwrap();
    for slot in kcap_watch::files::heartbeat_slots(&path) {
        let _ = fs::remove_file(slot);
    }
    // The thread is joined on drop: nothing writes the file any more.
    assert!(!path.exists());
    assert_eq!(file_names(dir.path()), Vec::<String>::new());
}

#[test]
fn heartbeats_take_turns_between_two_inodes_instead_of_a_new_one_each_beat() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.heartbeat");
    let heartbeat = Heartbeat::spawn(path.clone(), Duration::from_millis(10));
    let mut inodes = std::collections::BTreeSet::new();
    let start = Instant::now();
    while inodes.len() < 3 && start.elapsed() < Duration::from_secs(1) {
        if let Ok(m) = fs::metadata(&path) {
            inodes.insert(m.ino());
            let text = fs::read_to_string(&path).unwrap_or_default();
            // Readers only ever see a whole timestamp.
            assert!(
                text.is_empty() || Ts::parse_rfc3339(&text).is_some(),
                "{text:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    drop(heartbeat);
    assert_eq!(
        inodes.len(),
        2,
        "the heartbeat alternates between two files"
    );
    // Linux swaps the one slot with the heartbeat; elsewhere two slots take turns.
    let [slot0, slot1, _] = kcap_watch::files::heartbeat_slots(&path);
    assert_eq!(mode(&slot0), 0o600);
    assert_eq!(slot1.exists(), !cfg!(target_os = "linux"));
    if slot1.exists() {
        assert_eq!(mode(&slot1), 0o600);
    }
}

#[test]
fn heartbeat_stops_at_once_even_with_a_long_interval() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.heartbeat");
    let heartbeat = Heartbeat::spawn(path.clone(), Duration::from_secs(3600));
    wait_until("the first beat", || path.exists());
    let started = Instant::now();
    heartbeat.stop();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stop waited for the interval"
    );
}

// ---------------------------------------------------------------- logs

#[test]
fn log_files_are_per_stream_and_private() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_file_path(dir.path(), SESSION, Some(CHILD));
    assert_eq!(
        path,
        dir.path()
            .join("logs")
            .join(format!("{SESSION}-{CHILD}.log"))
    );
    assert_eq!(
        log_file_path(dir.path(), SESSION, None),
        dir.path().join("logs").join(format!("{SESSION}.log"))
    );
    use std::io::Write;
    open_log_file(&path).unwrap().write_all(b"one\n").unwrap();
    open_log_file(&path).unwrap().write_all(b"two\n").unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), "one\ntwo\n");
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("logs")), 0o700);
}

// ---------------------------------------------------------------- transcript spool

#[test]
fn spooled_batches_give_the_offline_resume_line_per_session_and_agent() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path();
    assert_eq!(highest_spooled_line(config, SESSION, None).unwrap(), None);

    for b in [
        batch(None, &[0, 1, 3]),
        batch(Some(CHILD), &[10, 11, 12]),
        batch(None, &[4, 5]),
        batch(Some(CHILD), &[13]),
    ] {
        let outcome = append_transcript(config, &b, NOW).unwrap();
        assert!(
            matches!(outcome, SpoolOutcome::Written { .. }),
            "{outcome:?}"
        );
    }
    assert_eq!(
        highest_spooled_line(config, SESSION, None).unwrap(),
        Some(5)
    );
    assert_eq!(
        highest_spooled_line(config, SESSION, Some(CHILD)).unwrap(),
        Some(13)
    );
    assert_eq!(
        highest_spooled_line(config, SESSION, Some("other")).unwrap(),
        None
    );

    // A record naming another session (written by hand) does not count, and a torn record
    // is skipped, not fatal.
    let path = transcript_spool_path(config, SESSION);
    let mut foreign = batch(None, &[99]);
    foreign.session_id = "0199a2b4c0de7000a0000000000000ff".to_owned();
    let mut text = fs::read_to_string(&path).unwrap();
    text.push_str(&serde_json::to_string(&foreign).unwrap());
    text.push_str("\n{\"session_id\":\"0199a2b4\n\n");
    fs::write(&path, text).unwrap();
    let scan = scan_spooled_lines(config, SESSION, None).unwrap();
    assert_eq!(scan.highest, Some(5));
    assert_eq!(scan.unparseable, 1);

    // Lines a replay is delivering right now still count as spooled.
    let draining = claim(&path, 4242).unwrap().unwrap();
    append_transcript(config, &batch(None, &[6]), NOW).unwrap();
    assert_eq!(
        highest_spooled_line(config, SESSION, None).unwrap(),
        Some(6)
    );
    assert_eq!(
        highest_spooled_line(config, SESSION, Some(CHILD)).unwrap(),
        Some(13)
    );
    drop(draining);

    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&config.join("transcript-spool")), 0o700);
}

#[test]
fn a_spool_record_is_a_transcript_request_body_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(Some(CHILD), &[7]);
    append_transcript(dir.path(), &b, NOW).unwrap();
    let text = fs::read_to_string(transcript_spool_path(dir.path(), SESSION)).unwrap();
    assert_eq!(
        text,
        format!(
            "{{\"session_id\":\"{SESSION}\",\"agent_id\":\"{CHILD}\",\"vendor\":\"codex\",\"lines\":[\"{{\\\"line\\\":7}}\"],\"line_numbers\":[7]}}\n"
        )
    );
    assert_eq!(
        transcript_spool_path(dir.path(), SESSION),
        dir.path()
            .join("transcript-spool")
            .join(format!("{SESSION}.transcript.jsonl"))
    );
}

#[test]
fn concurrent_appends_never_split_or_interleave_records() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().to_owned();
    const THREADS: u64 = 8;
    const RECORDS: u64 = 200;

    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let config = config.clone();
            std::thread::spawn(move || {
                for i in 0..RECORDS {
                    // Mostly small records with a 100 KB one now and then: well over the
                    // pipe-atomic size, under the 8 MiB cap in total.
                    let size = if i % 50 == 7 {
                        100_000
                    } else {
                        ((t * 7919 + i * 104_729) % 2000) as usize
                    };
                    let text = format!("{t}:{i}:{}", "x".repeat(size));
                    let b = TranscriptBatch {
                        session_id: SESSION.to_owned(),
                        agent_id: Some(format!("agent-{t}")),
                        vendor: "codex".to_owned(),
                        lines: vec![text],
                        line_numbers: vec![i],
                    };
                    let outcome = append_transcript(&config, &b, NOW).unwrap();
                    assert!(
                        matches!(outcome, SpoolOutcome::Written { .. }),
                        "{outcome:?}"
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }

    let text = fs::read_to_string(transcript_spool_path(&config, SESSION)).unwrap();
    assert!(text.ends_with('\n'));
    let mut seen = HashSet::new();
    for line in text.lines() {
        let b: TranscriptBatch = serde_json::from_str(line).expect("a whole record");
        let (prefix, rest) = b.lines[0].split_once(":x").unwrap_or((&b.lines[0], ""));
        assert!(rest.bytes().all(|c| c == b'x'));
        assert!(seen.insert(prefix.to_owned()), "duplicate {prefix}");
    }
    assert_eq!(seen.len() as u64, THREADS * RECORDS);
    for t in 0..THREADS {
        let agent = format!("agent-{t}");
        assert_eq!(
            highest_spooled_line(&config, SESSION, Some(&agent)).unwrap(),
            Some(RECORDS - 1)
        );
    }
}

#[test]
fn a_batch_that_would_cross_8_mib_is_not_written_and_flags_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path();
    // One big valid record leaving less room than the next batch needs.
    let mut big = batch(None, &[0]);
    big.lines[0] = "y".repeat(TRANSCRIPT_SPOOL_CAP as usize - 300);
    append_transcript(config, &big, NOW).unwrap();
    let path = transcript_spool_path(config, SESSION);
    let size = fs::metadata(&path).unwrap().len();
    assert!(size <= TRANSCRIPT_SPOOL_CAP);

    let mut next = batch(None, &[1, 2]);
    next.lines[0] = "z".repeat(400);
    let outcome = append_transcript(config, &next, NOW).unwrap();
    assert_eq!(
        outcome,
        SpoolOutcome::OverCap {
            path: path.clone(),
            first_line: Some(1)
        }
    );
    assert_eq!(fs::metadata(&path).unwrap().len(), size, "nothing written");

    let marker = fs::read_to_string(needs_import_path(config, SESSION)).unwrap();
    assert_eq!(marker.lines().count(), 1, "{marker:?}");
    let (time, reason) = marker.trim_end().split_once(' ').unwrap();
    assert_eq!(Ts::parse_rfc3339(time), Some(NOW));
    assert!(reason.contains("lines from 1 on were not kept"), "{reason}");
    assert_eq!(mode(&needs_import_path(config, SESSION)), 0o600);

    // A later refusal keeps naming the first gap.
    let mut later = batch(None, &[4]);
    later.lines[0] = "w".repeat(1000);
    let outcome = append_transcript(config, &later, NOW.plus(Duration::from_secs(9))).unwrap();
    assert!(matches!(
        outcome,
        SpoolOutcome::OverCap {
            first_line: Some(4),
            ..
        }
    ));
    assert_eq!(
        fs::read_to_string(needs_import_path(config, SESSION)).unwrap(),
        marker
    );
    assert!(fs::metadata(&path).unwrap().len() <= TRANSCRIPT_SPOOL_CAP);
}

#[test]
fn ids_that_could_leave_the_spool_directory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = batch(None, &[0]);
    b.session_id = "../escape".to_owned();
    let err = append_transcript(dir.path(), &b, NOW).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("failed to append to transcript spool"),
        "{err}"
    );
    assert!(append_hook(dir.path(), "a/b", "subagent-stop", "{}").is_err());
    assert!(highest_spooled_line(dir.path(), "..", None).is_err());
    assert_eq!(file_names(dir.path()), Vec::<String>::new());
}

// ---------------------------------------------------------------- hook spool

#[test]
fn a_hook_record_carries_the_route_and_the_body_as_a_json_string() {
    let dir = tempfile::tempdir().unwrap();
    let body = r#"{"hook_event_name":"subagent_stop","last_assistant_message":"done\n"}"#;
    let outcome = append_hook(dir.path(), SESSION, "subagent-stop", body).unwrap();
    let path = hook_spool_path(dir.path(), SESSION);
    assert_eq!(
        path,
        dir.path().join("spool").join(format!("{SESSION}.jsonl"))
    );
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        "{\"route\":\"subagent-stop\",\"body\":\"{\\\"hook_event_name\\\":\\\"subagent_stop\\\",\\\"last_assistant_message\\\":\\\"done\\\\n\\\"}\",\"writer\":\"kcap-watch\"}\n"
    );
    assert_eq!(
        outcome,
        SpoolOutcome::Written {
            path: path.clone(),
            bytes: text.len() as u64
        }
    );
    let record: HookRecord = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(record.body, body);
    assert!(record.is_ours(), "marked as this tool's, for replay");
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("spool")), 0o700);
}

#[test]
fn the_hook_spool_stays_within_1_mib() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "{{\"pad\":\"{}\"}}",
        "p".repeat(HOOK_SPOOL_CAP as usize / 2)
    );
    assert!(matches!(
        append_hook(dir.path(), SESSION, "subagent-start", &body).unwrap(),
        SpoolOutcome::Written { .. }
    ));
    let outcome = append_hook(dir.path(), SESSION, "subagent-stop", &body).unwrap();
    assert_eq!(
        outcome,
        SpoolOutcome::OverCap {
            path: hook_spool_path(dir.path(), SESSION),
            first_line: None
        }
    );
    assert!(
        fs::metadata(hook_spool_path(dir.path(), SESSION))
            .unwrap()
            .len()
            <= HOOK_SPOOL_CAP
    );
    assert!(!needs_import_path(dir.path(), SESSION).exists());
}

// ---------------------------------------------------------------- draining

#[test]
fn claim_finish_puts_back_only_unacknowledged_records_ahead_of_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path();
    let live = hook_spool_path(config, SESSION);
    assert!(
        claim(&live, 4242).unwrap().is_none(),
        "nothing to claim yet"
    );

    for route in ["subagent-start", "subagent-stop", "session-end/codex"] {
        append_hook(config, SESSION, route, "{}").unwrap();
    }
    let draining = claim(&live, 4242).unwrap().unwrap();
    assert!(!live.exists());
    let name = draining.path().file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with(&format!("{SESSION}.4242-")) && name.ends_with(".draining"),
        "{name}"
    );

    let records = draining.records::<HookRecord>().unwrap();
    let routes: Vec<&str> = records
        .iter()
        .map(|r| r.record.as_ref().unwrap().route.as_str())
        .collect();
    assert_eq!(
        routes,
        ["subagent-start", "subagent-stop", "session-end/codex"]
    );

    // A watcher spools a new request while the replay is delivering.
    append_hook(config, SESSION, "subagent-stop", "{\"late\":true}").unwrap();

    // The first was acknowledged; the other two were not.
    let keep: Vec<String> = records[1..].iter().map(|r| r.raw.clone()).collect();
    draining.finish(&keep).unwrap();

    let text = fs::read_to_string(&live).unwrap();
    let routes: Vec<HookRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        routes,
        vec![
            HookRecord {
                route: "subagent-stop".into(),
                body: "{}".into(),
                writer: Some("kcap-watch".into())
            },
            HookRecord {
                route: "session-end/codex".into(),
                body: "{}".into(),
                writer: Some("kcap-watch".into())
            },
            HookRecord {
                route: "subagent-stop".into(),
                body: "{\"late\":true}".into(),
                writer: Some("kcap-watch".into())
            },
        ]
    );
    assert_eq!(
        file_names(&config.join("spool")),
        vec![format!("{SESSION}.jsonl")]
    );
    assert_eq!(mode(&live), 0o600);
}

#[test]
fn finishing_with_everything_delivered_leaves_only_new_appends() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path();
    append_transcript(config, &batch(None, &[0, 1]), NOW).unwrap();
    let live = transcript_spool_path(config, SESSION);
    let draining = claim(&live, 4242).unwrap().unwrap();
    let name = draining
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(name.ends_with(".transcript.draining"), "{name}");
    let records = draining.records::<TranscriptBatch>().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].record.as_ref().unwrap(), &batch(None, &[0, 1]));

    append_transcript(config, &batch(None, &[2]), NOW).unwrap();
    draining.finish(&[]).unwrap();
    let text = fs::read_to_string(&live).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert_eq!(
        highest_spooled_line(config, SESSION, None).unwrap(),
        Some(2)
    );
    assert_eq!(
        file_names(&config.join("transcript-spool")),
        vec![format!("{SESSION}.transcript.jsonl")]
    );
}

#[test]
fn unparseable_records_keep_their_raw_line() {
    let dir = tempfile::tempdir().unwrap();
    let live = hook_spool_path(dir.path(), SESSION);
    append_hook(dir.path(), SESSION, "subagent-stop", "{}").unwrap();
    let mut text = fs::read_to_string(&live).unwrap();
    text.push_str("not json\n");
    fs::write(&live, text).unwrap();

    let draining = claim(&live, 4242).unwrap().unwrap();
    let records = draining.records::<HookRecord>().unwrap();
    assert_eq!(records.len(), 2);
    assert!(records[0].record.is_ok());
    assert_eq!(records[1].raw, "not json");
    assert!(records[1].record.is_err());
    draining.finish(&[records[1].raw.clone()]).unwrap();
    assert_eq!(fs::read_to_string(&live).unwrap(), "not json\n");
}

#[test]
fn draining_files_of_a_dead_replay_are_claimed_again() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path();
    let live = transcript_spool_path(config, SESSION);

    // A replay process that has exited: its pid is free.
    let dead = support::procs::exited_pid();

    append_transcript(config, &batch(None, &[0]), NOW).unwrap();
    let crashed = claim(&live, dead).unwrap().unwrap();
    let crashed_path = crashed.path().to_owned();
    drop(crashed); // never finished
    append_transcript(config, &batch(None, &[1]), NOW).unwrap();
    let busy = claim(&live, std::process::id()).unwrap().unwrap();

    let orphans = claim_orphans(&live, 4242).unwrap();
    assert_eq!(orphans.len(), 1, "only the dead replay's file");
    assert!(!crashed_path.exists());
    let records = orphans[0].records::<TranscriptBatch>().unwrap();
    assert_eq!(records[0].record.as_ref().unwrap().line_numbers, vec![0]);
    assert!(busy.path().exists(), "a live process's file is left alone");
    assert!(claim_orphans(&live, 4242).unwrap().is_empty());

    for d in orphans {
        d.finish(&[]).unwrap();
    }
    busy.finish(&[]).unwrap();
    assert!(spool::sessions_with_backlog(config).unwrap().is_empty());
}

#[test]
fn sessions_with_backlog_lists_both_spools() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path();
    append_transcript(config, &batch(None, &[0]), NOW).unwrap();
    append_hook(config, "ses_61aB", "subagent-stop", "{}").unwrap();
    assert!(config.join("spool").join("ses_61a~b.jsonl").exists());
    assert_eq!(
        spool::sessions_with_backlog(config).unwrap(),
        vec![SESSION.to_owned(), "ses_61aB".to_owned()]
    );
}

#[test]
fn appends_racing_repeated_replays_are_neither_lost_nor_reordered() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().to_owned();
    const WRITERS: u64 = 4;
    const RECORDS: u64 = 300;
    let live = hook_spool_path(&config, SESSION);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));

    // A replay that delivers nothing: every claimed record must come back, in order.
    let replay = {
        let live = live.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut rounds = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) || live.exists() && rounds < 3 {
                if let Some(d) = claim(&live, 4242).unwrap() {
                    let keep: Vec<String> = d
                        .records::<HookRecord>()
                        .unwrap()
                        .into_iter()
                        .map(|r| r.raw)
                        .collect();
                    d.finish(&keep).unwrap();
                    rounds += 1;
                }
            }
            rounds
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let config = config.clone();
            std::thread::spawn(move || {
                for i in 0..RECORDS {
                    append_hook(&config, SESSION, &format!("w{w}"), &i.to_string()).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let rounds = replay.join().unwrap();
    assert!(rounds > 0, "the replay never claimed anything");

    let text = fs::read_to_string(&live).unwrap();
    let mut next = vec![0u64; WRITERS as usize];
    for line in text.lines() {
        let r: HookRecord = serde_json::from_str(line).expect("a whole record");
        let w: usize = r.route[1..].parse().unwrap();
        assert_eq!(
            r.body,
            next[w].to_string(),
            "writer {w}'s records lost or reordered"
        );
        next[w] += 1;
    }
    assert_eq!(next, vec![RECORDS; WRITERS as usize]);
    assert_eq!(
        file_names(&config.join("spool")),
        vec![format!("{SESSION}.jsonl")]
    );
}
