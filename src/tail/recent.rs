//! The bytes the fold cursor just read, kept for the reads that follow it at once.
//!
//! A line appended to a followed rollout is read three times: by the fold cursor (to classify
//! it), by the rewrite guard (the bytes just before the new read position) and by the shipping
//! cursor (its text). Each was a `pread` of the same bytes a few microseconds apart. The fold's
//! read now goes through a [`Recording`], which keeps what it read (up to [`RECENT_MAX`]), and
//! the other two read through a [`Snapshot`], which answers from those bytes where it can and
//! from the file otherwise. The host keeps the recording only while it handles the file change
//! that read it (`host::child`), so no read is answered from bytes older than the one before.
//! Where the fold's read found the end of the file, so does a snapshot: a line appended is
//! then one read of the file, where it was three reads and two more that found the end.

use std::cell::RefCell;
use std::io;

use super::reader::ReadAt;

/// At most this many bytes are kept: one ordinary line is about 1 KiB, a burst a few dozen.
/// What a catch-up reads past it is read again from the file, as before.
pub(crate) const RECENT_MAX: usize = 64 * 1024;

/// The bytes read from `start` on, contiguously.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    start: u64,
    bytes: Vec<u8>,
    /// Reads still extend `bytes` (until one is not contiguous or would pass the cap).
    open: bool,
    /// The last read recorded came back short: the file ended where `bytes` end when it was
    /// read ([`super::reader::ReadAt`]).
    ends_file: bool,
}

impl Recent {
    /// Records what is read from `offset` on, forgetting what was recorded before.
    pub(crate) fn begin(&mut self, offset: u64) {
        self.start = offset;
        self.bytes.clear();
        self.open = true;
        self.ends_file = false;
    }

    /// Forgets what was recorded and gives its memory back.
    pub(crate) fn clear(&mut self) {
        self.bytes = Vec::new();
        self.open = false;
        self.ends_file = false;
    }

    fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

/// Reads `file`, recording into `recent` what each read returns at the recording's end.
pub(crate) struct Recording<'a, R: ?Sized> {
    file: &'a R,
    recent: RefCell<&'a mut Recent>,
}

impl<'a, R: ReadAt + ?Sized> Recording<'a, R> {
    pub(crate) fn new(file: &'a R, recent: &'a mut Recent) -> Self {
        Recording {
            file,
            recent: RefCell::new(recent),
        }
    }
}

impl<R: ReadAt + ?Sized> ReadAt for Recording<'_, R> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = self.file.read_at(buf, offset)?;
        let mut recent = self.recent.borrow_mut();
        if recent.open && offset == recent.end() {
            if recent.bytes.len() + n <= RECENT_MAX {
                recent.bytes.extend_from_slice(&buf[..n]);
                recent.ends_file = n < buf.len();
            } else {
                recent.open = false;
            }
        }
        Ok(n)
    }
}

/// Reads `file`, answering from `recent` the bytes it holds.
pub(crate) struct Snapshot<'a, R: ?Sized> {
    pub(crate) file: &'a R,
    pub(crate) recent: &'a Recent,
}

impl<R: ReadAt + ?Sized> ReadAt for Snapshot<'_, R> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let recent = self.recent;
        if offset < recent.start || offset >= recent.end() {
            return self.file.read_at(buf, offset);
        }
        // In range: `offset - start < bytes.len()`, a usize.
        let from = (offset - recent.start) as usize;
        let k = buf.len().min(recent.bytes.len() - from);
        buf[..k].copy_from_slice(&recent.bytes[from..from + k]);
        if k == buf.len() || recent.ends_file {
            // Short only where the recorded read found the end of the file: what the fold
            // read is all the others need (the shipping cursor never passes the fold).
            return Ok(k);
        }
        // The rest from the file: a short answer must still mean the end of the file, never
        // the end of what was recorded.
        loop {
            match self.file.read_at(&mut buf[k..], recent.end()) {
                Ok(m) => return Ok(k + m),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // What was recorded is still good; the next read reports the error.
                Err(_) => return Ok(k),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tail::reader::Counted;
    use proptest::prelude::*;

    #[test]
    fn what_the_fold_read_is_not_read_again() {
        let file = Counted {
            bytes: b"{\"a\":1}\n{\"b\":2}\n",
            reads: Default::default(),
        };
        let mut recent = Recent::default();
        recent.begin(8);
        let mut buf = [0u8; 64];
        let n = Recording::new(&file, &mut recent)
            .read_at(&mut buf, 8)
            .unwrap();
        assert_eq!(&buf[..n], b"{\"b\":2}\n");
        assert_eq!(file.reads.get(), 1);
        let snap = Snapshot {
            file: &file,
            recent: &recent,
        };
        let mut line = [0u8; 8];
        assert_eq!(snap.read_at(&mut line, 8).unwrap(), 8);
        assert_eq!(&line, b"{\"b\":2}\n");
        assert_eq!(file.reads.get(), 1, "answered from what the fold read");
        // Before what was recorded: from the file.
        assert_eq!(snap.read_at(&mut line, 0).unwrap(), 8);
        assert_eq!(&line, b"{\"a\":1}\n");
        assert_eq!(file.reads.get(), 2);
        recent.clear();
        let snap = Snapshot {
            file: &file,
            recent: &recent,
        };
        assert_eq!(snap.read_at(&mut line, 8).unwrap(), 8);
        assert_eq!(file.reads.get(), 3, "a cleared recording answers nothing");
    }

    proptest! {
        /// Whatever was recorded (reads of any sizes from any offset, past the cap too), a
        /// snapshot answers every read exactly as the file does.
        #[test]
        fn a_snapshot_reads_as_the_file_does(
            bytes in proptest::collection::vec(any::<u8>(), 0..(RECENT_MAX + 4096)),
            begin in 0usize..(RECENT_MAX + 4096),
            chunks in proptest::collection::vec(1usize..40_000, 0..6),
            reads in proptest::collection::vec((0usize..(RECENT_MAX + 8192), 0usize..70_000), 1..20),
        ) {
            let file: &[u8] = &bytes;
            let mut recent = Recent::default();
            recent.begin(begin as u64);
            let mut at = begin as u64;
            for len in chunks {
                let mut buf = vec![0u8; len];
                let n = Recording::new(file, &mut recent).read_at(&mut buf, at).unwrap();
                let mut want = vec![0u8; len];
                let m = file.read_at(&mut want, at).unwrap();
                prop_assert_eq!(&buf[..n], &want[..m]);
                at += n as u64;
            }
            prop_assert!(recent.bytes.len() <= RECENT_MAX);
            let snap = Snapshot { file, recent: &recent };
            for (offset, len) in reads {
                let mut got = vec![0u8; len];
                let mut want = vec![0u8; len];
                let n = snap.read_at(&mut got, offset as u64).unwrap();
                let m = file.read_at(&mut want, offset as u64).unwrap();
                prop_assert_eq!(n, m);
                prop_assert_eq!(&got[..n], &want[..m]);
            }
        }
    }
}
