//! Finding the bearer token, in the order of `spec/server-api.md`: `KCAP_TOKEN`, the file
//! named by `KCAP_TOKEN_FILE`, then the kcap CLI's own token store.
//!
//! The watcher only ever *reads* the store. Refresh tokens there are single-use and belong to
//! the kcap CLI: refreshing one here would invalidate the CLI's copy and log the user out. So
//! an expired store token is simply not used, and the caller re-reads the store (at most every
//! 60 s, after a `401`/`403`) until the CLI has refreshed it on its next hook.
//!
//! `expires_at` in the store is accepted as RFC 3339 (with an offset; without one it is read
//! as UTC), or as a Unix time number (or numeric string): seconds when below 10^11 (which
//! reaches the year 5138), else milliseconds. A missing or unreadable `expires_at` does not
//! disqualify the token: the server is the judge, and a wrong guess costs one `401`.
//!
//! The token value never reaches a log or an error message: [`Token`] prints as `[REDACTED]`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::time::Ts;

/// A store token this close to its expiry is treated as already expired: a request sent with
/// it could arrive after it lapsed.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// A bearer token. `Debug` and `Display` print `[REDACTED]`; only [`Token::expose`] gives the
/// value, for the `Authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A token from its text, trimmed; `None` when empty or when it holds characters an HTTP
    /// header cannot carry (a token file with two lines, say), which the server would never
    /// accept anyway.
    pub fn new(text: &str) -> Option<Token> {
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

/// Where the current token came from, for logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenOrigin {
    /// `KCAP_TOKEN`.
    Env,
    /// The file named by `KCAP_TOKEN_FILE`.
    File(PathBuf),
    /// The kcap CLI's token store file.
    Store(PathBuf),
    /// No token found: requests go without `Authorization`.
    None,
}

impl fmt::Display for TokenOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenOrigin::Env => f.write_str("KCAP_TOKEN"),
            TokenOrigin::File(p) => write!(f, "KCAP_TOKEN_FILE {}", p.display()),
            TokenOrigin::Store(p) => write!(f, "the kcap token store {}", p.display()),
            TokenOrigin::None => f.write_str("no token"),
        }
    }
}

/// Where the kcap CLI keeps its tokens.
#[derive(Clone, Debug)]
struct Store {
    config_dir: PathBuf,
    profile: String,
    server_url: String,
}

/// Resolves the bearer token and keeps the current one.
#[derive(Debug)]
pub struct TokenSource {
    env_token: Option<Token>,
    token_file: Option<PathBuf>,
    store: Option<Store>,
    current: Option<Token>,
    origin: TokenOrigin,
}

impl TokenSource {
    /// `env_token` is `KCAP_TOKEN`, `token_file` is `KCAP_TOKEN_FILE`, `config_dir` is
    /// `<config>`, `profile` is `KCAP_PROFILE` (empty means `default`), `server_url` is
    /// `KCAP_URL`. Reads the file and store once, now.
    pub fn new(
        env_token: Option<String>,
        token_file: Option<PathBuf>,
        config_dir: PathBuf,
        profile: String,
        server_url: String,
    ) -> TokenSource {
        let profile = if profile.trim().is_empty() {
            "default".to_owned()
        } else {
            profile
        };
        let mut source = TokenSource {
            env_token: env_token.as_deref().and_then(Token::new),
            token_file,
            store: Some(Store {
                config_dir,
                profile,
                server_url,
            }),
            current: None,
            origin: TokenOrigin::None,
        };
        source.reload(Ts::now());
        source
    }

    /// A source that always answers `token` and reads no file (tests, and callers that have
    /// resolved the token elsewhere).
    pub fn fixed(token: Option<String>) -> TokenSource {
        let token = token.as_deref().and_then(Token::new);
        let origin = if token.is_some() {
            TokenOrigin::Env
        } else {
            TokenOrigin::None
        };
        TokenSource {
            env_token: token.clone(),
            token_file: None,
            store: None,
            current: token,
            origin,
        }
    }

    /// The token to send now, if any. Expiry is judged when the store is read (at start and
    /// on [`TokenSource::reload`]).
    pub fn current(&self) -> Option<Token> {
        self.current.clone()
    }

    /// Where [`TokenSource::current`] came from.
    pub fn origin(&self) -> &TokenOrigin {
        &self.origin
    }

    /// Re-reads the token file and the store (after a `401`/`403`; the caller paces it to at
    /// most once a minute). `now` decides which store tokens are expired.
    pub fn reload(&mut self, now: Ts) {
        let (token, origin) = self.resolve(now);
        if origin != self.origin || token != self.current {
            tracing::info!(from = %origin, "using bearer token from {origin}");
        }
        self.current = token;
        self.origin = origin;
    }

    fn resolve(&self, now: Ts) -> (Option<Token>, TokenOrigin) {
        if let Some(token) = &self.env_token {
            return (Some(token.clone()), TokenOrigin::Env);
        }
        if let Some(path) = &self.token_file {
            match std::fs::read_to_string(path) {
                Ok(text) => match Token::new(&text) {
                    Some(token) => return (Some(token), TokenOrigin::File(path.clone())),
                    None => tracing::warn!(
                        path = %path.display(),
                        "ignoring KCAP_TOKEN_FILE {}: it is empty or holds more than one line",
                        path.display()
                    ),
                },
                Err(e) => tracing::warn!(
                    path = %path.display(),
                    "failed to read KCAP_TOKEN_FILE {}: {e}",
                    path.display()
                ),
            }
        }
        if let Some(store) = &self.store
            && let Some((token, path)) = store.lookup(now)
        {
            return (Some(token), TokenOrigin::Store(path));
        }
        (None, TokenOrigin::None)
    }
}

impl Store {
    /// The profile file, or the single file of older installs when there is no profile file.
    fn lookup(&self, now: Ts) -> Option<(Token, PathBuf)> {
        let profile_file = self
            .config_dir
            .join("tokens")
            .join(format!("{}.json", self.profile));
        match std::fs::read(&profile_file) {
            Ok(bytes) => return self.accept(&profile_file, &bytes, now),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(
                    "failed to read the kcap token store {}: {e}",
                    profile_file.display()
                );
                return None;
            }
        }
        let legacy_file = self.config_dir.join("tokens.json");
        match std::fs::read(&legacy_file) {
            Ok(bytes) => self.accept(&legacy_file, &bytes, now),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(
                    "failed to read the kcap token store {}: {e}",
                    legacy_file.display()
                );
                None
            }
        }
    }

    fn accept(&self, path: &Path, bytes: &[u8], now: Ts) -> Option<(Token, PathBuf)> {
        let entry: StoreEntry = match serde_json::from_slice(bytes) {
            Ok(entry) => entry,
            Err(e) => {
                // serde_json's message names a position and an expected type, never the
                // text it read, so the token cannot leak through it.
                tracing::warn!(
                    "failed to parse the kcap token store {}: {e}",
                    path.display()
                );
                return None;
            }
        };
        match store_token(&entry, &self.server_url, now) {
            Ok(token) => Some((token, path.to_owned())),
            Err(why) => {
                tracing::debug!("not using the kcap token store {}: {why}", path.display());
                None
            }
        }
    }
}

/// The fields of a kcap CLI token store file this watcher reads (it has others, such as the
/// refresh token, which are deliberately not even parsed).
#[derive(Deserialize)]
struct StoreEntry {
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    server_url: Option<String>,
    #[serde(default)]
    expires_at: Option<serde_json::Value>,
}

/// The store's token when it is meant for `server_url` and still valid at `now`; otherwise
/// why not (for a debug log; never the token).
fn store_token(entry: &StoreEntry, server_url: &str, now: Ts) -> Result<Token, String> {
    let token = entry
        .access_token
        .as_deref()
        .and_then(Token::new)
        .ok_or("it holds no access_token")?;
    if let Some(url) = &entry.server_url
        && url.trim_end_matches('/') != server_url.trim_end_matches('/')
    {
        return Err(format!("it is for {url}, not {server_url}"));
    }
    if let Some(expires_at) = entry.expires_at.as_ref().and_then(parse_expires_at)
        && expires_at.since(now) <= crate::time::dur_ms(EXPIRY_MARGIN)
    {
        return Err(format!("its token expires at {expires_at}"));
    }
    Ok(token)
}

/// Unix times below this are seconds, above it milliseconds (10^11 s is the year 5138;
/// 10^11 ms is 1973, before any token store existed).
const SECONDS_OR_MILLIS: f64 = 1.0e11;

/// `expires_at` as a time; `None` when absent or unreadable (see the module docs).
fn parse_expires_at(value: &serde_json::Value) -> Option<Ts> {
    match value {
        serde_json::Value::Number(n) => unix_time(n.as_f64()?),
        serde_json::Value::String(s) => {
            let s = s.trim();
            if let Ok(n) = s.parse::<f64>() {
                return unix_time(n);
            }
            Ts::parse_rfc3339(s).or_else(|| {
                // .NET writes a UTC `DateTime` without an offset.
                let civil: jiff::civil::DateTime = s.parse().ok()?;
                let ts = civil.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
                Some(Ts(ts.as_millisecond()))
            })
        }
        _ => None,
    }
}

fn unix_time(n: f64) -> Option<Ts> {
    if !n.is_finite() {
        return None;
    }
    if n.abs() < SECONDS_OR_MILLIS {
        Some(Ts((n * 1000.0).round() as i64))
    } else {
        // Saturating float-to-int cast: absurd values become far-future or far-past times.
        Some(Ts(n.round() as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(v: serde_json::Value) -> StoreEntry {
        serde_json::from_value(v).unwrap()
    }

    const NOW: Ts = Ts(1_785_000_000_000);

    #[test]
    fn token_never_prints() {
        let t = Token::new("s3cr3t-value").unwrap();
        assert_eq!(format!("{t}"), "[REDACTED]");
        assert_eq!(format!("{t:?}"), "[REDACTED]");
        assert_eq!(format!("{:?}", Some(t.clone())), "Some([REDACTED])");
        assert_eq!(t.expose(), "s3cr3t-value");
        let source = TokenSource::fixed(Some("s3cr3t-value".into()));
        assert!(!format!("{source:?}").contains("s3cr3t"));
    }

    #[test]
    fn token_text_is_trimmed_and_must_fit_a_header() {
        assert_eq!(Token::new("  abc\n").unwrap().expose(), "abc");
        assert!(Token::new("  \n").is_none());
        assert!(Token::new("abc\ndef").is_none());
    }

    #[test]
    fn expires_at_formats() {
        let secs = NOW.0 / 1000;
        assert_eq!(parse_expires_at(&json!(secs)), Some(NOW));
        assert_eq!(parse_expires_at(&json!(NOW.0)), Some(NOW));
        assert_eq!(parse_expires_at(&json!(secs.to_string())), Some(NOW));
        assert_eq!(
            parse_expires_at(&json!(secs as f64 + 0.5)),
            Some(NOW.plus(Duration::from_millis(500)))
        );
        assert_eq!(parse_expires_at(&json!(NOW.rfc3339())), Some(NOW));
        assert_eq!(
            parse_expires_at(&json!("2026-07-28T16:19:11.250+02:00")),
            Ts::parse_rfc3339("2026-07-28T14:19:11.250Z")
        );
        assert_eq!(
            parse_expires_at(&json!("2026-07-28T16:19:11.250")),
            Ts::parse_rfc3339("2026-07-28T16:19:11.250Z")
        );
        assert_eq!(parse_expires_at(&json!("soon")), None);
        assert_eq!(parse_expires_at(&json!(null)), None);
    }

    #[test]
    fn store_token_rules() {
        let url = "https://kcap.example.com";
        let in_a_minute = NOW.plus(Duration::from_secs(60)).rfc3339();
        let in_20s = NOW.plus(Duration::from_secs(20)).rfc3339();

        let ok = entry(json!({"access_token": "a", "server_url": url, "expires_at": in_a_minute}));
        assert_eq!(store_token(&ok, url, NOW).unwrap().expose(), "a");
        // Trailing slashes on either side do not matter.
        assert!(store_token(&ok, "https://kcap.example.com/", NOW).is_ok());
        let slash = entry(json!({"access_token": "a", "server_url": "https://kcap.example.com/"}));
        assert!(store_token(&slash, url, NOW).is_ok());
        // No server_url, no expires_at: used.
        assert!(store_token(&entry(json!({"access_token": "a"})), url, NOW).is_ok());

        let other = entry(json!({"access_token": "a", "server_url": "https://other.example.com"}));
        assert!(store_token(&other, url, NOW).is_err());
        let nearly = entry(json!({"access_token": "a", "expires_at": in_20s}));
        assert!(store_token(&nearly, url, NOW).is_err());
        let expired = entry(json!({"access_token": "a", "expires_at": NOW.0 / 1000 - 5}));
        assert!(store_token(&expired, url, NOW).is_err());
        assert!(store_token(&entry(json!({"server_url": url})), url, NOW).is_err());
    }

    #[test]
    fn rejection_reasons_never_hold_the_token() {
        let e = entry(
            json!({"access_token": "tok-123456", "server_url": "https://x", "expires_at": 1}),
        );
        let why = store_token(&e, "https://y", NOW).unwrap_err();
        assert!(!why.contains("tok-123456"), "{why}");
    }
}
