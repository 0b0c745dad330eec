//! A live watcher's heartbeat, read by the kcap CLI as it reads it on Windows. The kcap CLI's
//! spawner takes a watcher whose `<key>.heartbeat` it cannot read, or finds older than 20 s,
//! for dead, kills it and starts its own: on Windows a heartbeat kept open for writing (which
//! refuses `File.ReadAllText`'s read-sharing-only open), or one that stops advancing where a
//! rename cannot replace an open file (no POSIX rename semantics: FAT, exFAT, many network
//! shares, Wine), would have every kcap-watch key taken for dead.

use crate::support;
use support::bin::SpawnRetry;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kcap_watch::time::Ts;
use support::bin::{kcap_watch, wait_for};
use support::kcap_cli_reader::read_all_text;
use support::rollout;

const SESSION: &str = "0199aaaa000070008000000000000007";

/// Reads the heartbeat the kcap CLI's way every 100 ms through three beat periods and some:
/// every read succeeds, the time it holds moves forward at least three times, and it is never
/// older than a beat period plus the 5 s of slack kcap-watch promises (10 s beats, never older
/// than 15 s; the kcap CLI's limit is 20 s). The beat period is lowered to 1 s
/// (`KCAP_WATCH_HEARTBEAT_MS`): what is read, and how a beat replaces the file, do not depend on
/// how often it happens.
#[test]
fn the_kcap_cli_reads_a_live_watchers_heartbeat_and_sees_it_advance_beat_after_beat() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let rollout = dir.path().join("rollout.jsonl");
    let meta = rollout::session_meta(r#"{"id":"0199aaaa-0000-7000-8000-000000000007","cwd":"/w"}"#)
        .at("10:00:00");
    std::fs::write(&rollout, format!("{meta}\n")).unwrap();
    let every = Duration::from_secs(1);
    let mut watcher = kcap_watch(&config)
        .env("KCAP_WATCH_HEARTBEAT_MS", every.as_millis().to_string())
        .args(["watch", SESSION])
        .arg(&rollout)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn_retrying()
        .unwrap();
    let heartbeat = config.join("watchers").join(format!("{SESSION}.heartbeat"));
    assert!(
        wait_for(Duration::from_secs(20), || heartbeat.exists()),
        "the watcher never wrote its heartbeat"
    );

    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut reads = 0;
    let mut beats: Vec<Ts> = Vec::new();
    let mut oldest = Duration::ZERO;
    let until = Instant::now() + every * 22 / 5;
    while Instant::now() < until {
        match read_all_text(&heartbeat) {
            Ok(text) => {
                reads += 1;
                let beat = Ts::parse_rfc3339(text.trim())
                    .unwrap_or_else(|| panic!("not a heartbeat: {text:?}"));
                oldest = oldest.max(Ts::now().duration_since(beat));
                if beats.last().is_none_or(|last| beat > *last) {
                    beats.push(beat);
                }
            }
            Err(e) => *failures.entry(e.to_string()).or_default() += 1,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = watcher.kill();
    let _ = watcher.wait();

    assert!(
        failures.is_empty(),
        "{} of {} reads failed: {failures:?}",
        failures.values().sum::<usize>(),
        reads + failures.values().sum::<usize>()
    );
    assert!(
        beats.len() >= 4,
        "the heartbeat advanced only {} times in three beat periods and some: {beats:?}",
        beats.len().saturating_sub(1)
    );
    assert!(
        oldest <= every + Duration::from_secs(5),
        "the heartbeat was {oldest:?} old at one point"
    );
}
