//! The names of secrets: which names of a variable, key or header say that their value is a
//! secret (`DB_PASSWORD`, `apiKey`, `X-Auth-Key`), and which only look like one (`secretName`,
//! `passenger`, `author`). The redactor's core rules (`ship::redact::rules`) build their patterns
//! on these words, its code classes (`ship::redact::code`) ask whether a constant's name is a
//! secret's, and a URL shown in a log or status (`url_display`) hides the value of a query key
//! so named. A leaf of its own, below both.

use std::sync::LazyLock;

use regex::Regex;

/// kcap's credential header names and the others S1.4 lists, as a regex alternation.
macro_rules! header_names {
    () => {
        r"proxy-authorization|authorization|set-cookie|cookies?|x-api-key|x-auth-token|x-access-token|x-amz-security-token|x-amz-signature|x-goog-api-key|api-key|private-token|job-token|deploy-token|x-vault-token|x-consul-token|x-csrf-token|x-xsrf-token|x-hub-signature(?:-256)?|x-slack-signature|stripe-signature|x-registry-auth|x-auth-key|x-functions-key|dd-api-key|dd-application-key|x-[a-z0-9-]*(?:api-key|token|secret|password|signature|auth-key)|[a-z0-9-]*subscription-key"
    };
}
pub(crate) use header_names;

/// The words a secret's name is built on (checked further by [`name_is_secret`]).
macro_rules! name_words {
    () => {
        r"secret|token|passw(?:or)?d|passphrase|pwd|pass|api[_.-]?key|private[_.-]?key|credentials?|access[_.-]?key|app[_.-]?key|encryption[_.-]?key|master[_.-]?key|signing[_.-]?key|account[_.-]?key|auth"
    };
}
pub(crate) use name_words;

/// A name (assignment, JSON key, header) that holds a secret.
pub(crate) fn name_is_secret(name: &str) -> bool {
    if name.is_empty() || name.len() > 128 {
        return false;
    }
    let lower = name.to_ascii_lowercase();
    if header_name(&lower) {
        return true;
    }
    // The name of a thing, not a secret: `secretName`, `secretNamespace`, `secretRef`,
    // `tokenType`, `passwordPolicy` (Kubernetes references name a Secret object; its value is
    // that name).
    const THINGS: &[&str] = &[
        "name",
        "names",
        "namespace",
        "ref",
        "refs",
        "kind",
        "type",
        "policy",
        "length",
        // What handles or locates a secret, or says how long it lives (`token_loader_cls`,
        // `_SSO_TOKEN_CACHE_DIR`, `maxTokenAge`, `refreshTokenMode`, `token.Expiry`,
        // `defaultRegionalCredentialVerificationUrl`): its value is code, a path or a
        // setting.
        "cls",
        "class",
        "factory",
        "provider",
        "providers",
        "loader",
        "sourcer",
        "fetcher",
        "cache",
        "dir",
        "path",
        "file",
        "filename",
        "url",
        "uri",
        "endpoint",
        "prefix",
        "mode",
        "format",
        "fields",
        "window",
        "timeout",
        "age",
        "expiry",
        "expiration",
        "ttl",
        "lifetime",
    ];
    let last = name.rsplit(['_', '-', '.']).next().unwrap_or(name);
    // camelCase: its last word (`secretKeyRef` -> `Ref`); UPPER_SNAKE was split above.
    let camel = last.bytes().any(|b| b.is_ascii_lowercase());
    let last = match last.rfind(|c: char| c.is_ascii_uppercase()) {
        Some(i) if i > 0 && camel => &last[i..],
        _ => last,
    };
    if last.len() < name.len() && THINGS.contains(&last.to_ascii_lowercase().as_str()) {
        return false;
    }
    static WORDS: LazyLock<Regex> = LazyLock::new(|| {
        // A constant pattern; the unit tests run it.
        Regex::new(concat!("(?:", name_words!(), ")")).expect("name pattern is a valid regex")
    });
    let bytes = lower.as_bytes();
    let orig = name.as_bytes();
    for m in WORDS.find_iter(&lower) {
        let word = m.as_str();
        let after = bytes.get(m.end()).copied();
        let before = m.start().checked_sub(1).map(|i| bytes[i]);
        // Camel case: a capital after the word starts a new one.
        let next_is_lower = after.is_some_and(|b| b.is_ascii_lowercase())
            && !orig.get(m.end()).is_some_and(u8::is_ascii_uppercase);
        let rest = &lower[m.end()..];
        match word {
            "token" => {
                if !(rest.starts_with("iz") || rest.starts_with("is") || rest.starts_with("en")) {
                    return true;
                }
            }
            "secret" => {
                if !["ar", "ion", "ly", "ive"]
                    .iter()
                    .any(|s| rest.starts_with(s))
                {
                    return true;
                }
            }
            "pass" => {
                // `pass`, `db_pass`, `dbPass`, `pass_file`: not `passenger`, `bypass`,
                // `compass`, `passed`.
                let starts = before.is_none_or(|b| !b.is_ascii_alphabetic())
                    || orig[m.start()].is_ascii_uppercase();
                if starts && !next_is_lower {
                    return true;
                }
            }
            "auth" => {
                // Ends the name (`auth`, `_auth`, `basic_auth`) or is `_auth...` (npm's
                // `_authToken`); not `author`, `oauth_callback`.
                if rest.is_empty() || (before == Some(b'_') && m.start() == 1) {
                    return true;
                }
            }
            "pwd" => {
                if !next_is_lower {
                    return true;
                }
            }
            _ => return true,
        }
    }
    lower.ends_with("client-key-data") || lower.ends_with("tls.key")
}

/// Whether a lowercase name is a credential header.
pub(crate) fn header_name(lower: &str) -> bool {
    static HEADER: LazyLock<Regex> = LazyLock::new(|| {
        // A constant pattern; the unit tests run it.
        Regex::new(concat!("(?:", header_names!(), ")$")).expect("header pattern is a valid regex")
    });
    lower.len() <= 64 && HEADER.is_match(lower)
}

/// Whether a lowercase name is exactly a credential header (a header list's name).
pub(crate) fn is_header(name: &str) -> bool {
    static EXACT: LazyLock<Regex> = LazyLock::new(|| {
        // A constant pattern; the unit tests run it.
        Regex::new(concat!("(?i)^(?:", header_names!(), ")$"))
            .expect("header pattern is a valid regex")
    });
    name.len() <= 64 && EXACT.is_match(name.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for yes in [
            "DB_PASSWORD",
            "pass",
            "DB_PASS",
            "dbPass",
            "passwd",
            "pwd",
            "APP_KEY",
            "ENCRYPTION_KEY",
            "_auth",
            "_authToken",
            "auth",
            "X-Auth-Key",
            "client-key-data",
            "tls.key",
            "setFirstTokenReceived",
            "AccountKey",
            "Authorization",
        ] {
            assert!(name_is_secret(yes), "{yes}");
        }
        for no in [
            "passenger",
            "bypass",
            "author",
            "gpt-tokenizer",
            "secretary",
            "compass",
            "passed",
            "oauth_callback",
            "name",
        ] {
            assert!(!name_is_secret(no), "{no}");
        }
    }
}
