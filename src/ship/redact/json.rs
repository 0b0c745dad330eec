//! A flat token list of a JSON text (docs/behaviour.md S1.1, S1.3), for the structural rules:
//! which strings are keys, which are values, and which container each belongs to. Strings are
//! kept as raw content ranges (no decoding here). [`parse`] also decides whether the text is
//! JSON at all (RFC 8259), in the same pass: the walk of a line and of every string holding JSON
//! reads each byte once, not once to validate and again to tokenize.

use std::ops::Range;

#[cfg(test)]
use memchr::memchr2;

#[derive(Clone, Debug)]
pub(crate) enum Tok {
    /// `{` or `[`; `close` is the index of its [`Tok::Close`].
    Open {
        obj: bool,
        close: usize,
    },
    Close,
    /// An object key's raw content.
    Key(Range<usize>),
    /// A string value's raw content.
    Str(Range<usize>),
    /// A number, `true`, `false` or `null`.
    Scalar,
}

/// How deep containers may nest in a line taken as JSON (docs/capture.md, "What counts as
/// JSON"): the walk recurses once per level, so a line of a million `[` would overflow the
/// stack and abort the watcher, again at every restart. Deeper text is not JSON here; it ships
/// as a `malformed_input` loss marker, and [`super::Redactor`] scans it as text.
pub(crate) const MAX_NESTING: usize = 128;

/// Whether `text` is one JSON value (RFC 8259; containers nested at most [`MAX_NESTING`] deep,
/// surrounding blanks allowed).
pub(crate) fn is_json(text: &str) -> bool {
    parse(text).is_some()
}

/// The tokens of `text` if it is one JSON value (as [`is_json`] decides), else `None`.
pub(crate) fn parse(text: &str) -> Option<Vec<Tok>> {
    parse_with(text, special)
}

/// [`parse`], with the place of every escape's backslash in the text's strings (keys and
/// values), in order: the places [`super::decode::decode_checked_known`] steps between when
/// the walk decodes those strings. A rollout line's tool output is one long string of escaped
/// JSON; decoding it searched again every byte the tokenizer had just searched.
pub(crate) fn parse_escapes(text: &str) -> Option<(Vec<Tok>, Option<Vec<u32>>)> {
    // Places are `u32`s, as a decoded string's are ([`super::decode::Decoded::specials`]).
    if u32::try_from(text.len()).is_err() {
        return parse(text).map(|toks| (toks, None));
    }
    let mut escapes = Vec::new();
    let toks = parse_with(text, |b, i| {
        let at = special(b, i);
        if b.get(at) == Some(&b'\\') {
            // Below the text's length, which fits (checked above).
            escapes.push(at as u32);
        }
        at
    })?;
    Some((toks, Some(escapes)))
}

/// [`parse`] of a text whose bytes that [`needs_escape`] are known: `specials` holds the
/// place of every one of them, in order (and nothing else). A string decoded from JSON holds
/// such a byte only where an escape gave it ([`super::decode::Decoded::specials`]), so the
/// tokenizer steps from one to the next instead of searching the text between them: JSON
/// inside JSON is tokenized as a line and again as a string, and the second search repeated
/// the first.
pub(crate) fn parse_known(text: &str, specials: &[u32]) -> Option<Vec<Tok>> {
    let mut cursor = Specials::from(specials, 0);
    parse_with(text, move |b, i| {
        cursor.first_at(i).map_or(b.len(), |p| p.min(b.len()))
    })
}

/// A cursor over the known places of a text's special bytes ([`parse_known`],
/// [`super::decode::decode_checked_known`]): asked for places in increasing order, it answers
/// each with the first known place at or after it.
pub(crate) struct Specials<'s> {
    list: &'s [u32],
    k: usize,
}

impl<'s> Specials<'s> {
    /// A cursor over `list` (in order), starting at the first place at or after `from`.
    pub(crate) fn from(list: &'s [u32], from: usize) -> Specials<'s> {
        let k = list.partition_point(|&p| (p as usize) < from);
        Specials { list, k }
    }

    /// The first known place at or after `i`, `i` never below one asked before.
    pub(crate) fn first_at(&mut self, i: usize) -> Option<usize> {
        while self.list.get(self.k).is_some_and(|&p| (p as usize) < i) {
            self.k += 1;
        }
        self.list.get(self.k).map(|&p| p as usize)
    }
}

/// [`parse`] with `next(b, i)`: the first byte at or after `i` that [`needs_escape`] (or the
/// length when none does).
fn parse_with(text: &str, mut next: impl FnMut(&[u8], usize) -> usize) -> Option<Vec<Tok>> {
    let b = text.as_bytes();
    // Room for a rollout line's tokens from the start (about one per 16 bytes of a line, 30
    // to 60 for most), so they are not copied through four or five growths; a long text
    // grows past it as before.
    let mut toks = Vec::with_capacity((text.len() / 16 + 8).min(256));
    // The open containers: the index of each one's `Open` token and whether it is an object.
    let mut open: Vec<(usize, bool)> = Vec::with_capacity(8);
    let mut i = blanks(b, 0);
    loop {
        // A value starts at `i`.
        match *b.get(i)? {
            c @ (b'{' | b'[') => {
                if open.len() >= MAX_NESTING {
                    return None;
                }
                let obj = c == b'{';
                toks.push(Tok::Open { obj, close: 0 });
                i = blanks(b, i + 1);
                if b.get(i) == Some(&if obj { b'}' } else { b']' }) {
                    let here = toks.len();
                    toks[here - 1] = Tok::Open { obj, close: here };
                    toks.push(Tok::Close);
                    i += 1;
                } else {
                    open.push((toks.len() - 1, obj));
                    if obj {
                        i = key(b, i, &mut toks, &mut next)?;
                    }
                    continue;
                }
            }
            b'"' => {
                let end = string(b, i + 1, &mut next)?;
                toks.push(Tok::Str(i + 1..end));
                i = end + 1;
            }
            b't' => i = literal(b, i, b"true", &mut toks)?,
            b'f' => i = literal(b, i, b"false", &mut toks)?,
            b'n' => i = literal(b, i, b"null", &mut toks)?,
            _ => {
                i = number(b, i)?;
                toks.push(Tok::Scalar);
            }
        }
        // After a value: a comma and the next member, or the end of containers.
        loop {
            i = blanks(b, i);
            let Some(&(at, obj)) = open.last() else {
                return (i == b.len()).then_some(toks);
            };
            match *b.get(i)? {
                b',' => {
                    i = blanks(b, i + 1);
                    if obj {
                        i = key(b, i, &mut toks, &mut next)?;
                    }
                    break;
                }
                c if c == if obj { b'}' } else { b']' } => {
                    let here = toks.len();
                    toks[at] = Tok::Open { obj, close: here };
                    toks.push(Tok::Close);
                    open.pop();
                    i += 1;
                }
                _ => return None,
            }
        }
    }
}

/// The blanks JSON allows between tokens, from `i`: where the next token starts.
fn blanks(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// An object key at `i` (a string, then `:`): pushes its token and returns where its value
/// starts.
fn key(
    b: &[u8],
    i: usize,
    toks: &mut Vec<Tok>,
    next: &mut impl FnMut(&[u8], usize) -> usize,
) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let end = string(b, i + 1, next)?;
    toks.push(Tok::Key(i + 1..end));
    let colon = blanks(b, end + 1);
    (b.get(colon) == Some(&b':')).then(|| blanks(b, colon + 1))
}

fn literal(b: &[u8], i: usize, word: &[u8], toks: &mut Vec<Tok>) -> Option<usize> {
    if !b.get(i..)?.starts_with(word) {
        return None;
    }
    toks.push(Tok::Scalar);
    Some(i + word.len())
}

/// The end of the number at `i`: `-`, then `0` or a digit run not starting with `0`, then
/// optionally a fraction and an exponent, each with at least one digit.
fn number(b: &[u8], mut i: usize) -> Option<usize> {
    let digits = |mut i: usize| {
        let from = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i > from).then_some(i)
    };
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    i = match b.get(i)? {
        b'0' => i + 1,
        b'1'..=b'9' => digits(i)?,
        _ => return None,
    };
    if b.get(i) == Some(&b'.') {
        i = digits(i + 1)?;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(i)?;
    }
    Some(i)
}

/// The index of the quote closing the string whose content starts at `i`, if the content is
/// valid: no control character, every backslash one of JSON's escapes (`\u` with four hex
/// digits, whatever code they name).
fn string(b: &[u8], mut i: usize, next: &mut impl FnMut(&[u8], usize) -> usize) -> Option<usize> {
    loop {
        i = next(b, i);
        match *b.get(i)? {
            b'"' => return Some(i),
            b'\\' => match *b.get(i + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                b'u' if b.get(i + 2..i + 6)?.iter().all(u8::is_ascii_hexdigit) => i += 6,
                _ => return None,
            },
            // A control character.
            _ => return None,
        }
    }
}

/// The index of the first byte from `i` on that a JSON string's content cannot hold as it is
/// (`"`, `\`, or a control character), or the length: sixteen bytes at a time
/// ([`first_special`]), the last few one by one.
pub(crate) fn special(b: &[u8], mut i: usize) -> usize {
    while let Some(lane) = b.get(i..).and_then(|rest| rest.first_chunk::<16>()) {
        let k = first_special(lane);
        if k < 16 {
            return i + k;
        }
        i += 16;
    }
    while i < b.len() && !needs_escape(b[i]) {
        i += 1;
    }
    i
}

/// Whether a JSON string must escape `b`: a quote, a backslash or a control character.
pub(crate) fn needs_escape(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// The index in `lane` of its first byte that [`needs_escape`], or 16 when none does. With the
/// vector unit every x86_64 CPU has (SSE2), else two words of eight bytes. The tokenizer's
/// string scan and the request body's escaping (`ship::outbox`) both step by it.
#[inline]
pub(crate) fn first_special(lane: &[u8; 16]) -> usize {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        // SAFETY: compiled only when SSE2 is enabled for the whole build (the x86_64
        // baseline), so the CPU running it has SSE2.
        let mask = unsafe { special_mask_sse2(lane) };
        (mask | 1 << 16).trailing_zeros() as usize
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        first_special_words(lane)
    }
}

/// One bit per byte of `lane` that is `"`, `\` or a control character.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
#[target_feature(enable = "sse2")]
fn special_mask_sse2(lane: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    // SAFETY: `lane` is 16 readable bytes, and `loadu` allows any alignment.
    let v = unsafe { _mm_loadu_si128(lane.as_ptr().cast::<__m128i>()) };
    let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
    let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
    // `max(v, 0x20) == v` exactly when `v >= 0x20` (unsigned): not a control character.
    let not_control = _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(0x20)), v);
    let special = _mm_movemask_epi8(_mm_or_si128(quote, backslash)) as u32;
    special | (!(_mm_movemask_epi8(not_control) as u32) & 0xFFFF)
}

/// [`first_special`] with eight bytes at a time in a word: the per-byte test of a word finds
/// its lowest special byte exactly (a borrow only ever flags a byte above a flagged one).
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
fn first_special_words(lane: &[u8; 16]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let flagged = |w: u64| {
        let quote = w ^ (ONES * u64::from(b'"'));
        let backslash = w ^ (ONES * u64::from(b'\\'));
        ((quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (w.wrapping_sub(ONES * 0x20) & !w))
            & HIGHS
    };
    let (lo, hi) = lane.split_at(8);
    for (half, word) in [lo, hi].into_iter().enumerate() {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let found = flagged(u64::from_le_bytes(w));
        if found != 0 {
            return half * 8 + (found.trailing_zeros() / 8) as usize;
        }
    }
    16
}

/// Whether `text` might be a JSON object or array (cheap, before [`is_json`]).
pub(crate) fn looks_like_container(text: &str) -> bool {
    let t = text.trim_ascii();
    (t.starts_with('{') && t.ends_with('}')) || (t.starts_with('[') && t.ends_with(']'))
}

/// The tokens of valid JSON `text` without checking it (what [`parse`] gives for JSON). Given
/// anything else it returns some tokens without panicking. A second reading of the grammar,
/// written apart from [`parse`]: the tests' model of the tokens it gives.
#[cfg(test)]
pub(crate) fn tokenize(text: &str) -> Vec<Tok> {
    let bytes = text.as_bytes();
    let mut toks = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'[' => {
                open.push(toks.len());
                toks.push(Tok::Open {
                    obj: bytes[i] == b'{',
                    close: usize::MAX,
                });
                i += 1;
            }
            b'}' | b']' => {
                let here = toks.len();
                if let Some(o) = open.pop()
                    && let Tok::Open { close, .. } = &mut toks[o]
                {
                    *close = here;
                }
                toks.push(Tok::Close);
                i += 1;
            }
            b'"' => {
                let end = string_end(bytes, i + 1);
                let content = i + 1..end;
                let mut after = end + 1;
                while matches!(bytes.get(after), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                    after += 1;
                }
                toks.push(if bytes.get(after) == Some(&b':') {
                    Tok::Key(content)
                } else {
                    Tok::Str(content)
                });
                i = end + 1;
            }
            b',' | b':' | b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            _ => {
                toks.push(Tok::Scalar);
                while i < bytes.len()
                    && !matches!(
                        bytes[i],
                        b',' | b':' | b' ' | b'\t' | b'\n' | b'\r' | b'}' | b']' | b'"'
                    )
                {
                    i += 1;
                }
            }
        }
    }
    // Unclosed containers (not valid JSON) close at the end.
    let end = toks.len();
    for o in open {
        if let Tok::Open { close, .. } = &mut toks[o] {
            *close = end;
        }
    }
    toks
}

/// Index of the quote closing the string whose content starts at `from` (or the end).
#[cfg(test)]
fn string_end(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    while let Some(offset) = bytes.get(i..).and_then(|rest| memchr2(b'"', b'\\', rest)) {
        let at = i + offset;
        if bytes[at] == b'"' {
            return at;
        }
        i = at + 2;
    }
    bytes.len()
}

/// The members of the container opened at `open`: `(key token, value token)`; arrays have no
/// keys.
pub(crate) fn children(toks: &[Tok], open: usize) -> Vec<(Option<usize>, usize)> {
    let Tok::Open { close, .. } = toks[open] else {
        return Vec::new();
    };
    // Room for a rollout line's objects (a handful of members) without growing twice.
    let mut kids = Vec::with_capacity(8);
    let mut i = open + 1;
    let mut key = None;
    while i < close.min(toks.len()) {
        match &toks[i] {
            Tok::Key(_) => {
                key = Some(i);
                i += 1;
            }
            Tok::Open { close: c, .. } => {
                kids.push((key.take(), i));
                i = c + 1;
            }
            Tok::Str(_) | Tok::Scalar => {
                kids.push((key.take(), i));
                i += 1;
            }
            Tok::Close => i += 1,
        }
    }
    kids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_of_nested_json() {
        let text = r#"{"a":[1,"x\"y",{"b":null}],"c":"d"}"#;
        let toks = tokenize(text);
        let kids = children(&toks, 0);
        assert_eq!(kids.len(), 2);
        let Tok::Key(k) = &toks[kids[1].0.unwrap()] else {
            panic!()
        };
        assert_eq!(&text[k.clone()], "c");
        let arr = children(&toks, kids[0].1);
        assert_eq!(arr.len(), 3);
        let Tok::Str(s) = &toks[arr[1].1] else {
            panic!()
        };
        assert_eq!(&text[s.clone()], r#"x\"y"#);
    }
    /// What the capture rules took as JSON before: serde_json's own parse, values ignored.
    fn serde_accepts(text: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    }

    #[test]
    fn accepts_exactly_what_serde_json_accepts() {
        let cases = [
            "",
            " ",
            "{}",
            "[]",
            " {} ",
            "{} x",
            "{}{}",
            "[1,]",
            "[,1]",
            "{\"a\":1,}",
            "{\"a\"}",
            "{\"a\" : 1 , \"b\":[true,false,null]}",
            "{a:1}",
            "{'a':1}",
            "[01]",
            "[0]",
            "[-0]",
            "[-]",
            "[1.]",
            "[.5]",
            "[1.5e]",
            "[1.5e+]",
            "[1.5E-3]",
            "[1e5]",
            "[+1]",
            "[1x]",
            "[0x10]",
            "[Infinity]",
            "[NaN]",
            "[tru]",
            "[truex]",
            "[nul]",
            "\"\\u00e9\"",
            "\"\\ud83d\"",
            "\"\\u12\"",
            "\"\\u12g4\"",
            "\"\\x41\"",
            "\"\\'\"",
            "\"a\tb\"",
            "\"a\u{7f}b\"",
            "\"a\u{1}b\"",
            "\"\\/\\b\\f\\n\\r\\t\\\\\\\"\"",
            "\"abc",
            "\"abc\\\"",
            "[\"a\",",
            "{\"a\":",
            "{\"a\":1",
            "[[[]]",
            "[]]",
            "1",
            "-1.5e10",
            "true",
            "null",
            " \t\n\r[\t1\n]\r ",
            "[1]\u{a0}",
            "\u{feff}[]",
            "{\"\":\"\"}",
            "[\"é日本\"]",
            "\"0123456789abcdef\\n0123456789abcdef\"",
            "{\"a\":1}\n",
            "[1 2]",
            "{\"a\":1 \"b\":2}",
            "{\"a\"::1}",
            "{,}",
            "[\"\u{1f}\"]",
            "[1.0e+05, -0.0E0]",
            "[-01]",
            "[- 1]",
        ];
        for text in cases {
            assert_eq!(is_json(text), serde_accepts(text), "{text:?}");
        }
        // Nesting is bounded (serde_json's check here is not): as deep as the limit is JSON,
        // one deeper is not.
        let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
        assert!(is_json(&deep(MAX_NESTING)) && serde_accepts(&deep(MAX_NESTING)));
        assert!(!is_json(&deep(MAX_NESTING + 1)));
        assert!(!is_json(&deep(5000)));
        assert!(!is_json(&deep(MAX_NESTING)[1..]));
    }

    #[test]
    fn the_tokens_of_json_are_those_of_the_plain_tokenizer() {
        let text = r#" {"a" :[1,"x\"y",{"b":null},[]], "c":"d\\", "e":{}, "f":-1.5e3} "#;
        let checked = parse(text).unwrap();
        let plain = tokenize(text);
        assert_eq!(format!("{checked:?}"), format!("{plain:?}"));
        assert!(parse(r#"{"a":"b"} {"#).is_none());
    }

    /// A JSON value as text, with blanks around its tokens where `blank` says.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let blank = prop_oneof![Just(""), Just(""), Just(" "), Just("\n\t"), Just("\r ")];
        let string = "[a-z\"\\\\/\u{1}\u{e9}\u{1f600} \t\n]{0,12}"
            .prop_map(|s| serde_json::to_string(&s).unwrap_or_default());
        let leaf = prop_oneof![
            string.clone(),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| { serde_json::to_string(&f).unwrap_or_default() }),
            Just("true".to_owned()),
            Just("false".to_owned()),
            Just("null".to_owned()),
            Just(r#""\u00e9\ud83d\ude00\/""#.to_owned()),
        ];
        leaf.prop_recursive(4, 32, 6, move |inner| {
            let blank = blank.clone();
            prop_oneof![
                (proptest::collection::vec((inner.clone(), blank.clone()), 0..6)).prop_map(|v| {
                    let items: Vec<String> =
                        v.into_iter().map(|(x, b)| format!("{b}{x}{b}")).collect();
                    format!("[{}]", items.join(","))
                }),
                (proptest::collection::vec((string.clone(), inner, blank), 0..6)).prop_map(|v| {
                    let items: Vec<String> = v
                        .into_iter()
                        .map(|(k, x, b)| format!("{b}{k}{b}:{b}{x}{b}"))
                        .collect();
                    format!("{{{}}}", items.join(","))
                }),
            ]
        })
    }

    /// A byte JSON's grammar turns on, for mutations.
    fn json_byte() -> impl proptest::strategy::Strategy<Value = u8> {
        proptest::sample::select(
            b"{}[],:\"\\/ \t\n\r0123456789-+.eEtrufalsnbx\x01\x1f\x7f".to_vec(),
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Generated JSON, and the same text with bytes replaced, inserted and removed: the
        /// tokenizer's check accepts exactly what serde_json accepts, and gives the plain
        /// tokenizer's tokens for what it accepts.
        #[test]
        fn parse_agrees_with_serde_json_on_generated_and_mutated_text(
            text in json_text(),
            edits in proptest::collection::vec((0usize..1000, 0u8..3, json_byte()), 0..4),
        ) {
            proptest::prop_assert!(is_json(&text), "{text:?}");
            let mut bytes = text.into_bytes();
            for (at, kind, byte) in edits {
                let at = at % (bytes.len() + 1);
                match kind {
                    0 if at < bytes.len() => bytes[at] = byte,
                    1 => bytes.insert(at, byte),
                    _ if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ => {}
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            let checked = parse(&text);
            proptest::prop_assert_eq!(checked.is_some(), serde_accepts(&text), "{:?}", text);
            if let Some(toks) = checked {
                proptest::prop_assert_eq!(format!("{toks:?}"), format!("{:?}", tokenize(&text)));
            }
        }

        /// The scan for a string's special bytes, and both ways of testing sixteen bytes, against
        /// the bytes tested one by one.
        #[test]
        fn special_and_the_sixteen_byte_tests_agree_with_one_byte_at_a_time(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => proptest::strategy::Just(b'a'),
                    1 => json_byte(),
                    1 => proptest::prelude::any::<u8>(),
                ],
                0..80,
            ),
            from in 0usize..80,
        ) {
            let from = from.min(bytes.len());
            let plain = (from..bytes.len())
                .find(|&i| matches!(bytes[i], b'"' | b'\\' | 0..=0x1f))
                .unwrap_or(bytes.len());
            proptest::prop_assert_eq!(special(&bytes, from), plain);
            if let Some(lane) = bytes.get(from..).and_then(|r| r.first_chunk::<16>()) {
                let first = (0..16).find(|&k| needs_escape(lane[k])).unwrap_or(16);
                proptest::prop_assert_eq!(first_special(lane), first);
                proptest::prop_assert_eq!(first_special_words(lane), first);
            }
        }
    }
}
