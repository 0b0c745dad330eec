//! `kcap-watch inspect --tree` against a real `CODEX_HOME` built from the fixtures: a session
//! with two children (one in the next day's directory) and a grandchild written in the older
//! header form (parent only under `source.subagent.thread_spawn`), beside an unrelated session
//! and its child. The tree's shape and order, each descendant's turn state and due times
//! (fixed by `--line-times --now`), and which child a live `watch` process holds.

use crate::support;
use support::bin::SpawnRetry;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::bin::{kcap_watch, run, wait_for};

const ROOT: &str = "019fa981-2dca-7a31-9c55-3b1f0e6d2a01";
/// Started first, but its id sorts after `CHILD_B`'s: siblings are ordered by start time.
const CHILD_A: &str = "019ff981-6ea2-7b02-8d11-5c2e9f7a4b02";
const CHILD_B: &str = "019fb1f2-6d40-7b19-9e35-4f8c2a1d6066";
const GRANDCHILD: &str = "019fb1c0-5a18-7e03-8b2d-7c41f9e6a033";
const OTHER_SESSION: &str = "019fb1d0-2b66-7a44-9c10-5e82d7a1f044";
const OTHER_CHILD: &str = "019fb1b2-0e57-7d21-b3c8-2f6a9e0d4b22";

const NOW: &str = "2026-07-28T18:20:00Z";

fn bare(id: &str) -> String {
    id.replace('-', "")
}

fn key(agent: &str) -> String {
    format!("{}-{}", bare(ROOT), bare(agent))
}

struct Layout {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    config: PathBuf,
    session: PathBuf,
    /// Every descendant's rollout, by bare thread id.
    paths: Vec<(String, PathBuf)>,
}

/// Writes a fixture into `<home>/sessions/<day>/` after textual replacements (ids, times).
fn place(home: &Path, day: &str, name: &str, fixture: &str, replace: &[(&str, &str)]) -> PathBuf {
    let mut text = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/codex")
            .join(fixture),
    )
    .unwrap();
    for (from, to) in replace {
        assert!(text.contains(from), "{fixture} lacks {from}");
        text = text.replace(from, to);
    }
    // One component at a time: the paths the binary prints use the platform's separator.
    let dir = day
        .split('/')
        .fold(home.join("sessions"), |dir, part| dir.join(part));
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path
}

fn layout() -> Layout {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("codex");
    let config = tmp.path().join("kcap");
    // Codex names date directories by local date: in UTC+6 the session starts late on the
    // 28th and its second child just after midnight, in the 29th's directory.
    let session = place(
        &home,
        "2026/07/28",
        &format!("rollout-2026-07-28T22-13-45-{ROOT}.jsonl"),
        "parent-session.jsonl",
        &[],
    );
    // Current header form; its own id rewritten so that id order and start order differ.
    let a = place(
        &home,
        "2026/07/28",
        &format!("rollout-2026-07-28T22-14-05-{CHILD_A}.jsonl"),
        "child-two-turns.jsonl",
        &[("019fa981-6ea2-7b02-8d11-5c2e9f7a4b02", CHILD_A)],
    );
    let b = place(
        &home,
        "2026/07/29",
        &format!("rollout-2026-07-29T00-00-00-{CHILD_B}.jsonl"),
        "child-current-shapes.jsonl",
        &[("019fb1a0-0c41-7e52-9d3a-51f0c2a7e001", ROOT)],
    );
    // The older header form, spawned by CHILD_B: moved to 18:1x so it starts after its parent.
    let g = place(
        &home,
        "2026/07/29",
        &format!("rollout-2026-07-29T00-12-40-{GRANDCHILD}.jsonl"),
        "child-crashed-mid-turn.jsonl",
        &[
            ("019fb1a0-0c41-7e52-9d3a-51f0c2a7e001", CHILD_B),
            ("2026-07-28T09:1", "2026-07-28T18:1"),
        ],
    );
    // Another session and its child, in the same directories: never part of the tree.
    place(
        &home,
        "2026/07/28",
        &format!("rollout-2026-07-28T12-30-05-{OTHER_SESSION}.jsonl"),
        "session-resumed.jsonl",
        &[],
    );
    place(
        &home,
        "2026/07/29",
        &format!("rollout-2026-07-29T00-02-00-{OTHER_CHILD}.jsonl"),
        "child-queued-mail.jsonl",
        &[("019fb1a0-0c41-7e52-9d3a-51f0c2a7e001", OTHER_SESSION)],
    );
    Layout {
        _tmp: tmp,
        home,
        config,
        session,
        paths: vec![
            (bare(CHILD_A), a),
            (bare(CHILD_B), b),
            (bare(GRANDCHILD), g),
        ],
    }
}

impl Layout {
    fn cmd(&self) -> Command {
        let mut c = kcap_watch(&self.config);
        c.env_remove("CODEX_HOME");
        c
    }

    fn inspect_tree(&self, json: bool, extra: &[&str]) -> Output {
        let mut c = self.cmd();
        c.args(["inspect", "--tree", "--line-times", "--now", NOW]);
        if json {
            c.arg("--json");
        }
        c.args(extra).arg(&self.session);
        run(c, Duration::from_secs(20))
    }

    fn tree_json(&self) -> Value {
        let out = self.inspect_tree(true, &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
    }

    fn path_of(&self, id: &str) -> &Path {
        &self.paths.iter().find(|(t, _)| *t == bare(id)).unwrap().1
    }

    fn watchers(&self) -> PathBuf {
        self.config.join("watchers")
    }
}

/// A real `watch` process for one child, as the kcap CLI spawns it, offline.
struct Watcher(Child);

impl Watcher {
    fn start(l: &Layout, agent: &str) -> Watcher {
        let mut c = l.cmd();
        c.args(["watch", &bare(ROOT)])
            .arg(l.path_of(agent))
            .args(["--agent-id", &bare(agent), "--vendor", "codex"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = c.spawn_retrying().unwrap();
        let pid = l.watchers().join(format!("{}.pid", key(agent)));
        let beat = l.watchers().join(format!("{}.heartbeat", key(agent)));
        assert!(
            wait_for(Duration::from_secs(15), || pid.exists() && beat.exists()),
            "the watcher never wrote its pid and heartbeat files"
        );
        Watcher(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ids(tree: &Value) -> Vec<(String, String, u64)> {
    tree["descendants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["thread_id"].as_str().unwrap().to_string(),
                d["parent_id"].as_str().unwrap().to_string(),
                d["depth"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn descendant<'a>(tree: &'a Value, id: &str) -> &'a Value {
    tree["descendants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["thread_id"] == bare(id))
        .unwrap_or_else(|| panic!("{id} missing from the tree"))
}

#[test]
fn json_lists_children_and_the_grandchild_in_tree_order_with_their_states_and_due_times() {
    let l = layout();
    let tree = l.tree_json();
    assert_eq!(tree["root_id"], bare(ROOT));
    assert_eq!(tree["session_id"], bare(ROOT));
    assert_eq!(tree["root"]["role"], "session");
    assert_eq!(tree["root"]["turn"]["state"], "completed");
    // Parents before children; the siblings by start time (A at 16:14 before B at 18:00,
    // although B's id sorts first); the unrelated session's child nowhere.
    assert_eq!(
        ids(&tree),
        vec![
            (bare(CHILD_A), bare(ROOT), 1),
            (bare(CHILD_B), bare(ROOT), 1),
            (bare(GRANDCHILD), bare(CHILD_B), 2),
        ]
    );
    assert!(
        !String::from_utf8_lossy(&serde_json::to_vec(&tree).unwrap()).contains(&bare(OTHER_CHILD))
    );

    let a = descendant(&tree, CHILD_A);
    assert_eq!(a["started_at"], "2026-07-28T16:14:05.115Z");
    assert_eq!(a["agent_type"], "Hypatia");
    assert_eq!(a["turn"]["state"], "completed");
    assert_eq!(a["pending_tools"], Value::Array(vec![]));
    // The default 5-minute grace after the last line; reap 6 h after the modelled start.
    assert_eq!(a["due"]["subagent_stop"], "2026-07-28T16:24:06.415Z");
    assert_eq!(a["due"]["idle_end"], "2026-07-29T00:20:00.001Z");
    assert_eq!(a["lifetime_ceiling"]["at"], "2026-07-29T18:20:00.000Z");
    assert_eq!(a["lifetime_ceiling"]["counted_from"], "now");

    let b = descendant(&tree, CHILD_B);
    assert_eq!(b["path"], l.path_of(CHILD_B).display().to_string());
    assert_eq!(b["agent_type"], "planner");
    assert_eq!(b["turn"]["state"], "completed");
    assert_eq!(b["due"]["subagent_stop"], "2026-07-28T18:07:47.402Z");

    // The crashed grandchild: its turn never ended, so no stop is due, but a watcher ending
    // now would owe one with its last agent message.
    let g = descendant(&tree, GRANDCHILD);
    assert_eq!(g["started_at"], "2026-07-28T18:12:40.551Z");
    assert_eq!(g["parent_thread_id"], bare(CHILD_B));
    assert_eq!(g["turn"]["state"], "open");
    assert_eq!(g["due"]["subagent_stop"], Value::Null);
    assert_eq!(g["last_activity"], "2026-07-28T18:13:43.990Z");
    assert_eq!(g["stop_owed_at_exit"]["because"], "watcher_ending");
    assert_eq!(
        g["stop_owed_at_exit"]["last_assistant_message"],
        "Spec updated with POST /invoices; regenerating the client now."
    );

    for id in [CHILD_A, CHILD_B, GRANDCHILD] {
        let d = descendant(&tree, id);
        assert_eq!(d["watcher"]["held"], false, "{id}");
        assert_eq!(d["watcher"]["state"], "none", "{id}");
        assert_eq!(d["watcher"]["key"], key(id), "{id}");
    }
}

#[test]
fn each_descendant_carries_exactly_what_inspect_prints_for_its_file() {
    let l = layout();
    let tree = l.tree_json();
    let tree_fields = [
        "thread_id",
        "parent_id",
        "depth",
        "started_at",
        "watcher",
        "lifetime_ceiling",
    ];
    for (id, path) in &l.paths {
        let mut c = l.cmd();
        c.args(["inspect", "--json", "--line-times", "--now", NOW])
            .arg(path);
        let out = run(c, Duration::from_secs(20));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let single: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut d = descendant(&tree, id).clone();
        for f in tree_fields {
            assert!(
                d.as_object_mut().unwrap().remove(f).is_some(),
                "{f} missing"
            );
        }
        assert_eq!(d, single, "{id}");
    }
    let mut c = l.cmd();
    c.args(["inspect", "--json", "--line-times", "--now", NOW])
        .arg(&l.session);
    let single: Value = serde_json::from_slice(&run(c, Duration::from_secs(20)).stdout).unwrap();
    assert_eq!(tree["root"], single);
}

#[test]
fn a_child_held_by_a_live_watch_process_is_shown_as_held_and_a_dead_ones_is_not() {
    let l = layout();
    let watcher = Watcher::start(&l, GRANDCHILD);
    // CHILD_B's files name a process that has exited: the kcap CLI would spawn a new one.
    let gone_pid = support::procs::exited_pid();
    fs::write(
        l.watchers().join(format!("{}.pid", key(CHILD_B))),
        format!("{gone_pid}\n"),
    )
    .unwrap();
    fs::write(
        l.watchers().join(format!("{}.started", key(CHILD_B))),
        "2026-07-28T18:00:01.000Z",
    )
    .unwrap();

    let tree = l.tree_json();
    let g = &descendant(&tree, GRANDCHILD)["watcher"];
    assert_eq!(g["held"], true, "{g}");
    assert_eq!(g["state"], "alive");
    assert_eq!(g["pid"], watcher.pid());
    // The live watcher's ceiling counts from its own start, not from --now.
    let started = g["started"].as_str().unwrap();
    let ceiling = &descendant(&tree, GRANDCHILD)["lifetime_ceiling"];
    assert_eq!(ceiling["counted_from"], "live watcher start");
    assert_ne!(ceiling["at"], "2026-07-29T18:20:00.000Z");
    assert!(ceiling["at"].as_str().unwrap() > started);

    let b = &descendant(&tree, CHILD_B)["watcher"];
    assert_eq!(b["held"], false);
    assert_eq!(b["state"], "dead");
    assert_eq!(b["pid"], gone_pid);
    assert_eq!(descendant(&tree, CHILD_A)["watcher"]["state"], "none");

    let out = l.inspect_tree(false, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "watcher        held by a live watcher, pid {} (key {})",
            watcher.pid(),
            key(GRANDCHILD)
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("watcher        not held: pid {gone_pid} is gone")),
        "{text}"
    );
    drop(watcher);
}

/// The text blocks of the descendants, by their header lines (`└─ ...`), in order.
fn blocks(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("└─ ") {
            out.push((line.to_string(), Vec::new()));
        } else if let Some((_, body)) = out.last_mut()
            && !line.is_empty()
        {
            body.push(line.to_string());
        }
    }
    out
}

#[test]
fn text_is_an_indented_tree_with_one_block_per_descendant() {
    let l = layout();
    let out = l.inspect_tree(false, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with(&format!("session tree   {} (3 descendants)\n", bare(ROOT))));
    assert!(!text.contains(&bare(OTHER_CHILD)));
    let blocks = blocks(&text);
    let heads: Vec<&str> = blocks.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(
        heads,
        vec![
            format!(
                "└─ Hypatia {} (depth 1, parent {})",
                bare(CHILD_A),
                bare(ROOT)
            )
            .as_str(),
            format!(
                "└─ planner {} (depth 1, parent {})",
                bare(CHILD_B),
                bare(ROOT)
            )
            .as_str(),
            format!(
                "    └─ Curie {} (depth 2, parent {})",
                bare(GRANDCHILD),
                bare(CHILD_B)
            )
            .as_str(),
        ]
    );
    let expect = |i: usize, indent: &str, lines: &[&str]| {
        for want in lines {
            let want = format!("{indent}{want}");
            assert!(
                blocks[i].1.contains(&want),
                "block {i} lacks {want:?}:\n{text}"
            );
        }
    };
    expect(
        0,
        "    ",
        &[
            "turn           completed (turn id 0198b1d2-0002-7000-8000-00000000aa02)",
            "due: stop      2026-07-28T16:24:06.415Z",
            "due: idle end  2026-07-29T00:20:00.001Z",
            "due: ceiling   2026-07-29T18:20:00.000Z (from now)",
            "started        2026-07-28T16:14:05.115Z",
        ],
    );
    expect(
        1,
        "    ",
        &[
            "due: stop      2026-07-28T18:07:47.402Z",
            &format!("rollout        {}", l.path_of(CHILD_B).display()),
        ],
    );
    expect(
        2,
        "        ",
        &[
            "turn           open (turn id 019fb1c0-5a4c-7d12-9e08-13bd2f7c3301)",
            "due: stop      never",
            "last activity  2026-07-28T18:13:43.990Z",
        ],
    );
}

#[test]
fn codex_home_comes_from_the_flag_or_the_variable_when_the_path_does_not_say() {
    let l = layout();
    // The session rollout copied out of Codex's tree: its path names no CODEX_HOME.
    let elsewhere = l._tmp.path().join(l.session.file_name().unwrap());
    fs::copy(&l.session, &elsewhere).unwrap();
    let run_with = |env: Option<&Path>, flag: Option<&Path>| {
        let mut c = l.cmd();
        c.args(["inspect", "--tree", "--json", "--line-times", "--now", NOW]);
        if let Some(home) = env {
            c.env("CODEX_HOME", home);
        }
        if let Some(home) = flag {
            c.arg("--codex-home").arg(home);
        }
        c.arg(&elsewhere);
        run(c, Duration::from_secs(20))
    };
    let out = run_with(None, None);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--codex-home") && err.contains("CODEX_HOME"),
        "{err}"
    );

    for out in [run_with(Some(&l.home), None), run_with(None, Some(&l.home))] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tree: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(ids(&tree).len(), 3);
    }
    // The flag wins over the variable.
    let empty = l._tmp.path().join("empty-home");
    fs::create_dir_all(empty.join("sessions")).unwrap();
    let out = run_with(Some(&empty), Some(&l.home));
    let tree: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&tree).len(), 3);
    let out = run_with(Some(&l.home), Some(&empty));
    let tree: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&tree).len(), 0);
}

#[test]
fn a_rollout_without_a_session_meta_header_exits_2_naming_it() {
    let l = layout();
    let bad = l
        .home
        .join("sessions/2026/07/28/rollout-2026-07-28T23-00-00-bad.jsonl");
    fs::write(
        &bad,
        "{\"timestamp\":\"2026-07-28T10:00:00Z\",\"type\":\"event_msg\",\"payload\":{}}\n",
    )
    .unwrap();
    let mut c = l.cmd();
    c.args(["inspect", "--tree"]).arg(&bad);
    let out = run(c, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&bad.display().to_string()) && err.contains("session_meta"),
        "{err}"
    );
}
