//! The on-disk ring of one output stream: a file of a fixed physical
//! capacity where the byte at absolute offset `o` lives at `o % capacity`
//! (written with `pwrite`, read with `pread`), so the file never grows past
//! its stream's retention and old bytes need no separate deletion.
//!
//! A 32-byte header makes the file self-describing for a restart:
//! magic, physical capacity, and the retained range `start..end`. `end` is
//! written after the data it covers; before a write overwrites old bytes,
//! `start` is raised past them first, so whatever moment the server dies at
//! (SIGKILL included: the page cache survives it), the header's range holds
//! only bytes that are really in the file.
//!
//! No lock and no policy here: [`super::log::StreamLog`] decides what is
//! written and read, and what a fault means.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use super::dir::Dir;

const MAGIC: &[u8; 8] = b"TTHRLOG2";
/// Header size; the ring's bytes follow it.
pub const HEADER: u64 = 40;

/// A ring file as a handover carries it (see [`RingFile::carried`]).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedRing {
    pub name: String,
    pub capacity: u64,
    pub durable: bool,
    /// The header's `start` and `end` as last written.
    pub header: [u64; 2],
    /// The file was made and is open for writing.
    pub open: bool,
    /// Its device and inode, when it exists.
    pub identity: Option<(u64, u64)>,
}

/// One stream's ring file.
#[derive(Debug)]
pub struct RingFile {
    /// Opened at the first write of a [`RingFile::deferred`] ring: creating
    /// a file costs 25-250 us on ext4, which a process that prints nothing
    /// (or a spawn waiting for its answer) should not pay.
    file: OnceLock<File>,
    dir: Arc<Dir>,
    name: String,
    capacity: u64,
    /// Keeps the header's retained range current for a restart. Off for a
    /// private directory, which no restart reads: two `pwrite`s fewer per
    /// append.
    durable: bool,
    /// The header's range as last written (`start`, `end`): both are
    /// rewritten with the checksum that covers them.
    header: [AtomicU64; 2],
    /// A ring of an earlier run ([`RingFile::open_existing`]): its device
    /// and inode as validated. It is opened again for each read and closed
    /// after, so recovered processes hold no descriptors while nobody reads
    /// them.
    existing: Option<(u64, u64)>,
    /// Set when the server shuts down cleanly with files meant to outlive
    /// it (`--data-dir` given); otherwise the file is removed on drop, when
    /// the process is forgotten and no reader holds it any more.
    keep: Arc<AtomicBool>,
}

impl Drop for RingFile {
    fn drop(&mut self) {
        let made = self.file.get().is_some() || self.existing.is_some();
        if made && !self.keep.load(Ordering::SeqCst) {
            let _ = self.dir.remove(&self.name);
        }
    }
}

/// A write that stopped early: how many bytes did reach the file, and why
/// the rest did not.
#[derive(Debug)]
pub struct WriteFault {
    /// Bytes of the write that are in the file.
    pub written: u64,
    /// What the OS said.
    pub error: io::Error,
}

impl WriteFault {
    /// A short description for the process object: `disk full` for ENOSPC
    /// and EDQUOT, else the OS message.
    pub fn describe(&self) -> String {
        describe(&self.error)
    }
}

/// The process-object wording of a storage error.
pub fn describe(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => "disk full".into(),
        _ => format!("disk write failed: {error}"),
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// FNV-1a over the header's first 32 bytes: catches a header overwritten
/// with anything else (the values are checked against the file besides).
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl RingFile {
    /// Creates a new ring file `name` in `dir` (mode 0600; it must not
    /// exist) of `capacity` data bytes. The file stays sparse until written.
    pub fn create(
        dir: &Arc<Dir>,
        name: &str,
        capacity: u64,
        keep: Arc<AtomicBool>,
    ) -> io::Result<RingFile> {
        let ring = RingFile::deferred(dir, name, capacity, keep);
        ring.file()?;
        Ok(ring)
    }

    /// A ring file `name` in `dir` that is created (as by
    /// [`RingFile::create`]) by its first write, so that a stream nothing
    /// is written to never costs a file. An error creating it is that
    /// write's error.
    pub fn deferred(dir: &Arc<Dir>, name: &str, capacity: u64, keep: Arc<AtomicBool>) -> RingFile {
        RingFile {
            file: OnceLock::new(),
            dir: dir.clone(),
            name: name.to_string(),
            capacity: capacity.max(1),
            durable: true,
            header: [AtomicU64::new(0), AtomicU64::new(0)],
            existing: None,
            keep,
        }
    }

    /// The same ring without the header's range kept up to date: for a
    /// directory no later run reads back.
    pub fn transient(mut self) -> RingFile {
        self.durable = false;
        self
    }

    /// False for a [`RingFile::transient`] ring, which no restart reads.
    pub fn is_durable(&self) -> bool {
        self.durable
    }

    /// The open file, created now if this is the first use. Only capture
    /// writes (one writer per stream), and readers read only what a write
    /// put there, so no two callers ever create it.
    fn file(&self) -> io::Result<&File> {
        if let Some(file) = self.file.get() {
            return Ok(file);
        }
        if self.existing.is_some() {
            return Err(io::Error::other("a recovered log is never written"));
        }
        let file = self.dir.create_new(&self.name)?;
        let header = self.header_bytes(0, 0);
        if let Err(e) = file.write_all_at(&header, 0) {
            let _ = self.dir.remove(&self.name);
            return Err(e);
        }
        Ok(self.file.get_or_init(|| file))
    }

    fn header_bytes(&self, start: u64, end: u64) -> [u8; HEADER as usize] {
        let mut header = [0u8; HEADER as usize];
        header[..8].copy_from_slice(MAGIC);
        header[8..16].copy_from_slice(&self.capacity.to_le_bytes());
        header[16..24].copy_from_slice(&start.to_le_bytes());
        header[24..32].copy_from_slice(&end.to_le_bytes());
        let sum = checksum(&header[..32]);
        header[32..40].copy_from_slice(&sum.to_le_bytes());
        header
    }

    /// Opens a ring file left by an earlier run and validates it against
    /// the file and `max_capacity` (this run's largest ring): magic and
    /// checksum, a capacity within the bound, a range within the capacity
    /// and within what the file really holds. Returns it with its retained
    /// range `(start, end)`; the file is closed again (see `existing`).
    /// `InvalidData` means corrupt; any other error, that it could not be
    /// read now (too few descriptors, a permission).
    pub fn open_existing(
        dir: &Arc<Dir>,
        name: &str,
        max_capacity: u64,
        keep: Arc<AtomicBool>,
    ) -> io::Result<(RingFile, u64, u64)> {
        let file = dir.open_existing(name, false)?;
        let length = file.metadata()?.len();
        let mut header = [0u8; HEADER as usize];
        if length < HEADER {
            return Err(invalid(format!(
                "{name}: {length} bytes, shorter than a log header"
            )));
        }
        file.read_exact_at(&mut header, 0)?;
        let word = |i: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&header[i..i + 8]);
            u64::from_le_bytes(bytes)
        };
        let (capacity, start, end, sum) = (word(8), word(16), word(24), word(32));
        if &header[..8] != MAGIC || sum != checksum(&header[..32]) {
            return Err(invalid(format!(
                "{name} is not a tether log (bad magic or checksum)"
            )));
        }
        if capacity == 0 || capacity > max_capacity {
            return Err(invalid(format!(
                "{name}: capacity {capacity} outside 1..={max_capacity}"
            )));
        }
        let data = length - HEADER;
        // A ring that never wrapped holds 0..end; one that did was written
        // to its capacity. A file claiming bytes it does not have is corrupt.
        let holds = if end <= capacity {
            data >= end
        } else {
            data == capacity
        };
        if data > capacity || !holds {
            return Err(invalid(format!(
                "{name}: claims {end} bytes written in a ring of {capacity}, but holds {data}"
            )));
        }
        // Never claim more than the ring can hold (a start past the end,
        // from a crash between raising it and writing, claims nothing).
        let start = start.max(end.saturating_sub(capacity)).min(end);
        let ring = RingFile {
            file: OnceLock::new(),
            dir: dir.clone(),
            name: name.to_string(),
            capacity,
            durable: true,
            header: [AtomicU64::new(start), AtomicU64::new(end)],
            existing: Some(Dir::identity(&file)?),
            keep,
        };
        Ok((ring, start, end))
    }

    /// What a handover carries of this ring (issue 43): its name, size,
    /// header and whether its file was made, with the file's identity so
    /// that the new binary reopens this very file or refuses.
    pub fn carried(&self) -> io::Result<CarriedRing> {
        let identity = match (self.file.get(), self.existing) {
            (Some(file), _) => Some(Dir::identity(file)?),
            (None, existing) => existing,
        };
        Ok(CarriedRing {
            name: self.name.clone(),
            capacity: self.capacity,
            durable: self.durable,
            header: [
                self.header[0].load(Ordering::SeqCst),
                self.header[1].load(Ordering::SeqCst),
            ],
            open: self.file.get().is_some(),
            identity,
        })
    }

    /// The ring a handover carried, in the same directory: a file that was
    /// open is opened again for writing (no link followed, `Dir`), and must
    /// be the same file; one of an earlier run stays closed until read.
    pub fn resumed(
        dir: &Arc<Dir>,
        carried: CarriedRing,
        keep: Arc<AtomicBool>,
    ) -> io::Result<RingFile> {
        let file = OnceLock::new();
        if carried.open {
            let reopened = dir.open_existing(&carried.name, true)?;
            if Some(Dir::identity(&reopened)?) != carried.identity {
                return Err(invalid(format!(
                    "{} was replaced during the handover",
                    carried.name
                )));
            }
            let _ = file.set(reopened);
        }
        Ok(RingFile {
            file,
            dir: dir.clone(),
            name: carried.name,
            capacity: carried.capacity.max(1),
            durable: carried.durable,
            header: [
                AtomicU64::new(carried.header[0]),
                AtomicU64::new(carried.header[1]),
            ],
            existing: if carried.open { None } else { carried.identity },
            keep,
        })
    }

    /// Bytes the file takes on disk once `written` data bytes went to it
    /// (the header and at most its capacity: it is sparse until written);
    /// none if it was never created.
    pub fn footprint(&self, written: u64) -> u64 {
        if self.file.get().is_none() && self.existing.is_none() {
            return 0;
        }
        HEADER + written.min(self.capacity)
    }

    /// Data bytes the ring holds at most.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Its name in the data directory.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Writes `data` as the bytes at absolute offsets `offset..`, wrapping
    /// around the ring. `data` must not be longer than the capacity.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), WriteFault> {
        let file = self
            .file()
            .map_err(|error| WriteFault { written: 0, error })?;
        let mut written = 0u64;
        for (position, part) in self.spans(offset, data.len() as u64) {
            let part = &data[part.0 as usize..part.1 as usize];
            let mut done = 0usize;
            while done < part.len() {
                match file.write_at(&part[done..], HEADER + position + done as u64) {
                    Ok(0) => {
                        return Err(WriteFault {
                            written,
                            error: io::Error::from_raw_os_error(libc::ENOSPC),
                        })
                    }
                    Ok(n) => {
                        done += n;
                        written += n as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(WriteFault { written, error }),
                }
            }
        }
        Ok(())
    }

    /// Reads the bytes at absolute offsets `offset..offset + buf.len()`.
    /// A recovered ring is opened for the read and closed after, and must
    /// still be the file validated at the start.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let reopened;
        let file = match (self.file.get(), self.existing) {
            (Some(file), _) => file,
            (None, Some(identity)) => {
                reopened = self.dir.open_existing(&self.name, false)?;
                if Dir::identity(&reopened)? != identity {
                    return Err(invalid(format!("{} was replaced", self.name)));
                }
                &reopened
            }
            // Never creates it: nothing was written, so nothing can be read.
            (None, None) => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "nothing written to the log yet",
                ))
            }
        };
        for (position, part) in self.spans(offset, buf.len() as u64) {
            file.read_exact_at(
                &mut buf[part.0 as usize..part.1 as usize],
                HEADER + position,
            )?;
        }
        Ok(())
    }

    /// Records the first retained offset (before the bytes below it are
    /// overwritten).
    pub fn set_start(&self, start: u64) -> io::Result<()> {
        self.set_range(0, start)
    }

    /// Records the end of what is in the file (after it was written).
    pub fn set_end(&self, end: u64) -> io::Result<()> {
        self.set_range(1, end)
    }

    /// Rewrites `start`, `end` and the checksum in one `pwrite` (only
    /// capture writes, one writer per stream).
    fn set_range(&self, which: usize, value: u64) -> io::Result<()> {
        if !self.durable {
            return Ok(());
        }
        self.header[which].store(value, Ordering::Relaxed);
        let header = self.header_bytes(
            self.header[0].load(Ordering::Relaxed),
            self.header[1].load(Ordering::Relaxed),
        );
        self.file()?.write_all_at(&header[16..], 16)
    }

    /// The one or two (file position, slice range) pieces of a span of
    /// `len` bytes from absolute `offset`.
    fn spans(&self, offset: u64, len: u64) -> impl Iterator<Item = (u64, (u64, u64))> {
        let position = offset % self.capacity;
        let first = len.min(self.capacity - position);
        let second = len - first;
        [(position, (0, first)), (0, (first, first + second))]
            .into_iter()
            .filter(|(_, (from, to))| to > from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    struct Scratch(Arc<Dir>);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.0.path());
        }
    }
    impl Scratch {
        fn path(&self, name: &str) -> PathBuf {
            self.0.path().join(name)
        }
    }

    fn dir() -> Scratch {
        let path = std::env::temp_dir().join(format!("tether-disk-{}", uuid::Uuid::new_v4()));
        Scratch(Arc::new(Dir::open(&path, true).unwrap()))
    }

    fn keep() -> Arc<AtomicBool> {
        Arc::new(AtomicBool::new(true))
    }

    #[test]
    fn bytes_wrap_around_the_ring_at_their_absolute_offsets() {
        let dir = dir();
        let ring = RingFile::create(&dir.0, "a", 8, keep()).unwrap();
        ring.write(0, b"abcdef").unwrap();
        ring.write(6, b"ghij").unwrap(); // i, j overwrite a, b
        let mut buf = [0u8; 8];
        ring.read(2, &mut buf).unwrap();
        assert_eq!(&buf, b"cdefghij");
        let len = std::fs::metadata(dir.path("a")).unwrap().len();
        assert_eq!(len, HEADER + 8, "the file never outgrows its capacity");
    }

    #[test]
    fn a_deferred_ring_is_created_by_its_first_write_only() {
        let dir = dir();
        let path = dir.path("a");
        let ring = RingFile::deferred(&dir.0, "a", 8, Arc::new(AtomicBool::new(false)));
        assert!(!path.exists(), "no file before anything is written");
        assert!(ring.read(0, &mut [0u8; 1]).is_err());
        ring.write(0, b"abc").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), HEADER + 3);
        drop(ring);
        assert!(!path.exists());
        let unused = RingFile::deferred(&dir.0, "a", 8, Arc::new(AtomicBool::new(false)));
        std::fs::write(&path, b"someone else's").unwrap();
        drop(unused);
        assert!(path.exists(), "a ring that never wrote removes nothing");
    }

    #[test]
    fn a_planted_link_is_never_written_through() {
        let dir = dir();
        let target = std::env::temp_dir().join(format!("tether-target-{}", uuid::Uuid::new_v4()));
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, dir.path("a")).unwrap();
        let ring = RingFile::deferred(&dir.0, "a", 8, keep());
        assert!(ring.write(0, b"abc").is_err());
        assert!(RingFile::open_existing(&dir.0, "a", 8, keep()).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        std::fs::remove_file(&target).unwrap();
    }

    #[test]
    fn the_header_survives_for_the_next_run() {
        let dir = dir();
        let ring = RingFile::create(&dir.0, "a", 4, keep()).unwrap();
        ring.set_start(2).unwrap();
        ring.write(2, b"cdef").unwrap();
        ring.set_end(6).unwrap();
        drop(ring);
        let (ring, start, end) = RingFile::open_existing(&dir.0, "a", 4, keep()).unwrap();
        assert_eq!((ring.capacity(), start, end), (4, 2, 6));
        let mut buf = [0u8; 4];
        ring.read(2, &mut buf).unwrap();
        assert_eq!(&buf, b"cdef", "read by opening it again");
        drop(ring);
        std::fs::write(dir.path("b"), b"not a log, not a log, not a log, not a log").unwrap();
        assert!(RingFile::open_existing(&dir.0, "b", 4, keep()).is_err());
        let gone = dir.path("c");
        drop(RingFile::create(&dir.0, "c", 4, Arc::new(AtomicBool::new(false))).unwrap());
        assert!(
            !gone.exists(),
            "a file nobody keeps is removed with its last handle"
        );
    }

    #[test]
    fn a_header_that_claims_what_the_file_does_not_hold_is_corrupt() {
        let dir = dir();
        let ring = RingFile::create(&dir.0, "a", 1 << 20, keep()).unwrap();
        ring.write(0, b"0123456789").unwrap();
        ring.set_end(10).unwrap();
        drop(ring);
        let corrupt = |name: &str| {
            let error = RingFile::open_existing(&dir.0, name, 1 << 20, keep()).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        };
        // Larger than this run allows.
        assert!(RingFile::open_existing(&dir.0, "a", 1 << 10, keep()).is_err());
        // A crafted header (right checksum): capacity and end 2^62 on an
        // 11-byte file.
        let ring = RingFile::deferred(&dir.0, "x", 1 << 62, keep());
        let header = ring.header_bytes(0, 1 << 62);
        std::fs::write(dir.path("b"), [&header[..], b"hello world"].concat()).unwrap();
        corrupt("b");
        let ring = RingFile::deferred(&dir.0, "x", 64, keep());
        let header = ring.header_bytes(0, 60);
        std::fs::write(dir.path("c"), [&header[..], b"short"].concat()).unwrap();
        corrupt("c");
        let mut garbage = std::fs::read(dir.path("a")).unwrap();
        garbage[20] ^= 1;
        std::fs::write(dir.path("d"), garbage).unwrap();
        corrupt("d");
    }
}
