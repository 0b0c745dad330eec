//! The one way kcap-watch shows a URL: in a log line, a status file, `status`'s text and JSON,
//! a printed service, an error message. A `KCAP_URL` may carry a credential (a userinfo
//! password, a `?token=` query value), from a flag, a variable, a token store or the kcap
//! CLI's session watcher; none of them may ever be written out in clear (docs/behaviour.md
//! T5, and docs/guide.md, "Status"). Requests still use the URL as given: only what is shown changes.
//!
//! Works on text that is not a URL at all too (an unparsable `KCAP_URL` is shown in its own
//! error), so it never fails and never needs the URL parsed first.

use std::fmt;

/// What stands where a secret was.
pub const REDACTED: &str = "[REDACTED]";

/// `raw` with its userinfo password (or a userinfo that is only a name, which is how a token
/// is passed as a git remote's user) and every secret-named query or fragment value replaced
/// by [`REDACTED`].
pub fn redacted(raw: &str) -> String {
    Shown(raw).to_string()
}

/// `text` (a message, a reason, a captured error) with every URL in it shown as
/// [`redacted`] shows one: a URL runs from its scheme to the next whitespace or quote.
pub fn redacted_in_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(sep) = rest.find("://") {
        let start = rest[..sep]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let end = rest[sep..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>'))
            .map_or(rest.len(), |i| sep + i);
        out.push_str(&rest[..start]);
        out.push_str(&redacted(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A [`fmt::Display`] of a URL through [`redacted`], for log fields (`url = %Shown(&url)`).
#[derive(Clone, Copy, Debug)]
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let raw = self.0;
        // Where the authority starts: after `scheme://`, else nowhere (no userinfo to hide).
        let authority = raw.find("://").map(|i| i + 3);
        let rest_start = match authority {
            Some(start) => {
                let end = raw[start..]
                    .find(['/', '?', '#'])
                    .map_or(raw.len(), |i| start + i);
                f.write_str(&raw[..start])?;
                match raw[start..end].rfind('@').map(|i| start + i) {
                    Some(at) => {
                        match raw[start..at].find(':') {
                            Some(colon) => {
                                f.write_str(&raw[start..start + colon + 1])?;
                                f.write_str(REDACTED)?;
                            }
                            // A name alone in the userinfo is how a token rides as a user
                            // (`https://<token>@host`): it is not shown either.
                            None => f.write_str(REDACTED)?,
                        }
                        f.write_str(&raw[at..end])?;
                    }
                    None => f.write_str(&raw[start..end])?,
                }
                end
            }
            None => 0,
        };
        let rest = &raw[rest_start..];
        // Query and fragment: `name=value` pairs separated by `&` (or `;`), after `?` or `#`.
        let Some(params_at) = rest.find(['?', '#']) else {
            return f.write_str(rest);
        };
        f.write_str(&rest[..params_at])?;
        for piece in split_keep(&rest[params_at..], &['?', '#', '&', ';']) {
            let (sep, pair) = piece.split_at(usize::from(!piece.is_empty()));
            f.write_str(sep)?;
            match pair.split_once('=') {
                Some((name, _)) if secret_param(name) => {
                    f.write_str(name)?;
                    f.write_str("=")?;
                    f.write_str(REDACTED)?;
                }
                _ => f.write_str(pair)?,
            }
        }
        Ok(())
    }
}

/// `text` cut before each of `seps`, every piece but possibly the first starting with its
/// separator (the first starts with one here: the caller cuts at `?` or `#`).
fn split_keep<'a>(text: &'a str, seps: &'a [char]) -> impl Iterator<Item = &'a str> + 'a {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest[1..].find(seps).map_or(rest.len(), |i| i + 1);
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

/// A query or fragment parameter whose value is a credential: a secret's name as redaction
/// knows names (`token`, `access_token`, `password`, `client_secret`, `api_key`, ...), and the
/// short names URLs use for keys and signatures (`key`, `sig`, `X-Amz-Signature`, `sas`).
fn secret_param(name: &str) -> bool {
    let decoded = name.replace("%5F", "_").replace("%5f", "_");
    let lower = decoded.to_ascii_lowercase();
    if crate::secret_names::name_is_secret(&decoded) {
        return true;
    }
    let last = lower.rsplit(['-', '_', '.']).next().unwrap_or(&lower);
    matches!(last, "sig" | "signature" | "sas" | "code" | "jwt") || lower.ends_with("key")
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn a_userinfo_password_and_a_token_as_user_are_hidden() {
        assert_eq!(
            redacted("https://u:Pw123@kcap.example.com/base"),
            "https://u:[REDACTED]@kcap.example.com/base"
        );
        assert_eq!(
            redacted("https://ghp_abcdef0123456789@kcap.example.com"),
            "https://[REDACTED]@kcap.example.com"
        );
        // A `@` after the path is not userinfo.
        assert_eq!(
            redacted("https://kcap.example.com/a@b"),
            "https://kcap.example.com/a@b"
        );
    }

    #[test]
    fn secret_named_query_and_fragment_values_are_hidden_and_others_kept() {
        assert_eq!(
            redacted("https://k.io/p?token=T1&page=2&access_token=T2#api_key=T3"),
            "https://k.io/p?token=[REDACTED]&page=2&access_token=[REDACTED]#api_key=[REDACTED]"
        );
        assert_eq!(
            redacted("https://k.io/?X-Amz-Signature=S1;key=K1&client_secret=C1&q=token"),
            "https://k.io/?X-Amz-Signature=[REDACTED];key=[REDACTED]&client_secret=[REDACTED]&q=token"
        );
        assert_eq!(
            redacted("http://127.0.0.1:9/x?lang=en"),
            "http://127.0.0.1:9/x?lang=en"
        );
    }

    #[test]
    fn every_url_in_a_message_is_shown_redacted() {
        assert_eq!(
            super::redacted_in_text(
                "failed to use KCAP_URL \"https://u:pw@k.io/?token=T\" (see http://x.io/?a=1)"
            ),
            "failed to use KCAP_URL \"https://u:[REDACTED]@k.io/?token=[REDACTED]\" (see http://x.io/?a=1)"
        );
        assert_eq!(super::redacted_in_text("no url here"), "no url here");
    }

    #[test]
    fn text_that_is_no_url_is_shown_as_is_or_with_its_query_hidden() {
        assert_eq!(redacted("not a url"), "not a url");
        assert_eq!(redacted("kcap.io?token=X"), "kcap.io?token=[REDACTED]");
        assert_eq!(redacted(""), "");
        assert_eq!(redacted("https://u:p@"), "https://u:[REDACTED]@");
    }
}
