//! `Redactor::redact_line`: never panics, replaces an oversize line whole, and keeps a line
//! that was valid JSON valid JSON.
#![no_main]

use kcap_watch::ship::redact::{self, MAX_LINE_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let out = redact::global().redact_line(data);
    if data.len() > MAX_LINE_BYTES {
        assert!(out.contains("redacted_oversize_line"));
        return;
    }
    if serde_json::from_slice::<serde_json::Value>(data).is_ok() {
        assert!(
            serde_json::from_str::<serde_json::Value>(&out).is_ok(),
            "redaction broke valid JSON: {out}"
        );
    }
});
