//! What the unit tests of other modules need from the operating system, each answering
//! `None` or `false` where the platform cannot do it: such a test then returns early there,
//! as a `cfg` gate on it would, but the gate stays in this module.

use std::path::{Path, PathBuf};

/// Makes a named pipe at `path`; `false` where the platform has none at a path (Windows).
pub(crate) fn make_fifo(path: &Path) -> bool {
    #[cfg(unix)]
    {
        let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
            return false;
        };
        // SAFETY: mkfifo with a valid NUL-terminated path.
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) == 0 }
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

/// The files under `dir` this process holds open; `None` where that cannot be listed (it is
/// read from `/proc/self/fd` on Linux).
pub(crate) fn open_files_under(dir: &Path) -> Option<Vec<PathBuf>> {
    #[cfg(target_os = "linux")]
    {
        Some(
            std::fs::read_dir("/proc/self/fd")
                .ok()?
                .flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter(|p| p.starts_with(dir))
                .collect(),
        )
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        None
    }
}

/// A file's permission bits; `None` where files have no modes (Windows).
pub(crate) fn mode(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).ok().map(|m| m.permissions().mode())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Process `pid`'s start token as the kcap CLI computes it on Linux
/// (`lx:<boot_id>:<field 22 of /proc/<pid>/stat>`), read from `/proc` apart from this crate's
/// own [`super::start_token`], so a test can check that code against it. `None` when the
/// process is not running, and on every other platform.
pub(crate) fn kcap_cli_linux_token(pid: i32) -> Option<String> {
    #[cfg(target_os = "linux")]
    {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let after_comm = &stat[stat.rfind(')')? + 2..];
        let starttime = after_comm.split(' ').nth(19)?;
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        Some(format!("lx:{}:{starttime}", boot.trim()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}
