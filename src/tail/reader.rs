//! Complete lines from a byte offset, with memory bounded whatever a line's size.
//!
//! Codex writes a large line in several `write(2)` calls, so the reader can see a partial
//! last line: it is kept (its classifier state and at most [`MAX_LINE_BYTES`] + a few bytes
//! of text) until its `\n` arrives, and never counted before. A line over the redaction
//! limit (in UTF-16 units, as the kcap CLI counts) ships as a placeholder, so its text is
//! dropped while streaming once it cannot fit, and only its length and classification
//! survive.

use std::fs::File;
use std::io;

use crate::rollout::{Classifier, LineInfo};
use crate::ship::redact::{MAX_LINE_BYTES, MAX_LINE_UTF16_UNITS, is_oversize};

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Read granularity. Large enough to amortise syscalls, small enough to stay cache-friendly.
pub const READ_CHUNK: usize = 256 * 1024;

/// The first read's buffer: a live append is a few KB. A read that fills it grows the buffer
/// to [`READ_CHUNK`] for the rest of a catch-up, and reaching the end drops a grown buffer,
/// so a reader that is only following keeps 16 KiB, not 256 KiB (a supervisor holds two
/// readers for each of dozens of children).
const FIRST_CHUNK: usize = 16 * 1024;

/// Text kept for a line in progress: the shipping limit plus room for a BOM and a `\r`.
const KEEP_TEXT: usize = MAX_LINE_BYTES + BOM.len() + 1;

/// A fold-only reader needs no text: it keeps just enough to tell a blank line.
const KEEP_FOLD_ONLY: usize = 64;

/// Positional reads, so two cursors can share one open handle (which also keeps reading a
/// file that was deleted or renamed away).
pub trait ReadAt {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        crate::platform::positional::read_at(self, buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

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
    /// Its text (without BOM, `\r`, `\n`), or `None` when over the redaction limit (or the
    /// reader is fold-only).
    pub text: Option<Vec<u8>>,
    /// Its text is over the redaction limit: it ships as the placeholder.
    pub oversize: bool,
    /// Only whitespace (never shipped, still counted).
    pub blank: bool,
    /// Its classification, when the reader classifies.
    pub info: Option<LineInfo>,
}

impl Line {
    pub fn raw_len(&self) -> u64 {
        self.end - self.start
    }

    pub fn oversize(&self) -> bool {
        self.oversize
    }

    /// The line as the fold takes it; `None` when the reader does not classify.
    pub fn observed(&self) -> Option<crate::fold::Observed<'_>> {
        Some(crate::fold::Observed {
            number: self.number,
            raw_len: self.raw_len(),
            blank: self.blank,
            oversize: self.oversize,
            info: self.info.as_ref()?,
        })
    }
}

/// What one [`LineReader::read`] call achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadStatus {
    /// Complete lines emitted.
    pub lines: usize,
    /// Everything on disk was read (a partial last line may be held).
    pub at_eof: bool,
}

/// Turns the bytes from an offset into complete, numbered lines.
pub struct LineReader {
    /// Next byte to read.
    offset: u64,
    /// Where the line in progress starts.
    line_start: u64,
    /// Number the line in progress will get.
    next_number: u64,
    /// Bytes of the line in progress seen so far (its `\n` excluded).
    partial_len: u64,
    /// Its text, while it fits `keep`.
    text: Vec<u8>,
    /// How much text to keep: [`KEEP_TEXT`], or [`KEEP_FOLD_ONLY`].
    keep: usize,
    text_dropped: bool,
    /// The line's first bytes (a BOM on line 0), whatever is kept.
    head: [u8; 3],
    head_len: usize,
    /// Only whitespace so far (cheap: stops at the first other byte, usually the first).
    all_ws: bool,
    /// UTF-16 units of the line in progress, for a reader that keeps no text (exact for
    /// valid UTF-8, which is all Codex writes).
    units: u64,
    last_byte: Option<u8>,
    classifier: Option<Classifier>,
    buf: Vec<u8>,
}

impl LineReader {
    /// A reader whose next line starts at `offset` and is numbered `number`; `classify`
    /// decides whether lines carry a [`LineInfo`] (the shipping cursor needs only text).
    pub fn new(offset: u64, number: u64, classify: bool) -> LineReader {
        LineReader {
            offset,
            line_start: offset,
            next_number: number,
            partial_len: 0,
            text: Vec::new(),
            keep: KEEP_TEXT,
            text_dropped: false,
            head: [0; 3],
            head_len: 0,
            all_ws: true,
            units: 0,
            last_byte: None,
            classifier: classify.then(Classifier::new),
            buf: Vec::new(),
        }
    }

    /// A classifying reader that keeps no line text (seeding and the fold cursor: shipping
    /// has its own cursor), so folding never copies the file's bytes. `timestamps`: parse each
    /// line's envelope `timestamp` (only `inspect --line-times` uses it).
    pub fn fold_only(offset: u64, number: u64, timestamps: bool) -> LineReader {
        LineReader {
            keep: KEEP_FOLD_ONLY,
            classifier: Some(if timestamps {
                Classifier::new()
            } else {
                Classifier::without_timestamps()
            }),
            ..LineReader::new(offset, number, false)
        }
    }

    /// Offset of the next byte to read (after a held partial line).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Offset just after the last complete line emitted (where the partial line starts).
    pub fn line_start(&self) -> u64 {
        self.line_start
    }

    /// The number the next complete line will get (= complete lines read so far when the
    /// reader started at line 0).
    pub fn next_number(&self) -> u64 {
        self.next_number
    }

    /// Bytes of a partial last line held, not yet a line.
    pub fn partial_bytes(&self) -> u64 {
        self.offset - self.line_start
    }

    /// Heap bytes held, for tests of the memory bound.
    #[doc(hidden)]
    pub fn retained_bytes(&self) -> usize {
        self.text.capacity() + self.buf.capacity()
    }

    /// Reads what is available, emitting at most `max_lines` complete lines to `sink`.
    pub fn read<R: ReadAt + ?Sized>(
        &mut self,
        file: &R,
        max_lines: usize,
        sink: &mut dyn FnMut(Line),
    ) -> io::Result<ReadStatus> {
        if self.buf.is_empty() {
            self.buf = vec![0; FIRST_CHUNK];
        }
        let mut emitted = 0;
        let mut buf = std::mem::take(&mut self.buf);
        let result = loop {
            if emitted >= max_lines {
                break Ok(ReadStatus {
                    lines: emitted,
                    at_eof: false,
                });
            }
            let n = match file.read_at(&mut buf, self.offset) {
                Ok(0) => {
                    break Ok(ReadStatus {
                        lines: emitted,
                        at_eof: true,
                    });
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => break Err(e),
            };
            let data = &buf[..n];
            let mut pos = 0;
            while pos < n {
                match memchr::memchr(b'\n', &data[pos..]) {
                    Some(i) => {
                        self.absorb(&data[pos..pos + i]);
                        pos += i + 1;
                        let end = self.offset + pos as u64;
                        sink(self.complete(end));
                        emitted += 1;
                        if emitted >= max_lines {
                            break;
                        }
                    }
                    None => {
                        self.absorb(&data[pos..]);
                        pos = n;
                    }
                }
            }
            self.offset += pos as u64;
            if n == buf.len() && buf.len() < READ_CHUNK {
                buf = vec![0; READ_CHUNK];
            }
        };
        if !(matches!(result, Ok(ReadStatus { at_eof: true, .. })) && buf.len() > FIRST_CHUNK) {
            self.buf = buf;
        }
        result
    }

    fn absorb(&mut self, seg: &[u8]) {
        if seg.is_empty() {
            return;
        }
        if let Some(c) = &mut self.classifier {
            c.feed(seg);
        }
        if self.head_len < 3 {
            let n = (3 - self.head_len).min(seg.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&seg[..n]);
            self.head_len += n;
        }
        if self.all_ws {
            self.all_ws = seg.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r'));
        }
        self.partial_len += seg.len() as u64;
        if self.keep != KEEP_TEXT {
            // Leading bytes, plus one more unit for each character above U+FFFF.
            let units = seg.iter().filter(|&&b| (b as i8) >= -0x40).count()
                + seg.iter().filter(|&&b| b >= 0xF0).count();
            self.units += units as u64;
        }
        self.last_byte = seg.last().copied();
        if !self.text_dropped {
            if self.text.len() + seg.len() <= self.keep {
                self.text.extend_from_slice(seg);
            } else {
                self.text_dropped = true;
                self.text = Vec::new();
            }
        }
    }

    fn complete(&mut self, end: u64) -> Line {
        let start = self.line_start;
        let info = self.classifier.as_mut().map(Classifier::finish);
        let bom = if start == 0 && self.head_len == 3 && self.head == *BOM {
            BOM.len()
        } else {
            0
        };
        let cr = usize::from(self.last_byte == Some(b'\r'));
        let len = self.partial_len.saturating_sub((bom + cr) as u64);
        let kept = (!self.text_dropped)
            .then(|| &self.text[bom.min(self.text.len())..self.text.len() - cr]);
        let oversize = match kept {
            Some(t) => is_oversize(t),
            // Dropped by a text reader: longer than any line within the limit can be. Dropped
            // by a fold-only reader: the streamed count, less the BOM's and `\r`'s units.
            None => {
                len > MAX_LINE_BYTES as u64
                    || (self.keep != KEEP_TEXT
                        && self.units.saturating_sub(u64::from(bom > 0) + cr as u64)
                            > MAX_LINE_UTF16_UNITS as u64)
            }
        };
        let blank = match kept {
            Some(t) => t.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')),
            None => self.all_ws && bom == 0,
        };
        let text = match kept {
            Some(t) if !oversize && self.keep == KEEP_TEXT => Some(t.to_vec()),
            _ => None,
        };
        let line = Line {
            number: self.next_number,
            start,
            end,
            len,
            text,
            oversize,
            blank,
            info,
        };
        self.next_number += 1;
        self.line_start = end;
        self.partial_len = 0;
        self.text.clear();
        if self.text.capacity() > 4 * READ_CHUNK {
            self.text = Vec::new();
        }
        self.text_dropped = false;
        self.head_len = 0;
        self.all_ws = true;
        self.units = 0;
        self.last_byte = None;
        line
    }
}

impl std::fmt::Debug for LineReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineReader")
            .field("offset", &self.offset())
            .field("next_number", &self.next_number())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(data: &[u8], reader: &mut LineReader) -> Vec<Line> {
        let mut out = Vec::new();
        reader.read(data, usize::MAX, &mut |l| out.push(l)).unwrap();
        out
    }

    #[test]
    fn partial_last_line_is_not_a_line_until_its_newline() {
        let mut r = LineReader::new(0, 0, false);
        let mut file = b"{\"a\":1}\n{\"b\":".to_vec();
        let lines = read_all(&file, &mut r);
        assert_eq!(lines.len(), 1);
        assert_eq!(r.partial_bytes(), 5);
        file.extend_from_slice(b"2}\r\n");
        let lines = read_all(&file, &mut r);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].number, 1);
        assert_eq!(lines[0].text.as_deref(), Some(&b"{\"b\":2}"[..]));
        assert_eq!(lines[0].start, 8);
        assert_eq!(lines[0].end, file.len() as u64);
    }

    #[test]
    fn bom_is_skipped_on_line_zero_only_and_numbering_is_physical() {
        let file = b"\xEF\xBB\xBF{}\n\n  \n{}\n";
        let mut r = LineReader::new(0, 0, true);
        let lines = read_all(file, &mut r);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].text.as_deref(), Some(&b"{}"[..]));
        assert_eq!(lines[0].len, 2);
        assert!(!lines[0].info.as_ref().unwrap().malformed);
        assert!(lines[1].blank && lines[2].blank && !lines[3].blank);
        assert_eq!(lines[3].number, 3);
    }

    #[test]
    fn oversize_line_drops_its_text_but_keeps_length_and_classification() {
        let big = "x".repeat(MAX_LINE_BYTES * 3);
        let line = format!(
            "{{\"type\":\"response_item\",\"payload\":{{\"type\":\"function_call_output\",\"output\":\"{big}\",\"call_id\":\"c1\"}}}}\n"
        );
        let mut r = LineReader::new(0, 0, true);
        let lines = read_all(line.as_bytes(), &mut r);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].oversize());
        assert_eq!(lines[0].len as usize, line.len() - 1);
        assert_eq!(
            lines[0].info.as_ref().unwrap().call_id.as_deref(),
            Some("c1")
        );
        assert!(r.retained_bytes() <= KEEP_TEXT + READ_CHUNK + 16);
    }

    /// A supervisor holds two readers per child: once caught up, following must not keep
    /// the catch-up's 256 KiB buffer, while a catch-up still reads in big chunks.
    #[test]
    fn a_caught_up_reader_keeps_a_small_buffer() {
        let line = format!("{{\"a\":\"{}\"}}\n", "z".repeat(1000));
        let mut file = line.repeat(2000).into_bytes();
        let mut r = LineReader::new(0, 0, false);
        assert_eq!(read_all(&file, &mut r).len(), 2000);
        assert!(r.retained_bytes() < READ_CHUNK, "{}", r.retained_bytes());
        file.extend_from_slice(line.as_bytes());
        assert_eq!(read_all(&file, &mut r).len(), 1);
        assert!(r.retained_bytes() < READ_CHUNK, "{}", r.retained_bytes());

        // Stopped by the line limit mid-file, the grown buffer stays for the next call.
        let mut r = LineReader::new(0, 0, false);
        let mut first = Vec::new();
        r.read(&file[..], 100, &mut |l| first.push(l)).unwrap();
        assert_eq!(first.len(), 100);
        assert!(r.retained_bytes() >= READ_CHUNK);
        assert_eq!(read_all(&file, &mut r).len(), 1901);
    }

    #[test]
    fn exactly_the_limit_still_ships_as_text() {
        let body = "y".repeat(MAX_LINE_UTF16_UNITS);
        let file = format!("{body}\r\n{body}y\n");
        let mut r = LineReader::new(0, 0, false);
        let lines = read_all(file.as_bytes(), &mut r);
        assert_eq!(
            lines[0].text.as_ref().map(Vec::len),
            Some(MAX_LINE_UTF16_UNITS)
        );
        assert!(!lines[0].oversize());
        assert!(lines[1].oversize());
        assert_eq!(lines[1].len as usize, MAX_LINE_UTF16_UNITS + 1);
    }

    #[test]
    fn the_limit_counts_utf16_units_in_both_readers() {
        // Three bytes, one unit: at the limit in units, three times it in bytes.
        let cjk = "日".repeat(MAX_LINE_UTF16_UNITS);
        // Four bytes, two units: one unit over.
        let astral = format!("{}x", "😀".repeat(MAX_LINE_UTF16_UNITS / 2));
        let file = format!("\u{FEFF}{cjk}\r\n{astral}\n");
        let mut text = LineReader::new(0, 0, false);
        let lines = read_all(file.as_bytes(), &mut text);
        assert_eq!(lines[0].text.as_ref().map(Vec::len), Some(cjk.len()));
        assert!(!lines[0].oversize());
        assert!(lines[1].oversize() && lines[1].text.is_none());
        let mut fold = LineReader::fold_only(0, 0, false);
        let lines = read_all(file.as_bytes(), &mut fold);
        assert!(!lines[0].oversize());
        assert!(lines[1].oversize());
    }

    #[test]
    fn max_lines_stops_early_and_resumes_without_loss() {
        let file = b"1\n2\n3\n4\n";
        let mut r = LineReader::new(0, 0, false);
        let mut got = Vec::new();
        let st = r.read(&file[..], 2, &mut |l| got.push(l.number)).unwrap();
        assert_eq!(
            st,
            ReadStatus {
                lines: 2,
                at_eof: false
            }
        );
        r.read(&file[..], usize::MAX, &mut |l| got.push(l.number))
            .unwrap();
        assert_eq!(got, vec![0, 1, 2, 3]);
    }
}
