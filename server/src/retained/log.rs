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
//! outcome comes back through [`StreamLog::written`]. A failed write (disk
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
}

/// What a reader gets from [`StreamLog::next`].
#[derive(Debug)]
pub enum Read {
    /// An answer from memory (or a `dropped`, `Pending`, `End`).
    Ready(Next),
    /// Read `length` bytes at `offset` from the file, outside the lock.
    Disk {
        file: Arc<RingFile>,
        offset: u64,
        length: u64,
    },
}

/// A write capture performs outside the lock: `data`'s last `length` bytes
/// go to the file at `offset` (a write longer than the ring keeps its tail).
#[derive(Debug)]
pub struct DiskWrite {
    file: Arc<RingFile>,
    offset: u64,
    length: u64,
    /// Raised in the header first when the write overwrites older bytes.
    raise_start: Option<u64>,
}

impl DiskWrite {
    /// Writes the data (the slice given to [`StreamLog::push`]) to the file.
    pub fn perform(&self, data: &[u8]) -> Result<(), WriteFault> {
        let lost = |error| WriteFault { written: 0, error };
        if let Some(start) = self.raise_start {
            self.file.set_start(start).map_err(lost)?;
        }
        let tail = &data[data.len() - self.length as usize..];
        self.file.write(self.offset, tail)?;
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
            }),
            fault: None,
            floors: HashMap::new(),
            idle_floor: total.max(end),
        };
        log.complete();
        log
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
        let end = self.end() + data.len() as u64;
        self.window.push(data);
        let capacity = self.capacity;
        let disk = self.disk.as_mut().filter(|d| !d.failed)?;
        let length = (data.len() as u64).min(disk.file.capacity());
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
                tracing::warn!(error = %fault.error, "retention falls back to memory only");
                self.fault = Some(fault.describe());
            }
        }
        awaited
    }

    /// The next thing a reader at `cursor` should be sent, at most `max`
    /// data bytes: from memory (encoded by `encode`, one copy), or a span
    /// of the file to read. `cursor` must not be past `end()`.
    pub fn next(
        &self,
        cursor: u64,
        max: usize,
        encode: impl FnOnce(u64, &[&[u8]]) -> Vec<u8>,
    ) -> Read {
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::AtomicBool;

    use super::*;

    fn concat(_: u64, parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn dir() -> Dir {
        let dir = std::env::temp_dir().join(format!("tether-log-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).unwrap();
        Dir(dir)
    }

    fn log(dir: &Dir, window: usize, capacity: u64) -> StreamLog {
        let file =
            RingFile::create(&dir.0.join("s"), capacity, Arc::new(AtomicBool::new(false))).unwrap();
        StreamLog::on_disk(window, capacity, file)
    }

    fn push(log: &mut StreamLog, data: &[u8]) {
        if let Some(write) = log.push(data) {
            let outcome = write.perform(data);
            log.written(&write, outcome);
        }
    }

    /// Reads like the owner does: memory, or the file and a re-check.
    fn read(log: &StreamLog, cursor: u64, max: usize) -> Next {
        match log.next(cursor, max, concat) {
            Read::Ready(next) => next,
            Read::Disk {
                file,
                offset,
                length,
            } => {
                let mut buf = vec![0; length as usize];
                file.read(offset, &mut buf).unwrap();
                assert!(log.still_on_disk(offset));
                Next::Data {
                    offset,
                    length,
                    frame: buf,
                }
            }
        }
    }

    fn read_all(log: &StreamLog, mut cursor: u64) -> (Vec<u8>, Vec<(u64, u64)>) {
        let (mut bytes, mut dropped) = (Vec::new(), Vec::new());
        loop {
            match read(log, cursor, 7) {
                Next::Data {
                    offset,
                    length,
                    frame,
                } => {
                    assert_eq!(offset, cursor);
                    bytes.extend(frame);
                    cursor += length;
                }
                Next::Dropped { offset, length } => {
                    dropped.push((offset, length));
                    cursor = offset + length;
                }
                Next::Pending | Next::End => return (bytes, dropped),
            }
        }
    }

    #[test]
    fn a_late_reader_gets_every_byte_from_disk_then_memory() {
        let dir = dir();
        let mut log = log(&dir, 4, 64);
        let all: Vec<u8> = (0..50u8).collect();
        for chunk in all.chunks(3) {
            push(&mut log, chunk);
        }
        // The window holds only the newest 4; the rest comes from the file.
        assert!(matches!(log.next(0, 10, concat), Read::Disk { .. }));
        assert_eq!(read_all(&log, 0), (all.clone(), vec![]));
        assert_eq!(read_all(&log, 45), (all[45..].to_vec(), vec![]));
    }

    #[test]
    fn the_disk_log_keeps_its_capacity_and_reports_the_evicted_range() {
        let dir = dir();
        let mut log = log(&dir, 4, 16);
        let all: Vec<u8> = (0..40u8).collect();
        for chunk in all.chunks(5) {
            push(&mut log, chunk);
        }
        assert_eq!(read_all(&log, 0), (all[24..].to_vec(), vec![(0, 24)]));
        // One write longer than the whole ring keeps its tail.
        push(&mut log, &[9; 20]);
        assert_eq!(read_all(&log, 40), (vec![9; 16], vec![(40, 4)]));
        let on_disk = std::fs::metadata(dir.0.join("s")).unwrap().len();
        assert!(on_disk <= super::super::disk::HEADER + 16);
    }

    #[test]
    fn a_failed_write_keeps_the_disk_part_and_drops_exactly_what_left_memory() {
        let dir = dir();
        let mut log = log(&dir, 4, 64);
        push(&mut log, b"0123456789");
        // The disk fills up during the next write: 2 of its 6 bytes land.
        let write = log.push(b"abcdef").unwrap();
        write.file.write(10, b"ab").unwrap();
        log.written(
            &write,
            Err(WriteFault {
                written: 2,
                error: std::io::Error::from_raw_os_error(libc::ENOSPC),
            }),
        );
        assert_eq!(log.fault(), Some("disk full"));
        assert!(log.push(b"ghij").is_none(), "memory only from now on");
        // On disk 0..12, in memory the newest 4 (16..20); 12..16 is lost.
        assert_eq!(
            read_all(&log, 0),
            (b"0123456789abghij".to_vec(), vec![(12, 4)])
        );
    }

    #[test]
    fn bytes_on_their_way_to_disk_are_pending_not_dropped() {
        let dir = dir();
        let mut log = log(&dir, 4, 64);
        let write = log.push(b"abcdefgh").unwrap();
        assert_eq!(read(&log, 0, 10), Next::Pending);
        log.written(&write, write.perform(b"abcdefgh"));
        assert_eq!(read_all(&log, 0), (b"abcdefgh".to_vec(), vec![]));
    }

    #[test]
    fn a_wrapped_ring_file_tells_a_restart_only_bytes_it_really_holds() {
        let dir = dir();
        let path = dir.0.join("s");
        let keep = Arc::new(AtomicBool::new(true));
        let capacity = 3 * HEADER_START_STEP;
        let file = RingFile::create(&path, capacity, keep.clone()).unwrap();
        let mut log = StreamLog::on_disk(1024, capacity, file);
        let all: Vec<u8> = (0..(7 * HEADER_START_STEP + 12345) as usize)
            .map(|i| (i % 251) as u8)
            .collect();
        for chunk in all.chunks(65536) {
            push(&mut log, chunk);
        }
        drop(log);
        let (file, start, end) = RingFile::open_existing(&path, keep).unwrap();
        assert_eq!(end, all.len() as u64);
        assert!(start >= end - capacity && start <= end - capacity + HEADER_START_STEP);
        let mut bytes = vec![0; (end - start) as usize];
        file.read(start, &mut bytes).unwrap();
        assert!(bytes == all[start as usize..]);
    }

    #[test]
    fn a_read_overtaken_by_overwriting_is_detected() {
        let dir = dir();
        let mut log = log(&dir, 2, 8);
        push(&mut log, b"abcdefgh");
        let Read::Disk { offset, .. } = log.next(0, 8, concat) else {
            panic!("expected a disk read")
        };
        push(&mut log, b"ij");
        assert!(!log.still_on_disk(offset));
    }

    #[test]
    fn block_room_is_the_disk_capacity_while_the_disk_takes_writes() {
        let dir = dir();
        let mut log = log(&dir, 4, 16);
        log.register(1, 0);
        push(&mut log, b"0123456789");
        assert_eq!(log.block_room(), 6);
        log.advance(1, 8);
        assert_eq!(log.block_room(), 14);
        // Memory only: the window bounds what may be unsent and not on disk.
        let write = log.push(b"ab").unwrap();
        log.written(
            &write,
            Err(WriteFault {
                written: 0,
                error: std::io::Error::other("EIO"),
            }),
        );
        assert_eq!(log.block_room(), 2);
        log.unregister(1);
        assert_eq!(log.block_room(), 2, "the idle floor holds");
        log.grow(10);
        assert_eq!(log.block_room(), 12);
    }

    #[test]
    fn memory_only_is_the_ring_as_before() {
        let mut log = StreamLog::memory(4);
        assert!(log.push(b"abcdef").is_none());
        assert_eq!(read_all(&log, 0), (b"cdef".to_vec(), vec![(0, 2)]));
        assert_eq!(log.fault(), None);
    }

    #[test]
    fn a_log_file_that_cannot_be_created_leaves_the_stream_memory_only_with_the_reason() {
        let path = std::path::Path::new("/nonexistent-tether-dir/s");
        let file = RingFile::deferred(path, 64, Arc::new(AtomicBool::new(false)));
        let mut log = StreamLog::on_disk(4, 64, file);
        push(&mut log, b"abcdef");
        let fault = log.fault().unwrap_or_default();
        assert!(fault.starts_with("disk write failed"), "{fault}");
        assert!(log.push(b"gh").is_none(), "memory only from now on");
        assert_eq!(read_all(&log, 0), (b"efgh".to_vec(), vec![(0, 4)]));
    }

    #[test]
    fn a_recovered_log_reads_its_file_and_is_complete() {
        let dir = dir();
        let mut log = log(&dir, 4, 16);
        push(&mut log, b"hello world");
        drop(log);
        let path = dir.0.join("s");
        // Dropped without being kept: the file is gone.
        assert!(!path.exists());
        let keep = Arc::new(AtomicBool::new(true));
        let file = RingFile::create(&path, 16, keep.clone()).unwrap();
        let mut log = StreamLog::on_disk(4, 16, file);
        push(&mut log, b"hello world");
        drop(log);
        let (file, start, end) = RingFile::open_existing(&path, keep).unwrap();
        let log = StreamLog::recovered(file, start, end, end + 3);
        assert_eq!(read_all(&log, 0), (b"hello world".to_vec(), vec![(11, 3)]));
        assert_eq!(read(&log, 14, 10), Next::End);
    }
}
