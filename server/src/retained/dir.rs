//! The data directory (see `crate::datadir`) as a directory descriptor: every file in it is
//! opened, created, replaced and removed relative to that descriptor
//! (`openat`, `renameat`, `unlinkat`) with `O_NOFOLLOW`, so a link planted
//! where a log or record goes is never followed, and a path swapped after
//! the start cannot redirect a write.
//!
//! The directory itself must be private: owned by this user and writable
//! by nobody else. Anyone who can write to it can plant or replace its
//! files, and a server running as root would then write where they chose.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// Why a data directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    /// Creating or opening it failed.
    #[error("data directory {path}: {error}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// What the OS said.
        error: io::Error,
    },
    /// A symbolic link or something other than a directory.
    #[error("data directory {0} is not a directory (a symbolic link is not followed): give the real directory")]
    NotADirectory(PathBuf),
    /// Writable by group or others: anyone could plant files in it.
    #[error(
        "data directory {path} is writable by group or others (mode {mode:04o}): \
         run `chmod go-w {path}` (or `chmod 700`), or choose another directory"
    )]
    NotPrivate {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Owned by another user.
    #[error(
        "data directory {path} is owned by uid {owner}, not by this server's uid {uid}: \
         choose a directory of your own"
    )]
    NotOwned {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        uid: u32,
    },
    /// Another server holds the directory's lock.
    #[error("data directory {path} is in use by another tetherd ({holder}): give each server its own --data-dir")]
    InUse {
        /// The directory.
        path: PathBuf,
        /// What the holder wrote in the lock file (pid, host, start).
        holder: String,
    },
}

/// An open, private directory.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

const FILE_MODE: u32 = 0o600;

impl Dir {
    /// Opens `path` (created 0700 with missing parents if `create`),
    /// without following a link at its last component, and checks that it
    /// is a directory owned by this user and writable by nobody else.
    pub fn open(path: &Path, create: bool) -> Result<Dir, DataDirError> {
        let io = |error: io::Error| DataDirError::Io {
            path: path.to_path_buf(),
            error,
        };
        if create {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(io)?;
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match nix::fcntl::open(path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOTDIR) | Err(Errno::ELOOP) => {
                return Err(DataDirError::NotADirectory(path.to_path_buf()))
            }
            Err(e) => return Err(io(e.into())),
        };
        let dir = Dir {
            fd,
            path: path.to_path_buf(),
        };
        dir.check_private()?;
        Ok(dir)
    }

    fn check_private(&self) -> Result<(), DataDirError> {
        let stat = fstat(&self.fd).map_err(|e| DataDirError::Io {
            path: self.path.clone(),
            error: e.into(),
        })?;
        let uid = nix::unistd::geteuid().as_raw();
        if stat.st_uid != uid {
            return Err(DataDirError::NotOwned {
                path: self.path.clone(),
                owner: stat.st_uid,
                uid,
            });
        }
        let mode = stat.st_mode & 0o7777;
        if mode & 0o022 != 0 {
            return Err(DataDirError::NotPrivate {
                path: self.path.clone(),
                mode,
            });
        }
        Ok(())
    }

    /// The same directory, renamed to `path` (the descriptor follows it).
    pub fn moved_to(self, path: PathBuf) -> Dir {
        Dir { path, ..self }
    }

    /// Where it is (for messages and listings).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates `name`, which must not exist (`O_EXCL`), mode 0600.
    pub fn create_new(&self, name: &str) -> io::Result<File> {
        let flags =
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&self.fd, name, flags, Mode::from_bits_truncate(FILE_MODE))?;
        Ok(File::from(fd))
    }

    /// Opens the existing regular file `name` (never a link, a FIFO or a
    /// device: `O_NONBLOCK` so that opening a planted FIFO cannot block).
    pub fn open_existing(&self, name: &str, write: bool) -> io::Result<File> {
        let access = if write {
            OFlag::O_RDWR
        } else {
            OFlag::O_RDONLY
        };
        self.open_regular(name, access)
    }

    /// Appends `bytes` to the existing regular file `name` in one write
    /// (`O_APPEND`, never through a link).
    pub fn append_existing(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.open_regular(name, OFlag::O_WRONLY | OFlag::O_APPEND)?
            .write_all(bytes)
    }

    /// Opens `name` with `access` if it is a regular file.
    fn open_regular(&self, name: &str, access: OFlag) -> io::Result<File> {
        let flags = access | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let file = File::from(openat(&self.fd, name, flags, Mode::empty())?);
        let stat = fstat(file.as_fd())?;
        if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name} is not a regular file"),
            ));
        }
        Ok(file)
    }

    /// Reads the regular file `name` whole, refusing one longer than `max`.
    pub fn read_bounded(&self, name: &str, max: u64) -> io::Result<Vec<u8>> {
        let file = self.open_existing(name, false)?;
        let len = file.metadata()?.len();
        if len > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name} is {len} bytes, more than the {max} a record may be"),
            ));
        }
        let mut bytes = Vec::with_capacity(len as usize);
        file.take(max + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name} grew past {max} bytes while read"),
            ));
        }
        Ok(bytes)
    }

    /// Replaces `name` with `bytes` atomically: written to `name.tmp`
    /// (created new: a leftover of a crash is removed first, never opened),
    /// then renamed over `name`.
    pub fn replace(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let temporary = format!("{name}.tmp");
        let mut file = match self.create_new(&temporary) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                self.remove(&temporary)?;
                self.create_new(&temporary)?
            }
            other => other?,
        };
        let written = file
            .write_all(bytes)
            .and_then(|()| Ok(renameat(&self.fd, temporary.as_str(), &self.fd, name)?));
        if written.is_err() {
            let _ = self.remove(&temporary);
        }
        written
    }

    /// Removes the file `name` (a link is removed, not its target).
    pub fn remove(&self, name: &str) -> io::Result<()> {
        Ok(unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir)?)
    }

    /// The names of the entries (listed through the path: only names are
    /// taken from the listing, every file is opened through the descriptor).
    pub fn names(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    }

    /// The device and inode of an open file (to check that a file opened
    /// again is the one validated before).
    pub fn identity(file: &File) -> io::Result<(u64, u64)> {
        let meta = file.metadata()?;
        Ok((meta.dev(), meta.ino()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch() -> PathBuf {
        std::env::temp_dir().join(format!("tether-dir-{}", uuid::Uuid::new_v4().simple()))
    }

    #[test]
    fn a_directory_others_can_write_to_is_refused_with_the_fix() {
        let path = scratch();
        let dir = Dir::open(&path, true).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "created private");
        drop(dir);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = Dir::open(&path, true).unwrap_err().to_string();
        assert!(error.contains("chmod go-w"), "{error}");
        assert!(error.contains("0777"), "{error}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = scratch();
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let error = Dir::open(&link, false).unwrap_err().to_string();
        assert!(error.contains("not a directory"), "{error}");
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn planted_links_and_fifos_are_never_followed_or_opened() {
        let path = scratch();
        let dir = Dir::open(&path, true).unwrap();
        let target = scratch();
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, path.join("a.json.tmp")).unwrap();
        std::os::unix::fs::symlink(&target, path.join("b")).unwrap();
        // The leftover temporary (a link) is removed, not written through.
        dir.replace("a.json", b"record").unwrap();
        assert_eq!(std::fs::read(path.join("a.json")).unwrap(), b"record");
        assert!(dir.create_new("b").is_err());
        assert!(dir.open_existing("b", true).is_err());
        assert!(dir.read_bounded("b", 100).is_err());
        nix::unistd::mkfifo(&path.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        assert!(dir.read_bounded("fifo", 100).is_err(), "no hang on a FIFO");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        std::fs::write(path.join("big"), vec![b'x'; 101]).unwrap();
        assert!(dir.read_bounded("big", 100).is_err());
        std::fs::remove_file(&target).unwrap();
        std::fs::remove_dir_all(&path).unwrap();
    }
}
