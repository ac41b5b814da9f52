//! Resource limits of a process (`limits` in a spawn request, and as
//! applied in the process object) and what it used (`usage`).

use serde::{Deserialize, Serialize};

/// Limits of one process and everything it forks, each optional. In a
/// spawn request they are what the client asks for; in the process object,
/// what the server applied (the request's, else the server's defaults).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Memory in bytes (`memory.max`, with no swap). Past it the kernel's
    /// OOM killer ends a member: the exit's `reason` is `oom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// CPU time as a share of CPUs, as `docker --cpus`: 0.5 is half of one
    /// CPU, 2 is two CPUs' worth (`cpu.max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Most tasks (processes and threads) at once (`pids.max`): past it
    /// `fork` and `clone` fail with EAGAIN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// A soft memory limit in bytes (`memory.high`): past it the process is
    /// slowed and reclaimed, never killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_high_bytes: Option<u64>,
}

// `cpus` is never NaN: requests are JSON (which has no NaN) and the server
// refuses a value that is not a positive finite number.
impl Eq for Limits {}

impl Limits {
    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

/// What a process and everything it forked used: CPU, peak memory, tasks
/// and block IO. Live while it runs, final at its exit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU seconds in user mode.
    pub cpu_user_s: f64,
    /// CPU seconds in the kernel on its behalf.
    pub cpu_system_s: f64,
    /// The most memory it held at once, in bytes (its cgroup's peak
    /// charge: anonymous memory, page cache it brought in, kernel memory).
    pub memory_peak_bytes: u64,
    /// The most tasks (processes and threads) it had at once.
    pub processes: u64,
    /// Bytes read from block devices (absent where the kernel does not
    /// account it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_read_bytes: Option<u64>,
    /// Bytes written to block devices (absent where not accounted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_write_bytes: Option<u64>,
}

// CPU seconds are made from the kernel's integer counters: never NaN.
impl Eq for Usage {}
