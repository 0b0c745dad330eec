//! Is the file at the rollout's path still the one being read, with the bytes already read
//! unchanged? Device and inode name the file; the bytes just before the read offset are
//! re-read on every change, so a rewrite is seen even when the first line is the same.
//!
//! Codex archives a finished session by renaming its rollout into
//! `<CODEX_HOME>/archived_sessions/`: the same inode under a new name is not a rewrite, and the
//! watcher follows it there.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::reader::ReadAt;
use crate::platform::file_id::FileId;

/// Bytes before the read offset compared on every change.
const CHECKED_BYTES: u64 = 256;

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Neither size nor modification time moved: nothing to read.
    Unchanged,
    /// The file changed; new bytes may be there.
    Changed,
    /// Codex archived the file: the same inode now lives at this path.
    Archived(PathBuf),
}

/// The guard over one open rollout.
#[derive(Debug)]
pub(crate) struct Guard {
    id: FileId,
    /// Bytes `[at - len, at)` as they were when last read.
    before: Vec<u8>,
    at: u64,
    seen: Option<(u64, Option<SystemTime>)>,
}

impl Guard {
    pub(crate) fn new(file: &File) -> io::Result<Guard> {
        Ok(Guard {
            id: FileId::of_file(file)?,
            before: Vec::new(),
            at: 0,
            seen: None,
        })
    }

    /// Checks the open `file` (read up to `offset`) and what `path` names now. `Err` names why
    /// the rollout counts as rewritten.
    pub(crate) fn check(
        &mut self,
        file: &File,
        path: &Path,
        offset: u64,
    ) -> Result<Seen, &'static str> {
        let (at_path, meta) = crate::platform::file_id::look(path, file, self.id);
        let len = meta.as_ref().map_or(u64::MAX, |m| m.len());
        if len < offset {
            return Err("the file shrank below the read position");
        }
        let mut archived = None;
        match at_path {
            Ok(id) if id != self.id => {
                return Err("it was replaced by a different file");
            }
            Ok(_) => {}
            Err(_) => {
                // Gone from its path: archived by Codex (follow it), or deleted (read the rest
                // through the open handle).
                if let Some(candidate) = archive_path(path)
                    && FileId::of_path(&candidate).is_ok_and(|id| id == self.id)
                {
                    archived = Some(candidate);
                }
            }
        }
        let seen = (len, meta.and_then(|m| m.modified().ok()));
        let changed = self.seen != Some(seen);
        if changed && !self.before.is_empty() {
            let mut buf = vec![0; self.before.len()];
            let start = self.at - self.before.len() as u64;
            let n = ReadAt::read_at(file, &mut buf, start).unwrap_or(0);
            if n != buf.len() || buf != self.before {
                return Err("the bytes before the read position changed");
            }
        }
        self.seen = Some(seen);
        Ok(match (archived, changed) {
            (Some(p), _) => Seen::Archived(p),
            (None, true) => Seen::Changed,
            (None, false) => Seen::Unchanged,
        })
    }

    /// Where Codex archived the open file since the last check, if it left `path` for its
    /// archive. Asked again after a read: a rename followed by an append can both land
    /// between the check and the read, and the lines read then belong to the new path (the
    /// stop they may trigger names it). A different file at `path` is left to the next
    /// check, which reports the rewrite.
    pub(crate) fn archived_since(&self, path: &Path) -> Option<PathBuf> {
        if FileId::of_path(path).is_ok() {
            return None;
        }
        let candidate = archive_path(path)?;
        FileId::of_path(&candidate)
            .is_ok_and(|id| id == self.id)
            .then_some(candidate)
    }

    /// Remembers the bytes just before `offset` (call after reading up to it).
    pub(crate) fn remember<R: ReadAt + ?Sized>(&mut self, file: &R, offset: u64) {
        if offset == self.at {
            return;
        }
        let len = offset.min(CHECKED_BYTES);
        let mut buf = vec![0; len as usize];
        let n = file.read_at(&mut buf, offset - len).unwrap_or(0);
        buf.truncate(n);
        self.before = buf;
        self.at = offset - len + n as u64;
    }
}

/// Where Codex archives this rollout: `<CODEX_HOME>/archived_sessions/<file name>`, for a
/// rollout under `<CODEX_HOME>/sessions/`.
fn archive_path(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let home = path
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "sessions"))?
        .parent()?;
    Some(home.join("archived_sessions").join(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(path: &Path, bytes: &[u8]) {
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn a_rewrite_with_the_same_first_line_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        write(&p, b"{\"meta\":1}\n{\"a\":1}\n{\"b\":2}\n");
        let f = File::open(&p).unwrap();
        let mut g = Guard::new(&f).unwrap();
        let off = f.metadata().unwrap().len();
        g.remember(&f, off);
        assert_eq!(g.check(&f, &p, off), Ok(Seen::Changed));
        assert_eq!(g.check(&f, &p, off), Ok(Seen::Unchanged));
        // In place: same first line, same length, different bytes, more appended.
        let mut w = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        w.write_all(b"{\"meta\":1}\n{\"x\":1}\n{\"y\":2}\n{\"z\":3}\n")
            .unwrap();
        assert!(g.check(&f, &p, off).is_err());
    }

    #[test]
    fn a_replacement_at_the_path_is_a_rewrite_and_an_archive_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let day = dir.path().join("sessions/2026/07/28");
        std::fs::create_dir_all(&day).unwrap();
        std::fs::create_dir_all(dir.path().join("archived_sessions")).unwrap();
        let p = day.join("rollout-x.jsonl");
        write(&p, b"{\"meta\":1}\n");
        let f = File::open(&p).unwrap();
        let mut g = Guard::new(&f).unwrap();
        g.remember(&f, 11);
        let archived = dir.path().join("archived_sessions/rollout-x.jsonl");
        std::fs::rename(&p, &archived).unwrap();
        assert_eq!(g.check(&f, &p, 11), Ok(Seen::Archived(archived.clone())));
        assert_eq!(g.check(&f, &archived, 11), Ok(Seen::Unchanged));
        // A copy with the same content put back at the path is another file.
        write(&p, b"{\"meta\":1}\n{\"more\":1}\n");
        assert!(g.check(&f, &p, 11).is_err());
    }

    /// The path no longer names the file (deleted, the writer still holding it): its size
    /// still comes from the open handle, so a shrink below what was read is still caught.
    #[cfg(unix)]
    #[test]
    fn a_deleted_rollout_is_still_checked_through_its_handle() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        write(&p, b"{\"meta\":1}\n{\"a\":1}\n");
        let f = File::open(&p).unwrap();
        let w = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        let mut g = Guard::new(&f).unwrap();
        g.remember(&f, 19);
        assert_eq!(g.check(&f, &p, 19), Ok(Seen::Changed));
        std::fs::remove_file(&p).unwrap();
        assert_eq!(g.check(&f, &p, 19), Ok(Seen::Unchanged));
        w.set_len(5).unwrap();
        assert_eq!(
            g.check(&f, &p, 19),
            Err("the file shrank below the read position")
        );
    }
}
