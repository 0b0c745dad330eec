//! The status files of docs/behaviour.md S3: what a running kcap-watch process
//! (`watch`, `supervise` or `daemon`) says about itself, for `kcap-watch status`.
//!
//! This module is the contract between the writers (the host's telemetry) and the reader (the
//! `status` command): the path rule, the JSON shape and the liveness check. One file per
//! writer and key, `<config>/kcap-watch/status/<key>.<writer>.json`, written atomically with
//! mode 0600 and removed on a clean exit. A reader trusts a file only while its `pid` and
//! `start_token` still name a live process: a file left by a killed writer is stale.
//!
//! The daemon holds no watcher key, so its file uses the key `daemon`
//! (`daemon.daemon.json`): the spec's pattern, with the one name no session key can take
//! (session keys are hexadecimal or `[A-Za-z0-9_-]` ids, and no id is a writer name).

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The version of the JSON shape below. A reader skips files of another version.
pub const VERSION: u32 = 1;

/// The key of the daemon's own status file.
pub const DAEMON_KEY: &str = "daemon";

/// Which kind of process wrote a status file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Writer {
    Watch,
    Supervise,
    Daemon,
}

impl Writer {
    pub fn as_str(self) -> &'static str {
        match self {
            Writer::Watch => "watch",
            Writer::Supervise => "supervise",
            Writer::Daemon => "daemon",
        }
    }
}

/// `<config>/kcap-watch/status`.
pub fn status_dir(config_dir: &Path) -> PathBuf {
    config_dir.join("kcap-watch").join("status")
}

/// `<config>/kcap-watch/status/<key>.<writer>.json`. `watch` uses its watcher key
/// (`<session>-<agent>` or `<session>`), `supervise` the supervised session's id, the daemon
/// [`DAEMON_KEY`].
pub fn status_path(config_dir: &Path, key: &str, writer: Writer) -> PathBuf {
    status_dir(config_dir).join(format!("{key}.{}.json", writer.as_str()))
}

/// Splits a status file name into its key and writer; `None` for any other file (temporary
/// files of an atomic write included).
pub fn parse_file_name(name: &str) -> Option<(&str, Writer)> {
    let stem = name.strip_suffix(".json")?;
    let (key, writer) = stem.rsplit_once('.')?;
    let writer = match writer {
        "watch" => Writer::Watch,
        "supervise" => Writer::Supervise,
        "daemon" => Writer::Daemon,
        _ => return None,
    };
    (!key.is_empty()).then_some((key, writer))
}

/// A decision that is due later, as `inspect` names them (`subagent_stop`, `idle_end`,
/// `stall_warning`, `lifetime_ceiling`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextDue {
    pub decision: String,
    /// RFC 3339 UTC.
    pub at: String,
}

/// The last error a pipeline or the daemon met (a failed request, a spool write, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastError {
    /// The stable event name of the log line that reported it (`ship_failed`, ...).
    pub event: String,
    pub message: String,
    /// RFC 3339 UTC.
    pub at: String,
}

/// One key a `watch` or `supervise` process holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyStatus {
    /// The watcher key (`<session>-<agent>` or `<session>`).
    pub key: String,
    pub session_id: String,
    pub agent_id: Option<String>,
    pub rollout: String,
    /// `following` (a pipeline runs), `held` (the pipeline ended by reap or ceiling; the key
    /// is kept and the rollout watched for growth), `ending`.
    pub state: String,
    /// `open`, `completed`, `aborted`, `none`.
    pub turn: String,
    /// Complete lines on disk (physical lines, blank ones included).
    pub lines_on_disk: u64,
    /// Lines the server acknowledged (one past the confirmed position).
    pub lines_confirmed: u64,
    /// Lines written to the transcript spool by this process.
    pub lines_spooled: u64,
    /// Lines the server refused, set aside in `refused/<session>.jsonl`.
    pub lines_refused: u64,
    /// Lines shipped as the kcap CLI's capture-loss marker instead of their text, by reason
    /// (added to version 1 later: optional).
    #[serde(default)]
    pub lines_lost: crate::ship::capture::LossCounts,
    pub stop_posted: bool,
    pub next_due: Option<NextDue>,
    pub last_error: Option<LastError>,
    /// `supervise`: failed attempts to claim this key in the current streak (state `claim
    /// failed`: a full disk, no descriptor left, a permission error), retried at every poll.
    #[serde(default)]
    pub claim_failures: u64,
    /// `supervise`: second rollouts of this thread (continuation segments, retained copies),
    /// not followed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub continuations: Vec<String>,
}

/// A session the daemon skipped, and why (no server, excluded by `KCAP_WATCH_EXCLUDE`, no
/// rollout found, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedSession {
    pub session_id: String,
    pub reason: String,
}

/// A session the daemon took: the supervisor running it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakenSession {
    pub session_id: String,
    pub rollout: String,
    /// The supervisor's pid, when one runs.
    pub supervisor_pid: Option<u32>,
    /// How many times the daemon restarted this session's supervisor.
    pub restarts: u32,
    /// The server this session ships to (added after version 1's first readers: optional).
    #[serde(default)]
    pub server: Option<String>,
    /// Where that server came from (`the session watcher's KCAP_URL`, ...).
    #[serde(default)]
    pub server_source: Option<String>,
    /// The supervisor's state as the daemon sees it: `running`, `adopted` (started by an
    /// earlier daemon or by hand), `resting` (ended on purpose; a new one starts when a
    /// descendant appears or grows), `restart due <time>`, `crashed too often`.
    #[serde(default)]
    pub supervisor: Option<String>,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusFile {
    pub version: u32,
    pub writer: Writer,
    pub pid: u32,
    /// The writer's process start token (the kcap CLI's form); empty where none is known.
    pub start_token: String,
    /// RFC 3339 UTC of this write.
    pub updated_at: String,
    /// kcap-watch's own version (`CARGO_PKG_VERSION`) of the writer.
    pub kcap_watch_version: String,
    /// The server the writer ships to; `None` offline.
    pub server: Option<String>,
    /// `watch`/`supervise`: the session id; the daemon: empty.
    pub session_id: String,
    /// `watch`: one entry; `supervise`: one per child it holds; the daemon: none.
    #[serde(default)]
    pub keys: Vec<KeyStatus>,
    /// Daemon only.
    #[serde(default)]
    pub sessions_taken: Vec<TakenSession>,
    /// Daemon only.
    #[serde(default)]
    pub sessions_skipped: Vec<SkippedSession>,
    /// `watch`/`supervise`: the safety-net poll's period now, in milliseconds: the configured
    /// one, or longer while file notification reports every change (docs/behaviour.md, "The
    /// safety-net poll").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_ms: Option<u64>,
}

impl StatusFile {
    /// The file as `status` shows it: every URL in it (servers, skip reasons, last errors)
    /// with its userinfo password and secret-named query values redacted.
    pub fn with_urls_redacted(mut self) -> StatusFile {
        use crate::url_display::{redacted, redacted_in_text};
        self.server = self.server.as_deref().map(redacted);
        for t in &mut self.sessions_taken {
            t.server = t.server.as_deref().map(redacted);
            t.supervisor = t.supervisor.as_deref().map(redacted_in_text);
        }
        for s in &mut self.sessions_skipped {
            s.reason = redacted_in_text(&s.reason);
        }
        for k in &mut self.keys {
            if let Some(e) = &mut k.last_error {
                e.message = redacted_in_text(&e.message);
            }
        }
        self
    }

    /// Is the writer still the process that wrote this file (pid alive with the same start
    /// token)? A file whose writer is gone is stale.
    pub fn writer_alive(&self) -> bool {
        if self.start_token.is_empty() {
            return crate::platform::process::alive(self.pid);
        }
        crate::platform::start_token::matches(self.pid, &self.start_token).unwrap_or(false)
    }
}

/// Writes `status` atomically (temp file, flush, rename; mode 0600) at its path.
pub fn write(config_dir: &Path, key: &str, status: &StatusFile) -> io::Result<()> {
    let dir = status_dir(config_dir);
    crate::files::ensure_private_dir(&config_dir.join("kcap-watch"))?;
    crate::files::ensure_private_dir(&dir)?;
    let bytes = serde_json::to_vec_pretty(status).map_err(io::Error::other)?;
    crate::files::write_atomic(&status_path(config_dir, key, status.writer), &bytes)
}

/// Removes the status file of `key` written by `writer` (a clean exit). Missing is fine.
pub fn remove(config_dir: &Path, key: &str, writer: Writer) -> io::Result<()> {
    match std::fs::remove_file(status_path(config_dir, key, writer)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Reads one status file; `Ok(None)` when it is not of [`VERSION`] or not readable as one
/// (a reader must not fail on a file another version wrote).
pub fn read(path: &Path) -> io::Result<Option<StatusFile>> {
    let bytes = crate::files::read_nofollow(path)?;
    Ok(serde_json::from_slice::<StatusFile>(&bytes)
        .ok()
        .filter(|s| s.version == VERSION))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32, token: String) -> StatusFile {
        StatusFile {
            version: VERSION,
            writer: Writer::Supervise,
            pid,
            start_token: token,
            updated_at: "2026-12-01T10:00:00Z".into(),
            kcap_watch_version: env!("CARGO_PKG_VERSION").into(),
            server: Some("http://127.0.0.1:1".into()),
            session_id: "abc".into(),
            keys: vec![KeyStatus {
                key: "abc-def".into(),
                session_id: "abc".into(),
                agent_id: Some("def".into()),
                rollout: "/tmp/r.jsonl".into(),
                state: "following".into(),
                turn: "open".into(),
                lines_on_disk: 10,
                lines_confirmed: 9,
                lines_spooled: 0,
                lines_refused: 1,
                lines_lost: Default::default(),
                stop_posted: false,
                next_due: Some(NextDue {
                    decision: "subagent_stop".into(),
                    at: "2026-12-01T10:05:00Z".into(),
                }),
                last_error: None,
                claim_failures: 0,
                continuations: Vec::new(),
            }],
            sessions_taken: vec![],
            sessions_skipped: vec![],
            poll_ms: None,
        }
    }

    #[test]
    fn a_written_file_reads_back_and_its_live_writer_is_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let me = sample(
            std::process::id(),
            crate::platform::start_token::for_current().unwrap_or_default(),
        );
        write(dir.path(), "abc", &me).unwrap();
        let path = status_path(dir.path(), "abc", Writer::Supervise);
        assert!(path.ends_with("kcap-watch/status/abc.supervise.json"));
        let back = read(&path).unwrap().unwrap();
        assert_eq!(back, me);
        assert!(back.writer_alive());
        remove(dir.path(), "abc", Writer::Supervise).unwrap();
        assert!(!path.exists());
        remove(dir.path(), "abc", Writer::Supervise).unwrap();
    }

    #[test]
    fn a_file_whose_start_token_differs_is_stale() {
        let stale = sample(std::process::id(), "lx:not-this-boot:1".into());
        assert!(!stale.writer_alive());
    }

    #[test]
    fn file_names_split_into_key_and_writer() {
        assert_eq!(
            parse_file_name("abc-def.watch.json"),
            Some(("abc-def", Writer::Watch))
        );
        assert_eq!(
            parse_file_name("daemon.daemon.json"),
            Some(("daemon", Writer::Daemon))
        );
        assert_eq!(parse_file_name(".tmpXYZ"), None);
        assert_eq!(parse_file_name("abc.other.json"), None);
        assert_eq!(parse_file_name(".watch.json"), None);
    }
}
