//! Starting a process that outlives and stands apart from its starter, and ending one.
//!
//! The daemon starts one `supervise` per session (docs/behaviour.md S2.2). Each must be its
//! own kill unit: the kcap CLI's teardown of one session signals that session's supervisor
//! only, and a terminal's hangup or a Ctrl-C aimed at the daemon's process group must not
//! reach the supervisors (the daemon ends them itself, each with a SIGTERM, so they spool).
//! Unix: the child calls `setsid` before `exec` (a new session and process group, no
//! controlling terminal). Windows: a new process group, no console.

use std::process::Command;

/// Makes `cmd` start its process detached from ours (see the module docs).
pub fn detach(cmd: &mut Command) {
    os::detach(cmd);
}

/// Asks process `pid` to end the way a signal ends `watch` (Unix `SIGTERM`); Windows has no
/// such request, so the process is terminated. `false` when it could not be delivered.
pub fn terminate(pid: u32) -> bool {
    os::terminate(pid)
}

/// Ends process `pid` at once (Unix `SIGKILL`, Windows `TerminateProcess`).
pub fn kill(pid: u32) -> bool {
    os::kill(pid)
}

#[cfg(unix)]
mod os {
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    pub(super) fn detach(cmd: &mut Command) {
        // SAFETY: `setsid` is async-signal-safe and touches no memory of the parent; it is
        // the only call made between fork and exec. Its failure (already a group leader,
        // impossible right after fork) leaves the child in our group, which still works.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
    }

    fn send(pid: u32, sig: libc::c_int) -> bool {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        if pid <= 0 {
            return false;
        }
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe { libc::kill(pid, sig) == 0 }
    }

    pub(super) fn terminate(pid: u32) -> bool {
        send(pid, libc::SIGTERM)
    }

    pub(super) fn kill(pid: u32) -> bool {
        send(pid, libc::SIGKILL)
    }
}

#[cfg(windows)]
mod os {
    use std::os::windows::process::CommandExt;
    use std::process::Command;

    use windows_sys::Win32::Foundation::CloseHandle;
    use windows_sys::Win32::System::Threading::{
        CREATE_NEW_PROCESS_GROUP, CREATE_NO_WINDOW, OpenProcess, PROCESS_TERMINATE,
        TerminateProcess,
    };

    pub(super) fn detach(cmd: &mut Command) {
        cmd.creation_flags(CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW);
    }

    pub(super) fn terminate(pid: u32) -> bool {
        kill(pid)
    }

    pub(super) fn kill(pid: u32) -> bool {
        // SAFETY: plain Win32 calls on a handle we open and close here.
        unsafe {
            let handle = OpenProcess(PROCESS_TERMINATE, 0, pid);
            if handle.is_null() {
                return false;
            }
            let ok = TerminateProcess(handle, 1) != 0;
            CloseHandle(handle);
            ok
        }
    }
}
