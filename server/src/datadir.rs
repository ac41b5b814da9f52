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
//! With `--data-dir` a clean exit keeps the files, and the next run reads
//! them back ([`DataDir::recover`]): the processes of the previous run are
//! listed as exited (reason `lost` for those that were still running) with
//! their output readable until the exited TTL. Nothing else of the old run
//! is trusted: no pid is signalled, nothing is resumed.

use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use tether_protocol::{ExitReason, ProcessInfo, ProcessStatus, StreamName};

use crate::config::Config;
use crate::retained::disk::{Record, RingFile};
use crate::retained::log::StreamLog;

/// The directory of disk logs and records.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    /// Made by this run, removed at its clean exit.
    private: bool,
    /// Set at a clean exit with `--data-dir`: files outlive their handles.
    keep: Arc<AtomicBool>,
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
}

impl DataDir {
    /// Opens `--data-dir` (creating it 0700 if missing), or makes the
    /// private default. None with `--memory-only`.
    pub fn open(config: &Config) -> io::Result<Option<Arc<DataDir>>> {
        if config.memory_only {
            return Ok(None);
        }
        let (path, private) = match &config.data_dir {
            Some(path) => {
                DirBuilder::new().recursive(true).mode(0o700).create(path)?;
                (path.clone(), false)
            }
            None => {
                remove_stale_private_dirs();
                let path = std::env::temp_dir().join(format!(
                    "tetherd-{}-{}",
                    std::process::id(),
                    uuid::Uuid::new_v4().simple()
                ));
                DirBuilder::new().mode(0o700).create(&path)?;
                (path, true)
            }
        };
        Ok(Some(Arc::new(DataDir {
            path,
            private,
            keep: Arc::new(AtomicBool::new(false)),
        })))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn stream_path(&self, id: &str, stream: StreamName) -> PathBuf {
        self.path.join(format!("{id}.{}", stream.as_str()))
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
            let path = self.stream_path(id, stream);
            let file = RingFile::deferred(&path, physical, self.keep.clone());
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
        Record::new(self.path.join(format!("{id}.json")), self.keep.clone())
    }

    /// Reads back the processes an earlier run left here.
    pub fn recover(&self) -> Vec<Recovered> {
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(id) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(split_name)
                .and_then(|(id, suffix)| (suffix == "json").then_some(id))
            else {
                continue;
            };
            match self.recover_one(id, &path) {
                Ok(recovered) => found.push(recovered),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable record ignored")
                }
            }
        }
        self.remove_strays(&found);
        found
    }

    /// Removes files of processes with no readable record (a crash between
    /// creating a log and writing its record, a temporary record). Only
    /// names of the form `ID.stdout`, `ID.stderr`, `ID.json`, `ID.json.tmp`.
    fn remove_strays(&self, found: &[Recovered]) {
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some((id, _)) = split_name(name) else {
                continue;
            };
            if !found.iter().any(|r| r.info.id == id) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    fn recover_one(&self, id: &str, path: &Path) -> io::Result<Recovered> {
        let mut info: ProcessInfo = serde_json::from_slice(&std::fs::read(path)?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if info.id != id {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "id mismatch"));
        }
        let mut disk_bytes = 0;
        let mut ends = [0u64; 2];
        let logs = StreamName::ALL.map(|stream| {
            let opened = RingFile::open_existing(&self.stream_path(id, stream), self.keep.clone());
            let Ok((file, start, end)) = opened else {
                let mut empty = StreamLog::memory(0);
                empty.complete();
                return empty;
            };
            disk_bytes += file.capacity();
            // An exited record knows the real total; bytes past what the
            // file holds (a disk fault) are reported as dropped.
            let recorded = match stream {
                StreamName::Stdout => info.stdout_bytes,
                StreamName::Stderr => info.stderr_bytes,
            };
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
        Ok(Recovered {
            info,
            logs,
            record,
            disk_bytes,
        })
    }

    /// A clean exit: a private directory is removed with everything in it;
    /// `--data-dir` keeps its files for the next run.
    pub fn close(&self) {
        if self.private {
            if let Err(e) = std::fs::remove_dir_all(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "could not remove the data directory");
            }
        } else {
            self.keep.store(true, Ordering::SeqCst);
        }
    }
}

/// Process ids are 32 hex digits, after `NODE.` with `--node`: files
/// named otherwise in `--data-dir` are never read or removed.
fn is_process_id(id: &str) -> bool {
    let random = id.rsplit_once('.').map_or(id, |(_, random)| random);
    random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The process id and suffix of a file of ours (`ID.stdout`, `ID.stderr`,
/// `ID.json`, `ID.json.tmp`).
fn split_name(name: &str) -> Option<(&str, &str)> {
    ["json.tmp", "stdout", "stderr", "json"]
        .into_iter()
        .find_map(|suffix| {
            let id = name.strip_suffix(suffix)?.strip_suffix('.')?;
            is_process_id(id).then_some((id, suffix))
        })
}

/// A server killed (SIGKILL, a crash) cannot remove its private
/// directory: the next one removes those whose server is gone, recognised
/// by their exact name, `tetherd-PID-` and 32 hex digits.
fn remove_stale_private_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("tetherd-")) else {
            continue;
        };
        let Some((pid, suffix)) = rest.split_once('-') else {
            continue;
        };
        let ours = pid.parse::<u32>().is_ok()
            && suffix.len() == 32
            && suffix.bytes().all(|b| b.is_ascii_hexdigit());
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
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

    #[test]
    fn recovery_reads_back_records_and_logs_and_touches_nothing_else() {
        let path = std::env::temp_dir().join(format!("tether-datadir-{}", uuid::Uuid::new_v4()));
        let mut config = Config::defaults();
        config.data_dir = Some(path.clone());
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
        let stray = format!("node-1.{}", uuid::Uuid::new_v4().simple());
        std::fs::write(path.join(format!("{stray}.stdout")), b"half made").unwrap();
        std::fs::write(path.join("notes.json"), b"{}").unwrap();

        let dir = DataDir::open(&config).unwrap().unwrap();
        let found = dir.recover();
        assert_eq!(found.len(), 1);
        let recovered = &found[0];
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
        std::fs::remove_dir_all(&path).unwrap();
    }
}
