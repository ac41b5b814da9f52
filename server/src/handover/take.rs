//! The new binary's side of a handover: the state document read from the
//! descriptor `--handover-fd` names, and the descriptors it lists, each
//! marked close-on-exec again before anything is started, so that no
//! spawned child ever holds one.

use std::collections::HashSet;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::document::DocumentReader;
use super::state::State;
use super::READS;

/// The descriptors a handover carried, each to be taken once.
pub struct TakenFds {
    left: HashSet<RawFd>,
}

/// Marks `fd` close-on-exec, which also checks that it is open.
fn close_on_exec(fd: RawFd) -> io::Result<()> {
    if fd <= 2 {
        return Err(io::Error::other(format!(
            "descriptor {fd} is standard input or output, not a carried one"
        )));
    }
    // SAFETY: fcntl on a number only reads and sets its descriptor flags;
    // on a number that is not open it fails with EBADF, touching nothing.
    let done = unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    if done < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Owns descriptor `fd`, which [`close_on_exec`] found open.
fn own(fd: RawFd) -> OwnedFd {
    // SAFETY: the number is open (checked) and was kept across the exec by
    // the old binary for us alone: nothing else in this process owns it
    // (`TakenFds` hands each number out once).
    unsafe { OwnedFd::from_raw_fd(fd) }
}

impl TakenFds {
    /// Takes the carried descriptor `fd`: once, and only one the state
    /// lists.
    pub fn take(&mut self, fd: RawFd) -> io::Result<OwnedFd> {
        if self.left.remove(&fd) {
            Ok(own(fd))
        } else {
            Err(io::Error::other(format!(
                "descriptor {fd} is not one the handover carried, or was taken twice"
            )))
        }
    }
}

impl Drop for TakenFds {
    /// What no part of the state took is closed.
    fn drop(&mut self) {
        for fd in self.left.drain() {
            drop(own(fd));
        }
    }
}

/// Reads the state a handover passed in descriptor `fd`.
pub fn read(fd: RawFd) -> io::Result<(State, DocumentReader, TakenFds)> {
    close_on_exec(fd)?;
    let (document, description) = DocumentReader::open(own(fd), READS)?;
    let state: State = serde_json::from_value(description)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("handover state: {e}")))?;
    let mut left = HashSet::new();
    for &number in &state.fds {
        if number != fd {
            close_on_exec(number)?;
            left.insert(number);
        }
    }
    Ok((state, document, TakenFds { left }))
}
