//! Authentication as the kcap CLI does it (docs/behaviour.md R1): which bearer token a request
//! carries, and what to do when the server refuses it.
//!
//! Sources, first found wins: `KCAP_TOKEN`; the file named by `KCAP_TOKEN_FILE`; a machine
//! credential (`KCAP_CLIENT_ID` + `KCAP_CLIENT_SECRET`, minted in memory only); the kcap CLI's
//! token store ([`store`]), bound to the server it was issued for ([`server`]) and refreshed
//! under the kcap CLI's cross-process lock when it expires or is refused.
//!
//! [`Credentials`] is the one type callers use: [`Credentials::bearer`] before a request,
//! [`Credentials::rejected`] after a `401` (it answers the token to resend with, if a better
//! one exists). Both take `now`; both are single-flight within the process, so a burst of
//! requests never refreshes twice, and the file lock makes that hold across processes.
//!
//! When a token is renewed (docs/behaviour.md S4.2): at max(obtained + 60 s, expiry - 30 s)
//! for a stored token and max(obtained + 60 s, expiry - 60 s) for a machine token, so a token
//! endpoint that answers a short or no lifetime costs one refresh a minute, not one per
//! request. A stored token was obtained when this process refreshed it, else when its file was
//! last written (whoever wrote it: another watcher, the kcap CLI). A `401` to the newest token
//! forces one refresh, at most one a minute per source. An expired token whose refresh failed
//! is not sent, as the kcap CLI sends none.
//!
//! Token values never reach a log or an error message: [`Token`] prints as `[REDACTED]`.

pub(crate) mod refresh;
pub(crate) mod server;
pub(crate) mod store;

use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::Url;

use crate::time::Ts;
use store::{Entry, Store};

/// After a failed refresh or mint, the next attempt waits this long (the pace of retries
/// after a `401`), so a failing endpoint is not asked once per request.
pub(crate) const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(60);
/// A machine token is minted again this long before it expires (the kcap CLI's
/// `MachineTokenProvider.RenewMargin`).
pub(crate) const MACHINE_RENEW_MARGIN: Duration = Duration::from_secs(60);
/// No token is renewed sooner than this after it was obtained, whatever lifetime its endpoint
/// stated: the floor that keeps a short-lived answer from costing a refresh per request.
pub(crate) const MIN_TOKEN_USE: Duration = Duration::from_secs(60);
/// `401`-driven refreshes (or mints) of one source happen at most this often.
pub(crate) const FORCED_REFRESH_PACE: Duration = Duration::from_secs(60);

/// When a token obtained at `obtained` (if known) and expiring at `expires_at` (if known) is
/// due for renewal: `margin` before its expiry, but never sooner than [`MIN_TOKEN_USE`] after
/// it was obtained. `None`: never by the clock (the server judges it).
pub(crate) fn renew_at(
    obtained: Option<Ts>,
    expires_at: Option<Ts>,
    margin: Duration,
) -> Option<Ts> {
    let by_expiry = expires_at?.minus(margin);
    Some(match obtained {
        Some(obtained) => by_expiry.max(obtained.plus(MIN_TOKEN_USE)),
        None => by_expiry,
    })
}

/// A bearer token. `Debug` and `Display` print `[REDACTED]`; only [`Token::expose`] gives the
/// value, for the `Authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A token from its text, trimmed; `None` when empty or when it holds characters an HTTP
    /// header cannot carry (a token file with two lines, say), which the server would never
    /// accept anyway.
    pub(crate) fn new(text: &str) -> Option<Token> {
        Token::parse(text).ok()
    }

    /// [`Token::new`], saying why not: "it is empty", "it holds more than one line", "it is
    /// not ASCII", "it holds a control character".
    pub(crate) fn parse(text: &str) -> Result<Token, &'static str> {
        let text = text.trim();
        // A token as it always is (printable ASCII, no blank at either end): one pass, where
        // the reasons below take five. It is checked before every request.
        if !text.is_empty() && text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Ok(Token(text.to_owned()));
        }
        if text.is_empty() {
            Err("it is empty")
        } else if text.contains(['\n', '\r']) {
            Err("it holds more than one line")
        } else if !text.is_ascii() {
            Err("it is not ASCII")
        } else if text.contains('\0') {
            Err("it holds NUL bytes (UTF-16 without a byte order mark?)")
        } else if text.bytes().any(|b| b.is_ascii_control()) {
            Err("it holds a control character")
        } else {
            Ok(Token(text.to_owned()))
        }
    }

    /// The secret itself. Only for the `Authorization` header, and for scrubbing it out of
    /// error text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// Where the current token comes from, for logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenOrigin {
    /// `KCAP_TOKEN`.
    Env,
    /// The file named by `KCAP_TOKEN_FILE`.
    File(PathBuf),
    /// Minted from `KCAP_CLIENT_ID`/`KCAP_CLIENT_SECRET`.
    Machine,
    /// The kcap CLI's token store file of this profile.
    Store(PathBuf),
    /// No token: requests go without `Authorization`.
    None,
}

impl fmt::Display for TokenOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenOrigin::Env => f.write_str("KCAP_TOKEN"),
            TokenOrigin::File(p) => write!(f, "KCAP_TOKEN_FILE {}", p.display()),
            TokenOrigin::Machine => f.write_str("the machine credential KCAP_CLIENT_ID"),
            TokenOrigin::Store(p) => write!(f, "the kcap token store {}", p.display()),
            TokenOrigin::None => f.write_str("no token"),
        }
    }
}

/// A machine credential (`KCAP_CLIENT_ID`, `KCAP_CLIENT_SECRET`).
#[derive(Clone, PartialEq, Eq)]
pub struct MachineCredential {
    pub client_id: String,
    pub client_secret: String,
}

impl fmt::Debug for MachineCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MachineCredential({}, [REDACTED])", self.client_id)
    }
}

/// Everything the resolution needs, as configured.
#[derive(Clone, Debug, Default)]
pub struct AuthConfig {
    /// `KCAP_TOKEN`.
    pub env_token: Option<String>,
    /// `KCAP_TOKEN_FILE`.
    pub token_file: Option<PathBuf>,
    /// Both halves of a machine credential.
    pub machine: Option<MachineCredential>,
    /// `<config>`.
    pub config_dir: PathBuf,
    /// `--profile`/`KCAP_PROFILE`; `None`: `config.json`'s `active_profile`.
    pub profile: Option<String>,
    /// `KCAP_URL`.
    pub server_url: String,
    /// The endpoint overrides, read from the environment by [`AuthConfig::with_env_overrides`].
    pub workos_authenticate_url: Option<String>,
    pub machine_token_url: Option<String>,
}

impl AuthConfig {
    /// Reads the undocumented endpoint overrides (tests point them at local fakes).
    pub(crate) fn with_env_overrides(mut self, env: &dyn Fn(&str) -> Option<String>) -> AuthConfig {
        let set = |name| env(name).filter(|v: &String| !v.trim().is_empty());
        self.workos_authenticate_url = set(refresh::WORKOS_AUTHENTICATE_URL_VAR);
        self.machine_token_url = set(refresh::MACHINE_TOKEN_URL_VAR);
        self
    }
}

enum Source {
    None,
    Env(Token),
    File(PathBuf),
    Machine {
        credential: MachineCredential,
        token_url: Result<Url, String>,
    },
    // Boxed: the store keeps its last reads beside it.
    Store(Box<Store>),
}

/// A minted machine token.
struct MachineToken {
    token: Token,
    obtained: Ts,
    expires_at: Ts,
}

impl MachineToken {
    fn renew_at(&self) -> Ts {
        // Both times are known, so `renew_at` always answers.
        renew_at(
            Some(self.obtained),
            Some(self.expires_at),
            MACHINE_RENEW_MARGIN,
        )
        .unwrap_or(self.expires_at)
    }
}

#[derive(Default)]
struct State {
    /// The token file's token, re-read after a refusal.
    file_token: Option<Token>,
    /// The machine token.
    machine: Option<MachineToken>,
    /// The store token this process last obtained by refreshing, and when.
    refreshed: Option<(String, Ts)>,
    /// No refresh or mint before this, after one failed.
    hold_until: Option<Ts>,
    /// When a `401` last forced a refresh or mint.
    forced_at: Option<Ts>,
    failure_logged: bool,
    wrong_server_logged: bool,
    origin: Option<TokenOrigin>,
}

/// The bearer token source of one process. Share it (`Arc`) between request tasks.
pub struct Credentials {
    source: Source,
    server_url: String,
    workos_url: Result<Url, String>,
    /// Single flight: one refresh or mint at a time in this process.
    state: tokio::sync::Mutex<State>,
    /// Set by [`Credentials::reload`]: the token file is read again before the next request.
    reread: AtomicBool,
    origin: Mutex<TokenOrigin>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credentials({})", self.origin())
    }
}

impl Credentials {
    /// The source the configuration names; reads no file yet.
    pub fn new(config: AuthConfig) -> Credentials {
        let source = if let Some(token) = config.env_token.as_deref().and_then(Token::new) {
            Source::Env(token)
        } else if let Some(path) = config.token_file.clone() {
            Source::File(path)
        } else if let Some(credential) = config.machine.clone() {
            let token_url = match &config.machine_token_url {
                Some(raw) => server::checked_endpoint(refresh::MACHINE_TOKEN_URL_VAR, raw),
                None => Url::parse(refresh::MACHINE_TOKEN_URL).map_err(|e| e.to_string()),
            };
            Source::Machine {
                credential,
                token_url,
            }
        } else {
            let (profile, active) =
                store::resolve_profile(&config.config_dir, config.profile.as_deref());
            if store::valid_profile(&profile) {
                Source::Store(Box::new(Store::new(
                    config.config_dir.clone(),
                    profile,
                    active,
                )))
            } else {
                tracing::warn!(
                    event = "token_store_unreadable",
                    "ignoring the kcap profile {profile:?}: it is not a valid profile name"
                );
                Source::None
            }
        };
        let workos_url = match &config.workos_authenticate_url {
            Some(raw) => server::checked_endpoint(refresh::WORKOS_AUTHENTICATE_URL_VAR, raw),
            None => Url::parse(refresh::WORKOS_AUTHENTICATE_URL).map_err(|e| e.to_string()),
        };
        Credentials::with_source(source, config.server_url, workos_url)
    }

    /// A source that always answers `token` (or none) and reads nothing.
    pub fn fixed(token: Option<String>) -> Credentials {
        let source = match token.as_deref().and_then(Token::new) {
            Some(token) => Source::Env(token),
            None => Source::None,
        };
        Credentials::with_source(source, String::new(), Err("no WorkOS endpoint".to_owned()))
    }

    fn with_source(source: Source, server_url: String, workos_url: Result<Url, String>) -> Self {
        Credentials {
            source,
            server_url,
            workos_url,
            state: tokio::sync::Mutex::new(State::default()),
            reread: AtomicBool::new(false),
            origin: Mutex::new(TokenOrigin::None),
        }
    }

    /// Where the token in use comes from (for logs; never the token).
    pub fn origin(&self) -> TokenOrigin {
        self.origin
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// After a `401`/`403` the caller asks for the token file to be read again before the
    /// next request (the store is read before every request anyway).
    pub(crate) fn reload(&self) {
        self.reread.store(true, Ordering::Relaxed);
    }

    /// The token to send now, if any. May refresh an expired store token (under the kcap
    /// CLI's lock) or mint a machine token.
    pub async fn bearer(&self, now: Ts) -> Option<Token> {
        let mut state = self.state.lock().await;
        let (token, origin) = match &self.source {
            Source::None => (None, TokenOrigin::None),
            Source::Env(token) => (Some(token.clone()), TokenOrigin::Env),
            Source::File(path) => {
                if state.file_token.is_none() || self.reread.swap(false, Ordering::Relaxed) {
                    state.file_token = read_token_file(path);
                }
                (state.file_token.clone(), TokenOrigin::File(path.clone()))
            }
            Source::Machine { .. } => (
                self.machine_token(&mut state, now, None).await,
                TokenOrigin::Machine,
            ),
            Source::Store(store) => (
                self.store_token(store, &mut state, now, None).await,
                TokenOrigin::Store(store.path()),
            ),
        };
        let origin = if token.is_some() {
            origin
        } else {
            TokenOrigin::None
        };
        if state.origin.as_ref() != Some(&origin) {
            tracing::info!(event = "token_source", from = %origin, "using bearer token from {origin}");
            state.origin = Some(origin.clone());
            *self.origin.lock().unwrap_or_else(|p| p.into_inner()) = origin;
        }
        token
    }

    /// The server refused `sent` with `401`. Answers the token to resend with at once, when
    /// there is one other than `sent`: a token another process rotated in, a refreshed store
    /// token (refreshed only if the store still holds `sent`), a new machine token, or a
    /// changed token file.
    pub(crate) async fn rejected(&self, sent: Option<&Token>, now: Ts) -> Option<Token> {
        let mut state = self.state.lock().await;
        let fresh = match &self.source {
            Source::None | Source::Env(_) => None,
            Source::File(path) => {
                state.file_token = read_token_file(path);
                state.file_token.clone()
            }
            Source::Machine { .. } => self.machine_token(&mut state, now, sent).await,
            Source::Store(store) => match sent {
                Some(sent) => self.store_token(store, &mut state, now, Some(sent)).await,
                // Nothing was sent (no token, or one bound elsewhere): nothing to refresh.
                None => None,
            },
        };
        fresh.filter(|t| Some(t) != sent)
    }

    /// The machine token, minted when there is none, it is due ([`MachineToken::renew_at`]),
    /// or it is the one the server just refused (at most once per [`FORCED_REFRESH_PACE`]).
    /// After a failed mint the old token is sent only while it has not expired.
    async fn machine_token(
        &self,
        state: &mut State,
        now: Ts,
        refused: Option<&Token>,
    ) -> Option<Token> {
        let Source::Machine {
            credential,
            token_url,
        } = &self.source
        else {
            return None;
        };
        let current = state
            .machine
            .as_ref()
            .map(|m| (m.token.clone(), m.renew_at(), m.expires_at));
        let still_valid = |current: &Option<(Token, Ts, Ts)>| {
            current
                .as_ref()
                .filter(|(_, _, expires_at)| now < *expires_at)
                .map(|(t, _, _)| t.clone())
        };
        let forced = match (&current, refused) {
            (Some((token, _, _)), Some(refused)) if token == refused => {
                if state
                    .forced_at
                    .is_some_and(|t| now < t.plus(FORCED_REFRESH_PACE))
                {
                    // Refused again within the minute: the caller retries later.
                    return Some(token.clone());
                }
                state.forced_at = Some(now);
                true
            }
            _ => false,
        };
        if !forced
            && let Some((token, renew_at, _)) = &current
            && now < *renew_at
        {
            return Some(token.clone());
        }
        if state.hold_until.is_some_and(|t| now < t) {
            return still_valid(&current);
        }
        let result = match token_url {
            Ok(url) => {
                refresh::client_credentials(url, &credential.client_id, &credential.client_secret)
                    .await
            }
            Err(problem) => Err(problem.clone()),
        };
        match result.and_then(|m| {
            Token::new(&m.access_token)
                .map(|t| (t, m.expires_at(now)))
                .ok_or_else(|| "the token endpoint answered an unusable access_token".to_owned())
        }) {
            Ok((token, expires_at)) => {
                tracing::info!(event = "machine_token_minted", client_id = %credential.client_id, expires_at = %expires_at, "minted a machine token for {}", credential.client_id);
                state.machine = Some(MachineToken {
                    token: token.clone(),
                    obtained: now,
                    expires_at,
                });
                state.hold_until = None;
                state.failure_logged = false;
                Some(token)
            }
            Err(why) => {
                self.failed(
                    state,
                    now,
                    "machine_token_failed",
                    &format!(
                        "failed to mint a machine token for {}: {why}",
                        credential.client_id
                    ),
                );
                still_valid(&current)
            }
        }
    }

    /// When this process holds that `entry`'s token was obtained: when this process refreshed
    /// it, else when its file was written, if the token had not expired by then (a file
    /// written with an already expired token, say copied from elsewhere, tells nothing about
    /// when it was obtained). A time after `now` (a clock skewed, or an injected `now`) says
    /// nothing either.
    fn obtained(entry: &Entry, state: &State, now: Ts) -> Option<Ts> {
        let text = entry.access_token_text()?;
        match &state.refreshed {
            Some((refreshed, at)) if refreshed == text => Some(*at),
            _ => entry
                .modified
                .filter(|m| *m <= now && entry.expires_at().is_none_or(|e| e > *m)),
        }
    }

    /// Whether `entry`'s token is due for renewal at `now` by the clock.
    fn due(entry: &Entry, state: &State, now: Ts) -> bool {
        renew_at(
            Self::obtained(entry, state, now),
            entry.expires_at(),
            store::EXPIRY_MARGIN,
        )
        .is_some_and(|at| now >= at)
    }

    /// The store's token for this server: withheld when bound elsewhere; refreshed under the
    /// lock when due, or when `refused` is still what the store holds (at most once per
    /// [`FORCED_REFRESH_PACE`]). An expired token that could not be refreshed is withheld.
    async fn store_token(
        &self,
        store: &Store,
        state: &mut State,
        now: Ts,
        refused: Option<&Token>,
    ) -> Option<Token> {
        // After a refusal the file is read again whatever its `stat` says (the spec's re-read
        // on `401`); before a request the version decides.
        let entry = if refused.is_some() {
            store.load_fresh()
        } else {
            store.load()
        }?;
        // Checked on the snapshot, before any refresh: refreshing a token that will not be
        // sent would spend a single-use refresh token for nothing.
        if !self.bound_here(&entry, state) {
            return None;
        }
        let token = entry.access_token()?;
        let due = match refused {
            Some(refused) => *refused == token,
            None => Self::due(&entry, state, now),
        };
        if !due {
            return Some(token);
        }
        if refused.is_some() {
            if state
                .forced_at
                .is_some_and(|t| now < t.plus(FORCED_REFRESH_PACE))
            {
                // Refused again within the minute: the caller retries later.
                return Some(token);
            }
            state.forced_at = Some(now);
        }
        // What to send when no better token comes: the kcap CLI sends none once it expired.
        let fallback = |entry: &Entry, token: Token| (!entry.is_expired(now)).then_some(token);
        if !entry.refreshable() || state.hold_until.is_some_and(|t| now < t) {
            return fallback(&entry, token);
        }
        let refreshed_before = state.refreshed.clone();
        match self
            .refresh_under_lock(store, entry.clone(), state, now, refused)
            .await
        {
            Ok(fresh) => {
                state.hold_until = None;
                state.failure_logged = false;
                if !self.bound_here(&fresh, state) {
                    return None;
                }
                fresh.access_token()
            }
            Err(why) => {
                state.refreshed = refreshed_before;
                let sent = fallback(&entry, token);
                let what = if sent.is_some() {
                    "keeping every line and retrying"
                } else {
                    "not sending the expired token; keeping every line and retrying"
                };
                self.failed(
                    state,
                    now,
                    "token_refresh_failed",
                    &format!(
                        "failed to refresh the kcap token of profile {}: {why}; {what}",
                        store.profile()
                    ),
                );
                sent
            }
        }
    }

    /// The kcap CLI's protocol: lock, re-read, adopt a token another process rotated, refresh
    /// only if the stored token is still the expired or refused one, save, unlock.
    async fn refresh_under_lock(
        &self,
        store: &Store,
        current: Entry,
        state: &mut State,
        now: Ts,
        refused: Option<&Token>,
    ) -> Result<Entry, String> {
        // Judged by the same floor as outside the lock: a token another process obtained a
        // moment ago (its file just written) is not due, however short its stated life.
        let needs = |e: &Entry, state: &State| match refused {
            Some(refused) => e.access_token_text() == Some(refused.expose()),
            None => Self::due(e, state, now),
        };
        let lock = store
            .lock()
            .await
            .map_err(|e| format!("failed to lock {}: {e}", store.lock_path().display()))?;
        let Some(_lock) = lock else {
            // Another process held the lock throughout: use what it saved, if it is good.
            return match store.load() {
                Some(latest) if !needs(&latest, state) => Ok(latest),
                _ => Err(format!(
                    "{} stayed locked for {:?}",
                    store.lock_path().display(),
                    store::LOCK_WAIT
                )),
            };
        };
        let latest = store.load_profile_file().unwrap_or(current.clone());
        if latest.access_token_text() != current.access_token_text()
            && !Self::due(&latest, state, now)
        {
            tracing::info!(
                event = "token_adopted",
                profile = store.profile(),
                "using the kcap token another process refreshed"
            );
            return Ok(latest);
        }
        if !needs(&latest, state) {
            return Ok(latest);
        }
        let minted = match latest.provider() {
            store::PROVIDER_WORKOS => {
                let (Some(client_id), Some(refresh_token)) =
                    (latest.client_id(), latest.refresh_token())
                else {
                    return Err("the workos token has no refresh_token or client_id".to_owned());
                };
                let url = self.workos_url.as_ref().map_err(Clone::clone)?;
                refresh::workos(url, client_id, refresh_token).await?
            }
            store::PROVIDER_GITHUB_APP => {
                let Some(access_token) = latest.access_token_text() else {
                    return Err("the token store holds no access_token".to_owned());
                };
                // A bound token refreshes at the server that issued it.
                let base = latest
                    .server_url()
                    .map(str::to_owned)
                    .unwrap_or_else(|| self.server_url.trim_end_matches('/').to_owned());
                refresh::github_app(&base, access_token).await?
            }
            other => return Err(format!("the provider {other:?} cannot be refreshed")),
        };
        let expires_at = minted.expires_at(now);
        let mut fresh = latest.clone();
        fresh.legacy = false;
        let doc = &mut fresh.doc;
        doc.insert("access_token".into(), minted.access_token.clone().into());
        doc.insert(
            "expires_at".into(),
            store::format_expires_at(expires_at).into(),
        );
        if let Some(rt) = minted.refresh_token {
            doc.insert("refresh_token".into(), rt.into());
        }
        if latest.provider() == store::PROVIDER_GITHUB_APP
            && latest.server_url().is_none()
            && let Some(canonical) = server::canonical(&self.server_url)
        {
            // The kcap CLI stamps an unbound token with the server that just refreshed it.
            doc.insert("server_url".into(), canonical.into());
        }
        // Obtained now, whether or not the save below works: the floor counts from here.
        state.refreshed = Some((minted.access_token, now));
        store
            .save(&fresh.doc)
            .map_err(|e| format!("failed to save {}: {e}", store.path().display()))?;
        tracing::info!(event = "token_refreshed", profile = store.profile(), provider = latest.provider(), expires_at = %expires_at, "refreshed the kcap token of profile {}", store.profile());
        Ok(fresh)
    }

    /// The binding rule; logs `token_wrong_server` once when it refuses.
    fn bound_here(&self, entry: &Entry, state: &mut State) -> bool {
        let Some(bound) = entry.server_url() else {
            return true;
        };
        if server::same_server(bound, &self.server_url) {
            return true;
        }
        if !state.wrong_server_logged {
            state.wrong_server_logged = true;
            let token_server =
                server::canonical(bound).unwrap_or_else(|| "(not a server URL)".to_owned());
            let this_server = server::canonical(&self.server_url)
                .unwrap_or_else(|| "(not a server URL)".to_owned());
            tracing::warn!(
                event = "token_wrong_server",
                token_server = %token_server,
                server = %this_server,
                "not sending the kcap token: it was issued for {token_server}, not {this_server}; run `kcap login` for this server"
            );
        }
        false
    }

    fn failed(&self, state: &mut State, now: Ts, event: &'static str, message: &str) {
        state.hold_until = Some(now.plus(RETRY_AFTER_FAILURE));
        if !state.failure_logged {
            state.failure_logged = true;
            tracing::warn!(event, "{message}");
        } else {
            tracing::debug!(event, "{message}");
        }
    }
}

/// A token file larger than this is no token file (a path pointing at a log, say): it is not
/// read whole into memory.
const TOKEN_FILE_MAX_BYTES: u64 = 64 * 1024;

fn read_token_file(path: &std::path::Path) -> Option<Token> {
    let read = std::fs::File::open(path).and_then(|f| {
        use std::io::Read as _;
        let mut bytes = Vec::new();
        f.take(TOKEN_FILE_MAX_BYTES + 1).read_to_end(&mut bytes)?;
        Ok(bytes)
    });
    match read {
        Ok(bytes) if bytes.len() as u64 > TOKEN_FILE_MAX_BYTES => {
            tracing::warn!(event = "token_file_unusable", path = %path.display(), "ignoring KCAP_TOKEN_FILE {}: it is larger than {TOKEN_FILE_MAX_BYTES} bytes", path.display());
            None
        }
        Ok(bytes) => match token_file_text(&bytes).and_then(|text| Token::parse(&text)) {
            Ok(token) => Some(token),
            Err(why) => {
                tracing::warn!(event = "token_file_unusable", path = %path.display(), "ignoring KCAP_TOKEN_FILE {}: {why}", path.display());
                None
            }
        },
        Err(e) => {
            tracing::warn!(event = "token_file_unusable", path = %path.display(), "failed to read KCAP_TOKEN_FILE {}: {e}", path.display());
            None
        }
    }
}

/// A token file's text: UTF-8 with or without a byte order mark, or UTF-16 (little or big
/// endian) with one, which is what Windows tools write (PowerShell 5.1's `>` writes UTF-16 LE
/// with a BOM, Notepad may add a UTF-8 BOM).
fn token_file_text(bytes: &[u8]) -> Result<String, &'static str> {
    let utf16 = |rest: &[u8], word: fn([u8; 2]) -> u16| {
        if !rest.len().is_multiple_of(2) {
            return Err("it is not valid UTF-16 (an odd number of bytes)");
        }
        let units = rest.chunks_exact(2).map(|c| word([c[0], c[1]]));
        char::decode_utf16(units)
            .collect::<Result<String, _>>()
            .map_err(|_| "it is not valid UTF-16")
    };
    if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        std::str::from_utf8(rest)
            .map(str::to_owned)
            .map_err(|_| "it is not ASCII")
    } else if let Some(rest) = bytes.strip_prefix(b"\xFF\xFE") {
        utf16(rest, u16::from_le_bytes)
    } else if let Some(rest) = bytes.strip_prefix(b"\xFE\xFF") {
        utf16(rest, u16::from_be_bytes)
    } else {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| "it is not ASCII")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_never_prints() {
        let t = Token::new("s3cr3t-value").unwrap();
        assert_eq!(format!("{t}"), "[REDACTED]");
        assert_eq!(format!("{t:?}"), "[REDACTED]");
        assert_eq!(format!("{:?}", Some(t.clone())), "Some([REDACTED])");
        assert_eq!(t.expose(), "s3cr3t-value");
        let c = Credentials::fixed(Some("s3cr3t-value".into()));
        assert!(!format!("{c:?}").contains("s3cr3t"));
        let m = MachineCredential {
            client_id: "id".into(),
            client_secret: "hush".into(),
        };
        assert!(!format!("{m:?}").contains("hush"));
    }

    /// Server fault 7 (a 401 until the token file is rewritten), at the source: after a
    /// refusal the token file is read again before the next request (the kcap CLI refreshed
    /// it), and not before (no file read per request).
    #[tokio::test(flavor = "current_thread")]
    async fn a_refused_token_file_is_read_again_before_the_next_request() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "tok-expired-0000\n").unwrap();
        let c = Credentials::with_source(
            Source::File(file.clone()),
            String::new(),
            Err("no WorkOS endpoint".to_owned()),
        );
        let now = Ts::now();
        let sent = |t: Option<Token>| t.map(|t| t.expose().to_owned());
        assert_eq!(
            sent(c.bearer(now).await).as_deref(),
            Some("tok-expired-0000")
        );
        std::fs::write(&file, "tok-fresh-2b7e1516\n").unwrap();
        assert_eq!(
            sent(c.bearer(now).await).as_deref(),
            Some("tok-expired-0000"),
            "read once, not before every request"
        );
        c.reload();
        assert_eq!(
            sent(c.bearer(now).await).as_deref(),
            Some("tok-fresh-2b7e1516")
        );
    }

    #[test]
    fn token_text_is_trimmed_and_must_fit_a_header() {
        assert_eq!(Token::new("  abc\n").unwrap().expose(), "abc");
        assert!(Token::new("  \n").is_none());
        assert!(Token::new("abc\ndef").is_none());
    }

    fn store_with(doc: serde_json::Value) -> (tempfile::TempDir, Credentials) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tokens")).unwrap();
        std::fs::write(dir.path().join("tokens/default.json"), doc.to_string()).unwrap();
        let c = Credentials::new(AuthConfig {
            config_dir: dir.path().into(),
            server_url: "HTTPS://Kcap.Example.com/".into(),
            ..AuthConfig::default()
        });
        (dir, c)
    }

    const NOW: Ts = Ts(1_785_000_000_000);

    #[tokio::test]
    async fn store_tokens_follow_the_binding() {
        let (_d, c) = store_with(
            serde_json::json!({"access_token": "a", "server_url": "https://kcap.example.com:443"}),
        );
        assert_eq!(c.bearer(NOW).await.unwrap().expose(), "a");
        let (_d, c) = store_with(serde_json::json!({"access_token": "a"}));
        assert_eq!(
            c.bearer(NOW).await.unwrap().expose(),
            "a",
            "unbound: any server"
        );
        let (_d, c) = store_with(
            serde_json::json!({"access_token": "a", "server_url": "https://other.example.com"}),
        );
        assert_eq!(c.bearer(NOW).await, None);
        let (_d, c) = store_with(
            serde_json::json!({"access_token": "a", "server_url": "https://kcap.example.com/?x=1"}),
        );
        assert_eq!(
            c.bearer(NOW).await,
            None,
            "no canonical form: matches nothing"
        );
    }

    #[tokio::test]
    async fn an_unrefreshable_token_is_sent_until_it_expires_and_a_refusal_of_it_gives_nothing_new()
    {
        let (_d, c) = store_with(serde_json::json!({
            "access_token": "a", "provider": "None", "expires_at": NOW.0 / 1000 + 3600
        }));
        let t = c.bearer(NOW).await.unwrap();
        assert_eq!(t.expose(), "a");
        assert_eq!(c.rejected(Some(&t), NOW).await, None);
        // Expired, with no way to refresh it: the kcap CLI sends nothing, and neither do we.
        let later = NOW.plus(Duration::from_secs(3600));
        assert_eq!(c.bearer(later).await, None);
    }

    proptest::proptest! {
        /// A token is its text without surrounding blanks, sent when that is printable ASCII
        /// and not empty; anything else is refused with a reason.
        #[test]
        fn a_token_is_sent_exactly_when_it_is_printable_ascii(
            text in "[ -~\t\r\n\x00\x01\x7f\u{a0}\u{e9}\u{3000}]{0,40}"
        ) {
            let trimmed = text.trim();
            let printable = !trimmed.is_empty() && trimmed.bytes().all(|b| (b' '..=b'~').contains(&b));
            match Token::parse(&text) {
                Ok(token) => proptest::prop_assert!(printable && token.expose() == trimmed),
                Err(reason) => proptest::prop_assert!(!printable && !reason.is_empty()),
            }
        }
    }

    #[test]
    fn token_file_encodings_and_reasons() {
        let utf16 = |text: &str, be: bool| {
            let mut b = if be {
                vec![0xFE, 0xFF]
            } else {
                vec![0xFF, 0xFE]
            };
            for u in text.encode_utf16() {
                b.extend(if be { u.to_be_bytes() } else { u.to_le_bytes() });
            }
            b
        };
        let read = |bytes: &[u8]| token_file_text(bytes).and_then(|t| Token::parse(&t));
        for bytes in [
            b"tok\n".to_vec(),
            b"\xEF\xBB\xBFtok\r\n".to_vec(),
            utf16("tok\r\n", false),
            utf16("tok", true),
        ] {
            assert_eq!(read(&bytes).unwrap().expose(), "tok", "{bytes:?}");
        }
        assert_eq!(read(b"").unwrap_err(), "it is empty");
        assert_eq!(read(b"\xEF\xBB\xBF \r\n").unwrap_err(), "it is empty");
        assert_eq!(read(b"a\nb").unwrap_err(), "it holds more than one line");
        assert_eq!(
            read(&utf16("a\r\nb", false)).unwrap_err(),
            "it holds more than one line"
        );
        assert_eq!(read("t\u{f6}k".as_bytes()).unwrap_err(), "it is not ASCII");
        assert_eq!(read(b"\xFF\x00tok").unwrap_err(), "it is not ASCII");
        assert_eq!(read(b"a\tb").unwrap_err(), "it holds a control character");
        // UTF-16 without its BOM: NUL between the letters.
        assert!(read(b"t\x00o\x00k\x00").unwrap_err().contains("NUL"));
        assert!(read(b"\xFF\xFEt\x00o").unwrap_err().contains("UTF-16"));
        assert!(
            read(&[0xFF, 0xFE, 0x00, 0xD8])
                .unwrap_err()
                .contains("UTF-16")
        );
    }

    #[test]
    fn a_token_file_too_large_to_be_one_is_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, vec![b'a'; TOKEN_FILE_MAX_BYTES as usize + 1]).unwrap();
        assert_eq!(read_token_file(&path), None);
        std::fs::write(&path, vec![b'a'; TOKEN_FILE_MAX_BYTES as usize]).unwrap();
        assert!(read_token_file(&path).is_some());
    }

    // ---- the refresh floor, with injected time ----------------------------------------

    /// A local token endpoint answering every request (on any path) with `answer(n)` for its
    /// `n`-th request (1-based), counting them.
    struct Endpoint {
        base: String,
        hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Endpoint {
        async fn start(answer: fn(usize) -> serde_json::Value) -> Endpoint {
            let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counter = hits.clone();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            let app = axum::Router::new().fallback(move || {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        answer(n).to_string(),
                    )
                }
            });
            tokio::spawn(async move { axum::serve(listener, app).await });
            Endpoint { base, hits }
        }

        fn hits(&self) -> usize {
            self.hits.load(Ordering::SeqCst)
        }
    }

    const MINUTE: Duration = Duration::from_secs(60);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A store credential whose GitHubApp token expired an hour before [`NOW`], refreshing at
    /// `endpoint`. The file's mtime is set an hour back too (it was written then).
    fn expired_github_store(endpoint: &Endpoint) -> (tempfile::TempDir, Credentials) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tokens")).unwrap();
        let path = dir.path().join("tokens/default.json");
        let doc = serde_json::json!({"access_token": "old", "expires_at": NOW.0 / 1000 - 3600});
        std::fs::write(&path, doc.to_string()).unwrap();
        set_mtime(&path, NOW.minus(secs(3600)));
        let c = Credentials::new(AuthConfig {
            config_dir: dir.path().into(),
            server_url: endpoint.base.clone(),
            ..AuthConfig::default()
        });
        (dir, c)
    }

    fn set_mtime(path: &std::path::Path, at: Ts) {
        let t = std::time::UNIX_EPOCH + Duration::from_millis(at.0 as u64);
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    #[tokio::test]
    async fn a_stored_token_with_a_short_or_unstated_life_is_renewed_a_minute_after_it_was_obtained()
     {
        fn missing(n: usize) -> serde_json::Value {
            serde_json::json!({"access_token": format!("t{n}")})
        }
        fn zero(n: usize) -> serde_json::Value {
            serde_json::json!({"access_token": format!("t{n}"), "expires_in": 0})
        }
        fn ten(n: usize) -> serde_json::Value {
            serde_json::json!({"access_token": format!("t{n}"), "expires_in": 10})
        }
        fn hour(n: usize) -> serde_json::Value {
            serde_json::json!({"access_token": format!("t{n}"), "expires_in": 3600})
        }
        for answer in [missing, zero, ten] {
            let endpoint = Endpoint::start(answer).await;
            let (dir, c) = expired_github_store(&endpoint);
            assert_eq!(c.bearer(NOW).await.unwrap().expose(), "t1");
            // The file is rewritten by the refresh (its mtime is the real now, later than
            // the injected one, so only the in-memory record of the refresh counts).
            for later in [1, 10, 30, 59] {
                let t = c.bearer(NOW.plus(secs(later))).await.unwrap();
                assert_eq!(t.expose(), "t1", "{later} s after the refresh");
            }
            assert_eq!(endpoint.hits(), 1);
            assert_eq!(c.bearer(NOW.plus(MINUTE)).await.unwrap().expose(), "t2");
            assert_eq!(endpoint.hits(), 2);
            // Another process (a fresh `Credentials`) reading the file another process just
            // wrote: the file's age is the floor.
            let path = dir.path().join("tokens/default.json");
            set_mtime(&path, NOW.plus(MINUTE));
            let other = Credentials::new(AuthConfig {
                config_dir: dir.path().into(),
                server_url: endpoint.base.clone(),
                ..AuthConfig::default()
            });
            let at = NOW.plus(MINUTE + secs(30));
            assert_eq!(other.bearer(at).await.unwrap().expose(), "t2");
            assert_eq!(
                endpoint.hits(),
                2,
                "a peer's fresh token is not refreshed again"
            );
        }
        // A long life: 30 s before its expiry, as before.
        let endpoint = Endpoint::start(hour).await;
        let (_dir, c) = expired_github_store(&endpoint);
        assert_eq!(c.bearer(NOW).await.unwrap().expose(), "t1");
        assert_eq!(c.bearer(NOW.plus(secs(3569))).await.unwrap().expose(), "t1");
        assert_eq!(c.bearer(NOW.plus(secs(3570))).await.unwrap().expose(), "t2");
    }

    #[tokio::test]
    async fn a_workos_token_with_a_short_life_is_renewed_a_minute_after_it_was_obtained() {
        fn answer(n: usize) -> serde_json::Value {
            use base64::Engine;
            let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            // Expires 10 s after the injected now, whichever refresh this is.
            let exp = (NOW.0 / 1000) + 10;
            let jwt = format!(
                "{}.{}.sig",
                e.encode(r#"{"alg":"RS256"}"#),
                e.encode(serde_json::json!({"exp": exp, "n": n}).to_string())
            );
            serde_json::json!({"access_token": jwt, "refresh_token": format!("rt{n}")})
        }
        let endpoint = Endpoint::start(answer).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tokens")).unwrap();
        let path = dir.path().join("tokens/default.json");
        let doc = serde_json::json!({"access_token": "old", "provider": "workos",
            "refresh_token": "rt0", "client_id": "client", "expires_at": NOW.0 / 1000 - 60});
        std::fs::write(&path, doc.to_string()).unwrap();
        set_mtime(&path, NOW.minus(secs(3600)));
        let c = Credentials::new(AuthConfig {
            config_dir: dir.path().into(),
            server_url: "https://kcap.example.com".into(),
            workos_authenticate_url: Some(format!("{}/authenticate", endpoint.base)),
            ..AuthConfig::default()
        });
        let first = c.bearer(NOW).await.unwrap();
        for later in [5, 20, 59] {
            assert_eq!(c.bearer(NOW.plus(secs(later))).await.unwrap(), first);
        }
        assert_eq!(
            endpoint.hits(),
            1,
            "each refresh spends a single-use refresh token"
        );
        assert_ne!(c.bearer(NOW.plus(MINUTE)).await.unwrap(), first);
        assert_eq!(endpoint.hits(), 2);
    }

    fn machine(endpoint: &Endpoint) -> Credentials {
        Credentials::new(AuthConfig {
            machine: Some(MachineCredential {
                client_id: "client".into(),
                client_secret: "secret".into(),
            }),
            machine_token_url: Some(format!("{}/oauth2/token", endpoint.base)),
            ..AuthConfig::default()
        })
    }

    #[tokio::test]
    async fn machine_token_renewed_60s_before_expiry() {
        fn hour(n: usize) -> serde_json::Value {
            serde_json::json!({"access_token": format!("m{n}"), "expires_in": 3600})
        }
        let endpoint = Endpoint::start(hour).await;
        let c = machine(&endpoint);
        assert_eq!(c.bearer(NOW).await.unwrap().expose(), "m1");
        assert_eq!(c.bearer(NOW.plus(secs(3539))).await.unwrap().expose(), "m1");
        assert_eq!(endpoint.hits(), 1);
        assert_eq!(c.bearer(NOW.plus(secs(3540))).await.unwrap().expose(), "m2");
        assert_eq!(endpoint.hits(), 2);
    }

    #[tokio::test]
    async fn a_machine_token_with_a_short_or_unstated_life_is_minted_once_a_minute() {
        fn missing(n: usize) -> serde_json::Value {
            serde_json::json!({"access_token": format!("m{n}")})
        }
        fn zero(n: usize) -> serde_json::Value {
            serde_json::json!({"access_token": format!("m{n}"), "expires_in": 0})
        }
        fn ten(n: usize) -> serde_json::Value {
            serde_json::json!({"access_token": format!("m{n}"), "expires_in": 10})
        }
        for answer in [missing, zero, ten] {
            let endpoint = Endpoint::start(answer).await;
            let c = machine(&endpoint);
            for later in [0, 1, 10, 30, 59] {
                let t = c.bearer(NOW.plus(secs(later))).await.unwrap();
                assert_eq!(t.expose(), "m1", "{later} s after the mint");
            }
            assert_eq!(endpoint.hits(), 1);
            assert_eq!(c.bearer(NOW.plus(MINUTE)).await.unwrap().expose(), "m2");
            assert_eq!(endpoint.hits(), 2);
        }
    }

    #[tokio::test]
    async fn refusals_of_the_newest_token_force_one_refresh_a_minute() {
        fn hour(n: usize) -> serde_json::Value {
            serde_json::json!({"access_token": format!("t{n}"), "expires_in": 3600})
        }
        // A stored GitHubApp token.
        let endpoint = Endpoint::start(hour).await;
        let (_dir, c) = expired_github_store(&endpoint);
        let t1 = c.bearer(NOW).await.unwrap();
        assert_eq!(endpoint.hits(), 1);
        // The first refusal forces a refresh, and its token is resent at once.
        let later = NOW.plus(secs(5));
        let t2 = c.rejected(Some(&t1), later).await.unwrap();
        assert_eq!(t2.expose(), "t2");
        // Refused again within the minute: nothing new, no refresh.
        for s in [6, 30, 64] {
            assert_eq!(c.rejected(Some(&t2), NOW.plus(secs(s))).await, None);
        }
        assert_eq!(endpoint.hits(), 2);
        // A refusal of an older token just moves to the newest one.
        assert_eq!(
            c.rejected(Some(&t1), NOW.plus(secs(66))).await,
            Some(t2.clone())
        );
        assert_eq!(endpoint.hits(), 2);
        assert_eq!(
            c.rejected(Some(&t2), NOW.plus(secs(65)))
                .await
                .unwrap()
                .expose(),
            "t3"
        );
        assert_eq!(endpoint.hits(), 3);

        // A machine token.
        let endpoint = Endpoint::start(hour).await;
        let c = machine(&endpoint);
        let m1 = c.bearer(NOW).await.unwrap();
        let m2 = c.rejected(Some(&m1), NOW.plus(secs(1))).await.unwrap();
        assert_ne!(m1, m2);
        for s in [2, 30, 60] {
            assert_eq!(c.rejected(Some(&m2), NOW.plus(secs(s))).await, None);
        }
        assert_eq!(endpoint.hits(), 2);
        assert!(c.rejected(Some(&m2), NOW.plus(secs(61))).await.is_some());
        assert_eq!(endpoint.hits(), 3);
    }

    #[tokio::test]
    async fn an_expired_token_whose_refresh_failed_is_not_sent() {
        // A stored token: the refresh endpoint answers without an access token.
        fn broken(_: usize) -> serde_json::Value {
            serde_json::json!({"error": "nope"})
        }
        let endpoint = Endpoint::start(broken).await;
        let (_dir, c) = expired_github_store(&endpoint);
        assert_eq!(c.bearer(NOW).await, None);
        assert_eq!(c.bearer(NOW.plus(secs(30))).await, None, "held: still none");
        assert_eq!(endpoint.hits(), 1);
        // Due 30 s before its expiry, which is when the kcap CLI counts it expired: a failed
        // refresh then leaves nothing to send.
        let endpoint = Endpoint::start(broken).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tokens")).unwrap();
        let path = dir.path().join("tokens/default.json");
        std::fs::write(
            &path,
            serde_json::json!({"access_token": "a", "expires_at": NOW.0 / 1000 + 20}).to_string(),
        )
        .unwrap();
        set_mtime(&path, NOW.minus(secs(3600)));
        let c = Credentials::new(AuthConfig {
            config_dir: dir.path().into(),
            server_url: endpoint.base.clone(),
            ..AuthConfig::default()
        });
        assert_eq!(c.bearer(NOW.minus(secs(11))).await.unwrap().expose(), "a");
        assert_eq!(endpoint.hits(), 0);
        assert_eq!(c.bearer(NOW.minus(secs(10))).await, None);
        assert_eq!(endpoint.hits(), 1);

        // A machine token: its mint fails once it is due; it is sent until it expires.
        fn once_then_broken(n: usize) -> serde_json::Value {
            if n == 1 {
                serde_json::json!({"access_token": "m1", "expires_in": 120})
            } else {
                serde_json::json!({})
            }
        }
        let endpoint = Endpoint::start(once_then_broken).await;
        let c = machine(&endpoint);
        assert_eq!(c.bearer(NOW).await.unwrap().expose(), "m1");
        assert_eq!(c.bearer(NOW.plus(secs(70))).await.unwrap().expose(), "m1");
        assert_eq!(endpoint.hits(), 2);
        assert_eq!(c.bearer(NOW.plus(secs(120))).await, None);
    }

    #[tokio::test]
    async fn a_refusal_adopts_a_token_another_process_stored() {
        let (dir, c) = store_with(serde_json::json!({"access_token": "a", "provider": "None"}));
        let sent = c.bearer(NOW).await.unwrap();
        std::fs::write(
            dir.path().join("tokens/default.json"),
            r#"{"access_token":"b","provider":"None"}"#,
        )
        .unwrap();
        assert_eq!(c.rejected(Some(&sent), NOW).await.unwrap().expose(), "b");
    }
}
