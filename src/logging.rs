//! Structured logs: stderr always, plus the watcher's log file once its key is known.
//!
//! Every acting decision is one record with a stable `event` field (docs/behaviour.md
//! L6); text by default, JSON with `KCAP_LOG_FORMAT=json`. Nothing is ever logged to
//! stdout, which carries only a command's own output (`inspect --json` can be piped).
//!
//! Two rules make the logs safe under a spawner and against hostile input
//! (docs/behaviour.md R5, R6):
//!
//! - **A log write never fails the process.** The kcap CLI spawns watchers with stdout and
//!   stderr pipes whose reading ends it closes at once, so every write to stderr fails with
//!   `EPIPE`. Both writers swallow failures, and the subscriber's own "could not write" report
//!   (which would go to stderr with a panicking `eprintln!`, and with `panic = "abort"` end the
//!   process with SIGABRT) is turned off.
//! - **One record is one line.** Paths, ids and server bodies are untrusted text; in the text
//!   format a control character inside a record (a newline in a rollout path, say) is written
//!   escaped, so nothing can forge a record. The JSON format escapes by construction.

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{FilterExt as _, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::LogFormat;

/// The log file, attached once the watcher knows its key (`<config>/logs/<key>.log`).
static LOG_FILE: OnceLock<Mutex<Option<CappedFile>>> = OnceLock::new();

/// Where a long-lived log file is rotated (docs/behaviour.md S2.5): past this size it is
/// renamed to `<name>.1` (replacing the one before) and a fresh file is started.
const LOG_CAP: u64 = 10 * 1024 * 1024;

/// A log file with its size, rotated once past [`LOG_CAP`].
pub(crate) struct CappedFile {
    file: File,
    path: std::path::PathBuf,
    len: u64,
}

impl CappedFile {
    /// Opens `path` for appending (a symbolic link refused), capped as every log file.
    pub(crate) fn open(path: &Path) -> io::Result<CappedFile> {
        let file = crate::files::open_log_file(path)?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(CappedFile {
            file,
            path: path.to_path_buf(),
            len,
        })
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) {
        if self.len.saturating_add(bytes.len() as u64) > LOG_CAP && self.len > 0 {
            let mut rotated = self.path.as_os_str().to_os_string();
            rotated.push(".1");
            // The old rotated file is replaced; a failure leaves the file growing past the cap
            // rather than losing records.
            if crate::platform::replace::rename(&self.path, Path::new(&rotated)).is_ok()
                && let Ok(f) = crate::files::open_log_file(&self.path)
            {
                self.file = f;
                self.len = 0;
            }
        }
        if self.file.write_all(bytes).is_ok() {
            self.len += bytes.len() as u64;
        }
    }
}

/// Records with this target go to the log file only: `main` prints a fatal error to stderr
/// itself, once, and logs it with this target so the file has it too.
const FILE_ONLY_TARGET: &str = "kcap_watch::file_only";

fn log_file() -> &'static Mutex<Option<CappedFile>> {
    LOG_FILE.get_or_init(|| Mutex::new(None))
}

/// Starts appending log records to `path` as well as stderr. A failure (a symbolic link at the
/// path is refused, never followed) is logged as an error and the watcher goes on with stderr.
pub(crate) fn attach_file(path: &Path) {
    match CappedFile::open(path) {
        Ok(capped) => {
            if let Ok(mut slot) = log_file().lock() {
                *slot = Some(capped);
            }
        }
        Err(e) => tracing::error!(event = "log_file_failed", "{e}"),
    }
}

/// Records a fatal error in the log file only (the caller prints it to stderr).
pub fn fatal_to_file(message: &str) {
    tracing::error!(target: FILE_ONLY_TARGET, event = "fatal", "{message}");
}

/// `text` with every control character written as an escape (`\n`, `\r`, `\t`, `\u{1b}`), for
/// untrusted text placed in a message meant for one line.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    out
}

/// A writer for a command's own output whose every `writeln!` is one line: control characters
/// inside it (from a path, a server's error text, an agent's message) are escaped, so none can
/// forge a line or reach a terminal as an escape sequence.
pub(crate) struct OneLineWriter<'a> {
    out: &'a mut dyn Write,
}

impl<'a> OneLineWriter<'a> {
    pub(crate) fn new(out: &'a mut dyn Write) -> OneLineWriter<'a> {
        OneLineWriter { out }
    }

    /// What `writeln!` calls: the formatted line, escaped, then its newline.
    pub(crate) fn write_fmt(&mut self, args: std::fmt::Arguments<'_>) -> io::Result<()> {
        let text = args.to_string();
        let (line, end) = match text.strip_suffix('\n') {
            Some(line) => (line, "\n"),
            None => (text.as_str(), ""),
        };
        self.out.write_all(escape(line).as_bytes())?;
        self.out.write_all(end.as_bytes())
    }

    /// Lines another `OneLineWriter` already wrote (escaped), as they are.
    pub(crate) fn write_raw(&mut self, lines: &[u8]) -> io::Result<()> {
        self.out.write_all(lines)
    }
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if c.is_control() => out.extend(c.escape_unicode()),
        c => out.push(c),
    }
}

/// One formatted text record with its control characters escaped, except the final newline
/// and, when `ansi` is on, the escape character that starts the formatter's own colours.
fn escape_record(buf: &[u8], ansi: bool) -> Option<Vec<u8>> {
    let body = buf.strip_suffix(b"\n").unwrap_or(buf);
    let needs = body
        .iter()
        .any(|&b| (b < 0x20 && !(ansi && b == 0x1b)) || b == 0x7f);
    if !needs {
        return None;
    }
    let text = String::from_utf8_lossy(body);
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if ansi && c == '\u{1b}' {
            out.push(c);
        } else {
            push_escaped(&mut out, c);
        }
    }
    out.push('\n');
    Some(out.into_bytes())
}

/// Where a writer's records go.
#[derive(Clone, Copy)]
enum Sink {
    Stderr,
    File,
    /// Stderr and the file, one record formatted once for both (where both would be formatted
    /// alike: no colours on stderr).
    Both,
}

/// Writes each record to stderr or the attached log file, never failing, and (for the text
/// format) with control characters inside the record escaped. The formatter hands over each
/// record whole in a single `write_all`, so a call is one record.
#[derive(Clone, Copy)]
struct RecordWriter {
    sink: Sink,
    escape: bool,
    ansi: bool,
}

impl RecordWriter {
    fn put(&self, bytes: &[u8]) {
        match self.sink {
            // A closed or broken stderr (the spawner's closed pipe) is ignored: the log file
            // still has the record.
            Sink::Stderr => {
                let _ = io::stderr().lock().write_all(bytes);
            }
            Sink::File => {
                if let Ok(mut slot) = log_file().lock()
                    && let Some(f) = slot.as_mut()
                {
                    // A failing log file must not take the watcher down.
                    f.write(bytes);
                }
            }
            Sink::Both => {
                RecordWriter {
                    sink: Sink::Stderr,
                    ..*self
                }
                .put(bytes);
                RecordWriter {
                    sink: Sink::File,
                    ..*self
                }
                .put(bytes);
            }
        }
    }
}

impl Write for RecordWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.escape.then(|| escape_record(buf, self.ansi)).flatten() {
            Some(escaped) => self.put(&escaped),
            None => self.put(buf),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for RecordWriter {
    type Writer = RecordWriter;

    fn make_writer(&'a self) -> Self::Writer {
        *self
    }

    /// A record meant for the file alone goes only there from a writer for both.
    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        match self.sink {
            Sink::Both if meta.target() == FILE_ONLY_TARGET => RecordWriter {
                sink: Sink::File,
                ..*self
            },
            _ => *self,
        }
    }
}

/// Installs the global subscriber. `filter` uses `tracing` env-filter syntax (already
/// validated by the configuration module).
pub fn init(filter: &str, format: LogFormat) {
    let filter = || EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let not_file_only = || filter_fn(|meta| meta.target() != FILE_ONLY_TARGET);
    let ansi = io::stderr().is_terminal();
    let text = format == LogFormat::Text;
    let stderr = RecordWriter {
        sink: Sink::Stderr,
        escape: text,
        ansi,
    };
    let file = RecordWriter {
        sink: Sink::File,
        escape: text,
        ansi: false,
    };
    let registry = tracing_subscriber::registry();
    // Without colours on stderr both destinations take the same text: one layer formats each
    // record once and writes it to both (formatting it twice was a tenth of the instructions
    // a followed line cost). With colours on a terminal, each has its own layer.
    let both = RecordWriter {
        sink: Sink::Both,
        escape: text,
        ansi: false,
    };
    let result = match (format, ansi) {
        (LogFormat::Text, false) => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(both)
                    .with_ansi(false)
                    .with_target(false)
                    .log_internal_errors(false)
                    .with_filter(filter()),
            )
            .try_init(),
        // JSON records have no colours: one layer whatever stderr is.
        (LogFormat::Json, _) => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(both)
                    .with_target(false)
                    .log_internal_errors(false)
                    .with_filter(filter()),
            )
            .try_init(),
        (LogFormat::Text, true) => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(stderr)
                    .with_ansi(ansi)
                    .with_target(false)
                    .log_internal_errors(false)
                    .with_filter(filter().and(not_file_only())),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(file)
                    .with_ansi(false)
                    .with_target(false)
                    .log_internal_errors(false)
                    .with_filter(filter()),
            )
            .try_init(),
    };
    // Already installed (tests running several commands in one process): keep the first.
    let _ = result;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newline_inside_a_record_cannot_start_another() {
        let record = b"2026-01-01T00:00:00Z  INFO seeded path=/tmp/a\n2026 ERROR forged\n";
        let escaped = escape_record(record, false).expect("escaped");
        let text = String::from_utf8(escaped).unwrap();
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        assert!(text.ends_with("forged\n"));
        assert!(text.contains("path=/tmp/a\\n2026 ERROR"));
    }

    #[test]
    fn clean_records_are_written_as_they_are() {
        assert_eq!(escape_record(b"plain record\n", false), None);
        // The formatter's own colours survive on a terminal.
        assert_eq!(escape_record(b"\x1b[32mINFO\x1b[0m x\n", true), None);
        assert!(escape_record(b"\x1b[32mINFO\x1b[0m x\n", false).is_some());
    }

    #[test]
    fn a_log_file_past_its_cap_is_rotated_keeping_one_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/d.log");
        let file = crate::files::open_log_file(&path).unwrap();
        let mut capped = CappedFile {
            file,
            path: path.clone(),
            len: LOG_CAP - 10,
        };
        capped.write(b"0123456789abcdef\n");
        capped.write(b"second\n");
        assert_eq!(std::fs::read(&path).unwrap(), b"0123456789abcdef\nsecond\n");
        let rotated = dir.path().join("logs/d.log.1");
        assert!(rotated.exists());
        capped.len = LOG_CAP;
        capped.write(b"third\n");
        assert_eq!(std::fs::read(&path).unwrap(), b"third\n");
        assert_eq!(
            std::fs::read(&rotated).unwrap(),
            b"0123456789abcdef\nsecond\n",
            "one rotated file, the previous one replaced"
        );
    }

    #[test]
    fn escape_names_control_characters() {
        assert_eq!(escape("a\nb\rc\u{1b}"), "a\\nb\\rc\\u{1b}");
        assert_eq!(escape("plain-id_1"), "plain-id_1");
    }
}
