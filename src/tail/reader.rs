//! Complete lines from a byte offset, with memory bounded whatever a line's size.
//!
//! The reader knows bytes, not JSON: it finds line ends, numbers lines, measures them against
//! a [`SizeLimit`] and hands everything to a [`LineSink`]. The sink sees every piece of the
//! line in progress as it streams past ([`LineSink::chunk`]), so a classifier can read a line
//! of hundreds of MB without it ever being held whole, and gets one [`LineEnd`] notice per
//! complete line with its number, byte range, length and whether it is blank or oversize.
//!
//! Codex writes a large line in several `write(2)` calls, so the reader can see a partial
//! last line: it is kept (the sink's own state and at most the limit's worth of text) until
//! its `\n` arrives, and never counted before. A line over the limit ships as a placeholder,
//! so its text is dropped while streaming and only its length survives.

use std::fs::File;
use std::io;
use std::ops::Range;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Read granularity. Large enough to amortise syscalls, small enough to stay cache-friendly.
pub const READ_CHUNK: usize = 256 * 1024;

/// The first read's buffer: a live append is a few KB. A read that fills it grows the buffer
/// to [`READ_CHUNK`] for the rest of a catch-up, and reaching the end drops a grown buffer,
/// so a reader that is only following keeps 16 KiB, not 256 KiB (a supervisor holds two
/// readers for each of dozens of children).
const FIRST_CHUNK: usize = 16 * 1024;

/// A reader that hands out no text keeps just enough to tell a blank line.
const KEEP_NO_TEXT: usize = 64;

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

/// The unit a [`SizeLimit`] counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Bytes,
    /// UTF-16 code units, as .NET's `string.Length` counts (exact for valid UTF-8).
    Utf16,
}

/// How long a line's text (without BOM, `\r` and `\n`) may be before it is oversize: its text
/// is then dropped while streaming and only its length is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeLimit {
    max: u64,
    unit: Unit,
}

impl SizeLimit {
    /// At most `max` bytes.
    pub const fn bytes(max: u64) -> SizeLimit {
        SizeLimit {
            max,
            unit: Unit::Bytes,
        }
    }

    /// At most `max` UTF-16 code units (the kcap CLI measures a .NET string's length, R2.3).
    pub const fn utf16_units(max: u64) -> SizeLimit {
        SizeLimit {
            max,
            unit: Unit::Utf16,
        }
    }

    /// The most bytes a line within the limit can take: the text a reader must be able to
    /// hold for it. One UTF-16 unit is at most three bytes of UTF-8.
    pub(crate) const fn max_bytes(&self) -> usize {
        match self.unit {
            Unit::Bytes => self.max as usize,
            Unit::Utf16 => 3 * self.max as usize,
        }
    }

    /// The length of `piece` in the limit's unit. Additive over any split of a line: a UTF-16
    /// count is one per leading byte, plus one more for each character above U+FFFF.
    fn measure(&self, piece: &[u8]) -> u64 {
        match self.unit {
            Unit::Bytes => piece.len() as u64,
            // The count runs in blocks small enough for byte-wide counters (at most 2 per
            // byte, 64 bytes < 256): the compiler then adds 16 or 32 bytes at a time instead
            // of widening each to 64 bits. An all-ASCII piece or block (most of a rollout) is
            // one unit a byte, told by a cheaper test than the count; 64-byte blocks because
            // `is_ascii` tests whole vectors and walks any remainder a byte at a time.
            Unit::Utf16 if piece.is_ascii() => piece.len() as u64,
            Unit::Utf16 => piece
                .chunks(64)
                .map(|block| {
                    if block.is_ascii() {
                        return block.len() as u64;
                    }
                    let units = block.iter().fold(0u8, |n, &b| {
                        n + u8::from((b as i8) >= -0x40) + u8::from(b >= 0xF0)
                    });
                    u64::from(units)
                })
                .sum(),
        }
    }

    /// The exact length of a whole line's text, as the shipping path decodes it: each invalid
    /// UTF-8 sequence becomes one U+FFFD, one unit (the streamed count is exact for valid
    /// UTF-8 only).
    fn measure_text(&self, text: &[u8]) -> u64 {
        match self.unit {
            Unit::Bytes => text.len() as u64,
            Unit::Utf16 => text
                .utf8_chunks()
                .map(|c| self.measure(c.valid().as_bytes()) + u64::from(!c.invalid().is_empty()))
                .sum(),
        }
    }

    /// A BOM counts this much (one character).
    fn bom(&self) -> u64 {
        match self.unit {
            Unit::Bytes => BOM.len() as u64,
            Unit::Utf16 => 1,
        }
    }
}

/// A complete line, as the reader reports it to its [`LineSink`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineEnd<'a> {
    /// 0-based physical line number.
    pub number: u64,
    /// Its bytes in the file: from its first byte (a BOM on line 0 included) to just after
    /// its `\n`.
    pub range: Range<u64>,
    /// Length of its text in bytes: without BOM, `\r` and `\n`.
    pub len: u64,
    /// Only whitespace (never shipped, still counted).
    pub blank: bool,
    /// Its text is over the [`SizeLimit`]: it ships as the placeholder.
    pub oversize: bool,
    /// Its text (without BOM, `\r`, `\n`), when the reader keeps text and the line is within
    /// the limit.
    pub text: Option<&'a [u8]>,
}

/// Where a [`LineReader`] delivers what it reads.
pub trait LineSink {
    /// The next bytes of the line in progress, in file order, never containing `\n` (a BOM and
    /// a trailing `\r` included, exactly as in the file). A line may come in many pieces,
    /// across several reads.
    fn chunk(&mut self, piece: &[u8]);

    /// The line whose pieces came since the last `end` is complete.
    fn end(&mut self, line: LineEnd<'_>);
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
    limit: SizeLimit,
    /// Bytes of the line in progress seen so far (its `\n` excluded).
    partial_len: u64,
    /// Its length in the limit's unit.
    measured: u64,
    /// Its text, while it fits `keep`.
    text: Vec<u8>,
    /// How much text to keep: the limit's worth (plus a BOM and a `\r`), or [`KEEP_NO_TEXT`].
    keep: usize,
    /// Text is handed to the sink.
    gives_text: bool,
    text_dropped: bool,
    /// The line's first bytes (a BOM on line 0), whatever is kept.
    head: [u8; 3],
    head_len: usize,
    /// Only whitespace so far (cheap: stops at the first other byte, usually the first).
    all_ws: bool,
    last_byte: Option<u8>,
    buf: Vec<u8>,
}

impl LineReader {
    /// A reader whose next line starts at `offset` and is numbered `number`, handing each
    /// line's text within `limit` to its sink (the shipping cursor).
    pub fn new(offset: u64, number: u64, limit: SizeLimit) -> LineReader {
        LineReader {
            offset,
            line_start: offset,
            next_number: number,
            limit,
            partial_len: 0,
            measured: 0,
            text: Vec::new(),
            keep: limit.max_bytes() + BOM.len() + 1,
            gives_text: true,
            text_dropped: false,
            head: [0; 3],
            head_len: 0,
            all_ws: true,
            last_byte: None,
            buf: Vec::new(),
        }
    }

    /// A reader that hands out no text (seeding and the fold cursor: their sink sees the
    /// pieces, and shipping has its own cursor), so it never copies the file's bytes.
    pub(crate) fn without_text(offset: u64, number: u64, limit: SizeLimit) -> LineReader {
        LineReader {
            keep: KEEP_NO_TEXT,
            gives_text: false,
            ..LineReader::new(offset, number, limit)
        }
    }

    /// Offset of the next byte to read (after a held partial line).
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Offset just after the last complete line emitted (where the partial line starts).
    pub(crate) fn line_start(&self) -> u64 {
        self.line_start
    }

    /// The number the next complete line will get (= complete lines read so far when the
    /// reader started at line 0).
    pub(crate) fn next_number(&self) -> u64 {
        self.next_number
    }

    /// Bytes of a partial last line held, not yet a line.
    pub fn partial_bytes(&self) -> u64 {
        self.offset - self.line_start
    }

    /// Heap bytes held, for tests of the memory bound.
    pub fn retained_bytes(&self) -> usize {
        self.text.capacity() + self.buf.capacity()
    }

    /// Reads what is available, reporting at most `max_lines` complete lines to `sink`.
    pub fn read<R: ReadAt + ?Sized, S: LineSink + ?Sized>(
        &mut self,
        file: &R,
        max_lines: usize,
        sink: &mut S,
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
                        self.absorb(&data[pos..pos + i], true, sink);
                        pos += i + 1;
                        let end = self.offset + pos as u64;
                        self.complete(end, sink);
                        emitted += 1;
                        if emitted >= max_lines {
                            break;
                        }
                    }
                    None => {
                        self.absorb(&data[pos..], false, sink);
                        pos = n;
                    }
                }
            }
            self.offset += pos as u64;
            if n == buf.len() && buf.len() < READ_CHUNK {
                buf = vec![0; READ_CHUNK];
            }
        };
        let caught_up = matches!(result, Ok(ReadStatus { at_eof: true, .. }));
        if !(caught_up && buf.len() > FIRST_CHUNK) {
            self.buf = buf;
        }
        // Likewise the text of the longest line of a catch-up (up to three times the limit)
        // is not kept while following; a held partial line keeps what it needs.
        if caught_up && self.text.capacity() > FIRST_CHUNK {
            self.text.shrink_to(FIRST_CHUNK);
        }
        result
    }

    /// Takes the next piece of the line in progress; `last` when the line ends after it.
    fn absorb<S: LineSink + ?Sized>(&mut self, seg: &[u8], last: bool, sink: &mut S) {
        if seg.is_empty() {
            return;
        }
        sink.chunk(seg);
        if self.head_len < 3 {
            let n = (3 - self.head_len).min(seg.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&seg[..n]);
            self.head_len += n;
        }
        if self.all_ws {
            self.all_ws = seg.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r'));
        }
        self.partial_len += seg.len() as u64;
        // Only a reader that keeps no text uses the streamed count (the other measures the
        // text it keeps), and only for a line that can be oversize: no byte counts more than
        // two units, so the last piece of a line of at most half the limit in bytes is not
        // counted (an earlier piece is, as its bytes are gone once the buffer is reused).
        // Once the count is past the limit by more than a BOM and a `\r` can take back, the
        // line is oversize whatever follows: the rest of a line of many MB (a screenshot, a
        // `compacted` record) is not counted, which was a tenth of seeding.
        if !self.gives_text
            && (!last || self.partial_len.saturating_mul(2) > self.limit.max)
            && self.measured <= self.oversize_count()
        {
            self.measured += self.limit.measure(seg);
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

    /// A streamed count above this makes the line oversize whatever its BOM and `\r` (what
    /// [`LineReader::complete`] takes off before comparing with the limit).
    fn oversize_count(&self) -> u64 {
        self.limit.max + self.limit.bom() + 1
    }

    fn complete<S: LineSink + ?Sized>(&mut self, end: u64, sink: &mut S) {
        let start = self.line_start;
        let bom = start == 0 && self.head_len == 3 && self.head == *BOM;
        let bom_bytes = if bom { BOM.len() } else { 0 };
        let cr = usize::from(self.last_byte == Some(b'\r'));
        let len = self.partial_len.saturating_sub((bom_bytes + cr) as u64);
        let kept = (!self.text_dropped)
            .then(|| &self.text[bom_bytes.min(self.text.len())..self.text.len() - cr]);
        let oversize = match kept {
            Some(t) => self.limit.measure_text(t) > self.limit.max,
            // Dropped by a reader that keeps the limit's worth: longer than any line within it.
            None if self.gives_text => true,
            // A reader that keeps no text: the streamed count, less the BOM's and `\r`'s.
            None => {
                let bom = if bom { self.limit.bom() } else { 0 };
                self.measured.saturating_sub(bom + cr as u64) > self.limit.max
            }
        };
        let blank = match kept {
            Some(t) => t.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')),
            None => self.all_ws && !bom,
        };
        let text = kept.filter(|_| !oversize && self.gives_text);
        sink.end(LineEnd {
            number: self.next_number,
            range: start..end,
            len,
            blank,
            oversize,
            text,
        });
        self.next_number += 1;
        self.line_start = end;
        self.partial_len = 0;
        self.measured = 0;
        self.text.clear();
        if self.text.capacity() > 4 * READ_CHUNK {
            self.text = Vec::new();
        }
        self.text_dropped = false;
        self.head_len = 0;
        self.all_ws = true;
        self.last_byte = None;
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

    const LIMIT: SizeLimit = SizeLimit::bytes(65_536);

    /// A complete line as a sink saw it: the notice, and every piece streamed before it.
    #[derive(Debug, PartialEq)]
    struct Seen {
        number: u64,
        range: Range<u64>,
        len: u64,
        blank: bool,
        oversize: bool,
        text: Option<Vec<u8>>,
        pieces: Vec<u8>,
    }

    #[derive(Default)]
    struct Record {
        pieces: Vec<u8>,
        lines: Vec<Seen>,
    }

    impl LineSink for Record {
        fn chunk(&mut self, piece: &[u8]) {
            assert!(!piece.is_empty() && !piece.contains(&b'\n'));
            self.pieces.extend_from_slice(piece);
        }

        fn end(&mut self, line: LineEnd<'_>) {
            self.lines.push(Seen {
                number: line.number,
                range: line.range,
                len: line.len,
                blank: line.blank,
                oversize: line.oversize,
                text: line.text.map(<[u8]>::to_vec),
                pieces: std::mem::take(&mut self.pieces),
            });
        }
    }

    fn read_all(data: &[u8], reader: &mut LineReader) -> Vec<Seen> {
        let mut sink = Record::default();
        reader.read(data, usize::MAX, &mut sink).unwrap();
        sink.lines
    }

    /// A supervisor holds two readers per child: once caught up, following must not keep
    /// the catch-up's 256 KiB buffer, while a catch-up still reads in big chunks.
    #[test]
    fn a_caught_up_reader_keeps_a_small_buffer() {
        let line = format!("{{\"a\":\"{}\"}}\n", "z".repeat(1000));
        let mut file = line.repeat(2000).into_bytes();
        let mut r = LineReader::without_text(0, 0, LIMIT);
        assert_eq!(read_all(&file, &mut r).len(), 2000);
        assert!(r.retained_bytes() < READ_CHUNK, "{}", r.retained_bytes());
        file.extend_from_slice(line.as_bytes());
        assert_eq!(read_all(&file, &mut r).len(), 1);
        assert!(r.retained_bytes() < READ_CHUNK, "{}", r.retained_bytes());

        // Stopped by the line limit mid-file, the grown buffer stays for the next call.
        let mut r = LineReader::without_text(0, 0, LIMIT);
        let mut first = Record::default();
        r.read(&file[..], 100, &mut first).unwrap();
        assert_eq!(first.lines.len(), 100);
        assert!(r.retained_bytes() >= READ_CHUNK);
        assert_eq!(read_all(&file, &mut r).len(), 1901);
    }

    #[test]
    fn partial_last_line_is_not_a_line_until_its_newline() {
        let mut r = LineReader::new(0, 0, LIMIT);
        let mut file = b"{\"a\":1}\n{\"b\":".to_vec();
        let mut sink = Record::default();
        r.read(&file[..], usize::MAX, &mut sink).unwrap();
        assert_eq!(sink.lines.len(), 1);
        assert_eq!(r.partial_bytes(), 5);
        // The sink already has the partial line's first piece.
        assert_eq!(sink.pieces, b"{\"b\":");
        file.extend_from_slice(b"2}\r\n");
        r.read(&file[..], usize::MAX, &mut sink).unwrap();
        let line = &sink.lines[1];
        assert_eq!(line.number, 1);
        assert_eq!(line.text.as_deref(), Some(&b"{\"b\":2}"[..]));
        assert_eq!(line.pieces, b"{\"b\":2}\r");
        assert_eq!(line.range, 8..file.len() as u64);
    }

    #[test]
    fn bom_is_skipped_on_line_zero_only_and_numbering_is_physical() {
        let file = b"\xEF\xBB\xBF{}\n\n  \n{}\n";
        let lines = read_all(file, &mut LineReader::without_text(0, 0, LIMIT));
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].len, 2);
        assert_eq!(lines[0].pieces, b"\xEF\xBB\xBF{}");
        assert!(lines.iter().all(|l| l.text.is_none()));
        assert!(!lines[0].blank && lines[1].blank && lines[2].blank && !lines[3].blank);
        assert_eq!(lines[3].number, 3);
        let lines = read_all(file, &mut LineReader::new(0, 0, LIMIT));
        assert_eq!(lines[0].text.as_deref(), Some(&b"{}"[..]));
    }

    #[test]
    fn oversize_line_drops_its_text_while_streaming_but_the_sink_sees_every_byte() {
        let big = "x".repeat(LIMIT.max_bytes() * 3);
        let line = format!("{{\"output\":\"{big}\"}}\n");
        let mut r = LineReader::new(0, 0, LIMIT);
        let lines = read_all(line.as_bytes(), &mut r);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].oversize && lines[0].text.is_none());
        assert_eq!(lines[0].len as usize, line.len() - 1);
        assert_eq!(lines[0].pieces, line.trim_end().as_bytes());
        assert!(r.retained_bytes() <= LIMIT.max_bytes() + READ_CHUNK + 16);
    }

    #[test]
    fn exactly_the_limit_still_ships_as_text() {
        let body = "y".repeat(LIMIT.max_bytes());
        let file = format!("{body}\r\n{body}y\n");
        let lines = read_all(file.as_bytes(), &mut LineReader::new(0, 0, LIMIT));
        assert_eq!(
            lines[0].text.as_ref().map(Vec::len),
            Some(LIMIT.max_bytes())
        );
        assert!(!lines[0].oversize && lines[1].oversize);
        assert_eq!(lines[1].len as usize, LIMIT.max_bytes() + 1);
        // A reader without text measures the same.
        let lines = read_all(file.as_bytes(), &mut LineReader::without_text(0, 0, LIMIT));
        assert!(!lines[0].oversize && lines[1].oversize);
    }

    #[test]
    fn a_utf16_limit_counts_code_units_not_bytes() {
        let limit = SizeLimit::utf16_units(10);
        // Three bytes, one unit each: at the limit in units, three times it in bytes.
        let cjk = "日".repeat(10);
        // Four bytes, two units: one unit over.
        let astral = format!("{}x", "😀".repeat(5));
        let file = format!("\u{FEFF}{cjk}\r\n{astral}\n");
        for mut r in [
            LineReader::new(0, 0, limit),
            LineReader::without_text(0, 0, limit),
        ] {
            let lines = read_all(file.as_bytes(), &mut r);
            assert!(!lines[0].oversize, "10 units is within the limit");
            assert!(lines[1].oversize, "11 units is over it");
            assert_eq!(lines[0].len as usize, cjk.len());
        }
        let lines = read_all(file.as_bytes(), &mut LineReader::new(0, 0, limit));
        assert_eq!(lines[0].text.as_deref(), Some(cjk.as_bytes()));
        // Invalid UTF-8 counts as the shipping path decodes it: one U+FFFD per bad sequence.
        let stray = b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\n";
        for mut r in [
            LineReader::new(0, 0, limit),
            LineReader::without_text(0, 0, limit),
        ] {
            assert!(
                read_all(stray, &mut r)[0].oversize,
                "11 replacement characters"
            );
        }
    }

    /// The streamed count stops once a line is surely oversize; around the limit, with a BOM,
    /// a `\r` and characters of two units, and when every piece of a line is counted (the file
    /// grows a few bytes per read), it must still agree with the exact count of the text.
    #[test]
    fn the_streamed_count_agrees_with_the_text_around_the_limit() {
        let limit = SizeLimit::utf16_units(40);
        let mut file = String::from("\u{FEFF}");
        for units in 36..=46 {
            for tail in ["", "\r"] {
                file.push_str(&"a".repeat(units - 4));
                file.push_str("😀😀");
                file.push_str(tail);
                file.push('\n');
            }
        }
        file.push_str(&"b".repeat(1000));
        file.push('\n');
        let want: Vec<bool> = read_all(file.as_bytes(), &mut LineReader::new(0, 0, limit))
            .iter()
            .map(|l| l.oversize)
            .collect();
        assert_eq!(
            want.iter().filter(|&&o| !o).count(),
            10,
            "36 to 40 units, both ends"
        );
        let mut r = LineReader::without_text(0, 0, limit);
        let mut sink = Record::default();
        for end in (0..=file.len()).step_by(3).chain([file.len()]) {
            r.read(&file.as_bytes()[..end], usize::MAX, &mut sink)
                .unwrap();
        }
        let got: Vec<bool> = sink.lines.iter().map(|l| l.oversize).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn max_lines_stops_early_and_resumes_without_loss() {
        let file = b"1\n2\n3\n4\n";
        let mut r = LineReader::new(0, 0, LIMIT);
        let mut sink = Record::default();
        let st = r.read(&file[..], 2, &mut sink).unwrap();
        assert_eq!(
            st,
            ReadStatus {
                lines: 2,
                at_eof: false
            }
        );
        r.read(&file[..], usize::MAX, &mut sink).unwrap();
        let numbers: Vec<u64> = sink.lines.iter().map(|l| l.number).collect();
        assert_eq!(numbers, vec![0, 1, 2, 3]);
        assert_eq!(sink.lines[3].pieces, b"4");
    }
}
