//! The outbox: redacted lines waiting for delivery, cut into bounded batches.
//!
//! Pure bookkeeping, no IO: the runtime loop feeds it lines, asks for the next batch, and
//! reports what the server answered. The server's acknowledgement is the only thing that
//! advances [`Outbox::confirmed_to`] (the watermark is the only commit point); a batch the
//! server refuses as a whole is halved until the one line it refuses is isolated, so one bad
//! line cannot block the rest of the transcript.

use std::collections::VecDeque;

use super::redact::{first_special, needs_escape};

/// At most this many lines per batch (docs/behaviour.md A2).
pub(crate) const MAX_BATCH_LINES: usize = 1000;

/// About this many bytes of JSON body per batch.
pub(crate) const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// Lines kept queued (beyond them the reader pauses; nothing is dropped).
pub(crate) const MAX_QUEUED_LINES: usize = 2 * MAX_BATCH_LINES;

/// Bytes held, queued and in flight together, before the reader pauses: about one batch. A
/// batch of small lines in flight leaves room to read the next one meanwhile; a line of
/// 4 MiB in flight (held again as its request body) is not joined by another until it is
/// delivered, so what a watcher holds stays a small multiple of its longest line.
pub(crate) const MAX_HELD_BYTES: usize = MAX_BATCH_BYTES;

/// One redacted line ready to ship.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShipLine {
    pub number: u64,
    /// The redacted text, already encoded as a JSON string literal (quotes included), so a
    /// batch body is assembled without re-serialising and its size is exact.
    pub json: String,
}

impl ShipLine {
    pub fn new(number: u64, redacted: &str) -> ShipLine {
        ShipLine {
            number,
            json: json_str(redacted),
        }
    }

    /// The redacted text back (for the spools).
    pub(crate) fn text(&self) -> String {
        serde_json::from_str(&self.json).unwrap_or_default()
    }
}

/// A batch handed out for delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Batch {
    pub lines: Vec<ShipLine>,
}

impl Batch {
    pub(crate) fn first(&self) -> u64 {
        self.lines.first().map_or(0, |l| l.number)
    }

    pub(crate) fn last(&self) -> u64 {
        self.lines.last().map_or(0, |l| l.number)
    }

    /// Bytes of the lines' JSON text.
    pub(crate) fn bytes(&self) -> usize {
        self.lines.iter().map(|l| l.json.len()).sum()
    }

    /// The `/hooks/transcript` body (docs/behaviour.md A2).
    pub(crate) fn body(&self, session_id: &str, agent_id: Option<&str>, vendor: &str) -> String {
        let mut out = String::with_capacity(self.bytes() + self.lines.len() * 12 + 160);
        out.push_str("{\"session_id\":");
        out.push_str(&json_str(session_id));
        out.push_str(",\"agent_id\":");
        match agent_id {
            Some(a) => out.push_str(&json_str(a)),
            None => out.push_str("null"),
        }
        out.push_str(",\"vendor\":");
        out.push_str(&json_str(vendor));
        out.push_str(",\"lines\":[");
        for (i, l) in self.lines.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&l.json);
        }
        out.push_str("],\"line_numbers\":[");
        for (i, l) in self.lines.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&l.number.to_string());
        }
        out.push_str("]}");
        out
    }
}

/// `s` as a JSON string literal, byte for byte what `serde_json::to_string` writes (the server
/// and the spools must see the same text either way), but without its byte-at-a-time scan:
/// every shipped byte passes through here. Sixteen bytes are tested at once (the tokenizer's
/// test, `redact::json::first_special`) and copied whole (one fixed-size copy); when one of
/// them needs an escape, the copy is cut back to the bytes before it and the escape written.
/// A rollout line is JSON, so a shipped one holds a quote every few bytes: copying the runs
/// between them with a call each cost 12.6 instructions a shipped byte, a seventh of shipping
/// (docs/performance.md, "The request body's escaping").
fn json_str(s: &str) -> String {
    let bytes = s.as_bytes();
    // Room for a raw rollout line, whose quotes and escapes all gain a backslash.
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len() + bytes.len() / 8 + 2);
    out.push(b'"');
    let mut i = 0;
    while let Some(lane) = bytes.get(i..).and_then(|rest| rest.first_chunk::<16>()) {
        let k = first_special(lane);
        out.extend_from_slice(lane);
        if k == 16 {
            i += 16;
            continue;
        }
        out.truncate(out.len() - 16 + k);
        escape_into(&mut out, bytes[i + k]);
        i += k + 1;
    }
    for &b in &bytes[i..] {
        if needs_escape(b) {
            escape_into(&mut out, b);
        } else {
            out.push(b);
        }
    }
    out.push(b'"');
    // A long line's unused room (an eighth of it) would stay reserved for as long as the line
    // waits in the outbox.
    if out.capacity() - out.len() > 64 * 1024 {
        out.shrink_to_fit();
    }
    // Every byte of `s` is copied in order and only ASCII bytes are replaced (by ASCII), so
    // the text is as valid as `s`; the lossy path is never taken.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The escape serde_json writes for `b`, a quote, a backslash or a control character: a
/// backslash and a letter (one two-byte copy) where it has a short one, else `\u00XX`.
fn escape_into(out: &mut Vec<u8>, b: u8) {
    match SHORT_ESCAPES[usize::from(b)] {
        0 => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        }
        letter => out.extend_from_slice(&[b'\\', letter]),
    }
}

/// The letter after the backslash of each byte's short escape, 0 where it has none.
const SHORT_ESCAPES: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t[b'\n' as usize] = b'n';
    t[b'\r' as usize] = b'r';
    t[b'\t' as usize] = b't';
    t[0x08] = b'b';
    t[0x0c] = b'f';
    t
};

/// What to do after the server refused a batch permanently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The batch was split; its lines go out again in smaller batches.
    Split,
    /// This single line is refused: spool it, log its number, go on without it.
    Isolated(ShipLine),
}

/// Queue, in-flight batch and confirmed position.
#[derive(Debug)]
pub(crate) struct Outbox {
    queue: VecDeque<ShipLine>,
    queued_bytes: usize,
    in_flight: Option<Batch>,
    /// Lines below this number are confirmed (stored by the server, or spooled).
    confirmed_to: u64,
    /// While isolating a refused line: batch size limit and the last line it applies to.
    split: Option<(usize, u64)>,
}

impl Outbox {
    /// An outbox whose first line to ship is `resume_line`.
    pub(crate) fn new(resume_line: u64) -> Outbox {
        Outbox {
            queue: VecDeque::new(),
            queued_bytes: 0,
            in_flight: None,
            confirmed_to: resume_line,
            split: None,
        }
    }

    /// Every line below this number is stored by the server (or spooled).
    pub(crate) fn confirmed_to(&self) -> u64 {
        self.confirmed_to
    }

    /// Whether the reader may queue more lines.
    pub(crate) fn has_room(&self) -> bool {
        let in_flight = self.in_flight.as_ref().map_or(0, Batch::bytes);
        self.queue.len() < MAX_QUEUED_LINES && self.queued_bytes + in_flight < MAX_HELD_BYTES
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.in_flight.is_none()
    }

    pub(crate) fn in_flight(&self) -> Option<&Batch> {
        self.in_flight.as_ref()
    }

    pub(crate) fn push(&mut self, line: ShipLine) {
        self.queued_bytes += line.json.len();
        self.queue.push_back(line);
    }

    /// Blank lines between shipped ones are confirmed with them: a line number the reader
    /// passed without queueing anything (nothing in flight or queued before it).
    pub(crate) fn skip_to(&mut self, next_line: u64) {
        if self.is_idle() && next_line > self.confirmed_to {
            self.confirmed_to = next_line;
        }
    }

    /// The next batch to send, unless one is in flight or nothing is queued.
    pub(crate) fn next_batch(&mut self) -> Option<&Batch> {
        if self.in_flight.is_some() || self.queue.is_empty() {
            return None;
        }
        let limit = match self.split {
            Some((n, _)) => n,
            None => MAX_BATCH_LINES,
        };
        let mut lines = Vec::new();
        let mut bytes = 0;
        while let Some(l) = self.queue.front() {
            if lines.len() >= limit
                || (!lines.is_empty() && bytes + l.json.len() + 16 > MAX_BATCH_BYTES)
            {
                break;
            }
            bytes += l.json.len() + 16;
            if let Some(l) = self.queue.pop_front() {
                self.queued_bytes -= l.json.len();
                lines.push(l);
            }
        }
        self.in_flight = Some(Batch { lines });
        self.in_flight.as_ref()
    }

    /// The server stored the in-flight batch.
    pub(crate) fn delivered(&mut self) -> Option<Batch> {
        let batch = self.in_flight.take()?;
        self.confirmed_to = self.confirmed_to.max(batch.last() + 1);
        if let Some((_, until)) = self.split
            && batch.last() >= until
        {
            self.split = None;
        }
        Some(batch)
    }

    /// The in-flight batch failed transiently: it stays in flight and is sent again as is.
    #[cfg(test)]
    pub(crate) fn retry(&self) -> Option<&Batch> {
        self.in_flight.as_ref()
    }

    /// The server refused the in-flight batch permanently (`400`, `413`, `422`).
    pub(crate) fn refused(&mut self) -> Option<Refusal> {
        let batch = self.in_flight.take()?;
        if batch.lines.len() == 1 {
            let line = batch.lines.into_iter().next()?;
            self.confirmed_to = self.confirmed_to.max(line.number + 1);
            return Some(Refusal::Isolated(line));
        }
        let until = self
            .split
            .map_or(batch.last(), |(_, u)| u.max(batch.last()));
        self.split = Some((batch.lines.len() / 2, until));
        for l in batch.lines.into_iter().rev() {
            self.queued_bytes += l.json.len();
            self.queue.push_front(l);
        }
        Some(Refusal::Split)
    }

    /// Everything not confirmed, in order (the in-flight batch first): what shutdown spools.
    pub(crate) fn take_unconfirmed(&mut self) -> Vec<ShipLine> {
        let mut out: Vec<ShipLine> = self.in_flight.take().map(|b| b.lines).unwrap_or_default();
        out.extend(self.queue.drain(..));
        self.queued_bytes = 0;
        out
    }

    /// Starts over at `resume_line` (the server lost lines it had acknowledged): drops what
    /// is queued; the caller re-reads from that line.
    pub(crate) fn rewind(&mut self, resume_line: u64) {
        self.queue.clear();
        self.queued_bytes = 0;
        self.in_flight = None;
        self.split = None;
        self.confirmed_to = resume_line;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The hand-written encoder writes what serde_json writes, so the server and the spools
        /// read the same text back; control characters, quotes and backslashes are weighted in
        /// because arbitrary strings rarely hold them in runs.
        #[test]
        fn encoding_matches_serde_json(
            s in prop_oneof![
                any::<String>(),
                "[\\x00-\\x1f\"\\\\/a\\x7fé😀]{0,40}",
                // A rollout line's shape: quotes and escapes every few bytes, and runs of
                // plain text longer than a word, at every offset.
                "([a-z]{0,12}[\"\\\\\\n\\x01é]){0,40}[a-z]{0,9}",
            ],
        ) {
            let line = ShipLine::new(1, &s);
            prop_assert_eq!(&line.json, &serde_json::to_string(&s).unwrap());
            prop_assert_eq!(line.text(), s);
        }
    }

    #[test]
    fn encoding_escapes_every_control_character_like_serde_json() {
        let all: String = (0u8..0x80).map(char::from).collect();
        for s in [
            all.clone(),
            all.repeat(3),
            format!("abcdefg{all}"),
            String::new(),
        ] {
            assert_eq!(
                ShipLine::new(1, &s).json,
                serde_json::to_string(&s).unwrap()
            );
        }
    }

    fn outbox_with(n: u64) -> Outbox {
        let mut o = Outbox::new(0);
        for i in 0..n {
            o.push(ShipLine::new(i, &format!("line {i}")));
        }
        o
    }

    #[test]
    fn batches_hold_at_most_a_thousand_lines_and_only_one_is_in_flight() {
        let mut o = outbox_with(2500);
        assert_eq!(o.next_batch().map(|b| b.lines.len()), Some(1000));
        assert!(o.next_batch().is_none(), "one batch in flight");
        o.delivered();
        assert_eq!(o.confirmed_to(), 1000);
        assert_eq!(o.next_batch().map(|b| b.first()), Some(1000));
    }

    #[test]
    fn batches_stay_under_four_mebibytes() {
        let mut o = Outbox::new(0);
        let big = "x".repeat(60 * 1024);
        for i in 0..200 {
            o.push(ShipLine::new(i, &big));
        }
        let b = o.next_batch().unwrap().clone();
        assert!(b.body("s", None, "codex").len() <= MAX_BATCH_BYTES);
        assert!(b.lines.len() > 50);
    }

    #[test]
    fn a_transient_failure_keeps_the_position() {
        let mut o = outbox_with(3);
        o.next_batch();
        assert_eq!(o.retry().map(|b| b.lines.len()), Some(3));
        assert_eq!(o.confirmed_to(), 0);
    }

    #[test]
    fn a_refused_line_is_isolated_by_halving_and_the_rest_gets_through() {
        let mut o = outbox_with(10);
        let bad = 6;
        let mut delivered = Vec::new();
        let mut isolated = Vec::new();
        while let Some(b) = o.next_batch() {
            if b.lines.iter().any(|l| l.number == bad) {
                if let Some(Refusal::Isolated(l)) = o.refused() {
                    isolated.push(l.number);
                }
            } else {
                delivered.extend(o.delivered().unwrap().lines.iter().map(|l| l.number));
            }
        }
        assert_eq!(isolated, vec![bad]);
        assert_eq!(delivered, vec![0, 1, 2, 3, 4, 5, 7, 8, 9]);
        assert_eq!(o.confirmed_to(), 10);
    }

    #[test]
    fn body_matches_the_transcript_contract() {
        let mut o = Outbox::new(41);
        o.push(ShipLine::new(41, "{\"a\":\"b\"}"));
        o.push(ShipLine::new(43, "x"));
        let body = o.next_batch().unwrap().body("s1", Some("a1"), "codex");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["session_id"], "s1");
        assert_eq!(v["agent_id"], "a1");
        assert_eq!(v["vendor"], "codex");
        assert_eq!(v["lines"][0], "{\"a\":\"b\"}");
        assert_eq!(v["line_numbers"], serde_json::json!([41, 43]));
        let none = o.retry().unwrap().body("s1", None, "codex");
        assert!(none.contains("\"agent_id\":null"));
    }
}
