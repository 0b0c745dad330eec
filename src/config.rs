//! Resolved, typed settings: the one place where flag, `KCAP_*` variable and default meet.
//!
//! The kcap CLI configures the watchers it spawns through the environment alone, and reads its
//! own `KCAP_*_MINUTES` variables leniently. So a bad variable here must never abort a spawned
//! watcher: it falls back to its default with a warning naming the variable and the value.
//! Flags are typed by the clap definition (`crate::cli`) and rejected there with exit 2.
//! The only variable that can stop a watcher is `KCAP_URL`: a URL that is not http(s) would
//! otherwise run the watcher offline by mistake and silently ship nothing.
//!
//! [`ENV_VARS`] is the registry of every variable: `--help`, the man page's ENVIRONMENT
//! section and the README's configuration table are all written from it.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;

use crate::cli::SettingsArgs;
use crate::decide::Windows;
use crate::rollout::header::Role;
use crate::ship::auth::MachineCredential;
use crate::time::{MAX_WINDOW, clamp_window};

/// One `KCAP_*` variable: its flag (if any), its default as shown to users, and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    pub name: &'static str,
    /// The flag with the same meaning (`--server`); `None` for `KCAP_TOKEN`.
    pub flag: Option<&'static str>,
    /// The default, as shown in `--help` and the man page (durations in flag syntax).
    pub default: &'static str,
    /// What the variable does, including how its value is read.
    pub doc: &'static str,
}

/// Every configuration variable (`spec/configuration.md`).
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "KCAP_URL",
        flag: Some("--server"),
        default: "offline",
        doc: "kcap server base URL, http or https (anything else is an error). Unset or empty: \
              run offline, appending lines and lifecycle requests to the local spools for \
              kcap-watch replay. Plain http to a host other than loopback logs a warning that \
              the token travels in clear text.",
    },
    EnvVar {
        name: "KCAP_TOKEN",
        flag: None,
        default: "none",
        doc: "Bearer token for the kcap server. Never a flag, so it stays out of ps; never \
              logged.",
    },
    EnvVar {
        name: "KCAP_TOKEN_FILE",
        flag: Some("--token-file"),
        default: "none",
        doc: "File holding the bearer token.",
    },
    EnvVar {
        name: "KCAP_PROFILE",
        flag: Some("--profile"),
        default: "active profile",
        doc: "kcap token-store profile to read when no token is given; unset: config.json's \
              active_profile (else default), the profile the kcap CLI's own watchers use.",
    },
    // ---- Authentication settings of revision-2 R1 (machine credential) ----
    EnvVar {
        name: "KCAP_CLIENT_ID",
        flag: None,
        default: "none",
        doc: "Machine credential client id: with KCAP_CLIENT_SECRET, a bearer token is minted \
              (client_credentials) and kept in memory only. Setting only one of the two is an \
              error.",
    },
    EnvVar {
        name: "KCAP_CLIENT_SECRET",
        flag: None,
        default: "none",
        doc: "Machine credential secret, the pair of KCAP_CLIENT_ID. Never a flag, never logged.",
    },
    // ---- end of the authentication settings ----
    EnvVar {
        name: "KCAP_CONFIG_DIR",
        flag: Some("--config-dir"),
        default: "$HOME/.config/kcap",
        doc: "Root of local state (logs, spools, watcher files), the kcap CLI's own; the same \
              path on every platform.",
    },
    EnvVar {
        name: "KCAP_WATCHER_DIR",
        flag: Some("--watcher-dir"),
        default: "<config>/watchers",
        doc: "Directory of the pid, lock, started and heartbeat files.",
    },
    EnvVar {
        name: "KCAP_CODEX_SUBAGENT_IDLE_MINUTES",
        flag: Some("--stop-grace"),
        default: "5m",
        doc: "Grace between a child's completed turn and its subagent-stop, in whole minutes; \
              0 posts the stop immediately.",
    },
    EnvVar {
        name: "KCAP_CODEX_SUBAGENT_REAP_MINUTES",
        flag: Some("--reap-after"),
        default: "6h",
        doc: "A child watcher exits after this many whole minutes without activity (never while \
              a tool call is in flight); 0 means the default.",
    },
    EnvVar {
        name: "KCAP_CODEX_IDLE_MINUTES",
        flag: Some("--idle-end"),
        default: "1h",
        doc: "A session watcher posts session-end (idle_timeout) after this many whole minutes \
              without activity; 0 means the default.",
    },
    EnvVar {
        name: "KCAP_CODEX_STALL_MINUTES",
        flag: Some("--stall-after"),
        default: "65m",
        doc: "Whole minutes of silence inside an open turn before a stall_detected warning; 0 \
              disables the warning.",
    },
    EnvVar {
        name: "KCAP_WATCHER_LIFETIME_HOURS",
        flag: Some("--lifetime"),
        default: "24h",
        doc: "Lifetime ceiling in whole hours, extended by usage-limit pause credit; 0 disables \
              it.",
    },
    EnvVar {
        name: "KCAP_MAX_PAUSE_CREDIT_MINUTES",
        flag: Some("--max-pause-credit"),
        default: "2h",
        doc: "Cap, in whole minutes, on the usage-limit pause credit added to the lifetime \
              ceiling; 0 gives no credit.",
    },
    EnvVar {
        name: "KCAP_WATCH_POLL_MS",
        flag: Some("--poll-interval"),
        default: "1000ms",
        doc: "Safety-net check of the file when no change event came, in whole milliseconds \
              from 10 to 60000.",
    },
    EnvVar {
        name: "KCAP_WATCH_FORCE_POLL",
        flag: Some("--force-poll"),
        default: "off",
        doc: "Poll only, without change notification (network file systems, exhausted inotify \
              watches): 1, true or yes turn it on, anything else leaves it off.",
    },
    EnvVar {
        name: "KCAP_WATCH_STOP_RETRY_MS",
        flag: None,
        default: "60000",
        doc: "Milliseconds between failed subagent-stop attempts (whole number, 10 to 3600000; \
              outside: the default, with a warning). The spec's 60 s; lowered only by tests that \
              exercise a failing server in seconds instead of minutes.",
    },
    EnvVar {
        name: "KCAP_LOG",
        flag: Some("--log"),
        default: "info",
        doc: "Log filter in tracing env-filter syntax (e.g. kcap_watch=debug).",
    },
    EnvVar {
        name: "KCAP_LOG_FORMAT",
        flag: Some("--log-format"),
        default: "text",
        doc: "Log record format: text or json.",
    },
];

/// The registry as a Markdown table, for the README.
pub fn env_table_markdown() -> String {
    let mut s = String::from("| variable | flag | default | meaning |\n|---|---|---|---|\n");
    for v in ENV_VARS {
        let flag = v.flag.map_or("—".to_string(), |f| format!("`{f}`"));
        s.push_str(&format!(
            "| `{}` | {} | `{}` | {} |\n",
            v.name, flag, v.default, v.doc
        ));
    }
    s
}

pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(5 * 60);
pub const DEFAULT_REAP_AFTER: Duration = Duration::from_secs(360 * 60);
pub const DEFAULT_IDLE_END: Duration = Duration::from_secs(60 * 60);
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(65 * 60);
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(24 * 3600);
pub const DEFAULT_MAX_PAUSE_CREDIT: Duration = Duration::from_secs(120 * 60);
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(1000);
pub const DEFAULT_LOG: &str = "info";
/// After a failed subagent-stop, the next attempt is due this much later (`spec/lifecycle.md`
/// section 4a).
pub const DEFAULT_STOP_RETRY: Duration = Duration::from_secs(60);
/// Range of the poll interval, for the flag and the variable alike.
pub const POLL_MIN: Duration = Duration::from_millis(10);
pub const POLL_MAX: Duration = Duration::from_millis(60_000);

/// Log record format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// A bearer token. It prints as `[REDACTED]` so no log line or `{:?}` can leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    /// The token itself, for the `Authorization` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// Every setting, resolved and typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Server base URL without a trailing slash; `None` = offline.
    pub server: Option<String>,
    pub token: Option<Secret>,
    pub token_file: Option<PathBuf>,
    /// `None`: the kcap CLI's active profile (`config.json`), resolved when the store is read.
    pub profile: Option<String>,
    /// `KCAP_CLIENT_ID` + `KCAP_CLIENT_SECRET` (revision-2 R1).
    pub machine: Option<MachineCredential>,
    pub config_dir: PathBuf,
    pub watcher_dir: PathBuf,
    pub stop_grace: Duration,
    pub reap_after: Duration,
    pub idle_end: Duration,
    /// `None`: stall warnings disabled.
    pub stall_after: Option<Duration>,
    /// `None`: no lifetime ceiling.
    pub lifetime: Option<Duration>,
    /// Zero: pauses earn no credit.
    pub max_pause_credit: Duration,
    pub poll_interval: Duration,
    pub force_poll: bool,
    /// Pause between failed subagent-stop attempts.
    pub stop_retry: Duration,
    pub log: String,
    pub log_format: LogFormat,
}

impl Settings {
    /// Every default, offline, rooted at `config_dir` (watchers in `<config_dir>/watchers`).
    pub fn with_defaults(config_dir: PathBuf) -> Settings {
        Settings {
            server: None,
            token: None,
            token_file: None,
            profile: None,
            machine: None,
            watcher_dir: config_dir.join("watchers"),
            config_dir,
            stop_grace: DEFAULT_STOP_GRACE,
            reap_after: DEFAULT_REAP_AFTER,
            idle_end: DEFAULT_IDLE_END,
            stall_after: Some(DEFAULT_STALL_AFTER),
            lifetime: Some(DEFAULT_LIFETIME),
            max_pause_credit: DEFAULT_MAX_PAUSE_CREDIT,
            poll_interval: DEFAULT_POLL_INTERVAL,
            force_poll: false,
            stop_retry: DEFAULT_STOP_RETRY,
            log: DEFAULT_LOG.to_string(),
            log_format: LogFormat::Text,
        }
    }

    /// The decision windows for a watcher of `role`: a child's idle window is its reap
    /// window, a session's is its idle-end window.
    pub fn windows_for(&self, role: Role) -> Windows {
        Windows {
            stop_grace: self.stop_grace,
            idle: match role {
                Role::Child => self.reap_after,
                Role::Session => self.idle_end,
            },
            stall: self.stall_after,
        }
    }
}

/// Settings plus the warnings met while resolving them; the caller logs the warnings (to
/// stderr) once logging is up.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub settings: Settings,
    pub warnings: Vec<String>,
}

/// A configuration the watcher cannot run with (exit code 2). The message names the flag or
/// variable, which is also in `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The flag (`--server`) or variable (`KCAP_URL`) at fault.
    pub name: &'static str,
    message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Reads a variable from the process environment. A value that is not valid Unicode is read
/// lossily (a number then fails to parse and warns; nothing here needs raw bytes).
pub fn process_env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// Resolves every setting: flag, else variable (read through `env`), else default.
pub fn resolve(
    args: &SettingsArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, ConfigError> {
    let mut r = Resolver {
        env,
        warnings: Vec::new(),
    };
    let server = r.server(args.server.as_deref())?;
    let token = r.non_empty_trimmed("KCAP_TOKEN").map(Secret);
    let token_file = args
        .token_file
        .clone()
        .or_else(|| r.non_empty("KCAP_TOKEN_FILE").map(PathBuf::from));
    let profile = args
        .profile
        .clone()
        .or_else(|| r.non_empty_trimmed("KCAP_PROFILE"));
    let machine = r.machine_credential()?;
    let config_dir = match args.config_dir.clone() {
        Some(d) => d,
        None => match r.non_empty("KCAP_CONFIG_DIR") {
            Some(d) => PathBuf::from(d),
            None => r.home()?.join(".config").join("kcap"),
        },
    };
    let watcher_dir = args
        .watcher_dir
        .clone()
        .or_else(|| r.non_empty("KCAP_WATCHER_DIR").map(PathBuf::from))
        .unwrap_or_else(|| config_dir.join("watchers"));

    let stop_grace = r
        .window(&STOP_GRACE, args.stop_grace)
        .unwrap_or(Duration::ZERO);
    let reap_after = r
        .window(&REAP_AFTER, args.reap_after)
        .unwrap_or(DEFAULT_REAP_AFTER);
    let idle_end = r
        .window(&IDLE_END, args.idle_end)
        .unwrap_or(DEFAULT_IDLE_END);
    let stall_after = r.window(&STALL_AFTER, args.stall_after);
    let lifetime = r.window(&LIFETIME, args.lifetime);
    let max_pause_credit = r
        .window(&MAX_PAUSE_CREDIT, args.max_pause_credit)
        .unwrap_or(Duration::ZERO);

    let poll_interval = match args.poll_interval {
        Some(d) => d,
        None => r.poll_interval(),
    };
    let force_poll = args.force_poll
        || r.non_empty_trimmed("KCAP_WATCH_FORCE_POLL")
            .is_some_and(|v| {
                ["1", "true", "yes"]
                    .iter()
                    .any(|on| v.eq_ignore_ascii_case(on))
            });
    let stop_retry = r.stop_retry();
    let log = r.log(args.log.as_deref())?;
    let log_format = match args.log_format {
        Some(f) => f,
        None => r.log_format(),
    };

    Ok(Resolved {
        settings: Settings {
            server,
            token,
            token_file,
            profile,
            machine,
            config_dir,
            watcher_dir,
            stop_grace,
            reap_after,
            idle_end,
            stall_after,
            lifetime,
            max_pause_credit,
            poll_interval,
            force_poll,
            stop_retry,
            log,
            log_format,
        },
        warnings: r.warnings,
    })
}

/// What `0` means for a window (the kcap CLI's meanings for its own variables, kept).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ZeroMeans {
    /// Zero is zero: the stop is posted immediately, pauses earn no credit.
    NoTime,
    /// The idle windows cannot be disabled: zero falls back to the default.
    Default,
    /// The stall warning and the lifetime ceiling are off.
    Off,
}

/// How a window's variable is read and what its zero means.
struct WindowVar {
    var: &'static str,
    flag: &'static str,
    /// Seconds per unit of the variable's whole number.
    unit_secs: u64,
    unit: &'static str,
    default: Duration,
    zero: ZeroMeans,
}

const MINUTE: u64 = 60;
const HOUR: u64 = 3600;

const STOP_GRACE: WindowVar = WindowVar {
    var: "KCAP_CODEX_SUBAGENT_IDLE_MINUTES",
    flag: "--stop-grace",
    unit_secs: MINUTE,
    unit: "minutes",
    default: DEFAULT_STOP_GRACE,
    zero: ZeroMeans::NoTime,
};
const REAP_AFTER: WindowVar = WindowVar {
    var: "KCAP_CODEX_SUBAGENT_REAP_MINUTES",
    flag: "--reap-after",
    unit_secs: MINUTE,
    unit: "minutes",
    default: DEFAULT_REAP_AFTER,
    zero: ZeroMeans::Default,
};
const IDLE_END: WindowVar = WindowVar {
    var: "KCAP_CODEX_IDLE_MINUTES",
    flag: "--idle-end",
    unit_secs: MINUTE,
    unit: "minutes",
    default: DEFAULT_IDLE_END,
    zero: ZeroMeans::Default,
};
const STALL_AFTER: WindowVar = WindowVar {
    var: "KCAP_CODEX_STALL_MINUTES",
    flag: "--stall-after",
    unit_secs: MINUTE,
    unit: "minutes",
    default: DEFAULT_STALL_AFTER,
    zero: ZeroMeans::Off,
};
const LIFETIME: WindowVar = WindowVar {
    var: "KCAP_WATCHER_LIFETIME_HOURS",
    flag: "--lifetime",
    unit_secs: HOUR,
    unit: "hours",
    default: DEFAULT_LIFETIME,
    zero: ZeroMeans::Off,
};
const MAX_PAUSE_CREDIT: WindowVar = WindowVar {
    var: "KCAP_MAX_PAUSE_CREDIT_MINUTES",
    flag: "--max-pause-credit",
    unit_secs: MINUTE,
    unit: "minutes",
    default: DEFAULT_MAX_PAUSE_CREDIT,
    zero: ZeroMeans::NoTime,
};

/// Why a variable's whole number could not be read.
enum BadNumber {
    Empty,
    Negative,
    NotWhole,
}

impl BadNumber {
    fn describe(&self, unit: &str) -> String {
        match self {
            BadNumber::Empty => "it is empty".to_string(),
            BadNumber::Negative => "it is negative".to_string(),
            BadNumber::NotWhole => format!("it is not a whole number of {unit}"),
        }
    }
}

/// Reads a whole number the way the kcap CLI's variables are meant: digits, surrounding
/// whitespace ignored. Digits beyond `u64` read as `u64::MAX`, so they clamp, never wrap.
fn parse_whole(raw: &str) -> Result<u64, BadNumber> {
    let t = raw.trim();
    let digits = t.strip_prefix('+').unwrap_or(t);
    if t.is_empty() {
        return Err(BadNumber::Empty);
    }
    if let Some(rest) = t.strip_prefix('-')
        && !rest.is_empty()
        && rest.bytes().all(|b| b.is_ascii_digit())
    {
        return if rest.bytes().all(|b| b == b'0') {
            Ok(0)
        } else {
            Err(BadNumber::Negative)
        };
    }
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BadNumber::NotWhole);
    }
    Ok(digits.parse::<u64>().unwrap_or(u64::MAX))
}

/// The largest window, as warnings show it.
fn max_window_text() -> String {
    format!("{} days", MAX_WINDOW.as_secs() / 86_400)
}

struct Resolver<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    warnings: Vec<String>,
}

impl Resolver<'_> {
    /// The variable's value, unless unset or empty (an empty variable counts as unset).
    fn non_empty(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|v| !v.is_empty())
    }

    fn non_empty_trimmed(&self, name: &str) -> Option<String> {
        (self.env)(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// A window from its flag or variable. `None` means disabled (only for [`ZeroMeans::Off`]).
    fn window(&mut self, w: &WindowVar, flag: Option<Duration>) -> Option<Duration> {
        let (d, origin, raw) = match flag {
            Some(d) => (d, w.flag, None),
            None => {
                let Some(raw) = (self.env)(w.var) else {
                    return Some(w.default);
                };
                match parse_whole(&raw) {
                    Ok(n) => (
                        // Overflowing the multiplication means "longer than any timer".
                        n.checked_mul(w.unit_secs)
                            .map_or(Duration::MAX, Duration::from_secs),
                        w.var,
                        Some(raw),
                    ),
                    Err(bad) => {
                        self.warnings.push(format!(
                            "ignoring {}={raw:?}: {}; using the default {} {}",
                            w.var,
                            bad.describe(w.unit),
                            w.default.as_secs() / w.unit_secs,
                            w.unit,
                        ));
                        return Some(w.default);
                    }
                }
            }
        };
        if d.is_zero() {
            return match w.zero {
                ZeroMeans::NoTime => Some(Duration::ZERO),
                ZeroMeans::Default => Some(w.default),
                ZeroMeans::Off => None,
            };
        }
        if d > MAX_WINDOW {
            let shown = match raw {
                Some(raw) => format!("{origin}={raw:?}"),
                None => origin.to_string(),
            };
            self.warnings.push(format!(
                "{shown} is longer than the largest supported window; using {}",
                max_window_text()
            ));
        }
        Some(clamp_window(d))
    }

    fn poll_interval(&mut self) -> Duration {
        let Some(raw) = (self.env)("KCAP_WATCH_POLL_MS") else {
            return DEFAULT_POLL_INTERVAL;
        };
        let problem = match parse_whole(&raw) {
            Ok(ms) => {
                let d = Duration::from_millis(ms);
                if (POLL_MIN..=POLL_MAX).contains(&d) {
                    return d;
                }
                "it is outside 10 to 60000 milliseconds".to_string()
            }
            Err(bad) => bad.describe("milliseconds"),
        };
        self.warnings.push(format!(
            "ignoring KCAP_WATCH_POLL_MS={raw:?}: {problem}; using the default 1000 milliseconds"
        ));
        DEFAULT_POLL_INTERVAL
    }

    fn stop_retry(&mut self) -> Duration {
        let Some(raw) = (self.env)("KCAP_WATCH_STOP_RETRY_MS") else {
            return DEFAULT_STOP_RETRY;
        };
        if let Ok(ms) = parse_whole(&raw)
            && (10..=3_600_000).contains(&ms)
        {
            return Duration::from_millis(ms);
        }
        self.warnings.push(format!(
            "ignoring KCAP_WATCH_STOP_RETRY_MS={raw:?}: not a whole number of milliseconds from 10 to 3600000; using the default 60000"
        ));
        DEFAULT_STOP_RETRY
    }

    /// Both halves of a machine credential, or neither; one alone exits 2 naming the other
    /// (the kcap CLI's rule: a half-configured runner is told, not silently unauthenticated).
    fn machine_credential(&self) -> Result<Option<MachineCredential>, ConfigError> {
        let id = self.non_empty_trimmed("KCAP_CLIENT_ID");
        let secret = self.non_empty_trimmed("KCAP_CLIENT_SECRET");
        match (id, secret) {
            (Some(client_id), Some(client_secret)) => Ok(Some(MachineCredential {
                client_id,
                client_secret,
            })),
            (None, None) => Ok(None),
            (Some(_), None) => Err(ConfigError {
                name: "KCAP_CLIENT_SECRET",
                message: "KCAP_CLIENT_ID is set but KCAP_CLIENT_SECRET is not: a machine \
                          credential needs both"
                    .to_string(),
            }),
            (None, Some(_)) => Err(ConfigError {
                name: "KCAP_CLIENT_ID",
                message: "KCAP_CLIENT_SECRET is set but KCAP_CLIENT_ID is not: a machine \
                          credential needs both"
                    .to_string(),
            }),
        }
    }

    fn server(&mut self, flag: Option<&str>) -> Result<Option<String>, ConfigError> {
        let (raw, origin) = match flag {
            Some(s) => (s.to_string(), "--server"),
            None => match self.non_empty_trimmed("KCAP_URL") {
                Some(s) => (s, "KCAP_URL"),
                None => return Ok(None),
            },
        };
        let shown = without_password(&raw);
        let fail = |why: String| ConfigError {
            name: origin,
            message: format!("failed to use {origin} {shown:?} as the kcap server URL: {why}"),
        };
        let url = reqwest::Url::parse(raw.trim()).map_err(|e| fail(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(fail(format!(
                "the scheme must be http or https, not {}",
                url.scheme()
            )));
        }
        let Some(host) = url.host_str() else {
            return Err(fail("it has no host".to_string()));
        };
        // The server's identity binds stored tokens (revision-2 R1): user info (whose
        // password would travel twice), a query or a fragment cannot be part of one.
        if !url.username().is_empty() || url.password().is_some() {
            return Err(fail(
                "it must not carry user info (user@ or user:password@)".into(),
            ));
        }
        if url.query().is_some() {
            return Err(fail("it must not carry a query (?...)".into()));
        }
        if url.fragment().is_some() {
            return Err(fail("it must not carry a fragment (#...)".into()));
        }
        if url.scheme() == "http" && !is_loopback(host) {
            self.warnings.push(format!(
                "{origin} {shown:?} uses plain http to {host}, which is not loopback: the token \
                 travels in clear text"
            ));
        }
        Ok(Some(url.as_str().trim_end_matches('/').to_string()))
    }

    fn log(&mut self, flag: Option<&str>) -> Result<String, ConfigError> {
        let check = |filter: &str| {
            tracing_subscriber::EnvFilter::builder()
                .parse(filter)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        if let Some(f) = flag {
            return match check(f) {
                Ok(()) => Ok(f.to_string()),
                Err(e) => Err(ConfigError {
                    name: "--log",
                    message: format!("failed to use --log {f:?} as a log filter: {e}"),
                }),
            };
        }
        let Some(v) = self.non_empty_trimmed("KCAP_LOG") else {
            return Ok(DEFAULT_LOG.to_string());
        };
        match check(&v) {
            Ok(()) => Ok(v),
            Err(e) => {
                self.warnings.push(format!(
                    "ignoring KCAP_LOG={v:?}: {e}; using the default {DEFAULT_LOG}"
                ));
                Ok(DEFAULT_LOG.to_string())
            }
        }
    }

    fn log_format(&mut self) -> LogFormat {
        let Some(v) = self.non_empty_trimmed("KCAP_LOG_FORMAT") else {
            return LogFormat::Text;
        };
        match LogFormat::from_str(&v, true) {
            Ok(f) => f,
            Err(_) => {
                self.warnings.push(format!(
                    "ignoring KCAP_LOG_FORMAT={v:?}: expected text or json; using the default text"
                ));
                LogFormat::Text
            }
        }
    }

    /// The home directory for the default config root. On Unix `directories` reads `$HOME`
    /// first too; reading it through `env` keeps resolution a function of its inputs.
    fn home(&self) -> Result<PathBuf, ConfigError> {
        #[cfg(unix)]
        if let Some(h) = self.non_empty("HOME") {
            return Ok(PathBuf::from(h));
        }
        directories::BaseDirs::new()
            .map(|b| b.home_dir().to_path_buf())
            .ok_or_else(|| ConfigError {
                name: "KCAP_CONFIG_DIR",
                message: "failed to find the home directory for the default config root: set \
                          KCAP_CONFIG_DIR or --config-dir"
                    .to_string(),
            })
    }
}

/// A URL as messages show it: a password in its userinfo is a credential, never logged.
/// Works on text that does not parse as a URL too (it is shown in that error).
fn without_password(raw: &str) -> String {
    let Some(start) = raw.find("://").map(|i| i + 3) else {
        return raw.to_string();
    };
    let end = raw[start..]
        .find(['/', '?', '#'])
        .map_or(raw.len(), |i| start + i);
    let Some(at) = raw[start..end].rfind('@').map(|i| start + i) else {
        return raw.to_string();
    };
    match raw[start..at].find(':') {
        Some(colon) => format!("{}:[REDACTED]{}", &raw[..start + colon], &raw[at..]),
        None => raw.to_string(),
    }
}

/// Loopback as the clear-text warning understands it: 127.0.0.0/8, ::1 and `localhost`.
/// `host` is a parsed URL's host: IPv6 in brackets, IPv4 normalised to dotted decimal.
fn is_loopback(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_env(pairs: &[(&str, &str)]) -> Resolved {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .or_else(|| (name == "HOME").then(|| "/home/u".to_string()))
        };
        resolve(&SettingsArgs::default(), &env).unwrap()
    }

    #[test]
    fn whole_numbers() {
        assert!(matches!(parse_whole(" 15 "), Ok(15)));
        assert!(matches!(parse_whole("+15"), Ok(15)));
        assert!(matches!(parse_whole("-0"), Ok(0)));
        assert!(matches!(parse_whole("-5"), Err(BadNumber::Negative)));
        assert!(matches!(parse_whole(""), Err(BadNumber::Empty)));
        assert!(matches!(parse_whole("   "), Err(BadNumber::Empty)));
        assert!(matches!(parse_whole("1.5"), Err(BadNumber::NotWhole)));
        assert!(matches!(parse_whole("5m"), Err(BadNumber::NotWhole)));
        assert!(matches!(parse_whole("+"), Err(BadNumber::NotWhole)));
        assert!(matches!(
            parse_whole("99999999999999999999999999"),
            Ok(u64::MAX)
        ));
    }

    #[test]
    fn registry_defaults_match_the_typed_defaults() {
        let d = |name: &str| {
            let v = ENV_VARS.iter().find(|v| v.name == name).unwrap();
            v.default.parse::<jiff::SignedDuration>().unwrap()
        };
        let sd = |d: Duration| jiff::SignedDuration::try_from(d).unwrap();
        assert_eq!(
            d("KCAP_CODEX_SUBAGENT_IDLE_MINUTES"),
            sd(DEFAULT_STOP_GRACE)
        );
        assert_eq!(
            d("KCAP_CODEX_SUBAGENT_REAP_MINUTES"),
            sd(DEFAULT_REAP_AFTER)
        );
        assert_eq!(d("KCAP_CODEX_IDLE_MINUTES"), sd(DEFAULT_IDLE_END));
        assert_eq!(d("KCAP_CODEX_STALL_MINUTES"), sd(DEFAULT_STALL_AFTER));
        assert_eq!(d("KCAP_WATCHER_LIFETIME_HOURS"), sd(DEFAULT_LIFETIME));
        assert_eq!(
            d("KCAP_MAX_PAUSE_CREDIT_MINUTES"),
            sd(DEFAULT_MAX_PAUSE_CREDIT)
        );
        assert_eq!(d("KCAP_WATCH_POLL_MS"), sd(DEFAULT_POLL_INTERVAL));
        // And the resolved defaults are those of `with_defaults`.
        assert_eq!(
            resolve_env(&[]).settings,
            Settings::with_defaults(PathBuf::from("/home/u/.config/kcap"))
        );
    }

    #[test]
    fn every_window_variable_is_in_the_registry_with_its_flag() {
        for w in [
            &STOP_GRACE,
            &REAP_AFTER,
            &IDLE_END,
            &STALL_AFTER,
            &LIFETIME,
            &MAX_PAUSE_CREDIT,
        ] {
            let v = ENV_VARS.iter().find(|v| v.name == w.var).unwrap();
            assert_eq!(v.flag, Some(w.flag));
        }
    }

    #[test]
    fn huge_minutes_times_sixty_does_not_wrap() {
        let r = resolve_env(&[("KCAP_CODEX_STALL_MINUTES", "18446744073709551615")]);
        assert_eq!(r.settings.stall_after, Some(MAX_WINDOW));
        let r = resolve_env(&[("KCAP_WATCHER_LIFETIME_HOURS", "5124095576030431")]);
        assert_eq!(r.settings.lifetime, Some(MAX_WINDOW));
    }

    #[test]
    fn loopback_hosts() {
        let host = |s: &str| {
            reqwest::Url::parse(s)
                .unwrap()
                .host_str()
                .unwrap()
                .to_string()
        };
        for u in [
            "http://127.0.0.1/",
            "http://127.9.8.7/",
            "http://[::1]/",
            "http://LOCALHOST:8080",
        ] {
            assert!(is_loopback(&host(u)), "{u}");
        }
        for u in [
            "http://128.0.0.1/",
            "http://[::2]/",
            "http://localhost.example/",
        ] {
            assert!(!is_loopback(&host(u)), "{u}");
        }
    }
}
