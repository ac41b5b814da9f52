//! PTY master: opened close-on-exec, non-blocking, driven by tokio's reactor
//! (no thread per session), shared by capture (reads), the stdin writer
//! (writes) and resize requests (ioctl).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt, Winsize};
use nix::sys::stat::Mode;
use tokio::io::unix::AsyncFd;

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

/// Registers an owned, non-blocking fd with tokio's reactor.
pub fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd is open for as long as it is owned, and always
    // reports the same descriptor; the AsyncFd owns it until dropped.
    Ok(unsafe { AsyncFd::register(fd) }?)
}

/// Puts an fd in non-blocking mode, as the reactor requires.
pub fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

impl PtyMaster {
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

    /// The terminal's EOF character (VEOF), usually Ctrl-D.
    pub fn eof_char(&self) -> u8 {
        nix::sys::termios::tcgetattr(self.fd.get_ref().as_fd())
            .map(|t| t.control_chars[libc::VEOF])
            .unwrap_or(4)
    }

    /// Writes all of `data` to the master (the program's input).
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), data).map_err(io::Error::from))
            {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }
}
