//! One stream's retention: a bounded log on disk ([`RingFile`]) behind a
//! bounded window of its newest bytes in memory (the pure ring,
//! `StreamBuffer`), both addressed by the same absolute offsets.
//!
//! Readers at the front are served from the window; a reader behind it
//! (late, resuming) is told to read the file ([`Read::Disk`]), which the
//! owner does outside its lock and then validates with
//! [`StreamLog::still_on_disk`]: bytes are overwritten only after the
//! retained start has been raised past them, so a read that is still above
//! the start afterwards read what it meant to.
//!
//! Capture appends with [`StreamLog::push`], which updates the window under
//! the lock and hands back the [`DiskWrite`] to perform outside it; its
//! outcome comes back through [`StreamLog::written`]. A transient log (the
//! private directory, which no restart reads) is written nothing until the
//! window first overflows: a stream that fits in its window never costs a
//! file, a `pwrite` per append or page-cache work, and the first overflow
//! writes what the window held with the new bytes (one copy of at most the
//! window, once per stream). A failed write (disk
//! full, an IO error) turns the stream memory-only from that byte on: what
//! is on disk stays readable, what later leaves the window is reported as
//! `dropped` with its exact range, and [`StreamLog::fault`] says why.
//!
//! Block mode keeps a floor per reader here (as the ring does for a
//! memory-only stream): capture may read only into room that no reader
//! still needs, where room is the log's capacity while the disk takes
//! writes, and the window's once it does not.

use std::collections::HashMap;
use std::sync::Arc;

use super::disk::{RingFile, WriteFault};

/// The header's start is raised ahead by up to a mebibyte (an eighth of
/// the ring if that is less) at a time, so a wrapped ring costs one header
/// write per step rather than one per append; a restart reads back up to a
/// step less.
const HEADER_START_STEP: u64 = 1 << 20;
use super::ring::{Next, ReaderId, StreamBuffer};

/// One output stream's retained bytes, in memory and on disk.
#[derive(Debug)]
pub struct StreamLog {
    window: StreamBuffer,
    /// The window's capacity (it grows with the block-mode exit slack).
    window_capacity: u64,
    /// Bytes retained at most while the disk takes writes.
    capacity: u64,
    disk: Option<Disk>,
    /// Why this stream is not (or no longer) retained on disk.
    fault: Option<String>,
    /// Block mode: per attachment, the lowest offset it may still need.
    floors: HashMap<ReaderId, u64>,
    /// Block mode: the last floor while nobody is attached.
    idle_floor: u64,
}

#[derive(Debug)]
struct Disk {
    file: Arc<RingFile>,
    /// First offset still in the file.
    start: u64,
    /// End of what has been written to the file.
    end: u64,
    /// End of the write capture is performing now, if any.
    writing: Option<u64>,
    /// The start recorded in the file's header (for a restart): raised in
    /// steps of [`HEADER_START_STEP`], always at or above the lowest
    /// offset already overwritten.
    header_start: u64,
    /// A write failed: nothing more goes to the file.
    failed: bool,
    /// Transient, and the window has never overflowed: every byte is in
    /// memory and nothing has been written to the file yet.
    held: bool,
}

/// What a reader gets from [`StreamLog::next`].
#[derive(Debug)]
pub enum Read<F = Vec<u8>> {
    /// An answer from memory (or a `dropped`, `Pending`, `End`).
    Ready(Next<F>),
    /// Read `length` bytes at `offset` from the file, outside the lock.
    Disk {
        file: Arc<RingFile>,
        offset: u64,
        length: u64,
    },
}

/// A write capture performs outside the lock: the last `length` bytes of
/// `held` followed by `data` go to the file at `offset` (a write longer
/// than the ring keeps its tail).
#[derive(Debug)]
pub struct DiskWrite {
    file: Arc<RingFile>,
    offset: u64,
    length: u64,
    /// Raised in the header first when the write overwrites older bytes.
    raise_start: Option<u64>,
    /// What a transient log's window held when it first overflowed (the
    /// stream's bytes from 0), written before `data`.
    held: Vec<u8>,
}

impl DiskWrite {
    /// Writes the data (the slice given to [`StreamLog::push`]) to the file.
    pub fn perform(&self, data: &[u8]) -> Result<(), WriteFault> {
        let lost = |error| WriteFault { written: 0, error };
        if let Some(start) = self.raise_start {
            self.file.set_start(start).map_err(lost)?;
        }
        let length = self.length as usize;
        let from_held = length.saturating_sub(data.len());
        if from_held > 0 {
            let held = &self.held[self.held.len() - from_held..];
            self.file.write(self.offset, held)?;
        }
        let tail = &data[data.len() - (length - from_held)..];
        self.file
            .write(self.offset + from_held as u64, tail)
            .map_err(|fault| WriteFault {
                written: from_held as u64 + fault.written,
                error: fault.error,
            })?;
        self.file
            .set_end(self.offset + self.length)
            .map_err(|error| WriteFault {
                written: self.length,
                error,
            })
    }
}

impl StreamLog {
    /// Memory only, as retention was before the disk: `capacity` bytes in
    /// the window, nothing on disk, no fault.
    pub fn memory(capacity: usize) -> StreamLog {
        StreamLog {
            window: StreamBuffer::new(capacity),
            window_capacity: capacity as u64,
            capacity: capacity as u64,
            disk: None,
            fault: None,
            floors: HashMap::new(),
            idle_floor: 0,
        }
    }

    /// A new stream retaining `capacity` bytes in `file` (whose physical
    /// capacity may be larger, for the exit slack) and the newest `window`
    /// bytes in memory.
    pub fn on_disk(window: usize, capacity: u64, file: RingFile) -> StreamLog {
        let window = (window as u64).min(capacity) as usize;
        StreamLog {
            capacity: capacity.min(file.capacity()),
            disk: Some(Disk {
                held: !file.is_durable(),
                file: Arc::new(file),
                start: 0,
                end: 0,
                writing: None,
                failed: false,
                header_start: 0,
            }),
            ..StreamLog::memory(window)
        }
    }

    /// A stream of an earlier run, read back from its file: complete, with
    /// `start..end` on disk, nothing in memory, and `total` bytes written
    /// (bytes past `end` were lost with the earlier run's memory).
    pub fn recovered(file: RingFile, start: u64, end: u64, total: u64) -> StreamLog {
        let mut log = StreamLog {
            window: StreamBuffer::resume_at(0, total.max(end)),
            window_capacity: 0,
            capacity: file.capacity(),
            disk: Some(Disk {
                file: Arc::new(file),
                start,
                end,
                writing: None,
                failed: true,
                header_start: start,
                held: false,
            }),
            fault: None,
            floors: HashMap::new(),
            idle_floor: total.max(end),
        };
        log.complete();
        log
    }

    /// A stream of an earlier run whose log could not be read back: its
    /// `total` bytes are reported as dropped, and `fault` (if any) says why.
    pub fn lost(total: u64, fault: Option<String>) -> StreamLog {
        let mut log = StreamLog {
            window: StreamBuffer::resume_at(0, total),
            window_capacity: 0,
            fault,
            idle_floor: total,
            ..StreamLog::memory(0)
        };
        log.complete();
        log
    }

    /// A read of the file at `offset` failed (the file was truncated,
    /// replaced, or the disk fails): nothing more is read from it, and
    /// everything it held is reported as dropped, in one range. Logged
    /// once per stream, and said in the process object.
    pub fn unreadable(&mut self, offset: u64, error: &std::io::Error) {
        let Some(d) = self.disk.as_mut() else { return };
        d.start = d.end.max(offset);
        d.failed = true;
        if self.fault.is_none() {
            tracing::warn!(file = d.file.name(), error = %error, offset, "reading the disk log failed: its bytes are reported as dropped");
            self.fault = Some(format!("log not readable: {error}"));
        }
    }

    /// Total bytes written to this stream since spawn.
    pub fn end(&self) -> u64 {
        self.window.end()
    }

    /// Why the stream is not retained on disk, if it is not.
    pub fn fault(&self) -> Option<&str> {
        self.fault.as_deref()
    }

    /// Appends captured bytes to the window; returns the disk write the
    /// caller must perform (outside the lock) and report with
    /// [`StreamLog::written`].
    pub fn push(&mut self, data: &[u8]) -> Option<DiskWrite> {
        let before = self.end();
        let end = before + data.len() as u64;
        let mut held = Vec::new();
        if let Some(d) = self.disk.as_mut().filter(|d| d.held && !d.failed) {
            if end <= self.window_capacity {
                self.window.push(data);
                return None;
            }
            // The first overflow: nothing has left the window yet, so it
            // holds the stream from 0, and all of it is written now (as much
            // of it as the file keeps beside `data`).
            d.held = false;
            let keep = d
                .file
                .capacity()
                .saturating_sub(data.len() as u64)
                .min(before);
            if let Next::Data { frame, .. } =
                self.window
                    .next(before - keep, keep as usize, |_, p| p.concat())
            {
                held = frame;
            }
        }
        self.window.push(data);
        let capacity = self.capacity;
        let disk = self.disk.as_mut().filter(|d| !d.failed)?;
        let length = (data.len() as u64 + held.len() as u64).min(disk.file.capacity());
        // Raised before the bytes below are overwritten, so a reader of the
        // file re-checks and finds them gone.
        disk.start = disk.start.max(end.saturating_sub(capacity));
        // Bytes below this are overwritten by the write: the header must
        // stop claiming them first.
        let overwritten = end.saturating_sub(disk.file.capacity());
        let raise_start = (overwritten > disk.header_start).then(|| {
            let step = (disk.file.capacity() / 8).clamp(1, HEADER_START_STEP);
            let ahead = overwritten.div_ceil(step) * step;
            disk.header_start = ahead.min(end);
            disk.header_start
        });
        disk.writing = Some(end);
        Some(DiskWrite {
            file: disk.file.clone(),
            offset: end - length,
            length,
            raise_start,
            held,
        })
    }

    /// Records how a [`DiskWrite`] went. On a fault the stream is
    /// memory-only from here on. True when some of its bytes already left
    /// the window, so a reader may have been told to wait for them
    /// ([`Next::Pending`]) and must be woken again.
    pub fn written(&mut self, write: &DiskWrite, outcome: Result<(), WriteFault>) -> bool {
        let awaited = write.offset < self.window.start();
        let Some(disk) = self.disk.as_mut() else {
            return awaited;
        };
        disk.writing = None;
        match outcome {
            Ok(()) => disk.end = write.offset + write.length,
            Err(fault) => {
                if disk.end < write.offset {
                    // Bytes before the write's tail were never going to be
                    // on disk; the file holds nothing contiguous with them.
                    disk.start = write.offset;
                }
                disk.end = write.offset + fault.written;
                disk.start = disk.start.min(disk.end);
                disk.failed = true;
                tracing::warn!(file = disk.file.name(), error = %fault.error, "retention falls back to memory only");
                self.fault = Some(fault.describe());
            }
        }
        awaited
    }

    /// The next thing a reader at `cursor` should be sent, at most `max`
    /// data bytes: from memory (encoded by `encode`, one copy), or a span
    /// of the file to read. `cursor` must not be past `end()`.
    pub fn next<F>(
        &self,
        cursor: u64,
        max: usize,
        encode: impl FnOnce(u64, &[&[u8]]) -> F,
    ) -> Read<F> {
        let window_start = self.window.start();
        if cursor >= window_start {
            return Read::Ready(self.window.next(cursor, max, encode));
        }
        let (start, end, writing) = match &self.disk {
            Some(d) => (d.start, d.end, d.writing),
            None => (0, 0, None),
        };
        if cursor < start {
            return Read::Ready(Next::Dropped {
                offset: cursor,
                length: start - cursor,
            });
        }
        if cursor < end {
            if max == 0 {
                return Read::Ready(Next::Pending);
            }
            let to = end.min(window_start).min(cursor + max as u64);
            let file = match &self.disk {
                Some(d) => d.file.clone(),
                None => return Read::Ready(Next::Pending),
            };
            return Read::Disk {
                file,
                offset: cursor,
                length: to - cursor,
            };
        }
        if writing.is_some_and(|w| w > cursor) {
            // Left the window but still on its way to the file.
            return Read::Ready(Next::Pending);
        }
        Read::Ready(Next::Dropped {
            offset: cursor,
            length: window_start - cursor,
        })
    }

    /// Offset of the oldest byte retained, in memory or on disk.
    pub fn start(&self) -> u64 {
        let window = self.window.start();
        match &self.disk {
            Some(d) if !d.failed && d.start < window && d.end >= window => d.start,
            _ => window,
        }
    }

    /// Frees every retained byte at once (the process is forgotten): the
    /// window's memory now, and the file is not read again (it is unlinked
    /// with the process). A reader behind the end learns the range as
    /// dropped, then the end.
    pub fn discard(&mut self) {
        self.window.discard();
        if let Some(d) = &mut self.disk {
            d.start = d.end.max(self.window.start());
            d.failed = true;
        }
        self.floors.clear();
        self.idle_floor = self.window.start();
    }

    /// After reading `offset..` from the file outside the lock: true when
    /// those bytes were not overwritten meanwhile.
    pub fn still_on_disk(&self, offset: u64) -> bool {
        self.disk.as_ref().is_some_and(|d| d.start <= offset)
    }

    /// Raises the capacity by `extra` bytes (block mode, after the exit),
    /// as far as the file has room for.
    pub fn grow(&mut self, extra: usize) {
        self.window.grow(extra);
        self.window_capacity = self.window_capacity.saturating_add(extra as u64);
        let physical = match &self.disk {
            Some(d) => d.file.capacity(),
            None => u64::MAX,
        };
        self.capacity = self.capacity.saturating_add(extra as u64).min(physical);
    }

    /// Marks capture finished.
    pub fn complete(&mut self) {
        self.window.complete();
    }

    /// The stream is complete: its window gives back its spare allocation.
    /// Returns what the stream holds now, in memory and on disk (a file
    /// whose write failed counts at its full capacity).
    pub fn settle(&mut self) -> (u64, u64) {
        let memory = self.window.shrink_to_fit();
        let disk = self.disk.as_ref().map_or(0, |d| {
            d.file.footprint(if d.failed { u64::MAX } else { d.end })
        });
        (memory, disk)
    }

    /// Block mode: how many bytes capture may read now without evicting
    /// anything an attachment still needs.
    pub fn block_room(&self) -> usize {
        let floor = self
            .floors
            .values()
            .copied()
            .min()
            .unwrap_or(self.idle_floor);
        let end = self.end();
        let room = match &self.disk {
            Some(d) if !d.failed => self.capacity - (end - floor.max(d.start)).min(self.capacity),
            // Only the window holds what is not on disk.
            disk => {
                let on_disk = disk.as_ref().map_or(0, |d| d.end);
                let keep = floor.max(on_disk).max(self.window.start()).min(end);
                self.window_capacity.saturating_sub(end - keep)
            }
        };
        usize::try_from(room).unwrap_or(usize::MAX)
    }

    /// Block mode: `reader` needs every byte from `floor` on.
    pub fn register(&mut self, reader: ReaderId, floor: u64) {
        self.floors.insert(reader, floor);
    }

    /// Records that `reader` no longer needs bytes below `floor`.
    pub fn advance(&mut self, reader: ReaderId, floor: u64) {
        if let Some(f) = self.floors.get_mut(&reader) {
            *f = (*f).max(floor);
        }
    }

    /// Forgets `reader`; the last one's floor holds while nobody is
    /// attached.
    pub fn unregister(&mut self, reader: ReaderId) {
        if let Some(floor) = self.floors.remove(&reader) {
            if self.floors.is_empty() {
                self.idle_floor = self.idle_floor.max(floor);
            }
        }
    }
}

mod carry;
pub use carry::{Blob, CarriedDisk, CarriedLog};

#[cfg(test)]
mod tests;
