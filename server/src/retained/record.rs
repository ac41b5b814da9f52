//! A process's record beside its logs (`ID.json`, its time index
//! `ID.times`), for a restart (`--data-dir`): written at the spawn, at the
//! exit and now and then while it runs; removed with its process.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::dir::Dir;

/// Largest record (`ID.json`) read back: two lines (the process object at
/// its spawn and at its exit), each a few KiB.
pub const MAX_RECORD_BYTES: u64 = 2 << 20;

/// A process record (`ID.json`, see `crate::datadir`). Dropped (the process
/// is forgotten) unless the directory is being kept, it removes the record
/// and the process's logs (`ID.stdout`, `ID.stderr`): a log that could not
/// be read back is removed with its process, not before.
#[derive(Debug)]
pub struct Record {
    dir: Arc<Dir>,
    id: String,
    keep: Arc<AtomicBool>,
    /// Bytes of `ID.times` as last written (or read back): counted in the
    /// process's disk share once it has exited.
    times_bytes: AtomicU64,
    /// The output (bytes written and sizes) the last `ID.times` covered.
    times_saved_at: AtomicU64,
}

impl Record {
    /// The record of process `id` in `dir`, kept past its drop while
    /// `keep` is set.
    pub fn new(dir: &Arc<Dir>, id: &str, keep: Arc<AtomicBool>) -> Record {
        Record {
            dir: dir.clone(),
            id: id.to_string(),
            keep,
            times_bytes: AtomicU64::new(0),
            times_saved_at: AtomicU64::new(0),
        }
    }

    fn name(&self) -> String {
        format!("{}.json", self.id)
    }

    /// Writes the process object at the spawn: the record, whole, by
    /// rename. A failure is logged: the record only matters to a restart.
    pub fn write(&self, info: &tether_protocol::ProcessInfo) {
        let written = serde_json::to_vec(info)
            .map_err(io::Error::other)
            .and_then(|body| self.dir.replace(&self.name(), &body));
        if let Err(e) = written {
            tracing::warn!(id = %self.id, error = %e, "process record not written");
        }
    }

    /// Appends the process object at the exit as the record's next line,
    /// in one write: no new file and no rename, which on ext4 would write
    /// the new file back to the disk at the rename (it replaces one), on
    /// the exit's path. A restart reads the last whole line
    /// ([`read_record`]); a line torn by a crash leaves the spawn's.
    /// Without a record to append to (its write failed), written whole.
    pub fn append(&self, info: &tether_protocol::ProcessInfo) {
        let name = self.name();
        let written = serde_json::to_vec(info)
            .map_err(io::Error::other)
            .and_then(|body| {
                let line = [&b"\n"[..], &body].concat();
                self.dir.append_existing(&name, &line).or_else(|e| {
                    tracing::debug!(id = %self.id, error = %e, "process record not appended to: written whole");
                    self.dir.replace(&name, &body)
                })
            });
        if let Err(e) = written {
            tracing::warn!(id = %self.id, error = %e, "process record not written");
        }
    }
}

impl Record {
    /// Writes the time index beside the record (`ID.times`), whole, by
    /// rename. A failure is logged: only a restart's recording reads it.
    pub fn write_times(&self, saved: &super::times::SavedTimes) {
        let written = serde_json::to_vec(saved)
            .map_err(io::Error::other)
            .and_then(|body| {
                self.dir.replace(&format!("{}.times", self.id), &body)?;
                Ok(body.len() as u64)
            });
        match written {
            Ok(bytes) => self.times_bytes.store(bytes, Ordering::Relaxed),
            Err(e) => tracing::warn!(id = %self.id, error = %e, "time index not written"),
        }
    }

    /// What `ID.times` takes on disk (0 until written).
    pub fn times_bytes(&self) -> u64 {
        self.times_bytes.load(Ordering::Relaxed)
    }

    /// What the last `ID.times` covered (see `RetainedOutput::save_times`).
    pub fn times_saved_at(&self) -> u64 {
        self.times_saved_at.load(Ordering::Relaxed)
    }

    /// Notes what the `ID.times` just written covered.
    pub fn note_times_saved_at(&self, written: u64) {
        self.times_saved_at.store(written, Ordering::Relaxed);
    }

    /// The size of an `ID.times` read back after a restart.
    pub fn note_times_bytes(&self, bytes: u64) {
        self.times_bytes.store(bytes, Ordering::Relaxed);
    }
}

/// The process object a record holds: its last line that reads as one
/// (compact JSON has no raw newline). A crash in the middle of the exit's
/// append leaves a torn last line, and the spawn's line is the answer.
pub fn read_record(record: &[u8]) -> Option<tether_protocol::ProcessInfo> {
    record
        .split(|&b| b == b'\n')
        .rev()
        .find_map(|line| serde_json::from_slice(line).ok())
}

impl Drop for Record {
    fn drop(&mut self) {
        if !self.keep.load(Ordering::SeqCst) {
            for suffix in ["json", "stdout", "stderr", "times"] {
                let _ = self.dir.remove(&format!("{}.{suffix}", self.id));
            }
        }
    }
}
