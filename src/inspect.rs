//! `kcap-watch inspect`: fold a rollout and print what a watcher would know and decide.
//!
//! It runs the same seeding pass and the same decision functions as the watcher, so the due
//! times it prints are the ones a watcher acts on. The watcher it models starts at `--now`
//! (or at the time of the observation when `--now` is not given): idle end and reap count
//! from that start at the earliest, as for a watcher the kcap CLI spawns on an old file.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::codex::header::{Identity, Role, missing_key};
use crate::decide::{OwedBecause, WatcherEnd, Windows};
use crate::error::UsageError;
use crate::fold::State;
use crate::fold::seed::{LineTimes, seed};
use crate::pipeline::{Pipeline, PipelineConfig};
use crate::time::Ts;

pub mod tree;

/// What `inspect` was asked.
pub struct InspectRequest<'a> {
    pub path: &'a Path,
    /// Decisions are evaluated at this time.
    pub now: Ts,
    /// Observe each line at its own `timestamp` instead of the file's modification time.
    pub line_times: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub path: String,
    pub role: &'static str,
    pub session_id: Option<String>,
    pub agent_id: Option<String>,
    pub agent_type: Option<String>,
    pub parent_thread_id: Option<String>,
    /// Why `watch` could not key this rollout without ids on its command line (a child
    /// header that names no parent, a missing header), when it could not.
    pub missing_key: Option<String>,
    pub now: String,
    /// When the modelled watcher started (the same as `now`).
    pub watcher_start: String,
    pub lines: LinesReport,
    pub turn: TurnReport,
    pub pending_tools: Vec<PendingReport>,
    pub last_activity: Option<String>,
    /// What idle end and reap count from, and why.
    pub idle_since: IdleSinceReport,
    pub pause: Option<PauseReport>,
    pub stalled: bool,
    /// The stop a child watcher would owe if it ended now on reap, ceiling or parent exit.
    pub stop_owed_at_exit: Option<OwedReport>,
    pub due: DueReport,
}

#[derive(Debug, Serialize)]
pub struct IdleSinceReport {
    pub at: String,
    /// `last activity`, `close of the last pause` or `watcher start`.
    pub from: &'static str,
}

#[derive(Debug, Serialize)]
pub struct OwedReport {
    /// `due` (its grace had passed) or `watcher_ending` (owed even though the turn may not
    /// have ended).
    pub because: &'static str,
    pub turn: &'static str,
    pub last_assistant_message: String,
}

#[derive(Debug, Serialize)]
pub struct BindingReport {
    /// `primary`, `secondary`, or `window <n>` for another key.
    pub window: String,
    pub used_percent: Option<f64>,
    pub window_minutes: Option<f64>,
    pub resets_at: Option<String>,
    /// Why this window was chosen.
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct LinesReport {
    pub complete: u64,
    pub blank: u64,
    pub malformed: u64,
    pub oversize: u64,
    /// Queued inter-agent mail lines: shipped, never activity.
    pub queued_mail: u64,
    /// Lines of the parent's history copied into a sub-agent's rollout (S6): shipped, never
    /// folded.
    pub inherited: u64,
    pub bytes: u64,
    pub partial_tail_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct TurnReport {
    pub state: &'static str,
    pub turn_id: Option<String>,
    pub last_agent_message: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct PendingReport {
    pub call_id: String,
    pub name: Option<String>,
    pub since: String,
}

#[derive(Debug, Serialize)]
pub struct PauseReport {
    pub reason: &'static str,
    pub opened_at: String,
    pub ends_at: Option<String>,
    pub state: &'static str,
    /// The rate-limit window that set `ends_at`, and why it was chosen.
    pub binding: Option<BindingReport>,
}

#[derive(Debug, Serialize)]
pub struct DueReport {
    pub subagent_stop: Option<String>,
    pub idle_end: Option<String>,
    pub stall_warning: Option<String>,
    pub lifetime_ceiling: Option<String>,
}

/// Opens a rollout for reading, turning the reasons a user can fix into exit-2 errors.
pub(crate) fn open_rollout(path: &Path) -> Result<File> {
    let meta = std::fs::metadata(path)
        .map_err(|e| UsageError(format!("cannot read rollout {}: {e}", path.display())))?;
    crate::tail::require_regular_file(path, &meta)?;
    File::open(path)
        .map_err(|e| UsageError(format!("cannot read rollout {}: {e}", path.display())).into())
}

/// Folds the file and evaluates every decision at `req.now`.
pub fn inspect(req: &InspectRequest<'_>, windows_for: &dyn Fn(Role) -> Windows) -> Result<Report> {
    inspect_folded(req, windows_for).map(|(report, _)| report)
}

/// [`inspect`], also returning the folded state (for the facts `--tree` adds).
fn inspect_folded(
    req: &InspectRequest<'_>,
    windows_for: &dyn Fn(Role) -> Windows,
) -> Result<(Report, State)> {
    let file = open_rollout(req.path)?;
    let meta = file.metadata().ok();
    let mtime = meta
        .as_ref()
        .and_then(|m| m.modified().ok())
        .map(Ts::from_system)
        .unwrap_or(req.now)
        .min(req.now);
    let times = if req.line_times {
        LineTimes::Own { fallback: mtime }
    } else {
        LineTimes::All(mtime)
    };
    let on_disk = meta.as_ref().map_or(0, std::fs::Metadata::len);
    let seeded = seed(&file, on_disk, times, crate::ship::LINE_LIMIT)
        .with_context(|| format!("failed to read rollout {}", req.path.display()))?;
    let state = &seeded.state;
    let identity = state.identity.clone().unwrap_or_else(Identity::unknown);
    let windows = windows_for(identity.role);
    let report = build_report(
        req,
        state,
        &identity,
        &windows,
        seeded.cursor.partial_bytes(),
    );
    Ok((report, seeded.state))
}

fn build_report(
    req: &InspectRequest<'_>,
    state: &State,
    identity: &Identity,
    windows: &Windows,
    partial: u64,
) -> Report {
    let now = req.now;
    let watcher_start = now;
    // The pipeline a watcher started now would run: its due times and what it would owe are
    // the report's (no lifetime ceiling here: `--tree` reports it per descendant).
    let pipeline = modelled(
        req.path,
        identity.role,
        windows,
        None,
        watcher_start,
        Some((state.clone(), state.counters.lines, partial > 0)),
    );
    let due = pipeline.due_at(now);
    let owed = pipeline.owed_at_exit(WatcherEnd::Idle, now);
    let c = state.counters;
    Report {
        path: req.path.display().to_string(),
        role: identity.role.as_str(),
        session_id: identity.session_id.clone(),
        agent_id: identity.agent_id.clone(),
        agent_type: identity.agent_type.clone(),
        parent_thread_id: identity.parent_thread_id.clone(),
        missing_key: missing_key(state.identity.as_ref(), false, false)
            .map(|m| m.message(req.path)),
        now: now.rfc3339(),
        watcher_start: watcher_start.rfc3339(),
        lines: LinesReport {
            complete: c.lines,
            blank: c.blank,
            malformed: c.malformed,
            oversize: c.oversize,
            queued_mail: c.queued_mail,
            inherited: c.inherited,
            bytes: c.bytes,
            partial_tail_bytes: partial,
        },
        turn: TurnReport {
            state: state.turn.as_str(),
            turn_id: state.turn_id.clone(),
            last_agent_message: state.last_agent_message.clone(),
        },
        pending_tools: state
            .pending
            .iter()
            .map(|p| PendingReport {
                call_id: p.call_id.clone(),
                name: p.name.clone(),
                since: p.since.rfc3339(),
            })
            .collect(),
        last_activity: state.last_activity.map(Ts::rfc3339),
        idle_since: IdleSinceReport {
            at: state.idle_since(watcher_start).rfc3339(),
            from: state.idle_since_source(watcher_start).as_str(),
        },
        pause: state.last_pause().map(|p| PauseReport {
            reason: crate::codex::observe::USAGE_LIMIT,
            opened_at: p.opened_at.rfc3339(),
            ends_at: p.ends_at.map(Ts::rfc3339),
            state: p.state_at(now).as_str(),
            binding: p.binding.map(|b| BindingReport {
                window: b.name(),
                used_percent: b.window.used_percent,
                window_minutes: b.window.window_minutes,
                resets_at: b.resets_at().map(Ts::rfc3339),
                reason: b.reason.describe(),
            }),
        }),
        stalled: state.stalled || due.stall_warning.is_some_and(|t| t <= now),
        stop_owed_at_exit: owed.map(|o| OwedReport {
            because: match o.because {
                OwedBecause::Due => "due",
                OwedBecause::WatcherEnding => "watcher_ending",
            },
            turn: o.turn.as_str(),
            last_assistant_message: o.last_assistant_message,
        }),
        due: DueReport {
            subagent_stop: due.subagent_stop.map(Ts::rfc3339),
            idle_end: due.idle_end.map(Ts::rfc3339),
            stall_warning: due.stall_warning.map(Ts::rfc3339),
            lifetime_ceiling: None,
        },
    }
}

/// The pipeline a watcher of `path` started at `started` would run over what seeding folded
/// (`lifetime`: its ceiling and the cap on pause credit). It is only asked, never driven:
/// `inspect` shows what it says is due, so the two cannot drift.
fn modelled(
    path: &Path,
    role: Role,
    windows: &Windows,
    lifetime: Option<(Duration, Duration)>,
    started: Ts,
    seeded: Option<(State, u64, bool)>,
) -> Pipeline {
    let config = PipelineConfig {
        online: false,
        child: *windows,
        session: *windows,
        lifetime: lifetime.map(|(l, _)| l),
        max_pause_credit: lifetime.map_or(Duration::ZERO, |(_, cap)| cap),
        stop_retry: Duration::ZERO,
    };
    Pipeline::new(
        config,
        String::new(),
        path.to_path_buf(),
        role,
        false,
        started,
        seeded,
    )
}

/// Prints the report for people.
pub fn write_text(r: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    // Agent messages, tool names and paths come from the rollout: each line is written with its
    // control characters escaped.
    let out = &mut crate::logging::OneLineWriter::new(out);
    let none = || "-".to_string();
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(none);
    writeln!(out, "rollout        {}", r.path)?;
    writeln!(out, "role           {}", r.role)?;
    writeln!(out, "session id     {}", opt(&r.session_id))?;
    if r.role == "child" {
        writeln!(out, "agent id       {}", opt(&r.agent_id))?;
        writeln!(out, "agent type     {}", opt(&r.agent_type))?;
        writeln!(out, "parent thread  {}", opt(&r.parent_thread_id))?;
    }
    if let Some(m) = &r.missing_key {
        writeln!(out, "missing key    {m}")?;
    }
    let l = &r.lines;
    writeln!(
        out,
        "lines          {} complete ({} blank, {} malformed, {} oversize), {} bytes, {} bytes of partial last line",
        l.complete, l.blank, l.malformed, l.oversize, l.bytes, l.partial_tail_bytes
    )?;
    if l.queued_mail > 0 {
        writeln!(
            out,
            "queued mail    {} lines (shipped; not activity, open no turn)",
            l.queued_mail
        )?;
    }
    if l.inherited > 0 {
        writeln!(
            out,
            "inherited      {} lines of the parent's history before the child's own (shipped; never folded)",
            l.inherited
        )?;
    }
    writeln!(
        out,
        "turn           {} (turn id {})",
        r.turn.state,
        opt(&r.turn.turn_id)
    )?;
    if let Some(m) = &r.turn.last_agent_message {
        let short: String = m.chars().take(100).collect();
        let ellipsis = if short.len() < m.len() { "…" } else { "" };
        writeln!(out, "last message   {short}{ellipsis}")?;
    }
    if r.pending_tools.is_empty() {
        writeln!(out, "in flight      none")?;
    }
    for p in &r.pending_tools {
        writeln!(
            out,
            "in flight      {} {} since {}",
            p.call_id,
            p.name.as_deref().unwrap_or("?"),
            p.since
        )?;
    }
    writeln!(out, "last activity  {}", opt(&r.last_activity))?;
    writeln!(out, "watcher start  {}", r.watcher_start)?;
    writeln!(
        out,
        "idle since     {} ({})",
        r.idle_since.at, r.idle_since.from
    )?;
    match &r.pause {
        None => writeln!(out, "pause          none")?,
        Some(p) => {
            writeln!(
                out,
                "pause          {} opened {} until {} ({})",
                p.reason,
                p.opened_at,
                p.ends_at.clone().unwrap_or_else(|| "unknown".into()),
                p.state
            )?;
            if let Some(b) = &p.binding {
                let num = |v: Option<f64>| v.map_or_else(|| "?".to_string(), |v| format!("{v}"));
                writeln!(
                    out,
                    "binding window {} at {}% ({} min) resets {}: {}",
                    b.window,
                    num(b.used_percent),
                    num(b.window_minutes),
                    b.resets_at.clone().unwrap_or_else(|| "unknown".into()),
                    b.reason
                )?;
            }
        }
    }
    writeln!(
        out,
        "stalled        {}",
        if r.stalled { "yes" } else { "no" }
    )?;
    writeln!(out, "now            {}", r.now)?;
    let due = |v: &Option<String>| v.clone().unwrap_or_else(|| "never".into());
    writeln!(out, "due: stop      {}", due(&r.due.subagent_stop))?;
    writeln!(out, "due: idle end  {}", due(&r.due.idle_end))?;
    writeln!(out, "due: stall     {}", due(&r.due.stall_warning))?;
    if let Some(o) = &r.stop_owed_at_exit {
        let short: String = o.last_assistant_message.chars().take(100).collect();
        writeln!(
            out,
            "owed at exit   stop ({}; turn {}): {short}",
            o.because, o.turn
        )?;
    }
    Ok(())
}
