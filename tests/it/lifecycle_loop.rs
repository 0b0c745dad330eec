//! The running watcher loop under tokio's paused clock: the scenarios of docs/behaviour.md
//! L8 that involve the loop's timers, with minutes and hours passing instantly and
//! deterministically. Offline, so the spools show what the watcher did.

use crate::support;
use support::harness::append_lines as append;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use kcap_watch::codex::header::Role;
use kcap_watch::config::Settings;
use kcap_watch::time::Ts;
use kcap_watch::watch::clock::{Clock, TokioClock};
use kcap_watch::watch::{self, ExitReason, WatchOptions};
use support::lifecycle_table::{self, HEADER_AT, seconds};
use support::rollout;

const MIN: Duration = Duration::from_secs(60);
const SESSION: &str = "019fa9812dca7a319c553b1f0e6d2a01";

fn child_meta() -> String {
    rollout::session_meta(
        r#"{"id":"019fa981-6ea2-7b02-8d11-5c2e9f7a4b02","session_id":"019fa981-2dca-7a31-9c55-3b1f0e6d2a01","thread_source":"subagent","agent_nickname":"Hypatia"}"#,
    )
    .text()
}

fn ev(payload: &str) -> String {
    rollout::event(payload).text()
}

fn started() -> String {
    rollout::task_started("t1").text()
}

fn complete() -> String {
    rollout::task_complete("t1", "done").text()
}

fn usage_limit(resets_at: Ts) -> [String; 2] {
    [
        rollout::token_count(100.0, resets_at).text(),
        rollout::usage_limit_complete("t1").text(),
    ]
}

struct Setup {
    dir: tempfile::TempDir,
    rollout: PathBuf,
    base: Ts,
    clock: Arc<TokioClock>,
}

impl Setup {
    /// A rollout holding `lines`, last modified at the watcher's start (`base`).
    fn new(lines: &[String]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let rollout = dir.path().join("rollout.jsonl");
        append(&rollout, lines);
        // Whole seconds: file times and the paused clock then agree exactly.
        let base = Ts::from_millis((Ts::now().as_millis() / 1000) * 1000);
        let f = OpenOptions::new().write(true).open(&rollout).unwrap();
        f.set_modified(UNIX_EPOCH + Duration::from_millis(base.as_millis() as u64))
            .unwrap();
        let clock = TokioClock::new(base);
        Setup {
            dir,
            rollout,
            base,
            clock,
        }
    }

    fn settings(&self) -> Settings {
        let mut s = Settings::with_defaults(self.dir.path().join("config"));
        s.poll_interval = Duration::from_secs(1);
        s
    }

    fn opts(&self) -> WatchOptions {
        WatchOptions::following(self.rollout.clone())
    }

    fn at(&self, d: Duration) -> Ts {
        self.base.plus(d)
    }

    fn hook_spool(&self) -> Vec<String> {
        let p = self
            .dir
            .path()
            .join(format!("config/spool/{SESSION}.jsonl"));
        std::fs::read_to_string(p)
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    fn spooled_lines(&self) -> usize {
        let p = self.dir.path().join(format!(
            "config/transcript-spool/{SESSION}.transcript.jsonl"
        ));
        std::fs::read_to_string(p)
            .map(|t| {
                t.lines()
                    .map(|r| {
                        serde_json::from_str::<serde_json::Value>(r).unwrap()["lines"]
                            .as_array()
                            .unwrap()
                            .len()
                    })
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Sleeps (virtually) until `base + d`.
    async fn until(&self, d: Duration) {
        let now = self.clock.now();
        let target = self.at(d);
        tokio::time::sleep(target.duration_since(now)).await;
    }

    /// Appends lines and lets the watcher read them *now*: the test keeps the runtime busy
    /// (so paused time cannot advance) until the spool shows them.
    async fn append_now(&self, lines: &[String]) {
        let want = self.spooled_lines() + lines.len();
        append(&self.rollout, lines);
        settle(|| self.spooled_lines() >= want).await;
    }
}

/// Yields (without letting paused time advance) until `done`, for at most 5 s of real time.
async fn settle(mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "watcher did not react"
        );
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn stops(s: &Setup) -> usize {
    s.hook_spool()
        .iter()
        .filter(|l| l.contains("\"route\":\"subagent-stop\""))
        .count()
}

/// The table of section 8 with a running watcher: each line appended at its time (the
/// paused clock starting at the header's), the stop spooled exactly when due and not a
/// second earlier, or not within an hour of the last line when none is owed.
#[tokio::test(start_paused = true)]
async fn lifecycle_table_at_the_loop_level() {
    let since_header = |hms: &str| Duration::from_secs(seconds(hms) - seconds(HEADER_AT));
    for sc in lifecycle_table::scenarios() {
        let what = format!("scenario {} ({})", sc.section, sc.name);
        let s = Setup::new(&[lifecycle_table::header().text()]);
        let watcher = watch::run(s.opts(), s.settings(), s.clock.clone());
        let test = async {
            settle(|| s.spooled_lines() == 1).await;
            for (at, line) in &sc.lines {
                s.until(since_header(at)).await;
                s.append_now(&[line.text()]).await;
            }
            match sc.stop_due {
                Some(due) => {
                    s.until(since_header(due) - Duration::from_secs(1)).await;
                    tokio::task::yield_now().await;
                    assert_eq!(stops(&s), 0, "{what}: not a second before {due}");
                    s.until(since_header(due)).await;
                    settle(|| stops(&s) == 1).await;
                    assert_eq!(s.clock.now(), s.at(since_header(due)), "{what}");
                }
                None => {
                    let last = sc.lines.last().map_or(HEADER_AT, |l| l.0);
                    s.until(since_header(last) + 60 * MIN).await;
                    tokio::task::yield_now().await;
                    assert_eq!(stops(&s), 0, "{what}: no stop is owed");
                }
            }
        };
        tokio::select! {
            r = watcher => panic!("{what}: watcher ended early: {r:?}"),
            _ = test => {}
        }
    }
}

#[tokio::test(start_paused = true)]
async fn loop_scenario_1_stop_fires_at_five_minutes_not_a_second_earlier() {
    let s = Setup::new(&[child_meta(), started(), complete()]);
    let watcher = watch::run(s.opts(), s.settings(), s.clock.clone());
    let test = async {
        settle(|| s.spooled_lines() == 3).await;
        s.until(5 * MIN - Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert_eq!(stops(&s), 0, "not at 4:59");
        s.until(5 * MIN).await;
        settle(|| stops(&s) == 1).await;
        assert_eq!(s.clock.now(), s.at(5 * MIN));
    };
    tokio::select! {
        r = watcher => panic!("watcher ended early: {r:?}"),
        _ = test => {}
    }
}

#[tokio::test(start_paused = true)]
async fn loop_scenario_4_no_second_stop_after_re_engagement() {
    let s = Setup::new(&[child_meta(), started(), complete()]);
    let watcher = watch::run(s.opts(), s.settings(), s.clock.clone());
    let test = async {
        s.until(5 * MIN + Duration::from_secs(1)).await;
        settle(|| stops(&s) == 1).await;
        s.until(55 * MIN).await;
        s.append_now(&[started()]).await;
        s.until(60 * MIN).await;
        s.append_now(&[complete()]).await;
        s.until(90 * MIN).await;
        assert_eq!(stops(&s), 1);
    };
    tokio::select! {
        r = watcher => panic!("watcher ended early: {r:?}"),
        _ = test => {}
    }
}

#[tokio::test(start_paused = true)]
async fn loop_scenario_7_a_pending_call_blocks_the_reap_until_it_is_twelve_hours_old() {
    let call = rollout::call("c1", "wait_agent", "{}").text();
    let s = Setup::new(&[child_meta(), started(), call]);
    let mut settings = s.settings();
    settings.reap_after = 30 * MIN;
    settings.stall_after = Some(65 * MIN);
    let (reason, _) = watch::run(s.opts(), settings, s.clock.clone())
        .await
        .expect("the watcher ends as designed");
    assert_eq!(reason, ExitReason::IdleReap);
    // The call was observed at the file's mtime (base); it is orphaned at 12 h.
    assert_eq!(s.clock.now(), s.at(12 * 60 * MIN));
}

#[tokio::test(start_paused = true)]
async fn loop_scenario_8_the_stop_comes_after_the_grace_and_the_watcher_outlives_the_pause() {
    // docs/behaviour.md R4.2: a usage-limit turn ends like any other turn.
    let s = Setup::new(&[child_meta(), started()]);
    let mut settings = s.settings();
    settings.reap_after = 30 * MIN;
    let watcher = watch::run(s.opts(), settings, s.clock.clone());
    let test = async {
        // 10:00 = base; usage limit at 10:09 with a reset at 11:47.
        s.until(9 * MIN).await;
        let [count, _] = usage_limit(s.at(107 * MIN));
        let end = ev(
            r#"{"type":"task_complete","turn_id":"t1","last_agent_message":null,"error":{"message":"You've hit your usage limit. Try again at 11:47 AM.","codex_error_info":"usage_limit_exceeded"}}"#,
        );
        s.append_now(&[count, end]).await;
        s.until(14 * MIN - Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert_eq!(stops(&s), 0, "not before 10:14:00");
        s.until(14 * MIN).await;
        settle(|| stops(&s) == 1).await;
        let stop = s
            .hook_spool()
            .into_iter()
            .find(|l| l.contains("subagent-stop"))
            .expect("the stop was spooled");
        assert!(stop.contains("Try again at 11:47 AM."), "{stop}");
        // The pause keeps the 30-minute reap from firing until 11:47:30 + 30 min.
        s.until(107 * MIN + Duration::from_secs(30) + 30 * MIN - Duration::from_secs(1))
            .await;
        tokio::task::yield_now().await;
    };
    tokio::select! {
        r = watcher => panic!("watcher ended before the pause's end plus the reap window: {r:?}"),
        _ = test => {}
    }
}

#[tokio::test(start_paused = true)]
async fn loop_scenario_9_the_lifetime_ceiling_is_extended_by_pause_credit_then_fires() {
    let s = Setup::new(&[child_meta(), started()]);
    let mut settings = s.settings();
    settings.lifetime = Some(45 * MIN);
    settings.reap_after = 24 * 60 * MIN;
    settings.stop_grace = 24 * 60 * MIN;
    settings.poll_interval = Duration::from_secs(60);
    let watcher = watch::run(s.opts(), settings, s.clock.clone());
    let test = async {
        s.until(5 * MIN).await;
        s.append_now(&usage_limit(s.at(115 * MIN))).await;
        s.until(45 * MIN + Duration::from_secs(1)).await;
        // Still alive at 10:45:01: this future only completes while the watcher runs.
    };
    tokio::pin!(watcher);
    tokio::select! {
        r = &mut watcher => panic!("watcher ended before 10:45:01: {r:?}"),
        _ = test => {}
    }
    let (reason, _) = watcher.await.expect("ends as designed");
    assert_eq!(s.clock.now(), s.at(155 * MIN + Duration::from_secs(30)));
    match reason {
        ExitReason::LifetimeCeiling(msg) => assert_eq!(
            msg,
            format!(
                "lifetime ceiling reached [base 2700000ms; pause credit 6630000ms across 3 grants (cap 7200000ms); last pause: usage_limit_exceeded until {}]",
                s.at(115 * MIN).rfc3339()
            )
        ),
        other => panic!("expected the lifetime ceiling, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_lifetime_ceiling_without_pauses_fires_on_time_with_the_plain_message() {
    let s = Setup::new(&[child_meta(), started()]);
    let mut settings = s.settings();
    settings.lifetime = Some(90 * MIN);
    settings.stall_after = None;
    settings.poll_interval = Duration::from_secs(60);
    let (reason, _) = watch::run(s.opts(), settings, s.clock.clone())
        .await
        .unwrap();
    assert_eq!(s.clock.now(), s.at(90 * MIN));
    assert_eq!(
        reason,
        ExitReason::LifetimeCeiling("lifetime ceiling reached after 5400000ms".into())
    );
}

#[tokio::test(start_paused = true)]
async fn a_session_ends_after_its_idle_window_counted_from_the_close_of_a_pause() {
    let meta =
        rollout::session_meta(r#"{"id":"019fa981-2dca-7a31-9c55-3b1f0e6d2a01","cwd":"/w"}"#).text();
    let s = Setup::new(&[meta, started()]);
    let mut opts = s.opts();
    opts.role = Some(Role::Session);
    let watcher = watch::run(opts, s.settings(), s.clock.clone());
    let test = async {
        s.until(10 * MIN).await;
        // Parked for two hours: the 60-minute idle window starts at the reset + 30 s.
        s.append_now(&usage_limit(s.at(130 * MIN))).await;
    };
    tokio::pin!(watcher);
    tokio::select! {
        r = &mut watcher => panic!("ended early: {r:?}"),
        _ = test => {}
    }
    let (reason, _) = watcher.await.unwrap();
    assert_eq!(reason, ExitReason::IdleTimeout);
    assert_eq!(
        s.clock.now(),
        s.at(190 * MIN + Duration::from_secs(30) + Duration::from_millis(1))
    );
    let ends: Vec<String> = s
        .hook_spool()
        .into_iter()
        .filter(|l| l.contains("session-end"))
        .collect();
    assert_eq!(ends.len(), 1);
    assert!(ends[0].contains("idle_timeout"));
}

// ---- docs/behaviour.md R4 at the loop: decisions that match what real Codex writes ----------------

/// Log records the watcher emits while the guard lives (text format), so a test can see a
/// `stall_detected` or a `role` the way a user's log file would show it.
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let logs = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || logs.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The one spooled subagent-stop's body.
fn the_stop(s: &Setup) -> serde_json::Value {
    let stops: Vec<serde_json::Value> = s
        .hook_spool()
        .iter()
        .filter(|l| l.contains("\"route\":\"subagent-stop\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(stops.len(), 1, "exactly one stop: {stops:?}");
    let record = &stops[0];
    // The spool keeps the body as JSON or as its text; read either.
    match &record["body"] {
        serde_json::Value::String(text) => serde_json::from_str(text).unwrap(),
        body => body.clone(),
    }
}

fn agent_text(text: &str) -> String {
    ev(&format!(
        r#"{{"type":"agent_message","message":{}}}"#,
        serde_json::to_string(text).unwrap()
    ))
}

fn crashed_child() -> Vec<String> {
    let call = rollout::call("c1", "exec_command", "{}").text();
    let out = rollout::output("c1", "ok").text();
    vec![
        child_meta(),
        started(),
        call,
        out,
        agent_text("Halfway through the migration."),
    ]
}

#[tokio::test(start_paused = true)]
async fn loop_a_stale_99_percent_five_hour_window_parks_until_its_reset_not_the_weekly_one() {
    let s = Setup::new(&[child_meta(), started()]);
    let mut settings = s.settings();
    settings.reap_after = 30 * MIN;
    let watcher = watch::run(s.opts(), settings, s.clock.clone());
    tokio::pin!(watcher);
    let five_hour_reset = s.at(56 * MIN);
    let weekly_reset = s.at(4 * 24 * 60 * MIN + 17 * 60 * MIN);
    let secret = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZXYifQ.c2lnbmF0dXJlLXZhbHVlLWhlcmU";
    // Codex's message, with a token in it and long enough to need the 4 KiB cut.
    let message = format!(
        "You've hit your usage limit. Try again at 10:45 PM. token {secret} {}",
        "x".repeat(5000)
    );
    let test = async {
        s.until(9 * MIN).await;
        let count = ev(&format!(
            r#"{{"type":"token_count","rate_limits":{{"primary":{{"used_percent":99.0,"window_minutes":300,"resets_at":{}}},"secondary":{{"used_percent":62.0,"window_minutes":10080,"resets_at":{}}}}}}}"#,
            five_hour_reset.as_millis() / 1000,
            weekly_reset.as_millis() / 1000
        ));
        let end = ev(&format!(
            r#"{{"type":"task_complete","turn_id":"t1","last_agent_message":null,"error":{{"message":{},"codex_error_info":"usage_limit_exceeded"}}}}"#,
            serde_json::to_string(&message).unwrap()
        ));
        s.append_now(&[count, end]).await;
        // The pause does not hold the stop: it comes after the grace.
        s.until(14 * MIN - Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert_eq!(stops(&s), 0, "not before 10:14:00");
        s.until(14 * MIN).await;
        settle(|| stops(&s) == 1).await;
    };
    tokio::select! {
        r = &mut watcher => panic!("watcher ended before the stop: {r:?}"),
        _ = test => {}
    }
    let body = the_stop(&s);
    let sent = body["last_assistant_message"].as_str().unwrap();
    assert!(
        sent.starts_with("You've hit your usage limit. Try again at 10:45 PM."),
        "{sent}"
    );
    assert!(!sent.contains(secret), "the message is redacted: {sent}");
    assert!(sent.len() <= 4096, "at most 4 KiB, got {}", sent.len());
    // Parked until the five-hour reset (+30 s), then a full reap window: not days.
    let (reason, _) = watcher.await.unwrap();
    assert_eq!(reason, ExitReason::IdleReap);
    assert_eq!(
        s.clock.now(),
        s.at(56 * MIN + Duration::from_secs(30) + 30 * MIN + Duration::from_millis(1))
    );
    assert_eq!(stops(&s), 1, "the reap does not post a second stop");
}

#[tokio::test(start_paused = true)]
async fn loop_a_pause_with_its_stop_posted_still_holds_the_reap_and_credits_the_ceiling() {
    let s = Setup::new(&[child_meta(), started()]);
    let mut settings = s.settings();
    settings.lifetime = Some(45 * MIN);
    settings.reap_after = 30 * MIN;
    settings.poll_interval = Duration::from_secs(60);
    let watcher = watch::run(s.opts(), settings, s.clock.clone());
    tokio::pin!(watcher);
    let test = async {
        s.until(5 * MIN).await;
        s.append_now(&usage_limit(s.at(115 * MIN))).await;
        s.until(10 * MIN).await;
        settle(|| stops(&s) == 1).await;
    };
    tokio::select! {
        r = &mut watcher => panic!("ended before the stop: {r:?}"),
        _ = test => {}
    }
    let (reason, _) = watcher.await.unwrap();
    // Without the pause the reap fires at 10:35 and the ceiling at 10:45; with it the ceiling
    // is credited past 12:25 and the reap counts from the pause's close at 11:55:30.
    assert_eq!(reason, ExitReason::IdleReap);
    assert_eq!(
        s.clock.now(),
        s.at(145 * MIN + Duration::from_secs(30) + Duration::from_millis(1))
    );
    assert_eq!(stops(&s), 1);
}

#[tokio::test(start_paused = true)]
async fn loop_queued_mail_neither_delays_the_stop_nor_warns_of_a_stall() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let s = Setup::new(&[child_meta(), started(), complete()]);
    let mut settings = s.settings();
    settings.stall_after = Some(65 * MIN);
    let watcher = watch::run(s.opts(), settings, s.clock.clone());
    let test = async {
        settle(|| s.spooled_lines() == 3).await;
        s.until(2 * MIN).await;
        s.append_now(&[
            r#"{"type":"inter_agent_communication_metadata","payload":{"trigger_turn":false}}"#.to_string(),
            r#"{"type":"response_item","payload":{"type":"agent_message","author":"/root/migrator","recipient":"/root/reviewer","content":[{"type":"input_text","text":"FYI: migration 0043 adds invoices.currency."}]}}"#.to_string(),
        ])
        .await;
        // Mail is not activity: the stop still comes 5 min after the turn's end.
        s.until(5 * MIN).await;
        settle(|| stops(&s) == 1).await;
        assert_eq!(s.clock.now(), s.at(5 * MIN));
        s.until(2 * MIN + 70 * MIN).await;
        tokio::task::yield_now().await;
    };
    tokio::select! {
        r = watcher => panic!("watcher ended early: {r:?}"),
        _ = test => {}
    }
    assert_eq!(s.spooled_lines(), 5, "the mail is shipped as usual");
    assert!(!logs.text().contains("stall_detected"), "{}", logs.text());
    assert_eq!(the_stop(&s)["last_assistant_message"], "done");
}

#[tokio::test(start_paused = true)]
async fn loop_mail_that_triggers_a_turn_re_opens_it_until_that_turn_ends() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let s = Setup::new(&[child_meta(), started(), complete()]);
    let mut settings = s.settings();
    settings.stall_after = Some(65 * MIN);
    let watcher = watch::run(s.opts(), settings, s.clock.clone());
    let test = async {
        settle(|| s.spooled_lines() == 3).await;
        s.until(2 * MIN).await;
        s.append_now(&[
            r#"{"type":"inter_agent_communication_metadata","payload":{"trigger_turn":true}}"#.to_string(),
            r#"{"type":"response_item","payload":{"type":"agent_message","author":"/root","recipient":"/root/reviewer","content":[{"type":"input_text","text":"Also check refund.rs."}]}}"#.to_string(),
        ])
        .await;
        s.until(60 * MIN).await;
        tokio::task::yield_now().await;
        assert_eq!(stops(&s), 0, "the mail re-opened the turn");
        // The open turn is silent: this is a stall (and proves the log capture sees one).
        s.until(2 * MIN + 65 * MIN + Duration::from_secs(1)).await;
        settle(|| logs.text().contains("stall_detected")).await;
        s.until(70 * MIN).await;
        s.append_now(&[ev(
            r#"{"type":"task_complete","turn_id":"t2","last_agent_message":"refund.rs is fine"}"#,
        )])
        .await;
        s.until(75 * MIN - Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert_eq!(stops(&s), 0, "not before 5 min after the second turn's end");
        s.until(75 * MIN).await;
        settle(|| stops(&s) == 1).await;
    };
    tokio::select! {
        r = watcher => panic!("watcher ended early: {r:?}"),
        _ = test => {}
    }
    assert_eq!(the_stop(&s)["last_assistant_message"], "refund.rs is fine");
}

#[tokio::test(start_paused = true)]
async fn loop_a_child_that_crashed_mid_turn_gets_its_stop_at_reap() {
    let s = Setup::new(&crashed_child());
    let mut settings = s.settings();
    settings.reap_after = 30 * MIN;
    let (reason, _) = watch::run(s.opts(), settings, s.clock.clone())
        .await
        .unwrap();
    assert_eq!(reason, ExitReason::IdleReap);
    assert_eq!(s.clock.now(), s.at(30 * MIN + Duration::from_millis(1)));
    assert_eq!(s.spooled_lines(), 5, "every line is handed over");
    assert_eq!(
        the_stop(&s)["last_assistant_message"],
        "Halfway through the migration."
    );
}

#[tokio::test(start_paused = true)]
async fn loop_a_child_that_crashed_mid_turn_gets_its_stop_at_the_lifetime_ceiling() {
    let s = Setup::new(&crashed_child());
    let mut settings = s.settings();
    settings.lifetime = Some(45 * MIN);
    settings.stall_after = None;
    let (reason, _) = watch::run(s.opts(), settings, s.clock.clone())
        .await
        .unwrap();
    assert!(
        matches!(reason, ExitReason::LifetimeCeiling(_)),
        "{reason:?}"
    );
    assert_eq!(s.clock.now(), s.at(45 * MIN));
    assert_eq!(
        the_stop(&s)["last_assistant_message"],
        "Halfway through the migration."
    );
}

#[tokio::test(start_paused = true)]
async fn loop_a_child_that_crashed_mid_turn_gets_its_stop_when_its_parent_exits() {
    let pid = support::procs::exited_pid();
    let s = Setup::new(&crashed_child());
    let mut opts = s.opts();
    opts.parent_pid = Some(pid);
    let (reason, _) = watch::run(opts, s.settings(), s.clock.clone())
        .await
        .unwrap();
    assert_eq!(reason, ExitReason::ParentExited);
    assert!(s.clock.now() < s.at(MIN), "ended at the first poll");
    assert_eq!(s.spooled_lines(), 5);
    assert_eq!(
        the_stop(&s)["last_assistant_message"],
        "Halfway through the migration."
    );
}

#[tokio::test(start_paused = true)]
async fn loop_a_resumed_session_idle_for_hours_gets_a_full_window_from_the_watcher_start() {
    let meta = r#"{"type":"session_meta","payload":{"id":"019fa981-2dca-7a31-9c55-3b1f0e6d2a01","cwd":"/w"}}"#.to_string();
    let s = Setup::new(&[meta, started(), complete()]);
    // Last written three hours before the watcher starts (`codex resume` of an old session).
    let old = s.base.as_millis() as u64 - 3 * 3600 * 1000;
    OpenOptions::new()
        .write(true)
        .open(&s.rollout)
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_millis(old))
        .unwrap();
    let watcher = watch::run(s.opts(), s.settings(), s.clock.clone());
    tokio::pin!(watcher);
    let test = async {
        s.until(2 * MIN).await;
        tokio::task::yield_now().await;
        assert!(s.hook_spool().is_empty(), "no session-end at start");
        s.until(60 * MIN).await;
        tokio::task::yield_now().await;
    };
    tokio::select! {
        r = &mut watcher => panic!("ended before one full idle window after its start: {r:?}"),
        _ = test => {}
    }
    let (reason, _) = watcher.await.unwrap();
    assert_eq!(reason, ExitReason::IdleTimeout);
    assert_eq!(s.clock.now(), s.at(60 * MIN + Duration::from_millis(1)));
    assert_eq!(s.spooled_lines(), 3);
}

/// The host's shutdown is passed in (docs/design.md, "Shutdown from outside"): a test ends a running watcher through a
/// channel, in-process and with no signal, and it ends as `SIGTERM` ends it: every line
/// handed over (the spool, offline), the exit reason naming the signal, the key's files and
/// the status file removed.
#[tokio::test(start_paused = true)]
async fn the_injected_shutdown_ends_the_watcher_as_sigterm_does() {
    let s = Setup::new(&[child_meta(), started()]);
    let (tx, shutdown) = watch::shutdown::Shutdown::channel();
    let watcher = watch::run_until(s.opts(), s.settings(), s.clock.clone(), shutdown);
    let config = s.dir.path().join("config");
    let status_dir = kcap_watch::status_file::status_dir(&config);
    let files_in = |dir: &std::path::Path, ext: &str| -> usize {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(ext))
                    .count()
            })
            .unwrap_or(0)
    };
    let end = async {
        settle(|| s.spooled_lines() == 2).await;
        s.until(10 * MIN).await;
        s.append_now(&[complete()]).await;
        // Running: the key is held and the status file written.
        assert_eq!(files_in(&config.join("watchers"), ".lock"), 1);
        settle(|| files_in(&status_dir, ".watch.json") == 1).await;
        tx.send("SIGTERM").await.unwrap();
    };
    let (result, ()) = tokio::join!(watcher, end);
    let (reason, summary) = result.expect("the watcher ends as designed");
    assert_eq!(reason, ExitReason::Signal("SIGTERM"));
    assert_eq!(s.spooled_lines(), 3);
    assert_eq!(summary.lines_spooled, 3);
    assert_eq!(files_in(&config.join("watchers"), ".lock"), 0);
    assert_eq!(files_in(&config.join("watchers"), ".pid"), 0);
    assert_eq!(files_in(&status_dir, ".json"), 0);
}

// ---- docs/behaviour.md S6: a sub-agent's copy of its parent's history --------------------------------

/// The session of `fixtures/codex/child-inherited-history.jsonl` (its parent's).
const INHERITING_SESSION: &str = "019fb1a00c417e529d3a51f0c2a7e001";

/// The fixture's lines: the child's header, 17 lines of its parent's history (an open turn
/// whose `spawn_agent` call has no output yet, an earlier usage-limited turn), two of its own.
fn inheriting_child() -> Vec<String> {
    std::fs::read_to_string("fixtures/codex/child-inherited-history.jsonl")
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Lines spooled and the spooled stop bodies of the fixture's session.
fn inheriting_spools(s: &Setup) -> (usize, Vec<serde_json::Value>) {
    let read = |p: String| {
        std::fs::read_to_string(s.dir.path().join(p))
            .map(|t| {
                t.lines()
                    .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let lines = read(format!(
        "config/transcript-spool/{INHERITING_SESSION}.transcript.jsonl"
    ))
    .iter()
    .map(|r| r["lines"].as_array().unwrap().len())
    .sum();
    let stops = read(format!("config/spool/{INHERITING_SESSION}.jsonl"))
        .into_iter()
        .filter(|r| r["route"] == "subagent-stop")
        .map(|r| match &r["body"] {
            serde_json::Value::String(text) => serde_json::from_str(text).unwrap(),
            body => body.clone(),
        })
        .collect();
    (lines, stops)
}

/// Issue 20, item 10: before the fix the parent's open turn and its spawning call were the
/// child's, so its reap waited 12 h (the orphan rule) and a stall warning came with it; now the
/// child is reaped when its own window ends, warns of no stall, and its stop carries none of
/// the parent's text. Every inherited line is still shipped.
#[tokio::test(start_paused = true)]
async fn loop_a_child_is_held_by_its_parents_spawning_call_and_warned_of_its_parents_stall() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let s = Setup::new(&inheriting_child());
    let mut settings = s.settings();
    settings.reap_after = 30 * MIN;
    settings.stall_after = Some(5 * MIN);
    let (reason, _) = watch::run(s.opts(), settings, s.clock.clone())
        .await
        .unwrap();
    assert_eq!(reason, ExitReason::IdleReap);
    assert_eq!(s.clock.now(), s.at(30 * MIN + Duration::from_millis(1)));
    assert!(!logs.text().contains("stall_detected"), "{}", logs.text());
    let (lines, stops) = inheriting_spools(&s);
    assert_eq!(lines, 20, "inherited lines are shipped like any line");
    assert_eq!(stops.len(), 1, "the stop owed at reap");
    assert_eq!(stops[0]["last_assistant_message"], "");
}

/// S6: the child's own turn decides its stop: due its grace after its own turn's end, with its
/// own message (before the fix the parent's spawning call held it for 12 h).
#[tokio::test(start_paused = true)]
async fn loop_a_child_with_its_parents_history_stops_after_its_own_turn() {
    let s = Setup::new(&inheriting_child());
    let watcher = watch::run(s.opts(), s.settings(), s.clock.clone());
    let test = async {
        settle(|| inheriting_spools(&s).0 == 20).await;
        s.until(MIN).await;
        let own = [
            r#"{"timestamp":"2026-07-29T09:13:04.000Z","type":"event_msg","ordinal":20,"payload":{"type":"task_started","turn_id":"019fb2c4-3e55-7c01-a1b2-0c3d4e5f6a70"}}"#,
            r#"{"timestamp":"2026-07-29T09:13:30.000Z","type":"event_msg","ordinal":21,"payload":{"type":"agent_message","message":"No mismatches in 0043 or 0044."}}"#,
            r#"{"timestamp":"2026-07-29T09:13:31.000Z","type":"event_msg","ordinal":22,"payload":{"type":"task_complete","turn_id":"019fb2c4-3e55-7c01-a1b2-0c3d4e5f6a70","last_agent_message":"No mismatches in 0043 or 0044."}}"#,
        ];
        append(&s.rollout, &own);
        settle(|| inheriting_spools(&s).0 == 23).await;
        s.until(6 * MIN - Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert!(inheriting_spools(&s).1.is_empty(), "not before the grace");
        s.until(6 * MIN).await;
        settle(|| inheriting_spools(&s).1.len() == 1).await;
    };
    tokio::select! {
        r = watcher => panic!("watcher ended early: {r:?}"),
        _ = test => {}
    }
    let (_, stops) = inheriting_spools(&s);
    assert_eq!(
        stops[0]["last_assistant_message"],
        "No mismatches in 0043 or 0044."
    );
}

/// The period the watcher's status file says its safety-net poll runs at, in milliseconds.
#[cfg(unix)]
fn poll_ms(s: &Setup) -> Option<u64> {
    let dir = s.dir.path().join("config/kcap-watch/status");
    let entry = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".watch.json"))?;
    let text = std::fs::read_to_string(entry.path()).ok()?;
    serde_json::from_str::<serde_json::Value>(&text).ok()?["poll_ms"].as_u64()
}

/// Sleeps (virtually) to the next instant half-way between two of the watcher's polls
/// (which come at whole seconds from its start, the rollout's time).
#[cfg(target_os = "linux")]
async fn between_polls(s: &Setup) {
    let since = s.clock.now().as_millis() - s.base.as_millis();
    let next = (since / 1000) * 1000 + 500;
    let next = if next <= since { next + 1000 } else { next };
    s.until(Duration::from_millis(next as u64)).await;
}

/// Lets paused time run for `d` in steps of 100 ms, stopping as soon as `done` holds; the
/// time it took.
#[cfg(unix)]
async fn within(d: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = tokio::time::Instant::now();
    while start.elapsed() <= d {
        if done() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done().then(|| start.elapsed())
}

/// docs/behaviour.md, "The safety-net poll": an idle watcher whose file notification has
/// reported every change for ten seconds polls at four times the configured period (what an
/// idle supervisor costs is its wake-ups); a change that only the poll finds (written
/// through a hard link in another directory) is still found, and puts the configured
/// period back at once, for as long as that file's changes are found by the poll alone.
#[cfg(target_os = "linux")]
#[tokio::test(start_paused = true)]
async fn an_idle_watchers_poll_stretches_while_notification_works_and_a_missed_change_restores_it()
{
    let s = Setup::new(&[child_meta(), started()]);
    let other = s.dir.path().join("elsewhere");
    std::fs::create_dir(&other).unwrap();
    let link = other.join("same-rollout.jsonl");
    std::fs::hard_link(&s.rollout, &link).unwrap();
    let watcher = watch::run(s.opts(), s.settings(), s.clock.clone());
    let sec = |ms: u64| Duration::from_millis(ms);
    let test = async {
        settle(|| s.spooled_lines() == 2).await;
        // Between two polls (at whole seconds from the start): a change landing at the
        // instant of a poll may be found by it before its event is read, which counts as a
        // miss (a real one the test could not tell from it).
        s.until(sec(5_500)).await;
        assert_eq!(poll_ms(&s), Some(1000), "the configured period at first");
        // A notified change is no miss.
        s.append_now(&[agent_text("notified")]).await;
        s.until(sec(20_500)).await;
        assert_eq!(
            poll_ms(&s),
            Some(4000),
            "stretched after ten seconds of notified changes only"
        );
        // Found by the stretched poll, within its period.
        append(&link, &[agent_text("through the link")]);
        let took = within(sec(5_000), || s.spooled_lines() == 4)
            .await
            .expect("a change notification missed is found by the stretched poll");
        assert!(took <= sec(4_100), "{took:?}");
        // That miss put the configured period back: the next one is found within it.
        within(sec(3_000), || poll_ms(&s) == Some(1000))
            .await
            .expect("the status file says the configured period again");
        append(&link, &[agent_text("through the link again")]);
        let took = within(sec(2_000), || s.spooled_lines() == 5)
            .await
            .expect("found by the configured poll");
        assert!(took <= sec(1_100), "{took:?}");
        // A file the poll found changed stays polled at the configured period while quiet.
        tokio::time::sleep(3 * MIN).await;
        assert_eq!(poll_ms(&s), Some(1000));
        append(&link, &[agent_text("minutes later")]);
        let took = within(sec(2_000), || s.spooled_lines() == 6)
            .await
            .expect("found by the configured poll");
        assert!(took <= sec(1_100), "{took:?}");
        // Until an event reports one of its changes again.
        between_polls(&s).await;
        s.append_now(&[agent_text("notified again")]).await;
        within(sec(15_000), || poll_ms(&s) == Some(4000))
            .await
            .expect("stretched again once notification reported the file's change");
    };
    tokio::select! {
        r = watcher => panic!("watcher ended early: {r:?}"),
        _ = test => {}
    }
}

/// Where notification is not relied on, the configured period stays: polling forced, a
/// rollout path that is a symbolic link into a directory nobody watches (whose changes are
/// then found within the configured period, minutes into a quiet spell), or a parent whose
/// exit only the poll sees.
#[cfg(unix)]
#[tokio::test(start_paused = true)]
async fn the_poll_keeps_its_configured_period_when_polling_is_forced_the_path_is_a_link_or_a_parent_is_watched()
 {
    // Forced polling.
    let s = Setup::new(&[child_meta(), started()]);
    let mut settings = s.settings();
    settings.force_poll = true;
    keeps_the_configured_poll(&s, s.opts(), settings).await;

    // A symbolic link: the watched directory is the link's, the file is elsewhere.
    let s = Setup::new(&[child_meta(), started()]);
    let other = s.dir.path().join("links");
    std::fs::create_dir(&other).unwrap();
    let link = other.join("rollout.jsonl");
    std::os::unix::fs::symlink(&s.rollout, &link).unwrap();
    keeps_the_configured_poll(&s, WatchOptions::following(link), s.settings()).await;

    // A parent watched (this test's own process): its exit is noticed at the configured
    // period, so the period stays.
    let s = Setup::new(&[child_meta(), started()]);
    let mut opts = s.opts();
    opts.parent_pid = Some(std::process::id());
    keeps_the_configured_poll(&s, opts, s.settings()).await;
}

/// Runs a watcher of `s`'s rollout as `opts` and `settings` say: three quiet minutes in, its
/// poll still has the configured period, and a line appended to the file is found within it.
#[cfg(unix)]
async fn keeps_the_configured_poll(s: &Setup, opts: WatchOptions, settings: Settings) {
    let watcher = watch::run(opts, settings, s.clock.clone());
    let test = async {
        settle(|| s.spooled_lines() == 2).await;
        s.until(3 * MIN + Duration::from_millis(500)).await;
        assert_eq!(poll_ms(s), Some(1000));
        append(&s.rollout, &[agent_text("found by the poll")]);
        within(Duration::from_millis(1100), || s.spooled_lines() == 3)
            .await
            .expect("found within the configured period");
    };
    tokio::select! {
        r = watcher => panic!("watcher ended early: {r:?}"),
        _ = test => {}
    }
}
