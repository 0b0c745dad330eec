//! Shipping: redaction, batching, the kcap protocol and its HTTP client, and the spools.

pub mod auth;
pub(crate) mod backoff;
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

/// The one place the oversize rule is chosen: a line longer than this ships as
/// [`redact::oversize_placeholder`]. Every tail cursor (seeding, fold, shipping) measures
/// lines with it while streaming, so the fold's oversize count and what is shipped agree with
/// [`redact::is_oversize`]. R2.3: UTF-16 code units, as the kcap CLI measures a line.
pub const LINE_LIMIT: SizeLimit = SizeLimit::utf16_units(redact::MAX_LINE_UTF16_UNITS as u64);

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
