//! Model-based property test of the tail reader, in the style of Vector's file-source tests:
//! random sequences of writes to a real file in a temp dir (whole lines, partial lines and
//! their completion, blank lines, huge lines, restarts at an acknowledged line, reads), and
//! the reader's output must equal the model's complete lines, in order, gap-free, with the
//! right numbers and offsets. The reader is driven with a sink that records what it is told,
//! so the streamed pieces of each line are checked too: together they are the line, exactly.

use std::fs::{File, OpenOptions};
use std::io::Write;

use kcap_watch::tail::{LineEnd, LineReader, LineSink, SizeLimit};
use proptest::prelude::*;

/// The reader does the same whatever its limit; a small one keeps each case's huge lines
/// small (the shipping limit, 4 MiB, is tested with real files elsewhere).
const LIMIT_BYTES: usize = 64 * 1024;
const LIMIT: SizeLimit = SizeLimit::bytes(LIMIT_BYTES as u64);

fn is_oversize(text: &[u8]) -> bool {
    text.len() > LIMIT_BYTES
}

/// A complete line as the sink was told it.
#[derive(Clone, Debug)]
struct Line {
    number: u64,
    start: u64,
    end: u64,
    len: u64,
    text: Option<Vec<u8>>,
    blank: bool,
    oversize: bool,
    units: Option<u64>,
    /// Every piece streamed for it, concatenated.
    pieces: Vec<u8>,
}

#[derive(Default)]
struct Recorder {
    pieces: Vec<u8>,
    lines: Vec<Line>,
}

impl LineSink for Recorder {
    fn chunk(&mut self, piece: &[u8]) {
        self.pieces.extend_from_slice(piece);
    }

    fn end(&mut self, line: LineEnd<'_>) {
        self.lines.push(Line {
            number: line.number,
            start: line.range.start,
            end: line.range.end,
            len: line.len,
            text: line.text.map(std::borrow::Cow::into_owned),
            blank: line.blank,
            oversize: line.oversize,
            units: line.units,
            pieces: std::mem::take(&mut self.pieces),
        });
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Append whole lines of these lengths.
    Lines(Vec<usize>),
    /// Append the first part of a line (no `\n`).
    Partial(usize),
    /// Finish the partial line (if any) with this many more bytes and a `\n`.
    Complete(usize),
    Blank(usize),
    /// A line over the redaction limit.
    Huge(usize),
    /// Restart the reader at the given fraction of the acknowledged lines.
    Restart(u8),
    Read,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop::collection::vec(0usize..300, 1..5).prop_map(Op::Lines),
        2 => (1usize..2000).prop_map(Op::Partial),
        2 => (0usize..2000).prop_map(Op::Complete),
        1 => (1usize..4).prop_map(Op::Blank),
        1 => (LIMIT_BYTES - 2..LIMIT_BYTES * 6).prop_map(Op::Huge),
        1 => any::<u8>().prop_map(Op::Restart),
        3 => Just(Op::Read),
    ]
}

/// A complete line as the model knows it.
#[derive(Clone, Debug, PartialEq)]
struct ModelLine {
    start: u64,
    end: u64,
    text: Vec<u8>,
}

fn content(len: usize, seed: usize) -> Vec<u8> {
    // Printable bytes with no newline; a `\r` sometimes ends a line (CRLF writers).
    (0..len)
        .map(|i| b"abcdefghij{}\":, "[(i * 7 + seed) % 16])
        .collect()
}

struct Harness {
    file: File,
    reader_file: File,
    written: u64,
    model: Vec<ModelLine>,
    partial: Option<(u64, Vec<u8>)>,
    sink: Recorder,
    reader: LineReader,
}

impl Harness {
    fn append(&mut self, bytes: &[u8]) {
        self.file.write_all(bytes).unwrap();
        self.written += bytes.len() as u64;
    }

    fn whole_line(&mut self, text: Vec<u8>) {
        let start = self.written;
        let mut raw = text.clone();
        raw.push(b'\n');
        self.append(&raw);
        self.model.push(ModelLine {
            start,
            end: self.written,
            text,
        });
    }

    fn read(&mut self) {
        let st = self
            .reader
            .read(&self.reader_file, usize::MAX, &mut self.sink)
            .unwrap();
        assert!(st.at_eof);
    }

    fn apply(&mut self, op: &Op, seed: usize) {
        match op {
            Op::Lines(lens) if self.partial.is_none() => {
                for (i, len) in lens.iter().enumerate() {
                    let mut t = content(*len, seed + i);
                    if t.first() == Some(&b' ') {
                        t[0] = b'x';
                    }
                    self.whole_line(t);
                }
            }
            Op::Partial(len) if self.partial.is_none() => {
                let t = content(*len, seed);
                let start = self.written;
                self.append(&t);
                self.partial = Some((start, t));
            }
            Op::Complete(len) => {
                if let Some((start, mut t)) = self.partial.take() {
                    let more = content(*len, seed);
                    self.append(&more);
                    self.append(b"\n");
                    t.extend_from_slice(&more);
                    self.model.push(ModelLine {
                        start,
                        end: self.written,
                        text: t,
                    });
                }
            }
            Op::Blank(n) if self.partial.is_none() => {
                for _ in 0..*n {
                    self.whole_line(Vec::new());
                }
            }
            Op::Huge(len) if self.partial.is_none() => self.whole_line(content(*len, seed)),
            Op::Restart(frac) => {
                // Restart at an acknowledged line: one the reader had already emitted.
                let acked = self.sink.lines.len();
                let at = acked * usize::from(*frac) / 255;
                self.sink.lines.truncate(at);
                // A new reader starts a new sink: the old one's half-streamed line is gone.
                self.sink.pieces.clear();
                let (offset, number) = match self.sink.lines.last() {
                    Some(l) => (l.end, l.number + 1),
                    None => (0, 0),
                };
                self.reader = LineReader::new(offset, number, LIMIT);
            }
            Op::Read => self.read(),
            _ => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn reader_output_equals_the_models_complete_lines(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rollout.jsonl");
        let file = OpenOptions::new().create(true).append(true).open(&path).unwrap();
        let reader_file = File::open(&path).unwrap();
        let mut h = Harness {
            file,
            reader_file,
            written: 0,
            model: Vec::new(),
            partial: None,
            sink: Recorder::default(),
            reader: LineReader::new(0, 0, LIMIT),
        };
        for (i, op) in ops.iter().enumerate() {
            h.apply(op, i);
        }
        h.read();
        prop_assert_eq!(h.sink.lines.len(), h.model.len());
        for (i, (got, want)) in h.sink.lines.iter().zip(&h.model).enumerate() {
            prop_assert_eq!(got.number, i as u64);
            prop_assert_eq!(got.start, want.start);
            prop_assert_eq!(got.end, want.end);
            prop_assert_eq!(got.len as usize, want.text.len());
            if is_oversize(&want.text) {
                prop_assert!(got.oversize && got.text.is_none(), "line {} is oversize", i);
                // ASCII content: one unit a byte, counted while it streamed past.
                prop_assert_eq!(got.units, Some(want.text.len() as u64));
            } else {
                prop_assert!(!got.oversize);
                prop_assert_eq!(got.text.as_deref(), Some(&want.text[..]));
            }
            prop_assert_eq!(got.blank, want.text.is_empty());
            prop_assert!(got.pieces == want.text, "line {}: the streamed pieces are the line", i);
        }
        // The partial tail is held, never counted.
        let partial = h.partial.as_ref().map_or(0, |(_, t)| t.len() as u64);
        prop_assert_eq!(h.reader.partial_bytes(), partial);
        prop_assert!(h.reader.retained_bytes() < 2 * LIMIT_BYTES + 512 * 1024);
    }
}
