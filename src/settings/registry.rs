//! The registry: every setting, once (docs/behaviour.md C and R1).
//!
//! An entry here is all a new setting needs to get its flag (if any), `--help`, the man page's
//! ENVIRONMENT section, the README table (`UPDATE_README=1 cargo test --test it readme::`, then
//! `UPDATE_MAN=1 cargo test --test it man_pages::`) and its resolution rules; read it in
//! [`crate::config::resolve`] with `r.get(&NAME)?`. The order here is the order users see.
//!
//! Each entry names the commands that take it (`taken_by`): they alone accept its flag and
//! read its variable, and the daemon passes what it takes on to its supervisors and into a
//! printed service. A credential is marked `secret()`: it has no flag and is never written
//! where others read.
//!
//! ```text
//! // a flag and a variable:
//! NAME: Window = Setting::flag("KCAP_X_MINUTES", "--x", "DURATION", Window { .. }, "doc")
//!     .taken_by(DECIDING);
//! // a documented variable without a flag (secrets):
//! NAME: OptionalText = Setting::env_only("KCAP_X", OptionalText { .. }, "doc")
//!     .taken_by(SHIPPING)
//!     .secret();
//! // an undocumented override for tests:
//! NAME: OptionalText = Setting::hidden("KCAP_X_URL", OptionalText { .. }, "why")
//!     .taken_by(&[Watch]);
//! ```

use std::time::Duration;

use super::Command::{self, Daemon, Inspect, Replay, Status, Supervise, Watch};
use super::kinds::{
    Check, Choice, LogFormat, Millis, OptionalText, OptionalWindow, Path, Switch, Text, TimeUnit,
    Window, Zero,
};
use super::{Entry, Setting, SettingsArgs};

/// Declares each setting as a `pub static` and lists them all in [`SETTINGS`], so a setting
/// cannot be declared without being documented.
macro_rules! registry {
    ($($(#[$attr:meta])* $name:ident: $kind:ty = $setting:expr;)*) => {
        $($(#[$attr])* pub static $name: Setting<$kind> = $setting;)*

        /// Every setting, in the order `--help`, the man page and the README show them.
        pub static SETTINGS: &[&dyn Entry] = &[$(&$name),*];
    };
}

const fn minutes(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}

/// A log filter in tracing's env-filter syntax.
fn log_filter(filter: &str) -> Result<(), String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(filter)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

registry! {
    SERVER: OptionalText = Setting::flag(
        "KCAP_URL", "--server", "URL",
        OptionalText { absent: "offline", what: "an http or https URL", example: "https://kcap.example" },
        "kcap server base URL; anything but http or https is an error. Unset or empty: run \
         offline, appending lines and lifecycle requests to the local spools for kcap-watch \
         replay. Plain http to a host other than loopback logs a warning that the token travels \
         in clear text.",
    )
        .taken_by(SHIPPING);
    TOKEN: OptionalText = Setting::env_only(
        "KCAP_TOKEN", OptionalText { absent: "none", what: "a bearer token", example: "example-token" },
        "Bearer token for the kcap server. Never a flag, so it stays out of ps; never logged.",
    )
        .taken_by(SHIPPING)
        .secret();
    TOKEN_FILE: Path = Setting::flag(
        "KCAP_TOKEN_FILE", "--token-file", "PATH", Path { absent: "none" },
        "File holding the bearer token: UTF-8, or UTF-16 with a byte order mark; one line.",
    )
        .taken_by(SHIPPING);
    PROFILE: OptionalText = Setting::flag(
        "KCAP_PROFILE", "--profile", "NAME",
        OptionalText { absent: "active profile", what: "a profile name", example: "work" },
        "kcap token-store profile to read when no token is given; unset: config.json's \
         active_profile (else default), the profile the kcap CLI's own watchers use.",
    )
        .taken_by(SHIPPING);
    CLIENT_ID: OptionalText = Setting::env_only(
        "KCAP_CLIENT_ID", OptionalText { absent: "none", what: "a client id", example: "example-client" },
        "Machine credential client id: with KCAP_CLIENT_SECRET, a bearer token is minted \
         (client_credentials) and kept in memory only. Only one of the two set: a warning naming \
         the missing one, and the other token sources are used.",
    )
        .taken_by(SHIPPING)
        .secret();
    CLIENT_SECRET: OptionalText = Setting::env_only(
        "KCAP_CLIENT_SECRET", OptionalText { absent: "none", what: "a client secret", example: "example-secret" },
        "Machine credential secret, the pair of KCAP_CLIENT_ID. Never a flag, never logged.",
    )
        .taken_by(SHIPPING)
        .secret();
    CONFIG_DIR: Path = Setting::flag(
        "KCAP_CONFIG_DIR", "--config-dir", "DIR", Path { absent: "$HOME/.config/kcap" },
        "Root of local state (logs, spools, watcher files), the kcap CLI's own; the same path \
         on every platform.",
    )
        .taken_by(EVERY);
    WATCHER_DIR: Path = Setting::flag(
        "KCAP_WATCHER_DIR", "--watcher-dir", "DIR", Path { absent: "<config>/watchers" },
        "Directory of the pid, lock, started and heartbeat files.",
    )
        .taken_by(&[Watch, Inspect, Supervise, Daemon, Status]);
    CODEX_HOME: Path = Setting::flag(
        "CODEX_HOME", "--codex-home", "DIR", Path { absent: "derived from the rollout path" },
        "Codex's home directory (the one holding sessions/ and archived_sessions/), where \
         supervise and inspect --tree look for a session's sub-agents; Codex's own variable. Unset: the \
         directory above sessions/YYYY/MM/DD/ (or archived_sessions/) holding the session \
         rollout.",
    )
        .taken_by(&[Inspect, Supervise, Daemon]);
    STOP_GRACE: Window = Setting::flag(
        "KCAP_CODEX_SUBAGENT_IDLE_MINUTES", "--stop-grace", "DURATION",
        Window { unit: TimeUnit::Minutes, default: minutes(5), zero: Zero::NoTime },
        "Grace between a child's completed turn and its subagent-stop; 0 posts the stop \
         immediately.",
    )
        .taken_by(DECIDING);
    REAP_AFTER: Window = Setting::flag(
        "KCAP_CODEX_SUBAGENT_REAP_MINUTES", "--reap-after", "DURATION",
        Window { unit: TimeUnit::Minutes, default: minutes(360), zero: Zero::Default },
        "A child watcher exits after this long without activity (never while a tool call is \
         in flight); 0 means the default.",
    )
        .taken_by(DECIDING);
    IDLE_END: Window = Setting::flag(
        "KCAP_CODEX_IDLE_MINUTES", "--idle-end", "DURATION",
        Window { unit: TimeUnit::Minutes, default: minutes(60), zero: Zero::Default },
        "A session watcher posts session-end (idle_timeout) after this long without activity; \
         0 means the default.",
    )
        .taken_by(DECIDING);
    STALL_AFTER: OptionalWindow = Setting::flag(
        "KCAP_CODEX_STALL_MINUTES", "--stall-after", "DURATION",
        OptionalWindow { unit: TimeUnit::Minutes, default: minutes(65) },
        "Silence inside an open turn before a stall_detected warning; 0 disables the warning.",
    )
        .taken_by(DECIDING);
    LIFETIME: OptionalWindow = Setting::flag(
        "KCAP_WATCHER_LIFETIME_HOURS", "--lifetime", "DURATION",
        OptionalWindow { unit: TimeUnit::Hours, default: minutes(24 * 60) },
        "Lifetime ceiling, extended by usage-limit pause credit; 0 disables it.",
    )
        .taken_by(DECIDING);
    MAX_PAUSE_CREDIT: Window = Setting::flag(
        "KCAP_MAX_PAUSE_CREDIT_MINUTES", "--max-pause-credit", "DURATION",
        Window { unit: TimeUnit::Minutes, default: minutes(120), zero: Zero::NoTime },
        "Cap on the usage-limit pause credit added to the lifetime ceiling; 0 gives no credit.",
    )
        .taken_by(DECIDING);
    POLL_INTERVAL: Millis = Setting::flag(
        "KCAP_WATCH_POLL_MS", "--poll-interval", "DURATION",
        Millis {
            min: Duration::from_millis(10),
            max: Duration::from_secs(60),
            default: Duration::from_secs(1),
        },
        "Safety-net check of the file when no change event came; four times as long (at \
         most 10 s) while Linux file notification reports every change (a bare number given \
         to the flag means milliseconds too).",
    )
        .taken_by(FOLLOWING);
    FORCE_POLL: Switch = Setting::flag(
        "KCAP_WATCH_FORCE_POLL", "--force-poll", "", Switch,
        "Poll only, without change notification (network file systems, exhausted inotify \
         watches).",
    )
        .taken_by(FOLLOWING);
    STOP_RETRY: Millis = Setting::hidden(
        "KCAP_WATCH_STOP_RETRY_MS",
        Millis {
            min: Duration::from_millis(10),
            max: Duration::from_secs(3600),
            // docs/behaviour.md L4a.
            default: Duration::from_secs(60),
        },
        "Pause between failed subagent-stop attempts: the spec's 60 s, lowered by tests that \
         exercise a failing server in seconds instead of minutes.",
    )
        .taken_by(FOLLOWING);
    HEARTBEAT: Millis = Setting::hidden(
        "KCAP_WATCH_HEARTBEAT_MS",
        Millis {
            min: Duration::from_millis(10),
            // docs/behaviour.md S5: rewritten at least every 10 s; never slower than that.
            max: Duration::from_secs(10),
            default: crate::files::HEARTBEAT_EVERY,
        },
        "How often a held key's heartbeat is rewritten: 10 s, lowered by tests that watch \
         several beats (the kcap CLI reading a live heartbeat, thousands of keys staying fresh) \
         in seconds instead of half a minute.",
    )
        .taken_by(FOLLOWING);
    RESTART_SETTLE: Millis = Setting::hidden(
        "KCAP_DAEMON_RESTART_SETTLE_MS",
        Millis {
            min: Duration::from_millis(10),
            max: Duration::from_secs(3600),
            // docs/behaviour.md S2: the kcap CLI's teardown ends within its 8 s.
            default: Duration::from_secs(10),
        },
        "How long after a supervisor's crash the daemon looks whether its session is still \
         watched before restarting it: 10 s, lowered by tests that crash supervisors several \
         times in a row.",
    )
        .taken_by(&[Daemon]);
    RESTART_BACKOFF: Millis = Setting::hidden(
        "KCAP_DAEMON_RESTART_BACKOFF_MS",
        Millis {
            min: Duration::from_millis(10),
            max: Duration::from_secs(60),
            default: Duration::from_secs(1),
        },
        "The first restart backoff of a crashed supervisor, doubling to 60 times it: 1 s, \
         lowered by tests that spend the hour's restarts in seconds.",
    )
        .taken_by(&[Daemon]);
    WATCH_EXCLUDE: OptionalText = Setting::env_only(
        "KCAP_WATCH_EXCLUDE",
        OptionalText {
            absent: "none",
            what: "glob patterns separated as PATH is",
            example: "/srv/private/**",
        },
        "kcap-watch daemon leaves a session to the kcap CLI when its cwd (from the rollout's \
         header) or a directory above it matches one of these glob patterns (separated as \
         PATH is; * within a path component, ** across components, ? one character).",
    )
        .taken_by(&[Daemon]);
    LOG: Text = Setting::flag(
        "KCAP_LOG", "--log", "FILTER",
        Text {
            default: "info",
            what: "a tracing env-filter such as kcap_watch=debug",
            check: Some(Check { what: "a log filter", test: log_filter }),
            example: "kcap_watch=debug",
        },
        "Log filter.",
    )
        .taken_by(EVERY);
    LOG_FORMAT: Choice<LogFormat> = Setting::flag(
        "KCAP_LOG_FORMAT", "--log-format", "FORMAT", Choice::new(),
        "Log record format.",
    )
        .taken_by(EVERY);

}

/// The commands that ship: they read the server and its credentials (the daemon passes them
/// on to its supervisors).
const SHIPPING: &[Command] = &[Watch, Supervise, Replay, Daemon];
/// The commands that decide when a child stops or a session ends, or report it (`inspect`).
const DECIDING: &[Command] = &[Watch, Inspect, Supervise, Daemon];
/// The commands that follow rollouts as they grow.
const FOLLOWING: &[Command] = &[Watch, Supervise, Daemon];
/// Every command that takes settings.
const EVERY: &[Command] = &[Watch, Inspect, Supervise, Replay, Daemon, Status];

// The settings flags of each command: those whose entry above names it. Any other is an
// error naming it (exit 2).

command_settings! {
    /// `watch`: everything but the Codex home (it is given its rollout).
    WatchSettings: Watch
}

command_settings! {
    /// `supervise`: every setting of the watchers it runs, and where to find their rollouts.
    SuperviseSettings: Supervise
}

command_settings! {
    /// `inspect`: the decision windows and where `--tree` looks; it ships nothing.
    InspectSettings: Inspect
}

command_settings! {
    /// `replay`: the server, its token and the spools.
    ReplaySettings: Replay
}

command_settings! {
    /// `daemon`: what it uses itself and what it passes on to every supervisor it starts.
    DaemonSettings: Daemon
}

command_settings! {
    /// `status`: where the state it reads lives, and its log.
    StatusSettings: Status
}
