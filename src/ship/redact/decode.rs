//! JSON string decoding with a map back to the raw bytes (docs/behaviour.md S1.1).
//!
//! The rules run on decoded text, but what ships is the raw text with spans replaced. So a
//! decoded string keeps where in the raw content each of its pieces came from: each escape
//! (`\n`, `\"`, `\u00e9`, a surrogate pair) is one piece that a span either covers whole or not
//! at all, and the literal bytes between two pieces map one to one, by their offset from the
//! last piece (they need no entry of their own). Mapping a decoded span back therefore widens
//! it to whole escapes, which is what keeps a redacted JSON string valid.
//!
//! The decoder is lenient: it also serves as the "escapes resolved" view of text that is not
//! JSON (a truncated line), where a backslash may start nothing valid. Such a backslash is kept
//! as a literal byte.

use std::borrow::Cow;
use std::ops::Range;

/// One changed piece of a decoded text and where it came from: an escape, or a character
/// removed or replaced. The bytes between two pieces are literal, one raw byte for one decoded
/// byte, so they need no entry: a string of JSON inside JSON has an escape every few bytes,
/// and an entry for each run between them too doubled what every walk over the map cost.
#[derive(Clone, Copy, Debug)]
struct Unit {
    /// Start in the decoded text.
    dec: u32,
    /// Start in the raw text.
    raw: u32,
    /// Length in the raw text (never 0).
    raw_len: u32,
    /// Length in the decoded text (0 for a piece removed).
    dec_len: u32,
}

impl Unit {
    /// Where the literal bytes after this piece start: (decoded, raw).
    fn after(self) -> (u32, u32) {
        (self.dec + self.dec_len, self.raw + self.raw_len)
    }
}

/// A decoded string and its map to the raw text it came from.
pub(crate) struct Decoded<'a> {
    pub text: Cow<'a, str>,
    /// The changed pieces, in order; empty when nothing changed: the text is the raw text.
    units: Vec<Unit>,
    raw_len: usize,
    /// Whether decoding may have made a character [`has_invisible`] or [`hides_ascii`] looks
    /// for that the raw text's literal bytes do not hold ([`Decoded::may_hide`]).
    may_hide: bool,
}

impl<'a> Decoded<'a> {
    /// The place of every byte of the decoded text that JSON escapes (a quote, a backslash, a
    /// control character), in order, for a string [`decode_checked`] decoded: its literal
    /// bytes are never such a byte, so each is the first byte an escape gave.
    pub fn specials(&self) -> Vec<u32> {
        let text = self.text.as_bytes();
        self.units
            .iter()
            .filter(|u| {
                text.get(u.dec as usize)
                    .is_some_and(|&b| super::json::needs_escape(b))
            })
            .map(|u| u.dec)
            .collect()
    }

    /// Whether the decoded text may hide more than the raw text's literal bytes do. When not,
    /// [`hides_ascii`] of the decoded text is false, and [`has_invisible`] of it is that of
    /// the raw text: the only escapes were the one-letter ones, which give a quote, a
    /// backslash, a slash or a control character (none of them invisible, a percent sign or
    /// a hex digit), and no backslash they gave is followed by `/` or `u`. JSON inside JSON
    /// escapes a backslash for every escape of the inner string, so the two searches of the
    /// decoded text were repeated at each level for nothing (docs/redaction.md, "Speed").
    pub fn may_hide(&self) -> bool {
        self.may_hide
    }

    /// Whether decoding changed anything.
    pub fn is_identity(&self) -> bool {
        self.units.is_empty()
    }

    /// The raw range that the decoded range `span` came from, widened to whole escapes.
    pub fn to_raw(&self, span: Range<usize>) -> Range<usize> {
        if self.units.is_empty() || span.is_empty() {
            return span;
        }
        let start = self.map(span.start, false);
        let end = self.map(span.end - 1, true);
        start..end.max(start)
    }

    /// The decoded offset of raw byte `at`, if it is a literal byte (not part of an escape).
    pub fn decoded_at(&self, at: usize) -> Option<usize> {
        if self.units.is_empty() {
            return Some(at);
        }
        let at = u32::try_from(at).ok()?;
        let before = self.units.partition_point(|u| u.raw <= at);
        self.literal_at(before, at)
    }

    /// [`Decoded::decoded_at`] for raw offsets asked in increasing order: `cursor` (0 before
    /// the first) keeps the pieces passed, so a string's hits cost a walk over its pieces
    /// rather than a search for each.
    pub fn decoded_at_in_order(&self, at: usize, cursor: &mut usize) -> Option<usize> {
        if self.units.is_empty() {
            return Some(at);
        }
        let at = u32::try_from(at).ok()?;
        let mut before = *cursor;
        while self.units.get(before).is_some_and(|u| u.raw <= at) {
            before += 1;
        }
        *cursor = before;
        self.literal_at(before, at)
    }

    /// The decoded offset of raw byte `at`, the first `before` pieces starting at or before it:
    /// `None` inside the last of them.
    fn literal_at(&self, before: usize, at: u32) -> Option<usize> {
        let (dec, raw) = match before.checked_sub(1) {
            Some(i) => {
                let unit = self.units[i];
                if at < unit.raw + unit.raw_len {
                    return None;
                }
                unit.after()
            }
            None => (0, 0),
        };
        Some((dec + (at - raw)) as usize)
    }

    /// Where in the decoded text each escape whose decoded first byte `trigger` accepts starts,
    /// in order. In a string decoded from JSON, whose literal bytes are never a quote, a
    /// backslash or a control character, every such byte comes from one of these.
    pub fn escapes_to<'s>(
        &'s self,
        trigger: impl Fn(u8) -> bool + 's,
    ) -> impl Iterator<Item = usize> + 's {
        let text = self.text.as_bytes();
        self.units
            .iter()
            .map(|u| u.dec as usize)
            .filter(move |&at| text.get(at).is_some_and(|&b| trigger(b)))
    }

    /// [`Decoded::to_raw`] of every span in `spans`, in place (and sorted by their starts):
    /// one walk over the pieces for the whole list, where each span alone searches them twice.
    /// A string of tool output inside JSON inside JSON has an escape every line, and the dense
    /// case's spans were mapped back level by level.
    pub fn to_raw_all(&self, spans: &mut [Range<usize>]) {
        if self.units.is_empty() {
            return;
        }
        spans.sort_unstable_by_key(|s| s.start);
        let mut cursor = 0;
        for span in spans.iter_mut().filter(|s| s.start < s.end) {
            let (a, z) = (span.start as u32, (span.end - 1) as u32);
            cursor = self.before_from(a, cursor);
            let start = self.map_in(cursor, a, false);
            let end = self.map_in(self.before_from(z, cursor), z, true);
            *span = start..end.max(start);
        }
    }

    /// How many pieces start at or before decoded byte `at`, counted on from `from` (which
    /// start at or before it): a few steps forward, then a binary search of the rest.
    fn before_from(&self, at: u32, from: usize) -> usize {
        let mut n = from;
        for _ in 0..8 {
            match self.units.get(n) {
                Some(u) if u.dec <= at => n += 1,
                _ => return n,
            }
        }
        n + self.units[n..].partition_point(|u| u.dec <= at)
    }

    fn map(&self, at: usize, end: bool) -> usize {
        let at = at as u32;
        self.map_in(self.units.partition_point(|u| u.dec <= at), at, end)
    }

    /// Where decoded byte `at` came from (`end`: the raw end after it), the first `before`
    /// pieces starting at or before it: the whole last of them when it holds the byte.
    fn map_in(&self, before: usize, at: u32, end: bool) -> usize {
        let (dec, raw) = match before.checked_sub(1) {
            Some(i) => {
                let unit = self.units[i];
                if at < unit.dec + unit.dec_len {
                    let edge = if end {
                        unit.raw + unit.raw_len
                    } else {
                        unit.raw
                    };
                    return (edge as usize).min(self.raw_len);
                }
                unit.after()
            }
            None => (0, 0),
        };
        ((raw + (at - dec) + u32::from(end)) as usize).min(self.raw_len)
    }
}

/// Decodes the content of a JSON string (without its quotes), or any text leniently.
pub(crate) fn decode(raw: &str) -> Decoded<'_> {
    decode_with(raw, |bytes, from| {
        memchr::memchr(b'\\', &bytes[from..]).map(|o| from + o)
    })
}

/// [`decode`] of the content of a string [`super::json::parse`] checked: its only special
/// bytes are the backslashes of its escapes, found by the tokenizer's scan, cheaper than a
/// search call for each of the many short runs between escapes in JSON inside JSON.
pub(crate) fn decode_checked(raw: &str) -> Decoded<'_> {
    decode_with(raw, |bytes, from| {
        let at = super::json::special(bytes, from);
        (at < bytes.len()).then_some(at)
    })
}

/// [`decode_checked`] of the content `raw` of a string in a text whose special bytes are
/// known ([`super::json::parse_known`], [`super::json::parse_escapes`]): `specials` holds, in
/// order, the place in that text of every backslash that starts an escape in `raw` (and may
/// hold the places of other bytes that JSON escapes, which are passed over), and `raw` starts
/// at `offset` in it. A checked string's content holds no such byte but the backslashes of its
/// escapes, so decoding steps from one to the next without searching the text between them.
pub(crate) fn decode_checked_known<'r>(
    raw: &'r str,
    specials: &[u32],
    offset: usize,
) -> Decoded<'r> {
    let mut cursor = super::json::Specials::from(specials, offset);
    decode_with(raw, move |bytes, from| {
        let at = cursor.first_at(offset + from)?.checked_sub(offset)?;
        (at < bytes.len()).then_some(at)
    })
}

/// [`decode`] with `next(bytes, from)`: the first backslash at or after `from` (any other byte
/// it stops at is taken as literal text).
fn decode_with(
    raw: &str,
    mut next_backslash: impl FnMut(&[u8], usize) -> Option<usize>,
) -> Decoded<'_> {
    let bytes = raw.as_bytes();
    let mut next_backslash = |from: usize| {
        let mut from = from;
        loop {
            let at = next_backslash(bytes, from)?;
            if bytes[at] == b'\\' {
                return Some(at);
            }
            from = at + 1;
        }
    };
    let Some(first) = next_backslash(0) else {
        return Decoded {
            text: Cow::Borrowed(raw),
            units: Vec::new(),
            raw_len: raw.len(),
            may_hide: false,
        };
    };
    let mut out = String::with_capacity(raw.len());
    // About one escape in a line of text: most JSON text escapes little more than its line
    // breaks.
    let mut units = Vec::with_capacity(raw.len() / 48 + 4);
    let mut i = 0;
    let mut next = Some(first);
    let mut may_hide = false;
    while let Some(at) = next {
        out.push_str(&raw[i..at]);
        let (ch, len) = escape_at(bytes, at);
        match ch {
            Some(ch) => {
                // A `\u` escape gives any character; a backslash given by `\\` forms `\/` or
                // `\u` with what follows it (`\\/`, `\\\/`, `\\u0074`).
                may_hide |= bytes.get(at + 1) == Some(&b'u')
                    || (ch == '\\'
                        && match bytes.get(at + len) {
                            Some(b'/' | b'u') => true,
                            Some(b'\\') => bytes.get(at + len + 1) == Some(&b'/'),
                            _ => false,
                        });
                units.push(Unit {
                    dec: out.len() as u32,
                    raw: at as u32,
                    raw_len: len as u32,
                    dec_len: ch.len_utf8() as u32,
                });
                out.push(ch);
                i = at + len;
            }
            None => {
                // Not an escape: the backslash is text (lenient view only), and so is what
                // follows it, searched again from the next byte.
                may_hide = true;
                out.push('\\');
                i = at + 1;
            }
        }
        next = next_backslash(i);
    }
    out.push_str(&raw[i..]);
    Decoded {
        text: Cow::Owned(out),
        units,
        raw_len: raw.len(),
        may_hide,
    }
}

/// The character an escape at `at` (a backslash) stands for and the escape's length, or
/// `None` if it is not a JSON escape. A lone surrogate stands for U+FFFD.
#[inline(always)]
fn escape_at(bytes: &[u8], at: usize) -> (Option<char>, usize) {
    let ch = match bytes.get(at + 1) {
        Some(b'"') => '"',
        Some(b'\\') => '\\',
        Some(b'/') => '/',
        Some(b'b') => '\u{8}',
        Some(b'f') => '\u{c}',
        Some(b'n') => '\n',
        Some(b'r') => '\r',
        Some(b't') => '\t',
        Some(b'u') => {
            let Some(high) = hex4(bytes, at + 2) else {
                return (None, 1);
            };
            if (0xD800..0xDC00).contains(&high) {
                if bytes.get(at + 6) == Some(&b'\\')
                    && bytes.get(at + 7) == Some(&b'u')
                    && let Some(low) = hex4(bytes, at + 8)
                    && (0xDC00..0xE000).contains(&low)
                {
                    let code = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                    return (Some(char::from_u32(code).unwrap_or('\u{FFFD}')), 12);
                }
                return (Some('\u{FFFD}'), 6);
            }
            return (Some(char::from_u32(high).unwrap_or('\u{FFFD}')), 6);
        }
        _ => return (None, 1),
    };
    (Some(ch), 2)
}

fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = bytes.get(at..at + 4)?;
    digits.iter().try_fold(0u32, |acc, &b| {
        let d = (b as char).to_digit(16)?;
        Some(acc * 16 + d)
    })
}

/// Whether text may hold a keyword that only decoding reveals: a `\u` escape of a printable
/// ASCII character (`\u0074oken`) or an escaped slash (`https:\/\/`).
pub(crate) fn hides_ascii(raw: &[u8]) -> bool {
    // Two SIMD searches, not a look at every backslash: JSON text holds a `\n` per line.
    super::finders::ESCAPED_SLASH.find(raw).is_some()
        || super::finders::ESCAPED_U
            .find_iter(raw)
            .any(|at| hex4(raw, at + 2).is_some_and(|code| (0x21..0x7f).contains(&code)))
}

/// Whether `text` holds a character that can hide a name or a value from the rules: an ANSI
/// escape (`grep --color=always`, coloured test output), a zero-width character (U+200B to
/// U+200D, U+2060, U+FEFF), a full-width form of ASCII (U+FF01 to U+FF5E) or a percent escape
/// of ASCII.
pub(crate) fn has_invisible(text: &str) -> bool {
    let b = text.as_bytes();
    // One pass for the escape and the lead bytes of the characters that can hide: U+2000 to
    // U+2FFF (zero-width, wide spaces) and U+F000 to U+FFFF (full-width forms, U+FEFF).
    let hides = |at: usize| {
        text.get(at..)
            .and_then(|rest| rest.chars().next())
            .is_some_and(|c| invisible_len(c).is_some() || fullwidth(c).is_some())
    };
    memchr::memchr3_iter(0x1B, 0xE2, 0xEF, b).any(|at| b[at] == 0x1B || hides(at))
        || memchr::memchr_iter(b'%', b).any(|at| percent_ascii(&b[at..]).is_some())
}

/// The ASCII character a percent escape at the start of `b` stands for (`%3D` is `=`).
/// Escapes of other bytes are left as they are: the view stays valid UTF-8.
fn percent_ascii(b: &[u8]) -> Option<char> {
    let hex = |c: u8| (c as char).to_digit(16);
    match b {
        [b'%', hi, lo, ..] => {
            let v = hex(*hi)? * 16 + hex(*lo)?;
            (v < 0x80).then(|| char::from(v as u8))
        }
        _ => None,
    }
}

/// The view of `text` the rules see when it holds [`has_invisible`] characters: ANSI escape
/// sequences and zero-width characters removed, full-width forms as their ASCII letters,
/// percent escapes of ASCII decoded (`token%3Dghp%5F…`, docs/behaviour.md T2.2), with
/// the same map back to `text` that a decoded string has (a span over a changed piece covers
/// it whole). docs/behaviour.md T2.3: they must not hide a secret.
pub(crate) fn visible(text: &str) -> Decoded<'_> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut units = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let (len, with) = if bytes[i] == 0x1B {
            (ansi_len(&bytes[i..]), None)
        } else if let Some(c) = percent_ascii(&bytes[i..]) {
            (3, Some(c))
        } else {
            // Not a char boundary only inside a multi-byte character, which `chars` skips.
            let c = text[i..].chars().next().unwrap_or('\0');
            match (invisible_len(c), fullwidth(c)) {
                (Some(len), _) => (len, None),
                (None, Some(ascii)) => (c.len_utf8(), Some(ascii)),
                (None, None) => {
                    out.push(c);
                    i += c.len_utf8();
                    continue;
                }
            }
        };
        units.push(Unit {
            dec: out.len() as u32,
            raw: i as u32,
            raw_len: len as u32,
            dec_len: with.map_or(0, char::len_utf8) as u32,
        });
        if let Some(ascii) = with {
            out.push(ascii);
        }
        i += len;
    }
    Decoded {
        text: Cow::Owned(out),
        units,
        raw_len: text.len(),
        may_hide: true,
    }
}

/// The view of `text` with string literals joined where code joins them: `'sk_live_' +
/// 'Xk9…'`, `"ghp_" . "…"` (PHP), `"xoxb-" "…"` (adjacent literals, Python and C) become one
/// run, so a provider's prefix joined to the rest of its token is still seen
/// (docs/behaviour.md T2.4). Each join (closing quote, operator, blanks, opening quote) maps
/// back as one piece. `None` when `text` joins nothing.
pub(crate) fn joined(text: &str) -> Option<Decoded<'_>> {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b'/' | b'+');
    // Every join: from a closing quote to the opening quote of the next literal.
    let mut joins: Vec<Range<usize>> = Vec::new();
    // The quote of each kind seen last (`'`, then `"`): where a literal closed by the next one
    // opened, if no line break lies between.
    let mut last_quote: [Option<usize>; 2] = [None, None];
    let kind = |c: u8| usize::from(c == b'"');
    let mut i = 0;
    while let Some(o) = memchr::memchr2(b'\'', b'"', &b[i..]) {
        let q = i + o;
        i = q + 1;
        let opened = last_quote[kind(b[q])].replace(q);
        if q == 0 || !word(b[q - 1]) {
            continue;
        }
        let mut j = q + 1;
        while j < b.len() && matches!(b[j], b' ' | b'\t') {
            j += 1;
        }
        let blanks = j > q + 1;
        let operator = j < b.len() && matches!(b[j], b'+' | b'.');
        if operator {
            j += 1;
            while j < b.len() && matches!(b[j], b' ' | b'\t') {
                j += 1;
            }
        } else if !blanks {
            continue;
        }
        // A format string beside its argument (a shell's `printf '%s\n' "…"`: two arguments)
        // is not joined: the format would go with the password.
        if !operator && opened.is_some_and(|o| b[o + 1] == b'%' && literal_on_one_line(b, o, q)) {
            continue;
        }
        if j + 1 < b.len() && matches!(b[j], b'\'' | b'"') && word(b[j + 1]) {
            joins.push(q..j + 1);
            last_quote[kind(b[j])] = Some(j);
            i = j + 1;
        }
    }
    if joins.is_empty() {
        return None;
    }
    // A literal joined to one quoted otherwise (`'sk_live_' + "…"`) is closed in the view by
    // the quote that opened the first: the view's literal opened by `'` and closed by `"` was
    // never closed, and a name's rule took the rest of the line with it. Each rewrite is of one
    // quote for another, so nothing moves.
    let mut swaps: Vec<(usize, u8)> = Vec::new();
    let mut chain: Option<(usize, u8)> = None;
    for (k, j) in joins.iter().enumerate() {
        let (q, o) = (j.start, j.end - 1);
        let quote = match chain {
            Some((close, quote)) if close == q => quote,
            _ => b[q],
        };
        // Looked for up to the next join's start, so each byte is looked at once.
        let next = joins.get(k + 1).map_or(b.len(), |n| n.start + 1);
        chain = literal_closed_after(&b[..next], o).map(|close| {
            if b[o] != quote {
                swaps.push((close, quote));
            }
            (close, quote)
        });
    }
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    let mut units = Vec::new();
    let mut from = 0;
    // The swaps come in the order of the text, as the pieces do.
    let mut swap = swaps.iter().peekable();
    let mut push = |out: &mut Vec<u8>, range: Range<usize>| {
        let start = out.len();
        out.extend_from_slice(&b[range.clone()]);
        while let Some(&&(at, quote)) = swap.peek() {
            if at >= range.end {
                break;
            }
            if at >= range.start {
                out[start + at - range.start] = quote;
            }
            swap.next();
        }
    };
    for j in joins {
        push(&mut out, from..j.start);
        units.push(Unit {
            dec: out.len() as u32,
            raw: j.start as u32,
            raw_len: j.len() as u32,
            dec_len: 0,
        });
        from = j.end;
    }
    push(&mut out, from..text.len());
    // Pieces of a `str` cut at ASCII quotes, with one ASCII quote put for another: UTF-8 still.
    let out = String::from_utf8(out).expect("ASCII quotes swapped in UTF-8 text");
    Some(Decoded {
        text: Cow::Owned(out),
        units,
        raw_len: text.len(),
        may_hide: true,
    })
}

/// Whether the literal from the quote at `o` to the one at `q` lies on one line. (`o` is the
/// quote of its kind seen last before `q`: looked for back from `q`, each literal of a long
/// line of them read the line back to its start.)
fn literal_on_one_line(b: &[u8], o: usize, q: usize) -> bool {
    #[cfg(test)]
    JOIN_BYTES_READ.with(|n| n.set(n.get() + (q - o)));
    memchr::memchr(b'\n', &b[o..q]).is_none()
}

/// Where the literal opened by the quote at `o` closes: the same quote after it on its line,
/// not after a backslash ([`super::rules::closing_quote`], as a call's literal is read).
fn literal_closed_after(b: &[u8], o: usize) -> Option<usize> {
    let end = super::rules::closing_quote(b, o + 1, b[o]);
    #[cfg(test)]
    JOIN_BYTES_READ.with(|n| n.set(n.get() + (end - o)));
    (b.get(end) == Some(&b[o])).then_some(end)
}

#[cfg(test)]
thread_local! {
    /// How many bytes [`joined`] has looked at around its joins on this thread: the tests hold
    /// it to a few times the text, so no long line of literals is read back or on for each.
    pub(crate) static JOIN_BYTES_READ: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The UTF-8 length of a zero-width character.
fn invisible_len(c: char) -> Option<usize> {
    matches!(c, '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}').then(|| c.len_utf8())
}

/// The ASCII character a full-width form stands for, and the ASCII space a wide or narrow
/// space stands for (U+2000 to U+200A, U+202F, U+205F: their lead byte is the zero-width
/// characters', found by the same pass of [`has_invisible`]). The no-break and ideographic
/// spaces (U+00A0, U+3000) are not read so: a pass for their lead bytes, common in other
/// characters, cost secret-free output 3.8 % of its instructions (docs/redaction.md).
fn fullwidth(c: char) -> Option<char> {
    match c {
        '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFF01 + 0x21),
        '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' => Some(' '),
        _ => None,
    }
}

/// The length of the ANSI escape sequence at the start of `b` (which starts with ESC): a CSI
/// sequence (`ESC [` parameters, intermediates, one final byte), an OSC string (`ESC ]` up to
/// BEL or `ESC \`), or ESC and one more byte.
fn ansi_len(b: &[u8]) -> usize {
    match b.get(1) {
        Some(b'[') => {
            let mut i = 2;
            while i < b.len() && (0x20..=0x3F).contains(&b[i]) {
                i += 1;
            }
            if i < b.len() && (0x40..=0x7E).contains(&b[i]) {
                i + 1
            } else {
                i
            }
        }
        Some(b']') => {
            let mut i = 2;
            while i < b.len() && b[i] != 0x07 && !(b[i] == 0x1B && b.get(i + 1) == Some(&b'\\')) {
                i += 1;
            }
            match b.get(i) {
                Some(0x07) => i + 1,
                Some(_) => i + 2,
                None => i,
            }
        }
        Some(c) if c.is_ascii() => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_escape_and_maps_spans_to_whole_escapes() {
        let raw = r#"a\tb\"c\u00e9\ud83d\ude00\/z"#;
        let d = decode(raw);
        assert_eq!(d.text, "a\tb\"cé😀/z");
        // `\t` alone.
        assert_eq!(d.to_raw(1..2), 1..3);
        // Half of `é` widens to its whole `\u00e9`.
        let e = d.text.find('é').unwrap();
        assert_eq!(&raw[d.to_raw(e + 1..e + 2)], r"\u00e9");
        // The emoji is the whole surrogate pair.
        let s = d.text.find('😀').unwrap();
        assert_eq!(&raw[d.to_raw(s..s + 4)], r"\ud83d\ude00");
        // Literal runs map one to one.
        let z = d.text.find('z').unwrap();
        assert_eq!(&raw[d.to_raw(z..z + 1)], "z");
    }

    proptest::proptest! {
        /// Mapping a list of spans at once maps each as mapping it alone does.
        #[test]
        fn spans_mapped_together_map_as_each_alone(
            pieces in proptest::collection::vec(proptest::sample::select(&[
                "a", "bc", r"\n", r"\\", r#"\""#, r"\u00e9", r"\ud83d\ude00", "é", r"\t", "xyz",
            ][..]), 0..30),
            raw_spans in proptest::collection::vec((0usize..200, 0usize..40), 0..12),
        ) {
            let raw = pieces.concat();
            let d = decode(&raw);
            let len = d.text.len();
            let spans: Vec<Range<usize>> = raw_spans
                .iter()
                .map(|&(a, n)| a.min(len)..(a + n).min(len))
                .collect();
            let mut each: Vec<Range<usize>> = spans.iter().map(|s| d.to_raw(s.clone())).collect();
            let mut together = spans.clone();
            d.to_raw_all(&mut together);
            each.sort_unstable_by_key(|s| (s.start, s.end));
            together.sort_unstable_by_key(|s| (s.start, s.end));
            proptest::prop_assert_eq!(together, each, "{:?} {:?}", raw, spans);
        }
    }

    /// The pieces of lenient decoding, one by one: each escape (or stray backslash) or literal
    /// byte with its raw range, and whether it is literal. The map must agree with them.
    fn pieces_of(raw: &str) -> Vec<(Range<usize>, usize, bool)> {
        let b = raw.as_bytes();
        let (mut out, mut i, mut dec) = (Vec::new(), 0, 0);
        while i < b.len() {
            match (b[i] == b'\\').then(|| escape_at(b, i)) {
                Some((Some(ch), len)) => {
                    out.push((i..i + len, ch.len_utf8(), false));
                    dec += ch.len_utf8();
                    i += len;
                }
                _ => {
                    out.push((i..i + 1, 1, true));
                    dec += 1;
                    i += 1;
                }
            }
        }
        assert_eq!(dec, decode(raw).text.len());
        out
    }

    proptest::proptest! {
        /// Every decoded byte maps back to its own raw byte when literal, to its whole escape
        /// otherwise; every raw byte maps forward to its decoded byte when literal, to nothing
        /// inside an escape; in order or not.
        #[test]
        fn the_map_agrees_with_the_escapes_taken_one_by_one(
            pieces in proptest::collection::vec(proptest::sample::select(&[
                "a", "bc", r"\n", r"\\", r#"\""#, r"\u00e9", r"\ud83d\ude00", "é", r"\t",
                r"\q", r"\u12", r"\ud83d", "\\", "xyz",
            ][..]), 0..30),
        ) {
            let raw = pieces.concat();
            let d = decode(&raw);
            let mut cursor = 0;
            let mut dec = 0;
            for (range, dec_len, literal) in pieces_of(&raw) {
                for k in 0..dec_len {
                    let back = d.to_raw(dec + k..dec + k + 1);
                    proptest::prop_assert_eq!(back, range.clone(), "{:?}", raw);
                }
                for r in range.clone() {
                    let want = literal.then_some(dec);
                    proptest::prop_assert_eq!(d.decoded_at(r), want, "{:?} at {}", raw, r);
                    proptest::prop_assert_eq!(d.decoded_at_in_order(r, &mut cursor), want);
                }
                dec += dec_len;
            }
        }
    }

    proptest::proptest! {
        /// The view without colour codes, zero-width and full-width characters or percent
        /// escapes maps each span back over whole pieces: the raw bytes it maps to, seen the
        /// same way, hold the span's text, and every literal byte maps to itself.
        #[test]
        fn the_visible_view_maps_spans_back_over_whole_pieces(
            pieces in proptest::collection::vec(proptest::sample::select(&[
                "a", "bc", "\u{1b}[32m", "\u{1b}[0m", "\u{200b}", "\u{feff}", "\u{ff41}", "%3D",
                "%41", "%e9", "é", "=", "xyz", "\u{1b}", " ",
            ][..]), 0..25),
            spans in proptest::collection::vec((0usize..120, 1usize..20), 0..8),
        ) {
            let raw = pieces.concat();
            let d = visible(&raw);
            let len = d.text.len();
            for (a, n) in spans {
                let (a, b) = (a.min(len), (a + n).min(len));
                if a >= b || !d.text.is_char_boundary(a) || !d.text.is_char_boundary(b) {
                    continue;
                }
                let back = d.to_raw(a..b);
                let again = visible(&raw[back.clone()]);
                proptest::prop_assert!(
                    again.text.contains(&d.text[a..b]),
                    "{:?}: {:?} maps to {:?}", raw, &d.text[a..b], &raw[back]
                );
            }
            for r in 0..raw.len() {
                if let Some(at) = d.decoded_at(r) {
                    proptest::prop_assert_eq!(d.text.as_bytes()[at], raw.as_bytes()[r]);
                }
            }
        }
    }

    proptest::proptest! {
        /// What a decoded string may hide that its raw text does not: when
        /// [`Decoded::may_hide`] is false, the decoded text hides no ASCII and holds an
        /// invisible character exactly when the raw text does, both for a checked string's
        /// content (`decode_checked`) and for any text (`decode`). The pieces are escapes of
        /// each kind next to the bytes that make them hide (`\\` before `/` and `u`, a `%`
        /// before hex digits, `\u` escapes of invisible and full-width characters).
        #[test]
        fn a_decoding_that_may_not_hide_hides_what_its_raw_text_does(
            mut pieces in proptest::collection::vec(proptest::sample::select(&[
                "a", "/", "u", "0074", "3D", "%", "%3D", r"\\", r"\/", r"\n", r#"\""#, r"\t",
                "\u{1b}", "\u{200b}", "\u{ff41}", "é", "\\",
            ][..]), 0..24),
            // At most one of the pieces that may hide, so that most texts hold none.
            rare in proptest::option::weighted(0.3, proptest::sample::select(&[
                r"\u0074", r"\u001b", r"\u200b", r"\uff41", r"\u0025", r"\u005c", r"\q",
            ][..])),
            at in 0usize..24,
        ) {
            if let Some(rare) = rare {
                pieces.insert(at.min(pieces.len()), rare);
            }
            let raw = pieces.concat();
            let checked = super::super::json::is_json(&format!("\"{raw}\""));
            let mut decodings = vec![decode(&raw)];
            if checked {
                decodings.push(decode_checked(&raw));
            }
            for d in decodings {
                if !d.may_hide() {
                    proptest::prop_assert!(!hides_ascii(d.text.as_bytes()), "{:?}", raw);
                    proptest::prop_assert_eq!(
                        has_invisible(&d.text), has_invisible(&raw), "{:?}", raw
                    );
                }
            }
        }
    }

    #[test]
    fn a_stray_backslash_is_text() {
        let d = decode(r"C:\Users\x\n");
        assert_eq!(d.text, "C:\\Users\\x\n");
        assert!(decode("plain").is_identity());
    }

    #[test]
    fn hidden_ascii_is_found() {
        assert!(hides_ascii(br"\u0074oken"));
        assert!(hides_ascii(br"https:\/\/x"));
        assert!(!hides_ascii(br"\u001b[32m ok\n"));
    }
}
