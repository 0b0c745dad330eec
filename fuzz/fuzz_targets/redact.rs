//! What a line ships as (`capture::capture`): never panics; a line over the limit or not JSON is
//! the loss marker with the line's lengths; a shipped line that was valid JSON stays valid JSON.
#![no_main]

use kcap_watch::ship::capture::{self, LossReason, MAX_RECORD_BYTES};
use kcap_watch::ship::redact;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match capture::capture(data, &redact::global()) {
        Ok(out) => {
            assert!(out.len() as u64 <= MAX_RECORD_BYTES);
            assert!(
                serde_json::from_str::<serde_json::Value>(&out).is_ok(),
                "a shipped line is not JSON: {out}"
            );
        }
        Err(loss) => {
            assert_eq!(loss.utf8_bytes, data.len() as u64);
            if data.len() as u64 <= MAX_RECORD_BYTES {
                assert_ne!(loss.reason, LossReason::InputLimit);
            }
            assert!(serde_json::from_str::<serde_json::Value>(&loss.marker()).is_ok());
        }
    }
});
