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
//! Everything the child needs (paths, argv, environment) is prepared here,
//! before the clone: the child must not allocate or take a lock, since it
//! shares the heap with threads that keep running.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

mod clone3;

use crate::contain::pidfd::PidFd;
use crate::contain::{reaper, Contained, Containment};
use crate::error::ApiError;
use crate::pty::PtyMaster;
use tether_protocol::TermSize;

/// What to start, and how.
#[derive(Debug)]
pub struct Launch<'a> {
    /// argv; the program is `argv[0]`, looked up in the child's `PATH`.
    pub argv: &'a [String],
    /// The complete environment of the child.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory.
    pub cwd: Option<&'a Path>,
    /// Fds that become the child's 0, 1 and 2.
    pub stdio: [RawFd; 3],
    /// Make fd 0 (a PTY slave) the controlling terminal of the new session.
    pub controlling_tty: bool,
    /// An open `cgroup.procs` to join before anything else.
    pub cgroup_procs: Option<RawFd>,
    /// The same cgroup's directory (v2), to be born in it instead
    /// (`clone3`, see `launch/clone3.rs`); `cgroup_procs` if that fails.
    pub cgroup_dir: Option<RawFd>,
    /// `--user`/`--group`: the uid and gid to run as (supplementary groups
    /// are dropped).
    pub identity: Option<(u32, u32)>,
    /// The open-file limit tetherd was started with (it raised its own):
    /// programs get that one back.
    pub open_file_limit: Option<(u64, u64)>,
}

/// Why a launch failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No such program on the child's PATH (or at the given path).
    #[error("program {0:?} not found")]
    NotFound(String),
    /// The program exists but cannot be executed.
    #[error("program {0:?} is not executable: {1}")]
    NotExecutable(String, io::Error),
    /// A step before or at exec failed.
    #[error("could not start {program:?}: {step}: {error}")]
    Failed {
        /// The program.
        program: String,
        /// What the child was doing.
        step: &'static str,
        /// The error of that step.
        error: io::Error,
    },
}

/// Steps of the child, for error reports.
const STEPS: [&str; 8] = [
    "joining its cgroup",
    "setting up stdio",
    "setsid",
    "acquiring the controlling terminal",
    "restoring the open-file limit",
    "switching user",
    "chdir",
    "exec",
];
const STEP_CGROUP: i32 = 0;
const STEP_STDIO: i32 = 1;
const STEP_SETSID: i32 = 2;
const STEP_CTTY: i32 = 3;
const STEP_RLIMIT: i32 = 4;
const STEP_USER: i32 = 5;
const STEP_CHDIR: i32 = 6;
const STEP_EXEC: i32 = 7;

/// The child's stack: it only runs the handful of calls below and execve.
const CHILD_STACK: usize = 64 * 1024;

/// Everything the child reads, prepared by the parent.
struct ChildPlan {
    program: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: Option<CString>,
    stdio: [RawFd; 3],
    controlling_tty: bool,
    cgroup_procs: RawFd,
    /// Set before a clone3 into the cgroup: the child is a member already.
    born_in_cgroup: AtomicBool,
    identity: Option<(libc::uid_t, libc::gid_t)>,
    open_file_limit: Option<libc::rlimit>,
    /// Written by the child on failure: step << 16 | errno.
    failure: AtomicI32,
}

/// Starts the program; returns its pid. The child is a session leader of a
/// new session, in its cgroup if one was given, not yet reaped: the caller
/// owns the reap (open a pidfd before anything else).
pub fn launch(request: &Launch<'_>) -> Result<u32, LaunchError> {
    let name = request.argv.first().cloned().unwrap_or_default();
    let program = resolve(&name, &request.env, request.cwd)?;
    let failed = |step: i32, error: io::Error| LaunchError::Failed {
        program: name.clone(),
        step: STEPS[step as usize],
        error,
    };
    let argv_c =
        c_strings(request.argv.iter().map(|a| a.as_bytes())).map_err(|e| failed(STEP_EXEC, e))?;
    let env_c = c_strings(request.env.iter().map(|(k, v)| {
        let mut entry = k.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(v.as_bytes());
        entry
    }))
    .map_err(|e| failed(STEP_EXEC, e))?;
    let cwd = request
        .cwd
        .map(|p| c_string(p.as_os_str().as_bytes()))
        .transpose()
        .map_err(|e| failed(STEP_CHDIR, e))?;
    // A source fd below 3 would be overwritten by an earlier dup2 onto it.
    let mut raised = Vec::new();
    let mut stdio = request.stdio;
    for fd in &mut stdio {
        if *fd < 3 {
            // SAFETY: F_DUPFD_CLOEXEC duplicates a caller-owned open fd.
            let dup = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 3) };
            if dup < 0 {
                return Err(failed(STEP_STDIO, io::Error::last_os_error()));
            }
            // SAFETY: we own the duplicate we just made.
            raised.push(unsafe { OwnedFd::from_raw_fd(dup) });
            *fd = dup;
        }
    }
    let plan = ChildPlan {
        program: c_string(program.as_os_str().as_bytes()).map_err(|e| failed(STEP_EXEC, e))?,
        argv: null_terminated(&argv_c),
        envp: null_terminated(&env_c),
        cwd,
        stdio,
        controlling_tty: request.controlling_tty,
        cgroup_procs: request.cgroup_procs.unwrap_or(-1),
        born_in_cgroup: AtomicBool::new(false),
        identity: request.identity,
        open_file_limit: request.open_file_limit.map(|(soft, hard)| libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        }),
        failure: AtomicI32::new(0),
    };
    let mut stack = vec![0u8; CHILD_STACK];
    let pid =
        clone_vfork(&plan, &mut stack, request.cgroup_dir).map_err(|e| failed(STEP_EXEC, e))?;
    drop(raised);
    let failure = plan.failure.load(Ordering::SeqCst);
    if failure != 0 {
        // The child has exited with 127 (clone returns once it has): reap
        // it here, it was never anybody else's.
        reap_failed(pid);
        let step = (failure >> 16).clamp(0, STEP_EXEC);
        let error = io::Error::from_raw_os_error(failure & 0xffff);
        return Err(match (step, error.raw_os_error()) {
            (STEP_EXEC, Some(libc::ENOENT)) => LaunchError::NotFound(name),
            (STEP_EXEC, Some(libc::EACCES | libc::ENOEXEC)) => {
                LaunchError::NotExecutable(name, error)
            }
            _ => failed(step, error),
        });
    }
    Ok(pid as u32)
}

fn clone_vfork(
    plan: &ChildPlan,
    stack: &mut [u8],
    cgroup_dir: Option<RawFd>,
) -> io::Result<libc::pid_t> {
    // The stack grows down; the top, aligned to 16 bytes.
    let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
    // Block every signal while the child shares our memory: a handler of
    // the server must never run on the child's side. The child resets the
    // handlers, then unblocks.
    // SAFETY: sigset_t is plain data; sigfillset/pthread_sigmask fill and
    // read live locals.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let arg = plan as *const ChildPlan as *mut libc::c_void;
    // Born in the cgroup where the kernel can (v2, Linux 5.7, no seccomp
    // filter refusing clone3); else the child joins it by cgroup.procs.
    let born = cgroup_dir.and_then(|dir| {
        plan.born_in_cgroup.store(true, Ordering::SeqCst);
        // SAFETY: as for the clone below (same child, plan and stack).
        let born = unsafe { clone3::clone_into_cgroup(child_main, arg, stack, dir) }.ok();
        plan.born_in_cgroup.store(born.is_some(), Ordering::SeqCst);
        born
    });
    let pid = match born {
        Some(pid) => pid,
        // SAFETY: `child_main` only makes raw system calls on data in
        // `plan`, which outlives the clone: with CLONE_VFORK this thread is
        // suspended until the child has exec'd or exited, so `plan` and
        // `stack` are alive and unchanged for as long as the child uses
        // them.
        None => unsafe {
            libc::clone(
                child_main,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                arg,
            )
        },
    };
    let error = io::Error::last_os_error();
    // SAFETY: restores this thread's mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    if pid < 0 {
        return Err(error);
    }
    Ok(pid)
}

/// The child, between clone and exec. Only system calls, no allocation, no
/// locks, no panics: it runs in the server's memory.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildPlan` the parent keeps alive (see
    // `clone_vfork`).
    let plan = unsafe { &*(arg as *const ChildPlan) };
    let fail = |step: i32| -> libc::c_int {
        // SAFETY: errno is readable; _exit ends only this child.
        let errno = unsafe { *libc::__errno_location() };
        plan.failure
            .store((step << 16) | (errno & 0xffff).max(1), Ordering::SeqCst);
        unsafe { libc::_exit(127) }
    };
    // SAFETY (all calls below): plain system calls on fds and C strings
    // prepared by the parent.
    unsafe {
        // Handlers of the server become the default before signals are
        // unblocked (a pending one must not run server code here); what it
        // ignores stays ignored, except SIGPIPE, which Rust ignores for
        // itself. Only those are changed: one query per signal, while the
        // parent waits for the exec.
        let mut action: libc::sigaction = std::mem::zeroed();
        for signal in 1..=libc::SIGRTMAX() {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            if libc::sigaction(signal, std::ptr::null(), &mut action) != 0 {
                continue;
            }
            let handled =
                action.sa_sigaction != libc::SIG_IGN && action.sa_sigaction != libc::SIG_DFL;
            let ignored_pipe = signal == libc::SIGPIPE && action.sa_sigaction == libc::SIG_IGN;
            if handled || ignored_pipe {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());

        if plan.cgroup_procs >= 0
            && !plan.born_in_cgroup.load(Ordering::SeqCst)
            && libc::write(plan.cgroup_procs, b"0".as_ptr().cast(), 1) != 1
        {
            return fail(STEP_CGROUP);
        }
        for (target, &source) in plan.stdio.iter().enumerate() {
            if libc::dup2(source, target as RawFd) < 0 {
                return fail(STEP_STDIO);
            }
        }
        if libc::setsid() < 0 {
            return fail(STEP_SETSID);
        }
        if plan.controlling_tty && libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
            return fail(STEP_CTTY);
        }
        if let Some(limit) = &plan.open_file_limit {
            if libc::setrlimit(libc::RLIMIT_NOFILE, limit) != 0 {
                return fail(STEP_RLIMIT);
            }
        }
        if let Some((uid, gid)) = plan.identity {
            // Groups first: once the uid is dropped, they cannot be.
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return fail(STEP_USER);
            }
        }
        if let Some(cwd) = &plan.cwd {
            if libc::chdir(cwd.as_ptr()) != 0 {
                return fail(STEP_CHDIR);
            }
        }
        libc::execve(
            plan.program.as_ptr(),
            plan.argv.as_ptr(),
            plan.envp.as_ptr(),
        );
        fail(STEP_EXEC)
    }
}

fn reap_failed(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waits for our own child, which has exited.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

/// Finds the program as execvp would, but in the child's PATH (not the
/// server's), before the clone.
fn resolve(
    name: &str,
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
) -> Result<PathBuf, LaunchError> {
    if name.is_empty() {
        return Err(LaunchError::NotFound(name.into()));
    }
    if name.contains('/') {
        // Relative to the child's working directory, as exec will see it.
        let path = match cwd {
            Some(dir) if !name.starts_with('/') => dir.join(name),
            _ => PathBuf::from(name),
        };
        return check_executable(name, &path).map(|()| PathBuf::from(name));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == OsStr::new("PATH"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    let mut denied = None;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(name);
        match check_executable(name, &candidate) {
            Ok(()) => return Ok(candidate),
            Err(e @ LaunchError::NotExecutable(..)) => denied = Some(e),
            Err(_) => {}
        }
    }
    Err(denied.unwrap_or_else(|| LaunchError::NotFound(name.into())))
}

fn check_executable(name: &str, path: &Path) -> Result<(), LaunchError> {
    let meta = std::fs::metadata(path).map_err(|_| LaunchError::NotFound(name.into()))?;
    if meta.is_dir() {
        return Err(LaunchError::NotExecutable(
            name.into(),
            io::Error::from_raw_os_error(libc::EISDIR),
        ));
    }
    let c =
        c_string(path.as_os_str().as_bytes()).map_err(|_| LaunchError::NotFound(name.into()))?;
    // SAFETY: access(2) reads a valid C string.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0 {
        return Err(LaunchError::NotExecutable(
            name.into(),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "contains NUL"))
}

fn c_strings<B: AsRef<[u8]>>(items: impl Iterator<Item = B>) -> io::Result<Vec<CString>> {
    items.map(|b| c_string(b.as_ref())).collect()
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

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
    /// `--user`/`--group` (uid, gid).
    pub identity: Option<(u32, u32)>,
    /// The open-file limit to give the program.
    pub open_file_limit: Option<(u64, u64)>,
}

/// Creates the process's cgroup, stdio and the process itself, and opens
/// its pidfd. Takes no lock of the server's; blocks for a mkdir, a few
/// opens and the clone (which returns once the child has exec'd).
pub fn start(plan: &StartPlan<'_>, containment: &Containment) -> Result<Started, ApiError> {
    let internal = |what: &str, e: io::Error| ApiError::Internal(format!("{what}: {e}"));
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os()
        .filter(|(k, _)| !plan.secret_env.iter().any(|s| k == OsStr::new(s)))
        .collect();
    for (k, v) in plan.env {
        env.insert(k.into(), v.into());
    }
    // Kept until the clone returned: the child's copies are its own then.
    let child_side: Vec<OwnedFd>;
    let stdio: [RawFd; 3];
    let io = match plan.tty {
        Some(size) => {
            let (master, slave) = crate::pty::open(size).map_err(|e| internal("openpty", e))?;
            env.entry("TERM".into())
                .or_insert_with(|| "xterm-256color".into());
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
    let (cell, entry) = containment.cell(plan.id).unzip();
    let request = Launch {
        argv: plan.argv,
        env: env.into_iter().collect(),
        cwd: plan.cwd,
        stdio,
        controlling_tty: plan.tty.is_some(),
        cgroup_procs: entry.as_ref().map(|e| e.procs.as_raw_fd()),
        cgroup_dir: entry
            .as_ref()
            .and_then(|e| e.dir.as_ref())
            .map(|d| d.as_raw_fd()),
        identity: plan.identity,
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
        contained: Arc::new(Contained::new(cell, pid, plan.tty.is_some())),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn pipe() -> (OwnedFd, OwnedFd) {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        (r, w)
    }

    fn env() -> Vec<(OsString, OsString)> {
        std::env::vars_os().collect()
    }

    /// `argv` with this test's environment and stdio, no session options.
    fn plain(argv: &[String]) -> Launch<'_> {
        Launch {
            argv,
            env: env(),
            cwd: None,
            stdio: [0, 1, 2],
            controlling_tty: false,
            cgroup_procs: None,
            cgroup_dir: None,
            identity: None,
            open_file_limit: None,
        }
    }

    fn wait(pid: u32) -> i32 {
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        status
    }

    #[test]
    fn runs_the_program_in_a_new_session_with_its_stdio() {
        let (r, w) = pipe();
        let null = std::fs::File::open("/dev/null").expect("null");
        let argv = [
            "sh".to_string(),
            "-c".into(),
            "ps -o sid= -p $$; echo $$; pwd".into(),
        ];
        let pid = launch(&Launch {
            cwd: Some(Path::new("/tmp")),
            stdio: [null.as_raw_fd(), w.as_raw_fd(), w.as_raw_fd()],
            ..plain(&argv)
        })
        .expect("launch");
        drop(w);
        let mut out = String::new();
        std::fs::File::from(r)
            .read_to_string(&mut out)
            .expect("read");
        assert_eq!(wait(pid), 0);
        let lines: Vec<&str> = out.lines().map(str::trim).collect();
        assert_eq!(lines, [pid.to_string(), pid.to_string(), "/tmp".into()]);
    }

    #[test]
    fn the_environment_is_exactly_what_was_given_and_sigpipe_is_default() {
        let (r, w) = pipe();
        let argv = [
            "sh".to_string(),
            "-c".into(),
            "echo \"$ONLY\"; grep SigIgn /proc/self/status".into(),
        ];
        let pid = launch(&Launch {
            env: vec![
                ("ONLY".into(), "this".into()),
                ("PATH".into(), "/usr/bin:/bin".into()),
            ],
            stdio: [w.as_raw_fd(), w.as_raw_fd(), w.as_raw_fd()],
            ..plain(&argv)
        })
        .expect("launch");
        drop(w);
        let mut out = String::new();
        std::fs::File::from(r)
            .read_to_string(&mut out)
            .expect("read");
        wait(pid);
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("this"));
        let ignored = lines.next().expect("SigIgn line");
        let mask =
            u64::from_str_radix(ignored.split_whitespace().nth(1).expect("mask"), 16).expect("hex");
        assert_eq!(
            mask & (1 << (libc::SIGPIPE - 1)),
            0,
            "SIGPIPE ignored: {ignored}"
        );
    }

    #[test]
    fn a_missing_program_is_not_found_and_leaves_no_child() {
        let argv = ["/no/such/program".to_string()];
        let err = launch(&plain(&argv)).expect_err("missing");
        assert!(matches!(err, LaunchError::NotFound(_)), "{err}");
        let argv = ["no-such-program-anywhere".to_string()];
        let err = launch(&plain(&argv)).expect_err("missing");
        assert!(matches!(err, LaunchError::NotFound(_)), "{err}");
    }

    #[test]
    fn a_failing_chdir_is_reported_with_its_step() {
        let argv = ["true".to_string()];
        let err = launch(&Launch {
            cwd: Some(Path::new("/no/such/dir")),
            ..plain(&argv)
        })
        .expect_err("chdir");
        assert!(err.to_string().contains("chdir"), "{err}");
    }
}
