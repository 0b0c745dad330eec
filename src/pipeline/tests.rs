//! Each numbered delivery fault (docs/behaviour.md R3) replayed against the pipeline with injected time: the
//! driver below plays the shell (spool writes and cursor moves answered at once, requests
//! left for the test to answer).

use super::*;
use crate::codex::Classifier;
use crate::codex::lines::LineCursor;
use crate::ship::LINE_LIMIT;
use std::collections::VecDeque;

/// The server-fault sequences as data files (`cases/*.case`), run by this module's driver.
#[path = "cases.rs"]
mod cases;

fn meta() -> String {
    r#"{"type":"session_meta","payload":{"id":"019fa981-6ea2-7b02-8d11-5c2e9f7a4b02","session_id":"019fa981-2dca-7a31-9c55-3b1f0e6d2a01","thread_source":"subagent","agent_nickname":"Hypatia"}}"#.into()
}

fn ev(payload: &str) -> String {
    format!(r#"{{"type":"event_msg","payload":{payload}}}"#)
}

fn started() -> String {
    ev(r#"{"type":"task_started","turn_id":"t1"}"#)
}

fn complete() -> String {
    ev(r#"{"type":"task_complete","turn_id":"t1","last_agent_message":"done"}"#)
}

fn t0() -> Ts {
    Ts::parse_rfc3339("2026-07-28T10:00:00Z").unwrap()
}

/// The test's shell.
struct Driver {
    p: Pipeline,
    now: Ts,
    file: Vec<u8>,
    fold: LineCursor,
    ship: LineCursor,
    /// Spool writes fail while set.
    spool_fails: bool,
    spooled_lines: Vec<u64>,
    spooled_hooks: Vec<&'static str>,
    /// Everything that happened, in order, as short labels.
    log: Vec<String>,
}

impl Driver {
    fn new(online: bool, once: bool, lines: &[String]) -> Driver {
        let mut settings = crate::config::Settings::with_defaults(PathBuf::from("/nonexistent"));
        settings.server = online.then(|| "http://127.0.0.1:9".to_string());
        let p = Pipeline::new(
            crate::host::pipeline_config(&settings),
            "codex".into(),
            PathBuf::from("/r/rollout.jsonl"),
            Role::Session,
            once,
            t0(),
            None,
        );
        let mut d = Driver {
            p,
            now: t0(),
            file: Vec::new(),
            fold: LineCursor::fold(0, 0, LINE_LIMIT, Classifier::without_timestamps()),
            ship: LineCursor::text(0, 0, LINE_LIMIT),
            spool_fails: false,
            spooled_lines: Vec::new(),
            spooled_hooks: Vec::new(),
            log: Vec::new(),
        };
        d.append(lines);
        d
    }

    fn at(&mut self, secs: f64) {
        self.now = t0().plus(Duration::from_millis((secs * 1000.0) as u64));
    }

    fn append(&mut self, lines: &[String]) -> Vec<Action> {
        for l in lines {
            self.file.extend_from_slice(l.as_bytes());
            self.file.push(b'\n');
        }
        let (got, _) = self.fold.read(&self.file[..], usize::MAX).unwrap();
        self.send(Event::Folded {
            lines: got,
            partial: false,
        })
    }

    fn identify(&mut self, offline_resume: u64) -> Vec<Action> {
        let identity = self.p.state().identity.clone().unwrap();
        self.send(Event::Identified {
            identity,
            offline_resume,
        })
    }

    /// Handles `event`, performs the synchronous actions (and feeds text), returns the
    /// requests and the exit.
    fn send(&mut self, event: Event) -> Vec<Action> {
        let mut queue = VecDeque::from([event]);
        let mut pending = Vec::new();
        loop {
            while let Some(e) = queue.pop_front() {
                for a in self.p.handle(e, self.now) {
                    match a {
                        Action::SpoolLines { batch, refused } => {
                            let result = if self.spool_fails {
                                self.log
                                    .push(format!("spool-failed {}", batch.line_numbers[0]));
                                SpoolResult::Failed("No space left on device".into())
                            } else {
                                self.log.push(format!(
                                    "spool {}..={}",
                                    batch.line_numbers[0],
                                    batch.line_numbers.last().unwrap()
                                ));
                                self.spooled_lines.extend(&batch.line_numbers);
                                SpoolResult::Written
                            };
                            queue.push_back(Event::LinesSpooled { refused, result });
                        }
                        Action::SpoolHook(hook) => {
                            let result = if self.spool_fails {
                                SpoolResult::Failed("No space left on device".into())
                            } else {
                                self.log.push(format!("spool-hook {}", hook.route()));
                                self.spooled_hooks.push(hook.route());
                                SpoolResult::Written
                            };
                            queue.push_back(Event::HookSpooled { hook, result });
                        }
                        Action::ReadFrom(n) => {
                            self.ship = LineCursor::text(0, 0, LINE_LIMIT);
                            self.log.push(format!("read-from {n}"));
                        }
                        Action::ReloadToken | Action::TrimMemory => {}
                        other => {
                            self.log.push(label(&other));
                            pending.push(other);
                        }
                    }
                }
            }
            if self.p.wants_text() && self.ship.line_start() < self.fold.line_start() {
                let (lines, _) = self.ship.read(&self.file[..], 256).unwrap();
                let next = self.ship.next_number();
                queue.push_back(Event::Text { lines, next });
            } else {
                return pending;
            }
        }
    }

    fn tick(&mut self, secs: f64) -> Vec<Action> {
        self.at(secs);
        self.send(Event::Tick)
    }

    fn index_of(&self, label: &str) -> Option<usize> {
        self.log.iter().position(|l| l.starts_with(label))
    }
}

fn label(a: &Action) -> String {
    match a {
        Action::AskWatermark => "ask-watermark".into(),
        Action::Send { body, .. } => {
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            let n = v["line_numbers"].as_array().unwrap();
            format!("send {}..={}", n[0], n[n.len() - 1])
        }
        Action::Post(h) => format!("post {}", h.route()),
        Action::Exit(r) => format!("exit {}", r.as_str()),
        Action::Rewritten(why) => format!("rewritten {why}"),
        other => format!("{other:?}"),
    }
}

fn sent(actions: &[Action]) -> Option<u64> {
    actions.iter().find_map(|a| match a {
        Action::Send { generation, .. } => Some(*generation),
        _ => None,
    })
}

fn exits(actions: &[Action]) -> bool {
    actions.iter().any(|a| matches!(a, Action::Exit(_)))
}

fn child_turn() -> Vec<String> {
    vec![meta(), started(), complete()]
}

/// Case 1: SIGTERM while the first watermark request is in flight. The answer is awaited
/// within the budget, the transcript is shipped, nothing is spooled, and the stop (due)
/// goes out only after the transcript.
#[test]
fn stopped_during_the_first_watermark_waits_for_it_then_ships_normally() {
    let mut d = Driver::new(true, false, &child_turn());
    assert!(d.identify(0).contains(&Action::AskWatermark));
    // Long after the turn ended: the stop is due at the first chance.
    d.at(600.0);
    let a = d.send(Event::Signal("SIGTERM"));
    assert!(a.is_empty(), "nothing before the watermark: {a:?}");
    d.at(600.3);
    let a = d.send(Event::Watermark(Ok(Watermark::Empty)));
    let generation = sent(&a).expect("the transcript goes out");
    assert_eq!(d.log.last().unwrap(), "send 0..=2");
    d.at(600.4);
    let a = d.send(Event::Shipped {
        generation,
        result: Ok(()),
    });
    assert!(
        a.iter()
            .any(|a| matches!(a, Action::Post(Hook::SubagentStop(_))))
    );
    d.at(600.5);
    let stop = d.p.stop_hook();
    let a = d.send(Event::Posted {
        hook: stop,
        result: Ok(()),
    });
    assert!(exits(&a));
    assert!(
        d.spooled_lines.is_empty() && d.spooled_hooks.is_empty(),
        "{:?}",
        d.log
    );
    assert!(d.index_of("send").unwrap() < d.index_of("post subagent-stop").unwrap());
}

/// Case 1, the parent already dead at start: the same (parent exit is not a signal, so no
/// partial-line wait, but the same budget), and the stop it owes (R4.4) after the lines.
#[test]
fn a_dead_parent_at_start_still_ships_before_ending() {
    let mut d = Driver::new(true, false, &child_turn());
    d.identify(0);
    d.send(Event::ParentExited);
    let a = d.send(Event::Watermark(Ok(Watermark::Line(0))));
    let generation = sent(&a).unwrap();
    assert_eq!(d.log.last().unwrap(), "send 1..=2");
    let a = d.send(Event::Shipped {
        generation,
        result: Ok(()),
    });
    let stop = d.p.stop_hook();
    assert!(a.contains(&Action::Post(stop.clone())), "{:?}", d.log);
    let a = d.send(Event::Posted {
        hook: stop,
        result: Ok(()),
    });
    assert!(exits(&a), "{:?}", d.log);
    assert!(d.spooled_lines.is_empty() && d.spooled_hooks.is_empty());
}

/// Case 2: offline, a failed spool write confirms nothing, is retried with backoff, and
/// the due stop is not spooled ahead of its lines.
#[test]
fn a_failed_spool_write_keeps_the_lines_and_holds_the_stop() {
    let mut d = Driver::new(false, false, &[]);
    d.spool_fails = true;
    d.append(&child_turn());
    d.identify(0);
    let attempts = |d: &Driver| d.log.iter().filter(|l| l.starts_with("spool")).count();
    assert_eq!(attempts(&d), 1, "{:?}", d.log);
    // Before the retry time nothing is tried again; the stop waits even when due.
    d.tick(0.1);
    assert_eq!(attempts(&d), 1, "{:?}", d.log);
    d.at(400.0);
    let retry = d.p.next_wake(d.now).unwrap();
    assert!(retry <= d.now);
    d.tick(400.0);
    assert_eq!(d.log.last().unwrap(), "spool-failed 0");
    assert!(d.spooled_hooks.is_empty());
    d.spool_fails = false;
    d.tick(500.0);
    assert_eq!(d.spooled_lines, vec![0, 1, 2]);
    assert_eq!(d.spooled_hooks, vec!["subagent-stop"]);
    assert!(d.index_of("spool 0..=2").unwrap() < d.index_of("spool-hook").unwrap());
}

/// Case 3: a due stop answered 500, then SIGTERM: it goes to the hook spool at exit.
#[test]
fn a_due_stop_that_failed_is_spooled_at_exit() {
    let mut d = Driver::new(true, false, &child_turn());
    d.identify(0);
    let a = d.send(Event::Watermark(Ok(Watermark::Line(2))));
    assert!(sent(&a).is_none());
    let a = d.tick(301.0);
    assert!(
        a.iter()
            .any(|a| matches!(a, Action::Post(Hook::SubagentStop(_))))
    );
    let stop = d.p.stop_hook();
    d.send(Event::Posted {
        hook: stop,
        result: Err(Failure::Transient {
            status: Some(500),
            retry_after: None,
            error: "HTTP 500".into(),
        }),
    });
    d.at(302.0);
    let a = d.send(Event::Signal("SIGTERM"));
    // One more attempt within the budget...
    assert!(
        a.iter()
            .any(|a| matches!(a, Action::Post(Hook::SubagentStop(_))))
    );
    // ...which hangs: at 3 s the stop is spooled and the watcher ends.
    let a = d.tick(305.0);
    assert!(exits(&a));
    assert_eq!(d.spooled_hooks, vec!["subagent-stop"]);
}

/// Case 3, idle reap after a failed stop: spooled too.
#[test]
fn a_due_stop_that_failed_is_spooled_at_idle_reap() {
    let mut d = Driver::new(true, false, &child_turn());
    d.identify(0);
    d.send(Event::Watermark(Ok(Watermark::Line(2))));
    d.tick(301.0);
    let stop = d.p.stop_hook();
    d.send(Event::Posted {
        hook: stop,
        result: Err(Failure::Transient {
            status: Some(500),
            retry_after: None,
            error: "HTTP 500".into(),
        }),
    });
    let reap = d.p.due().idle_end.unwrap();
    d.now = reap;
    let a = d.send(Event::Tick);
    let stop = d.p.stop_hook();
    assert!(a.contains(&Action::Post(stop.clone())), "{:?}", d.log);
    let a = d.send(Event::Posted {
        hook: stop,
        result: Err(Failure::Transient {
            status: Some(500),
            retry_after: None,
            error: "HTTP 500".into(),
        }),
    });
    assert!(exits(&a), "{:?}", d.log);
    assert_eq!(d.spooled_hooks, vec!["subagent-stop"]);
}

/// Case 4: `--once` offline on more than 2,048 lines spools them all and the due stop.
#[test]
fn once_offline_spools_every_line_and_the_due_stop() {
    let mut lines = vec![meta(), started()];
    lines.extend((0..3000).map(|i| ev(&format!(r#"{{"type":"agent_message","message":"m{i}"}}"#))));
    lines.push(complete());
    let mut d = Driver::new(false, true, &lines);
    d.at(600.0);
    d.identify(0);
    d.p.begin_once(d.now);
    let a = d.send(Event::Tick);
    assert!(exits(&a), "{:?}", d.log);
    assert_eq!(d.spooled_lines.len(), 3003);
    assert_eq!(d.spooled_hooks, vec!["subagent-stop"]);
}

/// Case 4: `--once` with the server unreachable spools the lines and the due stop and
/// ends (exit 0), within seconds.
#[test]
fn once_with_an_unreachable_server_spools_and_ends() {
    let mut d = Driver::new(true, true, &child_turn());
    d.at(600.0);
    d.identify(0);
    d.p.begin_once(d.now);
    d.send(Event::Tick);
    let mut t = 600.0;
    let mut ended = false;
    while t < 620.0 && !ended {
        d.send(Event::Watermark(Err(Failure::Transient {
            status: None,
            retry_after: None,
            error: "failed to connect".into(),
        })));
        t =
            d.p.next_wake(d.now)
                .map_or(t + 1.0, |w| w.duration_since(t0()).as_secs_f64());
        ended = exits(&d.tick(t));
    }
    assert!(ended, "{:?}", d.log);
    assert!(
        t <= 600.0 + ONCE_STALL.as_secs_f64() + 0.01,
        "took until {t}"
    );
    assert_eq!(d.spooled_lines, vec![0, 1, 2]);
    assert_eq!(d.spooled_hooks, vec!["subagent-stop"]);
}

/// Case 6: offline, the resume line handed over by the shell (spool or offline
/// watermark) is where spooling starts.
#[test]
fn offline_resume_starts_after_what_was_handed_over() {
    let mut d = Driver::new(false, false, &child_turn());
    d.identify(2);
    assert_eq!(d.spooled_lines, vec![2]);
}

/// Case 7: a server refusing every batch is paced after the first few halvings.
#[test]
fn permanent_refusals_are_paced() {
    let lines: Vec<String> = (0..64)
        .map(|i| ev(&format!(r#"{{"type":"x{i}"}}"#)))
        .collect();
    let mut d = Driver::new(true, false, &[meta()]);
    d.identify(0);
    d.append(&lines);
    let mut a = d.send(Event::Watermark(Ok(Watermark::Empty)));
    let mut sends = 0;
    let mut immediate = 0;
    let start = d.now;
    while d.now < start.plus(Duration::from_secs(60)) {
        if let Some(generation) = sent(&a) {
            sends += 1;
            a = d.send(Event::Shipped {
                generation,
                result: Err(Failure::Rejected {
                    status: 400,
                    body_snippet: "bad".into(),
                }),
            });
            if sent(&a).is_some() {
                immediate += 1;
            }
        } else {
            let Some(next) = d.p.next_wake(d.now) else {
                break;
            };
            d.now = next.max(d.now.plus(Duration::from_millis(1)));
            a = d.send(Event::Tick);
        }
    }
    assert!(
        immediate <= FREE_HALVINGS as usize + 1,
        "{immediate} unpaced retries"
    );
    assert!(sends < 40, "{sends} requests in a minute");
    assert!(!d.spooled_lines.is_empty(), "refused lines are spooled");
}

/// Case 7: `404` from the transcript route is a wrong URL: retried with backoff, the lines
/// are kept (not split, not spooled as refused).
#[test]
fn a_wrong_server_path_is_retried_not_refused() {
    let mut d = Driver::new(true, false, &child_turn());
    d.identify(0);
    let a = d.send(Event::Watermark(Ok(Watermark::Empty)));
    let generation = sent(&a).unwrap();
    let a = d.send(Event::Shipped {
        generation,
        result: Err(Failure::WrongPath {
            status: 404,
            url: "http://h/kcap/hooks/transcript".into(),
        }),
    });
    assert!(sent(&a).is_none() && d.spooled_lines.is_empty());
    let wake = d.p.next_wake(d.now).unwrap();
    assert!(wake > d.now);
}

/// Case 8: SIGTERM with a hung server: everything unconfirmed is spooled and the watcher
/// is gone within 4 s.
#[test]
fn shutdown_with_a_hung_server_spools_within_the_budget() {
    let mut d = Driver::new(true, false, &child_turn());
    d.identify(0);
    let a = d.send(Event::Watermark(Ok(Watermark::Empty)));
    assert!(sent(&a).is_some());
    d.at(10.0);
    d.send(Event::Signal("SIGTERM"));
    let mut t = 10.0;
    let mut ended = false;
    while !ended && t < 20.0 {
        t =
            d.p.next_wake(d.now)
                .unwrap()
                .duration_since(t0())
                .as_secs_f64();
        ended = exits(&d.tick(t));
    }
    assert!(ended && t - 10.0 <= 4.0, "ended {ended} after {}", t - 10.0);
    assert_eq!(d.spooled_lines, vec![0, 1, 2]);
}

/// Every lifecycle route is one representation, so a `401` on any of them is a refused token
/// like a refused batch: the token is re-read right before the next request (here the lines
/// the failed start held back). Before, only the stop's `401` did this.
#[test]
fn a_token_refused_on_a_lifecycle_request_is_reread_before_the_next_request() {
    let mut d = Driver::new(true, false, &child_turn());
    d.identify(0);
    let a = d.send(Event::Watermark(Ok(Watermark::NotFound)));
    assert!(
        a.iter()
            .any(|a| matches!(a, Action::Post(Hook::SubagentStart(_)))),
        "{a:?}"
    );
    let start = d.p.start_hook();
    let a = d.p.handle(
        Event::Posted {
            hook: start.clone(),
            result: Err(Failure::Unauthorized {
                status: 401,
                token_sent: true,
            }),
        },
        d.now,
    );
    assert_eq!(a.first(), Some(&Action::SpoolHook(start)), "{a:?}");
    let reload = a.iter().position(|a| *a == Action::ReloadToken);
    let send = a.iter().position(|a| matches!(a, Action::Send { .. }));
    assert!(
        reload.is_some() && send.is_some() && reload < send,
        "the token is re-read before the lines go out: {a:?}"
    );
}
