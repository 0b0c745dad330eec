//! The registry: every setting, once (`spec/configuration.md`, docs/behaviour.md R1).
//!
//! An entry here is all a new setting needs to get its flag (if any), `--help`, the man page's
//! ENVIRONMENT section, the README table (`UPDATE_README=1 cargo test --test it readme::`, then
//! `UPDATE_MAN=1 cargo test --test it man_pages::`) and its resolution rules; read it in
//! [`crate::config::resolve`] with `r.get(&NAME)?`. The order here is the order users see.
//!
//! ```text
//! // a flag and a variable:
//! NAME: Window = Setting::flag("KCAP_X_MINUTES", "--x", "DURATION", Window { .. }, "doc");
//! // a documented variable without a flag (secrets):
//! NAME: OptionalText = Setting::env_only("KCAP_X", OptionalText { absent: "none", what: "an id" }, "doc");
//! // an undocumented override for tests:
//! NAME: OptionalText = Setting::hidden("KCAP_X_URL", OptionalText { absent: "none", what: "a URL" }, "why");
//! ```

use std::time::Duration;

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
        OptionalText { absent: "offline", what: "an http or https URL" },
        "kcap server base URL; anything but http or https is an error. Unset or empty: run \
         offline, appending lines and lifecycle requests to the local spools for kcap-watch \
         replay. Plain http to a host other than loopback logs a warning that the token travels \
         in clear text.",
    );
    TOKEN: OptionalText = Setting::env_only(
        "KCAP_TOKEN", OptionalText { absent: "none", what: "a bearer token" },
        "Bearer token for the kcap server. Never a flag, so it stays out of ps; never logged.",
    );
    TOKEN_FILE: Path = Setting::flag(
        "KCAP_TOKEN_FILE", "--token-file", "PATH", Path { absent: "none" },
        "File holding the bearer token: UTF-8, or UTF-16 with a byte order mark; one line.",
    );
    PROFILE: OptionalText = Setting::flag(
        "KCAP_PROFILE", "--profile", "NAME",
        OptionalText { absent: "active profile", what: "a profile name" },
        "kcap token-store profile to read when no token is given; unset: config.json's \
         active_profile (else default), the profile the kcap CLI's own watchers use.",
    );
    CLIENT_ID: OptionalText = Setting::env_only(
        "KCAP_CLIENT_ID", OptionalText { absent: "none", what: "a client id" },
        "Machine credential client id: with KCAP_CLIENT_SECRET, a bearer token is minted \
         (client_credentials) and kept in memory only. Only one of the two set: a warning naming \
         the missing one, and the other token sources are used.",
    );
    CLIENT_SECRET: OptionalText = Setting::env_only(
        "KCAP_CLIENT_SECRET", OptionalText { absent: "none", what: "a client secret" },
        "Machine credential secret, the pair of KCAP_CLIENT_ID. Never a flag, never logged.",
    );
    CONFIG_DIR: Path = Setting::flag(
        "KCAP_CONFIG_DIR", "--config-dir", "DIR", Path { absent: "$HOME/.config/kcap" },
        "Root of local state (logs, spools, watcher files), the kcap CLI's own; the same path \
         on every platform.",
    );
    WATCHER_DIR: Path = Setting::flag(
        "KCAP_WATCHER_DIR", "--watcher-dir", "DIR", Path { absent: "<config>/watchers" },
        "Directory of the pid, lock, started and heartbeat files.",
    );
    CODEX_HOME: Path = Setting::flag(
        "CODEX_HOME", "--codex-home", "DIR", Path { absent: "derived from the rollout path" },
        "Codex's home directory (the one holding sessions/ and archived_sessions/), where \
         supervise and inspect --tree look for a session's sub-agents; Codex's own variable. Unset: the \
         directory above sessions/YYYY/MM/DD/ (or archived_sessions/) holding the session \
         rollout.",
    );
    STOP_GRACE: Window = Setting::flag(
        "KCAP_CODEX_SUBAGENT_IDLE_MINUTES", "--stop-grace", "DURATION",
        Window { unit: TimeUnit::Minutes, default: minutes(5), zero: Zero::NoTime },
        "Grace between a child's completed turn and its subagent-stop; 0 posts the stop \
         immediately.",
    );
    REAP_AFTER: Window = Setting::flag(
        "KCAP_CODEX_SUBAGENT_REAP_MINUTES", "--reap-after", "DURATION",
        Window { unit: TimeUnit::Minutes, default: minutes(360), zero: Zero::Default },
        "A child watcher exits after this long without activity (never while a tool call is \
         in flight); 0 means the default.",
    );
    IDLE_END: Window = Setting::flag(
        "KCAP_CODEX_IDLE_MINUTES", "--idle-end", "DURATION",
        Window { unit: TimeUnit::Minutes, default: minutes(60), zero: Zero::Default },
        "A session watcher posts session-end (idle_timeout) after this long without activity; \
         0 means the default.",
    );
    STALL_AFTER: OptionalWindow = Setting::flag(
        "KCAP_CODEX_STALL_MINUTES", "--stall-after", "DURATION",
        OptionalWindow { unit: TimeUnit::Minutes, default: minutes(65) },
        "Silence inside an open turn before a stall_detected warning; 0 disables the warning.",
    );
    LIFETIME: OptionalWindow = Setting::flag(
        "KCAP_WATCHER_LIFETIME_HOURS", "--lifetime", "DURATION",
        OptionalWindow { unit: TimeUnit::Hours, default: minutes(24 * 60) },
        "Lifetime ceiling, extended by usage-limit pause credit; 0 disables it.",
    );
    MAX_PAUSE_CREDIT: Window = Setting::flag(
        "KCAP_MAX_PAUSE_CREDIT_MINUTES", "--max-pause-credit", "DURATION",
        Window { unit: TimeUnit::Minutes, default: minutes(120), zero: Zero::NoTime },
        "Cap on the usage-limit pause credit added to the lifetime ceiling; 0 gives no credit.",
    );
    POLL_INTERVAL: Millis = Setting::flag(
        "KCAP_WATCH_POLL_MS", "--poll-interval", "DURATION",
        Millis {
            min: Duration::from_millis(10),
            max: Duration::from_secs(60),
            default: Duration::from_secs(1),
        },
        "Safety-net check of the file when no change event came (a bare number given to the \
         flag means milliseconds too).",
    );
    FORCE_POLL: Switch = Setting::flag(
        "KCAP_WATCH_FORCE_POLL", "--force-poll", "", Switch,
        "Poll only, without change notification (network file systems, exhausted inotify \
         watches).",
    );
    STOP_RETRY: Millis = Setting::hidden(
        "KCAP_WATCH_STOP_RETRY_MS",
        Millis {
            min: Duration::from_millis(10),
            max: Duration::from_secs(3600),
            // `spec/lifecycle.md` section 4a.
            default: Duration::from_secs(60),
        },
        "Pause between failed subagent-stop attempts: the spec's 60 s, lowered by tests that \
         exercise a failing server in seconds instead of minutes.",
    );
    WATCH_EXCLUDE: OptionalText = Setting::env_only(
        "KCAP_WATCH_EXCLUDE",
        OptionalText { absent: "none", what: "glob patterns separated as PATH is" },
        "kcap-watch daemon leaves a session to the kcap CLI when its cwd (from the rollout's \
         header) or a directory above it matches one of these glob patterns (separated as \
         PATH is; * within a path component, ** across components, ? one character).",
    );
    LOG: Text = Setting::flag(
        "KCAP_LOG", "--log", "FILTER",
        Text {
            default: "info",
            what: "a tracing env-filter such as kcap_watch=debug",
            check: Some(Check { what: "a log filter", test: log_filter }),
        },
        "Log filter.",
    );
    LOG_FORMAT: Choice<LogFormat> = Setting::flag(
        "KCAP_LOG_FORMAT", "--log-format", "FORMAT", Choice::new(),
        "Log record format.",
    );
}

// Which settings each command takes: a new setting is a row above and its name in the lists
// of the commands that use it. Any other is an error naming it (exit 2).

command_settings! {
    /// `watch`: everything but the Codex home (it is given its rollout).
    WatchSettings: [
        SERVER, TOKEN_FILE, PROFILE, CONFIG_DIR, WATCHER_DIR, STOP_GRACE, REAP_AFTER, IDLE_END,
        STALL_AFTER, LIFETIME, MAX_PAUSE_CREDIT, POLL_INTERVAL, FORCE_POLL, LOG, LOG_FORMAT,
    ]
}

command_settings! {
    /// `supervise`: every setting.
    SuperviseSettings: [
        SERVER, TOKEN_FILE, PROFILE, CONFIG_DIR, WATCHER_DIR, CODEX_HOME, STOP_GRACE, REAP_AFTER,
        IDLE_END, STALL_AFTER, LIFETIME, MAX_PAUSE_CREDIT, POLL_INTERVAL, FORCE_POLL, LOG,
        LOG_FORMAT,
    ]
}

command_settings! {
    /// `inspect`: the decision windows and where `--tree` looks; it ships nothing.
    InspectSettings: [
        CONFIG_DIR, WATCHER_DIR, CODEX_HOME, STOP_GRACE, REAP_AFTER, IDLE_END, STALL_AFTER,
        LIFETIME, MAX_PAUSE_CREDIT, LOG, LOG_FORMAT,
    ]
}

command_settings! {
    /// `replay`: the server, its token and the spools.
    ReplaySettings: [SERVER, TOKEN_FILE, PROFILE, CONFIG_DIR, LOG, LOG_FORMAT]
}
