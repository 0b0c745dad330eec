//! `KCAP_WATCH_EXCLUDE`: glob patterns on a session's `cwd` that leave the session to the
//! kcap CLI (docs/behaviour.md S2.1).
//!
//! Patterns are separated as `PATH` is (`:` on Unix, `;` on Windows; split by
//! `crate::config`, which reads the variable). `*` matches within one
//! path component, `**` across components, `?` one character of a component; everything else
//! matches itself. A pattern matches a directory and everything below it
//! (`/home/me/secret` excludes `/home/me/secret/app` too), since a session started in a
//! subdirectory of an excluded tree is no less private.

/// The first pattern that excludes `cwd`.
pub(crate) fn excluded_by<'a>(patterns: &'a [String], cwd: &str) -> Option<&'a str> {
    let cwd = cwd.trim_end_matches('/');
    patterns.iter().map(String::as_str).find(|p| {
        let p = p.trim_end_matches('/');
        matches(p.as_bytes(), cwd.as_bytes())
            || cwd
                .char_indices()
                .filter(|(_, c)| *c == '/')
                .any(|(i, _)| i > 0 && matches(p.as_bytes(), &cwd.as_bytes()[..i]))
    })
}

/// Glob match of the whole `text` by `pat`.
fn matches(pat: &[u8], text: &[u8]) -> bool {
    match pat.first() {
        None => text.is_empty(),
        Some(b'*') if pat.get(1) == Some(&b'*') => {
            let rest = &pat[2..];
            // `**/` also matches no directory at all.
            let rest_no_slash = rest.strip_prefix(b"/").unwrap_or(rest);
            (0..=text.len())
                .any(|i| matches(rest, &text[i..]) || matches(rest_no_slash, &text[i..]))
        }
        Some(b'*') => {
            let rest = &pat[1..];
            for i in 0..=text.len() {
                if matches(rest, &text[i..]) {
                    return true;
                }
                if text.get(i) == Some(&b'/') {
                    return false;
                }
            }
            false
        }
        Some(b'?') => text.first().is_some_and(|c| *c != b'/') && matches(&pat[1..], &text[1..]),
        Some(c) => text.first() == Some(c) && matches(&pat[1..], &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(pats: &[&str], cwd: &str) -> Option<String> {
        let p: Vec<String> = pats.iter().map(|s| s.to_string()).collect();
        excluded_by(&p, cwd).map(str::to_owned)
    }

    #[test]
    fn globs_match_a_cwd_and_everything_below_it() {
        assert_eq!(
            ex(&["/home/me/secret"], "/home/me/secret").as_deref(),
            Some("/home/me/secret")
        );
        assert!(ex(&["/home/me/secret/"], "/home/me/secret/app/src").is_some());
        assert!(ex(&["/home/me/secret"], "/home/me/secretive").is_none());
        assert!(ex(&["/home/*/clients"], "/home/ann/clients/acme").is_some());
        assert!(ex(&["/home/*/clients"], "/home/ann/x/clients").is_none());
        assert!(ex(&["**/private"], "/work/a/b/private").is_some());
        assert!(ex(&["/work/**/tmp-?"], "/work/tmp-1").is_some());
        assert!(ex(&["/work/**/tmp-?"], "/work/x/y/tmp-12").is_none());
        assert!(ex(&[], "/anything").is_none());
    }
}
