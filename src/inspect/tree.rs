//! `kcap-watch inspect --tree`: every descendant sub-agent of one session, each with what
//! `inspect` shows for its file, and whether a live watcher holds it.
//!
//! What a user debugging a card that keeps spinning needs in one view: which sub-agents the
//! session has (children, grandchildren, found exactly as `supervise` finds them, by one full
//! scan of the discovery module, no watching), the state and due times of each (the same
//! [`Report`] `inspect` prints for one file, so the two cannot drift), and whether the kcap
//! CLI would consider the child's watcher alive (its liveness rule on `<watchers>/<key>.*`).
//!
//! Liveness is judged at the real time, whatever `--now` says: a heartbeat is fresh or stale
//! now, not at a modelled instant.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use serde::Serialize;

use super::{InspectRequest, Report, inspect_folded, modelled, open_rollout, write_text};
use crate::codex::header::{Identity, Role};
use crate::codex::layout::{CodexLayout, Header, read_header_timed};
use crate::decide::Windows;
use crate::error::UsageError;
use crate::files::{check_id, watcher_key};
use crate::fold::State;
use crate::host::ownership::{KeyFiles, Verdict};
use crate::supervise::discover::{Discovery, Found, ThreadFacts};
use crate::time::Ts;

/// What `inspect --tree` was asked.
pub struct TreeRequest<'a> {
    /// The session's rollout: the root of the tree.
    pub session: &'a Path,
    /// `--codex-home` / `CODEX_HOME`; `None`: derived from the session rollout's path.
    pub codex_home: Option<&'a Path>,
    /// Where the watchers' pid, started and heartbeat files are.
    pub watcher_dir: &'a Path,
    /// Decisions are evaluated at this time.
    pub now: Ts,
    /// Observe each line at its own `timestamp`.
    pub line_times: bool,
    /// The lifetime ceiling (`None`: disabled) and the cap on its pause credit.
    pub lifetime: Option<Duration>,
    pub max_pause_credit: Duration,
}

/// The whole tree: the root's report and one entry per descendant, parents before their
/// children, siblings by start time then id.
#[derive(Debug, Serialize)]
pub struct TreeReport {
    /// The root thread's id (without dashes).
    pub root_id: String,
    /// The session every descendant ships under (docs/behaviour.md R8): the root's session id,
    /// which for a session rollout is its own id. Child watcher keys are
    /// `<session_id>-<thread_id>`.
    pub session_id: String,
    /// The `sessions/` directory that was scanned (and `archived_sessions/` beside it).
    pub codex_sessions: String,
    pub watcher_dir: String,
    /// The real time at which watcher liveness was judged.
    pub judged_at: String,
    /// Exactly what `inspect --json` prints for the session rollout.
    pub root: Report,
    pub descendants: Vec<Descendant>,
}

/// One descendant: where it sits in the tree, its watcher, and `inspect`'s report of its
/// file (flattened: the object is `inspect --json`'s plus the tree's fields).
#[derive(Debug, Serialize)]
pub struct Descendant {
    pub thread_id: String,
    /// Its parent in the tree: the root or another descendant.
    pub parent_id: String,
    /// 1 for a child of the root, 2 for a grandchild, ...
    pub depth: u32,
    /// The `timestamp` of its first line.
    pub started_at: Option<String>,
    pub watcher: WatcherReport,
    /// When a watcher of this child ends at its lifetime ceiling: the live watcher's (from
    /// its `.started`, with the pause credit earned so far), or one started now.
    pub lifetime_ceiling: Option<CeilingReport>,
    /// Why the file could not be inspected (then the report's fields are absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(flatten)]
    pub report: Option<Report>,
}

/// Whether a live watcher holds the child, by the kcap CLI's rule.
#[derive(Debug, Serialize)]
pub struct WatcherReport {
    /// `<session_id>-<thread_id>`; `None` when the id cannot name a file (R5).
    pub key: Option<String>,
    /// `alive`, `none` (no pid file), `dead`, `recycled` (the pid now names another
    /// process), `wedged` (running, but its heartbeat is stale), or `invalid_key`.
    pub state: &'static str,
    /// Whether a live watcher holds the child: the kcap CLI's spawner starts no other.
    pub held: bool,
    pub pid: Option<u32>,
    pub started: Option<String>,
    pub heartbeat: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct CeilingReport {
    pub at: String,
    /// `live watcher start` or `now` (no live watcher: one started now).
    pub counted_from: &'static str,
}

/// Finds the session's descendants (one full scan) and inspects each.
pub fn inspect_tree(
    req: &TreeRequest<'_>,
    windows_for: &dyn Fn(Role) -> Windows,
) -> Result<TreeReport> {
    // The same checks and errors as `inspect` (exit 2 for a missing file, a directory, ...).
    drop(open_rollout(req.session)?);
    let no_header = || {
        UsageError(format!(
            "{} has no readable session_meta first line: cannot tell whose sub-agents to list",
            req.session.display()
        ))
    };
    let meta = match read_header_timed(req.session) {
        Ok((Header::Meta(meta), _)) => meta,
        Ok(_) => return Err(no_header().into()),
        Err(e) => {
            return Err(UsageError(format!(
                "cannot read rollout {}: {e}",
                req.session.display()
            ))
            .into());
        }
    };
    let root_id = ThreadFacts::from_meta(&meta).ok_or_else(no_header)?.id;
    let session_id = Identity::from_meta(&meta)
        .session_id
        .unwrap_or_else(|| root_id.clone());
    check_id("session id", &session_id)?;
    let layout = CodexLayout::for_session(req.session, req.codex_home).map_err(UsageError)?;
    let codex_sessions = layout.sessions.display().to_string();

    let root = inspect_folded(
        &InspectRequest {
            path: req.session,
            now: req.now,
            line_times: req.line_times,
        },
        windows_for,
    )?
    .0;

    let mut discovery = Discovery::new(layout, &root_id);
    let joined: Vec<(String, String, std::path::PathBuf)> = discovery
        .scan(SystemTime::now())
        .into_iter()
        .filter_map(|found| match found {
            Found::Joined {
                thread_id,
                parent_id,
                path,
                ..
            } => Some((thread_id, parent_id, path)),
            Found::Moved { .. } | Found::Continuation { .. } => None,
        })
        .collect();

    let judged_at = Ts::now();
    let mut entries: HashMap<String, Descendant> = HashMap::new();
    let mut children: BTreeMap<String, Vec<(Option<Ts>, String)>> = BTreeMap::new();
    for (thread_id, parent_id, path) in joined {
        let started = read_header_timed(&path).ok().and_then(|(_, at)| at);
        let folded = inspect_folded(
            &InspectRequest {
                path: &path,
                now: req.now,
                line_times: req.line_times,
            },
            windows_for,
        );
        let key = watcher_key(&session_id, Some(&thread_id));
        let watcher = if check_id("agent id", &thread_id).is_ok() {
            watcher_report(&KeyFiles::read(req.watcher_dir, &key), key, judged_at)
        } else {
            WatcherReport {
                key: None,
                state: "invalid_key",
                held: false,
                pid: None,
                started: None,
                heartbeat: None,
            }
        };
        let (report, state, error) = match folded {
            Ok((report, state)) => (Some(report), Some(state), None),
            Err(e) => (None, None, Some(format!("{e:#}"))),
        };
        let live_start = watcher
            .held
            .then(|| watcher.started.as_deref().and_then(Ts::parse_rfc3339))
            .flatten();
        let lifetime_ceiling = req.lifetime.and_then(|lifetime| {
            ceiling(
                live_start,
                lifetime,
                req.max_pause_credit,
                &windows_for(Role::Child),
                state.as_ref(),
                req.now,
            )
        });
        children
            .entry(parent_id.clone())
            .or_default()
            .push((started, thread_id.clone()));
        entries.insert(
            thread_id.clone(),
            Descendant {
                thread_id,
                parent_id,
                depth: 0,
                started_at: started.map(Ts::rfc3339),
                watcher,
                lifetime_ceiling,
                error,
                report,
            },
        );
    }

    // Depth first from the root; siblings by start time (unknown last), then id.
    for siblings in children.values_mut() {
        siblings.sort_by(|a, b| (a.0.is_none(), a.0, &a.1).cmp(&(b.0.is_none(), b.0, &b.1)));
    }
    let mut descendants = Vec::with_capacity(entries.len());
    let mut stack: Vec<(String, u32)> = vec![(root_id.clone(), 0)];
    while let Some((id, depth)) = stack.pop() {
        if let Some(mut entry) = entries.remove(&id) {
            entry.depth = depth;
            descendants.push(entry);
        }
        if let Some(kids) = children.get(&id) {
            stack.extend(kids.iter().rev().map(|(_, kid)| (kid.clone(), depth + 1)));
        }
    }

    Ok(TreeReport {
        root_id,
        session_id,
        codex_sessions,
        watcher_dir: req.watcher_dir.display().to_string(),
        judged_at: judged_at.rfc3339(),
        root,
        descendants,
    })
}

fn watcher_report(files: &KeyFiles, key: String, now: Ts) -> WatcherReport {
    let (state, pid) = match files.judge(now) {
        Verdict::Vacant => ("none", None),
        Verdict::Dead { pid } => ("dead", Some(pid)),
        Verdict::Recycled { pid } => ("recycled", Some(pid)),
        Verdict::Wedged { pid } => ("wedged", Some(pid)),
        Verdict::Alive { pid } => ("alive", Some(pid)),
    };
    WatcherReport {
        key: Some(key),
        state,
        held: state == "alive",
        pid,
        started: files.started.map(Ts::rfc3339),
        heartbeat: files.heartbeat.map(Ts::rfc3339),
    }
}

/// The ceiling of the live watcher (started at `live_start`), extended by the pause credit
/// it has earned by `now`; without one, the ceiling of a watcher started at `now`. The
/// pipeline such a watcher runs says when.
fn ceiling(
    live_start: Option<Ts>,
    lifetime: Duration,
    cap: Duration,
    windows: &Windows,
    state: Option<&State>,
    now: Ts,
) -> Option<CeilingReport> {
    let (started, counted_from) = match live_start {
        Some(at) => (at, "live watcher start"),
        None => (now, "now"),
    };
    let seeded = state.map(|s| (s.clone(), s.counters.lines, false));
    let pipeline = modelled(
        Path::new(""),
        Role::Child,
        windows,
        Some((lifetime, cap)),
        started,
        seeded,
    );
    Some(CeilingReport {
        at: pipeline.due_at(now).lifetime_ceiling?.rfc3339(),
        counted_from,
    })
}

/// Prints the tree for people: the root's block, then one block per descendant, indented by
/// its depth.
pub fn write_tree_text(t: &TreeReport, raw_out: &mut dyn Write) -> std::io::Result<()> {
    // Every line with its control characters escaped (paths, ids and agent messages are
    // untrusted text).
    let out = &mut crate::logging::OneLineWriter::new(raw_out);
    let n = t.descendants.len();
    writeln!(
        out,
        "session tree   {} ({n} {})",
        t.session_id,
        if n == 1 { "descendant" } else { "descendants" }
    )?;
    writeln!(out, "codex sessions {}", t.codex_sessions)?;
    writeln!(
        out,
        "watchers       {} (liveness judged at {})",
        t.watcher_dir, t.judged_at
    )?;
    let mut root = Vec::new();
    write_text(&t.root, &mut root)?;
    out.write_raw(&root)?;
    for d in &t.descendants {
        let indent = "    ".repeat(d.depth as usize);
        let kind = d
            .report
            .as_ref()
            .and_then(|r| r.agent_type.clone())
            .unwrap_or_else(|| "sub-agent".into());
        writeln!(out)?;
        writeln!(
            out,
            "{}└─ {kind} {} (depth {}, parent {})",
            "    ".repeat(d.depth.saturating_sub(1) as usize),
            d.thread_id,
            d.depth,
            d.parent_id
        )?;
        let mut block_bytes = Vec::new();
        let block = &mut crate::logging::OneLineWriter::new(&mut block_bytes);
        writeln!(
            block,
            "started        {}",
            d.started_at.as_deref().unwrap_or("-")
        )?;
        let w = &d.watcher;
        let key = w.key.as_deref().unwrap_or("-");
        let watcher = match (w.state, w.pid) {
            ("alive", Some(pid)) => format!("held by a live watcher, pid {pid} (key {key})"),
            ("none", _) => format!("not held: no watcher files for key {key}"),
            ("dead", Some(pid)) => format!("not held: pid {pid} is gone (key {key})"),
            ("recycled", Some(pid)) => {
                format!("not held: pid {pid} now names another process (key {key})")
            }
            ("wedged", Some(pid)) => {
                format!("not held: pid {pid} runs but its heartbeat is stale (key {key})")
            }
            _ => "not held: the thread id cannot name a watcher key".to_string(),
        };
        writeln!(block, "watcher        {watcher}")?;
        if w.pid.is_some() {
            writeln!(
                block,
                "watcher files  started {}, heartbeat {}",
                w.started.as_deref().unwrap_or("-"),
                w.heartbeat.as_deref().unwrap_or("-")
            )?;
        }
        match &d.lifetime_ceiling {
            Some(c) => writeln!(block, "due: ceiling   {} (from {})", c.at, c.counted_from)?,
            None => writeln!(block, "due: ceiling   never")?,
        }
        if let Some(e) = &d.error {
            writeln!(block, "error          {e}")?;
        }
        if let Some(r) = &d.report {
            let mut report = Vec::new();
            write_text(r, &mut report)?;
            block.write_raw(&report)?;
        }
        // Already escaped: each of these lines is one line of the block.
        for line in String::from_utf8_lossy(&block_bytes).lines() {
            writeln!(out, "{indent}{line}")?;
        }
    }
    Ok(())
}
