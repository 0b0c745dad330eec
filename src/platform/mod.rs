//! Everything that differs between Linux, macOS and Windows, behind one small seam per
//! concern. `cfg` attributes live in this module tree and nowhere else, so a reader sees at
//! once what each operating system does differently:
//!
//! - [`start_token`]: the kcap CLI's process start token (`lx:`, `mac:`, `tk:`), written to
//!   the pid file and compared to tell a live process from a recycled pid;
//! - [`process`]: whether a pid (and which incarnation of it) is still running;
//! - [`config_dir`]: where `<config>` is, resolved exactly as the kcap CLI resolves it;
//! - [`replace`]: renaming a file into place when another process may hold it open;
//! - [`positional`]: reads and writes at an offset without moving a shared cursor;
//! - [`lock`]: the exclusive lock on a file that holds its holder's pid, leaving the pid
//!   readable by others (Windows locks are mandatory for the bytes they cover);
//! - [`file_id`]: which file an open handle or a path names (device and inode, or volume
//!   and file index);
//! - [`private_file`]: files only this user may read, never opened through a symbolic link
//!   at their own path (modes and `O_NOFOLLOW`, or reparse points refused);
//! - [`plain_path`]: a canonical path without Windows' verbatim `\\?\` prefix, as a service
//!   definition names the binary;
//! - [`memory`]: handing freed heap memory back to the system where the allocator keeps it;
//! - [`notifier`]: change notification backends behind one trait (`notify` everywhere, inotify
//!   read directly on Linux for the daemon's busy watcher directory);
//! - [`signals`]: the signals that end a watcher, and detaching from a terminal;
//! - [`proc_info`]: another process's command line and environment (the daemon reads the
//!   kcap CLI's session watcher);
//! - [`ticker`]: the safety-net poll's periodic tick (a `timerfd` on Linux, woken once per
//!   period; tokio's timer elsewhere);
//! - [`detached`]: starting a process in its own session (the daemon's supervisors), and
//!   ending one.
//!
//! The parts that only format or compare (token text, path rules) are plain functions that
//! take their inputs as arguments, compiled on every target, so each operating system's rule
//! is unit-tested on the machine the tests run on.

pub mod config_dir;
pub mod detached;
pub mod file_id;
pub mod lock;
pub mod memory;
pub(crate) mod notifier;
pub mod open_files;
pub mod plain_path;
pub mod positional;
pub mod private_file;
pub mod proc_info;
pub mod process;
pub(crate) mod process_handle;
pub mod replace;
pub mod signals;
pub mod start_token;
#[cfg(test)]
pub(crate) mod test_support;
pub(crate) mod ticker;

/// A real process to point the liveness and token checks at: this test binary again,
/// running only [`test_child::wait_for_stdin_to_close`], which lives until its stdin closes.
#[cfg(test)]
pub(crate) mod test_child {
    use std::io::Read;
    use std::process::{Child, Command, Stdio};

    const MARK: &str = "KCAP_WATCH_TEST_CHILD";

    pub(crate) fn spawn() -> Child {
        command().spawn().expect("spawn the test binary as a child")
    }

    /// The command [`spawn`] runs; arguments added to it are test-name filters that match
    /// nothing more.
    pub(crate) fn command() -> Command {
        let mut cmd = Command::new(std::env::current_exe().expect("the test binary's path"));
        cmd.args([
            "--exact",
            "platform::test_child::wait_for_stdin_to_close",
            "--ignored",
            "--quiet",
        ])
        .env(MARK, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        cmd
    }

    #[test]
    #[ignore = "the body of the child process that spawn() starts, not a test of its own"]
    fn wait_for_stdin_to_close() {
        // Run by hand (`--ignored`) it returns at once instead of waiting on a terminal.
        if std::env::var_os(MARK).is_some() {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        }
    }
}
