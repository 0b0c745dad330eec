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
//! its `\n` arrives, and never counted before. A line over the limit ships as the kcap CLI's
//! capture-loss marker, so its text is dropped while streaming and only its lengths survive
//! (bytes, and UTF-16 units counted as it passes).

use std::borrow::Cow;
use std::fs::File;
use std::io;
use std::ops::Range;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Read granularity. Large enough to amortise syscalls, small enough to stay cache-friendly.
pub const READ_CHUNK: usize = 256 * 1024;

/// The first read's buffer: a live append is a few KB. A read that fills it grows the buffer
/// to [`READ_CHUNK`] for the rest of a catch-up, and reaching the end drops the buffer, so a
/// reader that is only following keeps none between reads (a supervisor holds two readers for
/// each of hundreds of children).
const FIRST_CHUNK: usize = 16 * 1024;

/// A text buffer grown past this for one line is not kept for the next (a line of 4 MiB must
/// not pin 4 MiB for ever): the line gets it instead of a copy.
const BIG_TEXT: usize = 4 * READ_CHUNK;

/// A line held past this much text (a text-keeping reader) is looked ahead for its end.
const LOOK_AHEAD_AFTER: u64 = 256 * 1024;

thread_local! {
    /// The read buffer of this thread's caught-up readers (the host's loop runs every
    /// child's readers on one thread, one read at a time): one [`FIRST_CHUNK`] per thread,
    /// where a buffer per reader cost an idle supervisor 16 KiB per reader and a fresh one per
    /// read cost a zeroed allocation per read. Its bytes are never read before a read writes
    /// them.
    static SPARE: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A reader that hands out no text keeps just enough to tell a blank line.
const KEEP_NO_TEXT: usize = 64;

/// Positional reads, so two cursors can share one open handle (which also keeps reading a
/// file that was deleted or renamed away). A read answers fewer bytes than asked only at the
/// end of the data (as a positional read of a regular file does): the reader takes a short
/// read as the end of the file.
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

/// How long a line's text (without BOM, `\r` and `\n`) may be, in bytes, before it is
/// oversize: a reader that keeps text then drops it while streaming and reports only its
/// lengths. The kcap CLI's capture limit is in bytes of UTF-8 (docs/capture.md), so the test is
/// the line's byte length, known exactly without looking at a byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeLimit {
    max: u64,
}

impl SizeLimit {
    /// At most `max` bytes.
    pub const fn bytes(max: u64) -> SizeLimit {
        SizeLimit { max }
    }

    /// The most bytes a line within the limit takes: the text a reader must be able to hold.
    pub(crate) const fn max_bytes(&self) -> usize {
        self.max as usize
    }
}

/// The length in UTF-16 code units of valid UTF-8 `text`, as .NET's `string.Length` counts
/// it: one unit per leading byte, one more for each character above U+FFFF.
fn valid_units(text: &[u8]) -> u64 {
    if text.is_ascii() {
        return text.len() as u64;
    }
    // Blocks small enough for byte-wide counters (at most 2 per byte, 64 bytes < 256): the
    // compiler then adds 16 or 32 bytes at a time instead of widening each to 64 bits. An
    // all-ASCII block (most of a rollout) is one unit a byte, told by a cheaper test.
    text.chunks(64)
        .map(|block| {
            if block.is_ascii() {
                return block.len() as u64;
            }
            let units = block.iter().fold(0u8, |n, &b| {
                n + u8::from((b as i8) >= -0x40) + u8::from(b >= 0xF0)
            });
            u64::from(units)
        })
        .sum()
}

/// The length of `raw` in UTF-16 code units once decoded as the shipping path decodes it (each
/// invalid sequence becomes one U+FFFD), as the capture-loss marker names it. Allocates nothing.
pub fn utf16_len(raw: &[u8]) -> u64 {
    let mut count = Utf16Count::default();
    count.add(raw);
    count.total()
}

/// A line's length in UTF-16 code units once decoded as the kcap CLI decodes it (each invalid
/// sequence one U+FFFD, one unit), counted piece by piece as the line streams past, split
/// anywhere (inside a character too).
#[derive(Clone, Copy, Debug, Default)]
pub struct Utf16Count {
    units: u64,
    /// The start of a character cut by the end of the last piece.
    carry: [u8; 4],
    carry_len: usize,
}

impl Utf16Count {
    pub fn add(&mut self, mut piece: &[u8]) {
        if self.carry_len > 0 {
            // Finish the cut character: at most three more bytes decide it.
            let take = piece.len().min(4 - self.carry_len);
            let mut buf = self.carry;
            buf[self.carry_len..self.carry_len + take].copy_from_slice(&piece[..take]);
            let joined = &buf[..self.carry_len + take];
            let used = match std::str::from_utf8(joined) {
                Ok(c) => {
                    self.units += valid_units(c.as_bytes());
                    joined.len()
                }
                // The cut character ended well; what follows is the piece's own.
                Err(e) if e.valid_up_to() > 0 => {
                    self.units += valid_units(&joined[..e.valid_up_to()]);
                    e.valid_up_to()
                }
                Err(e) => match e.error_len() {
                    // The cut character was invalid: one U+FFFD for its maximal prefix.
                    Some(bad) => {
                        self.units += 1;
                        bad
                    }
                    // The whole new piece is still part of the character: wait for more.
                    None if take == piece.len() => {
                        self.carry = buf;
                        self.carry_len = joined.len();
                        return;
                    }
                    // Not reached: four bytes always decide a character.
                    None => {
                        self.units += 1;
                        joined.len()
                    }
                },
            };
            // `used` counts carried bytes first: what is left of the piece starts after them.
            piece = &piece[used.saturating_sub(self.carry_len)..];
            self.carry_len = 0;
        }
        if piece.is_ascii() {
            self.units += piece.len() as u64;
            return;
        }
        let mut chunks = piece.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            self.units += valid_units(chunk.valid().as_bytes());
            let bad = chunk.invalid();
            if bad.is_empty() {
                continue;
            }
            let at_end = chunks.peek().is_none();
            if at_end
                && bad.len() < 4
                && std::str::from_utf8(bad).is_err_and(|e| e.error_len().is_none())
            {
                // Perhaps a character the next piece completes.
                self.carry[..bad.len()].copy_from_slice(bad);
                self.carry_len = bad.len();
            } else {
                self.units += 1;
            }
        }
    }

    /// The count of the whole line: a character still cut at its end is one U+FFFD.
    pub fn total(&self) -> u64 {
        self.units + u64::from(self.carry_len > 0)
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
    /// Its text is over the [`SizeLimit`]: it ships as the capture-loss marker.
    pub oversize: bool,
    /// Its text (without BOM, `\r`, `\n`), when the reader keeps text and the line is within
    /// the limit: the reader's own buffer handed over for a long line (the reader would drop
    /// it anyway, and a sink need not copy megabytes), else a view of it.
    pub text: Option<Cow<'a, [u8]>>,
    /// For an oversize line of a reader that keeps text: its text's length in UTF-16 code
    /// units ([`Utf16Count`]), counted while it streamed past (the marker names it).
    pub units: Option<u64>,
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
    /// At most about this many bytes of complete lines per [`LineReader::read`] (at least one
    /// line): what a reader that keeps text hands out in one call stays bounded whatever the
    /// lines' sizes.
    read_budget: u64,
    /// Bytes of the line in progress seen so far (its `\n` excluded).
    partial_len: u64,
    /// UTF-16 units of the line in progress, counted from the moment its text is dropped (a
    /// reader that keeps text only).
    units: Utf16Count,
    /// Its text, while it fits `keep`.
    text: Vec<u8>,
    /// How much text to keep: the limit's worth (plus a BOM and a `\r`), or [`KEEP_NO_TEXT`].
    keep: usize,
    /// Text is handed to the sink.
    gives_text: bool,
    text_dropped: bool,
    /// The line in progress is known to run past the limit ([`LineReader::look_ahead`]).
    doomed: bool,
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
            read_budget: u64::MAX,
            partial_len: 0,
            units: Utf16Count::default(),
            text: Vec::new(),
            keep: limit.max_bytes() + BOM.len() + 1,
            gives_text: true,
            text_dropped: false,
            doomed: false,
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

    /// The same reader, stopping each [`LineReader::read`] once the complete lines it
    /// reported hold `bytes` or more (the shipping cursor: a few lines of 4 MiB are not
    /// read at once).
    pub fn with_read_budget(mut self, bytes: u64) -> LineReader {
        self.read_budget = bytes.max(1);
        self
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
        // A reader in the middle of a catch-up kept its buffer; any other takes this thread's
        // spare one, zeroed once, instead of a fresh zeroed `FIRST_CHUNK` per read: two of
        // those per followed line (the fold's and the shipping cursor's reads) were an eighth
        // of `watch`'s instructions per line, nearly all of it `memset`.
        let mut buf = if self.buf.is_empty() {
            SPARE.take()
        } else {
            std::mem::take(&mut self.buf)
        };
        if buf.len() < FIRST_CHUNK {
            buf = vec![0; FIRST_CHUNK];
        }
        let mut emitted = 0;
        let mut taken = 0u64;
        // Whether bytes may be waiting past where a read stopped for its line or byte
        // budget: then the grown buffer is kept for the next call.
        let mut more_waiting = true;
        let result = loop {
            if emitted >= max_lines || taken >= self.read_budget {
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
                        self.absorb(&data[pos..pos + i], sink);
                        pos += i + 1;
                        let end = self.offset + pos as u64;
                        taken += self.complete(end, sink);
                        emitted += 1;
                        if emitted >= max_lines || taken >= self.read_budget {
                            more_waiting = pos < n || n == buf.len();
                            break;
                        }
                    }
                    None => {
                        let rest = self.offset + n as u64;
                        self.look_ahead(file, rest, (n - pos) as u64);
                        self.absorb(&data[pos..], sink);
                        pos = n;
                    }
                }
            }
            self.offset += pos as u64;
            if pos == n && n < buf.len() {
                // A short read is the end of the file as it is now (a positional read of a
                // regular file returns fewer bytes than asked only there): asking again for
                // the `0` that says so cost every followed line one more system call. Bytes
                // appended meanwhile come with their own notification.
                break Ok(ReadStatus {
                    lines: emitted,
                    at_eof: true,
                });
            }
            if n == buf.len() && buf.len() < READ_CHUNK {
                buf = vec![0; READ_CHUNK];
            }
        };
        // Caught up: at the end of the file, or stopped by a budget exactly where the bytes
        // read ended (the shipping cursor, which reads only the lines the fold has read,
        // never sees the end of the file; keeping its catch-up buffer cost a supervisor
        // 256 KiB per child for good).
        let caught_up = matches!(result, Ok(ReadStatus { at_eof: true, .. }))
            || (result.is_ok() && !more_waiting);
        // A caught-up reader keeps no buffer at all: it goes back to the thread's spare, which
        // the next read (a wake-up later) takes, where keeping it cost every idle reader
        // 16 KiB (two per child of a supervisor of hundreds).
        if !caught_up {
            self.buf = buf;
        } else {
            // The spare stays a `FIRST_CHUNK`: a catch-up's 256 KiB is not kept for good.
            if buf.len() > FIRST_CHUNK {
                buf.truncate(FIRST_CHUNK);
                buf.shrink_to_fit();
            }
            SPARE.set(buf);
        }
        // Likewise the text of the longest line of a catch-up (up to the limit) is not kept
        // while following; a held partial line keeps what it needs.
        if caught_up && self.text.is_empty() {
            self.text = Vec::new();
        } else if caught_up && self.text.capacity() > FIRST_CHUNK {
            self.text.shrink_to(FIRST_CHUNK);
        }
        result
    }

    /// For a reader that keeps text, when the line in progress is long and `more` bytes of it
    /// are about to be taken with no end in sight: looks for its end in the file (from `from`)
    /// no further than the limit. A line that surely runs past the limit has its text dropped
    /// from here, instead of being held up to the limit first: a 100 MB line then costs no
    /// more memory than a 1 MB one. A line whose end is not on disk yet is decided when it is,
    /// and so is one whose look ahead fails to read (the read itself reports the error).
    fn look_ahead<R: ReadAt + ?Sized>(&mut self, file: &R, from: u64, more: u64) {
        let held = self.text.len() as u64 + more;
        if !self.gives_text || self.text_dropped || self.doomed || held <= LOOK_AHEAD_AFTER {
            return;
        }
        // One byte past what a line within the limit can hold with a BOM and a `\r`: no end
        // up to there means the line is longer than the limit.
        let Some(mut left) = (self.keep as u64 + 1).checked_sub(held) else {
            self.doomed = true;
            return;
        };
        let mut probe = [0u8; 64 * 1024];
        let mut at = from;
        loop {
            if left == 0 {
                // Past the limit and still no end: it is oversize.
                self.doomed = true;
                return;
            }
            let want = probe.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let got = match file.read_at(&mut probe[..want], at) {
                Ok(0) => return,
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            if memchr::memchr(b'\n', &probe[..got]).is_some() {
                return;
            }
            at += got as u64;
            left -= got as u64;
        }
    }

    /// Takes the next piece of the line in progress.
    fn absorb<S: LineSink + ?Sized>(&mut self, seg: &[u8], sink: &mut S) {
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
        self.last_byte = seg.last().copied();
        if !self.text_dropped {
            if !self.doomed && self.text.len() + seg.len() <= self.keep {
                self.text.extend_from_slice(seg);
            } else {
                self.text_dropped = true;
                if self.gives_text {
                    // Past the limit: from here only the length in units is kept.
                    self.units.add(&self.text);
                    self.units.add(seg);
                }
                self.text = Vec::new();
            }
        } else if self.gives_text {
            self.units.add(seg);
        }
    }

    /// Reports the line ending at `end`; returns its length in bytes.
    fn complete<S: LineSink + ?Sized>(&mut self, end: u64, sink: &mut S) -> u64 {
        let start = self.line_start;
        let bom = start == 0 && self.head_len == 3 && self.head == *BOM;
        let bom_bytes = if bom { BOM.len() } else { 0 };
        let cr = usize::from(self.last_byte == Some(b'\r'));
        let len = self.partial_len.saturating_sub((bom_bytes + cr) as u64);
        let kept = (!self.text_dropped)
            .then(|| &self.text[bom_bytes.min(self.text.len())..self.text.len() - cr]);
        let oversize = len > self.limit.max;
        let blank = match kept {
            Some(t) => t.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')),
            None => self.all_ws && !bom,
        };
        let units = (oversize && self.gives_text).then(|| match kept {
            // Just over the limit, the text still fitted what the reader keeps.
            Some(t) => utf16_len(t),
            // A BOM is one unit, and so is a `\r`.
            None => self
                .units
                .total()
                .saturating_sub(u64::from(bom) + cr as u64),
        });
        let give = kept.is_some() && !oversize && self.gives_text;
        let text = if give && self.text.capacity() > BIG_TEXT {
            let mut owned = std::mem::take(&mut self.text);
            owned.truncate(owned.len() - cr);
            owned.drain(..bom_bytes.min(owned.len()));
            Some(Cow::Owned(owned))
        } else if give {
            Some(Cow::Borrowed(
                &self.text[bom_bytes.min(self.text.len())..self.text.len() - cr],
            ))
        } else {
            None
        };
        sink.end(LineEnd {
            number: self.next_number,
            range: start..end,
            len,
            blank,
            oversize,
            text,
            units,
        });
        self.next_number += 1;
        self.line_start = end;
        self.partial_len = 0;
        self.units = Utf16Count::default();
        self.text.clear();
        if self.text.capacity() > BIG_TEXT {
            self.text = Vec::new();
        }
        self.text_dropped = false;
        self.doomed = false;
        self.head_len = 0;
        self.all_ws = true;
        self.last_byte = None;
        len
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

/// A file's bytes that counts the reads reaching it: what the tests of this reader and of
/// [`super::recent`] count reads with.
#[cfg(test)]
pub(crate) struct Counted<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) reads: std::cell::Cell<usize>,
}

#[cfg(test)]
impl ReadAt for Counted<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.reads.set(self.reads.get() + 1);
        self.bytes.read_at(buf, offset)
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
        units: Option<u64>,
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
                text: line.text.map(Cow::into_owned),
                units: line.units,
                pieces: std::mem::take(&mut self.pieces),
            });
        }
    }

    fn read_all(data: &[u8], reader: &mut LineReader) -> Vec<Seen> {
        let mut sink = Record::default();
        reader.read(data, usize::MAX, &mut sink).unwrap();
        sink.lines
    }

    /// One appended line costs one read: a read that comes back short is the end of the file,
    /// not asked again for the `0` that says so.
    #[test]
    fn a_short_read_is_the_end_of_the_file() {
        let file = Counted {
            bytes: b"{\"a\":1}\n{\"b\":2}\n{\"c\"",
            reads: Default::default(),
        };
        let mut reader = LineReader::new(0, 0, LIMIT);
        let mut sink = Record::default();
        let status = reader.read(&file, usize::MAX, &mut sink).unwrap();
        assert_eq!(
            status,
            ReadStatus {
                lines: 2,
                at_eof: true
            }
        );
        assert_eq!(sink.lines.len(), 2);
        assert_eq!(reader.partial_bytes(), 4);
        assert_eq!(file.reads.get(), 1);
        // At the end: one read, which answers nothing.
        let status = reader.read(&file, usize::MAX, &mut sink).unwrap();
        assert_eq!(
            status,
            ReadStatus {
                lines: 0,
                at_eof: true
            }
        );
        assert_eq!(file.reads.get(), 2);
        // A full buffer is not the end: the rest is read in the same call.
        let big = vec![b'x'; FIRST_CHUNK * 3];
        let mut data = big.clone();
        data.push(b'\n');
        let file = Counted {
            bytes: &data,
            reads: Default::default(),
        };
        let mut reader = LineReader::new(0, 0, SizeLimit::bytes(1 << 20));
        let mut sink = Record::default();
        let status = reader.read(&file, usize::MAX, &mut sink).unwrap();
        assert_eq!(
            status,
            ReadStatus {
                lines: 1,
                at_eof: true
            }
        );
        assert_eq!(sink.lines[0].text.as_deref(), Some(&big[..]));
    }

    /// A supervisor holds two readers per child: once caught up, following must not keep
    /// the catch-up's 256 KiB buffer, while a catch-up still reads in big chunks.
    #[test]
    fn a_caught_up_reader_keeps_a_small_buffer() {
        let line = format!("{{\"a\":\"{}\"}}\n", "z".repeat(1000));
        let mut file = line.repeat(2000).into_bytes();
        let mut r = LineReader::without_text(0, 0, LIMIT);
        assert_eq!(read_all(&file, &mut r).len(), 2000);
        assert_eq!(r.retained_bytes(), 0, "a caught-up reader keeps no buffer");
        file.extend_from_slice(line.as_bytes());
        assert_eq!(read_all(&file, &mut r).len(), 1);
        assert_eq!(r.retained_bytes(), 0, "a caught-up reader keeps no buffer");

        // Stopped by the line limit mid-file, the grown buffer stays for the next call.
        let mut r = LineReader::without_text(0, 0, LIMIT);
        let mut first = Record::default();
        r.read(&file[..], 100, &mut first).unwrap();
        assert_eq!(first.lines.len(), 100);
        assert!(r.retained_bytes() >= READ_CHUNK);
        assert_eq!(read_all(&file, &mut r).len(), 1901);

        // Stopped by the line limit exactly where the file ends (the shipping cursor reads
        // only the lines the fold has read, so it never sees the end of the file): nothing
        // waits, and neither the buffer nor the longest line's text is kept. (The last read
        // came back short, so the reader knows it is at the end.)
        let long = format!("{{\"a\":\"{}\"}}\n", "y".repeat(200_000));
        file.extend_from_slice(long.as_bytes());
        let lines = 2002;
        let mut r = LineReader::new(0, 0, SizeLimit::bytes(1 << 20));
        let mut all = Record::default();
        let status = r.read(&file[..], lines, &mut all).unwrap();
        assert_eq!((all.lines.len(), status.at_eof), (lines, true));
        assert_eq!(r.retained_bytes(), 0);
        // A partial line held keeps its text, and the next read completes it.
        let mut more = file.clone();
        more.extend_from_slice(b"{\"b\":");
        let mut r = LineReader::new(0, 0, SizeLimit::bytes(1 << 20));
        let mut all = Record::default();
        r.read(&more[..], usize::MAX, &mut all).unwrap();
        assert_eq!(r.partial_bytes(), 5);
        more.extend_from_slice(b"1}\n");
        r.read(&more[..], usize::MAX, &mut all).unwrap();
        assert_eq!(
            all.lines.last().unwrap().text.as_deref(),
            Some(&b"{\"b\":1}"[..])
        );
        assert_eq!(r.retained_bytes(), 0);
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

    /// The marker of a line over the limit names its length in UTF-16 units, counted while
    /// its text streamed past: with a BOM and a `\r` taken off, characters of one, two and
    /// three bytes (one unit) and four bytes (two units), whatever the reads' boundaries.
    #[test]
    fn an_oversize_lines_units_are_counted_as_it_streams_past() {
        let limit = SizeLimit::bytes(40);
        let mut file = String::from("\u{FEFF}");
        let mut want = Vec::new();
        // 30 bytes; 41 (just over, still within what the reader keeps); 90; 2,000.
        for (n, extra, tail) in [(3, "", ""), (4, "b", "\r"), (9, "", ""), (200, "", "\r")] {
            let text = format!("{}{extra}", "aé日😀".repeat(n));
            want.push((text.len() as u64, text.encode_utf16().count() as u64));
            file.push_str(&text);
            file.push_str(tail);
            file.push('\n');
        }
        // Every split: the file grows three bytes per read.
        let mut r = LineReader::new(0, 0, limit);
        let mut sink = Record::default();
        for end in (0..=file.len()).step_by(3).chain([file.len()]) {
            r.read(&file.as_bytes()[..end], usize::MAX, &mut sink)
                .unwrap();
        }
        let got: Vec<(u64, Option<u64>, bool)> = sink
            .lines
            .iter()
            .map(|l| (l.len, l.units, l.oversize))
            .collect();
        assert_eq!(
            got,
            vec![
                (want[0].0, None, false),
                (want[1].0, Some(want[1].1), true),
                (want[2].0, Some(want[2].1), true),
                (want[3].0, Some(want[3].1), true),
            ]
        );
        // A reader that keeps no text reports no units (the marker is the shipping cursor's).
        let lines = read_all(file.as_bytes(), &mut LineReader::without_text(0, 0, limit));
        assert!(lines.iter().all(|l| l.units.is_none()));
        assert_eq!(
            lines.iter().map(|l| l.oversize).collect::<Vec<_>>(),
            [false, true, true, true]
        );
    }

    /// The streamed count is the kcap CLI's: the length of the text decoded with U+FFFD for
    /// each invalid sequence, however the line is cut into pieces (inside a character, inside
    /// an invalid sequence).
    #[test]
    fn the_streamed_unit_count_equals_the_lossy_decoding_under_every_split() {
        let samples: [&[u8]; 8] = [
            "aé日😀".as_bytes(),
            b"\xF0\x9F\x98",
            b"x\xF0\x9F\x98y\x80\x80z",
            b"\xE6\x97\xA5\xE6\x97",
            b"\xC3\xA9\xE6\x97a\xFF\xFE",
            b"\xED\xA0\x80\xF4\x90\x80\x80",
            b"\xC0\xAF\xE0\x80\xAF\xF8\x88\x80\x80\x80",
            b"\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0",
        ];
        for sample in samples {
            let want = String::from_utf8_lossy(sample).encode_utf16().count() as u64;
            for i in 0..=sample.len() {
                for j in i..=sample.len() {
                    let mut count = Utf16Count::default();
                    for piece in [&sample[..i], &sample[i..j], &sample[j..]] {
                        if !piece.is_empty() {
                            count.add(piece);
                        }
                    }
                    assert_eq!(count.total(), want, "{sample:?} cut at {i} and {j}");
                }
            }
        }
    }

    /// A line whose end lies past the limit is not held up to the limit first: once it is
    /// long, the reader looks ahead in the file and drops its text as soon as it knows (a
    /// 100 MB line then costs a reader what a 300 KB one does). One still being written, whose
    /// end is not on disk, is held until it is decided.
    #[test]
    fn a_line_known_to_run_past_the_limit_is_not_held_up_to_it() {
        let limit = SizeLimit::bytes(2 << 20);
        let mut file = vec![b'x'; 5 << 20];
        let mut r = LineReader::new(0, 0, limit);
        let mut sink = Record::default();
        r.read(&file[..], usize::MAX, &mut sink).unwrap();
        assert!(sink.lines.is_empty());
        assert!(
            r.retained_bytes() < LOOK_AHEAD_AFTER as usize + 2 * READ_CHUNK,
            "holds {} bytes of a line known to be oversize",
            r.retained_bytes()
        );
        file.push(b'\n');
        r.read(&file[..], usize::MAX, &mut sink).unwrap();
        let line = &sink.lines[0];
        assert!(line.oversize && line.text.is_none());
        assert_eq!(
            line.units,
            Some(5 << 20),
            "every unit counted, dropped text included"
        );

        // Exactly the limit with a BOM and a `\r`: within it, kept whole, never doomed.
        let mut file = b"\xEF\xBB\xBF".to_vec();
        file.extend(std::iter::repeat_n(b'y', 2 << 20));
        file.extend_from_slice(b"\r\nnext\n");
        let lines = read_all(&file, &mut LineReader::new(0, 0, limit));
        assert!(!lines[0].oversize);
        assert_eq!(lines[0].text.as_ref().map(Vec::len), Some(2 << 20));

        // Still being written past the look-ahead point, end not on disk: held, not judged.
        let mut r = LineReader::new(0, 0, limit);
        let mut sink = Record::default();
        r.read(&vec![b'z'; 1 << 20][..], usize::MAX, &mut sink)
            .unwrap();
        let mut whole = vec![b'z'; 1 << 20];
        whole.push(b'\n');
        r.read(&whole[..], usize::MAX, &mut sink).unwrap();
        assert_eq!(sink.lines[0].text.as_ref().map(Vec::len), Some(1 << 20));
    }

    /// The shipping cursor's budget: lines of the limit's size come one or two a read, never
    /// hundreds held at once, and nothing is skipped.
    #[test]
    fn a_read_budget_bounds_the_text_handed_out_per_read() {
        let line = format!("{}\n", "q".repeat(1000));
        let file = line.repeat(50);
        let mut r = LineReader::new(0, 0, SizeLimit::bytes(4096)).with_read_budget(4096);
        let mut numbers = Vec::new();
        loop {
            let mut sink = Record::default();
            let st = r.read(file.as_bytes(), usize::MAX, &mut sink).unwrap();
            assert!(
                sink.lines.len() <= 5,
                "{} lines in one read",
                sink.lines.len()
            );
            numbers.extend(sink.lines.iter().map(|l| l.number));
            if st.at_eof {
                break;
            }
        }
        assert_eq!(numbers, (0..50).collect::<Vec<u64>>());
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

    proptest::proptest! {
        // Files past `FIRST_CHUNK` generated byte by byte are slow in a debug build: fewer
        // cases, each still several files read in many pieces.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Readers of several files sharing this thread's spare buffer, read in any order as
        /// their files grow in any pieces (lines short and long, past `FIRST_CHUNK` too), each
        /// hand out exactly the lines a reader reading its file alone at the end does.
        #[test]
        fn readers_sharing_the_spare_read_as_one_reading_alone(
            files in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::prop_oneof![
                        proptest::prelude::Just(b'\n'),
                        proptest::prelude::Just(b'x'),
                        proptest::prelude::Just(b' '),
                        proptest::prelude::any::<u8>(),
                    ],
                    0..24_000,
                ),
                1..4,
            ),
            steps in proptest::collection::vec((0usize..4, 1usize..20_000, 1usize..50), 1..40),
        ) {

            let mut readers: Vec<LineReader> =
                files.iter().map(|_| LineReader::new(0, 0, LIMIT)).collect();
            let mut sinks: Vec<Record> = files.iter().map(|_| Record::default()).collect();
            let mut grown = vec![0usize; files.len()];
            for (which, grow, max_lines) in steps {
                let i = which % files.len();
                grown[i] = (grown[i] + grow).min(files[i].len());
                let seen: &[u8] = &files[i][..grown[i]];
                readers[i].read(seen, max_lines, &mut sinks[i]).unwrap();
            }
            for (i, file) in files.iter().enumerate() {
                let data: &[u8] = file;
                while !readers[i].read(data, usize::MAX, &mut sinks[i]).unwrap().at_eof {}
                let mut alone = LineReader::new(0, 0, LIMIT);
                let want = read_all(data, &mut alone);
                proptest::prop_assert_eq!(&sinks[i].lines, &want);
            }
        }
    }
}
