//! The usage of one process's cgroups ([`Meter`]): CPU seconds, peak
//! memory, most tasks at once, block IO, OOM kills and pids events, read
//! from the v2 files of its cgroup or its v1 controller cgroups (see
//! `resources.rs`, which makes them). Each read is a few small reads of
//! cgroupfs (in memory, microseconds).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tether_protocol::Usage;

/// The resource cgroups of one process: where its limits are and its
/// usage is read.
#[derive(Debug)]
pub struct Meter {
    dirs: Dirs,
    /// The highest memory and task counts seen, for kernels without
    /// `memory.peak` / `pids.peak`.
    memory_sampled: AtomicU64,
    pids_sampled: AtomicU64,
}

/// Where a meter reads.
#[derive(Debug)]
pub(super) enum Dirs {
    /// The process's v2 cgroup, and whether `io` is enabled.
    V2 { dir: PathBuf, io: bool },
    /// Its cgroup in each v1 controller hierarchy it was made in, and,
    /// where its containment cell is a v2 cgroup, that cell: CPU time is
    /// read from its `cpu.stat` then (there is no `cpuacct` cgroup).
    V1 {
        dirs: Vec<(&'static str, PathBuf)>,
        cpu_stat: Option<PathBuf>,
    },
}

impl Meter {
    /// The meter of cgroups made by `resources.rs`.
    pub(super) fn new(dirs: Dirs) -> Meter {
        Meter {
            dirs,
            memory_sampled: AtomicU64::new(0),
            pids_sampled: AtomicU64::new(0),
        }
    }

    /// Where it reads (for a handover to carry).
    pub(super) fn dirs(&self) -> &Dirs {
        &self.dirs
    }

    fn v1(&self, controller: &str) -> Option<&Path> {
        match &self.dirs {
            Dirs::V1 { dirs, .. } => dirs
                .iter()
                .find(|(c, _)| *c == controller)
                .map(|(_, d)| d.as_path()),
            Dirs::V2 { .. } => None,
        }
    }

    /// What the process and its descendants used so far. A few small
    /// reads of cgroupfs.
    pub fn usage(&self) -> Usage {
        let (cpu_user_s, cpu_system_s, memory, pids, io) = match &self.dirs {
            Dirs::V2 { dir, io } => {
                let (user, system) = cpu_stat(dir);
                let memory = read_u64(&dir.join("memory.peak"))
                    .map(Peak::Kernel)
                    .or_else(|| read_u64(&dir.join("memory.current")).map(Peak::Sample));
                let pids = read_u64(&dir.join("pids.peak"))
                    .map(Peak::Kernel)
                    .or_else(|| read_u64(&dir.join("pids.current")).map(Peak::Sample));
                let io = io.then(|| io_v2(&read(&dir.join("io.stat"))));
                (user, system, memory, pids, io)
            }
            Dirs::V1 { cpu_stat: cell, .. } => {
                let ns = |file: &str| {
                    self.v1("cpuacct")
                        .and_then(|d| read_u64(&d.join(file)))
                        .unwrap_or(0) as f64
                        / 1e9
                };
                let (user, system) = match cell {
                    Some(cell) => cpu_stat(cell),
                    None => (ns("cpuacct.usage_user"), ns("cpuacct.usage_sys")),
                };
                let memory = self
                    .v1("memory")
                    .and_then(|d| read_u64(&d.join("memory.max_usage_in_bytes")))
                    .map(Peak::Kernel);
                let pids = self.v1("pids").and_then(|d| {
                    read_u64(&d.join("pids.peak"))
                        .map(Peak::Kernel)
                        .or_else(|| read_u64(&d.join("pids.current")).map(Peak::Sample))
                });
                let io = self
                    .v1("blkio")
                    .map(|d| io_v1(&read(&d.join("blkio.throttle.io_service_bytes_recursive"))));
                (user, system, memory, pids, io)
            }
        };
        Usage {
            cpu_user_s,
            cpu_system_s,
            memory_peak_bytes: peak(memory, &self.memory_sampled),
            processes: peak(pids, &self.pids_sampled),
            io_read_bytes: io.map(|(r, _)| r),
            io_write_bytes: io.map(|(_, w)| w),
        }
    }

    /// How many times the kernel's OOM killer ended a member.
    pub fn oom_kills(&self) -> u64 {
        match &self.dirs {
            Dirs::V2 { dir, .. } => keyed(&read(&dir.join("memory.events")), "oom_kill"),
            Dirs::V1 { .. } => self
                .v1("memory")
                .and_then(|d| keyed(&read(&d.join("memory.oom_control")), "oom_kill")),
        }
        .unwrap_or(0)
    }

    /// Whether a fork failed at `pids.max`.
    pub fn pids_limit_hit(&self) -> bool {
        let events = match &self.dirs {
            Dirs::V2 { dir, .. } => read(&dir.join("pids.events")),
            Dirs::V1 { .. } => self
                .v1("pids")
                .map(|d| read(&d.join("pids.events")))
                .unwrap_or_default(),
        };
        keyed(&events, "max").unwrap_or(0) > 0
    }

    /// Removes the v1 cgroups (empty once the process's v2 cgroup is);
    /// the v2 one is the containment's to remove.
    pub fn remove(&self) {
        if let Dirs::V1 { dirs, .. } = &self.dirs {
            for (_, dir) in dirs {
                let _ = fs::remove_dir(dir);
            }
        }
    }
}

/// A peak from the kernel, or the current value to be kept as the
/// highest seen.
enum Peak {
    Kernel(u64),
    Sample(u64),
}

fn peak(value: Option<Peak>, sampled: &AtomicU64) -> u64 {
    match value {
        Some(Peak::Kernel(v)) => v,
        Some(Peak::Sample(v)) => sampled.fetch_max(v, Ordering::Relaxed).max(v),
        None => sampled.load(Ordering::Relaxed),
    }
}

/// User and system CPU seconds from a v2 cgroup's `cpu.stat`, which every
/// v2 cgroup has, with or without the `cpu` controller.
fn cpu_stat(dir: &Path) -> (f64, f64) {
    let text = read(&dir.join("cpu.stat"));
    let seconds = |key| keyed(&text, key).unwrap_or(0) as f64 / 1e6;
    (seconds("user_usec"), seconds("system_usec"))
}

/// A cgroupfs file, whole. Not `fs::read_to_string`, which asks for the
/// file's size first (a `statx` per file, and cgroupfs says 0 anyway): the
/// bill of every exit reads half a dozen of these.
fn read(path: &Path) -> String {
    use std::io::Read;
    let mut text = String::with_capacity(256);
    match fs::File::open(path) {
        // The largest is `memory.oom_control` or a per-device IO list; a
        // bound keeps a strange file from growing this without end.
        Ok(file) => match file.take(MAX_FILE).read_to_string(&mut text) {
            Ok(_) => text,
            Err(_) => String::new(),
        },
        Err(_) => text,
    }
}

/// Most bytes read of one cgroupfs file.
const MAX_FILE: u64 = 64 << 10;

fn read_u64(path: &Path) -> Option<u64> {
    read(path).trim().parse().ok()
}

/// The value of `key` in a `key value` per line file (`cpu.stat`,
/// `memory.events`, `pids.events`, `memory.oom_control`).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Read and written bytes summed over devices, from v2 `io.stat`
/// (`8:0 rbytes=N wbytes=N rios=N ...`).
fn io_v2(text: &str) -> (u64, u64) {
    let mut total = (0u64, 0u64);
    for field in text.split_whitespace() {
        if let Some(v) = field.strip_prefix("rbytes=") {
            total.0 += v.parse().unwrap_or(0);
        } else if let Some(v) = field.strip_prefix("wbytes=") {
            total.1 += v.parse().unwrap_or(0);
        }
    }
    total
}

/// The same from v1 `blkio.throttle.io_service_bytes_recursive`
/// (`8:0 Read N`, `8:0 Write N`, ..., `Total N`).
fn io_v1(text: &str) -> (u64, u64) {
    let mut total = (0u64, 0u64);
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(_device), Some(op), Some(n)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let n: u64 = n.parse().unwrap_or(0);
        match op {
            "Read" => total.0 += n,
            "Write" => total.1 += n,
            _ => {}
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_keyed_files() {
        let stat = "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n";
        assert_eq!(keyed(stat, "user_usec"), Some(2000));
        assert_eq!(keyed(stat, "usage"), None);
        let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(keyed(oom, "oom_kill"), Some(3));
    }

    #[test]
    fn sums_io_over_devices() {
        let v2 = "8:0 rbytes=100 wbytes=20 rios=1 wios=1\n8:16 rbytes=1 wbytes=2 rios=1\n";
        assert_eq!(io_v2(v2), (101, 22));
        let v1 = "8:0 Read 100\n8:0 Write 20\n8:0 Sync 120\n8:0 Total 120\nTotal 120\n";
        assert_eq!(io_v1(v1), (100, 20));
    }

    #[test]
    fn a_sampled_peak_keeps_the_highest() {
        let sampled = AtomicU64::new(0);
        assert_eq!(peak(Some(Peak::Sample(10)), &sampled), 10);
        assert_eq!(peak(Some(Peak::Sample(4)), &sampled), 10);
        assert_eq!(peak(Some(Peak::Kernel(7)), &sampled), 7);
    }
}
