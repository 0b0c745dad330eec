//! Stand-in processes for the tests that need a pid: one that stays alive until the test lets
//! it go (a Codex parent, a watcher the kcap CLI holds a key for), and the pid of one that has
//! exited. They are this test binary again, so they exist on every platform the suite runs
//! on (no `sleep` or `true` program on Windows).

use super::bin::SpawnRetry;
use std::io::Read;
use std::process::{Child, ChildStdin, Command, Stdio};

/// Set in a stand-in's environment: run the body, not a test.
const MARK: &str = "KCAP_TEST_IDLE_PROCESS";

/// A running process that lives until [`Idle::end`] or drop (its stdin closed: it exits by
/// itself; a drop also kills it, in case it is stuck).
pub struct Idle {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Idle {
    pub fn start() -> Idle {
        let mut child = Command::new(std::env::current_exe().expect("the test binary's path"))
            .args([
                "support::procs::idle_process_body",
                "--exact",
                "--ignored",
                "--quiet",
            ])
            .env(MARK, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_retrying()
            .expect("spawn the test binary as an idle process");
        let stdin = child.stdin.take();
        Idle { child, stdin }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Lets the process exit (as a parent does when its agent ends) and waits for it.
    pub fn end(mut self) {
        self.stdin.take();
        let _ = self.child.wait();
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pid of a process that has exited (and was reaped): certainly not running.
pub fn exited_pid() -> u32 {
    let idle = Idle::start();
    let pid = idle.id();
    idle.end();
    pid
}

#[test]
#[ignore = "the body of the process Idle::start runs, not a test of its own"]
fn idle_process_body() {
    // Run by hand (`--ignored`) it returns at once instead of waiting on a terminal.
    if std::env::var_os(MARK).is_some() {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    }
}
