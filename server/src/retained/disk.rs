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

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

const MAGIC: &[u8; 8] = b"TTHRLOG1";
/// Header size; the ring's bytes follow it.
pub const HEADER: u64 = 32;

/// One stream's ring file.
#[derive(Debug)]
pub struct RingFile {
    /// Opened at the first write of a [`RingFile::deferred`] ring: creating
    /// a file costs 25-250 us on ext4, which a process that prints nothing
    /// (or a spawn waiting for its answer) should not pay.
    file: OnceLock<File>,
    path: PathBuf,
    capacity: u64,
    /// Keeps the header's retained range current for a restart. Off for a
    /// private directory, which no restart reads: two `pwrite`s fewer per
    /// append.
    durable: bool,
    /// Set when the server shuts down cleanly with files meant to outlive
    /// it (`--data-dir` given); otherwise the file is removed on drop, when
    /// the process is forgotten and no reader holds it any more.
    keep: Arc<AtomicBool>,
}

impl Drop for RingFile {
    fn drop(&mut self) {
        if self.file.get().is_some() && !self.keep.load(Ordering::SeqCst) {
            let _ = std::fs::remove_file(&self.path);
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

impl RingFile {
    /// Creates a new ring file (mode 0600; it must not exist) of `capacity`
    /// data bytes. The file stays sparse until written.
    pub fn create(path: &Path, capacity: u64, keep: Arc<AtomicBool>) -> io::Result<RingFile> {
        let ring = RingFile::deferred(path, capacity, keep);
        ring.file()?;
        Ok(ring)
    }

    /// A ring file at `path` that is created (as by [`RingFile::create`])
    /// by its first write, so that a stream nothing is written to never
    /// costs a file. An error creating it is that write's error.
    pub fn deferred(path: &Path, capacity: u64, keep: Arc<AtomicBool>) -> RingFile {
        RingFile {
            file: OnceLock::new(),
            path: path.to_path_buf(),
            capacity: capacity.max(1),
            durable: true,
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
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&self.path)?;
        let mut header = [0u8; HEADER as usize];
        header[..8].copy_from_slice(MAGIC);
        header[8..16].copy_from_slice(&self.capacity.to_le_bytes());
        if let Err(e) = file.write_all_at(&header, 0) {
            let _ = std::fs::remove_file(&self.path);
            return Err(e);
        }
        Ok(self.file.get_or_init(|| file))
    }

    /// Opens a ring file left by an earlier run; returns it with its
    /// retained range `(start, end)`.
    pub fn open_existing(path: &Path, keep: Arc<AtomicBool>) -> io::Result<(RingFile, u64, u64)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)?;
        let mut header = [0u8; HEADER as usize];
        file.read_exact_at(&mut header, 0)?;
        let word = |i: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&header[i..i + 8]);
            u64::from_le_bytes(bytes)
        };
        let (capacity, start, end) = (word(8), word(16), word(24));
        if &header[..8] != MAGIC || capacity == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not a tether log", path.display()),
            ));
        }
        // Never claim more than the ring can hold (a start past the end,
        // from a crash between raising it and writing, claims nothing).
        let start = start.max(end.saturating_sub(capacity)).min(end);
        let ring = RingFile {
            file: OnceLock::from(file),
            path: path.to_path_buf(),
            capacity,
            durable: true,
            keep,
        };
        Ok((ring, start, end))
    }

    /// Data bytes the ring holds at most.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
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
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        // Never creates it: nothing was written, so nothing can be read.
        let file = self.file.get().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "nothing written to the log yet")
        })?;
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
        if !self.durable {
            return Ok(());
        }
        self.file()?.write_all_at(&start.to_le_bytes(), 16)
    }

    /// Records the end of what is in the file (after it was written).
    pub fn set_end(&self, end: u64) -> io::Result<()> {
        if !self.durable {
            return Ok(());
        }
        self.file()?.write_all_at(&end.to_le_bytes(), 24)
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

/// A process record (`ID.json`, see `crate::datadir`), removed on drop unless the directory is
/// being kept.
#[derive(Debug)]
pub struct Record {
    path: PathBuf,
    keep: Arc<AtomicBool>,
}

impl Record {
    /// The record at `path`, kept past its drop while `keep` is set.
    pub fn new(path: PathBuf, keep: Arc<AtomicBool>) -> Record {
        Record { path, keep }
    }

    /// Writes the process object (whole, by rename). A failure is logged:
    /// the record only matters to a restart.
    pub fn write(&self, info: &tether_protocol::ProcessInfo) {
        let temporary = self.path.with_extension("json.tmp");
        let written = serde_json::to_vec(info)
            .map_err(io::Error::other)
            .and_then(|body| {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&temporary)?
                    .write_all(&body)
            })
            .and_then(|()| std::fs::rename(&temporary, &self.path));
        if let Err(e) = written {
            tracing::warn!(path = %self.path.display(), error = %e, "process record not written");
            let _ = std::fs::remove_file(&temporary);
        }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if !self.keep.load(Ordering::SeqCst) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tether-disk-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    fn keep() -> Arc<AtomicBool> {
        Arc::new(AtomicBool::new(true))
    }

    #[test]
    fn bytes_wrap_around_the_ring_at_their_absolute_offsets() {
        let dir = dir();
        let ring = RingFile::create(&dir.join("a"), 8, keep()).unwrap();
        ring.write(0, b"abcdef").unwrap();
        ring.write(6, b"ghij").unwrap(); // i, j overwrite a, b
        let mut buf = [0u8; 8];
        ring.read(2, &mut buf).unwrap();
        assert_eq!(&buf, b"cdefghij");
        let len = std::fs::metadata(dir.join("a")).unwrap().len();
        assert_eq!(len, HEADER + 8, "the file never outgrows its capacity");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_deferred_ring_is_created_by_its_first_write_only() {
        let dir = dir();
        let path = dir.join("a");
        let ring = RingFile::deferred(&path, 8, Arc::new(AtomicBool::new(false)));
        assert!(!path.exists(), "no file before anything is written");
        assert!(ring.read(0, &mut [0u8; 1]).is_err());
        ring.write(0, b"abc").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), HEADER + 3);
        drop(ring);
        assert!(!path.exists());
        let unused = RingFile::deferred(&path, 8, Arc::new(AtomicBool::new(false)));
        std::fs::write(&path, b"someone else's").unwrap();
        drop(unused);
        assert!(path.exists(), "a ring that never wrote removes nothing");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_header_survives_for_the_next_run() {
        let dir = dir();
        let path = dir.join("a");
        let ring = RingFile::create(&path, 4, keep()).unwrap();
        ring.set_start(2).unwrap();
        ring.write(2, b"cdef").unwrap();
        ring.set_end(6).unwrap();
        drop(ring);
        let (ring, start, end) = RingFile::open_existing(&path, keep()).unwrap();
        assert_eq!((ring.capacity(), start, end), (4, 2, 6));
        std::fs::write(dir.join("b"), b"not a log, not a log, not a log, no").unwrap();
        assert!(RingFile::open_existing(&dir.join("b"), keep()).is_err());
        let gone = dir.join("c");
        drop(RingFile::create(&gone, 4, Arc::new(AtomicBool::new(false))).unwrap());
        assert!(
            !gone.exists(),
            "a file nobody keeps is removed with its last handle"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
