//! The scenarios of docs/behaviour.md L8 (as docs/behaviour.md R4 revises them) and
//! the "done when" cases of R4, against the pure core: the fold and the decision functions,
//! with every time injected. (The same scenarios run through the binary in
//! `inspect_scenarios.rs` and, with a running watcher, in the lifecycle tests.)

use crate::support;
use kcap_watch::ship::capture::MAX_RECORD_BYTES;

use std::time::Duration;

use kcap_watch::codex::header::{MissingKey, Role, missing_key};
use kcap_watch::codex::{RateWindow, classify};
use kcap_watch::decide::{
    self, Ceiling, CeilingStep, OwedBecause, StopProgress, WatcherEnd, Windows, idle_end_due,
    stall_due, stop_owed_at_exit, subagent_stop_due,
};
use kcap_watch::fold::{BindingReason, IdleSince, Observed, PauseState, State, Turn};
use kcap_watch::time::Ts;
use support::lifecycle_table::{self, HEADER_AT};

const MIN: Duration = Duration::from_secs(60);

/// `HH:MM:SS` on the scenario day.
fn t(hms: &str) -> Ts {
    Ts::parse_rfc3339(&format!("2026-07-28T{hms}Z")).expect("valid time")
}

fn ms(hms: &str) -> Ts {
    t(hms)
}

/// Folds JSON lines, each observed at its time.
struct Child {
    state: State,
    next: u64,
}

impl Child {
    fn new() -> Child {
        let mut c = Child {
            state: State::new(),
            next: 0,
        };
        c.fold(
            "09:59:00",
            r#"{"type":"session_meta","payload":{"id":"c-1","session_id":"p-1","thread_source":"subagent","agent_nickname":"Hypatia"}}"#,
        );
        c
    }

    fn fold(&mut self, at: &str, json: &str) -> &mut Child {
        let info = classify(json.as_bytes());
        self.state.apply(
            Observed {
                number: self.next,
                raw_len: json.len() as u64 + 1,
                blank: false,
                oversize: json.len() as u64 > MAX_RECORD_BYTES,
                info: &info,
            },
            t(at),
        );
        self.next += 1;
        self
    }

    fn started(&mut self, at: &str) -> &mut Child {
        self.fold(
            at,
            r#"{"type":"event_msg","payload":{"type":"task_started","turn_id":"t1"}}"#,
        )
    }

    fn complete(&mut self, at: &str) -> &mut Child {
        self.fold(
            at,
            r#"{"type":"event_msg","payload":{"type":"task_complete","turn_id":"t1","last_agent_message":"done"}}"#,
        )
    }

    fn call(&mut self, at: &str, name: &str, id: &str) -> &mut Child {
        let line = format!(
            r#"{{"type":"response_item","payload":{{"type":"function_call","name":"{name}","arguments":"{{}}","call_id":"{id}"}}}}"#
        );
        self.fold(at, &line)
    }

    fn stop_due(&self) -> Option<Ts> {
        subagent_stop_due(&self.state, Role::Child, 5 * MIN, StopProgress::default())
    }
}

/// The table of section 8 at the pure level: every line folded at its own time, the stop's
/// due time and the unanswered calls read off the fold.
#[test]
fn lifecycle_table_at_the_pure_level() {
    for sc in lifecycle_table::scenarios() {
        let mut c = Child {
            state: State::new(),
            next: 0,
        };
        c.fold(HEADER_AT, &lifecycle_table::header().text());
        for (at, line) in &sc.lines {
            c.fold(at, &line.text());
        }
        let what = format!("scenario {} ({})", sc.section, sc.name);
        assert_eq!(c.stop_due(), sc.stop_due.map(t), "{what}: stop due");
        assert_eq!(
            c.state.pending.len(),
            sc.pending_calls,
            "{what}: pending calls"
        );
    }
}

#[test]
fn scenario_1_stop_is_due_exactly_when_the_grace_has_passed() {
    let mut c = Child::new();
    c.started("09:59:30").complete("10:00:00");
    let due = c.stop_due().expect("a completed turn gets a stop");
    assert_eq!(due, t("10:05:00"));
    assert!(due > t("10:04:59"));
}

#[test]
fn scenario_2_a_turn_end_clears_an_unanswered_call_and_a_late_call_reopens_the_turn() {
    let mut c = Child::new();
    c.started("09:59:00")
        .call("09:59:10", "exec_command", "call-1");
    assert_eq!(c.state.pending.len(), 1);
    c.fold(
        "10:00:00",
        r#"{"type":"event_msg","payload":{"type":"turn_aborted","turn_id":"t1","reason":"interrupted"}}"#,
    );
    assert_eq!(c.state.turn, Turn::Aborted);
    assert!(c.state.pending.is_empty());
    assert_eq!(c.stop_due(), Some(t("10:05:00")));

    let mut c = Child::new();
    c.started("09:59:00").complete("10:00:00");
    c.call("10:01:00", "exec_command", "call-2");
    assert_eq!(c.state.turn, Turn::Open);
    assert_eq!(c.stop_due(), None, "no stop until that turn ends again");
    c.complete("10:03:00");
    assert_eq!(c.stop_due(), Some(t("10:08:00")));
}

#[test]
fn scenario_3_token_count_is_activity_and_a_response_item_reopens() {
    let mut c = Child::new();
    c.started("09:59:00").complete("10:00:00");
    c.fold(
        "10:02:00",
        r#"{"type":"event_msg","payload":{"type":"token_count","info":null,"rate_limits":null}}"#,
    );
    assert_eq!(c.state.turn, Turn::Completed);
    assert_eq!(c.stop_due(), Some(t("10:07:00")));

    let mut c = Child::new();
    c.started("09:59:00").complete("10:00:00");
    c.fold(
        "10:02:00",
        r#"{"type":"response_item","payload":{"type":"message","role":"assistant","content":[]}}"#,
    );
    assert_eq!(c.state.turn, Turn::Open);
    assert_eq!(c.stop_due(), None);
}

#[test]
fn scenario_4_a_posted_stop_latches_across_re_engagement() {
    let mut c = Child::new();
    c.started("09:59:00").complete("10:00:00");
    assert_eq!(c.stop_due(), Some(t("10:05:00")));
    let posted = StopProgress {
        posted: true,
        next_attempt: None,
    };
    c.started("10:55:00").complete("11:00:00");
    assert_eq!(
        subagent_stop_due(&c.state, Role::Child, 5 * MIN, posted),
        None
    );
}

#[test]
fn scenario_5_a_restarted_watcher_counts_the_grace_from_the_files_mtime() {
    // A fresh watcher seeds every line at the file's modification time.
    let mtime = "10:00:00";
    let mut c = Child::new();
    c.started(mtime).complete(mtime);
    assert_eq!(c.stop_due(), Some(t("10:05:00")));
}

#[test]
fn scenario_6_an_output_over_the_capture_limit_still_clears_its_call() {
    let mut c = Child::new();
    c.started("09:59:00")
        .call("09:59:10", "exec_command", "call-big");
    let big = "x".repeat(MAX_RECORD_BYTES as usize);
    let line = format!(
        r#"{{"type":"response_item","payload":{{"type":"function_call_output","output":"{big}","call_id":"call-big"}}}}"#
    );
    c.fold("09:59:50", &line);
    assert!(c.state.pending.is_empty());
    assert_eq!(c.state.counters.oversize, 1);
}

#[test]
fn scenario_7_a_pending_wait_agent_blocks_stall_and_idle_until_it_is_orphaned() {
    let stall = Some(65 * MIN);
    let mut c = Child::new();
    c.started("10:00:00")
        .call("10:00:00", "wait_agent", "call-wait");
    // 40 minutes of silence with the call pending: nothing is due, even with a 30-min reap.
    let at_40 = t("10:40:00");
    assert!(stall_due(&c.state, stall).is_none_or(|d| d > at_40));
    let idle = idle_end_due(&c.state, 30 * MIN, t("10:00:00")).expect("becomes due eventually");
    assert!(idle > at_40);

    // Without a pending call, 66 minutes of silence give exactly one stall warning.
    let mut c = Child::new();
    c.started("10:00:00");
    let due = stall_due(&c.state, stall).expect("an open turn can stall");
    assert!(due > t("11:05:00") && due <= t("11:06:00"));
    c.state.stalled = true; // the watcher fired it
    assert_eq!(stall_due(&c.state, stall), None, "fires once per silence");
    c.fold(
        "11:10:00",
        r#"{"type":"event_msg","payload":{"type":"agent_reasoning","text":"still here"}}"#,
    );
    assert!(
        stall_due(&c.state, stall).is_some(),
        "the next line re-arms it"
    );

    // A call left pending with no other line blocks the 360-min reap until it is 12 h old.
    let mut c = Child::new();
    c.started("10:00:00")
        .call("10:00:00", "exec_command", "call-orphan");
    let reap = idle_end_due(&c.state, 360 * MIN, t("10:00:00")).expect("due once orphaned");
    assert_eq!(reap, t("22:00:00"));
}

/// The usage-limit turn of scenario 8: a `token_count` at 100 % resetting at 11:47:00, then
/// `task_complete` with `usage_limit_exceeded` at 10:09:00.
fn scenario_8_child() -> Child {
    let reset = t("11:47:00").as_millis() / 1000;
    let mut c = Child::new();
    c.started("10:00:00");
    c.fold(
        "10:08:59",
        &format!(
            r#"{{"type":"event_msg","payload":{{"type":"token_count","rate_limits":{{"primary":{{"used_percent":100.0,"window_minutes":300,"resets_at":{reset}}},"secondary":{{"used_percent":20.0,"resets_at":{}}}}}}}}}"#,
            reset + 86_400
        ),
    );
    c.fold(
        "10:09:00",
        r#"{"type":"event_msg","payload":{"type":"task_complete","turn_id":"t1","last_agent_message":null,"error":{"message":"You've hit your usage limit. Try again at 11:47 AM.","codex_error_info":"usage_limit_exceeded"}}}"#,
    );
    c
}

#[test]
fn scenario_8_a_usage_limit_turn_gets_its_stop_after_the_grace_with_codexs_message() {
    let c = scenario_8_child();
    let pause = *c.state.last_pause().expect("pause recorded");
    assert_eq!(pause.ends_at, Some(t("11:47:30")));
    assert_eq!(pause.state_at(t("11:00:00")), PauseState::Open);
    // R4.2: the pause no longer holds the stop.
    assert_eq!(c.stop_due(), Some(t("10:14:00")));
    assert_eq!(
        c.state.stop_message(),
        "You've hit your usage limit. Try again at 11:47 AM."
    );
    assert_eq!(pause.state_at(t("11:47:30")), PauseState::Expired);
}

#[test]
fn scenario_8_the_watcher_stays_alive_through_the_pause_and_reaps_a_window_after_it() {
    let c = scenario_8_child();
    let reap = 360 * MIN;
    let due = idle_end_due(&c.state, reap, t("10:00:00")).expect("reap eventually");
    assert_eq!(due, t("11:47:30").plus(reap).plus(Duration::from_millis(1)));
    assert!(c.state.pause_open_at(t("11:47:29")));
    // And the pause is credited to the lifetime ceiling while it is open.
    let credit = decide::pause_credit(&c.state.pauses, t("10:00:00"), t("11:09:00"));
    assert_eq!(credit, 60 * MIN);
}

#[test]
fn scenario_9_lifetime_ceiling_grants_pause_credit_three_times_then_fires() {
    let mut c = Child::new();
    let reset = t("11:55:00").as_millis() / 1000;
    c.fold(
        "10:04:59",
        &format!(
            r#"{{"type":"event_msg","payload":{{"type":"token_count","rate_limits":{{"primary":{{"used_percent":100,"resets_at":{reset}}}}}}}}}"#
        ),
    );
    c.fold(
        "10:05:00",
        r#"{"type":"event_msg","payload":{"type":"task_complete","error":{"codex_error_info":"usage_limit_exceeded"}}}"#,
    );
    let pauses = &c.state.pauses;
    let mut ceiling = Ceiling::new(t("10:00:00"), 45 * MIN, 120 * MIN);
    assert_eq!(
        ceiling.step(pauses, t("10:44:59")),
        CeilingStep::NotYet(t("10:45:00"))
    );
    let mut grants = Vec::new();
    let mut now = t("10:45:00");
    loop {
        match ceiling.step(pauses, now) {
            CeilingStep::NotYet(next) => now = next,
            CeilingStep::Granted(g) => grants.push((now, g.grant)),
            CeilingStep::Fire => break,
        }
    }
    assert_eq!(
        grants,
        vec![
            (t("10:45:00"), 40 * MIN),
            (t("11:25:00"), 40 * MIN),
            (t("12:05:00"), 30 * MIN + Duration::from_secs(30)),
        ]
    );
    assert_eq!(now, t("12:35:30"));
    assert!(t("10:45:01") < now, "still alive at 10:45:01");
    assert_eq!(
        ceiling.exit_message(pauses, now),
        "lifetime ceiling reached [base 2700000ms; pause credit 6630000ms across 3 grants (cap 7200000ms); last pause: usage_limit_exceeded until 2026-07-28T11:55:00.000Z]"
    );
}

#[test]
fn scenario_9_a_lying_provider_never_pushes_credit_past_the_cap() {
    let mut c = Child::new();
    let mut at = t("10:00:00");
    // Every 10 minutes: a new turn, then a 60-minute usage-limit pause.
    for _ in 0..60 {
        let reset = at.plus(60 * MIN).as_millis() / 1000;
        let hms = |x: Ts| x.rfc3339()[11..19].to_string();
        c.started(&hms(at));
        c.fold(
            &hms(at),
            &format!(
                r#"{{"type":"event_msg","payload":{{"type":"token_count","rate_limits":{{"primary":{{"used_percent":100,"resets_at":{reset}}}}}}}}}"#
            ),
        );
        c.fold(
            &hms(at),
            r#"{"type":"event_msg","payload":{"type":"task_complete","error":{"codex_error_info":"usage_limit_exceeded"}}}"#,
        );
        at = at.plus(10 * MIN);
        if at >= t("19:00:00") {
            break;
        }
    }
    let mut ceiling = Ceiling::new(t("10:00:00"), 45 * MIN, 120 * MIN);
    let mut now = t("10:45:00");
    loop {
        match ceiling.step(&c.state.pauses, now) {
            CeilingStep::NotYet(next) => now = next,
            CeilingStep::Granted(_) => {}
            CeilingStep::Fire => break,
        }
    }
    assert_eq!(ceiling.granted, 120 * MIN);
    assert_eq!(now, t("12:45:00"));
    assert!(
        ceiling
            .exit_message(&c.state.pauses, now)
            .contains("EXHAUSTED")
    );
}

#[test]
fn scenario_10_usage_limit_without_token_count_extends_nothing() {
    let mut c = Child::new();
    c.started("10:00:00");
    c.fold(
        "10:00:00",
        r#"{"type":"event_msg","payload":{"type":"task_complete","error":{"codex_error_info":"usage_limit_exceeded"}}}"#,
    );
    let pause = *c.state.last_pause().expect("the pause is recorded");
    assert_eq!(pause.state_at(t("10:01:00")), PauseState::Unknowable);
    assert_eq!(c.stop_due(), Some(t("10:05:00")));
    let mut ceiling = Ceiling::new(t("09:00:00"), 60 * MIN, 120 * MIN);
    assert_eq!(
        ceiling.step(&c.state.pauses, t("10:00:00")),
        CeilingStep::Fire
    );
    assert_eq!(
        ceiling.exit_message(&c.state.pauses, t("10:00:00")),
        "lifetime ceiling reached after 3600000ms"
    );
}

#[test]
fn expired_pauses_never_credit_working_time() {
    let mut c = Child::new();
    let reset = t("10:30:00").as_millis() / 1000;
    c.fold(
        "10:00:00",
        &format!(
            r#"{{"type":"event_msg","payload":{{"type":"token_count","rate_limits":{{"primary":{{"used_percent":100,"resets_at":{reset}}}}}}}}}"#
        ),
    );
    c.fold(
        "10:00:00",
        r#"{"type":"event_msg","payload":{"type":"task_complete","error":{"codex_error_info":"usage_limit_exceeded"}}}"#,
    );
    // The pause ends by itself at 10:30:30; hours later it still credits only its span.
    let credit = decide::pause_credit(&c.state.pauses, t("10:00:00"), t("15:00:00"));
    assert_eq!(credit, 30 * MIN + Duration::from_secs(30));
    // An open pause is credited only up to now.
    let credit = decide::pause_credit(&c.state.pauses, t("10:00:00"), t("10:10:00"));
    assert_eq!(credit, 10 * MIN);
}

#[test]
fn overlapping_pauses_are_counted_once() {
    let p = |open: &str, end: &str| kcap_watch::fold::Pause {
        opened_at: t(open),
        resets_at: Some(t(end)),
        ends_at: Some(t(end)),
        closed_at: None,
        binding: None,
    };
    let pauses = [p("10:00:00", "11:00:00"), p("10:30:00", "11:30:00")];
    let credit = decide::pause_credit(&pauses, t("09:00:00"), t("12:00:00"));
    assert_eq!(credit, 90 * MIN);
}

#[test]
fn huge_windows_are_clamped_not_wrapped() {
    let mut c = Child::new();
    c.started("10:00:00");
    let huge = kcap_watch::time::clamp_window(Duration::from_secs(99_999_999_999 * 60));
    let due = idle_end_due(&c.state, huge, t("10:00:00")).expect("due far in the future");
    assert!(due > t("10:00:00").plus(Duration::from_secs(50 * 365 * 86_400)));
    let mut ceiling = Ceiling::new(t("10:00:00"), Duration::MAX, Duration::MAX);
    assert!(matches!(
        ceiling.step(&[], t("23:00:00")),
        CeilingStep::NotYet(_)
    ));
}

#[test]
fn a_session_never_gets_a_subagent_stop() {
    let mut c = Child::new();
    c.started("09:59:00").complete("10:00:00");
    let windows = Windows {
        stop_grace: 5 * MIN,
        idle: 60 * MIN,
        stall: None,
    };
    let due = decide::due_times(
        &c.state,
        Role::Session,
        &windows,
        StopProgress::default(),
        t("09:00:00"),
        None,
    );
    assert_eq!(due.subagent_stop, None);
    assert_eq!(
        due.idle_end,
        Some(ms("11:00:00").plus(Duration::from_millis(1)))
    );
}

// ---------------------------------------------------------------------------------------------
// docs/behaviour.md R4: the cases its "done when" names.

/// Folds a fixture, each line observed at its own timestamp (the last line's when it has none).
fn fold_fixture(name: &str) -> State {
    let text = std::fs::read_to_string(format!("fixtures/codex/{name}")).expect("fixture");
    let mut state = State::new();
    let mut last = t("00:00:00");
    for (number, line) in text.lines().enumerate() {
        let info = classify(line.as_bytes());
        last = info.timestamp.unwrap_or(last);
        state.apply(
            Observed {
                number: number as u64,
                raw_len: line.len() as u64 + 1,
                blank: line.trim().is_empty(),
                oversize: false,
                info: &info,
            },
            last,
        );
    }
    state
}

fn window(name: &'static str, used: f64, resets: &str) -> RateWindow {
    RateWindow {
        name: Some(name),
        used_percent: Some(used),
        window_minutes: None,
        resets_at: Some((t(resets).as_millis() / 1000) as f64),
    }
}

#[test]
fn a_stale_99_percent_five_hour_window_binds_not_the_weekly_reset_days_away() {
    let state = fold_fixture("child-usage-limit-99.jsonl");
    let pause = *state.last_pause().expect("the usage limit opened a pause");
    let binding = pause.binding.expect("a window binds");
    assert_eq!(binding.window.name, Some("primary"));
    assert_eq!(binding.window.used_percent, Some(99.0));
    assert_eq!(binding.reason, BindingReason::HighestReading);
    // Codex's own message says 10:45 PM: the pause ends there (plus slack), not in 4.7 days.
    assert_eq!(pause.resets_at, Some(t("22:45:00")));
    assert_eq!(pause.ends_at, Some(t("22:45:30")));
    // The stop is due after the grace, with Codex's message.
    let due = subagent_stop_due(&state, Role::Child, 5 * MIN, StopProgress::default());
    assert_eq!(
        due,
        Some(Ts::parse_rfc3339("2026-07-28T22:03:00.012Z").expect("ts"))
    );
    assert!(state.stop_message().contains("try again at 10:45 PM"));
}

#[test]
fn windows_at_100_percent_bind_by_latest_reset_and_ties_below_by_earliest() {
    use kcap_watch::fold::binding_window;
    let both = [
        window("primary", 100.0, "11:00:00"),
        window("secondary", 100.0, "18:00:00"),
    ];
    let b = binding_window(&both).expect("binding");
    assert_eq!(b.window.name, Some("secondary"));
    assert_eq!(b.reason, BindingReason::AtLimit { at_limit: 2 });
    let one = [
        window("primary", 100.0, "11:00:00"),
        window("secondary", 99.5, "18:00:00"),
    ];
    assert_eq!(
        binding_window(&one).expect("binding").window.name,
        Some("primary")
    );
    let tie = [
        window("secondary", 80.0, "18:00:00"),
        window("primary", 80.0, "11:00:00"),
    ];
    assert_eq!(
        binding_window(&tie).expect("binding").window.name,
        Some("primary")
    );
    let unread = [RateWindow {
        resets_at: Some(1.8e9),
        ..RateWindow::default()
    }];
    assert_eq!(
        binding_window(&unread),
        None,
        "no reading, no binding window"
    );
}

#[test]
fn queued_mail_neither_delays_the_stop_nor_opens_a_turn_nor_causes_a_stall_warning() {
    let mut c = Child::new();
    c.started("09:59:00").complete("10:00:00");
    // Mail queued within the grace.
    c.fold(
        "10:03:00",
        r#"{"type":"inter_agent_communication_metadata","ordinal":12,"payload":{"trigger_turn":false}}"#,
    );
    c.fold(
        "10:03:00",
        r#"{"type":"response_item","payload":{"type":"agent_message","author":"/root/other","recipient":"/root/worker","content":[{"type":"input_text","text":"FYI"}]}}"#,
    );
    assert_eq!(c.state.turn, Turn::Completed);
    assert_eq!(c.state.counters.queued_mail, 2);
    assert_eq!(
        c.state.last_activity,
        Some(t("10:00:00")),
        "mail is not activity"
    );
    assert_eq!(c.stop_due(), Some(t("10:05:00")));
    assert_eq!(stall_due(&c.state, Some(65 * MIN)), None);
}

#[test]
fn the_queued_mail_fixture_is_a_completed_child_with_two_mail_lines() {
    let state = fold_fixture("child-queued-mail.jsonl");
    assert_eq!(state.turn, Turn::Completed);
    assert_eq!(state.counters.queued_mail, 2);
    assert_eq!(
        state.last_activity,
        Some(Ts::parse_rfc3339("2026-07-28T14:03:37.130Z").expect("ts"))
    );
    assert_eq!(
        state.stop_message(),
        "refund.rs has no conversions; nothing to add."
    );
}

#[test]
fn trigger_turn_true_mail_followed_by_a_turn_reopens_it() {
    let mut c = Child::new();
    c.started("09:59:00").complete("10:00:00");
    c.fold(
        "10:02:00",
        r#"{"type":"inter_agent_communication_metadata","payload":{"trigger_turn":true}}"#,
    );
    c.fold(
        "10:02:00",
        r#"{"type":"response_item","payload":{"type":"agent_message","author":"/root","recipient":"/root/worker","content":[]}}"#,
    );
    assert_eq!(
        c.state.turn,
        Turn::Open,
        "triggering mail is a response_item"
    );
    assert_eq!(c.stop_due(), None);
    c.started("10:02:01").complete("10:04:00");
    assert_eq!(c.stop_due(), Some(t("10:09:00")));
    assert_eq!(c.state.counters.queued_mail, 0);
}

#[test]
fn an_agent_message_without_metadata_behaves_as_any_response_item() {
    let mut c = Child::new();
    c.started("09:59:00").complete("10:00:00");
    c.fold(
        "10:02:00",
        r#"{"type":"response_item","payload":{"type":"agent_message","content":[]}}"#,
    );
    assert_eq!(c.state.turn, Turn::Open);
    assert_eq!(c.state.last_activity, Some(t("10:02:00")));
}

#[test]
fn each_mail_message_is_matched_with_its_own_announcement() {
    let mut c = Child::new();
    c.started("09:59:00").complete("10:00:00");
    let meta = |v: &str| {
        format!(
            r#"{{"type":"inter_agent_communication_metadata","payload":{{"trigger_turn":{v}}}}}"#
        )
    };
    let mail = r#"{"type":"response_item","payload":{"type":"agent_message","content":[]}}"#;
    c.fold("10:01:00", &meta("false"));
    c.fold("10:01:00", &meta("true"));
    c.fold("10:01:01", mail);
    assert_eq!(
        c.state.turn,
        Turn::Completed,
        "the first message is the queued one"
    );
    c.fold("10:01:02", mail);
    assert_eq!(c.state.turn, Turn::Open, "the second triggers a turn");
}

#[test]
fn a_child_that_crashed_mid_turn_owes_its_stop_at_reap_ceiling_and_parent_exit() {
    let state = fold_fixture("child-crashed-mid-turn.jsonl");
    assert_eq!(state.turn, Turn::Open, "no turn end was ever written");
    assert!(state.pending.is_empty());
    let grace = 5 * MIN;
    assert_eq!(
        subagent_stop_due(&state, Role::Child, grace, StopProgress::default()),
        None,
        "the ordinary stop never becomes due"
    );
    let now = t("16:00:00");
    for end in [
        WatcherEnd::Idle,
        WatcherEnd::LifetimeCeiling,
        WatcherEnd::ParentExited,
    ] {
        let owed = stop_owed_at_exit(
            &state,
            Role::Child,
            grace,
            StopProgress::default(),
            end,
            now,
        )
        .expect("a stop is owed");
        assert_eq!(owed.because, OwedBecause::WatcherEnding, "{end:?}");
        assert_eq!(owed.turn, Turn::Open);
        assert_eq!(
            owed.last_assistant_message,
            "Spec updated with POST /invoices; regenerating the client now."
        );
    }
    // A signal posts nothing new (the kcap CLI's teardown owns that card).
    assert_eq!(
        stop_owed_at_exit(
            &state,
            Role::Child,
            grace,
            StopProgress::default(),
            WatcherEnd::Signal,
            now
        ),
        None
    );
    // Nor does a session, nor a child whose stop was acknowledged.
    assert_eq!(
        stop_owed_at_exit(
            &state,
            Role::Session,
            grace,
            StopProgress::default(),
            WatcherEnd::Idle,
            now
        ),
        None
    );
    let posted = StopProgress {
        posted: true,
        next_attempt: None,
    };
    assert_eq!(
        stop_owed_at_exit(&state, Role::Child, grace, posted, WatcherEnd::Idle, now),
        None
    );
}

#[test]
fn a_due_but_unacknowledged_stop_is_owed_at_any_exit_even_after_a_failed_attempt() {
    let mut c = Child::new();
    c.started("09:59:00").complete("10:00:00");
    let failed = StopProgress {
        posted: false,
        next_attempt: Some(t("10:06:00")),
    };
    let owed = stop_owed_at_exit(
        &c.state,
        Role::Child,
        5 * MIN,
        failed,
        WatcherEnd::Signal,
        t("10:05:30"),
    )
    .expect("due at 10:05:00");
    assert_eq!(owed.because, OwedBecause::Due);
    assert_eq!(owed.last_assistant_message, "done");
    assert_eq!(
        stop_owed_at_exit(
            &c.state,
            Role::Child,
            5 * MIN,
            failed,
            WatcherEnd::Signal,
            t("10:04:59")
        ),
        None,
        "not due yet, and a signal owes nothing new"
    );
}

#[test]
fn a_resumed_session_watcher_counts_idle_from_its_start_not_the_old_file() {
    // The session's first part was last written at 06:31:43; the watcher starts three hours
    // later, when `codex resume` appends to the same file.
    let text = std::fs::read_to_string("fixtures/codex/session-resumed.jsonl").expect("fixture");
    let first_part = text.lines().take(11).collect::<Vec<_>>().join("\n");
    let mut state = State::new();
    let mtime = Ts::parse_rfc3339("2026-07-28T06:31:43.120Z").expect("ts");
    for (n, line) in first_part.lines().enumerate() {
        let info = classify(line.as_bytes());
        state.apply(
            Observed {
                number: n as u64,
                raw_len: line.len() as u64 + 1,
                blank: false,
                oversize: false,
                info: &info,
            },
            mtime,
        );
    }
    assert_eq!(state.turn, Turn::Completed);
    let start = t("09:34:10");
    let window = 60 * MIN;
    let due = idle_end_due(&state, window, start).expect("due");
    assert_eq!(due, start.plus(window).plus(Duration::from_millis(1)));
    assert_eq!(state.idle_since_source(start), IdleSince::WatcherStart);
    // Once the resumed lines arrive, idle counts from them.
    for (n, line) in text.lines().enumerate().skip(11) {
        let info = classify(line.as_bytes());
        let at = info.timestamp.expect("timestamped");
        state.apply(
            Observed {
                number: n as u64,
                raw_len: line.len() as u64 + 1,
                blank: false,
                oversize: false,
                info: &info,
            },
            at,
        );
    }
    let last = Ts::parse_rfc3339("2026-07-28T09:35:04.530Z").expect("ts");
    assert_eq!(
        idle_end_due(&state, window, start),
        Some(last.plus(window).plus(Duration::from_millis(1)))
    );
    assert_eq!(state.idle_since_source(start), IdleSince::LastActivity);
    // The child's stop still counts from the last activity (scenario 5 is unchanged).
}

#[test]
fn the_parent_less_review_child_header_gets_its_own_clear_message() {
    let state = fold_fixture("child-review-no-parent.jsonl");
    let id = state.identity.clone().expect("header read");
    assert_eq!(id.role, Role::Child, "never called a session");
    assert_eq!(id.session_id, None);
    assert_eq!(id.subagent_kind.as_deref(), Some("review"));
    let gap = missing_key(Some(&id), false, false).expect("no key without SESSION_ID");
    assert_eq!(
        gap,
        MissingKey::ChildWithoutParent {
            subagent: Some("review".into())
        }
    );
    let msg = gap.message(std::path::Path::new("rollout.jsonl"));
    assert_eq!(
        msg,
        "rollout rollout.jsonl is a sub-agent (review) whose session_meta names no parent thread or session; pass SESSION_ID (the parent session's id) to watch it"
    );
    assert_eq!(
        missing_key(Some(&id), true, false),
        None,
        "SESSION_ID fills the gap"
    );
}

#[test]
fn the_current_shapes_fold_to_one_completed_turn_with_nothing_in_flight() {
    let state = fold_fixture("child-current-shapes.jsonl");
    assert_eq!(state.counters.lines, 30);
    assert_eq!(state.counters.malformed, 0);
    assert_eq!(
        state.counters.queued_mail, 0,
        "trigger_turn: true is not queued"
    );
    assert_eq!(state.turn, Turn::Completed);
    assert!(state.pending.is_empty());
    let id = state.identity.clone().expect("header");
    assert_eq!(id.agent_type.as_deref(), Some("planner"));
    assert_eq!(
        state.stop_message(),
        "Rollout planned: schema verified by Kepler, tracked as API-412."
    );
    // Mid-file, while the dynamic tool call runs, it is in flight (its `function_call`), and
    // the `dynamic_tool_call_*` events neither add nor clear it.
    let text =
        std::fs::read_to_string("fixtures/codex/child-current-shapes.jsonl").expect("fixture");
    let mut state = State::new();
    for (n, line) in text.lines().enumerate() {
        let info = classify(line.as_bytes());
        state.apply(
            Observed {
                number: n as u64,
                raw_len: line.len() as u64 + 1,
                blank: false,
                oversize: false,
                info: &info,
            },
            info.timestamp.expect("timestamped"),
        );
        if line.contains("\"dynamic_tool_call_response\"") {
            let ids: Vec<_> = state.pending.iter().map(|p| p.call_id.as_str()).collect();
            assert_eq!(ids, ["call_Hp6cS03"]);
            assert_eq!(state.turn, Turn::Open);
        }
    }
}

#[test]
fn a_pause_still_credits_the_ceiling_though_the_stop_is_already_posted() {
    let c = scenario_8_child();
    let mut ceiling = Ceiling::new(t("10:00:00"), 45 * MIN, 120 * MIN);
    match ceiling.step(&c.state.pauses, t("10:45:00")) {
        CeilingStep::Granted(g) => assert_eq!(g.grant, 36 * MIN),
        other => panic!("expected a grant, got {other:?}"),
    }
}
