//! The names of secrets: which names of a variable, key or header say that their value is a
//! secret (`DB_PASSWORD`, `apiKey`, `X-Auth-Key`), and which only look like one (`secretName`,
//! `passenger`, `author`). The redactor's core rules (`ship::redact::rules`) build their patterns
//! on these words, its code classes (`ship::redact::code`) ask whether a constant's name is a
//! secret's, and a URL shown in a log or status (`url_display`) hides the value of a query key
//! so named. A leaf of its own, below both.

use std::ops::Range;
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
        r"secret|token|passw(?:or)?d|passphrase|pwd|pass|api[_.-]?key|private[_.-]?key|credentials?|access[_.-]?key|app[_.-]?key|encryption[_.-]?key|master[_.-]?key|signing[_.-]?key|account[_.-]?key|unseal[_.-]?key|recovery[_.-]?key|auth"
    };
}
pub(crate) use name_words;

/// A name (assignment, JSON key, header) that holds a secret.
pub(crate) fn name_is_secret(name: &str) -> bool {
    if name.is_empty() || name.len() > 128 {
        return false;
    }
    let mut folded = [0u8; 128];
    let folded = &mut folded[..name.len()];
    folded.copy_from_slice(name.as_bytes());
    folded.make_ascii_lowercase();
    // ASCII lowercasing changes only ASCII bytes, into ASCII bytes: still UTF-8.
    let lower = std::str::from_utf8(folded).expect("an ASCII-lowercased str is UTF-8");
    if header_name(lower) {
        return true;
    }
    // A member of something named for a secret (`tokenData.cidr_whitelist`,
    // `Token.Markdown.Definition`) is what its last part names; a generic last part
    // (`password.value`, `secret.key`) is the secret's own.
    if let Some((first, last)) = lower.rsplit_once('.')
        && !last.is_empty()
        // A store of secrets holds secrets whatever their names (`secrets.db`,
        // `credentials.stripe`).
        && !first.split('.').any(|p| {
            matches!(
                p.trim_start_matches(['$', '@']),
                "secrets" | "credentials" | "creds" | "passwords" | "tokens" | "vault"
            )
        })
        && !matches!(
            last,
            "value"
                | "val"
                | "data"
                | "text"
                | "raw"
                | "str"
                | "string"
                | "plain"
                | "key"
                | "keys"
                | "bytes"
                | "hex"
                | "b64"
                | "base64"
                | "current"
                | "new"
                | "old"
                | "primary"
                | "secondary"
                | "default"
        )
        && name_words_in(last.as_bytes()).next().is_none()
        && !header_name(last)
    {
        return false;
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
        // An AWS resource name (`secret_arn`, `SecretArn`, `kmsKeyArn`): where a secret is
        // kept, `arn:aws:secretsmanager:…:secret:prod/db-AbCdEf`.
        "arn",
        "arns",
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
        // Whether a secret is set or used, how, and where it is kept (`MODULE_PWD_STATE`,
        // `auth_status`, `token_usage`, `token_type_hint`, `_ACCESS_TOKEN_TABLE`).
        "state",
        "status",
        // Which version of a secret (`--authorizer-token-secret-version=projects/p/secrets/s/
        // versions/1`, `secret_version: 3`): a number or a resource's name.
        "version",
        "versions",
        // How a secret is encrypted, hashed or sent (`password_encryption = scram-sha-256`,
        // `token_auth_method`, `auth_scheme`).
        "encryption",
        "algorithm",
        "algorithms",
        "method",
        "methods",
        "scheme",
        "schemes",
        "cipher",
        "ciphers",
        "encoding",
        "usage",
        "hint",
        "table",
        "description",
        "lifetime",
        // Settings of how a secret is sent or made (`default_token_placement = "query"`,
        // `token_location`, `auth_method`, `auth_scheme`, `signing_algorithm`, `token_field`).
        "placement",
        "location",
        "method",
        "scheme",
        "algorithm",
        "param",
        "params",
        "parameter",
        "field",
        // What finds, keeps or hands over a secret (`credential_source`, `credsStore`,
        // `token_supplier`, `credential_helper`, `secretManager`, `tokenHandler`).
        "source",
        "supplier",
        "helper",
        "helpers",
        "store",
        "manager",
        "handler",
        "callback",
        "service",
        // Errors and the machinery of a class (`TokenError`, `token_exception`,
        // `TokenExpiredError.prototype.constructor`).
        "error",
        "errors",
        "exception",
        "prototype",
        "constructor",
    ];
    // What stands in for a secret (`tokenPlaceholderConfigValue`): its value is a
    // placeholder.
    if lower.len() >= 11 && lower.as_bytes().windows(11).any(|w| w == b"placeholder") {
        return false;
    }
    let last = name.rsplit(['_', '-', '.']).next().unwrap_or(name);
    // camelCase: its last word (`secretKeyRef` -> `Ref`), or the acronym ending it
    // (`tokenURL` -> `URL`); UPPER_SNAKE was split above.
    let camel = last.bytes().any(|b| b.is_ascii_lowercase());
    let acronym = last
        .bytes()
        .rev()
        .take_while(u8::is_ascii_uppercase)
        .count();
    let last = match last.rfind(|c: char| c.is_ascii_uppercase()) {
        _ if camel && acronym >= 2 && acronym < last.len() => &last[last.len() - acronym..],
        Some(i) if i > 0 && camel => &last[i..],
        _ => last,
    };
    if last.len() < name.len() && THINGS.iter().any(|t| t.eq_ignore_ascii_case(last)) {
        return false;
    }
    let bytes = lower.as_bytes();
    let orig = name.as_bytes();
    for m in name_words_in(bytes) {
        let word = &lower[m.clone()];
        let after = bytes.get(m.end).copied();
        let before = m.start.checked_sub(1).map(|i| bytes[i]);
        // Camel case: a capital after the word starts a new one.
        let next_is_lower = after.is_some_and(|b| b.is_ascii_lowercase())
            && !orig.get(m.end).is_some_and(u8::is_ascii_uppercase);
        let rest = &lower[m.end..];
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
                // (A capital starts a word in camelCase, not in a name of capitals alone:
                // `GIT_ASKPASS` is a program that asks for one.)
                let all_caps = !orig.iter().any(u8::is_ascii_lowercase);
                let starts = before.is_none_or(|b| !b.is_ascii_alphabetic())
                    || (orig[m.start].is_ascii_uppercase() && !all_caps);
                if starts && !next_is_lower {
                    return true;
                }
            }
            "auth" => {
                // Ends the name (`auth`, `_auth`, `basic_auth`, `proxyAuth`) or is `_auth...`
                // (npm's `_authToken`); not `author`, `oauth_callback`, nor `oauth` (an OAuth
                // session or flow, `headeroauth`: a lowercase letter before it).
                let inside_word = before.is_some_and(|b| b.is_ascii_alphabetic())
                    && !orig[m.start].is_ascii_uppercase();
                if (rest.is_empty() && !inside_word) || (before == Some(b'_') && m.start == 1) {
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

/// Whether `name` holds a word of [`name_words!`] as a case-insensitive pattern finds one:
/// ASCII letters in either case, the Kelvin sign as a `k` and the long s as an `s` (the two
/// characters that fold to an ASCII letter).
pub(crate) fn holds_name_word(name: &str) -> bool {
    let mut short = [0u8; 64];
    if name.is_ascii() && name.len() <= short.len() {
        let lower = &mut short[..name.len()];
        lower.copy_from_slice(name.as_bytes());
        lower.make_ascii_lowercase();
        return name_words_in(lower).next().is_some();
    }
    // Any other character is one byte that no word holds.
    let folded: Vec<u8> = name
        .chars()
        .map(|c| match c {
            '\u{212A}' => b'k',
            '\u{17F}' => b's',
            c if c.is_ascii() => c.to_ascii_lowercase() as u8,
            _ => 0,
        })
        .collect();
    name_words_in(&folded).next().is_some()
}

/// Where the words of [`name_words!`] occur in lowercase `lower`, as a search for the
/// alternation finds them: leftmost first, each occurrence after the one before, and at one
/// place the first alternative that matches (`password` before `pass`, `credentials` before
/// `credential`). Written out because it runs on every candidate name a rule finds.
fn name_words_in(lower: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < lower.len() {
            if let Some(len) = name_word_at(&lower[at..]) {
                let found = at..at + len;
                at += len;
                return Some(found);
            }
            at += 1;
        }
        None
    })
}

/// The length of the word of [`name_words!`] that `b` starts with, trying the alternatives in
/// their order.
fn name_word_at(b: &[u8]) -> Option<usize> {
    // `stem`, an optional `_`, `.` or `-`, then `key`.
    let key = |stem: &[u8]| -> Option<usize> {
        let rest = b.strip_prefix(stem)?;
        if matches!(rest.first(), Some(b'_' | b'.' | b'-')) && rest[1..].starts_with(b"key") {
            Some(stem.len() + 4)
        } else {
            rest.starts_with(b"key").then_some(stem.len() + 3)
        }
    };
    let word = |w: &[u8]| b.starts_with(w).then_some(w.len());
    match b.first()? {
        b's' => word(b"secret").or_else(|| key(b"signing")),
        b't' => word(b"token"),
        b'p' => word(b"password")
            .or_else(|| word(b"passwd"))
            .or_else(|| word(b"passphrase"))
            .or_else(|| word(b"pwd"))
            .or_else(|| word(b"pass"))
            .or_else(|| key(b"private")),
        b'a' => key(b"api")
            .or_else(|| key(b"access"))
            .or_else(|| key(b"app"))
            .or_else(|| key(b"account"))
            .or_else(|| word(b"auth")),
        b'c' => word(b"credentials").or_else(|| word(b"credential")),
        b'e' => key(b"encryption"),
        b'm' => key(b"master"),
        b'u' => key(b"unseal"),
        b'r' => key(b"recovery"),
        _ => None,
    }
}

/// The names [`header_names!`] lists word for word, as their alternation's fixed words (a
/// longer one ending in a shorter one is left out: `authorization` covers
/// `proxy-authorization`).
const HEADER_ENDINGS: &[&str] = &[
    "authorization",
    "set-cookie",
    "cookie",
    "cookies",
    "api-key",
    "x-auth-token",
    "x-access-token",
    "x-amz-security-token",
    "x-amz-signature",
    "private-token",
    "job-token",
    "deploy-token",
    "x-vault-token",
    "x-consul-token",
    "x-csrf-token",
    "x-xsrf-token",
    "x-hub-signature",
    "x-hub-signature-256",
    "x-slack-signature",
    "stripe-signature",
    "x-registry-auth",
    "x-auth-key",
    "x-functions-key",
    "dd-application-key",
    "subscription-key",
];

/// The words that end an `x-…` header of [`header_names!`] (`x-[a-z0-9-]*(?:…)`).
const X_HEADER_ENDINGS: &[&str] = &[
    "api-key",
    "token",
    "secret",
    "password",
    "signature",
    "auth-key",
];

/// Whether a lowercase name is a credential header: it ends in one of [`header_names!`]
/// (the pattern is not anchored at the start). Written out because it runs on every
/// candidate name a rule finds.
pub(crate) fn header_name(lower: &str) -> bool {
    if lower.len() > 64 {
        return false;
    }
    if HEADER_ENDINGS.iter().any(|h| lower.ends_with(h)) {
        return true;
    }
    // `x-[a-z0-9-]*WORD` at the end: an `x-` inside the run of those characters before the
    // word (the `x` and `-` are of them too).
    let b = lower.as_bytes();
    X_HEADER_ENDINGS.iter().any(|w| {
        let Some(head) = lower.strip_suffix(w) else {
            return false;
        };
        let run = head
            .bytes()
            .rev()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            .count();
        let from = head.len() - run;
        b[from..head.len()].windows(2).any(|p| p == b"x-")
    })
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

    /// Names built from the words of secret and header names, their separators and
    /// neighbours.
    fn name_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::strategy::Strategy as _;
        let pieces = vec![
            "secret",
            "token",
            "pass",
            "passw",
            "password",
            "passwd",
            "passphrase",
            "pwd",
            "or",
            "d",
            "api",
            "private",
            "credential",
            "s",
            "access",
            "app",
            "encryption",
            "master",
            "signing",
            "account",
            "unseal",
            "recovery",
            "auth",
            "key",
            "_",
            ".",
            "-",
            "x",
            "x-",
            "ey",
            "er",
            "iz",
            "en",
            "ar",
            "ly",
            "ive",
            "cookie",
            "authorization",
            "set-",
            "subscription",
            "signature",
            "-256",
            "hub",
            "dd-",
            "application",
            "amz",
            "9",
            "Z",
            "Key",
            "Token",
            "\u{212a}",
            "é",
            " ",
            "name",
            "ref",
            "type",
        ];
        proptest::collection::vec(proptest::sample::select(pieces), 0..8).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// The written-out matchers find what the patterns they stand for find.
        #[test]
        fn written_out_matchers_agree_with_the_patterns(name in name_text()) {
            let lower = name.to_ascii_lowercase();
            let words = Regex::new(concat!("(?:", name_words!(), ")")).expect("pattern compiles");
            let by_pattern: Vec<Range<usize>> = words.find_iter(&lower).map(|m| m.range()).collect();
            let written: Vec<Range<usize>> = name_words_in(lower.as_bytes()).collect();
            proptest::prop_assert_eq!(written, by_pattern, "{:?}", lower);
            let header = Regex::new(concat!("(?:", header_names!(), ")$")).expect("pattern compiles");
            proptest::prop_assert_eq!(
                header_name(&lower),
                lower.len() <= 64 && header.is_match(&lower),
                "{:?}",
                lower
            );
        }
    }

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
