//! The daemon's loop: one `select!` over change notification (the watcher directory, and the
//! rollout directories of sessions whose supervisor rests), the safety-net poll, supervisor
//! exits (reported by one waiting thread per started supervisor), due restarts and the
//! shutdown signals.
//!
//! Idle it does what one idle `watch` does at most: nothing between events but one poll
//! every few seconds (five times the poll interval), and a status file written at most
//! every 2 s while something changed and every 60 s otherwise. The watcher directory is
//! never idle (every held key's heartbeat is rewritten every 10 s, by the kcap CLI's
//! watchers and by every supervisor for each child), so the notifier drops every change
//! there but a session's pid file before the loop is woken ([`wakes_daemon`]). Its own
//! status and log files are elsewhere (`<config>/kcap-watch/status`, `<config>/logs`), not
//! watched.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use super::DaemonConfig;
use super::policy::{Ended, Next, Restarts};
use super::sessions::{self, RolloutCheck, ServerSource};
use crate::codex::layout::{self, CodexLayout};
use crate::error::LockHeld;
use crate::files::{self, ExclusiveLock};
use crate::host::net::SafetyNet;
use crate::host::notifier::Notifier;
use crate::launch::LaunchFacts;
use crate::platform::{detached, proc_info};
use crate::status_file::{self, SkippedSession, StatusFile, TakenSession, Writer};
use crate::supervise::discover::{Discovery, Found};
use crate::time::Ts;

/// How long the daemon waits for its supervisors after asking them to end (they spool within
/// 4 s), so that it exits within 5 s of the signal.
const END_WAIT: Duration = Duration::from_millis(4500);
/// Status file: at most this often while something changes...
const STATUS_MIN: Duration = Duration::from_secs(2);
/// ...and at least this often.
const STATUS_MAX: Duration = Duration::from_secs(60);

/// What became of a session's supervisor.
#[derive(Debug)]
enum Supervisor {
    Running {
        pid: u32,
        /// Which start this is (exits of earlier ones are ignored).
        generation: u64,
        /// Started by an earlier daemon or by hand: not our child, watched by pid.
        adopted: bool,
        sent_signal: bool,
    },
    /// Ended on purpose: a new one starts when a descendant appears or grows.
    Resting(Box<Dormant>),
    RestartAt(Ts),
    /// Crashed with the hour's restarts spent: none until `until`, whatever the session's
    /// children write meanwhile (the spec: a given-up session is never woken by growth).
    GaveUp {
        until: Ts,
    },
}

/// A resting session's descendants, watched for a new one or growth.
#[derive(Debug)]
struct Dormant {
    discovery: Option<Discovery>,
    sizes: HashMap<PathBuf, u64>,
}

#[derive(Debug)]
struct Session {
    watcher_pid: u32,
    rollout: PathBuf,
    server: String,
    server_source: ServerSource,
    codex_home: Option<PathBuf>,
    supervisor: Supervisor,
    restarts: Restarts,
}

/// A session the daemon leaves alone, for now or for as long as its session watcher lives.
#[derive(Debug)]
struct Skipped {
    watcher_pid: u32,
    reason: String,
    /// Judged again at each look at the watcher directory (within one safety-net poll):
    /// Codex creates the rollout, and writes its header, lazily.
    retry: bool,
    /// Its supervisor refused this configuration (exit 2): tried again only when the session
    /// watcher's command line or environment changes.
    refused: Option<Launch>,
}

/// What a supervisor's configuration comes from: the session watcher's launch facts.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Launch {
    kcap_url: Option<String>,
    rollout: Option<PathBuf>,
    codex_home: Option<PathBuf>,
    config_dir: Option<PathBuf>,
}

impl Launch {
    fn read(watcher_pid: u32, key: &str) -> Launch {
        let facts = proc_info::read(watcher_pid)
            .map(|l| LaunchFacts::from_launch(&l, key))
            .unwrap_or_default();
        Launch {
            kcap_url: facts.kcap_url,
            rollout: facts.rollout,
            codex_home: facts.codex_home,
            config_dir: facts.config_dir,
        }
    }
}

struct Exit {
    key: String,
    generation: u64,
    ended: Ended,
    /// The supervisor's own last error line (from its stderr), URLs redacted.
    error: Option<String>,
}

pub(crate) struct Daemon {
    settings: DaemonConfig,
    exe: PathBuf,
    sessions: BTreeMap<String, Session>,
    /// Sessions left alone, with the watcher pid they were judged under, why, and whether
    /// they are looked at again (a rollout not written yet) or not (excluded, no server).
    skipped: BTreeMap<String, Skipped>,
    notifier: Notifier,
    exits_tx: mpsc::UnboundedSender<Exit>,
    exits: mpsc::UnboundedReceiver<Exit>,
    next_generation: u64,
    start_token: String,
    dirty: bool,
    status_written: Option<Instant>,
    /// The daemon's own server (for its status file), resolved once.
    own_server: Option<String>,
    /// The poll's period: stretched while notification reports everything the poll would
    /// find (`crate::host::net`).
    net: SafetyNet,
}

/// Runs the daemon until SIGTERM or SIGINT. Exit 75 when another daemon holds the lock.
pub async fn run(settings: DaemonConfig) -> Result<()> {
    let lock_path = files::daemon_lock_path(&settings.config_dir);
    let _lock = ExclusiveLock::try_take(&lock_path)
        .context("failed to take the daemon lock")?
        .ok_or_else(|| LockHeld {
            key: format!("the daemon of {}", settings.config_dir.display()),
            holder_pid: ExclusiveLock::holder_pid(&lock_path),
        })?;
    crate::logging::attach_file(
        &settings
            .config_dir
            .join("logs")
            .join("kcap-watch-daemon.log"),
    );
    let exe = std::env::current_exe().context("failed to find the daemon's own executable")?;
    let (exits_tx, exits) = mpsc::unbounded_channel();
    let own_server = sessions::choose_server(None, settings.server.as_deref(), || {
        sessions::store_server_url(&settings.config_dir, settings.profile.as_deref())
    })
    .map(|(s, _)| s);
    let notifier = daemon_notifier(&settings.watcher_dir, settings.force_poll);
    if let Some(why) = notifier.polling_because() {
        info!(event = "polling", "{why}");
    }
    let mut daemon = Daemon {
        exe,
        sessions: BTreeMap::new(),
        skipped: BTreeMap::new(),
        notifier,
        exits_tx,
        exits,
        next_generation: 0,
        start_token: crate::platform::start_token::for_current().unwrap_or_default(),
        dirty: true,
        status_written: None,
        own_server,
        net: SafetyNet::new(settings.poll_interval.saturating_mul(5)),
        settings,
    };
    info!(
        event = "daemon_started",
        version = env!("CARGO_PKG_VERSION"),
        watcher_dir = %daemon.settings.watcher_dir.display(),
        "kcap-watch daemon {} watching {}",
        env!("CARGO_PKG_VERSION"),
        daemon.settings.watcher_dir.display()
    );
    let result = daemon.run().await;
    if let Err(e) = status_file::remove(
        &daemon.settings.config_dir,
        status_file::DAEMON_KEY,
        Writer::Daemon,
    ) {
        warn!(
            event = "status_file_failed",
            "failed to remove the status file: {e}"
        );
    }
    result
}

impl Daemon {
    async fn run(&mut self) -> Result<()> {
        let mut signals = crate::platform::signals::ShutdownSignals::install()
            .context("failed to install a signal handler")?
            .into_channel();
        self.refresh(Ts::now());
        self.sync_watches();
        // The kernel's timer where there is one: woken once per poll (the daemon's time is the
        // system's, never a test's paused clock).
        let mut poll = crate::platform::ticker::Ticker::new(self.net.period(), true);
        loop {
            // Its status file says the period.
            self.dirty |= poll.set_period(self.net.period());
            self.write_status_if_due();
            let sleep = tokio::time::sleep(self.next_wake());
            tokio::select! {
                _ = self.notifier.changed() => self.on_changes(),
                _ = poll.tick() => self.on_poll(),
                Some(exit) = self.exits.recv() => self.on_exit(exit),
                _ = sleep => self.on_due(),
                Some(name) = signals.recv() => {
                    info!(event = "daemon_ending", why = name, "ending every supervisor ({name})");
                    self.end_all().await;
                    info!(event = "daemon_ended", "every supervisor has ended");
                    return Ok(());
                }
            }
        }
    }

    /// Until the next restart is due or the status file must be written.
    fn next_wake(&self) -> Duration {
        let now = Ts::now();
        let restart = self
            .sessions
            .values()
            .filter_map(|s| match s.supervisor {
                Supervisor::RestartAt(at) | Supervisor::GaveUp { until: at } => {
                    Some(crate::host::clock::until(now, at))
                }
                _ => None,
            })
            .min();
        let status = match self.status_written {
            None => Duration::ZERO,
            Some(at) if self.dirty => STATUS_MIN.saturating_sub(at.elapsed()),
            Some(at) => STATUS_MAX.saturating_sub(at.elapsed()),
        };
        restart.map_or(status, |r| r.min(status))
    }

    fn on_changes(&mut self) {
        let changes = self.notifier.take();
        self.net.notified(&changes);
        let dir = self.settings.watcher_dir.clone();
        let session_files_changed = changes.rescan
            || changes
                .paths
                .iter()
                .any(|p| p.parent() == Some(dir.as_path()) && is_session_pid_file(p));
        if session_files_changed {
            self.refresh(Ts::now());
        }
        let others: Vec<PathBuf> = changes
            .paths
            .into_iter()
            .filter(|p| p.parent() != Some(dir.as_path()))
            .collect();
        if !others.is_empty() || changes.rescan {
            self.wake_dormant(&others, changes.rescan);
        }
        self.sync_watches();
    }

    fn on_poll(&mut self) {
        let now = Ts::now();
        let before = self.poll_signature();
        self.refresh(now);
        // An adopted supervisor is not our child: its end is seen here, and judged by the same
        // rule as one this daemon started (the spec): a supervisor that ends on purpose
        // removes its status file, so one still naming its pid was killed (or failed).
        let mut ended = Vec::new();
        for (key, s) in &self.sessions {
            if let Supervisor::Running {
                pid,
                adopted: true,
                generation,
                ..
            } = s.supervisor
                && !crate::platform::process::alive(pid)
            {
                ended.push((key.clone(), pid, generation));
            }
        }
        for (key, pid, generation) in ended {
            let status =
                status_file::status_path(&self.settings.config_dir, &key, Writer::Supervise);
            let left_its_status = status_file::read(&status)
                .ok()
                .flatten()
                .is_some_and(|f| f.pid == pid);
            let ended = if left_its_status {
                Ended::Signal { sent: false }
            } else {
                Ended::Code(0)
            };
            self.on_exit(Exit {
                key,
                generation,
                ended,
                error: None,
            });
        }
        self.wake_dormant(&[], true);
        self.sync_watches();
        // What only a poll sees: an adopted supervisor's end (not the daemon's child), and a
        // skipped session's rollout (its directory is not watched until it is taken).
        let reliable = self.notifier.reports_every_change()
            && !self
                .sessions
                .values()
                .any(|s| matches!(s.supervisor, Supervisor::Running { adopted: true, .. }))
            && !self.skipped.values().any(|s| s.retry);
        // Anything the poll changed is something no event had reported.
        let missed = self.poll_signature() != before;
        self.net.polled(reliable, missed);
        // The code its start ran and its quiet loop does not (it ships nothing itself).
        crate::platform::memory::release_idle(std::time::Instant::now());
    }

    /// What a poll can change: the sessions taken and skipped, the supervisors started, and
    /// how many run.
    fn poll_signature(&self) -> (usize, usize, u64, usize) {
        let running = self
            .sessions
            .values()
            .filter(|s| matches!(s.supervisor, Supervisor::Running { .. }))
            .count();
        (
            self.sessions.len(),
            self.skipped.len(),
            self.next_generation,
            running,
        )
    }

    fn on_due(&mut self) {
        let now = Ts::now();
        let due: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, s)| {
                matches!(s.supervisor, Supervisor::RestartAt(at) | Supervisor::GaveUp { until: at } if at <= now)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if sessions::still_watched(&self.settings.watcher_dir, &key, now) {
                if let Some(s) = self.sessions.get_mut(&key) {
                    s.restarts.restarted(now);
                }
                info!(event = "supervisor_restarting", key = %key, "restarting the supervisor of {key}");
                self.start_supervisor(&key);
            } else {
                info!(event = "session_gone", key = %key, "{key} is no longer watched by the kcap CLI; not restarting its supervisor");
                self.sessions.remove(&key);
            }
            self.dirty = true;
        }
    }

    /// Takes every newly watched session, forgets sessions no longer watched whose
    /// supervisor has ended.
    fn refresh(&mut self, now: Ts) {
        // A session whose supervisor runs is kept, watched or not (the supervisor's end is
        // what lets it go), so it is not judged again: those verdicts were most of the idle
        // poll's file reads.
        let sessions = &self.sessions;
        let running = |key: &str| {
            sessions
                .get(key)
                .is_some_and(|s| matches!(s.supervisor, Supervisor::Running { .. }))
        };
        let watched = match sessions::watched(&self.settings.watcher_dir, now, running) {
            Ok(w) => w,
            Err(e) => {
                warn!(
                    event = "watcher_dir_unreadable",
                    "failed to list {}: {e}",
                    self.settings.watcher_dir.display()
                );
                return;
            }
        };
        let live: HashMap<&str, u32> = watched.iter().map(|w| (w.key.as_str(), w.pid)).collect();
        let before = (self.sessions.len(), self.skipped.len());
        // A session whose supervisor refused its configuration is tried again (once per
        // configuration) only when a replaced session watcher runs with another one.
        for (key, s) in &mut self.skipped {
            if let (Some(refused), Some(&pid)) = (&s.refused, live.get(key.as_str()))
                && pid != s.watcher_pid
                && Launch::read(pid, key) == *refused
            {
                s.watcher_pid = pid;
            }
        }
        self.skipped
            .retain(|k, s| live.get(k.as_str()) == Some(&s.watcher_pid));
        self.sessions.retain(|k, s| {
            live.contains_key(k.as_str()) || matches!(s.supervisor, Supervisor::Running { .. })
        });
        for w in &watched {
            if self.skipped.get(&w.key).is_some_and(|s| !s.retry) {
                continue;
            }
            if let Some(s) = self.sessions.get_mut(&w.key) {
                // The kcap CLI may replace its session watcher while the session lives.
                s.watcher_pid = w.pid;
                continue;
            }
            self.take(&w.key, w.pid);
        }
        if before != (self.sessions.len(), self.skipped.len()) {
            self.dirty = true;
        }
    }

    /// Decides about one newly watched session: supervise it, or skip it saying why.
    fn take(&mut self, key: &str, watcher_pid: u32) {
        let facts = proc_info::read(watcher_pid)
            .map(|l| LaunchFacts::from_launch(&l, key))
            .unwrap_or_default();
        let codex_home = facts
            .codex_home
            .clone()
            .or_else(|| self.settings.codex_home.clone());
        // The command line's rollout, else the one under CODEX_HOME, each only when its
        // header names this session (S2.1: a link or a command line naming another session's
        // file must not decide the layout or the cwd that KCAP_WATCH_EXCLUDE judges).
        let mut not_its = Vec::new();
        let mut its = |path: PathBuf| match sessions::check_rollout(&path, key) {
            RolloutCheck::Not(why) => {
                not_its.push(why);
                None
            }
            check => Some((path, check)),
        };
        let found = facts
            .rollout
            .clone()
            .filter(|p| p.is_file())
            .and_then(&mut its)
            .or_else(|| {
                let home = codex_home.clone().or_else(default_codex_home)?;
                layout::find_rollout(&home, key).and_then(&mut its)
            });
        let skip = |this: &mut Daemon, reason: String, retry: bool| {
            let said = this
                .skipped
                .get(key)
                .is_some_and(|s| s.watcher_pid == watcher_pid && s.reason == reason);
            if !said {
                info!(event = "session_skipped", key = %key, retry, "leaving session {key} to the kcap CLI{}: {reason}", if retry { " for now" } else { "" });
                this.dirty = true;
            }
            this.skipped.insert(
                key.to_owned(),
                Skipped {
                    watcher_pid,
                    reason,
                    retry,
                    refused: None,
                },
            );
        };
        let Some((rollout, check)) = found else {
            let reason = if not_its.is_empty() {
                "no rollout yet (the session watcher's command line names none that exists, and none is under CODEX_HOME)".to_owned()
            } else {
                format!("no rollout of it yet: {}", not_its.join("; "))
            };
            return skip(self, reason, true);
        };
        let header_written = check != RolloutCheck::NotYet;
        let cwd = match check {
            RolloutCheck::Names { cwd } => cwd,
            _ => None,
        };
        if cwd.is_none() && !self.settings.exclude.is_empty() {
            // Unknown cwd, and patterns to judge it by: never take a session that may be
            // excluded. A header still to be written is waited for.
            return if header_written {
                skip(
                    self,
                    "its rollout's header names no cwd to judge by KCAP_WATCH_EXCLUDE".into(),
                    false,
                )
            } else {
                skip(
                    self,
                    "its rollout's header is not written yet, and KCAP_WATCH_EXCLUDE needs its cwd"
                        .into(),
                    true,
                )
            };
        }
        if let Some(cwd) = &cwd
            && let Some(pattern) =
                super::exclude::excluded_by(&self.settings.exclude, cwd).map(str::to_owned)
        {
            return skip(
                self,
                format!("its cwd {cwd} matches KCAP_WATCH_EXCLUDE pattern {pattern}"),
                false,
            );
        }
        let Some((server, source)) = sessions::choose_server(
            facts.kcap_url.as_deref(),
            self.settings.server.as_deref(),
            || {
                sessions::store_server_url(
                    &self.settings.config_dir,
                    self.settings.profile.as_deref(),
                )
            },
        ) else {
            return skip(
                self,
                "no server: the session watcher has no KCAP_URL, the daemon none, and the active profile's token store no server_url".into(),
                false,
            );
        };
        if let Some(dir) = &facts.config_dir
            && dir != &self.settings.config_dir
        {
            warn!(event = "config_dir_differs", key = %key, "the session watcher of {key} runs with KCAP_CONFIG_DIR {}; its supervisor uses the daemon's {}", dir.display(), self.settings.config_dir.display());
        }
        if self.skipped.remove(key).is_some() {
            self.dirty = true;
        }
        info!(event = "session_taken", key = %key, rollout = %rollout.display(), server = %crate::url_display::Shown(&server), server_source = source.as_str(), "supervising the sub-agents of session {key}");
        self.sessions.insert(
            key.to_owned(),
            Session {
                watcher_pid,
                rollout,
                server,
                server_source: source,
                codex_home,
                supervisor: Supervisor::RestartAt(Ts::now()),
                restarts: Restarts::new(self.settings.restart_timing),
            },
        );
        self.start_supervisor(key);
        self.dirty = true;
    }

    /// Starts the session's supervisor, or adopts the one holding its lock.
    fn start_supervisor(&mut self, key: &str) {
        let lock = files::supervise_lock_path(&self.settings.config_dir, key);
        let generation = self.next_generation;
        self.next_generation += 1;
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        if ExclusiveLock::is_held(&lock)
            && let Some(pid) = ExclusiveLock::holder_pid(&lock)
        {
            info!(event = "supervisor_adopted", key = %key, pid, "a supervisor (pid {pid}) already runs for {key}; adopting it");
            session.supervisor = Supervisor::Running {
                pid,
                generation,
                adopted: true,
                sent_signal: false,
            };
            return;
        }
        let mut cmd = supervise_command(
            &self.exe,
            &self.settings,
            key,
            &session.rollout,
            &session.server,
            session.codex_home.as_deref(),
        );
        detached::detach(&mut cmd);
        match cmd.spawn() {
            Ok(child) => {
                let pid = child.id();
                info!(event = "supervisor_started", key = %key, pid, rollout = %session.rollout.display(), "started the supervisor of {key} (pid {pid})");
                session.supervisor = Supervisor::Running {
                    pid,
                    generation,
                    adopted: false,
                    sent_signal: false,
                };
                let tx = self.exits_tx.clone();
                let key = key.to_owned();
                let log_path = supervise_log_path(&self.settings.config_dir, &key);
                // One small thread per supervisor: waiting is what reaps it, and it wakes the
                // loop only when the process ends ([`wait_supervisor`]).
                let spawned = std::thread::Builder::new()
                    .name(format!("wait-{}", &key[..8]))
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let (ended, error) = wait_supervisor(child, &log_path, STDERR_GRACE);
                        let _ = tx.send(Exit {
                            key,
                            generation,
                            ended,
                            error,
                        });
                    });
                if let Err(e) = spawned {
                    error!(
                        event = "supervisor_wait_failed",
                        "failed to start waiting for a supervisor: {e}"
                    );
                }
            }
            Err(e) => {
                error!(event = "supervisor_start_failed", key = %key, "failed to start the supervisor of {key}: {e}");
                let now = Ts::now();
                session.supervisor = match session.restarts.on_end(Ended::Code(1), false, now) {
                    Next::RestartAt(at) => Supervisor::RestartAt(at),
                    Next::GiveUp(until) => Supervisor::GaveUp { until },
                    Next::Rest | Next::Adopt | Next::Refuse => {
                        Supervisor::Resting(Box::new(Dormant::empty()))
                    }
                };
            }
        }
        self.dirty = true;
    }

    fn on_exit(&mut self, exit: Exit) {
        let Some(session) = self.sessions.get_mut(&exit.key) else {
            return;
        };
        let Supervisor::Running {
            generation,
            sent_signal,
            pid,
            adopted,
        } = session.supervisor
        else {
            return;
        };
        if generation != exit.generation {
            return;
        }
        let key = exit.key;
        let now = Ts::now();
        let next = session.restarts.on_end(exit.ended, sent_signal, now);
        let how = match (exit.ended, adopted) {
            (Ended::Code(0), true) => "its status file removed (on purpose)".to_string(),
            (Ended::Signal { .. }, true) => "its status file left behind (killed)".to_string(),
            (Ended::Code(c), _) => format!("exit {c}"),
            (Ended::Signal { .. }, false) => "a signal".to_string(),
        };
        info!(event = "supervisor_ended", key = %key, pid, adopted, how = %how, "the supervisor of {key} (pid {pid}) ended with {how}");
        self.dirty = true;
        match next {
            Next::Rest => self.rest(&key),
            Next::Refuse => self.refuse(&key, exit.error),
            Next::Adopt => self.start_supervisor(&key),
            Next::RestartAt(at) => {
                info!(event = "supervisor_restart_due", key = %key, at = %at.rfc3339(), "the supervisor of {key} crashed; restarting it at {} if the session is still watched", at.rfc3339());
                session.supervisor = Supervisor::RestartAt(at);
            }
            Next::GiveUp(until) => {
                error!(event = "supervisor_crashing", key = %key, retry_at = %until.rfc3339(), "the supervisor of {key} crashed 5 times within the hour; not restarting it before {}", until.rfc3339());
                session.supervisor = Supervisor::GaveUp { until };
                self.sync_watches();
            }
        }
    }

    /// The supervisor refused its configuration (exit 2): the session is skipped with its
    /// reason, said once here, and tried again only under another configuration.
    fn refuse(&mut self, key: &str, error: Option<String>) {
        let Some(session) = self.sessions.remove(key) else {
            return;
        };
        let log = supervise_log_path(&self.settings.config_dir, key);
        let reason = format!(
            "its supervisor refused the configuration (exit 2): {} (see {})",
            error.as_deref().unwrap_or("no reason given"),
            log.display()
        );
        error!(event = "supervisor_refused", key = %key, log = %log.display(), "not restarting the supervisor of {key}: {reason}");
        self.skipped.insert(
            key.to_owned(),
            Skipped {
                watcher_pid: session.watcher_pid,
                reason,
                retry: false,
                refused: Some(Launch::read(session.watcher_pid, key)),
            },
        );
        self.dirty = true;
        self.sync_watches();
    }

    /// The session rests: no supervisor until a descendant appears or grows.
    fn rest(&mut self, key: &str) {
        let dormant = self.dormant_for(key);
        if let Some(s) = self.sessions.get_mut(key) {
            s.supervisor = Supervisor::Resting(Box::new(dormant));
        }
        self.dirty = true;
        self.sync_watches();
    }

    /// A discovery over the session's descendants as they are now (so only what comes later
    /// wakes it).
    fn dormant_for(&self, key: &str) -> Dormant {
        let Some(s) = self.sessions.get(key) else {
            return Dormant::empty();
        };
        let Ok(layout) = CodexLayout::for_session(&s.rollout, s.codex_home.as_deref()) else {
            return Dormant::empty();
        };
        let mut discovery = Discovery::new(layout, key);
        let mut dormant = Dormant {
            discovery: None,
            sizes: HashMap::new(),
        };
        for f in discovery.scan(SystemTime::now()) {
            dormant.note(&f);
        }
        dormant.discovery = Some(discovery);
        dormant
    }

    /// Gives each resting session a supervisor again when one of its descendants appeared
    /// or grew (`paths`: what notification named; `full`: scan everything).
    fn wake_dormant(&mut self, paths: &[PathBuf], full: bool) {
        let mut wake = Vec::new();
        for (key, s) in &mut self.sessions {
            // Only a session resting on purpose: a given-up one waits for its time (the spec).
            let Supervisor::Resting(dormant) = &mut s.supervisor else {
                continue;
            };
            if dormant.woken(paths, full) {
                wake.push(key.clone());
            }
        }
        for key in wake {
            if !sessions::still_watched(&self.settings.watcher_dir, &key, Ts::now()) {
                continue;
            }
            info!(event = "session_woken", key = %key, "a descendant of {key} appeared or grew; starting its supervisor again");
            self.start_supervisor(&key);
        }
    }

    /// Watches the watcher directory and every resting session's rollout directories.
    fn sync_watches(&mut self) {
        let mut dirs = vec![self.settings.watcher_dir.clone()];
        for s in self.sessions.values() {
            if let Supervisor::Resting(d) = &s.supervisor
                && let Some(disc) = &d.discovery
            {
                dirs.extend(disc.watch_dirs());
            }
        }
        dirs.sort();
        dirs.dedup();
        self.notifier.sync(&dirs);
    }

    /// SIGTERM to every running supervisor (adopted ones too), then waits for them, at most
    /// [`END_WAIT`].
    async fn end_all(&mut self) {
        let mut waiting: Vec<(String, u32, bool)> = Vec::new();
        for (key, s) in &mut self.sessions {
            if let Supervisor::Running {
                pid,
                adopted,
                sent_signal,
                ..
            } = &mut s.supervisor
            {
                *sent_signal = true;
                detached::terminate(*pid);
                waiting.push((key.clone(), *pid, *adopted));
            }
        }
        let deadline = tokio::time::Instant::now() + END_WAIT;
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        while !waiting.is_empty() {
            tokio::select! {
                Some(exit) = self.exits.recv() => {
                    waiting.retain(|(k, _, adopted)| *adopted || *k != exit.key);
                }
                _ = tick.tick() => {
                    waiting.retain(|(_, pid, adopted)| !*adopted || crate::platform::process::alive(*pid));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    for (key, pid, _) in &waiting {
                        warn!(event = "supervisor_slow", key = %key, pid, "the supervisor of {key} (pid {pid}) has not ended yet; leaving it to finish");
                    }
                    return;
                }
            }
        }
    }

    fn write_status_if_due(&mut self) {
        let due = match self.status_written {
            None => true,
            Some(at) => (self.dirty && at.elapsed() >= STATUS_MIN) || at.elapsed() >= STATUS_MAX,
        };
        if !due {
            return;
        }
        let status = self.status();
        if let Err(e) =
            status_file::write(&self.settings.config_dir, status_file::DAEMON_KEY, &status)
        {
            warn!(
                event = "status_file_failed",
                "failed to write the status file: {e}"
            );
        }
        self.status_written = Some(Instant::now());
        self.dirty = false;
    }

    fn status(&self) -> StatusFile {
        let now = Ts::now();
        StatusFile {
            version: status_file::VERSION,
            writer: Writer::Daemon,
            pid: std::process::id(),
            start_token: self.start_token.clone(),
            updated_at: now.rfc3339(),
            kcap_watch_version: env!("CARGO_PKG_VERSION").into(),
            server: self.own_server.as_deref().map(crate::url_display::redacted),
            poll_ms: Some(u64::try_from(self.net.period().as_millis()).unwrap_or(u64::MAX)),
            session_id: String::new(),
            keys: Vec::new(),
            sessions_taken: self
                .sessions
                .iter()
                .map(|(key, s)| {
                    let (pid, state) = match &s.supervisor {
                        Supervisor::Running { pid, adopted, .. } => (
                            Some(*pid),
                            if *adopted { "adopted" } else { "running" }.to_string(),
                        ),
                        Supervisor::Resting(_) => (None, "resting".into()),
                        Supervisor::RestartAt(at) => {
                            (None, format!("restart due {}", at.rfc3339()))
                        }
                        Supervisor::GaveUp { until } => (
                            None,
                            format!(
                                "given up (crashed 5 times within the hour); tried again at {}",
                                until.rfc3339()
                            ),
                        ),
                    };
                    TakenSession {
                        session_id: key.clone(),
                        rollout: s.rollout.display().to_string(),
                        supervisor_pid: pid,
                        restarts: s.restarts.total,
                        server: Some(crate::url_display::redacted(&s.server)),
                        server_source: Some(s.server_source.as_str().into()),
                        supervisor: Some(state),
                    }
                })
                .collect(),
            sessions_skipped: self
                .skipped
                .iter()
                .map(|(key, s)| SkippedSession {
                    session_id: key.clone(),
                    reason: s.reason.clone(),
                })
                .collect(),
        }
    }
}

impl Dormant {
    fn empty() -> Dormant {
        Dormant {
            discovery: None,
            sizes: HashMap::new(),
        }
    }

    /// Remembers a descendant's rollout and its size now.
    fn note(&mut self, found: &Found) {
        match found {
            Found::Joined { path, .. } => {
                let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                self.sizes.insert(path.clone(), len);
            }
            Found::Moved { from, to, .. } => {
                if let Some(len) = self.sizes.remove(from) {
                    self.sizes.insert(to.clone(), len);
                }
            }
            // Its supervisor says so; the daemon wakes for children, not for second files.
            Found::Continuation { .. } => {}
        }
    }

    /// Whether a descendant appeared, or one known grew.
    fn woken(&mut self, paths: &[PathBuf], full: bool) -> bool {
        let Some(discovery) = self.discovery.as_mut() else {
            return false;
        };
        let mut found = discovery.on_paths(paths, SystemTime::now());
        if full {
            found.extend(discovery.scan(SystemTime::now()));
        }
        let appeared = found.iter().any(|f| matches!(f, Found::Joined { .. }));
        for f in &found {
            self.note(f);
        }
        let grew = self.sizes.iter_mut().any(|(path, len)| {
            let now_len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(*len);
            if now_len > *len {
                *len = now_len;
                true
            } else {
                false
            }
        });
        appeared || grew
    }
}

/// The daemon's notifier: of the watcher directory, only sessions' pid files wake the loop
/// ([`wakes_daemon`]).
fn daemon_notifier(watcher_dir: &Path, force_poll: bool) -> Notifier {
    let dir = watcher_dir.to_path_buf();
    Notifier::start_filtered(force_poll, move |path| wakes_daemon(&dir, path))
}

/// Whether a change to `path` can matter to the daemon. In the watcher directory only a
/// session's pid file does (a session appears, is handed to another watcher, or ends); the
/// rest there changes all the time while idle (each held key's heartbeat every 10 s, child
/// keys' pid, started and spawn-lock files), and the poll catches anything a pid file's
/// change alone does not settle. Elsewhere (a resting session's rollout directories) it is
/// discovery's to judge.
fn wakes_daemon(watcher_dir: &Path, path: &Path) -> bool {
    path.parent() != Some(watcher_dir) || is_session_pid_file(path)
}

/// `<session>.pid`, with a session key (no agent part).
fn is_session_pid_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".pid"))
        .is_some_and(sessions::is_session_key)
}

/// `<config>/logs/kcap-watch-supervise-<key>.log`: what a supervisor the daemon started wrote
/// to its stderr.
pub(crate) fn supervise_log_path(config_dir: &Path, key: &str) -> PathBuf {
    config_dir
        .join("logs")
        .join(format!("kcap-watch-supervise-{key}.log"))
}

/// How long, after a supervisor has ended, its stderr is still read for its last lines.
const STDERR_GRACE: Duration = Duration::from_secs(2);

/// Waits for a supervisor to end and returns how it ended and its last fatal error line, while
/// a second small thread copies its stderr to the capped log file. The end is the process's,
/// never its stderr's: the pipe can outlive the process in one that inherited it (a process
/// spawned meanwhile on Windows, a descendant anywhere), and a daemon that waited for the
/// pipe to close never saw such a supervisor end, so never restarted it. After the end the
/// copy gets `grace` to read what the supervisor wrote last.
fn wait_supervisor(
    mut child: std::process::Child,
    log_path: &Path,
    grace: Duration,
) -> (Ended, Option<String>) {
    let last = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    if let Some(stderr) = child.stderr.take() {
        let last = std::sync::Arc::clone(&last);
        let log_path = log_path.to_owned();
        let copier = std::thread::Builder::new()
            .name("supervisor-stderr".to_owned())
            .stack_size(64 * 1024)
            .spawn(move || {
                copy_stderr(stderr, &log_path, &last);
                let _ = done_tx.send(());
            });
        if copier.is_err() {
            warn!(
                event = "supervisor_stderr_unread",
                "could not start copying a supervisor's stderr"
            );
        }
    }
    let ended = match child.wait() {
        Ok(status) => ended_of(status),
        Err(_) => Ended::Code(1),
    };
    // Its last lines are in the pipe already: read them, but not past a pipe kept open.
    let _ = done_rx.recv_timeout(grace);
    let error = last.lock().map_or(None, |l| l.clone());
    (ended, error)
}

/// Copies a supervisor's stderr to its capped log file until the pipe closes, keeping its
/// last fatal error line (`kcap-watch: ...`, URLs redacted) in `last`.
fn copy_stderr(
    stderr: impl std::io::Read,
    log_path: &Path,
    last: &std::sync::Mutex<Option<String>>,
) {
    use std::io::{BufRead, Read};
    let mut log = crate::logging::CappedFile::open(log_path).ok();
    let mut reader = std::io::BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        // At most 64 KiB at a time: a line without an end never grows without bound.
        match (&mut reader).take(64 * 1024).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Some(log) = &mut log {
            log.write(&line);
        }
        let text = String::from_utf8_lossy(&line);
        if let Some(message) = text.trim_end().strip_prefix("kcap-watch: ") {
            // At most a few KiB of it: it is shown in a status row.
            let cut = (0..=message.len().min(2048))
                .rev()
                .find(|i| message.is_char_boundary(*i))
                .unwrap_or(0);
            let message = &message[..cut];
            if let Ok(mut last) = last.lock() {
                *last = Some(crate::url_display::redacted_in_text(message));
            }
        }
    }
}

/// How a supervisor process ended.
fn ended_of(status: std::process::ExitStatus) -> Ended {
    if let Some(code) = status.code() {
        return Ended::Code(code);
    }
    Ended::Signal { sent: false }
}

/// Codex's default home, `~/.codex`.
fn default_codex_home() -> Option<PathBuf> {
    directories::BaseDirs::new().map(|b| b.home_dir().join(".codex"))
}

/// The command that starts session `key`'s supervisor. It gets every setting the daemon was
/// given: the flags as flags ([`DaemonConfig::supervise_flags`]), the variables by inheriting
/// the daemon's environment, and the settings decided per session (server, Codex home) and the
/// daemon's directories as variables, which win over the inherited ones.
fn supervise_command(
    exe: &Path,
    settings: &DaemonConfig,
    key: &str,
    rollout: &Path,
    server: &str,
    codex_home: Option<&Path>,
) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg("supervise")
        .arg(rollout)
        .args(["--session-id", key])
        .args(&settings.supervise_flags)
        .env("KCAP_URL", server)
        .env("KCAP_CONFIG_DIR", &settings.config_dir)
        .env("KCAP_WATCHER_DIR", &settings.watcher_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // Its reason for refusing a configuration, and anything it says before its own
        // log file is open, goes to `<config>/logs/kcap-watch-supervise-<key>.log`.
        .stderr(Stdio::piped());
    if let Some(home) = codex_home {
        cmd.env("CODEX_HOME", home);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: &str = "019fa9812dca7a319c553b1f0e6d2a01";
    const CHILD: &str = "019fa9816ea27b028d115c2e9f7a4b02";

    /// T5.1: a supervisor gets the settings flags the daemon was given (as flags, parsed by
    /// supervise like the daemon's own) and the daemon's directories and the session's server
    /// as variables; the daemon's own server flag is not passed, the session's server wins.
    #[test]
    fn a_supervisor_is_started_with_the_settings_the_daemon_was_given() {
        use crate::settings::DaemonSettings;
        use clap::Parser;
        #[derive(Parser)]
        struct Argv {
            #[command(flatten)]
            settings: DaemonSettings,
        }
        let argv = Argv::try_parse_from([
            "daemon",
            "--stop-grace",
            "30s",
            "--force-poll",
            "--server",
            "https://daemon.example",
            "--log",
            "kcap_watch=debug",
        ])
        .unwrap();
        let env = |name: &str| (name == "KCAP_CODEX_SUBAGENT_REAP_MINUTES").then(|| "7".into());
        let given = crate::settings::given(DaemonSettings::COMMAND, &argv.settings, &env);
        let config = DaemonConfig {
            config_dir: PathBuf::from("/c"),
            watcher_dir: PathBuf::from("/c/w"),
            server: Some("https://daemon.example".into()),
            profile: None,
            codex_home: None,
            poll_interval: Duration::from_secs(1),
            force_poll: true,
            exclude: Vec::new(),
            supervise_flags: super::super::supervise_flags(&given),
            restart_timing: Default::default(),
        };
        let cmd = supervise_command(
            Path::new("/bin/kcap-watch"),
            &config,
            SESSION,
            Path::new("/r.jsonl"),
            "https://session.example",
            Some(Path::new("/codex")),
        );
        let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy()).collect();
        assert_eq!(
            args,
            [
                "supervise",
                "/r.jsonl",
                "--session-id",
                SESSION,
                "--stop-grace",
                "30s",
                "--force-poll",
                "--log",
                "kcap_watch=debug"
            ]
        );
        let envs: Vec<_> = cmd
            .get_envs()
            .map(|(k, v)| (k.to_string_lossy(), v.map(|v| v.to_string_lossy())))
            .collect();
        for (k, v) in [
            ("KCAP_URL", "https://session.example"),
            ("KCAP_CONFIG_DIR", "/c"),
            ("KCAP_WATCHER_DIR", "/c/w"),
            ("CODEX_HOME", "/codex"),
        ] {
            assert!(envs.contains(&(k.into(), Some(v.into()))), "{k}: {envs:?}");
        }
        // The variable is inherited, not removed.
        assert!(
            !envs
                .iter()
                .any(|(k, _)| k == "KCAP_CODEX_SUBAGENT_REAP_MINUTES")
        );
    }

    /// Idle, the watcher directory never rests: the kcap CLI's watchers and every supervisor
    /// rewrite each key's heartbeat every 10 s (10 sessions of 10 children: ~10 a second),
    /// and a child key's pid, started and spawn-lock files come and go. None of it is the
    /// daemon's business (only a session's pid file is), and none of it may wake its loop:
    /// the notifier drops those paths before waking anyone.
    #[tokio::test]
    async fn only_a_session_pid_file_in_the_watcher_directory_reaches_the_loop() {
        let tmp = tempfile::tempdir().unwrap();
        let watchers = tmp.path().join("watchers");
        std::fs::create_dir_all(&watchers).unwrap();
        let mut notifier = daemon_notifier(&watchers, false);
        assert_eq!(notifier.polling_because(), None);
        assert!(notifier.sync(std::slice::from_ref(&watchers)).is_empty());

        let child_key = format!("{SESSION}-{CHILD}");
        let beat = Ts::now().rfc3339();
        for _ in 0..3 {
            for key in [SESSION, child_key.as_str()] {
                // As supervisors beat (temporary file, then rename) and as the kcap CLI's
                // own watchers do (rewritten in place).
                files::write_atomic(&watchers.join(format!("{key}.heartbeat")), beat.as_bytes())
                    .unwrap();
                std::fs::write(watchers.join(format!("{key}.heartbeat")), &beat).unwrap();
            }
        }
        for suffix in ["pid", "started", "spawnlock", "lock"] {
            std::fs::write(watchers.join(format!("{child_key}.{suffix}")), "1").unwrap();
        }
        std::fs::remove_file(watchers.join(format!("{child_key}.spawnlock"))).unwrap();

        // One inotify queue delivers in order: once the session's pid file is in, everything
        // above was delivered (or dropped).
        let pid = watchers.join(format!("{SESSION}.pid"));
        files::write_atomic(&pid, b"1\ntoken").unwrap();
        let paths = notifier.paths_until(&pid).await;
        assert_eq!(paths.into_iter().collect::<Vec<_>>(), vec![pid]);
    }

    /// Regression: the daemon learned of a supervisor's end only when its stderr closed, so a
    /// supervisor whose stderr pipe outlived it (held by a process that inherited it) was never
    /// seen to end, and never restarted. Here the supervisor is a shell that leaves a
    /// long-sleeping child holding its stderr, writes its fatal line and exits 3 at once.
    #[test]
    fn a_supervisor_is_seen_to_end_when_its_stderr_outlives_it() {
        if std::env::consts::FAMILY != "unix" {
            return; // the stand-in is a POSIX shell
        }
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("supervise.log");
        let child = Command::new("sh")
            .args([
                "-c",
                "sleep 600 & echo \"$!\" > \"$0\"; echo 'kcap-watch: KCAP_URL https://u:pw@h is refused' >&2; exit 3",
            ])
            .arg(dir.path().join("holder.pid"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let log_path = log.clone();
        std::thread::spawn(move || {
            let _ = tx.send(wait_supervisor(
                child,
                &log_path,
                Duration::from_millis(200),
            ));
        });
        // Before the fix this waited for the holder's 600 s.
        let got = rx.recv_timeout(Duration::from_secs(60));
        let holder = std::fs::read_to_string(dir.path().join("holder.pid")).unwrap_or_default();
        if let Ok(pid) = holder.trim().parse::<u32>() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let (ended, error) =
            got.expect("the supervisor's end was seen while its stderr stayed open");
        assert_eq!(ended, Ended::Code(3));
        let error = error.expect("its last fatal line is kept");
        assert!(error.contains("is refused"), "{error}");
        assert!(
            !error.contains(":pw@"),
            "the URL's password is redacted: {error}"
        );
        assert!(
            std::fs::read_to_string(&log)
                .unwrap()
                .contains("is refused")
        );
    }
}
