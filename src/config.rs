//! Resolved, typed settings: the one place where flag, `KCAP_*` variable and default meet.
//!
//! Every setting is described once in the registry ([`crate::settings`]), whose kinds read
//! flag, variable and default by the rules of docs/behaviour.md C: a bad flag exits 2
//! naming it; a bad variable falls back to its default with a warning naming the variable and
//! the value, and never aborts a spawned watcher. This module adds what only it knows: the
//! typed [`Settings`] the rest of the program reads, and the checks that tie settings to each
//! other or to the world (the server URL, the home directory). The only variable that can
//! stop a watcher is `KCAP_URL`: a URL that is not http(s) would otherwise run the watcher
//! offline by mistake and silently ship nothing.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::codex::header::Role;
use crate::decide::Windows;
use crate::platform::config_dir::{self, HomeRule};
use crate::settings::kinds::Given;
use crate::settings::{self as registry, Command, Resolver, SettingsArgs};
use crate::ship::auth::{AuthConfig, Credentials, MachineCredential};

pub use crate::settings::{ConfigError, LogFormat};

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
    /// `KCAP_CLIENT_ID` + `KCAP_CLIENT_SECRET` (docs/behaviour.md R1).
    pub machine: Option<MachineCredential>,
    pub config_dir: PathBuf,
    pub watcher_dir: PathBuf,
    /// `--codex-home` or `CODEX_HOME`; `None`: derived from the session rollout's path.
    pub codex_home: Option<PathBuf>,
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
    /// How often a held key's heartbeat is rewritten.
    pub heartbeat_every: Duration,
    /// The daemon's wait after a supervisor's crash before it restarts it.
    pub restart_settle: Duration,
    /// The daemon's first restart backoff (doubling to 60 times it).
    pub restart_backoff: Duration,
    pub log: String,
    pub log_format: LogFormat,
    /// `KCAP_WATCH_EXCLUDE`: glob patterns on a session's cwd the daemon leaves alone.
    pub exclude: Vec<String>,
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
            codex_home: None,
            stop_grace: registry::STOP_GRACE.kind.default,
            reap_after: registry::REAP_AFTER.kind.default,
            idle_end: registry::IDLE_END.kind.default,
            stall_after: Some(registry::STALL_AFTER.kind.default),
            lifetime: Some(registry::LIFETIME.kind.default),
            max_pause_credit: registry::MAX_PAUSE_CREDIT.kind.default,
            poll_interval: registry::POLL_INTERVAL.kind.default,
            force_poll: false,
            stop_retry: registry::STOP_RETRY.kind.default,
            heartbeat_every: registry::HEARTBEAT.kind.default,
            restart_settle: registry::RESTART_SETTLE.kind.default,
            restart_backoff: registry::RESTART_BACKOFF.kind.default,
            log: registry::LOG.kind.default.to_string(),
            log_format: LogFormat::default(),
            exclude: Vec::new(),
        }
    }

    /// The credentials these settings name, for requests to `server_url` (`KCAP_URL`): the
    /// settings know the auth module's inputs, never the other way round.
    pub(crate) fn credentials(&self, server_url: &str) -> Credentials {
        Credentials::new(
            AuthConfig {
                env_token: self.token.as_ref().map(|t| t.expose().to_owned()),
                token_file: self.token_file.clone(),
                machine: self.machine.clone(),
                config_dir: self.config_dir.clone(),
                profile: self.profile.clone(),
                server_url: server_url.to_owned(),
                ..AuthConfig::default()
            }
            .with_env_overrides(&process_env),
        )
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
    resolve_with(&mut Resolver::new(args, env))
}

/// Resolves the settings `command` takes as [`resolve`] does; the others keep their defaults
/// and their variables are not read.
pub fn resolve_for(
    command: Command,
    args: &SettingsArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, ConfigError> {
    resolve_with(&mut Resolver::for_command(command, args, env))
}

fn resolve_with(r: &mut Resolver<'_>) -> Result<Resolved, ConfigError> {
    let server = server(r.get(&registry::SERVER)?, &mut r.warnings)?;
    let token = r.get(&registry::TOKEN)?.map(|t| Secret(t.value));
    let token_file = r.get(&registry::TOKEN_FILE)?;
    let profile = r
        .get(&registry::PROFILE)?
        .map(|g| g.value.trim().to_string());
    let client_id = r.get(&registry::CLIENT_ID)?;
    let client_secret = r.get(&registry::CLIENT_SECRET)?;
    let machine = machine_credential(client_id, client_secret, &mut r.warnings);
    let config_dir = match r.get(&registry::CONFIG_DIR)? {
        Some(d) => d,
        None => config_dir::default_root(&home(r)?),
    };
    let watcher_dir = r
        .get(&registry::WATCHER_DIR)?
        .unwrap_or_else(|| config_dir.join("watchers"));
    let settings = Settings {
        server,
        token,
        token_file,
        profile,
        machine,
        config_dir,
        watcher_dir,
        codex_home: r.get(&registry::CODEX_HOME)?,
        stop_grace: r.get(&registry::STOP_GRACE)?,
        reap_after: r.get(&registry::REAP_AFTER)?,
        idle_end: r.get(&registry::IDLE_END)?,
        stall_after: r.get(&registry::STALL_AFTER)?,
        lifetime: r.get(&registry::LIFETIME)?,
        max_pause_credit: r.get(&registry::MAX_PAUSE_CREDIT)?,
        poll_interval: r.get(&registry::POLL_INTERVAL)?,
        force_poll: r.get(&registry::FORCE_POLL)?,
        stop_retry: r.get(&registry::STOP_RETRY)?,
        heartbeat_every: r.get(&registry::HEARTBEAT)?,
        restart_settle: r.get(&registry::RESTART_SETTLE)?,
        restart_backoff: r.get(&registry::RESTART_BACKOFF)?,
        log: r.get(&registry::LOG)?,
        log_format: r.get(&registry::LOG_FORMAT)?,
        exclude: r
            .get(&registry::WATCH_EXCLUDE)?
            .map(|g| exclude_patterns(&g.value))
            .unwrap_or_default(),
    };
    Ok(Resolved {
        settings,
        warnings: std::mem::take(&mut r.warnings),
    })
}

/// The patterns of a `KCAP_WATCH_EXCLUDE` value, separated as `PATH` is (`:` on Unix, `;` on
/// Windows), empty parts dropped. How they match is the daemon's business.
fn exclude_patterns(value: &str) -> Vec<String> {
    std::env::split_paths(value)
        .map(|p| p.to_string_lossy().trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Checks the server URL (`--server` or `KCAP_URL`) and normalises it: http or https with a
/// host, no trailing slash; plain http to a host other than loopback is a warning.
fn server(given: Option<Given>, warnings: &mut Vec<String>) -> Result<Option<String>, ConfigError> {
    let Some(Given { value: raw, origin }) = given else {
        return Ok(None);
    };
    let shown = crate::url_display::redacted(&raw);
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
    // The server's identity binds stored tokens (docs/behaviour.md R1): user info (whose password
    // would travel twice), a query or a fragment cannot be part of one.
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
        warnings.push(format!(
            "{origin} {shown:?} uses plain http to {host}, which is not loopback: the token \
             travels in clear text"
        ));
    }
    Ok(Some(url.as_str().trim_end_matches('/').to_string()))
}

/// Both halves of a machine credential, or neither. One alone is a warning naming the missing
/// one, and the other sources are used (docs/behaviour.md S4.5, as the kcap CLI's watcher
/// does): exiting would make a spawner that re-ensures its watchers restart one in a loop.
fn machine_credential(
    id: Option<Given>,
    secret: Option<Given>,
    warnings: &mut Vec<String>,
) -> Option<MachineCredential> {
    let id = id
        .map(|g| g.value.trim().to_string())
        .filter(|v| !v.is_empty());
    let secret = secret
        .map(|g| g.value.trim().to_string())
        .filter(|v| !v.is_empty());
    let (present, missing) = match (id, secret) {
        (Some(client_id), Some(client_secret)) => {
            return Some(MachineCredential {
                client_id,
                client_secret,
            });
        }
        (None, None) => return None,
        (Some(_), None) => (registry::CLIENT_ID.var, registry::CLIENT_SECRET.var),
        (None, Some(_)) => (registry::CLIENT_SECRET.var, registry::CLIENT_ID.var),
    };
    warnings.push(format!(
        "{present} is set but {missing} is not: a machine credential needs both; ignoring \
         {present} and using the other token sources"
    ));
    None
}

/// The home directory for the default config root, found as the kcap CLI finds it (`HOME`
/// first, on Windows too; see [`crate::platform::config_dir`]). `HOME` is read through the
/// resolver, so resolution stays a function of its inputs.
fn home(r: &Resolver<'_>) -> Result<PathBuf, ConfigError> {
    let home_var = r.env("HOME");
    config_dir::home(HomeRule::current(), home_var.as_deref(), || {
        directories::BaseDirs::new().map(|b| b.home_dir().to_path_buf())
    })
    .ok_or_else(|| ConfigError {
        name: registry::CONFIG_DIR.var,
        message: format!(
            "failed to find the home directory for the default config root: set {} or {}",
            registry::CONFIG_DIR.var,
            registry::CONFIG_DIR.long().unwrap_or_default(),
        ),
    })
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
    use crate::time::MAX_WINDOW;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .or_else(|| (name == "HOME").then(|| "/home/u".to_string()))
        }
    }

    fn resolve_env(pairs: &[(&str, &str)]) -> Resolved {
        resolve(&SettingsArgs::default(), &env_of(pairs)).unwrap()
    }

    #[test]
    fn resolution_reads_every_registry_entry() {
        let args = SettingsArgs::default();
        let env = env_of(&[]);
        let mut r = Resolver::new(&args, &env);
        resolve_with(&mut r).unwrap();
        assert_eq!(r.unread(), Vec::<&str>::new(), "settings never resolved");
    }

    #[test]
    fn resolved_defaults_are_those_of_with_defaults() {
        assert_eq!(
            resolve_env(&[]).settings,
            Settings::with_defaults(PathBuf::from("/home/u/.config/kcap"))
        );
    }

    #[test]
    fn huge_minutes_times_sixty_does_not_wrap() {
        let r = resolve_env(&[("KCAP_CODEX_STALL_MINUTES", "18446744073709551615")]);
        assert_eq!(r.settings.stall_after, Some(MAX_WINDOW));
        let r = resolve_env(&[("KCAP_WATCHER_LIFETIME_HOURS", "5124095576030431")]);
        assert_eq!(r.settings.lifetime, Some(MAX_WINDOW));
    }

    #[test]
    fn the_stop_retry_override_is_read_within_its_range() {
        let r = resolve_env(&[("KCAP_WATCH_STOP_RETRY_MS", "200")]);
        assert_eq!(r.settings.stop_retry, Duration::from_millis(200));
        let r = resolve_env(&[("KCAP_WATCH_STOP_RETRY_MS", "5")]);
        assert_eq!(r.settings.stop_retry, Duration::from_secs(60));
        assert!(r.warnings[0].contains("KCAP_WATCH_STOP_RETRY_MS=\"5\""));
    }

    #[test]
    fn exclude_patterns_are_separated_as_path_is() {
        let value = std::env::join_paths(["/a/*", "", "/b/**", " "]).unwrap();
        let r = resolve_env(&[("KCAP_WATCH_EXCLUDE", &value.to_string_lossy())]);
        assert_eq!(r.settings.exclude, ["/a/*", "/b/**"]);
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
