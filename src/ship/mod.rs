//! Shipping: redaction, batching, the kcap HTTP client and the spools.

pub mod auth;
pub mod backoff;
pub mod client;
pub mod outbox;
pub mod redact;
pub mod replay;
pub mod spool;

use serde::{Deserialize, Serialize};

/// One `/hooks/transcript` request body; also one record of the transcript spool
/// (`spec/files.md`), so the kcap CLI and this watcher can deliver each other's spools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptBatch {
    pub session_id: String,
    /// `null` for a session watcher.
    pub agent_id: Option<String>,
    pub vendor: String,
    /// Redacted line texts, without terminators.
    pub lines: Vec<String>,
    /// `lines[i]` is line `line_numbers[i]`; strictly increasing.
    pub line_numbers: Vec<u64>,
}
