//! The token endpoints: refreshing a store token (`GitHubApp` through the kcap server,
//! `workos` through WorkOS) and minting a machine token (`client_credentials`).
//!
//! Each returns what the endpoint answered or why it failed. A failure text names the
//! endpoint and the status, never a token, a secret or the response body (a token endpoint's
//! error body may echo the request, which carries the credential).

use std::time::Duration;

use base64::Engine;
use reqwest::Url;
use serde::Deserialize;

use crate::time::Ts;

/// Deadline of one token request (connect, send, answer).
const DEADLINE: Duration = Duration::from_secs(15);
/// WorkOS access tokens carry their expiry in the JWT; one that does not is given this long
/// (the kcap CLI's fallback).
const JWT_FALLBACK_LIFETIME: Duration = Duration::from_secs(5 * 60);
/// An answer whose `expires_in` is missing, zero or negative is taken to live this long
/// (docs/behaviour.md S4.2): not forever, and not "expired at once", which would make every
/// request refresh again.
pub(crate) const UNSTATED_LIFETIME: Duration = Duration::from_secs(60);

/// WorkOS's authenticate endpoint, where the kcap CLI refreshes `workos` tokens.
pub(crate) const WORKOS_AUTHENTICATE_URL: &str =
    "https://api.workos.com/user_management/authenticate";
/// Undocumented test override of [`WORKOS_AUTHENTICATE_URL`] (https, or http on loopback).
pub(crate) const WORKOS_AUTHENTICATE_URL_VAR: &str = "KCAP_WORKOS_AUTHENTICATE_URL";
/// kcap's machine token endpoint (the kcap CLI's `MachineAuth.DefaultTokenUrl`).
pub(crate) const MACHINE_TOKEN_URL: &str = "https://signin.kcap.ai/oauth2/token";
/// The kcap CLI's override of [`MACHINE_TOKEN_URL`] (https, or http on loopback).
pub(crate) const MACHINE_TOKEN_URL_VAR: &str = "KCAP_WORKOS_TOKEN_URL";

/// A new access token and when it expires.
#[derive(Debug)]
pub(crate) struct Minted {
    pub access_token: String,
    pub expires: Expiry,
    /// `workos` rotates its single-use refresh token: the new one, when sent.
    pub refresh_token: Option<String>,
}

/// When a minted token expires: a lifetime counted from when it was obtained (the caller's
/// clock, so tests can inject it), or an instant the token itself names (a JWT's `exp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    After(Duration),
    At(Ts),
}

impl Minted {
    pub(crate) fn expires_at(&self, obtained: Ts) -> Ts {
        match self.expires {
            Expiry::After(d) => obtained.plus(d),
            Expiry::At(at) => at,
        }
    }
}

/// The lifetime an answer's `expires_in` states, [`UNSTATED_LIFETIME`] when it states none.
fn lifetime(expires_in: Option<i64>) -> Duration {
    match expires_in {
        Some(s) if s > 0 => Duration::from_secs(s as u64),
        _ => UNSTATED_LIFETIME,
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    expires_in: Option<i64>,
    #[serde(default)]
    refresh_token: Option<String>,
}

/// `GitHubApp`: `POST {base}/auth/refresh` with `{"access_token": ...}`; the answer's
/// `access_token` lives `expires_in` seconds.
pub(crate) async fn github_app(base: &str, access_token: &str) -> Result<Minted, String> {
    let url = format!("{}/auth/refresh", base.trim_end_matches('/'));
    let body = serde_json::json!({ "access_token": access_token }).to_string();
    let answer = post(&url, "application/json", body).await?;
    let token = answer
        .access_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("{} answered without an access_token", shown(&url)))?;
    Ok(Minted {
        access_token: token,
        expires: Expiry::After(lifetime(answer.expires_in)),
        refresh_token: None,
    })
}

/// `workos`: the form `grant_type=refresh_token`, `client_id`, `refresh_token` to `url`;
/// the answer's `access_token` expires at its JWT `exp`, and it may carry a new
/// `refresh_token`.
pub(crate) async fn workos(
    url: &Url,
    client_id: &str,
    refresh_token: &str,
) -> Result<Minted, String> {
    let form = form(&[
        ("grant_type", "refresh_token"),
        ("client_id", client_id),
        ("refresh_token", refresh_token),
    ]);
    let answer = post(url.as_str(), "application/x-www-form-urlencoded", form).await?;
    let token = answer
        .access_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("{} answered without an access_token", shown(url.as_str())))?;
    Ok(Minted {
        expires: jwt_expiry(&token).map_or(Expiry::After(JWT_FALLBACK_LIFETIME), Expiry::At),
        access_token: token,
        refresh_token: answer.refresh_token.filter(|t| !t.is_empty()),
    })
}

/// A machine token: `grant_type=client_credentials` with the client id and secret.
pub(crate) async fn client_credentials(
    url: &Url,
    client_id: &str,
    client_secret: &str,
) -> Result<Minted, String> {
    let form = form(&[
        ("grant_type", "client_credentials"),
        ("client_id", client_id),
        ("client_secret", client_secret),
    ]);
    let answer = post(url.as_str(), "application/x-www-form-urlencoded", form).await?;
    let token = answer
        .access_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("{} answered without an access_token", shown(url.as_str())))?;
    Ok(Minted {
        access_token: token,
        expires: Expiry::After(lifetime(answer.expires_in)),
        refresh_token: None,
    })
}

/// The `exp` claim of a JWT, read without checking the signature (the server checks it).
pub(crate) fn jwt_expiry(token: &str) -> Option<Ts> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = claims.get("exp")?.as_i64()?;
    Some(Ts(exp.checked_mul(1000)?))
}

fn form(pairs: &[(&str, &str)]) -> String {
    let mut url = Url::parse("http://form.invalid/").expect("a constant URL parses");
    url.query_pairs_mut().extend_pairs(pairs);
    url.query().unwrap_or("").to_owned()
}

async fn post(url: &str, content_type: &str, body: String) -> Result<TokenAnswer, String> {
    let target = Url::parse(url).map_err(|e| format!("failed to use {}: {e}", shown(url)))?;
    let http = crate::ship::http::http_client(&target)
        .map_err(|e| format!("failed to build the HTTP client: {e:#}"))?;
    let response = http
        .post(target)
        .timeout(DEADLINE)
        .header(reqwest::header::CONTENT_TYPE, content_type)
        .header(reqwest::header::ACCEPT, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| {
            format!(
                "failed to reach {}: {}",
                shown(url),
                crate::ship::http::describe_transport(&e, DEADLINE)
            )
        })?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{} answered HTTP {}", shown(url), status.as_u16()));
    }
    let bytes = response
        .bytes()
        .await
        .map_err(|e| format!("failed to read the answer of {}: {e}", shown(url)))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} answered something unreadable: {e}", shown(url)))
}

/// A URL for a log line: without user info, query or fragment.
fn shown(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "an unparsable URL".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &str) -> String {
        let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.sig",
            e.encode(r#"{"alg":"RS256"}"#),
            e.encode(claims)
        )
    }

    #[test]
    fn jwt_exp_is_read_without_the_signature() {
        assert_eq!(
            jwt_expiry(&jwt(r#"{"exp":1785000000}"#)),
            Some(Ts(1_785_000_000_000))
        );
        assert_eq!(jwt_expiry(&jwt(r#"{"sub":"x"}"#)), None);
        assert_eq!(jwt_expiry("not-a-jwt"), None);
        assert_eq!(jwt_expiry("a.!!!.c"), None);
    }

    #[test]
    fn an_unstated_lifetime_is_a_minute() {
        assert_eq!(lifetime(None), UNSTATED_LIFETIME);
        assert_eq!(lifetime(Some(0)), UNSTATED_LIFETIME);
        assert_eq!(lifetime(Some(-5)), UNSTATED_LIFETIME);
        assert_eq!(lifetime(Some(10)), Duration::from_secs(10));
        assert_eq!(lifetime(Some(3600)), Duration::from_secs(3600));
    }

    #[test]
    fn forms_are_url_encoded() {
        assert_eq!(
            form(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", "a+b/c=&d")
            ]),
            "grant_type=refresh_token&refresh_token=a%2Bb%2Fc%3D%26d"
        );
    }

    #[test]
    fn shown_urls_carry_no_secret() {
        assert_eq!(
            shown("https://u:pw@h.example/t?client_secret=x#f"),
            "https://h.example/t"
        );
    }
}
