//! Process creation without copying the server: `clone(CLONE_VM |
//! CLONE_VFORK)`, as `posix_spawn` does, so the cost does not grow with
//! the server's memory (a `fork` copies its page tables: 28 ms at 721 MiB).
//! The child runs on a small stack of its own in the server's memory until
//! it execs, and does only raw system calls there: reset signal handlers,
//! join its cgroup (unless born in it, see `clone3`), move its stdio onto
//! 0/1/2, `setsid`, take the PTY as
//! controlling terminal, `chdir`, `execve`. What failed is written into
//! memory the server reads once the clone returns (which is when the child
//! has exec'd or exited).
//!
//! The parts: [`start`] (here) makes the process's cgroup, stdio and pidfd
//! around a [`launch`]; `child.rs` is the launch itself (the plan the child
//! reads, the clone, the child's side until exec); `resolve.rs` finds the
//! program and makes the C strings before the clone; `clone3.rs` is the
//! birth in the cgroup; `error.rs` says why a launch failed.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;

mod child;
mod clone3;
mod error;
mod resolve;
#[cfg(test)]
mod tests;

pub use child::{launch, Launch};
pub use error::LaunchError;

use crate::contain::pidfd::PidFd;
use crate::contain::{reaper, Contained, Containment};
use crate::error::ApiError;
use crate::pty::PtyMaster;
use tether_protocol::TermSize;

/// A started process: its pidfd (the only handle supervision signals and
/// reaps it through), its containment, and the server's ends of its stdio.
pub struct Started {
    /// The leader's pid (display and process-group signals before the reap).
    pub pid: u32,
    /// Waits for and reaps the leader.
    pub pidfd: PidFd,
    /// How its descendants are found and ended.
    pub contained: Arc<Contained>,
    /// The server's ends of its stdio.
    pub io: StartedIo,
    /// The directory it started in (`None`: the server's own).
    pub cwd: Option<std::path::PathBuf>,
}

/// The server's ends of a started process's stdio.
pub enum StartedIo {
    /// Pipes: stdin's write end if asked for, stdout's and stderr's read ends.
    Pipes {
        /// Write end of stdin, or None (stdin is /dev/null).
        stdin: Option<OwnedFd>,
        /// Read end of stdout.
        stdout: OwnedFd,
        /// Read end of stderr.
        stderr: OwnedFd,
    },
    /// The PTY master.
    Pty(PtyMaster),
}

/// What [`start`] needs to know about the process.
pub struct StartPlan<'a> {
    /// The process id, which names its cgroup.
    pub id: &'a str,
    /// argv.
    pub argv: &'a [String],
    /// Variables set on top of the server's environment.
    pub env: &'a BTreeMap<String, String>,
    /// Working directory.
    pub cwd: Option<&'a Path>,
    /// A PTY of this size, or pipes.
    pub tty: Option<TermSize>,
    /// Whether stdin is a pipe (pipes only; a PTY always takes input).
    pub stdin: bool,
    /// Variables of the server never passed on.
    pub secret_env: &'a [&'a str],
    /// The user and group to run as (`--user`/`--group`, or the spawn's).
    pub identity: Option<&'a crate::secret::Identity>,
    /// The open-file limit to give the program.
    pub open_file_limit: Option<(u64, u64)>,
    /// Resource limits, written to its cgroup before the clone.
    pub limits: tether_protocol::Limits,
}

/// Creates the process's cgroup, stdio and the process itself, and opens
/// its pidfd. Takes no lock of the server's; blocks for a mkdir, a few
/// opens and the clone (which returns once the child has exec'd).
pub fn start(plan: &StartPlan<'_>, containment: &Containment) -> Result<Started, ApiError> {
    let internal = |what: &str, e: io::Error| ApiError::Internal(format!("{what}: {e}"));
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os()
        .filter(|(k, _)| !plan.secret_env.iter().any(|s| k == OsStr::new(s)))
        .collect();
    // Run as another user, the child's environment says so (not the
    // server's HOME and USER); the spawn's own `env` still wins.
    for (key, value) in plan.identity.map(|i| i.environment()).unwrap_or_default() {
        env.insert(key.into(), value);
    }
    for (k, v) in plan.env {
        env.insert(k.into(), v.into());
    }
    // Without a `cwd`, a process of another user starts in its home (the
    // server's own directory is likely not its to read), else in `/`.
    let home_cwd = match (plan.cwd, plan.identity) {
        (None, Some(identity)) => Some(
            identity
                .home
                .clone()
                .filter(|home| home.is_dir())
                .unwrap_or_else(|| "/".into()),
        ),
        _ => None,
    };
    let cwd = plan.cwd.or(home_cwd.as_deref());
    // Kept until the clone returned: the child's copies are its own then.
    let child_side: Vec<OwnedFd>;
    let stdio: [RawFd; 3];
    let io = match plan.tty {
        Some(size) => {
            let (master, slave) = crate::pty::open(size).map_err(|e| internal("openpty", e))?;
            // The terminal is tetherd's emulator (and the clients'), never
            // the terminal tetherd itself was started from: its own TERM
            // (inherited above) gives way unless the spawn's env sets one.
            if !plan.env.contains_key("TERM") {
                env.insert("TERM".into(), "xterm-256color".into());
            }
            stdio = [slave.as_raw_fd(); 3];
            child_side = vec![slave];
            StartedIo::Pty(master)
        }
        None => {
            let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from);
            let (stdin_child, stdin) = if plan.stdin {
                let (r, w) = pipe().map_err(|e| internal("stdin pipe", e))?;
                (r, Some(w))
            } else {
                let null =
                    std::fs::File::open("/dev/null").map_err(|e| internal("/dev/null", e))?;
                (OwnedFd::from(null), None)
            };
            let (stdout, stdout_child) = pipe().map_err(|e| internal("stdout pipe", e))?;
            let (stderr, stderr_child) = pipe().map_err(|e| internal("stderr pipe", e))?;
            stdio = [
                stdin_child.as_raw_fd(),
                stdout_child.as_raw_fd(),
                stderr_child.as_raw_fd(),
            ];
            child_side = vec![stdin_child, stdout_child, stderr_child];
            StartedIo::Pipes {
                stdin,
                stdout,
                stderr,
            }
        }
    };
    let (cell, entry, meter) = match containment.cell(plan.id, &plan.limits) {
        Ok(Some((cell, entry, meter))) => (Some(cell), Some(entry), meter),
        Ok(None) => (None, None, None),
        Err(e) => return Err(ApiError::LimitsUnavailable(e.to_string())),
    };
    let controller_procs: Vec<RawFd> = entry
        .as_ref()
        .map(|e| e.controller_procs.iter().map(|fd| fd.as_raw_fd()).collect())
        .unwrap_or_default();
    let request = Launch {
        argv: plan.argv,
        env: env.into_iter().collect(),
        cwd,
        stdio,
        controlling_tty: plan.tty.is_some(),
        cgroup_procs: entry.as_ref().map(|e| e.procs.as_raw_fd()),
        cgroup_dir: entry
            .as_ref()
            .and_then(|e| e.dir.as_ref())
            .map(|d| d.as_raw_fd()),
        controller_procs: &controller_procs,
        identity: plan.identity.map(|i| (i.uid, i.gid)),
        open_file_limit: plan.open_file_limit,
    };
    let launched = reaper::register_while(|| launch(&request));
    // Open only while launching: a running process holds no fd for them.
    drop(child_side);
    drop(entry);
    let pid = match launched {
        Ok(pid) => pid,
        Err(e) => {
            if let Some(cell) = &cell {
                let _ = cell.remove();
            }
            if let Some(meter) = &meter {
                meter.remove();
            }
            // 126 against 127 for the CLI: found but cannot run, or not found.
            return Err(match e {
                LaunchError::NotExecutable(..) => ApiError::CannotExecute(e.to_string()),
                _ => ApiError::SpawnFailed(e.to_string()),
            });
        }
    };
    let pidfd = match PidFd::open(pid) {
        Ok(pidfd) => pidfd,
        Err(e) => {
            // Not reaped yet, so the number is still this child's.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
            reaper::forget(pid);
            return Err(internal("pidfd_open (Linux 5.3 or later is required)", e));
        }
    };
    Ok(Started {
        pid,
        pidfd,
        cwd: cwd.map(Path::to_path_buf),
        contained: Arc::new(Contained::new(
            cell,
            meter,
            plan.limits,
            pid,
            plan.tty.is_some(),
        )),
        io,
    })
}

/// Ends a started process whose setup failed after the clone (its
/// capture could not be registered): SIGKILL through the pidfd and the
/// cgroup, reaped and released by a task of its own.
pub fn abandon(pid: u32, pidfd: PidFd, contained: Arc<Contained>) {
    let _ = pidfd.signal(nix::sys::signal::Signal::SIGKILL);
    tokio::spawn(async move {
        let _ = pidfd.wait().await;
        contained.set_reaped();
        reaper::forget(pid);
        contained.release(Some(tokio::time::Instant::now())).await;
    });
}
