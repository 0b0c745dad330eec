//! The two spools, in the kcap CLI's formats, so either tool can deliver what the other spooled
//! (docs/behaviour.md F).
//!
//! - Transcript spool `<config>/transcript-spool/<key>.transcript.jsonl`: one
//!   [`TranscriptBatch`] (a `/hooks/transcript` body) a line, capped at 8 MiB; a batch that would
//!   cross the cap is not written and `<key>.needs-import` is written instead.
//! - Hook spool `<config>/spool/<key>.jsonl`: one [`HookRecord`] a line, capped at 1 MiB.
//!
//! `<key>` is the session id as the CLI names its files: a dashless GUID as is, any other id
//! with each ASCII capital written `~` + its lower case (ids are case-sensitive, file systems
//! may not be). Ids outside `[A-Za-z0-9_-]{1,64}` are refused before touching the disk.
//!
//! **Appending.** Parent and child watchers (and the kcap CLI) append to the same file, and a
//! replay may rename it at any moment. So each record is written with a single `write` on a file
//! opened with `O_APPEND` just for that record, then closed. Around that write the appender holds
//! an exclusive `flock` (so it can tell a record cut short by a crash, and end that fragment's
//! line first, with no other appender mid-write) and checks that the file it opened is still
//! the one at the spool path; a claim (below) renames the file and then takes the exclusive lock
//! once, which waits for a write already in progress, and any later writer sees the rename and
//! reopens. That closes the
//! window in which a record written to a just-renamed file would be read by nobody. (The kcap
//! CLI's .NET appender takes the same shared lock implicitly, but does not re-check the path.)
//! The caps are checked against the size seen just before the write, so two processes racing at
//! the cap may pass it by one record each.
//!
//! **Draining.** A replay [`claim`]s the live file by renaming it to a private
//! `<key>.<pid>-<n>.draining` (hook) or `<key>.<pid>-<n>.transcript.draining` (transcript) file
//! (the CLI's names, so its drain recovers ours and ours recovers its), reads
//! [`Draining::records`], delivers what it can and calls [`Draining::finish`] with the raw lines
//! it must keep. Those are put back *before* anything appended meanwhile, so arrival order
//! survives (a kept `subagent-start` stays ahead of a later `subagent-stop`). A draining file
//! left by a replay that died is picked up again by [`claim_orphans`] once its pid is gone.
//!
//! **Whose records.** Both spool directories are shared with the kcap CLI and every vendor it
//! serves (Claude, Cursor, ...). A hook record this tool writes carries `"writer":"kcap-watch"`
//! (the kcap CLI's drain reads only `route` and `body`, and keeps unknown fields when it puts a
//! remainder back), so `replay` can tell its own lifecycle requests from the kcap CLI's.
//! [`peek`] reads a spool file without claiming it, so a file holding none of ours is never
//! touched.
//!
//! **No symbolic links.** Every spool file is opened with `O_NOFOLLOW` (`files::private_options`)
//! and a link at a spool path is refused, never claimed, read or written through.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::files::{
    ensure_private_dir, open_private, parent_dir, private_options, process_alive, read_nofollow,
    refuse_symlink, with_context,
};
use crate::ship::TranscriptBatch;
use crate::time::Ts;

/// The transcript spool never grows past this (the kcap CLI's cap).
pub const TRANSCRIPT_SPOOL_CAP: u64 = 8 * 1024 * 1024;
/// Each hook spool file stays within this.
pub const HOOK_SPOOL_CAP: u64 = 1024 * 1024;

const TRANSCRIPT_DIR: &str = "transcript-spool";
const HOOK_DIR: &str = "spool";
const TRANSCRIPT_LIVE_SUFFIX: &str = ".transcript.jsonl";
const HOOK_LIVE_SUFFIX: &str = ".jsonl";
const TRANSCRIPT_DRAINING_SUFFIX: &str = ".transcript.draining";
const HOOK_DRAINING_SUFFIX: &str = ".draining";

/// The `writer` of the hook records this tool spools.
pub(crate) const HOOK_WRITER: &str = "kcap-watch";

/// One line of the hook spool: `{"route":"subagent-stop","body":"<request body as a JSON string>"}`.
/// `route` is the path after `/hooks/`. `writer` is [`HOOK_WRITER`] on the records this tool
/// writes and absent on the kcap CLI's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRecord {
    pub route: String,
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer: Option<String>,
}

impl HookRecord {
    /// Whether this tool wrote the record (and so vouches for it).
    pub fn is_ours(&self) -> bool {
        self.writer.as_deref() == Some(HOOK_WRITER)
    }
}

/// What an append did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpoolOutcome {
    /// The record is in the spool (`bytes` including its newline; 0 for an empty batch, which
    /// is not written).
    Written { path: PathBuf, bytes: u64 },
    /// Not written: the file would have grown past its cap. For the transcript spool the
    /// `needs-import` marker is written and `first_line` is the first line number that could
    /// not be kept; the caller logs an error naming the session and that line.
    OverCap {
        path: PathBuf,
        first_line: Option<u64>,
    },
}

/// `<config>/transcript-spool/<key>.transcript.jsonl`.
pub fn transcript_spool_path(config_dir: &Path, session_id: &str) -> PathBuf {
    config_dir.join(TRANSCRIPT_DIR).join(format!(
        "{}{TRANSCRIPT_LIVE_SUFFIX}",
        encode_key(session_id)
    ))
}

/// `<config>/spool/<key>.jsonl`.
pub fn hook_spool_path(config_dir: &Path, session_id: &str) -> PathBuf {
    config_dir
        .join(HOOK_DIR)
        .join(format!("{}{HOOK_LIVE_SUFFIX}", encode_key(session_id)))
}

/// `<config>/transcript-spool/<key>.needs-import`: the session lost lines to the cap and needs
/// `kcap import`.
pub fn needs_import_path(config_dir: &Path, session_id: &str) -> PathBuf {
    config_dir
        .join(TRANSCRIPT_DIR)
        .join(format!("{}.needs-import", encode_key(session_id)))
}

/// Appends one batch to the session's transcript spool (a child's batch goes in its parent
/// session's file: the file is keyed by `batch.session_id`).
///
/// Over the cap nothing is written; `<key>.needs-import` gets `now` and the reason (an existing
/// marker is kept, so it keeps naming the *first* gap). When the append itself fails, the marker
/// is attempted too, so a session with lost lines is flagged even if the caller's log is lost.
pub fn append_transcript(
    config_dir: &Path,
    batch: &TranscriptBatch,
    now: Ts,
) -> io::Result<SpoolOutcome> {
    let path = transcript_spool_path(config_dir, &batch.session_id);
    let context = || format!("failed to append to transcript spool {}", path.display());
    checked_key(&batch.session_id).map_err(|e| with_context(e, context()))?;
    if batch.lines.is_empty() {
        return Ok(SpoolOutcome::Written { path, bytes: 0 });
    }
    let mut record = serde_json::to_vec(batch).map_err(|e| with_context(e.into(), context()))?;
    record.push(b'\n');
    let first_line = batch.line_numbers.first().copied();

    let written = ensure_private_dir(parent_dir(&path))
        .and_then(|()| append_record(&path, &record, TRANSCRIPT_SPOOL_CAP));
    match written {
        Ok(true) => Ok(SpoolOutcome::Written {
            path,
            bytes: record.len() as u64,
        }),
        Ok(false) => {
            let reason = match first_line {
                Some(line) => format!(
                    "transcript spool reached its {TRANSCRIPT_SPOOL_CAP}-byte cap; lines from {line} on were not kept"
                ),
                None => format!("transcript spool reached its {TRANSCRIPT_SPOOL_CAP}-byte cap"),
            };
            mark_needs_import(config_dir, &batch.session_id, now, &reason)?;
            Ok(SpoolOutcome::OverCap { path, first_line })
        }
        Err(e) => {
            let e = with_context(e, context());
            let reason = format!("append failed: {e}");
            if let Err(marker) = mark_needs_import(config_dir, &batch.session_id, now, &reason) {
                tracing::error!(event = "needs_import_failed", error = %marker, "{marker}");
            }
            Err(e)
        }
    }
}

/// Writes the needs-import marker unless one is already there (the earliest gap is the one
/// an import has to start from).
fn mark_needs_import(config_dir: &Path, session_id: &str, now: Ts, reason: &str) -> io::Result<()> {
    let path = needs_import_path(config_dir, session_id);
    let context = || format!("failed to write needs-import marker {}", path.display());
    ensure_private_dir(parent_dir(&path)).map_err(|e| with_context(e, context()))?;
    let mut file = match open_private(private_options().write(true).create_new(true), &path) {
        Ok(file) => file,
        // `O_EXCL` fails on a symbolic link too: that is no marker, and is refused by name.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return refuse_symlink(&path).map_err(|e| with_context(e, context()));
        }
        Err(e) => return Err(with_context(e, context())),
    };
    // One line, one write: a reader never sees half of it.
    let line = format!("{} {}\n", now.rfc3339(), reason.replace(['\n', '\r'], " "));
    file.write_all(line.as_bytes())
        .map_err(|e| with_context(e, context()))
}

/// Appends one lifecycle request to the session's hook spool: route (the path after
/// `/hooks/`) and the request body as a JSON string. Over the 1 MiB cap nothing is written
/// and `OverCap` is returned for the caller to log.
pub fn append_hook(
    config_dir: &Path,
    session_id: &str,
    route: &str,
    body_json: &str,
) -> io::Result<SpoolOutcome> {
    let path = hook_spool_path(config_dir, session_id);
    let context = || format!("failed to append to hook spool {}", path.display());
    checked_key(session_id).map_err(|e| with_context(e, context()))?;
    let record = HookRecord {
        route: route.to_owned(),
        body: body_json.to_owned(),
        writer: Some(HOOK_WRITER.to_owned()),
    };
    let mut bytes = serde_json::to_vec(&record).map_err(|e| with_context(e.into(), context()))?;
    bytes.push(b'\n');
    let written = ensure_private_dir(parent_dir(&path))
        .and_then(|()| append_record(&path, &bytes, HOOK_SPOOL_CAP))
        .map_err(|e| with_context(e, context()))?;
    Ok(if written {
        SpoolOutcome::Written {
            path,
            bytes: bytes.len() as u64,
        }
    } else {
        SpoolOutcome::OverCap {
            path,
            first_line: None,
        }
    })
}

/// What the transcript spool holds for one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpooledLines {
    /// The highest line number spooled for this session and agent.
    pub highest: Option<u64>,
    /// Records that could not be read as a batch (skipped).
    pub unparseable: usize,
}

/// The highest line number in the transcript spool for this `session_id` **and** `agent_id`
/// (`None` matches records whose `agent_id` is `null`): offline, the resume line is one past it
/// (docs/behaviour.md L3). Unreadable records are skipped and logged.
pub fn highest_spooled_line(
    config_dir: &Path,
    session_id: &str,
    agent_id: Option<&str>,
) -> io::Result<Option<u64>> {
    let scan = scan_spooled_lines(config_dir, session_id, agent_id)?;
    if scan.unparseable > 0 {
        tracing::warn!(
            event = "spool_records_unparseable",
            session_id,
            count = scan.unparseable,
            "skipped {} unreadable records in the transcript spool of session {session_id}",
            scan.unparseable
        );
    }
    Ok(scan.highest)
}

/// [`highest_spooled_line`] with the count of skipped records.
///
/// Reads the live file and every draining file of the session, including those a replay is
/// delivering right now: their lines are spooled until acknowledged, and counting them keeps a
/// restarted offline watcher from spooling them a second time. The live file is read first, so
/// a rename by a concurrent claim moves it into the draining files listed afterwards.
pub fn scan_spooled_lines(
    config_dir: &Path,
    session_id: &str,
    agent_id: Option<&str>,
) -> io::Result<SpooledLines> {
    let live = transcript_spool_path(config_dir, session_id);
    let context = || format!("failed to read transcript spool {}", live.display());
    let key = checked_key(session_id).map_err(|e| with_context(e, context()))?;

    let mut scan = SpooledLines::default();
    scan_file(&live, session_id, agent_id, &mut scan)?;
    for path in draining_files(parent_dir(&live), &key, SpoolKind::Transcript)? {
        scan_file(&path, session_id, agent_id, &mut scan)?;
    }
    Ok(scan)
}

/// The fields of a spooled batch the resume line needs (the line texts are skipped unread).
#[derive(Deserialize)]
struct BatchLineNumbers {
    session_id: String,
    agent_id: Option<String>,
    line_numbers: Vec<u64>,
}

fn scan_file(
    path: &Path,
    session_id: &str,
    agent_id: Option<&str>,
    scan: &mut SpooledLines,
) -> io::Result<()> {
    let bytes = match read_nofollow(path) {
        Ok(bytes) => bytes,
        // Claimed or delivered by a replay between listing and reading.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(with_context(
                e,
                format!("failed to read transcript spool {}", path.display()),
            ));
        }
    };
    for line in record_lines(&bytes) {
        match serde_json::from_slice::<BatchLineNumbers>(line) {
            Ok(batch)
                if batch.session_id == session_id && batch.agent_id.as_deref() == agent_id =>
            {
                if let Some(&max) = batch.line_numbers.iter().max() {
                    scan.highest = Some(scan.highest.map_or(max, |h| h.max(max)));
                }
            }
            Ok(_) => {}
            Err(_) => scan.unparseable += 1,
        }
    }
    Ok(())
}

/// Non-blank lines of a spool file, without terminators. A last line without `\n` (a write cut
/// short by a crash) is returned too; it will not parse and is reported as such.
fn record_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
}

/// Every session id with something to deliver in either spool (a live file or a draining
/// file), sorted; for `replay` without `--session-id`.
pub fn sessions_with_backlog(config_dir: &Path) -> io::Result<Vec<String>> {
    let mut ids = Vec::new();
    for (dir, kind) in [
        (config_dir.join(TRANSCRIPT_DIR), SpoolKind::Transcript),
        (config_dir.join(HOOK_DIR), SpoolKind::Hook),
    ] {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(with_context(
                    e,
                    format!("failed to list spool directory {}", dir.display()),
                ));
            }
        };
        for entry in entries {
            let entry = entry.map_err(|e| {
                with_context(
                    e,
                    format!("failed to list spool directory {}", dir.display()),
                )
            })?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some((key, rest)) = name.split_once('.') else {
                continue;
            };
            // A needs-import marker is backlog too: it is reported to the server by a replay
            // (the kcap CLI's `SessionIdsWithBacklog` lists it the same way).
            let is_backlog = format!(".{rest}") == kind.live_suffix()
                || parse_draining_suffix(rest, kind).is_some()
                || (kind == SpoolKind::Transcript && rest == "needs-import");
            if let Some(id) = decode_key(key).filter(|_| is_backlog) {
                ids.push(id);
            }
        }
    }
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// Which spool a file belongs to, told by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SpoolKind {
    Transcript,
    Hook,
}

impl SpoolKind {
    fn live_suffix(self) -> &'static str {
        match self {
            SpoolKind::Transcript => TRANSCRIPT_LIVE_SUFFIX,
            SpoolKind::Hook => HOOK_LIVE_SUFFIX,
        }
    }

    fn draining_suffix(self) -> &'static str {
        match self {
            SpoolKind::Transcript => TRANSCRIPT_DRAINING_SUFFIX,
            SpoolKind::Hook => HOOK_DRAINING_SUFFIX,
        }
    }

    /// The kind and key of a live spool path.
    fn of_live(path: &Path) -> io::Result<(SpoolKind, String)> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // The transcript suffix also ends in `.jsonl`: test it first.
        for kind in [SpoolKind::Transcript, SpoolKind::Hook] {
            if let Some(key) = name.strip_suffix(kind.live_suffix())
                && decode_key(key).is_some()
            {
                return Ok((kind, key.to_owned()));
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a spool file", path.display()),
        ))
    }
}

/// A spool file claimed by this process for delivery. Dropping it without [`Draining::finish`]
/// leaves the file in place (nothing is lost); [`claim_orphans`] picks it up once this process
/// is gone.
#[derive(Debug)]
pub struct Draining {
    path: PathBuf,
    live: PathBuf,
    kind: SpoolKind,
    key: String,
    pid: u32,
}

/// One record read from a draining file: the raw line (what [`Draining::finish`] puts back)
/// and the parsed value, or why it did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spooled<T> {
    pub raw: String,
    pub record: Result<T, String>,
}

static CLAIMS: AtomicU64 = AtomicU64::new(0);

/// Claims the spool file at `spool_path` (a live transcript or hook spool) by renaming it to a
/// private draining file named with `pid`. `None` when there is no spool file (or another
/// replay renamed it first). A symbolic link there is refused and left alone.
pub fn claim(spool_path: &Path, pid: u32) -> io::Result<Option<Draining>> {
    let (kind, key) = SpoolKind::of_live(spool_path)?;
    take(spool_path, spool_path, kind, &key, pid)
}

/// Renames `from` (the live file or an orphaned draining file of `live`) to a fresh draining
/// file of `pid` and waits for writers still on it.
fn take(
    from: &Path,
    live: &Path,
    kind: SpoolKind,
    key: &str,
    pid: u32,
) -> io::Result<Option<Draining>> {
    let context = || format!("failed to claim spool file {}", from.display());
    refuse_symlink(from).map_err(|e| with_context(e, context()))?;
    let target = fresh_draining_path(parent_dir(live), key, kind, pid);
    // Retried while a reader (the kcap CLI reading the spool on Windows) holds it open.
    match crate::platform::replace::rename(from, &target) {
        Ok(()) => {}
        // Another replay (or the kcap CLI's drain) took it first.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(with_context(e, context())),
    }
    let draining = Draining {
        path: target,
        live: live.to_owned(),
        kind,
        key: key.to_owned(),
        pid,
    };
    // A link swapped in between the check and the rename was renamed, not followed: refuse it
    // now (the draining file is left for inspection, never read through).
    refuse_symlink(&draining.path).map_err(|e| with_context(e, context()))?;
    wait_for_writers(&draining.path)?;
    Ok(Some(draining))
}

/// The draining files of this spool left behind by replays that died (their pid is no longer
/// running), oldest first, without claiming them (see [`claim_orphan`]). Files of `pid` itself
/// and of live processes are left alone: they are being delivered right now. (A dead replay
/// whose pid has since been reused stays unclaimed here until that process ends; the kcap
/// CLI's drain, which takes every draining file, would deliver it meanwhile.)
pub(crate) fn orphans(spool_path: &Path, pid: u32) -> io::Result<Vec<PathBuf>> {
    let (kind, key) = SpoolKind::of_live(spool_path)?;
    let dir = parent_dir(spool_path);
    let mut found = Vec::new();
    for path in draining_files(dir, &key, kind)? {
        let Some(owner) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(&format!("{key}.")))
            .and_then(|rest| parse_draining_suffix(rest, kind))
            .map(|(owner, _)| owner)
        else {
            continue;
        };
        if owner == pid || process_alive(owner) {
            continue;
        }
        let modified = fs::symlink_metadata(&path).and_then(|m| m.modified()).ok();
        found.push((modified, path));
    }
    found.sort();
    Ok(found.into_iter().map(|(_, path)| path).collect())
}

/// Claims one orphaned draining file found by [`orphans`]; `None` when another replay took it.
pub(crate) fn claim_orphan(
    orphan: &Path,
    spool_path: &Path,
    pid: u32,
) -> io::Result<Option<Draining>> {
    let (kind, key) = SpoolKind::of_live(spool_path)?;
    take(orphan, spool_path, kind, &key, pid)
}

/// Claims every orphaned draining file of this spool ([`orphans`]), oldest first.
pub fn claim_orphans(spool_path: &Path, pid: u32) -> io::Result<Vec<Draining>> {
    let mut claimed = Vec::new();
    for orphan in orphans(spool_path, pid)? {
        if let Some(d) = claim_orphan(&orphan, spool_path, pid)? {
            claimed.push(d);
        }
    }
    Ok(claimed)
}

/// The raw records of a spool file (live or draining) without claiming it, blank lines
/// skipped; empty when the file is gone. A symbolic link is refused.
pub(crate) fn peek(path: &Path) -> io::Result<Vec<String>> {
    let bytes = match read_nofollow(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(with_context(
                e,
                format!("failed to read spool file {}", path.display()),
            ));
        }
    };
    Ok(record_lines(&bytes)
        .map(|line| String::from_utf8_lossy(line).into_owned())
        .collect())
}

/// Whether the session still has transcript records waiting in a live or draining file (of any
/// process), as the kcap CLI's `TranscriptSpool.HasBacklog` decides it.
pub(crate) fn transcript_backlog(config_dir: &Path, session_id: &str) -> io::Result<bool> {
    let live = transcript_spool_path(config_dir, session_id);
    let key = checked_key(session_id)?;
    Ok(fs::symlink_metadata(&live).is_ok()
        || !draining_files(parent_dir(&live), &key, SpoolKind::Transcript)?.is_empty())
}

impl Draining {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The records in arrival order, blank lines skipped. A record that does not parse as `T`
    /// keeps its raw line (invalid UTF-8 replaced by U+FFFD) so the caller can still keep it.
    /// A file already taken by the kcap CLI's drain reads as empty.
    pub fn records<T: DeserializeOwned>(&self) -> io::Result<Vec<Spooled<T>>> {
        let bytes = match read_nofollow(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(with_context(
                    e,
                    format!("failed to read spool file {}", self.path.display()),
                ));
            }
        };
        Ok(record_lines(&bytes)
            .map(|line| {
                let raw = String::from_utf8_lossy(line).into_owned();
                let record = serde_json::from_str(&raw).map_err(|e| e.to_string());
                Spooled { raw, record }
            })
            .collect())
    }

    /// Puts the `keep` lines (raw, as read) back into the live spool, ahead of anything
    /// appended since the claim, and removes the draining file.
    ///
    /// The kept lines go to a new private file; the live file, if one appeared meanwhile, is
    /// claimed and appended after them; then that file is linked into place only if no live
    /// file exists yet (else repeat a few times, then [`replace_live`] under the lock). The
    /// draining files are removed only after that, so a crash midway leaves draining files for
    /// [`claim_orphans`] (duplicates at worst, which the server ignores), never a loss. Caps are
    /// not applied: these records were all accepted under them once.
    pub fn finish(self, keep: &[String]) -> io::Result<()> {
        let context = || {
            format!(
                "failed to return undelivered records to {}",
                self.live.display()
            )
        };
        let mut content = Vec::new();
        for line in keep {
            let line = line.trim_end_matches(['\n', '\r']);
            if !line.trim().is_empty() {
                content.extend_from_slice(line.as_bytes());
                content.push(b'\n');
            }
        }
        if content.is_empty() {
            return remove_if_present(&self.path).map_err(|e| with_context(e, context()));
        }

        let dir = parent_dir(&self.live);
        let merged = fresh_draining_path(dir, &self.key, self.kind, self.pid);
        let mut file = open_private(private_options().write(true).create_new(true), &merged)
            .map_err(|e| with_context(e, context()))?;
        file.write_all(&content)
            .map_err(|e| with_context(e, context()))?;

        let mut absorbed = Vec::new();
        let mut placed = false;
        // A retry means a writer created a new live file in the instant between our claim and
        // our link; that settles within a round or two unless writers append nonstop.
        for _ in 0..4 {
            if let Some(newer) =
                claim(&self.live, self.pid).map_err(|e| with_context(e, context()))?
            {
                let bytes = read_nofollow(&newer.path).map_err(|e| with_context(e, context()))?;
                append_lines(&mut file, &bytes).map_err(|e| with_context(e, context()))?;
                absorbed.push(newer.path);
            }
            match fs::hard_link(&merged, &self.live) {
                Ok(()) => {
                    placed = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                // A file system without hard links.
                Err(_) => break,
            }
        }
        if !placed {
            replace_live(&self.live, &mut file, &merged).map_err(|e| with_context(e, context()))?;
        }
        drop(file);
        for path in absorbed.iter().chain([&merged, &self.path]) {
            remove_if_present(path).map_err(|e| with_context(e, context()))?;
        }
        Ok(())
    }
}

/// The slow way to put `merged` in place when linking keeps losing to new appends: hold the
/// live file's exclusive lock (appenders wait, then see the replacement and reopen), copy its
/// records behind ours, and rename ours over it. Not the first choice, because the kcap CLI's
/// appender does not wait for the lock but fails (and flags the session for import) while it
/// is held.
fn replace_live(live: &Path, merged: &mut fs::File, merged_path: &Path) -> io::Result<()> {
    for _ in 0..16 {
        let current = open_private(private_options().read(true).append(true).create(true), live)?;
        current.lock()?;
        if !still_at(&current, live)? {
            continue;
        }
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut &current, &mut bytes)?;
        append_lines(merged, &bytes)?;
        return crate::platform::replace::rename(merged_path, live);
        // `current` closes here, releasing the lock; waiting appenders reopen the new file.
    }
    Err(io::Error::other(
        "the live spool file kept being replaced while it was being merged",
    ))
}

/// Writes spool bytes to a private file, terminating a last line cut short.
fn append_lines(file: &mut fs::File, bytes: &[u8]) -> io::Result<()> {
    file.write_all(bytes)?;
    if bytes.last().is_some_and(|&b| b != b'\n') {
        file.write_all(b"\n")?;
    }
    Ok(())
}

/// Appends `record` (complete lines) with one `write` on a freshly opened `O_APPEND` file.
/// `Ok(false)` when the file would grow past `cap` (nothing written).
pub(crate) fn append_record(path: &Path, record: &[u8], cap: u64) -> io::Result<bool> {
    // Reopen when a claim renamed the file between our open and our lock. Bounded, since each
    // round means a replay claimed the file again in that very instant; the last round writes
    // to whatever it opened, which a replay still reads unless it already has.
    let mut rounds = 0;
    let file = loop {
        let file = open_private(private_options().read(true).append(true).create(true), path)?;
        // Exclusive, so no other appender is mid-write while the file's end is checked below.
        file.lock()?;
        rounds += 1;
        if rounds == 16 || still_at(&file, path)? {
            break file;
        }
    };
    let len = file.metadata()?.len();
    if len.saturating_add(record.len() as u64 + 1) > cap {
        return Ok(false);
    }
    // A crash (SIGKILL can cut a large write to a regular file short) leaves a record without
    // its `\n`: start on a fresh line, or this record is glued to the fragment and lost with it.
    if len > 0 {
        let mut last = [0u8];
        if crate::platform::positional::read_at(&file, &mut last, len - 1)? == 1 && last[0] != b'\n'
        {
            (&file).write_all(b"\n")?;
        }
    }
    // Where this record starts: a failed or short write is cut back to here, so the spool never
    // holds half a record and the lines it carried are not mistaken for kept.
    let start = file.metadata()?.len();
    let written = loop {
        match (&file).write(record) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = file.set_len(start);
                return Err(e);
            }
            Ok(n) => break n,
        }
    };
    if written != record.len() {
        // Disk full or a quota.
        let _ = file.set_len(start);
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short write: {written} of {} bytes", record.len()),
        ));
    }
    Ok(true)
}

/// Whether the open `file` is still the file at `path` (no rename in between).
fn still_at(file: &fs::File, path: &Path) -> io::Result<bool> {
    use crate::platform::file_id::FileId;
    match FileId::of_path(path) {
        Ok(now) => Ok(now == FileId::of_file(file)?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Takes and drops the exclusive lock on a just-claimed file: returns once every appender that
/// was mid-write on it has finished. Later appenders see the rename and reopen.
fn wait_for_writers(path: &Path) -> io::Result<()> {
    let file = open_private(private_options().read(true), path).map_err(|e| {
        with_context(
            e,
            format!("failed to open claimed spool {}", path.display()),
        )
    })?;
    file.lock().map_err(|e| {
        with_context(
            e,
            format!("failed to lock claimed spool {}", path.display()),
        )
    })?;
    Ok(())
}

/// A draining file name for `pid` that no file uses yet. Names carry this process's pid and a
/// process-wide counter, so only a dead process with the same pid could have used one.
fn fresh_draining_path(dir: &Path, key: &str, kind: SpoolKind, pid: u32) -> PathBuf {
    loop {
        let n = CLAIMS.fetch_add(1, Ordering::Relaxed) + 1;
        let path = dir.join(format!("{key}.{pid}-{n}{}", kind.draining_suffix()));
        if fs::symlink_metadata(&path).is_err() {
            return path;
        }
    }
}

/// The draining files of `key` in `dir`.
fn draining_files(dir: &Path, key: &str, kind: SpoolKind) -> io::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(with_context(
                e,
                format!("failed to list spool directory {}", dir.display()),
            ));
        }
    };
    let prefix = format!("{key}.");
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| {
            with_context(
                e,
                format!("failed to list spool directory {}", dir.display()),
            )
        })?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name
            .strip_prefix(&prefix)
            .is_some_and(|rest| rest.ends_with(kind.draining_suffix()))
        {
            paths.push(entry.path());
        }
    }
    paths.sort();
    Ok(paths)
}

/// `<pid>-<n><draining suffix>` → `(pid, n)`.
fn parse_draining_suffix(rest: &str, kind: SpoolKind) -> Option<(u32, u64)> {
    let stem = rest.strip_suffix(kind.draining_suffix())?;
    let (pid, n) = stem.split_once('-')?;
    Some((pid.parse().ok()?, n.parse().ok()?))
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The session id as a spool file key, refusing ids the kcap CLI would not spool (and anything
/// that could leave the directory).
pub(crate) fn checked_key(session_id: &str) -> io::Result<String> {
    let safe = (1..=64).contains(&session_id.len())
        && session_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !safe {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "session id {session_id:?} is not a spoolable id ([A-Za-z0-9_-], 1 to 64 characters)"
            ),
        ));
    }
    Ok(encode_key(session_id))
}

/// The kcap CLI's file key: a dashless GUID unchanged (its historical names); otherwise each
/// ASCII capital becomes `~` + lower case, so ids differing only in case stay apart on
/// case-insensitive file systems.
fn encode_key(session_id: &str) -> String {
    let legacy_guid = session_id.len() == 32 && session_id.bytes().all(|b| b.is_ascii_hexdigit());
    if legacy_guid {
        return session_id.to_owned();
    }
    let mut key = String::with_capacity(session_id.len() + 8);
    for c in session_id.chars() {
        if c.is_ascii_uppercase() {
            key.push('~');
            key.push(c.to_ascii_lowercase());
        } else {
            key.push(c);
        }
    }
    key
}

/// Inverse of [`encode_key`]; `None` for a name that is no key.
fn decode_key(key: &str) -> Option<String> {
    let mut id = String::with_capacity(key.len());
    let mut chars = key.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            let lower = chars.next().filter(char::is_ascii_lowercase)?;
            id.push(lower.to_ascii_uppercase());
        } else {
            id.push(c);
        }
    }
    checked_key(&id).ok()?;
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_the_cli_naming() {
        let guid = "0199A2B4C0DE7000A000000000000001";
        assert_eq!(encode_key(guid), guid, "dashless GUIDs keep their spelling");
        assert_eq!(encode_key("ses_61aB"), "ses_61a~b");
        assert_eq!(decode_key("ses_61a~b").as_deref(), Some("ses_61aB"));
        assert_eq!(decode_key("bad~1"), None);
        assert_eq!(decode_key("has.dot"), None);
    }

    #[test]
    fn unsafe_session_ids_are_refused() {
        for bad in ["", "../x", "a/b", "a.b", &"x".repeat(65)] {
            assert!(checked_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn draining_names_parse_back() {
        assert_eq!(
            parse_draining_suffix("123-4.transcript.draining", SpoolKind::Transcript),
            Some((123, 4))
        );
        assert_eq!(
            parse_draining_suffix("123-4.draining", SpoolKind::Hook),
            Some((123, 4))
        );
        assert_eq!(parse_draining_suffix("ordered-1-2", SpoolKind::Hook), None);
    }

    #[test]
    fn replacing_the_live_file_keeps_our_records_first() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("k.jsonl");
        let merged_path = dir.path().join("k.1-1.draining");
        fs::write(&live, "new\n").unwrap();
        let mut merged = fs::File::create(&merged_path).unwrap();
        merged.write_all(b"kept\n").unwrap();
        replace_live(&live, &mut merged, &merged_path).unwrap();
        assert_eq!(fs::read_to_string(&live).unwrap(), "kept\nnew\n");
        assert!(!merged_path.exists());
        // Appends go to the replacement.
        assert!(append_record(&live, b"later\n", u64::MAX).unwrap());
        assert_eq!(fs::read_to_string(&live).unwrap(), "kept\nnew\nlater\n");
    }

    #[test]
    fn live_spool_kind_is_told_by_name() {
        let t = Path::new("/c/transcript-spool/abc.transcript.jsonl");
        let h = Path::new("/c/spool/abc.jsonl");
        assert_eq!(
            SpoolKind::of_live(t).unwrap(),
            (SpoolKind::Transcript, "abc".into())
        );
        assert_eq!(
            SpoolKind::of_live(h).unwrap(),
            (SpoolKind::Hook, "abc".into())
        );
        assert!(SpoolKind::of_live(Path::new("/c/spool/abc.txt")).is_err());
    }
}
