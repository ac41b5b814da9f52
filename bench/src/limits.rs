//! The system limits the scale sections need: this process's open-file limit
//! (tetherd inherits it) and the kernel's PTY count.

use anyhow::{bail, Result};

/// Descriptors tetherd holds per running PTY session with one attachment,
/// as counted in /proc/PID/fd: the master, a pidfd, the retention ring
/// file, the socket; one spare.
pub const FDS_PER_PTY_SESSION: u64 = 5;
/// Per running process on pipes with one pending `wait`: stdout, stderr, a
/// pidfd, two ring files, the socket; one spare.
pub const FDS_PER_WAITED_PROCESS: u64 = 7;
/// For the server itself and the harness's own files.
pub const FDS_SPARE: u64 = 1024;

/// How many items costing `each` descriptors fit in the open-file limit
/// this process can reach (its hard limit, or `fs.nr_open` as root with
/// CAP_SYS_RESOURCE, which it cannot know without trying).
pub fn fitting(each: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the local struct only.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
    }
    limit.rlim_max.saturating_sub(FDS_SPARE) / each.max(1)
}

/// Raises this process's open-file limit to at least `need`: the soft limit
/// to the hard one, and, when that is not enough and we may (root, or
/// CAP_SYS_RESOURCE), the hard limit too, up to `fs.nr_open`. Children such
/// as tetherd inherit it. Returns the soft limit now in force; an error when
/// it stays below `need`.
pub fn raise_nofile_to(need: u64) -> Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the local struct only.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            bail!("getrlimit: {}", std::io::Error::last_os_error());
        }
    }
    let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20);
    if limit.rlim_max < need {
        let raised = libc::rlimit {
            rlim_cur: need.min(nr_open),
            rlim_max: need.min(nr_open),
        };
        // SAFETY: as above; refused (EPERM) without CAP_SYS_RESOURCE.
        unsafe {
            libc::setrlimit(libc::RLIMIT_NOFILE, &raised);
        }
    }
    // SAFETY: as above.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
    }
    if limit.rlim_cur < need {
        bail!(
            "open-file limit {} is below the {need} needed (raise the hard limit, \
             `ulimit -Hn {need}` as root, or run as root)",
            limit.rlim_cur
        );
    }
    Ok(limit.rlim_cur)
}

const PTY_MAX: &str = "/proc/sys/kernel/pty/max";
const PTY_NR: &str = "/proc/sys/kernel/pty/nr";

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Room for `more` PTYs beside those open now: `kernel.pty.max` raised
/// (as root) while this lives, put back on drop.
pub struct PtyRoom {
    restore: Option<u64>,
}

impl PtyRoom {
    pub fn ensure(more: u64) -> Result<PtyRoom> {
        let max = read_u64(PTY_MAX).unwrap_or(4096);
        let open = read_u64(PTY_NR).unwrap_or(0);
        // Headroom for whatever else on the machine opens terminals.
        let need = open + more + 256;
        if max >= need {
            return Ok(PtyRoom { restore: None });
        }
        if let Err(e) = std::fs::write(PTY_MAX, need.to_string()) {
            bail!(
                "{PTY_MAX} is {max}, {need} needed for {more} more PTYs, and raising it failed: \
                 {e} (as root: sysctl -w kernel.pty.max={need})"
            );
        }
        eprintln!("   raised {PTY_MAX} from {max} to {need} (restored afterwards)");
        Ok(PtyRoom { restore: Some(max) })
    }
}

impl Drop for PtyRoom {
    fn drop(&mut self) {
        if let Some(max) = self.restore {
            // Lowering it never closes a terminal; new ones past it fail.
            let _ = std::fs::write(PTY_MAX, max.to_string());
        }
    }
}

/// The open-file limit for `asked` items of `each` descriptors: raised to
/// fit them if possible, else the most that fit (never more than asked),
/// with a note saying so for the report. Errors when not even one fits.
pub fn fit_count(asked: usize, each: u64, what: &str) -> Result<(usize, Option<String>)> {
    let need = |n: usize| n as u64 * each + FDS_SPARE;
    match raise_nofile_to(need(asked)) {
        Ok(_) => Ok((asked, None)),
        Err(e) => {
            let fit = usize::try_from(fitting(each))
                .unwrap_or(usize::MAX)
                .min(asked);
            if fit == 0 {
                return Err(e);
            }
            raise_nofile_to(need(fit))?;
            let note = format!(
                "{fit} {what}, not the {asked} asked: the open-file hard limit allows no more \
                 ({} needed; raise it as root with CAP_SYS_RESOURCE)",
                need(asked)
            );
            eprintln!("   {note}");
            Ok((fit, Some(note)))
        }
    }
}
