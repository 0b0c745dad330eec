//! The signals that end a watcher, and leaving the terminal's session.
//!
//! Unix: `SIGTERM` (how the kcap CLI stops a watcher, 5 s before it kills it) and `SIGINT`
//! (Ctrl-C) end the watcher gracefully. `SIGHUP` does not: it comes from a terminal being
//! closed, and a watcher spawned from a terminal must outlive it long enough to see its
//! parent exit and post what that calls for (the parent watch decides, not the hangup). The
//! kcap CLI's own watcher was once killed this way along with its agent. A spawned watcher
//! also leaves the terminal's session ([`detach_from_terminal`]) so the hangup is not sent at
//! all.
//!
//! Windows: Ctrl-C and Ctrl-Break end the watcher gracefully, as does closing its console.
//! (Windows ends a process shortly after its console closes whatever it is doing, so that
//! case is best effort; the kcap CLI spawns watchers without a console window.)

use std::io;

/// A signal that ends the watcher, named as logs and exit reasons show it.
pub type SignalName = &'static str;

/// The handlers for the signals that end a watcher, installed once for its life.
pub struct ShutdownSignals {
    os: os::Handlers,
}

impl ShutdownSignals {
    /// Installs the handlers; from now on these signals no longer kill the process outright.
    pub fn install() -> io::Result<ShutdownSignals> {
        Ok(ShutdownSignals {
            os: os::Handlers::install()?,
        })
    }

    /// Waits for the next signal that ends the watcher. Cancel-safe: use it in `select!`.
    pub async fn recv(&mut self) -> SignalName {
        self.os.recv().await
    }

    /// The signals as a channel, waited for by a task of their own (call inside a Tokio
    /// runtime). A loop that waits on several things builds its `select!` again at every
    /// wake-up, and a wait on the signals there polled three signal streams each time (4,200
    /// instructions an appended line, 860 a poll of an idle watcher); a channel's receiver is
    /// checked with an atomic load.
    pub fn into_channel(mut self) -> tokio::sync::mpsc::Receiver<SignalName> {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            loop {
                let name = self.recv().await;
                if tx.send(name).await.is_err() {
                    return;
                }
            }
        });
        rx
    }
}

/// Makes `cmd` start a process that [`request_stop`] can reach on its own: on Windows, the
/// leader of a new process group (a console control event goes to a whole group, and ours
/// holds the starter too); nothing on unix, where a signal goes to one pid.
pub fn stoppable(cmd: &mut std::process::Command) {
    os::stoppable(cmd);
}

/// Asks process `pid` to end the way a user or the kcap CLI ends a watcher gracefully: unix
/// `SIGTERM`; Windows `CTRL_BREAK_EVENT` to the process group `pid` leads (started through
/// [`stoppable`], on this process's console). The process handles it as [`ShutdownSignals`]
/// says.
pub fn request_stop(pid: u32) -> io::Result<()> {
    os::request_stop(pid)
}

/// Leaves the controlling terminal's session (`setsid`), so closing that terminal sends this
/// process no `SIGHUP`. For a process something else spawned and watches; a watcher run by
/// hand from a shell is already its own process group leader, where this fails harmlessly
/// (`Ok(false)`) and Ctrl-C still reaches it. Windows has no such thing: always `Ok(false)`.
pub fn detach_from_terminal() -> io::Result<bool> {
    os::detach_from_terminal()
}

#[cfg(unix)]
mod os {
    use std::io;

    use tokio::signal::unix::{Signal, SignalKind, signal};

    pub(super) struct Handlers {
        term: Signal,
        int: Signal,
        hup: Signal,
    }

    impl Handlers {
        pub(super) fn install() -> io::Result<Handlers> {
            Ok(Handlers {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
                hup: signal(SignalKind::hangup())?,
            })
        }

        pub(super) async fn recv(&mut self) -> super::SignalName {
            loop {
                tokio::select! {
                    _ = self.term.recv() => return "SIGTERM",
                    _ = self.int.recv() => return "SIGINT",
                    _ = self.hup.recv() => {
                        tracing::info!(
                            event = "sighup_ignored",
                            "received SIGHUP (a terminal closed); still watching, the parent watch decides when to end"
                        );
                    }
                }
            }
        }
    }

    pub(super) fn stoppable(_cmd: &mut std::process::Command) {}

    pub(super) fn request_stop(pid: u32) -> io::Result<()> {
        let pid = libc::pid_t::try_from(pid)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        if unsafe { libc::kill(pid, libc::SIGTERM) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub(super) fn detach_from_terminal() -> io::Result<bool> {
        // SAFETY: setsid takes no arguments and only changes this process's session.
        if unsafe { libc::setsid() } != -1 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        // EPERM: already a process group leader (run from an interactive shell).
        if e.raw_os_error() == Some(libc::EPERM) {
            Ok(false)
        } else {
            Err(e)
        }
    }
}

#[cfg(windows)]
mod os {
    use std::io;

    use tokio::signal::windows::{CtrlBreak, CtrlC, CtrlClose, ctrl_break, ctrl_c, ctrl_close};

    pub(super) struct Handlers {
        ctrl_c: CtrlC,
        ctrl_break: CtrlBreak,
        close: CtrlClose,
    }

    impl Handlers {
        pub(super) fn install() -> io::Result<Handlers> {
            Ok(Handlers {
                ctrl_c: ctrl_c()?,
                ctrl_break: ctrl_break()?,
                close: ctrl_close()?,
            })
        }

        pub(super) async fn recv(&mut self) -> super::SignalName {
            tokio::select! {
                _ = self.ctrl_c.recv() => "CTRL_C",
                _ = self.ctrl_break.recv() => "CTRL_BREAK",
                _ = self.close.recv() => "CTRL_CLOSE",
            }
        }
    }

    pub(super) fn stoppable(cmd: &mut std::process::Command) {
        use std::os::windows::process::CommandExt;
        cmd.creation_flags(windows_sys::Win32::System::Threading::CREATE_NEW_PROCESS_GROUP);
    }

    pub(super) fn request_stop(pid: u32) -> io::Result<()> {
        use windows_sys::Win32::System::Console::{CTRL_BREAK_EVENT, GenerateConsoleCtrlEvent};
        // SAFETY: takes plain integers; an unknown group is an error, not undefined behaviour.
        if unsafe { GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, pid) } != 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub(super) fn detach_from_terminal() -> io::Result<bool> {
        Ok(false)
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::Duration;

    fn raise(sig: libc::c_int) {
        // SAFETY: sends a signal to this process, whose handler is installed.
        assert_eq!(unsafe { libc::kill(libc::getpid(), sig) }, 0);
    }

    // One test for all three signals: the handlers are process-wide, and tests run in
    // parallel threads of one process.
    #[tokio::test]
    async fn sighup_is_waited_past_and_sigterm_and_sigint_end_the_watcher() {
        let mut signals = ShutdownSignals::install().unwrap();
        raise(libc::SIGHUP);
        let after_hup = tokio::time::timeout(Duration::from_millis(200), signals.recv()).await;
        assert!(after_hup.is_err(), "SIGHUP ended the wait: {after_hup:?}");
        raise(libc::SIGTERM);
        assert_eq!(signals.recv().await, "SIGTERM");
        raise(libc::SIGINT);
        assert_eq!(signals.recv().await, "SIGINT");
        // The same through the channel a host's loop waits on.
        let mut channel = signals.into_channel();
        raise(libc::SIGHUP);
        let after_hup = tokio::time::timeout(Duration::from_millis(200), channel.recv()).await;
        assert!(
            after_hup.is_err(),
            "SIGHUP reached the channel: {after_hup:?}"
        );
        raise(libc::SIGTERM);
        assert_eq!(channel.recv().await, Some("SIGTERM"));
        raise(libc::SIGINT);
        assert_eq!(channel.recv().await, Some("SIGINT"));
    }

    #[test]
    fn a_spawned_watcher_leaves_the_terminals_session_once() {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "platform::signals::tests::detach_child",
                "--ignored",
            ])
            .env("KCAP_WATCH_DETACH_CHILD", "1")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let status = child.wait().unwrap();
        assert!(status.success());
    }

    /// Run as a child by the test above: a fresh process (not a group leader) leaves its
    /// session once, and a second call finds itself a session leader and says so.
    #[test]
    #[ignore = "the body of a child process, not a test of its own"]
    fn detach_child() {
        if std::env::var_os("KCAP_WATCH_DETACH_CHILD").is_none() {
            return;
        }
        assert!(detach_from_terminal().unwrap());
        // SAFETY: getsid(0) only reads this process's session id.
        assert_eq!(unsafe { libc::getsid(0) }, unsafe { libc::getpid() });
        assert!(!detach_from_terminal().unwrap());
    }
}
