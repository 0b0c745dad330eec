//! The tail's lines as the rest of the watcher takes them: classified for the fold, with text
//! for shipping.
//!
//! The tail reader knows bytes, not JSON; classification is a [`LineSink`] here that feeds
//! every piece of a line to one streaming [`Classifier`] as the reader passes it, so a line of
//! hundreds of MB is classified without being held. The classifier's state of a partial last
//! line lives in the sink between reads, which is why a reader and its sink travel together
//! as a [`LineCursor`].

use std::io;

use super::{Classifier, LineInfo};
use crate::tail::reader::{LineEnd, LineReader, LineSink, ReadAt, ReadStatus, SizeLimit};

/// About this much text per read of the shipping cursor: a few hundred ordinary lines (a
/// read stops at 256 lines anyway), or one long one.
pub const TEXT_PER_READ: u64 = 1 << 20;

/// One complete physical line.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// 0-based physical line number.
    pub number: u64,
    /// Byte offset of the line's first byte (a BOM on line 0 included).
    pub start: u64,
    /// Byte offset just after its `\n`.
    pub end: u64,
    /// Length of its text: without BOM, `\r` and `\n`.
    pub len: u64,
    /// Its text (without BOM, `\r`, `\n`), or `None` when over the size limit (or the cursor
    /// keeps no text).
    pub text: Option<Vec<u8>>,
    /// Its text is over the size limit: it ships as the capture-loss marker.
    pub oversize: bool,
    /// For an oversize line of a cursor with text: its length in UTF-16 units, counted while it
    /// streamed past.
    pub units: Option<u64>,
    /// Only whitespace (never shipped, still counted).
    pub blank: bool,
    /// Its classification, when the cursor classifies.
    pub info: Option<LineInfo>,
}

impl Line {
    pub(crate) fn raw_len(&self) -> u64 {
        self.end - self.start
    }
}

/// The sink that turns the reader's notices into [`Line`]s, classifying them when it holds a
/// classifier.
struct Collect {
    classifier: Option<Classifier>,
    lines: Vec<Line>,
}

impl LineSink for Collect {
    #[inline]
    fn chunk(&mut self, piece: &[u8]) {
        if let Some(c) = &mut self.classifier {
            c.feed(piece);
        }
    }

    fn end(&mut self, line: LineEnd<'_>) {
        let line = complete(line, self.classifier.as_mut());
        self.lines.push(line);
    }
}

/// The sink of [`LineCursor::read_each`]: each line handed on as it completes, so a read holds
/// one line's classification at a time, not a read's worth (4,096 lines' captured text).
struct Each<'a, F: FnMut(Line)> {
    classifier: Option<Classifier>,
    each: &'a mut F,
}

impl<F: FnMut(Line)> LineSink for Each<'_, F> {
    #[inline]
    fn chunk(&mut self, piece: &[u8]) {
        if let Some(c) = &mut self.classifier {
            c.feed(piece);
        }
    }

    fn end(&mut self, line: LineEnd<'_>) {
        (self.each)(complete(line, self.classifier.as_mut()));
    }
}

/// The [`Line`] a reader's notice describes, classified when there is a classifier.
fn complete(line: LineEnd<'_>, classifier: Option<&mut Classifier>) -> Line {
    Line {
        number: line.number,
        start: line.range.start,
        end: line.range.end,
        len: line.len,
        text: line.text.map(std::borrow::Cow::into_owned),
        oversize: line.oversize,
        units: line.units,
        blank: line.blank,
        info: classifier.map(Classifier::finish),
    }
}

/// A tail reader with its line sink: complete lines from an offset, classified and/or with
/// their text.
pub struct LineCursor {
    reader: LineReader,
    sink: Collect,
}

impl LineCursor {
    /// Lines with their text, unclassified, from `offset` (line `number`): the shipping cursor.
    /// One read hands out [`TEXT_PER_READ`] and at most one more line, so lines of 4 MiB are
    /// taken one at a time, not hundreds.
    pub fn text(offset: u64, number: u64, limit: SizeLimit) -> LineCursor {
        LineCursor {
            reader: LineReader::new(offset, number, limit).with_read_budget(TEXT_PER_READ),
            sink: Collect {
                classifier: None,
                lines: Vec::new(),
            },
        }
    }

    /// Classified lines without text, from `offset` (line `number`): seeding and the fold
    /// cursor, which never copy the file's bytes.
    pub fn fold(offset: u64, number: u64, limit: SizeLimit, classifier: Classifier) -> LineCursor {
        LineCursor {
            reader: LineReader::without_text(offset, number, limit),
            sink: Collect {
                classifier: Some(classifier),
                lines: Vec::new(),
            },
        }
    }

    /// The same cursor, also classifying its lines.
    pub fn classified(mut self, classifier: Classifier) -> LineCursor {
        self.sink.classifier = Some(classifier);
        self
    }

    /// Reads what is available: at most `max_lines` complete lines.
    pub fn read<R: ReadAt + ?Sized>(
        &mut self,
        file: &R,
        max_lines: usize,
    ) -> io::Result<(Vec<Line>, ReadStatus)> {
        let status = self.reader.read(file, max_lines, &mut self.sink)?;
        Ok((std::mem::take(&mut self.sink.lines), status))
    }

    /// Like [`LineCursor::read`], handing each line to `each` as it completes (seeding: no
    /// list of lines is built per read).
    pub(crate) fn read_each<R: ReadAt + ?Sized>(
        &mut self,
        file: &R,
        max_lines: usize,
        mut each: impl FnMut(Line),
    ) -> io::Result<ReadStatus> {
        let mut sink = Each {
            classifier: self.sink.classifier.take(),
            each: &mut each,
        };
        let status = self.reader.read(file, max_lines, &mut sink);
        // The classifier holds the partial last line's state: back where `read` finds it.
        self.sink.classifier = sink.classifier;
        status
    }

    /// Offset of the next byte to read (after a held partial line).
    pub(crate) fn offset(&self) -> u64 {
        self.reader.offset()
    }

    /// Offset just after the last complete line read (where the partial line starts).
    pub fn line_start(&self) -> u64 {
        self.reader.line_start()
    }

    /// The number the next complete line will get.
    pub fn next_number(&self) -> u64 {
        self.reader.next_number()
    }

    /// Bytes of a partial last line held, not yet a line.
    pub fn partial_bytes(&self) -> u64 {
        self.reader.partial_bytes()
    }

    /// Heap bytes the reader holds (the classifier's state is bounded on its own).
    pub fn retained_bytes(&self) -> usize {
        self.reader.retained_bytes()
    }
}

impl std::fmt::Debug for LineCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineCursor")
            .field("reader", &self.reader)
            .field("classifies", &self.sink.classifier.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codex::classify;

    const LIMIT: SizeLimit = SizeLimit::bytes(65_536);

    #[test]
    fn a_line_split_across_reads_is_classified_as_the_whole_line() {
        let line = br#"{"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{}","call_id":"c7"}}"#;
        let mut file = line[..40].to_vec();
        let mut cursor = LineCursor::fold(0, 0, LIMIT, Classifier::new());
        let (lines, _) = cursor.read(&file[..], usize::MAX).unwrap();
        assert!(lines.is_empty());
        assert_eq!(cursor.partial_bytes(), 40);
        file.extend_from_slice(&line[40..]);
        file.push(b'\n');
        let (lines, status) = cursor.read(&file[..], usize::MAX).unwrap();
        assert!(status.at_eof);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].info.as_ref(), Some(&classify(line)));
        assert_eq!(
            lines[0].info.as_ref().unwrap().call_id.as_deref(),
            Some("c7")
        );
        assert_eq!(lines[0].text, None, "the fold cursor copies no text");
    }

    #[test]
    fn an_oversize_line_keeps_its_classification_and_length() {
        let big = "x".repeat(3 * 65_536);
        let line = format!(
            "{{\"type\":\"response_item\",\"payload\":{{\"type\":\"function_call_output\",\"output\":\"{big}\",\"call_id\":\"c1\"}}}}\n"
        );
        let mut cursor = LineCursor::text(0, 0, LIMIT).classified(Classifier::new());
        let (lines, _) = cursor.read(line.as_bytes(), usize::MAX).unwrap();
        assert!(lines[0].oversize && lines[0].text.is_none());
        assert_eq!(lines[0].len as usize, line.len() - 1);
        assert_eq!(lines[0].units, Some(line.len() as u64 - 1), "all ASCII");
        let info = lines[0].info.as_ref().unwrap();
        assert_eq!(info.call_id.as_deref(), Some("c1"));
        assert!(cursor.retained_bytes() <= 65_536 + crate::tail::reader::READ_CHUNK + 16);
    }

    /// `read_each` hands a line on as soon as it is complete, between the reads of one call:
    /// a call holds one line's classification at a time, never a read's worth.
    #[test]
    fn read_each_hands_lines_on_between_the_reads_of_one_call() {
        struct Logged<'a> {
            bytes: &'a [u8],
            log: &'a std::cell::RefCell<Vec<&'static str>>,
        }
        impl ReadAt for Logged<'_> {
            fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
                self.log.borrow_mut().push("read");
                self.bytes.read_at(buf, offset)
            }
        }
        let line = b"{\"type\":\"event_msg\",\"payload\":{\"type\":\"agent_message\",\"message\":\"hi\"}}\n";
        let bytes = line.repeat(4000);
        let log = std::cell::RefCell::new(Vec::new());
        let file = Logged {
            bytes: &bytes,
            log: &log,
        };
        let mut cursor = LineCursor::fold(0, 0, LIMIT, Classifier::new());
        let mut lines = 0;
        let status = cursor
            .read_each(&file, usize::MAX, |l| {
                assert_eq!(l.info.unwrap().message.as_deref(), Some("hi"));
                lines += 1;
                log.borrow_mut().push("line");
            })
            .unwrap();
        assert!(status.at_eof);
        assert_eq!(lines, 4000);
        let log = log.into_inner();
        let reads = log.iter().filter(|e| **e == "read").count();
        assert!(
            reads >= 2,
            "{reads} reads: the file must take more than one"
        );
        let first_line = log.iter().position(|e| *e == "line").unwrap();
        let last_read = log.iter().rposition(|e| *e == "read").unwrap();
        assert!(
            first_line < last_read,
            "every line was handed on only after the last read"
        );
    }
}
