//! The HTTP transport both the kcap client (`super::client`) and the token refreshes
//! (`super::auth`) use: one way to build a client (no redirects, TLS trusting the bundled roots
//! and the system's store, proxies from the environment but never for loopback) and one way to
//! describe a transport error. It imports nothing else of `ship`, so protocol, auth and client
//! sit above it and nothing runs back up.

use std::time::Duration;

use anyhow::Context;
use reqwest::Url;

/// The HTTP client for requests to `target`: redirects not followed, TLS trusting the
/// bundled roots and the operating system's store (`SSL_CERT_FILE`/`SSL_CERT_DIR` included),
/// proxies from `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY`/`NO_PROXY`, except that a loopback
/// target is never proxied (a proxy elsewhere cannot reach this machine's loopback).
pub(crate) fn http_client(target: &Url) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("kcap-watch/", env!("CARGO_PKG_VERSION")))
        .tls_built_in_root_certs(true);
    if super::auth::server::is_loopback(target) {
        builder = builder.no_proxy();
    }
    builder.build().context("failed to build the HTTP client")
}

/// A transport error as "cause: cause: …", without the URL (the caller names the route);
/// an untrusted server certificate also says how to trust it.
pub(crate) fn describe_transport(e: &reqwest::Error, deadline: Duration) -> String {
    let text = describe(e, deadline);
    if text.contains("certificate") {
        format!(
            "{text} (the server's TLS certificate is not trusted: add its CA to the system \
             store, or name a PEM file of it in SSL_CERT_FILE)"
        )
    } else {
        text
    }
}

/// A transport error as "cause: cause: …", without the URL.
pub(crate) fn describe(e: &reqwest::Error, deadline: Duration) -> String {
    if e.is_timeout() {
        return format!("no answer within {deadline:?}");
    }
    let mut text = String::new();
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
    if e.is_connect() {
        text.push_str("failed to connect");
    } else if e.is_body() || e.is_decode() {
        text.push_str("failed to read the response");
    } else {
        text.push_str("failed to send the request");
    }
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// A host that never leaves the machine: 127.0.0.0/8, `::1` and `localhost`.
pub(crate) fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    match bare.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(std::net::IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => {
            let host = host.to_ascii_lowercase();
            host == "localhost" || host.ends_with(".localhost")
        }
    }
}
