//! Redaction of shipped lines. PLACEHOLDER (no secret rules yet).

use std::borrow::Cow;

/// Lines longer than this (bytes of UTF-8) ship as the oversize placeholder.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

pub fn oversize_placeholder(original_bytes: u64) -> String {
    format!(
        "{{\"type\":\"redacted_oversize_line\",\"reason\":\"line exceeded SecretRedactor size limit\",\"original_bytes\":{original_bytes}}}"
    )
}

pub struct Redactor;

static GLOBAL: Redactor = Redactor;

impl Redactor {
    pub fn global() -> &'static Redactor {
        &GLOBAL
    }

    pub fn redact_line(&self, raw: &[u8]) -> String {
        if raw.len() > MAX_LINE_BYTES {
            return oversize_placeholder(raw.len() as u64);
        }
        String::from_utf8_lossy(raw).into_owned()
    }

    pub fn redact_text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        Cow::Borrowed(text)
    }
}

pub fn truncate_utf8(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
