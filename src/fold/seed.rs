//! The start-up pass: fold every complete line already on disk, in one streaming read.
//!
//! A restarted watcher must decide exactly as one that never stopped, so it folds the whole
//! prefix (not a window) before it follows the file. The same pass records checkpoints of line
//! starts, so shipping can start at the resume line without a second scan.
//!
//! A large prefix is classified on two threads (docs/performance.md, "Seeding on two cores"):
//! a helper classifies the lines of the second half while this thread classifies and folds the
//! first, then this thread folds the helper's lines in order. Folding stays on one thread, in
//! file order, so the state is the one a single pass gives; the helper only saves the
//! classification, which is nearly all of the cost. What the helper may hold is bounded
//! ([`HELD_BYTES`]): where it stops, this thread reads on alone.

use std::io;

use super::packed::Packed;
use super::{Observed, State};
use crate::codex::Classifier;
use crate::codex::lines::LineCursor;
use crate::tail::index::LineIndex;
use crate::tail::reader::{ReadAt, SizeLimit};
use crate::time::Ts;

/// Lines per read: enough to amortise the call, few enough to bound the lines held.
const LINES_PER_READ: usize = 4096;

/// A prefix this large is classified on two threads; a smaller one costs less than a thread
/// is worth (about 10 ms of classification at this size).
const TWO_THREADS_FROM: u64 = 32 << 20;

/// At most this much memory is held in the helper's classified lines (packed: what their
/// fields captured and a dozen bytes more), whatever the file: a rollout of tiny lines cannot
/// make the helper hold millions. The generated 500 MB rollout's second half packs into
/// about 8 MiB.
const HELD_BYTES: usize = 16 << 20;

/// How far past the middle a line end is looked for; a line longer than this there leaves the
/// whole prefix to one thread.
const SPLIT_SEARCH: u64 = 8 << 20;

/// How seeded lines get their observation time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineTimes {
    /// Every line was observed at this time (the file's modification time, never after now).
    All(Ts),
    /// Each line at its own `timestamp`; a line without one takes the previous line's time,
    /// the first line `fallback` (`inspect --line-times`, for reproducible decisions).
    Own { fallback: Ts },
}

impl LineTimes {
    fn classifier(self) -> Classifier {
        match self {
            LineTimes::All(_) => Classifier::without_timestamps(),
            LineTimes::Own { .. } => Classifier::new(),
        }
    }
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
/// oversize lines). `on_disk` is the file's size as the caller saw it: where the work may be
/// split between two threads. Lines written after it are folded too.
pub fn seed<R: ReadAt + Sync + ?Sized>(
    file: &R,
    on_disk: u64,
    times: LineTimes,
    limit: SizeLimit,
) -> io::Result<Seeded> {
    // Asked only where it matters: on Linux the answer reads the process's cgroup files.
    let cores = if on_disk >= TWO_THREADS_FROM {
        std::thread::available_parallelism().map_or(1, usize::from)
    } else {
        1
    };
    seed_split(
        file,
        split_for(file, on_disk, cores),
        times,
        limit,
        HELD_BYTES,
    )
}

/// Where a helper takes over, for a file of `on_disk` bytes on a machine of `cores`: the start
/// of the first line past the middle, up to `on_disk`; `None` for one thread.
fn split_for<R: ReadAt + ?Sized>(file: &R, on_disk: u64, cores: usize) -> Option<(u64, u64)> {
    if on_disk < TWO_THREADS_FROM || cores < 2 {
        return None;
    }
    line_start_after(file, on_disk / 2, on_disk).map(|at| (at, on_disk))
}

/// [`seed`], with the helper given the lines starting in `[start, end)` of `split` (`start`
/// must be a line start) and holding at most `held_bytes`.
fn seed_split<R: ReadAt + Sync + ?Sized>(
    file: &R,
    split: Option<(u64, u64)>,
    times: LineTimes,
    limit: SizeLimit,
    held_bytes: usize,
) -> io::Result<Seeded> {
    let mut folding = Folding::new(times);
    let Some((start, end)) = split else {
        let mut cursor = LineCursor::fold(0, 0, limit, times.classifier());
        folding.through_end(file, &mut cursor)?;
        return Ok(folding.done(cursor));
    };
    let (first, helped) = std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name("kcap-seed".into())
            .spawn_scoped(scope, || {
                classify_part(&Part { file, end }, start, times, limit, held_bytes)
            });
        // The first part, up to the split, read as if the file ended there.
        let mut cursor = LineCursor::fold(0, 0, limit, times.classifier());
        let first = folding
            .through_end(&Part { file, end: start }, &mut cursor)
            .map(|()| cursor);
        // A helper that could not start, failed to read or panicked leaves its part to this
        // thread: nothing of it was folded yet.
        let helped = helper.ok().and_then(|h| h.join().ok()).and_then(Result::ok);
        (first, helped)
    });
    let first = first?;
    let (mut offset, mut number) = (first.line_start(), first.next_number());
    // The helper's lines follow on only where the first part ended on the split: a file
    // rewritten under the pass may have moved its line ends (the follow-up check sees that).
    if let Some(part) = helped.filter(|_| offset == start && first.partial_bytes() == 0) {
        let mut line_start = start;
        part.lines.for_each(|raw_len, blank, oversize, info| {
            let observed = info.map(|info| Observed {
                number,
                raw_len,
                blank,
                oversize,
                info,
            });
            folding.line(number, line_start, observed);
            number += 1;
            line_start += raw_len;
        });
        offset = part.stop;
    }
    let mut cursor = LineCursor::fold(offset, number, limit, times.classifier());
    folding.through_end(file, &mut cursor)?;
    Ok(folding.done(cursor))
}

/// The fold of the pass, line by line in file order.
struct Folding {
    times: LineTimes,
    state: State,
    index: LineIndex,
    last_time: Ts,
}

impl Folding {
    fn new(times: LineTimes) -> Folding {
        Folding {
            times,
            state: State::new(),
            index: LineIndex::new(),
            last_time: match times {
                LineTimes::All(t) => t,
                LineTimes::Own { fallback } => fallback,
            },
        }
    }

    /// Folds line `number`, which starts at `start` (`None`: the line was not classified).
    fn line(&mut self, number: u64, start: u64, observed: Option<Observed<'_>>) {
        self.index.record(number, start);
        let Some(observed) = observed else {
            return;
        };
        if let LineTimes::Own { .. } = self.times
            && let Some(ts) = observed.info.timestamp.filter(|_| !observed.blank)
        {
            self.last_time = ts;
        }
        self.state.apply(observed, self.last_time);
    }

    /// Folds the lines of `file` from the cursor to the end of the file.
    fn through_end<R: ReadAt + ?Sized>(
        &mut self,
        file: &R,
        cursor: &mut LineCursor,
    ) -> io::Result<()> {
        loop {
            let status = cursor.read_each(file, LINES_PER_READ, |line| {
                self.line(line.number, line.start, line.observed());
            })?;
            if status.at_eof {
                return Ok(());
            }
        }
    }

    fn done(self, cursor: LineCursor) -> Seeded {
        Seeded {
            state: self.state,
            cursor,
            index: self.index,
        }
    }
}

/// The helper's classified lines, in order from where it started.
struct Classified {
    lines: Packed,
    /// Where the lines it holds end: the next line's start.
    stop: u64,
}

/// Classifies the complete lines of `file` from `start`, until its end or until they hold
/// `held_bytes` (the line that reaches it is the last kept; the rest of its read is dropped,
/// left to the pass).
fn classify_part<R: ReadAt + ?Sized>(
    file: &R,
    start: u64,
    times: LineTimes,
    limit: SizeLimit,
    held_bytes: usize,
) -> io::Result<Classified> {
    let mut cursor = LineCursor::fold(start, 0, limit, times.classifier());
    let mut lines = Packed::new();
    let mut stop = None;
    loop {
        let status = cursor.read_each(file, LINES_PER_READ, |line| {
            if lines.held_bytes() >= held_bytes {
                stop.get_or_insert(line.start);
                return;
            }
            lines.push(
                line.raw_len(),
                line.blank,
                line.oversize,
                line.info.as_ref(),
            );
        })?;
        if status.at_eof || lines.held_bytes() >= held_bytes {
            break;
        }
    }
    Ok(Classified {
        stop: stop.unwrap_or_else(|| cursor.line_start()),
        lines,
    })
}

/// A file read as if it ended at `end`.
struct Part<'a, R: ?Sized> {
    file: &'a R,
    end: u64,
}

impl<R: ReadAt + ?Sized> ReadAt for Part<'_, R> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let Some(left) = self.end.checked_sub(offset).filter(|&l| l > 0) else {
            return Ok(0);
        };
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        self.file.read_at(&mut buf[..n], offset)
    }
}

/// The start of the first line that begins after `from` (just after a `\n` at or after it),
/// when there is one before `end` within [`SPLIT_SEARCH`] bytes.
fn line_start_after<R: ReadAt + ?Sized>(file: &R, from: u64, end: u64) -> Option<u64> {
    let mut buf = vec![0; 64 * 1024];
    let mut at = from;
    while at < end && at - from < SPLIT_SEARCH {
        let n = match file.read_at(&mut buf, at) {
            Ok(0) | Err(_) => return None,
            Ok(n) => n,
        };
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            let start = at + i as u64 + 1;
            return (start < end).then_some(start);
        }
        at += n as u64;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIMIT: SizeLimit = SizeLimit::bytes(65_536);
    const AT: Ts = Ts(1_785_254_400_000);

    /// Every line of the Codex fixtures, and lines no fixture has: blank, malformed, CRLF,
    /// oversize, a BOM where only line 0 may have one.
    fn corpus() -> Vec<Vec<u8>> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/codex");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        let mut lines: Vec<Vec<u8>> = names
            .iter()
            .flat_map(|p| {
                let text = std::fs::read(p).unwrap();
                text.split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect();
        lines.extend([
            b"".to_vec(),
            b"   \t".to_vec(),
            b"{not json".to_vec(),
            b"{\"type\":\"event_msg\",\"payload\":{\"type\":\"task_started\",\"turn_id\":\"t9\"}}\r"
                .to_vec(),
            b"\xEF\xBB\xBF{\"type\":\"event_msg\"}".to_vec(),
            format!(
                "{{\"type\":\"response_item\",\"payload\":{{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"{}\"}}}}",
                "x".repeat(70_000)
            )
            .into_bytes(),
        ]);
        lines
    }

    /// The file of `picks` (indexes into `corpus`), each line ended, then `tail` bytes of one
    /// more line unended; and the offset where each line starts.
    fn file_of(corpus: &[Vec<u8>], picks: &[usize], tail: usize) -> (Vec<u8>, Vec<u64>) {
        let mut file = Vec::new();
        let mut starts = Vec::new();
        for &i in picks {
            starts.push(file.len() as u64);
            file.extend_from_slice(&corpus[i % corpus.len()]);
            file.push(b'\n');
        }
        let last = &corpus[picks.first().copied().unwrap_or(0) % corpus.len()];
        file.extend_from_slice(&last[..tail.min(last.len())]);
        (file, starts)
    }

    /// What a seeded pass leaves: the state, the index, where the cursor stands, and the lines
    /// it reads next once `more` is appended (its held partial line, classified whole).
    fn outcome(seeded: Seeded, file: &[u8], more: &[u8]) -> impl PartialEq + std::fmt::Debug {
        let Seeded {
            state,
            mut cursor,
            index,
        } = seeded;
        let place = (
            cursor.offset(),
            cursor.line_start(),
            cursor.next_number(),
            cursor.partial_bytes(),
        );
        let grown = [file, more].concat();
        let (next, _) = cursor.read(&grown[..], usize::MAX).unwrap();
        (state, index, place, next)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Two threads fold exactly what one does, wherever the helper starts and wherever its
        /// memory bound stops it, with line times from the lines or the file.
        #[test]
        fn two_threads_fold_what_one_does(
            picks in proptest::collection::vec(0usize..1000, 1..120),
            split_at in 0usize..1000,
            tail in 0usize..200,
            held in prop_oneof![0usize..4096, Just(usize::MAX)],
            own_times in any::<bool>(),
        ) {
            let corpus = corpus();
            let (file, starts) = file_of(&corpus, &picks, tail);
            let start = starts[split_at % starts.len()];
            let end = file.len() as u64;
            let times = if own_times { LineTimes::Own { fallback: AT } } else { LineTimes::All(AT) };
            let one = seed_split(&file[..], None, times, LIMIT, held).unwrap();
            let two = seed_split(&file[..], Some((start, end)), times, LIMIT, held).unwrap();
            let more = b"\"}}\n{\"type\":\"event_msg\",\"payload\":{\"type\":\"task_complete\"}}\n";
            prop_assert_eq!(outcome(one, &file, more), outcome(two, &file, more));
        }
    }

    /// A split that is not a line start (the file's line ends moved under the pass) leaves the
    /// helper's work unused: the helper's first "line" would be the end of another.
    #[test]
    fn a_split_inside_a_line_falls_back_to_one_pass() {
        let corpus = corpus();
        let picks: Vec<usize> = (0..corpus.len()).collect();
        let (file, starts) = file_of(&corpus, &picks, 0);
        let inside = starts[starts.len() / 2] + 5;
        let end = file.len() as u64;
        let one = seed_split(&file[..], None, LineTimes::All(AT), LIMIT, usize::MAX).unwrap();
        let two = seed_split(
            &file[..],
            Some((inside, end)),
            LineTimes::All(AT),
            LIMIT,
            usize::MAX,
        )
        .unwrap();
        assert_eq!(two.state.counters.lines, starts.len() as u64);
        assert_eq!(outcome(one, &file, b""), outcome(two, &file, b""));
    }

    /// A file whose reads fail once where the helper starts: the helper gives up and this
    /// thread reads its part, with nothing lost or folded twice.
    #[test]
    fn a_helper_that_cannot_read_leaves_its_part_to_the_pass() {
        struct FailOnce<'a> {
            bytes: &'a [u8],
            at: u64,
            failed: std::sync::atomic::AtomicBool,
        }
        impl ReadAt for FailOnce<'_> {
            fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
                use std::sync::atomic::Ordering;
                if offset == self.at && !self.failed.swap(true, Ordering::SeqCst) {
                    return Err(io::Error::other("injected"));
                }
                self.bytes.read_at(buf, offset)
            }
        }
        let corpus = corpus();
        let picks: Vec<usize> = (0..corpus.len()).collect();
        let (file, starts) = file_of(&corpus, &picks, 0);
        let start = starts[starts.len() / 2];
        let flaky = FailOnce {
            bytes: &file,
            at: start,
            failed: false.into(),
        };
        let end = file.len() as u64;
        let one = seed_split(&file[..], None, LineTimes::All(AT), LIMIT, usize::MAX).unwrap();
        let two = seed_split(
            &flaky,
            Some((start, end)),
            LineTimes::All(AT),
            LIMIT,
            usize::MAX,
        )
        .unwrap();
        assert!(flaky.failed.into_inner(), "the helper met the failure");
        assert_eq!(outcome(one, &file, b""), outcome(two, &file, b""));
    }

    /// The helper holds what its bound allows and not a chunk more, however many lines one
    /// read brings: the lines past it are left to the pass.
    #[test]
    fn the_helper_holds_no_more_than_its_bound() {
        let line = b"{\"type\":\"event_msg\",\"payload\":{\"type\":\"agent_message\",\"message\":\"hi\"}}\n";
        let file = line.repeat(200_000);
        for bound in [0, 1, 3 << 20] {
            let part = classify_part(&file[..], 0, LineTimes::All(AT), LIMIT, bound).unwrap();
            let held = part.lines.held_bytes();
            assert!(
                held <= bound + 64 * 1024 + 1024,
                "{held} held for a bound of {bound}"
            );
            assert!(
                held >= bound,
                "{held} held for a bound of {bound}: it stopped early"
            );
            assert!(part.lines.lines() < 200_000, "it stopped before the end");
            assert_eq!(
                part.stop,
                part.lines.lines() * line.len() as u64,
                "stops where its lines end"
            );
        }
    }

    /// Two threads for a large file on two cores or more; one for a small file or one core.
    #[test]
    fn a_large_prefix_on_two_cores_is_split_at_a_line_past_the_middle() {
        let line = [vec![b'x'; 999], b"\n".to_vec()].concat();
        let file = line.repeat(TWO_THREADS_FROM as usize / 1000 + 1);
        let size = file.len() as u64;
        let middle = (size / 2).div_ceil(1000) * 1000;
        assert_eq!(split_for(&file[..], size, 2), Some((middle, size)));
        assert_eq!(split_for(&file[..], size, 1), None);
        let small = &file[..TWO_THREADS_FROM as usize - 1000];
        assert_eq!(split_for(small, small.len() as u64, 8), None);
    }

    /// The split is the start of a line past the middle, and no split is made where no line
    /// ends near it.
    #[test]
    fn the_split_is_a_line_start_after_the_middle() {
        let file = b"aaaa\nbbbbbbbb\ncc\n";
        assert_eq!(line_start_after(&file[..], 6, 17), Some(14));
        assert_eq!(line_start_after(&file[..], 4, 17), Some(5));
        assert_eq!(
            line_start_after(&file[..], 15, 17),
            None,
            "the last line's end is no split"
        );
        let long = [vec![b'x'; SPLIT_SEARCH as usize + 10], b"\nz\n".to_vec()].concat();
        assert_eq!(line_start_after(&long[..], 0, long.len() as u64), None);
    }
}
