//! What one rollout line becomes on the wire: the kcap CLI's capture rules (docs/capture.md).
//!
//! A line that is valid JSON and at most [`MAX_RECORD_BYTES`] is redacted and shipped whole,
//! as long as its redacted form also fits. Every other line is *lost* and ships as the kcap
//! CLI's loss marker at its own line number ([`Loss::marker`]), so the server's numbering stays
//! whole and it knows what is missing and why:
//!
//! - over the limit: `input_limit` (the tail dropped its text while it streamed past, so the
//!   line is never held whole);
//! - not JSON: `malformed_input`. Nothing of such a line leaves the machine, not even
//!   redacted: a truncated or corrupted line can hide a secret from every rule;
//! - redacted form over the limit: `output_limit` (redaction can lengthen a line that holds
//!   many short secrets).
//!
//! The kcap CLI has two more reasons, `regex_timeout` and `record_budget`, for its regex
//! engine's match deadline and its per-record time budget. This redactor's regexes run in
//! linear time and a line's cost is bounded by its length, so neither can happen here.
//!
//! The fold is not this module's concern: it reads every raw line, of any size and shape.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::redact::Redactor;

/// The largest line shipped, and the largest redacted form: 4 MiB of UTF-8, the kcap CLI's
/// `MaxRecordBytes`.
pub const MAX_RECORD_BYTES: u64 = 4 * 1024 * 1024;

/// Why a line went out as the loss marker. The names are the kcap CLI's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// Longer than [`MAX_RECORD_BYTES`].
    InputLimit,
    /// Not one JSON value.
    MalformedInput,
    /// Its redacted form is longer than [`MAX_RECORD_BYTES`].
    OutputLimit,
}

impl LossReason {
    pub const ALL: [LossReason; 3] = [
        LossReason::InputLimit,
        LossReason::MalformedInput,
        LossReason::OutputLimit,
    ];

    /// The `reason` of the marker, and the name in logs and `status`.
    pub fn name(self) -> &'static str {
        match self {
            LossReason::InputLimit => "input_limit",
            LossReason::MalformedInput => "malformed_input",
            LossReason::OutputLimit => "output_limit",
        }
    }
}

/// A line that ships as the marker, with the raw line's lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loss {
    pub reason: LossReason,
    /// The raw line's text in UTF-16 code units (.NET's `string.Length`, what the kcap CLI
    /// reports).
    pub utf16_length: u64,
    /// The raw line's text in bytes of UTF-8 as written (no BOM, `\r` or `\n`).
    pub utf8_bytes: u64,
}

impl Loss {
    /// A line the tail dropped for its size: `len` bytes, `units` UTF-16 units counted while it
    /// streamed past.
    pub fn over_limit(len: u64, units: u64) -> Loss {
        Loss {
            reason: LossReason::InputLimit,
            utf16_length: units,
            utf8_bytes: len,
        }
    }

    /// The kcap CLI's marker, byte for byte: its field order and snake_case names.
    pub fn marker(&self) -> String {
        format!(
            r#"{{"type":"kcap_capture_loss","version":1,"reason":"{}","input_utf16_length":{},"input_utf8_bytes":{}}}"#,
            self.reason.name(),
            self.utf16_length,
            self.utf8_bytes
        )
    }
}

/// Losses of one pipeline, by reason: what `status` shows and the exit summary logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossCounts {
    #[serde(default)]
    pub input_limit: u64,
    #[serde(default)]
    pub malformed_input: u64,
    #[serde(default)]
    pub output_limit: u64,
}

impl LossCounts {
    pub fn get(&self, reason: LossReason) -> u64 {
        match reason {
            LossReason::InputLimit => self.input_limit,
            LossReason::MalformedInput => self.malformed_input,
            LossReason::OutputLimit => self.output_limit,
        }
    }

    pub fn add(&mut self, reason: LossReason) {
        let n = match reason {
            LossReason::InputLimit => &mut self.input_limit,
            LossReason::MalformedInput => &mut self.malformed_input,
            LossReason::OutputLimit => &mut self.output_limit,
        };
        *n += 1;
    }

    pub fn total(&self) -> u64 {
        self.input_limit + self.malformed_input + self.output_limit
    }

    /// `2 malformed_input, 1 input_limit`; empty when nothing was lost.
    pub fn describe(&self) -> String {
        LossReason::ALL
            .iter()
            .filter(|&&r| self.get(r) > 0)
            .map(|&r| format!("{} {}", self.get(r), r.name()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What the raw line `raw` (its text: no BOM, `\r` or `\n`) ships as: its redacted text, or
/// the loss that the marker reports. Invalid UTF-8 is read as U+FFFD, as the kcap CLI decodes
/// a line.
pub fn capture(raw: &[u8], redactor: &Redactor) -> Result<String, Loss> {
    capture_cow(Cow::Borrowed(raw), redactor)
}

/// [`capture`] of a line the caller gives up: a line without secrets ships in its own buffer,
/// never copied (the shipping path, where a line can be 4 MiB).
pub fn capture_owned(raw: Vec<u8>, redactor: &Redactor) -> Result<String, Loss> {
    capture_cow(Cow::Owned(raw), redactor)
}

fn capture_cow(raw: Cow<'_, [u8]>, redactor: &Redactor) -> Result<String, Loss> {
    let raw_len = raw.len() as u64;
    if raw_len > MAX_RECORD_BYTES {
        return Err(Loss::over_limit(raw_len, utf16_len(&raw)));
    }
    // Checking first is much faster than the lossy conversion, and almost always succeeds.
    let text: Cow<'_, str> = match raw {
        Cow::Borrowed(b) => match std::str::from_utf8(b) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(b),
        },
        Cow::Owned(v) => match String::from_utf8(v) {
            Ok(text) => Cow::Owned(text),
            Err(e) => Cow::Owned(String::from_utf8_lossy(e.as_bytes()).into_owned()),
        },
    };
    // The decoded text has the raw line's UTF-16 length (one U+FFFD per invalid sequence);
    // the bytes are the raw line's.
    let lost = |reason, text: &str| Loss {
        reason,
        utf16_length: utf16_len(text.as_bytes()),
        utf8_bytes: raw_len,
    };
    let redacted = match redactor.redact_json(&text) {
        None => return Err(lost(LossReason::MalformedInput, &text)),
        Some(Cow::Borrowed(_)) => None,
        Some(Cow::Owned(redacted)) => Some(redacted),
    };
    let shipped_len = redacted.as_ref().map_or(text.len(), String::len);
    if shipped_len as u64 > MAX_RECORD_BYTES {
        return Err(lost(LossReason::OutputLimit, &text));
    }
    Ok(redacted.unwrap_or_else(|| text.into_owned()))
}

pub use crate::tail::reader::utf16_len;

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped(raw: &str) -> Result<String, Loss> {
        capture(raw.as_bytes(), &super::super::redact::global())
    }

    #[test]
    fn the_marker_is_the_kcap_clis_byte_for_byte() {
        let loss = Loss {
            reason: LossReason::MalformedInput,
            utf16_length: 7,
            utf8_bytes: 9,
        };
        assert_eq!(
            loss.marker(),
            r#"{"type":"kcap_capture_loss","version":1,"reason":"malformed_input","input_utf16_length":7,"input_utf8_bytes":9}"#
        );
        let v: serde_json::Value = serde_json::from_str(&loss.marker()).unwrap();
        assert_eq!(v["type"], "kcap_capture_loss");
    }

    #[test]
    fn a_line_that_is_not_json_is_lost_whole_with_its_lengths() {
        // Two units and six bytes for the two characters above ASCII.
        let raw = r#"{"a":"é😀" truncated"#;
        let err = shipped(raw).unwrap_err();
        assert_eq!(err.reason, LossReason::MalformedInput);
        assert_eq!(err.utf8_bytes, raw.len() as u64);
        assert_eq!(err.utf16_length, raw.encode_utf16().count() as u64);
        for text in [
            "plain text password=hunter2hunter2",
            "{\"a\":1} trailing",
            "{",
        ] {
            assert_eq!(
                shipped(text).unwrap_err().reason,
                LossReason::MalformedInput,
                "{text}"
            );
        }
    }

    #[test]
    fn any_json_value_ships_as_the_kcap_cli_reads_it() {
        assert_eq!(shipped("42").unwrap(), "42");
        // By the grammar, as the kcap CLI's reader takes it: a number too large for a float is
        // still a number (found by the capture property test).
        let huge = r#"{"type":null, "timestamp":1E785000000}"#;
        assert_eq!(shipped(huge).unwrap(), huge);
        assert_eq!(shipped(r#"  "s"  "#).unwrap(), r#"  "s"  "#);
        // Invalid UTF-8 inside a string decodes to U+FFFD: still JSON.
        let raw = b"{\"a\":\"x\xFFy\"}";
        assert_eq!(
            capture(raw, &super::super::redact::global()).unwrap(),
            "{\"a\":\"x\u{FFFD}y\"}"
        );
    }

    /// The limit is inclusive, in bytes of UTF-8, and what decides is the raw line: a secret at
    /// its very start is redacted in a line of exactly 4 MiB, and one more byte makes it a loss
    /// whose lengths are the raw line's.
    #[test]
    fn a_line_of_exactly_the_limit_ships_redacted_and_one_byte_more_is_lost() {
        let mut line = br#"{"o":"AKIAIOSFODNN7EXAMPLE"#.to_vec();
        line.resize(MAX_RECORD_BYTES as usize - 2, b'a');
        line.extend_from_slice(br#""}"#);
        assert_eq!(line.len() as u64, MAX_RECORD_BYTES);
        let redactor = super::super::redact::global();
        let shipped = capture(&line, &redactor).unwrap();
        assert!(
            shipped.starts_with(r#"{"o":"[REDACTED]aaa"#),
            "{}",
            &shipped[..40]
        );
        assert!(!shipped.contains("AKIA"));

        line.insert(6, b'a');
        let loss = capture(&line, &redactor).unwrap_err();
        assert_eq!(
            loss,
            Loss::over_limit(MAX_RECORD_BYTES + 1, MAX_RECORD_BYTES + 1)
        );
    }

    /// Redaction lengthens a short secret to `[REDACTED]`: a line within the limit whose
    /// redacted form is not is lost, never shipped cut short or unredacted.
    #[test]
    fn a_redacted_form_over_the_limit_is_lost_as_output_limit() {
        let member = r#""password":"abc","#;
        let n = (MAX_RECORD_BYTES as usize - 16) / member.len();
        let line = format!("{{{}\"z\":1}}", member.repeat(n));
        assert!(line.len() as u64 <= MAX_RECORD_BYTES);
        let loss = capture(line.as_bytes(), &super::super::redact::global()).unwrap_err();
        assert_eq!(loss.reason, LossReason::OutputLimit);
        assert_eq!(loss.utf8_bytes, line.len() as u64);
        assert_eq!(loss.utf16_length, line.len() as u64);
    }

    /// A line of deeply nested brackets once overflowed the stack of the JSON walk and aborted
    /// the watcher (again at every restart, on the same line). Nesting past 128 is not JSON
    /// here: it ships as `malformed_input`; 128 deep ships redacted. Redacting such text as
    /// text (the child's last message) does not recurse either. Test threads have 2 MiB
    /// stacks, less than a watcher's main thread.
    #[test]
    fn a_line_nested_past_128_is_malformed_and_nothing_overflows() {
        let nested = |depth: usize| {
            format!(
                r#"{{"type":"response_item","payload":{}"password=hunter2hunter2"{}}}"#,
                "[".repeat(depth - 1),
                "]".repeat(depth - 1)
            )
        };
        let redactor = super::super::redact::global();
        let shipped = capture(nested(128).as_bytes(), &redactor).unwrap();
        assert!(!shipped.contains("hunter2"), "{shipped}");
        for depth in [129, 5_000, 1_000_000] {
            let line = nested(depth);
            let loss = capture(line.as_bytes(), &redactor).unwrap_err();
            assert_eq!(loss.reason, LossReason::MalformedInput, "depth {depth}");
            let text = redactor.redact_text(&line);
            assert!(!text.contains("hunter2"), "depth {depth}");
        }
    }

    #[test]
    fn counts_describe_each_reason_seen() {
        let mut c = LossCounts::default();
        assert_eq!(c.describe(), "");
        c.add(LossReason::MalformedInput);
        c.add(LossReason::MalformedInput);
        c.add(LossReason::InputLimit);
        assert_eq!(c.describe(), "1 input_limit, 2 malformed_input");
        assert_eq!(c.total(), 3);
    }
}
