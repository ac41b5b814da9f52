//! PTY master: opened close-on-exec, non-blocking, driven by tokio's reactor
//! (no thread per session), shared by capture (reads), the stdin writer
//! (writes) and resize requests (ioctl).
//!
//! The master is registered for reading only. A PTY master reports
//! writability (an EPOLLOUT edge) after every write to it and every read
//! from it, so a registration that also watched for writing woke the
//! reactor twice more per keystroke for nothing. Writes are non-blocking
//! and almost always taken at once; the rare write that finds the terminal's
//! input queue full waits on a duplicate of the fd registered for writing
//! just for that wait.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt, Winsize};
use nix::sys::stat::Mode;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use tether_protocol::TermSize;

nix::ioctl_write_ptr_bad!(set_window_size, libc::TIOCSWINSZ, Winsize);

/// The master side of a PTY.
#[derive(Debug)]
pub struct PtyMaster {
    fd: AsyncFd<OwnedFd>,
}

/// Opens a PTY pair of the given size. Both fds are close-on-exec, so a
/// concurrently spawned child never inherits them (an inherited slave would
/// keep the master from ever reporting end of output).
pub fn open(size: TermSize) -> io::Result<(PtyMaster, OwnedFd)> {
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let slave_path = ptsname_r(&master)?;
    let slave = nix::fcntl::open(
        slave_path.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let master: OwnedFd = master.into();
    set_nonblocking(&master)?;
    let pty = PtyMaster {
        fd: register(master)?,
    };
    pty.resize(size)?;
    Ok((pty, slave))
}

/// Registers an owned, non-blocking fd with tokio's reactor for reading
/// (an output pipe, a PTY master): readiness for writing is never asked
/// of it, so it never wakes the reactor for that.
pub fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    register_for(fd, Interest::READABLE)
}

fn register_for(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd is open for as long as it is owned, and always
    // reports the same descriptor; the AsyncFd owns it until dropped.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(io::Error::from)
}

/// Puts an fd in non-blocking mode, as the reactor requires.
pub fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

impl PtyMaster {
    /// The master a handover carried (issue 43), registered again.
    pub fn adopt(fd: OwnedFd) -> io::Result<PtyMaster> {
        set_nonblocking(&fd)?;
        Ok(PtyMaster { fd: register(fd)? })
    }
    /// The reactor-registered fd, for capture.
    pub fn async_fd(&self) -> &AsyncFd<OwnedFd> {
        &self.fd
    }

    /// Sets the window size; the foreground process group gets SIGWINCH.
    pub fn resize(&self, size: TermSize) -> io::Result<()> {
        let size = Winsize {
            ws_row: size.rows(),
            ws_col: size.cols(),
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one `Winsize` from the pointer, which
        // points at a live local; the fd is a PTY master we own.
        unsafe { set_window_size(self.fd.get_ref().as_raw_fd(), &size) }?;
        Ok(())
    }

    /// The terminal's foreground process group: the program a person at
    /// it is using (the shell at its prompt, or what it runs).
    pub fn foreground_group(&self) -> Option<u32> {
        nix::unistd::tcgetpgrp(self.fd.get_ref().as_fd())
            .ok()
            .and_then(|pgid| u32::try_from(pgid.as_raw()).ok())
    }

    /// The terminal's EOF character (VEOF), usually Ctrl-D.
    pub fn eof_char(&self) -> u8 {
        nix::sys::termios::tcgetattr(self.fd.get_ref().as_fd())
            .map(|t| t.control_chars[libc::VEOF])
            .unwrap_or(4)
    }

    /// Writes all of `data` to the master (the program's input). When the
    /// terminal's input queue is full, waits for room on a duplicate of the
    /// fd registered for writing (see the module's note), kept only while
    /// this write lasts.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        let mut for_writing: Option<AsyncFd<OwnedFd>> = None;
        while !data.is_empty() {
            match nix::unistd::write(self.fd.get_ref(), data) {
                Ok(n) => {
                    data = &data[n..];
                    continue;
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => {}
                Err(e) => return Err(e.into()),
            }
            let waiter = match &mut for_writing {
                Some(waiter) => waiter,
                None => {
                    let dup = self.fd.get_ref().try_clone()?;
                    for_writing.insert(register_for(dup, Interest::WRITABLE)?)
                }
            };
            // Ready means the write above may now succeed; a spurious
            // readiness is cleared by the next EAGAIN.
            let mut guard = waiter.writable().await?;
            guard.clear_ready();
        }
        Ok(())
    }
}
