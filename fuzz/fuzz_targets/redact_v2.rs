//! Redaction v2's promises on any bytes (the README, "Redaction"): no panic; valid JSON stays
//! valid JSON; every byte outside a redacted span is unchanged (the output is the input with
//! some spans replaced by `[REDACTED]`); redacting twice gives what redacting once gives.
#![no_main]

use kcap_watch::ship::capture::MAX_RECORD_BYTES;
use kcap_watch::ship::redact;
use libfuzzer_sys::fuzz_target;

const REDACTED: &str = "[REDACTED]";

/// Whether `output` is `input` with some spans replaced by the marker.
fn is_in_place_edit(input: &str, output: &str) -> bool {
    let pieces: Vec<&str> = output.split(REDACTED).collect();
    if pieces.len() == 1 {
        return input == output;
    }
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if !input.starts_with(first) || input.len() < first.len() + last.len() || !input[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &input[first.len()..input.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

fuzz_target!(|data: &[u8]| {
    if data.len() as u64 > MAX_RECORD_BYTES {
        return;
    }
    let r = redact::global();
    let out = r.redact_line(data);
    let text = String::from_utf8_lossy(data);
    assert!(is_in_place_edit(&text, &out), "not an in-place edit:\n{text}\n=> {out}");
    if serde_json::from_slice::<serde_json::Value>(data).is_ok() {
        assert!(
            serde_json::from_str::<serde_json::Value>(&out).is_ok(),
            "redaction broke valid JSON: {out}"
        );
    }
    assert_eq!(r.redact_line(out.as_bytes()), out, "redacting twice differs");
});
