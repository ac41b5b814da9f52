//! A cgroup per process, under one instance cgroup per server
//! (`<own cgroup>/tether-<pid>-<random>/<process id>`), so that every descendant of a
//! process can be found and ended however it detached (`setsid`, double
//! fork, a fork loop): membership is inherited by the kernel at fork and
//! cannot be left without writing to a cgroup file.
//!
//! Two kinds:
//! - **cgroup v2** (`cgroup2`): `cgroup.kill` ends every member and every
//!   nested cgroup at once (Linux 5.14); other signals are sent to the
//!   listed members while the cgroup is frozen (`cgroup.freeze`).
//! - **cgroup v1 freezer** (`cgroup1-freezer`): freeze (`freezer.state`),
//!   signal every listed member, thaw; a frozen member cannot fork or exit,
//!   so the list is complete and no listed number is reused meanwhile.
//!
//! Every function here does blocking file IO: call it off the runtime's
//! workers (`spawn_blocking`), or at startup.

use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Which cgroup interface a hierarchy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupKind {
    /// The unified hierarchy.
    V2,
    /// A v1 hierarchy with the freezer controller.
    V1Freezer,
}

impl CgroupKind {
    /// The name the process object reports in `containment`.
    pub fn name(self) -> &'static str {
        match self {
            CgroupKind::V2 => "cgroup2",
            CgroupKind::V1Freezer => "cgroup1-freezer",
        }
    }
}

/// How long freezing may take before members are signalled anyway. A
/// member stuck in an uninterruptible sleep delays freezing; the bound keeps
/// a kill from hanging on it.
const FREEZE_BOUND: Duration = Duration::from_millis(500);

/// The file a child writes `0` to, before it execs, to join a cgroup v1
/// hierarchy: `tasks`, not `cgroup.procs`. Both move a single-threaded
/// child whole, but a write to `cgroup.procs` (a thread group) or of
/// another task's pid takes the kernel's system-wide
/// `cgroup_threadgroup_rwsem` for writing, which waits for an RCU grace
/// period (about 1 ms on a quiet 2-vCPU VM, 10-25 ms under load) while
/// this server's worker waits on the vfork. The kernel moves `current`
/// through `tasks` without that lock (`cgroup_procs_write_start`: "If we
/// migrate a single thread, we don't care about threadgroup stability").
/// v2 has no such file for a domain cgroup; there the child is born in
/// its cgroup by `clone3` instead.
pub const V1_JOIN_FILE: &str = "tasks";

/// How long a kill waits for the members it killed to be dead.
const DEATH_BOUND: Duration = Duration::from_secs(1);

/// The server's own cgroup in one hierarchy, holding a cgroup per process.
#[derive(Debug, Clone)]
pub struct Instance {
    kind: CgroupKind,
    dir: PathBuf,
}

impl Instance {
    /// Finds the hierarchy of `kind`, and creates this server's instance
    /// cgroup below the cgroup the server runs in. Fails when the hierarchy
    /// is not mounted or not writable.
    pub fn create(kind: CgroupKind) -> io::Result<Instance> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
        let own = fs::read_to_string("/proc/self/cgroup")?;
        let (mount, root) = find_mount(&mountinfo, kind)
            .ok_or_else(|| not_found(format!("no {} hierarchy is mounted", kind.name())))?;
        let path = own_cgroup(&own, kind)
            .ok_or_else(|| not_found(format!("not in a {} cgroup", kind.name())))?;
        let relative = path
            .strip_prefix(root.as_str())
            .unwrap_or(path.as_str())
            .trim_start_matches('/');
        let parent = Path::new(&mount).join(relative);
        // The pid alone is not unique: servers in pid namespaces are all 1.
        let unique = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let dir = parent.join(format!("tether-{}-{unique}", std::process::id()));
        fs::create_dir(&dir)?;
        let instance = Instance { kind, dir };
        if kind == CgroupKind::V2 && !instance.dir.join("cgroup.kill").exists() {
            let _ = fs::remove_dir(&instance.dir);
            return Err(not_found(
                "cgroup2 has no cgroup.kill (Linux < 5.14)".into(),
            ));
        }
        Ok(instance)
    }

    /// Reopens an instance cgroup by path (the guard, given it by tetherd).
    pub fn at(kind: CgroupKind, dir: PathBuf) -> Instance {
        Instance { kind, dir }
    }

    /// Which interface this is.
    pub fn kind(&self) -> CgroupKind {
        self.kind
    }

    /// The instance cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates the cgroup of one process, with the descriptors its launch
    /// needs (see [`Entry`]). `name` must be a plain file name.
    pub fn cell(&self, name: &str) -> io::Result<(Cell, Entry)> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad cgroup name",
            ));
        }
        let dir = self.dir.join(name);
        fs::create_dir(&dir)?;
        let cell = Cell {
            kind: self.kind,
            dir,
        };
        match cell.entry() {
            Ok(entry) => Ok((cell, entry)),
            Err(e) => {
                let _ = fs::remove_dir(&cell.dir);
                Err(e)
            }
        }
    }

    /// Ends every member of every process cgroup, then removes what is
    /// empty. Used at shutdown and by the guard after the server died.
    pub fn kill_everything(&self) {
        match self.kind {
            // cgroup.kill is recursive.
            CgroupKind::V2 => {
                let _ = write_file(&self.dir.join("cgroup.kill"), b"1");
            }
            // Freezing is recursive in v1; killing is per cgroup.
            CgroupKind::V1Freezer => {
                for _ in 0..KILL_ROUNDS {
                    let cells = self.cell_dirs();
                    let listed = frozen(self.kind, &self.dir, || {
                        let mut n = signal_listed(&self.dir, Signal::SIGKILL);
                        for cell in &cells {
                            n += signal_listed(cell, Signal::SIGKILL);
                        }
                        n
                    });
                    if listed == 0 {
                        break;
                    }
                }
            }
        }
        self.remove_empty_cells(Duration::from_secs(2));
    }

    /// Removes the cgroups of processes whose members are all gone, waiting
    /// at most `bound` for members that are dying; then the instance
    /// cgroup itself if nothing is left.
    pub fn remove_empty_cells(&self, bound: Duration) {
        let start = Instant::now();
        loop {
            let cells = self.cell_dirs();
            let left = cells
                .iter()
                .filter(|dir| fs::remove_dir(dir).is_err())
                .count();
            if left == 0 || start.elapsed() >= bound {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = fs::remove_dir(&self.dir);
    }

    fn cell_dirs(&self) -> Vec<PathBuf> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect()
    }
}

/// Kill rounds in v1: a member that forked between freezes is caught by the
/// next round; all are frozen when signalled, so few rounds are needed.
const KILL_ROUNDS: usize = 16;

/// The cgroup of one process.
#[derive(Debug)]
pub struct Cell {
    kind: CgroupKind,
    dir: PathBuf,
}

/// The ways into a [`Cell`] for the launch of its process, open only until
/// the launch returned: a running process costs no descriptor for its
/// cgroup.
#[derive(Debug)]
pub struct Entry {
    /// `cgroup.procs` (v2) or `tasks` (v1, see [`V1_JOIN_FILE`]), open for
    /// writing and close-on-exec: a child not born in the cgroup writes
    /// `0` to it before exec, so it and everything it forks is a member
    /// from its first instruction on.
    pub procs: OwnedFd,
    /// The cgroup's directory, for `clone3(CLONE_INTO_CGROUP)` (v2 only;
    /// `None` for v1 or if it cannot be opened).
    pub dir: Option<OwnedFd>,
    /// `tasks` ([`V1_JOIN_FILE`]) of the process's cgroup in each v1
    /// controller hierarchy (a hybrid host's resource controllers, see
    /// `resources.rs`): the child writes `0` to each before exec, whether
    /// or not it was born in its v2 cgroup.
    pub controller_procs: Vec<OwnedFd>,
}

impl Cell {
    /// The cell of a process a handover carried.
    pub fn at(kind: CgroupKind, dir: PathBuf) -> Cell {
        Cell { kind, dir }
    }

    /// Which interface this is.
    pub fn kind(&self) -> CgroupKind {
        self.kind
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry(&self) -> io::Result<Entry> {
        let join = match self.kind {
            CgroupKind::V2 => "cgroup.procs",
            CgroupKind::V1Freezer => V1_JOIN_FILE,
        };
        let procs = open_write(&self.dir.join(join))?;
        let dir = match self.kind {
            CgroupKind::V2 => fs::File::open(&self.dir).ok().map(OwnedFd::from),
            CgroupKind::V1Freezer => None,
        };
        Ok(Entry {
            procs,
            dir,
            controller_procs: Vec::new(),
        })
    }

    /// Sends `signal` to every member. Returns how many were signalled.
    pub fn signal_all(&self, signal: Signal) -> usize {
        frozen(self.kind, &self.dir, || signal_listed(&self.dir, signal))
    }

    /// Ends every member, including those forked meanwhile, and waits
    /// (at most a second) until they are dead, as a kill by pid
    /// would have found them.
    pub fn kill_all(&self) {
        self.send_kill();
        let start = Instant::now();
        while self.is_populated() && start.elapsed() < DEATH_BOUND {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn send_kill(&self) {
        match self.kind {
            CgroupKind::V2 => {
                if write_file(&self.dir.join("cgroup.kill"), b"1").is_err() {
                    let _ = self.signal_all(Signal::SIGKILL);
                }
            }
            CgroupKind::V1Freezer => {
                for _ in 0..KILL_ROUNDS {
                    if self.signal_all(Signal::SIGKILL) == 0 {
                        break;
                    }
                }
            }
        }
    }

    /// Whether any process is still a member.
    pub fn is_populated(&self) -> bool {
        match self.kind {
            CgroupKind::V2 => fs::read_to_string(self.dir.join("cgroup.events"))
                .map(|events| events.lines().any(|l| l == "populated 1"))
                .unwrap_or(false),
            CgroupKind::V1Freezer => !members(&self.dir).is_empty(),
        }
    }

    /// Removes the cgroup once its members are gone: `EBUSY` while any is
    /// left.
    pub fn remove(&self) -> io::Result<()> {
        fs::remove_dir(&self.dir)
    }
}

/// Runs `f` with the cgroup frozen (best effort, bounded by
/// [`FREEZE_BOUND`]), then thaws it.
fn frozen<T>(kind: CgroupKind, dir: &Path, f: impl FnOnce() -> T) -> T {
    let (file, freeze, thaw): (&str, &[u8], &[u8]) = match kind {
        CgroupKind::V2 => ("cgroup.freeze", b"1", b"0"),
        CgroupKind::V1Freezer => ("freezer.state", b"FROZEN", b"THAWED"),
    };
    let control = dir.join(file);
    if write_file(&control, freeze).is_ok() {
        let start = Instant::now();
        while !is_frozen(kind, dir) && start.elapsed() < FREEZE_BOUND {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let result = f();
    let _ = write_file(&control, thaw);
    result
}

fn is_frozen(kind: CgroupKind, dir: &Path) -> bool {
    match kind {
        CgroupKind::V2 => fs::read_to_string(dir.join("cgroup.events"))
            .map(|events| events.lines().any(|l| l == "frozen 1"))
            .unwrap_or(true),
        CgroupKind::V1Freezer => fs::read_to_string(dir.join("freezer.state"))
            .map(|state| state.trim() == "FROZEN")
            .unwrap_or(true),
    }
}

/// Signals every process listed in `dir/cgroup.procs`; returns how many.
fn signal_listed(dir: &Path, signal: Signal) -> usize {
    let pids = members(dir);
    for pid in &pids {
        let _ = kill(Pid::from_raw(*pid), signal);
    }
    pids.len()
}

/// The processes listed in `dir/cgroup.procs`.
pub fn members(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn open_write(path: &Path) -> io::Result<OwnedFd> {
    Ok(fs::OpenOptions::new().write(true).open(path)?.into())
}

fn write_file(path: &Path, value: &[u8]) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value)
}

fn not_found(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, message)
}

/// The mount point and mount root of the hierarchy of `kind`, from
/// `/proc/self/mountinfo`.
fn find_mount(mountinfo: &str, kind: CgroupKind) -> Option<(String, String)> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let left: Vec<&str> = left.split(' ').collect();
        let mut right = right.split(' ');
        let fstype = right.next()?;
        let _source = right.next()?;
        let options = right.next().unwrap_or("");
        let wanted = match kind {
            CgroupKind::V2 => fstype == "cgroup2",
            CgroupKind::V1Freezer => {
                fstype == "cgroup" && options.split(',').any(|o| o == "freezer")
            }
        };
        if !wanted {
            return None;
        }
        Some((unescape(left.get(4)?), unescape(left.get(3)?)))
    })
}

/// The mount point and mount root of the v1 hierarchy that has
/// `controller` (`memory`, `cpu`...), from `/proc/self/mountinfo`.
pub fn find_v1_mount(mountinfo: &str, controller: &str) -> Option<(String, String)> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let left: Vec<&str> = left.split(' ').collect();
        let mut right = right.split(' ');
        let fstype = right.next()?;
        let _source = right.next()?;
        let options = right.next().unwrap_or("");
        if fstype != "cgroup" || !options.split(',').any(|o| o == controller) {
            return None;
        }
        Some((unescape(left.get(4)?), unescape(left.get(3)?)))
    })
}

/// The server's cgroup path in the v1 hierarchy that has `controller`.
pub fn own_v1_cgroup(cgroups: &str, controller: &str) -> Option<String> {
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let _id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.to_string())
    })
}

/// The server's cgroup path in the hierarchy of `kind`, from
/// `/proc/self/cgroup` (`0::/path` for v2, `N:ctrl,ctrl:/path` for v1).
fn own_cgroup(cgroups: &str, kind: CgroupKind) -> Option<String> {
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        let wanted = match kind {
            CgroupKind::V2 => id == "0" && controllers.is_empty(),
            CgroupKind::V1Freezer => controllers.split(',').any(|c| c == "freezer"),
        };
        wanted.then(|| path.to_string())
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let octal = std::str::from_utf8(&bytes[i + 1..i + 4]).ok();
            if let Some(v) = octal.and_then(|o| u8::from_str_radix(o, 8).ok()) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A path as a C string, for the guard's and the launcher's raw calls.
pub fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
25 30 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
31 25 0:27 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
32 25 0:28 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
33 25 0:29 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_the_v2_and_the_v1_freezer_mounts() {
        assert_eq!(
            find_mount(MOUNTINFO, CgroupKind::V2),
            Some(("/sys/fs/cgroup/unified".into(), "/".into()))
        );
        assert_eq!(
            find_mount(MOUNTINFO, CgroupKind::V1Freezer),
            Some(("/sys/fs/cgroup/freezer".into(), "/".into()))
        );
        assert_eq!(find_mount("", CgroupKind::V2), None);
    }

    #[test]
    fn finds_the_servers_own_cgroup_in_each_hierarchy() {
        let own = "8:pids:/a\n6:freezer:/b/c\n4:memory,cpu:/d\n0::/e/f\n";
        assert_eq!(own_cgroup(own, CgroupKind::V2).as_deref(), Some("/e/f"));
        assert_eq!(
            own_cgroup(own, CgroupKind::V1Freezer).as_deref(),
            Some("/b/c")
        );
    }

    #[test]
    fn finds_v1_controller_hierarchies() {
        assert_eq!(
            find_v1_mount(MOUNTINFO, "pids"),
            Some(("/sys/fs/cgroup/pids".into(), "/".into()))
        );
        assert_eq!(find_v1_mount(MOUNTINFO, "memory"), None);
        let own = "8:pids:/a\n4:memory,cpu:/d\n0::/e/f\n";
        assert_eq!(own_v1_cgroup(own, "cpu").as_deref(), Some("/d"));
        assert_eq!(own_v1_cgroup(own, "blkio"), None);
    }

    #[test]
    fn unescapes_mountinfo_paths() {
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }

    /// On the project's machines (root, v2 and v1 freezer mounted) a cell
    /// holds a process and everything it forks, and kill_all ends them all.
    fn kill_all_ends_a_detached_grandchild(kind: CgroupKind) {
        let instance = Instance::create(kind).expect("cgroup hierarchy writable");
        let (cell, entry) = instance.cell("unit-test").expect("cell");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&entry.procs);
        let mut child = std::process::Command::new("sh");
        child.args(["-c", "setsid sleep 300 & (sleep 300 &) ; sleep 300"]);
        // SAFETY: write(2) is async-signal-safe and touches no parent memory.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut child, move || {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = child.spawn().expect("spawn");
        let start = Instant::now();
        while members(&cell.dir).len() < 4 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "members never forked"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        cell.kill_all();
        let _ = child.wait();
        let start = Instant::now();
        while cell.is_populated() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "members survived"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        cell.remove().expect("empty cell removed");
        instance.remove_empty_cells(Duration::ZERO);
        assert!(!instance.dir().exists());
    }

    #[test]
    fn a_v2_cell_kills_every_descendant() {
        kill_all_ends_a_detached_grandchild(CgroupKind::V2);
    }

    #[test]
    fn a_v1_freezer_cell_kills_every_descendant() {
        kill_all_ends_a_detached_grandchild(CgroupKind::V1Freezer);
    }
}
