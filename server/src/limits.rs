//! The open-file limit: raised from the soft to the hard limit at start, and
//! the defaults that cost file descriptors sized to fit what was got.
//!
//! What a descriptor budget must cover (counted in `/proc/PID/fd`, see
//! README.md and `tests/tests/budgets.rs`): a running process on pipes
//! holds stdout, stderr, a pidfd, with `"stdin": true` stdin, and a disk
//! log per stream; on a PTY the master, a pidfd and one disk log. Its
//! cgroup costs a descriptor only while it is launched. An exited process
//! still known keeps its disk logs (its output stays readable), a PTY its
//! master instead of a second log. A connection or an attachment holds its
//! socket.

use std::sync::OnceLock;

use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};

use crate::config::Config;

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
    pub max_processes: usize,
    pub max_known_processes: usize,
    pub max_connections: usize,
    pub max_attachments: usize,
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
pub fn fit_to_limit(config: &mut Config, limit: u64, explicit: impl Fn(&str) -> bool) -> Fit {
    let usable = limit.saturating_sub(FDS_RESERVED).max(1);
    let running_cost = processes_cost(config.max_processes, 0);
    let exited_cost =
        processes_cost(config.max_processes, config.max_known_processes) - running_cost;
    let connections_cost = config.max_connections as u64 * FDS_PER_CONNECTION;
    let fixed = explicit("max_processes") as u64 * running_cost
        + explicit("max_known_processes") as u64 * exited_cost
        + explicit("max_connections") as u64 * connections_cost;
    let flexible = running_cost + exited_cost + connections_cost - fixed;
    let room = usable.saturating_sub(fixed);
    let mut lowered = false;
    if flexible > room {
        lowered = true;
        let scale = |n: usize| -> usize {
            let scaled = (n as u128 * room as u128 / flexible as u128) as usize;
            scaled.max(1)
        };
        if !explicit("max_processes") {
            config.max_processes = scale(config.max_processes);
        }
        if !explicit("max_known_processes") {
            config.max_known_processes =
                scale(config.max_known_processes).max(config.max_processes);
        }
        if !explicit("max_connections") {
            config.max_connections = scale(config.max_connections);
        }
        if !explicit("max_attachments") {
            config.max_attachments = scale(config.max_attachments);
        }
    }
    // An attachment is a connection: more attachments than connections
    // could never be used.
    if !explicit("max_attachments") {
        config.max_attachments = config.max_attachments.min(config.max_connections);
    }
    let need = processes_cost(config.max_processes, config.max_known_processes)
        + config.max_connections as u64 * FDS_PER_CONNECTION
        + FDS_RESERVED;
    Fit {
        max_processes: config.max_processes,
        max_known_processes: config.max_known_processes,
        max_connections: config.max_connections,
        max_attachments: config.max_attachments,
        lowered,
        overcommitted: (need > limit).then_some(need),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fit_a_big_limit_unchanged() {
        let mut config = Config::defaults();
        let fit = fit_to_limit(&mut config, 1 << 20, |_| false);
        assert!(!fit.lowered);
        assert_eq!(fit.max_processes, Config::defaults().max_processes);
        assert!(fit.overcommitted.is_none());
    }

    #[test]
    fn defaults_shrink_to_fit_1024() {
        let mut config = Config::defaults();
        let fit = fit_to_limit(&mut config, 1024, |_| false);
        assert!(fit.lowered);
        assert!(fit.overcommitted.is_none(), "{fit:?}");
        assert!(fit.max_processes >= 32, "{fit:?}");
        assert!(fit.max_attachments <= fit.max_connections);
    }

    #[test]
    fn exited_processes_still_known_are_counted() {
        let mut config = Config::defaults();
        let fit = fit_to_limit(&mut config, 16_000, |_| false);
        assert!(fit.lowered, "{fit:?}");
        let need = processes_cost(fit.max_processes, fit.max_known_processes)
            + fit.max_connections as u64 * FDS_PER_CONNECTION
            + FDS_RESERVED;
        assert!(need <= 16_000, "{fit:?} needs {need}");
        assert!(fit.max_known_processes >= fit.max_processes);
    }

    #[test]
    fn explicit_flags_are_kept_and_reported() {
        let mut config = Config::defaults();
        config.max_processes = 1000;
        let fit = fit_to_limit(&mut config, 1024, |id| id == "max_processes");
        assert_eq!(fit.max_processes, 1000);
        assert!(fit.overcommitted.is_some());
    }
}
