//! Property tests of the fold: folding any prefix of a rollout and then the rest gives the
//! same state as folding the whole file (so a restarted watcher decides like one that never
//! stopped), and no input, however broken, makes the fold panic.

use kcap_watch::codex::Classifier;
use kcap_watch::codex::lines::LineCursor;
use kcap_watch::fold::State;
use kcap_watch::ship::LINE_LIMIT;
use kcap_watch::time::Ts;
use proptest::prelude::*;

fn id() -> impl Strategy<Value = String> {
    prop_oneof![Just("c1"), Just("c2"), Just("c3"), Just("c4")].prop_map(str::to_string)
}

/// One rollout line from the vocabulary the fold reacts to, plus noise.
fn rollout_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(r#"{"type":"event_msg","payload":{"type":"task_started","turn_id":"t"}}"#.to_string()),
        Just(r#"{"type":"event_msg","payload":{"type":"turn_started","turn_id":"t2"}}"#.to_string()),
        "[a-z ]{0,20}".prop_map(|m| format!(
            r#"{{"type":"event_msg","payload":{{"type":"task_complete","turn_id":"t","last_agent_message":"{m}"}}}}"#
        )),
        Just(r#"{"type":"event_msg","payload":{"type":"turn_aborted","reason":"interrupted"}}"#.to_string()),
        Just(r#"{"payload":{"type":"task_complete","error":{"codex_error_info":"usage_limit_exceeded"}},"type":"event_msg"}"#.to_string()),
        (0u32..=120, 1_785_000_000u64..1_786_000_000).prop_map(|(u, r)| format!(
            r#"{{"type":"event_msg","payload":{{"type":"token_count","rate_limits":{{"primary":{{"used_percent":{u},"resets_at":{r}}}}}}}}}"#
        )),
        (id(), prop_oneof![Just("function_call"), Just("custom_tool_call"), Just("local_shell_call"), Just("tool_search_call")])
            .prop_map(|(c, t)| format!(r#"{{"type":"response_item","payload":{{"type":"{t}","name":"exec_command","arguments":"{{}}","call_id":"{c}"}}}}"#)),
        (id(), prop_oneof![Just("function_call_output"), Just("custom_tool_call_output"), Just("tool_search_output")])
            .prop_map(|(c, t)| format!(r#"{{"type":"response_item","payload":{{"type":"{t}","call_id":"{c}","output":"ok"}}}}"#)),
        Just(r#"{"type":"response_item","payload":{"type":"message","role":"assistant","content":[]}}"#.to_string()),
        Just(r#"{"type":"turn_context","payload":{"cwd":"/x"}}"#.to_string()),
        Just(r#"{"type":"world_state","payload":{"anything":[1,2,3]}}"#.to_string()),
        // Queued and triggering inter-agent mail (R4.3): the announcement and its message
        // may be split by a restart, which must not change what the message is.
        prop_oneof![Just("false"), Just("true"), Just("1")].prop_map(|t| format!(
            r#"{{"type":"inter_agent_communication_metadata","ordinal":7,"payload":{{"trigger_turn":{t}}}}}"#
        )),
        Just(r#"{"type":"response_item","payload":{"type":"agent_message","author":"/root","recipient":"/root/w","content":[]}}"#.to_string()),
        "[a-z ]{0,12}".prop_map(|m| format!(
            r#"{{"type":"event_msg","payload":{{"type":"agent_message","message":"{m}"}}}}"#
        )),
        (0u32..=120, 1_785_000_000u64..1_786_000_000).prop_map(|(u, r)| format!(
            r#"{{"type":"event_msg","payload":{{"type":"token_count","rate_limits":{{"primary":{{"used_percent":99,"window_minutes":300,"resets_at":{r}}},"secondary":{{"used_percent":{u},"window_minutes":10080,"resets_at":{}}}}}}}}}"#,
            r + 400_000
        )),
        Just(r#"{"type":"event_msg","payload":{"type":"task_complete","last_agent_message":null,"error":{"message":"try again at 10:45 PM","codex_error_info":"usage_limit_exceeded"}}}"#.to_string()),
        Just(r#"{"type":"world_state","payload":{"state":"{\"cwd\":\"/x\"}"}}"#.to_string()),
        Just(r#"{"type":"token_usage_record","payload":{"turn_id":"t","usage":{"input_tokens":3}}}"#.to_string()),
        Just(String::new()),
        Just("{not json".to_string()),
        Just(r#"{"type":"session_meta","payload":{"id":"x","thread_source":"subagent"}}"#.to_string()),
    ]
}

fn rollout() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(rollout_line(), 0..60).prop_map(|lines| {
        let mut out = br#"{"type":"session_meta","payload":{"id":"c","session_id":"p","thread_source":"subagent"}}"#.to_vec();
        out.push(b'\n');
        for l in lines {
            out.extend_from_slice(l.as_bytes());
            out.extend_from_slice(if l.len() % 3 == 0 { b"\r\n" } else { b"\n" });
        }
        out
    })
}

/// Observation time of a line: deterministic per line number, not monotonic (the fold
/// takes the last line's time, not the largest).
fn at(number: u64) -> Ts {
    Ts::from_millis(1_785_000_000_000 + ((number * 7_919) % 500) as i64 * 60_000)
}

fn fold_into(state: &mut State, cursor: &mut LineCursor, data: &[u8]) {
    let (lines, _) = cursor
        .read(data, usize::MAX)
        .expect("in-memory reads cannot fail");
    for line in &lines {
        let observed = line.observed().expect("the cursor classifies");
        state.apply(observed, at(line.number));
    }
}

fn cursor(offset: u64, number: u64) -> LineCursor {
    LineCursor::fold(offset, number, LINE_LIMIT, Classifier::new())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn folding_a_prefix_then_the_rest_equals_folding_the_whole(data in rollout(), cut in any::<prop::sample::Index>()) {
        let k = cut.index(data.len() + 1);
        let mut whole = State::new();
        fold_into(&mut whole, &mut cursor(0, 0), &data);

        let mut split = State::new();
        let mut c = cursor(0, 0);
        fold_into(&mut split, &mut c, &data[..k]);
        fold_into(&mut split, &mut c, &data);
        prop_assert_eq!(&split, &whole);

        // A restart: a fresh reader seeds the prefix's complete lines, then follows.
        let mut restarted = State::new();
        let mut r1 = cursor(0, 0);
        fold_into(&mut restarted, &mut r1, &data[..k]);
        let mut r2 = cursor(r1.line_start(), r1.next_number());
        fold_into(&mut restarted, &mut r2, &data);
        prop_assert_eq!(&restarted, &whole);
    }

    #[test]
    fn folding_never_panics_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..4096)) {
        let mut state = State::new();
        fold_into(&mut state, &mut cursor(0, 0), &data);
        let newlines = data.iter().filter(|b| **b == b'\n').count() as u64;
        prop_assert_eq!(state.counters.lines, newlines);
    }
}
