//! Authentication as the kcap CLI does it (`revision-2.md` R1): which bearer token a request
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
/// A machine token is minted again this long before it expires.
pub(crate) const MACHINE_RENEW_MARGIN: Duration = Duration::from_secs(30);

/// A bearer token. `Debug` and `Display` print `[REDACTED]`; only [`Token::expose`] gives the
/// value, for the `Authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A token from its text, trimmed; `None` when empty or when it holds characters an HTTP
    /// header cannot carry (a token file with two lines, say), which the server would never
    /// accept anyway.
    pub(crate) fn new(text: &str) -> Option<Token> {
        let text = text.trim();
        if text.is_empty() || text.bytes().any(|b| b.is_ascii_control() || b >= 0x80) {
            return None;
        }
        Some(Token(text.to_owned()))
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

impl Credentials {
    /// The credentials the settings name, for requests to `server_url` (`KCAP_URL`).
    pub(crate) fn from_settings(
        settings: &crate::config::Settings,
        server_url: &str,
    ) -> Credentials {
        Credentials::new(
            AuthConfig {
                env_token: settings.token.as_ref().map(|t| t.expose().to_owned()),
                token_file: settings.token_file.clone(),
                machine: settings.machine.clone(),
                config_dir: settings.config_dir.clone(),
                profile: settings.profile.clone(),
                server_url: server_url.to_owned(),
                ..AuthConfig::default()
            }
            .with_env_overrides(&crate::config::process_env),
        )
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
    Store(Store),
}

#[derive(Default)]
struct State {
    /// The token file's token, re-read after a refusal.
    file_token: Option<Token>,
    /// The machine token and its expiry.
    machine: Option<(Token, Ts)>,
    /// No refresh or mint before this, after one failed.
    hold_until: Option<Ts>,
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
                Source::Store(Store::new(config.config_dir.clone(), profile, active))
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

    /// The machine token, minted when there is none, it is within
    /// [`MACHINE_RENEW_MARGIN`] of expiry, or it is the one the server just refused.
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
        if let Some((token, _)) = &state.machine
            && refused.is_some_and(|r| r == token)
        {
            state.machine = None;
        }
        if let Some((token, expires_at)) = &state.machine
            && now < expires_at.minus(MACHINE_RENEW_MARGIN)
        {
            return Some(token.clone());
        }
        if state.hold_until.is_some_and(|t| now < t) {
            return state.machine.as_ref().map(|(t, _)| t.clone());
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
                .map(|t| (t, m.expires_at))
                .ok_or_else(|| "the token endpoint answered an unusable access_token".to_owned())
        }) {
            Ok((token, expires_at)) => {
                tracing::info!(event = "machine_token_minted", client_id = %credential.client_id, expires_at = %expires_at, "minted a machine token for {}", credential.client_id);
                state.machine = Some((token.clone(), expires_at));
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
                None
            }
        }
    }

    /// The store's token for this server: withheld when bound elsewhere; refreshed under the
    /// lock when expired, or when `refused` is still what the store holds.
    async fn store_token(
        &self,
        store: &Store,
        state: &mut State,
        now: Ts,
        refused: Option<&Token>,
    ) -> Option<Token> {
        let entry = store.load()?;
        // Checked on the snapshot, before any refresh: refreshing a token that will not be
        // sent would spend a single-use refresh token for nothing.
        if !self.bound_here(&entry, state) {
            return None;
        }
        let token = entry.access_token()?;
        let due = match refused {
            Some(refused) => *refused == token,
            None => entry.is_expired(now),
        };
        if !due {
            return Some(token);
        }
        if !entry.refreshable() || state.hold_until.is_some_and(|t| now < t) {
            // Nothing better: the server judges this token (a refusal retries later).
            return Some(token);
        }
        match self.refresh_under_lock(store, entry, now, refused).await {
            Ok(fresh) => {
                state.hold_until = None;
                state.failure_logged = false;
                if !self.bound_here(&fresh, state) {
                    return None;
                }
                fresh.access_token()
            }
            Err(why) => {
                self.failed(
                    state,
                    now,
                    "token_refresh_failed",
                    &format!(
                        "failed to refresh the kcap token of profile {}: {why}; keeping every line and retrying",
                        store.profile()
                    ),
                );
                Some(token)
            }
        }
    }

    /// The kcap CLI's protocol: lock, re-read, adopt a token another process rotated, refresh
    /// only if the stored token is still the expired or refused one, save, unlock.
    async fn refresh_under_lock(
        &self,
        store: &Store,
        current: Entry,
        now: Ts,
        refused: Option<&Token>,
    ) -> Result<Entry, String> {
        let needs = |e: &Entry| match refused {
            Some(refused) => e.access_token_text() == Some(refused.expose()),
            None => e.is_expired(now),
        };
        let lock = store
            .lock()
            .await
            .map_err(|e| format!("failed to lock {}: {e}", store.lock_path().display()))?;
        let Some(_lock) = lock else {
            // Another process held the lock throughout: use what it saved, if it is good.
            return match store.load() {
                Some(latest) if !needs(&latest) => Ok(latest),
                _ => Err(format!(
                    "{} stayed locked for {:?}",
                    store.lock_path().display(),
                    store::LOCK_WAIT
                )),
            };
        };
        let latest = store.load_profile_file().unwrap_or(current.clone());
        if latest.access_token_text() != current.access_token_text() && !latest.is_expired(now) {
            tracing::info!(
                event = "token_adopted",
                profile = store.profile(),
                "using the kcap token another process refreshed"
            );
            return Ok(latest);
        }
        if !needs(&latest) {
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
        let mut fresh = latest.clone();
        fresh.legacy = false;
        let doc = &mut fresh.doc;
        doc.insert("access_token".into(), minted.access_token.into());
        doc.insert(
            "expires_at".into(),
            store::format_expires_at(minted.expires_at).into(),
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
        store
            .save(&fresh.doc)
            .map_err(|e| format!("failed to save {}: {e}", store.path().display()))?;
        tracing::info!(event = "token_refreshed", profile = store.profile(), provider = latest.provider(), expires_at = %minted.expires_at, "refreshed the kcap token of profile {}", store.profile());
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

fn read_token_file(path: &std::path::Path) -> Option<Token> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let token = Token::new(&text);
            if token.is_none() {
                tracing::warn!(path = %path.display(), "ignoring KCAP_TOKEN_FILE {}: it is empty or holds more than one line", path.display());
            }
            token
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), "failed to read KCAP_TOKEN_FILE {}: {e}", path.display());
            None
        }
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
    async fn an_unrefreshable_expired_token_is_still_offered_and_a_refusal_of_it_gives_nothing_new()
    {
        let (_d, c) = store_with(serde_json::json!({
            "access_token": "a", "provider": "None", "expires_at": NOW.0 / 1000 - 60
        }));
        let t = c.bearer(NOW).await.unwrap();
        assert_eq!(t.expose(), "a");
        assert_eq!(c.rejected(Some(&t), NOW).await, None);
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
