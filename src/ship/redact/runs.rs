//! Long runs of token characters, found without touching most bytes.
//!
//! Encoded secrets ([`super::encoded`]) and vendor-named keys ([`super::vendors`]) are runs of
//! 20 or more letters, digits and `+/_-`. A line of prose or code has few such runs, so the
//! search looks at the last byte of a window of `min` bytes and reads backwards from it while
//! it reads token characters: the first other byte it meets rules out every run starting at or
//! before it, and the next window starts right after it. Only a window of token characters
//! throughout is a run, measured then to its end. On shell output that is a few bytes read for
//! every `min` skipped (the tail of the word the window ends in), instead of every byte
//! classified.

use std::ops::Range;

/// Letters, digits and `+/_-`: base64 of either alphabet, hex, and the bodies of keys.
pub(crate) const fn is_token(b: u8) -> bool {
    TOKEN[b as usize]
}

/// [`is_token`] as a table: one load per byte in the loops below.
const TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'_' | b'-');
        b += 1;
    }
    t
};

/// Every maximal run of token characters at least `min` long (`min` > 0), in order. A run
/// that starts right after a backslash starts with an escape's letter (`\nQUJD`, `\u0041`):
/// the letter (and a `\u`'s four digits) are not part of it.
pub(crate) fn long_runs(b: &[u8], min: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let min = min.max(1);
    let n = b.len();
    // `b[i - 1]`, when there is one, is never a token character: it ended a run or stopped a
    // backward read. So a window of token characters from `i` is the start of a run.
    let mut i = 0;
    while i + min <= n {
        // Backwards from the window's last byte while the bytes are token characters.
        let mut j = i + min - 1;
        while j > i && is_token(b[j]) {
            j -= 1;
        }
        if !is_token(b[j]) {
            i = j + 1;
            continue;
        }
        let mut end = i + min;
        while end < n && is_token(b[end]) {
            end += 1;
        }
        let start = after_escape(b, i, end);
        if end - start >= min {
            out.push(start..end);
        }
        i = end + 1;
    }
    out
}

/// `start` moved past an escape's letter when a backslash precedes it.
fn after_escape(b: &[u8], start: usize, end: usize) -> usize {
    if start == 0 || b[start - 1] != b'\\' {
        return start;
    }
    // Any number of backslashes: `\\n` is JSON inside JSON's `\n`.
    let skip = if b[start] == b'u' { 5 } else { 1 };
    (start + skip).min(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same runs, found by classifying every byte.
    fn every_byte(b: &[u8], min: usize) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if !is_token(b[i]) {
                i += 1;
                continue;
            }
            let s = i;
            while i < b.len() && is_token(b[i]) {
                i += 1;
            }
            let s = after_escape(b, s, i);
            if i - s >= min {
                out.push(s..i);
            }
        }
        out
    }

    #[test]
    fn finds_what_a_byte_by_byte_scan_finds() {
        let texts: [&[u8]; 6] = [
            b"short words only, nothing long here at all",
            b"commit 3f9c2a1b7d4e5f60718293a4b5c6d7e8f9012345\nAuthor: x",
            b"abcdefghijklmnopqrst",
            b"xabcdefghijklmnopqrst",
            b"a\\nQUJDREVGR0hJSktMTU5PUFFSU1RVVldY and \\u0041bcdefghijklmnopqrstuvwxyz",
            b"aaaa bbbbbbbbbbbbbbbbbbb cccccccccccccccccccc dddddddddddddddddddddddd",
        ];
        for t in texts {
            for min in [1, 5, 19, 20, 21] {
                assert_eq!(
                    long_runs(t, min),
                    every_byte(t, min),
                    "{min} {:?}",
                    String::from_utf8_lossy(t)
                );
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_a_byte_by_byte_scan(t in proptest::collection::vec(proptest::sample::select(b"ab9+/_- \\nu=.".to_vec()), 0..200), min in 1usize..30) {
            proptest::prop_assert_eq!(long_runs(&t, min), every_byte(&t, min));
        }
    }
}
