//! Which file a handle or a path names, to tell "the same file, appended to or renamed" from
//! "another file now at this path" (a rewritten rollout, a spool renamed away under us).
//!
//! Unix: device and inode. Windows: volume serial number and file index, the pair NTFS and
//! ReFS keep stable for a file's life, read from an open handle (std keeps its accessors for
//! them unstable).

use std::fs::File;
use std::io;
use std::path::Path;

/// A file's identity on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    volume: u64,
    index: u64,
}

impl FileId {
    /// The identity of an open file.
    pub fn of_file(file: &File) -> io::Result<FileId> {
        os::of_file(file)
    }

    /// The identity of the file at `path` (following symlinks).
    pub fn of_path(path: &Path) -> io::Result<FileId> {
        os::of_path(path, true)
    }

    /// The identity of what is at `path` itself: a symbolic link there is the link, not the
    /// file it points at.
    pub fn of_link_path(path: &Path) -> io::Result<FileId> {
        os::of_path(path, false)
    }
}

/// What `path` names now, and the metadata of the open `file`, whose identity is `id`: what a
/// followed rollout's check needs at every poll.
///
/// On Unix one `stat` of the path is both while it names the open file (one inode has one size
/// and one modification time): an idle supervisor makes this check for every child at every
/// poll. On Windows a path's directory entry may lag behind a file another process appends to,
/// so the size is read from the open handle.
pub fn look(
    path: &Path,
    file: &File,
    id: FileId,
) -> (io::Result<FileId>, Option<std::fs::Metadata>) {
    os::look(path, file, id)
}

#[cfg(unix)]
mod os {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn of_metadata(m: &std::fs::Metadata) -> FileId {
        FileId {
            volume: m.dev(),
            index: m.ino(),
        }
    }

    pub(super) fn of_file(file: &File) -> io::Result<FileId> {
        file.metadata().map(|m| of_metadata(&m))
    }

    pub(super) fn look(
        path: &Path,
        file: &File,
        id: FileId,
    ) -> (io::Result<FileId>, Option<std::fs::Metadata>) {
        match std::fs::metadata(path) {
            Ok(meta) if of_metadata(&meta) == id => (Ok(id), Some(meta)),
            Ok(meta) => (Ok(of_metadata(&meta)), file.metadata().ok()),
            Err(e) => (Err(e), file.metadata().ok()),
        }
    }

    pub(super) fn of_path(path: &Path, follow: bool) -> io::Result<FileId> {
        if follow {
            std::fs::metadata(path)
        } else {
            std::fs::symlink_metadata(path)
        }
        .map(|m| of_metadata(&m))
    }
}

#[cfg(windows)]
mod os {
    use super::*;
    use std::os::windows::fs::OpenOptionsExt;
    use std::os::windows::io::AsRawHandle;

    use windows_sys::Win32::Storage::FileSystem::{
        BY_HANDLE_FILE_INFORMATION, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
        FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE, GetFileInformationByHandle,
    };

    pub(super) fn of_file(file: &File) -> io::Result<FileId> {
        // SAFETY: an all-zero BY_HANDLE_FILE_INFORMATION is a valid value of the plain struct.
        let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: the handle is open for as long as `file` is borrowed; `info` is writable.
        let ok = unsafe { GetFileInformationByHandle(file.as_raw_handle() as _, &mut info) };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(FileId {
            volume: u64::from(info.dwVolumeSerialNumber),
            index: (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow),
        })
    }

    pub(super) fn look(
        path: &Path,
        file: &File,
        _id: FileId,
    ) -> (io::Result<FileId>, Option<std::fs::Metadata>) {
        (of_path(path, true), file.metadata().ok())
    }

    pub(super) fn of_path(path: &Path, follow: bool) -> io::Result<FileId> {
        // No access rights and full sharing: looking never gets in anyone's way. Backup
        // semantics lets a directory be opened too; opening the reparse point itself is
        // what not following a link means here.
        let flags = if follow {
            FILE_FLAG_BACKUP_SEMANTICS
        } else {
            FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT
        };
        let file = std::fs::OpenOptions::new()
            .access_mode(0)
            .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
            .custom_flags(flags)
            .open(path)?;
        of_file(&file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renamed_file_keeps_its_identity_and_a_new_one_at_the_path_has_another() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rollout.jsonl");
        std::fs::write(&path, "a\n").unwrap();
        let open = File::open(&path).unwrap();
        let id = FileId::of_file(&open).unwrap();
        assert_eq!(FileId::of_path(&path).unwrap(), id);

        let moved = dir.path().join("archived.jsonl");
        std::fs::rename(&path, &moved).unwrap();
        assert_eq!(FileId::of_path(&moved).unwrap(), id);
        assert_eq!(FileId::of_file(&open).unwrap(), id);

        std::fs::write(&path, "a\n").unwrap();
        assert_ne!(FileId::of_path(&path).unwrap(), id);
        assert_eq!(FileId::of_link_path(&moved).unwrap(), id);
        assert_eq!(
            FileId::of_path(&dir.path().join("missing"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
    }
}

#[cfg(all(test, unix))]
mod link_tests {
    use super::*;

    #[test]
    fn a_link_is_itself_unless_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let id = FileId::of_path(&target).unwrap();
        assert_eq!(FileId::of_path(&link).unwrap(), id);
        assert_ne!(FileId::of_link_path(&link).unwrap(), id);
    }
}
