//! Error kinds that end the process with a specific exit code.
//!
//! Code anywhere returns `anyhow::Error`; when the cause is one of these types (anywhere in
//! the chain), `main.rs` maps it to its exit code (docs/behaviour.md L7). Everything
//! else is an unexpected internal error (exit 1).

use std::fmt;
use std::path::PathBuf;

/// Bad command line, configuration or input path: exit 2. The message names the flag,
/// variable or path and the reason.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The rollout was rewritten or truncated under the watcher: exit 3.
#[derive(Debug)]
pub struct RolloutRewritten {
    pub path: PathBuf,
    pub watermark: Option<u64>,
    pub lines: u64,
    pub why: &'static str,
}

impl fmt::Display for RolloutRewritten {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let watermark = self
            .watermark
            .map_or_else(|| "none".to_string(), |w| w.to_string());
        write!(
            f,
            "rollout {} was rewritten ({}): watermark {watermark}, {} complete lines",
            self.path.display(),
            self.why,
            self.lines
        )
    }
}

impl std::error::Error for RolloutRewritten {}

/// Another live watcher holds this key's lock: exit 75.
#[derive(Debug)]
pub struct LockHeld {
    pub key: String,
    pub holder_pid: Option<u32>,
}

impl fmt::Display for LockHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "another watcher is already running for {}", self.key)?;
        if let Some(pid) = self.holder_pid {
            write!(f, " (pid {pid})")?;
        }
        Ok(())
    }
}

impl std::error::Error for LockHeld {}

/// Exit codes (docs/behaviour.md L7).
pub mod code {
    pub const OK: i32 = 0;
    pub const INTERNAL: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const REWRITTEN: i32 = 3;
    pub const LOCKED: i32 = 75;
}
