//! Which Codex sessions the kcap CLI watches, and what the daemon needs to supervise one
//! (docs/behaviour.md S2.1, S2.3).
//!
//! A session is watched when `<watchers>/<key>.pid` names a watcher alive by the kcap CLI's
//! rule ([`crate::host::ownership::judge_key`]) and the key is a session key: 32
//! hexadecimal digits, no agent part. What that watcher was started with comes from the
//! process itself where the OS lets a user read their own processes
//! ([`crate::platform::proc_info`]): its command line `watch <id> "<path>" ...` names the
//! rollout, its environment the `KCAP_URL`, `KCAP_CONFIG_DIR` and `CODEX_HOME` it runs with
//! ([`crate::launch`]). Elsewhere (or for a process started differently) the rollout is looked
//! up under `CODEX_HOME` by the session's dashed id ([`crate::codex::layout::find_rollout`]).

use std::fs;
use std::io;
use std::path::Path;

use crate::codex::header::normalize_id;
use crate::host::ownership::{Verdict, judge_key};
use crate::time::Ts;

/// A session key: a UUID's 32 hexadecimal digits, no dashes, no agent part.
pub(crate) fn is_session_key(key: &str) -> bool {
    key.len() == 32 && key.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A session the kcap CLI's watcher keeps alive right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Watched {
    pub key: String,
    /// The session watcher's pid.
    pub pid: u32,
}

/// Every watched session in `watcher_dir` at `now`, by key, but those `settled` names: the
/// caller's decision about them stands whatever the kcap CLI's verdict, so they are not
/// judged (each verdict reads three files and the process's start). A missing directory is
/// none.
pub(crate) fn watched(
    watcher_dir: &Path,
    now: Ts,
    settled: impl Fn(&str) -> bool,
) -> io::Result<Vec<Watched>> {
    let entries = match fs::read_dir(watcher_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(key) = name.to_str().and_then(|n| n.strip_suffix(".pid")) else {
            continue;
        };
        if !is_session_key(key) || settled(key) {
            continue;
        }
        if let Verdict::Alive { pid } = judge_key(watcher_dir, key, now) {
            out.push(Watched {
                key: key.to_owned(),
                pid,
            });
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

/// Whether the kcap CLI still watches session `key`.
pub(crate) fn still_watched(watcher_dir: &Path, key: &str, now: Ts) -> bool {
    matches!(judge_key(watcher_dir, key, now), Verdict::Alive { .. })
}

/// What a candidate rollout's first line says about it being session `key`'s.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RolloutCheck {
    /// A `session_meta` naming `key` as its thread, with the session's `cwd` when it has one.
    Names { cwd: Option<String> },
    /// No complete first line yet: Codex writes the header lazily.
    NotYet,
    /// Another thread's rollout (a symbolic link or a command line naming another session's
    /// file), or no rollout at all: never the session's.
    Not(String),
}

/// Reads `path`'s header (its first line only: nothing else of another session is read) and
/// says whether it is session `key`'s rollout.
pub(crate) fn check_rollout(path: &Path, key: &str) -> RolloutCheck {
    use crate::codex::layout::{Header, read_header};
    match read_header(path) {
        Ok(Header::Meta(meta)) => {
            let id = meta.id.as_deref().map(normalize_id).unwrap_or_default();
            if id.eq_ignore_ascii_case(key) {
                RolloutCheck::Names { cwd: meta.cwd }
            } else if id.is_empty() {
                RolloutCheck::Not(format!("{} names no thread id", path.display()))
            } else {
                RolloutCheck::Not(format!("{} is the rollout of thread {id}", path.display()))
            }
        }
        Ok(Header::NotYet) => RolloutCheck::NotYet,
        Ok(Header::NotRollout) => {
            RolloutCheck::Not(format!("{} is not a Codex rollout", path.display()))
        }
        Err(e) => RolloutCheck::Not(format!("cannot read {}: {e}", path.display())),
    }
}

/// Where the server comes from, for `status` and the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerSource {
    SessionEnv,
    DaemonEnv,
    TokenStore,
}

impl ServerSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerSource::SessionEnv => "the session watcher's KCAP_URL",
            ServerSource::DaemonEnv => "the daemon's KCAP_URL",
            ServerSource::TokenStore => "the active profile's token store",
        }
    }
}

/// S2.3: the session watcher's `KCAP_URL`, else the daemon's, else the `server_url` of the
/// active profile's token store.
pub(crate) fn choose_server(
    session: Option<&str>,
    daemon: Option<&str>,
    store: impl FnOnce() -> Option<String>,
) -> Option<(String, ServerSource)> {
    if let Some(url) = session.filter(|u| !u.trim().is_empty()) {
        return Some((url.trim().to_owned(), ServerSource::SessionEnv));
    }
    if let Some(url) = daemon.filter(|u| !u.trim().is_empty()) {
        return Some((url.trim().to_owned(), ServerSource::DaemonEnv));
    }
    store()
        .filter(|u| !u.trim().is_empty())
        .map(|u| (u.trim().to_owned(), ServerSource::TokenStore))
}

/// The `server_url` of the token store of `profile` (else the active profile) in
/// `config_dir`.
pub(crate) fn store_server_url(config_dir: &Path, profile: Option<&str>) -> Option<String> {
    use crate::ship::auth::store::{Store, resolve_profile};
    let (profile, active) = resolve_profile(config_dir, profile);
    let entry = Store::new(config_dir.to_path_buf(), profile, active).load()?;
    entry.server_url().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codex::layout::{dashed, find_rollout};
    use std::time::SystemTime;

    const KEY: &str = "019fa9812dca7a319c553b1f0e6d2a01";

    #[test]
    fn session_keys_are_32_hex_digits_without_an_agent_part() {
        assert!(is_session_key(KEY));
        assert!(!is_session_key(&format!(
            "{KEY}-019fa9816ea27b028d115c2e9f7a4b02"
        )));
        assert!(!is_session_key("019fa981-2dca-7a31-9c55-3b1f0e6d2a01"));
        assert!(!is_session_key("daemon"));
        assert_eq!(dashed(KEY), "019fa981-2dca-7a31-9c55-3b1f0e6d2a01");
    }

    #[test]
    fn watched_sessions_are_alive_session_keys_and_settled_ones_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let token = crate::files::process_start_token(me).unwrap();
        let now = Ts::now();
        let other = "029fa9812dca7a319c553b1f0e6d2a01";
        let child = format!("{KEY}-019fa9816ea27b028d115c2e9f7a4b02");
        for key in [KEY, other, child.as_str()] {
            let file = |suffix: &str| dir.path().join(format!("{key}.{suffix}"));
            fs::write(file("pid"), format!("{me}\n{token}")).unwrap();
            fs::write(file("started"), now.rfc3339()).unwrap();
            fs::write(file("heartbeat"), now.rfc3339()).unwrap();
        }
        let keys = |settled: &dyn Fn(&str) -> bool| -> Vec<String> {
            watched(dir.path(), now, settled)
                .unwrap()
                .into_iter()
                .map(|w| {
                    assert_eq!(w.pid, me);
                    w.key
                })
                .collect()
        };
        // A child key is never a session.
        assert_eq!(keys(&|_| false), vec![KEY.to_string(), other.to_string()]);
        assert_eq!(keys(&|k| k == KEY), vec![other.to_string()]);
        // A pid file naming a process that is not running is no watched session.
        fs::write(dir.path().join(format!("{other}.pid")), "4194305\nlx:x:1").unwrap();
        assert_eq!(keys(&|_| false), vec![KEY.to_string()]);
        assert_eq!(
            watched(&dir.path().join("missing"), now, |_| false).unwrap(),
            vec![]
        );
    }

    #[test]
    fn the_server_comes_from_the_session_then_the_daemon_then_the_store() {
        let store = || Some("https://store".to_string());
        assert_eq!(
            choose_server(Some("https://s"), Some("https://d"), store),
            Some(("https://s".into(), ServerSource::SessionEnv))
        );
        assert_eq!(
            choose_server(None, Some("https://d"), store),
            Some(("https://d".into(), ServerSource::DaemonEnv))
        );
        assert_eq!(
            choose_server(Some(" "), None, store),
            Some(("https://store".into(), ServerSource::TokenStore))
        );
        assert_eq!(choose_server(None, None, || None), None);
    }

    #[test]
    fn a_rollout_is_the_sessions_only_when_its_header_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let meta = |id: &str| {
            format!(
                "{{\"timestamp\":\"2026-07-28T10:00:00.000Z\",\"type\":\"session_meta\",\"payload\":{{\"id\":\"{id}\",\"cwd\":\"/src\"}}}}\n"
            )
        };
        let ours = dir.path().join("ours.jsonl");
        fs::write(&ours, meta(&dashed(KEY))).unwrap();
        assert_eq!(
            check_rollout(&ours, KEY),
            RolloutCheck::Names {
                cwd: Some("/src".into())
            }
        );
        let other = dir.path().join("other.jsonl");
        fs::write(&other, meta("029fa981-2dca-7a31-9c55-3b1f0e6d2a01")).unwrap();
        assert!(
            matches!(check_rollout(&other, KEY), RolloutCheck::Not(why) if why.contains("029fa9812dca7a319c553b1f0e6d2a01"))
        );
        // A header still being written, or no file at all.
        let partial = dir.path().join("partial.jsonl");
        fs::write(&partial, &meta(KEY)[..40]).unwrap();
        assert_eq!(check_rollout(&partial, KEY), RolloutCheck::NotYet);
        assert!(matches!(
            check_rollout(&dir.path().join("missing.jsonl"), KEY),
            RolloutCheck::Not(_)
        ));
        let not_codex = dir.path().join("notes.txt");
        fs::write(&not_codex, "hello\n").unwrap();
        assert!(
            matches!(check_rollout(&not_codex, KEY), RolloutCheck::Not(why) if why.contains("not a Codex rollout"))
        );
    }

    /// A named pipe where a rollout would be is never opened (which would block until some
    /// writer opened it, hanging the daemon).
    #[test]
    fn a_named_pipe_where_a_rollout_would_be_is_never_opened() {
        let home = tempfile::tempdir().unwrap();
        let day = home.path().join("sessions/2026/07/28");
        fs::create_dir_all(&day).unwrap();
        let fifo = day.join(format!("rollout-2026-07-28T10-00-00-{}.jsonl", dashed(KEY)));
        if !crate::platform::test_support::make_fifo(&fifo) {
            return; // no named pipes at a path here
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (h, f) = (home.path().to_path_buf(), fifo.clone());
        std::thread::spawn(move || {
            let _ = tx.send((find_rollout(&h, KEY), check_rollout(&f, KEY)));
        });
        let (found, check) = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("opened the named pipe and blocked");
        assert_eq!(found, None);
        assert!(
            matches!(&check, RolloutCheck::Not(why) if why.contains("not a regular file")),
            "{check:?}"
        );
    }

    #[test]
    fn the_rollout_is_found_by_its_dashed_id_live_before_archived_newest_first() {
        let home = tempfile::tempdir().unwrap();
        let name = format!("rollout-2026-07-28T10-00-00-{}.jsonl", dashed(KEY));
        let archived = home.path().join("archived_sessions");
        fs::create_dir_all(&archived).unwrap();
        fs::write(archived.join(&name), "{}\n").unwrap();
        assert_eq!(find_rollout(home.path(), KEY), Some(archived.join(&name)));
        let day = home.path().join("sessions/2026/07/28");
        fs::create_dir_all(&day).unwrap();
        fs::write(day.join(&name), "{}\n").unwrap();
        assert_eq!(find_rollout(home.path(), KEY), Some(day.join(&name)));
        let later = home.path().join("sessions/2026/07/29");
        fs::create_dir_all(&later).unwrap();
        let newer = later.join(format!("rollout-2026-07-29T10-00-00-{}.jsonl", dashed(KEY)));
        fs::write(&newer, "{}\n").unwrap();
        let old = SystemTime::now() - std::time::Duration::from_secs(3600);
        fs::File::options()
            .write(true)
            .open(day.join(&name))
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(find_rollout(home.path(), KEY), Some(newer));
        assert_eq!(find_rollout(home.path(), "0".repeat(32).as_str()), None);
    }
}
