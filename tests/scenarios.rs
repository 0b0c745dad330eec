//! The scenarios of `spec/lifecycle.md` section 8, against the pure core: the fold and the
//! decision functions, with every time injected. (The same scenarios run through the binary
//! in `inspect_scenarios.rs` and, with a running watcher, in the lifecycle tests.)

use std::time::Duration;

use kcap_watch::decide::{
    self, Ceiling, CeilingStep, StopProgress, Windows, idle_end_due, stall_due, subagent_stop_due,
};
use kcap_watch::fold::{Observed, PauseState, State, Turn};
use kcap_watch::rollout::classify;
use kcap_watch::rollout::header::Role;
use kcap_watch::time::Ts;

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
                oversize: json.len() > 65_536,
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
fn scenario_6_an_oversize_output_still_clears_its_call() {
    let mut c = Child::new();
    c.started("09:59:00")
        .call("09:59:10", "exec_command", "call-big");
    let big = "x".repeat(80 * 1024);
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
    let idle = idle_end_due(&c.state, 30 * MIN, None).expect("becomes due eventually");
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
    let reap = idle_end_due(&c.state, 360 * MIN, None).expect("due once orphaned");
    assert_eq!(reap, t("22:00:00"));
}

#[test]
fn scenario_8_a_usage_limit_pause_defers_the_stop_until_it_closes_itself() {
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
        r#"{"type":"event_msg","payload":{"type":"task_complete","turn_id":"t1","last_agent_message":null,"error":{"message":"limit","codex_error_info":"usage_limit_exceeded"}}}"#,
    );
    let pause = *c.state.last_pause().expect("pause recorded");
    assert_eq!(pause.ends_at, Some(t("11:47:30")));
    assert_eq!(pause.state_at(t("11:00:00")), PauseState::Open);
    assert!(c.state.pause_open_at(t("11:47:29")));
    assert_eq!(c.stop_due(), Some(t("11:52:30")));
    assert_eq!(pause.state_at(t("11:47:30")), PauseState::Expired);
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
    let due = idle_end_due(&c.state, huge, None).expect("due far in the future");
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
        None,
        None,
    );
    assert_eq!(due.subagent_stop, None);
    assert_eq!(
        due.idle_end,
        Some(ms("11:00:00").plus(Duration::from_millis(1)))
    );
}
