//! Sparse checkpoints of line starts, so shipping can start at any line without a rescan.
//!
//! The watermark may arrive after seeding (the server can be down at start), and may later
//! move backwards (a server that lost its last batches). Either way the shipping cursor must
//! start at a given line number: the nearest checkpoint at or before it is a bounded re-read
//! away. A checkpoint is kept every [`EVERY_LINES`] lines or [`EVERY_BYTES`] bytes, so the
//! index stays small whatever the file (a million blank lines, a 200 MB line).

/// Keep a checkpoint at least every this many lines...
pub(crate) const EVERY_LINES: u64 = 1024;
/// ...and at least every this many bytes.
pub(crate) const EVERY_BYTES: u64 = 16 * 1024 * 1024;

/// Line number → byte offset of its first byte, sparsely.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineIndex {
    points: Vec<(u64, u64)>,
}

impl Default for LineIndex {
    fn default() -> Self {
        LineIndex::new()
    }
}

impl LineIndex {
    pub(crate) fn new() -> LineIndex {
        LineIndex {
            points: vec![(0, 0)],
        }
    }

    /// Records that line `number` starts at `start` (lines are recorded in order).
    pub(crate) fn record(&mut self, number: u64, start: u64) {
        let Some(&(last_n, last_off)) = self.points.last() else {
            self.points.push((number, start));
            return;
        };
        if number > last_n && (number - last_n >= EVERY_LINES || start - last_off >= EVERY_BYTES) {
            self.points.push((number, start));
        }
    }

    /// The nearest checkpoint at or before line `number`: `(line, offset)`.
    pub(crate) fn locate(&self, number: u64) -> (u64, u64) {
        let i = self.points.partition_point(|&(n, _)| n <= number);
        self.points[i.saturating_sub(1)]
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.points.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_the_nearest_checkpoint_at_or_before() {
        let mut idx = LineIndex::new();
        for n in 0..5000u64 {
            idx.record(n, n * 10);
        }
        assert_eq!(idx.locate(0), (0, 0));
        assert_eq!(idx.locate(1023), (0, 0));
        assert_eq!(idx.locate(1024), (1024, 10240));
        assert_eq!(idx.locate(4999), (4096, 40960));
        assert!(idx.len() <= 6);
    }

    #[test]
    fn huge_lines_get_checkpoints_by_bytes() {
        let mut idx = LineIndex::new();
        for n in 0..10u64 {
            idx.record(n, n * EVERY_BYTES);
        }
        assert_eq!(idx.locate(7), (7, 7 * EVERY_BYTES));
    }
}
