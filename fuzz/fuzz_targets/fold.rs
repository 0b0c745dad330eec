//! The fold and the decisions on it: any sequence of lines (the input split on `\n`, each
//! observed at a time taken from its bytes) keeps the fold's invariants, and no decision
//! panics, whatever the times and windows.
#![no_main]

use std::time::Duration;

use kcap_watch::codex::classify;
use kcap_watch::codex::header::Role;
use kcap_watch::decide::{self, Ceiling, StopProgress, Windows};
use kcap_watch::fold::{MAX_PAUSES, MAX_PENDING, Observed, State};
use kcap_watch::time::{MAX_WINDOW, Ts};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut state = State::new();
    let mut count = 0u64;
    let mut clock = 1_785_000_000_000i64;
    for (number, line) in data.split(|&b| b == b'\n').enumerate() {
        let info = classify(line);
        // Times jump back and forth (the fold takes the last line's time, not the largest).
        let jump = line.first().map_or(0, |&b| i64::from(b) - 100) * 60_000;
        clock = clock.saturating_add(jump).clamp(0, 253_402_300_799_000);
        state.apply(
            Observed {
                number: number as u64,
                raw_len: line.len() as u64 + 1,
                blank: line.iter().all(|b| b.is_ascii_whitespace()),
                oversize: line.len() > 65_536,
                info: &info,
            },
            Ts::from_millis(clock),
        );
        count += 1;
        assert!(state.pending.len() <= MAX_PENDING);
        assert!(state.pauses.len() <= MAX_PAUSES);
    }
    assert_eq!(state.counters.lines, count);
    let now = Ts::from_millis(clock);
    let window = |b: Option<&u8>| match b.copied().unwrap_or(0) % 3 {
        0 => Duration::ZERO,
        1 => Duration::from_secs(300),
        _ => MAX_WINDOW,
    };
    let windows = Windows {
        stop_grace: window(data.first()),
        idle: window(data.get(1)),
        stall: Some(window(data.get(2))),
    };
    let mut ceiling = Ceiling::new(now, window(data.get(3)), window(data.get(4)));
    for role in [Role::Child, Role::Session] {
        let _ = decide::due_times(
            &state,
            role,
            &windows,
            StopProgress::default(),
            Some(now),
            Some(&ceiling),
        );
    }
    for hours in 0..4 {
        ceiling.step(&state.pauses, now.plus(Duration::from_secs(hours * 3600)));
    }
    let _ = ceiling.exit_message(&state.pauses, now);
});
