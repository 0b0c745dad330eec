//! The server-fault scenarios and the regressions found from outside, as data: each file in
//! `src/pipeline/cases/` is a rollout, a list of timed events (server answers among them) and
//! the actions the pipeline must answer with, run against the pure pipeline by the tests'
//! [`Driver`] in milliseconds (notify-debouncer-full's `test_cases/` is the model).
//!
//! The format, one step a line (`#` starts a comment):
//!
//! ```text
//! online | offline                 how the pipeline is made (first line)
//! lines meta started complete      the rollout at start (also: msg, x<N> for N filler lines,
//!                                  session-meta for a session's header instead of a child's)
//! at 0 identify 0 => ask-watermark an event at t0 + 0 s, and the labels that must follow it,
//!                                  in order (`=> nothing`: no request, spool or exit at all)
//! at next tick                     `next`: when the pipeline asked to be woken
//! at +0.1 shipped ok               `+s`: that long after the step before
//! expect spooled-lines 0..=2       what was handed over in the end (also: none)
//! expect spooled-hooks subagent-stop
//! expect no-wake-before 3          the pipeline does not ask to act before t0 + 3 s
//! expect wake-within 30            it asks to act again at most 30 s from now
//! expect never post subagent-stop  no such label, ever
//! expect exited | running
//! ```
//!
//! Events: `identify N`; `watermark empty|not-found|line N|fail <status>|fail transport`;
//! `shipped ok|fail <status>|fail transport|refused <status>` (answers the batch last sent);
//! `shipped-retry-after <status> <secs>`; `posted stop|start|session-end ok|fail <status>`
//! (the session end answered is the one the pipeline owes);
//! `signal`; `parent-exited`; `latch-stop` (a stop this process already posted); `tick`; `append <lines>`; `spool-fails on|off`;
//! `tick-until-exit <secs>` (ticks whenever the pipeline asks, answering nothing, for at most
//! that long).

use super::*;

/// One parsed case file.
struct Case {
    name: String,
    online: bool,
    steps: Vec<(usize, String)>,
}

fn parse(name: &str, text: &str) -> Case {
    let mut steps = Vec::new();
    let mut online = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        match line {
            "online" | "offline" if online.is_none() => online = Some(line == "online"),
            _ => {
                assert!(
                    online.is_some(),
                    "{name}:{}: first say online or offline",
                    i + 1
                );
                steps.push((i + 1, line.to_owned()));
            }
        }
    }
    Case {
        name: name.to_owned(),
        online: online.unwrap_or_else(|| panic!("{name}: empty case")),
        steps,
    }
}

/// `meta started complete msg x5` as rollout lines.
fn rollout_lines(words: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for w in words {
        match *w {
            "meta" => out.push(meta()),
            "session-meta" => out.push(
                r#"{"type":"session_meta","payload":{"id":"019fa981-2dca-7a31-9c55-3b1f0e6d2a01","cwd":"/home/dev/src/acme-api"}}"#
                    .into(),
            ),
            "started" => out.push(started()),
            "complete" => out.push(complete()),
            "msg" => out.push(ev(r#"{"type":"agent_message","message":"working"}"#)),
            x if x.starts_with('x') => {
                let n: usize = x[1..].parse().expect("x<N>");
                out.extend((0..n).map(|i| ev(&format!(r#"{{"type":"x{i}"}}"#))));
            }
            other => panic!("unknown line {other}"),
        }
    }
    out
}

fn failure(words: &[&str]) -> Failure {
    match words {
        ["transport"] => Failure::Transient {
            status: None,
            retry_after: None,
            error: "failed to connect: connection refused".into(),
        },
        [code] => {
            let status: u16 = code.parse().expect("a status");
            match status {
                401 | 403 => Failure::Unauthorized {
                    status,
                    token_sent: true,
                },
                404 | 405 => Failure::WrongPath {
                    status,
                    url: "http://127.0.0.1:9/hooks/transcript".into(),
                },
                408 | 429 | 500..=599 => Failure::Transient {
                    status: Some(status),
                    retry_after: None,
                    error: format!("HTTP {status}"),
                },
                _ => Failure::Rejected {
                    status,
                    body_snippet: "refused".into(),
                },
            }
        }
        other => panic!("unknown failure {other:?}"),
    }
}

/// `0..=2` or `none` as line numbers.
fn numbers(spec: &str) -> Vec<u64> {
    if spec == "none" {
        return Vec::new();
    }
    let (a, b) = spec.split_once("..=").expect("a..=b or none");
    (a.parse().expect("a number")..=b.parse().expect("a number")).collect()
}

fn run(case: &Case) {
    let mut d: Option<Driver> = None;
    let mut last_generation = None;
    let mut exited = false;
    for (n, step) in &case.steps {
        let at = format!("{}:{n}: {step}", case.name);
        let (step, want) = match step.split_once("=>") {
            Some((s, w)) => (s.trim(), Some(w.trim())),
            None => (step.as_str(), None),
        };
        let words: Vec<&str> = step.split_whitespace().collect();
        if words[0] == "lines" {
            d = Some(Driver::new(case.online, false, &rollout_lines(&words[1..])));
            continue;
        }
        let d = d.as_mut().unwrap_or_else(|| panic!("{at}: no `lines` yet"));
        if words[0] == "expect" {
            match &words[1..] {
                ["spooled-lines", spec] => {
                    assert_eq!(d.spooled_lines, numbers(spec), "{at}: {:?}", d.log)
                }
                ["spooled-hooks", "none"] => {
                    assert!(d.spooled_hooks.is_empty(), "{at}: {:?}", d.log)
                }
                ["spooled-hooks", routes @ ..] => {
                    assert_eq!(d.spooled_hooks, routes.to_vec(), "{at}: {:?}", d.log)
                }
                ["no-wake-before", secs] => {
                    let t = t0().plus(Duration::from_secs_f64(secs.parse().expect("secs")));
                    let wake = d.p.next_wake(d.now);
                    assert!(wake.is_none_or(|w| w >= t), "{at}: wakes at {wake:?}");
                }
                ["wake-within", secs] => {
                    let t = d
                        .now
                        .plus(Duration::from_secs_f64(secs.parse().expect("secs")));
                    let wake = d.p.next_wake(d.now);
                    assert!(wake.is_some_and(|w| w <= t), "{at}: wakes at {wake:?}");
                }
                ["never", label @ ..] => {
                    let label = label.join(" ");
                    assert!(
                        !d.log.iter().any(|l| l.starts_with(&label)),
                        "{at}: {:?}",
                        d.log
                    );
                }
                ["exited"] => assert!(exited, "{at}: still running: {:?}", d.log),
                ["running"] => assert!(!exited, "{at}: exited: {:?}", d.log),
                other => panic!("{at}: unknown expectation {other:?}"),
            }
            continue;
        }
        assert_eq!(words[0], "at", "{at}: a step starts with `at`");
        match words[1] {
            "next" => {
                let wake =
                    d.p.next_wake(d.now)
                        .unwrap_or_else(|| panic!("{at}: no wake"));
                d.now = wake.max(d.now);
            }
            later if later.starts_with('+') => {
                d.now = d.now.plus(Duration::from_secs_f64(
                    later[1..].parse().expect("+seconds"),
                ));
            }
            secs => d.at(secs.parse().expect("seconds")),
        }
        let before = d.log.len();
        let actions = match &words[2..] {
            ["identify", n] => d.identify(n.parse().expect("a line")),
            ["watermark", "empty"] => d.send(Event::Watermark(Ok(Watermark::Empty))),
            ["watermark", "not-found"] => d.send(Event::Watermark(Ok(Watermark::NotFound))),
            ["watermark", "line", n] => {
                d.send(Event::Watermark(Ok(Watermark::Line(n.parse().expect("n")))))
            }
            ["watermark", "fail", f @ ..] => d.send(Event::Watermark(Err(failure(f)))),
            ["shipped", result @ ..] => {
                let generation = last_generation.unwrap_or_else(|| panic!("{at}: nothing sent"));
                let result = match result {
                    ["ok"] => Ok(()),
                    ["fail", f @ ..] | ["refused", f @ ..] => Err(failure(f)),
                    other => panic!("{at}: {other:?}"),
                };
                d.send(Event::Shipped { generation, result })
            }
            ["shipped-retry-after", status, secs] => {
                let generation = last_generation.unwrap_or_else(|| panic!("{at}: nothing sent"));
                d.send(Event::Shipped {
                    generation,
                    result: Err(Failure::Transient {
                        status: Some(status.parse().expect("status")),
                        retry_after: Some(Duration::from_secs(secs.parse().expect("secs"))),
                        error: format!("HTTP {status}"),
                    }),
                })
            }
            ["posted", which, result @ ..] => {
                let hook = match *which {
                    "stop" => d.p.stop_hook(),
                    "start" => d.p.start_hook(),
                    "session-end" => {
                        d.p.hooks
                            .owed(Lifecycle::SessionEnd)
                            .cloned()
                            .unwrap_or_else(|| panic!("{at}: no session end owed"))
                    }
                    other => panic!("{at}: {other}"),
                };
                let result = match result {
                    ["ok"] => Ok(()),
                    ["fail", f @ ..] => Err(failure(f)),
                    other => panic!("{at}: {other:?}"),
                };
                d.send(Event::Posted { hook, result })
            }
            ["signal"] => d.send(Event::Signal("SIGTERM")),
            ["latch-stop"] => {
                d.p.latch_stop();
                Vec::new()
            }
            ["parent-exited"] => d.send(Event::ParentExited),
            ["tick"] => d.send(Event::Tick),
            ["append", lines @ ..] => d.append(&rollout_lines(lines)),
            ["spool-fails", on] => {
                d.spool_fails = *on == "on";
                Vec::new()
            }
            ["tick-until-exit", secs] => {
                let limit = d.now.plus(Duration::from_secs(secs.parse().expect("secs")));
                let mut all = Vec::new();
                while !exits(&all) {
                    let Some(wake) = d.p.next_wake(d.now) else {
                        break;
                    };
                    if wake > limit {
                        break;
                    }
                    d.now = wake.max(d.now);
                    all.extend(d.send(Event::Tick));
                }
                all
            }
            other => panic!("{at}: unknown event {other:?}"),
        };
        if let Some(g) = sent(&actions) {
            last_generation = Some(g);
        }
        exited |= exits(&actions);
        let new: Vec<&str> = d.log[before..]
            .iter()
            .map(String::as_str)
            .filter(|l| !l.starts_with("read-from"))
            .collect();
        match want {
            None => {}
            Some("nothing") => assert!(new.is_empty(), "{at}: got {new:?}"),
            Some(want) => {
                // Each wanted label, in order, among what happened (a label is a prefix).
                let mut rest = new.iter();
                for w in want.split(',').map(str::trim) {
                    assert!(
                        rest.any(|l| l.starts_with(w)),
                        "{at}: wanted {want:?}, got {new:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn every_case_file_holds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/pipeline/cases");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "case"))
        .collect();
    names.sort();
    assert!(names.len() >= 9, "case files missing in {}", dir.display());
    for path in names {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        run(&parse(&name, &std::fs::read_to_string(&path).unwrap()));
    }
}
