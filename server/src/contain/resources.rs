//! Resource limits and accounting of a process's cgroup: `memory`, `cpu`,
//! `pids` (and `io` where there is one) controllers, written when the
//! process's cgroup is made, before its clone, so nothing of it ever runs
//! unlimited; read for its `usage` while it runs and at its exit.
//!
//! Two places the controllers can be:
//! - **cgroup v2** (`Controllers::V2`): enabled in the instance cgroup's
//!   `cgroup.subtree_control`, so each process cgroup has `memory.max`,
//!   `cpu.max`, `pids.max`... of its own. The instance cgroup holds no
//!   process, so the "no internal processes" rule allows it.
//! - **cgroup v1 beside a v2 containment** (`Controllers::V1`), a hybrid
//!   host where the controllers are bound to v1 hierarchies (v2 then has
//!   none to enable): a cgroup per process in each of the `memory`, `cpu`,
//!   `cpuacct`, `pids` (and `blkio`) hierarchies, which the child joins
//!   before it execs by writing `0` to each one's `tasks`
//!   (`Entry::controller_procs`; `tasks`, for no system-wide lock). v1 has
//!   no `memory.high`: a request for it is refused there, never ignored.
//!
//! Blocking file IO throughout (cgroupfs: microseconds): call it off the
//! runtime's workers, or accept a few file reads where it says so.

use std::fs;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use tether_protocol::Limits;

use super::cgroup::{find_v1_mount, own_v1_cgroup, V1_JOIN_FILE};
use super::meter::Dirs;
use super::meter::Meter;

/// `cpu.max`'s period: the kernel's default, 100 ms, as docker uses.
pub const CPU_PERIOD_US: u64 = 100_000;

/// v1 controllers this needs, each in the hierarchy that has it (two may
/// share one, as `cpu,cpuacct` often do).
const V1_REQUIRED: [&str; 4] = ["memory", "cpu", "cpuacct", "pids"];

/// The v1 controller named `name`, as the static name meters keep.
pub fn v1_controller(name: &str) -> Option<&'static str> {
    V1_REQUIRED
        .into_iter()
        .chain(["blkio"])
        .find(|controller| *controller == name)
}

/// The v2 controllers enabled for process cgroups; `io` is optional.
const V2_REQUIRED: [&str; 3] = ["memory", "cpu", "pids"];

/// Where this server's resource controllers are.
#[derive(Debug)]
pub enum Controllers {
    /// In the v2 instance cgroup: each process cgroup has them.
    V2 {
        /// Whether `io` is enabled too (`io.stat`).
        io: bool,
    },
    /// In v1 hierarchies: the instance cgroup of each (controller, dir).
    V1 {
        /// One entry per controller; co-mounted controllers share a dir.
        instances: Vec<(&'static str, PathBuf)>,
    },
}

impl Controllers {
    /// For the log: `v2 (memory, cpu, pids, io)`, `v1 memory:/sys/...`.
    pub fn describe(&self) -> String {
        match self {
            Controllers::V2 { io } => {
                format!("v2 (memory, cpu, pids{})", if *io { ", io" } else { "" })
            }
            Controllers::V1 { instances } => {
                let each: Vec<String> = instances
                    .iter()
                    .map(|(name, dir)| format!("{name}:{}", dir.display()))
                    .collect();
                format!("v1 {}", each.join(" "))
            }
        }
    }
}

impl Controllers {
    /// Enables `memory`, `cpu`, `pids` (and `io`) for the process cgroups
    /// under the v2 instance cgroup `instance`. They must be available to
    /// it: enabled in its parent's (the server's own cgroup's)
    /// `subtree_control`, which is tried too. The kernel allows that only
    /// in a cgroup with no process of its own ("no internal processes")
    /// or the root: where the server's own cgroup holds only the server
    /// and its guard (`ours`), as in a systemd service with `Delegate=yes`
    /// or a container, they move to a leaf `tetherd` below it first. None
    /// when any required one is missing.
    pub fn enable_v2(instance: &Path, ours: &[u32]) -> Option<Controllers> {
        let available = |dir: &Path| -> Vec<String> {
            fs::read_to_string(dir.join("cgroup.controllers"))
                .map(|t| t.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        let has_all = |list: &[String]| V2_REQUIRED.iter().all(|c| list.iter().any(|l| l == c));
        if !has_all(&available(instance)) {
            let parent = instance.parent()?;
            // Delegated to the server's cgroup, or nothing can be done.
            if !has_all(&available(parent)) {
                return None;
            }
            let enable = || {
                for controller in V2_REQUIRED.iter().chain(["io"].iter()) {
                    let _ = write(
                        &parent.join("cgroup.subtree_control"),
                        &format!("+{controller}"),
                    );
                }
            };
            enable();
            if !has_all(&available(instance)) {
                if let Err(e) = leave_for_leaf(parent, ours) {
                    tracing::warn!(error = %e, "cannot enable cgroup v2 controllers below the server's own cgroup");
                    return None;
                }
                enable();
            }
            if !has_all(&available(instance)) {
                return None;
            }
        }
        let control = instance.join("cgroup.subtree_control");
        for controller in V2_REQUIRED {
            write(&control, &format!("+{controller}")).ok()?;
        }
        let io = available(instance).iter().any(|c| c == "io") && write(&control, "+io").is_ok();
        Some(Controllers::V2 { io })
    }

    /// Creates `name` (the instance cgroup's name) in each v1 hierarchy of
    /// `V1_REQUIRED` and `blkio`, below this server's own cgroup there.
    /// None when a required one is missing or not writable (then nothing
    /// is left behind).
    /// A handover adopts them as they are (`adopt`): a directory that
    /// exists already is the old binary's, and is used.
    pub fn create_v1(name: &str, adopt: bool) -> Option<Controllers> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
        let own = fs::read_to_string("/proc/self/cgroup").ok()?;
        let mut instances: Vec<(&'static str, PathBuf)> = Vec::new();
        let mut made: Vec<PathBuf> = Vec::new();
        let undo = |made: &[PathBuf]| {
            for dir in made {
                let _ = fs::remove_dir(dir);
            }
        };
        for controller in V1_REQUIRED.into_iter().chain(["blkio"]) {
            let found = find_v1_mount(&mountinfo, controller).and_then(|(mount, root)| {
                let path = own_v1_cgroup(&own, controller)?;
                let relative = path
                    .strip_prefix(root.as_str())
                    .unwrap_or(path.as_str())
                    .trim_start_matches('/')
                    .to_string();
                Some(Path::new(&mount).join(relative).join(name))
            });
            let Some(dir) = found else {
                if controller == "blkio" {
                    continue;
                }
                undo(&made);
                return None;
            };
            if !made.contains(&dir) {
                let made_now = match fs::create_dir(&dir) {
                    Err(e) if adopt && e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
                    other => other.map(|()| true),
                };
                if let Err(e) = made_now {
                    if controller == "blkio" {
                        continue;
                    }
                    tracing::debug!(controller, error = %e, "no v1 controller cgroup");
                    undo(&made);
                    return None;
                }
                if made_now.unwrap_or(false) {
                    made.push(dir.clone());
                }
            }
            instances.push((controller, dir));
        }
        Some(Controllers::V1 { instances })
    }

    /// Whether these controllers can apply `limits` (v1 has no
    /// `memory.high`): the reason when not.
    pub fn refusal(&self, limits: &Limits) -> Option<&'static str> {
        match self {
            Controllers::V1 { .. } if limits.memory_high_bytes.is_some() => Some(
                "limits.memory_high_bytes needs cgroup v2's memory controller; this host's memory controller is cgroup v1 (memory_bytes works)",
            ),
            _ => None,
        }
    }

    /// The controllers of the process cgroup `cell` (made already; `v2`
    /// when it is a cgroup v2 directory) named `name`, with `limits`
    /// written to them. Returns the meter and, for v1, each hierarchy's
    /// `tasks` for the child to join before exec. On error nothing is left
    /// behind.
    ///
    /// Each v1 cgroup costs a `mkdir`, an open, a write by the child and a
    /// `rmdir`, so `cpuacct` is made only where the cell is not a v2
    /// cgroup: a v2 cgroup's `cpu.stat` has the same CPU time without any
    /// controller. `cpu` is made for every process, limit or not: a
    /// process in a group of its own shares the CPU with the others as one
    /// (as each v2 cell with the `cpu` controller does), not per thread.
    pub fn cell(
        &self,
        cell: &Path,
        v2: bool,
        name: &str,
        limits: &Limits,
    ) -> io::Result<(Meter, Vec<OwnedFd>)> {
        match self {
            Controllers::V2 { io } => {
                let meter = Meter::new(Dirs::V2 {
                    dir: cell.to_path_buf(),
                    io: *io,
                });
                write_v2_limits(cell, limits)?;
                Ok((meter, Vec::new()))
            }
            Controllers::V1 { instances } => {
                let mut dirs: Vec<(&'static str, PathBuf)> = Vec::new();
                let mut procs = Vec::new();
                let wanted = |controller: &str| controller != "cpuacct" || !v2;
                // A hierarchy with several of them (`cpu,cpuacct`) is
                // made if any of its controllers is wanted.
                let needed: Vec<&(&'static str, PathBuf)> = instances
                    .iter()
                    .filter(|(_, instance)| {
                        instances
                            .iter()
                            .any(|(controller, shared)| shared == instance && wanted(controller))
                    })
                    .collect();
                let result = (|| {
                    for (controller, instance) in needed {
                        let dir = instance.join(name);
                        if let Some((_, shared)) = dirs.iter().find(|(_, d)| *d == dir) {
                            let shared = shared.clone();
                            dirs.push((controller, shared));
                            continue;
                        }
                        fs::create_dir(&dir)?;
                        dirs.push((controller, dir.clone()));
                        procs.push(OwnedFd::from(
                            fs::OpenOptions::new()
                                .write(true)
                                .open(dir.join(V1_JOIN_FILE))?,
                        ));
                    }
                    let dir_of = |c: &str| dirs.iter().find(|(n, _)| *n == c).map(|(_, d)| d);
                    write_v1_limits(dir_of("memory"), dir_of("cpu"), dir_of("pids"), limits)
                })();
                let cpu_stat = v2.then(|| cell.to_path_buf());
                let meter = Meter::new(Dirs::V1 { dirs, cpu_stat });
                match result {
                    Ok(()) => Ok((meter, procs)),
                    Err(e) => {
                        drop(procs);
                        meter.remove();
                        Err(e)
                    }
                }
            }
        }
    }

    /// The v1 instance cgroups, for the guard to remove should the server
    /// die (v2's is the containment's own).
    pub fn v1_dirs(&self) -> Vec<&Path> {
        match self {
            Controllers::V1 { instances } => {
                let mut dirs: Vec<&Path> = instances.iter().map(|(_, d)| d.as_path()).collect();
                dirs.dedup();
                dirs
            }
            Controllers::V2 { .. } => Vec::new(),
        }
    }

    /// Removes the v1 instance cgroups (at shutdown, once every process
    /// cgroup below is gone).
    pub fn remove(&self) {
        for dir in self.v1_dirs() {
            remove_v1_instance(dir);
        }
    }
}

/// Name of the leaf the server and its guard move to (see
/// [`Controllers::enable_v2`]); one per cgroup, reused by the next server.
pub const SERVER_LEAF: &str = "tetherd";

/// Moves the processes of `own` (which must all be `ours`) to its leaf
/// [`SERVER_LEAF`], so `own` may enable controllers for its children.
fn leave_for_leaf(own: &Path, ours: &[u32]) -> io::Result<()> {
    let procs = super::cgroup::members(own);
    if let Some(other) = procs.iter().find(|p| !ours.contains(&(**p as u32))) {
        return Err(io::Error::other(format!(
            "{} holds process {other}, which is not tetherd's: start tetherd in a cgroup of its own (systemd: Delegate=yes)",
            own.display()
        )));
    }
    let leaf = own.join(SERVER_LEAF);
    match fs::create_dir(&leaf) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    for pid in procs {
        write(&leaf.join("cgroup.procs"), &pid.to_string())?;
    }
    Ok(())
}

/// Removes a v1 instance cgroup and the process cgroups below it, which
/// are empty once their processes' v2 cgroups are (the same processes).
pub fn remove_v1_instance(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = fs::remove_dir(entry.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

fn write_v2_limits(dir: &Path, limits: &Limits) -> io::Result<()> {
    if let Some(high) = limits.memory_high_bytes {
        write(&dir.join("memory.high"), &high.to_string())?;
    }
    if let Some(max) = limits.memory_bytes {
        write(&dir.join("memory.max"), &max.to_string())?;
        // No swap, or the limit would only move the memory to the swap.
        // Absent when the kernel has no swap accounting: no swap to use.
        let swap = dir.join("memory.swap.max");
        if swap.exists() {
            write(&swap, "0")?;
        }
    }
    if let Some(cpus) = limits.cpus {
        write(
            &dir.join("cpu.max"),
            &format!("{} {CPU_PERIOD_US}", cpu_quota_us(cpus)),
        )?;
    }
    if let Some(pids) = limits.pids {
        write(&dir.join("pids.max"), &pids.to_string())?;
    }
    Ok(())
}

fn write_v1_limits(
    memory: Option<&PathBuf>,
    cpu: Option<&PathBuf>,
    pids: Option<&PathBuf>,
    limits: &Limits,
) -> io::Result<()> {
    let missing = |c: &str| io::Error::new(io::ErrorKind::NotFound, format!("no {c} cgroup"));
    if let Some(max) = limits.memory_bytes {
        let dir = memory.ok_or_else(|| missing("memory"))?;
        write(&dir.join("memory.limit_in_bytes"), &max.to_string())?;
        // Memory plus swap no more than memory: no swap. Without swap
        // accounting the file is absent; swappiness 0 keeps it out of swap.
        let memsw = dir.join("memory.memsw.limit_in_bytes");
        if memsw.exists() {
            write(&memsw, &max.to_string())?;
        } else {
            let _ = write(&dir.join("memory.swappiness"), "0");
        }
    }
    if let Some(cpus) = limits.cpus {
        let dir = cpu.ok_or_else(|| missing("cpu"))?;
        write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
        write(
            &dir.join("cpu.cfs_quota_us"),
            &cpu_quota_us(cpus).to_string(),
        )?;
    }
    if let Some(max) = limits.pids {
        let dir = pids.ok_or_else(|| missing("pids"))?;
        write(&dir.join("pids.max"), &max.to_string())?;
    }
    Ok(())
}

/// The quota per [`CPU_PERIOD_US`] for `cpus` CPUs (at least the kernel's
/// minimum, 1 ms).
pub fn cpu_quota_us(cpus: f64) -> u64 {
    ((cpus * CPU_PERIOD_US as f64).round() as u64).max(1000)
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_quota_is_a_share_of_the_period() {
        assert_eq!(cpu_quota_us(0.5), 50_000);
        assert_eq!(cpu_quota_us(2.0), 200_000);
        assert_eq!(cpu_quota_us(0.001), 1000);
    }

    /// On the project's machines (root, cgroup2 mounted and writable): the
    /// server's processes move to the leaf, and a stranger's presence
    /// keeps everything in place.
    #[test]
    fn only_the_servers_own_processes_move_to_the_leaf() {
        use super::super::cgroup::{members, CgroupKind, Instance};
        let own = Instance::create(CgroupKind::V2).expect("cgroup2 writable");
        let sleeper = || {
            let child = std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("sleep");
            write(&own.dir().join("cgroup.procs"), &child.id().to_string()).expect("join");
            child
        };
        let mut children = [sleeper(), sleeper()];
        let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
        let refused = leave_for_leaf(own.dir(), &pids[..1]);
        assert!(
            refused.is_err(),
            "a stranger's process must keep the cgroup as it is"
        );
        assert_eq!(members(own.dir()).len(), 2);
        leave_for_leaf(own.dir(), &pids).expect("moved");
        assert!(members(own.dir()).is_empty());
        let leaf = own.dir().join(SERVER_LEAF);
        let mut moved: Vec<u32> = members(&leaf).into_iter().map(|p| p as u32).collect();
        moved.sort_unstable();
        let mut expected = pids.clone();
        expected.sort_unstable();
        assert_eq!(moved, expected);
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir(&leaf);
        let _ = fs::remove_dir(own.dir());
    }
}
