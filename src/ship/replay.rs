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
use crate::ship::auth::Credentials;
use crate::ship::client::{Deadlines, KcapClient, Outcome};
use crate::ship::spool::{self, Draining, HookRecord};
use crate::time::Ts;

/// Transient failures are retried this many times per record before the rest is kept.
const ATTEMPTS: u32 = 3;

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
    let token = Credentials::from_settings(settings, url);
    let client = KcapClient::new(url, token, Deadlines::default())?;
    let sessions = match session {
        Some(s) => vec![normalize_id(s)],
        None => spool::sessions_with_backlog(&settings.config_dir)
            .context("failed to list the spools")?,
    };
    let mut report = ReplayReport::default();
    let pid = std::process::id();
    for session in sessions {
        let path = spool::transcript_spool_path(&settings.config_dir, &session);
        for draining in claim_all(&path, pid)? {
            let (delivered, kept) = deliver(&client, draining, |c, raw| {
                let c = c.clone();
                async move {
                    // Every record must be a transcript body; anything else is kept as is.
                    match serde_json::from_str::<TranscriptBatch>(&raw) {
                        Ok(_) => c.post_transcript(raw).await,
                        Err(e) => Outcome::Rejected {
                            status: 0,
                            body_snippet: format!("unreadable spool record: {e}"),
                        },
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
                        Err(e) => Outcome::Rejected {
                            status: 0,
                            body_snippet: format!("unreadable spool record: {e}"),
                        },
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
    Fut: std::future::Future<Output = Outcome>,
{
    let records = draining
        .records::<serde_json::Value>()
        .with_context(|| format!("failed to read {}", draining.path().display()))?;
    let mut keep = Vec::new();
    let mut delivered = 0;
    let mut giving_up = false;
    for rec in records {
        if giving_up {
            keep.push(rec.raw);
            continue;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            match post(client, rec.raw.clone()).await {
                Outcome::Delivered => {
                    delivered += 1;
                    break;
                }
                Outcome::Transient {
                    error, retry_after, ..
                } if attempt < ATTEMPTS => {
                    let delay = retry_after
                        .unwrap_or(Duration::from_millis(250 << attempt))
                        .min(Duration::from_secs(10));
                    warn!(
                        event = "ship_failed",
                        "replay: {error}; retrying in {delay:?}"
                    );
                    tokio::time::sleep(delay).await;
                }
                Outcome::Unauthorized { .. } => {
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
                Outcome::Rejected {
                    status,
                    body_snippet,
                } => {
                    warn!(
                        event = "ship_failed",
                        status, "replay: the server refused a record ({body_snippet}); keeping it"
                    );
                    keep.push(rec.raw.clone());
                    break;
                }
                other => {
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
