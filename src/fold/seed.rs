//! The start-up pass: fold every complete line already on disk, in one streaming read.
//!
//! A restarted watcher must decide exactly as one that never stopped, so it folds the whole
//! prefix (not a window) before it follows the file. The same pass records checkpoints of line
//! starts, so shipping can start at the resume line without a second scan.

use std::io;

use super::State;
use crate::codex::Classifier;
use crate::codex::lines::LineCursor;
use crate::tail::index::LineIndex;
use crate::tail::reader::{ReadAt, SizeLimit};
use crate::time::Ts;

/// Lines per read: enough to amortise the call, few enough to bound the lines held.
const LINES_PER_READ: usize = 4096;

/// How seeded lines get their observation time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineTimes {
    /// Every line was observed at this time (the file's modification time, never after now).
    All(Ts),
    /// Each line at its own `timestamp`; a line without one takes the previous line's time,
    /// the first line `fallback` (`inspect --line-times`, for reproducible decisions).
    Own { fallback: Ts },
}

/// The outcome of the seeding pass.
#[derive(Debug)]
pub struct Seeded {
    pub state: State,
    /// The fold cursor, positioned after the last complete line (holding any partial tail and
    /// its classifier state), ready to follow the file.
    pub cursor: LineCursor,
    /// Checkpoints of line starts, to start shipping at any line later.
    pub index: LineIndex,
}

/// Folds every complete line of `file` into a fresh state, recording line checkpoints so
/// shipping can start at any line later; `limit` is the shipping size limit (the fold counts
/// oversize lines).
pub fn seed<R: ReadAt + ?Sized>(
    file: &R,
    times: LineTimes,
    limit: SizeLimit,
) -> io::Result<Seeded> {
    let mut state = State::new();
    let classifier = match times {
        LineTimes::All(_) => Classifier::without_timestamps(),
        LineTimes::Own { .. } => Classifier::new(),
    };
    let mut cursor = LineCursor::fold(0, 0, limit, classifier);
    let mut index = LineIndex::new();
    let mut last_time = match times {
        LineTimes::All(t) => t,
        LineTimes::Own { fallback } => fallback,
    };
    loop {
        let status = cursor.read_each(file, LINES_PER_READ, |line| {
            index.record(line.number, line.start);
            let Some(observed) = line.observed() else {
                return;
            };
            if let LineTimes::Own { .. } = times
                && let Some(ts) = observed.info.timestamp.filter(|_| !line.blank)
            {
                last_time = ts;
            }
            state.apply(observed, last_time);
        })?;
        if status.at_eof {
            break;
        }
    }
    Ok(Seeded {
        state,
        cursor,
        index,
    })
}
