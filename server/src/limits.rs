//! The open-file limit: raised from the soft to the hard limit at start, and
//! the defaults that cost file descriptors sized to fit what was got.
//!
//! What a descriptor budget must cover (counted in `/proc/PID/fd`, see
//! docs/CONFIGURATION.md and `tests/tests/budgets.rs`): a running process on pipes
//! holds stdout, stderr, a pidfd, with `"stdin": true` stdin, and a disk
//! log per stream; on a PTY the master, a pidfd and one disk log. Its
//! cgroup costs a descriptor only while it is launched. An exited process
//! still known keeps its disk logs (its output stays readable), a PTY its
//! master instead of a second log. A connection or an attachment holds its
//! socket.

use std::sync::OnceLock;

use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};

use crate::config::Capacity;

/// Descriptors one running process costs at most (pipes with stdin).
pub const FDS_PER_PROCESS: u64 = 6;
/// Descriptors one exited process costs while it is still known.
pub const FDS_PER_EXITED_PROCESS: u64 = 2;
/// Descriptors one connection or attachment costs.
pub const FDS_PER_CONNECTION: u64 = 1;
/// Kept aside for the server itself (listener, epoll, signal pipe, files
/// served from `--web-root`), the pipes a spawn holds for a moment, and
/// refused connections lingering to receive their 503.
pub const FDS_RESERVED: u64 = 128;

/// The open-file limit after [`raise_open_file_limit`].
#[derive(Debug, Clone, Copy)]
pub struct FdLimit {
    /// The soft limit now in force.
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
    /// The soft limit tetherd was started with; children get it back.
    pub inherited: u64,
}

static INHERITED_SOFT: OnceLock<(u64, u64)> = OnceLock::new();

/// The soft and hard limits tetherd was started with, if it raised them:
/// children are given these back, so a program that loops over every
/// possible descriptor or uses `select` sees what it would have seen.
pub fn inherited_limit() -> Option<(u64, u64)> {
    INHERITED_SOFT.get().copied()
}

/// Raises the soft open-file limit to the hard limit.
pub fn raise_open_file_limit() -> nix::Result<FdLimit> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let mut target = hard;
    if target == RLIM_INFINITY {
        // Linux refuses an infinite RLIMIT_NOFILE; nr_open is the ceiling.
        target = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(soft.max(1 << 20));
    }
    if soft < target {
        setrlimit(Resource::RLIMIT_NOFILE, target, hard)?;
        let _ = INHERITED_SOFT.set((soft, hard));
    }
    Ok(FdLimit {
        soft: soft.max(target),
        hard,
        inherited: soft,
    })
}

/// What [`fit_to_limit`] decided, for the start-up log.
#[derive(Debug, Clone)]
pub struct Fit {
    /// The capacities in force.
    pub capacity: Capacity,
    /// The defaults were lowered to fit.
    pub lowered: bool,
    /// What the flags given explicitly need, when it exceeds the limit.
    pub overcommitted: Option<u64>,
}

/// Descriptors `running` processes plus the exited ones that fill up to
/// `known` cost at most.
fn processes_cost(running: usize, known: usize) -> u64 {
    running as u64 * FDS_PER_PROCESS + known.saturating_sub(running) as u64 * FDS_PER_EXITED_PROCESS
}

/// Lowers the descriptor-hungry defaults (`--max-processes`,
/// `--max-known-processes`, `--max-connections`, `--max-attachments`) that
/// were not given explicitly, in proportion, so that all of them at once
/// fit in `limit` minus [`FDS_RESERVED`]. `explicit(id)` says whether a
/// flag was given.
pub fn fit_to_limit(asked: Capacity, limit: u64, explicit: impl Fn(&str) -> bool) -> Fit {
    let usable = limit.saturating_sub(FDS_RESERVED).max(1);
    let running_cost = processes_cost(asked.max_processes, 0);
    let exited_cost = processes_cost(asked.max_processes, asked.max_known_processes) - running_cost;
    let connections_cost = asked.max_connections as u64 * FDS_PER_CONNECTION;
    let fixed = explicit("max_processes") as u64 * running_cost
        + explicit("max_known_processes") as u64 * exited_cost
        + explicit("max_connections") as u64 * connections_cost;
    let flexible = running_cost + exited_cost + connections_cost - fixed;
    let room = usable.saturating_sub(fixed);
    let mut fitted = asked;
    let lowered = flexible > room;
    if lowered {
        let scale = |n: usize| -> usize {
            let scaled = (n as u128 * room as u128 / flexible as u128) as usize;
            scaled.max(1)
        };
        if !explicit("max_processes") {
            fitted.max_processes = scale(asked.max_processes);
        }
        if !explicit("max_known_processes") {
            fitted.max_known_processes = scale(asked.max_known_processes).max(fitted.max_processes);
        }
        if !explicit("max_connections") {
            fitted.max_connections = scale(asked.max_connections);
        }
        if !explicit("max_attachments") {
            fitted.max_attachments = scale(asked.max_attachments);
        }
    }
    // An attachment is a connection: more attachments than connections
    // could never be used.
    if !explicit("max_attachments") {
        fitted.max_attachments = fitted.max_attachments.min(fitted.max_connections);
    }
    let need = processes_cost(fitted.max_processes, fitted.max_known_processes)
        + fitted.max_connections as u64 * FDS_PER_CONNECTION
        + FDS_RESERVED;
    Fit {
        capacity: fitted,
        lowered,
        overcommitted: (need > limit).then_some(need),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn defaults_fit_a_big_limit_unchanged() {
        let asked = Config::defaults().asked_capacity();
        let fit = fit_to_limit(asked, 1 << 20, |_| false);
        assert!(!fit.lowered);
        assert_eq!(fit.capacity, asked);
        assert!(fit.overcommitted.is_none());
    }

    #[test]
    fn defaults_shrink_to_fit_1024() {
        let fit = fit_to_limit(Config::defaults().asked_capacity(), 1024, |_| false);
        assert!(fit.lowered);
        assert!(fit.overcommitted.is_none(), "{fit:?}");
        assert!(fit.capacity.max_processes >= 32, "{fit:?}");
        assert!(fit.capacity.max_attachments <= fit.capacity.max_connections);
    }

    #[test]
    fn exited_processes_still_known_are_counted() {
        let fitted = fit_to_limit(Config::defaults().asked_capacity(), 16_000, |_| false);
        assert!(fitted.lowered, "{fitted:?}");
        let fit = fitted.capacity;
        let need = processes_cost(fit.max_processes, fit.max_known_processes)
            + fit.max_connections as u64 * FDS_PER_CONNECTION
            + FDS_RESERVED;
        assert!(need <= 16_000, "{fit:?} needs {need}");
        assert!(fit.max_known_processes >= fit.max_processes);
    }

    #[test]
    fn explicit_flags_are_kept_and_reported() {
        let asked = Capacity {
            max_processes: 1000,
            ..Config::defaults().asked_capacity()
        };
        let fit = fit_to_limit(asked, 1024, |id| id == "max_processes");
        assert_eq!(fit.capacity.max_processes, 1000);
        assert!(fit.overcommitted.is_some());
    }
}
