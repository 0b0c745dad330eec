//! The offline watermark: one past the highest line ever handed over for a key (written to the
//! transcript spool, or delivered from it by `replay`), kept in a small file per key.
//!
//! Offline, the transcript spool alone cannot say where to resume: `replay` empties it, and the
//! next offline run would then spool the whole file again (and on a large session hit the spool
//! cap every cycle). This file survives the replay (docs/behaviour.md R3).

use std::io;
use std::path::{Path, PathBuf};

use crate::files::{ensure_private_dir, watcher_key, write_atomic};

const DIR: &str = "offline-watermarks";

/// The file for one key, or `None` when an id could not name a file safely.
pub(crate) fn path(config_dir: &Path, session_id: &str, agent_id: Option<&str>) -> Option<PathBuf> {
    let safe = |id: &str| {
        (1..=64).contains(&id.len())
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    if !safe(session_id) || !agent_id.is_none_or(safe) {
        return None;
    }
    Some(config_dir.join(DIR).join(watcher_key(session_id, agent_id)))
}

/// The resume line recorded for this key (`None`: nothing was ever handed over).
pub(crate) fn read(
    config_dir: &Path,
    session_id: &str,
    agent_id: Option<&str>,
) -> io::Result<Option<u64>> {
    let Some(path) = path(config_dir, session_id, agent_id) else {
        return Ok(None);
    };
    match crate::files::read_small(&path, crate::files::SMALL_FILE_MAX) {
        Ok(text) => Ok(text.trim().parse().ok()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Records that every line below `resume_line` was handed over (never moves back).
pub(crate) fn advance(
    config_dir: &Path,
    session_id: &str,
    agent_id: Option<&str>,
    resume_line: u64,
) -> io::Result<()> {
    let Some(path) = path(config_dir, session_id, agent_id) else {
        return Ok(());
    };
    if read(config_dir, session_id, agent_id)?.is_some_and(|r| r >= resume_line) {
        return Ok(());
    }
    ensure_private_dir(crate::files::parent_dir(&path))?;
    write_atomic(&path, format!("{resume_line}\n").as_bytes())
}

/// Records that every line of `batch` was handed over; a failure is logged
/// (`offline_watermark_failed`), not returned: the lines are safe in the spool or delivered,
/// and the worst a stale mark does is have the next offline run spool them again.
pub(crate) fn advance_past(config_dir: &Path, batch: &crate::ship::TranscriptBatch) {
    if let Some(last) = batch.line_numbers.last()
        && let Err(e) = advance(
            config_dir,
            &batch.session_id,
            batch.agent_id.as_deref(),
            last + 1,
        )
    {
        tracing::warn!(
            event = "offline_watermark_failed",
            "failed to record the offline watermark: {e}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_only_moves_forward_and_is_per_key() {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path();
        assert_eq!(read(c, "s1", Some("a1")).unwrap(), None);
        advance(c, "s1", Some("a1"), 40).unwrap();
        advance(c, "s1", Some("a1"), 12).unwrap();
        assert_eq!(read(c, "s1", Some("a1")).unwrap(), Some(40));
        assert_eq!(read(c, "s1", None).unwrap(), None);
        assert_eq!(path(c, "../x", None), None);
    }
}
