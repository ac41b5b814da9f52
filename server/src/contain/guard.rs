//! The guard: a small process that outlives tetherd only long enough to end
//! what tetherd left, so that nothing survives a server that was killed
//! (`kill -9`) or crashed.
//!
//! tetherd starts it at startup by re-executing its own binary
//! (`/proc/self/exe __tether-guard`, named `tetherd` in `ps`), with the read end of a pipe as its
//! stdin. tetherd keeps the write end (close-on-exec, so no child holds it)
//! and tells the guard what to end: its instance cgroup, or, without
//! cgroups, each session with the leader's start time. When tetherd dies
//! for any reason the kernel closes the write end; the guard reads end of
//! file, kills the instance cgroup (every process cgroup below it) and the
//! sessions still registered, removes the cgroups, and exits. A parent-death
//! signal would end only tetherd's direct children; the cgroup ends every
//! descendant, however it detached.
//!
//! The guard ignores SIGINT, SIGTERM and SIGHUP (a terminal's Ctrl-C goes
//! to the whole foreground group, and tetherd's own shutdown must come
//! first); it stays in tetherd's cgroup, outside the instance cgroup it
//! kills. Protocol, one line each: `cgroup2 DIR`, `cgroup1-freezer DIR`,
//! `+SID STARTTIME`, `-SID`, and `controllers DIR` for a v1 resource
//! controller's instance cgroup (removed once the processes are dead).

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::cgroup::{CgroupKind, Instance};
use super::unix_session::{session_members, signal_session};
use crate::sync::LockExt;

/// The hidden first argument that makes tetherd a guard.
pub const GUARD_ARG: &str = "__tether-guard";

/// The guard's line for a v1 controller instance cgroup (`resources.rs`),
/// removed after the processes are killed.
const CONTROLLERS: &str = "controllers";

/// tetherd's end of the guard: registrations go down the pipe.
pub struct Guard {
    pipe: Mutex<std::fs::File>,
    pid: u32,
}

impl Guard {
    /// Starts the guard. Call before any process is spawned (and before the
    /// orphan reaper starts: the guard is registered as one of ours).
    pub fn start() -> io::Result<Guard> {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let read: OwnedFd = read;
        let child = super::reaper::register_while(|| {
            // Named as the server in `ps` (not `/proc/self/exe`).
            Command::new("/proc/self/exe")
                .arg0("tetherd")
                .arg(GUARD_ARG)
                .stdin(Stdio::from(read))
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map(|child| {
                    let pid = child.id();
                    // Reaped by `watch` through a pidfd, not by std.
                    drop(child);
                    pid
                })
        })?;
        Ok(Guard {
            pipe: Mutex::new(std::fs::File::from(write)),
            pid: child,
        })
    }

    /// The guard a handover carried (`carry.rs`).
    pub(super) fn from_parts(pipe: Mutex<std::fs::File>, pid: u32) -> Guard {
        Guard { pipe, pid }
    }

    /// A second descriptor of the pipe's write end, for a handover.
    pub(super) fn pipe_fd(&self) -> io::Result<OwnedFd> {
        use std::os::fd::AsFd;
        self.pipe.lock_or_recover().as_fd().try_clone_to_owned()
    }

    /// The guard's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Registers the instance cgroup.
    pub fn cgroup(&self, instance: &Instance) {
        self.send(&format!(
            "{} {}\n",
            instance.kind().name(),
            instance.dir().display()
        ));
    }

    /// Registers a session whose leader is `sid`, started at `start_time`
    /// (field 22 of its /proc stat), so that a stranger who later gets the
    /// number is never taken for it.
    /// Registers a v1 controller instance cgroup (`resources.rs`) to
    /// remove after the processes are killed.
    pub fn controllers(&self, dir: &std::path::Path) {
        self.send(&format!("{CONTROLLERS} {}\n", dir.display()));
    }

    pub fn session(&self, sid: u32, start_time: u64) {
        self.send(&format!("+{sid} {start_time}\n"));
    }

    /// The session's leader was reaped: forget it.
    pub fn session_reaped(&self, sid: u32) {
        self.send(&format!("-{sid}\n"));
    }

    fn send(&self, line: &str) {
        let mut pipe = self.pipe.lock_or_recover();
        if let Err(e) = pipe.write_all(line.as_bytes()) {
            tracing::error!(error = %e, "the guard is gone: processes may outlive the server");
        }
    }

    /// Reaps the guard if it dies before the server (it should not), and
    /// says so: from then on nothing ends processes if the server dies.
    pub async fn watch(pid: u32) {
        let Ok(pidfd) = super::pidfd::PidFd::open(pid) else {
            return;
        };
        let status = pidfd.wait().await;
        super::reaper::forget(pid);
        tracing::error!(
            ?status,
            "the guard exited: processes may outlive the server"
        );
    }
}

/// Field 22 (starttime, clock ticks since boot) of /proc/PID/stat.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields after comm start at 3 (state); starttime is 22.
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// The guard's main: read registrations until end of file, then end
/// everything registered. Never returns.
pub fn main() -> ! {
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: setting a disposition to SIG_IGN installs no handler.
        let _ = unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigIgn) };
    }
    let mut instances: Vec<Instance> = Vec::new();
    let mut sessions: HashMap<u32, u64> = HashMap::new();
    let mut controllers: Vec<PathBuf> = Vec::new();
    let stdin = io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if let Some(dir) = line
            .strip_prefix(CONTROLLERS)
            .and_then(|r| r.strip_prefix(' '))
        {
            controllers.push(PathBuf::from(dir));
            continue;
        }
        apply(&line, &mut instances, &mut sessions);
    }
    end_everything(&instances, &sessions);
    for dir in &controllers {
        super::resources::remove_v1_instance(dir);
    }
    std::process::exit(0)
}

fn apply(line: &str, instances: &mut Vec<Instance>, sessions: &mut HashMap<u32, u64>) {
    if let Some(rest) = line.strip_prefix('+') {
        let mut parts = rest.split(' ');
        if let (Some(Ok(sid)), Some(Ok(start))) =
            (parts.next().map(str::parse), parts.next().map(str::parse))
        {
            sessions.insert(sid, start);
        }
    } else if let Some(rest) = line.strip_prefix('-') {
        if let Ok(sid) = rest.parse() {
            sessions.remove(&sid);
        }
    } else if let Some((kind, dir)) = line.split_once(' ') {
        let kind = match kind {
            "cgroup2" => CgroupKind::V2,
            "cgroup1-freezer" => CgroupKind::V1Freezer,
            _ => return,
        };
        instances.push(Instance::at(kind, PathBuf::from(dir)));
    }
}

/// Ends every registered cgroup and session: TERM first would let
/// programs linger, and nobody is left to wait for them, so KILL.
fn end_everything(instances: &[Instance], sessions: &HashMap<u32, u64>) {
    for instance in instances {
        instance.kill_everything();
    }
    for (&sid, &start) in sessions {
        // The leader is still the one registered (it was not reaped by
        // tetherd; if init reaped it, the number may be a stranger's now).
        if start_time(sid) != Some(start) {
            continue;
        }
        for _ in 0..8 {
            if signal_session(sid, Signal::SIGKILL) == 0 {
                break;
            }
        }
    }
    // The members of a session cannot be waited for; give them a moment so
    // that whoever watches the guard's exit sees them gone.
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(1)
        && sessions.keys().any(|&sid| !session_members(sid).is_empty())
    {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_registrations() {
        let mut instances = Vec::new();
        let mut sessions = HashMap::new();
        for line in [
            "cgroup2 /sys/fs/cgroup/unified/tether-1-ab",
            "+42 1000",
            "+43 1001",
            "-42",
            "garbage",
            "+x y",
        ] {
            apply(line, &mut instances, &mut sessions);
        }
        assert_eq!(instances.len(), 1);
        assert_eq!(instances[0].kind(), CgroupKind::V2);
        assert_eq!(sessions, HashMap::from([(43, 1001)]));
    }

    #[test]
    fn reads_a_processes_start_time() {
        let me = start_time(std::process::id()).expect("own start time");
        assert!(me > 0);
    }
}
