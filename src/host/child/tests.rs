//! The shell of one child against a real file: orderings of disk and loop that the pipeline's
//! pure tests cannot reach.

use super::*;
use std::sync::Arc;

use crate::config::Settings;
use crate::host::clock::SystemClock;

const META: &str = r#"{"timestamp":"2026-07-28T10:00:00.000Z","type":"session_meta","payload":{"id":"0199aaaa-0000-7000-8000-000000000001","cwd":"/w"}}"#;
const SESSION: &str = "0199aaaa000070008000000000000001";

fn message(i: u32) -> String {
    format!(
        r#"{{"timestamp":"2026-07-28T10:00:0{i}.000Z","type":"response_item","payload":{{"type":"message","role":"assistant","content":[{{"type":"output_text","text":"line {i}"}}]}}}}"#
    )
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// A hub with default settings keeping its files under `config`, on the system clock.
fn hub(config: &Path) -> (Hub, tokio::sync::mpsc::Receiver<(u64, crate::host::Done)>) {
    Hub::new(
        Settings::with_defaults(config.to_path_buf()),
        Arc::new(SystemClock),
    )
    .unwrap()
}

/// A child following `rollout` as `supervise` runs one (no files of its own), seeded from
/// what the file holds now.
fn supervised(hub: &Hub, rollout: &Path) -> Child {
    let opts = WatchOptions::following(rollout.to_path_buf());
    Child::new(0, opts, hub, Files::Supervised).unwrap()
}

/// Issue 20, item 8 (`e2e_follow`'s truncation test failed under load): lines appended after
/// the fold's read and before the first shipping read were shipped although the fold had not
/// read them, so truncating the file back to what the fold had read was no rewrite to the
/// guard, and the watcher went on with lines spooled that the file no longer held.
#[tokio::test(flavor = "current_thread")]
async fn the_shipping_cursor_passes_the_fold_and_a_truncation_goes_unnoticed() {
    let dir = tempfile::tempdir().unwrap();
    let rollout = dir.path().join("rollout.jsonl");
    std::fs::write(&rollout, format!("{META}\n")).unwrap();
    let config = dir.path().join("config");
    let (hub, _rx) = hub(&config);
    // Seeded: the fold has read the header.
    let mut child = supervised(&hub, &rollout);
    // Written while the loop starts (a heavily loaded machine widens this window).
    append(&rollout, &format!("{}\n{}\n", message(1), message(2)));
    child.start(&hub).unwrap();
    let spooled = |c: &Path| spool::scan_spooled_lines(c, SESSION, None).unwrap().highest;
    assert_eq!(
        spooled(&config),
        Some(0),
        "only what the fold has read is shipped"
    );

    // The fold reads the two lines: now they are shipped too.
    child.on_file_change(&hub).unwrap();
    assert_eq!(spooled(&config), Some(2));

    // Truncated back to the header: every shipped line is behind the fold's position, so the
    // guard sees the rewrite.
    std::fs::write(&rollout, format!("{META}\n")).unwrap();
    let err = child.on_file_change(&hub).unwrap_err();
    assert!(
        err.downcast_ref::<RolloutRewritten>().is_some(),
        "a rewrite: {err:#}"
    );
}

/// A rollout truncated after the fold read it and before shipping began (found by
/// `process_behaviour`'s rewrite case under load): the shipping read found no line, fed the
/// pipeline an empty batch, was asked for the same lines again at once and spun for ever, so
/// the watcher never got back to the check that ends it with exit 3.
#[test]
fn a_file_truncated_before_the_first_shipping_read_spins_the_loop_for_ever() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let result = rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let rollout = dir.path().join("rollout.jsonl");
            std::fs::write(
                &rollout,
                format!("{META}\n{}\n{}\n", message(1), message(2)),
            )
            .unwrap();
            let (hub, _rx) = hub(&dir.path().join("config"));
            let mut child = supervised(&hub, &rollout);
            std::fs::write(&rollout, b"").unwrap();
            child.start(&hub).unwrap();
            child
                .on_file_change(&hub)
                .map_err(|e| e.downcast_ref::<RolloutRewritten>().is_some())
        });
        let _ = tx.send(result);
    });
    let result = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the watcher's loop never returned");
    assert_eq!(result.err(), Some(true), "a rewrite (exit 3)");
}

/// `e2e_delivery`'s archive test failed once under load: Codex renamed the rollout into its
/// archive and appended the turn's end between the guard's check and the read, the lines were
/// folded under the old path, and the stop (due at once with no grace) named a file that was
/// no longer there.
#[tokio::test(flavor = "current_thread")]
async fn lines_read_after_an_archive_in_the_same_pass_stop_under_the_archives_path() {
    const AGENT: &str = "0199bbbb-0000-7000-8000-000000000002";
    let dir = tempfile::tempdir().unwrap();
    let day = dir.path().join("codex/sessions/2026/07/28");
    let archive = dir.path().join("codex/archived_sessions");
    std::fs::create_dir_all(&day).unwrap();
    std::fs::create_dir_all(&archive).unwrap();
    let rollout = day.join("rollout-2026-07-28T10-00-00-child.jsonl");
    let archived = archive.join("rollout-2026-07-28T10-00-00-child.jsonl");
    let child_meta = format!(
        r#"{{"timestamp":"2026-07-28T10:00:00.000Z","type":"session_meta","payload":{{"id":"{AGENT}","session_id":"0199aaaa-0000-7000-8000-000000000001","parent_thread_id":"0199aaaa-0000-7000-8000-000000000001","thread_source":"subagent","agent_path":"/root/a","agent_nickname":"Ada"}}}}"#
    );
    let started = r#"{"timestamp":"2026-07-28T10:00:01.000Z","type":"event_msg","payload":{"type":"task_started","turn_id":"t1"}}"#;
    let complete = r#"{"timestamp":"2026-07-28T10:00:03.000Z","type":"event_msg","payload":{"type":"task_complete","turn_id":"t1","last_agent_message":"done"}}"#;
    std::fs::write(&rollout, format!("{child_meta}\n{started}\n")).unwrap();
    let config = dir.path().join("config");
    let mut settings = Settings::with_defaults(config.clone());
    settings.stop_grace = std::time::Duration::ZERO;
    let (hub, _rx) = Hub::new(settings, Arc::new(SystemClock)).unwrap();
    let mut child = supervised(&hub, &rollout);
    child.start(&hub).unwrap();
    assert!(!child.stop_posted());

    let (from, to) = (rollout.clone(), archived.clone());
    let end = format!("{}\n{complete}\n", message(2));
    child.after_check = Some(Box::new(move || {
        std::fs::rename(&from, &to).unwrap();
        append(&to, &end);
    }));
    append(&rollout, "\n");
    child.on_file_change(&hub).unwrap();

    assert!(child.stop_posted(), "the turn's end was read");
    assert_eq!(child.path(), archived.as_path());
    let hooks = spool::peek(&spool::hook_spool_path(&config, SESSION)).unwrap();
    let stop = hooks
        .iter()
        .find(|r| r.contains("subagent-stop"))
        .expect("the stop was spooled");
    let record: serde_json::Value = serde_json::from_str(stop).unwrap();
    let body: serde_json::Value = serde_json::from_str(record["body"].as_str().unwrap()).unwrap();
    // Compared as paths: the test spells the archive with `/`, Windows' join with `\`.
    assert_eq!(
        body["agent_transcript_path"].as_str().map(Path::new),
        Some(archived.as_path()),
        "the stop names where the rollout is now"
    );
}

/// A changed path is routed to the child whose path it names, however either is spelled: the
/// normal forms compare equal exactly when the paths do (`Path`'s `==`).
#[test]
fn a_changed_path_reaches_its_child_however_it_is_spelled() {
    let dir = tempfile::tempdir().unwrap();
    let rollout = dir.path().join("r.jsonl");
    std::fs::write(&rollout, format!("{META}\n")).unwrap();
    let (hub, _rx) = hub(&dir.path().join("config"));
    let child = supervised(&hub, &rollout);
    let sep = std::path::MAIN_SEPARATOR;
    let base = dir.path().display().to_string();
    for same in [
        format!("{base}{sep}r.jsonl"),
        format!("{base}{sep}{sep}r.jsonl"),
        format!("{base}{sep}.{sep}r.jsonl"),
    ] {
        let changed = PathBuf::from(&same);
        assert_eq!(changed, rollout, "{same} names the rollout");
        assert!(
            child.follows(&normal_form(&changed)),
            "{same} routed elsewhere"
        );
    }
    for other in [
        format!("{base}{sep}r.jsonl.bak"),
        format!("{base}{sep}q.jsonl"),
        format!("{base}{sep}r"),
        format!("{base}{sep}..{sep}r.jsonl"),
        base.clone(),
    ] {
        let changed = PathBuf::from(&other);
        assert_ne!(changed, rollout, "{other} is another path");
        assert!(
            !child.follows(&normal_form(&changed)),
            "{other} routed to the rollout's child"
        );
    }
    // And on Windows, either separator (where `/` is one: not in a verbatim `\\?\` path).
    #[cfg(windows)]
    {
        let slashed = PathBuf::from(base.replace('\\', "/") + "/r.jsonl");
        assert_eq!(
            child.follows(&normal_form(&slashed)),
            slashed == rollout,
            "{}",
            slashed.display()
        );
    }
}
