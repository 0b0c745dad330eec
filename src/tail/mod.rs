//! Reading complete lines of a growing rollout, and noticing that it grew.
//!
//! [`reader::LineReader`] turns the bytes after an offset into complete, numbered lines,
//! holding only the partial last line (bounded) and never re-reading what it has passed, so
//! noticing one appended line costs the same on a 10 KB file as on a 10 GB one.
//! [`seed`] is the start-up pass that folds the whole on-disk prefix.

pub(crate) mod guard;
pub mod index;
pub mod reader;
pub mod seed;
pub mod wake;

pub use reader::{Line, LineReader};

use std::path::Path;

use crate::error::UsageError;

/// A rollout must be a regular file: opening a named pipe would block until some writer
/// opened it (a hang before the heartbeat even starts), and nothing else can be tailed.
/// The error is a usage error (exit 2) naming the path and the reason.
pub fn require_regular_file(path: &Path, meta: &std::fs::Metadata) -> anyhow::Result<()> {
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
