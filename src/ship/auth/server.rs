//! Which server a stored token belongs to: the canonical form of a server URL, compared
//! instead of raw strings (docs/behaviour.md R1, "Server binding"; the kcap CLI's
//! `ServerIdentity`).
//!
//! The kcap CLI stamps `server_url` in canonical form (`https://host:443`), while users write
//! `KCAP_URL` as `https://HOST/`. Comparing raw strings sent no `Authorization` at all, so
//! every request met a `401`.

use reqwest::Url;

/// The canonical form of a server base URL: lowercase scheme and host, the effective port
/// always written, the path kept as it is (paths are case-sensitive) without trailing `/`.
/// `None` when the text is no admissible server base: not an absolute http(s) URL, or one
/// with user info, a query or a fragment (dropping them would make `?tenant=a` and
/// `?tenant=b` one server).
pub(crate) fn canonical(url: &str) -> Option<String> {
    let url = url.trim();
    if url.is_empty() {
        return None;
    }
    let parsed = Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return None;
    }
    if !parsed.username().is_empty()
        || parsed.password().is_some()
        || parsed.query().is_some()
        || parsed.fragment().is_some()
    {
        return None;
    }
    // `Url` lowercases the scheme and a domain host and normalises IP literals; it drops a
    // port equal to the scheme's default, which `port_or_known_default` puts back.
    let host = parsed.host_str()?;
    let port = parsed.port_or_known_default()?;
    let path = parsed.path().trim_end_matches('/');
    Some(format!("{}://{host}:{port}{path}", parsed.scheme()))
}

/// Both name the same server. A side without a canonical form never matches: no binding can
/// be asserted, so the token is withheld rather than sent by a false match.
pub(crate) fn same_server(left: &str, right: &str) -> bool {
    match (canonical(left), canonical(right)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

pub(crate) use crate::ship::http::is_loopback;

/// An endpoint override (`KCAP_WORKOS_*`): `https` anywhere, or `http` on loopback only,
/// because the request carries a credential (the kcap CLI's rule for its own override).
pub(crate) fn checked_endpoint(var: &str, raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw.trim()).map_err(|e| format!("{var} is not a valid URL: {e}"))?;
    match url.scheme() {
        "https" => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        scheme => Err(format!(
            "{var} must be https (or http on loopback): refusing to send a credential to {scheme}://{}",
            url.host_str().unwrap_or("")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms() {
        let c = |s| canonical(s);
        assert_eq!(
            c("https://kcap.example.com").as_deref(),
            Some("https://kcap.example.com:443")
        );
        assert_eq!(
            c("HTTPS://KCAP.Example.com:443/").as_deref(),
            Some("https://kcap.example.com:443")
        );
        assert_eq!(
            c("http://127.0.0.1:5108/").as_deref(),
            Some("http://127.0.0.1:5108")
        );
        assert_eq!(
            c("HTTP://127.0.0.1:5108").as_deref(),
            Some("http://127.0.0.1:5108")
        );
        assert_eq!(c("http://x").as_deref(), Some("http://x:80"));
        assert_eq!(
            c("https://x:8443/Base//").as_deref(),
            Some("https://x:8443/Base")
        );
        assert_eq!(
            c("  https://x/kcap  ").as_deref(),
            Some("https://x:443/kcap")
        );
        assert_eq!(c("https://[::1]:9/").as_deref(), Some("https://[::1]:9"));
        // No canonical form: these match nothing.
        for bad in [
            "",
            "kcap.example.com",
            "ftp://x",
            "https://user@x",
            "https://user:pw@x",
            "https://x/?tenant=a",
            "https://x/#frag",
            "https://x/#",
            "https://x/?",
        ] {
            assert_eq!(c(bad), None, "{bad}");
        }
    }

    #[test]
    fn same_server_is_canonical_equality() {
        assert!(same_server("https://x", "https://X:443/"));
        assert!(same_server(
            "http://127.0.0.1:4000",
            "HTTP://127.0.0.1:4000/"
        ));
        // Path is significant and case-sensitive; port and scheme too.
        assert!(!same_server("https://x/a", "https://x/A"));
        assert!(!same_server("https://x", "https://x/a"));
        assert!(!same_server("https://x", "http://x"));
        assert!(!same_server("https://x", "https://x:8443"));
        // A side without a canonical form never matches, not even itself.
        assert!(!same_server("https://x/?q=1", "https://x/?q=1"));
    }

    #[test]
    fn endpoint_overrides_need_https_or_loopback() {
        assert!(checked_endpoint("V", "https://auth.example.com/t").is_ok());
        assert!(checked_endpoint("V", "http://127.0.0.1:9/t").is_ok());
        assert!(checked_endpoint("V", "http://localhost:9/t").is_ok());
        assert!(checked_endpoint("V", "http://[::1]:9/t").is_ok());
        let e = checked_endpoint("V", "http://auth.example.com/t").unwrap_err();
        assert!(e.contains("V must be https"), "{e}");
        assert!(checked_endpoint("V", "ftp://127.0.0.1/t").is_err());
        assert!(checked_endpoint("V", "nonsense").is_err());
    }
}
