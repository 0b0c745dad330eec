//! `kcap-watch inspect` against real files: the fold scenarios of docs/behaviour.md
//! L8 (2, 3, 6 and 10) through `--line-times --now`, the fixtures, bad paths, and the
//! facts docs/behaviour.md R4 adds (binding window, queued mail, stop owed at exit, idle from
//! the watcher's start, a child header without a parent).

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use support::rollout::Line;

fn kcap_watch() -> Command {
    support::harness::kcap_watch()
}

fn inspect(path: &Path, now: &str) -> Value {
    let out = kcap_watch()
        .args(["inspect", "--json", "--line-times", "--now", now])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "inspect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is exactly one JSON object")
}

const META: &str = r#"{"timestamp":"2026-07-28T09:59:00.000Z","type":"session_meta","payload":{"id":"019fa981-6ea2-7000-a000-000000000002","session_id":"019fa981-2dca-7000-a000-000000000001","thread_source":"subagent","agent_path":"/root/spec_quality"}}"#;

fn line(at: &str, kind: &'static str, payload: &str) -> String {
    Line::new(kind, payload).at(at)
}

fn rollout(dir: &Path, lines: &[String]) -> std::path::PathBuf {
    let path = dir.join("rollout.jsonl");
    let mut text = String::from(META);
    text.push('\n');
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn started(at: &str) -> String {
    line(at, "event_msg", r#"{"type":"task_started","turn_id":"t1"}"#)
}

fn call(at: &str, id: &str) -> String {
    line(
        at,
        "response_item",
        &format!(
            r#"{{"type":"function_call","name":"exec_command","arguments":"{{}}","call_id":"{id}"}}"#
        ),
    )
}

#[test]
fn scenario_2_turn_aborted_clears_the_unanswered_call_and_the_stop_is_due_five_minutes_later() {
    let dir = tempfile::tempdir().unwrap();
    let path = rollout(
        dir.path(),
        &[
            started("09:59:00.000"),
            call("09:59:30.000", "call-1"),
            line(
                "10:00:00.000",
                "event_msg",
                r#"{"type":"turn_aborted","turn_id":"t1","reason":"interrupted"}"#,
            ),
        ],
    );
    let r = inspect(&path, "2026-07-28T10:04:00Z");
    assert_eq!(r["turn"]["state"], "aborted");
    assert_eq!(r["pending_tools"], serde_json::json!([]));
    assert_eq!(r["due"]["subagent_stop"], "2026-07-28T10:05:00.000Z");
    assert_eq!(r["agent_type"], "spec_quality");
}

#[test]
fn scenario_2_a_call_after_task_complete_reopens_the_turn_and_shows_as_pending() {
    let dir = tempfile::tempdir().unwrap();
    let path = rollout(
        dir.path(),
        &[
            started("09:59:00.000"),
            line(
                "10:00:00.000",
                "event_msg",
                r#"{"type":"task_complete","turn_id":"t1","last_agent_message":"done"}"#,
            ),
            call("10:01:00.000", "call-2"),
        ],
    );
    let r = inspect(&path, "2026-07-28T10:30:00Z");
    assert_eq!(r["turn"]["state"], "open");
    assert_eq!(r["due"]["subagent_stop"], Value::Null);
    assert_eq!(
        r["pending_tools"],
        serde_json::json!([{"call_id": "call-2", "name": "exec_command", "since": "2026-07-28T10:01:00.000Z"}])
    );
}

#[test]
fn scenario_3_a_token_count_after_completion_moves_the_stop_but_keeps_the_turn_completed() {
    let dir = tempfile::tempdir().unwrap();
    let path = rollout(
        dir.path(),
        &[
            started("09:59:00.000"),
            line(
                "10:00:00.000",
                "event_msg",
                r#"{"type":"task_complete","turn_id":"t1","last_agent_message":null}"#,
            ),
            line(
                "10:02:00.000",
                "event_msg",
                r#"{"type":"token_count","info":null,"rate_limits":null}"#,
            ),
        ],
    );
    let r = inspect(&path, "2026-07-28T10:03:00Z");
    assert_eq!(r["turn"]["state"], "completed");
    assert_eq!(r["turn"]["last_agent_message"], "");
    assert_eq!(r["due"]["subagent_stop"], "2026-07-28T10:07:00.000Z");
    assert_eq!(r["last_activity"], "2026-07-28T10:02:00.000Z");
}

#[test]
fn scenario_3_a_response_item_after_completion_reopens_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let path = rollout(
        dir.path(),
        &[
            started("09:59:00.000"),
            line(
                "10:00:00.000",
                "event_msg",
                r#"{"type":"task_complete","turn_id":"t1"}"#,
            ),
            line(
                "10:02:00.000",
                "response_item",
                r#"{"type":"message","role":"assistant","content":[]}"#,
            ),
        ],
    );
    let r = inspect(&path, "2026-07-28T10:10:00Z");
    assert_eq!(r["turn"]["state"], "open");
    assert_eq!(r["due"]["subagent_stop"], Value::Null);
}

#[test]
fn scenario_6_an_output_over_the_capture_limit_is_oversize_and_still_clears_its_call() {
    let dir = tempfile::tempdir().unwrap();
    // Over 4 MiB: shipped as the capture-loss marker, folded as usual.
    let big = "x".repeat(4 << 20);
    let path = rollout(
        dir.path(),
        &[
            started("09:59:00.000"),
            call("09:59:10.000", "call-big"),
            line(
                "09:59:50.000",
                "response_item",
                &format!(
                    r#"{{"type":"function_call_output","output":"{big}","call_id":"call-big"}}"#
                ),
            ),
        ],
    );
    let r = inspect(&path, "2026-07-28T10:00:00Z");
    assert_eq!(r["lines"]["oversize"], 1);
    assert_eq!(r["pending_tools"], serde_json::json!([]));
    assert_eq!(r["turn"]["state"], "open");
}

#[test]
fn scenario_10_usage_limit_without_token_count_is_unknowable_and_the_stop_comes_five_minutes_later()
{
    let dir = tempfile::tempdir().unwrap();
    let path = rollout(
        dir.path(),
        &[
            started("09:59:00.000"),
            line(
                "10:00:00.000",
                "event_msg",
                r#"{"type":"task_complete","turn_id":"t1","last_agent_message":null,"error":{"message":"limit","codex_error_info":"usage_limit_exceeded"}}"#,
            ),
        ],
    );
    let r = inspect(&path, "2026-07-28T10:01:00Z");
    assert_eq!(r["pause"]["state"], "unknowable");
    assert_eq!(r["pause"]["reason"], "usage_limit_exceeded");
    assert_eq!(r["pause"]["ends_at"], Value::Null);
    assert_eq!(r["due"]["subagent_stop"], "2026-07-28T10:05:00.000Z");
    assert_eq!(r["due"]["lifetime_ceiling"], Value::Null);
}

#[test]
fn the_usage_limit_fixture_shows_the_pause_expired_at_its_reset_and_a_session_role() {
    let r = inspect(
        Path::new("fixtures/codex/session-usage-limit.jsonl"),
        "2026-07-28T12:00:00Z",
    );
    assert_eq!(r["role"], "session");
    assert_eq!(r["agent_id"], Value::Null);
    // The session resumed at 11:50, after the reported end: the pause had closed itself.
    assert_eq!(r["pause"]["state"], "expired");
    assert_eq!(r["pause"]["ends_at"], "2026-07-28T11:47:30.000Z");
    assert_eq!(r["due"]["subagent_stop"], Value::Null);
}

#[test]
fn the_two_turn_child_fixture_is_completed_and_its_84_kb_line_is_within_the_limit() {
    let r = inspect(
        Path::new("fixtures/codex/child-two-turns.jsonl"),
        "2026-07-28T16:20:00Z",
    );
    assert_eq!(r["role"], "child");
    assert_eq!(r["agent_type"], "Hypatia");
    assert_eq!(r["session_id"], "019fa9812dca7a319c553b1f0e6d2a01");
    assert_eq!(r["lines"]["complete"], 36);
    assert_eq!(r["lines"]["oversize"], 0);
    assert_eq!(r["turn"]["state"], "completed");
    assert_eq!(r["pending_tools"], serde_json::json!([]));
    let last = r["last_activity"].as_str().unwrap();
    let stop = r["due"]["subagent_stop"].as_str().unwrap();
    assert_eq!(
        &stop[..14],
        &last[..14],
        "stop due 5 minutes after the last line"
    );
}

#[test]
fn edge_cases_count_blank_malformed_and_the_partial_tail() {
    let r = inspect(
        Path::new("fixtures/codex/edge-cases.jsonl"),
        "2026-07-28T12:00:00Z",
    );
    assert_eq!(r["lines"]["complete"], 8);
    assert_eq!(r["lines"]["blank"], 2);
    assert_eq!(r["lines"]["malformed"], 2);
    assert!(r["lines"]["partial_tail_bytes"].as_u64().unwrap() > 0);
    assert_eq!(r["turn"]["state"], "completed");
    assert_eq!(r["turn"]["last_agent_message"], "caf\u{e9}");
    assert_eq!(r["session_id"], "019fa990aaaa7d048f337e4fb19c6d04");
}

#[test]
fn an_empty_file_inspects_as_a_session_with_unknown_ids() {
    let r = inspect(
        Path::new("fixtures/codex/empty.jsonl"),
        "2026-07-28T12:00:00Z",
    );
    assert_eq!(r["role"], "session");
    assert_eq!(r["session_id"], Value::Null);
    assert_eq!(r["lines"]["complete"], 0);
}

fn run_inspect(path: &Path) -> Output {
    kcap_watch().args(["inspect"]).arg(path).output().unwrap()
}

#[test]
fn a_directory_or_missing_file_exits_2_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_inspect(dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory"));
    let out = run_inspect(&dir.path().join("nope.jsonl"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.jsonl"));
    assert!(out.stdout.is_empty(), "errors never go to stdout");
}

#[test]
fn a_bad_now_flag_exits_2_naming_the_flag() {
    let out = kcap_watch()
        .args([
            "inspect",
            "--now",
            "yesterday",
            "fixtures/codex/empty.jsonl",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--now"));
}

#[test]
fn text_output_is_for_people_and_names_the_turn_and_due_times() {
    let out = kcap_watch()
        .args(["inspect", "--line-times", "--now", "2026-07-28T16:20:00Z"])
        .arg("fixtures/codex/child-two-turns.jsonl")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("completed"));
    assert!(text.contains("due: stop"));
    assert!(text.contains("Hypatia"));
}

#[test]
fn scenario_7_inspect_shows_a_stall_after_65_minutes_of_silence_in_an_open_turn() {
    let dir = tempfile::tempdir().unwrap();
    let path = rollout(dir.path(), &[started("10:00:00.000")]);
    let before = inspect(&path, "2026-07-28T11:05:00Z");
    assert_eq!(before["stalled"], false);
    assert_eq!(before["due"]["stall_warning"], "2026-07-28T11:05:00.001Z");
    let after = inspect(&path, "2026-07-28T11:06:00Z");
    assert_eq!(after["stalled"], true);
    assert_eq!(after["turn"]["state"], "open");
}

// ---------------------------------------------------------------------------------------------
// docs/behaviour.md R4: each new fact `inspect` shows, on the fixtures of the real shapes.

fn text_of(path: &str, now: &str) -> String {
    let out = kcap_watch()
        .args(["inspect", "--line-times", "--now", now, path])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_99_percent_usage_limit_shows_the_five_hour_window_binding_and_a_stop_with_codexs_message() {
    let r = inspect(
        Path::new("fixtures/codex/child-usage-limit-99.jsonl"),
        "2026-07-28T22:00:00Z",
    );
    let p = &r["pause"];
    assert_eq!(p["state"], "open");
    assert_eq!(p["ends_at"], "2026-07-28T22:45:30.000Z");
    assert_eq!(p["binding"]["window"], "primary");
    assert_eq!(p["binding"]["used_percent"], 99.0);
    assert_eq!(p["binding"]["window_minutes"], 300.0);
    assert_eq!(p["binding"]["resets_at"], "2026-07-28T22:45:00.000Z");
    assert!(
        p["binding"]["reason"]
            .as_str()
            .unwrap()
            .contains("no window at 100%")
    );
    // The pause does not hold the stop: due five minutes after the turn ended.
    assert_eq!(r["due"]["subagent_stop"], "2026-07-28T22:03:00.012Z");
    let msg = r["turn"]["last_agent_message"].as_str().unwrap();
    assert!(msg.contains("try again at 10:45 PM"), "{msg}");
    // The reap waits for the pause's end: a full window after 22:45:30.
    assert_eq!(r["due"]["idle_end"], "2026-07-29T04:45:30.001Z");
    assert_eq!(r["idle_since"]["from"], "close of the last pause");
    let text = text_of(
        "fixtures/codex/child-usage-limit-99.jsonl",
        "2026-07-28T22:00:00Z",
    );
    assert!(
        text.contains("binding window primary at 99% (300 min) resets 2026-07-28T22:45:00.000Z"),
        "{text}"
    );
}

#[test]
fn queued_mail_is_counted_and_leaves_the_turn_completed_and_the_stop_where_it_was() {
    let r = inspect(
        Path::new("fixtures/codex/child-queued-mail.jsonl"),
        "2026-07-28T14:06:00Z",
    );
    assert_eq!(r["lines"]["queued_mail"], 2);
    assert_eq!(r["turn"]["state"], "completed");
    assert_eq!(r["last_activity"], "2026-07-28T14:03:37.130Z");
    assert_eq!(r["due"]["subagent_stop"], "2026-07-28T14:08:37.130Z");
    assert_eq!(r["due"]["stall_warning"], Value::Null);
    let text = text_of(
        "fixtures/codex/child-queued-mail.jsonl",
        "2026-07-28T14:06:00Z",
    );
    assert!(text.contains("queued mail    2 lines"), "{text}");
}

#[test]
fn a_crashed_child_shows_the_stop_it_owes_at_exit_with_its_last_agent_message() {
    let r = inspect(
        Path::new("fixtures/codex/child-crashed-mid-turn.jsonl"),
        "2026-07-28T12:00:00Z",
    );
    assert_eq!(r["turn"]["state"], "open");
    assert_eq!(r["due"]["subagent_stop"], Value::Null);
    let owed = &r["stop_owed_at_exit"];
    assert_eq!(owed["because"], "watcher_ending");
    assert_eq!(owed["turn"], "open");
    assert_eq!(
        owed["last_assistant_message"],
        "Spec updated with POST /invoices; regenerating the client now."
    );
    // A session owes none.
    let r = inspect(
        Path::new("fixtures/codex/session-resumed.jsonl"),
        "2026-07-28T12:00:00Z",
    );
    assert_eq!(r["stop_owed_at_exit"], Value::Null);
}

#[test]
fn idle_is_counted_from_the_watcher_start_which_for_inspect_is_now() {
    let r = inspect(
        Path::new("fixtures/codex/session-resumed.jsonl"),
        "2026-07-28T13:00:00Z",
    );
    assert_eq!(r["last_activity"], "2026-07-28T09:35:04.530Z");
    assert_eq!(r["watcher_start"], "2026-07-28T13:00:00.000Z");
    assert_eq!(r["idle_since"]["at"], "2026-07-28T13:00:00.000Z");
    assert_eq!(r["idle_since"]["from"], "watcher start");
    // A full idle window (60 min) after the start, not one after the old last line.
    assert_eq!(r["due"]["idle_end"], "2026-07-28T14:00:00.001Z");
    // Observed at the last line itself, idle counts from it.
    let r = inspect(
        Path::new("fixtures/codex/session-resumed.jsonl"),
        "2026-07-28T09:35:04.530Z",
    );
    assert_eq!(r["idle_since"]["from"], "last activity");
    assert_eq!(r["due"]["idle_end"], "2026-07-28T10:35:04.531Z");
}

#[test]
fn a_parent_less_review_child_is_a_child_and_inspect_says_what_watch_needs() {
    let r = inspect(
        Path::new("fixtures/codex/child-review-no-parent.jsonl"),
        "2026-07-28T16:30:00Z",
    );
    assert_eq!(r["role"], "child");
    assert_eq!(r["session_id"], Value::Null);
    let m = r["missing_key"].as_str().unwrap();
    assert!(m.contains("is a sub-agent (review)"), "{m}");
    assert!(m.contains("pass SESSION_ID"), "{m}");
    assert!(!m.contains("no readable session_meta"), "{m}");
    // A complete header has no missing key.
    let r = inspect(
        Path::new("fixtures/codex/child-current-shapes.jsonl"),
        "2026-07-28T18:03:00Z",
    );
    assert_eq!(r["missing_key"], Value::Null);
}

#[test]
fn the_current_shapes_fixture_inspects_without_malformed_lines_or_anything_in_flight() {
    let r = inspect(
        Path::new("fixtures/codex/child-current-shapes.jsonl"),
        "2026-07-28T18:03:00Z",
    );
    assert_eq!(r["lines"]["complete"], 30);
    assert_eq!(r["lines"]["malformed"], 0);
    assert_eq!(r["lines"]["queued_mail"], 0);
    assert_eq!(r["agent_type"], "planner");
    assert_eq!(r["turn"]["state"], "completed");
    assert_eq!(r["pending_tools"], serde_json::json!([]));
    assert_eq!(r["due"]["subagent_stop"], "2026-07-28T18:07:47.402Z");
    assert_eq!(r["pause"], Value::Null);
}

/// Issue 20, item 10 (docs/behaviour.md S6): newer Codex starts a sub-agent's rollout with a
/// copy of its parent's history (the parent's header, a usage-limited turn, the open turn and
/// its `spawn_agent` call). Before the fix the child showed the parent's open turn with that
/// call in flight (so its reap waited for the 12 h orphan rule and a stall warning was
/// scheduled) and the parent's usage-limit pause.
#[test]
fn a_child_shows_its_parents_open_turn_and_spawning_call_in_flight() {
    let fixture = "fixtures/codex/child-inherited-history.jsonl";
    let r = inspect(Path::new(fixture), "2026-07-29T09:20:00Z");
    assert_eq!(r["role"], "child");
    assert_eq!(r["agent_id"], "019fb2c43e107a4b8c216d0f9e5b7003");
    assert_eq!(r["session_id"], "019fb1a00c417e529d3a51f0c2a7e001");
    assert_eq!(r["lines"]["complete"], 20);
    assert_eq!(
        r["lines"]["inherited"], 17,
        "ordinals 1 to 17 are the parent's"
    );
    assert_eq!(r["turn"]["state"], "none");
    assert_eq!(r["turn"]["turn_id"], Value::Null);
    assert_eq!(r["pending_tools"], serde_json::json!([]));
    assert_eq!(r["pause"], Value::Null);
    assert_eq!(r["last_activity"], "2026-07-29T09:12:04.497Z");
    assert_eq!(r["due"]["stall_warning"], Value::Null);
    assert_eq!(r["due"]["subagent_stop"], Value::Null);
    // The reap is due 6 h (the default window) after the modelled watcher's start, not held
    // until the parent's spawning call is 12 h old (21:12).
    assert_eq!(r["due"]["idle_end"], "2026-07-29T15:20:00.001Z");
    let owed = &r["stop_owed_at_exit"];
    assert_eq!(owed["turn"], "none");
    assert_eq!(
        owed["last_assistant_message"], "",
        "not the parent's usage-limit message"
    );
    let text = text_of(fixture, "2026-07-29T09:20:00Z");
    assert!(text.contains("inherited      17 lines"), "{text}");
}

/// S6, the other side: lines without an `ordinal`, and headers without
/// `subagent_history_start_ordinal`, fold as before, and the child's own lines (ordinal at or
/// above the start) fold as usual.
#[test]
fn only_lines_below_the_history_start_are_left_unfolded() {
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{"timestamp":"2026-07-28T09:59:00.000Z","type":"session_meta","ordinal":0,"payload":{"id":"019fa981-6ea2-7000-a000-000000000002","session_id":"019fa981-2dca-7000-a000-000000000001","thread_source":"subagent","agent_path":"/root/spec_quality","history_mode":"paginated","subagent_history_start_ordinal":3}}"#;
    let with = |o: Option<u64>, l: String| match o {
        Some(o) => l.replacen("{", &format!("{{\"ordinal\":{o},"), 1),
        None => l,
    };
    let write = |header: &str, lines: &[String]| {
        let path = dir.path().join("r.jsonl");
        std::fs::write(&path, format!("{header}\n{}\n", lines.join("\n"))).unwrap();
        inspect(&path, "2026-07-28T10:05:00Z")
    };
    // Ordinals 1 and 2 are inherited; 3 is the child's own turn start; a line with no
    // ordinal folds whatever its place.
    let lines = [
        with(Some(1), started("09:59:01.000")),
        with(Some(2), call("09:59:02.000", "parent-call")),
        with(Some(3), started("09:59:03.000")),
        with(None, call("09:59:04.000", "own-call")),
    ];
    let r = write(header, &lines);
    assert_eq!(r["lines"]["inherited"], 2);
    assert_eq!(r["turn"]["state"], "open");
    let pending: Vec<&str> = r["pending_tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(pending, vec!["own-call"]);
    // The first two lines alone: unfolded under the header with the field, folded under one
    // without it (the turn is open with the call in flight).
    let r = write(header, &lines[..2]);
    assert_eq!(r["turn"]["state"], "none");
    assert_eq!(r["pending_tools"], serde_json::json!([]));
    let r = write(META, &lines[..2]);
    assert_eq!(r["lines"]["inherited"], 0);
    assert_eq!(r["turn"]["state"], "open");
    assert_eq!(r["pending_tools"][0]["call_id"], "parent-call");
}

/// The agent's last message and a tool's name are the rollout's text: printed for people, a
/// newline or an escape sequence in them is written escaped, so no line of the report can be
/// forged and nothing reaches the terminal as a control sequence.
#[test]
fn untrusted_text_in_the_report_cannot_forge_a_line_or_reach_the_terminal_as_an_escape() {
    let report = |lines: &[String]| {
        let dir = tempfile::tempdir().unwrap();
        let path = rollout(dir.path(), lines);
        let out = kcap_watch()
            .args(["inspect", "--line-times", "--now", "2026-07-28T10:04:00Z"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        text
    };
    // A call in flight whose name tries to add a line.
    let text = report(&[
        started("09:59:00.000"),
        line(
            "09:59:10.000",
            "response_item",
            r#"{"type":"function_call","name":"x\nstalled        yes\u001b[2J","arguments":"{}","call_id":"c1"}"#,
        ),
    ]);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("stalled")).count(),
        1,
        "{text}"
    );
    assert!(text.contains(r"x\nstalled        yes"), "{text}");
    // A last message that tries to add one.
    let text = report(&[
        started("09:59:00.000"),
        line(
            "09:59:20.000",
            "event_msg",
            r#"{"type":"task_complete","turn_id":"t1","last_agent_message":"done\nstalled        yes\u001b]0;pwned\u0007"}"#,
        ),
    ]);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("stalled")).count(),
        1,
        "{text}"
    );
    assert!(text.contains(r"done\nstalled"), "{text}");
}
