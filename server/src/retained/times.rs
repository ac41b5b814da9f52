//! When output was written: per stream, a sparse and bounded index from
//! offset to wall-clock time, and a PTY's sizes with the offsets where they
//! changed. What a recording (`http/recording.rs`) reads the timing from.
//!
//! A mark is taken at an append when [`TimeMarks::spacing_ms`] has passed
//! since the last one (10 ms at first), so a chatty program costs a mark
//! per 10 ms, not per read. The index holds at most [`MAX_MARKS`]: when
//! it is full every other mark is dropped and the spacing doubles, so it
//! always covers the whole stream, ever more coarsely (a day of constant
//! output keeps a mark every two minutes or so). A byte's time is that of
//! the last mark at or before it: at most one spacing early.

use std::collections::VecDeque;

use super::input_log::{InputLog, SavedInput};

/// Marks kept per stream (16 bytes each).
pub const MAX_MARKS: usize = 1024;

/// The first spacing between marks, in milliseconds.
const FIRST_SPACING_MS: u64 = 10;

/// Sizes kept per PTY (24 bytes each): past it the oldest change goes.
pub const MAX_SIZES: usize = 256;

/// What the index of one process may hold, counted in its retention
/// metadata: both streams' marks and the sizes.
pub const INDEX_BYTES: u64 = (2 * MAX_MARKS * 16 + MAX_SIZES * 24) as u64;

/// One stream's marks: `(offset, ms since the epoch)`, offsets and times
/// both non-decreasing.
#[derive(Debug)]
pub struct TimeMarks {
    marks: VecDeque<(u64, u64)>,
    spacing_ms: u64,
}

impl Default for TimeMarks {
    fn default() -> Self {
        TimeMarks {
            marks: VecDeque::new(),
            spacing_ms: FIRST_SPACING_MS,
        }
    }
}

impl TimeMarks {
    /// Bytes from `offset` on were written at `now_ms`.
    pub fn mark(&mut self, offset: u64, now_ms: u64) {
        if let Some(&(last_offset, last_ms)) = self.marks.back() {
            if offset == last_offset || now_ms < last_ms.saturating_add(self.spacing_ms) {
                return;
            }
        }
        if self.marks.len() >= MAX_MARKS {
            // Every other mark, the first kept: coverage stays whole.
            let mut keep = false;
            self.marks.retain(|_| {
                keep = !keep;
                keep
            });
            self.spacing_ms = self.spacing_ms.saturating_mul(2);
        }
        self.marks.push_back((offset, now_ms));
    }

    /// When the byte at `offset` was written, as far as the marks tell:
    /// the last mark at or before it (the first mark for an offset before
    /// every mark), or `None` with no mark at all.
    pub fn time_of(&self, offset: u64) -> Option<u64> {
        let after = self.marks.partition_point(|&(o, _)| o <= offset);
        let at = after.saturating_sub(1);
        self.marks.get(at).map(|&(_, ms)| ms)
    }

    /// The first mark after `offset`: where a chunk read from `offset`
    /// must be cut so that each part has its own time.
    pub fn next_after(&self, offset: u64) -> Option<u64> {
        let after = self.marks.partition_point(|&(o, _)| o <= offset);
        self.marks.get(after).map(|&(o, _)| o)
    }

    /// The offset of the first mark at or after `ms`: where output written
    /// from then on starts (at most one spacing late); `None` when every
    /// mark is older.
    pub fn offset_since(&self, ms: u64) -> Option<u64> {
        let at = self.marks.partition_point(|&(_, t)| t < ms);
        self.marks.get(at).map(|&(o, _)| o)
    }

    /// Every mark, oldest first: `(offset, ms since the epoch)`.
    pub fn all(&self) -> Vec<(u64, u64)> {
        self.marks.iter().copied().collect()
    }

    /// Marks read back (a restart): kept only if offsets and times never
    /// go back, at most [`MAX_MARKS`] (the newest).
    pub fn restored(marks: Vec<(u64, u64)>) -> TimeMarks {
        let ordered = marks
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1);
        let mut marks: VecDeque<(u64, u64)> = if ordered {
            marks.into()
        } else {
            VecDeque::new()
        };
        while marks.len() > MAX_MARKS {
            marks.pop_front();
        }
        TimeMarks {
            marks,
            spacing_ms: FIRST_SPACING_MS,
        }
    }

    /// The spacing marks are taken at now.
    pub fn spacing_ms(&self) -> u64 {
        self.spacing_ms
    }

    /// How many marks are kept.
    pub fn len(&self) -> usize {
        self.marks.len()
    }

    /// True with no mark yet.
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }
}

/// A PTY's size from a stdout offset on, and when it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeChange {
    pub offset: u64,
    pub at_ms: u64,
    pub cols: u16,
    pub rows: u16,
}

/// A PTY's sizes, oldest first, at most [`MAX_SIZES`].
#[derive(Debug, Default)]
pub struct Sizes {
    kept: VecDeque<SizeChange>,
    /// Changes ever pushed: the next one's number.
    pushed: u64,
}

impl Sizes {
    /// The size changed.
    pub fn push(&mut self, change: SizeChange) {
        if self.kept.len() >= MAX_SIZES {
            self.kept.pop_front();
        }
        self.kept.push_back(change);
        self.pushed += 1;
    }

    /// Every change kept, oldest first.
    pub fn all(&self) -> Vec<SizeChange> {
        self.kept.iter().copied().collect()
    }

    /// The changes kept from number `seen` on (those before it were read
    /// already), and the number of the next one.
    pub fn since(&self, seen: u64) -> (Vec<SizeChange>, u64) {
        let first = self.pushed - self.kept.len() as u64;
        let skip = seen.saturating_sub(first) as usize;
        (self.kept.iter().skip(skip).copied().collect(), self.pushed)
    }
}

/// The index as written beside the logs (`ID.times`, at the exit, with
/// `--data-dir`) and read back after a restart.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SavedTimes {
    pub stdout: Vec<(u64, u64)>,
    pub stderr: Vec<(u64, u64)>,
    /// `(offset, ms, cols, rows)`.
    pub sizes: Vec<(u64, u64, u16, u16)>,
    /// The input log of a process that records its input (absent in
    /// handover format 1, which had none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<SavedInput>,
}

/// The most bytes `ID.times` may take: both streams' marks and the sizes
/// as JSON numbers, with room to spare.
pub const MAX_SAVED_BYTES: u64 = 256 << 10;

/// Both streams' marks and a PTY's sizes: what `RetainedOutput` keeps
/// under its lock, and reads through `RetainedOutput::times`.
#[derive(Debug, Default)]
pub struct TimeIndex {
    streams: [TimeMarks; 2],
    sizes: Sizes,
    /// Only when the spawn asked for its input to be recorded.
    input: Option<InputLog>,
}

impl TimeIndex {
    /// Bytes of stream `stream` (its index) from `offset` on were written
    /// at `now_ms`.
    pub fn mark(&mut self, stream: usize, offset: u64, now_ms: u64) {
        if let Some(marks) = self.streams.get_mut(stream) {
            marks.mark(offset, now_ms);
        }
    }

    /// The PTY's size became `cols x rows` at stdout offset `offset`, now.
    pub fn sized(&mut self, offset: u64, cols: u16, rows: u16) {
        self.sizes.push(SizeChange {
            offset,
            at_ms: now_ms(),
            cols,
            rows,
        });
    }

    /// From now on, input is logged ([`TimeIndex::input`]).
    pub fn record_input(&mut self) {
        self.input.get_or_insert_with(InputLog::default);
    }

    /// True when this process's input is logged.
    pub fn records_input(&self) -> bool {
        self.input.is_some()
    }

    /// `bytes` were given to stdin when stdout had reached `offset`, at
    /// `at_ms`: logged if the process records its input.
    pub fn input(&mut self, offset: u64, at_ms: u64, bytes: &[u8]) {
        if let Some(log) = &mut self.input {
            log.push(offset, at_ms, bytes);
        }
    }

    /// The input log, if the process records its input.
    pub fn input_log(&self) -> Option<&InputLog> {
        self.input.as_ref()
    }

    /// See [`TimeMarks::time_of`].
    pub fn time_of(&self, stream: usize, offset: u64) -> Option<u64> {
        self.streams.get(stream)?.time_of(offset)
    }

    /// See [`TimeMarks::next_after`].
    pub fn next_after(&self, stream: usize, offset: u64) -> Option<u64> {
        self.streams.get(stream)?.next_after(offset)
    }

    /// See [`TimeMarks::offset_since`].
    pub fn offset_since(&self, stream: usize, ms: u64) -> Option<u64> {
        self.streams.get(stream)?.offset_since(ms)
    }

    /// When the first and the last bytes of `ranges` (each stream's
    /// retained `[start, end)`) were written, as far as the marks tell: the
    /// earliest and the latest over the streams that hold a byte, `None`
    /// without one or without a mark.
    pub fn span(&self, ranges: [(u64, u64); 2]) -> [Option<u64>; 2] {
        let (mut first, mut last) = (None::<u64>, None::<u64>);
        for (stream, (start, end)) in ranges.into_iter().enumerate() {
            if start >= end {
                continue;
            }
            if let Some(ms) = self.time_of(stream, start) {
                first = Some(first.map_or(ms, |f| f.min(ms)));
            }
            if let Some(ms) = self.time_of(stream, end - 1) {
                last = Some(last.map_or(ms, |l| l.max(ms)));
            }
        }
        [first, last]
    }

    /// Every mark of each stream, `[stdout, stderr]`.
    pub fn marks(&self) -> [Vec<(u64, u64)>; 2] {
        [self.streams[0].all(), self.streams[1].all()]
    }

    /// The sizes, oldest first.
    pub fn sizes(&self) -> Vec<SizeChange> {
        self.sizes.all()
    }

    /// See [`Sizes::since`].
    pub fn sizes_since(&self, seen: u64) -> (Vec<SizeChange>, u64) {
        self.sizes.since(seen)
    }

    /// The index as `ID.times` holds it.
    pub fn saved(&self) -> SavedTimes {
        let [stdout, stderr] = self.marks();
        SavedTimes {
            stdout,
            stderr,
            sizes: self
                .sizes
                .all()
                .iter()
                .map(|s| (s.offset, s.at_ms, s.cols, s.rows))
                .collect(),
            input: self.input.as_ref().map(InputLog::saved),
        }
    }

    /// The index of an earlier run, read back.
    pub fn restored(saved: SavedTimes) -> TimeIndex {
        let mut sizes = Sizes::default();
        for (offset, at_ms, cols, rows) in saved.sizes {
            sizes.push(SizeChange {
                offset,
                at_ms,
                cols,
                rows,
            });
        }
        TimeIndex {
            streams: [
                TimeMarks::restored(saved.stdout),
                TimeMarks::restored(saved.stderr),
            ],
            sizes,
            input: saved.input.map(InputLog::restored),
        }
    }
}

/// Milliseconds since the epoch now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_has_the_time_of_the_last_mark_at_or_before_it() {
        let mut marks = TimeMarks::default();
        assert_eq!(marks.time_of(5), None);
        marks.mark(0, 1_000);
        marks.mark(10, 1_005); // within the spacing: no mark
        marks.mark(20, 1_020);
        assert_eq!(marks.len(), 2);
        assert_eq!(marks.time_of(0), Some(1_000));
        assert_eq!(marks.time_of(19), Some(1_000));
        assert_eq!(marks.time_of(20), Some(1_020));
        assert_eq!(marks.time_of(1 << 40), Some(1_020));
    }

    #[test]
    fn a_full_index_thins_and_keeps_covering_the_whole_stream() {
        let mut marks = TimeMarks::default();
        for i in 0..100_000u64 {
            marks.mark(i * 100, i * 10);
        }
        assert!(marks.len() <= MAX_MARKS);
        assert!(marks.spacing_ms() > FIRST_SPACING_MS);
        // The first and a recent byte still have their times.
        assert_eq!(marks.time_of(0), Some(0));
        let last = 99_999 * 100;
        let late = marks.time_of(last).unwrap();
        assert!(99_999 * 10 - late <= marks.spacing_ms(), "{late}");
    }

    #[test]
    fn output_since_a_time_starts_at_the_first_mark_from_then() {
        let mut marks = TimeMarks::default();
        marks.mark(0, 1_000);
        marks.mark(50, 2_000);
        marks.mark(90, 3_000);
        assert_eq!(marks.offset_since(0), Some(0));
        assert_eq!(marks.offset_since(1_500), Some(50));
        assert_eq!(marks.offset_since(3_000), Some(90));
        assert_eq!(marks.offset_since(3_001), None);
    }

    #[test]
    fn the_span_is_the_first_and_last_retained_bytes_times_over_both_streams() {
        let mut index = TimeIndex::default();
        assert_eq!(index.span([(0, 10), (0, 0)]), [None, None]);
        index.mark(0, 0, 1_000);
        index.mark(0, 100, 2_000);
        index.mark(1, 0, 1_500);
        index.mark(1, 40, 3_000);
        // Both streams whole: stdout's first byte, stderr's last.
        assert_eq!(index.span([(0, 150), (0, 50)]), [Some(1_000), Some(3_000)]);
        // Stdout's first 100 bytes evicted, stderr empty: stdout alone.
        assert_eq!(index.span([(100, 150), (0, 0)]), [Some(2_000), Some(2_000)]);
        // Nothing retained.
        assert_eq!(index.span([(150, 150), (50, 50)]), [None, None]);
    }

    #[test]
    fn sizes_keep_the_newest() {
        let mut sizes = Sizes::default();
        for i in 0..(MAX_SIZES as u16 + 10) {
            sizes.push(SizeChange {
                offset: u64::from(i),
                at_ms: u64::from(i),
                cols: 80 + i,
                rows: 24,
            });
        }
        let all = sizes.all();
        assert_eq!(all.len(), MAX_SIZES);
        assert_eq!(all[0].offset, 10);
    }
}
