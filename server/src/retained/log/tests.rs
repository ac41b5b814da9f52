//! The stream log: window, file, faults, block-mode room, restarts.
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use super::*;

fn concat(_: u64, parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

struct Dir(Arc<crate::retained::dir::Dir>, PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.1);
    }
}
fn dir() -> Dir {
    let dir = std::env::temp_dir().join(format!("tether-log-{}", uuid::Uuid::new_v4()));
    Dir(
        Arc::new(crate::retained::dir::Dir::open(&dir, true).unwrap()),
        dir,
    )
}

fn log(dir: &Dir, window: usize, capacity: u64) -> StreamLog {
    let file = RingFile::create(&dir.0, "s", capacity, Arc::new(AtomicBool::new(false))).unwrap();
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
    let on_disk = std::fs::metadata(dir.1.join("s")).unwrap().len();
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
    let keep = Arc::new(AtomicBool::new(true));
    let capacity = 3 * HEADER_START_STEP;
    let file = RingFile::create(&dir.0, "s", capacity, keep.clone()).unwrap();
    let mut log = StreamLog::on_disk(1024, capacity, file);
    let all: Vec<u8> = (0..(7 * HEADER_START_STEP + 12345) as usize)
        .map(|i| (i % 251) as u8)
        .collect();
    for chunk in all.chunks(65536) {
        push(&mut log, chunk);
    }
    drop(log);
    let (file, start, end) = RingFile::open_existing(&dir.0, "s", capacity, keep).unwrap();
    assert_eq!(end, all.len() as u64);
    assert!(start >= end - capacity && start <= end - capacity + HEADER_START_STEP);
    let mut bytes = vec![0; (end - start) as usize];
    file.read(start, &mut bytes).unwrap();
    assert!(bytes == all[start as usize..]);
}

fn transient_log(dir: &Dir, window: usize, capacity: u64) -> StreamLog {
    let file =
        RingFile::deferred(&dir.0, "s", capacity, Arc::new(AtomicBool::new(false))).transient();
    StreamLog::on_disk(window, capacity, file)
}

#[test]
fn a_transient_log_writes_nothing_until_its_window_overflows_then_everything() {
    let dir = dir();
    let mut log = transient_log(&dir, 8, 64);
    assert!(log.push(b"abc").is_none());
    assert!(log.push(b"defgh").is_none(), "the window is just full");
    assert!(!dir.1.join("s").exists(), "no file while it all fits");
    assert_eq!(read_all(&log, 0), (b"abcdefgh".to_vec(), vec![]));
    // The first overflow writes what the window held, then the new bytes.
    let write = log.push(b"ijk").unwrap();
    assert_eq!(read(&log, 0, 10), Next::Pending, "on their way to the file");
    log.written(&write, write.perform(b"ijk"));
    assert!(dir.1.join("s").exists());
    assert!(matches!(log.next(0, 10, concat), Read::Disk { .. }));
    assert_eq!(read_all(&log, 0), (b"abcdefghijk".to_vec(), vec![]));
    // From then on every append is written through, as for any log.
    let all: Vec<u8> = (0..40u8).collect();
    for chunk in all.chunks(5) {
        assert!(log.push(chunk).is_some_and(|w| {
            let outcome = w.perform(chunk);
            log.written(&w, outcome);
            true
        }));
    }
    let mut expected = b"abcdefghijk".to_vec();
    expected.extend(&all);
    assert_eq!(read_all(&log, 0), (expected, vec![]));
}

#[test]
fn a_first_overflow_larger_than_the_file_keeps_the_newest_bytes_exactly() {
    let (first, second) = (dir(), dir());
    let mut log = transient_log(&first, 8, 10);
    push(&mut log, b"012345");
    push(&mut log, b"abcdefghi");
    // 15 bytes, a 10-byte ring: the oldest 5 are reported, not lost.
    assert_eq!(read_all(&log, 0), (b"5abcdefghi".to_vec(), vec![(0, 5)]));
    // The new bytes alone overfill the ring: none of the held ones fit.
    let mut log = transient_log(&second, 4, 6);
    push(&mut log, b"wxyz");
    push(&mut log, b"0123456789");
    assert_eq!(read_all(&log, 0), (b"456789".to_vec(), vec![(0, 8)]));
}

#[test]
fn a_first_overflow_that_fails_reports_exactly_what_left_memory() {
    let dir = dir();
    let mut log = transient_log(&dir, 4, 64);
    push(&mut log, b"abcd");
    let write = log.push(b"ef").unwrap();
    // As if the disk filled after the first byte.
    write.perform(b"ef").unwrap();
    log.written(
        &write,
        Err(WriteFault {
            written: 1,
            error: std::io::Error::other("EIO"),
        }),
    );
    assert!(log.fault().is_some());
    // "a" reached the file; "b" never did; "cdef" are in memory.
    assert_eq!(read_all(&log, 0), (b"acdef".to_vec(), vec![(1, 1)]));
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
    let dir = dir();
    std::fs::create_dir(dir.1.join("s")).unwrap();
    let file = RingFile::deferred(&dir.0, "s", 64, Arc::new(AtomicBool::new(false)));
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
    let path = dir.1.join("s");
    // Dropped without being kept: the file is gone.
    assert!(!path.exists());
    let keep = Arc::new(AtomicBool::new(true));
    let file = RingFile::create(&dir.0, "s", 16, keep.clone()).unwrap();
    let mut log = StreamLog::on_disk(4, 16, file);
    push(&mut log, b"hello world");
    drop(log);
    let (file, start, end) = RingFile::open_existing(&dir.0, "s", 16, keep).unwrap();
    let log = StreamLog::recovered(file, start, end, end + 3);
    assert_eq!(read_all(&log, 0), (b"hello world".to_vec(), vec![(11, 3)]));
    assert_eq!(read(&log, 14, 10), Next::End);
}

#[test]
fn a_settled_log_says_what_it_holds_in_memory_and_on_disk() {
    let dir = dir();
    // Fits its window: a few bytes of memory, no file.
    let mut small = transient_log(&dir, 1 << 20, 4 << 20);
    push(&mut small, b"hello");
    small.complete();
    let (memory, disk) = small.settle();
    assert!((5..64).contains(&memory), "{memory}");
    assert_eq!(disk, 0);
    // Wrapped its file: the window's bytes, and the file at its capacity.
    let mut big = log(&dir, 8, 64);
    push(&mut big, &[7; 100]);
    big.complete();
    let (memory, disk) = big.settle();
    assert!((8..64).contains(&memory), "{memory}");
    assert_eq!(disk, super::super::disk::HEADER + 64);
    assert_eq!(
        read_all(&big, 36).0,
        vec![7; 64],
        "settling keeps every byte"
    );
}
