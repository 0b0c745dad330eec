//! What the real binary ships of each line, as the newest kcap CLI does (docs/capture.md):
//! JSON lines up to 4 MiB whole and redacted, in every placement a rollout gives a secret; the
//! loss marker, exact, at the line's own number, for a line over 4 MiB, a line whose redacted
//! form outgrows 4 MiB, and a line that is not JSON; nothing of a malformed line on the server,
//! in the spool or in a log; losses counted by reason.
//!
//! The expected markers are computed here from the raw lines (their UTF-8 length and UTF-16
//! count), not by the code under test.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::support::harness::{
    self, AGENT_ND, SESSION_ND, Sandbox, child_meta, task_complete, task_started,
};
use crate::support::secrets::{PLACEMENTS, all_text, place};
use crate::support::{FakeKcap, serial};

const MIB: usize = 1 << 20;
const LIMIT: usize = 4 * MIB;
const SECRET: &str = "ghp_Zq8vR2mK9xLt4Wn7Pb3Yc6Hd1Jf5Gs0AeUi";
/// Text of the malformed line no reader of the server, the spool or a log may ever see.
const CANARY: &str = "malformed-canary-7f3e2a";

/// `text` (the secret, a blank, then `n` `x`s) placed as `make` places it, with `n` chosen
/// and blanks added after the JSON so that the line is exactly `target` bytes. Returns the
/// line and `n`.
fn line_of(target: usize, make: impl Fn(&str) -> String) -> (String, usize) {
    let text = |n: usize| format!("{SECRET} {}", "x".repeat(n));
    // Each `x` adds a byte or more (six where a placement writes it as `\u0078`): estimate from
    // two probes, then step down to fit.
    let base = make(&text(0)).len();
    let slope = (make(&text(3000)).len() - base) as f64 / 3000.0;
    let mut n = ((target.saturating_sub(base)) as f64 / slope) as usize;
    let mut line = make(&text(n));
    while line.len() > target {
        n -= 1 + (line.len() - target) / 8;
        line = make(&text(n));
    }
    assert!(
        target - line.len() < 64,
        "{} short of {target}",
        target - line.len()
    );
    while line.len() < target {
        line.push(' ');
    }
    (line, n)
}

/// The marker the kcap CLI sends for `raw` lost for `reason`.
fn marker(reason: &str, raw: &str) -> String {
    format!(
        r#"{{"type":"kcap_capture_loss","version":1,"reason":"{reason}","input_utf16_length":{},"input_utf8_bytes":{}}}"#,
        raw.encode_utf16().count(),
        raw.len()
    )
}

struct Case {
    /// The rollout's lines, header first.
    lines: Vec<String>,
    /// Line number -> what the server must hold: `Ok(n)` for a line shipped whole (the text
    /// after the secret was `n` `x`s), `Err(marker)` for a lost one.
    want: BTreeMap<u64, Result<usize, String>>,
}

fn case() -> Case {
    let mut lines = vec![child_meta(), task_started("t1")];
    let mut want = BTreeMap::new();
    for target in [65_537, MIB, LIMIT - 1] {
        for placement in PLACEMENTS {
            let make = |text: &str| place(placement, text);
            let (line, xs) = line_of(target, make);
            assert_eq!(line.len(), target, "{placement}");
            let n = lines.len() as u64;
            if serde_json::from_str::<Value>(&line).is_ok() {
                want.insert(n, Ok(xs));
            } else {
                // Text outside JSON (a crash fragment) is never shipped, redacted or not.
                want.insert(n, Err(marker("malformed_input", &line)));
            }
            lines.push(line);
        }
    }
    // One byte over the limit, with a secret: lost whole.
    let (over, _) = line_of(LIMIT + 1, |t| {
        serde_json::json!({"type": "response_item", "payload": {"type": "function_call_output",
            "call_id": "c-over", "output": t}})
        .to_string()
    });
    want.insert(lines.len() as u64, Err(marker("input_limit", &over)));
    lines.push(over);
    // Within the limit, but `[REDACTED]` is longer than each of its short secrets: twenty of
    // them lengthen the line past 4 MiB.
    let secrets = r#""password":"a","#.repeat(20);
    let grows = line_of(LIMIT - 100, |t| {
        format!(
            r#"{{{secrets}"type":"response_item","payload":{{"type":"function_call_output","call_id":"c-grow","output":{}}}}}"#,
            serde_json::to_string(t).unwrap()
        )
    })
    .0;
    assert!(grows.len() <= LIMIT);
    want.insert(lines.len() as u64, Err(marker("output_limit", &grows)));
    lines.push(grows);
    // A crash fragment: a secret and the canary in JSON cut short, with characters above ASCII.
    let broken = format!(
        r#"{{"type":"response_item","payload":{{"type":"function_call_output","output":"{CANARY} é😀 token={SECRET}"#
    );
    want.insert(lines.len() as u64, Err(marker("malformed_input", &broken)));
    lines.push(broken);
    lines.push(task_complete("t1", "done"));
    Case { lines, want }
}

/// Checks what the server (or a spool) holds against the case.
fn check(case: &Case, got: &BTreeMap<u64, String>) {
    assert_eq!(
        got.len(),
        case.lines.len(),
        "every line, lost or not, ships"
    );
    for (n, want) in &case.want {
        let shipped = &got[n];
        match want {
            Err(marker) => assert_eq!(shipped, marker, "line {n}"),
            Ok(xs) => {
                let v: Value = serde_json::from_str(shipped)
                    .unwrap_or_else(|e| panic!("line {n} is not JSON ({e})"));
                let mut text = String::new();
                all_text(&v, &mut text);
                // Whole: the secret's place shows the marker, and every byte after it came.
                let whole = format!("[REDACTED] {}", "x".repeat(*xs));
                assert!(text.contains(&whole), "line {n} was not shipped whole");
                assert!(!text.contains(SECRET), "line {n} holds the secret");
            }
        }
    }
    let all: String = got.values().cloned().collect();
    assert!(!all.contains(SECRET), "a raw secret was shipped");
    assert!(
        !all.contains(CANARY),
        "text of a malformed line was shipped"
    );
}

#[test]
fn json_lines_up_to_4_mib_ship_whole_redacted_and_the_rest_as_the_exact_loss_marker() {
    let _serial = serial();
    let case = case();
    let sandbox = Sandbox::new();
    sandbox.append_lines(&case.lines);
    let server = FakeKcap::start();
    let mut w = sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &["--once"]));
    let status = w.wait_or_fail(Duration::from_secs(120), "watch --once");
    assert!(status.success(), "{}", w.stderr());
    let got = server.lines(SESSION_ND, AGENT_ND);
    if got.len() != case.lines.len() {
        eprintln!("{}", w.stderr());
    }
    check(&case, &got);

    // Counted by reason: the status figures and the exit summary.
    let summary = w.events_named("capture_losses");
    assert_eq!(summary.len(), 1, "{}", w.stderr());
    assert_eq!(summary[0]["fields"]["input_limit"], 1);
    assert_eq!(summary[0]["fields"]["output_limit"], 1);
    // The plain-text placement of three sizes, and the fragment.
    assert_eq!(summary[0]["fields"]["malformed_input"], 4);
    // One warning per reason, however many lines: not one per line.
    let warned = w.events_named("capture_loss");
    assert_eq!(warned.len(), 3, "{warned:?}");
    let logs = format!("{}{}", w.stderr(), sandbox.log_files());
    assert!(
        !logs.contains(CANARY),
        "text of a malformed line was logged"
    );
    assert!(!logs.contains(SECRET), "a raw secret was logged");
}

#[test]
fn offline_the_spool_holds_the_same_markers_and_nothing_of_a_malformed_line() {
    let _serial = serial();
    // The spool file is capped at 8 MiB: the lines around the limit ship online (above); here
    // every lost line (their markers are small) and one whole line.
    let full = case();
    let mut lines = vec![child_meta(), task_started("t1")];
    let mut want = BTreeMap::new();
    for (n, w) in &full.want {
        if w.is_err() {
            want.insert(lines.len() as u64, w.clone());
            lines.push(full.lines[*n as usize].clone());
        }
    }
    let (small, xs) = line_of(65_537, |t| {
        serde_json::json!({"type": "response_item", "payload": {"type": "function_call_output",
            "call_id": "c-small", "output": t}})
        .to_string()
    });
    want.insert(lines.len() as u64, Ok(xs));
    lines.push(small);
    lines.push(task_complete("t1", "done"));
    let case = Case { lines, want };

    let sandbox = Sandbox::new();
    sandbox.append_lines(&case.lines);
    let mut w = sandbox.spawn(&mut sandbox.watch(None, &["--once"]));
    assert!(
        w.wait_or_fail(Duration::from_secs(60), "watch --once")
            .success()
    );
    let spool = sandbox
        .config
        .join(format!("transcript-spool/{SESSION_ND}.transcript.jsonl"));
    let text = std::fs::read_to_string(&spool).expect("the transcript spool");
    let mut got = BTreeMap::new();
    for record in text.lines() {
        let v: Value = serde_json::from_str(record).expect("a spool record is JSON");
        let numbers = v["line_numbers"].as_array().expect("line_numbers");
        for (n, l) in numbers.iter().zip(v["lines"].as_array().expect("lines")) {
            got.insert(
                n.as_u64().expect("a number"),
                l.as_str().expect("text").to_owned(),
            );
        }
    }
    check(&case, &got);
    assert!(!text.contains(CANARY));
    let logs = format!("{}{}", w.stderr(), sandbox.log_files());
    assert!(
        !logs.contains(CANARY),
        "text of a malformed line was logged"
    );
}

/// A spool written before the limit changed holds the old placeholder: `replay` delivers it as
/// it is, under its number (the server already counts that line as held).
#[test]
fn replay_delivers_an_older_versions_placeholder_as_it_is() {
    let sandbox = Sandbox::new();
    let old = r#"{"type":"redacted_oversize_line","reason":"line exceeded SecretRedactor size limit","original_bytes":70000}"#;
    let record = serde_json::json!({"session_id": SESSION_ND, "agent_id": AGENT_ND,
        "vendor": "codex", "lines": [old, "{\"type\":\"event_msg\"}"], "line_numbers": [7, 8]});
    let dir = sandbox.config.join("transcript-spool");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(format!("{SESSION_ND}.transcript.jsonl")),
        format!("{record}\n"),
    )
    .unwrap();
    let server = FakeKcap::start();
    let out = sandbox
        .cmd(Some(&server.url()))
        .arg("replay")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = server.lines(SESSION_ND, AGENT_ND);
    assert_eq!(got.get(&7).map(String::as_str), Some(old));
    assert_eq!(got.len(), 2);
}

/// `status` shows the losses of a running watcher, by reason.
#[test]
fn status_counts_a_running_watchers_losses_by_reason() {
    let sandbox = Sandbox::new();
    sandbox.append_lines(&[
        child_meta(),
        task_started("t1"),
        "not json at all".to_owned(),
        "{\"cut\": ".to_owned(),
        harness::message("still working"),
    ]);
    let server = FakeKcap::start();
    let mut w = sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &[]));
    let shown = harness::wait_until(Duration::from_secs(30), || {
        let out = sandbox
            .cmd(None)
            .args(["status", "--json"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v.to_string().contains(r#""malformed_input":2"#)
    });
    let out = sandbox.cmd(None).arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    w.kill9();
    assert!(shown, "status --json never showed the two losses");
    assert!(
        text.contains("shipped as capture-loss markers: 2 malformed_input"),
        "{text}"
    );
}

/// The deepest JSON a line may hold (128 levels of nesting in a string, in a string, twelve
/// strings deep): the redactor's walk recurses through all of it. It ships redacted and the
/// watcher lives, on Windows too, whose main thread's stack is a fraction of Linux's.
#[test]
fn the_deepest_json_a_line_may_hold_ships_redacted_without_exhausting_the_stack() {
    let _serial = serial();
    let mut deep = format!(r#"{{"api_key":"{SECRET}"}}"#);
    for _ in 0..11 {
        let inner = serde_json::to_string(&deep).expect("a string");
        deep = format!("{}{inner}{}", "[".repeat(126), "]".repeat(126));
    }
    let line = serde_json::json!({"type": "response_item", "payload": {
        "type": "function_call_output", "call_id": "c-deep", "output": deep}})
    .to_string();
    let lines = vec![
        child_meta(),
        task_started("t1"),
        line,
        task_complete("t1", "done"),
    ];
    let sandbox = Sandbox::new();
    sandbox.append_lines(&lines);
    let server = FakeKcap::start();
    let mut w = sandbox.spawn(&mut sandbox.watch(Some(&server.url()), &["--once"]));
    let status = w.wait_or_fail(Duration::from_secs(60), "watch --once");
    assert!(status.success(), "{}", w.stderr());
    let got = server.lines(SESSION_ND, AGENT_ND);
    assert_eq!(got.len(), lines.len(), "{}", w.stderr());
    let shipped = &got[&2];
    assert!(!shipped.contains(SECRET), "the secret shipped");
    assert!(shipped.contains("[REDACTED]"));
    assert!(serde_json::from_str::<Value>(shipped).is_ok(), "still JSON");
}
