//! `watch`, `supervise` and `replay`: the commands that need the async runtime.
//!
//! Both check what they will write to before anything else: the state directories must be
//! usable (`files::check_state_dir`) and every id that will name a file must follow the kcap
//! CLI's key rule (`files::check_id`), or the command exits 2 naming it.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::cli::{
    DaemonArgs, DaemonSettings, ReplayArgs, ReplaySettings, SettingsArgs, StatusArgs,
    StatusSettings, SuperviseArgs, SuperviseSettings, WatchArgs, WatchSettings,
};
use crate::codex::header::{Role, normalize_id};
use crate::config::Resolved;
use crate::error::{UsageError, code};
use crate::files;
use crate::settings::Command;
use crate::watch::clock::SystemClock;
use crate::watch::{self, ExitReason, Summary, WatchOptions};

/// Resolves the settings a command takes and starts logging (provided by `main`).
pub type SettingsFn = fn(Command, &SettingsArgs) -> Result<Resolved>;

fn runtime() -> Result<tokio::runtime::Runtime> {
    // One thread: the loop is a single select!, requests are tasks, the heartbeat has its own
    // OS thread.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")
}

/// Raises the soft open-file limit to the hard one (every command that may hold keys, and
/// the daemon whose supervisors inherit it), and says so when the hard limit is low: a
/// supervisor holds one descriptor per child key.
fn raise_open_files() {
    use crate::platform::open_files;
    let Some(r) = open_files::raise() else {
        return;
    };
    tracing::debug!(
        event = "open_files",
        soft_before = r.soft_before,
        soft = r.soft,
        hard = r.hard,
        "open-file limit raised from {} to {} (hard {})",
        r.soft_before,
        r.soft,
        r.hard
    );
    if r.hard < open_files::LOW {
        tracing::warn!(
            event = "open_files_low",
            soft = r.soft,
            hard = r.hard,
            "the open-file limit is low (soft {}, hard {}): a supervisor holds one per sub-agent; \
             raise the hard limit (LimitNOFILE in a systemd unit, ulimit -Hn) for sessions with \
             many sub-agents",
            r.soft,
            r.hard
        );
    }
}

pub fn watch(args: WatchArgs, settings: SettingsFn) -> Result<i32> {
    let resolved = settings(WatchSettings::COMMAND, &args.settings)?;
    raise_open_files();
    let s = &resolved.settings;
    let session = args.session_id().map(normalize_id);
    let agent = args.agent_id.as_deref().map(normalize_id);
    if let Some(id) = &session {
        files::check_id("session id", id)?;
    }
    if let Some(id) = &agent {
        files::check_id("agent id", id)?;
    }
    files::check_state_dir(&s.config_dir, "config directory", true)?;
    files::check_state_dir(&s.watcher_dir, "watcher directory", true)?;
    files::refuse_symlink(&s.watcher_dir)
        .map_err(|e| UsageError(format!("unusable watcher directory: {e}")))?;
    // The spawner passes both ids, so the log file is known before the rollout is read: any
    // fatal error from here on is recorded there (stderr goes nowhere under the spawner).
    let role: Option<Role> = args.role.map(Into::into);
    let early_key = match (&session, &agent, role) {
        (Some(s), Some(a), None | Some(Role::Child)) => Some((s, Some(a.as_str()))),
        (Some(s), _, Some(Role::Session)) => Some((s, None)),
        _ => None,
    };
    if let Some((session, agent)) = early_key {
        crate::logging::attach_file(&files::log_file_path(&s.config_dir, session, agent));
    }
    let opts = WatchOptions {
        rollout: args.rollout().to_path_buf(),
        session_id: args.session_id().map(str::to_string),
        agent_id: args.agent_id.clone(),
        role: args.role.map(Into::into),
        parent_pid: args.parent_pid,
        cwd: args.cwd.as_ref().map(|c| c.display().to_string()),
        vendor: "codex".to_string(),
        once: args.once,
    };
    let online = resolved.settings.server.is_some();
    let (reason, summary) =
        runtime()?.block_on(watch::run(opts, resolved.settings, Arc::new(SystemClock)))?;
    if reason == ExitReason::OnceDone || args.once {
        print_summary(&summary, online)?;
    }
    Ok(code::OK)
}

pub fn supervise(args: SuperviseArgs, settings: SettingsFn) -> Result<i32> {
    let resolved = settings(SuperviseSettings::COMMAND, &args.settings)?;
    raise_open_files();
    let s = &resolved.settings;
    if let Some(id) = &args.session_id {
        files::check_id("session id", &normalize_id(id))?;
    }
    files::check_state_dir(&s.config_dir, "config directory", true)?;
    files::check_state_dir(&s.watcher_dir, "watcher directory", true)?;
    files::refuse_symlink(&s.watcher_dir)
        .map_err(|e| UsageError(format!("unusable watcher directory: {e}")))?;
    let opts = crate::supervise::run::SuperviseOptions {
        rollout: args.rollout,
        session_id: args.session_id,
        with_session: args.with_session,
        parent_pid: args.parent_pid,
    };
    runtime()?.block_on(crate::supervise::run::run(
        opts,
        resolved.settings,
        Arc::new(SystemClock),
    ))?;
    Ok(code::OK)
}

fn print_summary(s: &Summary, online: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let none = || "-".to_string();
    writeln!(
        out,
        "{} {}{} turn {}: folded {} lines",
        s.role.unwrap_or("session"),
        s.session_id.clone().unwrap_or_else(none),
        s.agent_id
            .as_deref()
            .map(|a| format!("/{a}"))
            .unwrap_or_default(),
        s.turn,
        s.lines_folded
    )?;
    if online {
        writeln!(
            out,
            "shipped {} lines from line {}",
            s.lines_shipped,
            s.resume_line.unwrap_or(0)
        )?;
    }
    if s.lines_spooled > 0 || !online {
        let path = s
            .transcript_spool
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(none);
        writeln!(out, "spooled {} lines to {path}", s.lines_spooled)?;
    }
    if let Some(stop) = &s.stop {
        writeln!(out, "subagent-stop: {stop}")?;
    }
    out.flush()?;
    Ok(())
}

pub fn replay(args: ReplayArgs, settings: SettingsFn) -> Result<i32> {
    let resolved = settings(ReplaySettings::COMMAND, &args.settings)?;
    let s = resolved.settings;
    let Some(url) = s.server.clone() else {
        return Err(UsageError(
            "replay needs a kcap server: set KCAP_URL (or pass --server)".to_string(),
        )
        .into());
    };
    let session = args.session_id.as_deref().map(normalize_id);
    if let Some(id) = &session {
        files::check_id("session id", id)?;
    }
    files::check_state_dir(&s.config_dir, "config directory", false)?;
    let report = runtime()?.block_on(crate::ship::replay::replay(
        &s.config_dir,
        &url,
        s.credentials(&url),
        session.as_deref(),
    ))?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "replayed {} transcript records and {} lifecycle requests; kept {} for later; left {} records of other tools to the kcap CLI",
        report.transcript_delivered, report.hooks_delivered, report.kept, report.left
    )?;
    if report.refused_lines > 0 {
        writeln!(
            out,
            "set aside {} line(s) the server refuses in {}",
            report.refused_lines,
            s.config_dir.join("kcap-watch").join("refused").display()
        )?;
    }
    if report.needs_import_reported > 0 {
        writeln!(
            out,
            "reported {} session(s) needing `kcap import`",
            report.needs_import_reported
        )?;
    }
    out.flush()?;
    if let Some(path) = report.refused.first() {
        return Err(UsageError(format!(
            "refused {} unsafe spool file(s), first {}: {}",
            report.refused.len(),
            path.0.display(),
            path.1
        ))
        .into());
    }
    Ok(code::OK)
}

/// `daemon`: prints a service definition, or runs until a signal.
pub fn daemon(args: DaemonArgs, settings: SettingsFn) -> Result<i32> {
    // Resolved first, also for --print-service: a unit must not carry a setting the daemon
    // it starts would refuse.
    let resolved = settings(DaemonSettings::COMMAND, &args.settings)?;
    let s = &resolved.settings;
    let given = crate::settings::given(
        DaemonSettings::COMMAND,
        &args.settings,
        &crate::config::process_env,
    );
    if let Some(kind) = args.print_service {
        let exe = std::env::current_exe()
            .and_then(std::fs::canonicalize)
            .map(crate::platform::plain_path::plain)
            .context("failed to find this binary's path")?;
        let cargo_target_dir = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from);
        if crate::daemon::service::in_build_dir(&exe, cargo_target_dir.as_deref()) {
            return Err(UsageError(format!(
                "{} is in a build directory, which the next build replaces: install kcap-watch \
                 (for example cargo install --profile dist --locked --path .) and run \
                 --print-service from the installed binary",
                exe.display()
            ))
            .into());
        }
        let carried = crate::daemon::service::carried(&given, s, &crate::config::process_env)
            .map_err(UsageError)?;
        let text = crate::daemon::service::render(kind, &exe, &carried);
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
        return Ok(code::OK);
    }
    raise_open_files();
    files::check_state_dir(&s.config_dir, "config directory", true)?;
    files::check_state_dir(&s.watcher_dir, "watcher directory", true)?;
    let daemon = crate::daemon::DaemonConfig {
        config_dir: s.config_dir.clone(),
        watcher_dir: s.watcher_dir.clone(),
        server: s.server.clone(),
        profile: s.profile.clone(),
        codex_home: s.codex_home.clone(),
        poll_interval: s.poll_interval,
        force_poll: s.force_poll,
        exclude: s.exclude.clone(),
        supervise_flags: crate::daemon::supervise_flags(&given),
        restart_timing: crate::daemon::RestartTiming {
            settle: s.restart_settle,
            first_backoff: s.restart_backoff,
        },
    };
    runtime()?.block_on(crate::daemon::run(daemon))?;
    Ok(code::OK)
}

/// `status`: reads, optionally cleans, prints.
pub fn status(args: StatusArgs, settings: SettingsFn) -> Result<i32> {
    let resolved = settings(StatusSettings::COMMAND, &args.settings)?;
    let dirs = crate::status::StatusDirs {
        config_dir: resolved.settings.config_dir,
        watcher_dir: resolved.settings.watcher_dir,
    };
    let report = crate::status::gather(&dirs, args.clean);
    let mut rendered = Vec::new();
    if args.json {
        serde_json::to_writer_pretty(&mut rendered, &report)?;
        rendered.push(b'\n');
    } else {
        crate::status::write_text(&report, &mut rendered)?;
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&rendered)?;
    out.flush()?;
    Ok(if report.unreadable.is_empty() {
        code::OK
    } else {
        code::USAGE
    })
}
