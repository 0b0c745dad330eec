//! `kcap-watch replay`: deliver what the spools hold (lines first, then lifecycle requests).
//!
//! The files are the kcap CLI's own, drained with the same protocol (docs/behaviour.md F): a spool
//! file is renamed to a private `.draining` file before it is read, so concurrent appends
//! never collide, and whatever the server did not acknowledge is put back. Delivering twice
//! is harmless (the server de-duplicates), so a crash midway loses nothing.
//!
//! **Only what this tool can vouch for** (docs/behaviour.md R7). The spool directories are
//! shared with every vendor the kcap CLI serves. A replay posts transcript records whose
//! `vendor` is `codex` and hook records this tool wrote (`"writer":"kcap-watch"`); anything else
//! (Claude's and Cursor's records, batches the kcap CLI quarantined, records it cannot read) is
//! the kcap CLI's to deliver or drop: a file holding none of ours is not touched at all, and in a
//! file that mixes both, the others' records are put back unposted, in their order.
//!
//! **needs-import.** When a session's transcript spool is empty after the pass and
//! `<session>.needs-import` exists, the server is told as the kcap CLI's drain tells it
//! (`LifecycleSpoolDrain.cs`): `POST /hooks/session-needs-import` with
//! `{"session_id": ..., "needs_import": true}`, best effort, the marker left in place (it tells
//! the user to run `kcap import`; the kcap CLI reports it on every pass too).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use tracing::{error, info, warn};

use crate::ship::TranscriptBatch;
use crate::ship::auth::Credentials;
use crate::ship::backoff::Backoff;
use crate::ship::client::{Deadlines, KcapClient};
use crate::ship::protocol::Failure;
use crate::ship::refused;
use crate::ship::spool::{self, Draining, HookRecord};
use crate::time::Ts;

/// The route the kcap CLI's drain reports a needs-import marker on.
const ROUTE_NEEDS_IMPORT: &str = "session-needs-import";

/// Transient failures are retried this many times per record before the rest is kept.
const ATTEMPTS: u32 = 3;

/// A single wait between attempts is cut to this (the records a replay keeps are tried again
/// next time).
const MAX_REPLAY_WAIT: Duration = Duration::from_secs(10);

/// What a replay did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReplayReport {
    pub transcript_delivered: u64,
    pub hooks_delivered: u64,
    /// Records of ours put back into the spools (not acknowledged).
    pub kept: u64,
    /// Records of other tools (or unreadable ones) left for the kcap CLI, never posted.
    pub left: u64,
    /// Sessions whose needs-import marker the server acknowledged.
    pub needs_import_reported: u64,
    /// Lines the server refused, isolated by splitting their records and set aside in
    /// `refused/` (S4.1): neither kept nor posted again.
    pub refused_lines: u64,
    /// Spool paths refused as symbolic links, with the reason; nothing was read through them.
    pub refused: Vec<(PathBuf, String)>,
}

/// Which spool a pass drains.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spool {
    Transcript,
    Hook,
}

impl Spool {
    /// Whether this tool vouches for a raw record: a Codex transcript batch, or a hook record
    /// it wrote itself.
    fn is_ours(self, raw: &str) -> bool {
        match self {
            Spool::Transcript => {
                serde_json::from_str::<TranscriptBatch>(raw).is_ok_and(|b| b.vendor == "codex")
            }
            Spool::Hook => serde_json::from_str::<HookRecord>(raw).is_ok_and(|r| r.is_ours()),
        }
    }
}

/// Delivers the spools under `config` of one session (or of every session with a backlog)
/// to `url` with `token`. `session` must already be a checked id (`files::check_id`).
pub(crate) async fn replay(
    config: &Path,
    url: &str,
    token: Credentials,
    session: Option<&str>,
) -> Result<ReplayReport> {
    let client = KcapClient::new(url, token, Deadlines::default())?;
    let sessions = match session {
        Some(s) => vec![s.to_string()],
        None => spool::sessions_with_backlog(config).context("failed to list the spools")?,
    };
    let mut report = ReplayReport::default();
    let pid = std::process::id();
    for session in sessions {
        let path = spool::transcript_spool_path(config, &session);
        let lines_kept = drain(&client, config, &path, pid, Spool::Transcript, &mut report).await?;
        if lines_kept > 0 {
            // Lines first: a stop must not reach the server ahead of the lines it follows.
            info!(
                event = "replay_hooks_held",
                session_id = %session,
                "kept {lines_kept} transcript records of session {session}; its lifecycle requests wait for them"
            );
            continue;
        }
        report_needs_import(&client, config, &session, &mut report).await?;
        let path = spool::hook_spool_path(config, &session);
        drain(&client, config, &path, pid, Spool::Hook, &mut report).await?;
    }
    Ok(report)
}

/// Tells the server about `<session>.needs-import` once the session's transcript spool is
/// empty, as the kcap CLI's drain does.
async fn report_needs_import(
    client: &KcapClient,
    config: &Path,
    session: &str,
    report: &mut ReplayReport,
) -> Result<()> {
    let marker = spool::needs_import_path(config, session);
    let Ok(meta) = std::fs::symlink_metadata(&marker) else {
        return Ok(());
    };
    if meta.file_type().is_symlink() {
        refuse(report, &marker);
        return Ok(());
    }
    if spool::transcript_backlog(config, session)
        .with_context(|| format!("failed to list the transcript spool of {session}"))?
    {
        return Ok(());
    }
    let body = serde_json::json!({ "session_id": session, "needs_import": true }).to_string();
    match client.post_hook(ROUTE_NEEDS_IMPORT, body).await {
        Ok(()) => {
            report.needs_import_reported += 1;
            info!(event = "needs_import_reported", session_id = %session, "reported that session {session} needs `kcap import`");
        }
        Err(other) => warn!(
            event = "needs_import_report_failed",
            session_id = %session,
            "failed to report that session {session} needs `kcap import`: {other}"
        ),
    }
    Ok(())
}

fn refuse(report: &mut ReplayReport, path: &Path) {
    let why = "a symbolic link, not followed".to_string();
    error!(event = "spool_refused", path = %path.display(), "refused spool file {}: {why}", path.display());
    report.refused.push((path.to_path_buf(), why));
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Drains one spool of one session: abandoned draining files first, then the live file. A
/// file is claimed only when it holds at least one record of ours. Returns how many of our
/// records were kept for later.
async fn drain(
    client: &KcapClient,
    config_dir: &Path,
    live: &Path,
    pid: u32,
    spool_kind: Spool,
    report: &mut ReplayReport,
) -> Result<u64> {
    let mut files = spool::orphans(live, pid)
        .with_context(|| format!("failed to list abandoned drains of {}", live.display()))?;
    files.push(live.to_path_buf());
    let mut kept_ours = 0;
    for path in files {
        let records = match spool::peek(&path) {
            Ok(records) => records,
            Err(_) if is_symlink(&path) => {
                refuse(report, &path);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if !records.iter().any(|raw| spool_kind.is_ours(raw)) {
            // Not ours to touch: the kcap CLI delivers (or drops) these.
            report.left += records.len() as u64;
            continue;
        }
        let claimed = if path == live {
            spool::claim(live, pid)
        } else {
            spool::claim_orphan(&path, live, pid)
        };
        let draining = match claimed {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(_) if is_symlink(&path) => {
                refuse(report, &path);
                continue;
            }
            Err(e) => {
                return Err(
                    anyhow::Error::new(e).context(format!("failed to claim {}", path.display()))
                );
            }
        };
        let tally = match spool_kind {
            Spool::Transcript => {
                let config_dir = config_dir.to_path_buf();
                deliver(client, &config_dir, draining, spool_kind, |c, raw| {
                    let c = c.clone();
                    let config_dir = config_dir.clone();
                    async move {
                        let batch = serde_json::from_str::<TranscriptBatch>(&raw).ok();
                        c.post_transcript(raw).await?;
                        // Delivered: the next offline run resumes after these lines, not from
                        // the spool this replay just emptied (R3).
                        if let Some(b) = batch {
                            super::handed_over::advance_past(&config_dir, &b);
                        }
                        Ok(())
                    }
                })
                .await?
            }
            Spool::Hook => {
                deliver(client, config_dir, draining, spool_kind, |c, raw| {
                    let c = c.clone();
                    async move {
                        match serde_json::from_str::<HookRecord>(&raw) {
                            Ok(r) => c.post_hook(&r.route, r.body).await,
                            // `is_ours` parsed it already; kept should it ever not parse.
                            Err(e) => Err(Failure::Rejected {
                                status: 0,
                                body_snippet: format!("unreadable spool record: {e}"),
                            }),
                        }
                    }
                })
                .await?
            }
        };
        match spool_kind {
            Spool::Transcript => report.transcript_delivered += tally.delivered,
            Spool::Hook => report.hooks_delivered += tally.delivered,
        }
        report.kept += tally.kept;
        report.left += tally.left;
        report.refused_lines += tally.refused;
        kept_ours += tally.kept;
    }
    Ok(kept_ours)
}

/// What delivering one claimed file did.
struct Tally {
    delivered: u64,
    kept: u64,
    left: u64,
    /// Refused lines set aside (transcript spool only).
    refused: u64,
}

/// After this many refused lines in a row with nothing delivered between them, the server is
/// taken to refuse everything (a misconfiguration, not bad lines): the rest is kept for a later
/// replay instead of being sent one line per request.
const REFUSED_IN_A_ROW: u64 = 32;

/// Posts each record of ours in order. A transcript record the server refuses is split in two
/// and each half posted again, down to the single line it refuses, which is set aside in
/// `refused/` (S4.1): one bad line no longer holds a session's other lines, and with them its
/// lifecycle requests, for ever. A refused hook record is kept. After a failure that does not
/// heal within [`ATTEMPTS`], every record of ours from there on is kept (the pieces of a record
/// being split as pieces, each a whole record). Records of other tools are put back unposted.
/// Everything put back keeps its order.
async fn deliver<F, Fut>(
    client: &KcapClient,
    config_dir: &Path,
    draining: Draining,
    spool_kind: Spool,
    post: F,
) -> Result<Tally>
where
    F: Fn(&KcapClient, String) -> Fut,
    Fut: std::future::Future<Output = Result<(), Failure>>,
{
    let records = draining
        .records::<serde_json::Value>()
        .with_context(|| format!("failed to read {}", draining.path().display()))?;
    let mut keep = Vec::new();
    let mut delivered = 0;
    let mut kept = 0;
    let mut left = 0;
    let mut refused = 0;
    let mut refused_in_a_row = 0;
    let mut giving_up = false;
    // The watcher's own pacing: full jitter over the same exponential envelope.
    let mut backoff = Backoff::new();
    for rec in records {
        if !spool_kind.is_ours(&rec.raw) {
            left += 1;
            keep.push(rec.raw);
            continue;
        }
        // The record, or the pieces it was split into, next piece last.
        let mut pieces = vec![rec.raw];
        while let Some(raw) = pieces.pop() {
            if giving_up {
                kept += 1;
                keep.push(raw);
                continue;
            }
            let mut attempt = 0;
            loop {
                attempt += 1;
                match post(client, raw.clone()).await {
                    Ok(()) => {
                        delivered += 1;
                        refused_in_a_row = 0;
                        backoff.reset();
                        break;
                    }
                    Err(Failure::Transient {
                        error, retry_after, ..
                    }) if attempt < ATTEMPTS => {
                        let delay = backoff.next_delay(retry_after).min(MAX_REPLAY_WAIT);
                        warn!(
                            event = "ship_failed",
                            "replay: {error}; retrying in {delay:?}"
                        );
                        tokio::time::sleep(delay).await;
                    }
                    Err(f @ Failure::Unauthorized { .. }) => {
                        client.reload_token(Ts::now());
                        if attempt >= ATTEMPTS {
                            warn!(event = "ship_failed", "replay: {f}; keeping the rest");
                            kept += 1;
                            keep.push(raw.clone());
                            giving_up = true;
                            break;
                        }
                    }
                    Err(Failure::Rejected {
                        status,
                        body_snippet,
                    }) if spool_kind == Spool::Transcript
                        && refused_in_a_row < REFUSED_IN_A_ROW =>
                    {
                        match serde_json::from_str::<TranscriptBatch>(&raw) {
                            Ok(batch) if batch.lines.len() > 1 => {
                                let (first, second) = split(batch);
                                // Serialising a batch that was just parsed cannot fail.
                                pieces.push(serde_json::to_string(&second)?);
                                pieces.push(serde_json::to_string(&first)?);
                            }
                            Ok(batch) => {
                                refused += batch.lines.len() as u64;
                                refused_in_a_row += 1;
                                set_aside(config_dir, &batch, status, &body_snippet);
                            }
                            // `is_ours` parsed it as a batch already.
                            Err(_) => {
                                kept += 1;
                                keep.push(raw.clone());
                            }
                        }
                        break;
                    }
                    Err(Failure::Rejected {
                        status,
                        body_snippet,
                    }) if spool_kind == Spool::Transcript => {
                        warn!(
                            event = "ship_failed",
                            status,
                            "replay: the server refused {REFUSED_IN_A_ROW} lines in a row ({body_snippet}); keeping the rest for later"
                        );
                        kept += 1;
                        keep.push(raw.clone());
                        giving_up = true;
                        break;
                    }
                    Err(Failure::Rejected {
                        status,
                        body_snippet,
                    }) => {
                        warn!(
                            event = "ship_failed",
                            status,
                            "replay: the server refused a record ({body_snippet}); keeping it"
                        );
                        kept += 1;
                        keep.push(raw.clone());
                        break;
                    }
                    Err(other) => {
                        warn!(
                            event = "ship_failed",
                            "replay: {other}; keeping the rest for later"
                        );
                        kept += 1;
                        keep.push(raw.clone());
                        giving_up = true;
                        break;
                    }
                }
            }
        }
    }
    let path = draining.path().to_path_buf();
    draining.finish(&keep).with_context(|| {
        format!(
            "failed to put back undelivered records of {}",
            path.display()
        )
    })?;
    info!(event = "replayed", delivered, kept, left, refused, path = %path.display(), "replayed {}", path.display());
    Ok(Tally {
        delivered,
        kept,
        left,
        refused,
    })
}

/// A batch of two or more lines as its two halves, in order.
fn split(mut batch: TranscriptBatch) -> (TranscriptBatch, TranscriptBatch) {
    let half = batch.lines.len() / 2;
    let second = TranscriptBatch {
        session_id: batch.session_id.clone(),
        agent_id: batch.agent_id.clone(),
        vendor: batch.vendor.clone(),
        lines: batch.lines.split_off(half),
        line_numbers: batch.line_numbers.split_off(half),
    };
    (batch, second)
}

/// Sets a refused line aside (S4.1) and logs it with its number; past the file's cap it is
/// only counted.
fn set_aside(config_dir: &Path, batch: &TranscriptBatch, status: u16, body_snippet: &str) {
    let line = batch.line_numbers.first().copied().unwrap_or_default();
    let session = &batch.session_id;
    let agent = batch.agent_id.as_deref().unwrap_or("");
    let kept = match refused::set_aside(config_dir, batch) {
        Ok(refused::SetAside::Written) => "set aside in refused/".to_string(),
        Ok(refused::SetAside::OverCap) => {
            "not kept (the refused-lines file is at its 8 MiB cap), counted".to_string()
        }
        Err(e) => format!("not kept ({e})"),
    };
    error!(
        event = "line_refused",
        session_id = %session,
        agent_id = agent,
        line,
        status,
        "replay: the server refuses line {line} of session {session} (HTTP {status}: {body_snippet}); {kept}"
    );
}
