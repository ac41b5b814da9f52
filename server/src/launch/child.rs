//! The launch itself: the plan the child reads, the clone, and the child's
//! side between clone and exec.
//!
//! Everything the child needs (paths, argv, environment) is prepared here,
//! before the clone: the child must not allocate or take a lock, since it
//! shares the heap with threads that keep running.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use super::clone3;
use super::error::LaunchError;
use super::resolve::{c_string, c_strings, null_terminated, resolve};

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
    /// Open `cgroup.procs` of v1 controller hierarchies (a hybrid host's
    /// resource limits, `contain/resources.rs`), each joined before exec.
    pub controller_procs: &'a [RawFd],
    /// `--user`/`--group`: the uid and gid to run as (supplementary groups
    /// are dropped).
    pub identity: Option<(u32, u32)>,
    /// The open-file limit tetherd was started with (it raised its own):
    /// programs get that one back.
    pub open_file_limit: Option<(u64, u64)>,
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
    /// Joined in any case (made before the clone; the child only reads).
    controller_procs: Vec<RawFd>,
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
        controller_procs: request.controller_procs.to_vec(),
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
        // Its limits hold from here on: before the exec, so no instruction
        // of the program runs unlimited.
        for &procs in &plan.controller_procs {
            if libc::write(procs, b"0".as_ptr().cast(), 1) != 1 {
                return fail(STEP_CGROUP);
            }
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
