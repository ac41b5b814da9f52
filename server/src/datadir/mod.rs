//! `--data-dir`: where the disk logs and the process records live.
//!
//! Per process `ID`: `ID.stdout` and `ID.stderr` (ring files, see
//! [`crate::retained::disk`], each created by its stream's first write)
//! and, with `--data-dir` given, `ID.json`, its record: the process object,
//! written at spawn and again at the exit (write to a temporary name, then
//! rename, so a reader finds one whole document). All are removed when the
//! process is forgotten. The private default is never read back, so it has
//! no records and no header upkeep: a spawn and an exit cost no file
//! operations there (each costs 25-250 us on ext4).
//!
//! Without `--data-dir` the server makes a private directory (mode 0700) in
//! the system's temporary directory and removes it when it exits cleanly.
//! Either way the server holds the directory's lock for its life
//! (`datadir/lock.rs`): a second server refuses it, and the cleanup of directories
//! killed servers left removes only unlocked ones. Every file is opened
//! through the directory's descriptor without following links (`retained/dir.rs`),
//! and an existing `--data-dir` writable by group or others is refused.
//! With `--data-dir` a clean exit keeps the files, and the next run reads
//! them back ([`DataDir::recover`]): the processes of the previous run are
//! listed as exited (reason `lost` for those that were still running) with
//! their output readable until the exited TTL. Nothing else of the old run
//! is trusted: no pid is signalled, nothing is resumed, and every record
//! and log header is validated (a corrupt log is reported once and its
//! bytes served as `dropped`). Logs are opened when read, so recovered
//! processes hold no descriptors at rest.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use tether_protocol::{ExitReason, ProcessInfo, ProcessStatus, StreamName};

use crate::config::Config;
use crate::retained::disk::RingFile;
use crate::retained::log::StreamLog;
use crate::retained::record::{read_record, Record, MAX_RECORD_BYTES};
use crate::retained::RetainedOutput;

mod lock;

pub use crate::retained::dir::DataDirError;
use crate::retained::dir::Dir;
use lock::DirLock;

/// The directory of disk logs and records.
#[derive(Debug)]
pub struct DataDir {
    dir: Arc<Dir>,
    /// Held for the server's life: no other server uses this directory,
    /// and no cleanup removes it.
    _lock: DirLock,
    /// Made by this run, removed at its clean exit.
    private: bool,
    /// Set at a clean exit with `--data-dir`: files outlive their handles.
    keep: Arc<AtomicBool>,
    /// The largest ring a log of this run may have: a log read back that
    /// claims more is corrupt.
    max_ring: u64,
}

/// The data directory as a handover carries it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedDataDir {
    pub path: std::path::PathBuf,
    pub private: bool,
}

/// A process of an earlier run, read back.
pub struct Recovered {
    /// Its process object, exited.
    pub info: ProcessInfo,
    /// Its streams, complete, on disk.
    pub logs: [StreamLog; 2],
    /// Its record, rewritten with `info`.
    pub record: Record,
    /// Disk bytes its files may hold.
    pub disk_bytes: u64,
    /// Its time index (`ID.times`), when it was written at its exit.
    pub times: Option<crate::retained::times::SavedTimes>,
}

impl DataDir {
    /// Opens `--data-dir` (creating it 0700 if missing), or makes the
    /// private default; either way locked for this server's life. None
    /// with `--memory-only`.
    pub fn open(config: &Config) -> Result<Option<Arc<DataDir>>, DataDirError> {
        if config.memory_only {
            return Ok(None);
        }
        let (dir, lock, private) = match &config.data_dir {
            Some(path) => {
                let dir = Dir::open(path, true)?;
                let lock = DirLock::take(&dir)?;
                (dir, lock, false)
            }
            None => {
                let parent = std::env::temp_dir();
                for removed in lock::remove_stale_private_dirs(&parent) {
                    tracing::info!(path = %removed.display(), "removed the data directory of a server that is gone");
                }
                let (dir, lock) = lock::make_private(&parent)?;
                (dir, lock, true)
            }
        };
        Ok(Some(Arc::new(DataDir {
            dir: Arc::new(dir),
            _lock: lock,
            private,
            keep: Arc::new(AtomicBool::new(false)),
            max_ring: RetainedOutput::reservation(
                usize::try_from(config.max_retain_bytes).unwrap_or(usize::MAX),
                tether_protocol::Overflow::Block,
                1,
            ),
        })))
    }

    /// A disk log's ring a handover carried, reopened in this directory.
    pub fn resume_ring(
        &self,
        carried: crate::retained::disk::CarriedRing,
    ) -> std::io::Result<RingFile> {
        RingFile::resumed(&self.dir, carried, self.keep.clone())
    }

    /// What a handover carries (issue 43): where it is, whether it is
    /// private, and its lock.
    pub fn carry(&self) -> std::io::Result<(CarriedDataDir, std::os::fd::OwnedFd)> {
        Ok((
            CarriedDataDir {
                path: self.path().to_path_buf(),
                private: self.private,
            },
            self._lock.carry()?,
        ))
    }

    /// The directory a handover carried, with its lock: the same files,
    /// nothing read back (the processes come with the state).
    pub fn adopt(
        carried: &CarriedDataDir,
        lock: std::os::fd::OwnedFd,
        config: &Config,
    ) -> Result<Arc<DataDir>, DataDirError> {
        let dir = Dir::open(&carried.path, false)?;
        let io = |error: std::io::Error| DataDirError::Io {
            path: carried.path.clone(),
            error,
        };
        Ok(Arc::new(DataDir {
            dir: Arc::new(dir),
            _lock: DirLock::adopt(lock).map_err(io)?,
            private: carried.private,
            keep: Arc::new(AtomicBool::new(false)),
            max_ring: RetainedOutput::reservation(
                usize::try_from(config.max_retain_bytes).unwrap_or(usize::MAX),
                tether_protocol::Overflow::Block,
                1,
            ),
        }))
    }

    /// Made by this run, never read back (no records, no `ID.times`).
    pub fn is_private(&self) -> bool {
        self.private
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn stream_name(id: &str, stream: StreamName) -> String {
        format!("{id}.{}", stream.as_str())
    }

    /// The logs of a new process: `streams` of them on disk (a PTY has
    /// one), each retaining `capacity` bytes in a file of `physical` bytes
    /// and its newest `window` bytes in memory. Each file is created by the
    /// stream's first write (see [`RingFile::deferred`]); one that cannot
    /// be leaves that stream memory-only, with the reason.
    pub fn logs(
        &self,
        id: &str,
        streams: usize,
        window: usize,
        capacity: u64,
        physical: u64,
    ) -> [StreamLog; 2] {
        StreamName::ALL.map(|stream| {
            if stream.index() >= streams {
                return StreamLog::memory(window);
            }
            let name = Self::stream_name(id, stream);
            let file = RingFile::deferred(&self.dir, &name, physical, self.keep.clone());
            // A private directory is never read back: no header upkeep.
            let file = if self.private { file.transient() } else { file };
            StreamLog::on_disk(window, capacity, file)
        })
    }

    /// The record of process `id` (written by [`Record::write`]), for a
    /// restart: only when the directory outlives this run (`--data-dir`).
    /// A private directory is never read back (a crashed run's is removed
    /// unread), so its processes cost no record writes at spawn and exit.
    pub fn record(&self, id: &str) -> Option<Record> {
        (!self.private).then(|| self.record_at(id))
    }

    fn record_at(&self, id: &str) -> Record {
        Record::new(&self.dir, id, self.keep.clone())
    }

    /// Reads back the processes an earlier run left here. Each record and
    /// log is validated and closed again: a recovered log is opened when it
    /// is read, so what is found costs no descriptors at rest. A record
    /// that cannot be read now (too few descriptors) keeps its files for a
    /// later run; only those of corrupt or missing records are removed.
    pub fn recover(&self) -> Vec<Recovered> {
        let mut found = Vec::new();
        let mut unreadable = Vec::new();
        let mut short_of_descriptors = false;
        for name in self.dir.names() {
            let Some(id) =
                split_name(&name).and_then(|(id, suffix)| (suffix == "json").then_some(id))
            else {
                continue;
            };
            match self.recover_one(id, &name, &mut short_of_descriptors) {
                Ok(recovered) => found.push(recovered),
                Err(e) => {
                    if e.kind() != io::ErrorKind::InvalidData && e.kind() != io::ErrorKind::NotFound
                    {
                        short_of_descriptors |= is_descriptor_shortage(&e);
                        unreadable.push(id.to_string());
                    }
                    tracing::warn!(record = %name, error = %e, "process record not read back");
                }
            }
        }
        if short_of_descriptors {
            tracing::error!(
                limit = descriptor_limit(),
                "too few file descriptors to read back every process of the data directory: \
                 their files are kept for a restart with a higher limit (ulimit -n)"
            );
        }
        self.remove_strays(&found, &unreadable);
        found
    }

    /// Removes files of processes with no readable record (a crash between
    /// creating a log and writing its record, a temporary record). Only
    /// names of the form `ID.stdout`, `ID.stderr`, `ID.json`, `ID.json.tmp`,
    /// and never those of a record that could not be read for want of a
    /// resource (`keep`).
    fn remove_strays(&self, found: &[Recovered], keep: &[String]) {
        for name in self.dir.names() {
            let Some((id, _)) = split_name(&name) else {
                continue;
            };
            let known = found.iter().any(|r| r.info.id == id) || keep.iter().any(|k| k == id);
            if !known {
                let _ = self.dir.remove(&name);
            }
        }
    }

    fn recover_one(&self, id: &str, name: &str, short: &mut bool) -> io::Result<Recovered> {
        let bytes = self.dir.read_bounded(name, MAX_RECORD_BYTES)?;
        let mut info = read_record(&bytes).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "no line is a process object")
        })?;
        if info.id != id {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "id mismatch"));
        }
        let mut disk_bytes = 0;
        let mut ends = [0u64; 2];
        let mut faults = Vec::new();
        let logs = StreamName::ALL.map(|stream| {
            let recorded = match stream {
                StreamName::Stdout => info.stdout_bytes,
                StreamName::Stderr => info.stderr_bytes,
            };
            let name = Self::stream_name(id, stream);
            let opened =
                RingFile::open_existing(&self.dir, &name, self.max_ring, self.keep.clone());
            let (file, start, end) = match opened {
                Ok(opened) => opened,
                Err(e) => {
                    // Nothing of it is served: its bytes are reported as
                    // dropped. The file stays until the process is
                    // forgotten (the record removes it then).
                    let total = if info.is_exited() { recorded } else { 0 };
                    ends[stream.index()] = total;
                    if e.kind() == io::ErrorKind::NotFound {
                        return StreamLog::lost(total, None);
                    }
                    *short |= is_descriptor_shortage(&e);
                    let fault = if e.kind() == io::ErrorKind::InvalidData {
                        format!("log corrupt: {e}")
                    } else {
                        format!("log not readable: {e}")
                    };
                    tracing::warn!(id, stream = stream.as_str(), error = %e, "log not read back");
                    faults.push(fault.clone());
                    return StreamLog::lost(total, Some(fault));
                }
            };
            disk_bytes += file.capacity();
            // An exited record knows the real total; bytes past what the
            // file holds (a disk fault) are reported as dropped.
            let total = if info.is_exited() {
                recorded.max(end)
            } else {
                end
            };
            ends[stream.index()] = total;
            StreamLog::recovered(file, start, end, total)
        });
        if !info.is_exited() {
            info = ProcessInfo {
                status: ProcessStatus::Exited,
                exit_code: None,
                signal: None,
                reason: Some(ExitReason::Lost),
                finished_at: Some(humantime::format_rfc3339_millis(SystemTime::now()).to_string()),
                duration_ms: None,
                stdout_bytes: ends[0],
                stderr_bytes: ends[1],
                output_incomplete: true,
                ..info
            };
        }
        let record = self.record_at(id);
        record.write(&info);
        // Said in this run's process object, not in the record: a log not
        // readable now (too few descriptors) may be read by the next run.
        if let Some(fault) = faults.into_iter().next() {
            info.output_incomplete = true;
            info.retention_error = Some(fault);
        }
        // Written at the exit: a process lost in a crash has none.
        let times_file = match self.dir.read_bounded(
            &format!("{id}.times"),
            crate::retained::times::MAX_SAVED_BYTES
                + crate::retained::input_log::MAX_SAVED_INPUT_BYTES,
        ) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => {
                tracing::warn!(%id, %error, "time index not read: its recording has no times");
                None
            }
        };
        let times_bytes = times_file.as_ref().map_or(0, |b| b.len() as u64);
        record.note_times_bytes(times_bytes);
        disk_bytes += times_bytes;
        // Never trusted past a fault: a corrupt index is said and ignored.
        let times = times_file.and_then(|bytes| match serde_json::from_slice(&bytes) {
            Ok(times) => Some(times),
            Err(error) => {
                tracing::warn!(%id, %error, "time index corrupt, ignored: its recording has no times");
                None
            }
        });
        Ok(Recovered {
            info,
            logs,
            record,
            disk_bytes,
            times,
        })
    }

    /// A clean exit: a private directory is removed with everything in it;
    /// `--data-dir` keeps its files for the next run.
    pub fn close(&self) {
        if self.private {
            if let Err(e) = std::fs::remove_dir_all(self.dir.path()) {
                tracing::warn!(path = %self.dir.path().display(), error = %e, "could not remove the data directory");
            }
        } else {
            self.keep.store(true, Ordering::SeqCst);
        }
    }
}

fn is_descriptor_shortage(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

fn descriptor_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(0, |(soft, _)| soft)
}

/// Process ids are 32 hex digits, after `NODE.` with `--node`: files
/// named otherwise in `--data-dir` are never read or removed.
fn is_process_id(id: &str) -> bool {
    tether_protocol::api::looks_like_process_id(id)
}

/// The process id and suffix of a file of ours (`ID.stdout`, `ID.stderr`,
/// `ID.json`, `ID.json.tmp`).
fn split_name(name: &str) -> Option<(&str, &str)> {
    ["json.tmp", "times.tmp", "stdout", "stderr", "json", "times"]
        .into_iter()
        .find_map(|suffix| {
            let id = name.strip_suffix(suffix)?.strip_suffix('.')?;
            is_process_id(id).then_some((id, suffix))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str, status: &str) -> ProcessInfo {
        serde_json::from_value(serde_json::json!({
            "id": id, "pid": 1, "argv": ["x"], "tty": false, "overflow": "drop",
            "status": status, "started_at": "2026-01-01T00:00:00.000Z", "exit_code": null,
            "signal": null, "reason": null, "finished_at": null, "duration_ms": null,
            "stdout_bytes": 0, "stderr_bytes": 0, "output_incomplete": false
        }))
        .unwrap()
    }

    /// A `--data-dir` in a fresh scratch path.
    fn scratch_config() -> (std::path::PathBuf, Config) {
        let path = std::env::temp_dir().join(format!("tether-datadir-{}", uuid::Uuid::new_v4()));
        let mut config = Config::defaults();
        config.data_dir = Some(path.clone());
        (path, config)
    }

    #[test]
    fn recovery_reads_back_records_and_logs_and_touches_nothing_else() {
        let (path, config) = scratch_config();
        let dir = DataDir::open(&config).unwrap().unwrap();
        let id = uuid::Uuid::new_v4().simple().to_string();
        let [mut stdout, _] = dir.logs(&id, 2, 4, 64, 64);
        if let Some(write) = stdout.push(b"hello") {
            let outcome = write.perform(b"hello");
            stdout.written(&write, outcome);
        }
        let record = dir.record_at(&id);
        record.write(&info(&id, "running"));
        // What a crash leaves: files nobody removed.
        dir.close();
        drop((stdout, record));
        // Corrupt: reported, served as dropped, removed only with its
        // process.
        let corrupt = uuid::Uuid::new_v4().simple().to_string();
        let mut record = info(&corrupt, "exited");
        record.stdout_bytes = 7;
        std::fs::write(
            path.join(format!("{corrupt}.json")),
            serde_json::to_vec(&record).unwrap(),
        )
        .unwrap();
        std::fs::write(path.join(format!("{corrupt}.stdout")), vec![0xee; 4096]).unwrap();
        let stray = format!("node-1.{}", uuid::Uuid::new_v4().simple());
        let error = DataDir::open(&config).unwrap_err().to_string();
        assert!(error.contains("in use by another tetherd"), "{error}");
        drop(dir);
        std::fs::write(path.join(format!("{stray}.stdout")), b"half made").unwrap();
        std::fs::write(path.join("notes.json"), b"{}").unwrap();

        let dir = DataDir::open(&config).unwrap().unwrap();
        let found = dir.recover();
        assert_eq!(found.len(), 2);
        let bad = found.iter().find(|r| r.info.id == corrupt).unwrap();
        let fault = bad.logs[0].fault().unwrap_or_default();
        assert!(fault.starts_with("log corrupt"), "{fault}");
        assert_eq!(bad.logs[0].end(), 7);
        assert!(path.join(format!("{corrupt}.stdout")).exists());
        let recovered = found.iter().find(|r| r.info.id == id).unwrap();
        assert_eq!(recovered.info.reason, Some(ExitReason::Lost));
        assert_eq!(recovered.info.stdout_bytes, 5);
        assert!(recovered.info.is_exited());
        assert!(!path.join(format!("{stray}.stdout")).exists(), "strays go");
        assert!(path.join("notes.json").exists(), "what is not ours stays");
        drop(found);
        assert!(
            !path.join(format!("{id}.stdout")).exists(),
            "forgotten: removed"
        );
        assert!(!path.join(format!("{corrupt}.stdout")).exists());
        std::fs::remove_dir_all(&path).unwrap();
    }

    /// The exit is appended to the spawn's record as a second line; a
    /// restart reads the last whole line, and one torn by a crash in the
    /// middle of its write leaves the spawn's (the process is `lost`).
    #[test]
    fn a_restart_reads_the_exit_line_and_a_torn_one_leaves_the_spawns() {
        let (path, config) = scratch_config();
        let dir = DataDir::open(&config).unwrap().unwrap();
        let [whole, torn] = [(); 2].map(|()| uuid::Uuid::new_v4().simple().to_string());
        for id in [&whole, &torn] {
            let record = dir.record_at(id);
            record.write(&info(id, "running"));
            let mut exited = info(id, "exited");
            exited.exit_code = Some(3);
            exited.reason = Some(ExitReason::Exit);
            record.append(&exited);
            std::mem::forget(record); // what a crash leaves
        }
        let file = path.join(format!("{torn}.json"));
        let lines = std::fs::read(&file).unwrap();
        assert_eq!(
            lines.iter().filter(|&&b| b == b'\n').count(),
            1,
            "two lines"
        );
        std::fs::write(&file, &lines[..lines.len() - 9]).unwrap();
        dir.close();
        drop(dir);

        let dir = DataDir::open(&config).unwrap().unwrap();
        let found = dir.recover();
        let reason = |id: &str| {
            let info = &found.iter().find(|r| r.info.id == id).unwrap().info;
            (info.reason, info.exit_code)
        };
        assert_eq!(reason(&whole), (Some(ExitReason::Exit), Some(3)));
        assert_eq!(reason(&torn), (Some(ExitReason::Lost), None));
        drop(found);
        std::fs::remove_dir_all(&path).unwrap();
    }
}
