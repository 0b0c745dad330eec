//! Encoded secrets (docs/behaviour.md T2.2): base64 (standard or URL-safe, padded or not,
//! wrapped at any fixed width), hex (`xxd -p`, a digest-shaped run) and `\xNN` escapes whose
//! decoding is text. The decoded text gets every rule; a secret found in it redacts the whole
//! encoded run, wrapping included: a part of an encoding left behind still decodes to part of
//! the secret.
//!
//! Cost: one pass over the bytes with a class table, finding runs long enough to hold 16 bytes.
//! Most such runs in a rollout are identifiers, paths, hashes or encrypted blobs (a reasoning
//! item's `encrypted_content`): the first 48 characters decode to something that is not text
//! and the run is dropped there. Only a run that decodes to text is decoded whole and redacted.
//! Percent-encoding is a view of the text itself ([`super::decode::visible`]), not a run.

use std::ops::Range;

use base64::Engine;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// Fewest characters of a run looked at: 16 bytes of base64 are 22 characters, and a vendor's
/// key ([`super::vendors`]) 20; one search finds both.
pub(crate) const MIN_RUN: usize = 20;
/// Fewest hex digits: 16 bytes.
const MIN_HEX: usize = 32;
/// Fewest `\xNN` escapes in a row: 16 bytes.
const MIN_ESCAPES: usize = 16;
/// Longest run decoded whole (larger ones are files, not credentials a line may show; their
/// start is still checked).
const MAX_RUN: usize = 1 << 20;
/// Characters of a run decoded first to tell text from bytes.
const PROBE: usize = 48;

/// A run of encoded text in the raw line: its extent and its segments (more than one when it
/// is wrapped over lines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    pub span: Range<usize>,
    /// The segments, or none for a run that cannot wrap: one segment, `span` (most runs of a
    /// line are identifiers, and a list each was an allocation each).
    segments: Vec<Range<usize>>,
}

impl Run {
    pub(crate) fn segments(&self) -> &[Range<usize>] {
        if self.segments.is_empty() {
            std::slice::from_ref(&self.span)
        } else {
            &self.segments
        }
    }
}

/// Every run of base64-alphabet characters long enough to hold 16 bytes, with its `=` padding,
/// joined with the runs that continue it on the next lines when it is wrapped (every segment
/// but the last of one length, at least 40, the last no longer). A line break is a newline,
/// CRLF, or either written as an escape (`\n`, `\\n` in JSON inside JSON). A backslash escape
/// never starts a run (`\nQUJD` holds the run `QUJD`, not `nQUJD`).
/// `found` are `text`'s long runs ([`super::runs::long_runs`] with [`MIN_RUN`]).
pub(crate) fn runs(text: &[u8], found: &[Range<usize>]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    let mut k = 0;
    while k < found.len() {
        let first = padded(text, found[k].clone());
        k += 1;
        // Too narrow to wrap, padded, or with no line break after it: one segment.
        if first.len() < 40
            || text[first.clone()].last() == Some(&b'=')
            || line_break_len(&text[first.end..]) == 0
        {
            out.push(Run {
                span: first,
                segments: Vec::new(),
            });
            continue;
        }
        let mut segments = vec![first];
        // A wrapped run: full-width segments, each after a line break, then a last one no
        // wider (which may be short of `MIN_RUN`, so looked for here).
        while let (Some(first), Some(last)) = (segments.first(), segments.last()) {
            let width = first.len();
            let wraps = width >= 40
                && segments.iter().all(|s| s.len() == width)
                && text[last.clone()].last() != Some(&b'=');
            if !wraps {
                break;
            }
            let lb = line_break_len(&text[last.end..]);
            if lb == 0 {
                break;
            }
            let from = last.end + lb;
            let mut end = from;
            while end < text.len() && super::runs::is_token(text[end]) {
                end += 1;
            }
            if end == from || end - from > width {
                break;
            }
            // A long next segment is also the next run found: taken here, not again.
            if found.get(k).is_some_and(|r| r.start == from) {
                k += 1;
            }
            segments.push(padded(text, from..end));
        }
        let span = segments[0].start..segments[segments.len() - 1].end;
        out.push(Run { span, segments });
    }
    out
}

/// A run with the `=` padding after it (at most two).
fn padded(text: &[u8], run: Range<usize>) -> Range<usize> {
    let mut end = run.end;
    while end < text.len() && end - run.end < 2 && text[end] == b'=' {
        end += 1;
    }
    run.start..end
}

/// Length of the line break at the start of `b`: `\n`, `\r\n`, or either escaped with one or
/// more backslashes.
fn line_break_len(b: &[u8]) -> usize {
    let mut i = 0;
    for _ in 0..2 {
        if b.get(i) == Some(&b'\r') {
            i += 1;
        } else if b.get(i) == Some(&b'\\') {
            let mut j = i;
            while b.get(j) == Some(&b'\\') {
                j += 1;
            }
            match b.get(j) {
                Some(b'r') => i = j + 1,
                Some(b'n') => return j + 1,
                _ => return 0,
            }
        }
        if b.get(i) == Some(&b'\n') {
            return i + 1;
        }
    }
    0
}

fn engine(url_safe: bool) -> GeneralPurpose {
    let config = GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true);
    let alphabet = if url_safe {
        &alphabet::URL_SAFE
    } else {
        &alphabet::STANDARD
    };
    GeneralPurpose::new(alphabet, config)
}

/// Whether decoded bytes are text: UTF-8 (a character cut at the end allowed), no control
/// character but blanks and line breaks, some letters or digits.
pub(crate) fn is_text(b: &[u8]) -> bool {
    let valid = match std::str::from_utf8(b) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    };
    valid
        && b.iter()
            .all(|&c| c >= 0x20 && c != 0x7f || matches!(c, b'\t' | b'\n' | b'\r'))
        && b.iter().filter(|c| c.is_ascii_alphanumeric()).count() * 2 >= b.len()
}

/// Whether the first characters of a run decode to printable ASCII, as hex or as base64: most
/// runs (hashes, identifiers, encrypted blobs) fail here, with nothing decoded or allocated.
fn starts_as_text(run: &[u8]) -> bool {
    let control = |c: u32| c < 0x20 && !matches!(c, 0x09 | 0x0a | 0x0d) || c == 0x7f;
    let ascii = |c: u32| (0x20..0x7f).contains(&c) || matches!(c, 0x09 | 0x0a | 0x0d);
    let hex = |c: u8| (c as char).to_digit(16);
    // Hex: the first four bytes printable ASCII.
    let as_hex = run.len() >= 8
        && run[..8].chunks(2).all(|p| match (hex(p[0]), hex(p[1])) {
            (Some(h), Some(l)) => ascii(h * 16 + l),
            _ => false,
        });
    if as_hex {
        return true;
    }
    let sextet = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        })
    };
    // Base64: the first twelve bytes hold no control character and mostly ASCII (text in
    // another script still passes; random bytes pass one time in hundreds).
    if run.len() < 16 {
        return false;
    }
    let mut printable = 0;
    for q in run[..16].chunks(4) {
        let mut v = 0u32;
        for &c in q {
            match sextet(c) {
                Some(x) => v = (v << 6) | x,
                None => return false,
            }
        }
        for b in [(v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff] {
            if control(b) {
                return false;
            }
            printable += usize::from(ascii(b));
        }
    }
    printable >= 9
}

/// The text a base64 run decodes to, if it is text.
fn base64_text(body: &[u8]) -> Option<String> {
    let url_safe = body.iter().any(|&b| b == b'-' || b == b'_');
    let standard = body.iter().any(|&b| b == b'+' || b == b'/');
    if url_safe && standard {
        return None;
    }
    let engine = engine(url_safe);
    let probe = body.len().min(PROBE) / 4 * 4;
    let head = engine.decode(&body[..probe]).ok()?;
    if !is_text(&head) || body.len() > MAX_RUN {
        return None;
    }
    let all = engine.decode(body).ok()?;
    (is_text(&all) && all.len() >= 16).then(|| String::from_utf8_lossy(&all).into_owned())
}

/// The text a hex run decodes to, if it is text.
fn hex_text(body: &[u8]) -> Option<String> {
    if body.len() < MIN_HEX
        || !body.len().is_multiple_of(2)
        || !body.iter().all(u8::is_ascii_hexdigit)
    {
        return None;
    }
    let decode = |b: &[u8]| -> Vec<u8> {
        b.chunks_exact(2)
            .map(|p| (hex_digit(p[0]) << 4) | hex_digit(p[1]))
            .collect()
    };
    let head = decode(&body[..body.len().min(PROBE)]);
    if !is_text(&head) || body.len() > MAX_RUN {
        return None;
    }
    let all = decode(body);
    is_text(&all).then(|| String::from_utf8_lossy(&all).into_owned())
}

fn hex_digit(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => 0,
    }
}

/// The extent and text a run decodes to, as hex (tried first: every hex run is also base64's
/// alphabet) or as base64, if it is text. A wrapped run's last segment may be the next line's
/// first word (`kind` after a YAML value): without it, when the whole is not text.
pub(crate) fn decoded_text(text: &[u8], run: &Run) -> Option<(Range<usize>, String)> {
    let segments = run.segments();
    let whole = decode_segments(text, segments).map(|t| (run.span.clone(), t));
    if whole.is_some() || segments.len() < 2 {
        return whole;
    }
    let fewer = &segments[..segments.len() - 1];
    let end = fewer.last()?.end;
    decode_segments(text, fewer).map(|t| (run.span.start..end, t))
}

fn decode_segments(text: &[u8], segments: &[Range<usize>]) -> Option<String> {
    let first = &text[segments.first()?.clone()];
    if !starts_as_text(first) {
        return None;
    }
    // One segment (most runs: a word joined by `_` or `-`, an identifier) is read in place,
    // not copied: an allocation for each long run of every line was most of what the runs of
    // ordinary tool output cost here.
    let body: std::borrow::Cow<'_, [u8]> = match segments {
        [one] => std::borrow::Cow::Borrowed(&text[one.clone()]),
        _ => std::borrow::Cow::Owned(
            segments
                .iter()
                .flat_map(|s| text[s.clone()].iter().copied())
                .collect(),
        ),
    };
    let unpadded = body.len() - body.iter().rev().take_while(|&&b| b == b'=').count();
    let body = &body[..unpadded];
    hex_text(body).or_else(|| base64_text(body))
}

/// Every run of `\xNN` escapes (`\x70\x61…`, or `\\x70` as JSON writes it) of 16 or more,
/// with the text it decodes to when that is text.
pub(crate) fn escape_runs(text: &[u8]) -> Vec<(Range<usize>, String)> {
    let mut out = Vec::new();
    let Some(first) = super::finders::ESCAPED_X.find(text) else {
        return out;
    };
    let mut i = first.saturating_sub(1);
    let n = text.len();
    while i < n {
        // One escape: backslashes, `x`, two hex digits.
        let unit = |at: usize| -> Option<(usize, u8)> {
            let mut j = at;
            while j < n && text[j] == b'\\' {
                j += 1;
            }
            if j == at || text.get(j) != Some(&b'x') {
                return None;
            }
            let (h, l) = (*text.get(j + 1)?, *text.get(j + 2)?);
            (h.is_ascii_hexdigit() && l.is_ascii_hexdigit())
                .then(|| (j + 3, (hex_digit(h) << 4) | hex_digit(l)))
        };
        let start = i;
        let mut bytes = Vec::new();
        let mut at = i;
        while let Some((next, byte)) = unit(at) {
            bytes.push(byte);
            at = next;
        }
        if bytes.len() >= MIN_ESCAPES && is_text(&bytes) {
            out.push((start..at, String::from_utf8_lossy(&bytes).into_owned()));
        }
        i = if at > start {
            at
        } else {
            match super::finders::ESCAPED_X.find(&text[i + 1..]) {
                // Back to the first backslash of the escape.
                Some(o) => {
                    let mut k = i + 1 + o;
                    while k > i + 1 && text[k - 1] == b'\\' {
                        k -= 1;
                    }
                    k
                }
                None => n,
            }
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;

    fn texts(line: &str) -> Vec<String> {
        runs(
            line.as_bytes(),
            &super::super::runs::long_runs(line.as_bytes(), MIN_RUN),
        )
        .iter()
        .filter_map(|r| decoded_text(line.as_bytes(), r).map(|(_, t)| t))
        .collect()
    }

    #[test]
    fn a_base64_run_of_text_decodes() {
        let enc = STANDARD.encode("DB_PASSWORD=hunter2hunter2");
        assert_eq!(
            texts(&format!("x: {enc} y")),
            ["DB_PASSWORD=hunter2hunter2"]
        );
    }

    #[test]
    fn a_wrapped_run_is_joined_over_real_and_escaped_line_breaks() {
        let plain = "API_KEY=Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0Ol8Pa3Sd7Fg2Hj6Kl1Zx5Cv9Bn4Mq8Wr2Et6";
        let enc = STANDARD.encode(plain);
        let wrapped: Vec<&str> = enc
            .as_bytes()
            .chunks(76)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        assert!(wrapped.len() > 1);
        for sep in ["\n", "\r\n", "\\n", "\\\\n"] {
            let line = wrapped.join(sep);
            let found = runs(
                line.as_bytes(),
                &super::super::runs::long_runs(line.as_bytes(), MIN_RUN),
            );
            assert_eq!(found.len(), 1, "{sep:?}: {found:?}");
            assert_eq!(found[0].span, 0..line.len(), "{sep:?}");
            assert_eq!(texts(&line), [plain], "{sep:?}");
        }
    }

    #[test]
    fn an_escape_letter_does_not_start_a_run() {
        let enc = STANDARD.encode("password=Sh0rtButTextual99");
        let line = format!("first line\\n{enc}");
        let found = runs(
            line.as_bytes(),
            &super::super::runs::long_runs(line.as_bytes(), MIN_RUN),
        );
        assert_eq!(found.len(), 1);
        assert_eq!(&line[found[0].span.clone()], enc);
    }

    #[test]
    fn bytes_identifiers_and_hashes_are_not_text() {
        // A random key, a git hash, an identifier, a path.
        let random = STANDARD.encode([
            0x80u8, 1, 2, 3, 250, 251, 9, 0, 17, 200, 100, 3, 4, 5, 6, 7, 8,
        ]);
        for line in [
            random.as_str(),
            "3f9c2a1b7d4e5f60718293a4b5c6d7e8f9012345",
            "some_long_function_name_of_ours",
            "/usr/local/lib/something/deeper/still",
        ] {
            assert_eq!(texts(line), Vec::<String>::new(), "{line}");
        }
    }

    #[test]
    fn hex_of_text_decodes() {
        let hex: String = "token=ghp_abcdefABCDEF"
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(texts(&hex), ["token=ghp_abcdefABCDEF"]);
    }

    #[test]
    fn backslash_x_escapes_of_text_decode() {
        let esc: String = "password=Esc4pedPw"
            .bytes()
            .map(|b| format!("\\x{b:02x}"))
            .collect();
        let line = format!("printf '{esc}'");
        let found = escape_runs(line.as_bytes());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1, "password=Esc4pedPw");
        assert_eq!(&line[found[0].0.clone()], esc);
        let json = esc.replace('\\', "\\\\");
        assert_eq!(escape_runs(json.as_bytes())[0].1, "password=Esc4pedPw");
    }
}
