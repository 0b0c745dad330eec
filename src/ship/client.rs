//! The kcap HTTP API (docs/behaviour.md A1-A5): the watermark query, transcript batches and the
//! lifecycle hooks, and the exact JSON bodies of those hooks.
//!
//! This module only speaks HTTP and sorts answers into what the caller must do next
//! ([`Failure`]); it never retries or sleeps. The runtime loop owns the retries
//! (with [`super::backoff::Backoff`]), so a slow server never blocks it.
//!
//! Rules that shape the code:
//! - A 2xx only counts once its whole response has arrived: a connection cut mid-response is
//!   a transient failure and the batch is sent again (resending is harmless, losing is not).
//! - Redirects are not followed: a redirected `POST` would turn into a `GET` and lose its
//!   body. A 3xx is reported as transient so nothing is dropped and the log shows it.
//! - The bearer token never appears in an error or log text, even if a server echoes it.
//! - A `401` is answered once, here: [`Credentials::rejected`] names a better token (one
//!   another process rotated in, or a refreshed one) and the request is resent with it at
//!   once, exactly one more time (the kcap CLI's `UnauthorizedRetryHandler`). A second
//!   refusal reaches the caller, which retries later.
//! - TLS trusts the bundled roots and the operating system's store (with `SSL_CERT_FILE` and
//!   `SSL_CERT_DIR`); proxies come from the environment, except that loopback is never
//!   proxied (`super::http`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};

use super::auth::{Credentials, Token, TokenOrigin};
use super::http::{describe, describe_transport, http_client};
use super::protocol::parse_last_line;
pub use super::protocol::{
    Failure, ROUTE_SESSION_END, ROUTE_SUBAGENT_START, ROUTE_SUBAGENT_STOP, SessionEndReason,
    Watermark, session_end_body, subagent_start_body, subagent_stop_body,
};
pub(crate) use super::protocol::{Hook, ROUTE_TRANSCRIPT, parse_retry_after};
use crate::time::Ts;

/// At most this much of an error response's body is kept for the log.
const SNIPPET_BYTES: usize = 512;
/// At most this much of any response body is held in memory (the rest is read and dropped,
/// so a 2xx is only believed once complete).
const KEEP_BYTES: usize = 64 * 1024;

/// Overall deadline of each kind of request (connect + send + read), docs/behaviour.md
/// A5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    pub watermark: Duration,
    pub transcript: Duration,
    pub hook: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            watermark: Duration::from_secs(10),
            transcript: Duration::from_secs(30),
            hook: Duration::from_secs(5),
        }
    }
}

/// The kcap HTTP client. Cloning is cheap (connection pool and credentials are shared), so
/// each spawned request task gets its own clone.
#[derive(Clone, Debug)]
pub struct KcapClient {
    http: reqwest::Client,
    base: Url,
    /// `POST /hooks/transcript`'s URL and its name in messages, built once: one is posted per
    /// shipped batch, a line or a few while following.
    transcript: Arc<(Url, String)>,
    credentials: Arc<Credentials>,
    deadlines: Deadlines,
}

impl KcapClient {
    /// `base` is `KCAP_URL` (a path prefix is kept; a trailing slash does not matter).
    pub fn new(base: &str, credentials: Credentials, deadlines: Deadlines) -> anyhow::Result<Self> {
        let base = Url::parse(base.trim())
            .with_context(|| format!("failed to parse KCAP_URL {:?}", base.trim()))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            bail!("failed to use KCAP_URL {base}: it must be an http:// or https:// URL");
        }
        let http = http_client(&base)?;
        let transcript = endpoint(&base, &route_segments(ROUTE_TRANSCRIPT));
        let what = post_what(&transcript);
        Ok(KcapClient {
            http,
            base,
            transcript: Arc::new((transcript, what)),
            credentials: Arc::new(credentials),
            deadlines,
        })
    }

    /// After `Unauthorized` (the caller paces it): the token file is read again before the
    /// next request. The store is read before every request anyway.
    pub(crate) fn reload_token(&self, _now: Ts) {
        self.credentials.reload();
    }

    /// Where the token in use comes from (for logs; never the token).
    pub fn token_origin(&self) -> TokenOrigin {
        self.credentials.origin()
    }

    /// `GET /api/sessions/{session_id}/last-line?agentId={agent_id}`; `agent_id` is `None`
    /// for a session watcher.
    pub async fn watermark(
        &self,
        session_id: &str,
        agent_id: Option<&str>,
    ) -> Result<Watermark, Failure> {
        let mut url = self.endpoint(&["api", "sessions", session_id, "last-line"]);
        if let Some(agent_id) = agent_id {
            url.query_pairs_mut().append_pair("agentId", agent_id);
        }
        let what = format!("read the watermark of {}", url.path());
        let answer = self
            .exchange(Method::GET, url, None, self.deadlines.watermark, &what)
            .await;
        let Answer::Http { status, body, .. } = &answer else {
            return Err(watermark_failure(classify(answer, &what)));
        };
        match (*status, body) {
            (204, Ok(_)) => Ok(Watermark::Empty),
            (404, _) => Ok(Watermark::NotFound),
            (200, Ok(bytes)) => parse_last_line(bytes).map_err(|shape| Failure::Transient {
                status: Some(200),
                retry_after: None,
                error: format!(
                    "failed to {what}: the answer has no numeric or null last_line_number ({shape})"
                ),
            }),
            _ => Err(watermark_failure(classify(answer, &what))),
        }
    }

    /// `POST /hooks/transcript` with one serialised [`super::TranscriptBatch`].
    pub async fn post_transcript(&self, batch_json: String) -> Result<(), Failure> {
        let result = self
            .post(ROUTE_TRANSCRIPT, batch_json, self.deadlines.transcript)
            .await;
        match result {
            // No kcap server has no transcript route: the base URL's path is wrong (a proxy
            // prefix missing or doubled), which no retry of these lines can fix by itself.
            Err(Failure::Rejected {
                status: status @ (404 | 405),
                ..
            }) => Err(Failure::WrongPath {
                status,
                url: crate::url_display::redacted(
                    self.endpoint(&["hooks", ROUTE_TRANSCRIPT]).as_str(),
                ),
            }),
            other => other,
        }
    }

    /// `POST /hooks/{route}` (`subagent-stop`, `subagent-start`, `session-end/codex`).
    pub async fn post_hook(&self, route: &str, body_json: String) -> Result<(), Failure> {
        self.post(route, body_json, self.deadlines.hook).await
    }

    /// `POST /hooks/{route}` for one lifecycle request.
    pub(crate) async fn post_lifecycle(&self, hook: &Hook) -> Result<(), Failure> {
        self.post_hook(hook.route(), hook.body().to_owned()).await
    }

    async fn post(&self, route: &str, body: String, deadline: Duration) -> Result<(), Failure> {
        if route == ROUTE_TRANSCRIPT {
            let (url, what) = &*self.transcript;
            let answer = self
                .exchange(Method::POST, url.clone(), Some(body), deadline, what)
                .await;
            return classify(answer, what);
        }
        let url = endpoint(&self.base, &route_segments(route));
        let what = post_what(&url);
        let answer = self
            .exchange(Method::POST, url, Some(body), deadline, &what)
            .await;
        classify(answer, &what)
    }

    fn endpoint(&self, segments: &[&str]) -> Url {
        endpoint(&self.base, segments)
    }

    /// One request with its deadline, the whole response body read (bounded in memory); after
    /// a `401`, sent once more when the credentials have a better token.
    async fn exchange(
        &self,
        method: Method,
        url: Url,
        body: Option<String>,
        deadline: Duration,
        what: &str,
    ) -> Answer {
        let body = body.map(bytes::Bytes::from);
        let token = self.credentials.bearer(Ts::now()).await;
        let answer = self
            .send(
                method.clone(),
                url.clone(),
                body.clone(),
                deadline,
                what,
                token,
            )
            .await;
        let Answer::Http {
            status: 401,
            token: sent,
            ..
        } = &answer
        else {
            return answer;
        };
        match self.credentials.rejected(sent.as_ref(), Ts::now()).await {
            Some(fresh) => {
                self.send(method, url, body, deadline, what, Some(fresh))
                    .await
            }
            None => answer,
        }
    }

    async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<bytes::Bytes>,
        deadline: Duration,
        what: &str,
        token: Option<Token>,
    ) -> Answer {
        let mut request = self.http.request(method, url).timeout(deadline);
        if let Some(header) = token.as_ref().and_then(bearer) {
            request = request.header(AUTHORIZATION, header);
        }
        if let Some(body) = body {
            // A `String` body is sent with its Content-Length, uncompressed.
            request = request.header(CONTENT_TYPE, "application/json").body(body);
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                return Answer::Transport(scrub(
                    format!("failed to {what}: {}", describe_transport(&e, deadline)),
                    token.as_ref(),
                ));
            }
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, Ts::now()));
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut kept = Vec::new();
        let body = loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = KEEP_BYTES.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                Ok(None) => break Ok(kept),
                Err(e) => {
                    break Err(scrub(
                        format!(
                            "failed to {what}: HTTP {status} but the response was cut short: {}",
                            describe(&e, deadline)
                        ),
                        token.as_ref(),
                    ));
                }
            }
        };
        Answer::Http {
            status,
            retry_after,
            location,
            body,
            token,
        }
    }
}

/// `/hooks/{route}`'s path segments.
fn route_segments(route: &str) -> Vec<&str> {
    let mut segments = vec!["hooks"];
    segments.extend(route.split('/').filter(|s| !s.is_empty()));
    segments
}

/// `base` with `segments` appended to its path.
fn endpoint(base: &Url, segments: &[&str]) -> Url {
    let mut url = base.clone();
    // `KcapClient::new` rejected cannot-be-a-base URLs, the only case where this fails.
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(segments);
    }
    url
}

/// How a POST to `url` is named in messages.
fn post_what(url: &Url) -> String {
    format!("post {}", url.path())
}

/// What came back, before sorting.
enum Answer {
    Transport(String),
    Http {
        status: u16,
        retry_after: Option<Duration>,
        location: Option<String>,
        /// The body (its first [`KEEP_BYTES`]), or why it could not be read to its end.
        body: Result<Vec<u8>, String>,
        token: Option<Token>,
    },
}

/// A watermark answer other than a readable `200`/`204`/`404` as a failure (a `2xx` of another
/// kind says nothing about where to resume).
fn watermark_failure(result: Result<(), Failure>) -> Failure {
    match result {
        Err(f) => f,
        Ok(()) => Failure::Transient {
            status: None,
            retry_after: None,
            error: "failed to read the watermark: unexpected success status".to_owned(),
        },
    }
}

fn classify(answer: Answer, what: &str) -> Result<(), Failure> {
    let (status, retry_after, location, body, token) = match answer {
        Answer::Transport(error) => {
            return Err(Failure::Transient {
                status: None,
                retry_after: None,
                error,
            });
        }
        Answer::Http {
            status,
            retry_after,
            location,
            body,
            token,
        } => (status, retry_after, location, body, token),
    };
    let snippet = |body: &Result<Vec<u8>, String>| match body {
        Ok(bytes) => scrub(snippet(bytes), token.as_ref()),
        Err(_) => String::new(),
    };
    match StatusCode::from_u16(status) {
        Ok(s) if s.is_success() => match body {
            Ok(_) => Ok(()),
            Err(error) => Err(Failure::Transient {
                status: Some(status),
                retry_after: None,
                error,
            }),
        },
        Ok(StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => Err(Failure::Unauthorized {
            status,
            token_sent: token.is_some(),
        }),
        Ok(s) if s.is_redirection() => Err(Failure::Transient {
            status: Some(status),
            retry_after,
            error: format!(
                "failed to {what}: HTTP {status} redirect to {} (KCAP_URL should name the final address)",
                location.as_deref().unwrap_or("an unnamed place")
            ),
        }),
        Ok(StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS) | Err(_) => {
            Err(Failure::Transient {
                status: Some(status),
                retry_after,
                error: format!("failed to {what}: HTTP {status} {}", snippet(&body)),
            })
        }
        Ok(s) if s.is_client_error() => Err(Failure::Rejected {
            status,
            body_snippet: snippet(&body),
        }),
        Ok(_) => Err(Failure::Transient {
            status: Some(status),
            retry_after,
            error: format!("failed to {what}: HTTP {status} {}", snippet(&body))
                .trim_end()
                .to_owned(),
        }),
    }
}

/// `Authorization: Bearer …`, marked sensitive so no debug output of the request shows it.
fn bearer(token: &Token) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose())).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// The first bytes of a response body for a log line, on one line.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(SNIPPET_BYTES)]);
    let mut one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if body.len() > SNIPPET_BYTES {
        one_line.push('…');
    }
    one_line.trim().to_owned()
}

/// Removes the token from text that is about to be logged, whatever put it there.
fn scrub(text: String, token: Option<&Token>) -> String {
    match token {
        Some(t) if text.contains(t.expose()) => text.replace(t.expose(), "[REDACTED]"),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = Ts::parse_rfc3339("2026-07-28T16:00:00Z").unwrap();
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Tue, 28 Jul 2026 16:01:30 GMT", now),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            parse_retry_after("Tue, 28 Jul 2026 15:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("-3", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("", now), None);
    }

    #[test]
    fn scrub_removes_the_token() {
        let t = Token::new("abc123secret").unwrap();
        assert_eq!(
            scrub("echo: Bearer abc123secret!".into(), Some(&t)),
            "echo: Bearer [REDACTED]!"
        );
    }

    #[test]
    fn snippets_are_short_and_on_one_line() {
        let long = "x".repeat(2000);
        let s = snippet(long.as_bytes());
        assert!(s.chars().count() <= SNIPPET_BYTES + 1);
        assert_eq!(snippet(b"bad\nline\r\n"), "bad line");
    }

    #[test]
    fn a_path_prefix_in_the_base_url_is_kept() {
        for base in ["https://h.example/kcap", "https://h.example/kcap/"] {
            let c = KcapClient::new(base, Credentials::fixed(None), Deadlines::default()).unwrap();
            assert_eq!(
                c.endpoint(&["hooks", "session-end", "codex"]).as_str(),
                "https://h.example/kcap/hooks/session-end/codex"
            );
        }
    }

    /// The transcript route's URL and message name, built once, are what building them for
    /// each request gave.
    #[test]
    fn the_prebuilt_transcript_url_is_the_one_built_per_request() {
        for base in [
            "https://h.example/kcap",
            "https://h.example/kcap/",
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "https://h.example/a/b/?",
        ] {
            let c = KcapClient::new(base, Credentials::fixed(None), Deadlines::default()).unwrap();
            let built = c.endpoint(&route_segments(ROUTE_TRANSCRIPT));
            assert_eq!(c.transcript.0, built, "{base}");
            assert_eq!(c.transcript.1, format!("post {}", built.path()), "{base}");
            assert!(
                c.transcript.0.path().ends_with("/hooks/transcript"),
                "{base}"
            );
        }
    }

    /// A `200` without a usable `last_line_number` is not "no lines" (which would resend the
    /// whole transcript): it is a failure whose text names the body's shape.
    #[test]
    fn malformed_watermark_bodies_are_described_not_taken_for_empty() {
        assert_eq!(
            parse_last_line(br#"{"last_line_number":41}"#),
            Ok(Watermark::Line(41))
        );
        assert_eq!(
            parse_last_line(br#"{"last_line_number":null}"#),
            Ok(Watermark::Empty)
        );
        for (body, shape) in [
            (&br#"{}"#[..], "an object without last_line_number, keys []"),
            (
                br#"{"lastLine":3}"#,
                "an object without last_line_number, keys [lastLine]",
            ),
            (
                br#"{"last_line_number":"12"}"#,
                "an object whose last_line_number is a string",
            ),
            (
                br#"{"last_line_number":-1}"#,
                "an object whose last_line_number is not a whole non-negative number",
            ),
            (b"[1]", "a JSON array"),
            (b"<html>", "not JSON, 6 bytes"),
            (b"", "an empty body"),
        ] {
            assert_eq!(parse_last_line(body), Err(shape.to_string()));
        }
    }

    #[test]
    fn resume_line() {
        assert_eq!(Watermark::Line(41).resume_line(), 42);
        assert_eq!(Watermark::Empty.resume_line(), 0);
        assert_eq!(Watermark::NotFound.resume_line(), 0);
    }
}
