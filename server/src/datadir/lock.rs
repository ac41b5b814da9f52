//! A server owns its data directory by an advisory lock (`flock` on
//! `tetherd.lock` inside it), held for the server's life: the kernel drops
//! it when the server dies, however it dies. Not by a pid: a pid means
//! nothing in another pid namespace (a container, `unshare --pid`) sharing
//! the same `/tmp`, where `/proc/PID` may be missing for a live server or
//! present for an unrelated process.
//!
//! - A second server given the same `--data-dir` cannot take the lock and
//!   refuses to start, naming the holder (what it wrote in the lock file).
//! - The cleanup of private directories a killed server left behind removes
//!   only those whose lock it can take, holding it while it removes.
//! - A private directory is made under a hidden staging name, locked, and
//!   only then renamed to `tetherd-PID-HEX`: a cleanup never sees one of
//!   ours without its lock held. A directory of that name with no lock file
//!   (an older tetherd's) is left alone.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::retained::dir::{DataDirError, Dir};

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "tetherd.lock";
/// Prefix of a private directory's name (`tetherd-PID-HEX`).
const PRIVATE_PREFIX: &str = "tetherd-";
/// Prefix of a private directory being made.
const STAGING_PREFIX: &str = ".tetherd-staging-";
/// Most of the holder's description read back for a message.
const HOLDER_MAX: u64 = 512;

/// The lock on a data directory, held until dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: Flock<File>,
}

impl DirLock {
    /// A second descriptor of the locked file, for a handover (the lock
    /// belongs to the open file, which the exec keeps).
    pub fn carry(&self) -> io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        self._file.as_fd().try_clone_to_owned()
    }

    /// The lock a handover carried: the same open file, so taking it again
    /// cannot fail on the old binary's hold.
    pub fn adopt(fd: std::os::fd::OwnedFd) -> io::Result<DirLock> {
        Flock::lock(File::from(fd), FlockArg::LockExclusiveNonblock)
            .map(|file| DirLock { _file: file })
            .map_err(|(_, errno)| io::Error::from(errno))
    }

    /// Takes the lock of `dir` without waiting, and writes who holds it.
    pub fn take(dir: &Dir) -> Result<DirLock, DataDirError> {
        let io = |error: io::Error| DataDirError::Io {
            path: dir.path().to_path_buf(),
            error,
        };
        let file = match dir.open_existing(LOCK_FILE, true) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => dir.create_new(LOCK_FILE),
            other => other,
        }
        .map_err(io)?;
        let mut locked = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                let mut holder = String::new();
                let _ = (&mut file).take(HOLDER_MAX).read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(DataDirError::InUse {
                    path: dir.path().to_path_buf(),
                    holder: if holder.is_empty() {
                        "holder unknown".into()
                    } else {
                        holder.to_string()
                    },
                });
            }
            Err((_, e)) => return Err(io(e.into())),
        };
        let described = locked
            .set_len(0)
            .and_then(|()| locked.rewind())
            .and_then(|()| writeln!(locked, "{}", holder_description()));
        described.map_err(io)?;
        Ok(DirLock { _file: locked })
    }

    /// Takes the lock of `dir` if nobody holds it; None if someone does,
    /// or if `dir` has no lock file (not ours to judge).
    fn try_existing(dir: &Dir) -> Option<Flock<File>> {
        let file = dir.open_existing(LOCK_FILE, false).ok()?;
        Flock::lock(file, FlockArg::LockExclusiveNonblock).ok()
    }
}

/// `pid N on HOST, started TIME`: enough for an operator to find the
/// holder (the pid is that of the holder's own pid namespace).
fn holder_description() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!(
        "pid {} on {}, started {}",
        std::process::id(),
        host.trim(),
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    )
}

/// Makes a new private directory in `parent`: created 0700 under a staging
/// name, locked, then renamed to `tetherd-PID-HEX`.
pub fn make_private(parent: &Path) -> Result<(Dir, DirLock), DataDirError> {
    let random = uuid::Uuid::new_v4().simple();
    let staging = parent.join(format!("{STAGING_PREFIX}{random}"));
    let path = parent.join(format!("{PRIVATE_PREFIX}{}-{random}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(|error| DataDirError::Io {
            path: staging.clone(),
            error,
        })?;
    let dir = Dir::open(&staging, false)?;
    let lock = DirLock::take(&dir)?;
    std::fs::rename(&staging, &path).map_err(|error| DataDirError::Io {
        path: path.clone(),
        error,
    })?;
    Ok((dir.moved_to(path), lock))
}

/// Removes the private directories (and staging ones) in `parent` that a
/// server killed (SIGKILL, a crash) could not remove: those whose lock can
/// be taken, recognised by their exact name. Returns what it removed.
pub fn remove_stale_private_dirs(parent: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_private_name(name) {
            continue;
        }
        let path = entry.path();
        // Not a private directory of this user (or a link): not ours.
        let Ok(dir) = Dir::open(&path, false) else {
            continue;
        };
        let Some(_held) = DirLock::try_existing(&dir) else {
            continue;
        };
        if std::fs::remove_dir_all(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// `tetherd-PID-HEX32` or `.tetherd-staging-HEX32`.
fn is_private_name(name: &str) -> bool {
    let hex32 = |s: &str| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if let Some(random) = name.strip_prefix(STAGING_PREFIX) {
        return hex32(random);
    }
    let Some(rest) = name.strip_prefix(PRIVATE_PREFIX) else {
        return false;
    };
    rest.split_once('-')
        .is_some_and(|(pid, random)| pid.parse::<u32>().is_ok() && hex32(random))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_locked_directory_is_refused_and_kept_and_an_unlocked_one_is_cleaned() {
        let parent = std::env::temp_dir().join(format!("tether-lock-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&parent).unwrap();
        let (live, lock) = make_private(&parent).unwrap();
        let (dead, dead_lock) = make_private(&parent).unwrap();
        assert!(live
            .path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("tetherd-"));
        let again = Dir::open(live.path(), false).unwrap();
        let error = DirLock::take(&again).unwrap_err().to_string();
        assert!(error.contains("in use by another tetherd"), "{error}");
        assert!(
            error.contains(&format!("pid {}", std::process::id())),
            "{error}"
        );
        drop(dead_lock);
        // An older server's directory, with no lock file: left alone.
        let old = parent.join(format!("tetherd-1-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&old).unwrap();
        let removed = remove_stale_private_dirs(&parent);
        assert_eq!(removed, vec![dead.path().to_path_buf()]);
        assert!(live.path().exists() && old.exists());
        drop(lock);
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
