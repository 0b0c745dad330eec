//! The exclusive lock on a lock file that also holds its holder's pid (the daemon's lock, a
//! session supervisor's), taken so that other processes can still read that pid.
//!
//! Unix: `flock`, which is advisory: it never stops anyone reading the file.
//!
//! Windows: `LockFileEx` locks are mandatory for the bytes they cover. The standard library's
//! `File::try_lock` locks every byte from offset 0, so while the holder runs, every other
//! process's read of the pid fails with `ERROR_LOCK_VIOLATION`: the daemon could not name, nor
//! adopt, a supervisor it found running. Here one byte far past any content is locked
//! instead ([`LOCKED_BYTE`]), and the pid at the start of the file stays readable. A probe
//! that locks the whole file ([`std::fs::File::try_lock_shared`], as `status` does) still
//! overlaps that byte, so it still sees the lock held.

use std::fs::{File, TryLockError};

/// Takes the exclusive lock on `file` without waiting: `WouldBlock` when another handle
/// holds it (or holds a lock overlapping it).
pub fn try_lock_exclusive(file: &File) -> Result<(), TryLockError> {
    os::try_lock_exclusive(file)
}

/// The one byte the Windows lock covers: past the end of any pid (a lock beyond the end of a
/// file is allowed), and below 2^63, the largest offset every file system takes.
#[cfg_attr(not(windows), allow(dead_code))]
const LOCKED_BYTE: u64 = 1 << 62;

#[cfg(unix)]
mod os {
    use std::fs::{File, TryLockError};

    pub(super) fn try_lock_exclusive(file: &File) -> Result<(), TryLockError> {
        file.try_lock()
    }
}

#[cfg(windows)]
mod os {
    use std::fs::{File, TryLockError};
    use std::io;
    use std::os::windows::io::AsRawHandle;

    use windows_sys::Win32::Foundation::{ERROR_IO_PENDING, ERROR_LOCK_VIOLATION};
    use windows_sys::Win32::Storage::FileSystem::{
        LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY, LockFileEx,
    };
    use windows_sys::Win32::System::IO::OVERLAPPED;

    use super::LOCKED_BYTE;

    pub(super) fn try_lock_exclusive(file: &File) -> Result<(), TryLockError> {
        let mut at = OVERLAPPED::default();
        at.Anonymous.Anonymous.Offset = LOCKED_BYTE as u32;
        at.Anonymous.Anonymous.OffsetHigh = (LOCKED_BYTE >> 32) as u32;
        // SAFETY: the handle is open for as long as `file` lives, and `at` outlives the call,
        // which returns at once (LOCKFILE_FAIL_IMMEDIATELY, a handle opened for synchronous IO).
        let ok = unsafe {
            LockFileEx(
                file.as_raw_handle(),
                LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY,
                0,
                1,
                0,
                &mut at,
            )
        };
        if ok != 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        // The codes the standard library's own `try_lock` takes for "held by another".
        match e.raw_os_error() {
            Some(code)
                if code == ERROR_LOCK_VIOLATION as i32 || code == ERROR_IO_PENDING as i32 =>
            {
                Err(TryLockError::WouldBlock)
            }
            _ => Err(TryLockError::Error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::io::{Read, Write};

    fn open(path: &std::path::Path) -> File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap()
    }

    /// Two holders exclude each other, and a whole-file probe (how `status` asks whether a key
    /// is held) sees the lock; once the holder closes its handle the lock is free again.
    #[test]
    fn the_lock_excludes_a_second_holder_and_shows_to_a_whole_file_probe() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.lock");
        let holder = open(&path);
        try_lock_exclusive(&holder).unwrap();
        let other = open(&path);
        assert!(matches!(
            try_lock_exclusive(&other),
            Err(TryLockError::WouldBlock)
        ));
        assert!(matches!(
            other.try_lock_shared(),
            Err(TryLockError::WouldBlock)
        ));
        drop(holder);
        try_lock_exclusive(&other).unwrap();
    }

    /// The pid the holder wrote stays readable by everyone else while it holds the lock. On
    /// Windows a lock on the pid's own bytes refuses that read (Wine does not enforce that
    /// rule, so there a lock on those bytes is what shows it: a second lock on them is
    /// refused exactly where a read would be).
    #[test]
    fn the_holders_pid_stays_readable_while_the_lock_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.lock");
        let mut holder = open(&path);
        try_lock_exclusive(&holder).unwrap();
        holder.write_all(b"4242").unwrap();

        let mut text = String::new();
        File::open(&path)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "4242");
        #[cfg(windows)]
        assert!(
            windows_range_is_free(&path, 0, 4096),
            "the lock covers the pid's bytes"
        );
    }

    /// Whether another handle may take a shared lock on `len` bytes at `offset`: refused
    /// exactly when an exclusive lock held elsewhere covers any of them, which is when Windows
    /// refuses reads of them too.
    #[cfg(windows)]
    fn windows_range_is_free(path: &std::path::Path, offset: u64, len: u32) -> bool {
        use std::os::windows::io::AsRawHandle;
        use windows_sys::Win32::Storage::FileSystem::{LOCKFILE_FAIL_IMMEDIATELY, LockFileEx};
        use windows_sys::Win32::System::IO::OVERLAPPED;

        let probe = File::open(path).unwrap();
        let mut at = OVERLAPPED::default();
        at.Anonymous.Anonymous.Offset = offset as u32;
        at.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
        // SAFETY: `probe` is open across the call and `at` outlives it; it returns at once.
        unsafe {
            LockFileEx(
                probe.as_raw_handle(),
                LOCKFILE_FAIL_IMMEDIATELY,
                0,
                len,
                0,
                &mut at,
            ) != 0
        }
    }
}
