//! Starting and stopping the `tetherd` under test, and reading its memory,
//! threads and CPU time from /proc.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// A `tetherd` started by the harness on an ephemeral loopback port. It is
/// stopped (TERM, then KILL) on drop, and dies with the harness
/// (PR_SET_PDEATHSIG) if the harness is killed.
pub struct Tetherd {
    child: Child,
    log: PathBuf,
    pub pid: u32,
    /// `http://127.0.0.1:PORT`
    pub base: String,
}

impl Tetherd {
    /// Starts `bin --listen 127.0.0.1:0 ARGS...` and reads its address from
    /// the first stdout line (bounded by 30 s).
    pub fn start(bin: &Path, args: &[String]) -> Result<Tetherd> {
        let log =
            std::env::temp_dir().join(format!("tether-bench-{}-tetherd.log", std::process::id()));
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("open {}", log.display()))?;
        let mut cmd = Command::new(bin);
        cmd.args([
            "--listen",
            "127.0.0.1:0",
            "--no-token",
            "--kill-grace-ms",
            "200",
        ])
        .args(args)
        .env_remove("TETHER_TOKEN")
        .env_remove("TETHER_LISTEN")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file));
        dies_with_harness(&mut cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            // Keep draining so tetherd never blocks on a full stdout pipe.
            let mut sink = String::new();
            while reader.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                sink.clear();
            }
        });
        let pid = child.id();
        let line = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "tetherd printed no address within 30 s (log: {})",
                    log.display()
                );
            }
        };
        let Some(base) = line.trim().strip_prefix("tetherd listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "unexpected first line from tetherd: {line:?} (log: {})",
                log.display()
            );
        };
        eprintln!("   tetherd pid {pid} on {base} (log {})", log.display());
        Ok(Tetherd {
            base: base.to_string(),
            log: log.clone(),
            child,
            pid,
        })
    }

    /// Its log (stderr, appended to by every server the harness starts).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn rss_kib(&self) -> u64 {
        proc_status(self.pid, "VmRSS:").unwrap_or(0)
    }

    pub fn threads(&self) -> u64 {
        proc_status(self.pid, "Threads:").unwrap_or(0)
    }

    /// User plus system CPU time, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid)
    }

    /// Open file descriptors.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    fn stop_inner(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Ok(pid) = i32::try_from(self.pid) {
            // SAFETY: signalling our own child, which has not been reaped.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the server gracefully (it kills its sessions), bounded.
    pub fn stop(mut self) {
        self.stop_inner();
    }
}

impl Drop for Tetherd {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// One sample's value from /metrics (`name` with its labels).
pub async fn metric(http: &reqwest::Client, base: &str, name: &str) -> Result<f64> {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .with_context(|| format!("no {name} in /metrics"))
}

/// A numeric field of /proc/PID/status (VmRSS in KiB, Threads, ...).
pub fn proc_status(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// What a server has spent so far, over all its threads: CPU time (from
/// `schedstat`, nanoseconds) and context switches, voluntary (a thread
/// went to sleep: each is a wake-up later) and not.
#[derive(Clone, Copy, Default)]
pub struct Spent {
    pub cpu_s: f64,
    pub switches: u64,
}

pub fn spent(pid: u32) -> Spent {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Spent::default();
    };
    let mut total = Spent::default();
    for task in tasks.flatten() {
        let one = task_spent(&task.path());
        total.cpu_s += one.cpu_s;
        total.switches += one.switches;
    }
    total
}

/// A process the harness starts (a server, a peer, a floor) gets SIGTERM
/// if the harness dies first, so that none outlives a killed run.
pub fn dies_with_harness(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: prctl is async-signal-safe and touches no parent memory.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
}

/// What one thread has spent so far, from its `/proc` directory (such as
/// `/proc/PID/task/TID` or `/proc/thread-self`); zero for what cannot be
/// read.
pub fn task_spent(task: &std::path::Path) -> Spent {
    let cpu_s = std::fs::read_to_string(task.join("schedstat"))
        .ok()
        .and_then(|line| line.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e9);
    let switches = std::fs::read_to_string(task.join("status"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    Spent { cpu_s, switches }
}

/// User plus system CPU time of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields overall.
    let Some((_, rest)) = text.rsplit_once(')') else {
        return f64::NAN;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .map(|f| f.iter().filter_map(|x| x.parse::<u64>().ok()).sum())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    ticks as f64 / hz as f64
}

/// Samples a process's RSS on a thread of its own until finished.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<(f64, u64)>>,
}

impl RssSampler {
    pub fn start(pid: u32, every: Duration) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut samples = Vec::new();
            // Bounded: at most an hour of samples.
            for _ in 0..(3_600_000 / every.as_millis().max(1)) {
                samples.push((
                    t0.elapsed().as_secs_f64(),
                    proc_status(pid, "VmRSS:").unwrap_or(0),
                ));
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(every);
            }
            samples
        });
        RssSampler { stop, handle }
    }

    /// (seconds since start, RSS KiB) samples.
    pub fn finish(self) -> Vec<(f64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// Finds (and, when run through cargo, builds) the release tetherd.
pub fn locate(explicit: Option<&Path>, build: bool) -> Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().ok_or_else(|| anyhow!("exe has no parent"))?;
    // A release tetherd, whatever profile the harness itself was built in.
    let release = if dir.file_name().is_some_and(|n| n == "release") {
        dir.to_path_buf()
    } else {
        dir.parent().unwrap_or(dir).join("release")
    };
    let candidate = release.join("tetherd");
    let cargo = std::env::var_os("CARGO");
    if build || !candidate.exists() {
        let cargo = cargo.unwrap_or_else(|| "cargo".into());
        eprintln!("building tetherd and the CLI: cargo build --release -p tether-server -p tether-cli --bin tetherd --bin tether");
        let mut command = Command::new(cargo);
        // Not with the variables cargo set for this crate (`cargo run`):
        // build scripts that track them (ring's) would rebuild each time.
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(|k| {
                k.starts_with("CARGO_PKG_")
                    || k.starts_with("CARGO_MANIFEST_")
                    || matches!(k, "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE")
            }) {
                command.env_remove(key);
            }
        }
        let status = command
            .args([
                "build",
                "--release",
                "-p",
                "tether-server",
                "-p",
                "tether-cli",
                "--bin",
                "tetherd",
                "--bin",
                "tether",
            ])
            .status()
            .context("run cargo build")?;
        if !status.success() {
            bail!("cargo build of tetherd failed");
        }
    }
    if !candidate.exists() {
        bail!("no tetherd at {}; pass --tetherd PATH", candidate.display());
    }
    Ok(candidate)
}
