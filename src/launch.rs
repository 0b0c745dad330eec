//! What a session watcher's own launch says: the rollout its command line names and the
//! settings its environment holds (docs/behaviour.md S2.3). The daemon supervises a session
//! with them, and `status` names the rollout of a key the kcap CLI's watcher holds.

use std::path::{Path, PathBuf};

use crate::codex::header::normalize_id;
use crate::platform::proc_info::ProcessLaunch;

/// What the session watcher's own launch says (each `None` when unknown).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LaunchFacts {
    pub rollout: Option<PathBuf>,
    pub kcap_url: Option<String>,
    pub config_dir: Option<PathBuf>,
    pub codex_home: Option<PathBuf>,
}

impl LaunchFacts {
    /// Reads `watch <id> "<path>"` from the arguments (the first `watch` after the program,
    /// whose id is `key`) and the three variables from the environment.
    pub fn from_launch(launch: &ProcessLaunch, key: &str) -> LaunchFacts {
        let args = &launch.args;
        let rollout = args
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, a)| *a == "watch")
            .and_then(|(i, _)| {
                let id = args.get(i + 1)?;
                let path = args.get(i + 2)?;
                // A relative path is relative to that process's directory, not the daemon's:
                // it names nothing here, and the lookup under CODEX_HOME is used instead.
                (normalize_id(id).eq_ignore_ascii_case(key)
                    && !path.starts_with('-')
                    && Path::new(path).is_absolute())
                .then(|| PathBuf::from(path))
            });
        LaunchFacts {
            rollout,
            kcap_url: launch.var("KCAP_URL").map(str::to_owned),
            config_dir: launch.var("KCAP_CONFIG_DIR").map(PathBuf::from),
            codex_home: launch.var("CODEX_HOME").map(PathBuf::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "019fa9812dca7a319c553b1f0e6d2a01";

    fn launch(args: &[&str], env: &[(&str, &str)]) -> ProcessLaunch {
        ProcessLaunch {
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// An absolute path on the platform the tests run on (`/` alone is not absolute on
    /// Windows, where a path needs its drive).
    fn absolute(unix: &str) -> String {
        if cfg!(windows) {
            format!("C:{}", unix.replace('/', "\\"))
        } else {
            unix.to_owned()
        }
    }

    #[test]
    fn the_session_watchers_command_line_names_its_rollout_and_its_environment_the_rest() {
        let rollout = absolute("/home/u/.codex/sessions/2026/07/28/rollout-x.jsonl");
        let l = launch(
            &[
                "/opt/kcap/kcap",
                "watch",
                KEY,
                &rollout,
                "--cwd",
                "/src",
                "--parent-pid",
                "42",
                "--vendor",
                "codex",
            ],
            &[
                ("KCAP_URL", "https://kcap.example"),
                ("CODEX_HOME", "/home/u/.codex"),
                ("KCAP_CONFIG_DIR", ""),
            ],
        );
        let f = LaunchFacts::from_launch(&l, KEY);
        assert_eq!(f.rollout.as_deref(), Some(Path::new(&rollout)));
        assert_eq!(f.kcap_url.as_deref(), Some("https://kcap.example"));
        assert_eq!(f.codex_home.as_deref(), Some(Path::new("/home/u/.codex")));
        // Empty is unset, as for the kcap CLI.
        assert_eq!(f.config_dir, None);
        // Another session's watcher, or no `watch` at all, names no rollout of ours.
        let other = launch(
            &["kcap", "watch", "00000000000000000000000000000000", "/x"],
            &[],
        );
        assert_eq!(LaunchFacts::from_launch(&other, KEY).rollout, None);
        assert_eq!(
            LaunchFacts::from_launch(&launch(&["kcap", "daemon"], &[]), KEY).rollout,
            None
        );
        // A relative path names a file in the daemon's directory, not the watcher's.
        let relative = launch(&["kcap", "watch", KEY, "rollout-x.jsonl"], &[]);
        assert_eq!(LaunchFacts::from_launch(&relative, KEY).rollout, None);
    }
}
