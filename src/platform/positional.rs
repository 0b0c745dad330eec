//! Reads and writes at an offset that leave no shared cursor behind, so two readers can
//! share one open handle (which also keeps reading a file that was renamed or deleted).
//!
//! Unix has `pread`/`pwrite`. Windows' `seek_read`/`seek_write` also take the offset, but
//! move the handle's cursor as a side effect; nothing in the watcher reads through the cursor,
//! and appends go to the end whatever the cursor says, so that difference never shows.

use std::fs::File;
use std::io;

/// Reads up to `buf.len()` bytes at `offset`; fewer at the end of the file, `0` past it.
pub fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        std::os::windows::fs::FileExt::seek_read(file, buf, offset)
    }
}

/// Writes all of `buf` at `offset`.
pub fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        #[cfg(unix)]
        let n = std::os::unix::fs::FileExt::write_at(file, buf, offset);
        #[cfg(windows)]
        let n = std::os::windows::fs::FileExt::seek_write(file, buf, offset);
        match n {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_land_at_their_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        write_all_at(&file, b"ab", 3).unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(read_at(&file, &mut buf, 2).unwrap(), 4);
        assert_eq!(&buf, b"2ab5");
        // Reads do not depend on one another's position.
        assert_eq!(read_at(&file, &mut buf[..1], 0).unwrap(), 1);
        assert_eq!(read_at(&file, &mut buf, 8).unwrap(), 2);
        assert_eq!(&buf[..2], b"89");
        assert_eq!(read_at(&file, &mut buf, 10).unwrap(), 0);
        assert_eq!(std::fs::read(&path).unwrap(), b"012ab56789");
    }
}
