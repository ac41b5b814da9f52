//! Retained output: what capture has read from a process, per stream,
//! addressed by absolute byte offset since spawn, with its lock and its
//! wake-ups in one owner, [`RetainedOutput`]. No guard leaves this file:
//! callers say what they mean (append captured bytes, next frame for a
//! cursor, release what a reader was sent, wait for room) and the matching
//! wake-up happens here.
//!
//! The bytes of each stream live in a [`log::StreamLog`]: a bounded log on
//! disk ([`disk::RingFile`]) behind a bounded window of the newest bytes in
//! memory (the pure ring, `ring::StreamBuffer`), or the window alone.
//! This owner adds the lock, the wake-ups and the block-mode rules, all in
//! the "Block mode" section below; disk writes and reads happen outside
//! its lock.

pub mod carry;
pub mod dir;
pub mod disk;
pub mod input_log;
mod input_marks;
pub mod log;
pub mod record;
mod ring;
mod saved_times;
mod screen_feed;
mod screen_slot;
pub mod times;

use std::sync::{Arc, Mutex, MutexGuard};

use tether_protocol::{Overflow, StreamName, TermSize};
use tokio::sync::{watch, Notify};

use crate::screen::Screen;
use crate::sync::LockExt;
use log::{Read, StreamLog};
use record::Record;
pub use ring::Next;
use ring::ReaderId;
pub use screen_slot::SnapshotSlot;
use screen_slot::{PendingResize, ScreenFeed, MAX_PENDING_RESIZES};

thread_local! {
    /// The thread's buffer for reads of a disk log (see
    /// [`RetainedOutput::next`]); as large as the largest read it served.
    static DISK_READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// How far block-mode retention may grow once the program has exited: the
/// largest pipe Linux gives an unprivileged process (`pipe-max-size`).
const EXIT_SLACK: usize = 1 << 20;

/// Both output streams of one process (a PTY writes only `stdout`), the
/// lock around them, and the wake-ups of readers and of capture.
#[derive(Debug)]
pub struct RetainedOutput {
    overflow: Overflow,
    state: Mutex<Streams>,
    /// Changes whenever bytes are appended or capture completes.
    appended: watch::Sender<()>,
    /// Block mode: a capture waiting for room in a stream.
    room_freed: [Notify; 2],
    /// The process record beside the disk logs, for a restart.
    record: Option<Record>,
    /// A PTY's terminal emulator, fed from the retained stdout by the
    /// screen worker (`screen_feed.rs`), under its own lock.
    screen: Option<ScreenFeed>,
    /// Whether the time index holds an input log, read without the lock:
    /// every keystroke asks (`input_marks.rs`), and most processes record
    /// none. Set only where the index's log is (`input_marks.rs`).
    records_input: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct Streams {
    buffers: [StreamLog; 2],
    next_reader: ReaderId,
    /// Resizes the emulator has not reached yet, oldest first, each at the
    /// stdout offset where it happened (at most `MAX_PENDING_RESIZES`).
    resizes: std::collections::VecDeque<PendingResize>,
    /// When each stream's bytes were written, and a PTY's sizes
    /// (`times.rs`).
    times: times::TimeIndex,
}

/// The plain-text screen of a PTY and the offset it corresponds to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreenText {
    /// Stdout offset the text reflects.
    pub offset: u64,
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
    /// One line per row.
    pub text: String,
    /// Bytes before `offset` were skipped (see `Screen::is_stale`).
    pub stale: bool,
}

/// One reader's progress through one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Next offset to send.
    pub next: u64,
    /// Data bytes sent (credit counts these, never `dropped` notices).
    pub sent: u64,
}

impl Cursor {
    /// A cursor that starts at `offset` with nothing sent.
    pub fn at(offset: u64) -> Cursor {
        Cursor {
            next: offset,
            sent: 0,
        }
    }
}

impl RetainedOutput {
    /// Empty streams of `capacity` bytes each, in memory only.
    pub fn new(capacity: usize, overflow: Overflow) -> RetainedOutput {
        RetainedOutput::with_logs(
            [StreamLog::memory(capacity), StreamLog::memory(capacity)],
            overflow,
            None,
            None,
        )
    }

    /// Streams retained in these logs (stdout, stderr), with the process
    /// record kept beside them, if any, and a terminal emulator fed from
    /// stdout (a PTY process), if any.
    pub fn with_logs(
        logs: [StreamLog; 2],
        overflow: Overflow,
        record: Option<Record>,
        screen: Option<Screen>,
    ) -> RetainedOutput {
        RetainedOutput {
            overflow,
            state: Mutex::new(Streams {
                buffers: logs,
                next_reader: 0,
                resizes: std::collections::VecDeque::new(),
                times: Default::default(),
            }),
            appended: watch::Sender::new(()),
            room_freed: [Notify::new(), Notify::new()],
            records_input: std::sync::atomic::AtomicBool::new(false),
            record,
            screen: screen.map(ScreenFeed::new),
        }
    }

    /// Writes the process object to the record beside the disk logs at
    /// spawn, so a restarted server can list it.
    pub fn record(&self, info: &tether_protocol::ProcessInfo) {
        if let Some(record) = &self.record {
            record.write(info);
        }
    }

    /// Adds the process object at its exit to the record (see
    /// [`Record::append`]), with the time index beside it (`ID.times`), so
    /// that a restart's recording of it has its times.
    pub fn record_exit(&self, info: &tether_protocol::ProcessInfo) {
        if let Some(record) = &self.record {
            record.append(info);
            record.write_times(&self.times(times::TimeIndex::saved));
        }
    }

    /// The time index of an earlier run, read back (`ID.times`).
    pub fn restore_times(&self, saved: times::SavedTimes) {
        self.set_times(&mut self.lock(), times::TimeIndex::restored(saved));
    }

    /// Held for a few lines, never across an await. A panic while holding
    /// it would be a bug in a few lines of ring code; the data is still
    /// consistent enough to serve.
    fn lock(&self) -> MutexGuard<'_, Streams> {
        self.state.lock_or_recover()
    }

    /// The overflow mode.
    pub fn overflow(&self) -> Overflow {
        self.overflow
    }

    /// Capture's one entry: appends bytes read from `stream` and wakes the
    /// readers. Every captured byte passes here exactly once, in order, and
    /// the returned offset is that of `data[0]`. A PTY's terminal emulator
    /// is only told there is more: the screen worker feeds it from
    /// retention, off capture's path (`screen_feed.rs`).
    ///
    /// The disk write, if any, happens after the lock is released and
    /// after the readers are woken, in the caller's (capture's) task: a
    /// reader at the front reads the window meanwhile, so an echo never
    /// waits for the disk. Only a reader behind the window waiting for
    /// these very bytes to reach the file is woken again.
    pub fn append(self: &Arc<Self>, stream: StreamName, data: &[u8]) -> u64 {
        let (offset, write) = {
            let mut state = self.lock();
            let buffer = &mut state.buffers[stream.index()];
            let offset = buffer.end();
            let write = buffer.push(data);
            state.times.mark(stream.index(), offset, times::now_ms());
            (offset, write)
        };
        self.appended.send_replace(());
        if let Some(write) = write {
            let outcome = write.perform(data);
            let awaited = self.lock().buffers[stream.index()].written(&write, outcome);
            if awaited {
                self.appended.send_replace(());
            }
        }
        if stream == StreamName::Stdout && !data.is_empty() {
            self.screen_has_news(data.len());
        }
        offset
    }

    /// Why some output is not retained on disk (`disk full`, an IO error),
    /// if that is so: the first stream's reason.
    pub fn retention_error(&self) -> Option<String> {
        let state = self.lock();
        state
            .buffers
            .iter()
            .find_map(|b| b.fault().map(str::to_string))
    }

    /// Applies a terminal resize in order with the captured output: `apply`
    /// runs under the lock that [`RetainedOutput::append`] takes, and the
    /// resize is recorded at the stdout offset where it happened, so the
    /// emulator sees it between the bytes written before it and after it.
    pub fn resize_with<E>(
        self: &Arc<Self>,
        size: TermSize,
        apply: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        {
            let mut state = self.lock();
            apply()?;
            let offset = state.buffers[StreamName::Stdout.index()].end();
            state.times.sized(offset, size.cols(), size.rows());
            if self.screen.is_some() {
                let resize = PendingResize {
                    offset: state.buffers[StreamName::Stdout.index()].end(),
                    cols: size.cols(),
                    rows: size.rows(),
                };
                if state.resizes.len() >= MAX_PENDING_RESIZES {
                    state.resizes.pop_back();
                }
                state.resizes.push_back(resize);
            }
        }
        self.screen_has_news(0);
        Ok(())
    }

    /// A PTY's size at spawn, the first of its sizes.
    pub fn sized(&self, size: TermSize) {
        self.lock().times.sized(0, size.cols(), size.rows());
    }

    /// Reads the time index (`times.rs`) under the streams' lock.
    pub fn times<R>(&self, read: impl FnOnce(&times::TimeIndex) -> R) -> R {
        read(&self.lock().times)
    }

    /// When the oldest and the newest retained bytes were written (ms
    /// since the epoch; `TimeIndex::span`), for the process object.
    pub fn retained_times(&self) -> [Option<u64>; 2] {
        let state = self.lock();
        let ranges = state.buffers.each_ref().map(|b| (b.start(), b.end()));
        state.times.span(ranges)
    }

    /// Where each stream's output written from `ms` (since the epoch) on
    /// starts: the first time mark at or after it, else the stream's end.
    pub fn offsets_since(&self, ms: u64) -> [u64; 2] {
        let state = self.lock();
        StreamName::ALL.map(|stream| {
            let i = stream.index();
            state
                .times
                .offset_since(i, ms)
                .unwrap_or_else(|| state.buffers[i].end())
        })
    }

    /// Offset of the oldest retained byte of `stream`.
    pub fn retained_start(&self, stream: StreamName) -> u64 {
        self.lock().buffers[stream.index()].start()
    }

    /// Marks capture finished on both streams and returns their final
    /// totals; readers wake to find the end.
    pub fn complete(&self) -> [u64; 2] {
        let totals = {
            let mut state = self.lock();
            for buffer in &mut state.buffers {
                buffer.complete();
            }
            state.buffers.each_ref().map(StreamLog::end)
        };
        self.appended.send_replace(());
        totals
    }

    /// Capture is complete, so nothing will be appended again: each
    /// window gives back its spare allocation. Returns what both streams
    /// hold now, in memory and on disk, for the retention budget to count
    /// instead of what was reserved for a running process.
    pub fn settle(&self) -> (u64, u64) {
        let mut state = self.lock();
        let (memory, disk) = state
            .buffers
            .iter_mut()
            .map(StreamLog::settle)
            .fold((0, 0), |(m, d), (memory, disk)| (m + memory, d + disk));
        // The time index beside the logs (`ID.times`, written at the exit).
        let times = self.record.as_ref().map_or(0, Record::times_bytes);
        (memory, disk + times)
    }

    /// Frees the retained bytes of both streams now: their process is
    /// forgotten, and the retention budget counts them free. Readers still
    /// attached wake to find what they had not been sent reported as
    /// dropped, then the end; so no reader keeps the memory alive past the
    /// budget, and nothing is lost silently.
    pub fn discard(&self) {
        {
            let mut state = self.lock();
            for buffer in &mut state.buffers {
                buffer.discard();
            }
        }
        self.appended.send_replace(());
        self.wake_capture();
    }

    /// Bytes written to each stream since spawn (retained or not).
    pub fn totals(&self) -> [u64; 2] {
        self.lock().buffers.each_ref().map(StreamLog::end)
    }

    /// A receiver that changes whenever output is appended or complete.
    pub fn watch(&self) -> watch::Receiver<()> {
        self.appended.subscribe()
    }

    /// Registers a reader starting at these offsets. Block mode keeps bytes
    /// from there on until it has been sent them; the registration ends
    /// when the [`Reader`] is dropped.
    pub fn reader(self: &Arc<Self>, starts: [u64; 2]) -> Reader {
        let mut state = self.lock();
        self.register(&mut state, starts)
    }

    fn register(self: &Arc<Self>, state: &mut Streams, starts: [u64; 2]) -> Reader {
        let id = state.next_reader;
        state.next_reader += 1;
        for (buffer, start) in state.buffers.iter_mut().zip(starts) {
            buffer.register(id, start);
        }
        Reader {
            output: self.clone(),
            id,
        }
    }
}

// What the screen worker (`screen_feed.rs`) asks of the streams: only this
// file takes their lock.
impl RetainedOutput {
    /// Takes the resizes recorded at or before stdout offset `offset`,
    /// oldest first, and says at which offset the next one is, if any.
    fn resizes_due(&self, offset: u64) -> (Vec<PendingResize>, Option<u64>) {
        let mut state = self.lock();
        let due_count = state
            .resizes
            .iter()
            .take_while(|resize| resize.offset <= offset)
            .count();
        let due = state.resizes.drain(..due_count).collect();
        (due, state.resizes.front().map(|r| r.offset))
    }

    /// True when stdout has bytes past `offset` or a resize is recorded:
    /// the emulator at `offset` has work.
    fn screen_news_after(&self, offset: u64) -> bool {
        let state = self.lock();
        offset < state.buffers[StreamName::Stdout.index()].end() || !state.resizes.is_empty()
    }

    /// A reader of stdout from `offset` (of stderr from its end), or from
    /// the oldest retained byte if bytes from `offset` on have been
    /// evicted: registered under the lock that eviction takes, so the
    /// returned start is exact.
    fn reader_from_stdout(self: &Arc<Self>, offset: u64) -> (Reader, u64) {
        let mut state = self.lock();
        let start = offset.max(state.buffers[StreamName::Stdout.index()].start());
        let stderr = state.buffers[StreamName::Stderr.index()].end();
        (self.register(&mut state, [start, stderr]), start)
    }
}

/// A reader's registration with the retained output (an attachment). It
/// reads at its own cursors; dropping it unregisters, and a block-mode
/// capture waiting for room re-checks, since the slowest reader may be gone.
#[derive(Debug)]
pub struct Reader {
    output: Arc<RetainedOutput>,
    id: ReaderId,
}

impl Reader {
    /// The next thing to send from `stream` at `cursor`, at most `max` data
    /// bytes, which `encode` turns into a frame straight from the window
    /// (one copy), or from a read of the disk log made outside the lock;
    /// the frame comes back in [`Next::Data`]. `encode` is called at most
    /// once. Advances the cursor past what it returns.
    pub fn next<F>(
        &self,
        stream: StreamName,
        cursor: &mut Cursor,
        max: usize,
        encode: impl FnMut(u64, &[&[u8]]) -> F,
    ) -> Next<F> {
        let next = self.output.next(stream, cursor.next, max, encode);
        match &next {
            Next::Dropped { offset, length } => cursor.next = offset + length,
            Next::Data { offset, length, .. } => {
                cursor.next = offset + length;
                cursor.sent += length;
            }
            Next::Pending | Next::End => {}
        }
        next
    }
}

impl RetainedOutput {
    /// The next thing for a reader of `stream` at `cursor`: from memory
    /// under the lock, or from the file outside it and then checked, under
    /// the lock again, not to have been overwritten meanwhile (if it was,
    /// the bytes are gone and the next answer says `dropped`).
    fn next<F>(
        &self,
        stream: StreamName,
        cursor: u64,
        max: usize,
        mut encode: impl FnMut(u64, &[&[u8]]) -> F,
    ) -> Next<F> {
        // Each turn of the loop offers `encode` again, but only a turn that
        // returns calls it: once at most.
        loop {
            let read = self.lock().buffers[stream.index()].next(cursor, max, &mut encode);
            let (file, offset, length) = match read {
                Read::Ready(next) => return next,
                Read::Disk {
                    file,
                    offset,
                    length,
                } => (file, offset, length),
            };
            let read = DISK_READ_BUFFER.with_borrow_mut(|bytes| {
                // Grown once per thread and reused: no allocation, no
                // zeroing per read (a frame is up to 256 KiB).
                if bytes.len() < length as usize {
                    bytes.resize(length as usize, 0);
                }
                let bytes = &mut bytes[..length as usize];
                if let Err(e) = file.read(offset, bytes) {
                    // The rest of the file is reported as dropped in one
                    // range by the next answer: no reader loops over a
                    // broken file chunk by chunk.
                    self.lock().buffers[stream.index()].unreadable(offset, &e);
                    return None;
                }
                self.lock().buffers[stream.index()]
                    .still_on_disk(offset)
                    .then(|| Next::Data {
                        offset,
                        length,
                        frame: encode(offset, &[bytes]),
                    })
            });
            if let Some(next) = read {
                return next;
            }
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        {
            let mut state = self.output.lock();
            for buffer in &mut state.buffers {
                buffer.unregister(self.id);
            }
        }
        self.output.wake_capture();
    }
}

// Block mode: capture reads only into room that no reader still needs,
// readers release what they were sent (and, with a window, had credited),
// and after the reap each stream may grow by EXIT_SLACK to take the finite
// tail of the pipe. Retention is reserved at spawn for all of that.
impl RetainedOutput {
    /// Retention to reserve against `--retain-total` for a process with
    /// `streams` streams of `capacity` bytes: block mode may grow each by
    /// the exit slack once the program has exited, so the budget bounds
    /// real memory.
    pub fn reservation(capacity: usize, overflow: Overflow, streams: u64) -> u64 {
        let slack = match overflow {
            Overflow::Block => EXIT_SLACK as u64,
            Overflow::Drop => 0,
        };
        (capacity as u64 + slack) * streams
    }

    /// How many bytes capture may read into `stream` now: unbounded in drop
    /// mode; in block mode it waits until the slowest reader has been sent
    /// enough that there is room. Cancel-safe (nothing is taken).
    pub async fn room(&self, stream: StreamName) -> usize {
        if self.overflow != Overflow::Block {
            return usize::MAX;
        }
        loop {
            let notified = self.room_freed[stream.index()].notified();
            let room = self.lock().buffers[stream.index()].block_room();
            if room > 0 {
                return room;
            }
            notified.await;
        }
    }

    /// The program has been reaped: what is left in its pipe is finite, so
    /// a block-mode stream may grow by `EXIT_SLACK` (1 MiB) to take it without
    /// waiting for a reader (the drain bound still stops a descendant that
    /// writes on).
    pub fn reaped(&self, stream: StreamName) {
        if self.overflow == Overflow::Block {
            self.lock().buffers[stream.index()].grow(EXIT_SLACK);
            self.room_freed[stream.index()].notify_one();
        }
    }

    fn wake_capture(&self) {
        if self.overflow == Overflow::Block {
            for room in &self.room_freed {
                room.notify_one();
            }
        }
    }
}

impl Reader {
    /// Block mode: tells capture which bytes this reader no longer needs.
    /// With flow control (`credited` is the credit granted per stream),
    /// bytes sent but not yet acknowledged by credit stay, so a client that
    /// reconnects after a blip loses nothing.
    pub fn release(&self, cursors: &[Cursor; 2], credited: Option<[u64; 2]>) {
        if self.output.overflow != Overflow::Block {
            return;
        }
        {
            let mut state = self.output.lock();
            for stream in StreamName::ALL {
                let i = stream.index();
                let unacked = match credited {
                    Some(credited) => cursors[i].sent.saturating_sub(credited[i]),
                    None => 0,
                };
                state.buffers[i].advance(self.id, cursors[i].next.saturating_sub(unacked));
            }
        }
        self.output.wake_capture();
    }
}

#[cfg(test)]
mod tests;
