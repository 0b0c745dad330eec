//! Whether a process is still running: the parent watch (`--parent-pid`), spool files left by
//! a replay that died, and another watcher's pid file all ask.
//!
//! A bare pid can be recycled: once its process is gone the system may give the number to an
//! unrelated process, which then looks "alive". [`Incarnation`] pairs the pid with the kcap
//! CLI's start token taken when the process was first seen, so a recycled pid reads as gone.

use super::start_token;

/// Whether a process with this pid exists. A process owned by another user exists too: it
/// counts as alive, which never takes over another process's files.
pub fn alive(pid: u32) -> bool {
    os::alive(pid)
}

/// One run of a process: its pid and, where the platform has one, its start token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incarnation {
    pid: u32,
    token: Option<String>,
}

impl Incarnation {
    /// The process now at `pid`, as it is now (take this while it is known to be the right
    /// one, e.g. at start for the parent that spawned us).
    pub fn observe(pid: u32) -> Incarnation {
        Incarnation {
            pid,
            token: start_token::for_pid(pid),
        }
    }

    /// An incarnation named by a pid file: its pid and the token on its second line, if any.
    pub fn recorded(pid: u32, token: Option<&str>) -> Incarnation {
        Incarnation {
            pid,
            token: token
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Whether this incarnation still runs: its pid is alive and does not conclusively belong
    /// to another process. A token that cannot be compared (another scheme, unreadable now)
    /// leaves the answer to liveness alone, as the kcap CLI's reaper does.
    pub fn running(&self) -> bool {
        alive(self.pid) && self.recycled_as(start_token::for_pid(self.pid).as_deref()) != Some(true)
    }

    /// Given the token the pid has now, whether it is another process: `None` when unknown.
    fn recycled_as(&self, now: Option<&str>) -> Option<bool> {
        let recorded = self.token.as_deref()?;
        start_token::compare(now, recorded).map(|same| !same)
    }
}

#[cfg(unix)]
mod os {
    pub(super) fn alive(pid: u32) -> bool {
        // pid 0 and values that turn negative as pid_t would address process groups.
        let Ok(raw) = libc::pid_t::try_from(pid) else {
            return false;
        };
        if raw <= 0 {
            return false;
        }
        // SAFETY: kill with signal 0 sends nothing; it only checks that the pid exists.
        if unsafe { libc::kill(raw, 0) } == 0 {
            return true;
        }
        std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
}

#[cfg(windows)]
mod os {
    use windows_sys::Win32::Foundation::ERROR_ACCESS_DENIED;

    use crate::platform::process_handle::OpenProcess;

    pub(super) fn alive(pid: u32) -> bool {
        match OpenProcess::query(pid) {
            Ok(process) => process.still_active(),
            // It exists, but is not ours to look at (another user, a protected process).
            Err(code) => code == ERROR_ACCESS_DENIED,
        }
    }
}

#[cfg(not(any(unix, windows)))]
mod os {
    pub(super) fn alive(_pid: u32) -> bool {
        // No probe: assume alive, which never takes over another process's files.
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_zero_and_out_of_range_pids_are_not_alive() {
        assert!(!alive(0));
        #[cfg(unix)]
        assert!(!alive(u32::MAX));
    }

    #[cfg(any(unix, windows))]
    #[test]
    fn a_child_is_alive_until_it_exits_and_is_reaped() {
        let mut child = crate::platform::test_child::spawn();
        let pid = child.id();
        assert!(alive(pid));
        let seen = Incarnation::observe(pid);
        assert!(seen.running());
        drop(child.stdin.take());
        child.wait().unwrap();
        assert!(!alive(pid));
        assert!(!seen.running());
    }

    #[cfg(any(target_os = "linux", target_os = "macos", windows))]
    #[test]
    fn a_recycled_pid_is_not_the_incarnation_that_was_recorded() {
        // This process, recorded with the token of an earlier run of its pid: same pid, same
        // scheme, another start. The pid is alive, the recorded process is not.
        let me = Incarnation::observe(std::process::id());
        let token = me.token().expect("a token for this process").to_owned();
        let (scheme, _) = token.split_once(':').unwrap();
        let earlier = Incarnation::recorded(me.pid(), Some(&format!("{scheme}:an-earlier-run")));
        assert!(alive(me.pid()));
        assert!(me.running());
        assert!(!earlier.running());
    }

    #[test]
    fn a_token_that_cannot_be_compared_leaves_it_to_liveness() {
        let pid = std::process::id();
        // A legacy bare number, a scheme from another platform, no token at all.
        for token in [Some("638396640000000000"), Some("zz:1"), Some("  "), None] {
            let recorded = Incarnation::recorded(pid, token);
            assert!(recorded.running(), "{token:?}");
        }
    }

    #[test]
    fn recycled_is_decided_only_on_one_scheme() {
        let recorded = Incarnation::recorded(7, Some(" lx:b:100\n"));
        assert_eq!(recorded.token(), Some("lx:b:100"));
        assert_eq!(recorded.recycled_as(Some("lx:b:100")), Some(false));
        assert_eq!(recorded.recycled_as(Some("lx:b:200")), Some(true));
        assert_eq!(recorded.recycled_as(Some("mac:u:1")), None);
        assert_eq!(recorded.recycled_as(None), None);
    }
}
