//! Shipping: redaction, batching, the kcap protocol and its HTTP client, and the spools.

pub mod auth;
pub(crate) mod backoff;
pub mod capture;
pub mod client;
pub(crate) mod handed_over;
pub(crate) mod http;
pub mod outbox;
pub mod protocol;
pub mod redact;
pub mod refused;
pub(crate) mod replay;
pub mod spool;

use serde::{Deserialize, Serialize};

use crate::tail::reader::SizeLimit;

/// The one place the size limit is chosen: a line longer than this ships as the capture-loss
/// marker ([`capture`]). Every tail cursor (seeding, fold, shipping) measures lines with it
/// while streaming, so the fold's oversize count and what is shipped agree.
pub const LINE_LIMIT: SizeLimit = SizeLimit::bytes(capture::MAX_RECORD_BYTES);

/// One `/hooks/transcript` request body; also one record of the transcript spool
/// (docs/behaviour.md F), so the kcap CLI and this watcher can deliver each other's spools.
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
