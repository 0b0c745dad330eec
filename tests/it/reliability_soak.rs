//! Crash-and-restart soak: a writer appends a realistic child rollout the way Codex does
//! (partial writes split across flushes, blank lines, lines over the 64 KiB redaction limit)
//! while the real binary ships it to the fake kcap server and is killed with SIGKILL at random
//! moments and restarted, at least 20 times. At the end the server must hold every complete
//! non-blank line exactly once, under its physical number, in its redacted form; the child's
//! stop must have been posted; and no two watchers may ever have run for the same key at once.
//!
//! The run is seeded: the seed is printed (shown when the test fails) and can be replayed with
//! `KCAP_SOAK_SEED=<seed> cargo test --test it reliability_soak::`.
// Every test here ends the watcher with SIGTERM (or reads /proc): unix only. Windows is
// linted, not run (see the README's Platforms section).
#![cfg(unix)]

use crate::support;

use support::harness;

use std::time::{Duration, Instant};

use harness::{Proc, Sandbox, diff_lines, expected_lines, wait_until};
use proptest::prelude::RngExt;
use proptest::test_runner::{RngAlgorithm, TestRng};
use support::FakeKcap;

/// At least this many SIGKILLs per run.
const MIN_KILLS: usize = 24;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/codex/child-two-turns.jsonl"
);
/// The fixture's ids, as the watcher sends them.
const FIXTURE_SESSION: &str = "019fa9812dca7a319c553b1f0e6d2a01";
const FIXTURE_AGENT: &str = "019fa9816ea27b028d115c2e9f7a4b02";

fn seed() -> u64 {
    match std::env::var("KCAP_SOAK_SEED") {
        Ok(s) => s.trim().parse().expect("KCAP_SOAK_SEED must be a u64"),
        Err(_) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            t.as_nanos() as u64 ^ u64::from(std::process::id())
        }
    }
}

fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(seed.rotate_left(i as u32 * 16) ^ i as u64).to_le_bytes());
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// The fixture's two turns, then `turns` more: tool output of random size (some of it over
/// the 64 KiB limit), secrets for the redactor, blank and whitespace-only lines.
fn rollout(rng: &mut TestRng, turns: usize) -> (Vec<u8>, String) {
    let mut out = std::fs::read(FIXTURE).expect("read the fixture");
    assert!(out.ends_with(b"\n"));
    let mut last_message = String::new();
    for n in 0..turns {
        let t = format!("soak-turn-{n}");
        let c = format!("call_soak_{n}");
        let size = match rng.random_range(0..10) {
            0 => rng.random_range(66_000..140_000),
            1..=3 => rng.random_range(2_000..30_000),
            _ => rng.random_range(10..800),
        };
        let body: String = (0..size)
            .map(|i| char::from(b'a' + ((i * 7 + n) % 26) as u8))
            .collect();
        let secret = format!("ghp_{}", "Z9y8X7w6V5u4T3s2R1q0".repeat(2));
        last_message = format!("turn {n} finished; token was {secret}");
        let mut lines = vec![
            harness::task_started(&t),
            harness::call(&c, "exec_command"),
            harness::output(&c, &format!("GITHUB_TOKEN={secret}\n{body}")),
            harness::message(&format!("turn {n}: ran the tests")),
            harness::event(
                r#"{"type":"token_count","info":{"total_token_usage":{"total_tokens":12846}},"rate_limits":{"primary":{"used_percent":12.0,"window_minutes":300,"resets_at":1785265331}}}"#,
            ),
            harness::task_complete(&t, &last_message),
        ];
        // Blank and whitespace-only lines count for numbering but are never shipped.
        for _ in 0..rng.random_range(0..3) {
            let at = rng.random_range(1..lines.len());
            let blank = ["", "   ", "\t"][rng.random_range(0..3)];
            lines.insert(at, blank.to_string());
        }
        for l in lines {
            out.extend_from_slice(l.as_bytes());
            out.push(b'\n');
        }
    }
    (out, last_message)
}

/// Write sizes and the pauses after them: mostly small flushes that split lines anywhere.
fn write_plan(rng: &mut TestRng, total: usize, start: usize) -> Vec<(usize, Duration)> {
    let mut plan = Vec::new();
    let mut at = start;
    while at < total {
        let n = match rng.random_range(0..10) {
            0 => rng.random_range(20_000..70_000),
            _ => rng.random_range(1..6_000),
        }
        .min(total - at);
        plan.push((n, Duration::from_millis(rng.random_range(5..90))));
        at += n;
    }
    plan
}

/// Fails when two processes that hold the watcher lock are alive at the same time. Processes
/// already sent SIGKILL are left out: they may be in the middle of dying, and the kernel
/// releases their lock before they can be reaped.
fn assert_one_lock_holder(procs: &mut [Proc], seed: u64) {
    // Logs first, liveness second: a process seen holding the lock (before t1) and alive
    // after (at t2) held it over [t1, t2], and all those intervals share max(t1)..min(t2).
    let holders: Vec<usize> = (0..procs.len())
        .filter(|&i| !procs[i].killed && procs[i].holds_lock())
        .collect();
    let alive: Vec<usize> = holders.into_iter().filter(|&i| procs[i].alive()).collect();
    assert!(
        alive.len() <= 1,
        "seed {seed}: {} watchers hold the lock for the same key at once (pids {:?})",
        alive.len(),
        alive.iter().map(|&i| procs[i].pid()).collect::<Vec<_>>()
    );
}

#[test]
fn sigkill_soak_server_holds_every_line_once_in_order_and_two_watchers_never_overlap() {
    // Not one of the CPU-heavy tests (`support::serial`): dozens of watchers spawned and
    // killed take about 2 s of CPU in a run of 8 s that mostly waits for their lives to end.
    let seed = seed();
    eprintln!("soak seed: {seed} (replay with KCAP_SOAK_SEED={seed})");
    let mut rng = rng(seed);
    let sandbox = Sandbox::new();
    let server = FakeKcap::start();
    let (content, last_message) = rollout(&mut rng, 60);
    let expected = expected_lines(&content);

    // The header goes down whole first (ids come from it); everything after it in random
    // flushes from a writer thread.
    let header_end = content.iter().position(|&b| b == b'\n').unwrap() + 1;
    sandbox.append(&content[..header_end]);
    let plan = write_plan(&mut rng, content.len(), header_end);
    let writer = {
        let path = sandbox.rollout.clone();
        let content = content.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            let mut at = header_end;
            for (n, pause) in plan {
                f.write_all(&content[at..at + n]).unwrap();
                at += n;
                std::thread::sleep(pause);
            }
        })
    };

    let started = Instant::now();
    let mut procs: Vec<Proc> = Vec::new();
    let mut kills = 0;
    let mut lock_refusals = 0;
    let mut overlaps = 0;
    let mut kills_while_writing = 0;
    let spawn = |sandbox: &Sandbox| sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &[]));
    while kills < MIN_KILLS || !writer.is_finished() {
        assert!(
            started.elapsed() < Duration::from_secs(150),
            "seed {seed}: the soak did not finish in time ({kills} kills)"
        );
        procs.push(spawn(&sandbox));
        let mut cur = procs.len() - 1;
        let life = Duration::from_millis(rng.random_range(20..600));
        let until = Instant::now() + life;
        while Instant::now() < until {
            assert_one_lock_holder(&mut procs, seed);
            if let Some(status) = procs[cur].try_status() {
                // Only a refused lock ends a watcher on its own here: its predecessor, killed
                // a moment ago, had not released it yet. Try again.
                assert_eq!(
                    status.code(),
                    Some(75),
                    "seed {seed}: watcher ended on its own with {status:?}; stderr:\n{}",
                    procs[cur].stderr()
                );
                lock_refusals += 1;
                procs.push(spawn(&sandbox));
                cur = procs.len() - 1;
                continue;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if rng.random_range(0..4) == 0 && procs[cur].holds_lock() {
            // A second watcher for the same key while the first surely holds the lock: it
            // must refuse to run (exit 75) and say why.
            overlaps += 1;
            let mut second = spawn(&sandbox);
            let code = second.exit_code(Duration::from_secs(10), "second watcher");
            assert_eq!(
                code,
                75,
                "seed {seed}: a second watcher ran beside a live one; stderr:\n{}",
                second.stderr()
            );
            assert!(
                second
                    .stderr()
                    .contains("another watcher is already running"),
                "seed {seed}: no clear message:\n{}",
                second.stderr()
            );
            assert!(procs[cur].alive(), "seed {seed}: the first watcher died");
            procs.push(second);
        }
        // SIGKILL, and the successor starts at once: it may find the lock still held.
        procs[cur].kill9();
        kills += 1;
        if !writer.is_finished() {
            kills_while_writing += 1;
        }
    }
    let held_after_kills = server.lines(FIXTURE_SESSION, FIXTURE_AGENT).len();
    writer.join().expect("writer thread");
    for p in procs.iter_mut().filter(|p| p.killed) {
        assert!(
            p.wait_timeout(Duration::from_secs(5)).is_some(),
            "seed {seed}: a SIGKILLed watcher did not die"
        );
    }

    // The last watcher runs to the end of the file.
    let mut last = spawn(&sandbox);
    let done = wait_until(Duration::from_secs(60), || {
        last.has_event("watermark")
            && server.lines(FIXTURE_SESSION, FIXTURE_AGENT) == expected
            && stop_posted_with(&server, &last_message)
    });
    let got = server.lines(FIXTURE_SESSION, FIXTURE_AGENT);
    assert!(
        done,
        "seed {seed}: after {kills} kills the server does not hold the transcript, or no stop \
         for its last turn (stops: {:?})\n{}\nlast watcher stderr:\n{}",
        server.hooks("subagent-stop"),
        diff_lines(&got, &expected),
        last.stderr()
    );
    assert_eq!(last.terminate(Duration::from_secs(15)), 0, "seed {seed}");
    last.assert_no_panic();
    for p in &procs {
        p.assert_no_panic();
    }
    eprintln!(
        "soak seed {seed}: {} lines ({} bytes) delivered exactly once through {kills} SIGKILLs \
         ({kills_while_writing} while writing; {held_after_kills} lines held when the kills \
         ended), {lock_refusals} lock refusals after a kill, {overlaps} deliberate overlaps, \
         {:.1?}",
        expected.len(),
        content.len(),
        started.elapsed()
    );
}

/// A stop for the fixture's child whose message is the last turn's (redacted) final answer.
fn stop_posted_with(server: &FakeKcap, last_message: &str) -> bool {
    let want = kcap_watch::ship::redact::global()
        .redact_text(last_message)
        .into_owned();
    server.hooks("subagent-stop").iter().any(|h| {
        h["session_id"] == FIXTURE_SESSION
            && h["agent_id"] == FIXTURE_AGENT
            && h["last_assistant_message"] == want.as_str()
    })
}

/// Offline, each line goes to the transcript spool as soon as it is read, and a restarted
/// watcher resumes one past the highest spooled line. SIGKILL at random moments (also in the
/// middle of a spool write), then one `replay`: the server must hold every line, once.
#[test]
fn offline_sigkill_soak_then_replay_delivers_every_line() {
    // Not one of the CPU-heavy tests (`support::serial`): dozens of watchers spawned and
    // killed take about 2 s of CPU in a run of 8 s that mostly waits for their lives to end.
    let seed = seed() ^ 0x5eed;
    eprintln!(
        "offline soak seed: {seed} (replay with KCAP_SOAK_SEED={})",
        seed ^ 0x5eed
    );
    let mut rng = rng(seed);
    let sandbox = Sandbox::new();
    let (content, _) = rollout(&mut rng, 40);
    let expected = expected_lines(&content);
    let header_end = content.iter().position(|&b| b == b'\n').unwrap() + 1;
    sandbox.append(&content[..header_end]);
    let mut at = header_end;
    let started = Instant::now();
    let mut kills = 0;
    let mut procs: Vec<Proc> = Vec::new();
    while kills < MIN_KILLS || at < content.len() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "seed {seed}: the offline soak did not finish in time"
        );
        // A burst of writes (up to ~300 KB, so a seed spools large records), then a watcher
        // that lives a random moment.
        for _ in 0..rng.random_range(0..6) {
            let n = rng.random_range(1..60_000).min(content.len() - at);
            sandbox.append(&content[at..at + n]);
            at += n;
        }
        let mut p = sandbox.spawn(&mut sandbox.watch(None, &[]));
        let until = Instant::now() + Duration::from_millis(rng.random_range(20..400));
        while Instant::now() < until && p.alive() {
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(status) = p.try_status() {
            panic!(
                "seed {seed}: offline watcher ended on its own with {status:?}; stderr:\n{}",
                p.stderr()
            );
        }
        p.kill9();
        assert!(p.wait_timeout(Duration::from_secs(5)).is_some());
        kills += 1;
        procs.push(p);
    }
    // A last watcher spools what is left and ends gracefully.
    let mut last = sandbox.spawn(&mut sandbox.watch(None, &[]));
    assert!(
        wait_until(Duration::from_secs(30), || last.holds_lock()),
        "seed {seed}: the last watcher never started:\n{}",
        last.stderr()
    );
    assert_eq!(last.terminate(Duration::from_secs(15)), 0, "seed {seed}");

    let server = FakeKcap::start();
    let mut replay = sandbox.spawn(sandbox.cmd(Some(&server.url())).args([
        "replay",
        "--session-id",
        FIXTURE_SESSION,
    ]));
    assert_eq!(
        replay.exit_code(Duration::from_secs(60), "replay"),
        0,
        "seed {seed}: replay failed:\n{}",
        replay.stderr()
    );
    let got = server.lines(FIXTURE_SESSION, FIXTURE_AGENT);
    assert!(
        got == expected,
        "seed {seed}: after {kills} SIGKILLs and a replay the server does not hold the \
         transcript:\n{}\nreplay: {}\n{}",
        diff_lines(&got, &expected),
        replay.stdout(),
        replay.stderr()
    );
    for p in procs.iter().chain([&last, &replay]) {
        p.assert_no_panic();
    }
    let torn: usize = procs
        .iter()
        .chain([&last])
        .flat_map(|p| p.events_named("spool_records_unparseable"))
        .count();
    eprintln!(
        "offline soak seed {seed}: {} lines spooled through {kills} SIGKILLs and replayed \
         ({torn} start-ups met a torn spool record), {:.1?}",
        expected.len(),
        started.elapsed()
    );
}

/// A crash in the middle of a spool write leaves a record without its `\n` (SIGKILL can cut a
/// large `write(2)` to a regular file short). The next record appended must not be glued to
/// that fragment, or it becomes unreadable too and its lines are lost.
#[test]
fn a_spool_record_torn_by_a_crash_does_not_swallow_the_next_one() {
    let sandbox = Sandbox::new();
    let spool = sandbox
        .config
        .join("transcript-spool")
        .join(format!("{FIXTURE_SESSION}.transcript.jsonl"));
    std::fs::create_dir_all(spool.parent().unwrap()).unwrap();
    std::fs::write(
        &spool,
        format!(
            r#"{{"session_id":"{FIXTURE_SESSION}","agent_id":"{FIXTURE_AGENT}","vendor":"codex","lines":["{{\"type\":\"torn"#
        ),
    )
    .unwrap();
    let content = std::fs::read(FIXTURE).unwrap();
    std::fs::write(&sandbox.rollout, &content).unwrap();
    let mut once = sandbox.spawn(&mut sandbox.watch(None, &["--once"]));
    assert_eq!(once.exit_code(Duration::from_secs(30), "watch --once"), 0);

    let server = FakeKcap::start();
    let mut replay = sandbox.spawn(sandbox.cmd(Some(&server.url())).args([
        "replay",
        "--session-id",
        FIXTURE_SESSION,
    ]));
    assert_eq!(replay.exit_code(Duration::from_secs(60), "replay"), 0);
    let got = server.lines(FIXTURE_SESSION, FIXTURE_AGENT);
    let expected = expected_lines(&content);
    assert!(
        got == expected,
        "lines spooled after a torn record were lost:\n{}\nwatch: {}\nreplay: {}",
        diff_lines(&got, &expected),
        once.stderr(),
        replay.stderr()
    );
}
