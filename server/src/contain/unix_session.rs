//! Signalling a whole session: the process was started with `setsid`, so
//! its session id is its pid, and every descendant that did not call
//! `setsid` itself (background jobs in their own process groups included)
//! still carries that session id. The containment fallback where no cgroup
//! hierarchy is writable (`contain::Contained` drives it).

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// Sends `signal` to the process group led by `pid` (the session leader,
/// not yet reaped, so the number is still its own).
pub fn signal_group(pid: u32, signal: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(raw), signal);
    }
}

/// Pids of every live process whose session id is `sid`, read from /proc.
pub fn session_members(sid: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut members = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if stat_session(&stat) == Some(sid) {
            members.push(pid);
        }
    }
    members
}

/// The session of process `pid`, from /proc (`None` once it is gone).
pub fn session_of(pid: u32) -> Option<u32> {
    stat_session(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The session field (the 6th) of /proc/PID/stat. The command name (2nd)
/// may contain spaces and parentheses, so parse after the last `)`.
fn stat_session(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields after comm: state ppid pgrp session ...
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// Sends `signal` to every member of the session led by `sid`, and to its
/// process group (which also reaches a leader that is a zombie, harmlessly).
/// Returns how many members were signalled.
pub fn signal_session(sid: u32, signal: Signal) -> usize {
    let Ok(raw) = i32::try_from(sid) else {
        return 0;
    };
    let _ = killpg(Pid::from_raw(raw), signal);
    let members = session_members(sid);
    for pid in &members {
        let _ = kill(Pid::from_raw(*pid), signal);
    }
    members.len()
}

/// Signals what is left of a session whose leader has been reaped. Its
/// session id cannot be reused while any member lives, but once all are
/// gone a new session leader may get the same number: a member whose pid
/// equals the session id is such a stranger, and then nothing is signalled.
pub fn signal_orphans(sid: u32, signal: Signal) -> usize {
    let members = session_members(sid);
    if members.iter().any(|pid| i64::from(*pid) == i64::from(sid)) {
        return 0;
    }
    for pid in &members {
        let _ = kill(Pid::from_raw(*pid), signal);
    }
    members.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_session_even_with_odd_command_names() {
        let stat = "1234 (a (weird) name) S 1 1234 4321 0 -1 4194560";
        assert_eq!(stat_session(stat), Some(4321));
    }
}
