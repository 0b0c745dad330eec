//! `kcap-watch replay`: deliver what the spools hold (lines first, then lifecycle requests).
//!
//! The files are the kcap CLI's own, drained with the same protocol (`spec/files.md`): a spool
//! file is renamed to a private `.draining` file before it is read, so concurrent appends
//! never collide, and whatever the server did not acknowledge is put back. Delivering twice
//! is harmless (the server de-duplicates), so a crash midway loses nothing.

use std::time::Duration;

use anyhow::{Context, Result};
use tracing::{info, warn};

use crate::config::Settings;
use crate::rollout::header::normalize_id;
use crate::ship::TranscriptBatch;
use crate::ship::backoff::Backoff;
use crate::ship::client::{Deadlines, Failure, KcapClient};
use crate::ship::spool::{self, Draining, HookRecord};
use crate::ship::token::TokenSource;
use crate::time::Ts;

/// Transient failures are retried this many times per record before the rest is kept.
const ATTEMPTS: u32 = 3;

/// A single wait between attempts is cut to this (a replay is run by hand or by a spawner that
/// waits for it; the records it keeps are tried again next time).
const MAX_REPLAY_WAIT: Duration = Duration::from_secs(10);

/// What a replay did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    pub transcript_delivered: u64,
    pub hooks_delivered: u64,
    /// Records put back into the spools.
    pub kept: u64,
}

/// Delivers the spools of one session (or of every session with a backlog).
pub async fn replay(settings: &Settings, url: &str, session: Option<&str>) -> Result<ReplayReport> {
    let token = TokenSource::new(
        settings.token.as_ref().map(|t| t.expose().to_string()),
        settings.token_file.clone(),
        settings.config_dir.clone(),
        settings.profile.clone(),
        url.to_string(),
    );
    let client = KcapClient::new(url, token, Deadlines::default())?;
    let sessions = match session {
        Some(s) => vec![normalize_id(s)],
        None => spool::sessions_with_backlog(&settings.config_dir)
            .context("failed to list the spools")?,
    };
    let mut report = ReplayReport::default();
    let pid = std::process::id();
    let config_dir = settings.config_dir.as_path();
    for session in sessions {
        let path = spool::transcript_spool_path(&settings.config_dir, &session);
        for draining in claim_all(&path, pid)? {
            let (delivered, kept) = deliver(&client, draining, |c, raw| {
                let c = c.clone();
                async move {
                    // Every record must be a transcript body; anything else is kept as is.
                    match serde_json::from_str::<TranscriptBatch>(&raw) {
                        Ok(batch) => {
                            c.post_transcript(raw).await?;
                            // Delivered: the next offline run resumes after these lines, not
                            // from the spool replay just emptied.
                            if let Some(last) = batch.line_numbers.last()
                                && let Err(e) = super::handed_over::advance(
                                    config_dir,
                                    &batch.session_id,
                                    batch.agent_id.as_deref(),
                                    last + 1,
                                )
                            {
                                warn!(
                                    event = "offline_watermark_failed",
                                    "failed to record the offline watermark: {e}"
                                );
                            }
                            Ok(())
                        }
                        Err(e) => Err(Failure::Rejected {
                            status: 0,
                            body_snippet: format!("unreadable spool record: {e}"),
                        }),
                    }
                }
            })
            .await?;
            report.transcript_delivered += delivered;
            report.kept += kept;
        }
        let path = spool::hook_spool_path(&settings.config_dir, &session);
        for draining in claim_all(&path, pid)? {
            let (delivered, kept) = deliver(&client, draining, |c, raw| {
                let c = c.clone();
                async move {
                    match serde_json::from_str::<HookRecord>(&raw) {
                        Ok(r) => c.post_hook(&r.route, r.body).await,
                        Err(e) => Err(Failure::Rejected {
                            status: 0,
                            body_snippet: format!("unreadable spool record: {e}"),
                        }),
                    }
                }
            })
            .await?;
            report.hooks_delivered += delivered;
            report.kept += kept;
        }
    }
    Ok(report)
}

fn claim_all(path: &std::path::Path, pid: u32) -> Result<Vec<Draining>> {
    let mut all = spool::claim_orphans(path, pid)
        .with_context(|| format!("failed to claim abandoned drains of {}", path.display()))?;
    if let Some(d) =
        spool::claim(path, pid).with_context(|| format!("failed to claim {}", path.display()))?
    {
        all.push(d);
    }
    Ok(all)
}

/// Posts each record in order; keeps the refused ones and, after a failure that does not
/// heal within [`ATTEMPTS`], everything from there on (order is preserved).
async fn deliver<F, Fut>(client: &KcapClient, draining: Draining, post: F) -> Result<(u64, u64)>
where
    F: Fn(&KcapClient, String) -> Fut,
    Fut: std::future::Future<Output = Result<(), Failure>>,
{
    let records = draining
        .records::<serde_json::Value>()
        .with_context(|| format!("failed to read {}", draining.path().display()))?;
    let mut keep = Vec::new();
    let mut delivered = 0;
    let mut giving_up = false;
    // The watcher's own pacing: full jitter over the same exponential envelope.
    let mut backoff = Backoff::new();
    for rec in records {
        if giving_up {
            keep.push(rec.raw);
            continue;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            match post(client, rec.raw.clone()).await {
                Ok(()) => {
                    delivered += 1;
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
                Err(Failure::Unauthorized { .. }) => {
                    client.reload_token(Ts::now());
                    if attempt >= ATTEMPTS {
                        warn!(
                            event = "ship_failed",
                            "replay: the server refuses the token; keeping the rest"
                        );
                        keep.push(rec.raw.clone());
                        giving_up = true;
                        break;
                    }
                }
                Err(Failure::Rejected {
                    status,
                    body_snippet,
                }) => {
                    warn!(
                        event = "ship_failed",
                        status, "replay: the server refused a record ({body_snippet}); keeping it"
                    );
                    keep.push(rec.raw.clone());
                    break;
                }
                Err(other) => {
                    warn!(
                        event = "ship_failed",
                        "replay: {other}; keeping the rest for later"
                    );
                    keep.push(rec.raw.clone());
                    giving_up = true;
                    break;
                }
            }
        }
    }
    let kept = keep.len() as u64;
    let path = draining.path().to_path_buf();
    draining.finish(&keep).with_context(|| {
        format!(
            "failed to put back undelivered records of {}",
            path.display()
        )
    })?;
    info!(event = "replayed", delivered, kept, path = %path.display(), "replayed {}", path.display());
    Ok((delivered, kept))
}
