//! Server faults, end to end: the real binary ships a child rollout that keeps growing to the
//! fake kcap server while the server is down, answers 5xx, asks to slow down, hangs, cuts
//! connections mid-answer, loses its last batches, or refuses the token. Each test ends with
//! every line delivered under its number, the child's stop posted, a graceful exit, and a
//! heartbeat file that was never older than 15 s (`revision-3.md` S5) while the watcher ran (sampled every 100 ms):
//! a spawner kills a watcher whose heartbeat is 20 s old.
//!
//! The watcher's own retry pacing (backoff, request deadlines, the pause after a 401) runs ten
//! times faster here through the test-only `KCAP_WATCH_RETRY_SECOND_MS=100`, so a fault lasts
//! as many retries as before in a tenth of the time; a server's `Retry-After` is still honoured
//! in full. Fault spans are sized in those scaled terms, and waits end on what the server saw.

// Every test here ends the watcher with SIGTERM (or reads /proc): unix only. Windows is
// linted, not run (see the README's Platforms section).
#![cfg(unix)]

use crate::support;

use support::harness;

use std::time::{Duration, Instant};

use harness::{
    AGENT_ND, Forwarder, HeartbeatSampler, Proc, SESSION_ND, Sandbox, child_key, diff_lines,
    expected_lines, stops_for_child, wait_until,
};
use support::{FakeKcap, Fault};

/// One second of the watcher's retry pacing lasts this many milliseconds in this suite.
const RETRY_SECOND_MS: &str = "100";

/// A child watcher shipping to `url`, with the header and a first turn on disk.
struct Run {
    sandbox: Sandbox,
    watcher: Proc,
    heartbeat: Option<HeartbeatSampler>,
    started: Instant,
    turns: usize,
}

impl Run {
    fn start(url: &str, env: &[(&str, &str)]) -> Run {
        let sandbox = Sandbox::new();
        let mut lines = vec![harness::child_meta()];
        lines.extend(harness::turn(0));
        sandbox.append_lines(&lines);
        let watcher = sandbox.spawn(
            sandbox
                .watch(Some(url), &[])
                .env("KCAP_WATCH_RETRY_SECOND_MS", RETRY_SECOND_MS)
                .envs(env.iter().copied()),
        );
        let heartbeat = Some(HeartbeatSampler::start(sandbox.heartbeat(&child_key())));
        Run {
            sandbox,
            watcher,
            heartbeat,
            started: Instant::now(),
            turns: 1,
        }
    }

    /// Appends a whole turn every `every` for `span` (the rollout keeps growing during a fault).
    fn keep_writing(&mut self, span: Duration, every: Duration) {
        let until = Instant::now() + span;
        while Instant::now() < until {
            self.sandbox.append_lines(&harness::turn(self.turns));
            self.turns += 1;
            std::thread::sleep(every);
            assert!(
                self.watcher.alive(),
                "the watcher died during the fault:\n{}",
                self.watcher.stderr()
            );
        }
    }

    /// Appends a whole turn every `every` until `done` holds (at most `timeout`): the rollout
    /// keeps growing until the fault has been seen through.
    fn keep_writing_until(
        &mut self,
        timeout: Duration,
        every: Duration,
        mut done: impl FnMut() -> bool,
    ) -> bool {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if done() {
                return true;
            }
            self.keep_writing(every, every);
        }
        done()
    }

    /// Waits until the server holds the whole rollout and the child's stop, then
    /// checks the heartbeat and ends the watcher with SIGTERM (exit 0).
    fn finish(&mut self, server: &FakeKcap, timeout: Duration) {
        let expected = expected_lines(&self.sandbox.rollout_bytes());
        // The stop latches after its first 2xx (later turns post none).
        let done = wait_until(timeout, || {
            server.lines(SESSION_ND, AGENT_ND) == expected
                && stops_for_child(&server.hooks("subagent-stop")) == 1
        });
        let got = server.lines(SESSION_ND, AGENT_ND);
        assert!(
            done,
            "not everything delivered within {timeout:?} (stops: {}):\n{}\nwatcher stderr:\n{}",
            stops_for_child(&server.hooks("subagent-stop")),
            diff_lines(&got, &expected),
            self.watcher.stderr()
        );
        let min_samples = (self.started.elapsed().as_millis() / 200) as usize;
        let (oldest, samples) = self.heartbeat.take().expect("one finish").finish();
        assert!(
            samples >= min_samples,
            "heartbeat seen {samples} times only"
        );
        assert!(
            oldest <= Duration::from_secs(15),
            "the heartbeat was {oldest:?} old at one point (limit 15 s)"
        );
        assert_eq!(
            self.watcher.terminate(Duration::from_secs(15)),
            0,
            "{}",
            self.watcher.stderr()
        );
        self.watcher.assert_no_panic();
    }
}

#[test]
fn server_down_at_start_for_a_long_stretch_then_up() {
    let port = harness::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut run = Run::start(&url, &[]);
    // Nothing listens: every watermark query is refused while the file keeps growing, long
    // enough at the scaled pace for the backoff to reach its ceiling (3 s here, 30 s real):
    // as long a stretch in retries as a minute of real pacing.
    run.keep_writing(Duration::from_secs(6), Duration::from_millis(250));
    assert!(
        run.watcher.has_event("ship_failed"),
        "no failure logged while the server was down:\n{}",
        run.watcher.stderr()
    );
    let server = FakeKcap::start();
    let _up = Forwarder::start(port, server.addr());
    run.keep_writing(Duration::from_secs(1), Duration::from_millis(250));
    run.finish(&server, Duration::from_secs(60));
}

#[test]
fn server_errors_5xx_on_every_route_then_recovers() {
    let server = FakeKcap::start();
    server.fail_always(None, Fault::Status(503));
    let mut run = Run::start(&server.url(), &[]);
    run.keep_writing(Duration::from_millis(1500), Duration::from_millis(200));
    server.clear_faults();
    // Then a run of 500s on the transcript alone, mid-stream.
    server.fail_next_on("transcript", 4, Fault::Status(500));
    server.fail_next_on("transcript", 1, Fault::Status(502));
    run.keep_writing(Duration::from_secs(1), Duration::from_millis(200));
    run.finish(&server, Duration::from_secs(60));
    assert!(server.requests().iter().any(|r| r.route == "transcript"));
    assert!(
        run.watcher.events_named("ship_failed").len() >= 2,
        "5xx answers were not logged as failures"
    );
}

#[test]
fn a_429_with_retry_after_is_honoured() {
    let server = FakeKcap::start();
    server.fail_next_on("transcript", 1, Fault::RetryAfter(3));
    let mut run = Run::start(&server.url(), &[]);
    // The time of each transcript request as it arrives.
    let mut arrivals = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while arrivals.len() < 2 && Instant::now() < deadline {
        let n = server.request_count("transcript");
        while arrivals.len() < n {
            arrivals.push(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(arrivals.len(), 2, "no retry after the 429");
    let gap = arrivals[1] - arrivals[0];
    assert!(
        gap >= Duration::from_millis(2900),
        "retried {gap:?} after a 429 asking for 3 s"
    );
    run.finish(&server, Duration::from_secs(30));
}

#[test]
fn hanging_responses_time_out_and_are_retried() {
    let server = FakeKcap::start();
    // The first watermark query never gets an answer (its deadline is 10 s, 1 s at the
    // suite's pace), then the first transcript batch hangs too (30 s, 3 s here). Reading and
    // the heartbeat go on meanwhile.
    server.fail_next_on("last-line", 1, Fault::Hang);
    server.fail_next_on("transcript", 1, Fault::Hang);
    let mut run = Run::start(&server.url(), &[]);
    assert!(
        run.keep_writing_until(
            Duration::from_secs(20),
            Duration::from_millis(500),
            || server.request_count("last-line") >= 2
        ),
        "the hanging watermark query was not retried"
    );
    assert!(
        run.keep_writing_until(
            Duration::from_secs(30),
            Duration::from_millis(500),
            || server.request_count("transcript") >= 2
        ),
        "the hanging transcript batch was not retried"
    );
    // A slow but answering server is no failure at all.
    server.fail_next_on("transcript", 2, Fault::Delay(Duration::from_secs(2)));
    run.keep_writing(Duration::from_secs(2), Duration::from_millis(500));
    run.finish(&server, Duration::from_secs(70));
    assert!(server.request_count("transcript") >= 2);
}

#[test]
fn connections_cut_mid_answer_lose_nothing() {
    let server = FakeKcap::start();
    server.fail_next_on("last-line", 1, Fault::DropConnection { store: false });
    // The server stored the batch but the answer was lost: it is sent again (harmless).
    server.fail_next_on("transcript", 2, Fault::DropConnection { store: true });
    // Neither stored nor answered.
    server.fail_next_on("transcript", 2, Fault::DropConnection { store: false });
    let mut run = Run::start(&server.url(), &[]);
    run.keep_writing(Duration::from_millis(1500), Duration::from_millis(200));
    run.finish(&server, Duration::from_secs(60));
    assert!(server.request_count("transcript") >= 5);
}

#[test]
fn server_losing_its_last_batches_gets_them_again_after_the_next_failure_heals() {
    let server = FakeKcap::start();
    let mut run = Run::start(&server.url(), &[]);
    run.keep_writing(Duration::from_secs(1), Duration::from_millis(200));
    let shipped = expected_lines(&run.sandbox.rollout_bytes());
    assert!(
        wait_until(Duration::from_secs(20), || server
            .lines(SESSION_ND, AGENT_ND)
            == shipped),
        "first part not shipped:\n{}",
        run.watcher.stderr()
    );
    // Restored from a backup: the watermark moves back by 7 lines. The watcher only learns it
    // when it reads the watermark again, which it does once a delivery failure heals.
    server.lose_last_lines(SESSION_ND, AGENT_ND, 7);
    server.fail_next_on("transcript", 1, Fault::Status(503));
    run.keep_writing(Duration::from_secs(1), Duration::from_millis(300));
    run.finish(&server, Duration::from_secs(30));
    assert!(
        run.watcher
            .stderr()
            .contains("server is behind what it acknowledged"),
        "the resend was not logged:\n{}",
        run.watcher.stderr()
    );
}

#[test]
fn a_401_keeps_every_line_until_the_token_file_is_refreshed() {
    let server = FakeKcap::start();
    server.require_token(Some("tok-fresh-2b7e151628aed2a6"));
    let sandbox_token = tempfile::tempdir().unwrap();
    let token_file = sandbox_token.path().join("token");
    std::fs::write(&token_file, "tok-expired-0000\n").unwrap();
    let mut run = Run::start(
        &server.url(),
        &[("KCAP_TOKEN_FILE", token_file.to_str().unwrap())],
    );
    assert!(
        wait_until(Duration::from_secs(10), || server
            .request_count("last-line")
            >= 1),
        "no request"
    );
    run.keep_writing(Duration::from_secs(3), Duration::from_millis(300));
    // The kcap CLI refreshes the token on its next hook.
    std::fs::write(&token_file, "tok-fresh-2b7e151628aed2a6\n").unwrap();
    let refused = server.requests().len();
    run.keep_writing(Duration::from_secs(1), Duration::from_millis(300));
    // Re-read every 60 s after a 401 (6 s at the suite's pace), never in a loop.
    run.finish(&server, Duration::from_secs(30));
    assert!(
        refused <= 3,
        "{refused} requests within 3 s of a 401: the watcher spins"
    );
    assert!(
        run.watcher.stderr().contains("HTTP 401"),
        "the 401 was not logged:\n{}",
        run.watcher.stderr()
    );
    for text in [run.watcher.stderr(), run.sandbox.log_files()] {
        assert!(!text.contains("tok-expired-0000") && !text.contains("tok-fresh-2b7e1516"));
    }
}
