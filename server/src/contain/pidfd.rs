//! A pidfd: a handle on one process that can never name another. Signals
//! sent through it after the process was reaped fail with `ESRCH` instead of
//! reaching a stranger that reused the number, and it becomes readable when
//! the process exits, so the reactor can wait for it without SIGCHLD.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::Signal;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A pidfd of a child of this process, registered with tokio's reactor.
pub struct PidFd {
    fd: AsyncFd<OwnedFd>,
    pid: u32,
}

impl PidFd {
    /// Opens a pidfd for `pid`. Only race-free for a child that has not been
    /// reaped yet (its number cannot be reused before that), which is how
    /// the launcher calls it. Must run inside the tokio runtime.
    pub fn open(pid: u32) -> io::Result<PidFd> {
        let fd = open_raw(pid)?;
        // SAFETY: an OwnedFd is open for as long as it is owned, and always
        // reports the same descriptor; the AsyncFd owns it until dropped.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(PidFd { fd, pid })
    }

    /// The pidfd a handover carried (issue 43): of a child of this process
    /// still, as an exec keeps every child.
    pub fn adopt(fd: OwnedFd, pid: u32) -> io::Result<PidFd> {
        // SAFETY: as in `open`: the AsyncFd owns the descriptor.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(PidFd { fd, pid })
    }

    /// A second descriptor of the same pidfd, for a handover to carry.
    pub fn try_clone_fd(&self) -> io::Result<OwnedFd> {
        self.fd.get_ref().try_clone()
    }

    /// The process's number, for display only: never signal it.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `signal` to this process only. Ok(false) when it has already
    /// exited (a zombie still receives it harmlessly; a reaped one is ESRCH).
    pub fn signal(&self, signal: Signal) -> io::Result<bool> {
        send_signal(&self.fd, signal)
    }

    /// Waits until the process has exited, then reaps it and returns its
    /// status. Cancel-safe: nothing is reaped until the fd is readable.
    pub async fn wait(&self) -> io::Result<ExitStatus> {
        loop {
            let mut ready = self.fd.readable().await?;
            match reap(self.fd.get_ref(), libc::WNOHANG)? {
                Some(status) => return Ok(status),
                // Readable but not yet waitable cannot happen for a child;
                // clear readiness and wait again rather than spin.
                None => ready.clear_ready(),
            }
        }
    }
}

/// `pidfd_open(2)`; the fd is close-on-exec.
pub fn open_raw(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// `pidfd_send_signal(2)`. Ok(false) when the process is gone.
pub fn send_signal(fd: &impl AsRawFd, signal: Signal) -> io::Result<bool> {
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// `waitid(P_PIDFD, ...)`: reaps the child if it has exited. `flags` adds
/// to `WEXITED` (`WNOHANG`, `WNOWAIT`).
pub fn reap(fd: &impl AsRawFd, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    // SAFETY: zeroed siginfo_t is a valid out-parameter for waitid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waitid writes one siginfo_t into a live local.
        let r = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                fd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | flags,
            )
        };
        if r == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    // SAFETY: waitid filled `info` for a child event (or left si_pid 0).
    let (pid, code, status) = unsafe { (info.si_pid(), info.si_code, info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    Ok(Some(status_from_siginfo(code, status)))
}

/// Converts waitid's (si_code, si_status) to the wait(2) status encoding.
pub fn status_from_siginfo(code: libc::c_int, status: libc::c_int) -> ExitStatus {
    let raw = match code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_KILLED => status & 0x7f,
        libc::CLD_DUMPED => (status & 0x7f) | 0x80,
        _ => 0,
    };
    ExitStatus::from_raw(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[tokio::test]
    async fn waits_for_and_reaps_a_child_and_reports_its_code() {
        let child = Command::new("sh")
            .args(["-c", "exit 7"])
            .spawn()
            .expect("sh");
        let pidfd = PidFd::open(child.id()).expect("pidfd");
        let status = pidfd.wait().await.expect("wait");
        assert_eq!(status.code(), Some(7));
        std::mem::forget(child);
    }

    #[tokio::test]
    async fn a_signal_after_the_reap_reaches_nobody() {
        let child = Command::new("sleep").arg("30").spawn().expect("sleep");
        let pidfd = PidFd::open(child.id()).expect("pidfd");
        assert!(pidfd.signal(Signal::SIGKILL).expect("kill"));
        let status = pidfd.wait().await.expect("wait");
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        // Reaped: the number may now belong to anyone, the fd to no one.
        assert!(!pidfd.signal(Signal::SIGKILL).expect("signal after reap"));
        std::mem::forget(child);
    }
}
