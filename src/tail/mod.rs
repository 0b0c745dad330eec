//! Reading complete lines of a growing rollout, and noticing that it grew. Bytes only: what
//! a line means is for the sink the reader hands it to (`codex::lines`).
//!
//! [`reader::LineReader`] turns the bytes after an offset into complete, numbered lines,
//! holding only the partial last line (bounded) and never re-reading what it has passed, so
//! noticing one appended line costs the same on a 10 KB file as on a 10 GB one. [`guard`]
//! tells a rewritten or replaced file from an archived one; [`index`] finds where a line
//! starts without a rescan; [`recent`] keeps what the fold cursor just read, so the guard and
//! the shipping cursor do not read it again; [`wake`] notices changes.

pub(crate) mod guard;
pub(crate) mod index;
pub mod reader;
pub(crate) mod recent;

pub use reader::{LineEnd, LineReader, LineSink, SizeLimit};

use std::path::Path;

use crate::error::UsageError;

/// A rollout must be a regular file: opening a named pipe would block until some writer
/// opened it (a hang before the heartbeat even starts), and nothing else can be tailed.
/// The error is a usage error (exit 2) naming the path and the reason.
pub(crate) fn require_regular_file(path: &Path, meta: &std::fs::Metadata) -> anyhow::Result<()> {
    if meta.is_file() {
        return Ok(());
    }
    let what = if meta.is_dir() {
        "it is a directory"
    } else {
        "it is not a regular file"
    };
    Err(UsageError(format!("cannot read rollout {}: {what}", path.display())).into())
}
