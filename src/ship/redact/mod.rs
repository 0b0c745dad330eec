//! Redaction of shipped lines: raw rollout text never leaves the process.
//!
//! The rules cover at least what the kcap CLI's `SecretRedactor` removes, applied in the same
//! order (`spec/server-api.md`, section 2), with two promises the CLI does not make:
//!
//! - **In place.** Only the secret spans change; every other byte of the line is shipped as
//!   written. Nothing is re-serialised, so the server sees Codex's own JSON.
//! - **Valid JSON stays valid JSON.** The CLI's PEM pass can run across string boundaries. Here,
//!   when a line parses as JSON, the text rules run *inside each string literal's raw
//!   (still escaped) content*, and every redacted span is widened to whole escape sequences
//!   (`\"`, `\\`, `\n`, `\u1234`, surrogate pairs), so a match can neither swallow a closing
//!   quote nor cut an escape or a key. The key rule (`"api_key": "..."`) works on the
//!   structure instead: a string value after a key whose name looks secret becomes
//!   `"[REDACTED]"`, and numbers and objects under such keys (`"input_tokens": 123`,
//!   `"total_token_usage": {...}` in every `token_count` line) are left alone. A line that is not
//!   JSON (a crash fragment, say) gets the text rules over its whole text.
//!
//! Most lines hold no secret, so the common path is one Aho-Corasick scan for trigger words
//! that every rule's match must contain. A line with no trigger is returned untouched. Otherwise
//! only the strings holding a trigger are looked at, first with one regex that is the union of
//! all rules (in long tool output, only on the lines around the triggers), and only a string
//! that matches it runs the rule families its triggers can start.
//!
//! Secrets spelled with JSON `\u` escapes inside their body (`ghp_\u0041...`) are not
//! recognised. Codex writes rollouts with serde_json, which escapes only quotes, backslashes and
//! control characters, so a token made of printable ASCII always appears verbatim; a `\u`
//! escape that a program printed is itself escaped (`\\u0041`) and decodes to those six
//! characters, not to a letter. Likewise the case-insensitive rules fold case with Unicode
//! but their triggers are ASCII, so a name spelled with the Kelvin sign or a long s is missed.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, Input, MatchKind};
use memchr::{memchr, memchr2, memchr3, memmem};
use regex::{Captures, Regex};
use serde::de::IgnoredAny;

mod providers;

/// Lines longer than this many UTF-16 code units ship as the oversize placeholder: the kcap
/// CLI measures a line as a .NET string (`spec/revision-2.md` R2.3).
pub const MAX_LINE_UTF16_UNITS: usize = 65_536;

/// No line within [`MAX_LINE_UTF16_UNITS`] is longer than this in UTF-8 (three bytes is the
/// most one UTF-16 unit takes), so a reader need keep no more of a line.
pub const MAX_LINE_BYTES: usize = 3 * MAX_LINE_UTF16_UNITS;

/// The length of `raw` in UTF-16 code units once decoded as the shipping path decodes it (each
/// invalid sequence becomes one U+FFFD). Allocates nothing.
pub fn utf16_len(raw: &[u8]) -> usize {
    raw.utf8_chunks()
        .map(|chunk| {
            let valid = chunk.valid().as_bytes();
            // Every character has one leading byte, and those above U+FFFF (4-byte, lead
            // 0xF0..) take a second unit. Counting bytes vectorises; decoding does not.
            let leads = valid.iter().filter(|&&b| (b as i8) >= -0x40).count();
            let astral = valid.iter().filter(|&&b| b >= 0xF0).count();
            leads + astral + usize::from(!chunk.invalid().is_empty())
        })
        .sum()
}

/// Whether a raw line ships as the oversize placeholder.
pub fn is_oversize(raw: &[u8]) -> bool {
    // A unit takes at least one byte and at most three.
    raw.len() > MAX_LINE_UTF16_UNITS
        && (raw.len() > MAX_LINE_BYTES || utf16_len(raw) > MAX_LINE_UTF16_UNITS)
}

/// What a secret is replaced with.
const REDACTED: &str = "[REDACTED]";

/// The kcap CLI's placeholder for an oversize line ([`is_oversize`]: over
/// [`MAX_LINE_UTF16_UNITS`]), plus `original_bytes`: the original size, which
/// `spec/server-api.md` section 2 names in bytes, so it is the line's length in UTF-8 as
/// written (without terminator or BOM), not the UTF-16 count the limit is measured in. The
/// server treats the unknown `type` as a no-op, so line numbering stays intact.
pub fn oversize_placeholder(original_bytes: u64) -> String {
    format!(
        r#"{{"type":"redacted_oversize_line","reason":"line exceeded SecretRedactor size limit","original_bytes":{original_bytes}}}"#
    )
}

/// The longest prefix of `s` that fits in `max_bytes` and ends on a character boundary.
///
/// Truncate *after* redacting: a secret cut in half before redaction may no longer look like
/// one.
pub fn truncate_utf8(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    // Terminates: offset 0 is always a character boundary.
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The shared redactor, compiled on first use.
pub fn global() -> &'static Redactor {
    static REDACTOR: LazyLock<Redactor> = LazyLock::new(Redactor::new);
    &REDACTOR
}

/// Rule families, as bits: a trigger word names the families whose matches can contain it.
mod family {
    pub const PEM: u16 = 1 << 0;
    pub const AWS: u16 = 1 << 1;
    pub const VENDOR: u16 = 1 << 2;
    pub const HEADER: u16 = 1 << 3;
    pub const QUERY: u16 = 1 << 4;
    pub const USERINFO: u16 = 1 << 5;
    pub const ASSIGNMENT: u16 = 1 << 6;
    pub const LABEL: u16 = 1 << 7;
    pub const CONNECTION: u16 = 1 << 8;
    /// The structural JSON key rule (not a text rule): the key may name a secret.
    pub const KEY: u16 = 1 << 9;
    /// The key certainly names a secret (no need to ask the key regex).
    pub const KEY_NAME: u16 = 1 << 10;
    /// JSON Web Tokens.
    pub const JWT: u16 = 1 << 11;
    /// Slack and Discord webhook URLs.
    pub const WEBHOOK: u16 = 1 << 12;
    /// Command lines and files that carry a password in their own syntax: `curl -u`,
    /// `mysql -p`, `.pgpass`.
    pub const COMMAND: u16 = 1 << 13;
    /// Families whose matches contain `:`, `=`, a space or a tab.
    pub const SEPARATED: u16 =
        HEADER | QUERY | USERINFO | ASSIGNMENT | LABEL | CONNECTION | COMMAND;
    /// The structural bits.
    pub const KEYS: u16 = KEY | KEY_NAME;
    /// The credential words: a name, label or header built on one can start any of these.
    pub const WORDS: u16 = HEADER | QUERY | ASSIGNMENT | LABEL | CONNECTION | KEY;
}

/// Substrings that every match of a family contains, as the rules spell them (their rules are
/// case-sensitive). If a string holds none of a family's triggers, that family cannot match in
/// it, so it is not run.
///
/// The list holds at most [`MAX_EXACT_TRIGGERS`] words of at least three bytes: that is what
/// keeps the scan, which every shipped line pays, on its fastest searcher.
const EXACT_TRIGGERS: &[(&str, u16)] = &[
    ("PRIVATE KEY", family::PEM),
    ("AKIA", family::AWS),
    ("ASIA", family::AWS),
    ("AROA", family::AWS),
    ("AIDA", family::AWS),
    ("AGPA", family::AWS),
    ("ANPA", family::AWS),
    ("ANVA", family::AWS),
    ("AIPA", family::AWS),
    ("ABIA", family::AWS),
    ("ACCA", family::AWS),
    ("APKA", family::AWS),
    ("ASCA", family::AWS),
    ("A3T", family::AWS),
    ("sk-", family::VENDOR),
    // `sk_live_`, `rk_live_`, `sk_test_`, `rk_test_`.
    ("k_live_", family::VENDOR),
    ("k_test_", family::VENDOR),
    ("ghp_", family::VENDOR),
    ("gho_", family::VENDOR),
    ("ghs_", family::VENDOR),
    ("ghu_", family::VENDOR),
    ("ghr_", family::VENDOR),
    ("github_pat_", family::VENDOR),
    ("cfat_", family::VENDOR),
    ("xox", family::VENDOR),
    ("pypi-", family::VENDOR),
    ("npm_", family::VENDOR),
    ("dckr_", family::VENDOR),
    ("AIza", family::VENDOR),
    ("eyJ", family::JWT),
    // The usual PostgreSQL ports (`5432:` and `6432:`): a `.pgpass` line has no word to find.
    // (Not led by the colon: timestamps fill tool output with colons, and a trigger starting
    // with one slows the scan of every line.) The wildcard is [`PGPASS_WILDCARD`].
    ("432:", family::COMMAND),
    ("5433:", family::COMMAND),
];

/// A `.pgpass` wildcard field: too short for the trigger scan, so searched on its own.
const PGPASS_WILDCARD: &[u8] = b"*:";

/// Like [`EXACT_TRIGGERS`] for the case-insensitive rules; lowercase. Also the exact words
/// that do not fit in [`EXACT_TRIGGERS`] and are lowercase (found in more spellings here,
/// which only ever costs a few more hits).
const WORD_TRIGGERS: &[(&str, u16)] = &[
    ("key=", family::QUERY),
    ("sig=", family::QUERY),
    ("sas=", family::QUERY),
    ("auth=", family::QUERY),
    ("pass=", family::QUERY),
    ("passw", family::WORDS),
    ("api key", family::WORDS),
    ("access key", family::WORDS),
    ("authorization", family::WORDS),
    ("cookie", family::WORDS),
    ("signature", family::WORDS),
    ("subscription-key", family::WORDS),
    ("bearer", family::WORDS),
    ("registry-auth", family::WORDS),
    // A JSON key that ends in `auth` (docker's `config.json`), written raw or escaped.
    ("auth\"", family::KEY | family::ASSIGNMENT),
    ("auth\\", family::KEY | family::ASSIGNMENT),
    ("hooks.slack.com", family::WEBHOOK),
    // URLs, and `https:\/\/` as PHP and some JSON writers spell it, as printed and once or
    // twice encoded.
    ("://", family::USERINFO),
    (r":\/", family::USERINFO | family::WEBHOOK),
    (r":\\/", family::USERINFO | family::WEBHOOK),
    (r":\\\\/", family::USERINFO | family::WEBHOOK),
    ("glpat-", family::VENDOR),
    ("discord", family::WEBHOOK),
    ("curl", family::COMMAND),
    ("mysql", family::COMMAND),
    ("mariadb", family::COMMAND),
    // Any key containing one of these is a secret's name.
    ("secret", family::WORDS | family::KEY_NAME),
    ("token", family::WORDS | family::KEY_NAME),
    ("passphrase", family::WORDS | family::KEY_NAME),
    ("pwd", family::WORDS | family::KEY_NAME),
    ("api_key", family::WORDS | family::KEY_NAME),
    ("api-key", family::WORDS | family::KEY_NAME),
    ("api.key", family::WORDS | family::KEY_NAME),
    ("apikey", family::WORDS | family::KEY_NAME),
    ("private_key", family::WORDS | family::KEY_NAME),
    ("private-key", family::WORDS | family::KEY_NAME),
    ("private.key", family::WORDS | family::KEY_NAME),
    ("privatekey", family::WORDS | family::KEY_NAME),
    ("access_key", family::WORDS | family::KEY_NAME),
    ("access-key", family::WORDS | family::KEY_NAME),
    ("access.key", family::WORDS | family::KEY_NAME),
    ("accesskey", family::WORDS | family::KEY_NAME),
    ("credential", family::WORDS | family::KEY_NAME),
];

/// The most words [`EXACT_TRIGGERS`] may hold: more and the scan every line pays takes a
/// searcher about half as fast (see `benches/redact.rs`).
const MAX_EXACT_TRIGGERS: usize = 32;
const _: () = assert!(EXACT_TRIGGERS.len() <= MAX_EXACT_TRIGGERS);

/// A word boundary that also holds after a JSON escape (`\nsk-...` is a new line starting with
/// `sk-`, although `n` is a word character). Non-capturing, so group numbers are unaffected.
const BOUNDARY: &str = r"(?:^|[^A-Za-z0-9_]|\\[nrtbf]|\\u[0-9A-Fa-f]{4})";

/// The words a secret's name contains, shared by the assignment rule and the JSON key rule.
const NAME_WORDS: &str = r"secret|token|passw(?:or)?d|passphrase|pwd|api[_.-]?key|private[_.-]?key|credentials?|access[_.-]?key";

/// The kcap CLI's credential header names (`SecretRedactor.cs`), which are also secret JSON
/// keys when a key ends with one.
const HEADER_NAMES: &str = r"(?:proxy-)?authorization|(?:set-)?cookie|x-api-key|x-auth-token|x-access-token|x-amz-security-token|x-amz-signature|x-goog-api-key|api-key|private-token|job-token|deploy-token|x-vault-token|x-consul-token|x-csrf-token|x-xsrf-token|x-hub-signature(?:-256)?|x-slack-signature|stripe-signature|x-registry-auth";

/// One character of a secret written as a JSON escape, at any depth of encoding: `\/`, or a
/// `\u` escape of anything but the characters that end a value (controls, blank, `"`, `#`,
/// `&`, `'`, `(`, `)`, `,`, `;`, `<`, `>`). Such a secret (`p\u00e4ss`, `a\/b`, `?a=1\u0026sig=...`)
/// is otherwise cut at its first backslash.
const ESC: &str = r"\\+(?:/|u(?:00(?:2[145abd-fABD-F]|3[0-9aAdDfF]|[4-9a-fA-F][0-9a-fA-F])|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3}))";

/// A JSON string's content inside text, up to (not including) its closing quote at any depth
/// of encoding (`"`, `\"`, `\\\"`). Never holds a `\n` pair (see [`trigger_lines`]).
const QUOTED_CONTENT: &str = r#"(?:[^"\\\r\n]|\\+[^"\\n\r])+"#;

/// One text rule: its matches are redacted (the whole match, or one capture group).
struct TextRule {
    family: u16,
    regex: Regex,
    /// Capture group holding the secret (0: the whole match).
    group: usize,
    /// The group is a JSON array written in text: each of its strings is a secret, not the
    /// brackets and commas between them.
    items: bool,
    /// A match that has the shape but is known not to be a secret.
    exempt: fn(&Captures<'_>) -> bool,
}

fn never_exempt(_: &Captures<'_>) -> bool {
    false
}

/// `load_secret(&path)`: code calling a function, not a value.
fn is_call(caps: &Captures<'_>) -> bool {
    caps.get(1).is_some_and(|value| {
        let value = value.as_str();
        let name_end = value
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':')))
            .unwrap_or(value.len());
        name_end > 0 && value[name_end..].starts_with('(')
    })
}

/// `$VAR`, `${VAR}` and `$(cmd)`: a shell reference to a secret, not the secret.
fn is_shell_reference(caps: &Captures<'_>) -> bool {
    if is_count_or_code(caps) {
        return true;
    }
    caps.get(2).is_some_and(|value| {
        let value = value.as_str();
        value == "$"
            || value
                .strip_prefix('$')
                .is_some_and(|name| name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    })
}

/// For the assignment rules: `"input_tokens": 12345678` (escaped JSON in a tool's output) is a
/// count, and `token = read_token(path)` (group 3 holds the `(`) is code an agent is reading.
fn is_count_or_code(caps: &Captures<'_>) -> bool {
    if caps.get(3).is_some() {
        return true;
    }
    let (Some(name), Some(value)) = (caps.get(1), caps.get(2)) else {
        return false;
    };
    let name = name.as_str().as_bytes();
    name.len() >= 6
        && name[name.len() - 6..].eq_ignore_ascii_case(b"tokens")
        && value.as_str().bytes().all(|b| b.is_ascii_digit())
}

/// For "the password is ...": agents write prose about secrets ("the password is incorrect."),
/// and a short value of letters only is a word, not a credential.
fn is_prose_word(caps: &Captures<'_>) -> bool {
    let Some(value) = caps.get(1) else {
        return false;
    };
    let word = value.as_str().trim_end_matches(['.', '!', '?', ':', ')']);
    word.len() < 16 && word.chars().all(char::is_alphabetic)
}

/// How the text a rule runs on is written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Escaping {
    /// Plain text: any span may be replaced.
    None,
    /// The raw content of a JSON string literal: spans are widened to whole escapes.
    Json,
}

/// Where [`Redactor::families_to_run`] looks for a match of any rule.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Window {
    /// The whole text.
    Whole,
    /// In long text, only the lines around the triggers. Sound in any text, JSON or not: no
    /// rule but the PEM one matches across a `\n` pair (see [`trigger_lines`]), and every
    /// match holds a trigger.
    Lines,
}

/// Whether `text` is one JSON value.
fn is_json(text: &str) -> bool {
    serde_json::from_str::<IgnoredAny>(text).is_ok()
}

/// Compiled redaction rules; build once ([`Redactor::new`] or [`global`]) and share.
pub struct Redactor {
    /// [`EXACT_TRIGGERS`], searched in the text as written.
    exact_triggers: AhoCorasick,
    /// [`WORD_TRIGGERS`], searched in an ASCII-lowercased copy.
    word_triggers: AhoCorasick,
    /// In the kcap CLI's order.
    text_rules: Vec<TextRule>,
    /// Matches where any text rule matches.
    any_text_rule: Regex,
    /// A JSON key whose string value is a secret.
    secret_key: Regex,
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new()
    }
}

impl Redactor {
    pub fn new() -> Self {
        let rule = |family: u16, pattern: &str, group: usize| TextRule {
            family,
            // The patterns are constants; the unit tests compile every one of them.
            regex: Regex::new(pattern).expect("redaction pattern is a valid regex"),
            group,
            items: false,
            exempt: never_exempt,
        };
        // A value in text: its own characters, or escaped ones.
        let value = |class: &str| format!("(?:{ESC}|[{class}])");
        let query_value = value(r#"^&#\s"'\\<>"#);
        let token_value = value(r#"^\s"'\\"#);
        let text_rules = vec![
            // A block without its END line (cut-off output) is redacted to the end of the text.
            rule(
                family::PEM,
                r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)",
                0,
            ),
            rule(
                family::AWS,
                r"(?:AKIA|ASIA|AROA|AIDA|AGPA|ANPA|ANVA|AIPA|ABIA|ACCA|APKA|ASCA|A3T[A-Z0-9])[A-Z0-9]{16,128}",
                0,
            ),
            rule(
                family::VENDOR,
                &format!(r"{BOUNDARY}(sk-[A-Za-z0-9_-]{{10,}})"),
                1,
            ),
            rule(
                family::VENDOR,
                r"(?:gh[pousr]_|github_pat_|cfat_|[sr]k_live_|[sr]k_test_|xox[abposr]-|pypi-|npm_|glpat-|dckr_pat_|dckr_oat_)[A-Za-z0-9_-]{10,}|AIza[A-Za-z0-9_-]{30,}",
                0,
            ),
            rule(
                family::JWT,
                r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
                0,
            ),
            rule(
                family::WEBHOOK,
                r"(?i)(?:hooks\.slack\.com(?:/|\\+/)(?:services|workflows|triggers)|discord(?:app)?\.com(?:/|\\+/)api(?:/|\\+/)(?:v[0-9]+(?:/|\\+/))?webhooks)(?:/|\\+/)((?:[A-Za-z0-9_-]|/|\\+/)+)",
                1,
            ),
            // A header list entry written in text (HAR, fetch logs): the value of a pair whose
            // name is a credential header. Before the header rule, which would stop at the
            // name's closing quote.
            rule(
                family::HEADER,
                &format!(
                    r#"(?i)\\*"name\\*"[ \t]*:[ \t]*\\*"(?:{HEADER_NAMES})\\*"[ \t]*,[ \t]*\\*"value\\*"[ \t]*:[ \t]*\\*"({QUOTED_CONTENT})"#
                ),
                1,
            ),
            // `"Set-Cookie": ["a=b", "c=d"]` in text: every string of the array.
            TextRule {
                items: true,
                ..rule(
                    family::HEADER,
                    &format!(
                        r#"(?i)\\*"(?:{HEADER_NAMES})\\*"[ \t]*:[ \t]*\[((?:[ \t]*,?[ \t]*\\*"(?:{QUOTED_CONTENT})?\\*")+)"#
                    ),
                    1,
                )
            },
            // The header name stays; its value (scheme included) goes. Optional quotes around
            // the name and value catch `{"Authorization": "..."}` written inside text, and a
            // `b` before the quote a Python bytes repr. Quoted parameters (`Digest
            // username="a", response="..."`, `Cookie: sid="..."`) belong to the value.
            rule(
                family::HEADER,
                &format!(
                    r#"(?i)(?:{HEADER_NAMES}|[a-z0-9-]*subscription-key|x-[a-z0-9-]*(?:api-key|token|secret|password|signature))(?:\\*["'])?[ \t]*:[ \t]*(?:b?\\*["'])?((?:{ESC}|[^\\"'\r\n\[])(?:=\\*"[^"\\\r\n]*\\*"|{ESC}|[^\\"'\r\n])*)"#
                ),
                1,
            ),
            rule(
                family::QUERY,
                &format!(
                    r#"(?i)(?:[?&]|\\+u0026)[a-z0-9_.\-]*(?:token|secret|passw(?:or)?d|pass|pwd|key|sig|signature|auth|credential|sas|awsaccesskeyid)=({query_value}+)"#
                ),
                1,
            ),
            rule(
                family::USERINFO,
                &format!(
                    r#"(?i)[a-z][a-z0-9+.\-]*:(?://|\\+/\\+/)[^\s/?#@"'\\:]*:((?:{ESC}|[^\s/?#@"'\\])+)@"#
                ),
                1,
            ),
            rule(
                family::COMMAND,
                &format!(
                    r#"curl(?:[^\r\n|;&\\]|\\+["'])*?[ \t](?:-u|-U|--user|--proxy-user)(?:[ \t]+|=)?\\*["']?[^:\s"'\\]*:({token_value}+)"#
                ),
                1,
            ),
            rule(
                family::COMMAND,
                &format!(
                    r#"(?i:mysql[a-z]*|mariadb[a-z-]*)(?:[^\r\n|;&\\]|\\+["'])*?[ \t]-p\\*["']?({token_value}+)"#
                ),
                1,
            ),
            // A `.pgpass` line: host:port:database:user:password.
            rule(
                family::COMMAND,
                &format!(
                    r#"(?m)(?:^|[\s"'=]|\\+[nt"])[A-Za-z0-9_.\-*\[\]]+:(?:[0-9]{{1,5}}|\*):[^:\s"'\\]+:[^:\s"'\\]+:({token_value}+)"#
                ),
                1,
            ),
            // A JSON object written in text whose key names a secret, as the kcap CLI matches
            // it: the value goes whatever its length.
            rule(
                family::ASSIGNMENT,
                &format!(
                    r#"(?i)\\*"(?:[^"\\\r\n]*(?:{NAME_WORDS})[^"\\\r\n]*|[^"\\\r\n]*auth|[^"\\\r\n]*(?:{HEADER_NAMES}))\\*"[ \t]*:[ \t]*\\*"({QUOTED_CONTENT})"#
                ),
                1,
            ),
            TextRule {
                exempt: is_count_or_code,
                ..rule(
                    family::ASSIGNMENT,
                    &format!(
                        r#"(?i)([A-Za-z0-9_.\-]*(?:{NAME_WORDS})[A-Za-z0-9_.\-]*)(?:\\*["'])?(?:[ \t]*=[ \t]*(?:\\*["'])?|[ \t]*:[ \t]+(?:\\*["'])?|[ \t]*:\\*["'])((?:{ESC}|[^\s"'\\,;&<>{{}}\[\]()`|]){{8,}})([(\[])?"#
                    ),
                    2,
                )
            },
            // The kcap CLI's env-var rule: `NAME=value` with no blank, any length.
            TextRule {
                exempt: is_shell_reference,
                ..rule(
                    family::ASSIGNMENT,
                    &format!(
                        r#"(?i)([A-Za-z0-9_]*(?:secrets?|tokens?|passwords?|passwd|pwd|api_?keys?|private_?keys?|credentials?|access_?keys?)[A-Za-z0-9_]*)=(?:\\*["'])?((?:{ESC}|[^\s"'\\`;&|<>(){{}}\[\]=])(?:{ESC}|[^\s"'\\`;&|<>(){{}}\[\]])*)([(\[])?"#
                    ),
                    2,
                )
            },
            // The kcap CLI's YAML rule: `name: value` with punctuation in the value (not a
            // quote, which closes the value in the quoted forms the rules above took).
            rule(
                family::ASSIGNMENT,
                &format!(r#"(?i)(?:{NAME_WORDS})[\w.\-]*:[ \t]+((?:{ESC}|[^\s"'\\]){{8,}})"#),
                1,
            ),
            rule(
                family::LABEL,
                r#"(?i)(?:bearer|token|api[ _-]?key|access[ _-]?key|secret[ _-]?key|client[ _-]?secret)(?:[ \t]*[:=][ \t]*|[ \t]+(?:(?:is|was)[ \t]+)?)(?:\\*["'])?([A-Za-z0-9_\-./+=~]{16,})"#,
                1,
            ),
            // The kcap CLI's labelled rule: keyword, blanks, 16 or more characters.
            rule(
                family::LABEL,
                &format!(
                    r#"(?i){BOUNDARY}(?:secrets?|tokens?|passwords?|passwd|pwd|api[_.-]?keys?|private[_.-]?keys?|credentials?|client[_.-]?secrets?|access[_.-]?keys?|auth[_.-]?tokens?)(?-u:\b)[ \t]+((?:{ESC}|[^\s"\\]){{16,}})"#
                ),
                1,
            ),
            // `.netrc`: `password X` alone on its line, or after `login Y`. (The end of the line
            // may be a run of backslashes at the end of a window of [`trigger_lines`].)
            rule(
                family::LABEL,
                &format!(
                    r#"(?m)(?:(?:^|\\+n)[ \t]*|(?-u:\b)login[ \t]+[^\s"'\\]+[ \t]+)password[ \t]+({token_value}+)[ \t]*(?:$|\\+[rn]|\\+$|\\*["'])"#
                ),
                1,
            ),
            // A quoted string that is a bearer credential (`b'Bearer ...'` in a Python repr).
            rule(
                family::LABEL,
                &format!(r#"(?i)b?\\*['"]bearer[ \t]+({token_value}+)\\*['"]"#),
                1,
            ),
            TextRule {
                exempt: is_call,
                ..rule(
                    family::LABEL,
                    &format!(
                        r#"(?i)(?:password|passwd|passphrase|pwd|secret)(?:\\*["'])?[ \t]*[:=][ \t]*(?:\\*["'])?((?:{ESC}|[^\s"'\\,;]){{4,}})"#
                    ),
                    1,
                )
            },
            TextRule {
                exempt: is_prose_word,
                ..rule(
                    family::LABEL,
                    r#"(?i)(?:password|passwd|passphrase|secret)[ \t]+(?:is|was)[ \t]+(?:\\*["'])?([^\s"'\\,;]{6,})"#,
                    1,
                )
            },
            // The kcap CLI's connection string rule: the value runs to `;` or the end, blanks
            // included.
            rule(
                family::CONNECTION,
                &format!(r#"(?i)(?:password|pwd)[ \t]*=[ \t]*((?:{ESC}|[^;"'\\\r\n])+)(?:;|$)"#),
                1,
            ),
            rule(
                family::CONNECTION,
                r#"(?i)(?:password|pwd)[ \t]*=[ \t]*(?:\\*["'])?([^;"'\\\s]+)"#,
                1,
            ),
        ];
        let any_text_rule = regex::RegexBuilder::new(
            &text_rules
                .iter()
                .map(|rule| format!("(?:{})", rule.regex.as_str()))
                .collect::<Vec<_>>()
                .join("|"),
        )
        // The union of every text rule is a large automaton: with the default lazy-DFA cache
        // it is cleared and rebuilt again and again on long tool outputs (measured: most of
        // the shipping time). A bigger cache is filled once and then reused.
        .dfa_size_limit(8 << 20)
        .build()
        .expect("a union of valid regexes is valid");
        let secret_key = Regex::new(&format!(
            r"(?i)(?:{NAME_WORDS})|(?:{HEADER_NAMES}|auth|cookies)$"
        ))
        .expect("redaction pattern is a valid regex");
        let triggers = |list: &[(&str, u16)]| {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostFirst)
                .build(list.iter().map(|(word, _)| word))
                // A few dozen short constant words: far below any automaton size limit.
                .expect("trigger automaton builds")
        };
        Redactor {
            exact_triggers: triggers(EXACT_TRIGGERS),
            word_triggers: triggers(WORD_TRIGGERS),
            text_rules,
            any_text_rule,
            secret_key,
        }
    }

    /// The shipping path: one line's bytes (no terminator, no BOM) to the text sent in
    /// `lines`. Oversize lines become the placeholder; invalid UTF-8 becomes U+FFFD.
    pub fn redact_line(&self, raw: &[u8]) -> String {
        if is_oversize(raw) {
            return oversize_placeholder(raw.len() as u64);
        }
        // Checking first is much faster than the lossy conversion, and almost always succeeds.
        let text = match std::str::from_utf8(raw) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(raw),
        };
        let redacted = self.redact_text(&text);
        if let Cow::Owned(redacted) = redacted {
            return redacted;
        }
        text.into_owned()
    }

    /// The same rules for text that is not a raw line, such as the child's decoded last
    /// message. JSON text gets the JSON treatment; anything else the text rules.
    pub fn redact_text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        // Provider rules first: the rules below would cut a provider token at `|` or `:`.
        match provider_glue::redact(Cow::Borrowed(text)) {
            Cow::Borrowed(text) => self.redact_text_rules(text),
            Cow::Owned(redacted) => Cow::Owned(self.redact_text_rules(&redacted).into_owned()),
        }
    }

    fn redact_text_rules<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let hits = self.trigger_hits(text);
        if hits.is_empty() {
            return Cow::Borrowed(text);
        }
        let families = hits.iter().fold(0, |acc, hit| acc | hit.families);
        let hit_starts = || hits.iter().map(|h| h.start);
        // Whether the text is JSON decides how it is redacted, and in a long line (tool output)
        // checking is a fair share of the cost. Most such lines match no text rule anywhere,
        // though, and then neither reading needs the answer: as text nothing changes, and as
        // JSON only the key rule can (a rule matching inside a string matches in the lines of
        // the whole text too). So the check runs only when there is something to redact. Short
        // lines keep the check first: per string, most triggers are ruled out without a regex.
        if text.len() > WINDOWED_GATE_MIN_BYTES
            && self.families_to_run(text, families, Window::Lines, hit_starts()) == 0
        {
            let redacted = self.redact_json(text, &hits, false);
            return match redacted {
                Cow::Owned(_) if is_json(text) => redacted,
                _ => Cow::Borrowed(text),
            };
        }
        if is_json(text) {
            self.redact_json(text, &hits, true)
        } else {
            let hits = hits.iter().map(|hit| (hit.start, hit.families));
            self.redact_in_text(text, families, hits, Escaping::None)
        }
    }

    /// Every trigger occurrence, ordered by start. The case-insensitive words are searched
    /// case-sensitively in an ASCII-lowercased copy: a case-insensitive automaton cannot use
    /// the vectorised literal search and is several times slower, and secret-free lines spend
    /// most of their time here.
    fn trigger_hits(&self, text: &str) -> Vec<Hit> {
        let mut hits = Vec::new();
        collect_hits(
            &self.exact_triggers,
            EXACT_TRIGGERS,
            text.as_bytes(),
            &mut hits,
        );
        let lowered = text.as_bytes().to_ascii_lowercase();
        collect_hits(&self.word_triggers, WORD_TRIGGERS, &lowered, &mut hits);
        let mut from = 0;
        while let Some(offset) = text
            .as_bytes()
            .get(from..)
            .and_then(|rest| memmem::find(rest, PGPASS_WILDCARD))
        {
            hits.push(Hit {
                start: from + offset,
                families: family::COMMAND,
            });
            from += offset + 1;
        }
        hits.sort_unstable_by_key(|hit| hit.start);
        hits
    }

    /// `line` is valid JSON: text rules inside each string that holds a trigger (unless
    /// `text_rules` is false), the key rules on the structure. Given any other text it returns
    /// nonsense, but does not panic.
    ///
    /// The key rules, as the kcap CLI applies them: every string under a key that names a
    /// secret goes, directly or anywhere in an object or array it holds (numbers, booleans and
    /// keys stay); and in a header list entry (`{"name": "Cookie", "value": "..."}`, as HAR
    /// and fetch logs write them) whose name is a secret's, the value goes.
    fn redact_json<'a>(&self, line: &'a str, hits: &[Hit], text_rules: bool) -> Cow<'a, str> {
        let bytes = line.as_bytes();
        let mut edits: Vec<(Range<usize>, Cow<'a, str>)> = Vec::new();
        let mut next_hit = 0;
        // What the key just read says about the value that follows.
        let mut pending = KeyRole::Other;
        // One entry per open container: `Some` for an object, tracking its header-list pair.
        let mut containers: Vec<Option<HeaderPair>> = Vec::new();
        // Depth of the container a secret key opened: everything under it is secret.
        let mut secret_depth: Option<usize> = None;
        let mut pos = 0;
        while pos < bytes.len() {
            let byte = bytes[pos];
            match byte {
                b'{' | b'[' => {
                    containers.push((byte == b'{').then(HeaderPair::default));
                    if pending == KeyRole::Secret && secret_depth.is_none() {
                        secret_depth = Some(containers.len());
                    }
                    pending = KeyRole::Other;
                    pos += 1;
                    continue;
                }
                b'}' | b']' => {
                    if secret_depth == Some(containers.len()) {
                        secret_depth = None;
                    }
                    if let Some(Some(HeaderPair {
                        name_is_secret: true,
                        value: Some(value),
                    })) = containers.pop()
                    {
                        edits.push((value, Cow::Borrowed(REDACTED)));
                    }
                    pending = KeyRole::Other;
                    pos += 1;
                    continue;
                }
                b'"' => {}
                b',' => {
                    pending = KeyRole::Other;
                    pos += 1;
                    continue;
                }
                _ => {
                    pos += 1;
                    continue;
                }
            }
            // Outside strings a quote can only open one, since the line is valid JSON.
            let open = pos;
            let close = string_end(bytes, open + 1);
            let content = open + 1..close;
            pos = close + 1;

            // Triggers contain no quote, so one starting inside the content ends inside it.
            while next_hit < hits.len() && hits[next_hit].start < content.start {
                next_hit += 1;
            }
            let first_hit = next_hit;
            let mut families = 0;
            while next_hit < hits.len() && hits[next_hit].start < content.end {
                families |= hits[next_hit].families;
                next_hit += 1;
            }
            let names_secret = || {
                families & family::KEY_NAME != 0
                    || (families & family::KEY != 0
                        && self.secret_key.is_match(&line[content.clone()]))
            };

            let after = skip_json_whitespace(bytes, close + 1);
            let is_key = bytes.get(after) == Some(&b':');
            let mut whole = false;
            if is_key {
                pending = if names_secret() {
                    KeyRole::Secret
                } else {
                    match &line[content.clone()] {
                        "name" | "Name" => KeyRole::PairName,
                        "value" | "Value" => KeyRole::PairValue,
                        _ => KeyRole::Other,
                    }
                };
            } else {
                let object = containers.last_mut().and_then(Option::as_mut);
                match (pending, object) {
                    (KeyRole::Secret, _) => whole = true,
                    (KeyRole::PairName, Some(pair)) => pair.name_is_secret = names_secret(),
                    (KeyRole::PairValue, Some(pair)) => pair.value = Some(content.clone()),
                    _ => {}
                }
                whole |= secret_depth.is_some();
                pending = KeyRole::Other;
            }
            if whole {
                if !content.is_empty() {
                    edits.push((content, Cow::Borrowed(REDACTED)));
                }
                continue;
            }
            if text_rules && families & !family::KEYS != 0 {
                let text = &line[content.clone()];
                let hits = hits[first_hit..next_hit]
                    .iter()
                    .map(|hit| (hit.start - content.start, hit.families));
                if let Cow::Owned(redacted) =
                    self.redact_in_text(text, families, hits, Escaping::Json)
                {
                    edits.push((content, Cow::Owned(redacted)));
                }
            }
        }
        if edits.is_empty() {
            return Cow::Borrowed(line);
        }
        // A header pair's value is found at its object's end, after any text-rule edit of the
        // same string: order by position, and let the whole-value edit win.
        edits.sort_by_key(|(range, replacement)| (range.start, *replacement != REDACTED));
        edits.dedup_by_key(|(range, _)| range.start);
        let mut out = String::with_capacity(line.len());
        let mut copied = 0;
        for (range, replacement) in edits {
            out.push_str(&line[copied..range.start]);
            out.push_str(&replacement);
            copied = range.end;
        }
        out.push_str(&line[copied..]);
        Cow::Owned(out)
    }

    /// The text rule families worth running on `text`: none, usually. `hit_starts` are the
    /// trigger positions in `text`.
    fn families_to_run(
        &self,
        text: &str,
        families: u16,
        window: Window,
        hit_starts: impl Iterator<Item = usize>,
    ) -> u16 {
        let mut families = families & !family::KEYS;
        // A name or label is followed by `:`, `=` or a space before its value; identifiers
        // such as the `input_tokens` key of every `token_count` line have none of them.
        if families & family::SEPARATED != 0 && !has_separator(text.as_bytes()) {
            families &= !family::SEPARATED;
        }
        if families == 0 {
            return 0;
        }
        // Triggers are common words ("token", "key="): most strings holding one still match no
        // rule, and one pass of the union of all rules answers that. In a long JSON string
        // (tool output) only the lines around the triggers need that pass: no rule but the PEM
        // one matches across an escaped line break.
        let matches = if window == Window::Lines
            && text.len() > WINDOWED_GATE_MIN_BYTES
            && families & family::PEM == 0
        {
            trigger_lines(text.as_bytes(), hit_starts)
                .into_iter()
                .any(|lines| self.any_text_rule.is_match(&text[lines]))
        } else {
            self.any_text_rule.is_match(text)
        };
        if matches { families } else { 0 }
    }

    /// The text rules run where they can match in `text` (the whole of a non-JSON text, or a
    /// JSON string's raw content): `hits` are its trigger occurrences (start, families), in
    /// order, and `families` all of theirs.
    ///
    /// A long text is redacted line by line, and only on the lines around the triggers, each
    /// with the families of its own triggers: running every rule a trigger word names over
    /// all of a long tool output is most of the cost of a line that holds a secret. This
    /// gives what running the rules over the whole text gives, because no rule but the PEM
    /// one matches across a line break of [`trigger_lines`] (so every match lies on one line),
    /// every match of a rule holds a trigger of its family (so only lines holding one can
    /// change, and only through their triggers' families), and a redaction never removes a
    /// line break or adds a trigger (so the later rules, which run on the earlier ones'
    /// output, still find theirs on the same lines).
    fn redact_in_text<'a>(
        &self,
        text: &'a str,
        families: u16,
        hits: impl Iterator<Item = (usize, u16)>,
        escaping: Escaping,
    ) -> Cow<'a, str> {
        if text.len() <= WINDOWED_GATE_MIN_BYTES || families & family::PEM != 0 {
            let families = self.families_to_run(text, families, Window::Whole, std::iter::empty());
            return self.run_text_rules(text, families, escaping);
        }
        let mut out: Option<String> = None;
        let mut copied = 0;
        for (lines, families) in trigger_windows(text.as_bytes(), hits) {
            let window = &text[lines.clone()];
            let families =
                self.families_to_run(window, families, Window::Whole, std::iter::empty());
            if let Cow::Owned(redacted) = self.run_text_rules(window, families, escaping) {
                let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
                out.push_str(&text[copied..lines.start]);
                out.push_str(&redacted);
                copied = lines.end;
            }
        }
        match out {
            Some(mut out) => {
                out.push_str(&text[copied..]);
                Cow::Owned(out)
            }
            None => Cow::Borrowed(text),
        }
    }

    /// Runs the text rules of `families`, in order, each on the previous one's output.
    fn run_text_rules<'a>(&self, text: &'a str, families: u16, escaping: Escaping) -> Cow<'a, str> {
        let mut current = Cow::Borrowed(text);
        if families == 0 {
            return current;
        }
        for rule in &self.text_rules {
            if rule.family & families == 0 {
                continue;
            }
            if let Some(redacted) = rule.apply(&current, escaping) {
                current = Cow::Owned(redacted);
            }
        }
        current
    }
}

/// Below this size a JSON string is checked whole rather than line by line.
const WINDOWED_GATE_MIN_BYTES: usize = 1024;

/// Appends every occurrence of `triggers` in `haystack`.
fn collect_hits(
    triggers: &AhoCorasick,
    list: &[(&str, u16)],
    haystack: &[u8],
    hits: &mut Vec<Hit>,
) {
    let mut from = 0;
    while let Some(m) = triggers.find(Input::new(haystack).range(from..)) {
        hits.push(Hit {
            start: m.start(),
            families: list[m.pattern().as_usize()].1,
        });
        // Resume just after the start, not the end: `api_key=` holds both `api_key` and
        // `key=`. (No two triggers of one list match at the same start, so none is lost.)
        from = m.start() + 1;
    }
}

/// What a JSON key says about the value after it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyRole {
    /// The key names a secret.
    Secret,
    /// `name` in a header list entry.
    PairName,
    /// `value` in a header list entry.
    PairValue,
    Other,
}

/// An object's `name` and `value` members, for header lists.
#[derive(Default)]
struct HeaderPair {
    name_is_secret: bool,
    /// The raw content of its `value` string.
    value: Option<Range<usize>>,
}

/// A trigger occurrence.
struct Hit {
    start: usize,
    families: u16,
}

impl TextRule {
    /// `text` with this rule's secrets replaced, or `None` when it has none.
    fn apply(&self, text: &str, escaping: Escaping) -> Option<String> {
        let mut spans: Vec<Range<usize>> = Vec::new();
        let mut escapes: Option<Vec<Range<usize>>> = None;
        let mut secrets: Vec<Range<usize>> = Vec::new();
        for caps in self.regex.captures_iter(text) {
            let Some(secret) = caps.get(self.group) else {
                continue;
            };
            // An earlier rule may have taken part of what this one sees as the value (`my` of
            // `Password=my secret pass;`): then the whole goes, marker included.
            if secret.as_str() == REDACTED || (self.exempt)(&caps) {
                continue;
            }
            secrets.clear();
            if self.items {
                static ITEM: LazyLock<Regex> = LazyLock::new(|| {
                    Regex::new(&format!(r#"\\*"({QUOTED_CONTENT})"#))
                        // A constant pattern; the unit tests run it.
                        .expect("item pattern is a valid regex")
                });
                secrets.extend(
                    ITEM.captures_iter(secret.as_str())
                        .filter_map(|item| item.get(1))
                        .filter(|item| item.as_str() != REDACTED)
                        .map(|item| secret.start() + item.start()..secret.start() + item.end()),
                );
            } else {
                secrets.push(secret.range());
            }
            for span in secrets.drain(..) {
                let mut span = span;
                if escaping == Escaping::Json {
                    let escapes = escapes.get_or_insert_with(|| escape_sequences(text.as_bytes()));
                    span = widen_to_escapes(span, escapes);
                }
                match spans.last_mut() {
                    // Widening can reach into the previous span; merge instead of overlapping.
                    Some(last) if span.start <= last.end => last.end = last.end.max(span.end),
                    _ => spans.push(span),
                }
            }
        }
        if spans.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        let mut copied = 0;
        for span in spans {
            out.push_str(&text[copied..span.start]);
            out.push_str(REDACTED);
            copied = span.end;
        }
        out.push_str(&text[copied..]);
        Some(out)
    }
}

/// Index of the quote closing the string whose content starts at `from` (or the end of input).
fn string_end(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    while let Some(offset) = bytes.get(i..).and_then(|rest| memchr2(b'"', b'\\', rest)) {
        let at = i + offset;
        if bytes[at] == b'"' {
            return at;
        }
        // The escaped character is never a quote that ends the string.
        i = at + 2;
    }
    bytes.len()
}

/// The lines of a JSON string's raw content that hold the triggers at `hit_starts`
/// (ascending). Lines are split at every backslash followed by `n`, whether it is a `\n`
/// escape or (in JSON encoded twice, as shell tool output is) the `n` after an escaped
/// backslash: no rule other than the PEM one matches text containing that pair, except as the
/// word boundary it starts with, so a line starts at its leading backslash (and ends after its own). Linear: each byte
/// is searched at most twice.
fn trigger_lines(content: &[u8], hit_starts: impl Iterator<Item = usize>) -> Vec<Range<usize>> {
    trigger_windows(content, hit_starts.map(|at| (at, 0)))
        .into_iter()
        .map(|(lines, _)| lines)
        .collect()
}

/// [`trigger_lines`] for triggers given with their families: each run of lines with the
/// families of the triggers it holds.
fn trigger_windows(
    content: &[u8],
    hits: impl Iterator<Item = (usize, u16)>,
) -> Vec<(Range<usize>, u16)> {
    static FORWARD: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(LINE_BREAK));
    static BACKWARD: LazyLock<memmem::FinderRev<'static>> =
        LazyLock::new(|| memmem::FinderRev::new(LINE_BREAK));
    let mut windows: Vec<(Range<usize>, u16)> = Vec::new();
    for (at, families) in hits {
        let floor = match windows.last_mut() {
            Some((last, last_families)) if at < last.end => {
                *last_families |= families;
                continue;
            }
            Some((last, _)) => last.end,
            None => 0,
        };
        let start = content
            .get(floor..at)
            .and_then(|before| BACKWARD.rfind(before))
            .map_or(floor, |offset| floor + offset);
        let end = content
            .get(at..)
            .and_then(|after| FORWARD.find(after))
            // The break itself is part of the window: a window ending just before it would
            // end as the text does, and `$` would match there (`Password=a b` then a break).
            .map_or(content.len(), |offset| at + offset + LINE_BREAK.len());
        match windows.last_mut() {
            Some((last, last_families)) if start <= last.end => {
                last.end = end;
                *last_families |= families;
            }
            _ => windows.push((start..end, families)),
        }
    }
    windows
}

const LINE_BREAK: &[u8] = b"\\n";

fn has_separator(text: &[u8]) -> bool {
    memchr3(b':', b'=', b' ', text).is_some() || memchr(b'\t', text).is_some()
}

fn skip_json_whitespace(bytes: &[u8], mut i: usize) -> usize {
    while matches!(bytes.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The escape sequences of a JSON string's raw content, in order. A surrogate pair
/// (`\ud83d\ude00`) is one unit: cutting between its halves leaves invalid JSON.
fn escape_sequences(content: &[u8]) -> Vec<Range<usize>> {
    let mut units = Vec::new();
    let mut i = 0;
    while let Some(offset) = content.get(i..).and_then(|rest| memchr(b'\\', rest)) {
        let start = i + offset;
        let is_unicode = content.get(start + 1) == Some(&b'u');
        let mut end = (start + if is_unicode { 6 } else { 2 }).min(content.len());
        if is_unicode
            && is_surrogate(content.get(start + 2..end), 0xD800)
            && content.get(end..end + 2) == Some(b"\\u")
            && is_surrogate(content.get(end + 2..end + 6), 0xDC00)
        {
            end += 6;
        }
        units.push(start..end);
        i = end;
    }
    units
}

/// Whether `hex` is four hex digits in `base..base + 0x400` (a high or low surrogate).
fn is_surrogate(hex: Option<&[u8]>, base: u32) -> bool {
    hex.and_then(|hex| std::str::from_utf8(hex).ok())
        .filter(|hex| hex.len() == 4)
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .is_some_and(|code| (base..base + 0x400).contains(&code))
}

/// `span` grown so that neither end falls inside an escape sequence.
fn widen_to_escapes(mut span: Range<usize>, escapes: &[Range<usize>]) -> Range<usize> {
    let first = escapes.partition_point(|e| e.end <= span.start);
    if let Some(e) = escapes.get(first)
        && e.start < span.start
    {
        span.start = e.start;
    }
    let last = escapes.partition_point(|e| e.end <= span.end);
    if let Some(e) = escapes.get(last)
        && e.start < span.end
    {
        span.end = e.end;
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(text: &str) -> String {
        global().redact_text(text).into_owned()
    }

    #[test]
    fn every_pattern_compiles() {
        let redactor = Redactor::new();
        assert_eq!(redactor.text_rules.len(), 26);
    }

    #[test]
    fn no_trigger_is_a_prefix_of_another_in_its_list() {
        // The trigger scan resumes one byte after each hit's start, which finds every
        // occurrence only if no two triggers of a list can match at the same position.
        for list in [EXACT_TRIGGERS, WORD_TRIGGERS] {
            for (a, _) in list {
                for (b, _) in list {
                    assert!(a == b || !b.starts_with(a), "{a} is a prefix of {b}");
                }
            }
        }
        for (word, _) in WORD_TRIGGERS {
            assert_eq!(*word, word.to_ascii_lowercase());
        }
    }

    #[test]
    fn trigger_lists_fit_the_fast_searcher() {
        // A shorter word and the scan every line pays takes a slower searcher (see
        // `benches/redact.rs`); the number of words is checked at compile time.
        for list in [EXACT_TRIGGERS, WORD_TRIGGERS] {
            assert!(list.iter().all(|(word, _)| word.len() >= 3));
        }
    }

    #[test]
    fn moved_triggers_still_find_their_secrets() {
        for text in [
            "X-Api-Key: abcdefgh",
            "api.key=abcdefghij",
            "the API key is abcdefghijklmnop1234",
            r#"{"o":"https:\/\/u:pw@h\/"}"#,
            r#"x "AUTH\": \"abc\" y"#,
            "*:*:db:user:StarPass1",
        ] {
            assert_ne!(global().redact_text(text), text, "{text}");
        }
    }

    #[test]
    fn a_decoded_message_is_redacted_then_truncated() {
        let message = "Done. I used the deploy key:\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n-----END EC PRIVATE KEY-----\nand GITHUB_TOKEN=ghp_aBcDeFgHiJ0123456789 to push.";
        let redacted = global().redact_text(message);
        assert_eq!(
            redacted,
            "Done. I used the deploy key:\n[REDACTED]\nand GITHUB_TOKEN=[REDACTED] to push."
        );
        assert_eq!(truncate_utf8(&redacted, 12), "Done. I used");
    }

    #[test]
    fn placeholder_is_the_cli_text_plus_size() {
        assert_eq!(
            oversize_placeholder(70_000),
            r#"{"type":"redacted_oversize_line","reason":"line exceeded SecretRedactor size limit","original_bytes":70000}"#
        );
    }

    #[test]
    fn pem_block_inside_a_json_string() {
        let line = r#"{"output":"key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7v\nq3Zx\n-----END RSA PRIVATE KEY-----\ndone"}"#;
        assert_eq!(redact(line), r#"{"output":"key:\n[REDACTED]\ndone"}"#);
    }

    #[test]
    fn pem_block_without_end_is_redacted_to_the_end_of_its_string() {
        let line = r#"{"output":"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk","n":1}"#;
        assert_eq!(redact(line), r#"{"output":"[REDACTED]","n":1}"#);
    }

    #[test]
    fn pem_block_in_plain_text() {
        let text = "a\n-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\nb";
        assert_eq!(redact(text), "a\n[REDACTED]\nb");
    }

    #[test]
    fn aws_key_ids() {
        assert_eq!(
            redact(r#"{"o":"id=AKIAIOSFODNN7EXAMPLE and ASIAY34FZKBOKMUTVV7A"}"#),
            r#"{"o":"id=[REDACTED] and [REDACTED]"}"#
        );
    }

    #[test]
    fn vendor_tokens() {
        assert_eq!(
            redact(
                r#"{"o":"ghp_aBcDeFgHiJ0123456789 github_pat_11ABCDEFG0_abcdefghij glpat-xxxxxxxxxxyyyy npm_abcdefghij12 xoxb-1234567890-abc"}"#
            ),
            r#"{"o":"[REDACTED] [REDACTED] [REDACTED] [REDACTED] [REDACTED]"}"#
        );
        assert_eq!(
            redact("key sk-proj-abcdefghij12345 and sk_live_abcdefghij123"),
            "key [REDACTED] and [REDACTED]"
        );
        // Too short to be a token.
        assert_eq!(redact("ghp_short"), "ghp_short");
    }

    #[test]
    fn sk_needs_a_word_boundary_which_a_json_escape_provides() {
        assert_eq!(redact("task-abcdefghijklmnop"), "task-abcdefghijklmnop");
        assert_eq!(
            redact(r#"{"o":"line\nsk-abcdefghijklmnop"}"#),
            r#"{"o":"line\n[REDACTED]"}"#
        );
    }

    #[test]
    fn credential_header_values() {
        assert_eq!(
            redact(r#"{"o":"> Authorization: Bearer abc.def-123\r\n> Host: x\r\n"}"#),
            r#"{"o":"> Authorization: [REDACTED]\r\n> Host: x\r\n"}"#
        );
        assert_eq!(
            redact(r#"{"cmd":"curl -H 'X-Api-Key: abc123' -H \"Cookie: a=b; c=d\" u"}"#),
            r#"{"cmd":"curl -H 'X-Api-Key: [REDACTED]' -H \"Cookie: [REDACTED]\" u"}"#
        );
        assert_eq!(
            redact("Proxy-Authorization: Basic dXNlcjpwYXNz"),
            "Proxy-Authorization: [REDACTED]"
        );
    }

    #[test]
    fn header_objects_in_json() {
        assert_eq!(
            redact(r#"{"headers":{"Authorization":"Bearer abc","Accept":"*/*"}}"#),
            r#"{"headers":{"Authorization":"[REDACTED]","Accept":"*/*"}}"#
        );
    }

    #[test]
    fn url_query_secrets_and_userinfo_passwords() {
        assert_eq!(
            redact(r#"{"o":"GET https://api.x.io/v1?token=abc123&page=2&api_key=zzz"}"#),
            r#"{"o":"GET https://api.x.io/v1?token=[REDACTED]&page=2&api_key=[REDACTED]"}"#
        );
        assert_eq!(
            redact("https://s3.aws/b?X-Amz-Signature=deadbeef&sig=cafe"),
            "https://s3.aws/b?X-Amz-Signature=[REDACTED]&sig=[REDACTED]"
        );
        assert_eq!(
            redact(r#"{"o":"git clone https://alice:s3cr3tpw@git.example.com/r.git"}"#),
            r#"{"o":"git clone https://alice:[REDACTED]@git.example.com/r.git"}"#
        );
        assert_eq!(redact("http://host:8080/path"), "http://host:8080/path");
    }

    #[test]
    fn json_key_rule_redacts_strings_only() {
        let line = r#"{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":123,"output_tokens":45},"max_tokens":4096},"turn_id":"t1","api_key":"abc","db_password":"p","auth_token":null,"Secret":""}}"#;
        assert_eq!(
            redact(line),
            r#"{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":123,"output_tokens":45},"max_tokens":4096},"turn_id":"t1","api_key":"[REDACTED]","db_password":"[REDACTED]","auth_token":null,"Secret":""}}"#
        );
    }

    #[test]
    fn json_key_rule_replaces_escapes_whole() {
        assert_eq!(
            redact(r#"{"client_secret" : "a\"b\\c\u00e9"}"#),
            r#"{"client_secret" : "[REDACTED]"}"#
        );
    }

    #[test]
    fn assignments_and_yaml_pairs() {
        assert_eq!(
            redact("export GITHUB_TOKEN=abcdefgh12 DB_PASSWORD='hunter2hunter2'"),
            "export GITHUB_TOKEN=[REDACTED] DB_PASSWORD='[REDACTED]'"
        );
        assert_eq!(
            redact(r#"{"o":"db:\n  db_password: hunter2hunter2\n  user: bob"}"#),
            r#"{"o":"db:\n  db_password: [REDACTED]\n  user: bob"}"#
        );
        // JSON written inside a string (tool arguments) is text.
        assert_eq!(
            redact(r#"{"arguments":"{\"aws_secret_access_key\":\"wJalrXUtnFEMI/K7MDENG\"}"}"#),
            r#"{"arguments":"{\"aws_secret_access_key\":\"[REDACTED]\"}"}"#
        );
        // The kcap CLI redacts `NAME=value` whatever the value's length; token counts and
        // code are not secrets.
        assert_eq!(redact("MY_TOKEN=abc"), "MY_TOKEN=[REDACTED]");
        assert_eq!(redact("MY_TOKEN=$OTHER"), "MY_TOKEN=$OTHER");
        assert_eq!(redact("input_tokens=1234 ok"), "input_tokens=1234 ok");
        assert_eq!(
            redact("let api_key = std::env::var(name)?;"),
            "let api_key = std::env::var(name)?;"
        );
        assert_eq!(
            redact(r#"{"o":"{\"input_tokens\": 123456789}"}"#),
            r#"{"o":"{\"input_tokens\": 123456789}"}"#
        );
    }

    #[test]
    fn labelled_secrets() {
        assert_eq!(
            redact("use token abcdefghijklmnop1234 now"),
            "use token [REDACTED] now"
        );
        assert_eq!(
            redact("the secret is hunter2x and the password: pa55"),
            "the secret is [REDACTED] and the password: [REDACTED]"
        );
        assert_eq!(
            redact("Bearer eyJhbGciOiJIUzI1NiJ9.e30"),
            "Bearer [REDACTED]"
        );
        assert_eq!(redact("token validation"), "token validation");
        assert_eq!(
            redact("the password is incorrect."),
            "the password is incorrect."
        );
    }

    #[test]
    fn connection_string_passwords() {
        assert_eq!(
            redact(r#"{"o":"Server=x;User Id=u;Password=p4s;Pwd=q;"}"#),
            r#"{"o":"Server=x;User Id=u;Password=[REDACTED];Pwd=[REDACTED];"}"#
        );
    }

    #[test]
    fn the_key_rule_applies_only_to_json() {
        // No text rule matches a secret key's object, so only the structure can redact it,
        // and a cut-off line has none: shipping it unchanged is what the text rules say. A
        // quoted pair is text the kcap CLI's JSON key rule redacts anywhere. Short and long
        // lines take different paths.
        for filler in ["", &"x ".repeat(WINDOWED_GATE_MIN_BYTES)] {
            assert_eq!(
                redact(&format!(r#"{{"api_key":{{"v":"abc"}},"o":"{filler}"}}"#)),
                format!(r#"{{"api_key":{{"v":"[REDACTED]"}},"o":"{filler}"}}"#)
            );
            let cut_off = format!(r#"{{"api_key":{{"v":"abc"}},"o":"{filler}"#);
            assert_eq!(redact(&cut_off), cut_off);
            let not_json = format!(r#"x "api_key":"abc" {filler}"#);
            assert_eq!(
                redact(&not_json),
                format!(r#"x "api_key":"[REDACTED]" {filler}"#)
            );
            // Outside JSON the text rules still see everything.
            assert_eq!(
                redact(&format!(
                    r#"{filler} "token": "abcdefghijklmnop1234" {filler}"#
                )),
                format!(r#"{filler} "token": "[REDACTED]" {filler}"#)
            );
        }
    }

    /// [`Redactor::redact_text`] as it was before the JSON check could be skipped: check
    /// first, then redact.
    fn redact_checking_first(text: &str) -> String {
        let r = global();
        let hits = r.trigger_hits(text);
        if is_json(text) {
            return r.redact_json(text, &hits, true).into_owned();
        }
        let families = hits.iter().fold(0, |acc, hit| acc | hit.families);
        let hit_starts = hits.iter().map(|h| h.start);
        let families = r.families_to_run(text, families, Window::Whole, hit_starts);
        r.run_text_rules(text, families, Escaping::None)
            .into_owned()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Skipping the check never changes what ships, in JSON and not, around secrets,
        /// keys, escapes and line breaks, in lines long enough to skip it.
        #[test]
        fn skipping_the_json_check_changes_nothing(
            fragments in proptest::collection::vec(
                proptest::sample::select(&[
                    r#"{"api_key":"#, r#""abc""#, r#"{"o":""#, r#""}"#, r#"","#, r#"\n"#,
                    r#"\""#, r#"\\"#, "token ", "token: ", "abcdefghijklmnop1234 ", "\n",
                    "sk-abcdefghij1234 ", "-----BEGIN RSA PRIVATE KEY-----", "password=hunter2 ",
                    "https://u:pw@h/ ", "key=", "?sig=zz ", "{", "}", ":", ",", "[1,2]", " ",
                    "x y z w v u t s r q p o n m l k j i h g f e d c b a ",
                ][..]),
                0..120,
            ),
            wrap in proptest::bool::ANY,
        ) {
            let body = fragments.concat();
            let pad = "x ".repeat(WINDOWED_GATE_MIN_BYTES / 2 + 1);
            let text = if wrap {
                // Always valid JSON, with a key for the key rule.
                let output = serde_json::to_string(&format!("{pad}{body}")).unwrap();
                format!(r#"{{"api_key":"k","o":{output}}}"#)
            } else {
                format!("{pad}{body}")
            };
            proptest::prop_assert_eq!(global().redact_text(&text).into_owned(), redact_checking_first(&text));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Running the rules only on the lines around the triggers, each line with its own
        /// triggers' families, gives what running every family over the whole text gives:
        /// plain and escaped text, once and twice encoded line breaks, secrets of every family
        /// next to them.
        #[test]
        fn rules_on_trigger_lines_change_what_rules_on_the_whole_text_change(
            fragments in proptest::collection::vec(
                proptest::sample::select(&[
                    r"\n", r"\\n", r"\\\n", "\n", r#"\""#, r#"\\\""#, r"\\", r"\/",
                    r"\u0026", r"\u00e9", r"\t", "\t", " ", "=", ":", ";", "'", "\"",
                    "token ", "token: ", "TOKEN=", "abcdefghijklmnop1234", "hunter2hunter2",
                    "sk-abcdefghij1234", "ghp_aBcDeFgHiJ0123456789", "AKIAIOSFODNN7EXAMPLE",
                    "eyJhbGciOiJIUzI1.eyJzdWIiOiIx.SflKxwRJSMeKKF2", "password", "password ",
                    "password=", "Password=my secret pass;", "pwd=", "secret is ", "login bob ",
                    "https://u:pw@h/", "https:\\/\\/u:pw@h\\/", "?sig=zz", "&key=", "\\u0026sas=",
                    "Authorization: Bearer abc.def", r#"\"Cookie\": [\"a=b\", \"c\"]"#,
                    r#"\"name\":\"Cookie\",\"value\":\"s=1\""#, r#"\"api_key\": \"v\""#,
                    "curl -u bob:pw1 ", "mysql -ppw2 ", "h:5432:db:u:pw3", "*:*:db:u:pw4",
                    "hooks.slack.com/services/T0/B0/xyz", "b'Bearer abc'", "x y z ",
                ][..]),
                0..160,
            ),
            json in proptest::bool::ANY,
        ) {
            let pad = "x ".repeat(WINDOWED_GATE_MIN_BYTES / 2 + 1);
            let mut text = format!("{pad}{}", fragments.concat());
            if json {
                // A JSON string's raw content, as a tool's output is written.
                let encoded = serde_json::to_string(&text).unwrap();
                text = encoded[1..encoded.len() - 1].to_owned();
            }
            let r = global();
            let hits = r.trigger_hits(&text);
            let families = hits.iter().fold(0, |acc, hit| acc | hit.families);
            let escaping = if json { Escaping::Json } else { Escaping::None };
            let whole = r.run_text_rules(
                &text,
                r.families_to_run(&text, families, Window::Whole, std::iter::empty()),
                escaping,
            );
            let windowed = r.redact_in_text(
                &text,
                families,
                hits.iter().map(|hit| (hit.start, hit.families)),
                escaping,
            );
            proptest::prop_assert_eq!(windowed, whole);
        }
    }

    #[test]
    fn text_without_triggers_is_borrowed_untouched() {
        let line = r#"{"timestamp":"2026-07-28T16:14:05.115Z","type":"response_item","payload":{"type":"message","content":"hello"}}"#;
        assert!(matches!(global().redact_text(line), Cow::Borrowed(_)));
    }

    #[test]
    fn widening_keeps_surrogate_pairs_and_escapes_whole() {
        // A PEM block ending in the middle of a pair is cut after the whole pair.
        let content = br"a\ud83d\ude00b\\c";
        let escapes = escape_sequences(content);
        assert_eq!(escapes, vec![1..13, 14..16]);
        assert_eq!(widen_to_escapes(3..8, &escapes), 1..13);
        assert_eq!(widen_to_escapes(13..15, &escapes), 13..16);
        assert_eq!(widen_to_escapes(0..1, &escapes), 0..1);
    }

    #[test]
    fn lines_over_the_limit_become_the_placeholder() {
        let mut line = br#"{"o":""#.to_vec();
        line.resize(MAX_LINE_UTF16_UNITS - 2, b'a');
        line.extend_from_slice(br#""}"#);
        assert_eq!(line.len(), MAX_LINE_UTF16_UNITS);
        let mut with_secret = line.clone();
        with_secret[6..26].copy_from_slice(b"AKIAIOSFODNN7EXAMPLE");
        let shipped = global().redact_line(&with_secret);
        assert!(shipped.starts_with(r#"{"o":"[REDACTED]aaa"#));

        line.insert(6, b'a');
        assert_eq!(
            global().redact_line(&line),
            oversize_placeholder(MAX_LINE_UTF16_UNITS as u64 + 1)
        );
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters() {
        assert_eq!(
            global().redact_line(b"{\"o\":\"\xff token abcdefghijklmnop1234"),
            "{\"o\":\"\u{FFFD} token [REDACTED]"
        );
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("héllo", 3), "hé");
        assert_eq!(truncate_utf8("hi", 4096), "hi");
    }
}

// ---------------------------------------------------------------------------------------------
// GLUE (to be replaced by the engine helper's prefilter): runs the provider rules of
// `providers.rs` on a decoded view of the text, before the rules above, and maps their spans
// back to whole escapes of the raw text. Nothing else lives here.
// ---------------------------------------------------------------------------------------------

mod provider_glue {
    use std::borrow::Cow;
    use std::ops::Range;
    use std::sync::{LazyLock, OnceLock};

    use aho_corasick::AhoCorasick;
    use regex::Regex;

    use super::REDACTED;
    use super::providers::RULES;

    /// Every keyword, and the rule each belongs to.
    static KEYWORDS: LazyLock<(AhoCorasick, Vec<usize>)> = LazyLock::new(|| {
        let mut words = Vec::new();
        let mut owners = Vec::new();
        for (index, rule) in RULES.iter().enumerate() {
            for word in rule.keywords {
                words.push(*word);
                owners.push(index);
            }
        }
        let automaton = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(words)
            // A few hundred short constant words: far below any automaton size limit.
            .expect("provider keyword automaton builds");
        (automaton, owners)
    });

    /// Each rule's regex, compiled the first time a keyword of it occurs.
    static COMPILED: LazyLock<Vec<OnceLock<Regex>>> =
        LazyLock::new(|| RULES.iter().map(|_| OnceLock::new()).collect());

    pub(super) fn redact(text: Cow<'_, str>) -> Cow<'_, str> {
        let (automaton, owners) = &*KEYWORDS;
        let mut wanted = vec![false; RULES.len()];
        for m in automaton.find_overlapping_iter(text.as_ref()) {
            wanted[owners[m.pattern().as_usize()]] = true;
        }
        if !wanted.contains(&true) {
            return text;
        }
        // JSON escapes resolved twice: tool output inside a JSON string inside a line.
        let (once, first) = decode(&text);
        let (twice, second) = decode(&once);
        let mut found = Vec::new();
        for (index, rule) in RULES.iter().enumerate().filter(|(i, _)| wanted[*i]) {
            let regex = COMPILED[index].get_or_init(|| rule.compile());
            rule.find(regex, &twice, &mut found);
        }
        if found.is_empty() {
            return text;
        }
        let mut raw: Vec<Range<usize>> = found
            .into_iter()
            .map(|r| first[second[r.start]]..first[second[r.end]])
            .filter(|r| !r.is_empty())
            .collect();
        raw.sort_by_key(|r| r.start);
        let mut out = String::with_capacity(text.len());
        let mut copied = 0;
        for range in raw {
            if range.end <= copied {
                continue;
            }
            if range.start >= copied {
                out.push_str(&text[copied..range.start]);
                out.push_str(REDACTED);
            }
            copied = range.end;
        }
        out.push_str(&text[copied..]);
        Cow::Owned(out)
    }

    /// `text` with JSON escapes resolved, and for each byte of it (plus the end) the offset in
    /// `text` of the character or escape it came from.
    fn decode(text: &str) -> (String, Vec<usize>) {
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut map = Vec::with_capacity(text.len() + 1);
        let mut i = 0;
        while i < bytes.len() {
            let (ch, len) = match escape(bytes, i) {
                Some(decoded) => decoded,
                // `i` is always on a character boundary: escapes are ASCII.
                None => match text[i..].chars().next() {
                    Some(ch) => (ch, ch.len_utf8()),
                    None => break,
                },
            };
            out.push(ch);
            map.extend(std::iter::repeat_n(i, ch.len_utf8()));
            i += len;
        }
        map.push(bytes.len());
        (out, map)
    }

    /// The character a JSON escape at `i` stands for, and the escape's length.
    fn escape(bytes: &[u8], i: usize) -> Option<(char, usize)> {
        if bytes[i] != b'\\' {
            return None;
        }
        let simple = match *bytes.get(i + 1)? {
            b'n' => '\n',
            b't' => '\t',
            b'r' => '\r',
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'u' => {
                let unit = hex4(bytes, i + 2)?;
                if (0xD800..0xDC00).contains(&unit)
                    && bytes.get(i + 6) == Some(&b'\\')
                    && bytes.get(i + 7) == Some(&b'u')
                {
                    let low = hex4(bytes, i + 8)?;
                    if (0xDC00..0xE000).contains(&low) {
                        let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                        return char::from_u32(code).map(|c| (c, 12));
                    }
                    return None;
                }
                return char::from_u32(unit).map(|c| (c, 6));
            }
            _ => return None,
        };
        Some((simple, 2))
    }

    fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
        let digits = bytes.get(at..at + 4)?;
        if !digits.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    }
}
