//! `kcap-watch status [--json] [--clean]` (docs/behaviour.md S3): every watched session and
//! sub-agent on this machine, from the watcher directory and kcap-watch's status files.
//!
//! The kcap CLI's files say who holds a key and whether it is alive by its rule; kcap-watch's
//! status files ([`crate::status_file`]) say what its own processes are doing. A pid file
//! whose pid and start token match a live kcap-watch status file naming the key is
//! kcap-watch's; any other live one is the kcap CLI's. Nothing here writes, but `--clean`,
//! which removes only kcap-watch's own stale files, and only of keys whose lock it can take.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::host::ownership::{KeyFiles, Verdict};
use crate::platform::proc_info;
use crate::ship::spool;
use crate::status_file::{self, KeyStatus, SkippedSession, StatusFile, TakenSession, Writer};
use crate::time::Ts;

/// The version of the `--json` shape.
pub const VERSION: u32 = 1;

#[derive(Debug, Serialize)]
pub struct StatusReport {
    pub version: u32,
    pub kcap_watch_version: String,
    pub config_dir: String,
    pub watcher_dir: String,
    pub daemon: DaemonReport,
    pub sessions: Vec<SessionReport>,
    pub stale: Vec<StaleFile>,
    /// Files `--clean` removed.
    pub cleaned: Vec<String>,
    /// Directories that exist but could not be read (exit 2).
    pub unreadable: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct DaemonReport {
    pub running: bool,
    pub pid: Option<u32>,
    pub version: Option<String>,
    pub server: Option<String>,
    pub updated_at: Option<String>,
    pub sessions_taken: Vec<TakenSession>,
    pub sessions_skipped: Vec<SkippedSession>,
}

#[derive(Debug, Serialize)]
pub struct SessionReport {
    pub session_id: String,
    pub keys: Vec<KeyReport>,
    /// Transcript spool: records and bytes waiting for `replay`.
    pub transcript_spool_records: u64,
    pub transcript_spool_bytes: u64,
    /// Lifecycle spool.
    pub hook_spool_records: u64,
    pub hook_spool_bytes: u64,
    /// `<config>/kcap-watch/refused/<session>.jsonl`.
    pub refused_records: u64,
    pub refused_bytes: u64,
    /// `transcript-spool/<session>.needs-import` exists: lines were lost to the spool cap.
    pub needs_import: bool,
}

#[derive(Debug, Serialize)]
pub struct KeyReport {
    pub key: String,
    pub session_id: String,
    pub agent_id: Option<String>,
    pub rollout: Option<String>,
    /// `kcap-watch supervise`, `kcap-watch watch`, `kcap CLI`, or none.
    pub holder: Option<String>,
    pub pid: Option<u32>,
    /// The kcap CLI's verdict: `alive`, `dead`, `recycled`, `wedged`, `none`.
    pub verdict: String,
    /// The holder's kcap-watch version, when kcap-watch holds it.
    pub kcap_watch_version: Option<String>,
    /// kcap-watch's figures for the key, when kcap-watch holds it.
    pub kcap_watch: Option<KeyStatus>,
    /// The holder's safety-net poll period now, in milliseconds, when kcap-watch holds it
    /// (docs/behaviour.md, "The safety-net poll").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct StaleFile {
    pub path: String,
    pub why: String,
}

/// What `status` reads: the two state directories, nothing else (no server, no token).
#[derive(Clone, Debug)]
pub struct StatusDirs {
    pub config_dir: PathBuf,
    pub watcher_dir: PathBuf,
}

/// Reads everything; with `clean`, removes the stale files it may first.
pub fn gather(settings: &StatusDirs, clean: bool) -> StatusReport {
    let now = Ts::now();
    let mut report = StatusReport {
        version: VERSION,
        kcap_watch_version: env!("CARGO_PKG_VERSION").into(),
        config_dir: settings.config_dir.display().to_string(),
        watcher_dir: settings.watcher_dir.display().to_string(),
        daemon: DaemonReport {
            running: false,
            pid: None,
            version: None,
            server: None,
            updated_at: None,
            sessions_taken: Vec::new(),
            sessions_skipped: Vec::new(),
        },
        sessions: Vec::new(),
        stale: Vec::new(),
        cleaned: Vec::new(),
        unreadable: Vec::new(),
    };
    // Status files: live ones by writer pid, stale ones listed.
    let mut live: Vec<StatusFile> = Vec::new();
    let mut stale_status: Vec<(PathBuf, String, Writer)> = Vec::new();
    let status_dir = status_file::status_dir(&settings.config_dir);
    // kcap-watch never writes through a link there (`files::ensure_private_dir`), so one found
    // there is not followed: `--clean` would otherwise remove files wherever it points.
    let status_names = if crate::files::refuse_symlink(&status_dir).is_err() {
        report.unreadable.push(format!(
            "{}: a symbolic link, not followed",
            status_dir.display()
        ));
        Vec::new()
    } else {
        list(&status_dir, &mut report.unreadable)
    };
    for name in status_names {
        let Some((key, writer)) = status_file::parse_file_name(&name) else {
            continue;
        };
        let path = status_dir.join(&name);
        match status_file::read(&path) {
            // Whoever wrote it (an older kcap-watch included), no URL's secret is shown.
            Ok(Some(file)) if file.writer_alive() => live.push(file.with_urls_redacted()),
            Ok(Some(_)) => {
                report.stale.push(StaleFile {
                    path: path.display().to_string(),
                    why: "status file of a process that is gone".into(),
                });
                stale_status.push((path, key.to_owned(), writer));
            }
            _ => {}
        }
    }
    if let Some(d) = live.iter().find(|f| f.writer == Writer::Daemon) {
        report.daemon = DaemonReport {
            running: true,
            pid: Some(d.pid),
            version: Some(d.kcap_watch_version.clone()),
            server: d.server.clone(),
            updated_at: Some(d.updated_at.clone()),
            sessions_taken: d.sessions_taken.clone(),
            sessions_skipped: d.sessions_skipped.clone(),
        };
    }
    // Keys: every pid file, and every key a live kcap-watch process says it holds.
    let watcher_dir = &settings.watcher_dir;
    let names = list(watcher_dir, &mut report.unreadable);
    let mut keys: BTreeSet<String> = names
        .iter()
        .filter_map(|n| n.strip_suffix(".pid"))
        .map(str::to_owned)
        .collect();
    for f in &live {
        keys.extend(f.keys.iter().map(|k| k.key.clone()));
    }
    let mut sessions: BTreeMap<String, Vec<KeyReport>> = BTreeMap::new();
    for key in &keys {
        let k = key_report(watcher_dir, key, &live, now);
        sessions.entry(k.session_id.clone()).or_default().push(k);
    }
    // Stale kcap-watch files in the watcher directory: a `.lock` nobody holds, heartbeat slots
    // of a key nobody alive holds.
    let mut stale_keys: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for name in &names {
        let (key, why) = if let Some(key) = name.strip_suffix(".lock") {
            (key, "lock file nobody holds")
        } else if let Some(key) = ["-0", "-1", "-new"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .and_then(|n| n.strip_suffix(".heartbeat"))
        {
            (key, "heartbeat slot of a key nobody alive holds")
        } else {
            continue;
        };
        let path = watcher_dir.join(name);
        let held = crate::files::ExclusiveLock::is_held(&watcher_dir.join(format!("{key}.lock")));
        if held {
            continue;
        }
        report.stale.push(StaleFile {
            path: path.display().to_string(),
            why: why.into(),
        });
        stale_keys.entry(key.to_owned()).or_default().push(path);
    }
    if clean {
        report.cleaned = clean_stale(settings, &stale_keys, &stale_status);
    }
    // Sessions with a backlog but no key are listed too.
    if let Ok(backlog) = spool::sessions_with_backlog(&settings.config_dir) {
        for s in backlog {
            sessions.entry(s).or_default();
        }
    }
    for (session_id, keys) in sessions {
        report
            .sessions
            .push(session_report(&settings.config_dir, session_id, keys));
    }
    report
}

/// The state a supervisor's status file gives a key whose claim keeps failing.
pub(crate) const CLAIM_FAILED: &str = "claim failed";

/// The names in `dir`; a missing directory is empty, an unreadable one is recorded.
fn list(dir: &Path, unreadable: &mut Vec<String>) -> Vec<String> {
    match fs::read_dir(dir) {
        Ok(entries) => {
            let mut names: Vec<String> = entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect();
            names.sort();
            names
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            unreadable.push(format!("{}: {e}", dir.display()));
            Vec::new()
        }
    }
}

fn key_report(watcher_dir: &Path, key: &str, live: &[StatusFile], now: Ts) -> KeyReport {
    let files = KeyFiles::read(watcher_dir, key);
    let verdict = files.judge(now);
    let mut lines = files.pid_file.as_deref().unwrap_or_default().lines();
    let pid = lines.next().and_then(|l| l.trim().parse::<u32>().ok());
    let token = lines.next().map(str::trim).unwrap_or_default();
    let (session_id, agent_id) = match key.split_once('-') {
        Some((s, a)) => (s.to_owned(), Some(a.to_owned())),
        None => (key.to_owned(), None),
    };
    // kcap-watch's own: the pid file names a live status file's writer that lists the key.
    let ours = live.iter().find_map(|f| {
        let k = f.keys.iter().find(|k| k.key == key)?;
        let same = pid == Some(f.pid)
            && (token.is_empty() || f.start_token.is_empty() || token == f.start_token);
        // A key whose claim keeps failing has no pid file of the supervisor's: it is still
        // the supervisor's to show (never silently dropped).
        (same || k.state == CLAIM_FAILED).then_some((f, k))
    });
    let verdict_name = match verdict {
        Verdict::Vacant => "none",
        Verdict::Dead { .. } => "dead",
        Verdict::Recycled { .. } => "recycled",
        Verdict::Wedged { .. } => "wedged",
        Verdict::Alive { .. } => "alive",
    };
    let running = matches!(verdict, Verdict::Alive { .. } | Verdict::Wedged { .. });
    let holder = match (&ours, running) {
        (Some((f, _)), _) => Some(format!("kcap-watch {}", f.writer.as_str())),
        (None, true) => Some("kcap CLI".to_string()),
        (None, false) => None,
    };
    let rollout = match &ours {
        Some((_, k)) => Some(k.rollout.clone()),
        None if running => pid
            .and_then(proc_info::read)
            .and_then(|l| {
                crate::launch::LaunchFacts::from_launch(&l, &session_id_for_launch(key)).rollout
            })
            .map(|p| p.display().to_string()),
        None => None,
    };
    KeyReport {
        key: key.to_owned(),
        session_id: ours
            .as_ref()
            .map(|(_, k)| k.session_id.clone())
            .unwrap_or(session_id),
        agent_id: ours
            .as_ref()
            .map(|(_, k)| k.agent_id.clone())
            .unwrap_or(agent_id),
        rollout,
        holder,
        pid: if running || ours.is_some() { pid } else { None },
        verdict: verdict_name.into(),
        kcap_watch_version: ours.as_ref().map(|(f, _)| f.kcap_watch_version.clone()),
        poll_ms: ours.as_ref().and_then(|(f, _)| f.poll_ms),
        kcap_watch: ours.map(|(_, k)| k.clone()),
    }
}

/// The first id on a kcap CLI watcher's command line: the session id for both a session's
/// and a child's watcher (`watch <session> "<path>" --agent-id <child>`).
fn session_id_for_launch(key: &str) -> String {
    key.split_once('-').map_or(key, |(s, _)| s).to_owned()
}

fn session_report(config_dir: &Path, session_id: String, keys: Vec<KeyReport>) -> SessionReport {
    // Records and bytes, read a piece at a time (a spool may hold hundreds of MiB) and never
    // through a symbolic link (kcap-watch writes none there).
    let count = |path: PathBuf| -> (u64, u64) {
        let Ok(mut file) =
            crate::files::open_private(crate::files::private_options().read(true), &path)
        else {
            return (0, 0);
        };
        let mut buf = vec![0u8; 64 * 1024];
        let (mut records, mut bytes) = (0u64, 0u64);
        loop {
            match io::Read::read(&mut file, &mut buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(0) | Err(_) => return (records, bytes),
                Ok(n) => {
                    records += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
                    bytes += n as u64;
                }
            }
        }
    };
    let (transcript_spool_records, transcript_spool_bytes) =
        count(spool::transcript_spool_path(config_dir, &session_id));
    let (hook_spool_records, hook_spool_bytes) =
        count(spool::hook_spool_path(config_dir, &session_id));
    let (refused_records, refused_bytes) =
        crate::ship::refused::refused_path(config_dir, &session_id)
            .map(count)
            .unwrap_or((0, 0));
    SessionReport {
        needs_import: spool::needs_import_path(config_dir, &session_id).exists(),
        session_id,
        keys,
        transcript_spool_records,
        transcript_spool_bytes,
        hook_spool_records,
        hook_spool_bytes,
        refused_records,
        refused_bytes,
    }
}

/// Removes stale files of keys whose lock can be taken: the key's `<key>.lock` is taken (a
/// lock some process holds is never touched), its heartbeat slots and stale status files are
/// removed, then the lock file itself while still held (as a watcher's clean exit does, so a
/// watcher that opened it meanwhile starts over on a fresh file). A stale status file of a
/// supervisor or the daemon goes when that one's lock can be taken.
fn clean_stale(
    settings: &StatusDirs,
    stale_keys: &BTreeMap<String, Vec<PathBuf>>,
    stale_status: &[(PathBuf, String, Writer)],
) -> Vec<String> {
    fn remove(path: &Path, removed: &mut Vec<String>) {
        if fs::remove_file(path).is_ok() {
            removed.push(path.display().to_string());
        }
    }
    let mut removed = Vec::new();
    for (key, paths) in stale_keys {
        let lock_path = settings.watcher_dir.join(format!("{key}.lock"));
        let lock = match fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&lock_path)
        {
            Ok(f) => match f.try_lock() {
                Ok(()) => Some(f),
                Err(_) => continue,
            },
            // No lock file: nothing can be holding the key's kcap-watch files.
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(_) => continue,
        };
        for (path, k, writer) in stale_status {
            if k == key && *writer == Writer::Watch {
                remove(path, &mut removed);
            }
        }
        for path in paths.iter().filter(|p| **p != lock_path) {
            remove(path, &mut removed);
        }
        if lock.is_some() && paths.contains(&lock_path) {
            remove(&lock_path, &mut removed);
        }
        drop(lock);
    }
    for (path, key, writer) in stale_status {
        let lock_path = match writer {
            Writer::Watch => continue,
            Writer::Supervise => crate::files::supervise_lock_path(&settings.config_dir, key),
            Writer::Daemon => crate::files::daemon_lock_path(&settings.config_dir),
        };
        if let Ok(Some(_held)) = crate::files::ExclusiveLock::try_take(&lock_path) {
            remove(path, &mut removed);
        }
    }
    // A `watch` status file whose key has no lock file left (removed on a clean exit that
    // failed to remove the status file).
    for (path, key, writer) in stale_status {
        if *writer == Writer::Watch
            && !stale_keys.contains_key(key)
            && !settings.watcher_dir.join(format!("{key}.lock")).exists()
        {
            remove(path, &mut removed);
        }
    }
    removed
}

/// The table: the daemon, then each session as a heading with one row per key, then stale
/// files.
pub fn write_text(r: &StatusReport, out: &mut dyn Write) -> io::Result<()> {
    // Paths, reasons and a server's error text are untrusted: each line is written with its
    // control characters escaped, so none can forge a line or reach the terminal as an escape
    // sequence.
    let out = &mut crate::logging::OneLineWriter::new(out);
    if r.daemon.running {
        writeln!(
            out,
            "daemon: running (pid {}, kcap-watch {}), server {}",
            r.daemon.pid.unwrap_or(0),
            r.daemon.version.as_deref().unwrap_or("?"),
            r.daemon.server.as_deref().unwrap_or("none")
        )?;
        for t in &r.daemon.sessions_taken {
            writeln!(
                out,
                "  taken   {}  supervisor {} {}  restarts {}  server {}",
                t.session_id,
                t.supervisor.as_deref().unwrap_or("?"),
                t.supervisor_pid
                    .map(|p| format!("pid {p}"))
                    .unwrap_or_default(),
                t.restarts,
                t.server.as_deref().unwrap_or("?")
            )?;
        }
        for s in &r.daemon.sessions_skipped {
            writeln!(out, "  skipped {}  {}", s.session_id, s.reason)?;
        }
    } else {
        writeln!(out, "daemon: not running")?;
    }
    if r.sessions.is_empty() {
        writeln!(out)?;
        writeln!(out, "no watched sessions in {}", r.watcher_dir)?;
    }
    for s in &r.sessions {
        writeln!(out)?;
        writeln!(out, "session {}", s.session_id)?;
        writeln!(
            out,
            "  {:<34} {:<22} {:>8} {:<9} {:<10} {:>7} {:>9} {:>7} {:>7}  next due / last error",
            "agent",
            "holder",
            "pid",
            "verdict",
            "turn",
            "on disk",
            "confirmed",
            "spooled",
            "refused"
        )?;
        for k in &s.keys {
            let ks = k.kcap_watch.as_ref();
            let num = |f: fn(&KeyStatus) -> u64| {
                ks.map(|k| f(k).to_string()).unwrap_or_else(|| "-".into())
            };
            let mut tail = String::new();
            if let Some(k) = ks.filter(|k| k.state == CLAIM_FAILED) {
                tail.push_str(&format!(
                    "claim failed {} times, retried every poll; ",
                    k.claim_failures
                ));
            }
            if let Some(n) = ks.and_then(|k| k.next_due.as_ref()) {
                tail.push_str(&format!("{} at {}", n.decision, n.at));
            }
            if let Some(e) = ks.and_then(|k| k.last_error.as_ref()) {
                if !tail.is_empty() {
                    tail.push_str("; ");
                }
                tail.push_str(&format!("{} at {}: {}", e.event, e.at, e.message));
            }
            writeln!(
                out,
                "  {:<34} {:<22} {:>8} {:<9} {:<10} {:>7} {:>9} {:>7} {:>7}  {}",
                k.agent_id.as_deref().unwrap_or("(session)"),
                k.holder.as_deref().unwrap_or("-"),
                k.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                k.verdict,
                ks.map(|k| k.turn.as_str()).unwrap_or("-"),
                num(|k| k.lines_on_disk),
                num(|k| k.lines_confirmed),
                num(|k| k.lines_spooled),
                num(|k| k.lines_refused),
                tail
            )?;
            if let Some(rollout) = &k.rollout {
                writeln!(out, "    {rollout}")?;
            }
            for path in ks.map(|k| k.continuations.as_slice()).unwrap_or_default() {
                writeln!(out, "    continuation not followed: {path}")?;
            }
            if let Some(lost) = ks.filter(|k| k.lines_lost.total() > 0) {
                writeln!(
                    out,
                    "    shipped as capture-loss markers: {}",
                    lost.lines_lost.describe()
                )?;
            }
        }
        if s.transcript_spool_records + s.hook_spool_records > 0 {
            writeln!(
                out,
                "  spooled: {} transcript records ({} bytes), {} lifecycle records ({} bytes)",
                s.transcript_spool_records,
                s.transcript_spool_bytes,
                s.hook_spool_records,
                s.hook_spool_bytes
            )?;
        }
        if s.refused_records > 0 {
            writeln!(
                out,
                "  refused lines: {} ({} bytes)",
                s.refused_records, s.refused_bytes
            )?;
        }
        if s.needs_import {
            writeln!(
                out,
                "  needs `kcap import`: lines were lost to the spool cap"
            )?;
        }
    }
    if !r.stale.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "stale files (kcap-watch status --clean removes kcap-watch's own):"
        )?;
        for f in &r.stale {
            writeln!(out, "  {}  ({})", f.path, f.why)?;
        }
    }
    for c in &r.cleaned {
        writeln!(out, "removed {c}")?;
    }
    for u in &r.unreadable {
        writeln!(out, "cannot read {u}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hostile server's error text, a rollout path with a newline and a skip reason with an
    /// escape sequence: the table keeps one line per row and sends no control character.
    #[test]
    fn untrusted_text_in_the_table_cannot_forge_a_line_or_reach_the_terminal_as_an_escape() {
        let hostile = "boom\n  forged  alive\u{1b}]0;pwned\u{7}\r";
        let key = KeyStatus {
            key: "s-a".into(),
            session_id: "s".into(),
            agent_id: Some("a".into()),
            rollout: "/tmp/r\nx.jsonl".into(),
            state: "following".into(),
            turn: "open".into(),
            lines_on_disk: 3,
            lines_confirmed: 2,
            lines_spooled: 0,
            lines_refused: 0,
            lines_lost: Default::default(),
            stop_posted: false,
            next_due: None,
            last_error: Some(crate::status_file::LastError {
                event: "ship_failed".into(),
                message: hostile.into(),
                at: "2026-12-01T10:00:00Z".into(),
            }),
            claim_failures: 0,
            continuations: Vec::new(),
        };
        let report = StatusReport {
            version: VERSION,
            kcap_watch_version: "0".into(),
            config_dir: "/c".into(),
            watcher_dir: "/w".into(),
            daemon: DaemonReport {
                running: true,
                pid: Some(1),
                version: Some("0".into()),
                server: Some("http://x".into()),
                updated_at: None,
                sessions_taken: Vec::new(),
                sessions_skipped: vec![SkippedSession {
                    session_id: "s".into(),
                    reason: hostile.into(),
                }],
            },
            sessions: vec![SessionReport {
                session_id: "s".into(),
                keys: vec![KeyReport {
                    key: "s-a".into(),
                    session_id: "s".into(),
                    agent_id: Some("a".into()),
                    rollout: Some(key.rollout.clone()),
                    holder: Some("kcap-watch watch".into()),
                    pid: Some(2),
                    verdict: "alive".into(),
                    kcap_watch_version: Some("0".into()),
                    kcap_watch: Some(key),
                    poll_ms: None,
                }],
                transcript_spool_records: 0,
                transcript_spool_bytes: 0,
                hook_spool_records: 0,
                hook_spool_bytes: 0,
                refused_records: 0,
                refused_bytes: 0,
                needs_import: false,
            }],
            stale: Vec::new(),
            cleaned: Vec::new(),
            unreadable: Vec::new(),
        };
        let mut out = Vec::new();
        write_text(&report, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        // daemon, skipped, blank, session, heading, the key's row, its rollout.
        assert_eq!(text.lines().count(), 7, "{text}");
        assert!(
            !text.lines().any(|l| l.trim_start().starts_with("forged")),
            "{text}"
        );
        assert!(text.contains("boom\\n  forged"), "{text}");
        assert!(text.contains("/tmp/r\\nx.jsonl"), "{text}");
    }
}
