//! Lines the server refuses (docs/behaviour.md S4.1): set aside, never retried.
//!
//! A line the server answers with a 4xx that is not about the token or the route (401, 404,
//! 405) and not "later" (408, 429) will be refused again however often it is sent. Kept in the
//! transcript spool it would be re-posted by every `replay` and, since a replay sends a
//! session's lifecycle requests only once its lines are through, it would hold the session's
//! `subagent-stop` back for ever (docs/behaviour.md S4). So the watcher and `replay` both isolate
//! such a line by halving and append it here instead:
//! `<config>/kcap-watch/refused/<session>.jsonl`, one [`TranscriptBatch`] a line (the transcript
//! spool's record format, keyed the same way), so a person or `kcap import` can still read
//! what was refused, and `status` counts it.
//!
//! The file is capped at [`REFUSED_CAP`] per session, appended to as the transcript spool is
//! (one `write` under a lock, on a file opened for that write only); past the cap a refused
//! line is only counted and logged, never written.

use std::io;
use std::path::{Path, PathBuf};

use crate::files::{ensure_private_dir, parent_dir, with_context};
use crate::ship::TranscriptBatch;
use crate::ship::spool::{append_record, checked_key};

/// The refused-lines file of one session never grows past this.
pub const REFUSED_CAP: u64 = 8 * 1024 * 1024;

/// What setting a refused record aside did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetAside {
    /// The record is in the session's refused-lines file.
    Written,
    /// The file is at its cap: the lines are counted only.
    OverCap,
}

/// `<config>/kcap-watch/refused/<key>.jsonl`, `<key>` as the spools name a session.
pub fn refused_path(config_dir: &Path, session_id: &str) -> io::Result<PathBuf> {
    let key = checked_key(session_id)?;
    Ok(config_dir
        .join("kcap-watch")
        .join("refused")
        .join(format!("{key}.jsonl")))
}

/// Appends `batch` (the refused line, or lines) to its session's refused-lines file.
pub fn set_aside(config_dir: &Path, batch: &TranscriptBatch) -> io::Result<SetAside> {
    let path = refused_path(config_dir, &batch.session_id)?;
    let context = || format!("failed to set refused lines aside in {}", path.display());
    if batch.lines.is_empty() {
        return Ok(SetAside::Written);
    }
    let mut record = serde_json::to_vec(batch).map_err(|e| with_context(e.into(), context()))?;
    record.push(b'\n');
    let dir = parent_dir(&path);
    ensure_private_dir(parent_dir(dir))
        .and_then(|()| ensure_private_dir(dir))
        .and_then(|()| append_record(&path, &record, REFUSED_CAP))
        .map(|written| {
            if written {
                SetAside::Written
            } else {
                SetAside::OverCap
            }
        })
        .map_err(|e| with_context(e, context()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(numbers: &[u64], text: &str) -> TranscriptBatch {
        TranscriptBatch {
            session_id: "0199a1b2c3d4e5f60718293a4b5c6d7e".into(),
            agent_id: Some("0199a1b2-0000-7000-8000-00000000000a".into()),
            vendor: "codex".into(),
            lines: numbers.iter().map(|_| text.to_string()).collect(),
            line_numbers: numbers.to_vec(),
        }
    }

    #[test]
    fn refused_lines_are_kept_in_the_spool_record_format_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let b = batch(&[7], "{\"type\":\"x\"}");
        assert_eq!(set_aside(dir.path(), &b).unwrap(), SetAside::Written);
        let path = refused_path(dir.path(), &b.session_id).unwrap();
        assert!(path.ends_with("kcap-watch/refused/0199a1b2c3d4e5f60718293a4b5c6d7e.jsonl"));
        let text = std::fs::read_to_string(&path).unwrap();
        let back: TranscriptBatch = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(back, b);

        // A line of 1 MiB: the eighth one no longer fits under the 8 MiB cap.
        let big = batch(&[8], &"x".repeat(1 << 20));
        let outcomes: Vec<_> = (0..8)
            .map(|_| set_aside(dir.path(), &big).unwrap())
            .collect();
        assert_eq!(
            outcomes.iter().filter(|o| **o == SetAside::OverCap).count(),
            1
        );
        assert!(std::fs::metadata(&path).unwrap().len() <= REFUSED_CAP);
    }

    #[test]
    fn an_unsafe_session_id_names_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = batch(&[1], "x");
        b.session_id = "../../etc".into();
        assert!(set_aside(dir.path(), &b).is_err());
        assert!(!dir.path().join("kcap-watch").exists());
    }
}
