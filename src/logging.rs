//! Structured logs: stderr always, plus the watcher's log file once its key is known.
//!
//! Every acting decision is one record with a stable `event` field (`spec/lifecycle.md`
//! section 6); text by default, JSON with `KCAP_LOG_FORMAT=json`. Nothing is ever logged to
//! stdout, which carries only a command's own output (`inspect --json` can be piped).

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::LogFormat;

/// The log file, attached once the watcher knows its key (`<config>/logs/<key>.log`).
static LOG_FILE: OnceLock<Mutex<Option<File>>> = OnceLock::new();

fn log_file() -> &'static Mutex<Option<File>> {
    LOG_FILE.get_or_init(|| Mutex::new(None))
}

/// Starts appending log records to `path` as well as stderr (a failure only warns).
pub fn attach_file(path: &Path) {
    match open_private_append(path) {
        Ok(f) => {
            if let Ok(mut slot) = log_file().lock() {
                *slot = Some(f);
            }
        }
        Err(e) => tracing::warn!("failed to open log file {}: {e}", path.display()),
    }
}

/// Writes each record to the attached log file, if any.
#[derive(Clone, Copy)]
struct FileWriter;

impl Write for FileWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Ok(mut slot) = log_file().lock()
            && let Some(f) = slot.as_mut()
        {
            // A failing log file must not take the watcher down; stderr still has the record.
            let _ = f.write_all(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for FileWriter {
    type Writer = FileWriter;

    fn make_writer(&'a self) -> Self::Writer {
        *self
    }
}

/// Installs the global subscriber. `filter` uses `tracing` env-filter syntax (already
/// validated by the configuration module).
pub fn init(filter: &str, format: LogFormat) {
    let filter = || EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry();
    let result = match format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(io::stderr)
                    .with_ansi(io::stderr().is_terminal())
                    .with_target(false)
                    .with_filter(filter()),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(FileWriter)
                    .with_ansi(false)
                    .with_target(false)
                    .with_filter(filter()),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(io::stderr)
                    .with_target(false)
                    .with_filter(filter()),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(FileWriter)
                    .with_target(false)
                    .with_filter(filter()),
            )
            .try_init(),
    };
    // Already installed (tests running several commands in one process): keep the first.
    let _ = result;
}

use tracing_subscriber::Layer as _;

/// Opens `path` for appending, creating it (0600) and its directory (0700) when needed.
fn open_private_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}
