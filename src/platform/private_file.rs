//! Files and directories only this user may use, never reached through a symbolic link at
//! their own path (docs/behaviour.md R5): everything the watcher makes under `<config>`
//! (and the kcap CLI's token store) is created and opened through these.
//!
//! Unix: new files get mode 0600 from their first byte, new directories 0700, and every open
//! carries `O_NOFOLLOW`, so a link planted at the path fails the open (`ELOOP`; `EMLINK` on
//! FreeBSD and NetBSD) and nothing is read or written through it.
//!
//! Windows: there are no modes; who may read a file is the ACL it inherits from its
//! directory, and a user's profile (where `<config>` lives) is private already. Opens carry
//! `FILE_FLAG_OPEN_REPARSE_POINT`, which opens a symbolic link or junction itself rather than
//! what it points at; a handle that turns out to be a reparse point is closed and refused, so
//! here too the target is never touched.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::path::Path;

/// The error for a symbolic link (or other reparse point) at a path the watcher owns.
pub fn refused(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("refusing to use {}: it is a symbolic link", path.display()),
    )
}

/// Open options for a private file that is never opened through a link at its path. Open
/// them with [`open`], which turns the refusal into an error naming the path.
pub fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    os::restrict(&mut options);
    options
}

/// Opens `path` with `options` (from [`options`]); a link at the path is [`refused`].
pub fn open(options: &OpenOptions, path: &Path) -> io::Result<File> {
    match options.open(path) {
        Ok(file) if os::is_link(&file)? => Err(refused(path)),
        // Only regular files are kept here: a named pipe or a device planted at the path is
        // refused (the open itself did not wait for a writer: see `os::restrict`).
        Ok(file) if !file.metadata()?.is_file() => Err(not_regular(path)),
        Ok(file) => Ok(file),
        Err(e) if os::is_link_refusal(&e) => Err(refused(path)),
        Err(e) => Err(e),
    }
}

/// An error naming `path` as something other than a regular file.
pub fn not_regular(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{} is not a regular file", path.display()),
    )
}

/// A recursive directory builder whose new directories only this user may enter.
pub fn dir_builder() -> DirBuilder {
    let mut builder = DirBuilder::new();
    builder.recursive(true);
    os::restrict_dirs(&mut builder);
    builder
}

/// Makes the temporary files `builder` creates private from their first byte.
pub fn restrict_temp_files(builder: &mut tempfile::Builder<'_, '_>) {
    os::restrict_temp_files(builder);
}

/// Makes `options` open a named pipe or device at the path at once (to be refused as not a
/// regular file) instead of blocking until some writer opens it; on a regular file this
/// changes nothing. Windows opens a pipe's path without waiting: nothing to do there.
pub fn never_block_on_open(options: &mut OpenOptions) {
    os::never_block_on_open(options);
}

/// Takes away every access but the owner's from an existing file (a no-op on Windows, where
/// access is the directory's ACL).
pub fn make_private(path: &Path) -> io::Result<()> {
    os::make_private(path)
}

/// Why a state directory (`<config>`, `<watchers>`) that exists is not ours to keep private
/// state in: owned by another user, read-only, or on a read-only mount. `None`: usable.
pub fn unusable_state_dir(path: &Path, meta: &fs::Metadata) -> Option<String> {
    os::unusable_state_dir(path, meta)
}

#[cfg(unix)]
mod os {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};

    pub(super) fn restrict(options: &mut OpenOptions) {
        // O_NONBLOCK: opening a named pipe planted at the path returns at once instead of
        // waiting for a writer (it is then refused as not a regular file); on a regular file
        // the flag changes nothing.
        options
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }

    pub(super) fn is_link(_file: &File) -> io::Result<bool> {
        // O_NOFOLLOW already failed the open of a link.
        Ok(false)
    }

    pub(super) fn never_block_on_open(options: &mut OpenOptions) {
        options.custom_flags(libc::O_NONBLOCK);
    }

    pub(super) fn is_link_refusal(e: &io::Error) -> bool {
        let code = e.raw_os_error();
        code == Some(libc::ELOOP)
            || (cfg!(any(target_os = "freebsd", target_os = "netbsd"))
                && code == Some(libc::EMLINK))
    }

    pub(super) fn restrict_dirs(builder: &mut DirBuilder) {
        builder.mode(0o700);
    }

    pub(super) fn restrict_temp_files(builder: &mut tempfile::Builder<'_, '_>) {
        builder.permissions(fs::Permissions::from_mode(0o600));
    }

    pub(super) fn make_private(path: &Path) -> io::Result<()> {
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))
    }

    pub(super) fn unusable_state_dir(path: &Path, meta: &fs::Metadata) -> Option<String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return Some(format!(
                "it is owned by uid {}, not by this user (uid {me})",
                meta.uid()
            ));
        }
        // The owner's write and search bits: even root, who could write anyway, should not
        // keep private state in a directory its owner made read-only.
        if meta.mode() & 0o300 != 0o300 {
            return Some(format!("it is read-only (mode {:o})", meta.mode() & 0o7777));
        }
        // A read-only mount.
        let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            return Some("the path contains a NUL byte".into());
        };
        // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call.
        if unsafe { libc::access(c_path.as_ptr(), libc::W_OK) } != 0 {
            return Some(format!(
                "it is not writable: {}",
                io::Error::last_os_error()
            ));
        }
        None
    }
}

#[cfg(windows)]
mod os {
    pub(super) fn never_block_on_open(_options: &mut OpenOptions) {}

    use super::*;
    use std::os::windows::fs::{MetadataExt, OpenOptionsExt};

    use windows_sys::Win32::Storage::FileSystem::{
        FILE_ATTRIBUTE_READONLY, FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_OPEN_REPARSE_POINT,
    };

    pub(super) fn restrict(options: &mut OpenOptions) {
        options.custom_flags(FILE_FLAG_OPEN_REPARSE_POINT);
    }

    pub(super) fn is_link(file: &File) -> io::Result<bool> {
        Ok(file.metadata()?.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0)
    }

    pub(super) fn is_link_refusal(_e: &io::Error) -> bool {
        // The link itself is opened; [`is_link`] refuses it.
        false
    }

    pub(super) fn restrict_dirs(_builder: &mut DirBuilder) {}

    pub(super) fn restrict_temp_files(_builder: &mut tempfile::Builder<'_, '_>) {}

    pub(super) fn make_private(_path: &Path) -> io::Result<()> {
        Ok(())
    }

    pub(super) fn unusable_state_dir(_path: &Path, meta: &fs::Metadata) -> Option<String> {
        // Ownership and write access are ACLs; a failed write names them later. The
        // read-only attribute is the one thing to see at once.
        (meta.file_attributes() & FILE_ATTRIBUTE_READONLY != 0)
            .then(|| "it is read-only (the read-only attribute is set)".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_file_is_created_and_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.pid");
        let mut file = open(options().write(true).create_new(true), &path).unwrap();
        io::Write::write_all(&mut file, b"42").unwrap();
        drop(file);
        let file = open(options().read(true), &path).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 2);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(file.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_link_at_the_path_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        fs::write(&target, "theirs").unwrap();
        let path = dir.path().join("x.heartbeat");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let err = open(options().write(true).create(true).truncate(true), &path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(fs::read_to_string(&target).unwrap(), "theirs");
    }

    #[cfg(unix)]
    #[test]
    fn a_state_dir_of_another_mode_is_named_unusable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let meta = fs::metadata(dir.path()).unwrap();
        assert_eq!(unusable_state_dir(dir.path(), &meta), None);
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o500)).unwrap();
        let meta = fs::metadata(dir.path()).unwrap();
        let why = unusable_state_dir(dir.path(), &meta).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        assert!(why.contains("read-only"), "{why}");
    }
}
