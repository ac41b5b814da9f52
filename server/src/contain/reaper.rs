//! The server's own children, and, when it runs as PID 1 (a container
//! whose entrypoint is tetherd), a reaper for the orphans the kernel
//! reparents to it.
//!
//! The reaper must never take a status that belongs to supervision. It
//! peeks at the next waitable child (`waitid(P_ALL, WNOWAIT)`) and reaps it
//! only if it is not one of the server's own; the registry lock is held
//! from process creation until the pid is registered, so a child that dies
//! at once is never mistaken for an orphan. When the next waitable child is
//! one of ours, the reaper waits until supervision has reaped it
//! ([`forget`] wakes it).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;

use crate::sync::LockExt;

/// Pids of children that supervision (or the guard watcher) will reap.
struct Registry {
    own: Mutex<HashSet<i32>>,
    reaped: Notify,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry {
        own: Mutex::new(HashSet::new()),
        reaped: Notify::new(),
    })
}

fn own() -> MutexGuard<'static, HashSet<i32>> {
    registry().own.lock_or_recover()
}

/// Whether the orphan reaper runs: only then are children registered, and
/// only then does process creation take the registry lock.
static REAPING: AtomicBool = AtomicBool::new(false);

/// Turns registration on; before the first child is created, and before
/// [`run`] starts.
pub fn enable() {
    REAPING.store(true, Ordering::SeqCst);
}

/// Runs `create` (which starts one child and returns its pid) with the
/// registry locked, and registers the pid before anyone can look. Without
/// the reaper, just runs it.
pub fn register_while<E>(create: impl FnOnce() -> Result<u32, E>) -> Result<u32, E> {
    if !REAPING.load(Ordering::SeqCst) {
        return create();
    }
    let mut own = own();
    let pid = create()?;
    if let Ok(pid) = i32::try_from(pid) {
        own.insert(pid);
    }
    Ok(pid)
}

/// Called by whoever reaped one of the server's children.
pub fn forget(pid: u32) {
    if !REAPING.load(Ordering::SeqCst) {
        return;
    }
    if let Ok(pid) = i32::try_from(pid) {
        own().remove(&pid);
    }
    registry().reaped.notify_one();
}

/// Reaps every waitable child that is not the server's own; stops at the
/// first that is. Returns how many orphans were reaped.
pub fn reap_orphans() -> usize {
    let own = own();
    let mut reaped = 0;
    loop {
        // SAFETY: zeroed siginfo_t is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes one siginfo_t into a live local; WNOWAIT
        // leaves the child waitable.
        let r = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: filled by waitid (si_pid 0 when nothing is waitable).
        let pid = unsafe { info.si_pid() };
        if r != 0 || pid == 0 || own.contains(&pid) {
            return reaped;
        }
        // SAFETY: as above; reaps exactly the orphan just seen.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG,
            )
        };
        if r != 0 {
            return reaped;
        }
        reaped += 1;
    }
}

/// Whether this server must reap orphans: it is PID 1 of its namespace, or
/// was made a subreaper by whoever started it.
pub fn is_init() -> bool {
    if std::process::id() == 1 {
        return true;
    }
    let mut flag: libc::c_int = 0;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes one int into a live local.
    let r = unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut flag as *mut libc::c_int) };
    r == 0 && flag != 0
}

/// Reaps orphans for as long as the server runs: on SIGCHLD, after
/// supervision reaped one of ours (which may have hidden orphans behind
/// it), and every second in case a SIGCHLD was coalesced.
pub async fn run() {
    let mut sigchld = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot watch SIGCHLD; orphans will not be reaped");
            return;
        }
    };
    loop {
        let n = tokio::task::spawn_blocking(reap_orphans).await.unwrap_or(0);
        if n > 0 {
            tracing::debug!(orphans = n, "reaped orphans");
        }
        tokio::select! {
            _ = sigchld.recv() => {}
            _ = registry().reaped.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}
