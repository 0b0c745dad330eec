//! A flat token list of a JSON text that is known to be valid, for the structural rules
//! (docs/behaviour.md S1.1, S1.3): which strings are keys, which are values, and which
//! container each belongs to. Strings are kept as raw content ranges (no decoding here).

use std::ops::Range;

use memchr::memchr2;
use serde::de::IgnoredAny;

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

/// Whether `text` is one JSON value.
pub(crate) fn is_json(text: &str) -> bool {
    serde_json::from_str::<IgnoredAny>(text).is_ok()
}

/// Whether `text` might be a JSON object or array (cheap, before [`is_json`]).
pub(crate) fn looks_like_container(text: &str) -> bool {
    let t = text.trim_ascii();
    (t.starts_with('{') && t.ends_with('}')) || (t.starts_with('[') && t.ends_with(']'))
}

/// The tokens of valid JSON `text`. Given anything else it returns some tokens without
/// panicking.
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
    let mut kids = Vec::new();
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
}
