//! What the tests read of processes from /proc: sessions, zombies,
//! descriptors, threads, memory and CPU.

/// The fields of /proc/PID/stat the tests look at.
pub struct ProcStat {
    pub pid: i32,
    pub state: char,
    pub ppid: u32,
    pub session: u32,
}

/// Every process's stat line, parsed after the last `)` (the command name
/// may contain spaces and parentheses).
pub fn proc_stats() -> Vec<ProcStat> {
    let mut stats = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        // state ppid pgrp session ...
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let number = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u32>().ok())
                .unwrap_or(0)
        };
        stats.push(ProcStat {
            pid,
            state: fields.first().and_then(|f| f.chars().next()).unwrap_or('?'),
            ppid: number(1),
            session: number(3),
        });
    }
    stats
}

/// Pids of live processes in the session `sid` (see tetherd's session kill);
/// zombies are already dead.
pub fn session_members(sid: u32) -> Vec<i32> {
    proc_stats()
        .into_iter()
        .filter(|s| s.session == sid && s.state != 'Z')
        .map(|s| s.pid)
        .collect()
}

/// Waits (bounded) until no live process remains in session `sid`.
pub async fn wait_session_gone(sid: u32) -> bool {
    crate::settle(|| session_members(sid), |left| left.is_empty())
        .await
        .is_empty()
}

/// Kills whatever is left of a session (test cleanup).
pub fn kill_session(sid: u32) {
    for pid in session_members(sid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Resident memory of a process in bytes (VmRSS), for memory bounds.
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Open file descriptors of a process (entries of /proc/PID/fd).
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| dir.count())
        .unwrap_or(0)
}

/// Threads of a process (entries of /proc/PID/task).
pub fn thread_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|dir| dir.count())
        .unwrap_or(0)
}

/// CPU time (user + system) a process has used so far, from
/// /proc/PID/stat, in clock ticks (normally 10 ms each).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(close) = stat.rfind(')') else {
        return 0;
    };
    // After the command name: state is field 3 of the line, utime 14 and
    // stime 15, so 11 and 12 here.
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum()
}

/// Pids of zombie children of `parent` (state Z, ppid == parent).
pub fn zombie_children(parent: u32) -> Vec<i32> {
    proc_stats()
        .into_iter()
        .filter(|s| s.state == 'Z' && s.ppid == parent)
        .map(|s| s.pid)
        .collect()
}

/// Where each open fd of a process points (for failure messages).
pub fn fd_links(pid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .map(|e| {
            let target = std::fs::read_link(e.path()).unwrap_or_default();
            format!(
                "{} -> {}",
                e.file_name().to_string_lossy(),
                target.display()
            )
        })
        .collect()
}
