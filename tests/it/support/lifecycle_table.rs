//! The lifecycle scenarios of docs/behaviour.md L8 (as docs/behaviour.md R4 revises
//! them) as one data table, run at three levels by three suites:
//!
//! - the pure core (`tests/it/scenarios.rs`): each line folded at its time, then
//!   `decide::subagent_stop_due` and the fold's pending calls;
//! - the running watcher loop under tokio's paused clock (`tests/it/lifecycle_loop.rs`): each line
//!   appended at its time, the stop spooled exactly at its due time and not a second before
//!   (or not within an hour when none is owed);
//! - the real binary (`tests/it/e2e_lifecycle.rs`): `inspect --json --line-times --now`, which
//!   reads each line's own timestamp, so no real time has to pass.
//!
//! A row states what it checks (its `name`), its lines as `HH:MM:SS` times on [`DAY`] after
//! a child header at 09:59:00 with the default 5-minute grace, and what must follow. The
//! scenarios whose outcome is not a due time (4: a posted stop latches; 5: a restart counts
//! from the file's time; 7: stall and reap around a pending call; 9: the lifetime ceiling)
//! keep their own tests at each level, named after the scenario.

use super::rollout::{self, Line};

pub use super::rollout::DAY;

/// The time of the child's header; the loop level's clock starts here.
pub const HEADER_AT: &str = "09:59:00";

/// One scenario of section 8.
pub struct Scenario {
    /// The spec's number for it.
    pub section: u8,
    /// What it checks, as a test name would say it.
    pub name: &'static str,
    /// Lines after the header, each with the `HH:MM:SS` it is written at (non-decreasing).
    pub lines: Vec<(&'static str, Line)>,
    /// When the sub-agent's stop is due (`HH:MM:SS`), or `None` when none is owed.
    pub stop_due: Option<&'static str>,
    /// Tool calls still unanswered after the last line.
    pub pending_calls: usize,
}

/// The child's header (no timestamp of its own at the loop level; [`HEADER_AT`] elsewhere).
pub fn header() -> Line {
    rollout::child_meta(
        "019fa9816ea27b028d115c2e9f7a4b02",
        "019fa9812dca7a319c553b1f0e6d2a01",
        "/root/spec_quality",
        "Hypatia",
    )
}

/// The session id [`header`] names, without dashes (the spools' file name).
pub const SESSION_ND: &str = "019fa9812dca7a319c553b1f0e6d2a01";

/// `HH:MM:SS` as seconds after midnight (every scenario stays within the day).
pub fn seconds(hms: &str) -> u64 {
    let mut parts = hms.split(':').map(|p| p.parse::<u64>().expect("HH:MM:SS"));
    let (h, m, s) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    h * 3600 + m * 60 + s
}

/// Every scenario of the table.
pub fn scenarios() -> Vec<Scenario> {
    use rollout::*;
    // Over the 4 MiB capture limit: its raw line still clears the call.
    let big_output = "y".repeat(4 << 20);
    vec![
        Scenario {
            section: 1,
            name: "a_completed_turn_owes_its_stop_when_the_grace_has_passed_not_a_second_earlier",
            lines: vec![
                ("09:59:30", task_started("t1")),
                ("10:00:00", task_complete("t1", "done")),
            ],
            stop_due: Some("10:05:00"),
            pending_calls: 0,
        },
        Scenario {
            section: 2,
            name: "a_turn_aborted_clears_an_unanswered_call_and_owes_the_stop_after_the_grace",
            lines: vec![
                ("09:59:10", task_started("t1")),
                ("09:59:30", call("call-1", "exec_command", "{}")),
                ("10:00:00", turn_aborted("t1")),
            ],
            stop_due: Some("10:05:00"),
            pending_calls: 0,
        },
        Scenario {
            section: 2,
            name: "a_call_after_task_complete_reopens_the_turn_and_owes_no_stop",
            lines: vec![
                ("09:59:10", task_started("t1")),
                ("10:00:00", task_complete("t1", "done")),
                ("10:01:00", call("call-2", "exec_command", "{}")),
            ],
            stop_due: None,
            pending_calls: 1,
        },
        Scenario {
            section: 3,
            name: "a_token_count_after_completion_is_activity_and_moves_the_stop",
            lines: vec![
                ("09:59:10", task_started("t1")),
                ("10:00:00", task_complete("t1", "done")),
                (
                    "10:02:00",
                    event(r#"{"type":"token_count","info":null,"rate_limits":null}"#),
                ),
            ],
            stop_due: Some("10:07:00"),
            pending_calls: 0,
        },
        Scenario {
            section: 3,
            name: "a_response_item_after_completion_reopens_the_turn_and_owes_no_stop",
            lines: vec![
                ("09:59:10", task_started("t1")),
                ("10:00:00", task_complete("t1", "done")),
                ("10:02:00", message("one more thing")),
            ],
            stop_due: None,
            pending_calls: 0,
        },
        Scenario {
            section: 6,
            name: "an_oversize_call_output_still_clears_its_call",
            lines: vec![
                ("09:59:10", task_started("t1")),
                ("09:59:30", call("call-big", "exec_command", "{}")),
                ("09:59:50", output("call-big", &big_output)),
                ("10:00:00", task_complete("t1", "done")),
            ],
            stop_due: Some("10:05:00"),
            pending_calls: 0,
        },
        Scenario {
            section: 8,
            name: "a_usage_limit_turn_owes_its_stop_after_the_grace_though_the_pause_is_open",
            lines: vec![
                ("09:59:10", task_started("t1")),
                (
                    "10:00:00",
                    token_count(100.0, ts(&format!("{DAY}T11:47:00Z"))),
                ),
                ("10:00:00", usage_limit_complete("t1")),
            ],
            stop_due: Some("10:05:00"),
            pending_calls: 0,
        },
        Scenario {
            section: 10,
            name: "a_usage_limit_without_token_count_extends_nothing_and_owes_the_stop_after_the_grace",
            lines: vec![
                ("09:59:10", task_started("t1")),
                ("10:00:00", usage_limit_complete("t1")),
            ],
            stop_due: Some("10:05:00"),
            pending_calls: 0,
        },
    ]
}

/// An RFC 3339 time.
pub fn ts(rfc3339: &str) -> kcap_watch::time::Ts {
    kcap_watch::time::Ts::parse_rfc3339(rfc3339).expect("valid time")
}

/// `HH:MM:SS` on [`DAY`].
pub fn at(hms: &str) -> kcap_watch::time::Ts {
    ts(&format!("{DAY}T{hms}Z"))
}
