//! `Classifier`: never panics, and gives the same answer however the line is cut into chunks.
//! The first input byte picks the cut points; the rest is the line.
#![no_main]

use kcap_watch::codex::{Classifier, classify};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&seed, line)) = data.split_first() else {
        return;
    };
    let whole = classify(line);
    let mut c = Classifier::new();
    let step = usize::from(seed % 61) + 1;
    for chunk in line.chunks(step) {
        c.feed(chunk);
    }
    assert_eq!(c.finish(), whole, "chunks of {step} bytes classify differently");
    // A line that is a JSON object after removing a BOM and a trailing `\r` is not malformed.
    let mut b = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    b = b.strip_suffix(b"\r").unwrap_or(b);
    if let Ok(serde_json::Value::Object(_)) = serde_json::from_slice(b) {
        assert!(!whole.malformed, "a JSON object classified as malformed");
    }
});
