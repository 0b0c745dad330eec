//! `kcap-watch daemon`: one long-lived process per user that gives every Codex session the
//! kcap CLI watches its own `kcap-watch supervise` (docs/behaviour.md S2).
//!
//! The kcap CLI's spawner starts only its own executable, but its session watcher starts a
//! child watcher only when none is alive for `<session>-<child>` by its rule, and `supervise`
//! keeps exactly the files that rule reads. So the daemon needs no change to the kcap CLI: it
//! finds the sessions the kcap CLI watches ([`sessions`]), and starts one detached supervisor
//! per session, so that the kcap CLI's session-end teardown (SIGTERM to the pid in each
//! child's pid file, then a kill of its process tree) ends that session's supervisor and no
//! other. The daemon itself holds no watcher key.
//!
//! - [`sessions`] finds which sessions are watched, their rollout, server and Codex home;
//! - [`policy`] is the restart rule, pure;
//! - [`exclude`] reads `KCAP_WATCH_EXCLUDE`;
//! - [`service`] prints `--print-service`;
//! - [`run`] is the loop.

pub(crate) mod exclude;
pub(crate) mod policy;
pub(crate) mod run;
pub mod service;
pub(crate) mod sessions;

pub use policy::RestartTiming;
pub use run::run;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::settings::{self as registry, Command, Entry, GivenSetting};

/// What the daemon uses of the settings, and what it passes on (no token: the supervisors it
/// starts resolve their own, from the environment they inherit or the token store).
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub config_dir: PathBuf,
    pub watcher_dir: PathBuf,
    /// `KCAP_URL`, for its status file and to judge which sessions are its server's.
    pub server: Option<String>,
    pub profile: Option<String>,
    pub codex_home: Option<PathBuf>,
    pub poll_interval: Duration,
    pub force_poll: bool,
    /// `KCAP_WATCH_EXCLUDE`.
    pub exclude: Vec<String>,
    /// The settings flags the daemon was given that every supervisor gets too
    /// ([`supervise_flags`]); its variables reach them through the environment they inherit.
    pub supervise_flags: Vec<OsString>,
    /// The waits of the restart rule.
    pub restart_timing: policy::RestartTiming,
}

/// The settings the daemon decides per session and sets through the supervisor's variables
/// (the session watcher's server and Codex home win over the daemon's), so their flags are
/// not passed on: a flag would win over the session's value.
const PER_SESSION: [&dyn Entry; 4] = [
    &registry::SERVER,
    &registry::CODEX_HOME,
    &registry::CONFIG_DIR,
    &registry::WATCHER_DIR,
];

/// The command-line words that give a supervisor the settings flags the daemon was given:
/// every one `supervise` takes but those decided per session ([`PER_SESSION`]). Variables
/// need no words: a supervisor inherits the daemon's environment.
pub fn supervise_flags(given: &[GivenSetting]) -> Vec<OsString> {
    let mut words = Vec::new();
    for g in given {
        let Some((long, value)) = &g.flag else {
            continue;
        };
        if !Command::Supervise.takes(g.setting)
            || PER_SESSION.iter().any(|p| p.var() == g.setting.var())
        {
            continue;
        }
        words.push(OsString::from(long));
        // A given switch has no value.
        if !value.is_empty() {
            words.push(value.clone());
        }
    }
    words
}
